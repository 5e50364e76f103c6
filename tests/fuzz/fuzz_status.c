/* cs_parse_status_field against a plain reading of the format: the first
 * line that starts with "Key:", blanks, then a signed decimal; and
 * cs_parse_status_last against the last of that line's blank-separated
 * decimals (every word a decimal). The first input byte picks the key. */
#include "fuzz.h"
#include "proc.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>

static const char *const keys[] = {
	"Tgid",   "Pid",     "PPid",  "TracerPid", "Uid",   "Gid", "NSpid",
	"NStgid", "Threads", "VmRSS", "Ngid",      "Umask", "T",   "",
};

static int reference(const char *text, const char *key, long *out)
{
	size_t klen = strlen(key);
	for (const char *line = text;;) {
		if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
			const char *p = line + klen + 1;
			p += strspn(p, " \t");
			int neg = *p == '-';
			p += neg;
			if (*p < '0' || *p > '9')
				return -EINVAL;
			long x = 0;
			for (; *p >= '0' && *p <= '9'; p++) {
				long d = *p - '0';
				if (x > (LONG_MAX - d) / 10)
					return -EINVAL;
				x = x * 10 + d;
			}
			*out = neg ? -x : x;
			return 0;
		}
		const char *nl = strchr(line, '\n');
		if (!nl)
			return -ENOENT;
		line = nl + 1;
	}
}

/* One signed decimal that fits a long, ending at a blank or the line's end. */
static bool word(const char **p, const char *end, long *out)
{
	int neg = *p < end && **p == '-';
	const char *q = *p + neg;
	if (q >= end || *q < '0' || *q > '9')
		return false;
	unsigned long long x = 0;
	for (; q < end && *q >= '0' && *q <= '9'; q++) {
		if (x > (ULLONG_MAX - (unsigned)(*q - '0')) / 10)
			return false;
		x = x * 10 + (unsigned)(*q - '0');
	}
	if (x > (unsigned long long)LONG_MAX || (q < end && *q != ' ' && *q != '\t'))
		return false;
	*out = neg ? -(long)x : (long)x;
	*p = q;
	return true;
}

static int reference_last(const char *text, const char *key, long *out)
{
	size_t klen = strlen(key);
	for (const char *line = text;;) {
		const char *nl = strchr(line, '\n'), *end = nl ? nl : line + strlen(line);
		if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
			const char *p = line + klen + 1;
			long v = 0;
			int words = 0;
			for (;; words++) {
				while (p < end && (*p == ' ' || *p == '\t'))
					p++;
				if (p == end)
					break;
				if (!word(&p, end, &v))
					return -EINVAL;
			}
			if (!words)
				return -EINVAL;
			*out = v;
			return 0;
		}
		if (!nl)
			return -ENOENT;
		line = nl + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *key = keys[data[0] % (sizeof(keys) / sizeof(keys[0]))];
	char *text = fuzz_copy(data + 1, size - 1, 1);
	long got = LONG_MIN + 7, want = LONG_MIN + 7;
	int r = cs_parse_status_field(text, key, &got);
	int w = reference(text, key, &want);
	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ENOENT);
	if (r != w)
		fprintf(stderr, "key %s: got %d, reference %d\n", key, r, w);
	FUZZ_CHECK(r == w);
	FUZZ_CHECK(got == want);
	got = want = LONG_MIN + 7;
	r = cs_parse_status_last(text, key, &got);
	w = reference_last(text, key, &want);
	if (r != w)
		fprintf(stderr, "key %s: last: got %d, reference %d\n", key, r, w);
	FUZZ_CHECK(r == w);
	FUZZ_CHECK(got == want);
	free(text);
	return 0;
}
