/* Calls with a deadline (lib/base/bounded.c). The moment a signal was first
 * noticed and the rollback's extra time are process-wide and only ever set
 * once, so the tests that interrupt run as their own process: the first
 * argument picks the group ("calls" or "interrupt"). Times are generous:
 * the suite also runs under the sanitizers on a busy machine. */
#include "bounded.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

/* ---- helpers ------------------------------------------------------------ */

typedef struct call {
	int in;
	int out;
	int sleep_ms;               /* how long fn takes */
	const void *self;           /* where fn found its argument */
	char text[64];
} call;

/* Calls that reached fn, and calls that fn finished. */
static atomic_int entered, finished;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
}

static int work(void *copy)
{
	call *c = copy;
	atomic_fetch_add(&entered, 1);
	if (c->sleep_ms)
		sleep_ms(c->sleep_ms);
	/* Written after the sleep: a call given up on writes only its own copy. */
	c->out = c->in * 2;
	c->self = copy;
	snprintf(c->text, sizeof(c->text), "done %d", c->in);
	atomic_fetch_add(&finished, 1);
	return 7;
}

/* Waits until every call that entered fn has finished, so that no worker
 * outlives the test that started it. */
static void drain(void)
{
	for (int i = 0; i < 1000 && atomic_load(&finished) < atomic_load(&entered); i++)
		sleep_ms(10);
	assert_int_equal(atomic_load(&finished), atomic_load(&entered));
	/* The worker drops its reference just after fn returns. */
	sleep_ms(50);
}

/* ---- calls that end, and calls given up on -------------------------------- */

static void fast_call(void **state)
{
	(void)state;
	call c = { .in = 21 };
	volatile int interrupted = 0;
	assert_int_equal(cs_bounded_call(work, &c, sizeof(c), 5.0, &interrupted, 1.0), 7);
	assert_int_equal(c.out, 42);
	assert_string_equal(c.text, "done 21");
	/* fn ran on a copy, which was copied back. */
	assert_non_null(c.self);
	assert_ptr_not_equal(c.self, &c);

	/* No deadline and no flag. */
	call d = { .in = 5 };
	assert_int_equal(cs_bounded_call(work, &d, sizeof(d), 0, NULL, 0), 7);
	assert_int_equal(d.out, 10);
	assert_int_equal(cs_bounded_abandoned(), 0);
	assert_false(cs_bounded_stopping(NULL, 0));
	assert_false(cs_bounded_stopping(&interrupted, 0));
	drain();
}

static int negative(void *copy)
{
	(void)copy;
	return -1000;
}

/* Any result of fn comes back as it is, a slow one within its deadline too. */
static void results_pass_through(void **state)
{
	(void)state;
	int x = 0;
	assert_int_equal(cs_bounded_call(negative, &x, sizeof(x), 1.0, NULL, 0), -1000);
	call c = { .in = 3, .sleep_ms = 100 };
	assert_int_equal(cs_bounded_call(work, &c, sizeof(c), 5.0, NULL, 0), 7);
	assert_int_equal(c.out, 6);
	assert_int_equal(cs_bounded_abandoned(), 0);
	drain();
}

/* The deadline passes: -2 soon after it, the caller's memory untouched, and
 * the worker left to finish on its own copy. The caller frees its argument
 * at once; the sanitizer build sees any later write into it. */
static void deadline_passes(void **state)
{
	(void)state;
	unsigned before = cs_bounded_abandoned();
	call *c = calloc(1, sizeof(*c));
	assert_non_null(c);
	c->in = 9;
	c->sleep_ms = 2000;
	double t0 = now_s();
	int r = cs_bounded_call(work, c, sizeof(*c), 0.2, NULL, 0);
	double took = now_s() - t0;
	assert_int_equal(r, CS_CU_TIMED_OUT);
	assert_true(took >= 0.15 && took <= 1.0);
	assert_int_equal(cs_bounded_abandoned(), before + 1);
	assert_int_equal(c->out, 0);
	assert_null(c->self);
	memset(c, 0xa5, sizeof(*c));
	free(c);

	/* Other calls go on while that worker still runs. */
	call d = { .in = 4 };
	assert_int_equal(cs_bounded_call(work, &d, sizeof(d), 5.0, NULL, 0), 7);
	assert_int_equal(d.out, 8);
	assert_true(atomic_load(&finished) < atomic_load(&entered));

	drain();
	assert_int_equal(cs_bounded_abandoned(), before + 1);
}

static void *timed_out_call(void *arg)
{
	(void)arg;
	call c = { .in = 1, .sleep_ms = 500 };
	int r = cs_bounded_call(work, &c, sizeof(c), 0.05, NULL, 0);
	return (void *)(intptr_t)r;
}

/* Calls given up on from several threads at once are each counted. */
static void abandoned_counts_every_call(void **state)
{
	(void)state;
	unsigned before = cs_bounded_abandoned();
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, timed_out_call, NULL), 0);
	for (int i = 0; i < 4; i++) {
		void *r;
		assert_int_equal(pthread_join(t[i], &r), 0);
		assert_int_equal((int)(intptr_t)r, CS_CU_TIMED_OUT);
	}
	assert_int_equal(cs_bounded_abandoned(), before + 4);
	drain();
}

/* ---- interrupts ------------------------------------------------------------ */

static volatile int flag;
static double flag_set_at;

static void *set_flag_later(void *arg)
{
	sleep_ms((int)(intptr_t)arg);
	flag_set_at = now_s();
	flag = 1;
	return NULL;
}

/* Before any signal nothing is stopping. */
static void not_stopping_before_signal(void **state)
{
	(void)state;
	assert_false(cs_bounded_stopping(&flag, 0.3));
	assert_false(cs_bounded_stopping(NULL, 0.3));
	call c = { .in = 2 };
	assert_int_equal(cs_bounded_call(work, &c, sizeof(c), 1.0, &flag, 0.3), 7);
	assert_int_equal(c.out, 4);
	drain();
}

/* A flag set from another thread 0.2 s in, with a grace of 0.3 s, ends a
 * wait that its 10 s deadline would not have ended before about 0.5 s. */
static void interrupt_ends_wait(void **state)
{
	(void)state;
	unsigned before = cs_bounded_abandoned();
	pthread_t t;
	double t0 = now_s();
	assert_int_equal(pthread_create(&t, NULL, set_flag_later, (void *)(intptr_t)200), 0);
	call c = { .in = 1, .sleep_ms = 3000 };
	int r = cs_bounded_call(work, &c, sizeof(c), 10.0, &flag, 0.3);
	double took = now_s() - t0;
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(r, CS_CU_INTERRUPTED);
	assert_true(took >= 0.45 && took <= 1.2);
	assert_int_equal(cs_bounded_abandoned(), before + 1);
	assert_int_equal(c.out, 0);
}

/* Once the grace has passed, no new call starts: -3 at once, fn not run,
 * nothing abandoned. */
static void no_call_after_grace(void **state)
{
	(void)state;
	assert_true(cs_bounded_stopping(&flag, 0.3));
	unsigned before = cs_bounded_abandoned();
	int calls = atomic_load(&entered);
	call c = { .in = 1 };
	double t0 = now_s();
	assert_int_equal(cs_bounded_call(work, &c, sizeof(c), 10.0, &flag, 0.3), CS_CU_INTERRUPTED);
	assert_true(now_s() - t0 < 0.1);
	assert_int_equal(atomic_load(&entered), calls);
	assert_int_equal(c.out, 0);
	assert_int_equal(cs_bounded_abandoned(), before);
	/* Clearing the flag does not take the signal back. */
}

/* The rollback's extra time: calls run again until it too has passed,
 * counted from the moment the signal was first noticed; given only once. */
static void extend_lets_rollback_run(void **state)
{
	(void)state;
	cs_bounded_extend(1.0);
	assert_false(cs_bounded_stopping(&flag, 0.3));
	call c = { .in = 8 };
	assert_int_equal(cs_bounded_call(work, &c, sizeof(c), 5.0, &flag, 0.3), 7);
	assert_int_equal(c.out, 16);

	/* A call that would outlast the extra time is given up at its end:
	 * noticed at most a wait slice after the flag was set, plus 0.3 + 1.0. */
	call slow = { .in = 1, .sleep_ms = 3000 };
	int r = cs_bounded_call(work, &slow, sizeof(slow), 0, &flag, 0.3);
	double at = now_s() - flag_set_at;
	assert_int_equal(r, CS_CU_INTERRUPTED);
	assert_true(at >= 1.25 && at <= 2.2);

	/* A second extension is not given. */
	cs_bounded_extend(100.0);
	assert_true(cs_bounded_stopping(&flag, 0.3));
	int calls = atomic_load(&entered);
	assert_int_equal(cs_bounded_call(work, &c, sizeof(c), 5.0, &flag, 0.3), CS_CU_INTERRUPTED);
	assert_int_equal(atomic_load(&entered), calls);
	drain();
}

int main(int argc, char **argv)
{
	const struct CMUnitTest calls[] = {
		cmocka_unit_test(fast_call),
		cmocka_unit_test(results_pass_through),
		cmocka_unit_test(deadline_passes),
		cmocka_unit_test(abandoned_counts_every_call),
	};
	/* In this order: each step depends on the moments the one before set. */
	const struct CMUnitTest interrupt[] = {
		cmocka_unit_test(not_stopping_before_signal),
		cmocka_unit_test(interrupt_ends_wait),
		cmocka_unit_test(no_call_after_grace),
		cmocka_unit_test(extend_lets_rollback_run),
	};
	const char *group = argc > 1 ? argv[1] : "";
	if (strcmp(group, "calls") == 0)
		return cmocka_run_group_tests_name("bounded calls", calls, NULL, NULL);
	if (strcmp(group, "interrupt") == 0)
		return cmocka_run_group_tests_name("bounded interrupt", interrupt, NULL, NULL);
	fprintf(stderr, "usage: %s calls|interrupt\n", argv[0]);
	return 2;
}
