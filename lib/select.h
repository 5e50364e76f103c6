/* Which processes a command acts on: --pid, --tree, --cgroup, or all. */
#ifndef CS_SELECT_H
#define CS_SELECT_H

#include "cudasnap.h"


/* Validates user PIDs against this PID namespace before any driver call, and
 * returns the selected CUDA processes as targets (order = by pid). */
int cs_select(const cs_ptable *t, const cs_selection *sel, cs_target **out, size_t *n, cs_error *err);
bool cs_selection_empty(const cs_selection *sel);
/* Whether the selection names pid: one of its --pid processes, in one of
 * its trees or in its cgroup (every process when it is empty). Only those
 * are asked about. */
bool cs_selection_names(const cs_ptable *t, const cs_selection *sel, pid_t pid);
/* Whether pid falls inside the selection's scope (for leftover checks):
 * also the descendants of its --pid processes. */
bool cs_selection_covers(const cs_ptable *t, const cs_selection *sel, pid_t pid);
/* Whether the text of a /proc/PID/cgroup file (len bytes, not necessarily
 * NUL-terminated) puts the process in cgroup want or below it. want is an
 * absolute path as that file shows it, or under /sys/fs/cgroup (where a v1
 * hierarchy's controller directory, e.g. /sys/fs/cgroup/cpu,cpuacct, leads). */
bool cs_cgroup_matches(const char *text, size_t len, const char *want);
/* CUDA_VISIBLE_DEVICES of pid into buf ("" when unset or unreadable). */
void cs_visible_devices(pid_t pid, char *buf, size_t n);

#endif
