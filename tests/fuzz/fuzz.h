/* Entry point every fuzz target defines; libFuzzer or replay.c calls it. */
#ifndef CS_FUZZ_H
#define CS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant broke: abort so that libFuzzer keeps the input as a crash
 * and a replay under meson fails. */
#define FUZZ_CHECK(cond)                                                              \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                      \
		}                                                                     \
	} while (0)

/* A copy of exactly size bytes (no terminator), or size+1 with a NUL when
 * the parser under test takes a C string. */
static inline char *fuzz_copy(const uint8_t *data, size_t size, int terminate)
{
	size_t n = size + (terminate || size == 0 ? 1 : 0);
	char *p = calloc(n, 1);
	if (!p)
		abort();
	if (size)
		memcpy(p, data, size);
	return p;
}

#endif
