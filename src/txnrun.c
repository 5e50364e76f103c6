/* The flow shared by checkpoint, restore, lock and unlock: signals, the
 * driver, one library session, the report. */
#include "sandbox.h"
#include "txncli.h"
#include "util.h"

#include <signal.h>
#include <stdio.h>
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

static void warn_line(void *ctx, const char *line)
{
	(void)ctx;
	cli_msg("%s", line);
}

static int nothing_to_do(const txn_ctx *x)
{
	cli_msg("no CUDA process selected%s; nothing to %s",
		x->c->op == CS_OP_RESTORE        ? " is checkpointed" :
			x->c->op == CS_OP_UNLOCK ? " is locked" :
						   "",
		x->c->cmd);
	if (x->c->json) {
		cs_txn_result r = { 0 };
		txn_print_json(x, NULL, 0, &r, EXIT_DONE);
	}
	return EXIT_DONE;
}

static int run_session(txn_ctx *x, const cs_session_opts *o)
{
	cs_error err = { 0 };
	if (cs_session_open(&x->s, x->d, o, &err) < 0 || cs_session_select(x->s, &err) < 0)
		return txn_early_error(x, &err);
	if (o->dry_run)
		return txn_dry_run(x);
	size_t n;
	cs_target *t = cs_session_targets(x->s, &n);
	if (n == 0)
		return nothing_to_do(x);
	cs_txn_result r;
	int rc = cs_session_run(x->s, &r, &err);
	txn_watch_end(&x->watch);
	if (!r.ran)
		return txn_early_error(x, &err);
	int status = cli_exit_txn(&r, rc);
	txn_print_human(x, t, n, &r);
	if (x->c->json)
		txn_print_json(x, t, n, &r, status);
	return status;
}

/* In the kernel's initial PID namespace every CUDA process of the
 * namespace is every one of the node, each container's included: a bare
 * checkpoint or lock would stop every tenant. There they ask for a
 * selection, or --all, before anything is done (no claim, no driver, no
 * state directory). The hook sets --all: it runs inside its sandbox. */
static int refuse_whole_node(const txn_ctx *x)
{
	const txn_cli *c = x->c;
	if ((c->op != CS_OP_CHECKPOINT && c->op != CS_OP_LOCK) || c->all || c->sel.npids || c->sel.ntrees ||
	    c->sel.cgroup)
		return CLI_GO_ON;
	cs_sandbox sb;
	cs_sandbox_detect(NULL, &sb);
	if (sb.pid_ns != CS_PIDNS_HOST)
		return CLI_GO_ON;
	cs_error e = { .status = CS_EUSAGE };
	snprintf(e.message, sizeof(e.message),
		 "%s without --pid, --tree or --cgroup would take every CUDA process of this node, every "
		 "container's included: this is the host's PID namespace (%s); nothing was done",
		 c->cmd, sb.pid_ns_signal);
	snprintf(e.hint, sizeof(e.hint),
		 "Select the processes with --pid, --tree or --cgroup ('cudasnap ps' lists them), or pass --all to %s "
		 "every CUDA process of the node.",
		 c->cmd);
	return txn_early_error(x, &e);
}

/* The session (and with it the state lock) goes first, then the driver. */
static void txn_ctx_clear(txn_ctx *x)
{
	cs_session_free(x->s);
	cs_driver_free(x->d);
}
CS_DEFINE_CLEANUP_STRUCT(txn_ctx, txn_ctx_clear)

int txn_cli_execute(txn_cli *c)
{
	_cleanup_(txn_ctx_clearp) txn_ctx x = { .c = c, .watch = { .tty = -1, .cmd = c->cmd } };
	cs_error err = { 0 };
	int r = refuse_whole_node(&x);
	if (r != CLI_GO_ON)
		return r;
	cs_session_opts o = {
		.op = c->op,
		.command = c->cmd,
		.sel = c->sel,
		.timeout_ms = c->timeout_ms,
		.jobs = c->jobs,
		.sequential = c->sequential,
		.strict = c->strict,
		.ignore_manifest = c->ignore_manifest,
		.reuse_warns = c->reuse_warns,
		.no_init = c->no_init,
		.device_map = c->device_map,
		.dry_run = c->dry_run,
		.ignore_memory = c->ignore_memory,
		.allow_unrestorable = c->allow_unrestorable,
		.wait_memory_s = c->wait_memory_s,
		.ignore_gpu_memory = c->ignore_gpu_memory,
		.no_park = c->no_park,
		.park_to = c->park_to,
		.park_keep = c->park_keep,
		.park_from = c->park_from,
		.front = c->front ? c->front : "cli",
		.interrupted = &interrupted,
		.progress = txn_progress,
		.progress_ctx = &x,
		.watch = txn_watch,
		.watch_ctx = &x.watch,
		.warn = warn_line,
	};
	/* an argument's error first, not hidden behind the driver's */
	if (cs_session_check_opts(&o, &err) < 0)
		return txn_early_error(&x, &err);
	catch_signals();
	if (cs_driver_open(&x.d, &err) < 0)
		return txn_early_error(&x, &err);
	cs_limits lim = *cs_driver_limits(x.d);
	lim.interrupted = &interrupted;
	lim.move_s = c->step_timeout_s;
	cs_driver_set_limits(x.d, &lim);
	return run_session(&x, &o);
}
