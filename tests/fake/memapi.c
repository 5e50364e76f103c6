#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "internal.h"

#define CHUNK (64u * 1024u)

CUresult fakecuda_mem_alloc(uint64_t *dptr, size_t bytes)
{
	if (dptr == NULL || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUuuid gpu;
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	/* the fake API allocates on device 0 only */
	rc = cuDeviceGetUuid_v2(&gpu, 0);
	if (rc == CUDA_SUCCESS)
		rc = fc_devmem_alloc(dptr, bytes, &gpu);
	fc_gate_leave();
	return rc;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Chunks start at multiples of CHUNK, so word k of the buffer is always word
 * pos / 8 + k of the pattern, whichever call generates it. */
static void pattern(uint64_t *words, size_t pos, size_t n, uint64_t seed)
{
	for (size_t k = 0; k < (n + 7) / 8; k++)
		words[k] = mix(seed ^ mix(pos / 8 + k));
}

struct span {
	struct fc_region r;
	uint64_t *buf;
};

/* pos: from the start of the span */
static int chunk_io(const struct span *s, size_t n, size_t pos, int writing)
{
	if (s->r.mem != NULL) {
		if (writing)
			memcpy(s->r.mem + pos, s->buf, n);
		else
			memcpy(s->buf, s->r.mem + pos, n);
		return 0;
	}
	ssize_t r;
	off_t off = s->r.off + (off_t)pos;
	do
		r = writing ? pwrite(s->r.fd, s->buf, n, off) : pread(s->r.fd, s->buf, n, off);
	while (r < 0 && errno == EINTR);
	return r == (ssize_t)n ? 0 : -1;
}

static CUresult begin(uint64_t dptr, size_t bytes, struct span *s)
{
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	s->buf = malloc(CHUNK);
	if (s->buf == NULL)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	else if (fc_devmem_locate(dptr, bytes, &s->r) != 0)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc != CUDA_SUCCESS) {
		free(s->buf);
		fc_gate_leave();
	}
	return rc;
}

static void end(struct span *s)
{
	free(s->buf);
	fc_gate_leave();
}

CUresult fakecuda_fill(uint64_t dptr, size_t bytes, uint64_t seed)
{
	struct span s;
	CUresult rc = begin(dptr, bytes, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	for (size_t pos = 0; rc == CUDA_SUCCESS && pos < bytes; pos += CHUNK) {
		size_t n = bytes - pos < CHUNK ? bytes - pos : CHUNK;
		pattern(s.buf, pos, n, seed);
		if (chunk_io(&s, n, pos, 1) != 0)
			rc = CUDA_ERROR_UNKNOWN;
	}
	end(&s);
	return rc;
}

static size_t first_difference(const uint64_t *got, size_t pos, size_t n, uint64_t seed,
			       uint64_t *want_word)
{
	uint64_t want[CHUNK / 8];
	pattern(want, pos, n, seed);
	for (size_t k = 0; k < n; k++) {
		if (((const unsigned char *)got)[k] != ((const unsigned char *)want)[k]) {
			*want_word = want[k / 8];
			return k;
		}
	}
	return n;
}

static CUresult compare_chunk(struct span *s, size_t pos, size_t n, uint64_t seed, char *why,
			      size_t why_len)
{
	uint64_t want_word;
	if (chunk_io(s, n, pos, 0) != 0) {
		snprintf(why, why_len, "cannot read device memory at byte %zu", pos);
		return CUDA_ERROR_UNKNOWN;
	}
	size_t k = first_difference(s->buf, pos, n, seed, &want_word);
	if (k == n)
		return CUDA_SUCCESS;
	snprintf(why, why_len, "byte %zu differs: word 0x%016" PRIx64 " expected 0x%016" PRIx64,
		 pos + k, s->buf[k / 8], want_word);
	return CUDA_ERROR_UNKNOWN;
}

CUresult fakecuda_verify(uint64_t dptr, size_t bytes, uint64_t seed, char *why, size_t why_len)
{
	char scratch[8];
	if (why == NULL || why_len == 0) {
		why = scratch;
		why_len = sizeof(scratch);
	}
	why[0] = '\0';
	struct span s;
	CUresult rc = begin(dptr, bytes, &s);
	if (rc != CUDA_SUCCESS) {
		snprintf(why, why_len, "no such device memory (CUresult %d)", rc);
		return rc;
	}
	for (size_t pos = 0; rc == CUDA_SUCCESS && pos < bytes; pos += CHUNK)
		rc = compare_chunk(&s, pos, bytes - pos < CHUNK ? bytes - pos : CHUNK, seed, why,
				   why_len);
	end(&s);
	return rc;
}
