/* The NVML binding: strict GPU UUID parsing (the restore device map stands on
 * it), and loading NVML where it is missing or is the test double.
 * argv[1], when given, is the fake libnvidia-ml.so.1. */
#include "nvml.h"
#include "testutil.h"
#include "util.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *fake_nvml;

static void uuid_valid(void **state)
{
	(void)state;
	static const uint8_t want[16] = { 0x1a, 0x4e, 0xc0, 0xda, 0x00, 0x01, 0x40, 0x00,
					  0x80, 0x00, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45 };
	static const char *const ok[] = {
		"GPU-1a4ec0da-0001-4000-8000-abcdef012345",
		"GPU-1A4EC0DA-0001-4000-8000-ABCDEF012345",
		"GPU-1a4Ec0dA-0001-4000-8000-AbCdEf012345",
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(ok); i++) {
		uint8_t got[16] = { 0 };
		assert_int_equal(cs_gpu_uuid_parse(ok[i], got), 0);
		assert_memory_equal(got, want, 16);
	}
	char s[CS_GPU_UUID_STRLEN];
	cs_gpu_uuid_format(want, s);
	assert_string_equal(s, ok[0]);
}

static void uuid_invalid(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"", "GPU-", "GPU", "1a4ec0da-0001-4000-8000-abcdef012345",
		"gpu-1a4ec0da-0001-4000-8000-abcdef012345",
		"MIG-1a4ec0da-0001-4000-8000-abcdef012345",
		"GPU-1a4ec0da-0001-4000-8000-abcdef01234",      /* one digit short */
		"GPU-1a4ec0da-0001-4000-8000-abcdef0123456",    /* one digit long */
		"GPU-1a4ec0da-0001-4000-8000-abcdef012345\n",
		"GPU-1a4ec0da-0001-4000-8000-abcdef012345 ",
		" GPU-1a4ec0da-0001-4000-8000-abcdef012345",
		"GPU-1a4ec0da00014000-8000-abcdef012345-",      /* dashes moved */
		"GPU-1a4ec0d-a0001-4000-8000-abcdef012345",
		"GPU-1a4ec0da-0001-4000-8000-abcdef01234g",
		"GPU-1a4ec0da-0001-4000-8000-abcdef01234-",
		"GPU-1a4ec0da-0001-4000-8000--bcdef012345",
		"GPU-1a4ec0da-0001-4000-8000-abcdef0123\xc3\xa9",
		"GPU-1a4ec0da0001400080000abcdef012345",
		"GPU-1a4ec0da-0001-4000-8000-abcdef012345,GPU-1a4ec0da-0001-4000-8000-abcdef012345",
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(bad); i++) {
		uint8_t got[16];
		memset(got, 0x5a, sizeof(got));
		if (cs_gpu_uuid_parse(bad[i], got) != -EINVAL)
			fail_msg("accepted \"%s\"", bad[i]);
		for (size_t k = 0; k < sizeof(got); k++)
			assert_int_equal(got[k], 0x5a); /* untouched on failure */
	}
	uint8_t got[16];
	assert_int_equal(cs_gpu_uuid_parse(NULL, got), -EINVAL);
}

/* A string that ends exactly where the UUID stops, for the sanitizers. */
static void uuid_truncated(void **state)
{
	(void)state;
	static const char full[] = "GPU-1a4ec0da-0001-4000-8000-abcdef012345";
	for (size_t len = 0; len < sizeof(full) - 1; len++) {
		char *s = tu_exact(full, len + 1);
		s[len] = '\0';
		uint8_t got[16];
		assert_int_equal(cs_gpu_uuid_parse(s, got), -EINVAL);
		free(s);
	}
}

static void nvml_absent(void **state)
{
	(void)state;
	setenv("CUDASNAP_LIBNVML", "/nonexistent/libnvidia-ml.so.1", 1);
	cs_nvml *n = NULL;
	assert_int_equal(cs_nvml_open(&n, NULL), 0);
	assert_non_null(n);
	assert_false(cs_nvml_present(n));
	assert_false(cs_nvml_has_mig(n));
	assert_non_null(strstr(cs_nvml_error(n)->message, "NVML not found"));
	assert_true(cs_nvml_error(n)->hint[0] != '\0');
	assert_string_equal(cs_nvml_driver_version(n), "");
	cs_nvml_gpu *g = (cs_nvml_gpu *)1;
	size_t count = 7;
	cs_error err = { 0 };
	assert_int_equal(cs_nvml_gpus(n, &g, &count, &err), -CS_EENV);
	assert_null(g);
	assert_int_equal(count, 0);
	assert_string_equal(cs_nvml_strerror(n, 9), "Driver Not Loaded");
	cs_nvml_close(n);
	cs_nvml_close(NULL);
	unsetenv("CUDASNAP_LIBNVML");
}

static void nvml_fake(void **state)
{
	(void)state;
	if (!fake_nvml)
		skip();
	char *dev = tu_mkdtemp();
	setenv("CUDASNAP_DEV_DIR", dev, 1); /* where the double opens its device files */
	setenv("CUDASNAP_LIBNVML", fake_nvml, 1);
	setenv("FAKECUDA_GPUS", "GPU-1a4ec0da-0001-4000-8000-abcdef012345,"
				"GPU-2b4ec0da-0001-4000-8000-abcdef012345", 1);
	setenv("FAKECUDA_PERSISTENCE", "0", 1);
	setenv("FAKECUDA_GPU_USED_MIB", "3", 1);
	cs_nvml *n = NULL;
	assert_int_equal(cs_nvml_open(&n, NULL), 0);
	assert_true(cs_nvml_present(n));
	assert_string_equal(cs_nvml_driver_version(n), "580.159.04");
	cs_nvml_gpu *g = NULL;
	size_t count = 0;
	assert_int_equal(cs_nvml_gpus(n, &g, &count, NULL), 0);
	assert_int_equal(count, 2);
	assert_string_equal(g[1].uuid, "GPU-2b4ec0da-0001-4000-8000-abcdef012345");
	assert_int_equal(g[1].index, 1);
	assert_int_equal(g[0].persistence, 0);
	assert_true(g[0].memory_known);
	assert_int_equal(g[0].memory_used, 3ull << 20);
	assert_true(g[0].memory_total > g[0].memory_used);
	assert_int_equal(g[0].error, 0);
	uint8_t u[16];
	assert_int_equal(cs_gpu_uuid_parse(g[0].uuid, u), 0);
	free(g);
	cs_nvml_close(n);
	tu_rmrf(dev);
	free(dev);
}

int main(int argc, char **argv)
{
	fake_nvml = argc > 1 ? argv[1] : NULL;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(uuid_valid),
		cmocka_unit_test(uuid_invalid),
		cmocka_unit_test(uuid_truncated),
		cmocka_unit_test(nvml_absent),
		cmocka_unit_test(nvml_fake),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
