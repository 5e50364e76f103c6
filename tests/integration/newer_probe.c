/* A library that checks whether the driver has a function before anything
 * uses it (newer_driver.c's probe mode): dlsym(RTLD_NEXT) from a library
 * loaded after the interposer, which never reaches the interposer's
 * definition of the name. */
#include <dlfcn.h>

int newer_probe(void);
int newer_probe(void)
{
	return dlsym(RTLD_NEXT, "cuArrayCreate_v2") != 0;
}
