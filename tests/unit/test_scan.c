/* The readers over an open /proc/PID directory, run against scratch trees
 * laid out like /proc, including process sizes far beyond one read buffer. */
#include "proc.h"
#include "testutil.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

/* The reader streams maps through a buffer of this size; a line that does
 * not fit is skipped. */
#define MAPS_BUF (64 * 1024)

typedef struct fixture {
	char *proc;
	char *dev;
} fixture;

static int setup(void **state)
{
	fixture *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	f->proc = tu_mkdtemp();
	f->dev = tu_fake_devdir();
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
	free(f);
	return 0;
}

static int open_pid(const fixture *f, pid_t pid)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%d", f->proc, (int)pid);
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

/* A growable text buffer for building large maps files. */
typedef struct text {
	char *s;
	size_t len, cap;
} text;

static void text_add(text *t, const char *s, size_t n)
{
	assert_int_equal(cs_grow(&t->s, &t->cap, t->len + n + 1, 1), 0);
	memcpy(t->s + t->len, s, n);
	t->len += n;
	t->s[t->len] = '\0';
}

static void text_adds(text *t, const char *s)
{
	text_add(t, s, strlen(s));
}

static void text_line(text *t, unsigned long start, const char *path)
{
	char *l = tu_maps_line(start, start + 0x1000, path);
	text_adds(t, l);
	free(l);
}

/* A device mapping whose line, without its newline, is exactly len bytes. */
static void text_device_line_of(text *t, const char *dev, unsigned long start, size_t len)
{
	char head[256];
	int n = snprintf(head, sizeof(head), "%08lx-%08lx rw-s 00000000 00:05 1 %s/nvidia", start,
			 start + 0x1000, dev);
	assert_true(n > 0 && (size_t)n < len);
	text_add(t, head, (size_t)n);
	char *pad = malloc(len - (size_t)n);
	assert_non_null(pad);
	memset(pad, 'x', len - (size_t)n);
	text_add(t, pad, len - (size_t)n);
	free(pad);
}

static void maps_hundred_thousand(void **state)
{
	fixture *f = *state;
	enum { LINES = 100000, FDS = 300 };
	char *nv[3] = { tu_path(f->dev, "nvidia0"), tu_path(f->dev, "nvidiactl"),
			tu_path(f->dev, "nvidia-uvm") };
	char *cap = tu_path(f->dev, "nvidia-caps/nvidia-cap1");
	char *libcuda = "/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15";
	char *nvml = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";

	text t = { 0 };
	size_t want_maps = 0;
	for (unsigned long i = 0; i < LINES; i++) {
		unsigned long start = 0x7f0000000000UL + i * 0x2000;
		switch (i % 10) {
		case 0:
			text_line(&t, start, nv[(i / 10) % 3]);
			want_maps++;
			break;
		case 1:
			text_line(&t, start, cap); /* MIG capability files count too */
			want_maps++;
			break;
		case 2:
			text_line(&t, start, NULL);
			break;
		case 3:
			text_line(&t, start, i % 20 == 3 ? "[heap]" : "[anon:scudo:primary]");
			break;
		case 4:
			text_line(&t, start, "/tmp/a file with spaces (deleted)");
			break;
		default:
			text_line(&t, start, i == 50005 ? libcuda : i == 50006 ? nvml
							   : "/usr/lib/x86_64-linux-gnu/libc.so.6");
		}
	}
	tu_fake_proc(f->proc, 4242, 1, "python3", 100, t.s);

	size_t want_fds = 0;
	for (int fd = 0; fd < FDS; fd++) {
		static const char *const other[] = { "/dev/null", "socket:[1234]", "pipe:[55]",
						     "anon_inode:[eventfd]", "/dev/nvidia0" };
		const char *target = fd % 3 == 0 ? nv[(fd / 3) % 3] : other[fd % 5];
		tu_fake_fd(f->proc, 4242, fd, target);
		want_fds += fd % 3 == 0;
	}
	/* Not an fd number: must be ignored even though it points at a device. */
	tu_symlink(nv[0], f->proc, "4242/fd/foo");
	tu_symlink(nv[0], f->proc, "4242/fd/-1");

	int pdir = open_pid(f, 4242);
	cs_proc p = { .pid = 4242 };
	assert_int_equal(cs_proc_scan_fds(pdir, f->dev, &p), 0);
	assert_int_equal(p.device_fds, want_fds);
	assert_int_equal(p.nrefs, want_fds);
	bool seen[FDS] = { false };
	for (size_t i = 0; i < p.nrefs; i++) {
		assert_int_equal(p.refs[i].kind, CS_REF_FD);
		int fd = p.refs[i].fd;
		assert_true(fd >= 0 && fd < FDS && fd % 3 == 0 && !seen[fd]);
		seen[fd] = true;
		assert_string_equal(p.refs[i].path, nv[(fd / 3) % 3]);
	}

	assert_int_equal(cs_proc_scan_maps(pdir, f->dev, &p), 0);
	assert_int_equal(p.device_maps, want_maps);
	assert_int_equal(p.nrefs, want_fds + want_maps);
	assert_true(p.maps_libcuda);
	assert_true(p.maps_nvml);
	/* Two device mappings in every ten lines: nv[...] at line 10k, cap at 10k+1. */
	for (size_t i = 0; i < want_maps; i++) {
		const cs_devref *r = &p.refs[want_fds + i];
		size_t line = i / 2 * 10 + i % 2;
		unsigned long start = 0x7f0000000000UL + line * 0x2000;
		assert_int_equal(r->kind, CS_REF_MAP);
		assert_int_equal(r->start, start);
		assert_int_equal(r->end, start + 0x1000);
		assert_int_equal(r->fd, -1);
		assert_false(r->fd_open);
		if (i % 2)
			assert_string_equal(r->path, cap);
		else
			assert_string_equal(r->path, nv[i / 2 % 3]);
	}
	close(pdir);
	cs_proc_clear(&p);
	assert_null(p.refs);
	assert_int_equal(p.nrefs, 0);
	free(t.s);
	for (int i = 0; i < 3; i++)
		free(nv[i]);
	free(cap);
}

/* Lines that straddle the buffer: those under the limit must be read whole,
 * those over it skipped whole, wherever the buffer boundary falls. */
static void maps_long_lines(void **state)
{
	fixture *f = *state;
	static const size_t shifts[] = { 0, 1, 37, 999, 4096, 65535, 65536, 65537 };
	for (size_t s = 0; s < CS_ARRAY_SIZE(shifts); s++) {
		text t = { 0 };
		/* Filler that moves every later line across the buffer boundary. */
		if (shifts[s]) {
			char *fill = malloc(shifts[s]);
			assert_non_null(fill);
			memset(fill, '#', shifts[s] - 1);
			fill[shifts[s] - 1] = '\n';
			text_add(&t, fill, shifts[s]);
			free(fill);
		}
		text_line(&t, 0x1000000, "/usr/lib/libc.so.6");
		text_device_line_of(&t, f->dev, 0xa000000, 200);
		text_adds(&t, "\n");
		text_device_line_of(&t, f->dev, 0xb000000, MAPS_BUF - 1);
		text_adds(&t, "\n");
		text_device_line_of(&t, f->dev, 0xc000000, MAPS_BUF);
		text_adds(&t, "\n");
		text_device_line_of(&t, f->dev, 0xd000000, MAPS_BUF + 1);
		text_adds(&t, "\n");
		/* If the reader picked up again inside this line at the boundary, it
		 * would see a device mapping there. */
		char *pad = malloc(MAPS_BUF);
		assert_non_null(pad);
		memset(pad, 'A', MAPS_BUF);
		text_add(&t, pad, MAPS_BUF);
		free(pad);
		char *nv = tu_path(f->dev, "nvidia0");
		char *tail = tu_maps_line(0xe000000, 0xe001000, nv);
		text_adds(&t, tail);
		free(tail);
		free(nv);
		text_device_line_of(&t, f->dev, 0xf000000, 3 * MAPS_BUF + 17);
		text_adds(&t, "\n");
		text_device_line_of(&t, f->dev, 0x10000000, 300);
		text_adds(&t, "\n");
		/* The last line has no newline. */
		text_device_line_of(&t, f->dev, 0x11000000, 100);

		tu_fake_proc(f->proc, 700, 1, "x", 1, t.s);
		int pdir = open_pid(f, 700);
		cs_proc p = { 0 };
		assert_int_equal(cs_proc_scan_maps(pdir, f->dev, &p), 0);
		static const unsigned long want[] = { 0xa000000, 0xb000000, 0x10000000, 0x11000000 };
		if (p.nrefs != CS_ARRAY_SIZE(want))
			fail_msg("shift %zu: %zu refs, want %zu", shifts[s], p.nrefs, CS_ARRAY_SIZE(want));
		for (size_t i = 0; i < p.nrefs; i++)
			assert_int_equal(p.refs[i].start, want[i]);
		cs_proc_clear(&p);
		close(pdir);
		free(t.s);
	}
}

static size_t scan_maps_text(const fixture *f, const char *maps, size_t len, cs_proc *p)
{
	tu_write(f->proc, "800/maps", maps, len);
	int pdir = open_pid(f, 800);
	memset(p, 0, sizeof(*p));
	assert_int_equal(cs_proc_scan_maps(pdir, f->dev, p), 0);
	close(pdir);
	return p->nrefs;
}

static void maps_small_files(void **state)
{
	fixture *f = *state;
	char *dline = tu_maps_line(0x5000, 0x6000, NULL);
	char *nv = tu_path(f->dev, "nvidia0");
	char *line = tu_maps_line(0x5000, 0x6000, nv);
	size_t n = strlen(line);
	cs_proc p;

	assert_int_equal(scan_maps_text(f, "", 0, &p), 0);
	assert_int_equal(scan_maps_text(f, "\n\n\n", 3, &p), 0);
	assert_int_equal(scan_maps_text(f, line, n, &p), 1);
	cs_proc_clear(&p);
	assert_int_equal(scan_maps_text(f, line, n - 1, &p), 1);
	assert_string_equal(p.refs[0].path, nv);
	cs_proc_clear(&p);
	assert_int_equal(scan_maps_text(f, dline, strlen(dline), &p), 0);

	/* Junk, a NUL and a malformed line do not hide the line after them. */
	text t = { 0 };
	text_adds(&t, "garbage\n");
	text_add(&t, "7f00-7f10 r--p 0 0:0 0 /x\0y\n", 28);
	text_adds(&t, "7f00-7f10\n");
	text_adds(&t, line);
	text_adds(&t, "10-20 rw-s 0 0:0 0 relative/nvidia0\n");
	assert_int_equal(scan_maps_text(f, t.s, t.len, &p), 1);
	assert_int_equal(p.refs[0].start, 0x5000);
	cs_proc_clear(&p);
	free(t.s);

	/* The end of the file cuts "nvidia0" down to "nvidia". */
	assert_int_equal(scan_maps_text(f, line, n - 2, &p), 0);

	free(dline);
	free(nv);
	free(line);
}

static void maps_and_fds_missing(void **state)
{
	fixture *f = *state;
	tu_fake_proc(f->proc, 900, 1, "x", 1, NULL);
	int pdir = open_pid(f, 900);
	cs_proc p = { 0 };
	assert_int_equal(cs_proc_scan_maps(pdir, f->dev, &p), -ENOENT);
	tu_mkdirs(f->proc, "900/maps");
	assert_int_equal(cs_proc_scan_maps(pdir, f->dev, &p), -EISDIR);
	char *fd = tu_path(f->proc, "900/fd");
	assert_int_equal(rmdir(fd), 0);
	assert_int_equal(cs_proc_scan_fds(pdir, f->dev, &p), -ENOENT);
	assert_int_equal(p.nrefs, 0);
	free(fd);
	close(pdir);
}

static void fds_odd_targets(void **state)
{
	fixture *f = *state;
	tu_fake_proc(f->proc, 901, 1, "x", 1, NULL);
	char *nv = tu_path(f->dev, "nvidia0");
	char *deleted = NULL;
	assert_true(asprintf(&deleted, "%s (deleted)", nv) > 0);
	char *trail = NULL;
	assert_true(asprintf(&trail, "%s/", f->dev) > 0);
	tu_fake_fd(f->proc, 901, 3, deleted);
	tu_fake_fd(f->proc, 901, 4, trail);
	tu_fake_fd(f->proc, 901, 5, "/dev/nvidia0");
	tu_fake_fd(f->proc, 901, 2147483647, nv);
	tu_symlink(nv, f->proc, "901/fd/2147483648");
	tu_symlink(nv, f->proc, "901/fd/07");

	int pdir = open_pid(f, 901);
	cs_proc p = { 0 };
	/* A devdir given with trailing slashes names the same directory. */
	char *devslash = NULL;
	assert_true(asprintf(&devslash, "%s//", f->dev) > 0);
	assert_int_equal(cs_proc_scan_fds(pdir, devslash, &p), 0);
	bool seen3 = false, seen_max = false, seen7 = false;
	for (size_t i = 0; i < p.nrefs; i++) {
		seen3 |= p.refs[i].fd == 3;
		seen_max |= p.refs[i].fd == INT_MAX;
		seen7 |= p.refs[i].fd == 7;
		assert_int_not_equal(p.refs[i].fd, 4);
		assert_int_not_equal(p.refs[i].fd, 5);
	}
	assert_true(seen3 && seen_max);
	/* "07" is not how the kernel names fd 7, but it is a number. */
	assert_int_equal(p.nrefs, 2 + seen7);
	cs_proc_clear(&p);
	close(pdir);
	free(nv);
	free(deleted);
	free(trail);
	free(devslash);
}

static void read_stat_files(void **state)
{
	fixture *f = *state;
	tu_fake_proc(f->proc, 31, 1, "a (b) c", 424242, NULL);
	int pdir = open_pid(f, 31);
	cs_stat st;
	assert_int_equal(cs_proc_read_stat(pdir, &st), 0);
	assert_int_equal(st.pid, 31);
	assert_int_equal(st.ppid, 1);
	assert_int_equal(st.start_time, 424242);
	assert_string_equal(st.comm, "a (b) c");

	tu_write_str(f->proc, "31/stat", "");
	assert_int_equal(cs_proc_read_stat(pdir, &st), -ESRCH);
	tu_write_str(f->proc, "31/stat", "not a stat line\n");
	assert_int_equal(cs_proc_read_stat(pdir, &st), -EINVAL);

	/* Longer than the reader's buffer: the ')' is cut off. */
	char comm[2000];
	memset(comm, 'c', sizeof(comm) - 1);
	comm[sizeof(comm) - 1] = '\0';
	char *line = tu_stat_line(31, comm, 'S', 1, 5);
	tu_write_str(f->proc, "31/stat", line);
	assert_int_equal(cs_proc_read_stat(pdir, &st), -EINVAL);
	free(line);

	char *path = tu_path(f->proc, "31/stat");
	assert_int_equal(unlink(path), 0);
	assert_int_equal(cs_proc_read_stat(pdir, &st), -ENOENT);
	free(path);
	close(pdir);
}

static void tid_to_tgid(void **state)
{
	fixture *f = *state;
	pid_t tgid = -1;
	tu_write_str(f->proc, "501/status", "Name:\tworker\nTgid:\t400\nPid:\t501\nPPid:\t1\n");
	assert_int_equal(cs_tid_to_tgid(f->proc, 501, &tgid), 0);
	assert_int_equal(tgid, 400);

	tgid = -1;
	tu_write_str(f->proc, "502/status", "Name:\tx\nPid:\t502\n");
	assert_int_equal(cs_tid_to_tgid(f->proc, 502, &tgid), -EINVAL);
	tu_write_str(f->proc, "503/status", "Tgid:\t0\n");
	assert_int_equal(cs_tid_to_tgid(f->proc, 503, &tgid), -EINVAL);
	tu_write_str(f->proc, "504/status", "Tgid:\t2147483648\n");
	assert_int_equal(cs_tid_to_tgid(f->proc, 504, &tgid), -EINVAL);
	tu_write_str(f->proc, "505/status", "Tgid:\t-4\n");
	assert_int_equal(cs_tid_to_tgid(f->proc, 505, &tgid), -EINVAL);
	assert_int_equal(tgid, -1);
	assert_int_equal(cs_tid_to_tgid(f->proc, 599, &tgid), -ENOENT);
	assert_int_equal(cs_tid_to_tgid(f->proc, 0, &tgid), -ESRCH);
	assert_int_equal(cs_tid_to_tgid(f->proc, -1, &tgid), -ESRCH);

	char *gone = tu_path(f->proc, "nonexistent");
	assert_int_equal(cs_tid_to_tgid(gone, 501, &tgid), -ENOENT);
	free(gone);
}

static void start_time(void **state)
{
	fixture *f = *state;
	unsigned long long st = 0;
	tu_fake_proc(f->proc, 77, 1, "x", 31337, NULL);
	assert_int_equal(cs_proc_start_time(f->proc, 77, &st), 0);
	assert_int_equal(st, 31337);
	assert_int_equal(cs_proc_start_time(f->proc, 78, &st), -ENOENT);
	tu_write_str(f->proc, "79/stat", "");
	assert_int_equal(cs_proc_start_time(f->proc, 79, &st), -ESRCH);
	assert_int_equal(st, 31337);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(maps_hundred_thousand, setup, teardown),
		cmocka_unit_test_setup_teardown(maps_long_lines, setup, teardown),
		cmocka_unit_test_setup_teardown(maps_small_files, setup, teardown),
		cmocka_unit_test_setup_teardown(maps_and_fds_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(fds_odd_targets, setup, teardown),
		cmocka_unit_test_setup_teardown(read_stat_files, setup, teardown),
		cmocka_unit_test_setup_teardown(tid_to_tgid, setup, teardown),
		cmocka_unit_test_setup_teardown(start_time, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
