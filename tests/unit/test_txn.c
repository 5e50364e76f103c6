/* The transaction engine (lib/txn/txn.c) against a scripted driver and a fake
 * /proc, for what the integration tests cannot arrange: a target's PID that
 * names another process between two driver calls. The engine must then
 * leave that PID alone (the driver would act on the stranger) and report
 * the target as exited. */
#include "cudasnap.h"
#include "stubcuda.h"
#include "testutil.h"

#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *stub_path;
static struct {
	void (*reset)(void);
	void (*add)(int pid, int state);
	void (*fail_on)(int op, int pid, int result);
	void (*set_hook)(stub_hook h);
	size_t (*log)(const stub_call **calls);
	int (*get_state)(int pid, int *state);
} stub;

typedef struct fixture {
	char *proc;
	cs_driver *d;
	cs_target t[2];
} fixture;

static fixture *current;
/* The hook: when the driver gets call hook_op on hook_pid, reuse_pid starts
 * naming a process with another start time (or, with zombie set, exits and
 * stays a zombie, start time unchanged). */
static int hook_op, hook_pid, reuse_pid;
static char zombie; /* 0, or the state letter of the dead process ('Z', or 'E' for exiting) */

/* state 'E': running, but with PF_EXITING in the flags (field 9). */
static void fake_process_in(const char *proc, pid_t pid, unsigned long long start, char state)
{
	char rel[32], *line = tu_stat_line(pid, "app", state == 'E' ? 'R' : state, 1, start);
	char *flags = strstr(line, " 4194560 ");
	assert_non_null(flags);
	if (state == 'E')
		memcpy(flags, " 4194564 ", 9);
	snprintf(rel, sizeof(rel), "%d/stat", (int)pid);
	tu_write_str(proc, rel, line);
	free(line);
}

static void fake_process(const char *proc, pid_t pid, unsigned long long start)
{
	fake_process_in(proc, pid, start, 'S');
}

static void reuse_hook(int op, int pid)
{
	if (op == hook_op && pid == hook_pid)
		fake_process_in(current->proc, reuse_pid, zombie ? 1000 + (unsigned)(reuse_pid - 100) : 777777,
				zombie ? zombie : 'S');
}

static void load_stub(void)
{
	void *h = dlopen(stub_path, RTLD_NOW);
	assert_non_null(h);
	*(void **)&stub.reset = dlsym(h, "stub_reset");
	*(void **)&stub.add = dlsym(h, "stub_add");
	*(void **)&stub.fail_on = dlsym(h, "stub_fail");
	*(void **)&stub.set_hook = dlsym(h, "stub_set_hook");
	*(void **)&stub.log = dlsym(h, "stub_log");
	*(void **)&stub.get_state = dlsym(h, "cuCheckpointProcessGetState");
	assert_true(stub.reset && stub.add && stub.fail_on && stub.set_hook && stub.log && stub.get_state);
}

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->proc = tu_mkdtemp();
	fake_process(f->proc, 100, 1000);
	fake_process(f->proc, 101, 1001);
	assert_int_equal(setenv("CUDASNAP_PROC_DIR", f->proc, 1), 0);
	assert_int_equal(setenv("CUDASNAP_LIBCUDA", stub_path, 1), 0);
	cs_error err;
	assert_int_equal(cs_driver_open(&f->d, &err), 0);
	if (!stub.reset)
		load_stub();
	stub.reset();
	stub.add(100, CS_STATE_RUNNING);
	stub.add(101, CS_STATE_RUNNING);
	stub.set_hook(reuse_hook);
	hook_op = hook_pid = reuse_pid = -1;
	zombie = 0;
	f->t[0] = (cs_target){ .pid = 100, .start_time = 1000, .comm = "a", .order = 0 };
	f->t[1] = (cs_target){ .pid = 101, .start_time = 1001, .comm = "b", .order = 1 };
	current = f;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	cs_driver_free(f->d);
	tu_rmrf(f->proc);
	free(f->proc);
	free(f);
	unsetenv("CUDASNAP_PROC_DIR");
	unsetenv("CUDASNAP_LIBCUDA");
	return 0;
}

/* How many calls op the driver got for pid (-1: any op but GetState). */
static size_t calls(int op, int pid)
{
	const stub_call *c;
	size_t n = stub.log(&c), k = 0;
	for (size_t i = 0; i < n; i++)
		k += c[i].pid == pid && (op < 0 ? c[i].op != STUB_GET_STATE : c[i].op == op);
	return k;
}

static int driver_state(int pid)
{
	int s = -1;
	stub.set_hook(NULL);
	assert_int_equal(stub.get_state(pid, &s), 0);
	stub.set_hook(reuse_hook);
	return s;
}

static int checkpoint(fixture *f, cs_txn_result *res)
{
	cs_txn_opts o = { .op = CS_OP_CHECKPOINT, .sequential = true };
	return cs_txn_run(f->d, &o, f->t, 2, res);
}

static void test_baseline_completes(void **state)
{
	fixture *f = *state;
	cs_txn_result res;
	assert_int_equal(checkpoint(f, &res), 0);
	assert_int_equal(res.outcome, CS_OUTCOME_DONE);
	assert_int_equal(driver_state(100), CS_STATE_CHECKPOINTED);
	assert_int_equal(driver_state(101), CS_STATE_CHECKPOINTED);
}

/* 100 is locked; while 101 is being locked, pid 100 comes to name another
 * process. The checkpoint step and the rollback must not touch pid 100. */
static void test_reuse_between_steps(void **state)
{
	fixture *f = *state;
	hook_op = STUB_LOCK, hook_pid = 101, reuse_pid = 100;
	cs_txn_result res;
	assert_true(checkpoint(f, &res) < 0);
	assert_int_equal(res.outcome, CS_OUTCOME_ROLLED_BACK);
	assert_int_equal(calls(STUB_LOCK, 100), 1);
	assert_int_equal(calls(-1, 100), 1); /* the lock, nothing after it */
	assert_true(f->t[0].exited);
	assert_false(f->t[1].exited);
	assert_int_equal(f->t[1].state, CS_STATE_RUNNING);
	assert_int_equal(driver_state(101), CS_STATE_RUNNING);
	assert_non_null(strstr(res.error.message, "exited"));
}

/* The last checkpoint fails, and meanwhile pid 100 (checkpointed) was
 * reused: the rollback's restore and unlock must skip it, and the process
 * that was 100 is lost (its GPU state lived in its own host memory), never
 * reported as rolled back. */
static void test_reuse_before_rollback(void **state)
{
	fixture *f = *state;
	hook_op = STUB_CHECKPOINT, hook_pid = 101, reuse_pid = 100;
	stub.fail_on(STUB_CHECKPOINT, 101, 999);
	cs_txn_result res;
	assert_true(checkpoint(f, &res) < 0);
	assert_int_equal(calls(STUB_RESTORE, 100), 0);
	assert_int_equal(calls(STUB_UNLOCK, 100), 0);
	assert_true(f->t[0].exited);
	assert_true(f->t[0].lost);
	assert_int_equal(res.lost, 1);
	assert_int_equal(res.outcome, CS_OUTCOME_INCOMPLETE);
	assert_int_equal(calls(STUB_UNLOCK, 101), 1);
	assert_int_equal(driver_state(101), CS_STATE_RUNNING);
}

/* Reused before the command began: not even GetState goes to the pid, and
 * the process that was 101 is left out while 100 is checkpointed: a process
 * that exits before anything is done to it fails nothing. */
static void test_reuse_before_plan(void **state)
{
	fixture *f = *state;
	fake_process(f->proc, 101, 424242);
	cs_txn_result res;
	assert_int_equal(checkpoint(f, &res), 0);
	assert_int_equal(res.outcome, CS_OUTCOME_DONE);
	assert_int_equal(calls(STUB_GET_STATE, 101), 0);
	assert_int_equal(calls(-1, 101), 0);
	assert_true(f->t[1].exited);
	assert_true(f->t[1].vanished);
	assert_false(f->t[1].lost);
	assert_int_equal(res.vanished, 1);
	assert_int_equal(res.acted, 1);
	assert_int_equal(driver_state(100), CS_STATE_CHECKPOINTED);
}

/* 100 exits while 101 is locked, and its parent has not reaped it yet: the
 * zombie keeps pid and start time, but is gone for the driver. It must be
 * reported as exited, not as a process the rollback left locked. */
static void dead_between_steps(fixture *f, char how)
{
	hook_op = STUB_LOCK, hook_pid = 101, reuse_pid = 100, zombie = how;
	cs_txn_result res;
	assert_true(checkpoint(f, &res) < 0);
	assert_int_equal(res.outcome, CS_OUTCOME_ROLLED_BACK);
	assert_int_equal(calls(-1, 100), 1);
	assert_true(f->t[0].exited);
	assert_false(f->t[0].rollback_failed);
	assert_int_equal(driver_state(101), CS_STATE_RUNNING);
}

static void test_zombie_is_exited(void **state)
{
	dead_between_steps(*state, 'Z');
}

/* Still running as far as the state letter goes, but exiting (PF_EXITING):
 * a large process spends seconds there while the kernel frees its memory. */
static void test_exiting_is_exited(void **state)
{
	dead_between_steps(*state, 'E');
}

/* A restore: 101 is reused while 100 is restored. 101 stays untouched,
 * left out as exited before it was touched, and 100 is restored. */
static void test_reuse_during_restore(void **state)
{
	fixture *f = *state;
	stub.reset();
	stub.add(100, CS_STATE_CHECKPOINTED);
	stub.add(101, CS_STATE_CHECKPOINTED);
	stub.set_hook(reuse_hook);
	hook_op = STUB_RESTORE, hook_pid = 100, reuse_pid = 101;
	cs_txn_opts o = { .op = CS_OP_RESTORE, .sequential = true };
	cs_txn_result res;
	assert_int_equal(cs_txn_run(f->d, &o, f->t, 2, &res), 0);
	assert_int_equal(calls(-1, 101), 0);
	assert_true(f->t[1].exited);
	assert_true(f->t[1].vanished);
	assert_int_equal(res.outcome, CS_OUTCOME_DONE);
	assert_int_equal(driver_state(100), CS_STATE_RUNNING);
}

/* After a restore that failed for a target the driver can never restore:
 * the command for the others names exactly those it left checkpointed, and
 * falls back to a sentence when the list does not fit. */
static void test_restore_others(void **state)
{
	(void)state;
	cs_target t[5] = { 0 };
	for (int i = 0; i < 5; i++)
		t[i] = (cs_target){ .pid = 10 + i,
				    .state = CS_STATE_CHECKPOINTED,
				    .initial_state = CS_STATE_CHECKPOINTED };
	char buf[256] = "untouched";
	assert_false(cs_txn_restore_others(t, 5, buf, sizeof(buf))); /* none unrestorable */
	assert_string_equal(buf, "untouched");
	t[1].unrestorable = t[1].failed = true;
	t[2].vanished = true;
	t[3].abandoned = true; /* its state is unknown: not a restore to suggest */
	assert_true(cs_txn_restore_others(t, 5, buf, sizeof(buf)));
	assert_string_equal(buf, "cudasnap restore --pid 10 --pid 14");
	char small[24];
	assert_true(cs_txn_restore_others(t, 5, small, sizeof(small)));
	assert_string_equal(small, "cudasnap restore --pid ");
	t[0].state = t[4].state = CS_STATE_RUNNING; /* nobody left to restore */
	assert_false(cs_txn_restore_others(t, 5, buf, sizeof(buf)));
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s STUB_LIBCUDA\n", argv[0]);
		return 2;
	}
	stub_path = argv[1];
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_baseline_completes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reuse_between_steps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reuse_before_rollback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reuse_before_plan, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reuse_during_restore, setup, teardown),
		cmocka_unit_test_setup_teardown(test_zombie_is_exited, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exiting_is_exited, setup, teardown),
		cmocka_unit_test(test_restore_others),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
