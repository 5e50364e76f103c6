/* lib/env.c for an ordinary caller (no AT_SECURE): every documented
 * override is honoured, nothing else is read. The privileged side is
 * tests/integration/test_secure_env.py, which needs setcap and root. */
#include "env.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
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

/* A settings file in a directory of the test's own. */
static char dir[64], conf[96];

static void write_conf(const char *text, mode_t mode)
{
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(conf, mode), 0);
	setenv("CUDASNAP_CONFIG", conf, 1);
	cs_config_forget();
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
	assert_null(cs_env("CUDASNAP_LIBCUDA"));
	assert_string_equal(cs_config_problem(), "");
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
	assert_non_null(strstr(cs_config_problem(), "CUDASNAP_CONFIG (line 1) is not a setting of the file"));
}

static void bad_lines_are_skipped(void **state)
{
	(void)state;
	write_conf("just words\nCUDASNAP_ROOT=/r\nBAD NAME=1\n", 0644);
	assert_string_equal(cs_env("CUDASNAP_ROOT"), "/r");
	assert_non_null(strstr(cs_config_problem(), "line 1 is not NAME=VALUE"));
}

/* It names libraries cudasnap loads: others must not be able to change it. */
static void writable_file_is_ignored(void **state)
{
	(void)state;
	write_conf("CUDASNAP_LIBCUDA=/tmp/evil.so\n", 0666);
	assert_null(cs_env("CUDASNAP_LIBCUDA"));
	assert_non_null(strstr(cs_config_problem(), "writable by group or others: it was ignored"));
	write_conf("CUDASNAP_LIBCUDA=/tmp/evil.so\n", 0620);
	assert_null(cs_env("CUDASNAP_LIBCUDA"));
}

static void missing_file_is_no_problem(void **state)
{
	(void)state;
	setenv("CUDASNAP_CONFIG", "/nonexistent/x.conf", 1);
	cs_config_forget();
	assert_null(cs_env("CUDASNAP_DEVICE_MAP"));
	assert_string_equal(cs_config_problem(), "");
	assert_int_equal(cs_config_settings(NULL, 0), 0);
}

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/cs-unit-env-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(conf, sizeof(conf), "%s/cudasnap.conf", dir);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(not_secure, clear),
		cmocka_unit_test_setup(documented_values, clear),
		cmocka_unit_test_setup(empty_is_unset, clear),
		cmocka_unit_test_setup(undocumented_never_read, clear),
		cmocka_unit_test_setup(overrides_listed_in_order, clear),
		cmocka_unit_test_setup(file_fills_in, clear),
		cmocka_unit_test_setup(file_sets_only_settings, clear),
		cmocka_unit_test_setup(bad_lines_are_skipped, clear),
		cmocka_unit_test_setup(writable_file_is_ignored, clear),
		cmocka_unit_test_setup(missing_file_is_no_problem, clear),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(conf);
	rmdir(dir);
	return r;
}
