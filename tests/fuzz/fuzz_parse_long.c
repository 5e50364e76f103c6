/* cs_parse_long against its contract: an optional '-', decimal digits and
 * nothing else, within [min, max]. The first input byte picks the range. */
#include "fuzz.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

static const struct {
	long min, max;
} ranges[] = {
	{ LONG_MIN, LONG_MAX }, { 1, INT_MAX }, { 0, INT_MAX }, { 0, 0 }, { -10, 10 }, { 5, 4 },
};

static int reference(const char *s, long min, long max, long *out)
{
	const char *p = s;
	int neg = *p == '-';
	p += neg;
	if (!*p)
		return -EINVAL;
	for (const char *c = p; *c; c++)
		if (*c < '0' || *c > '9')
			return -EINVAL;
	unsigned long long x = 0;
	int big = 0;
	for (; *p; p++) {
		if (x > ((unsigned long long)LONG_MAX + 1) / 10)
			big = 1;
		else
			x = x * 10 + (unsigned)(*p - '0');
	}
	if (big || x > (unsigned long long)LONG_MAX + (unsigned)neg)
		return -ERANGE;
	long v = neg ? (long)(0ULL - x) : (long)x;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t k = data[0] % (sizeof(ranges) / sizeof(ranges[0]));
	char *s = fuzz_copy(data + 1, size - 1, 1);
	long got = 77, want = 77;
	int r = cs_parse_long(s, ranges[k].min, ranges[k].max, &got);
	int w = reference(s, ranges[k].min, ranges[k].max, &want);
	FUZZ_CHECK(r == w);
	FUZZ_CHECK(got == want);
	free(s);
	return 0;
}
