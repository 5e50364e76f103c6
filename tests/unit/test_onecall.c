/* Single calls (lib/onecall/onecall.c) against a scripted driver (stubcuda.c): the
 * rules the cuda-checkpoint drop-in keeps without a transaction. The target
 * is this test's own process, or a child it stopped, as /proc shows them:
 * only the driver is a double, so the claims, /proc and the history are
 * the real ones. */
#include "cudasnap.h"
#include "claim.h"
#include "history.h"
#include "onecall.h"
#include "state.h"
#include "stubcuda.h"
#include "testutil.h"

#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static const char *stub_path;
static struct {
	void (*reset)(void);
	void (*add)(int pid, int state);
	void (*fail_on)(int op, int pid, int result);
	size_t (*log)(const stub_call **calls);
} stub;

typedef struct fixture {
	char *state, *dev;
	cs_driver *d;
	pid_t pid;
	cs_onecall *oc;
} fixture;

static void load_stub(void)
{
	void *h = dlopen(stub_path, RTLD_NOW);
	assert_non_null(h);
	*(void **)&stub.reset = dlsym(h, "stub_reset");
	*(void **)&stub.add = dlsym(h, "stub_add");
	*(void **)&stub.fail_on = dlsym(h, "stub_fail");
	*(void **)&stub.log = dlsym(h, "stub_log");
	assert_true(stub.reset && stub.add && stub.fail_on && stub.log);
}

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->state = tu_mkdtemp();
	f->dev = tu_fake_devdir();
	assert_int_equal(setenv("CUDASNAP_STATE_DIR", f->state, 1), 0);
	assert_int_equal(setenv("CUDASNAP_DEV_DIR", f->dev, 1), 0);
	assert_int_equal(setenv("CUDASNAP_LIBCUDA", stub_path, 1), 0);
	assert_int_equal(setenv("CUDASNAP_LIBNVML", "/nonexistent/libnvidia-ml.so.1", 1), 0);
	cs_error err;
	assert_int_equal(cs_driver_open(&f->d, &err), 0);
	if (!stub.reset)
		load_stub();
	stub.reset();
	f->pid = getpid();
	stub.add(f->pid, CS_STATE_RUNNING);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	cs_onecall_free(f->oc);
	cs_driver_free(f->d);
	tu_rmrf(f->state);
	tu_rmrf(f->dev);
	free(f->state);
	free(f->dev);
	free(f);
	return 0;
}

static cs_onecall_opts opts(pid_t pid, cs_call call, bool toggle)
{
	return (cs_onecall_opts){
		.pid = pid, .call = call, .toggle = toggle, .command = "cuda-checkpoint", .front = "drop-in"
	};
}

/* How many calls op the driver got. */
static size_t calls(int op)
{
	const stub_call *c;
	size_t n = stub.log(&c), k = 0;
	for (size_t i = 0; i < n; i++)
		k += c[i].op == op;
	return k;
}

/* The newest entry of the history (read into log), and its only process. */
static json_object *last_entry(cs_history_log *log, json_object **proc)
{
	cs_error err;
	assert_int_equal(cs_history_read(-1, log, &err), 0);
	assert_true(log->n > 0);
	json_object *procs;
	assert_true(json_object_object_get_ex(log->e[0], "processes", &procs));
	assert_int_equal(json_object_array_length(procs), 1);
	*proc = json_object_array_get_idx(procs, 0);
	return log->e[0];
}

static const char *field(json_object *o, const char *key)
{
	json_object *v;
	return json_object_object_get_ex(o, key, &v) && v ? json_object_get_string(v) : NULL;
}

/* Another operation holds the process: refused before the driver is asked
 * anything, and the refusal is an operation of the history. A question
 * takes no claim, and is answered meanwhile. */
static void test_busy_is_refused_before_any_call(void **state)
{
	fixture *f = *state;
	_cleanup_(cs_claims_releasep) cs_claims other;
	cs_claims_init(&other);
	_cleanup_close_ int statefd = cs_state_open_existing(NULL);
	cs_error err;
	assert_int_equal(cs_claims_add(&other, statefd, f->pid, "self", "test", NULL, 0, &err), 0);

	cs_onecall_opts o = opts(f->pid, CS_CALL_LOCK, false);
	cs_onecall_refusal why;
	assert_true(cs_onecall_open(&f->oc, f->d, &o, &why) < 0);
	assert_string_equal(why.code, "busy");
	assert_true(why.err.message[0] && why.err.hint[0]);
	assert_false(why.options);
	cs_onecall_end(f->oc, 1);
	cs_onecall_free(f->oc);
	f->oc = NULL;
	const stub_call *c;
	assert_int_equal(stub.log(&c), 0);
	_cleanup_(cs_history_log_freep) cs_history_log log = { 0 };
	json_object *p, *e = last_entry(&log, &p);
	assert_string_equal(field(e, "front"), "drop-in");
	assert_string_equal(field(e, "op"), "lock");
	assert_string_equal(field(e, "outcome"), "refused");
	assert_string_equal(field(p, "code"), "busy");

	o = opts(f->pid, CS_CALL_GET_STATE, false);
	assert_int_equal(cs_onecall_open(&f->oc, f->d, &o, &why), 0);
	int s;
	assert_int_equal(cs_onecall_get_state(f->oc, &s), CS_CU_SUCCESS);
	assert_int_equal(s, CS_STATE_RUNNING);
}

/* A process whose restore thread is stopped would keep every call but
 * GetRestoreThreadId waiting: refused at once, naming what holds it. */
static void test_stopped_is_refused(void **state)
{
	fixture *f = *state;
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		pause();
		_exit(0);
	}
	int ws;
	assert_int_equal(kill(child, SIGSTOP), 0);
	assert_int_equal(waitpid(child, &ws, WUNTRACED), child);
	stub.add(child, CS_STATE_RUNNING);

	cs_onecall_opts o = opts(child, CS_CALL_CHECKPOINT, false);
	cs_onecall_refusal why;
	int r = cs_onecall_open(&f->oc, f->d, &o, &why);
	cs_onecall_end(f->oc, 1);
	cs_onecall_free(f->oc);
	f->oc = NULL;
	/* GetRestoreThreadId may still be asked: it is answered by the driver. */
	o = opts(child, CS_CALL_GET_TID, false);
	int q = cs_onecall_open(&f->oc, f->d, &o, &(cs_onecall_refusal){ 0 });
	kill(child, SIGKILL);
	waitpid(child, &ws, 0);

	assert_true(r < 0);
	assert_string_equal(why.code, "stopped");
	assert_int_equal(why.halt.halt, CS_HALT_STOPPED);
	assert_int_equal(why.tgid, child);
	assert_true(why.comm_known);
	assert_string_equal(why.err.message, "the process is stopped and cannot answer");
	const stub_call *c;
	assert_int_equal(stub.log(&c), 0);
	assert_int_equal(q, 0);
	_cleanup_(cs_history_log_freep) cs_history_log log = { 0 };
	json_object *p, *e = last_entry(&log, &p);
	assert_string_equal(field(e, "op"), "checkpoint");
	assert_string_equal(field(p, "code"), "stopped");
	assert_string_equal(field(p, "why"), "the process is stopped and cannot answer");
}

/* --toggle of a locked process: neither direction is defined. */
static void test_toggle_refuses_a_locked_process(void **state)
{
	fixture *f = *state;
	stub.reset();
	stub.add(f->pid, CS_STATE_LOCKED);
	cs_onecall_opts o = opts(f->pid, CS_CALL_GET_STATE, true);
	cs_onecall_refusal why;
	assert_int_equal(cs_onecall_open(&f->oc, f->d, &o, &why), 0);
	int s;
	assert_int_equal(cs_onecall_get_state(f->oc, &s), CS_CU_SUCCESS);
	cs_op way;
	assert_true(cs_onecall_toggle_way(f->oc, s, &way, &why) < 0);
	assert_string_equal(why.code, "state");
	assert_int_equal(why.state, CS_STATE_LOCKED);
	assert_string_equal(why.err.message, cs_cu_string(f->d, CS_CU_ILLEGAL_STATE));
	cs_onecall_end(f->oc, 1);
	assert_int_equal(calls(STUB_GET_STATE), 1);
	assert_int_equal(calls(STUB_LOCK) + calls(STUB_UNLOCK) + calls(STUB_CHECKPOINT) + calls(STUB_RESTORE), 0);
	_cleanup_(cs_history_log_freep) cs_history_log log = { 0 };
	json_object *p, *e = last_entry(&log, &p);
	assert_string_equal(field(e, "op"), "toggle");
	assert_string_equal(field(e, "outcome"), "refused");
	assert_string_equal(field(p, "code"), "state");
	assert_string_equal(field(p, "why"), "the process is locked: neither direction is defined");
}

/* A checkpoint that fails after this call's lock is unlocked again: the
 * entry says the process was rolled back, and why. */
static void test_failed_checkpoint_is_undone(void **state)
{
	fixture *f = *state;
	stub.fail_on(STUB_CHECKPOINT, f->pid, 999);
	cs_onecall_opts o = opts(f->pid, CS_CALL_GET_STATE, true);
	cs_onecall_refusal why;
	assert_int_equal(cs_onecall_open(&f->oc, f->d, &o, &why), 0);
	int s;
	assert_int_equal(cs_onecall_get_state(f->oc, &s), CS_CU_SUCCESS);
	cs_op way;
	assert_int_equal(cs_onecall_toggle_way(f->oc, s, &way, &why), 0);
	assert_int_equal(way, CS_OP_CHECKPOINT);
	assert_int_equal(cs_onecall_lock(f->oc), CS_CU_SUCCESS);
	assert_int_equal(cs_onecall_checkpoint(f->oc), 999);
	cs_error err = { 0 };
	cs_onecall_failed(f->oc, CS_CALL_CHECKPOINT, 999, &err);
	assert_int_equal(err.cu, 999);
	assert_int_equal(cs_onecall_undo_lock(f->oc, &s), CS_CU_SUCCESS);
	cs_onecall_end(f->oc, 1);
	assert_int_equal(calls(STUB_UNLOCK), 1);
	_cleanup_(cs_history_log_freep) cs_history_log log = { 0 };
	json_object *p, *e = last_entry(&log, &p);
	assert_string_equal(field(e, "outcome"), "rolled-back");
	assert_string_equal(field(p, "outcome"), "rolled-back");
	assert_string_equal(field(p, "step"), "checkpoint");
	assert_string_equal(field(p, "cu"), "999");
	assert_non_null(strstr(field(p, "why"), "checkpoint failed after"));
}

/* A device map that does not parse is the options' refusal; a restore
 * made without the check does not ask the driver with it either. */
static void test_bad_device_map_never_reaches_the_driver(void **state)
{
	fixture *f = *state;
	stub.reset();
	stub.add(f->pid, CS_STATE_CHECKPOINTED);
	cs_onecall_opts o = opts(f->pid, CS_CALL_RESTORE, false);
	o.device_map = "bad";
	cs_onecall_refusal why;
	assert_int_equal(cs_onecall_open(&f->oc, f->d, &o, &why), 0);
	assert_true(cs_onecall_check_restore(f->oc, &why) < 0);
	assert_true(why.options);
	assert_string_equal(why.code, "device-map");
	assert_int_equal(why.err.status, CS_EUSAGE);
	assert_true(why.err.hint[0]);
	assert_int_equal(cs_onecall_restore(f->oc), CS_CU_INVALID_VALUE);
	assert_int_equal(calls(STUB_RESTORE), 0);
	cs_onecall_end(f->oc, 1);
	_cleanup_(cs_history_log_freep) cs_history_log log = { 0 };
	json_object *p, *e = last_entry(&log, &p);
	assert_string_equal(field(e, "outcome"), "refused");
	assert_string_equal(field(p, "code"), "device-map");
}

static bool manifest_exists(const fixture *f)
{
	char *path = tu_path(f->state, "manifest.json");
	bool there = access(path, F_OK) == 0;
	free(path);
	return there;
}

/* A checkpoint leaves the process's record in the manifest, a restore takes
 * it out again; without a state directory nothing is created. */
static void test_record_follows_the_process(void **state)
{
	fixture *f = *state;
	cs_onecall_opts o = opts(f->pid, CS_CALL_CHECKPOINT, false);
	cs_onecall_refusal why;
	assert_int_equal(cs_onecall_open(&f->oc, f->d, &o, &why), 0);
	assert_int_equal(cs_onecall_lock(f->oc), CS_CU_SUCCESS);
	assert_int_equal(cs_onecall_checkpoint(f->oc), CS_CU_SUCCESS);
	cs_onecall_end(f->oc, 0);
	cs_onecall_free(f->oc);
	f->oc = NULL;
	assert_true(manifest_exists(f));
	_cleanup_(cs_history_log_freep) cs_history_log log = { 0 };
	json_object *p, *e = last_entry(&log, &p);
	assert_string_equal(field(e, "outcome"), "done");

	o = opts(f->pid, CS_CALL_RESTORE, false);
	assert_int_equal(cs_onecall_open(&f->oc, f->d, &o, &why), 0);
	assert_int_equal(cs_onecall_check_restore(f->oc, &why), 0);
	assert_int_equal(cs_onecall_restore(f->oc), CS_CU_SUCCESS);
	cs_onecall_end(f->oc, 0);
	cs_onecall_free(f->oc);
	f->oc = NULL;
	assert_false(manifest_exists(f));

	tu_rmrf(f->state);
	o = opts(f->pid, CS_CALL_CHECKPOINT, false);
	assert_int_equal(cs_onecall_open(&f->oc, f->d, &o, &why), 0);
	assert_int_equal(cs_onecall_checkpoint(f->oc), CS_CU_SUCCESS);
	cs_onecall_end(f->oc, 0);
	assert_int_equal(access(f->state, F_OK), -1);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s STUBCUDA.so\n", argv[0]);
		return 2;
	}
	stub_path = argv[1];
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_busy_is_refused_before_any_call, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stopped_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_toggle_refuses_a_locked_process, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_checkpoint_is_undone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_device_map_never_reaches_the_driver, setup, teardown),
		cmocka_unit_test_setup_teardown(test_record_follows_the_process, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
