/* The bindings check (bindings.c) within a bound. It reads the loaded
 * objects under the lock of the loader's list of them (objects.c), and a
 * thread of the program holds that lock while a callback of its own
 * dl_iterate_phdr runs; such a callback may call the driver, which a
 * closed gate holds. Waited for without a bound, the check and that thread
 * would wait for each other for good, the gate closed. So the check runs
 * on a thread of its own, and the park (or a question) waits for it at
 * most WAIT_MS; one that has not ended by then ends by itself once the
 * program's thread lets go of the list (after the gate opens), and its
 * answer is dropped. At most one check is out at a time: while one is,
 * the answer is the same refusal, at once.
 *
 * A child of fork() answers no park (control.c forgets the socket in it),
 * so a check left out in the parent is not the child's. */
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "park.h"

/* A status that reads every object answers in 1-15 ms for the test
 * programs, with the sanitizers too (objects found clean are not read
 * again). */
#define WAIT_MS 1000

#define HELD \
	"a thread of the program holds the loader's list of objects (dl_iterate_phdr) while it calls the " \
	"driver, or held it for over 1 s"

enum { RUNNING, DONE };

struct job {
	atomic_int state; /* a futex word */
	atomic_int refs; /* the waiter's and the thread's */
	int rc;
	char why[256];
};

static struct job *_Atomic out; /* the check under way, NULL when none */

static void put(struct job *j)
{
	if (atomic_fetch_sub(&j->refs, 1) == 1)
		free(j);
}

static void *check(void *arg)
{
	struct job *j = arg;
	j->rc = park_bindings_check(j->why, sizeof(j->why));
	struct job *me = j;
	atomic_compare_exchange_strong(&out, &me, NULL);
	atomic_store(&j->state, DONE);
	syscall(SYS_futex, &j->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	put(j);
	return NULL;
}

static int start(struct job *j)
{
	/* The thread must take no signal meant for the program. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	int rc = pthread_create(&t, &at, check, j);
	pthread_attr_destroy(&at);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc == 0 ? 0 : -1;
}

static bool ended_within(struct job *j, unsigned ms)
{
	double until = park_now() + ms / 1000.0;
	while (atomic_load(&j->state) == RUNNING) {
		double left = until - park_now();
		if (left <= 0)
			return false;
		struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
		syscall(SYS_futex, &j->state, FUTEX_WAIT_PRIVATE, RUNNING, &ts, NULL, 0);
	}
	return true;
}

int park_bindings_check_within(char *why, size_t size)
{
	struct job *j = calloc(1, sizeof(*j));
	if (j == NULL) {
		snprintf(why, size, "out of memory");
		return -1;
	}
	atomic_init(&j->state, RUNNING);
	atomic_init(&j->refs, 2);
	struct job *none = NULL;
	if (!atomic_compare_exchange_strong(&out, &none, j)) {
		free(j);
		snprintf(why, size, "%s", HELD);
		return -1;
	}
	if (start(j) != 0) {
		atomic_store(&out, NULL);
		free(j);
		snprintf(why, size, "the interposer could not start a thread to read the loaded objects");
		return -1;
	}
	int rc = -1;
	if (ended_within(j, WAIT_MS)) {
		rc = j->rc;
		snprintf(why, size, "%s", j->why);
	} else {
		snprintf(why, size, "%s", HELD);
	}
	put(j);
	return rc;
}
