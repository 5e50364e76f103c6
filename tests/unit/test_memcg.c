/* The memory cgroup reader (lib/room/memcg.c): its parsers on real and hostile
 * text (in buffers of the text's exact length, so that the sanitizers see
 * any read past it), cgroup v2 and v1 chains laid out in a scratch
 * directory next to a fake /proc, the room under a node's limits, and one
 * real v1 cgroup of this machine. */
#include "capacity.h"
#include "memcg.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define MIB (1024LL * 1024)
#define PID 4242

/* ---- parsers ------------------------------------------------------------ */

static int value_n(const char *s, size_t len, long long *out)
{
	char *buf = tu_exact(s, len);
	int r = cs_memcg_parse_value(buf, len, out);
	free(buf);
	return r;
}

static int value(const char *s, long long *out)
{
	return value_n(s, strlen(s), out);
}

static void parse_value(void **state)
{
	(void)state;
	long long v;
	assert_int_equal(value("max\n", &v), 0);
	assert_int_equal(v, -1);
	assert_int_equal(value("max", &v), 0);
	assert_int_equal(v, -1);
	assert_int_equal(value("0\n", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(value("1073741824\n", &v), 0);
	assert_int_equal(v, 1073741824);
	assert_int_equal(value("0000000012 \t\n\n", &v), 0);
	assert_int_equal(v, 12);
	/* v1's "no limit" (LLONG_MAX rounded to a page), and anything from 2^62 up. */
	assert_int_equal(value("9223372036854771712\n", &v), 0);
	assert_int_equal(v, -1);
	assert_int_equal(value("4611686018427387904", &v), 0);
	assert_int_equal(v, -1);
	assert_int_equal(value("4611686018427387903", &v), 0);
	assert_int_equal(v, 4611686018427387903LL);
	assert_int_equal(value("18446744073709551615", &v), 0);
	assert_int_equal(v, -1);
	/* Garbage leaves out alone. */
	static const char *const bad[] = {
		"",
		"\n",
		" ",
		"-1",
		"+1",
		" 1",
		"1 2",
		"12a",
		"0x10",
		"Max",
		"max2",
		"maxi",
		"1e9",
		"18446744073709551616",
		"99999999999999999999999999999999",
		"1\r\n",
		"\xff",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 77;
		assert_int_equal(value(bad[i], &v), -EINVAL);
		assert_int_equal(v, 77);
	}
	/* A NUL byte is a byte like any other: not a digit, not the end. */
	assert_int_equal(value_n("12\0"
				 "34",
				 5, &v),
			 -EINVAL);
	assert_int_equal(value_n("12\n\0", 4, &v), -EINVAL);
	assert_int_equal(value_n("max\0", 4, &v), -EINVAL);
	assert_int_equal(value_n("123", 2, &v), 0);
	assert_int_equal(v, 12);
}

static int key(const char *s, const char *k, long long *out)
{
	size_t len = strlen(s);
	char *buf = tu_exact(s, len);
	int r = cs_memcg_parse_key(buf, len, k, out);
	free(buf);
	return r;
}

static const char v2_stat[] = "anon 1048576\nfile 2097152\nkernel 4096\ninactive_anon 0\nactive_anon 1048576\n"
			      "inactive_file 1572864\nactive_file 524288\nunevictable 0\n";

static void parse_key(void **state)
{
	(void)state;
	long long v;
	assert_int_equal(key(v2_stat, "inactive_file", &v), 0);
	assert_int_equal(v, 1572864);
	assert_int_equal(key(v2_stat, "anon", &v), 0);
	assert_int_equal(v, 1048576);
	assert_int_equal(key(v2_stat, "unevictable", &v), 0);
	assert_int_equal(v, 0);
	/* A key is a whole first field, never a prefix or a suffix of one. */
	assert_int_equal(key(v2_stat, "inactive", &v), -ENOENT);
	assert_int_equal(key(v2_stat, "file", &v), 0);
	assert_int_equal(v, 2097152);
	assert_int_equal(key("total_inactive_file 5\ninactive_file 7\n", "inactive_file", &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(key("inactive_file 7\ntotal_inactive_file 5", "total_inactive_file", &v), 0);
	assert_int_equal(v, 5);
	/* v1's memory.oom_control, the last line without its newline. */
	assert_int_equal(key("oom_kill_disable 0\nunder_oom 0\noom_kill 3", "oom_kill", &v), 0);
	assert_int_equal(v, 3);
	/* The first line with the key decides, a bad value included. */
	assert_int_equal(key("oom_kill x\noom_kill 3\n", "oom_kill", &v), -EINVAL);
	assert_int_equal(key("oom_kill 1\noom_kill 3\n", "oom_kill", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(key("oom_kill   12\n", "oom_kill", &v), 0);
	assert_int_equal(v, 12);
	v = 77;
	assert_int_equal(key("oom_kill \n", "oom_kill", &v), -EINVAL);
	assert_int_equal(key("oom_kill\n", "oom_kill", &v), -ENOENT);
	assert_int_equal(key("oom_kill\t3\n", "oom_kill", &v), -ENOENT);
	assert_int_equal(key(" oom_kill 3\n", "oom_kill", &v), -ENOENT);
	assert_int_equal(key("oom_kill 99999999999999999999999\n", "oom_kill", &v), -EINVAL);
	assert_int_equal(key("", "oom_kill", &v), -ENOENT);
	assert_int_equal(key("oom_kill 3\n", "", &v), -EINVAL);
	assert_int_equal(v, 77);
	static const char nul[] = "a 1\0\noom_kill 4\0\noom_kill 5\n";
	char *buf = tu_exact(nul, sizeof(nul) - 1);
	assert_int_equal(cs_memcg_parse_key(buf, sizeof(nul) - 1, "a", &v), -EINVAL);
	assert_int_equal(cs_memcg_parse_key(buf, sizeof(nul) - 1, "oom_kill", &v), -EINVAL);
	assert_int_equal(cs_memcg_parse_key(buf, 0, "a", &v), -ENOENT);
	free(buf);
}

static int proc_cgroup_n(const char *s, size_t len, char *path, size_t size)
{
	char *buf = tu_exact(s, len);
	int r = cs_memcg_parse_proc_cgroup(buf, len, path, size);
	free(buf);
	return r;
}

static int proc_cgroup(const char *s, char *path, size_t size)
{
	return proc_cgroup_n(s, strlen(s), path, size);
}

static const char hybrid_cgroup[] = "9:name=systemd:/\n8:pids:/\n6:freezer:/\n0::/user.slice\n"
				    "4:memory:/process_api/2bef74f1\n3:cpuset:/\n";

static void parse_proc_cgroup(void **state)
{
	(void)state;
	char p[64];
	assert_int_equal(proc_cgroup("0::/kubepods/pod1/ctr\n", p, sizeof(p)), 2);
	assert_string_equal(p, "/kubepods/pod1/ctr");
	assert_int_equal(proc_cgroup("0::/\n", p, sizeof(p)), 2);
	assert_string_equal(p, "/");
	/* The v1 memory line wins over the v2 one, before or after it. */
	assert_int_equal(proc_cgroup(hybrid_cgroup, p, sizeof(p)), 1);
	assert_string_equal(p, "/process_api/2bef74f1");
	assert_int_equal(proc_cgroup("4:memory:/a\n0::/b", p, sizeof(p)), 1);
	assert_string_equal(p, "/a");
	/* Co-mounted controllers; a named hierarchy is not the controller. */
	assert_int_equal(proc_cgroup("5:cpu,memory,pids:/m\n", p, sizeof(p)), 1);
	assert_string_equal(p, "/m");
	assert_int_equal(proc_cgroup("5:name=memory:/n\n0::/v2\n", p, sizeof(p)), 2);
	assert_string_equal(p, "/v2");
	assert_int_equal(proc_cgroup("5:memoryx:/n\n6:xmemory:/n\n", p, sizeof(p)), 0);
	assert_string_equal(p, "");
	/* Only "0::" is the v2 line; a path must be absolute. */
	static const char *const none[] = {
		"",      "\n",     "1::/a\n",     "00::/a\n",       ":/a\n",      "0:/a\n",
		"0::\n", "0::a\n", "4:memory:\n", "4:memory:a/b\n", "4:memory\n", "garbage",
	};
	for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
		strcpy(p, "x");
		assert_int_equal(proc_cgroup(none[i], p, sizeof(p)), 0);
		assert_string_equal(p, "");
	}
	/* A path cut short would name another cgroup: it is not taken. */
	assert_int_equal(proc_cgroup("0::/0123456789\n", p, 11), 0);
	assert_string_equal(p, "");
	assert_int_equal(proc_cgroup("0::/012345678\n", p, 11), 2);
	assert_string_equal(p, "/012345678");
	assert_int_equal(proc_cgroup("0::/a\n", p, 0), 0);
	/* A NUL byte inside a path disqualifies its line. */
	assert_int_equal(proc_cgroup_n("4:memory:/a\0b\n0::/c\n", 19, p, sizeof(p)), 2);
	assert_string_equal(p, "/c");
	/* Every prefix: a cut line gives its cut path, never more. */
	for (size_t len = 0; len < sizeof(hybrid_cgroup); len++) {
		int v = proc_cgroup_n(hybrid_cgroup, len, p, sizeof(p));
		assert_true(v >= 0 && v <= 2);
		assert_true(strlen(p) < sizeof(p));
		if (v)
			assert_non_null(strstr(hybrid_cgroup, p));
	}
}

static void meminfo(void **state)
{
	(void)state;
	char *root = tu_mkdtemp(), *proc = tu_path(root, "proc");
	assert_int_equal(cs_meminfo_available(proc), -1);
	tu_write_str(root, "proc/meminfo", "MemTotal:       65536000 kB\nMemAvailable:   60000000 kB\n");
	assert_int_equal(cs_meminfo_available(proc), 60000000LL * 1024);
	tu_write_str(root, "proc/meminfo", "MemAvailable:\t7 kB");
	assert_int_equal(cs_meminfo_available(proc), 7 * 1024);
	static const char *const bad[] = {
		"MemTotal: 1 kB\n",
		"MemAvailable: 12\n",
		"MemAvailable: -12 kB\n",
		"MemAvailable: 12 MB\n",
		"MemAvailable: 12 kB junk\n",
		"MemAvailable: 9007199254740993 kB\n",
		"MemAvailable: 99999999999999999999999 kB\n",
		"XMemAvailable: 12 kB\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tu_write_str(root, "proc/meminfo", bad[i]);
		assert_int_equal(cs_meminfo_available(proc), -1);
	}
	tu_write(root, "proc/meminfo", "MemAvailable: 1\0 kB\n", 20);
	assert_int_equal(cs_meminfo_available(proc), -1);
	tu_rmrf(root);
	free(proc);
	free(root);
}

/* ---- fake cgroup trees -------------------------------------------------- */

typedef struct fixture {
	char *root, *proc;
	cs_cgroup_mounts m;
} fixture;

static int tree_setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->root = tu_mkdtemp();
	f->proc = tu_path(f->root, "proc");
	tu_mkdirs(f->root, "v2");
	tu_mkdirs(f->root, "memory");
	snprintf(f->m.v2, sizeof(f->m.v2), "%s/v2", f->root);
	snprintf(f->m.v1mem, sizeof(f->m.v1mem), "%s/memory", f->root);
	strcpy(f->m.v2_root, "/");
	strcpy(f->m.v1mem_root, "/");
	*state = f;
	return 0;
}

static int tree_teardown(void **state)
{
	fixture *f = *state;
	tu_rmrf(f->root);
	free(f->proc);
	free(f->root);
	free(f);
	return 0;
}

/* A file of the cgroup dir (a path below one of the fixture's mounts). */
static void cg_write(const fixture *f, const char *dir, const char *name, const char *text)
{
	char rel[PATH_MAX];
	snprintf(rel, sizeof(rel), "%s/%s", dir, name);
	tu_write_str(f->root, rel, text);
}

static void proc_says(const fixture *f, const char *text)
{
	char rel[64];
	snprintf(rel, sizeof(rel), "proc/%d/cgroup", PID);
	tu_write_str(f->root, rel, text);
}

/* Node k's path, a prefix of its chain's (one of four buffers in turn). */
static const char *npath(const cs_memcg *cg, size_t k)
{
	static char buf[4][PATH_MAX];
	static int next;
	char *b = buf[next++ % 4];
	assert_true(k < cg->n);
	assert_true(cg->node[k].len >= 1 && cg->node[k].len <= strlen(cg->path));
	snprintf(b, PATH_MAX, "%.*s", (int)cg->node[k].len, cg->path);
	return b;
}

static cs_memcg read_chain(const fixture *f)
{
	cs_memcg cg;
	memset(&cg, 0xaa, sizeof(cg));
	assert_int_equal(cs_memcg_read(f->proc, PID, &f->m, &cg), 0);
	assert_true(cg.n <= CS_MEMCG_DEPTH);
	assert_true(strlen(cg.problem) < sizeof(cg.problem));
	return cg;
}

/* A pod's container, its pod without the memory controller's files, the
 * pod slice with the limits, and the root that has only memory.stat. */
static void v2_chain(void **state)
{
	fixture *f = *state;
	proc_says(f, "0::/kubepods/pod1/ctr\n");
	cg_write(f, "v2/kubepods/pod1/ctr", "memory.current", "104857600\n");
	cg_write(f, "v2/kubepods/pod1/ctr", "memory.max", "max\n");
	cg_write(f, "v2/kubepods/pod1/ctr", "memory.high", "max\n");
	cg_write(f, "v2/kubepods/pod1/ctr", "memory.swap.max", "0\n");
	cg_write(f, "v2/kubepods/pod1/ctr", "memory.stat", v2_stat);
	cg_write(f, "v2/kubepods/pod1/ctr", "memory.events", "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n");
	cg_write(f, "v2/kubepods/pod1", "cgroup.procs", "");
	cg_write(f, "v2/kubepods", "memory.current", "943718400\n");
	cg_write(f, "v2/kubepods", "memory.max", "1073741824\n");
	cg_write(f, "v2/kubepods", "memory.high", "996147200\n");
	cg_write(f, "v2/kubepods", "memory.swap.max", "max\n");
	cg_write(f, "v2/kubepods", "memory.events", "oom 0\noom_kill 0\n");
	cg_write(f, "v2", "memory.stat", "inactive_file 5\n");

	cs_memcg cg = read_chain(f);
	assert_int_equal(cg.version, 2);
	assert_int_equal(cg.seen, CS_MEMCG_WHOLE);
	assert_string_equal(cg.problem, "");
	assert_int_equal(cg.n, 3);
	const cs_memcg_node *c = &cg.node[0], *k = &cg.node[1], *r = &cg.node[2];
	assert_string_equal(npath(&cg, 0), "/kubepods/pod1/ctr");
	assert_int_equal(c->version, 2);
	assert_int_equal(c->usage, 104857600);
	assert_int_equal(c->inactive_file, 1572864);
	assert_int_equal(c->max, -1);
	assert_int_equal(c->high, -1);
	assert_int_equal(c->swap_max, 0);
	assert_int_equal(c->memsw_max, -1);
	assert_int_equal(c->memsw_usage, -1);
	assert_int_equal(c->oom_kills, 2);
	assert_string_equal(npath(&cg, 1), "/kubepods");
	assert_int_equal(k->usage, 943718400);
	assert_int_equal(k->inactive_file, 0); /* no memory.stat: unknown */
	assert_int_equal(k->max, 1073741824);
	assert_int_equal(k->high, 996147200);
	assert_int_equal(k->swap_max, -1);
	assert_int_equal(k->oom_kills, 0);
	assert_string_equal(npath(&cg, 2), "/");
	assert_int_equal(r->usage, -1);
	assert_int_equal(r->max, -1);
	assert_int_equal(r->inactive_file, 5);
	assert_int_equal(r->oom_kills, -1);

	/* The room: none at the container, high before max at the pod slice. */
	const char *which = "x";
	long long limit = 0;
	assert_int_equal(cs_memcg_node_room(c, &which, &limit), -1);
	assert_null(which);
	assert_int_equal(limit, -1);
	assert_int_equal(cs_memcg_node_room(k, &which, &limit), 996147200 - 943718400);
	assert_string_equal(which, "memory.high");
	assert_int_equal(limit, 996147200);
	assert_int_equal(cs_memcg_node_room(r, NULL, NULL), -1);
}

/* v1 on a hybrid host: the memory line wins, limits come from
 * limit_in_bytes and the memsw files, the page cache from total_. */
static void v1_chain(void **state)
{
	fixture *f = *state;
	proc_says(f, "0::/\n4:memory:/docker/abc\n6:freezer:/docker/abc\n");
	cg_write(f, "memory/docker/abc", "memory.usage_in_bytes", "104857600\n");
	cg_write(f, "memory/docker/abc", "memory.limit_in_bytes", "536870912\n");
	cg_write(f, "memory/docker/abc", "memory.memsw.limit_in_bytes", "629145600\n");
	cg_write(f, "memory/docker/abc", "memory.memsw.usage_in_bytes", "157286400\n");
	cg_write(f, "memory/docker/abc", "memory.stat",
		 "cache 1\ninactive_file 4096\nhierarchical_memory_limit 536870912\ntotal_inactive_file 52428800\n");
	cg_write(f, "memory/docker/abc", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
	cg_write(f, "memory/docker", "memory.usage_in_bytes", "209715200\n");
	cg_write(f, "memory/docker", "memory.limit_in_bytes", "9223372036854771712\n");
	cg_write(f, "memory/docker", "memory.memsw.limit_in_bytes", "9223372036854771712\n");
	cg_write(f, "memory", "memory.usage_in_bytes", "592969728\n");
	cg_write(f, "memory", "memory.limit_in_bytes", "9223372036854771712\n");
	/* Files the v2 reading would take, which v1 must not. */
	cg_write(f, "memory/docker/abc", "memory.max", "1\n");
	cg_write(f, "v2", "memory.current", "1\n");

	cs_memcg cg = read_chain(f);
	assert_int_equal(cg.version, 1);
	assert_int_equal(cg.seen, CS_MEMCG_WHOLE);
	assert_string_equal(cg.problem, "");
	assert_int_equal(cg.n, 3);
	const cs_memcg_node *a = &cg.node[0];
	assert_string_equal(npath(&cg, 0), "/docker/abc");
	assert_int_equal(a->version, 1);
	assert_int_equal(a->usage, 104857600);
	assert_int_equal(a->inactive_file, 52428800);
	assert_int_equal(a->max, 536870912);
	assert_int_equal(a->high, -1);
	assert_int_equal(a->swap_max, -1);
	assert_int_equal(a->memsw_max, 629145600);
	assert_int_equal(a->memsw_usage, 157286400);
	assert_int_equal(a->oom_kills, 3);
	assert_string_equal(npath(&cg, 1), "/docker");
	assert_int_equal(cg.node[1].max, -1);
	assert_int_equal(cg.node[1].memsw_max, -1);
	assert_int_equal(cg.node[1].memsw_usage, -1);
	assert_int_equal(cg.node[1].oom_kills, -1);
	assert_string_equal(npath(&cg, 2), "/");
	assert_int_equal(cg.node[2].usage, 592969728);

	/* limit 512 MiB - (100 - 50) MiB = 462 MiB; memsw 600 - (150 - 50) = 500 MiB. */
	const char *which;
	long long limit;
	assert_int_equal(cs_memcg_node_room(a, &which, &limit), 462 * MIB);
	assert_string_equal(which, "memory.limit_in_bytes");
	assert_int_equal(limit, 536870912);
	/* Swap in use makes memsw the tighter one. */
	cg_write(f, "memory/docker/abc", "memory.memsw.usage_in_bytes", "262144000\n");
	cg = read_chain(f);
	assert_int_equal(cs_memcg_node_room(&cg.node[0], &which, &limit), (600 - 200) * MIB);
	assert_string_equal(which, "memory.memsw.limit_in_bytes");
	assert_int_equal(limit, 629145600);
	assert_int_equal(cs_memcg_node_room(&cg.node[1], &which, &limit), -1);
}

/* The mount shows a pod's cgroup at its top (a bind mount of a
 * sub-cgroup): the chain ends there, and says so. */
static void mount_of_subcgroup(void **state)
{
	fixture *f = *state;
	strcpy(f->m.v2_root, "/kubepods/pod1");
	proc_says(f, "0::/kubepods/pod1/ctr\n");
	cg_write(f, "v2/ctr", "memory.current", "100\n");
	cg_write(f, "v2/ctr", "memory.max", "200\n");
	cg_write(f, "v2", "memory.current", "300\n");
	cg_write(f, "v2", "memory.max", "400\n");
	cs_memcg cg = read_chain(f);
	assert_int_equal(cg.version, 2);
	assert_int_equal(cg.seen, CS_MEMCG_PART);
	assert_non_null(strstr(cg.problem, "/kubepods/pod1"));
	assert_int_equal(cg.n, 2);
	assert_string_equal(npath(&cg, 0), "/kubepods/pod1/ctr");
	assert_int_equal(cg.node[0].max, 200);
	assert_string_equal(npath(&cg, 1), "/kubepods/pod1");
	assert_int_equal(cg.node[1].max, 400);

	/* The process in the mount's top cgroup itself. */
	proc_says(f, "0::/kubepods/pod1\n");
	cg = read_chain(f);
	assert_int_equal(cg.n, 1);
	assert_string_equal(npath(&cg, 0), "/kubepods/pod1");
	assert_int_equal(cg.seen, CS_MEMCG_PART);
}

/* A cgroup namespace shows the container's cgroup as "/" in both
 * mountinfo and /proc: only the files at the top give it away. */
static void cgroup_namespace_top(void **state)
{
	fixture *f = *state;
	proc_says(f, "0::/\n");
	cg_write(f, "v2", "memory.current", "100\n");
	cg_write(f, "v2", "memory.max", "max\n");
	cs_memcg cg = read_chain(f);
	assert_int_equal(cg.version, 2);
	assert_int_equal(cg.n, 1);
	assert_string_equal(npath(&cg, 0), "/");
	assert_int_equal(cg.seen, CS_MEMCG_PART);
	assert_non_null(strstr(cg.problem, "cgroup namespace"));
	/* v1: the hierarchy's root takes no limit. */
	proc_says(f, "3:memory:/\n");
	cg_write(f, "memory", "memory.limit_in_bytes", "9223372036854771712\n");
	cg = read_chain(f);
	assert_int_equal(cg.version, 1);
	assert_int_equal(cg.seen, CS_MEMCG_WHOLE);
	assert_string_equal(cg.problem, "");
	cg_write(f, "memory", "memory.limit_in_bytes", "1048576\n");
	cg = read_chain(f);
	assert_int_equal(cg.seen, CS_MEMCG_PART);
	assert_int_equal(cg.node[0].max, 1048576);
}

/* A cgroup the mount does not show: nothing of the chain can be read. */
static void outside_the_mount(void **state)
{
	fixture *f = *state;
	strcpy(f->m.v2_root, "/kubepods/pod1");
	cg_write(f, "v2", "memory.current", "100\n");
	cg_write(f, "v2/ctr", "memory.current", "100\n");
	cg_write(f, "v2/x", "memory.current", "100\n");
	static const char *const outside[] = {
		"0::/kubepods/pod2/ctr\n",
		"0::/kubepods/pod1x/ctr\n",
		"0::/kubepods\n",
		"0::/\n",
		"0::/kubepods/pod1/../pod1x\n",
		"0::/kubepods/pod1/./ctr\n",
		"0::/kubepods/pod1//ctr\n",
		"0::/kubepods/pod1/ctr/\n",
	};
	for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++) {
		proc_says(f, outside[i]);
		cs_memcg cg = read_chain(f);
		assert_int_equal(cg.version, 0);
		assert_int_equal(cg.n, 0);
		assert_int_equal(cg.seen, CS_MEMCG_UNREAD);
		assert_non_null(strstr(cg.problem, "outside"));
	}
	/* A cgroup namespace names cgroups outside it with "/..". */
	strcpy(f->m.v2_root, "/");
	proc_says(f, "0::/../x\n");
	cs_memcg cg = read_chain(f);
	assert_int_equal(cg.version, 0);
	assert_non_null(strstr(cg.problem, "outside"));
}

static void vanished_and_absent(void **state)
{
	fixture *f = *state;
	cs_memcg cg;
	assert_int_equal(cs_memcg_read(f->proc, PID, &f->m, &cg), -ENOENT);
	assert_int_equal(cs_memcg_read("/nonexistent/proc", PID, &f->m, &cg), -ENOENT);
	/* pid 0 is the caller, <procdir>/self. */
	tu_write_str(f->root, "proc/self/cgroup", "0::/s\n");
	cg_write(f, "v2/s", "memory.current", "1\n");
	assert_int_equal(cs_memcg_read(f->proc, 0, &f->m, &cg), 0);
	assert_int_equal(cg.n, 1);
	assert_string_equal(npath(&cg, 0), "/s");

	/* No memory cgroup in /proc: not an error. */
	proc_says(f, "3:cpu:/a\n1:name=systemd:/\n");
	cg = read_chain(f);
	assert_int_equal(cg.version, 0);
	assert_int_equal(cg.n, 0);
	assert_non_null(strstr(cg.problem, "no memory cgroup"));
	proc_says(f, "");
	cg = read_chain(f);
	assert_int_equal(cg.version, 0);
	/* The hierarchy it names is not mounted. */
	cs_cgroup_mounts none;
	memset(&none, 0, sizeof(none));
	proc_says(f, "0::/s\n");
	assert_int_equal(cs_memcg_read(f->proc, PID, &none, &cg), 0);
	assert_int_equal(cg.version, 0);
	assert_non_null(strstr(cg.problem, "not mounted"));
	proc_says(f, "4:memory:/s\n");
	assert_int_equal(cs_memcg_read(f->proc, PID, &none, &cg), 0);
	assert_non_null(strstr(cg.problem, "not mounted"));
	/* Mounted, but gone, or the controller enabled nowhere on the way. */
	strcpy(f->m.v1mem, "/nonexistent/memory");
	cg = read_chain(f);
	assert_int_equal(cg.version, 0);
	assert_non_null(strstr(cg.problem, "/nonexistent/memory"));
	proc_says(f, "0::/a/b/c\n");
	cg_write(f, "v2/a/b/c", "cgroup.procs", "");
	cg_write(f, "v2/a", "cgroup.procs", "");
	cg = read_chain(f);
	assert_int_equal(cg.version, 0);
	assert_int_equal(cg.n, 0);
	assert_non_null(strstr(cg.problem, "no memory file"));
}

/* Every file of a node replaced with what no kernel writes: each value
 * is unknown, the node still counts when one file reads. */
static void garbage_files(void **state)
{
	fixture *f = *state;
	static const char *const v2[] = { "memory.current", "memory.max", "memory.high", "memory.swap.max" };
	static const char *const v1[] = { "memory.usage_in_bytes", "memory.limit_in_bytes",
					  "memory.memsw.limit_in_bytes", "memory.memsw.usage_in_bytes" };
	static const char *const bad[] = {
		"", "-5\n", "max max\n", "99999999999999999999999\n", "0x10\n", "\xff\xfe\n"
	};
	size_t big = 100000;
	char *digits = malloc(big + 1);
	assert_non_null(digits);
	memset(digits, '0', big);
	digits[big] = '\0';
	for (int version = 1; version <= 2; version++) {
		const char *dir = version == 2 ? "v2/g" : "memory/g";
		proc_says(f, version == 2 ? "0::/g\n" : "7:memory:/g\n");
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]) + 2; i++) {
			for (size_t k = 0; k < 4; k++) {
				const char *name = version == 2 ? v2[k] : v1[k];
				if (i < sizeof(bad) / sizeof(bad[0]))
					cg_write(f, dir, name, bad[i]);
				else if (i == sizeof(bad) / sizeof(bad[0]))
					cg_write(f, dir, name, digits); /* zeros beyond any buffer: not a value */
				else {
					char rel[256];
					snprintf(rel, sizeof(rel), "%s/%s", dir, name);
					tu_write(f->root, rel,
						 "12\0"
						 "34\n",
						 6);
				}
			}
			cg_write(f, dir, "memory.stat", "inactive_file x\ntotal_inactive_file -1\n");
			cg_write(f, dir, version == 2 ? "memory.events" : "memory.oom_control", "oom_kill\0 3\n");
			cg_write(f, dir, "cgroup.procs", "");
			cs_memcg cg = read_chain(f);
			assert_int_equal(cg.version, 0);
			assert_int_equal(cg.n, 0);
			/* One good file is enough for the node to count. */
			cg_write(f, dir, version == 2 ? "memory.max" : "memory.limit_in_bytes", "4096\n");
			cg = read_chain(f);
			assert_int_equal(cg.version, version);
			assert_int_equal(cg.n, 1);
			const cs_memcg_node *n = &cg.node[0];
			assert_int_equal(n->usage, -1);
			assert_int_equal(n->inactive_file, 0);
			assert_int_equal(n->max, 4096);
			assert_int_equal(n->high, -1);
			assert_int_equal(n->swap_max, -1);
			assert_int_equal(n->memsw_max, -1);
			assert_int_equal(n->memsw_usage, -1);
			assert_int_equal(n->oom_kills, -1);
			/* A limit without a usage to weigh it against gives no room. */
			assert_int_equal(cs_memcg_node_room(n, NULL, NULL), -1);
		}
	}
	free(digits);
	/* Odd bytes in the cgroup's name come back sanitized. */
	proc_says(f, "0::/a\033[31mb\n");
	cg_write(f, "v2/a\033[31mb", "memory.current", "1\n");
	cs_memcg cg = read_chain(f);
	assert_int_equal(cg.n, 1);
	assert_string_equal(npath(&cg, 0), "/a?[31mb");
}

/* A chain deeper than a cs_memcg holds: the process's own end is kept. */
static void deep_chain(void **state)
{
	fixture *f = *state;
	char dir[512] = "v2", proc[512] = "0::";
	for (int i = 0; i < CS_MEMCG_DEPTH + 8; i++) {
		snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "/%d", i % 10);
		snprintf(proc + strlen(proc), sizeof(proc) - strlen(proc), "/%d", i % 10);
		cg_write(f, dir, "memory.current", "1\n");
	}
	char want[512];
	snprintf(want, sizeof(want), "%s", proc + 3);
	strcat(proc, "\n");
	proc_says(f, proc);
	cs_memcg cg = read_chain(f);
	assert_int_equal(cg.version, 2);
	assert_int_equal(cg.n, CS_MEMCG_DEPTH);
	assert_string_equal(npath(&cg, 0), want);
	assert_int_equal(strlen(npath(&cg, 0)), 2 * (CS_MEMCG_DEPTH + 8));
	assert_int_equal(strlen(npath(&cg, CS_MEMCG_DEPTH - 1)), 2 * 9);
	assert_non_null(strstr(cg.problem, "levels"));
}

static cs_memcg_node node_of(int version, long long usage, long long inactive, long long max)
{
	return (cs_memcg_node){ .version = version,
				.usage = usage,
				.inactive_file = inactive,
				.max = max,
				.high = -1,
				.swap_max = -1,
				.memsw_max = -1,
				.memsw_usage = -1,
				.oom_kills = -1 };
}

static void room(void **state)
{
	(void)state;
	const char *which;
	long long limit;
	cs_memcg_node n = node_of(2, 600, 100, 1000);
	assert_int_equal(cs_memcg_node_room(&n, &which, &limit), 500);
	assert_string_equal(which, "memory.max");
	assert_int_equal(limit, 1000);
	/* Over the limit: no room, never less. */
	n = node_of(2, 1500, 100, 1000);
	assert_int_equal(cs_memcg_node_room(&n, &which, NULL), 0);
	/* More cache than usage (two reads apart): the working set is 0. */
	n = node_of(2, 100, 300, 1000);
	assert_int_equal(cs_memcg_node_room(&n, NULL, &limit), 1000);
	n = node_of(2, 100, -1, 1000);
	assert_int_equal(cs_memcg_node_room(&n, NULL, NULL), 900);
	/* high decides when tighter, max on a tie. */
	n = node_of(2, 600, 100, 1000);
	n.high = 800;
	assert_int_equal(cs_memcg_node_room(&n, &which, &limit), 300);
	assert_string_equal(which, "memory.high");
	assert_int_equal(limit, 800);
	n.high = 1000;
	assert_int_equal(cs_memcg_node_room(&n, &which, NULL), 500);
	assert_string_equal(which, "memory.max");
	/* A limit of 0 is a limit. */
	n = node_of(2, 0, 0, 0);
	assert_int_equal(cs_memcg_node_room(&n, &which, &limit), 0);
	assert_string_equal(which, "memory.max");
	/* v1: memsw weighed against memsw usage, less the same cache. */
	n = node_of(1, 600, 100, 1000);
	n.memsw_max = 1200;
	n.memsw_usage = 900;
	assert_int_equal(cs_memcg_node_room(&n, &which, &limit), 400);
	assert_string_equal(which, "memory.memsw.limit_in_bytes");
	assert_int_equal(limit, 1200);
	n.memsw_usage = -1;
	assert_int_equal(cs_memcg_node_room(&n, &which, NULL), 500);
	assert_string_equal(which, "memory.limit_in_bytes");
	/* Only swap limited: no room limit for memory. */
	n = node_of(2, 600, 100, -1);
	n.swap_max = 0;
	assert_int_equal(cs_memcg_node_room(&n, &which, &limit), -1);
	assert_null(which);
	assert_int_equal(limit, -1);
}

/* ---- routes: the path arithmetic of a cgroup namespace ------------------ */

static void below(void **state)
{
	(void)state;
	static const struct {
		const char *path, *root;
		ssize_t at;
	} cases[] = {
		{ "/a/b", "/", 0 },
		{ "/", "/", 1 },
		{ "/x/y", "/x", 2 },
		{ "/x", "/x", 2 },
		/* Both named from one cgroup namespace: "/../a" lies beside it. */
		{ "/../a/b", "/../a", 5 },
		{ "/../a", "/../a", 5 },
		{ "/../a/b", "/..", 3 },
		{ "/../../x", "/../..", 6 },
		/* A mount of an ancestor names it with more "/.."s than a cgroup
		 * beside the namespace: not comparable, not shown. */
		{ "/../a", "/../..", -1 },
		{ "/../ab", "/../a", -1 },
		{ "/xy", "/x", -1 },
		{ "/x", "/x/y", -1 },
		{ "/a/../b", "/", -1 },
		{ "/../a/../b", "/../a", -1 },
		{ "/x/./y", "/x", -1 },
		{ "/a//b", "/", -1 },
		{ "/a/", "/", -1 },
		{ "a", "/", -1 },
		{ "", "/", -1 },
		{ "/a", "", -1 },
		{ "/a", "a", -1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ssize_t at = cs_memcg_below(cases[i].path, cases[i].root);
		if (at != cases[i].at)
			fail_msg("%s under %s: %zd, not %zd", cases[i].path, cases[i].root, at, cases[i].at);
	}
}

/* "/../a/b" under a mount whose root reads "/../a": cgroup b below it, and
 * the mount's top, a cgroup namespace's own, hides what is above. */
static void view_beside_the_namespace(void **state)
{
	fixture *f = *state;
	strcpy(f->m.v2_root, "/../a");
	cg_write(f, "v2/b", "memory.current", "100\n");
	cg_write(f, "v2/b", "memory.max", "1000\n");
	cg_write(f, "v2", "memory.current", "300\n");
	cg_write(f, "v2", "memory.max", "max\n");
	static const char text[] = "0::/../a/b\n";
	cs_memcg_view v = { CS_MEMCG_TARGET, text, sizeof(text) - 1, &f->m, "" };
	cs_memcg cg;
	cs_memcg_read_view(&v, &cg);
	assert_int_equal(cg.version, 2);
	assert_int_equal(cg.route, CS_MEMCG_TARGET);
	assert_int_equal(cg.seen, CS_MEMCG_PART);
	assert_string_equal(cg.path, "/../a/b");
	assert_int_equal(cg.n, 2);
	assert_string_equal(npath(&cg, 0), "/../a/b");
	assert_int_equal(cg.node[0].max, 1000);
	assert_string_equal(npath(&cg, 1), "/../a");
	assert_int_equal(cs_memcg_reach(&cg), 1);
	char want[PATH_MAX];
	snprintf(want, sizeof(want), "%s/v2/b", f->root);
	assert_string_equal(cg.dir, want);
	assert_int_equal(cg.node[0].dirlen, strlen(want));
	assert_int_equal(cg.node[1].dirlen, strlen(want) - 2);
	assert_non_null(strstr(cg.problem, "the cgroups above /../a cannot be read here"));

	/* The same through a prefix, as /proc/PID/root opens it. */
	snprintf(f->m.v2, sizeof(f->m.v2), "/v2");
	cs_memcg_view p = { CS_MEMCG_INITNS, text, sizeof(text) - 1, &f->m, f->root };
	cs_memcg_read_view(&p, &cg);
	assert_int_equal(cg.n, 2);
	assert_int_equal(cg.node[0].max, 1000);
	assert_string_equal(cg.dir, want);
}

/* cudasnap's own mount does not show the target's cgroup; the target's own
 * mount, through /proc/PID/root, shows its container's cgroup. */
static void target_route(void **state)
{
	fixture *f = *state;
	proc_says(f, "0::/../ctr\n");
	tu_write_str(f->root, "proc/4242/mountinfo",
		     "20 1 0:5 / / rw - overlay overlay rw\n"
		     "21 20 0:26 /../ctr /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n");
	tu_mkdirs(f->root, "troot/sys/fs/cgroup");
	char *troot = tu_path(f->root, "troot");
	tu_symlink(troot, f->root, "proc/4242/root");
	cg_write(f, "troot/sys/fs/cgroup", "memory.current", "10\n");
	cg_write(f, "troot/sys/fs/cgroup", "memory.max", "1000\n");
	cs_memcg cg = read_chain(f);
	assert_int_equal(cg.route, CS_MEMCG_TARGET);
	assert_int_equal(cg.seen, CS_MEMCG_PART);
	assert_int_equal(cg.n, 1);
	assert_string_equal(npath(&cg, 0), "/../ctr");
	assert_int_equal(cg.node[0].max, 1000);
	/* Why the other routes did not show more. */
	assert_non_null(strstr(cg.problem, "no process of the initial cgroup namespace is visible"));
	/* Without the target's mounts: nothing, said so. */
	char *mi = tu_path(f->root, "proc/4242/mountinfo");
	assert_int_equal(unlink(mi), 0);
	cg = read_chain(f);
	assert_int_equal(cg.seen, CS_MEMCG_UNREAD);
	assert_int_equal(cg.n, 0);
	assert_non_null(strstr(cg.problem, "outside"));
	assert_non_null(strstr(cg.problem, "the target's own mounts cannot be read"));
	free(mi);
	free(troot);
}

/* v1 gives the hidden limits away: a top's memory.stat names the smallest
 * limit of its ancestors, the hidden ones too. */
static void v1_limits_above(void **state)
{
	fixture *f = *state;
	proc_says(f, "3:memory:/\n");
	cg_write(f, "memory", "memory.usage_in_bytes", "1048576\n");
	cg_write(f, "memory", "memory.limit_in_bytes", "9223372036854771712\n");
	static const struct {
		const char *stat, *limit;
		int seen;
		long long hidden;
	} cases[] = {
		/* The namespace's top without a limit, its parent with one. */
		{ "hierarchical_memory_limit 1073741824\nhierarchical_memsw_limit 9223372036854771712\n",
		  "9223372036854771712\n", CS_MEMCG_PART, 1073741824 },
		{ "hierarchical_memory_limit 9223372036854771712\nhierarchical_memsw_limit 2147483648\n",
		  "9223372036854771712\n", CS_MEMCG_PART, 2147483648LL },
		/* No limit above, whether or not it is the root. */
		{ "hierarchical_memory_limit 9223372036854771712\nhierarchical_memsw_limit 9223372036854771712\n",
		  "9223372036854771712\n", CS_MEMCG_WHOLE, -1 },
		{ "hierarchical_memory_limit 9223372036854771712\n", "9223372036854771712\n", CS_MEMCG_WHOLE, -1 },
		/* A limit of its own: not the root; those above unknown. */
		{ "hierarchical_memory_limit 1048576\n", "1048576\n", CS_MEMCG_PART, -1 },
		{ "hierarchical_memory_limit 524288\n", "1048576\n", CS_MEMCG_PART, 524288 },
		/* No memory.stat to tell: only the top's own limit counts. */
		{ "", "9223372036854771712\n", CS_MEMCG_WHOLE, -1 },
		{ "", "1048576\n", CS_MEMCG_PART, -1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cg_write(f, "memory", "memory.stat", cases[i].stat);
		cg_write(f, "memory", "memory.limit_in_bytes", cases[i].limit);
		cs_memcg cg = read_chain(f);
		if (cg.seen != cases[i].seen || cg.hidden_limit != cases[i].hidden)
			fail_msg("case %zu: seen %d, hidden %lld", i, cg.seen, cg.hidden_limit);
	}
	cg_write(f, "memory", "memory.stat", cases[0].stat);
	cg_write(f, "memory", "memory.limit_in_bytes", cases[0].limit);
	cs_memcg cg = read_chain(f);
	assert_non_null(strstr(cg.problem, "one of them has a limit of 1.00 GiB"));
	/* v2: a cgroup.type at the top gives a namespace's top away too. */
	proc_says(f, "0::/\n");
	cg_write(f, "v2", "memory.current", "1\n");
	cg = read_chain(f);
	assert_int_equal(cg.seen, CS_MEMCG_WHOLE);
	cg_write(f, "v2", "cgroup.type", "domain\n");
	cg = read_chain(f);
	assert_int_equal(cg.seen, CS_MEMCG_PART);
}

/* A node read again is the same directory or none: a cgroup removed and
 * made again under its name is another one. */
static void reread_by_identity(void **state)
{
	fixture *f = *state;
	proc_says(f, "0::/r\n");
	cg_write(f, "v2/r", "memory.current", "1\n");
	cg_write(f, "v2/r", "memory.events", "oom_kill 1\n");
	cs_memcg cg = read_chain(f);
	cs_memcg_node now;
	cg_write(f, "v2/r", "memory.events", "oom_kill 2\n");
	assert_int_equal(cs_memcg_reread(&cg, 0, &now), 0);
	assert_int_equal(now.oom_kills, 2);
	assert_int_equal(cs_memcg_reread(&cg, 5, &now), -ENOENT);
	char *old = tu_path(f->root, "v2/r"), *away = tu_path(f->root, "v2/gone");
	assert_int_equal(rename(old, away), 0);
	cg_write(f, "v2/r", "memory.current", "1\n");
	cg_write(f, "v2/r", "memory.events", "oom_kill 9\n");
	assert_int_equal(cs_memcg_reread(&cg, 0, &now), -ENOENT);
	cg.dir[0] = '\0';
	assert_int_equal(cs_memcg_reread(&cg, 0, &now), -ENOENT);
	free(old);
	free(away);
}

/* ---- the helper's reply ------------------------------------------------- */

static int reply(const char *s, size_t len, cs_memcg_reply *r)
{
	char *buf = tu_exact(s, len);
	int ret = cs_memcg_parse_reply(buf, len, r);
	/* Pointers into buf: checked against the text, then gone. */
	if (ret == 0) {
		assert_true(r->cgroup >= buf && r->cgroup + r->cgroup_len <= buf + len);
		for (size_t i = 0; i < r->n; i++)
			assert_true(r->mounts[i].mountinfo >= buf &&
				    r->mounts[i].mountinfo + r->mounts[i].len <= buf + len);
	}
	free(buf);
	return ret;
}

static void parse_reply(void **state)
{
	(void)state;
	cs_memcg_reply r;
	static const char good[] = "C 10\n0::/a/b/c\nM 0 5\nm0000M 77 0\nM 4242 3\nxyz";
	assert_int_equal(reply(good, sizeof(good) - 1, &r), 0);
	assert_int_equal(r.cgroup_len, 10);
	assert_int_equal(r.n, 3);
	assert_int_equal(r.mounts[0].pid, 0);
	assert_int_equal(r.mounts[0].len, 5);
	assert_int_equal(r.mounts[1].pid, 77);
	assert_int_equal(r.mounts[1].len, 0);
	assert_int_equal(r.mounts[2].pid, 4242);
	assert_int_equal(r.mounts[2].len, 3);
	assert_int_equal(reply("C 0\n", 4, &r), 0);
	assert_int_equal(r.n, 0);
	static const char *const bad[] = {
		"",
		"C 12\n0::/a/b/c\n", /* longer than what follows */
		"C 1\nxC 1\ny", /* two cgroup texts */
		"M 1 0\n", /* no cgroup text */
		"C 0\nM 1 0\nM 2 0\nM 3 0\nM 4 0\nM 5 0\n", /* more mounts than a reply holds */
		"C 0\nM 2147483648 0\n",
		"C 0\nM -1 0\n",
		"C 0\nM 1\n",
		"C 0\nX 0\n",
		"C 0\n\n",
		"C 0\nM 1 0",
		"C 99999999999999999999\n",
		"C 1\n",
		"c 0\n",
		"C  0\n",
		"C 0 \n",
		"C 0x1\n",
		"C 01\nx",
		"C 0\nM 07 0\n",
		"M 1 0\nC 0\n", /* the cgroup text first */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&r, 0xaa, sizeof(r));
		if (reply(bad[i], strlen(bad[i]), &r) != -EINVAL)
			fail_msg("accepted: \"%s\"", bad[i]);
		assert_int_equal(r.n, 0);
		assert_null(r.cgroup);
	}
	/* Every prefix of a good reply: whole sections or an error, never a read past it. */
	for (size_t len = 0; len < sizeof(good) - 1; len++) {
		int ret = reply(good, len, &r);
		assert_true(ret == 0 || ret == -EINVAL);
	}
}

/* ---- the judgement: identity, whole paths, unseen limits, memory.high --- */

static void proc_says_pid(const fixture *f, pid_t pid, const char *text)
{
	char rel[64];
	snprintf(rel, sizeof(rel), "proc/%d/cgroup", (int)pid);
	tu_write_str(f->root, rel, text);
}

static cs_fit fit_of(const fixture *f, pid_t pid, unsigned long long gpu)
{
	cs_fit x;
	memset(&x, 0, sizeof(x));
	x.pid = pid;
	snprintf(x.comm, sizeof(x.comm), "app%d", (int)pid);
	x.known = CS_GPU_EXACT;
	x.gpu = gpu;
	x.need = cs_checkpoint_host_need(gpu);
	assert_int_equal(cs_memcg_read(f->proc, pid, &f->m, &x.cg), 0);
	return x;
}

static size_t judge(cs_fit *x, size_t n)
{
	cs_fit_env env;
	memset(&env, 0, sizeof(env));
	env.mem_available = -1;
	size_t unknown;
	return cs_fit_judge(x, n, &env, &unknown);
}

/* Two siblings below a common prefix of 300 bytes (nested containers,
 * systemd slices with 64-hex ids), one of them limited: told apart by their
 * directories, the limited one judged, and named whole. */
static void siblings_long_prefix(void **state)
{
	fixture *f = *state;
	char prefix[320] = "", dir[512], text[512];
	/* Five levels of 59 bytes: no name is longer than a directory takes. */
	for (int i = 0; i < 5; i++)
		snprintf(prefix + strlen(prefix), sizeof(prefix) - strlen(prefix), "/%c%058d", 'a' + i, i);
	assert_int_equal(strlen(prefix), 300);
	static const char *const leaf[] = { "free", "tight" };
	for (size_t i = 0; i < 2; i++) {
		snprintf(dir, sizeof(dir), "v2%s/%s", prefix, leaf[i]);
		cg_write(f, dir, "memory.current", "10485760\n");
		cg_write(f, dir, "memory.max", i ? "104857600\n" : "max\n");
		snprintf(text, sizeof(text), "0::%s/%s\n", prefix, leaf[i]);
		proc_says_pid(f, PID + (pid_t)i, text);
	}
	cs_fit x[2] = { fit_of(f, PID, 128 * MIB), fit_of(f, PID + 1, 128 * MIB) };
	assert_int_equal(x[0].cg.seen, CS_MEMCG_WHOLE);
	assert_int_equal(strlen(x[1].cg.path), 300 + 6);
	assert_null(cs_memcg_find(&x[0].cg, &x[1].cg.node[0]));
	assert_int_equal(judge(x, 2), 1);
	assert_false(x[0].refused);
	assert_true(x[1].refused);
	char want[400];
	snprintf(want, sizeof(want), "in cgroup %s/tight (", prefix);
	assert_non_null(strstr(x[1].why, want));
	snprintf(want, sizeof(want), "Raise memory.max of %s/tight by at least", prefix);
	assert_non_null(strstr(x[1].fix, want));
	/* The same two in the other order. */
	cs_fit y[2] = { fit_of(f, PID + 1, 128 * MIB), fit_of(f, PID, 128 * MIB) };
	assert_int_equal(judge(y, 2), 1);
	assert_true(y[0].refused);
	assert_false(y[1].refused);
	/* Two processes of one cgroup, whatever else: one node, their needs added. */
	proc_says_pid(f, PID + 2, text);
	cs_fit z[2] = { fit_of(f, PID + 1, 48 * MIB), fit_of(f, PID + 2, 48 * MIB) };
	assert_int_equal(judge(z, 2), 2);
	assert_non_null(strstr(z[0].why, "with the 1 other process of that cgroup"));
}

/* A chain read only in part: judged by the limits it shows, with nothing
 * to refuse for the rest; with none shown, it cannot be judged. */
static void unseen_limits(void **state)
{
	fixture *f = *state;
	/* The namespace's top (memory.max there: not the root) with a limit. */
	proc_says(f, "0::/w\n");
	cg_write(f, "v2", "memory.max", "max\n");
	cg_write(f, "v2", "memory.current", "1\n");
	cg_write(f, "v2/w", "memory.current", "10485760\n");
	cg_write(f, "v2/w", "memory.max", "1073741824\n");
	cs_fit x = fit_of(f, PID, 128 * MIB);
	assert_int_equal(x.cg.seen, CS_MEMCG_PART);
	assert_int_equal(judge(&x, 1), 0);
	assert_int_equal(x.room, CS_ROOM_PART);
	assert_false(x.refused);
	/* ... too small: refused by it, as anywhere. */
	cg_write(f, "v2/w", "memory.max", "104857600\n");
	x = fit_of(f, PID, 128 * MIB);
	assert_int_equal(judge(&x, 1), 1);
	assert_true(x.refused);
	assert_int_equal(x.room, CS_ROOM_PART);
	/* No limit shown: a limit above may stop it, so it is not judged "no limit". */
	cg_write(f, "v2/w", "memory.max", "max\n");
	x = fit_of(f, PID, 128 * MIB);
	assert_int_equal(judge(&x, 1), 1);
	assert_false(x.refused);
	assert_int_equal(x.room, CS_ROOM_UNKNOWN);
	assert_non_null(strstr(x.why,
			       "needs 0.14 GiB of host memory in its memory cgroup /w, with no limit up to /; "
			       "the cgroups above / cannot be read here"));
	assert_non_null(strstr(x.fix, "host's cgroup namespace"));
	assert_non_null(strstr(x.fix, "--ignore-memory (CUDASNAP_IGNORE_MEMORY=1)"));
	/* Its GPU memory unknown too: nothing can be judged, and nothing stops. */
	x.known = CS_GPU_UNKNOWN;
	assert_int_equal(judge(&x, 1), 0);
	assert_int_equal(x.room, CS_ROOM_UNKNOWN);
	/* Nothing readable (outside the mount): the same. */
	proc_says(f, "0::/../elsewhere\n");
	x = fit_of(f, PID, 128 * MIB);
	assert_int_equal(x.cg.seen, CS_MEMCG_UNREAD);
	assert_int_equal(judge(&x, 1), 1);
	assert_int_equal(x.room, CS_ROOM_UNKNOWN);
	assert_non_null(strstr(x.why,
			       "its memory cgroup /../elsewhere, and none of its memory cgroups can be read here: "
			       "cgroup /../elsewhere lies outside /"));
	/* No memory cgroup at all: no limit to hit. */
	proc_says(f, "1:cpu:/\n");
	x = fit_of(f, PID, 128 * MIB);
	assert_int_equal(x.cg.seen, CS_MEMCG_NONE);
	assert_int_equal(judge(&x, 1), 0);
	assert_int_equal(x.room, CS_ROOM_KNOWN);
	/* The whole chain without a limit: nothing to say. */
	proc_says(f, "0::/w\n");
	char *top = tu_path(f->root, "v2/memory.max");
	assert_int_equal(unlink(top), 0);
	free(top);
	x = fit_of(f, PID, 128 * MIB);
	assert_int_equal(x.cg.seen, CS_MEMCG_WHOLE);
	assert_int_equal(judge(&x, 1), 0);
	assert_int_equal(x.room, CS_ROOM_KNOWN);
}

/* Over memory.high the kernel throttles a process until it stands still
 * (measured on the H200): the fix says so, not that it kills. */
static void memory_high_words(void **state)
{
	fixture *f = *state;
	proc_says(f, "0::/h\n");
	cg_write(f, "v2/h", "memory.current", "10485760\n");
	cg_write(f, "v2/h", "memory.high", "104857600\n");
	cg_write(f, "v2/h", "memory.max", "max\n");
	cs_fit x = fit_of(f, PID, 128 * MIB);
	assert_int_equal(judge(&x, 1), 1);
	assert_non_null(strstr(x.why, "under its memory.high of 0.10 GiB"));
	assert_non_null(strstr(x.fix, "Raise memory.high of /h"));
	assert_non_null(strstr(x.fix, "throttles it to a standstill"));
	assert_null(strstr(x.fix, "kills"));
	/* memory.max deciding: killed. */
	cg_write(f, "v2/h", "memory.high", "max\n");
	cg_write(f, "v2/h", "memory.max", "104857600\n");
	x = fit_of(f, PID, 128 * MIB);
	assert_int_equal(judge(&x, 1), 1);
	assert_non_null(strstr(x.fix, "the kernel kills it when it does not fit"));
	assert_null(strstr(x.fix, "standstill"));
}

/* ---- a real cgroup ------------------------------------------------------ */

static bool write_text(const char *dir, const char *name, const char *text)
{
	char path[512];
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return false;
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
	return close(fd) == 0 && ok;
}

/* Waits for go, touches 8 MiB (charged to the cgroup it is in by then),
 * says so on done, and lives until go is closed. */
static void __attribute__((noreturn)) child_touch(int go, int done)
{
	char c;
	if (read(go, &c, 1) != 1)
		_exit(1);
	size_t size = (size_t)(8 * MIB);
	char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		_exit(1);
	for (size_t i = 0; i < size; i += 4096)
		((volatile char *)p)[i] = 1;
	if (write(done, "x", 1) != 1)
		_exit(1);
	while (read(go, &c, 1) > 0)
		;
	_exit(0);
}

/* A v1 memory cgroup of this machine with a 64 MiB limit and a child in
 * it, read through the machine's own mountinfo. */
static void real_v1_cgroup(void **state)
{
	(void)state;
	cs_cgroup_mounts m;
	assert_int_equal(cs_cgroup_mounts_read("/proc", &m), 0);
	char dir[PATH_MAX + 64];
	snprintf(dir, sizeof(dir), "%s/cs-memcg-test-%d", m.v1mem, (int)getpid());
	if (geteuid() != 0 || !m.v1mem[0] || mkdir(dir, 0755) < 0) {
		print_message("skipped: needs root and a cgroup v1 memory controller to make %s in (%s)\n", dir,
			      geteuid() != 0      ? "not root" :
				      !m.v1mem[0] ? "none mounted" :
						    strerror(errno));
		skip();
	}
	int go[2], done[2];
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(done, O_CLOEXEC), 0);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		close(go[1]);
		close(done[0]);
		child_touch(go[0], done[1]);
	}
	close(go[0]);
	close(done[1]);
	char pid[16], c = 0;
	snprintf(pid, sizeof(pid), "%d", (int)child);
	bool moved = write_text(dir, "memory.limit_in_bytes", "67108864") && write_text(dir, "cgroup.procs", pid);
	bool touched = moved && write(go[1], "x", 1) == 1 && read(done[0], &c, 1) == 1;
	cs_memcg cg;
	int r = touched ? cs_memcg_read("/proc", child, &m, &cg) : -1;
	/* Cleaned up before any check, which would end the test. */
	close(go[1]);
	close(done[0]);
	int status;
	waitpid(child, &status, 0);
	int removed = rmdir(dir);

	assert_true(moved);
	assert_true(touched);
	assert_int_equal(removed, 0);
	assert_int_equal(r, 0);
	assert_int_equal(cg.version, 1);
	assert_true(cg.n >= 2);
	const cs_memcg_node *n = &cg.node[0];
	char *name = strrchr(dir, '/');
	size_t pl = strlen(npath(&cg, 0)), nl = strlen(name);
	assert_true(pl >= nl);
	assert_string_equal(npath(&cg, 0) + pl - nl, name);
	assert_int_equal(n->version, 1);
	assert_int_equal(n->max, 64 * MIB);
	assert_true(n->usage >= 8 * MIB);
	assert_true(n->usage <= 64 * MIB);
	assert_true(n->oom_kills <= 0);
	const char *which;
	long long limit;
	long long left = cs_memcg_node_room(n, &which, &limit);
	assert_true(left >= 0 && left <= 56 * MIB);
	assert_string_equal(which, "memory.limit_in_bytes");
	assert_int_equal(limit, 64 * MIB);
	/* The chain ends at the mount's top, one level up. */
	assert_int_equal(strlen(npath(&cg, 1)) + nl, pl + (strcmp(npath(&cg, 1), "/") == 0));
}

/* What a reader in a cgroup namespace of its own saw. */
typedef struct ns_seen {
	int r, route, seen, own_seen;
	size_t n;
	long long max;
	char path[PATH_MAX];
} ns_seen;

/* In a cgroup namespace rooted at ndir's cgroup: target's chain, and
 * what this process's own mounts alone show of it. */
static void __attribute__((noreturn)) read_from_namespace(const char *ndir, pid_t target, int out)
{
	ns_seen *res = calloc(1, sizeof(*res));
	cs_cgroup_mounts *m = malloc(sizeof(*m));
	cs_memcg *cg = malloc(sizeof(*cg));
	char pid[16], name[64], text[4096];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	if (!res || !m || !cg || !write_text(ndir, "cgroup.procs", pid) || unshare(CLONE_NEWCGROUP) < 0 ||
	    cs_cgroup_mounts_read("/proc", m) < 0)
		_exit(1);
	snprintf(name, sizeof(name), "/proc/%d/cgroup", (int)target);
	int fd = open(name, O_RDONLY | O_CLOEXEC);
	ssize_t len = fd < 0 ? -1 : read(fd, text, sizeof(text));
	if (len <= 0)
		_exit(1);
	cs_memcg_view own = { CS_MEMCG_OWN, text, (size_t)len, m, "" };
	cs_memcg_read_view(&own, cg);
	res->own_seen = cg->seen;
	res->r = cs_memcg_read("/proc", target, m, cg);
	res->route = cg->route;
	res->seen = cg->seen;
	res->n = cg->n;
	res->max = cg->n ? cg->node[0].max : -2;
	snprintf(res->path, sizeof(res->path), "%s", cg->path);
	_exit(write(out, res, sizeof(*res)) == (ssize_t)sizeof(*res) ? 0 : 1);
}

/* cudasnap in a cgroup namespace of its own, beside the target's cgroup:
 * its own mount shows nothing of the chain, the initial namespace shows it
 * whole, read by the helper process (a real v1 hierarchy of this machine). */
static void real_cgroup_namespace(void **state)
{
	(void)state;
	cs_cgroup_mounts m;
	assert_int_equal(cs_cgroup_mounts_read("/proc", &m), 0);
	char base[PATH_MAX + 64], tdir[PATH_MAX + 80], ndir[PATH_MAX + 80];
	snprintf(base, sizeof(base), "%s/cs-memcg-ns-%d", m.v1mem, (int)getpid());
	snprintf(tdir, sizeof(tdir), "%s/t", base);
	snprintf(ndir, sizeof(ndir), "%s/n", base);
	if (geteuid() != 0 || !m.v1mem[0] || mkdir(base, 0755) < 0) {
		print_message("skipped: needs root and a cgroup v1 memory controller to make %s in (%s); on cgroup v2 "
			      "integration-memory covers it\n",
			      base,
			      geteuid() != 0      ? "not root" :
				      !m.v1mem[0] ? "none mounted" :
						    strerror(errno));
		skip();
	}
	bool made = mkdir(tdir, 0755) == 0 && mkdir(ndir, 0755) == 0;
	int go[2], done[2], res[2];
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	assert_int_equal(pipe2(done, O_CLOEXEC), 0);
	assert_int_equal(pipe2(res, O_CLOEXEC), 0);
	pid_t target = fork();
	assert_true(target >= 0);
	if (target == 0) {
		close(go[1]);
		close(done[0]);
		child_touch(go[0], done[1]);
	}
	close(go[0]);
	close(done[1]);
	char pid[16], c = 0;
	snprintf(pid, sizeof(pid), "%d", (int)target);
	bool moved =
		made && write_text(tdir, "memory.limit_in_bytes", "67108864") && write_text(tdir, "cgroup.procs", pid);
	bool touched = moved && write(go[1], "x", 1) == 1 && read(done[0], &c, 1) == 1;
	ns_seen seen = { .r = -1 };
	int status = -1;
	pid_t reader = touched ? fork() : -1;
	if (reader == 0) {
		close(res[0]);
		read_from_namespace(ndir, target, res[1]);
	}
	close(res[1]);
	bool answered = reader > 0 && read(res[0], &seen, sizeof(seen)) == (ssize_t)sizeof(seen);
	if (reader > 0)
		waitpid(reader, &status, 0);
	/* Cleaned up before any check, which would end the test. */
	close(res[0]);
	close(go[1]);
	close(done[0]);
	waitpid(target, NULL, 0);
	int removed = (rmdir(tdir) | rmdir(ndir) | rmdir(base));

	assert_true(moved);
	assert_true(touched);
	assert_true(answered);
	assert_int_equal(status, 0);
	assert_int_equal(removed, 0);
	/* Its own mount shows the hierarchy's root as "/../..": the target, "/../t", lies outside it. */
	assert_int_equal(seen.own_seen, CS_MEMCG_UNREAD);
	assert_int_equal(seen.r, 0);
	assert_int_equal(seen.route, CS_MEMCG_INITNS);
	assert_int_equal(seen.seen, CS_MEMCG_WHOLE);
	assert_true(seen.n >= 2);
	assert_int_equal(seen.max, 64 * MIB);
	/* The path from the real root, as the host names it. */
	assert_null(strstr(seen.path, ".."));
	char want[64];
	snprintf(want, sizeof(want), "/cs-memcg-ns-%d/t", (int)getpid());
	size_t pl = strlen(seen.path), wl = strlen(want);
	assert_true(pl >= wl);
	assert_string_equal(seen.path + pl - wl, want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parse_value),
		cmocka_unit_test(parse_key),
		cmocka_unit_test(parse_proc_cgroup),
		cmocka_unit_test(meminfo),
		cmocka_unit_test(room),
		cmocka_unit_test_setup_teardown(v2_chain, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(v1_chain, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(mount_of_subcgroup, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(cgroup_namespace_top, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(outside_the_mount, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(vanished_and_absent, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(garbage_files, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(deep_chain, tree_setup, tree_teardown),
		cmocka_unit_test(below),
		cmocka_unit_test(parse_reply),
		cmocka_unit_test_setup_teardown(view_beside_the_namespace, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(target_route, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(v1_limits_above, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(reread_by_identity, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(siblings_long_prefix, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(unseen_limits, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(memory_high_words, tree_setup, tree_teardown),
		cmocka_unit_test(real_v1_cgroup),
		cmocka_unit_test(real_cgroup_namespace),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
