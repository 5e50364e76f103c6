/* cs_discover over scratch trees laid out like /proc and /dev, without a
 * driver, and the process-tree helpers over the table it builds. */
#include "cudasnap.h"
#include "proc.h"
#include "testutil.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

typedef struct fixture {
	char *proc;
	char *dev;
	char *nv0, *nvctl, *uvm;
} fixture;

static const char libc_maps[] =
	"55d4a0a00000-55d4a0a21000 r--p 00000000 08:01 1234567 /usr/bin/python3.11\n"
	"7f3c8e000000-7f3c8e021000 rw-p 00000000 00:00 0 \n"
	"7f3c8e200000-7f3c8e228000 r--p 00000000 08:01 2345 /usr/lib/x86_64-linux-gnu/libc.so.6\n";

static char *maps_of(const char *a, const char *b, const char *c)
{
	char *s = NULL;
	assert_true(asprintf(&s,
			     "%s"
			     "7f0000010000-7f0000011000 rw-s 00000000 00:05 600 %s\n"
			     "7f0000020000-7f0000021000 rw-s 00000000 00:05 601 %s\n"
			     "7f0000030000-7f0000031000 r-xp 00000000 08:01 602 %s\n",
			     libc_maps, a, b, c) > 0);
	return s;
}

static const char libcuda[] = "/usr/lib/x86_64-linux-gnu/libcuda.so.1";
static const char nvml[] = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";
static const char libc[] = "/usr/lib/x86_64-linux-gnu/libc.so.6";

static bool pid_free(pid_t pid)
{
	return pid != getpid();
}

/* The pids below must not collide with the test's own, which cs_discover
 * leaves out. */
static const pid_t used_pids[] = { 1, 2, 3, 101, 102, 103, 104, 105, 106, 107, 108, 109,
				   201, 202, 203, 204, 205, 206 };

/* Kernel threads carry PF_KTHREAD (0x00200000) in stat field 9. */
static void kthread_stat(const fixture *f, pid_t pid, pid_t ppid, const char *comm,
			 unsigned long long start)
{
	char rel[32], line[256];
	snprintf(line, sizeof(line),
		 "%d (%s) I %d 0 0 0 -1 69238880 0 0 0 0 0 0 0 0 0 -20 1 0 %llu 0 0 "
		 "18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 0 0 0 0 0 0\n",
		 (int)pid, comm, (int)ppid, start);
	snprintf(rel, sizeof(rel), "%d/stat", (int)pid);
	tu_write_str(f->proc, rel, line);
}

static void build_tree(fixture *f)
{
	for (size_t i = 0; i < CS_ARRAY_SIZE(used_pids); i++)
		if (!pid_free(used_pids[i]))
			skip();
	char *m;
	tu_fake_proc(f->proc, 1, 0, "systemd", 5, libc_maps);
	tu_fake_fd(f->proc, 1, 0, "/dev/null");
	tu_fake_proc(f->proc, 2, 0, "kthreadd", 5, NULL);
	kthread_stat(f, 2, 0, "kthreadd", 5);
	tu_fake_proc(f->proc, 3, 2, "kworker/0:1", 6, NULL);
	kthread_stat(f, 3, 2, "kworker/0:1", 6);
	char *fd3 = tu_path(f->proc, "3/fd");
	assert_int_equal(rmdir(fd3), 0);
	free(fd3);
	tu_write_str(f->proc, "3/fd", "");

	m = maps_of(f->nv0, f->uvm, libcuda);
	tu_fake_proc(f->proc, 101, 1, "python3", 1000, m);
	free(m);
	tu_fake_fd(f->proc, 101, 3, f->nvctl);
	tu_fake_fd(f->proc, 101, 4, f->nv0);
	tu_fake_fd(f->proc, 101, 5, "/dev/null");
	tu_fake_fd(f->proc, 101, 6, "socket:[4242]");

	m = maps_of(libc, libc, libcuda);
	tu_fake_proc(f->proc, 102, 101, "only-libcuda", 1001, m);
	free(m);
	tu_fake_fd(f->proc, 102, 0, "/dev/null");

	m = maps_of(libc, nvml, libc);
	tu_fake_proc(f->proc, 103, 102, "only-nvml", 1002, m);
	free(m);

	/* Holds a device fd; its maps vanished meanwhile. */
	tu_fake_proc(f->proc, 104, 103, "a) (b", 1003, NULL);
	tu_fake_fd(f->proc, 104, 7, f->uvm);

	/* Exited between readdir and open: the directory has no stat left. */
	tu_mkdirs(f->proc, "105/fd");
	tu_fake_fd(f->proc, 105, 3, f->nv0);

	m = maps_of(f->nv0, libc, libc);
	tu_fake_proc(f->proc, 106, 101, "bad-fd", 1005, m);
	free(m);
	char *fd106 = tu_path(f->proc, "106/fd");
	assert_int_equal(rmdir(fd106), 0);
	free(fd106);
	tu_write_str(f->proc, "106/fd", "");

	tu_fake_proc(f->proc, 107, 101, "bad-maps", 1006, NULL);
	tu_fake_fd(f->proc, 107, 3, f->nv0);
	tu_mkdirs(f->proc, "107/maps");

	tu_write_str(f->proc, "108/stat", "108 (x) S garbage\n");
	tu_fake_fd(f->proc, 108, 3, f->nv0);
	tu_write_str(f->proc, "109/stat", "");
	tu_fake_fd(f->proc, 109, 3, f->nv0);

	tu_fake_proc(f->proc, 201, 202, "cyc-a", 2001, libc_maps);
	tu_fake_fd(f->proc, 201, 3, f->nv0);
	tu_fake_proc(f->proc, 202, 201, "cyc-b", 2002, libc_maps);
	tu_fake_fd(f->proc, 202, 3, f->nvctl);
	tu_fake_proc(f->proc, 203, 204, "cyc-c", 2003, libc_maps);
	tu_fake_proc(f->proc, 204, 203, "cyc-d", 2004, libc_maps);
	tu_fake_proc(f->proc, 205, 205, "own-parent", 2005, libc_maps);
	tu_fake_proc(f->proc, 206, 205, "child", 2006, libc_maps);
	tu_fake_fd(f->proc, 206, 9, f->nv0);

	/* Entries that are not processes of this namespace. */
	tu_symlink("101", f->proc, "self");
	tu_mkdirs(f->proc, "abc/fd");
	tu_fake_proc(f->proc, 0, 0, "zero", 1, NULL);
	tu_fake_fd(f->proc, 0, 3, f->nv0);
	tu_write_str(f->proc, "uptime", "1.0 1.0\n");
	tu_fake_proc(f->proc, getpid(), 1, "me", 1, NULL);
	tu_fake_fd(f->proc, getpid(), 3, f->nv0);
}

static int setup(void **state)
{
	umask(022);
	fixture *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	f->proc = tu_mkdtemp();
	f->dev = tu_fake_devdir();
	f->nv0 = tu_path(f->dev, "nvidia0");
	f->nvctl = tu_path(f->dev, "nvidiactl");
	f->uvm = tu_path(f->dev, "nvidia-uvm");
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	fixture *f = *state;
	tu_rmrf(f->proc);
	tu_rmrf(f->dev);
	free(f->proc);
	free(f->dev);
	free(f->nv0);
	free(f->nvctl);
	free(f->uvm);
	free(f);
	return 0;
}

static int by_unreadable(const void *a, const void *b)
{
	const cs_unreadable *x = a, *y = b;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

static void check_default_scan(const fixture *f, const cs_ptable *t)
{
	assert_int_equal(t->self, getpid());
	assert_int_equal(t->scanned, CS_ARRAY_SIZE(used_pids));

	static const struct {
		pid_t pid;
		cs_class cls;
		int fds, maps;
		bool libcuda;
	} want[] = {
		{ 101, CS_CLASS_DEVICE_HOLDER, 2, 2, true },
		{ 102, CS_CLASS_UNKNOWN, 0, 0, true },
		{ 104, CS_CLASS_DEVICE_HOLDER, 1, 0, false },
		{ 201, CS_CLASS_DEVICE_HOLDER, 1, 0, false },
		{ 202, CS_CLASS_DEVICE_HOLDER, 1, 0, false },
		{ 206, CS_CLASS_DEVICE_HOLDER, 1, 0, false },
	};
	assert_int_equal(t->n, CS_ARRAY_SIZE(want));
	for (size_t i = 0; i < t->n; i++) {
		const cs_proc *p = &t->procs[i];
		assert_int_equal(p->pid, want[i].pid);
		if (p->cls != want[i].cls)
			fail_msg("pid %d: class %s, want %s", (int)p->pid, cs_class_name(p->cls),
				 cs_class_name(want[i].cls));
		assert_int_equal(p->device_fds, want[i].fds);
		assert_int_equal(p->device_maps, want[i].maps);
		assert_int_equal(p->nrefs, (size_t)(want[i].fds + want[i].maps));
		assert_int_equal(p->maps_libcuda, want[i].libcuda);
		assert_false(p->maps_nvml);
		assert_int_equal(p->state, CS_STATE_UNKNOWN);
		assert_int_equal(p->cu_result, -1);
		assert_int_equal(p->restore_tid, 0);
		assert_int_equal(p->uid, geteuid());
		assert_ptr_equal(cs_ptable_find(t, p->pid), p);
	}

	const cs_proc *p = cs_ptable_find(t, 101);
	assert_non_null(p);
	assert_string_equal(p->comm, "python3");
	assert_int_equal(p->ppid, 1);
	assert_int_equal(p->start_time, 1000);
	/* The nvidia0 mapping has an fd to the same file; the uvm one does not. */
	int maps_seen = 0;
	for (size_t i = 0; i < p->nrefs; i++) {
		const cs_devref *r = &p->refs[i];
		if (r->kind == CS_REF_FD) {
			assert_true((r->fd == 3 && strcmp(r->path, f->nvctl) == 0) ||
				    (r->fd == 4 && strcmp(r->path, f->nv0) == 0));
			continue;
		}
		maps_seen++;
		if (r->start == 0x7f0000010000UL) {
			assert_string_equal(r->path, f->nv0);
			assert_true(r->fd_open);
		} else {
			assert_int_equal(r->start, 0x7f0000020000UL);
			assert_string_equal(r->path, f->uvm);
			assert_false(r->fd_open);
		}
	}
	assert_int_equal(maps_seen, 2);

	p = cs_ptable_find(t, 104);
	assert_non_null(p);
	assert_string_equal(p->comm, "a) (b");
	assert_int_equal(p->refs[0].fd, 7);

	assert_null(cs_ptable_find(t, 1));
	assert_null(cs_ptable_find(t, 103));
	assert_null(cs_ptable_find(t, 105));
	assert_null(cs_ptable_find(t, 106));
	assert_null(cs_ptable_find(t, getpid()));
	assert_null(cs_ptable_find(t, 0));

	/* Every process whose stat could be read has a link, GPU or not. */
	static const pid_t linked[] = { 1, 2, 3, 101, 102, 103, 104, 106, 107,
					201, 202, 203, 204, 205, 206 };
	assert_int_equal(t->nlinks, CS_ARRAY_SIZE(linked));
	for (size_t i = 0; i < t->nlinks; i++)
		assert_int_equal(t->links[i].pid, linked[i]);

	assert_int_equal(t->nunreadable, 3);
	cs_unreadable u[3];
	memcpy(u, t->unreadable, sizeof(u));
	qsort(u, 3, sizeof(u[0]), by_unreadable);
	assert_int_equal(u[0].pid, 106);
	assert_int_equal(u[0].errnum, ENOTDIR);
	assert_int_equal(u[1].pid, 107);
	assert_int_equal(u[1].errnum, EISDIR);
	assert_int_equal(u[2].pid, 108);
	assert_int_equal(u[2].errnum, EIO);
}

static void discover_classes(void **state)
{
	fixture *f = *state;
	build_tree(f);
	cs_scan_opts o = { .proc_dir = f->proc, .dev_dir = f->dev };
	cs_ptable t;
	cs_error err = { 0 };
	assert_int_equal(cs_discover(&o, NULL, &t, &err), 0);
	check_default_scan(f, &t);
	cs_ptable_free(&t);
	assert_null(t.procs);
	assert_int_equal(t.n, 0);
	assert_null(t.links);
	assert_null(t.unreadable);
	cs_ptable_free(NULL);
}

static void discover_tree_helpers(void **state)
{
	fixture *f = *state;
	build_tree(f);
	cs_scan_opts o = { .proc_dir = f->proc, .dev_dir = f->dev };
	cs_ptable t;
	assert_int_equal(cs_discover(&o, NULL, &t, NULL), 0);

	assert_int_equal(cs_ptable_parent(&t, 104), 103);
	assert_int_equal(cs_ptable_parent(&t, 101), 1);
	assert_int_equal(cs_ptable_parent(&t, 1), 0);
	assert_int_equal(cs_ptable_parent(&t, 106), 101);
	assert_int_equal(cs_ptable_parent(&t, 105), 0);
	assert_int_equal(cs_ptable_parent(&t, 108), 0);
	assert_int_equal(cs_ptable_parent(&t, 4000000), 0);
	assert_int_equal(cs_ptable_parent(&t, 0), 0);
	assert_int_equal(cs_ptable_parent(&t, -1), 0);

	assert_int_equal(cs_ptable_listed_ancestor(&t, 104), 102);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 103), 102);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 102), 101);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 106), 101);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 101), 0);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 1), 0);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 999), 0);

	assert_true(cs_ptable_descends(&t, 104, 104));
	assert_true(cs_ptable_descends(&t, 104, 103));
	assert_true(cs_ptable_descends(&t, 104, 101));
	assert_true(cs_ptable_descends(&t, 104, 1));
	assert_false(cs_ptable_descends(&t, 101, 104));
	assert_false(cs_ptable_descends(&t, 104, 106));
	assert_false(cs_ptable_descends(&t, 104, 0));
	assert_false(cs_ptable_descends(&t, 0, 1));
	assert_false(cs_ptable_descends(&t, 999, 1));

	/* Loops in the parent links end the walk instead of spinning. */
	assert_int_equal(cs_ptable_listed_ancestor(&t, 201), 202);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 202), 201);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 203), 0);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 205), 0);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 206), 0);
	assert_true(cs_ptable_descends(&t, 201, 202));
	assert_true(cs_ptable_descends(&t, 202, 201));
	assert_false(cs_ptable_descends(&t, 201, 1));
	assert_false(cs_ptable_descends(&t, 203, 1));
	assert_true(cs_ptable_descends(&t, 206, 205));
	assert_false(cs_ptable_descends(&t, 206, 1));
	assert_false(cs_ptable_descends(&t, 205, 206));
	cs_ptable_free(&t);
}

static void discover_keep_all(void **state)
{
	fixture *f = *state;
	build_tree(f);
	cs_scan_opts o = { .proc_dir = f->proc, .dev_dir = f->dev, .keep_all = true };
	cs_ptable t;
	assert_int_equal(cs_discover(&o, NULL, &t, NULL), 0);
	static const struct {
		pid_t pid;
		cs_class cls;
	} want[] = {
		{ 1, CS_CLASS_NONE },	      { 2, CS_CLASS_NONE },
		{ 3, CS_CLASS_NONE },	      { 101, CS_CLASS_DEVICE_HOLDER },
		{ 102, CS_CLASS_UNKNOWN },    { 103, CS_CLASS_NONE },
		{ 104, CS_CLASS_DEVICE_HOLDER }, { 201, CS_CLASS_DEVICE_HOLDER },
		{ 202, CS_CLASS_DEVICE_HOLDER }, { 203, CS_CLASS_NONE },
		{ 204, CS_CLASS_NONE },	      { 205, CS_CLASS_NONE },
		{ 206, CS_CLASS_DEVICE_HOLDER },
	};
	assert_int_equal(t.n, CS_ARRAY_SIZE(want));
	for (size_t i = 0; i < t.n; i++) {
		assert_int_equal(t.procs[i].pid, want[i].pid);
		assert_int_equal(t.procs[i].cls, want[i].cls);
	}
	assert_true(cs_ptable_find(&t, 103)->maps_nvml);
	assert_int_equal(t.nunreadable, 3);
	cs_ptable_free(&t);
}

static void discover_from_environment(void **state)
{
	fixture *f = *state;
	build_tree(f);
	assert_int_equal(setenv("CUDASNAP_PROC_DIR", f->proc, 1), 0);
	assert_int_equal(setenv("CUDASNAP_DEV_DIR", f->dev, 1), 0);
	assert_string_equal(cs_proc_dir(), f->proc);
	assert_string_equal(cs_dev_dir(), f->dev);

	cs_ptable t;
	assert_int_equal(cs_discover(NULL, NULL, &t, NULL), 0);
	check_default_scan(f, &t);
	cs_ptable_free(&t);

	cs_scan_opts o = { 0 };
	assert_int_equal(cs_discover(&o, NULL, &t, NULL), 0);
	check_default_scan(f, &t);
	cs_ptable_free(&t);

	/* The options win over the environment. */
	char *empty = tu_mkdtemp();
	o.dev_dir = empty;
	assert_int_equal(cs_discover(&o, NULL, &t, NULL), 0);
	assert_int_equal(t.n, 2);
	assert_int_equal(t.procs[0].pid, 101);
	assert_int_equal(t.procs[0].cls, CS_CLASS_UNKNOWN);
	assert_int_equal(t.procs[1].pid, 102);
	assert_int_equal(t.procs[1].cls, CS_CLASS_UNKNOWN);
	cs_ptable_free(&t);
	tu_rmrf(empty);
	free(empty);

	assert_int_equal(setenv("CUDASNAP_PROC_DIR", "", 1), 0);
	assert_int_equal(setenv("CUDASNAP_DEV_DIR", "", 1), 0);
	assert_string_equal(cs_proc_dir(), "/proc");
	assert_string_equal(cs_dev_dir(), "/dev");
	unsetenv("CUDASNAP_PROC_DIR");
	unsetenv("CUDASNAP_DEV_DIR");
	assert_string_equal(cs_proc_dir(), "/proc");
	assert_string_equal(cs_dev_dir(), "/dev");
}

static void discover_missing_proc(void **state)
{
	fixture *f = *state;
	char *gone = tu_path(f->proc, "not-here");
	cs_scan_opts o = { .proc_dir = gone, .dev_dir = f->dev };
	cs_ptable t;
	memset(&t, 0xa5, sizeof(t));
	cs_error err = { 0 };
	int r = cs_discover(&o, NULL, &t, &err);
	assert_int_equal(r, -CS_EENV);
	assert_int_equal(err.status, CS_EENV);
	assert_int_equal(err.sys, ENOENT);
	assert_non_null(strstr(err.message, gone));
	assert_null(t.procs);
	assert_int_equal(t.n, 0);
	assert_null(t.links);
	assert_null(t.unreadable);

	/* A file where the directory should be. */
	char *file = tu_path(f->proc, "file");
	tu_write_str(f->proc, "file", "x");
	o.proc_dir = file;
	assert_true(cs_discover(&o, NULL, &t, NULL) < 0);
	free(file);
	free(gone);
}

/* Permission bits do not stop root, so the unreadable case runs in a child
 * that has given up root. */
static int unreadable_child(const fixture *f)
{
	if (geteuid() == 0) {
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			return 77;
		if (setuid(0) == 0)
			return 77;
	}
	cs_scan_opts o = { .proc_dir = f->proc, .dev_dir = f->dev };
	cs_ptable t;
	if (cs_discover(&o, NULL, &t, NULL) < 0)
		return 10;
	int rc = 0;
	if (t.n != 1 || t.procs[0].pid != 302 || t.procs[0].cls != CS_CLASS_DEVICE_HOLDER)
		rc = 11;
	else if (t.nunreadable != 1 || t.unreadable[0].pid != 301 || t.unreadable[0].errnum != EACCES)
		rc = 12;
	else if (t.nlinks != 2)
		rc = 13;
	cs_ptable_free(&t);
	return rc;
}

static void discover_unreadable_by_permission(void **state)
{
	fixture *f = *state;
	char *m = maps_of(f->nv0, libc, libc);
	tu_fake_proc(f->proc, 301, 1, "private", 1, m);
	tu_fake_fd(f->proc, 301, 3, f->nv0);
	tu_fake_proc(f->proc, 302, 1, "public", 1, m);
	tu_fake_fd(f->proc, 302, 3, f->nv0);
	free(m);
	if (!pid_free(301) || !pid_free(302))
		skip();
	char *fd = tu_path(f->proc, "301/fd");
	assert_int_equal(chmod(fd, 0), 0);
	free(fd);

	fflush(NULL);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0)
		_exit(unreadable_child(f));
	int st;
	assert_int_equal(waitpid(child, &st, 0), child);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == 77)
		skip();
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- tree helpers over hand-made tables ---------------------------------- */

static void tree_long_chain(void **state)
{
	(void)state;
	enum { N = 20000 };
	cs_link *links = calloc(N, sizeof(*links));
	cs_proc root = { .pid = 1 };
	assert_non_null(links);
	for (int i = 0; i < N; i++)
		links[i] = (cs_link){ .pid = i + 1, .ppid = i };
	cs_ptable t = { .procs = &root, .n = 1, .links = links, .nlinks = N };
	assert_int_equal(cs_ptable_listed_ancestor(&t, N), 1);
	assert_true(cs_ptable_descends(&t, N, 1));
	assert_true(cs_ptable_descends(&t, N, N / 2));
	assert_false(cs_ptable_descends(&t, N / 2, N));
	assert_false(cs_ptable_descends(&t, N, N + 1));
	assert_int_equal(cs_ptable_listed_ancestor(&t, 1), 0);

	/* Close the chain into one big loop: the walks still end. */
	links[0].ppid = N;
	assert_int_equal(cs_ptable_listed_ancestor(&t, 1), 0); /* itself is no ancestor */
	assert_int_equal(cs_ptable_listed_ancestor(&t, 2), 1);
	assert_false(cs_ptable_descends(&t, N, N + 1));
	root.pid = N + 5;
	assert_int_equal(cs_ptable_listed_ancestor(&t, 7), 0);
	free(links);
}

static void tree_small_loops(void **state)
{
	(void)state;
	cs_link links[] = { { 10, 30 }, { 20, 10 }, { 30, 20 }, { 40, 40 }, { 50, 40 }, { 60, -3 } };
	cs_proc listed[] = { { .pid = 20 }, { .pid = 50 } };
	cs_ptable t = { .procs = listed, .n = 2, .links = links, .nlinks = CS_ARRAY_SIZE(links) };
	assert_int_equal(cs_ptable_listed_ancestor(&t, 10), 20);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 30), 20);
	/* Inside a loop the walk may come back to the process itself; all that
	 * matters here is that it stops. */
	pid_t a = cs_ptable_listed_ancestor(&t, 20);
	assert_true(a == 0 || a == 20);
	assert_false(cs_ptable_descends(&t, 10, 99));
	assert_true(cs_ptable_descends(&t, 10, 30));
	assert_int_equal(cs_ptable_listed_ancestor(&t, 40), 0);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 50), 0);
	assert_false(cs_ptable_descends(&t, 50, 99));
	assert_true(cs_ptable_descends(&t, 50, 40));
	assert_int_equal(cs_ptable_parent(&t, 60), -3);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 60), 0);
	assert_false(cs_ptable_descends(&t, 60, -3));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(discover_classes, setup, teardown),
		cmocka_unit_test_setup_teardown(discover_tree_helpers, setup, teardown),
		cmocka_unit_test_setup_teardown(discover_keep_all, setup, teardown),
		cmocka_unit_test_setup_teardown(discover_from_environment, setup, teardown),
		cmocka_unit_test_setup_teardown(discover_missing_proc, setup, teardown),
		cmocka_unit_test_setup_teardown(discover_unreadable_by_permission, setup, teardown),
		cmocka_unit_test(tree_long_chain),
		cmocka_unit_test(tree_small_loops),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
