#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* fakecuda-nodriver LIBCUDA: a program that is not linked with the driver
 * and asks the process's symbol lookup for driver functions, before it
 * loads the driver (LIBCUDA, with RTLD_GLOBAL) and after. Prints
 * 'before=<found|none>' and 'after=<found|none> handle_owner=<object>
 * default_owner=<object>': the object that holds what dlsym answered with
 * the driver's handle and with RTLD_DEFAULT. */

static const char *owner(void *fn)
{
	Dl_info info;
	if (fn == NULL)
		return "none";
	if (dladdr(fn, &info) == 0 || info.dli_fname == NULL)
		return "?";
	const char *slash = strrchr(info.dli_fname, '/');
	return slash ? slash + 1 : info.dli_fname;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	void *before = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
	printf("before=%s\n", before ? "found" : "none");
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
	if (lib == NULL) {
		fprintf(stderr, "%s\n", dlerror());
		return 2;
	}
	void *after = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
	printf("after=%s handle_owner=%s", after ? "found" : "none", owner(dlsym(lib, "cuLaunchKernel")));
	printf(" default_owner=%s\n", owner(dlsym(RTLD_DEFAULT, "cuLaunchKernel")));
	return 0;
}
