#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* libfakecuda-shim.so: a dlsym wrapper of the kind that tracers and
 * GPU-sharing shims preload (after the parking interposer when both are
 * in LD_PRELOAD, or from /etc/ld.so.preload): it writes each lookup of a
 * cu* name on stderr ('shim: dlsym NAME') and passes it on. */

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name);

static void *(*real)(void *, const char *);

/* A sanitizer's runtime looks its interceptors' real functions up through
 * this dlsym before it has set itself up: no checks here. */
__attribute__((no_sanitize("address", "undefined"))) void *dlsym(void *handle, const char *name)
{
	if (real == NULL) {
		*(void **)&real = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (real == NULL)
			*(void **)&real = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	}
	const char *what = name;
	if (what != NULL && strncmp(what, "cu", 2) == 0) {
		char line[300];
		int n = snprintf(line, sizeof(line), "shim: dlsym %s\n", what);
		if (n > 0 && (size_t)n < sizeof(line))
			(void)!write(2, line, (size_t)n);
	}
	return real ? real(handle, name) : NULL;
}
