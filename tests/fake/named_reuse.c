#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "named.h"

/* --reuse-tid: a thread ends inside a driver call (cancelled while the
 * fault "sync delay=..." holds it in cuCtxSynchronize), and another thread
 * of the process, which never calls the driver, is given its id: what the
 * ended thread left in the gate must not hold a park back. */

static cu_ctx_sync_fn sync_fn;
static volatile pid_t first_tid, second_tid;

static void *dies_inside(void *arg)
{
	(void)arg;
	first_tid = (pid_t)syscall(SYS_gettid);
	sync_fn();
	return NULL;
}

static void *lives_on(void *arg)
{
	(void)arg;
	second_tid = (pid_t)syscall(SYS_gettid);
	for (;;)
		pause();
	return NULL;
}

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, ms % 1000 * 1000000L };
	nanosleep(&ts, NULL);
}

/* The next thread created gets id TID (the PID namespace's last id, which
 * its root may set); -1 where that cannot be set. */
static int next_id(pid_t tid)
{
	int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char num[16];
	int n = snprintf(num, sizeof(num), "%d", (int)tid - 1);
	int rc = write(fd, num, (size_t)n) == n ? 0 : -1;
	close(fd);
	return rc;
}

int named_reuse_tid(void *(*rt)(const char *))
{
	sync_fn = (cu_ctx_sync_fn)rt("cuCtxSynchronize");
	pthread_t a, b;
	if (pthread_create(&a, NULL, dies_inside, NULL) != 0)
		return -1;
	nap_ms(300); /* inside cuCtxSynchronize by now */
	pthread_cancel(a);
	pthread_join(a, NULL);
	int set = next_id(first_tid);
	if (pthread_create(&b, NULL, lives_on, NULL) != 0)
		return -1;
	pthread_detach(b);
	while (second_tid == 0)
		nap_ms(1);
	printf("reuse tid=%d again=%d set=%d\n", (int)first_tid, second_tid == first_tid, set == 0);
	fflush(stdout);
	return 0;
}
