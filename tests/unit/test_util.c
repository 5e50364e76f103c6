/* The helpers the parsers stand on: strict number parsing, bounded file
 * reads, array growth, directory and file streams that leave no fd behind,
 * and the cleanup attributes with TAKE_PTR / TAKE_FD / TAKE_STRUCT. */
#include "testutil.h"
#include "text.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static void expect_long(const char *s, long min, long max, int ret, long want)
{
	long v = 12345;
	int r = cs_parse_long(s, min, max, &v);
	if (r != ret)
		fail_msg("\"%s\" in [%ld, %ld]: got %d, want %d", s ? s : "(null)", min, max, r, ret);
	assert_int_equal(v, r == 0 ? want : 12345);
}

static void parse_long_valid(void **state)
{
	(void)state;
	expect_long("0", LONG_MIN, LONG_MAX, 0, 0);
	expect_long("-0", LONG_MIN, LONG_MAX, 0, 0);
	expect_long("7", LONG_MIN, LONG_MAX, 0, 7);
	expect_long("-7", LONG_MIN, LONG_MAX, 0, -7);
	expect_long("4194304", 1, INT_MAX, 0, 4194304);
	expect_long("2147483647", 1, INT_MAX, 0, INT_MAX);
	expect_long("9223372036854775807", LONG_MIN, LONG_MAX, 0, LONG_MAX);
	expect_long("-9223372036854775808", LONG_MIN, LONG_MAX, 0, LONG_MIN);
	/* Leading zeros are still a decimal number, not octal. */
	expect_long("010", LONG_MIN, LONG_MAX, 0, 10);
	expect_long("5", 5, 5, 0, 5);
}

static void parse_long_invalid(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"", "-", "+", "+1", "--1", "-+1", "1-", " 1", "1 ", "\t1", "1\n", "\n", "12a", "a12",
		"0x10", "1e3", "1.0", "1,000", "1_000", "\xd9\xa3", "0b1", " ", "- 1",
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(bad); i++)
		expect_long(bad[i], LONG_MIN, LONG_MAX, -EINVAL, 0);
	expect_long(NULL, LONG_MIN, LONG_MAX, -EINVAL, 0);
}

static void parse_long_range(void **state)
{
	(void)state;
	expect_long("9223372036854775808", LONG_MIN, LONG_MAX, -ERANGE, 0);
	expect_long("-9223372036854775809", LONG_MIN, LONG_MAX, -ERANGE, 0);
	expect_long("99999999999999999999999999999999", LONG_MIN, LONG_MAX, -ERANGE, 0);
	expect_long("-99999999999999999999999999999999", LONG_MIN, LONG_MAX, -ERANGE, 0);
	expect_long("2147483648", 1, INT_MAX, -ERANGE, 0);
	expect_long("0", 1, INT_MAX, -ERANGE, 0);
	expect_long("-1", 0, INT_MAX, -ERANGE, 0);
	expect_long("6", 1, 5, -ERANGE, 0);
	expect_long("4", 5, 5, -ERANGE, 0);
	/* A range that holds nothing accepts nothing. */
	expect_long("3", 4, 2, -ERANGE, 0);

	/* errno left over from an earlier call must not turn into ERANGE. */
	long v;
	errno = ERANGE;
	assert_int_equal(cs_parse_long("42", 0, 100, &v), 0);
	assert_int_equal(v, 42);
}

static void read_at_files(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	assert_true(dfd >= 0);
	char buf[8];

	tu_write_str(dir, "short", "abc");
	assert_int_equal(cs_read_at(dfd, "short", buf, sizeof(buf)), 3);
	assert_string_equal(buf, "abc");

	tu_write_str(dir, "exact", "1234567");
	assert_int_equal(cs_read_at(dfd, "exact", buf, sizeof(buf)), 7);
	assert_string_equal(buf, "1234567");

	tu_write_str(dir, "long", "0123456789abcdef");
	memset(buf, 'Z', sizeof(buf));
	assert_int_equal(cs_read_at(dfd, "long", buf, sizeof(buf)), 7);
	assert_string_equal(buf, "0123456");

	assert_int_equal(cs_read_at(dfd, "long", buf, 1), 0);
	assert_string_equal(buf, "");

	tu_write(dir, "nul", "a\0b", 3);
	assert_int_equal(cs_read_at(dfd, "nul", buf, sizeof(buf)), 3);
	assert_memory_equal(buf, "a\0b", 4);

	tu_write_str(dir, "empty", "");
	assert_int_equal(cs_read_at(dfd, "empty", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");

	assert_int_equal(cs_read_at(dfd, "missing", buf, sizeof(buf)), -ENOENT);
	tu_mkdirs(dir, "sub");
	assert_int_equal(cs_read_at(dfd, "sub", buf, sizeof(buf)), -EISDIR);
	assert_int_equal(cs_read_at(-1, "short", buf, sizeof(buf)), -EBADF);

	/* An absolute name ignores the directory. */
	char *abs = tu_path(dir, "short");
	assert_int_equal(cs_read_at(-1, abs, buf, sizeof(buf)), 3);
	free(abs);

	close(dfd);
	tu_rmrf(dir);
	free(dir);
}

static void grow_array(void **state)
{
	(void)state;
	int *v = NULL;
	size_t cap = 0;
	assert_int_equal(cs_grow(&v, &cap, 0, sizeof(*v)), 0);
	assert_null(v);
	for (size_t n = 1; n <= 10000; n++) {
		assert_int_equal(cs_grow(&v, &cap, n, sizeof(*v)), 0);
		assert_true(cap >= n);
		v[n - 1] = (int)n;
	}
	for (size_t n = 1; n <= 10000; n++)
		assert_int_equal(v[n - 1], (int)n);

	size_t before = cap;
	int *keep = v;
	assert_int_equal(cs_grow(&v, &cap, SIZE_MAX, sizeof(*v)), -ENOMEM);
	assert_int_equal(cs_grow(&v, &cap, SIZE_MAX / 2, 64), -ENOMEM);
	assert_ptr_equal(v, keep);
	assert_int_equal(cap, before);
	free(v);
}

/* The lowest free descriptor: unchanged when a failed call leaked nothing. */
static int lowest_free_fd(void)
{
	int fd = fcntl(0, F_DUPFD, 0);
	assert_true(fd >= 0);
	close(fd);
	return fd;
}

static bool cloexec(int fd)
{
	int flags = fcntl(fd, F_GETFD);
	assert_true(flags >= 0);
	return flags & FD_CLOEXEC;
}

static void opendir_at(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	tu_write_str(dir, "sub/file", "x");
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);

	DIR *d = cs_opendir_at(dfd, "sub");
	assert_non_null(d);
	assert_true(cloexec(dirfd(d)));
	bool seen = false;
	for (struct dirent *de; (de = readdir(d));)
		seen |= strcmp(de->d_name, "file") == 0;
	assert_true(seen);
	closedir(d);

	int free_fd = lowest_free_fd();
	errno = 0;
	assert_null(cs_opendir_at(dfd, "sub/file"));
	assert_int_equal(errno, ENOTDIR);
	assert_null(cs_opendir_at(dfd, "missing"));
	assert_int_equal(errno, ENOENT);
	assert_int_equal(lowest_free_fd(), free_fd);

	/* A stream over an fd that is not a directory: the fd is closed. */
	char *path = tu_path(dir, "sub/file");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	errno = 0;
	assert_null(cs_fdopendir(fd));
	assert_int_equal(errno, ENOTDIR);
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	assert_int_equal(lowest_free_fd(), free_fd);
	free(path);

	close(dfd);
	tu_rmrf(dir);
	free(dir);
}

static void fopen_at(void **state)
{
	(void)state;
	char *dir = tu_mkdtemp();
	tu_write_str(dir, "lines", "one\ntwo\n");
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);

	FILE *f = cs_fopen_at(dfd, "lines");
	assert_non_null(f);
	assert_true(cloexec(fileno(f)));
	char line[16];
	assert_non_null(fgets(line, sizeof(line), f));
	assert_string_equal(line, "one\n");
	fclose(f);

	int free_fd = lowest_free_fd();
	errno = 0;
	assert_null(cs_fopen_at(dfd, "missing"));
	assert_int_equal(errno, ENOENT);
	assert_int_equal(lowest_free_fd(), free_fd);

	close(dfd);
	tu_rmrf(dir);
	free(dir);
}

typedef struct counted {
	int *released;
	int *items;
} counted;

/* Empties a struct on the stack (the second form: any zeroed struct). */
static void counted_clear(counted *c)
{
	if (c->released)
		(*c->released)++;
	free(c->items);
	*c = (counted){ 0 };
}

/* Releases a heap object (the first form). */
static void counted_free(counted *c)
{
	counted_clear(c);
	free(c);
}

CS_DEFINE_CLEANUP(counted, counted_free)
CS_DEFINE_CLEANUP_STRUCT(counted, counted_clear)

/* Builds a heap object and hands it out, or fails and releases it. */
static int build(int *released, bool fail, counted **out)
{
	_cleanup_(counted_freep) counted *c = calloc(1, sizeof(*c));
	assert_non_null(c);
	c->released = released;
	if (fail)
		return -EINVAL;
	*out = TAKE_PTR(c);
	return 0;
}

static void cleanup_attributes(void **state)
{
	(void)state;
	int released = 0;
	counted *c = NULL;
	assert_int_equal(build(&released, true, &c), -EINVAL);
	assert_int_equal(released, 1);
	assert_null(c);
	assert_int_equal(build(&released, false, &c), 0);
	assert_int_equal(released, 1);
	assert_non_null(c);
	counted_free(c);
	assert_int_equal(released, 2);

	{
		_cleanup_(counted_freep) counted *none = NULL;
		(void)none;
	}
	assert_int_equal(released, 2);

	counted kept = { 0 };
	{
		_cleanup_(counted_clearp) counted s = { .released = &released, .items = malloc(4) };
		assert_non_null(s.items);
		kept = TAKE_STRUCT(s);
		assert_null(s.items);
		assert_null(s.released);
	}
	assert_int_equal(released, 2); /* what the struct held went with TAKE_STRUCT */
	assert_non_null(kept.items);
	{
		_cleanup_(counted_clearp) counted s = kept;
		(void)s;
	}
	assert_int_equal(released, 3);

	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	int copy = fd;
	int taken = TAKE_FD(fd);
	assert_int_equal(taken, copy);
	assert_int_equal(fd, -1);
	close(taken);
	{
		_cleanup_close_ int none = -1;
		(void)none;
	}
}

/* A word a shell reads back as the path it was made of, or none. */
static void shell_word(void **state)
{
	(void)state;
	char out[64];
	assert_true(cs_shell_word("/run/cs/cudasnap-gpumem.12.34", out, sizeof(out)));
	assert_string_equal(out, "/run/cs/cudasnap-gpumem.12.34");
	assert_true(cs_shell_word("/a b/it's", out, sizeof(out)));
	assert_string_equal(out, "'/a b/it'\\''s'");
	assert_true(cs_shell_word("", out, sizeof(out)));
	assert_string_equal(out, "''");
	assert_true(cs_shell_word("$(reboot)", out, sizeof(out)));
	assert_string_equal(out, "'$(reboot)'");
	/* cut short it would name something else: nothing */
	assert_false(cs_shell_word("/a/very/long/path", out, 8));
	assert_string_equal(out, "");
	assert_false(cs_shell_word("'''", out, 12));
	assert_string_equal(out, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parse_long_valid),
		cmocka_unit_test(parse_long_invalid),
		cmocka_unit_test(parse_long_range),
		cmocka_unit_test(read_at_files),
		cmocka_unit_test(grow_array),
		cmocka_unit_test(opendir_at),
		cmocka_unit_test(fopen_at),
		cmocka_unit_test(cleanup_attributes),
		cmocka_unit_test(shell_word),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
