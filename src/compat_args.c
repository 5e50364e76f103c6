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
		"status 1. A stopped or frozen process is refused at once, as the driver would\n"
		"wait until it runs again. 'cudasnap checkpoint' and 'cudasnap restore' act on\n"
		"every CUDA process of the namespace as one transaction.\n",
		CUDASNAP_VERSION);
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

void compat_fail_line(const compat_args *a, cs_call call, const char *text)
{
	int pid = (int)a->pid;
	switch (a->op) {
	case COMPAT_GET_STATE: compat_fail("Error getting process state for process ID %d: \"%s\"", pid, text); break;
	case COMPAT_GET_TID:
		/* No public source shows NVIDIA's wording for this one; it follows
		 * the get-state line. */
		compat_fail("Error getting restore thread ID for process ID %d: \"%s\"", pid, text);
		break;
	case COMPAT_TOGGLE: compat_fail("Error toggling CUDA in process ID %d: \"%s\"", pid, text); break;
	default: compat_fail("Could not %s on process ID %d: \"%s\"", cs_call_name(call), pid, text);
	}
}

/* NVIDIA's binary answers every usage error with its line, an empty line
 * and the whole help on stderr, exit status 1; scripts written against it
 * may match that shape. */
static int __attribute__((format(printf, 1, 2))) usage_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n\n", stderr);
	compat_usage(stderr);
	return EXIT_FAILED;
}

static int set_op(compat_args *a, compat_op op)
{
	if (a->op != COMPAT_NONE && a->op != op)
		return usage_fail("cuda-checkpoint: give one operation: --get-state, --action, --toggle or "
				  "--get-restore-tid");
	a->op = op;
	return CLI_GO_ON;
}

static int parse_action(compat_args *a, const char *word)
{
	static const struct {
		const char *word;
		cs_call call;
	} actions[] = {
		{ "lock", CS_CALL_LOCK },
		{ "checkpoint", CS_CALL_CHECKPOINT },
		{ "restore", CS_CALL_RESTORE },
		{ "unlock", CS_CALL_UNLOCK },
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(actions); i++) {
		if (strcmp(word, actions[i].word) == 0) {
			a->action = actions[i].call;
			return set_op(a, COMPAT_ACTION);
		}
	}
	return usage_fail("Invalid process state");
}

/* pid 0 and PIDs of other namespaces go to the driver as given: its answer
 * (304) is part of the interface. */
static int parse_pid(compat_args *a, const char *arg)
{
	long v;
	if (cs_parse_long(arg, 0, INT_MAX, &v) < 0)
		return usage_fail("pid must be a non-negative integer");
	a->pid = (pid_t)v;
	a->have_pid = true;
	return CLI_GO_ON;
}

static int parse_timeout(compat_args *a, const char *arg)
{
	long v;
	if (cs_parse_long(arg, 0, INT_MAX, &v) < 0)
		return usage_fail("cuda-checkpoint: --timeout: '%s' is not a whole number of milliseconds", arg);
	a->timeout_ms = (unsigned)v;
	return CLI_GO_ON;
}

static int parse_one(compat_args *a, int o, const char *arg)
{
	switch (o) {
	case OPT_GET_STATE: return set_op(a, COMPAT_GET_STATE);
	case OPT_GET_TID: return set_op(a, COMPAT_GET_TID);
	case OPT_TOGGLE: return set_op(a, COMPAT_TOGGLE);
	case OPT_ACTION: return parse_action(a, arg);
	case 'p': return parse_pid(a, arg);
	case 't': return parse_timeout(a, arg);
	case 'd': a->device_map = arg; return CLI_GO_ON;
	default: return EXIT_FAILED;
	}
}

static int check(const compat_args *a)
{
	if (a->op == COMPAT_NONE)
		return usage_fail("No operation selected");
	if (!a->have_pid)
		return usage_fail("Missing pid to perform operation on");
	if (a->device_map && !(a->op == COMPAT_ACTION && a->action == CS_CALL_RESTORE))
		return usage_fail("cuda-checkpoint: --device-map is only valid with --action restore");
	return CLI_GO_ON;
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
			return usage_fail("cuda-checkpoint: %s '%s'", o == '?' ? "unknown option" : "missing value for",
					  argv[optind - 1]);
		int r = parse_one(a, o, optarg);
		if (r != CLI_GO_ON)
			return r;
	}
	if (optind < argc)
		return usage_fail("cuda-checkpoint: unexpected argument '%s'", argv[optind]);
	return check(a);
}
