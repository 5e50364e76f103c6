/* cudasnap hook: gVisor's save/restore exec hook. runsc runs it inside the
 * container around a checkpoint, with the step in an environment variable;
 * it checkpoints or restores every CUDA process of the namespace through the
 * same transaction as 'cudasnap checkpoint' and 'cudasnap restore'. */
#include "env.h"
#include "txncli.h"
#include "util.h"

#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MODE_ENV "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"
#define STRICT_ENV "CUDASNAP_HOOK_STRICT"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s hook [OPTIONS]\n"
		"gVisor's save/restore exec hook. runsc runs it inside the container with\n" MODE_ENV " set to:\n"
		"  save     before the sandbox is saved: lock and checkpoint every CUDA process\n"
		"           of the container, as one transaction (rolled back on failure)\n"
		"  restore  after the sandbox is restored: restore and unlock every\n"
		"           checkpointed process\n"
		"  resume   after a checkpoint taken with --leave-running, or an unpause: the\n"
		"           same as restore (nothing to do when the processes are running)\n"
		"\n"
		"Set it up with\n"
		"  runsc checkpoint --save-restore-exec-argv=\"/path/to/cudasnap hook\" ...\n"
		"  (optionally --save-restore-exec-timeout=DURATION; runsc's default is 10 min)\n"
		"or, through containerd and Kubernetes, with the OCI annotations\n"
		"  dev.gvisor.internal.checkpoint.save-restore-exec-argv\n"
		"  dev.gvisor.internal.checkpoint.save-restore-exec-timeout\n"
		"runsc splits the argv on single spaces (no quoting) and stores it in the\n"
		"checkpoint, so 'runsc restore' runs the hook again without a flag. A failure\n"
		"(non-zero exit) aborts the checkpoint, or kills the sandbox on restore.\n"
		"Messages go to stderr, one line per event, each with a UTC timestamp.\n"
		"\n"
		"Options:\n"
		"      --strict      save fails, and rolls back, when GPU device files or\n"
		"                    mappings remain after the checkpoint (older runsc cannot\n"
		"                    save them)\n"
		"      --no-strict   only warn about them (default: newer runsc can save idle\n"
		"                    NVML clients, so remaining references need not be fatal)\n"
		"  -t, --timeout MS  driver lock timeout in milliseconds (default 10000)\n"
		"      --deadline SEC  end the hook after SEC seconds (default 540), rolling\n"
		"                    back what it can and saying where every process stands,\n"
		"                    before runsc's exec timeout (default 10 min) kills it\n"
		"                    without a word; keep it below that timeout\n"
		"      --json        print the result as one JSON object on stdout\n"
		"      --dry-run     print what the mode would do to each process and why it\n"
		"                    would fail (host memory, CUDA IPC, stopped processes,\n"
		"                    another operation), changing nothing; exit 0 when it would\n"
		"                    go through, 1 when not\n"
		"  -h, --help        show this help\n"
		"\n"
		"Before a save changes anything, a process whose checkpoint would not fit in\n"
		"its memory cgroup or in MemAvailable, or that the driver could never restore\n"
		"(it imported another process's device memory through CUDA IPC), is refused\n"
		"(exit 2, naming it and the fix); CUDASNAP_IGNORE_MEMORY=1 and\n"
		"CUDASNAP_ALLOW_UNRESTORABLE=1 override that.\n"
		"\n"
		"Environment: " STRICT_ENV "=1|0 sets strictness when no option does;\n"
		"CUDASNAP_STATE_DIR (default /run/cudasnap), CUDASNAP_LIBCUDA. With elevated\n"
		"privileges (setuid or file capabilities: AT_SECURE) no variable is read,\n" MODE_ENV
		" included, so the hook does nothing and exits 2.\n"
		"Exit status: 0 done (or nothing to do); 1 failed, everything rolled back; 2\n"
		"usage or environment error, no mode given, or refused (nothing changed); 3\n"
		"failed and rollback incomplete.\n",
		cs_prog);
}

enum { OPT_STRICT = 256, OPT_NO_STRICT, OPT_JSON, OPT_DEADLINE, OPT_DRY_RUN };

typedef struct hook_opts {
	int strict; /* -1: not given */
	unsigned timeout_ms;
	unsigned deadline_s;
	bool json;
	bool dry_run;
} hook_opts;

/* Every message must carry a timestamp (runsc's debug log has none of its
 * own for the hook's output), so errors go through cli_errorf, not getopt. */
static int hook_usage_error(const char *what, const char *arg)
{
	cli_errorf("Run 'cudasnap hook --help'.", "hook: %s '%s'", what, arg);
	return EXIT_USAGE;
}

static int parse(int argc, char **argv, hook_opts *o)
{
	static const struct option opts[] = {
		{ "strict", no_argument, NULL, OPT_STRICT },
		{ "no-strict", no_argument, NULL, OPT_NO_STRICT },
		{ "timeout", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "deadline", required_argument, NULL, OPT_DEADLINE },
		{ "dry-run", no_argument, NULL, OPT_DRY_RUN },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	*o = (hook_opts){ .strict = -1, .timeout_ms = 10000, .deadline_s = 540 };
	opterr = 0;
	for (int c; (c = getopt_long(argc, argv, ":ht:", opts, NULL)) != -1;) {
		long v;
		switch (c) {
		case 'h': usage(stdout); return EXIT_DONE;
		case OPT_STRICT: o->strict = 1; break;
		case OPT_NO_STRICT: o->strict = 0; break;
		case OPT_JSON: o->json = true; break;
		case OPT_DRY_RUN: o->dry_run = true; break;
		case OPT_DEADLINE:
			if (cs_parse_long(optarg, 1, 86400, &v) < 0)
				return hook_usage_error("--deadline is not a whole number of seconds from 1 to 86400:",
							optarg);
			o->deadline_s = (unsigned)v;
			break;
		case 't':
			if (cs_parse_long(optarg, 0, INT_MAX, &v) < 0)
				return hook_usage_error("--timeout is not a whole number of milliseconds:", optarg);
			o->timeout_ms = (unsigned)v;
			break;
		case ':': return hook_usage_error("missing value for", argv[optind - 1]);
		default: return hook_usage_error("unknown option", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return hook_usage_error("unexpected argument", argv[optind]);
	return CLI_GO_ON;
}

static int strict_from_env(hook_opts *o)
{
	const char *v = cs_env(STRICT_ENV);
	if (o->strict >= 0 || !v) {
		o->strict = o->strict > 0;
		return CLI_GO_ON;
	}
	if (strcmp(v, "1") != 0 && strcmp(v, "0") != 0)
		return hook_usage_error(STRICT_ENV " must be 1 or 0, not", v);
	o->strict = v[0] == '1';
	return CLI_GO_ON;
}

/* With elevated privileges (AT_SECURE) no variable is read, the mode
 * included: the hook then does nothing, and says why. */
static int mode_ignored(void)
{
	cli_errorf("runsc runs the hook as root, without setuid or file capabilities, where the variable is "
		   "read; with elevated privileges run 'cudasnap checkpoint' or 'cudasnap restore' instead.",
		   "hook: " MODE_ENV " is ignored: cudasnap runs with elevated privileges (setuid or file "
		   "capabilities: AT_SECURE), where it reads no environment variable; nothing was done");
	return EXIT_USAGE;
}

static int mode_op(const char *mode, cs_op *op)
{
	if (!mode && cs_env_is_ignored(MODE_ENV))
		return mode_ignored();
	if (!mode) {
		cli_errorf("runsc sets it when it runs the hook (runsc checkpoint --save-restore-exec-argv=...); "
			   "to run the hook by hand, set " MODE_ENV "=save, restore or resume.",
			   "hook: " MODE_ENV " is not set; nothing was done");
		return EXIT_USAGE;
	}
	if (strcmp(mode, "save") == 0 || strcmp(mode, "restore") == 0 || strcmp(mode, "resume") == 0) {
		*op = strcmp(mode, "save") == 0 ? CS_OP_CHECKPOINT : CS_OP_RESTORE;
		return CLI_GO_ON;
	}
	cli_errorf("runsc sets save, restore or resume; a newer runsc may know modes this cudasnap does not: "
		   "upgrade cudasnap.",
		   "hook: unknown " MODE_ENV " '%s' (expected save, restore or resume); "
		   "nothing was done",
		   mode);
	return EXIT_USAGE;
}

int cmd_hook(int argc, char **argv)
{
	hook_opts o;
	cs_op op = CS_OP_CHECKPOINT;
	cli_timestamps = true;
	int r = parse(argc, argv, &o);
	if (r == CLI_GO_ON)
		r = strict_from_env(&o);
	const char *mode = cs_env(MODE_ENV);
	if (r == CLI_GO_ON)
		r = mode_op(mode, &op);
	if (r != CLI_GO_ON)
		return r;
	bool save = op == CS_OP_CHECKPOINT;
	cli_msg("hook: mode %s: %s every CUDA process of this PID namespace%s", mode,
		save ? "checkpointing" : "restoring", save ? o.strict ? " (strict)" : " (not strict)" : "");
	/* In a sandbox just restored from its snapshot no other process can have
	 * taken a PID, so a start time that reads differently is the clock's
	 * doing; refusing would make runsc kill the sandbox. */
	_cleanup_(txn_cli_freep) txn_cli c = { .cmd = save ? "checkpoint" : "restore",
					       .op = op,
					       .timeout_ms = o.timeout_ms,
					       .json = o.json,
					       .dry_run = o.dry_run,
					       .strict = o.strict,
					       .usage = usage,
					       .reuse_warns = true,
					       .all = true,
					       .front = "hook" };
	/* SIGALRM ends the transaction as SIGTERM would: rolled back and reported. */
	alarm(o.deadline_s);
	return txn_cli_execute(&c);
}
