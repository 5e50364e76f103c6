#include "helper.h"
#include "host.h"
#include "pool.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

/* What the child sends before its answer. */
typedef struct frame {
	uint32_t magic;
	int32_t rc;
	uint64_t len;
} frame;
#define FRAME_MAGIC 0x63736870u /* "cshp" */
#define REPLY_MAX (64u << 20)

/* The child forgets CRIU's signal handlers (a SIGCHLD handler of CRIU's
 * would act on CRIU's behalf) and dies with CRIU. */
static __attribute__((noreturn)) void child(int fd, pid_t parent, helper_fn fn, void *ctx)
{
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			signal(sig, SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(127);
	void *out = NULL;
	size_t len = 0;
	int rc = fn(ctx, &out, &len);
	frame f = { .magic = FRAME_MAGIC, .rc = rc, .len = out ? len : 0 };
	if (cs_write_all(fd, &f, sizeof(f)) < 0 || (f.len && cs_write_all(fd, out, f.len) < 0))
		_exit(126);
	_exit(0); /* never CRIU's atexit handlers, never back into CRIU */
}

/* Reads everything the child writes until it closes the pipe, at most
 * until deadline (monotonic seconds). Returns 0 at end of file. */
static int collect(int fd, double deadline, char **buf, size_t *len)
{
	size_t cap = 0;
	for (;;) {
		double left = deadline - cs_now();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r <= 0)
			continue;
		if (cs_grow(buf, &cap, *len + 65536, 1) < 0)
			return -ENOMEM;
		ssize_t n = read(fd, *buf + *len, 65536);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		*len += (size_t)n;
		if (*len > REPLY_MAX)
			return -E2BIG;
	}
}

/* Reaps the child, killing it first unless it ended on its own. Waits at
 * most a few seconds: a killed process goes at once. */
static int reap(pid_t pid, bool kill_it)
{
	if (kill_it)
		kill(pid, SIGKILL);
	for (double until = cs_now() + 5;;) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return st;
		if (r < 0)
			return errno == ECHILD ? 0 : -1; /* reaped by someone else: the frame tells */
		if (cs_now() > until) {
			kill(pid, SIGKILL);
			until = cs_now() + 5;
		}
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

static int parse(const char *what, const char *buf, size_t len, int st, void **reply, size_t *rlen)
{
	frame f;
	if (len < sizeof(f) || (memcpy(&f, buf, sizeof(f)), f.magic != FRAME_MAGIC) || f.len != len - sizeof(f)) {
		plog(CS_CRIU_LOG_ERROR, "the helper process for %s ended without an answer (%s %d)", what,
		     WIFSIGNALED(st) ? "signal" : "exit status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		return -1;
	}
	if (f.len) {
		*reply = malloc(f.len);
		if (!*reply)
			return -1;
		memcpy(*reply, buf + sizeof(f), f.len);
		*rlen = f.len;
	}
	return f.rc;
}

int helper_run(const char *what, helper_fn fn, void *ctx, double seconds, void **reply, size_t *len)
{
	*reply = NULL;
	*len = 0;
	/* CRIU reaps with wait4(-1) in its SIGCHLD handlers: this child is ours. */
	sigset_t chld, old;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		plog(CS_CRIU_LOG_ERROR, "%s: pipe: %s", what, strerror(errno));
		return -1;
	}
	pid_t parent = getpid(), pid = fork();
	if (pid == 0) {
		close(p[0]);
		child(p[1], parent, fn, ctx);
	}
	close(p[1]);
	_cleanup_close_ int rfd = p[0];
	if (pid < 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		plog(CS_CRIU_LOG_ERROR, "%s: fork: %s", what, strerror(errno));
		return -1;
	}
	_cleanup_free_ char *buf = NULL;
	size_t n = 0;
	int r = collect(rfd, cs_now() + seconds, &buf, &n);
	int st = reap(pid, r != 0);
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (r == -ETIMEDOUT) {
		plog(CS_CRIU_LOG_ERROR,
		     "%s did not end within %.0f s; its helper process was killed (a driver call it left in flight "
		     "completes inside its process)",
		     what, seconds);
		return -1;
	}
	if (r < 0) {
		plog(CS_CRIU_LOG_ERROR, "%s: reading the helper's answer: %s", what, strerror(-r));
		return -1;
	}
	return parse(what, buf, n, st, reply, len);
}
