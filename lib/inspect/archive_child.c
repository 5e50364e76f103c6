/* Reading an archive in a child process: libarchive decompresses what a
 * stranger wrote, and a few hundred KiB can ask it for gigabytes of memory
 * (an xz dictionary) or hours of work. The child may grow its address
 * space by a bounded amount (RLIMIT_AS, over what it had when forked, so
 * that a sanitizer's reserved shadow does not count) and is killed at the
 * deadline; it hands back the members it read through a pipe, each within
 * its bound, and this process alone parses them. */
#include "archive.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

/* What the child writes first; then, for each member, its length (SIZE_MAX:
 * not found) and its bytes. */
typedef struct reply_head {
	int rc;
	cs_error err;
	cs_archive_info info;
} reply_head;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The address space the process has now (VmSize), 0 unknown. */
static unsigned long long address_space(void)
{
	char buf[128], *end;
	if (cs_read_at(AT_FDCWD, "/proc/self/statm", buf, sizeof(buf)) <= 0)
		return 0;
	errno = 0;
	unsigned long long pages = strtoull(buf, &end, 10);
	if (errno || end == buf)
		return 0;
	return pages * (unsigned long long)sysconf(_SC_PAGESIZE);
}

static void limit(int resource, unsigned long long value)
{
	struct rlimit rl = { .rlim_cur = value, .rlim_max = value };
	if (setrlimit(resource, &rl) < 0) {
		/* a hard limit already lower: that one holds */
	}
}

/* In the child: read, write the reply, end. Never returns. */
__attribute__((noreturn)) static void child(cs_archive *a, int fd, int out, const char *what, cs_archive_member *m,
					    size_t n, const cs_archive_bounds *b)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	limit(RLIMIT_CORE, 0);
	unsigned long long vm = address_space();
	if (b->max_memory && vm)
		limit(RLIMIT_AS, vm + b->max_memory);
	if (b->seconds > 0)
		limit(RLIMIT_CPU, (unsigned long long)b->seconds + 2);
	reply_head h = { 0 };
	h.rc = cs_archive_read(a, fd, what, m, n, &b->lim, &h.info, &h.err);
	/* Out of memory is the bound this child reads within. */
	if (h.rc < 0 && h.err.status == CS_ESYS)
		snprintf(h.info.bound, sizeof(h.info.bound), "memory");
	int r = cs_write_all(out, &h, sizeof(h));
	for (size_t i = 0; r == 0 && i < n; i++) {
		/* found: 1 and its length (and its data, unless size_only) */
		size_t found = h.rc == 0 && m[i].found, len = found ? m[i].len : 0;
		r = cs_write_all(out, &found, sizeof(found));
		if (r == 0 && found)
			r = cs_write_all(out, &len, sizeof(len));
		if (r == 0 && found && !m[i].size_only)
			r = cs_write_all(out, m[i].data, len);
	}
	/* What it holds goes with it; closed, so that a checker of descriptors
	 * left open at exit (valgrind --track-fds) sees none. */
	close(out);
	close(fd);
	_exit(r == 0 ? 0 : 1);
}

/* Reads len bytes from fd before deadline (CLOCK_MONOTONIC seconds):
 * 0, -ETIMEDOUT, or -EPIPE when the writer ended first. */
static int read_before(int fd, void *buf, size_t len, double deadline)
{
	for (size_t got = 0; got < len;) {
		double left = deadline - now_s();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int ready = poll(&p, 1, left > 1e6 ? -1 : (int)(left * 1000) + 1);
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0)
			continue;
		ssize_t r = read(fd, (char *)buf + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EPIPE;
		got += (size_t)r;
	}
	return 0;
}

/* The members of the reply, each checked against its bound again. */
static int read_members(int in, cs_archive_member *m, size_t n, double deadline)
{
	for (size_t i = 0; i < n; i++) {
		size_t found = 0, len = 0;
		int r = read_before(in, &found, sizeof(found), deadline);
		if (r == 0 && found)
			r = read_before(in, &len, sizeof(len), deadline);
		if (r < 0)
			return r;
		if (!found)
			continue;
		if (m[i].size_only) {
			m[i].len = len;
			m[i].found = true;
			continue;
		}
		if (len > m[i].max)
			return -EPROTO;
		m[i].data = malloc(len + 1);
		if (!m[i].data)
			return -ENOMEM;
		r = read_before(in, m[i].data, len, deadline);
		if (r < 0)
			return r;
		m[i].data[len] = '\0';
		m[i].len = len;
		m[i].found = true;
	}
	return 0;
}

/* What the child's end says when it sent no whole reply. */
static int child_failed(const char *what, int r, int status, const cs_archive_bounds *b, cs_archive_info *info,
			cs_error *err)
{
	if (r == -ETIMEDOUT || (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)) {
		snprintf(info->bound, sizeof(info->bound), "time");
		return cs_error_set(
			err, CS_EUSAGE,
			"An archive of a checkpoint this large is read with a higher --timeout (0: no bound).",
			"%s: reading it took longer than the %.0f s inspect gives it (bound: --timeout %.0f): it "
			"is not read further",
			what, b->seconds, b->seconds);
	}
	if (r == -ENOMEM)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	if (WIFSIGNALED(status))
		return cs_error_set(err, CS_EUSAGE, NULL,
				    "%s: the process that read it was killed by signal %d (%s), within %llu MiB of "
				    "memory: this is not a checkpoint cudasnap reads",
				    what, WTERMSIG(status), strsignal(WTERMSIG(status)), b->max_memory >> 20);
	return cs_error_set(err, CS_EUSAGE, NULL,
			    "%s: the process that read it ended (status %d) within %llu MiB of memory without an answer: "
			    "this is not a checkpoint cudasnap reads",
			    what, WIFEXITED(status) ? WEXITSTATUS(status) : -1, b->max_memory >> 20);
}

/* The child's reply as this process's answer. */
static int collect(int in, pid_t pid, const char *what, cs_archive_member *m, size_t n, const cs_archive_bounds *b,
		   cs_archive_info *info, cs_error *err)
{
	double deadline = b->seconds > 0 ? now_s() + b->seconds : 1e300;
	reply_head h;
	int r = read_before(in, &h, sizeof(h), deadline);
	if (r == 0 && h.rc == 0)
		r = read_members(in, m, n, deadline);
	if (r < 0)
		kill(pid, SIGKILL);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (r < 0) {
		cs_archive_members_free(m, n);
		return child_failed(what, r, status, b, info, err);
	}
	*info = h.info;
	if (h.rc == 0)
		return 0;
	*err = h.err;
	if (strcmp(h.info.bound, "memory") == 0)
		cs_error_set(err, CS_EUSAGE, NULL,
			     "%s: reading it needs more than the %llu MiB of memory inspect gives its reader (bound: "
			     "memory, %llu MiB; %s): this is not a checkpoint cudasnap reads",
			     what, b->max_memory >> 20, b->max_memory >> 20, h.err.message);
	return h.rc;
}

int cs_archive_read_bounded(cs_archive *a, int fd, const char *what, cs_archive_member *m, size_t n,
			    const cs_archive_bounds *b, cs_archive_info *info, cs_error *err)
{
	*info = (cs_archive_info){ 0 };
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return cs_error_errno(err, CS_ESYS, errno, NULL, "cannot make a pipe");
	_cleanup_close_ int in = p[0], out = p[1];
	pid_t pid = fork();
	if (pid < 0)
		return cs_error_errno(err, CS_ESYS, errno, NULL, "cannot start a process to read %s", what);
	if (pid == 0) {
		close(in);
		child(a, fd, out, what, m, n, b);
	}
	close(TAKE_FD(out));
	return collect(in, pid, what, m, n, b, info, err);
}
