/* A whole maps file, split in lines, through cs_parse_maps_line and the
 * path predicates. Every line is copied to memory of its exact length. */
#include "fuzz.h"
#include "proc.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

static void one_line(const uint8_t *data, size_t len)
{
	char *line = fuzz_copy(data, len, 0);
	cs_map_entry m;
	int r = cs_parse_maps_line(line, len, &m);
	FUZZ_CHECK(r == 0 || r == -EINVAL);
	if (r == 0) {
		FUZZ_CHECK(m.path >= line && m.path <= line + len);
		FUZZ_CHECK(m.path + m.path_len == line + len);
		FUZZ_CHECK(m.path_len == 0 || m.path[0] != ' ');
		/* The addresses are the leading lowercase hex numbers. */
		char *z = fuzz_copy(data, len, 1);
		char *e;
		FUZZ_CHECK(strtoul(z, &e, 16) == m.start && *e == '-');
		FUZZ_CHECK(strtoul(e + 1, &e, 16) == m.end && *e == ' ');
		free(z);

		bool dev = cs_path_is_device(m.path, m.path_len, "/dev");
		bool dev2 = cs_path_is_device(m.path, m.path_len, "/dev//");
		FUZZ_CHECK(dev == dev2);
		if (dev) {
			FUZZ_CHECK(m.path_len > 11 && memcmp(m.path, "/dev/nvidia", 11) == 0);
			const char *slash = memchr(m.path + 5, '/', m.path_len - 5);
			FUZZ_CHECK(!slash || (slash == m.path + 16 && memcmp(m.path, "/dev/nvidia-caps/", 17) == 0 &&
					      !memchr(slash + 1, '/', m.path_len - 17)));
		}
		bool cuda = cs_path_is_libcuda(m.path, m.path_len);
		bool nvml = cs_path_is_nvml(m.path, m.path_len);
		FUZZ_CHECK(!(cuda && nvml));
		/* A device path may also look like a library (/dev/nvidia-caps/libcuda.so):
		 * the maps reader counts it as a device, as fuzz_maps_file checks. */
	}
	free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t start = 0;
	for (size_t i = 0; i <= size; i++) {
		if (i == size || data[i] == '\n') {
			one_line(data + start, i - start);
			start = i + 1;
		}
	}
	return 0;
}
