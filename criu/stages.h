/* What the plugin does at each of CRIU's hooks, by stage: the dump
 * (dump.c) and the restore (restore.c). plugin.c dispatches to them. */
#ifndef CS_CRIU_STAGES_H
#define CS_CRIU_STAGES_H

int dump_init(void);
int dump_pause(int pid);
int dump_checkpoint(int pid);
void dump_exit(int ret);

int restore_init(void);
int restore_resume(int pid);
void restore_exit(int ret);

#endif
