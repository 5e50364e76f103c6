/* Preloaded into an exporter for the interposer's tests: an answer that
 * carries a descriptor ("ok" with SCM_RIGHTS) is sent 2 s late, so that a
 * park can come while an importer is being given the exporter's memory. */
#include <dlfcn.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
	static ssize_t (*real)(int, const struct msghdr *, int);
	if (real == NULL)
		*(void **)&real = dlsym(RTLD_NEXT, "sendmsg");
	if (m->msg_controllen && m->msg_iovlen && m->msg_iov[0].iov_len >= 3 &&
	    memcmp(m->msg_iov[0].iov_base, "ok\n", 3) == 0) {
		static const char s[] = "slow_fd_answer: the descriptor's answer waits 2 s\n";
		(void)!write(2, s, sizeof(s) - 1);
		sleep(2);
	}
	return real(fd, m, flags);
}
