/* A program that loads a library built against a newer driver
 * (newer_driver_lib.c) after the driver, as a plugin is loaded:
 *   newer-driver LIB now|lazy   dlopen it so and call the function it needs;
 *   newer-driver LIB probe      the same, lazy, after newer_probe.so (in
 *                               LIB's directory) looked the function up;
 *   newer-driver LIB sym        dlsym(RTLD_DEFAULT) of that function.
 * Prints what happened ("dlopen: ERROR", "dlsym: null", "returned N");
 * a call the dynamic linker cannot bind ends the program as it decides. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc != 3 || dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) == NULL) {
		fprintf(stderr, "usage: newer-driver LIB now|lazy|probe|sym, with libcuda.so.1 findable\n");
		return 2;
	}
	if (strcmp(argv[2], "sym") == 0) {
		printf("dlsym: %s\n", dlsym(RTLD_DEFAULT, "cuArrayCreate_v2") ? "found" : "null");
		return 0;
	}
	if (strcmp(argv[2], "probe") == 0) {
		/* newer_probe.so (beside LIB), loaded globally, looks first */
		const char *slash = strrchr(argv[1], '/');
		char path[4096];
		snprintf(path, sizeof(path), "%.*snewer_probe.so", slash ? (int)(slash - argv[1] + 1) : 0, argv[1]);
		void *p = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
		int (*probe)(void) = p ? (int (*)(void))dlsym(p, "newer_probe") : NULL;
		printf("probe: %d\n", probe ? probe() : -1);
	}
	bool probe = strcmp(argv[2], "probe") == 0;
	void *lib = dlopen(argv[1],
			   strcmp(argv[2], "now") == 0 ? RTLD_NOW :
				   probe               ? RTLD_LAZY | RTLD_GLOBAL :
							 RTLD_LAZY);
	if (lib == NULL) {
		printf("dlopen: %s\n", dlerror());
		return 3;
	}
	/* probe: found as the program finds a global library's names */
	int (*call)(void) = (int (*)(void))dlsym(probe ? RTLD_DEFAULT : lib, "newer_driver_call");
	fflush(stdout);
	printf("returned %d\n", call ? call() : -1);
	return 0;
}
