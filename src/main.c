/* cudasnap: the command line. Each command lives in its own file. */
#include "cli.h"
#include "gpuprobe.h"
#include "plan.h"
#include "sandbox.h"

#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/time.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *cs_prog = "cudasnap";
bool cli_timestamps;

/* Messages come from worker threads and the progress line from the main
 * one: one lock keeps lines whole, and a message first wipes the progress
 * line that a terminal shows. */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static bool status_shown;

void cli_status(const char *line)
{
	pthread_mutex_lock(&out_mu);
	fprintf(stderr, "\r\033[K%s", line ? line : "");
	fflush(stderr);
	status_shown = line && *line;
	pthread_mutex_unlock(&out_mu);
}

static void emit(const char *line);

void cli_msg(const char *fmt, ...)
{
	char line[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&out_mu);
	if (status_shown)
		fputs("\r\033[K", stderr);
	status_shown = false;
	emit(line);
	pthread_mutex_unlock(&out_mu);
}

static void emit(const char *line)
{
	if (cli_timestamps) {
		struct timeval tv;
		struct tm tm;
		char when[32];
		gettimeofday(&tv, NULL);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", gmtime_r(&tv.tv_sec, &tm));
		fprintf(stderr, "%s.%03dZ %s: %s\n", when, (int)(tv.tv_usec / 1000), cs_prog, line);
	} else {
		fprintf(stderr, "%s: %s\n", cs_prog, line);
	}
}

static const cs_command commands[] = {
	{ "ps", cmd_ps, "list every GPU-related process, its class and checkpoint state" },
	{ "checkpoint", cmd_checkpoint, "lock and checkpoint CUDA processes as one transaction" },
	{ "restore", cmd_restore, "restore and unlock checkpointed processes as one transaction" },
	{ "lock", cmd_lock, "pause the GPU work of CUDA processes (memory stays on the GPU)" },
	{ "unlock", cmd_unlock, "resume locked processes" },
	{ "verify", cmd_verify, "list GPU device references that remain, and why" },
	{ "doctor", cmd_doctor, "check the driver, GPUs, sandbox and CUDA processes before a checkpoint" },
	{ "inspect", cmd_inspect, "what a checkpoint's GPU part holds, and whether it would restore here" },
	{ "history", cmd_history, "what cudasnap did on this node, newest first" },
	{ "run", cmd_run, "run a program with the parking interposer (faster checkpoints)" },
	{ "hook", cmd_hook, "gVisor's save/restore exec hook (runsc --save-restore-exec-argv)" },
	{ "cuda-checkpoint", cmd_cuda_checkpoint, "behave as NVIDIA's cuda-checkpoint (R580 command line)" },
};

void cli_error(const cs_error *e)
{
	cli_msg("error: %s", e->message);
	if (e->hint[0])
		cli_msg("hint: %s", e->hint);
}

void cli_errorf(const char *hint, const char *fmt, ...)
{
	cs_error e = { .status = CS_EUSAGE };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e.message, sizeof(e.message), fmt, ap);
	va_end(ap);
	snprintf(e.hint, sizeof(e.hint), "%s", hint ? hint : "");
	cli_error(&e);
}

int cli_usage_error(const char *cmd)
{
	fprintf(stderr, "Try '%s %s --help'.\n", cs_prog, cmd);
	return EXIT_USAGE;
}

bool cli_may_trace_all(void)
{
	cs_sandbox sb;
	cs_sandbox_detect(NULL, &sb);
	return cs_sandbox_may_trace_all(&sb);
}

bool cli_blind(const cs_ptable *t)
{
	if (!t->nunreadable)
		return false;
	cs_sandbox sb;
	cs_sandbox_detect(NULL, &sb);
	if (cs_sandbox_may_trace_all(&sb))
		return false;
	cli_msg("error: %zu process%s could not be read as uid %u: run as root or with CAP_SYS_PTRACE", t->nunreadable,
		t->nunreadable == 1 ? "" : "es", (unsigned)sb.euid);
	return true;
}

/* The one place where failures become exit statuses. A failure before
 * anything changed is a usage or environment error, whatever its kind; a
 * transaction's outcome decides the rest. */
int cli_exit_for(const cs_error *e)
{
	(void)e;
	return EXIT_USAGE;
}

int cli_exit_txn(const cs_txn_result *r, int rc)
{
	if (r->outcome == CS_OUTCOME_INCOMPLETE)
		return EXIT_INCOMPLETE;
	/* refused before anything changed (a stopped, traced or frozen
	 * process; an interposer that stopped answering): as every refusal */
	if (rc < 0 && (r->refused_no_room || r->outcome == CS_OUTCOME_REFUSED))
		return EXIT_USAGE;
	return rc < 0 ? EXIT_FAILED : EXIT_DONE;
}

/* What a plan's real command would end with, in the order it meets its
 * obstacles: the claims refuse a busy process, restore's own checks (the
 * manifest, the device map), the host memory and CUDA IPC checks, and the
 * transaction's refusal of a stopped or frozen process come next, all
 * before anything changes (2); what the driver or --strict refuses is
 * rolled back (1). */
int cli_exit_plan(const cs_plan *p)
{
	if (p->go)
		return EXIT_DONE;
	bool busy = false, checked = false;
	for (size_t i = 0; i < p->n; i++)
		for (size_t k = 0; k < p->e[i].nreasons; k++) {
			const cs_reason *r = &p->e[i].reason[k];
			busy |= r->blocks && strcmp(r->code, "busy") == 0;
			checked |= cs_reason_refused_by_check(r) ||
				(r->blocks && (strcmp(r->code, "stopped") == 0 || strcmp(r->code, "frozen") == 0));
		}
	if (busy)
		return EXIT_USAGE;
	if (p->problem.status)
		return cli_exit_for(&p->problem);
	return checked ? EXIT_USAGE : EXIT_FAILED;
}

int cli_parse_json_opts(int argc, char **argv, const char *cmd, void (*usage)(FILE *f), bool *json)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	*json = false;
	for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
		if (c == 'h') {
			usage(stdout);
			return EXIT_DONE;
		}
		if (c != 'j')
			return cli_usage_error(cmd);
		*json = true;
	}
	return CLI_GO_ON;
}

int cli_parse_json_only(int argc, char **argv, const char *cmd, void (*usage)(FILE *f), bool *json)
{
	int rc = cli_parse_json_opts(argc, argv, cmd, usage, json);
	if (rc != CLI_GO_ON)
		return rc;
	if (optind < argc) {
		cli_errorf(NULL, "%s takes no arguments ('%s')", cmd, argv[optind]);
		return cli_usage_error(cmd);
	}
	return CLI_GO_ON;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s COMMAND [OPTIONS]\n"
		"Checkpoint and restore the GPU state of every CUDA process in a container,\n"
		"sandbox or process tree, as one transaction.\n\nCommands:\n",
		cs_prog);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-16s %s\n", commands[i].name, commands[i].summary);
	fprintf(f,
		"\nOptions:\n"
		"  -h, --help     show this help; '%s COMMAND --help' shows a command's\n"
		"  -V, --version  show the version\n"
		"\nEnvironment:\n"
		"  CUDASNAP_LIBCUDA   path of the driver library (default: libcuda.so.1)\n"
		"  CUDASNAP_DEV_DIR   directory whose nvidia* files are GPU devices (default: /dev)\n"
		"\nExit status: 0 done; 1 failed (everything rolled back); 2 usage or environment\n"
		"error, or refused (nothing changed); 3 failed and rollback incomplete.\n",
		cs_prog);
}

/* Installed as a cuda-checkpoint symlink, cudasnap stands in for NVIDIA's
 * binary: CRIU and runsc run that name. */
static bool called_as_cuda_checkpoint(const char *argv0)
{
	const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
	return argv0 && strcmp(slash ? slash + 1 : argv0, "cuda-checkpoint") == 0;
}

/* A driver call given up on may still be blocked inside a worker thread,
 * and the driver library's exit handlers could wait for it: end without
 * running them. */
static int leave(int status)
{
	if (cs_driver_abandoned() == 0)
		return status;
	fflush(stdout);
	fflush(stderr);
	_exit(status);
}

static int dispatch(int argc, char **argv);

/* The GPU memory probe runs in a fresh process of this same binary
 * (lib/driver/gpuprobe.h), found by its real path: the probe runs as "cudasnap" (a process
 * that the selection of a concurrent command recognizes as a tool), where
 * /proc/self/exe would run as "exe". */
static void register_probe(void)
{
	static char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	if (n <= 0 || (size_t)n >= sizeof(self) - 1 || strstr(self, " (deleted)"))
		snprintf(self, sizeof(self), "/proc/self/exe");
	cs_gpu_probe_set_exec(self, CS_GPU_PROBE_ARG);
}

int main(int argc, char **argv)
{
	uint64_t ctx = CS_PROBE_ALL;
	if ((argc == 2 || argc == 3) && strcmp(argv[1], CS_GPU_PROBE_ARG) == 0)
		return argc == 3 && cs_gpu_probe_ctx_parse(argv[2], &ctx) < 0 ? 2 :
										cs_gpu_probe_main(STDOUT_FILENO, ctx);
	register_probe();
	return leave(dispatch(argc, argv));
}

static int dispatch(int argc, char **argv)
{
	if (called_as_cuda_checkpoint(argv[0]))
		return cmd_cuda_checkpoint(argc, argv);
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
		usage(stdout);
		return EXIT_DONE;
	}
	if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
		printf("cudasnap %s\n", CUDASNAP_VERSION);
		return EXIT_DONE;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(cmd, commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	cli_errorf(NULL, "unknown command '%s'", cmd);
	fprintf(stderr, "Try '%s --help'.\n", cs_prog);
	return EXIT_USAGE;
}
