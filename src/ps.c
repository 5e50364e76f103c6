/* cudasnap ps: every GPU-related process, as a tree, with its class and state. */
#include "cli.h"
#include "park.h"
#include "claim.h"
#include "state.h"
#include "json.h"
#include "jsonout.h"
#include "util.h"
#include "verify.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void ps_usage(FILE *f)
{
	fprintf(f,
		"Usage: %s ps [--json]\n"
		"List every process of this PID namespace that holds a GPU device file\n"
		"(/dev/nvidia*, as an fd or a mapping) or has the driver library loaded, and\n"
		"ask the driver what it knows of each:\n"
		"  cuda           the driver knows it; STATE is running, locked, checkpointed\n"
		"                 or failed, RESTORE-TID the driver's helper thread in it\n"
		"  device-holder  holds device files but the driver cannot checkpoint it (a\n"
		"                 child forked after CUDA init, a program that opened them itself)\n"
		"  unknown        the driver gave another answer (shown), or no driver is loaded\n"
		"                 and the process holds no device file\n"
		"Related processes are shown as a tree.\n\n"
		"Options:\n"
		"  --json      print one JSON object on stdout\n"
		"  -h, --help  show this help\n"
		"\nExit status: 0; 2 on a usage error, or when processes could not be read (run\n"
		"as root or with CAP_SYS_PTRACE: the list may miss CUDA processes).\n",
		cs_prog);
}

typedef struct ps_row {
	const cs_proc *p;
	pid_t anc;
	int depth;
} ps_row;

/* Orders rows depth-first from the roots, children by pid. */
static size_t tree_order(ps_row *rows, size_t n, const ps_row *all, pid_t parent, int depth, size_t at,
			 unsigned char *done)
{
	for (size_t i = 0; i < n; i++) {
		if (done[i] || all[i].anc != parent)
			continue;
		done[i] = 1;
		rows[at] = all[i];
		rows[at++].depth = depth;
		at = tree_order(rows, n, all, all[i].p->pid, depth + 1, at, done);
	}
	return at;
}

static void print_summary(const cs_ptable *t, const cs_driver *d)
{
	size_t cls[4] = { 0 }, st[4] = { 0 };
	for (size_t i = 0; i < t->n; i++) {
		cls[t->procs[i].cls]++;
		if (t->procs[i].state >= 0 && t->procs[i].state <= 3)
			st[t->procs[i].state]++;
	}
	printf("%zu GPU process%s: %zu cuda (%zu running, %zu locked, %zu checkpointed, %zu failed), "
	       "%zu device-holder, %zu unknown; %zu processes scanned",
	       t->n, t->n == 1 ? "" : "es", cls[CS_CLASS_CUDA], st[0], st[1], st[2], st[3], cls[CS_CLASS_DEVICE_HOLDER],
	       cls[CS_CLASS_UNKNOWN], t->scanned);
	/* More privilege helps only a caller that lacks it; one that may trace
	 * every process gets the reason doctor gives, on a line of its own. */
	bool tracer = t->nunreadable && cli_may_trace_all();
	if (t->nunreadable)
		printf(", %zu unreadable%s", t->nunreadable,
		       tracer ? "" : " (run as root or with CAP_SYS_PTRACE to see them)");
	printf("\n");
	char line[1024];
	cs_unreadable_line(t, line, sizeof(line));
	if (line[0])
		printf("%s\n", line);
	if (tracer)
		printf("  hint: %s\n", CS_FIX_UNREADABLE_TRACER);
	int v = cs_driver_version(d);
	if (cs_driver_loaded(d))
		printf("driver: CUDA %d.%d (%d) from %s\n", v / 1000, v % 1000 / 10, v, cs_driver_path(d));
	else
		printf("driver: not loaded, so no checkpoint states are shown: %s\n  hint: %s\n",
		       cs_driver_error(d)->message, cs_driver_error(d)->hint);
}

static void print_table(const cs_ptable *t, const cs_driver *d)
{
	if (t->n == 0) {
		printf("No GPU-related process in this PID namespace.\n");
		return;
	}
	_cleanup_free_ ps_row *all = calloc(t->n + 1, sizeof(*all));
	_cleanup_free_ ps_row *rows = calloc(t->n + 1, sizeof(*rows));
	_cleanup_free_ unsigned char *done = calloc(t->n + 1, 1);
	if (!all || !rows || !done) {
		cli_msg("out of memory");
		return;
	}
	for (size_t i = 0; i < t->n; i++)
		all[i] = (ps_row){ .p = &t->procs[i], .anc = cs_ptable_listed_ancestor(t, t->procs[i].pid) };
	size_t n = tree_order(rows, t->n, all, 0, 0, 0, done);
	printf("%-8s %-8s %-24s %-14s %-13s %-11s %4s %5s\n", "PID", "PPID", "COMMAND", "CLASS", "STATE", "RESTORE-TID",
	       "FDS", "MAPS");
	for (size_t i = 0; i < n; i++) {
		const cs_proc *p = rows[i].p;
		char name[96], tid[16], state[40];
		int depth = rows[i].depth > 8 ? 8 : rows[i].depth;
		snprintf(name, sizeof(name), "%*s%s%s", depth * 2, "", depth ? "\\_ " : "", p->comm);
		snprintf(tid, sizeof(tid), p->restore_tid > 0 ? "%d" : "-", (int)p->restore_tid);
		if (p->busy)
			snprintf(state, sizeof(state), "busy");
		else if (cs_halt_name(p->halt))
			snprintf(state, sizeof(state), "%s", cs_halt_name(p->halt));
		else if (p->cu_result == CS_CU_TIMED_OUT || p->cu_result == CS_CU_INTERRUPTED)
			snprintf(state, sizeof(state), "no-answer");
		else if (cs_state_name(p->state))
			snprintf(state, sizeof(state), "%s", cs_state_name(p->state));
		else if (p->cu_result > 0 && p->cls == CS_CLASS_UNKNOWN)
			snprintf(state, sizeof(state), "%s", cs_cu_name(d, p->cu_result));
		else
			snprintf(state, sizeof(state), "-");
		printf("%-8d %-8d %-24s %-14s %-13s %-11s %4d %5d\n", (int)p->pid, (int)p->ppid, name,
		       cs_class_name(p->cls), state, tid, p->device_fds, p->device_maps);
	}
}

/* What a process's parking interposer says of it (cudasnap run), when it
 * runs one and may be asked (never a stopped process or another
 * operation's). */
static bool park_of(const cs_proc *p, cs_park_info *pi)
{
	memset(pi, 0, sizeof(*pi));
	if (p->cls != CS_CLASS_CUDA || p->busy || p->halt || !p->maps_park)
		return false;
	cs_park_status(p->pid, 2000, pi);
	return pi->seen;
}

/* A process parked while the driver says it runs, whose park no connection
 * holds: it was committed (by a checkpoint whose driver steps never came,
 * or whose cudasnap died), and its GPU work waits at the gate until an
 * unpark. Nothing undoes such a park by itself: it may be what a
 * checkpoint still in the engine's hands needs. */
static bool park_left(const cs_proc *p, const cs_park_info *pi)
{
	return pi->seen && pi->parked && pi->held == 0 && p->state == CS_STATE_RUNNING;
}

/* named: a left-behind entry names its files and says it when left parked. */
static void print_park(const cs_proc *p, bool named)
{
	cs_park_info pi;
	char what[64];
	if (!park_of(p, &pi)) {
		if (pi.unreachable)
			printf("UNREACHABLE: %d (%s) %s; a checkpoint refuses it. Fix: %s\n", (int)p->pid, p->comm,
			       cs_park_unreachable_why + strlen("it "), cs_park_unreachable_fix);
		return;
	}
	double mib = (double)pi.bytes / (1 << 20);
	char where[64], own[256] = "";
	cs_park_own_vmm_say(&pi, own, sizeof(own));
	if (pi.files)
		snprintf(where, sizeof(where), "%u files (--park-to)", pi.files);
	else
		snprintf(where, sizeof(where), "host memory");
	if (park_left(p, &pi) && named)
		return;
	if (park_left(p, &pi))
		printf("LEFT BEHIND: %d (%s) is running, parked: %.1f MiB of its device memory is in %s and "
		       "its GPU work waits, and nothing holds its park (it was committed); recover with 'cudasnap "
		       "restore --pid %d'%s\n",
		       (int)p->pid, p->comm, mib, where, (int)p->pid,
		       pi.files ? " (with --park-from DIR/NAME where no record here names its files: for a CRIU "
				  "restore's, 'cudasnap history' gives them)" :
				  "");
	else if (pi.parked)
		printf("parked: %d (%s) holds %.1f MiB of its device memory in %s; cudasnap restore "
		       "unparks it\n",
		       (int)p->pid, p->comm, mib, where);
	else if (pi.parkable && pi.bytes == 0 && pi.imports == 0)
		printf("parking: %d (%s) runs the interposer, with no memory it can park (its checkpoint is "
		       "the driver's)%s%s%s\n",
		       (int)p->pid, p->comm,
		       pi.attached ? "; processes that map its memory let go of it first: checkpoint them with it" : "",
		       own[0] ? "; " : "", own);
	else if (pi.parkable)
		printf("parking: %d (%s) runs the interposer: a checkpoint parks its %.1f MiB of device memory "
		       "first%s%s%s\n",
		       (int)p->pid, p->comm, mib, pi.imports ? " (after the processes whose memory it maps)" : "",
		       own[0] ? "; " : "", own);
	else if (cs_park_import_what(&pi, true, what, sizeof(what)))
		printf("parking: %d (%s) runs the interposer, but a checkpoint refuses it (CUDA IPC, %s: the driver "
		       "could never restore it): %s\n",
		       (int)p->pid, p->comm, what, pi.why[0] ? pi.why : "it cannot be parked");
	else
		printf("parking: %d (%s) runs the interposer but its checkpoint is the driver's: %s\n", (int)p->pid,
		       p->comm, pi.why[0] ? pi.why : "it cannot be parked");
}

static json_object *park_json(const cs_proc *p)
{
	cs_park_info pi;
	if (!park_of(p, &pi))
		return NULL;
	json_object *o = json_object_new_object();
	json_object_object_add(o, "parkable", json_object_new_boolean(pi.parkable));
	json_object_object_add(o, "parked", json_object_new_boolean(pi.parked));
	json_object_object_add(o, "files", json_object_new_int((int)pi.files));
	json_object_object_add(o, "bytes", json_object_new_uint64(pi.bytes));
	json_object_object_add(o, "ipc_imports", json_object_new_int((int)pi.imports));
	json_object_object_add(o, "ipc_attached", json_object_new_int((int)pi.attached));
	json_object_object_add(o, "own_vmm_bytes", json_object_new_uint64(pi.own_vmm_bytes));
	json_object_object_add(o, "own_vmm_maps", json_object_new_int((int)pi.own_vmm_maps));
	cs_json_add_str_or_null(o, "why_not", pi.parkable ? NULL : pi.why);
	return o;
}

/* A CUDA IPC file is an event's or memory's; the interposer tells which. */
static void print_ipc(const cs_proc *p)
{
	cs_park_info pi;
	if (park_of(p, &pi) && cs_park_shm_is_events(&pi))
		printf("CUDA IPC: %d (%s) shares interprocess events (%s), which the driver restores; its "
		       "interposer carries the memory it maps of other processes\n",
		       (int)p->pid, p->comm, p->ipc_import);
	else
		printf("CUDA IPC: %d (%s) maps device memory another process shares (%s): the driver "
		       "cannot restore it after a checkpoint\n",
		       (int)p->pid, p->comm, p->ipc_import);
}

/* Whether an entry of b names pid's files: the park line gives way to it. */
static bool behind_names(const cs_left_behind *b, size_t nb, pid_t pid)
{
	for (size_t i = 0; i < nb; i++)
		if (b[i].pid == pid && b[i].files[0])
			return true;
	return false;
}

/* What the table alone does not say: processes other operations hold, and
 * those that holders which died left behind. */
static void print_notes(const cs_ptable *t, const cs_left_behind *b, size_t nb)
{
	for (size_t i = 0; i < t->n; i++)
		print_park(&t->procs[i], behind_names(b, nb, t->procs[i].pid));
	for (size_t i = 0; i < t->n; i++) {
		const cs_proc *p = &t->procs[i];
		if (p->busy)
			printf("busy: %d (%s) is held by another operation (%s): not asked\n", (int)p->pid, p->comm,
			       p->busy_holder);
		else if (p->nvml_only)
			printf("monitor: %d (%s) uses NVML only: checkpoint and lock leave it alone unless it is "
			       "named with --pid\n",
			       (int)p->pid, p->comm);
		else if (p->ipc_import[0])
			print_ipc(p);
	}
	for (size_t i = 0; i < nb; i++) {
		char line[1024], fix[CS_LEFT_FIX_MAX];
		cs_park_left_say(&b[i], t, line, sizeof(line), fix, sizeof(fix));
		printf("LEFT BEHIND: %s%s%s%s%s\n", line, fix[0] ? "; " : "",
		       !fix[0]                             ? "" :
			       strncmp(fix, "rm ", 3) == 0 ? "remove them with '" :
							     "recover with '",
		       fix, fix[0] ? "'" : "");
	}
}

static json_object *left_entry(pid_t pid, const char *comm, const char *holder, const char *recovery, const char *files,
			       const char *what)
{
	json_object *o = json_object_new_object();
	cs_json_add_int_or_null(o, "pid", pid, pid > 0);
	json_object_object_add(o, "comm", json_object_new_string(comm));
	json_object_object_add(o, "holder", json_object_new_string(holder));
	json_object_object_add(o, "recovery", recovery[0] ? json_object_new_string(recovery) : NULL);
	json_object_object_add(o, "files", files[0] ? json_object_new_string(files) : NULL);
	json_object_object_add(o, "what", json_object_new_string(what));
	return o;
}

static json_object *left_behind_json(const cs_ptable *t, const cs_left_behind *b, size_t nb)
{
	json_object *a = json_object_new_array();
	char line[1024], fix[CS_LEFT_FIX_MAX];
	for (size_t i = 0; i < t->n; i++) {
		cs_park_info pi;
		const cs_proc *p = &t->procs[i];
		if (!behind_names(b, nb, p->pid) && park_of(p, &pi) && park_left(p, &pi)) {
			snprintf(fix, sizeof(fix), "cudasnap restore --pid %d", (int)p->pid);
			snprintf(line, sizeof(line), "%d (%s) is running, parked, and nothing holds its park",
				 (int)p->pid, p->comm);
			json_object_array_add(a,
					      left_entry(p->pid, p->comm, "none (its park was committed)", fix, "",
							 line));
		}
	}
	for (size_t i = 0; i < nb; i++) {
		cs_park_left_say(&b[i], t, line, sizeof(line), fix, sizeof(fix));
		json_object_array_add(a, left_entry(b[i].pid, b[i].comm, b[i].holder, fix, b[i].files, line));
	}
	return a;
}

static int print_json(const cs_ptable *t, const cs_driver *d, const cs_left_behind *b, size_t nb)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "driver", cs_json_driver(d));
	json_object *arr = json_object_new_array();
	for (size_t i = 0; i < t->n; i++) {
		json_object *p = cs_json_proc(&t->procs[i], d);
		pid_t anc = cs_ptable_listed_ancestor(t, t->procs[i].pid);
		cs_json_add_int_or_null(p, "parent", anc, anc > 0);
		json_object_object_add(p, "park", park_json(&t->procs[i]));
		json_object_array_add(arr, p);
	}
	json_object_object_add(o, "processes", arr);
	json_object_object_add(o, "unreadable", cs_json_unreadable(t));
	json_object_object_add(o, "left_behind", left_behind_json(t, b, nb));
	json_object_object_add(o, "scanned", json_object_new_int64((int64_t)t->scanned));
	return cs_json_print(o);
}

int cmd_ps(int argc, char **argv)
{
	bool json;
	int rc0 = cli_parse_json_only(argc, argv, "ps", ps_usage, &json);
	if (rc0 != CLI_GO_ON)
		return rc0;
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	cs_error err = { 0 };
	cs_driver_open(&d, &err); /* no driver is not an error for ps: it says so */
	_cleanup_(cs_ptable_freep) cs_ptable t = { 0 };
	/* Another operation's processes are not asked: the driver would make
	 * the question wait behind its calls. */
	cs_scan_opts opts = { .skip_busy = true };
	if (cs_discover(&opts, d, &t, &err) < 0) {
		cli_error(&err);
		return cli_exit_for(&err);
	}
	_cleanup_close_ int statefd = open(cs_state_dir(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_free_ cs_left_behind *behind = NULL;
	size_t nbehind = 0;
	cs_claims_left_behind(statefd, &t, true, &behind, &nbehind);
	int rc = EXIT_DONE;
	if (json) {
		if (print_json(&t, d, behind, nbehind) < 0)
			rc = EXIT_FAILED;
	} else {
		print_table(&t, d);
		print_summary(&t, d);
		print_notes(&t, behind, nbehind);
	}
	if (rc == EXIT_DONE && cli_blind(&t))
		rc = EXIT_USAGE;
	return rc;
}
