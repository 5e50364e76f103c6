/* The command line of NVIDIA's cuda-checkpoint (driver R580). */
#include "compat.h"
#include "util.h"

#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>

enum { OPT_GET_STATE = 256, OPT_GET_TID, OPT_TOGGLE, OPT_ACTION = 'a' };

/* CRIU's plugin turns itself off unless this text contains "--action". */
static void compat_usage(FILE *f)
{
	fprintf(f,
		"CUDA checkpoint and restore utility (cudasnap %s, NVIDIA R580 command line).\n"
		"\n"
		"Operations:\n"
		"--get-state --pid <pid>\n"
		"\tPrints the checkpoint state of <pid>: running, locked, checkpointed or failed\n"
		"\n"
		"--action lock | checkpoint | restore | unlock --pid <pid> [--timeout <ms>] [--device-map <uuids>]\n"
		"\tPerforms one step on <pid>. lock waits up to <ms> milliseconds for running GPU\n"
		"\twork (default: no limit); restore may move the process onto other GPUs.\n"
		"\n"
		"--toggle --pid <pid>\n"
		"\tRunning -> lock and checkpoint; checkpointed -> restore and unlock. A failed\n"
		"\tcheckpoint is unlocked again, so the process keeps running.\n"
		"\n"
		"--get-restore-tid --pid <pid>\n"
		"\tPrints the thread id of the driver's restore thread in <pid>\n"
		"\n"
		"Options:\n"
		"--pid|-p <pid>\n"
		"\tThe process (a thread id names its process)\n"
		"\n"
		"--timeout|-t <ms>\n"
		"\tLock timeout in milliseconds, for lock and toggle\n"
		"\n"
		"--device-map|-d <deviceUuids>\n"
		"\tFor --action restore only: oldUuid=newUuid,oldUuid=newUuid,... listing every GPU\n"
		"\tthe process can see (GPU indices are accepted too)\n"
		"\n"
		"--help|-h\n"
		"\tPrints this help\n"
		"\n"
		"Errors: one line on stderr quoting the driver's error text, then a hint; exit\n"
		"status 1. 'cudasnap checkpoint' and 'cudasnap restore' act on every CUDA process\n"
		"of the namespace as one transaction.\n", CUDASNAP_VERSION);
}

int compat_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_FAILED;
}

static int set_op(compat_args *a, compat_op op)
{
	if (a->op != COMPAT_NONE && a->op != op)
		return compat_fail("cuda-checkpoint: give one operation: --get-state, --action, --toggle or "
				   "--get-restore-tid");
	a->op = op;
	return -1;
}

static int parse_action(compat_args *a, const char *word)
{
	static const struct { const char *word; cs_call call; } actions[] = {
		{ "lock", CS_CALL_LOCK }, { "checkpoint", CS_CALL_CHECKPOINT },
		{ "restore", CS_CALL_RESTORE }, { "unlock", CS_CALL_UNLOCK },
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(actions); i++) {
		if (strcmp(word, actions[i].word) == 0) {
			a->action = actions[i].call;
			return set_op(a, COMPAT_ACTION);
		}
	}
	return compat_fail("cuda-checkpoint: unknown action '%s' (lock, checkpoint, restore or unlock)", word);
}

/* pid 0 and PIDs of other namespaces go to the driver as given: its answer
 * (304) is part of the interface. */
static int parse_number(const char *arg, const char *opt, long *out)
{
	if (cs_parse_long(arg, 0, INT_MAX, out) < 0)
		return compat_fail("cuda-checkpoint: %s: '%s' is not a whole number", opt, arg);
	return -1;
}

static int parse_one(compat_args *a, int o, const char *arg)
{
	long v;
	int r;
	switch (o) {
	case OPT_GET_STATE: return set_op(a, COMPAT_GET_STATE);
	case OPT_GET_TID: return set_op(a, COMPAT_GET_TID);
	case OPT_TOGGLE: return set_op(a, COMPAT_TOGGLE);
	case OPT_ACTION: return parse_action(a, arg);
	case 'p':
		if ((r = parse_number(arg, "--pid", &v)) >= 0)
			return r;
		a->pid = (pid_t)v;
		a->have_pid = true;
		return -1;
	case 't':
		if ((r = parse_number(arg, "--timeout", &v)) >= 0)
			return r;
		a->timeout_ms = (unsigned)v;
		return -1;
	case 'd': a->device_map = arg; return -1;
	default: return EXIT_FAILED;
	}
}

static int check(const compat_args *a)
{
	if (a->op == COMPAT_NONE)
		return compat_fail("cuda-checkpoint: no operation given; see cuda-checkpoint --help");
	if (!a->have_pid)
		return compat_fail("cuda-checkpoint: --pid <pid> is required");
	if (a->device_map && !(a->op == COMPAT_ACTION && a->action == CS_CALL_RESTORE))
		return compat_fail("cuda-checkpoint: --device-map is only valid with --action restore");
	return -1;
}

int compat_parse(int argc, char **argv, compat_args *a)
{
	static const struct option opts[] = {
		{ "get-state", no_argument, NULL, OPT_GET_STATE },
		{ "get-restore-tid", no_argument, NULL, OPT_GET_TID },
		{ "toggle", no_argument, NULL, OPT_TOGGLE },
		{ "action", required_argument, NULL, OPT_ACTION },
		{ "pid", required_argument, NULL, 'p' },
		{ "timeout", required_argument, NULL, 't' },
		{ "device-map", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	memset(a, 0, sizeof(*a));
	opterr = 0;
	for (int o; (o = getopt_long(argc, argv, ":hp:t:d:", opts, NULL)) != -1;) {
		if (o == 'h') {
			compat_usage(stdout);
			return EXIT_DONE;
		}
		if (o == '?' || o == ':')
			return compat_fail("cuda-checkpoint: %s '%s'; see cuda-checkpoint --help",
					   o == '?' ? "unknown option" : "missing value for", argv[optind - 1]);
		int r = parse_one(a, o, optarg);
		if (r >= 0)
			return r;
	}
	if (optind < argc)
		return compat_fail("cuda-checkpoint: unexpected argument '%s'; see cuda-checkpoint --help",
				   argv[optind]);
	return check(a);
}
