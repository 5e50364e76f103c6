/* The flow shared by checkpoint, restore, lock and unlock. */
#include "txncli.h"
#include "devmap.h"
#include "halt.h"
#include "json.h"
#include "manifest.h"
#include "sandbox.h"
#include "state.h"
#include "util.h"
#include "verify.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

static volatile int interrupted;

/* The first signal rolls back what can be rolled back within the grace;
 * a second one ends the command at once. */
static void on_signal(int sig)
{
	(void)sig;
	if (interrupted) {
		static const char msg[] = "cudasnap: second signal: exiting now; 'cudasnap ps' shows where every "
					  "process stands\n";
		ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
		(void)w;
		_exit(EXIT_INCOMPLETE);
	}
	interrupted = 1;
}

static void catch_signals(void)
{
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL); /* the hook's own deadline */
}


static double gib(unsigned long long b) { return (double)b / (1024.0 * 1024 * 1024); }

static void progress(void *ctx, const cs_target *t, cs_step s, bool undo, int res, double secs)
{
	txn_ctx *x = ctx;
	const char *what = undo ? "rollback " : "";
	if (res != CS_CU_SUCCESS) {
		cli_msg("%d (%s) %s%s FAILED after %.3f s: %s", (int)t->pid, t->comm, what,
			cs_step_name(s), secs, cs_cu_name(x->d, res));
		return;
	}
	if ((s == CS_STEP_CHECKPOINT || s == CS_STEP_RESTORE) && !undo)
		cli_msg("%d (%s) %s: %.2f GiB in %.3f s", (int)t->pid, t->comm,
			cs_step_name(s), gib(t->bytes), secs);
	else
		cli_msg("%d (%s) %s%s: ok in %.3f s", (int)t->pid, t->comm, what,
			cs_step_name(s), secs);
}

/* Leftover device references after a checkpoint: warnings, or with --strict
 * a failure that rolls the transaction back. */
static int post_check(void *ctx, cs_target *targets, size_t n, cs_error *err)
{
	txn_ctx *x = ctx;
	cs_error e;
	if (cs_discover(NULL, x->d, &x->after, &e) < 0 || cs_verify(&x->after, &x->left, &x->nleft) < 0)
		return x->c->strict ? cs_error_set(err, CS_ESYS, NULL, "cannot check for leftover device "
						   "references: %s", e.message) : 0;
	for (size_t i = 0; i < x->nleft; i++)
		x->nleft_scope += cs_selection_covers(&x->after, &x->c->sel, x->left[i].proc->pid);
	for (size_t i = 0, used; i < x->nleft; i += used) {
		char line[768];
		cs_verify_line(x->left + i, x->nleft - i, &used, line, sizeof(line));
		cli_msg("%s: %s", x->c->strict ? "error" : "warning", line);
	}
	if (x->nleft_scope && x->c->strict)
		return cs_error_set(err, CS_EPROC, "gVisor (older runsc) and CRIU cannot save processes that hold "
				    "GPU device files. Stop those processes, or checkpoint without --strict if the "
				    "snapshot engine can save them.",
				    "%zu GPU device reference%s remain after the checkpoint (--strict)", x->nleft_scope,
				    x->nleft_scope == 1 ? "" : "s");
	(void)targets, (void)n;
	return 0;
}

static const char *state_word(const cs_target *t)
{
	if (t->exited)
		return "exited";
	if (t->abandoned)
		return "unknown";
	return cs_state_name(t->state) ? cs_state_name(t->state) : t->halted ? "stopped" : "unknown";
}

static const char *outcome_word(const cs_txn_result *r, size_t n)
{
	if (n == 0)
		return "nothing-to-do";
	switch (r->outcome) {
	case CS_OUTCOME_DONE: return "done";
	case CS_OUTCOME_ROLLED_BACK: return "rolled-back";
	case CS_OUTCOME_REFUSED: return "refused";
	default: return "incomplete";
	}
}

static void print_refused(const char *cmd, const cs_target *t, size_t n)
{
	size_t halted = 0;
	for (size_t i = 0; i < n; i++)
		halted += t[i].halted;
	cli_msg("%s refused; nothing was changed%s", cmd, halted > 1 ? ". Processes that cannot answer the driver now:" : "");
	for (size_t i = 0; halted > 1 && i < n; i++)
		if (t[i].halted)
			cli_msg("  %s", t[i].error.message);
}

static void print_human(txn_ctx *x, const cs_target *t, size_t n, const cs_txn_result *r)
{
	const char *cmd = x->c->cmd;
	for (size_t i = 0; i < n; i++)
		if (t[i].skipped)
			cli_msg("%d (%s) left as it was: %s", (int)t[i].pid, t[i].comm,
				state_word(&t[i]));
	if (r->outcome == CS_OUTCOME_DONE) {
		double gbps = r->wall_seconds > 0 ? (double)r->bytes / r->wall_seconds / 1e9 : 0;
		cli_msg("%s done: %zu process%s, %.2f GiB in %.3f s (%.2f GB/s)%s", cmd,
			r->acted, r->acted == 1 ? "" : "es", gib(r->bytes), r->wall_seconds, gbps,
			x->nleft ? "; device references remain (see warnings)" : "");
		return;
	}
	cli_error(&r->error);
	if (r->outcome == CS_OUTCOME_REFUSED) {
		print_refused(cmd, t, n);
		return;
	}
	cli_msg("%s FAILED; %s", cmd, r->outcome == CS_OUTCOME_ROLLED_BACK ?
		"every process is back in its state before the command:" : "rollback INCOMPLETE:");
	for (size_t i = 0; i < n; i++) {
		if (t[i].skipped)
			continue;
		bool behind = t[i].rollback_failed || t[i].abandoned;
		cli_msg("  %d (%s): %s (was %s)%s", (int)t[i].pid, t[i].comm, state_word(&t[i]),
			cs_state_name(t[i].initial_state) ? cs_state_name(t[i].initial_state) : "unknown",
			behind ? "  <- LEFT BEHIND" : "");
		if (behind && t[i].error.message[0])
			cli_msg("      %s", t[i].error.message);
		if (behind) {
			char cmdline[256];
			cs_target_recovery(&t[i], cmdline, sizeof(cmdline));
			cli_msg("      to recover: %s", cmdline);
		}
	}
}

static json_object *target_json(const cs_target *t)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "pid", json_object_new_int(t->pid));
	json_object_object_add(o, "comm", json_object_new_string(t->comm));
	cs_json_add_str_or_null(o, "initial_state", cs_state_name(t->initial_state));
	json_object_object_add(o, "final_state", json_object_new_string(state_word(t)));
	json_object_object_add(o, "skipped", json_object_new_boolean(t->skipped));
	json_object_object_add(o, "failed", json_object_new_boolean(t->failed));
	json_object_object_add(o, "rollback_failed", json_object_new_boolean(t->rollback_failed));
	json_object_object_add(o, "halted", json_object_new_boolean(t->halted));
	json_object_object_add(o, "abandoned", json_object_new_boolean(t->abandoned));
	if (t->rollback_failed || t->abandoned) {
		char cmdline[256];
		cs_target_recovery(t, cmdline, sizeof(cmdline));
		json_object_object_add(o, "recovery", json_object_new_string(cmdline));
	}
	json_object_object_add(o, "bytes", json_object_new_uint64(t->bytes));
	json_object *secs = json_object_new_object();
	for (int s = 0; s < CS_STEP_COUNT; s++)
		if (t->done[s])
			json_object_object_add(secs, cs_step_name((cs_step)s), json_object_new_double(t->seconds[s]));
	json_object_object_add(o, "seconds", secs);
	json_object_object_add(o, "error", t->error.message[0] ? cs_json_error(&t->error) : NULL);
	return o;
}

static json_object *leftovers_json(const txn_ctx *x)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < x->nleft; i++) {
		const cs_leftover *l = &x->left[i];
		json_object *o = json_object_new_object();
		json_object_object_add(o, "pid", json_object_new_int(l->proc->pid));
		json_object_object_add(o, "comm", json_object_new_string(l->proc->comm));
		json_object_object_add(o, "class", json_object_new_string(cs_class_name(l->proc->cls)));
		json_object_object_add(o, "kind", json_object_new_string(l->ref->kind == CS_REF_FD ? "fd" : "mapping"));
		json_object_object_add(o, "file", json_object_new_string(l->ref->path));
		json_object_object_add(o, "reason", json_object_new_string(l->reason));
		json_object_array_add(a, o);
	}
	return a;
}

static int exit_status(const cs_txn_result *r, int rc)
{
	if (r->outcome == CS_OUTCOME_INCOMPLETE)
		return EXIT_INCOMPLETE;
	return rc < 0 ? EXIT_FAILED : EXIT_DONE;
}

static void print_json(txn_ctx *x, const cs_target *t, size_t n, const cs_txn_result *r, int status)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "command", json_object_new_string(x->c->cmd));
	json_object_object_add(o, "outcome", json_object_new_string(outcome_word(r, n)));
	json_object_object_add(o, "exit_status", json_object_new_int(status));
	json_object_object_add(o, "wall_seconds", json_object_new_double(r->wall_seconds));
	json_object_object_add(o, "bytes", json_object_new_uint64(r->bytes));
	json_object_object_add(o, "gb_per_s", json_object_new_double(r->wall_seconds > 0 ?
		(double)r->bytes / r->wall_seconds / 1e9 : 0));
	json_object *arr = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(arr, target_json(&t[i]));
	json_object_object_add(o, "processes", arr);
	json_object_object_add(o, "leftovers", leftovers_json(x));
	json_object_object_add(o, "error", r->error.message[0] ? cs_json_error(&r->error) : NULL);
	cs_json_print(o);
}

/* An error before the transaction began: nothing was changed. */
static int early_error(txn_ctx *x, const cs_error *e)
{
	cli_error(e);
	if (x->c->json) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "command", json_object_new_string(x->c->cmd));
		json_object_object_add(o, "outcome", json_object_new_string("error"));
		json_object_object_add(o, "exit_status", json_object_new_int(EXIT_USAGE));
		json_object_object_add(o, "processes", json_object_new_array());
		json_object_object_add(o, "error", cs_json_error(e));
		cs_json_print(o);
	}
	return EXIT_USAGE; /* nothing was changed */
}

/* Which GPUs each target sees, by UUID, for the manifest (a restore onto
 * other GPUs must map every one of them). */
static void note_gpus(cs_target *t, size_t n)
{
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	for (size_t i = 0; ngpus && i < n; i++) {
		const cs_nvml_gpu *seen[64];
		size_t k = cs_visible_gpus(t[i].visible_devices, gpus, ngpus, seen, CS_ARRAY_SIZE(seen));
		size_t used = 0;
		for (size_t j = 0; j < k && used < sizeof(t[i].gpus); j++)
			used += (size_t)snprintf(t[i].gpus + used, sizeof(t[i].gpus) - used, "%s%s", j ? "," : "",
						 seen[j]->uuid);
	}
}

/* Each target's GPU memory, for the checkpoint's deadline and progress.
 * NVML names processes by their PIDs in the initial PID namespace, which
 * are this namespace's only when cudasnap runs there. */
static void note_gpu_bytes(const txn_ctx *x, cs_target *t, size_t n)
{
	if (x->sandbox.pid_ns != CS_PIDNS_HOST)
		return;
	_cleanup_free_ cs_nvml_proc *procs = NULL;
	size_t count = 0;
	cs_nvml_proc_list(&procs, &count);
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < count; k++)
			if (procs[k].pid == t[i].pid)
				t[i].gpu_bytes = procs[k].bytes;
}

static void save_manifest(txn_ctx *x, cs_target *t, size_t n, const cs_txn_result *r)
{
	note_gpus(t, n);
	_cleanup_free_ char *s = cs_manifest_render(t, n, x->d, r->wall_seconds);
	cs_error e;
	if (!s || cs_state_write(x->state_fd, CS_MANIFEST_NAME, s, strlen(s), &e) < 0)
		cli_msg("warning: the manifest was not written%s%s; restore will discover the "
			"checkpointed processes instead", s ? ": " : "", s ? e.message : "");
}

/* The manifest keeps the processes this restore did not bring back (left
 * out by --pid, say), so that a later restore still has their order. */
static void forget_restored(txn_ctx *x, const cs_target *t, size_t n)
{
	_cleanup_free_ char *buf = NULL;
	ssize_t len = cs_state_read(x->state_fd, CS_MANIFEST_NAME, CS_MANIFEST_MAX, &buf, NULL);
	if (len == -ENOENT)
		return;
	size_t left = 0;
	/* One that cannot be read (a symlink, corrupt) was not used: remove it (the link, not its target). */
	_cleanup_free_ char *rest = len < 0 ? NULL : cs_manifest_prune(buf, (size_t)len, t, n, &left);
	cs_error e;
	if (!rest || left == 0)
		unlinkat(x->state_fd, CS_MANIFEST_NAME, 0);
	else if (cs_state_write(x->state_fd, CS_MANIFEST_NAME, rest, strlen(rest), &e) < 0)
		cli_msg("warning: %s", e.message);
}

static int run_txn(txn_ctx *x, cs_target *t, size_t n)
{
	txn_cli *c = x->c;
	cs_txn_opts o = { .op = c->op, .timeout_ms = c->timeout_ms, .jobs = c->jobs, .sequential = c->sequential,
			  .interrupted = &interrupted, .progress = progress, .progress_ctx = x,
			  .gvisor = x->sandbox.gvisor, .watch = txn_watch, .watch_ctx = &x->watch, .watch_s = 0.5 };
	x->watch.cmd = c->cmd;
	if (c->op == CS_OP_CHECKPOINT) {
		o.post_check = post_check;
		o.post_ctx = x;
	}
	_cleanup_free_ cs_gpu_pair *pairs = NULL;
	cs_error err = { 0 };
	if (c->op == CS_OP_CHECKPOINT)
		note_gpu_bytes(x, t, n);
	if (c->op == CS_OP_RESTORE && txn_prepare_restore(x, t, n, &o, &pairs, &err) < 0)
		return early_error(x, &err);
	cs_txn_result r;
	int rc = cs_txn_run(x->d, &o, t, n, &r);
	txn_watch_end(&x->watch);
	int status = exit_status(&r, rc);
	if (rc == 0 && c->op == CS_OP_CHECKPOINT && r.acted)
		save_manifest(x, t, n, &r);
	if (rc == 0 && c->op == CS_OP_RESTORE && r.acted)
		forget_restored(x, t, n);
	print_human(x, t, n, &r);
	if (c->json)
		print_json(x, t, n, &r, status);
	return status;
}

/* For restore and unlock, only processes in the starting state belong to
 * the set; checkpoint and lock report the others as left as they were. */
static size_t keep_relevant(const txn_cli *c, cs_target *t, size_t n)
{
	if (c->op != CS_OP_RESTORE && c->op != CS_OP_UNLOCK)
		return n;
	int want = c->op == CS_OP_RESTORE ? CS_STATE_CHECKPOINTED : CS_STATE_LOCKED;
	size_t k = 0;
	/* A process whose state is unknown (stopped, so not asked) stays: the
	 * transaction refuses it by name rather than skipping it in silence. */
	for (size_t i = 0; i < n; i++)
		if (t[i].state == want || t[i].state == CS_STATE_UNKNOWN)
			t[k++] = t[i];
	return k;
}

static int nothing_to_do(txn_ctx *x)
{
	cli_msg("no CUDA process selected%s; nothing to %s",
		x->c->op == CS_OP_RESTORE ? " is checkpointed" : x->c->op == CS_OP_UNLOCK ? " is locked" : "",
		x->c->cmd);
	if (x->c->json) {
		cs_txn_result r = { 0 };
		print_json(x, NULL, 0, &r, EXIT_DONE);
	}
	return EXIT_DONE;
}

/* The driver refuses targets the caller may not trace, with the same code
 * as for a missing process: say what is needed before it is asked. */
static int check_privileges(const txn_ctx *x, const cs_ptable *t, const cs_target *targets, size_t n,
			    cs_error *err)
{
	const cs_sandbox *sb = &x->sandbox;
	if (cs_sandbox_may_trace_all(sb))
		return 0;
	if (t->nunreadable)
		return cs_error_set(err, CS_EENV, "Run cudasnap as root, or give it CAP_SYS_PTRACE.",
				    "%s needs root or CAP_SYS_PTRACE: %zu process%s of this namespace cannot be read "
				    "as uid %u (e.g. process %d), so CUDA processes may be missed", x->c->cmd,
				    t->nunreadable, t->nunreadable == 1 ? "" : "es", (unsigned)sb->euid,
				    (int)t->unreadable[0].pid);
	for (size_t i = 0; i < n; i++) {
		const cs_proc *p = cs_ptable_find(t, targets[i].pid);
		if (p && p->uid != sb->euid)
			return cs_error_set(err, CS_EENV, "Run cudasnap as root, or give it CAP_SYS_PTRACE "
					    "(e.g. sudo, or setpriv/capsh with cap_sys_ptrace); without it only the "
					    "caller's own processes can be checkpointed.",
					    "%s of process %d (%s, uid %u) needs root or CAP_SYS_PTRACE; cudasnap runs "
					    "as uid %u without it", x->c->cmd, (int)p->pid, p->comm, (unsigned)p->uid,
					    (unsigned)sb->euid);
	}
	return 0;
}

static int with_driver(txn_ctx *x)
{
	cs_error err = { 0 };
	x->state_fd = cs_state_open(&err);
	if (x->state_fd < 0 && x->sandbox.euid != 0)
		snprintf(err.hint, sizeof(err.hint), "%s needs root (or CAP_SYS_PTRACE and a state directory of "
			 "your own: set CUDASNAP_STATE_DIR).", x->c->cmd);
	if (x->state_fd < 0)
		return early_error(x, &err);
	_cleanup_close_ int lock = cs_state_lock(x->state_fd, x->c->cmd, &err);
	if (lock < 0)
		return early_error(x, &err);
	cs_ptable t;
	if (cs_discover(NULL, x->d, &t, &err) < 0)
		return early_error(x, &err);
	cs_target *targets = NULL;
	size_t n = 0;
	int status;
	if (cs_select(&t, &x->c->sel, &targets, &n, &err) < 0 || check_privileges(x, &t, targets, n, &err) < 0)
		status = early_error(x, &err);
	else if ((n = keep_relevant(x->c, targets, n)) == 0)
		status = nothing_to_do(x);
	else
		status = run_txn(x, targets, n);
	free(targets);
	cs_ptable_free(&t);
	return status;
}

int txn_cli_execute(txn_cli *c)
{
	txn_ctx x = { .c = c, .state_fd = -1, .watch = { .tty = -1 } };
	cs_error err = { 0 };
	catch_signals();
	cs_sandbox_detect(NULL, &x.sandbox);
	if (cs_driver_open(&x.d, &err) < 0) {
		int s = early_error(&x, &err);
		cs_driver_free(x.d);
		return s;
	}
	cs_limits lim = *cs_driver_limits(x.d);
	lim.interrupted = &interrupted;
	lim.move_s = c->step_timeout_s;
	cs_driver_set_limits(x.d, &lim);
	int status = with_driver(&x);
	free(x.left);
	cs_ptable_free(&x.after);
	if (x.state_fd >= 0)
		close(x.state_fd);
	cs_driver_free(x.d);
	return status;
}
