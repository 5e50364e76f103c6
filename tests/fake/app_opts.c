#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"

static const char usage_text[] =
	"A fake CUDA application for checkpoint tests, built on the fake libcuda.so.1.\n"
	"\n"
	"  --mem MIB            allocate MIB MiB of fake device memory and fill it\n"
	"                       with a pattern seeded by the pid (default 1)\n"
	"  --kernel-loop MS     launch fake kernels of MS ms back to back\n"
	"  --spawn N            fork+exec N CUDA children with the same --mem,\n"
	"                       --kernel-loop and --ready-dir (they die with us)\n"
	"  --fork-after-init N  after cuInit, fork N children without exec that\n"
	"                       only sleep, keeping the inherited device files\n"
	"  --forked-close-fds N the first N of those close their device fds but\n"
	"                       keep the mappings (a mapping outlives its fd)\n"
	"  --open-device        no CUDA: open and map <devdir>/nvidia0 directly\n"
	"  --nvml-only          no CUDA: only nvmlInit_v2 of the fake NVML\n"
	"  --no-init            load the driver but never initialize it\n"
	"  --ipc-export         make the device memory importable by other processes\n"
	"                       (CUDA IPC): creates, maps and keeps open the shared\n"
	"                       file <shmdir>/cuda.shm.<uid>.<pid in hex>.1\n"
	"  --ipc-import PID     map the device memory that process PID exports (and\n"
	"                       its shared file, without an fd); verify checks it too\n"
	"  --set-visible LIST   set CUDA_VISIBLE_DEVICES to LIST before cuInit, as a\n"
	"                       program that changes its own environment does\n"
	"                       (/proc/PID/environ keeps what it started with)\n"
	"  --ready-dir DIR      each process writes DIR/<pid>.ready once set up:\n"
	"                       pid=<pid> ppid=<ppid> role=<role> tid=<restore tid>\n"
	"                       role is parent, spawned, forked, device, nvml or plain\n"
	"  -h, --help           show this help\n"
	"\n"
	"SIGUSR1: verify the device memory (waits while the process is locked or\n"
	"checkpointed) and write DIR/<pid>.verify: 'ok bytes=<n> gpu=<uuid>' (then\n"
	"' imported=<n>' after --ipc-import) or 'fail <reason>'. SIGTERM, SIGINT:\n"
	"clean exit, children too.\n"
	"<devdir> is $CUDASNAP_DEV_DIR, or /dev; <shmdir> is $FAKECUDA_SHM_DIR, or /dev/shm.\n";

static int number(const char *s, unsigned int lo, unsigned int hi, unsigned int *out)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (*s == '\0' || *s == '-' || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "fakecuda-app: '%s' is not a number from %u to %u\n", s, lo, hi);
		return -1;
	}
	*out = (unsigned int)v;
	return 0;
}

enum {
	OPT_MEM = 256,
	OPT_KERNEL,
	OPT_SPAWN,
	OPT_FORK,
	OPT_CLOSE,
	OPT_READY,
	OPT_CHILD,
	OPT_EXPORT,
	OPT_IMPORT,
	OPT_VISIBLE
};

static const struct option longopts[] = {
	{ "mem", required_argument, NULL, OPT_MEM },
	{ "kernel-loop", required_argument, NULL, OPT_KERNEL },
	{ "spawn", required_argument, NULL, OPT_SPAWN },
	{ "fork-after-init", required_argument, NULL, OPT_FORK },
	{ "forked-close-fds", required_argument, NULL, OPT_CLOSE },
	{ "ready-dir", required_argument, NULL, OPT_READY },
	{ "open-device", no_argument, NULL, 'd' },
	{ "nvml-only", no_argument, NULL, 'n' },
	{ "no-init", no_argument, NULL, 'i' },
	{ "ipc-export", no_argument, NULL, OPT_EXPORT },
	{ "ipc-import", required_argument, NULL, OPT_IMPORT },
	{ "set-visible", required_argument, NULL, OPT_VISIBLE },
	{ "child", no_argument, NULL, OPT_CHILD }, /* set on spawned children */
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static int one(struct app_opts *o, int c)
{
	switch (c) {
	case OPT_MEM: return number(optarg, 0, 1u << 20, &o->mem_mib);
	case OPT_KERNEL: return number(optarg, 1, 600000, &o->kernel_ms);
	case OPT_SPAWN: return number(optarg, 0, APP_MAX_KIDS / 2, &o->spawn);
	case OPT_FORK: return number(optarg, 0, APP_MAX_KIDS / 2, &o->fork_after_init);
	case OPT_CLOSE: return number(optarg, 0, APP_MAX_KIDS / 2, &o->forked_close_fds);
	case OPT_READY: o->ready_dir = optarg; return 0;
	case OPT_CHILD: o->child = 1; return 0;
	case OPT_EXPORT: o->ipc_export = 1; return 0;
	case OPT_IMPORT: return number(optarg, 1, 1u << 22, &o->ipc_import);
	case OPT_VISIBLE: o->set_visible = optarg; return 0;
	case 'd': o->open_device = 1; return 0;
	case 'n': o->nvml_only = 1; return 0;
	case 'i': o->no_init = 1; return 0;
	default: return -1;
	}
}

int app_parse(int argc, char **argv, struct app_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->mem_mib = 1;
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (c == 'h') {
			printf("Usage: %s [OPTION]...\n", argv[0]);
			fputs(usage_text, stdout);
			return 1;
		}
		if (one(o, c) != 0)
			return -1;
	}
	int no_cuda = o->open_device + o->nvml_only + o->no_init;
	if (optind < argc || no_cuda > 1 || (no_cuda && (o->ipc_export || o->ipc_import))) {
		fprintf(stderr, "fakecuda-app: bad arguments; see --help\n");
		return -1;
	}
	return 0;
}

const char *app_role_name(enum app_role role)
{
	static const char *const names[] = { "parent", "spawned", "forked",
					     "device", "nvml",    "plain" };
	return names[role];
}
