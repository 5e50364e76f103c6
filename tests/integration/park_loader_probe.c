/* The library park-loader dlopens (park_loader.c): its constructor runs
 * with the loader's lock held, says so, and after a moment looks up a cu*
 * name in the program, as a library that binds driver functions when it
 * is loaded does. */
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void probe(void)
{
	const char *fd = getenv("PARK_LOADER_FD");
	if (fd == NULL || write(atoi(fd), "c", 1) != 1)
		return;
	usleep(300000); /* the main thread is loading the driver by now */
	void *self = dlopen(NULL, RTLD_NOW);
	if (self)
		dlsym(self, "cuParkLoaderProbe");
}
