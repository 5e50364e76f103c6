/* A library that stands for one an attacker would name in CUDASNAP_LIBCUDA:
 * its constructor, which runs as soon as the library is loaded, appends a
 * line to the file named by ENVMARK_FILE saying which file was loaded and
 * into which process (uid, euid, AT_SECURE). test_secure_env.py looks for
 * that line to tell whether cudasnap loaded it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <unistd.h>

__attribute__((constructor)) static void leave_mark(void)
{
	const char *path = getenv("ENVMARK_FILE");
	Dl_info self = { 0 };
	if (!path || !*path)
		return;
	FILE *f = fopen(path, "a");
	if (!f)
		return;
	dladdr((void *)leave_mark, &self);
	fprintf(f, "loaded=%s uid=%u euid=%u at_secure=%lu\n", self.dli_fname ? self.dli_fname : "?",
		(unsigned)getuid(), (unsigned)geteuid(), getauxval(AT_SECURE));
	fclose(f);
}
