/* The sandbox detector and the host memory reader over fake roots: the cases
 * the end-to-end test of doctor does not reach (cgroup v1, odd status files,
 * a root that does not exist). */
#include "sandbox.h"
#include "testutil.h"
#include "util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static void missing_root(void **state)
{
	(void)state;
	cs_sandbox s;
	cs_sandbox_detect("/nonexistent/cudasnap-root", &s);
	assert_false(s.gvisor);
	assert_false(s.container);
	assert_int_equal(s.pid_ns, CS_PIDNS_UNKNOWN);
	assert_int_equal(s.euid, geteuid());
	assert_false(s.caps_known);
	assert_false(s.cap_sys_ptrace);
	assert_string_equal(cs_pidns_name(s.pid_ns), "unknown");
	cs_hostmem m;
	cs_host_memory("/nonexistent/cudasnap-root", &m);
	assert_int_equal(m.mem_available, -1);
}

static void status_fields(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	/* Uid first on its line only, CapEff with a sign, NSpid of three levels. */
	tu_write_str(root, "proc/self/status", "XUid:\t5\t5\t5\t5\nUid:\t1000\t0\t1000\t1000\n"
		     "NSpid:\t900\t40\t7\nCapEff:\t-0000000000080000\n");
	cs_sandbox s;
	cs_sandbox_detect(root, &s);
	assert_int_equal(s.euid, 0);
	assert_false(s.caps_known);
	assert_int_equal(s.nspid_depth, 3);
	assert_int_equal(s.pid_ns, CS_PIDNS_CHILD);
	tu_write_str(root, "proc/self/status", "Uid:\t7\t7\t7\t7\nCapEff:\t0000000000080000\n");
	tu_symlink("pid:[12]junk", root, "proc/self/ns/pid");
	cs_sandbox_detect(root, &s);
	assert_int_equal(s.euid, 7);
	assert_true(s.cap_sys_ptrace);
	assert_int_equal(s.pid_ns, CS_PIDNS_UNKNOWN); /* a malformed link decides nothing */
	tu_rmrf(root);
	free(root);
}

/* MemAvailable of the root's /proc; the cgroups of each process are
 * lib/room/memcg.c's (tests/unit/test_memcg.c). */
static void mem_available(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	tu_write_str(root, "proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable:    4000000 kB\n");
	cs_hostmem m;
	cs_host_memory(root, &m);
	assert_int_equal(m.mem_available, 4000000LL * 1024);
	tu_write_str(root, "proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable: lots\n");
	cs_host_memory(root, &m);
	assert_int_equal(m.mem_available, -1);
	tu_rmrf(root);
	free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(missing_root),
		cmocka_unit_test(status_fields),
		cmocka_unit_test(mem_available),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
