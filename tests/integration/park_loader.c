/* A program whose first driver call meets the loader's lock: one thread
 * dlopens park_loader_probe.so, whose constructor (run with the loader's
 * lock held) looks up a cu* function with dlsym, which the interposer
 * answers by asking for the driver; meanwhile the main thread makes the
 * program's first driver call, for which the interposer loads the driver
 * (dlopen: the loader's lock). Neither may wait for the other. Prints
 * "ok" and exits 0 once both are through.
 *
 *   park-loader PROBE.so   (LD_PRELOAD=libcudasnap-park.so, the driver
 *                           findable as libcuda.so.1, which it loads first) */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* What the probe looks up: a cu* name, which the interposer checks against
 * the driver (exported: the executable is linked with --export-dynamic). */
int cuParkLoaderProbe(void);
int cuParkLoaderProbe(void)
{
	return 0;
}

static void *load(void *path)
{
	return dlopen(path, RTLD_NOW);
}

int main(int argc, char **argv)
{
	typedef int (*get_proc_fn)(const char *, void **, int, unsigned long long, void *);
	/* The driver loaded, as a CUDA program has it (linked, or the
	 * runtime's dlopen): the interposer answers its names only then. */
	void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	get_proc_fn get = driver ? (get_proc_fn)dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2") : NULL;
	int p[2];
	char fd[16], byte;
	if (argc != 2 || get == NULL || pipe(p) != 0) {
		fprintf(stderr, "usage: park-loader PROBE.so, with the interposer preloaded\n");
		return 2;
	}
	snprintf(fd, sizeof(fd), "%d", p[1]);
	setenv("PARK_LOADER_FD", fd, 1);
	pthread_t t;
	if (pthread_create(&t, NULL, load, argv[1]) != 0 || read(p[0], &byte, 1) != 1)
		return 2;
	/* the probe's constructor runs now, and looks its name up in a moment */
	void *fn = NULL;
	int rc = get("cuInit", &fn, 12000, 0, NULL);
	void *lib = NULL;
	pthread_join(t, &lib);
	printf("ok get=%d probe=%s\n", rc, lib ? "loaded" : dlerror());
	return 0;
}
