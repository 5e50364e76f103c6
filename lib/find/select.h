/* Which processes a command acts on: --pid, --tree, --cgroup, or all. */
#ifndef CS_SELECT_H
#define CS_SELECT_H

#include "cudasnap.h"


/* Validates user PIDs against this PID namespace before any driver call, and
 * returns the selected CUDA processes as targets (order = by pid). NVML-only
 * monitors are taken in only by --pid, or with monitors (a restore or an
 * unlock: one that is checkpointed or locked must come back). */
int cs_select(const cs_ptable *t, const cs_selection *sel, bool monitors, cs_target **out, size_t *n, cs_error *err);
bool cs_selection_empty(const cs_selection *sel);
/* Whether the selection names pid: one of its --pid processes, in one of
 * its trees or in its cgroup (every process when it is empty). Only those
 * are asked about. */
bool cs_selection_names(const cs_ptable *t, const cs_selection *sel, pid_t pid);
/* Whether the selection may act on p, from /proc alone (before the driver
 * is asked): one that --pid names; else, when the selection names it and
 * it is related to the driver, unless it is a tool (cudasnap itself) or an
 * NVML-only monitor, which only --pid takes in (and monitors, as cs_select). */
bool cs_selection_takes(const cs_ptable *t, const cs_selection *sel, const cs_proc *p, bool monitors);
/* What can be checked of the selection before anything is read: --cgroup
 * names an existing cgroup, without '..'. Fills err (CS_EUSAGE). */
int cs_selection_check(const cs_selection *sel, cs_error *err);
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
