/* lib/base/env.c for an ordinary caller (no AT_SECURE): every documented
 * override is honoured, nothing else is read. The privileged side is
 * tests/integration/test_secure_env.py, which needs setcap and root. And
 * the settings file (lib/base/config.c): read only when nobody but root and the
 * caller can have chosen what it says, with every skipped line kept. */
#include "env.h"
#include "testutil.h"

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static const char *const all[] = {
	"CUDASNAP_LIBCUDA",    "CUDASNAP_LIBNVML", "CUDASNAP_DEV_DIR",     "CUDASNAP_PROC_DIR",
	"CUDASNAP_STATE_DIR",  "CUDASNAP_ROOT",    "CUDASNAP_HOOK_STRICT", "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE",
	"CUDASNAP_DEVICE_MAP", "CUDASNAP_CONFIG",
};

/* The settings files live in a directory of the test's own, below one whose
 * every component only root or the caller can change (the build directory,
 * from meson): below /tmp, which anyone can write, every file is refused. */
static char *dir, *conf;

static void write_conf(const char *text, mode_t mode)
{
	unlink(conf); /* a new file, owned by the test */
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(conf, mode), 0);
	setenv("CUDASNAP_CONFIG", conf, 1);
	cs_config_forget();
}

/* Points CUDASNAP_CONFIG at rel below the test's directory. */
static void use_conf(const char *rel)
{
	char *p = tu_path(dir, rel);
	setenv("CUDASNAP_CONFIG", p, 1);
	free(p);
	cs_config_forget();
}

static cs_config_status status(void)
{
	cs_config_status s;
	cs_config_status_get(&s);
	return s;
}

/* Asserts that the file was ignored for why, and gives nothing. */
static void assert_ignored(const char *why)
{
	cs_config_status s = status();
	assert_false(s.read);
	if (!strstr(s.ignored, why))
		fail_msg("ignored for \"%s\", not \"%s\"", s.ignored, why);
	assert_null(cs_env("CUDASNAP_LIBCUDA"));
	assert_int_equal(cs_config_settings(NULL, 0), 0);
	assert_int_equal(s.nskipped, 0);
}

/* Each test starts from an environment without any of them. */
static int clear(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		unsetenv(all[i]);
	unsetenv("CUDASNAP_UNDOCUMENTED");
	/* No settings file either (the machine's own is not the test's business). */
	setenv("CUDASNAP_CONFIG", "/nonexistent/cudasnap.conf", 1);
	cs_config_forget();
	return 0;
}

static void not_secure(void **state)
{
	(void)state;
	/* The test runs as an ordinary program; were it AT_SECURE, the rest would not hold. */
	assert_false(cs_env_secure());
}

static void documented_values(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		if (strcmp(all[i], "CUDASNAP_CONFIG") != 0) /* clear() points it at no file */
			assert_null(cs_env(all[i]));
		setenv(all[i], "/some/where", 1);
		assert_string_equal(cs_env(all[i]), "/some/where");
		assert_false(cs_env_is_ignored(all[i]));
	}
}

static void empty_is_unset(void **state)
{
	(void)state;
	setenv("CUDASNAP_STATE_DIR", "", 1);
	assert_null(cs_env("CUDASNAP_STATE_DIR"));
	const char *names[CS_ENV_COUNT];
	assert_int_equal(cs_env_overrides(names, CS_ENV_COUNT), 1); /* CUDASNAP_CONFIG */
}

static void undocumented_never_read(void **state)
{
	(void)state;
	setenv("CUDASNAP_UNDOCUMENTED", "x", 1);
	assert_null(cs_env("CUDASNAP_UNDOCUMENTED"));
	assert_null(cs_env("PATH"));
	assert_null(cs_env(NULL));
	assert_false(cs_env_is_ignored("CUDASNAP_UNDOCUMENTED"));
}

static void overrides_listed_in_order(void **state)
{
	(void)state;
	setenv("CUDASNAP_ROOT", "/r", 1);
	setenv("CUDASNAP_LIBCUDA", "/l", 1);
	setenv("GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE", "save", 1);
	const char *names[CS_ENV_COUNT] = { 0 };
	assert_int_equal(cs_env_overrides(names, CS_ENV_COUNT), 4);
	assert_string_equal(names[0], "CUDASNAP_LIBCUDA");
	assert_string_equal(names[1], "CUDASNAP_ROOT");
	assert_string_equal(names[2], "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE");
	assert_string_equal(names[3], "CUDASNAP_CONFIG"); /* clear() sets it */
	/* A short array gets the first ones and the count of all. */
	const char *one[1] = { 0 };
	assert_int_equal(cs_env_overrides(one, 1), 4);
	assert_string_equal(one[0], "CUDASNAP_LIBCUDA");
	assert_int_equal(cs_env_overrides(NULL, 0), 4);
	/* Honoured, so none is ignored. */
	assert_int_equal(cs_env_ignored(names, CS_ENV_COUNT), 0);
}

/* What the environment does not give, the file does; the environment wins. */
static void file_fills_in(void **state)
{
	(void)state;
	write_conf("# settings\n\n  CUDASNAP_DEVICE_MAP = GPU-a=GPU-b \nCUDASNAP_STATE_DIR=/first\n"
		   "CUDASNAP_STATE_DIR=/second\r\n",
		   0644);
	assert_string_equal(cs_env("CUDASNAP_DEVICE_MAP"), "GPU-a=GPU-b");
	assert_string_equal(cs_env("CUDASNAP_STATE_DIR"), "/second");
	setenv("CUDASNAP_STATE_DIR", "/from-env", 1);
	assert_string_equal(cs_env("CUDASNAP_STATE_DIR"), "/from-env");
	assert_string_equal(cs_config_value("CUDASNAP_STATE_DIR"), "/second");
	assert_null(cs_env("CUDASNAP_LIBCUDA"));
	assert_null(cs_config_value("CUDASNAP_LIBCUDA"));
	assert_null(cs_config_value("PATH"));
	assert_null(cs_config_value(NULL));
	cs_config_status s = status();
	assert_true(s.read);
	assert_string_equal(s.ignored, "");
	assert_int_equal(s.nskipped, 0);
	assert_string_equal(s.path, conf);
	assert_string_equal(cs_config_path(), conf);
	const char *names[CS_ENV_COUNT] = { 0 };
	assert_int_equal(cs_config_settings(names, CS_ENV_COUNT), 2);
	assert_string_equal(names[0], "CUDASNAP_STATE_DIR");
	assert_string_equal(names[1], "CUDASNAP_DEVICE_MAP");
}

/* Only cudasnap's own settings, never the file's own name or gVisor's. */
static void file_sets_only_settings(void **state)
{
	(void)state;
	write_conf("CUDASNAP_CONFIG=/elsewhere\nGVISOR_SAVE_RESTORE_AUTO_EXEC_MODE=save\nPATH=/x\n"
		   "CUDASNAP_LIBNVML=/lib/nvml.so\n",
		   0600);
	assert_null(cs_env("GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"));
	assert_string_equal(cs_env("CUDASNAP_CONFIG"), conf);
	assert_string_equal(cs_env("CUDASNAP_LIBNVML"), "/lib/nvml.so");
	cs_config_status s = status();
	assert_int_equal(s.nskipped, 3);
	assert_int_equal(s.skipped[0].line, 1);
	assert_string_equal(s.skipped[0].why, "CUDASNAP_CONFIG is not a setting of the file");
	assert_int_equal(s.skipped[1].line, 2);
	assert_string_equal(s.skipped[1].why, "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE is not a setting of the file");
	assert_int_equal(s.skipped[2].line, 3);
	assert_string_equal(s.skipped[2].why, "PATH is not a setting of the file");
}

static void bad_lines_are_skipped(void **state)
{
	(void)state;
	write_conf("just words\nCUDASNAP_ROOT=/r\nBAD NAME=1\n=x\n", 0644);
	assert_string_equal(cs_env("CUDASNAP_ROOT"), "/r");
	cs_config_status s = status();
	assert_true(s.read);
	assert_int_equal(s.nskipped, 3);
	unsigned want[] = { 1, 3, 4 };
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(s.skipped[i].line, want[i]);
		assert_string_equal(s.skipped[i].why, "not NAME=VALUE");
	}
}

/* Every skipped line counts; the first CS_CONFIG_SKIPS_KEPT keep their
 * reasons, so that a huge file cannot make the process grow. A name too
 * long for the reason is cut and marked, and control bytes are not copied. */
static void many_bad_lines(void **state)
{
	(void)state;
	char text[8192] = "";
	size_t len = 0;
	for (int i = 1; i <= 500; i++) {
		const char *line = i == 2 ? "CUDASNAP_LIBCUDA=/opt/libcuda.so.1\n" :
			i == 3            ? "NO\x1b[31mPE=1\n" :
			i == 4            ? "N123456789_123456789_123456789_123456789_123456789_123=1\n" :
					    "%%%\n";
		if (i > 20)
			line = "x\n";
		len += (size_t)snprintf(text + len, sizeof(text) - len, "%s", line);
	}
	assert_true(len < sizeof(text) - 1);
	write_conf(text, 0644);
	assert_string_equal(cs_env("CUDASNAP_LIBCUDA"), "/opt/libcuda.so.1");
	cs_config_status s = status();
	assert_true(s.read);
	assert_int_equal(s.nskipped, 499);
	assert_int_equal(s.skipped[0].line, 1);
	assert_string_equal(s.skipped[0].why, "not NAME=VALUE");
	assert_int_equal(s.skipped[1].line, 3); /* '[' is no name character */
	assert_string_equal(s.skipped[1].why, "not NAME=VALUE");
	assert_int_equal(s.skipped[2].line, 4);
	assert_string_equal(s.skipped[2].why,
			    "N123456789_123456789_123456789_123456789_1234567... is not a setting of the file");
	for (size_t i = 3; i < CS_CONFIG_SKIPS_KEPT; i++) {
		assert_int_equal(s.skipped[i].line, i + 2);
		assert_string_equal(s.skipped[i].why, "not NAME=VALUE");
	}
}

/* It names libraries cudasnap loads: others must not be able to change it. */
static void writable_file_is_ignored(void **state)
{
	(void)state;
	write_conf("CUDASNAP_LIBCUDA=/tmp/evil.so\n", 0666);
	char *want = tu_path(dir, "cudasnap.conf is writable by group or others");
	assert_ignored(want);
	write_conf("CUDASNAP_LIBCUDA=/tmp/evil.so\n", 0620);
	assert_ignored(want);
	free(want);
}

static void symlinked_file_is_ignored(void **state)
{
	(void)state;
	write_conf("CUDASNAP_LIBCUDA=/opt/libcuda.so.1\n", 0644);
	tu_symlink(conf, dir, "link.conf");
	use_conf("link.conf");
	char *want = tu_path(dir, "link.conf is a symbolic link");
	assert_ignored(want);
	free(want);
}

/* Every directory on the path counts, not only the file's own. */
static void symlinked_directory_is_ignored(void **state)
{
	(void)state;
	tu_mkdirs(dir, "real");
	tu_write_str(dir, "real/cudasnap.conf", "CUDASNAP_LIBCUDA=/opt/libcuda.so.1\n");
	use_conf("real/cudasnap.conf");
	assert_string_equal(cs_env("CUDASNAP_LIBCUDA"), "/opt/libcuda.so.1");
	tu_symlink("real", dir, "via");
	use_conf("via/cudasnap.conf");
	char *want = tu_path(dir, "via is a symbolic link");
	assert_ignored(want);
	free(want);
}

static void group_writable_directory_is_ignored(void **state)
{
	(void)state;
	tu_mkdirs(dir, "group/sub");
	tu_write_str(dir, "group/sub/cudasnap.conf", "CUDASNAP_LIBCUDA=/opt/libcuda.so.1\n");
	char *group = tu_path(dir, "group");
	assert_int_equal(chmod(group, 0775), 0);
	use_conf("group/sub/cudasnap.conf");
	char *want = tu_path(dir, "group is writable by group or others");
	assert_ignored(want);
	assert_int_equal(chmod(group, 0755), 0);
	use_conf("group/sub/cudasnap.conf");
	assert_string_equal(cs_env("CUDASNAP_LIBCUDA"), "/opt/libcuda.so.1");
	free(want);
	free(group);
}

/* Like /tmp: the sticky bit keeps others from removing the file, not from
 * creating the name first. */
static void sticky_directory_is_ignored(void **state)
{
	(void)state;
	tu_mkdirs(dir, "sticky");
	tu_write_str(dir, "sticky/cudasnap.conf", "CUDASNAP_LIBCUDA=/opt/libcuda.so.1\n");
	char *sticky = tu_path(dir, "sticky");
	assert_int_equal(chmod(sticky, 01777), 0);
	use_conf("sticky/cudasnap.conf");
	char *want = tu_path(dir, "sticky is writable by others (the sticky bit");
	assert_ignored(want);
	/* where there is no file, there is nothing to refuse */
	use_conf("sticky/absent.conf");
	cs_config_status s = status();
	assert_false(s.read);
	assert_string_equal(s.ignored, "");
	free(want);
	free(sticky);
}

/* chown needs root; the owner rule is the same for the file and a directory. */
static void other_owner_is_ignored(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	write_conf("CUDASNAP_LIBCUDA=/opt/libcuda.so.1\n", 0644);
	assert_int_equal(chown(conf, 4321, (gid_t)-1), 0);
	cs_config_forget();
	assert_ignored("cudasnap.conf is owned by uid 4321, not root or the caller");
	tu_mkdirs(dir, "theirs");
	tu_write_str(dir, "theirs/cudasnap.conf", "CUDASNAP_LIBCUDA=/opt/libcuda.so.1\n");
	char *theirs = tu_path(dir, "theirs");
	assert_int_equal(chown(theirs, 4321, (gid_t)-1), 0);
	use_conf("theirs/cudasnap.conf");
	char *want = tu_path(dir, "theirs is owned by uid 4321, not root or the caller");
	assert_ignored(want);
	free(want);
	free(theirs);
}

/* What is not a regular file is refused, a FIFO without hanging the open. */
static void not_a_regular_file(void **state)
{
	(void)state;
	char *fifo = tu_path(dir, "fifo");
	assert_int_equal(mkfifo(fifo, 0600), 0);
	use_conf("fifo");
	assert_ignored("fifo is not a regular file");
	tu_mkdirs(dir, "adir");
	use_conf("adir");
	assert_ignored("adir is not a regular file");
	tu_write_str(dir, "plain", "");
	use_conf("plain/cudasnap.conf");
	assert_ignored("plain is not a directory");
	free(fifo);
}

static void large_file_is_ignored(void **state)
{
	(void)state;
	char *big = calloc(1, 70000);
	assert_non_null(big);
	memset(big, '#', 69999);
	write_conf(big, 0644);
	assert_ignored("cudasnap.conf is larger than 64 KiB");
	free(big);
}

/* A relative path is taken from the current directory's absolute path,
 * whose every directory is checked too; "." and ".." by name. */
static void relative_path(void **state)
{
	(void)state;
	char old[PATH_MAX];
	assert_non_null(getcwd(old, sizeof(old)));
	write_conf("CUDASNAP_ROOT=/r\n", 0644);
	tu_mkdirs(dir, "sub");
	assert_int_equal(chdir(dir), 0);
	setenv("CUDASNAP_CONFIG", "./sub/.././/cudasnap.conf", 1);
	cs_config_forget();
	assert_string_equal(cs_env("CUDASNAP_ROOT"), "/r");
	assert_string_equal(cs_config_path(), "./sub/.././/cudasnap.conf");
	/* below a directory anyone can write, the same file is refused */
	tu_mkdirs(dir, "open/inner");
	char *open_dir = tu_path(dir, "open");
	assert_int_equal(chmod(open_dir, 0777), 0);
	assert_int_equal(chdir(open_dir), 0);
	setenv("CUDASNAP_CONFIG", "../cudasnap.conf", 1);
	cs_config_forget();
	assert_string_equal(cs_env("CUDASNAP_ROOT"), "/r"); /* ".." leaves it by name */
	setenv("CUDASNAP_CONFIG", "inner/../../cudasnap.conf", 1);
	cs_config_forget();
	assert_string_equal(cs_env("CUDASNAP_ROOT"), "/r");
	tu_write_str(dir, "open/cudasnap.conf", "CUDASNAP_LIBCUDA=/opt/libcuda.so.1\n");
	setenv("CUDASNAP_CONFIG", "cudasnap.conf", 1);
	cs_config_forget();
	char *want = tu_path(dir, "open is writable by group or others");
	assert_ignored(want);
	assert_int_equal(chdir(old), 0);
	free(want);
	free(open_dir);
}

static void missing_file_is_no_problem(void **state)
{
	(void)state;
	setenv("CUDASNAP_CONFIG", "/nonexistent/x.conf", 1);
	cs_config_forget();
	assert_null(cs_env("CUDASNAP_DEVICE_MAP"));
	cs_config_status s = status();
	assert_false(s.read);
	assert_string_equal(s.ignored, "");
	assert_int_equal(cs_config_settings(NULL, 0), 0);
	use_conf("absent.conf");
	s = status();
	assert_false(s.read);
	assert_string_equal(s.ignored, "");
}

/* A path that does not fit is refused, not shortened into another one. */
static void long_path_is_ignored(void **state)
{
	(void)state;
	char *p = malloc(PATH_MAX + 16);
	assert_non_null(p);
	memset(p, 'a', PATH_MAX + 15);
	p[0] = '/';
	p[PATH_MAX + 15] = '\0';
	setenv("CUDASNAP_CONFIG", p, 1);
	cs_config_forget();
	assert_ignored("its path is longer than");
	p[PATH_MAX - 100] = '\0';
	setenv("CUDASNAP_CONFIG", p, 1);
	cs_config_forget();
	cs_config_status s = status();
	assert_false(s.read); /* a name longer than NAME_MAX */
	assert_non_null(strstr(s.ignored, "cannot be opened"));
	free(p);
}

/* Whether every directory of path is one only root or the caller can
 * change, checked here independently of the code under test. */
static bool path_trusted(const char *path)
{
	char *p = strdup(path);
	bool ok = true;
	for (char *s = p;; s++) {
		if (*s != '/' && *s)
			continue;
		char c = *s;
		*s = '\0';
		struct stat st;
		ok = ok && lstat(*p ? p : "/", &st) == 0 && S_ISDIR(st.st_mode) &&
			(st.st_uid == 0 || st.st_uid == geteuid()) && !(st.st_mode & (S_IWGRP | S_IWOTH));
		*s = c;
		if (!c)
			break;
	}
	free(p);
	return ok;
}

int main(void)
{
	/* Below the build directory, or (a checkout under /tmp, which anyone can
	 * write) below /var/lib. */
	const char *env = getenv("CS_TEST_TRUSTED_DIR");
	const char *bases[] = { env && *env ? env : ".", "/var/lib" };
	char *real = NULL;
	for (size_t i = 0; i < 2 && !real; i++) {
		real = realpath(bases[i], NULL);
		if (real && (!path_trusted(real) || access(real, W_OK) != 0)) {
			free(real);
			real = NULL;
		}
	}
	if (!real) {
		/* 77: meson's "skipped" */
		fprintf(stderr,
			"%s, /var/lib: some directory on each path can be changed by others than root and "
			"the caller\n",
			bases[0]);
		return 77;
	}
	dir = tu_path(real, "env-XXXXXX");
	assert_non_null(mkdtemp(dir));
	assert_int_equal(chmod(dir, 0755), 0);
	conf = tu_path(dir, "cudasnap.conf");
	free(real);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(not_secure, clear),
		cmocka_unit_test_setup(documented_values, clear),
		cmocka_unit_test_setup(empty_is_unset, clear),
		cmocka_unit_test_setup(undocumented_never_read, clear),
		cmocka_unit_test_setup(overrides_listed_in_order, clear),
		cmocka_unit_test_setup(file_fills_in, clear),
		cmocka_unit_test_setup(file_sets_only_settings, clear),
		cmocka_unit_test_setup(bad_lines_are_skipped, clear),
		cmocka_unit_test_setup(many_bad_lines, clear),
		cmocka_unit_test_setup(writable_file_is_ignored, clear),
		cmocka_unit_test_setup(symlinked_file_is_ignored, clear),
		cmocka_unit_test_setup(symlinked_directory_is_ignored, clear),
		cmocka_unit_test_setup(group_writable_directory_is_ignored, clear),
		cmocka_unit_test_setup(sticky_directory_is_ignored, clear),
		cmocka_unit_test_setup(other_owner_is_ignored, clear),
		cmocka_unit_test_setup(not_a_regular_file, clear),
		cmocka_unit_test_setup(large_file_is_ignored, clear),
		cmocka_unit_test_setup(relative_path, clear),
		cmocka_unit_test_setup(missing_file_is_no_problem, clear),
		cmocka_unit_test_setup(long_path_is_ignored, clear),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	tu_rmrf(dir);
	free(conf);
	free(dir);
	return r;
}
