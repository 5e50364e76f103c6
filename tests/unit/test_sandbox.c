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
	assert_int_equal(m.cgroup_room, -1);
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

static void cgroup_v1(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	tu_write_str(root, "proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable:    4000000 kB\n");
	tu_write_str(root, "proc/self/cgroup", "12:pids:/docker/abc\n9:cpuset:/docker/abc\n"
		     "4:memory:/docker/abc\n0::/\n");
	/* Inside the container only its own cgroup is mounted, at the top. */
	tu_write_str(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n");
	tu_write_str(root, "sys/fs/cgroup/memory/memory.usage_in_bytes", "73741824\n");
	cs_hostmem m;
	cs_host_memory(root, &m);
	assert_int_equal(m.mem_available, 4000000LL * 1024);
	assert_int_equal(m.cgroup_limit, 1073741824);
	assert_int_equal(m.cgroup_room, 1000000000);
	/* v1's "no limit" is a page-rounded LLONG_MAX. */
	tu_write_str(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
	cs_host_memory(root, &m);
	assert_int_equal(m.cgroup_room, -1);
	tu_rmrf(root);
	free(root);
}

static void cgroup_v2_over_limit(void **state)
{
	(void)state;
	char *root = tu_mkdtemp();
	tu_write_str(root, "proc/self/cgroup", "0::/a/b\n");
	tu_write_str(root, "sys/fs/cgroup/a/b/memory.max", "100\n");
	tu_write_str(root, "sys/fs/cgroup/a/b/memory.current", "150\n");
	tu_write_str(root, "sys/fs/cgroup/a/memory.max", "max\n");
	tu_write_str(root, "sys/fs/cgroup/a/memory.current", "150\n");
	cs_hostmem m;
	cs_host_memory(root, &m);
	assert_int_equal(m.cgroup_room, 0);
	assert_string_equal(m.cgroup_path, "/a/b");
	tu_rmrf(root);
	free(root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(missing_root),
		cmocka_unit_test(status_fields),
		cmocka_unit_test(cgroup_v1),
		cmocka_unit_test(cgroup_v2_over_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
