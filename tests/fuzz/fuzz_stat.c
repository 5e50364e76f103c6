/* cs_parse_stat over arbitrary bytes: it must reject or return fields that
 * really are in the text, with a printable comm. */
#include "fuzz.h"
#include "proc.h"

#include <errno.h>
#include <string.h>

/* Whether a decimal number equal to v starts at p (leading zeros allowed). */
static int starts_with_number(const char *p, const char *end, long long v)
{
	int neg = p < end && *p == '-';
	p += neg;
	if (p >= end || *p < '0' || *p > '9')
		return 0;
	unsigned long long x = 0;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		if (x > (~0ULL - 9) / 10)
			return 0;
		x = x * 10 + (unsigned)(*p - '0');
	}
	if (neg)
		return v <= 0 && x == 0ULL - (unsigned long long)v;
	return v >= 0 && x == (unsigned long long)v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = fuzz_copy(data, size, 0);
	cs_stat st;
	int r = cs_parse_stat(buf, size, &st);
	FUZZ_CHECK(r == 0 || r == -EINVAL);
	if (r == 0) {
		const char *end = buf + size;
		const char *open = memchr(buf, '(', size), *close = NULL;
		for (const char *c = buf; c < end; c++)
			if (*c == ')')
				close = c;
		FUZZ_CHECK(open && close && open < close);
		FUZZ_CHECK(st.pid > 0 && st.ppid >= 0);
		FUZZ_CHECK(starts_with_number(buf, open, st.pid));

		size_t n = strnlen(st.comm, sizeof(st.comm));
		FUZZ_CHECK(n < sizeof(st.comm));
		FUZZ_CHECK(n <= (size_t)(close - open - 1));
		for (size_t i = 0; i < n; i++) {
			unsigned char c = (unsigned char)st.comm[i];
			FUZZ_CHECK(c >= 0x20 && c != 0x7f);
		}

		/* Fields after comm are single-space separated: state is field 3,
		 * ppid field 4, start time field 22. */
		const char *p = close + 1;
		for (int field = 3; field <= 22; field++) {
			FUZZ_CHECK(p < end && *p == ' ');
			p++;
			FUZZ_CHECK(p < end);
			if (field == 3) {
				FUZZ_CHECK(*p == st.state);
				p++;
				continue;
			}
			if (field == 4)
				FUZZ_CHECK(starts_with_number(p, end, st.ppid));
			if (field == 22)
				FUZZ_CHECK(starts_with_number(p, end, (long long)st.start_time));
			while (p < end && *p != ' ')
				p++;
		}
	}
	free(buf);
	return 0;
}
