/* Stopped, traced and frozen processes (lib/proc/halt.c): the mountinfo and
 * /proc/PID/cgroup parsers on real-looking and hostile text, the freezer
 * files under a scratch directory laid out as cgroup mounts, and
 * cs_proc_halt against a fake /proc. Text is passed in buffers of its exact
 * length so that the sanitizers see any read past the length given. */
#include "halt.h"
#include "testutil.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- helpers ------------------------------------------------------------ */

static void parse_exact(const char *s, size_t len, cs_cgroup_mounts *m)
{
	char *buf = tu_exact(s, len);
	cs_cgroup_mounts_parse(buf, len, m);
	free(buf);
}

static void parse(const char *s, cs_cgroup_mounts *m)
{
	parse_exact(s, strlen(s), m);
}

/* Every string of the result ends inside its buffer, whatever the input. */
static void assert_mounts_terminated(const cs_cgroup_mounts *m)
{
	assert_true(strnlen(m->v2, sizeof(m->v2)) < sizeof(m->v2));
	assert_true(strnlen(m->v2_root, sizeof(m->v2_root)) < sizeof(m->v2_root));
	assert_true(strnlen(m->v1, sizeof(m->v1)) < sizeof(m->v1));
	assert_true(strnlen(m->v1_root, sizeof(m->v1_root)) < sizeof(m->v1_root));
	assert_true(strnlen(m->v1mem, sizeof(m->v1mem)) < sizeof(m->v1mem));
	assert_true(strnlen(m->v1mem_root, sizeof(m->v1mem_root)) < sizeof(m->v1mem_root));
}

static void assert_no_mounts(const cs_cgroup_mounts *m)
{
	assert_string_equal(m->v2, "");
	assert_string_equal(m->v2_root, "");
	assert_string_equal(m->v1, "");
	assert_string_equal(m->v1_root, "");
	assert_string_equal(m->v1mem, "");
	assert_string_equal(m->v1mem_root, "");
}

static bool frozen_where(const char *s, const cs_cgroup_mounts *m, char *where, size_t wsize)
{
	size_t len = strlen(s);
	char *buf = tu_exact(s, len);
	bool r = cs_cgroup_frozen(buf, len, m, where, wsize);
	free(buf);
	return r;
}

static bool frozen(const char *s, const cs_cgroup_mounts *m)
{
	char where[256] = "";
	bool r = frozen_where(s, m, where, sizeof(where));
	/* where is only filled when the answer is yes. */
	if (!r)
		assert_string_equal(where, "");
	return r;
}

/* ---- mountinfo ---------------------------------------------------------- */

static const char pure_v2[] =
	"22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n"
	"25 22 0:23 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw\n"
	"26 22 0:24 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw\n"
	"30 26 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
	"rw,nsdelegate,memory_recursiveprot\n"
	"31 26 0:7 / /sys/kernel/debug rw,nosuid,nodev,noexec,relatime shared:22 - debugfs debugfs rw\n";

static void mounts_pure_v2(void **state)
{
	(void)state;
	cs_cgroup_mounts m;
	parse(pure_v2, &m);
	assert_string_equal(m.v2, "/sys/fs/cgroup");
	assert_string_equal(m.v2_root, "/");
	assert_string_equal(m.v1, "");
	assert_string_equal(m.v1_root, "");
}

/* systemd's hybrid layout: v2 at unified, every v1 controller beside it. A
 * v1 hierarchy is the freezer only when "freezer" is one of its options. */
static const char hybrid[] =
	"24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
	"33 24 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
	"34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 "
	"rw,nsdelegate\n"
	"35 33 0:30 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup "
	"rw,xattr,name=systemd\n"
	"38 33 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup "
	"rw,cpu,cpuacct\n"
	"39 33 0:34 / /sys/fs/cgroup/named rw,relatime shared:16 - cgroup cgroup rw,name=freezer\n"
	"40 33 0:35 / /sys/fs/cgroup/almost rw,relatime shared:17 - cgroup cgroup rw,xfreezer\n"
	"41 33 0:36 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup "
	"rw,freezer\n"
	"42 33 0:37 / /sys/fs/cgroup/blkio rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup "
	"rw,blkio\n";

static void mounts_hybrid(void **state)
{
	(void)state;
	cs_cgroup_mounts m;
	parse(hybrid, &m);
	assert_string_equal(m.v2, "/sys/fs/cgroup/unified");
	assert_string_equal(m.v2_root, "/");
	assert_string_equal(m.v1, "/sys/fs/cgroup/freezer");
	assert_string_equal(m.v1_root, "/");
}

/* The freezer co-mounted with other controllers, its option anywhere. */
static void mounts_v1_freezer_options(void **state)
{
	(void)state;
	static const char *const opts[] = { "freezer", "rw,freezer", "rw,cpu,freezer", "freezer,rw",
					     "rw,freezer,name=x", "rw,freezers,freezer", ",,freezer," };
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		char line[256];
		snprintf(line, sizeof(line), "41 33 0:36 / /sys/fs/cgroup/freezer rw - cgroup cgroup %s\n", opts[i]);
		cs_cgroup_mounts m;
		parse(line, &m);
		assert_string_equal(m.v1, "/sys/fs/cgroup/freezer");
		assert_string_equal(m.v2, "");
	}
	/* Not the freezer: a v2 mount's options, another fs type. */
	cs_cgroup_mounts m;
	parse("40 33 0:35 / /w rw - cgroup cgroup rw,freezers,name=freezer,freeze,\n"
	      "41 33 0:36 / /x rw - cgroupfs cgroup rw,freezer\n"
	      "42 33 0:37 / /y rw - tmpfs cgroup rw,freezer\n"
	      "43 33 0:38 / /z rw - cgroup cgroup\n",
	      &m);
	assert_no_mounts(&m);
}

/* The v1 memory controller, beside the freezer or with it in one
 * hierarchy; only the option "memory" itself names it. */
static void mounts_v1_memory(void **state)
{
	(void)state;
	cs_cgroup_mounts m;
	parse("34 33 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n"
	      "36 33 0:31 / /sys/fs/cgroup/named rw - cgroup cgroup rw,name=memory\n"
	      "37 33 0:32 / /sys/fs/cgroup/almost rw - cgroup cgroup rw,memoryx,xmemory\n"
	      "38 33 0:33 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
	      "39 33 0:34 /docker/abc /sys/fs/cgroup/memory2 rw - cgroup cgroup rw,memory\n"
	      "41 33 0:36 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n",
	      &m);
	assert_string_equal(m.v2, "/sys/fs/cgroup/unified");
	assert_string_equal(m.v1, "/sys/fs/cgroup/freezer");
	assert_string_equal(m.v1mem, "/sys/fs/cgroup/memory");
	assert_string_equal(m.v1mem_root, "/");

	parse("41 33 0:36 /docker/abc /sys/fs/cgroup/fm ro - cgroup cgroup rw,freezer,memory\n", &m);
	assert_string_equal(m.v1, "/sys/fs/cgroup/fm");
	assert_string_equal(m.v1_root, "/docker/abc");
	assert_string_equal(m.v1mem, "/sys/fs/cgroup/fm");
	assert_string_equal(m.v1mem_root, "/docker/abc");

	/* A v2 mount's options never make it the v1 controller. */
	parse("30 26 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,memory\n", &m);
	assert_string_equal(m.v2, "/sys/fs/cgroup");
	assert_string_equal(m.v1mem, "");

	/* A path that does not fit is not used; the next mount is. */
	char over[sizeof(m.v1mem) + 1], line[sizeof(over) + 256];
	memset(over, 'm', sizeof(over) - 1);
	over[sizeof(over) - 1] = '\0';
	snprintf(line, sizeof(line),
		 "1 0 0:1 / /%s rw - cgroup cgroup rw,memory\n2 0 0:2 / /mem rw - cgroup cgroup rw,memory\n", over);
	parse(line, &m);
	assert_string_equal(m.v1mem, "/mem");
}

/* <procdir>/self/mountinfo, and a procdir that is not there. */
static void mounts_read(void **state)
{
	(void)state;
	char *root = tu_mkdtemp(), *proc = tu_path(root, "proc");
	tu_write_str(root, "proc/self/mountinfo", hybrid);
	cs_cgroup_mounts m;
	memset(&m, 'x', sizeof(m));
	assert_int_equal(cs_cgroup_mounts_read(proc, &m), 0);
	assert_string_equal(m.v2, "/sys/fs/cgroup/unified");
	assert_string_equal(m.v1, "/sys/fs/cgroup/freezer");
	assert_string_equal(m.v1mem, "");
	memset(&m, 'x', sizeof(m));
	assert_int_equal(cs_cgroup_mounts_read("/nonexistent/proc", &m), -ENOENT);
	assert_no_mounts(&m);
	tu_rmrf(root);
	free(proc);
	free(root);
}

/* In a container the mounts show the container's own cgroup at their top:
 * mountinfo's root field is that cgroup's path. */
static void mounts_container_root(void **state)
{
	(void)state;
	cs_cgroup_mounts m;
	parse("1262 1170 0:25 /docker/abc /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup "
	      "rw,nsdelegate\n",
	      &m);
	assert_string_equal(m.v2, "/sys/fs/cgroup");
	assert_string_equal(m.v2_root, "/docker/abc");

	parse("1271 1263 0:33 /docker/abc /sys/fs/cgroup/freezer ro,nosuid,nodev,noexec,relatime master:18 - "
	      "cgroup cgroup rw,freezer\n",
	      &m);
	assert_string_equal(m.v1, "/sys/fs/cgroup/freezer");
	assert_string_equal(m.v1_root, "/docker/abc");
	assert_string_equal(m.v2, "");
}

/* Zero to many optional fields before the " - " separator. */
static void mounts_optional_fields(void **state)
{
	(void)state;
	static const char *const optional[] = {
		"",
		"shared:4 ",
		"shared:4 master:1 ",
		"shared:4 master:1 propagate_from:2 unbindable ",
		"   shared:4    master:1   ",
	};
	for (size_t i = 0; i < sizeof(optional) / sizeof(optional[0]); i++) {
		char line[256];
		snprintf(line, sizeof(line), "30 26 0:26 / /sys/fs/cgroup rw,nosuid %s- cgroup2 cgroup2 rw\n",
			 optional[i]);
		cs_cgroup_mounts m;
		parse(line, &m);
		assert_string_equal(m.v2, "/sys/fs/cgroup");
		assert_string_equal(m.v2_root, "/");
	}
}

/* The first mount of each kind is the one used. */
static void mounts_first_wins(void **state)
{
	(void)state;
	cs_cgroup_mounts m;
	parse("1 0 0:1 / /first rw - cgroup2 cgroup2 rw\n"
	      "2 0 0:2 /x /second rw - cgroup2 cgroup2 rw\n"
	      "3 0 0:3 / /f1 rw - cgroup cgroup rw,freezer\n"
	      "4 0 0:4 /y /f2 rw - cgroup cgroup rw,freezer\n",
	      &m);
	assert_string_equal(m.v2, "/first");
	assert_string_equal(m.v2_root, "/");
	assert_string_equal(m.v1, "/f1");
	assert_string_equal(m.v1_root, "/");
}

/* The kernel writes space, tab, newline and backslash in paths as \ooo. */
static void mounts_escaped_paths(void **state)
{
	(void)state;
	cs_cgroup_mounts m;
	parse("30 26 0:26 /a\\040b /mnt/my\\040cgroup rw - cgroup2 cgroup2 rw\n"
	      "31 26 0:27 /t\\011n\\012b\\134 /mnt/fr rw - cgroup cgroup rw,freezer\n",
	      &m);
	assert_string_equal(m.v2, "/mnt/my cgroup");
	assert_string_equal(m.v2_root, "/a b");
	assert_string_equal(m.v1, "/mnt/fr");
	assert_string_equal(m.v1_root, "/t\tn\nb\\");
	/* An escape of NUL would cut the path: the mount is not used. */
	parse("30 26 0:26 / /a\\000b rw - cgroup2 cgroup2 rw\n", &m);
	assert_no_mounts(&m);
	/* A backslash that starts no escape is kept as it is. */
	parse("30 26 0:26 / /a\\b\\9\\04\\ rw - cgroup2 cgroup2 rw\n", &m);
	assert_string_equal(m.v2, "/a\\b\\9\\04\\");
}

static void mounts_garbage(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"",
		"\n",
		"\n\n\n",
		" ",
		"garbage",
		"1 2 3 4",
		"1 2 3 / /sys/fs/cgroup",
		"1 2 3 / /sys/fs/cgroup rw",
		"1 2 3 / /sys/fs/cgroup rw shared:1 cgroup2 cgroup2 rw",
		"1 2 3 / /sys/fs/cgroup rw -",
		"1 2 3 / /sys/fs/cgroup rw - ",
		"1 2 3 / /sys/fs/cgroup rw - cgroup",
		"1 2 3 / /sys/fs/cgroup rw - cgroup cgroup",
		"1 2 3 / /sys/fs/cgroup rw - cgroup22 cgroup rw",
		"1 2 3 / /sys/fs/cgroup rw - cgroup2\n",
		"- - - - - - cgroup3",
		"\t1\t2\t3\t/\t/x\trw\t-\tcgroup2\tcgroup2\trw",
		"1 2 3 / /sys/fs/cgroup rw -- cgroup2 cgroup2 rw",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cs_cgroup_mounts m;
		memset(&m, 'x', sizeof(m));
		parse(bad[i], &m);
		if (strcmp(bad[i], "1 2 3 / /sys/fs/cgroup rw - cgroup2\n") == 0) {
			/* The type is all that is needed: source and options may be cut. */
			assert_string_equal(m.v2, "/sys/fs/cgroup");
			continue;
		}
		assert_no_mounts(&m);
	}
	/* A NUL inside a path would cut it short: that mount is not used, the
	 * next one is. Then a length of zero over real text. */
	static const char nul[] = "30 26 0:26 / /sys/fs\0cgroup rw - cgroup2 cgroup2 rw\n"
				  "31 26 0:27 /\0 /v2 rw - cgroup2 cgroup2 rw\n"
				  "32 26 0:28 / /v2b rw - cgroup2 cgroup2 rw\n";
	cs_cgroup_mounts m;
	parse_exact(nul, sizeof(nul) - 1, &m);
	assert_string_equal(m.v2, "/v2b");
	parse_exact(pure_v2, 0, &m);
	assert_no_mounts(&m);
}

/* Every prefix of a real file, each in a buffer of its exact length: a cut
 * line may be dropped, never half-read. */
static void mounts_every_prefix(void **state)
{
	(void)state;
	for (size_t len = 0; len <= sizeof(hybrid) - 1; len++) {
		cs_cgroup_mounts m;
		parse_exact(hybrid, len, &m);
		assert_mounts_terminated(&m);
		assert_true(m.v2[0] == '\0' || strcmp(m.v2, "/sys/fs/cgroup/unified") == 0);
		assert_true(m.v1[0] == '\0' || strcmp(m.v1, "/sys/fs/cgroup/freezer") == 0);
		if (len == sizeof(hybrid) - 1) {
			assert_string_equal(m.v2, "/sys/fs/cgroup/unified");
			assert_string_equal(m.v1, "/sys/fs/cgroup/freezer");
		}
	}
}

static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	assert_non_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* A path as long as the buffers hold is kept whole; a longer one is not
 * used at all (a cut path would name another directory), and the next
 * mount of that kind is taken instead. */
static void mounts_long_paths(void **state)
{
	(void)state;
	cs_cgroup_mounts m;
	char *fits = repeat('a', sizeof(m.v2) - 2), *over = repeat('b', sizeof(m.v2) - 1);
	char line[4 * sizeof(m.v2) + 256];

	snprintf(line, sizeof(line), "1 0 0:1 /%s /%s rw - cgroup2 cgroup2 rw\n", fits, fits);
	parse(line, &m);
	assert_int_equal(strlen(m.v2), sizeof(m.v2) - 1);
	assert_int_equal(strlen(m.v2_root), sizeof(m.v2_root) - 1);

	snprintf(line, sizeof(line),
		 "1 0 0:1 / /%s rw - cgroup2 cgroup2 rw\n"
		 "2 0 0:2 /%s /f rw - cgroup cgroup rw,freezer\n"
		 "3 0 0:3 / /v2 rw - cgroup2 cgroup2 rw\n"
		 "4 0 0:4 / /v1 rw - cgroup cgroup rw,freezer\n",
		 over, over);
	parse(line, &m);
	assert_mounts_terminated(&m);
	assert_string_equal(m.v2, "/v2");
	assert_string_equal(m.v1, "/v1");
	free(fits);
	free(over);
}

/* Lines of a megabyte: one field, a megabyte of separators, a megabyte of
 * optional fields, then a usable line. */
static void mounts_huge_lines(void **state)
{
	(void)state;
	size_t big = 1 << 20;
	char *one = repeat('x', big), *spaces = repeat(' ', big), *opt = repeat('o', big);
	for (size_t i = 1; i < big; i += 2)
		opt[i] = ' ';
	const char *tail = "\n30 26 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
	size_t cap = 3 * big + 256;
	char *text = malloc(cap);
	assert_non_null(text);
	int n = snprintf(text, cap, "%s\n%s\n1 2 3 / /huge rw %s%s", one, spaces, opt, tail);
	assert_true(n > 0 && (size_t)n < cap);
	cs_cgroup_mounts m;
	parse_exact(text, (size_t)n, &m);
	assert_string_equal(m.v2, "/sys/fs/cgroup");
	/* The same without the usable line, and cut in the middle of a field. */
	parse_exact(text, big + 3, &m);
	assert_no_mounts(&m);
	free(text);
	free(one);
	free(spaces);
	free(opt);
}

/* ---- /proc/PID/cgroup against a scratch mount layout --------------------- */

typedef struct fixture {
	char *dir;        /* top: holds v2/ and freezer/ */
	cs_cgroup_mounts m;
} fixture;

static int cg_setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->dir = tu_mkdtemp();
	snprintf(f->m.v2, sizeof(f->m.v2), "%s/v2", f->dir);
	snprintf(f->m.v2_root, sizeof(f->m.v2_root), "/");
	snprintf(f->m.v1, sizeof(f->m.v1), "%s/freezer", f->dir);
	snprintf(f->m.v1_root, sizeof(f->m.v1_root), "/");
	tu_write_str(f->dir, "v2/cgroup.events", "populated 1\nfrozen 0\n");
	tu_write_str(f->dir, "v2/frozen/cgroup.events", "populated 1\nfrozen 1\n");
	tu_write_str(f->dir, "v2/running/cgroup.events", "populated 1\nfrozen 0\n");
	tu_write_str(f->dir, "v2/last/cgroup.events", "populated 0\nfrozen 1");
	tu_write_str(f->dir, "v2/words/cgroup.events", "populated 1\nfrozen 0 frozen 1\nnot frozen 1\n");
	tu_write_str(f->dir, "freezer/freezer.state", "THAWED\n");
	tu_write_str(f->dir, "freezer/a/freezer.state", "FROZEN\n");
	tu_write_str(f->dir, "freezer/b/freezer.state", "FREEZING\n");
	tu_write_str(f->dir, "freezer/c/freezer.state", "THAWED\n");
	*state = f;
	return 0;
}

static int cg_teardown(void **state)
{
	fixture *f = *state;
	tu_rmrf(f->dir);
	free(f->dir);
	free(f);
	return 0;
}

static char *file_in(const fixture *f, const char *rel)
{
	return tu_path(f->dir, rel);
}

static void cgroup_v2(void **state)
{
	fixture *f = *state;
	char where[256] = "";
	assert_true(frozen_where("0::/frozen\n", &f->m, where, sizeof(where)));
	char *want = file_in(f, "v2/frozen/cgroup.events");
	assert_string_equal(where, want);
	free(want);

	assert_false(frozen("0::/running\n", &f->m));
	assert_false(frozen("0::/\n", &f->m));
	assert_false(frozen("0::/missing\n", &f->m));
	assert_false(frozen("0::/words\n", &f->m));
	/* The "frozen 1" line may end the file without a newline. */
	assert_true(frozen("0::/last", &f->m));
	/* v1 lines of a hybrid host around the v2 line. */
	assert_true(frozen("12:cpu,cpuacct:/x\n1:name=systemd:/y\n0::/frozen\n", &f->m));
}

static void cgroup_v1(void **state)
{
	fixture *f = *state;
	char where[256] = "";
	assert_true(frozen_where("7:freezer:/a\n", &f->m, where, sizeof(where)));
	char *want = file_in(f, "freezer/a/freezer.state");
	assert_string_equal(where, want);
	free(want);

	assert_true(frozen("7:freezer:/b\n", &f->m));
	assert_false(frozen("7:freezer:/c\n", &f->m));
	assert_false(frozen("7:freezer:/\n", &f->m));
	assert_false(frozen("7:freezer:/missing\n", &f->m));
	/* The controller list names the freezer among others, or not at all. */
	assert_true(frozen("7:cpu,freezer:/a\n", &f->m));
	assert_false(frozen("7:name=freezer:/a\n", &f->m));
	assert_false(frozen("7:freezers:/a\n", &f->m));
	assert_false(frozen("7:cpu:/a\n", &f->m));
	assert_true(frozen("1:name=systemd:/x\n12:cpu:/a\n7:freezer:/b\n0::/running\n", &f->m));
}

/* Only "0::" is the v2 line: a v1 hierarchy with no controllers, another
 * hierarchy number or a named hierarchy is not. */
static void cgroup_v2_line_only(void **state)
{
	fixture *f = *state;
	assert_false(frozen("1::/frozen\n", &f->m));
	assert_false(frozen("00::/frozen\n", &f->m));
	assert_false(frozen("10::/frozen\n", &f->m));
	assert_false(frozen(":::/frozen\n", &f->m));
	assert_false(frozen("::/frozen\n", &f->m));
	assert_false(frozen("0:name=systemd:/frozen\n", &f->m));
	assert_false(frozen("0:freezer:/frozen\n", &f->m));
	assert_false(frozen(" 0::/frozen\n", &f->m));
	/* A v1 line is never read against the v2 mount, nor v2 against v1. */
	assert_false(frozen("0::/a\n", &f->m));
	assert_false(frozen("7:freezer:/frozen\n", &f->m));
}

/* "/.." anywhere in the path could leave the mount: refused, even where
 * the directory it names is frozen. */
static void cgroup_dotdot(void **state)
{
	fixture *f = *state;
	tu_write_str(f->dir, "cgroup.events", "frozen 1\n");
	tu_write_str(f->dir, "freezer.state", "FROZEN\n");
	assert_false(frozen("0::/..\n", &f->m));
	assert_false(frozen("0::/../\n", &f->m));
	assert_false(frozen("0::/running/../frozen\n", &f->m));
	assert_false(frozen("0::/running/..\n", &f->m));
	assert_false(frozen("7:freezer:/..\n", &f->m));
	assert_false(frozen("7:freezer:/c/../a\n", &f->m));
	/* Even after the root is taken off. */
	snprintf(f->m.v2_root, sizeof(f->m.v2_root), "/docker/abc");
	assert_false(frozen("0::/docker/abc/..\n", &f->m));
	assert_false(frozen("0::/docker/abc/../abc/frozen\n", &f->m));
	/* ".." inside a name is no way out. */
	tu_write_str(f->dir, "v2/a..b/cgroup.events", "frozen 1\n");
	snprintf(f->m.v2_root, sizeof(f->m.v2_root), "/");
	assert_true(frozen("0::/a..b\n", &f->m));
}

/* In a container the mount shows the container's cgroup at its top, while
 * /proc/PID/cgroup gives the full path: the mount's root is taken off. */
static void cgroup_root_prefix(void **state)
{
	fixture *f = *state;
	snprintf(f->m.v2_root, sizeof(f->m.v2_root), "/docker/abc");
	snprintf(f->m.v1_root, sizeof(f->m.v1_root), "/docker/abc");
	assert_true(frozen("0::/docker/abc/frozen\n", &f->m));
	assert_false(frozen("0::/docker/abc/running\n", &f->m));
	assert_false(frozen("0::/docker/abc\n", &f->m));
	assert_true(frozen("7:freezer:/docker/abc/a\n", &f->m));
	assert_true(frozen("7:freezer:/docker/abc/b\n", &f->m));
	assert_false(frozen("7:freezer:/docker/abc\n", &f->m));

	/* The container's own cgroup, at the top of the mount. */
	tu_write_str(f->dir, "v2/cgroup.events", "frozen 1\n");
	tu_write_str(f->dir, "freezer/freezer.state", "FREEZING\n");
	assert_true(frozen("0::/docker/abc\n", &f->m));
	assert_true(frozen("7:freezer:/docker/abc\n", &f->m));
	tu_write_str(f->dir, "v2/cgroup.events", "frozen 0\n");
	tu_write_str(f->dir, "freezer/freezer.state", "THAWED\n");

	/* A sibling whose name starts with the root's is not under it:
	 * taking "/docker/abc" off "/docker/abcd/frozen" would give "d/frozen"
	 * and read beside the mount. */
	tu_write_str(f->dir, "v2d/frozen/cgroup.events", "frozen 1\n");
	assert_false(frozen("0::/docker/abcd/frozen\n", &f->m));
	/* A cgroup outside the root is not below the mount: looked up there
	 * it would be another cgroup (here the frozen one at v2/frozen). */
	assert_false(frozen("0::/frozen\n", &f->m));
	assert_false(frozen("0::/docker/frozen\n", &f->m));
	assert_false(frozen("0::/\n", &f->m));
	assert_false(frozen("0::\n", &f->m));
	assert_false(frozen("7:freezer:/a\n", &f->m));

	/* A root of "/" takes nothing off. */
	snprintf(f->m.v2_root, sizeof(f->m.v2_root), "/");
	assert_true(frozen("0::/frozen\n", &f->m));
	assert_false(frozen("0::/docker/abc/frozen\n", &f->m));
}

static void cgroup_malformed(void **state)
{
	fixture *f = *state;
	static const char *const bad[] = {
		"",
		"\n",
		"frozen",
		"0/frozen\n",
		"0:/frozen\n",
		"0frozen:\n",
		"/frozen\n",
		"0::",
		"0::\n",
		"7:freezer:\n",
		"7:freezer\n",
		"7:freezer/a\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(frozen(bad[i], &f->m));
	/* Lines without a colon do not hide the good one after them. */
	assert_true(frozen("garbage\n\n:\n0::/frozen\n", &f->m));
	assert_true(frozen("no colon at all\n7:freezer:/a", &f->m));
	/* A NUL inside the path is refused rather than cut short. */
	static const char nul[] = "0::/frozen\0/x\n";
	char *buf = tu_exact(nul, sizeof(nul) - 1);
	char where[64] = "";
	assert_false(cs_cgroup_frozen(buf, sizeof(nul) - 1, &f->m, where, sizeof(where)));
	free(buf);
}

/* Every prefix in a buffer of its exact length. */
static void cgroup_every_prefix(void **state)
{
	fixture *f = *state;
	static const char text[] = "12:cpu:/x\n7:freezer:/c\n0::/frozen";
	for (size_t len = 0; len <= sizeof(text) - 1; len++) {
		char *buf = tu_exact(text, len);
		char where[256] = "";
		bool r = cs_cgroup_frozen(buf, len, &f->m, where, sizeof(where));
		free(buf);
		assert_int_equal(r, len == sizeof(text) - 1);
	}
}

/* Paths longer than the file name buffer, and a small where. */
static void cgroup_long_paths(void **state)
{
	fixture *f = *state;
	char *name = repeat('n', 900);
	char line[1024];
	snprintf(line, sizeof(line), "0::/%s\n", name);
	assert_false(frozen(line, &f->m));
	snprintf(line, sizeof(line), "7:freezer:/%s\n", name);
	assert_false(frozen(line, &f->m));
	free(name);

	char where[8];
	memset(where, 'x', sizeof(where));
	assert_true(frozen_where("0::/frozen\n", &f->m, where, sizeof(where)));
	assert_int_equal(strlen(where), sizeof(where) - 1);
}

/* No mounts: nothing is read and nothing is frozen. */
static void cgroup_no_mounts(void **state)
{
	fixture *f = *state;
	cs_cgroup_mounts none;
	memset(&none, 0, sizeof(none));
	assert_false(frozen("0::/frozen\n7:freezer:/a\n", &none));
	/* One kind mounted: only its lines count. */
	cs_cgroup_mounts v2 = f->m, v1 = f->m;
	v2.v1[0] = '\0';
	v1.v2[0] = '\0';
	assert_false(frozen("7:freezer:/a\n", &v2));
	assert_true(frozen("0::/frozen\n", &v2));
	assert_false(frozen("0::/frozen\n", &v1));
	assert_true(frozen("7:freezer:/a\n", &v1));
}

/* ---- state letters and messages ------------------------------------------ */

static void halt_from_state(void **state)
{
	(void)state;
	assert_int_equal(cs_halt_from_state('T'), CS_HALT_STOPPED);
	assert_int_equal(cs_halt_from_state('t'), CS_HALT_TRACED);
	static const char others[] = "RSDZXxKWPI \0";
	for (size_t i = 0; i < sizeof(others); i++)
		assert_int_equal(cs_halt_from_state(others[i]), CS_HALT_NONE);
	assert_string_equal(cs_halt_name(CS_HALT_STOPPED), "stopped");
	assert_string_equal(cs_halt_name(CS_HALT_TRACED), "stopped");
	assert_string_equal(cs_halt_name(CS_HALT_FROZEN), "frozen");
	assert_null(cs_halt_name(CS_HALT_NONE));
	assert_null(cs_halt_name(42));
}

static void halt_messages(void **state)
{
	(void)state;
	cs_halt_info h = { .halt = CS_HALT_STOPPED, .tid = 12 };
	char buf[400];
	cs_halt_clause(&h, 123, buf, sizeof(buf));
	assert_non_null(strstr(buf, "kill -CONT 123"));
	h.halt = CS_HALT_TRACED;
	h.tracer = 4242;
	cs_halt_clause(&h, 123, buf, sizeof(buf));
	assert_non_null(strstr(buf, "4242"));
	h.tracer = 0;
	cs_halt_clause(&h, 123, buf, sizeof(buf));
	assert_null(strstr(buf, "process 0"));
	h.halt = CS_HALT_FROZEN;
	snprintf(h.where, sizeof(h.where), "/sys/fs/cgroup/x/cgroup.events");
	cs_halt_clause(&h, 123, buf, sizeof(buf));
	assert_non_null(strstr(buf, "/sys/fs/cgroup/x/cgroup.events"));
	h.halt = CS_HALT_NONE;
	cs_halt_clause(&h, 123, buf, sizeof(buf));
	assert_string_equal(buf, "running");

	cs_error err;
	memset(&err, 0, sizeof(err));
	h.halt = CS_HALT_FROZEN;
	assert_int_equal(cs_halt_error(&err, 77, NULL, &h, "checkpoint"), -CS_EPROC);
	assert_int_equal(err.status, CS_EPROC);
	assert_non_null(strstr(err.message, "cannot checkpoint process 77 (?)"));
	assert_non_null(strstr(err.hint, "freezer.state"));
	h.halt = CS_HALT_STOPPED;
	assert_int_equal(cs_halt_error(&err, 77, "python3", &h, "lock"), -CS_EPROC);
	assert_non_null(strstr(err.message, "cannot lock process 77 (python3)"));
	assert_non_null(strstr(err.hint, "kill -CONT"));
	/* A small buffer is cut, still terminated. */
	char small[10];
	cs_halt_clause(&h, 123, small, sizeof(small));
	assert_int_equal(strlen(small), sizeof(small) - 1);
}

/* ---- cs_proc_halt against a fake /proc ------------------------------------ */

/* A cgroup file that names no v2 hierarchy and no freezer, so that the
 * freezer part (which reads this machine's real mounts) stays neutral. */
static const char neutral_cgroup[] = "1:name=cs-unit-none:/\n";

static void fake_task(const char *proc, pid_t pid, pid_t tid, char state, const char *status)
{
	char rel[128];
	char *line = tu_stat_line(tid, "worker", state, 1, 1000);
	snprintf(rel, sizeof(rel), "%d/task/%d/stat", (int)pid, (int)tid);
	tu_write_str(proc, rel, line);
	free(line);
	if (status) {
		snprintf(rel, sizeof(rel), "%d/task/%d/status", (int)pid, (int)tid);
		tu_write_str(proc, rel, status);
	}
	snprintf(rel, sizeof(rel), "%d/cgroup", (int)pid);
	tu_write_str(proc, rel, neutral_cgroup);
}

static int proc_setup(void **state)
{
	char *proc = tu_mkdtemp();
	fake_task(proc, 100, 100, 'S', NULL);
	fake_task(proc, 100, 101, 'T', NULL);
	fake_task(proc, 200, 200, 'S', NULL);
	fake_task(proc, 200, 201, 't', "Name:\tworker\nState:\tt (tracing stop)\nTgid:\t200\nPid:\t201\n"
					"PPid:\t1\nTracerPid:\t4242\nUid:\t0\t0\t0\t0\n");
	fake_task(proc, 300, 300, 'R', NULL);
	fake_task(proc, 300, 301, 'S', NULL);
	fake_task(proc, 400, 400, 'T', NULL);
	fake_task(proc, 500, 500, 'R', NULL);
	fake_task(proc, 600, 600, 't', NULL);
	fake_task(proc, 700, 700, 't', "Name:\tworker\nTracerPid:\tnonsense\n");
	tu_mkdirs(proc, "800/task");
	*state = proc;
	return 0;
}

static int proc_teardown(void **state)
{
	tu_rmrf(*state);
	free(*state);
	return 0;
}

static cs_halt proc_halt(const char *proc, pid_t pid, pid_t tid, cs_halt_info *h)
{
	memset(h, 0x5a, sizeof(*h));
	cs_halt r = cs_proc_halt(proc, pid, tid, h);
	assert_int_equal(r, h->halt);
	assert_true(strnlen(h->where, sizeof(h->where)) < sizeof(h->where));
	return r;
}

static void proc_stopped_thread(void **state)
{
	const char *proc = *state;
	cs_halt_info h;
	assert_int_equal(proc_halt(proc, 100, 101, &h), CS_HALT_STOPPED);
	assert_int_equal(h.tid, 101);
	assert_int_equal(h.tracer, 0);
	assert_string_equal(h.where, "");
	/* The process's main thread runs: asked about it, not halted. */
	assert_int_equal(proc_halt(proc, 100, 0, &h), CS_HALT_NONE);
	assert_int_equal(h.tid, 100);
	assert_int_equal(proc_halt(proc, 100, 100, &h), CS_HALT_NONE);
	/* out may be NULL. */
	assert_int_equal(cs_proc_halt(proc, 100, 101, NULL), CS_HALT_STOPPED);
}

static void proc_traced_thread(void **state)
{
	const char *proc = *state;
	cs_halt_info h;
	assert_int_equal(proc_halt(proc, 200, 201, &h), CS_HALT_TRACED);
	assert_int_equal(h.tid, 201);
	assert_int_equal(h.tracer, 4242);
	/* No status file, or no number in it: traced by someone unknown. */
	assert_int_equal(proc_halt(proc, 600, 0, &h), CS_HALT_TRACED);
	assert_int_equal(h.tid, 600);
	assert_int_equal(h.tracer, 0);
	assert_int_equal(proc_halt(proc, 700, 0, &h), CS_HALT_TRACED);
	assert_int_equal(h.tracer, 0);
}

static void proc_running(void **state)
{
	const char *proc = *state;
	cs_halt_info h;
	assert_int_equal(proc_halt(proc, 300, 301, &h), CS_HALT_NONE);
	assert_int_equal(h.tid, 301);
	assert_int_equal(h.tracer, 0);
	assert_string_equal(h.where, "");
	assert_int_equal(proc_halt(proc, 300, 0, &h), CS_HALT_NONE);
	assert_int_equal(h.tid, 300);
}

/* A restore thread that is gone: the process itself is judged. */
static void proc_missing_thread(void **state)
{
	const char *proc = *state;
	cs_halt_info h;
	assert_int_equal(proc_halt(proc, 400, 401, &h), CS_HALT_STOPPED);
	assert_int_equal(h.tid, 400);
	assert_int_equal(proc_halt(proc, 500, 501, &h), CS_HALT_NONE);
	assert_int_equal(h.tid, 500);
	/* A thread of another process is not looked for there. */
	assert_int_equal(proc_halt(proc, 300, 101, &h), CS_HALT_NONE);
	assert_int_equal(h.tid, 300);
}

/* Nothing to read: not halted, and the caller's own checks say why. */
static void proc_missing_process(void **state)
{
	const char *proc = *state;
	cs_halt_info h;
	assert_int_equal(proc_halt(proc, 999, 0, &h), CS_HALT_NONE);
	assert_int_equal(h.tid, 0);
	assert_int_equal(h.tracer, 0);
	assert_string_equal(h.where, "");
	assert_int_equal(proc_halt(proc, 999, 1000, &h), CS_HALT_NONE);
	/* A process directory with no task files, and no cgroup file. */
	assert_int_equal(proc_halt(proc, 800, 0, &h), CS_HALT_NONE);
	assert_int_equal(proc_halt(proc, 800, 801, &h), CS_HALT_NONE);
	/* No proc directory at all. */
	char *gone = tu_path(proc, "no-such-dir");
	assert_int_equal(proc_halt(gone, 100, 101, &h), CS_HALT_NONE);
	free(gone);
	assert_int_equal(proc_halt(proc, -1, 0, &h), CS_HALT_NONE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(mounts_pure_v2),
		cmocka_unit_test(mounts_hybrid),
		cmocka_unit_test(mounts_v1_freezer_options),
		cmocka_unit_test(mounts_v1_memory),
		cmocka_unit_test(mounts_read),
		cmocka_unit_test(mounts_container_root),
		cmocka_unit_test(mounts_optional_fields),
		cmocka_unit_test(mounts_first_wins),
		cmocka_unit_test(mounts_escaped_paths),
		cmocka_unit_test(mounts_garbage),
		cmocka_unit_test(mounts_every_prefix),
		cmocka_unit_test(mounts_long_paths),
		cmocka_unit_test(mounts_huge_lines),
		cmocka_unit_test_setup_teardown(cgroup_v2, cg_setup, cg_teardown),
		cmocka_unit_test_setup_teardown(cgroup_v1, cg_setup, cg_teardown),
		cmocka_unit_test_setup_teardown(cgroup_v2_line_only, cg_setup, cg_teardown),
		cmocka_unit_test_setup_teardown(cgroup_dotdot, cg_setup, cg_teardown),
		cmocka_unit_test_setup_teardown(cgroup_root_prefix, cg_setup, cg_teardown),
		cmocka_unit_test_setup_teardown(cgroup_malformed, cg_setup, cg_teardown),
		cmocka_unit_test_setup_teardown(cgroup_every_prefix, cg_setup, cg_teardown),
		cmocka_unit_test_setup_teardown(cgroup_long_paths, cg_setup, cg_teardown),
		cmocka_unit_test_setup_teardown(cgroup_no_mounts, cg_setup, cg_teardown),
		cmocka_unit_test(halt_from_state),
		cmocka_unit_test(halt_messages),
		cmocka_unit_test_setup_teardown(proc_stopped_thread, proc_setup, proc_teardown),
		cmocka_unit_test_setup_teardown(proc_traced_thread, proc_setup, proc_teardown),
		cmocka_unit_test_setup_teardown(proc_running, proc_setup, proc_teardown),
		cmocka_unit_test_setup_teardown(proc_missing_thread, proc_setup, proc_teardown),
		cmocka_unit_test_setup_teardown(proc_missing_process, proc_setup, proc_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
