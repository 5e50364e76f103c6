/* A program that loads a library built against a newer driver
 * (newer_driver_lib.c) after the driver, as a plugin is loaded:
 *   newer-driver LIB now|lazy   dlopen it so and call the function it needs;
 *   newer-driver LIB sym        dlsym(RTLD_DEFAULT) of that function.
 * Prints what happened ("dlopen: ERROR", "dlsym: null", "returned N");
 * a call the dynamic linker cannot bind ends the program as it decides. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc != 3 || dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) == NULL) {
		fprintf(stderr, "usage: newer-driver LIB now|lazy|sym, with libcuda.so.1 findable\n");
		return 2;
	}
	if (strcmp(argv[2], "sym") == 0) {
		printf("dlsym: %s\n", dlsym(RTLD_DEFAULT, "cuArrayCreate_v2") ? "found" : "null");
		return 0;
	}
	void *lib = dlopen(argv[1], strcmp(argv[2], "now") == 0 ? RTLD_NOW : RTLD_LAZY);
	if (lib == NULL) {
		printf("dlopen: %s\n", dlerror());
		return 3;
	}
	int (*call)(void) = (int (*)(void))dlsym(lib, "newer_driver_call");
	fflush(stdout);
	printf("returned %d\n", call ? call() : -1);
	return 0;
}
