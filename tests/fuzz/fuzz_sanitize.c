/* cs_sanitize: whatever goes in, what comes out fits the buffer, is
 * terminated, and is clean UTF-8 without control bytes. The first input
 * byte picks the destination size. */
#include "fuzz.h"
#include "proc.h"
#include "utf8check.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t dstsize = data[0] % 80;
	char *in = fuzz_copy(data + 1, size - 1, 0);
	char *out = malloc(dstsize ? dstsize : 1);
	if (!out)
		abort();
	memset(out, 'Z', dstsize ? dstsize : 1);
	cs_sanitize(out, dstsize, in, size - 1);
	if (dstsize == 0) {
		FUZZ_CHECK(out[0] == 'Z');
	} else {
		size_t n = strnlen(out, dstsize);
		FUZZ_CHECK(n < dstsize);
		size_t inlen = strnlen(in, size - 1);
		FUZZ_CHECK(n <= inlen);
		FUZZ_CHECK(cs_check_utf8_clean(out, n));
	}
	free(out);
	free(in);
	return 0;
}
