#include "txncli.h"
#include "util.h"

#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum {
	OPT_PID = 'p',
	OPT_TREE = 256,
	OPT_CGROUP,
	OPT_TIMEOUT,
	OPT_JOBS,
	OPT_SEQ,
	OPT_JSON,
	OPT_STRICT,
	OPT_MAP,
	OPT_NOINIT,
	OPT_NOMANIFEST,
	OPT_STEP_TIMEOUT,
	OPT_DRY_RUN,
	OPT_IGNORE_MEMORY,
	OPT_ALLOW_UNRESTORABLE,
	OPT_WAIT_MEMORY,
	OPT_IGNORE_GPU_MEMORY,
	OPT_ALL,
	OPT_NO_PARK,
	OPT_PARK_TO,
	OPT_KEEP,
	OPT_PARK_FROM,
};

void txn_cli_selection_help(FILE *f, cs_op op)
{
	bool needed = op == CS_OP_CHECKPOINT || op == CS_OP_LOCK;
	fprintf(f, "%s",
		needed ? "Selection (default: every CUDA process in this PID namespace; in the host's PID\n"
			 "namespace one of these must be given):\n" :
			 "Selection (default: every CUDA process in this PID namespace):\n");
	fprintf(f,
		"  -p, --pid PID       this process (repeatable; a thread id names its process)\n"
		"      --tree PID      this process and all its descendants (repeatable)\n"
		"      --cgroup PATH   the processes of this cgroup and its sub-cgroups\n"
		"                      (as /proc/PID/cgroup shows it, or under /sys/fs/cgroup)\n");
	if (needed)
		fprintf(f,
			"      --all           every CUDA process of this PID namespace, said outright. In\n"
			"                      the kernel's initial PID namespace (the host's) that is\n"
			"                      every CUDA process of the node, every container's\n"
			"                      included: there a command without --pid, --tree,\n"
			"                      --cgroup or --all is refused (exit 2, nothing done)\n");
	else
		fprintf(f,
			"      --all           every CUDA process of this PID namespace (the default),\n"
			"                      said outright, as the %s before it took it\n",
			op == CS_OP_RESTORE ? "checkpoint" : "lock");
	fprintf(f,
		"PIDs are those of this PID namespace, as 'cudasnap ps' shows them; PIDs from\n"
		"nvidia-smi are host PIDs and are rejected when they do not exist here.\n");
}

void txn_cli_deadline_help(FILE *f)
{
	fprintf(f,
		"      --step-timeout SEC  give up on a checkpoint or restore call after SEC\n"
		"                    seconds, at most 7200 (default: 60 s + 2 s per GiB of the\n"
		"                    process's GPU memory, as recorded or, when unknown, 342 s;\n"
		"                    never more than 7200 s, whatever a record says)\n"
		"\nNo driver call waits without bound: a stopped, traced or frozen process cannot\n"
		"answer the driver, so a selection holding one is refused before anything changes\n"
		"(a stopped process that is not selected is no obstacle). The lock waits --timeout\n"
		"plus 5 s, other calls 10 s. SIGINT or SIGTERM ends the command within 5 s,\n"
		"rolling back what it can; a second signal ends it at once. A process left\n"
		"behind is named with the command that recovers it.\n");
}

static void restore_checks_help(FILE *f)
{
	fprintf(f,
		"      --wait-memory SEC  when a GPU has too little free memory for the restore,\n"
		"                    wait up to SEC seconds (at most 86400) for room, saying what\n"
		"                    it waits for; refused (exit 2) when the time runs out\n"
		"      --ignore-gpu-memory  restore even where a GPU has too little free memory\n"
		"                    (the driver then destroys the process's checkpointed state)\n"
		"\nBefore anything changes, each process is refused (exit 2, naming it, its GPU,\n"
		"the numbers, who holds the GPU's memory and the fix) when a GPU it restores onto\n"
		"(after --device-map) has too little free memory for it: what its checkpoint\n"
		"moved plus 144 MiB, as its record says (processes restored onto one GPU add\n"
		"up; without a record, up to its resident memory). A restore that runs out of GPU\n"
		"memory destroys the process's checkpointed state for good (driver 580), so it is\n"
		"never asked of the driver; each process is checked again right before its own\n"
		"restore, and one that the driver still answers CUDA_ERROR_OUT_OF_MEMORY is\n"
		"reported LOST (exit 3). CUDASNAP_WAIT_MEMORY=SEC and CUDASNAP_IGNORE_GPU_MEMORY=1\n"
		"(in the environment or the settings file) do what the two options do.\n");
}

void txn_cli_park_help(FILE *f, cs_op op)
{
	if (op == CS_OP_CHECKPOINT)
		fprintf(f,
			"      --no-park     leave the memory of processes that run the parking\n"
			"                    interposer (cudasnap run) to the driver\n"
			"      --park-to DIR  park into files of DIR instead of host memory: the\n"
			"                    processes then hold neither their GPU memory nor a copy\n"
			"                    of it (a memory limit below their GPU memory is no\n"
			"                    obstacle). DIR: an absolute path, reached through no\n"
			"                    symbolic link, that no other user can write; refused\n"
			"                    (exit 2) when it has too little free space for them all.\n"
			"                    O_DIRECT where its file system takes it; every piece\n"
			"                    with a MAC, checked at the restore\n");
	if (op == CS_OP_RESTORE)
		fprintf(f,
			"      --keep        keep the files of processes parked into files (--park-to)\n"
			"                    once their memory is back (removed by default)\n"
			"      --park-from DIR/NAME  the files (DIR/NAME.0 ...) of a process left parked\n"
			"                    in files that no record of this state directory names (one\n"
			"                    a CRIU restore left parked: the plugin's log and 'cudasnap\n"
			"                    history' name them); refused unless they are a park of its\n"
			"                    size\n");
	fprintf(f,
		"\nA process started with 'cudasnap run' (or LD_PRELOAD=libcudasnap-park.so) has\n"
		"its device memory %s,\noutside the driver's lock, at the speed of host memory and PCIe; the driver\n"
		"moves the rest: its context, allocations under 2 MiB and the VMM memory a\n"
		"program maps itself (cuMemCreate: PyTorch's expandable_segments, JAX). A\n"
		"process whose interposer cannot park it\n"
		"(memory imported through the driver's own CUDA IPC, a library that reaches a\n"
		"driver function past the interposer: 'cudasnap ps' says) goes the driver's\n"
		"way.%s\n",
		op == CS_OP_CHECKPOINT ? "copied to host memory and released (parked) before the lock" :
					 "put back (unparked) after the unlock",
		op == CS_OP_CHECKPOINT ?
			" CUDASNAP_NO_PARK=1 does what --no-park does;\nCUDASNAP_PARK_TO=DIR what --park-to does." :
			" A process parked into files reads them back (each\npiece checked against its MAC before any of it reaches the device); one whose\nfiles are missing, cut short or changed stays checkpointed (exit 1).");
}

void txn_cli_checks_help(FILE *f, cs_op op)
{
	fprintf(f,
		"      --dry-run     print what the command would do to each process and why it\n"
		"                    would fail, changing nothing (no claim, no state-changing\n"
		"                    driver call); with --json one object, whose\n"
		"                    real_exit_status is the command's own; exit 0 when it\n"
		"                    would go through, 1 when not\n");
	if (op == CS_OP_RESTORE)
		restore_checks_help(f);
	if (op != CS_OP_CHECKPOINT)
		return;
	fprintf(f,
		"      --ignore-memory  checkpoint even where the copy of a process's GPU memory\n"
		"                    would not fit in its memory cgroup or in MemAvailable, or\n"
		"                    where no limit of its cgroups can be read (swap or overcommit\n"
		"                    may make room; otherwise the kernel kills it)\n"
		"      --allow-unrestorable  checkpoint a process that imported device memory of\n"
		"                    another process (CUDA IPC) although the driver can never\n"
		"                    restore it\n"
		"\nBefore anything changes, each process is refused (exit 2, naming it, the\n"
		"numbers and the fix) when its checkpoint would not fit: the checkpoint copies\n"
		"its GPU memory into its own host memory, charged to its memory cgroup (v2\n"
		"memory.max and memory.high, v1 limit_in_bytes and memsw, every ancestor up to\n"
		"the hierarchy's root, read from the initial cgroup namespace where this one\n"
		"hides them), and processes of one cgroup add up; or when no limit of its\n"
		"cgroups can be read while one may exist; or when the driver could not restore\n"
		"it (CUDA IPC importers). CUDASNAP_IGNORE_MEMORY=1 and\n"
		"CUDASNAP_ALLOW_UNRESTORABLE=1 (in the environment or the settings file) do what\n"
		"the two options do.\n");
}

/* Each parser below says what is wrong, once, and returns EXIT_USAGE, or
 * CLI_GO_ON when the value was taken. */
static int add_pid(pid_t **v, size_t *n, size_t *cap, const char *arg, const char *opt)
{
	long pid;
	if (cs_parse_long(arg, 1, INT_MAX, &pid) < 0) {
		cli_errorf(NULL, "%s: '%s' is not a process id", opt, arg);
		return EXIT_USAGE;
	}
	if (cs_grow(v, cap, *n + 1, sizeof(**v)) < 0) {
		cli_errorf(NULL, "out of memory");
		return EXIT_USAGE;
	}
	(*v)[(*n)++] = (pid_t)pid;
	return CLI_GO_ON;
}

static int parse_uint(const char *arg, const char *opt, long min, long max, unsigned *out)
{
	long v;
	if (cs_parse_long(arg, min, max, &v) < 0) {
		cli_errorf(NULL, "%s: '%s' is not a whole number from %ld to %ld", opt, arg, min, max);
		return EXIT_USAGE;
	}
	*out = (unsigned)v;
	return CLI_GO_ON;
}

static int set_flag(bool *flag)
{
	*flag = true;
	return CLI_GO_ON;
}

static int parse_one(txn_cli *c, int opt, const char *arg)
{
	switch (opt) {
	case OPT_PID: return add_pid(&c->sel.pids, &c->sel.npids, &c->pcap, arg, "--pid");
	case OPT_TREE: return add_pid(&c->sel.trees, &c->sel.ntrees, &c->tcap, arg, "--tree");
	case OPT_CGROUP:
		if (arg[0] != '/') {
			cli_errorf(NULL, "--cgroup: '%s' is not an absolute cgroup path", arg);
			return EXIT_USAGE;
		}
		c->sel.cgroup = arg;
		return CLI_GO_ON;
	case OPT_TIMEOUT: return parse_uint(arg, "--timeout", 0, INT_MAX, &c->timeout_ms);
	case OPT_STEP_TIMEOUT:
		return parse_uint(arg, "--step-timeout", 1, (long)CS_MOVE_DEADLINE_MAX, &c->step_timeout_s);
	case OPT_JOBS: return parse_uint(arg, "--jobs", 1, 1024, &c->jobs);
	case OPT_SEQ: return set_flag(&c->sequential);
	case OPT_JSON: return set_flag(&c->json);
	case OPT_STRICT: return set_flag(&c->strict);
	case OPT_MAP: c->device_map = arg; return CLI_GO_ON;
	case OPT_NOINIT: return set_flag(&c->no_init);
	case OPT_NOMANIFEST: return set_flag(&c->ignore_manifest);
	case OPT_DRY_RUN: return set_flag(&c->dry_run);
	case OPT_IGNORE_MEMORY: return set_flag(&c->ignore_memory);
	case OPT_ALLOW_UNRESTORABLE: return set_flag(&c->allow_unrestorable);
	case OPT_WAIT_MEMORY: return parse_uint(arg, "--wait-memory", 0, CS_WAIT_MEMORY_MAX, &c->wait_memory_s);
	case OPT_IGNORE_GPU_MEMORY: return set_flag(&c->ignore_gpu_memory);
	case OPT_ALL: return set_flag(&c->all);
	case OPT_NO_PARK: return set_flag(&c->no_park);
	case OPT_PARK_TO: c->park_to = arg; return CLI_GO_ON;
	case OPT_KEEP: return set_flag(&c->park_keep);
	case OPT_PARK_FROM: c->park_from = arg; return CLI_GO_ON;
	default: return EXIT_USAGE;
	}
}

int txn_cli_parse(txn_cli *c, int argc, char **argv)
{
	static const struct option common[] = {
		{ "pid", required_argument, NULL, OPT_PID },
		{ "tree", required_argument, NULL, OPT_TREE },
		{ "cgroup", required_argument, NULL, OPT_CGROUP },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "step-timeout", required_argument, NULL, OPT_STEP_TIMEOUT },
		{ "jobs", required_argument, NULL, OPT_JOBS },
		{ "sequential", no_argument, NULL, OPT_SEQ },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ "dry-run", no_argument, NULL, OPT_DRY_RUN },
		{ "all", no_argument, NULL, OPT_ALL },
	}, checkpoint[] = {
		{ "strict", no_argument, NULL, OPT_STRICT },
		{ "ignore-memory", no_argument, NULL, OPT_IGNORE_MEMORY },
		{ "allow-unrestorable", no_argument, NULL, OPT_ALLOW_UNRESTORABLE },
		{ "no-park", no_argument, NULL, OPT_NO_PARK },
		{ "park-to", required_argument, NULL, OPT_PARK_TO },
	}, restore[] = {
		{ "device-map", required_argument, NULL, OPT_MAP },
		{ "no-init", no_argument, NULL, OPT_NOINIT },
		{ "ignore-manifest", no_argument, NULL, OPT_NOMANIFEST },
		{ "wait-memory", required_argument, NULL, OPT_WAIT_MEMORY },
		{ "ignore-gpu-memory", no_argument, NULL, OPT_IGNORE_GPU_MEMORY },
		{ "keep", no_argument, NULL, OPT_KEEP },
		{ "park-from", required_argument, NULL, OPT_PARK_FROM },
	};
	struct option opts[CS_ARRAY_SIZE(common) + CS_ARRAY_SIZE(checkpoint) + CS_ARRAY_SIZE(restore) + 1];
	size_t n = CS_ARRAY_SIZE(common);
	memcpy(opts, common, sizeof(common));
	if (c->op == CS_OP_CHECKPOINT)
		memcpy(opts + n, checkpoint, sizeof(checkpoint)), n += CS_ARRAY_SIZE(checkpoint);
	if (c->op == CS_OP_RESTORE)
		memcpy(opts + n, restore, sizeof(restore)), n += CS_ARRAY_SIZE(restore);
	memset(&opts[n], 0, sizeof(opts[n]));
	c->timeout_ms = 10000;
	const char *shortopts = c->op == CS_OP_RESTORE ? "hp:t:j:d:" : "hp:t:j:";
	for (int o; (o = getopt_long(argc, argv, shortopts, opts, NULL)) != -1;) {
		if (o == 'h') {
			c->usage(stdout);
			return EXIT_DONE;
		}
		o = o == 't' ? OPT_TIMEOUT : o == 'j' ? OPT_JOBS : o == 'd' ? OPT_MAP : o;
		if (o == '?' || parse_one(c, o, optarg) != CLI_GO_ON)
			return cli_usage_error(c->cmd);
	}
	if (optind < argc) {
		cli_errorf("Name processes with --pid.", "unexpected argument '%s'", argv[optind]);
		return cli_usage_error(c->cmd);
	}
	if (c->park_to && c->no_park) {
		cli_errorf(NULL, "--park-to parks into files: it does not go with --no-park");
		return cli_usage_error(c->cmd);
	}
	if (c->all && (c->sel.npids || c->sel.ntrees || c->sel.cgroup)) {
		cli_errorf(NULL, "--all selects every CUDA process: it does not go with --pid, --tree or --cgroup");
		return cli_usage_error(c->cmd);
	}
	return CLI_GO_ON;
}

void txn_cli_free(txn_cli *c)
{
	free(c->sel.pids);
	free(c->sel.trees);
}
