/* cs_devmap_parse and cs_devmap_covers over a fixed list of three GPUs,
 * against a plain reading of --device-map and of CUDA_VISIBLE_DEVICES.
 * Input: the --device-map text, a NUL byte, then CUDA_VISIBLE_DEVICES
 * (cut to the 127 bytes a target keeps of it). */
#include "fuzz.h"
#include "devmap.h"

#include <ctype.h>
#include <stdbool.h>
#include <strings.h>

static const cs_nvml_gpu gpus[] = {
	{ .index = 0, .uuid = "GPU-00000000-0000-4000-8000-000000000000" },
	{ .index = 1, .uuid = "GPU-1a2b3c4d-0000-4000-8000-000000000001" },
	{ .index = 2, .uuid = "GPU-1a2bffff-0000-4000-8000-000000000002" },
};
#define NGPUS (sizeof(gpus) / sizeof(gpus[0]))

static int hexval(int c)
{
	c = tolower(c);
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One side of a pair: a full UUID (any case) or an index in the list. */
static bool ref_side(const char *s, size_t n, uint8_t out[16])
{
	if (n == 40 && strncmp(s, "GPU-", 4) == 0) {
		size_t b = 0;
		for (size_t i = 4; i < 40;) {
			if (i == 12 || i == 17 || i == 22 || i == 27) {
				if (s[i++] != '-')
					return false;
				continue;
			}
			int hi = hexval((unsigned char)s[i]), lo = hexval((unsigned char)s[i + 1]);
			if (hi < 0 || lo < 0)
				return false;
			out[b++] = (uint8_t)(hi << 4 | lo);
			i += 2;
		}
		return b == 16;
	}
	size_t i = n > 1 && s[0] == '-' ? 1 : 0; /* "-0" is a strict decimal zero */
	if (i == n)
		return false;
	unsigned long long v = 0;
	for (; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || v > 1000)
			return false;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (s[0] == '-' && v != 0)
		return false;
	for (size_t g = 0; g < NGPUS; g++)
		if (gpus[g].index == v)
			return ref_side(gpus[g].uuid, strlen(gpus[g].uuid), out);
	return false;
}

/* Pairs in order; empty items are skipped; -1 for a malformed map. */
static int ref_parse(const char *spec, cs_gpu_pair *v, size_t cap)
{
	size_t n = 0, len = strlen(spec);
	for (size_t start = 0; start <= len;) {
		const char *comma = memchr(spec + start, ',', len - start);
		size_t end = comma ? (size_t)(comma - spec) : len;
		const char *item = spec + start;
		size_t il = end - start;
		start = end + 1;
		if (il == 0)
			continue;
		const char *eq = memchr(item, '=', il);
		if (!eq || memchr(eq + 1, '=', il - (size_t)(eq + 1 - item)) || n == cap)
			return -1;
		if (!ref_side(item, (size_t)(eq - item), v[n].old_uuid) ||
		    !ref_side(eq + 1, il - (size_t)(eq + 1 - item), v[n].new_uuid))
			return -1;
		for (size_t k = 0; k < n; k++)
			if (memcmp(v[k].old_uuid, v[n].old_uuid, 16) == 0)
				return -1;
		n++;
	}
	return n ? (int)n : -1;
}

/* Which GPUs a process with this CUDA_VISIBLE_DEVICES sees. */
static void ref_visible(const char *cvd, bool seen[NGPUS])
{
	memset(seen, 0, NGPUS * sizeof(bool));
	if (!*cvd) {
		for (size_t g = 0; g < NGPUS; g++)
			seen[g] = true;
		return;
	}
	size_t len = strlen(cvd);
	for (size_t start = 0; start < len;) {
		const char *comma = memchr(cvd + start, ',', len - start);
		size_t end = comma ? (size_t)(comma - cvd) : len;
		const char *e = cvd + start;
		size_t el = end - start;
		start = end + 1;
		if (el == 0)
			continue;
		while (el && isspace((unsigned char)*e))
			e++, el--;
		int hit = -1, matches = 0;
		size_t d = 0;
		while (d < el && isdigit((unsigned char)e[d]))
			d++;
		if (el && d == el) {
			unsigned long long v = 0;
			for (size_t i = 0; i < el && v < 1000; i++)
				v = v * 10 + (unsigned)(e[i] - '0');
			hit = v < NGPUS ? (int)v : -1;
		} else if (el >= 4 && strncasecmp(e, "GPU-", 4) == 0) {
			for (size_t g = 0; g < NGPUS; g++)
				if (el <= strlen(gpus[g].uuid) && strncasecmp(gpus[g].uuid, e, el) == 0)
					hit = (int)g, matches++;
			if (matches != 1)
				hit = -1;
		}
		if (hit < 0 || seen[hit])
			return;
		seen[hit] = true;
	}
}

static bool ref_mapped(const cs_gpu_pair *v, size_t n, size_t g)
{
	uint8_t u[16];
	ref_side(gpus[g].uuid, strlen(gpus[g].uuid), u);
	for (size_t i = 0; i < n; i++)
		if (memcmp(v[i].old_uuid, u, 16) == 0)
			return true;
	return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t sn = nul ? (size_t)(nul - data) : size;
	char *spec = fuzz_copy(data, sn, 1);
	char visible[128] = "";
	if (nul) {
		size_t vn = strnlen((const char *)nul + 1, size - sn - 1);
		vn = vn < sizeof(visible) ? vn : sizeof(visible) - 1;
		memcpy(visible, nul + 1, vn);
		visible[vn] = '\0';
	}
	size_t cap = sn / 2 + 1; /* every pair takes at least two bytes */
	cs_gpu_pair *want = calloc(cap, sizeof(*want));
	if (!want)
		abort();
	int wn = ref_parse(spec, want, cap);
	cs_gpu_pair *pairs = NULL;
	unsigned np = 99;
	cs_error err = { 0 };
	int r = cs_devmap_parse(spec, gpus, NGPUS, &pairs, &np, &err);
	if ((r == 0) != (wn > 0))
		fprintf(stderr, "spec '%s': got %d, reference %d\n", spec, r, wn);
	FUZZ_CHECK((r == 0) == (wn > 0));
	if (r < 0) {
		FUZZ_CHECK(pairs == NULL && np == 0 && err.status == CS_EUSAGE && err.message[0]);
		free(want);
		free(spec);
		return 0;
	}
	FUZZ_CHECK(np == (unsigned)wn);
	FUZZ_CHECK(memcmp(pairs, want, np * sizeof(*pairs)) == 0);

	cs_target t = { .pid = 42, .comm = "app" };
	bool seen[NGPUS];
	ref_visible(visible, seen);
	bool covered = true;
	for (size_t g = 0; g < NGPUS; g++)
		covered = covered && (!seen[g] || ref_mapped(pairs, np, g));
	cs_error_clear(&err);
	int c = cs_devmap_covers(pairs, np, visible, gpus, NGPUS, &t, &err);
	if ((c == 0) != covered)
		fprintf(stderr, "spec '%s' visible '%s': covers %d, reference %d\n", spec, visible, c, covered);
	FUZZ_CHECK(c == 0 || c < 0);
	FUZZ_CHECK((c == 0) == covered);
	FUZZ_CHECK(c == 0 || strstr(err.message, "leaves out GPU"));
	/* Without a GPU list nothing can be decided. */
	FUZZ_CHECK(cs_devmap_covers(pairs, np, visible, gpus, 0, &t, &err) == 1);
	free(pairs);
	free(want);
	free(spec);
	return 0;
}
