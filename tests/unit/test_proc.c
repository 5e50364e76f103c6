/* The /proc text parsers, fed the odd inputs a hostile or dying process can
 * produce. Buffers are cut to their exact length so that the sanitizers see
 * any read past the length the parser was given. */
#include "proc.h"
#include "testutil.h"
#include "utf8check.h"
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
#include <unistd.h>

#include <cmocka.h>

/* ---- stat --------------------------------------------------------------- */

static int parse_stat_exact(const char *s, size_t len, cs_stat *st)
{
	char *buf = tu_exact(s, len);
	int r = cs_parse_stat(buf, len, st);
	free(buf);
	return r;
}

static int parse_stat_str(const char *s, cs_stat *st)
{
	return parse_stat_exact(s, strlen(s), st);
}

/* A stat line whose comm is the len bytes at comm (which may hold NULs). */
static int parse_with_comm(const char *comm, size_t len, cs_stat *st)
{
	static const char head[] = "42 (";
	static const char tail[] = ") R 7 42 42 0 -1 4194560 1520 0 0 0 3 1 0 0 20 0 1 0 5555 8478720 0\n";
	size_t n = sizeof(head) - 1 + len + sizeof(tail) - 1;
	char *buf = malloc(n);
	assert_non_null(buf);
	memcpy(buf, head, sizeof(head) - 1);
	memcpy(buf + sizeof(head) - 1, comm, len);
	memcpy(buf + sizeof(head) - 1 + len, tail, sizeof(tail) - 1);
	int r = cs_parse_stat(buf, n, st);
	free(buf);
	if (r == 0) {
		assert_int_equal(st->pid, 42);
		assert_int_equal(st->ppid, 7);
		assert_int_equal(st->state, 'R');
		assert_int_equal(st->start_time, 5555);
	}
	return r;
}

static void expect_comm(const char *comm, size_t len, const char *want)
{
	cs_stat st;
	assert_int_equal(parse_with_comm(comm, len, &st), 0);
	assert_string_equal(st.comm, want);
	assert_true(cs_check_utf8_clean(st.comm, strlen(st.comm)));
}

#define EXPECT_COMM(lit, want) expect_comm(lit, sizeof(lit) - 1, want)

static void stat_real_line(void **state)
{
	(void)state;
	char *line = tu_stat_line(1234, "bash", 'S', 1000, 987654);
	cs_stat st;
	assert_int_equal(parse_stat_str(line, &st), 0);
	assert_int_equal(st.pid, 1234);
	assert_int_equal(st.ppid, 1000);
	assert_int_equal(st.state, 'S');
	assert_int_equal(st.start_time, 987654);
	assert_string_equal(st.comm, "bash");
	free(line);
}

static void stat_comm_odd_characters(void **state)
{
	(void)state;
	EXPECT_COMM("my prog", "my prog");
	EXPECT_COMM("a) b (c", "a) b (c");
	EXPECT_COMM("(x)", "(x)");
	EXPECT_COMM(")", ")");
	EXPECT_COMM("(", "(");
	EXPECT_COMM(") R 1 2 3 (", ") R 1 2 3 (");
	EXPECT_COMM(" ", " ");
	EXPECT_COMM("a\nb", "a?b");
	EXPECT_COMM("\n", "?");
	EXPECT_COMM("tab\there", "tab?here");
	EXPECT_COMM("\x1b[31mred", "?[31mred");
	EXPECT_COMM("\x01\x7f", "??");
	EXPECT_COMM("caf\xc3\xa9", "caf\xc3\xa9");
	EXPECT_COMM("\xe6\x97\xa5\xe6\x9c\xac", "\xe6\x97\xa5\xe6\x9c\xac");
	EXPECT_COMM("\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80");
	EXPECT_COMM("\xff\xfe", "??");
	EXPECT_COMM("\x80", "?");
	EXPECT_COMM("\xc3(", "?(");
	EXPECT_COMM("\xe2\x82", "??");
	EXPECT_COMM("\xc0\xaf", "??");
	EXPECT_COMM("\xc3\xa9\xa9", "\xc3\xa9?");
	EXPECT_COMM("", "");
}

static void stat_comm_with_nul(void **state)
{
	(void)state;
	/* The kernel never puts a NUL in comm; whatever is done with one, the
	 * fields after it must still be found from the last ')'. */
	cs_stat st;
	assert_int_equal(parse_with_comm("ab\0cd", 5, &st), 0);
	assert_true(strlen(st.comm) <= 5);
	assert_memory_equal(st.comm, "ab", 2);
	assert_true(cs_check_utf8_clean(st.comm, strlen(st.comm)));
}

static void stat_comm_longer_than_field(void **state)
{
	(void)state;
	char comm[300];
	memset(comm, 'x', sizeof(comm));
	cs_stat st;
	assert_int_equal(parse_with_comm(comm, sizeof(comm), &st), 0);
	assert_int_equal(strlen(st.comm), sizeof(st.comm) - 1);

	/* A multibyte character cut by the end of the field must not leave half a
	 * sequence behind. */
	for (size_t pad = 55; pad < 66; pad++) {
		char buf[80];
		memset(buf, 'y', pad);
		memcpy(buf + pad, "\xf0\x9f\x98\x80\xe6\x97\xa5", 7);
		assert_int_equal(parse_with_comm(buf, pad + 7, &st), 0);
		assert_true(strlen(st.comm) < sizeof(st.comm));
		assert_true(cs_check_utf8_clean(st.comm, strlen(st.comm)));
	}
}

static void stat_every_prefix(void **state)
{
	(void)state;
	char *line = tu_stat_line(1234, "a) (b", 'S', 1000, 987654);
	size_t len = strlen(line);
	const char *f22 = strstr(line, " 987654 ");
	assert_non_null(f22);
	size_t f22_start = (size_t)(f22 + 1 - line), f22_end = f22_start + 6;
	size_t parsed = 0;
	for (size_t k = 0; k <= len; k++) {
		cs_stat st;
		int r = parse_stat_exact(line, k, &st);
		assert_true(r == 0 || r == -EINVAL);
		if (k <= f22_start) {
			assert_int_equal(r, -EINVAL);
			continue;
		}
		if (r != 0) {
			/* Rejecting a start time cut short is fine; taking the rest is not. */
			assert_true(k <= f22_end);
			continue;
		}
		parsed++;
		assert_int_equal(st.pid, 1234);
		assert_int_equal(st.ppid, 1000);
		assert_string_equal(st.comm, "a) (b");
		unsigned long long want = 987654;
		for (size_t cut = k; cut < f22_end; cut++)
			want /= 10;
		assert_int_equal(st.start_time, want);
	}
	assert_true(parsed >= len - f22_end);
	free(line);
}

static void stat_own_process(void **state)
{
	(void)state;
	char buf[1024];
	int dfd = open("/proc/self", O_RDONLY | O_DIRECTORY);
	if (dfd < 0)
		skip();
	ssize_t n = cs_read_at(dfd, "stat", buf, sizeof(buf));
	close(dfd);
	assert_true(n > 0);
	cs_stat st;
	assert_int_equal(parse_stat_exact(buf, (size_t)n, &st), 0);
	assert_int_equal(st.pid, getpid());
	assert_int_equal(st.ppid, getppid());
	assert_true(st.start_time > 0);
	for (size_t k = 0; k < (size_t)n; k++) {
		int r = parse_stat_exact(buf, k, &st);
		assert_true(r == 0 || r == -EINVAL);
	}
}

static void stat_numbers(void **state)
{
	(void)state;
	static const struct {
		const char *line;
		int ret;
		int pid, ppid;
		unsigned long long start;
	} cases[] = {
		{ "2147483647 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", 0, INT_MAX, 1, 9 },
		{ "2147483648 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "99999999999999999999999 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "0 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "-5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "-2147483648 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ " (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "x1 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		/* init has no parent */
		{ "1 (init) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", 0, 1, 0, 9 },
		{ "5 (x) S -1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 2147483648 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 4294967297 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9223372036854775807 0", 0, 5, 1,
		  9223372036854775807ULL },
		{ "5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -9 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 184467440737095516160 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1 0 0 0 -1 0 99999999999999999999999 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 -5 1 0 9 0", 0, 5, 1, 9 },
		/* Real stat lines go on after field 22: one that ends inside it may be cut. */
		{ "5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9x 0", -EINVAL, 0, 0, 0 },
		{ "12x (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9\n", 0, 5, 1, 9 },
		{ "5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 ", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 x", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1  0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1 12a 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) S 1 - 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "5 (x)S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "5 (x) ", -EINVAL, 0, 0, 0 },
		{ "5 (x)", -EINVAL, 0, 0, 0 },
		{ "5 (x", -EINVAL, 0, 0, 0 },
		{ "5 x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "5 )x( S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0", -EINVAL, 0, 0, 0 },
		{ "", -EINVAL, 0, 0, 0 },
		{ "(", -EINVAL, 0, 0, 0 },
		{ ")", -EINVAL, 0, 0, 0 },
		{ "()", -EINVAL, 0, 0, 0 },
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(cases); i++) {
		cs_stat st;
		int r = parse_stat_str(cases[i].line, &st);
		if (r != cases[i].ret)
			fail_msg("\"%s\": got %d, want %d", cases[i].line, r, cases[i].ret);
		if (r != 0)
			continue;
		assert_int_equal(st.pid, cases[i].pid);
		assert_int_equal(st.ppid, cases[i].ppid);
		assert_int_equal(st.start_time, cases[i].start);
	}
}

/* ---- sanitize ----------------------------------------------------------- */

static void sanitize_cases(void **state)
{
	(void)state;
	char out[16];
	cs_sanitize(out, sizeof(out), "plain", 5);
	assert_string_equal(out, "plain");
	cs_sanitize(out, sizeof(out), "abcdef", 3);
	assert_string_equal(out, "abc");
	cs_sanitize(out, 4, "abcdef", 6);
	assert_string_equal(out, "abc");
	cs_sanitize(out, 1, "abcdef", 6);
	assert_string_equal(out, "");
	cs_sanitize(out, sizeof(out), "", 0);
	assert_string_equal(out, "");
	cs_sanitize(out, sizeof(out), "ab\0cd", 5);
	assert_string_equal(out, "ab");
	cs_sanitize(out, sizeof(out), "\x1f \x7f~", 4);
	assert_string_equal(out, "? ?~");

	memset(out, 'Z', sizeof(out));
	cs_sanitize(out, 0, "abc", 3);
	assert_int_equal(out[0], 'Z');

	/* Only the first len bytes count, even when the string goes on: a
	 * sequence cut by len is invalid. */
	cs_sanitize(out, sizeof(out), "\xc3\xa9", 1);
	assert_string_equal(out, "?");
	cs_sanitize(out, sizeof(out), "\xe6\x97\xa5", 2);
	assert_string_equal(out, "??");

	/* Two bytes left for a three-byte character. */
	cs_sanitize(out, 5, "ab\xe6\x97\xa5", 5);
	assert_true(strlen(out) <= 4);
	assert_memory_equal(out, "ab", 2);
	assert_true(cs_check_utf8_clean(out, strlen(out)));
}

static void sanitize_every_byte(void **state)
{
	(void)state;
	for (unsigned c = 1; c < 256; c++) {
		char in[1] = { (char)c }, out[4];
		cs_sanitize(out, sizeof(out), in, 1);
		assert_int_equal(strlen(out), 1);
		if (c >= 0x20 && c < 0x7f)
			assert_int_equal((unsigned char)out[0], c);
		else
			assert_int_equal(out[0], '?');
	}
	/* Every two-byte character, and every lead byte in front of a byte that
	 * cannot continue it. */
	for (unsigned c = 0xc2; c <= 0xdf; c++) {
		for (unsigned d = 0x80; d <= 0xbf; d++) {
			char in[2] = { (char)c, (char)d }, out[4];
			cs_sanitize(out, sizeof(out), in, 2);
			if (c == 0xc2 && d <= 0x9f) { /* C1 controls steer terminals */
				assert_string_equal(out, "?");
				continue;
			}
			assert_memory_equal(out, in, 2);
			assert_int_equal(out[2], '\0');
		}
		char in[2] = { (char)c, 'A' }, out[4];
		cs_sanitize(out, sizeof(out), in, 2);
		assert_string_equal(out, "?A");
	}
}

/* ---- status ------------------------------------------------------------- */

static const char status_text[] =
	"Name:\tbash\n"
	"Umask:\t0022\n"
	"State:\tS (sleeping)\n"
	"Tgid:\t4321\n"
	"Ngid:\t0\n"
	"Pid:\t4325\n"
	"PPid:\t4000\n"
	"TracerPid:\t0\n"
	"Uid:\t1000\t1001\t1002\t1003\n"
	"Gid:\t100\t100\t100\t100\n"
	"FDSize:\t256\n"
	"Groups:\t4 24 27 \n"
	"NSpid:\t4325\t1\n"
	"VmRSS:\t    5120 kB\n"
	"Threads:\t3";

static void expect_field(const char *buf, const char *key, int ret, long want)
{
	long v = -999;
	int r = cs_parse_status_field(buf, key, &v);
	if (r != ret)
		fail_msg("key \"%s\": got %d, want %d", key, r, ret);
	assert_int_equal(v, r == 0 ? want : -999);
}

static void status_fields(void **state)
{
	(void)state;
	expect_field(status_text, "Tgid", 0, 4321);
	expect_field(status_text, "Pid", 0, 4325);
	expect_field(status_text, "PPid", 0, 4000);
	expect_field(status_text, "TracerPid", 0, 0);
	expect_field(status_text, "Uid", 0, 1000);
	expect_field(status_text, "Gid", 0, 100);
	expect_field(status_text, "NSpid", 0, 4325);
	expect_field(status_text, "VmRSS", 0, 5120);
	expect_field(status_text, "Threads", 0, 3);
	expect_field(status_text, "Umask", 0, 22);
	expect_field(status_text, "Groups", 0, 4);
	expect_field(status_text, "State", -EINVAL, 0);
	expect_field(status_text, "Name", -EINVAL, 0);
	expect_field(status_text, "VmSwap", -ENOENT, 0);
	expect_field(status_text, "tgid", -ENOENT, 0);
	expect_field(status_text, "Tgi", -ENOENT, 0);
	expect_field(status_text, "TgidX", -ENOENT, 0);
	expect_field(status_text, "gid", -ENOENT, 0);
	expect_field(status_text, "id", -ENOENT, 0);
	expect_field(status_text, "Tgid:", -ENOENT, 0);
	expect_field("", "Tgid", -ENOENT, 0);
}

static void status_odd_text(void **state)
{
	(void)state;
	expect_field("TgidX:\t9\nTgid:\t10\n", "Tgid", 0, 10);
	expect_field("TgidX:\t9\nTgid:\t10\n", "TgidX", 0, 9);
	expect_field("Tgid:\t10\nTgid:\t11\n", "Tgid", 0, 10);
	expect_field("Name:\tTgid: 77\nPid:\t1\n", "Tgid", -ENOENT, 0);
	expect_field(" Tgid:\t5\n", "Tgid", -ENOENT, 0);
	expect_field("Tgid :\t5\n", "Tgid", -ENOENT, 0);
	expect_field("Tgid:\n42\n", "Tgid", -EINVAL, 0);
	expect_field("Tgid:", "Tgid", -EINVAL, 0);
	expect_field("Tgid:\t", "Tgid", -EINVAL, 0);
	expect_field("Tgid:\t+5\n", "Tgid", -EINVAL, 0);
	expect_field("Tgid:\t-\n", "Tgid", -EINVAL, 0);
	expect_field("Tgid:5", "Tgid", 0, 5);
	expect_field("Tgid: \t \t12 junk\n", "Tgid", 0, 12);
	expect_field("Tgid:\t-7\n", "Tgid", 0, -7);
	expect_field("Tgid:\t9223372036854775807\n", "Tgid", 0, LONG_MAX);
	expect_field("Tgid:\t99999999999999999999\n", "Tgid", -EINVAL, 0);
	expect_field("\n\n\nTgid:\t3\n", "Tgid", 0, 3);
	expect_field("Name:\tx\n\nTgid:\t3", "Tgid", 0, 3);
}

static void expect_last(const char *buf, const char *key, int ret, long want)
{
	long v = -999;
	int r = cs_parse_status_last(buf, key, &v);
	if (r != ret)
		fail_msg("key \"%s\" in \"%s\": got %d, want %d", key, buf, r, ret);
	assert_int_equal(v, r == 0 ? want : -999);
}

/* NSpid lists the pid in every namespace from /proc's down to the process's
 * own: the last one is what the process calls itself. */
static void status_last_of_line(void **state)
{
	(void)state;
	expect_last("NSpid:\t4325\n", "NSpid", 0, 4325);
	expect_last("Name:\tx\nNSpid:\t4325\t17\t1\nNStgid:\t9\n", "NSpid", 0, 1);
	expect_last("NSpid:\t4325 17  \t\n", "NSpid", 0, 17);
	expect_last("NSpid:\t4325\t17x\n", "NSpid", -EINVAL, 0);
	expect_last("NSpid:\t4325\tx17\n", "NSpid", -EINVAL, 0);
	expect_last("NSpid:\n", "NSpid", -EINVAL, 0);
	expect_last("NSpid:", "NSpid", -EINVAL, 0);
	expect_last("NSpid:\t99999999999999999999\n", "NSpid", -EINVAL, 0);
	expect_last("NSpidX:\t1\n", "NSpid", -ENOENT, 0);
	expect_last("", "NSpid", -ENOENT, 0);
}

static void expect_nth(const char *buf, const char *key, int idx, int base, int ret, unsigned long long want)
{
	unsigned long long v = 999;
	int r = cs_parse_status_nth(buf, key, idx, base, &v);
	if (r != ret)
		fail_msg("key \"%s\" #%d in \"%s\": got %d, want %d", key, idx, buf, r, ret);
	assert_int_equal(v, r == 0 ? want : 999);
}

/* Uid lists the real, effective, saved and filesystem uids; CapEff is a
 * hexadecimal mask. */
static void status_nth_of_line(void **state)
{
	(void)state;
	const char *text = "Name:\tx\nUid:\t1000\t0\t1000\t0\nCapEff:\t000001ffffffffff\n";
	expect_nth(text, "Uid", 0, 10, 0, 1000);
	expect_nth(text, "Uid", 1, 10, 0, 0);
	expect_nth(text, "Uid", 3, 10, 0, 0);
	expect_nth(text, "Uid", 4, 10, -EINVAL, 0);
	expect_nth(text, "CapEff", 0, 16, 0, 0x1ffffffffffULL);
	expect_nth(text, "CapEff", 1, 16, -EINVAL, 0);
	expect_nth(text, "Gid", 0, 10, -ENOENT, 0);
	expect_nth("Uid:\t-1\t0\n", "Uid", 0, 10, -EINVAL, 0);
	expect_nth("Uid:\t+1\t0\n", "Uid", 0, 10, -EINVAL, 0);
	expect_nth("Uid:\t0x10\n", "Uid", 0, 16, -EINVAL, 0);
	expect_nth("Uid:\t1\n2\n", "Uid", 1, 10, -EINVAL, 0);
	expect_nth("Uid:\t99999999999999999999999\n", "Uid", 0, 10, -EINVAL, 0);
	expect_nth("Uid:", "Uid", 0, 10, -EINVAL, 0);
}

/* A fake /proc: process 500 has threads 500 and 507; 507 is 3 inside the
 * process's own PID namespace. The driver may name a thread either way. */
static void thread_here(void **state)
{
	(void)state;
	char *proc = tu_mkdtemp();
	tu_write_str(proc, "500/task/500/status", "Name:\tapp\nNSpid:\t500\t1\n");
	tu_write_str(proc, "500/task/507/status", "Name:\tcuda-rt\nNSpid:\t507\t3\n");
	tu_write_str(proc, "500/status", "Name:\tapp\nNSpid:\t500\t1\n");
	assert_int_equal(cs_proc_thread_here(proc, 500, 507), 507);
	assert_int_equal(cs_proc_thread_here(proc, 500, 3), 507);
	assert_int_equal(cs_proc_thread_here(proc, 500, 1), 500);
	assert_int_equal(cs_proc_thread_here(proc, 500, 4), 0);
	assert_int_equal(cs_proc_thread_here(proc, 500, 0), 0);
	assert_int_equal(cs_proc_thread_here(proc, 501, 507), 0); /* gone */
	char *pdir = tu_path(proc, "500");
	int fd = open(pdir, O_RDONLY | O_DIRECTORY);
	cs_proc_ident id;
	assert_int_equal(cs_proc_read_ident(fd, 500, &id), 0);
	assert_int_equal(id.nspid, 1);
	assert_int_equal(id.ns_ino, 0); /* no ns/pid link in the fake */
	close(fd);
	free(pdir);
	tu_rmrf(proc);
	free(proc);
}

/* ---- maps lines --------------------------------------------------------- */

static int parse_map(const char *line, cs_map_entry *m)
{
	size_t len = strlen(line);
	char *buf = tu_exact(line, len);
	int r = cs_parse_maps_line(buf, len, m);
	if (r == 0) {
		assert_true(m->path >= buf && m->path + m->path_len == buf + len);
		/* Hand back a pointer into the caller's string, not the copy. */
		m->path = line + (m->path - buf);
	}
	free(buf);
	return r;
}

static void expect_map(const char *line, unsigned long start, unsigned long end, const char *path)
{
	cs_map_entry m;
	int r = parse_map(line, &m);
	if (r != 0)
		fail_msg("\"%s\": got %d", line, r);
	assert_int_equal(m.start, start);
	assert_int_equal(m.end, end);
	assert_int_equal(m.path_len, strlen(path));
	assert_memory_equal(m.path, path, m.path_len);
}

static void maps_lines(void **state)
{
	(void)state;
	expect_map("55d4a0a00000-55d4a0a21000 r--p 00000000 08:01 1234567                    /usr/bin/bash",
		   0x55d4a0a00000, 0x55d4a0a21000, "/usr/bin/bash");
	expect_map("7f3c8e000000-7f3c8e021000 rw-p 00000000 00:00 0 ", 0x7f3c8e000000, 0x7f3c8e021000, "");
	expect_map("7f3c8e000000-7f3c8e021000 rw-p 00000000 00:00 0", 0x7f3c8e000000, 0x7f3c8e021000, "");
	expect_map("7f3c8e000000-7f3c8e021000 rw-p 00000000 00:00 0                          ",
		   0x7f3c8e000000, 0x7f3c8e021000, "");
	expect_map("55d4a1e5e000-55d4a1fd3000 rw-p 00000000 00:00 0                          [heap]",
		   0x55d4a1e5e000, 0x55d4a1fd3000, "[heap]");
	expect_map("7ffc5a3d1000-7ffc5a3f2000 rw-p 00000000 00:00 0                          [stack]",
		   0x7ffc5a3d1000, 0x7ffc5a3f2000, "[stack]");
	expect_map("ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]",
		   0xffffffffff600000, 0xffffffffff601000, "[vsyscall]");
	expect_map("7f0000000000-7f0000001000 r--p 00000000 fd:00 42 /tmp/my file (1).so",
		   0x7f0000000000, 0x7f0000001000, "/tmp/my file (1).so");
	expect_map("7f0000000000-7f0000001000 r--p 00000000 fd:00 42 /tmp/gone.so (deleted)",
		   0x7f0000000000, 0x7f0000001000, "/tmp/gone.so (deleted)");
	expect_map("7f0000000000-7f0000001000 rw-s 00000000 00:05 615 /dev/nvidia0 (deleted)",
		   0x7f0000000000, 0x7f0000001000, "/dev/nvidia0 (deleted)");
	expect_map("7f0000000000-7f0000001000 rw-s 00000000 00:05 615 /dev/zero (deleted) x ",
		   0x7f0000000000, 0x7f0000001000, "/dev/zero (deleted) x ");
	expect_map("7f0000000000-7f0000001000 rw-s 100000000 00:05 615 /tmp/x/dev/nvidiactl",
		   0x7f0000000000, 0x7f0000001000, "/tmp/x/dev/nvidiactl");
	expect_map("0-0 - - - - x", 0, 0, "x");
	expect_map("ffffffffffffffff-ffffffffffffffff r 0 0 0", ULONG_MAX, ULONG_MAX, "");
	expect_map("0000000000000000000001-2 r 0 0 0 /a", 1, 2, "/a");
}

static void expect_map_id(const char *line, bool has_id, unsigned long maj, unsigned long min, unsigned long long ino)
{
	cs_map_entry m;
	assert_int_equal(parse_map(line, &m), 0);
	if (m.has_id != has_id)
		fail_msg("\"%s\": has_id %d, want %d", line, m.has_id, has_id);
	if (has_id && (m.dev_major != maj || m.dev_minor != min || m.ino != ino))
		fail_msg("\"%s\": %lx:%lx %llu, want %lx:%lx %llu", line, m.dev_major, m.dev_minor, m.ino, maj, min,
			 ino);
}

/* The mapped file's identity: device numbers in hex, the inode in decimal
 * (lib/proc/ipc.c compares it with a stat of each fd). A line whose fields do not
 * read so still parses, without an identity. */
static void maps_file_id(void **state)
{
	(void)state;
	expect_map_id("7f0000000000-7f0000001000 rw-s 00000000 00:1a 3187 /dev/shm/cuda.shm.0.2d9.1", true, 0, 0x1a,
		      3187);
	expect_map_id("7f0000000000-7f0000001000 rw-s 00000000 103:2f 18446744073709551615 /x", true, 0x103, 0x2f,
		      18446744073709551615ULL);
	expect_map_id("7f3c8e000000-7f3c8e021000 rw-p 00000000 00:00 0", true, 0, 0, 0);
	expect_map_id("7f3c8e000000-7f3c8e021000 rw-p 00000000 00:00 0   [heap]", true, 0, 0, 0);
	expect_map_id("0-0 - - - - x", false, 0, 0, 0);
	expect_map_id("0-0 r 0 00:00 18446744073709551616 /x", false, 0, 0, 0);
	expect_map_id("0-0 r 0 00:00 12a /x", false, 0, 0, 0);
	expect_map_id("0-0 r 0 00-00 12 /x", false, 0, 0, 0);
	expect_map_id("0-0 r 0 00:00:00 12 /x", false, 0, 0, 0);
	expect_map_id("0-0 r 0 0A:00 12 /x", false, 0, 0, 0);
}

static void maps_malformed(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"",
		" ",
		"-",
		"10",
		"10-",
		"10-20",
		"10-20 ",
		"10-20 r--p",
		"10-20 r--p 0",
		"10-20 r--p 0 00:00",
		"10-20 r--p 0 00:00 ",
		"10-20  r--p 0 00:00 0 /x",
		" 10-20 r--p 0 00:00 0 /x",
		"10 20 r--p 0 00:00 0 /x",
		"10_20 r--p 0 00:00 0 /x",
		"-20 r--p 0 00:00 0 /x",
		"10--20 r--p 0 00:00 0 /x",
		"zz-20 r--p 0 00:00 0 /x",
		"7F00-7F10 r--p 0 00:00 0 /x",
		"0x10-0x20 r--p 0 00:00 0 /x",
		"10000000000000000-20 r--p 0 00:00 0 /x",
		"10-1ffffffffffffffff r--p 0 00:00 0 /x",
		"10-20\tr--p 0 00:00 0 /x",
		"10-20\nr--p 0 00:00 0 /x",
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(bad); i++) {
		cs_map_entry m;
		int r = parse_map(bad[i], &m);
		if (r != -EINVAL)
			fail_msg("\"%s\": got %d, want -EINVAL", bad[i], r);
	}
}

/* ---- path predicates ---------------------------------------------------- */

static bool dev(const char *path, const char *devdir)
{
	size_t len = strlen(path);
	char *buf = tu_exact(path, len);
	bool r = cs_path_is_device(buf, len, devdir);
	free(buf);
	return r;
}

static void device_paths(void **state)
{
	(void)state;
	static const char *const dirs[] = { "/dev", "/dev/", "/dev//" };
	for (size_t i = 0; i < CS_ARRAY_SIZE(dirs); i++) {
		const char *d = dirs[i];
		assert_true(dev("/dev/nvidia0", d));
		assert_true(dev("/dev/nvidia15", d));
		assert_true(dev("/dev/nvidiactl", d));
		assert_true(dev("/dev/nvidia-uvm", d));
		assert_true(dev("/dev/nvidia-uvm-tools", d));
		assert_true(dev("/dev/nvidia-modeset", d));
		assert_true(dev("/dev/nvidia0 (deleted)", d));
		/* The predicate is a glob of nvidia* in the directory itself. */
		assert_true(dev("/dev/nvidiafoo", d));
		/* MIG capability nodes live one level down, in nvidia-caps/. */
		assert_true(dev("/dev/nvidia-caps/nvidia-cap1", d));
		assert_false(dev("/dev/nvidia-caps/x/nvidia-cap1", d));
		assert_false(dev("/dev/nvidia", d));
		assert_false(dev("/dev/nvidi", d));
		assert_false(dev("/dev/", d));
		assert_false(dev("/dev", d));
		assert_false(dev("", d));
		assert_false(dev("/devx/nvidia0", d));
		assert_false(dev("/dev/null", d));
		assert_false(dev("/dev/dri/card0", d));
		assert_false(dev("/dev/dri/nvidia0", d));
		assert_false(dev("/dev//nvidia0", d));
		assert_false(dev("/dev/./nvidia0", d));
		assert_false(dev("dev/nvidia0", d));
		assert_false(dev("/proc/dev/nvidia0", d));
		assert_false(dev("/dev/Nvidia0", d));
		assert_false(dev("/dev/xnvidia0", d));
	}
	assert_true(dev("/tmp/x/dev/nvidia0", "/tmp/x/dev"));
	assert_true(dev("/tmp/x/dev/nvidia0", "/tmp/x/dev///"));
	assert_false(dev("/dev/nvidia0", "/tmp/x/dev"));
	assert_false(dev("/tmp/x/devnvidia0", "/tmp/x/dev"));
	assert_false(dev("/tmp/x/dev2/nvidia0", "/tmp/x/dev"));
	assert_false(dev("/tmp/x/nvidia0", "/tmp/x/dev"));

	/* len, not the terminator, ends the path. */
	assert_true(cs_path_is_device("/dev/nvidia0/extra", 12, "/dev"));
	assert_false(cs_path_is_device("/dev/nvidia0", 11, "/dev"));
	assert_false(cs_path_is_device("/dev/nvidia0", 0, "/dev"));
}

static bool lib(bool (*pred)(const char *, size_t), const char *path)
{
	size_t len = strlen(path);
	char *buf = tu_exact(path, len);
	bool r = pred(buf, len);
	free(buf);
	return r;
}

static void library_paths(void **state)
{
	(void)state;
	assert_true(lib(cs_path_is_libcuda, "/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
	assert_true(lib(cs_path_is_libcuda, "/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15"));
	assert_true(lib(cs_path_is_libcuda, "/usr/lib64/libcuda.so"));
	assert_true(lib(cs_path_is_libcuda, "libcuda.so.1"));
	assert_true(lib(cs_path_is_libcuda, "/usr/lib/libcuda.so.1 (deleted)"));
	assert_true(lib(cs_path_is_libcuda, "/my dir/libcuda.so.1"));
	assert_false(lib(cs_path_is_libcuda, "/usr/local/cuda/lib64/libcudart.so.12"));
	assert_false(lib(cs_path_is_libcuda, "/usr/lib/libcuda_stub.so"));
	assert_false(lib(cs_path_is_libcuda, "/opt/libcuda.so.1/libfoo.so"));
	assert_false(lib(cs_path_is_libcuda, "/usr/lib/libcuda.s"));
	assert_false(lib(cs_path_is_libcuda, "/usr/lib/"));
	assert_false(lib(cs_path_is_libcuda, ""));
	assert_false(lib(cs_path_is_libcuda, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"));
	assert_false(cs_path_is_libcuda("/lib/libcuda.so.1", 9));

	assert_true(lib(cs_path_is_nvml, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"));
	assert_true(lib(cs_path_is_nvml, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15"));
	assert_false(lib(cs_path_is_nvml, "/usr/lib/libnvidia-mlx.so.1"));
	assert_false(lib(cs_path_is_nvml, "/usr/lib/libnvidia-ml"));
	assert_false(lib(cs_path_is_nvml, "/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
	assert_false(lib(cs_path_is_nvml, "/libnvidia-ml.so.1/x"));
}

/* ---- environ ------------------------------------------------------------ */

static void env_is(const char *block, size_t len, const char *name, const char *want)
{
	char *buf = tu_exact(block, len);
	const char *v = cs_environ_get(buf, len, name);
	if (v) {
		assert_true(v > buf && v < buf + len);
		assert_non_null(memchr(v, '\0', (size_t)(buf + len - v)));
	}
	if (want && !v)
		fail_msg("%s: not found, want \"%s\"", name, want);
	if (!want && v)
		fail_msg("%s: found \"%s\", want nothing", name, v);
	if (want)
		assert_string_equal(v, want);
	free(buf);
}

#define ENV_IS(block, name, want) env_is(block, sizeof(block) - 1, name, want)

static void environ_lookup(void **state)
{
	(void)state;
	static const char block[] = "PATH=/usr/bin:/bin\0HOME=/root\0EMPTY=\0NOVAL\0"
				    "CUDA_VISIBLE_DEVICES=0,1\0A=x=y\0DUP=1\0DUP=2\0";
	ENV_IS(block, "PATH", "/usr/bin:/bin");
	ENV_IS(block, "HOME", "/root");
	ENV_IS(block, "EMPTY", "");
	ENV_IS(block, "NOVAL", NULL);
	ENV_IS(block, "CUDA_VISIBLE_DEVICES", "0,1");
	ENV_IS(block, "A", "x=y");
	ENV_IS(block, "DUP", "1");
	ENV_IS(block, "USER", NULL);
	ENV_IS(block, "PAT", NULL);
	ENV_IS(block, "PATHS", NULL);
	ENV_IS(block, "path", NULL);
	ENV_IS(block, "/root", NULL);
	ENV_IS("", "PATH", NULL);
	ENV_IS("\0\0\0X=1\0", "X", "1");
	ENV_IS("X\0=1\0", "X", NULL);
}

static void environ_unterminated(void **state)
{
	(void)state;
	/* The last entry has no NUL inside the block: handing it back would let
	 * the caller read past the block. */
	ENV_IS("A=1\0B=2", "A", "1");
	ENV_IS("A=1\0B=2", "B", NULL);
	ENV_IS("B=2", "B", NULL);
	ENV_IS("B=", "B", NULL);
	ENV_IS("B", "B", NULL);

	/* Cut in the middle of a block: only whole entries are seen. */
	static const char block[] = "LONGNAME=value\0SHORT=v\0";
	for (size_t len = 0; len <= sizeof(block) - 1; len++) {
		char *buf = tu_exact(block, len);
		const char *a = cs_environ_get(buf, len, "LONGNAME");
		const char *b = cs_environ_get(buf, len, "SHORT");
		if (len >= 15)
			assert_string_equal(a, "value");
		else
			assert_null(a);
		if (len == sizeof(block) - 1)
			assert_string_equal(b, "v");
		else
			assert_null(b);
		free(buf);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(stat_real_line),
		cmocka_unit_test(stat_comm_odd_characters),
		cmocka_unit_test(stat_comm_with_nul),
		cmocka_unit_test(stat_comm_longer_than_field),
		cmocka_unit_test(stat_every_prefix),
		cmocka_unit_test(stat_own_process),
		cmocka_unit_test(stat_numbers),
		cmocka_unit_test(sanitize_cases),
		cmocka_unit_test(sanitize_every_byte),
		cmocka_unit_test(status_fields),
		cmocka_unit_test(status_odd_text),
		cmocka_unit_test(status_last_of_line),
		cmocka_unit_test(status_nth_of_line),
		cmocka_unit_test(thread_here),
		cmocka_unit_test(maps_lines),
		cmocka_unit_test(maps_malformed),
		cmocka_unit_test(maps_file_id),
		cmocka_unit_test(device_paths),
		cmocka_unit_test(library_paths),
		cmocka_unit_test(environ_lookup),
		cmocka_unit_test(environ_unterminated),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
