/* Regression tests: behaviour the library once got wrong, each stated as the
 * correct behaviour. Each runs alone (its name is the first argument). Exit
 * status 99 (a broken harness) is an error either way. */
#include "cudasnap.h"
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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static void expect_all_replaced(const char *in, size_t len)
{
	char out[32];
	cs_sanitize(out, sizeof(out), in, len);
	if (!cs_check_utf8_clean(out, strlen(out)))
		fail_msg("invalid UTF-8 kept: %zu input bytes -> %zu output bytes", len, strlen(out));
	for (size_t i = 0; i < len; i++)
		assert_int_equal(out[i], '?');
	assert_int_equal(out[len], '\0');
}

#define ALL_REPLACED(lit) expect_all_replaced(lit, sizeof(lit) - 1)

/* 0xf5..0xff never start a UTF-8 sequence, but utf8_len() takes any byte
 * from 0xe0 up that is not 0xf0..0xf4 as a three-byte lead. */
static void sanitize_f5_ff(void **state)
{
	(void)state;
	ALL_REPLACED("\xf5\x80\x80");
	ALL_REPLACED("\xf8\x88\x80");
	ALL_REPLACED("\xfe\xbf\xbf");
	ALL_REPLACED("\xff\x80\x80");
}

/* utf8_len() checks only that continuation bytes are 10xxxxxx, so overlong
 * forms, UTF-16 surrogates and code points above U+10FFFF pass as valid. */
static void sanitize_ranges(void **state)
{
	(void)state;
	ALL_REPLACED("\xe0\x80\x8a");     /* overlong U+000A */
	ALL_REPLACED("\xe0\x9f\xbf");     /* overlong U+07FF */
	ALL_REPLACED("\xf0\x80\x80\x80"); /* overlong U+0000 */
	ALL_REPLACED("\xf0\x8f\xbf\xbf"); /* overlong U+FFFF */
	ALL_REPLACED("\xed\xa0\x80");     /* U+D800 */
	ALL_REPLACED("\xed\xbf\xbf");     /* U+DFFF */
	ALL_REPLACED("\xf4\x90\x80\x80"); /* U+110000 */
}

/* cs_proc_scan_fds() reads errno after readdir() returns NULL, but errno
 * still holds what the last failed readlinkat() left there, so one fd entry
 * that is not a link turns a readable fd directory into an error. */
static void scan_fds_stale_errno(void **state)
{
	(void)state;
	char *proc = tu_mkdtemp();
	tu_write_str(proc, "10/fd/3", "");
	char *dir = tu_path(proc, "10");
	int pdir = open(dir, O_RDONLY | O_DIRECTORY);
	assert_true(pdir >= 0);
	cs_proc p = { .pid = 10 };
	int r = cs_proc_scan_fds(pdir, "/dev", &p);
	close(pdir);
	tu_rmrf(proc);
	free(proc);
	free(dir);
	assert_int_equal(p.nrefs, 0);
	assert_int_equal(r, 0);
}

/* cs_proc_start_time() builds "procdir/pid" in a 64-byte buffer; a longer
 * proc dir is cut short, and the cut can land on another pid. */
static void start_time_long_procdir(void **state)
{
	(void)state;
	char *base = tu_mkdtemp();
	char *cwd = getcwd(NULL, 0);
	assert_non_null(cwd);
	/* Relative to the working directory, so that the length is exact
	 * whatever $TMPDIR is: "<procdir>/12345" is 64 bytes with its NUL, and
	 * snprintf keeps "<procdir>/1234". */
	char procdir[59];
	memset(procdir, 'p', sizeof(procdir) - 1);
	procdir[sizeof(procdir) - 1] = '\0';
	char *full = tu_path(base, procdir);
	assert_int_equal(mkdir(full, 0755), 0);
	tu_fake_proc(full, 1234, 1, "other", 111, NULL);
	tu_fake_proc(full, 12345, 1, "target", 222, NULL);
	assert_int_equal(chdir(base), 0);
	unsigned long long st = 0;
	int r = cs_proc_start_time(procdir, 12345, &st);
	assert_int_equal(chdir(cwd), 0);
	tu_rmrf(base);
	free(base);
	free(full);
	free(cwd);
	assert_int_equal(r, 0);
	assert_int_equal(st, 222);
}

/* An empty table has procs == NULL and links == NULL, which cs_discover()
 * hands to qsort() and cs_ptable_find()/cs_ptable_parent() hand to bsearch();
 * both are declared nonnull, so UBSan stops here. Outside the sanitizer
 * build this test passes. */
static void empty_table(void **state)
{
	(void)state;
	char *proc = tu_mkdtemp();
	char *dev = tu_mkdtemp();
	cs_scan_opts o = { .proc_dir = proc, .dev_dir = dev };
	cs_ptable t;
	assert_int_equal(cs_discover(&o, NULL, &t, NULL), 0);
	assert_int_equal(t.n, 0);
	assert_int_equal(t.nlinks, 0);
	assert_null(cs_ptable_find(&t, 1));
	assert_int_equal(cs_ptable_parent(&t, 1), 0);
	assert_int_equal(cs_ptable_listed_ancestor(&t, 1), 0);
	assert_false(cs_ptable_descends(&t, 1, 2));
	cs_ptable_free(&t);
	tu_rmrf(proc);
	tu_rmrf(dev);
	free(proc);
	free(dev);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sanitize_f5_ff),
		cmocka_unit_test(sanitize_ranges),
		cmocka_unit_test(scan_fds_stale_errno),
		cmocka_unit_test(start_time_long_procdir),
		cmocka_unit_test(empty_table),
	};
	if (argc != 2) {
		fprintf(stderr, "usage: %s TEST\n", argv[0]);
		return 99;
	}
	size_t i = 0;
	while (i < CS_ARRAY_SIZE(tests) && strcmp(tests[i].name, argv[1]) != 0)
		i++;
	if (i == CS_ARRAY_SIZE(tests)) {
		fprintf(stderr, "%s: no test %s\n", argv[0], argv[1]);
		return 99;
	}
	return _cmocka_run_group_tests(argv[1], &tests[i], 1, NULL, NULL);
}
