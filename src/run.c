/* cudasnap run: starts a program with the parking interposer, so that
 * cudasnap checkpoint parks its device memory instead of leaving it all to
 * the driver. It only sets LD_PRELOAD and executes the program: nothing of
 * cudasnap stays between the program and its caller. */
#include "cli.h"
#include "env.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#ifndef CUDASNAP_PARK_LIB
#define CUDASNAP_PARK_LIB "/usr/local/lib/cudasnap/libcudasnap-park.so"
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s run [--] PROGRAM [ARG...]\n"
		"Run PROGRAM with the parking interposer (libcudasnap-park.so) preloaded.\n"
		"\n"
		"cudasnap checkpoint then copies the program's device memory into its host\n"
		"memory and releases it before the driver's lock (park), so that the driver\n"
		"moves only the context, and cudasnap restore puts it back at the same\n"
		"addresses after the unlock (unpark). Device memory from cuMemAlloc or\n"
		"cudaMalloc of at least 2 MiB is backed by the driver's virtual memory\n"
		"management; smaller allocations stay the driver's. While nothing is parked\n"
		"every call reaches the driver as before. CUDA IPC between two interposed\n"
		"processes keeps working (torch.multiprocessing included: the driver restores\n"
		"the events it shares), and such a pair parks when both are checkpointed\n"
		"together. Every way the program reaches the driver's exported functions (by\n"
		"name, as code linked with -lcuda does, dlsym, cuGetProcAddress) is held during\n"
		"a park (not the driver's private tables, cuGetExportTable, which the CUDA\n"
		"runtime uses: see cudasnap(7)); a process that can reach a driver function\n"
		"past the interposer, and what the interposer cannot carry (managed memory,\n"
		"VMM memory the program maps itself), is left to the driver's checkpoint\n"
		"('cudasnap ps' says why). VMM memory a program passes to another as a file descriptor itself\n"
		"(cuMemExportToShareableHandle, cuMemImportFromShareableHandle) is carried\n"
		"the same way when both processes run the interposer: the importer lets go\n"
		"of it before the checkpoint and maps it again after the restore. An import\n"
		"from a process without it is refused at checkpoint: neither the driver nor\n"
		"parking could give it back. Under CRIU, cudasnap_plugin.so parks and\n"
		"unparks too, importers before their exporters. Memory the program retains\n"
		"(cuMemRetainAllocationHandle) or exports itself, as NCCL's user buffers do,\n"
		"is never parked: such a process is left to the driver.\n"
		"\n"
		"In a container, preload the library yourself: LD_PRELOAD=%s\n"
		"(copied or mounted into the image). Inside, the program places a control\n"
		"socket in a directory of its own (mode 0700) in CUDASNAP_PARK_DIR (default\n"
		"/dev/shm, else /tmp). A park or an unpark needs the process's key, which only\n"
		"a caller with ptrace access to it can read (/proc/PID/fd): root, or the\n"
		"program's own user. CUDA IPC handles name their exporter and a secret; one\n"
		"opened in another PID namespace fails as the driver's own do.\n"
		"\n"
		"Environment: CUDASNAP_PARK_LIB (the library to preload), CUDASNAP_PARK=0 (no\n"
		"backing: every call and lookup is the driver's own, as without the interposer),\n"
		"CUDASNAP_PARK_DIR, CUDASNAP_PARK_IDLE_S (see cudasnap(1)). An AddressSanitizer\n"
		"program is started with verify_asan_link_order=0 added to ASAN_OPTIONS (the\n"
		"interposer is loaded ahead of its runtime).\n"
		"Exit status: the program's; 127 when it is not found, 126 when it cannot be\n"
		"executed (as a shell says), 2 on a usage error.\n",
		cs_prog, CUDASNAP_PARK_LIB);
}

/* The interposer: CUDASNAP_PARK_LIB, beside this binary (in its folder, a
 * build tree's, or ../lib/cudasnap of an installed tree), else where it
 * was installed. */
static int find_lib(char *out, size_t size)
{
	const char *env = cs_env("CUDASNAP_PARK_LIB");
	if (env && env[0]) {
		snprintf(out, size, "%s", env);
		return access(out, R_OK) == 0 ? 0 : -1;
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = 0;
		const char *rel[] = { "libcudasnap-park.so", "../park/libcudasnap-park.so",
				      "../lib/cudasnap/libcudasnap-park.so", "../lib64/cudasnap/libcudasnap-park.so" };
		for (size_t i = 0; i < CS_ARRAY_SIZE(rel); i++) {
			char p[PATH_MAX + 64];
			snprintf(p, sizeof(p), "%s/%s", self, rel[i]);
			if (access(p, R_OK) == 0 && realpath(p, out)) /* realpath: out is PATH_MAX */
				return 0;
		}
	}
	snprintf(out, size, "%s", CUDASNAP_PARK_LIB);
	return access(out, R_OK) == 0 ? 0 : -1;
}

/* An AddressSanitizer program refuses to start unless its runtime is the
 * first library loaded, lest another one take malloc and the like first;
 * the interposer, loaded ahead of it, defines none of what the runtime
 * intercepts. The check is turned off, unless the program's options say
 * otherwise. Programs without AddressSanitizer ignore the variable. */
static int let_asan_start(void)
{
	const char *opts = cs_env_asan_options();
	if (opts && strstr(opts, "verify_asan_link_order"))
		return 0;
	const char *add = "verify_asan_link_order=0";
	size_t len = (opts ? strlen(opts) + 1 : 0) + strlen(add) + 1;
	char *v = malloc(len);
	if (v == NULL)
		return -1;
	snprintf(v, len, "%s%s%s", opts && opts[0] ? opts : "", opts && opts[0] ? ":" : "", add);
	int rc = setenv("ASAN_OPTIONS", v, 1);
	free(v);
	return rc;
}

int cmd_run(int argc, char **argv)
{
	int first = 1;
	if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage(stdout);
		return EXIT_DONE;
	}
	if (argc > 1 && strcmp(argv[1], "--") == 0)
		first = 2;
	if (first >= argc) {
		cli_errorf("Name the program to run: cudasnap run -- PROGRAM [ARG...]", "no program given");
		return cli_usage_error("run");
	}
	if (argv[first][0] == '-' && first == 1) {
		cli_errorf("Put -- before a program whose name starts with '-'.", "unknown option '%s'", argv[first]);
		return cli_usage_error("run");
	}
	/* The one command that starts a program: the command line's own, never
	 * anything read from a process; and never with privileges that the
	 * program would inherit (setuid, file capabilities). */
	if (getauxval(AT_SECURE)) {
		cli_errorf("Run it as the user the program is to run as.",
			   "cudasnap run does not start programs from a setuid or file-capability copy of cudasnap");
		return EXIT_USAGE;
	}
	char lib[PATH_MAX];
	if (find_lib(lib, sizeof(lib)) != 0) {
		cli_errorf("Install cudasnap with its interposer, or name it with CUDASNAP_PARK_LIB.",
			   "the parking interposer %s cannot be read", lib);
		return EXIT_USAGE;
	}
	const char *old = cs_env_preload();
	size_t len = strlen(lib) + (old ? strlen(old) + 1 : 0) + 1;
	char *pre = malloc(len);
	if (pre == NULL)
		return EXIT_USAGE;
	snprintf(pre, len, "%s%s%s", lib, old && old[0] ? " " : "", old ? old : "");
	setenv("LD_PRELOAD", pre, 1);
	free(pre);
	if (let_asan_start() != 0)
		return EXIT_USAGE;
	execvp(argv[first], argv + first);
	cli_errorf(NULL, "cannot run %s: %s", argv[first], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}
