/* cs_environ_get against a plain walk over NUL-terminated entries. Input:
 * one byte with the name's length, the name, then the environ block. */
#include "fuzz.h"
#include "proc.h"

#include <string.h>

static const char *reference(const char *buf, size_t len, const char *name)
{
	size_t nlen = strlen(name);
	for (const char *e = buf; e < buf + len;) {
		const char *nul = memchr(e, '\0', (size_t)(buf + len - e));
		if (!nul)
			return NULL;
		if ((size_t)(nul - e) > nlen && memcmp(e, name, nlen) == 0 && e[nlen] == '=')
			return e + nlen + 1;
		e = nul + 1;
	}
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t nlen = data[0] % 24;
	if (nlen > size - 1)
		nlen = size - 1;
	char *name = fuzz_copy(data + 1, nlen, 1);
	size_t len = size - 1 - nlen;
	char *block = fuzz_copy(data + 1 + nlen, len, 0);
	const char *got = cs_environ_get(block, len, name);
	const char *want = reference(block, len, name);
	FUZZ_CHECK(got == want);
	if (got)
		FUZZ_CHECK(memchr(got, '\0', (size_t)(block + len - got)) != NULL);
	free(block);
	free(name);
	return 0;
}
