/* lib/env.c for an ordinary caller (no AT_SECURE): every documented
 * override is honoured, nothing else is read. The privileged side is
 * tests/integration/test_secure_env.py, which needs setcap and root. */
#include "env.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *const all[] = {
	"CUDASNAP_LIBCUDA", "CUDASNAP_LIBNVML", "CUDASNAP_DEV_DIR", "CUDASNAP_PROC_DIR",
	"CUDASNAP_STATE_DIR", "CUDASNAP_ROOT", "CUDASNAP_HOOK_STRICT", "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE",
};

/* Each test starts from an environment without any of them. */
static int clear(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		unsetenv(all[i]);
	unsetenv("CUDASNAP_UNDOCUMENTED");
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
	assert_int_equal(cs_env_overrides(names, CS_ENV_COUNT), 0);
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
	assert_int_equal(cs_env_overrides(names, CS_ENV_COUNT), 3);
	assert_string_equal(names[0], "CUDASNAP_LIBCUDA");
	assert_string_equal(names[1], "CUDASNAP_ROOT");
	assert_string_equal(names[2], "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE");
	/* A short array gets the first ones and the count of all. */
	const char *one[1] = { 0 };
	assert_int_equal(cs_env_overrides(one, 1), 3);
	assert_string_equal(one[0], "CUDASNAP_LIBCUDA");
	assert_int_equal(cs_env_overrides(NULL, 0), 3);
	/* Honoured, so none is ignored. */
	assert_int_equal(cs_env_ignored(names, CS_ENV_COUNT), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(not_secure, clear),
		cmocka_unit_test_setup(documented_values, clear),
		cmocka_unit_test_setup(empty_is_unset, clear),
		cmocka_unit_test_setup(undocumented_never_read, clear),
		cmocka_unit_test_setup(overrides_listed_in_order, clear),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
