/* Preloaded into an interposed program for the interposer's tests: once
 * the file GONE_AFTER_STATUS names exists, the next status answer is sent
 * and then the control socket's file removed, as a cleaner of /dev/shm
 * would between a checkpoint's own checks and its transaction. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	static ssize_t (*real)(int, const void *, size_t, int);
	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "send");
	ssize_t r = real(fd, buf, len, flags);
	const char *trigger = getenv("GONE_AFTER_STATUS");
	struct sockaddr_un a;
	socklen_t alen = sizeof(a);
	if (r > 0 && len >= 11 && memcmp(buf, "ok version=", 11) == 0 && trigger && access(trigger, F_OK) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &alen) == 0 && a.sun_family == AF_UNIX && a.sun_path[0]) {
		unlink(a.sun_path);
		unlink(trigger);
	}
	return r;
}
