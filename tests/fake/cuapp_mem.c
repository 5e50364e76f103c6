#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuapp.h"

/* The allocations and the pattern they hold. */

#define CHUNK (1u << 20)

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint64_t cuapp_word(uint64_t seed, unsigned int index, size_t k)
{
	return mix(seed ^ mix(((uint64_t)index << 48) ^ (uint64_t)k));
}

static void pattern(const struct cuapp_alloc *a, size_t off, uint64_t *buf, size_t words)
{
	for (size_t i = 0; i < words; i++)
		buf[i] = cuapp_word(a->seed, a->index, off / 8 + i);
}

int cuapp_fill(struct cuapp *app, const struct cuapp_alloc *a)
{
	uint64_t *buf = malloc(CHUNK);
	int rc = buf == NULL ? -1 : 0;
	for (size_t off = 0; rc == 0 && off < a->bytes; off += CHUNK) {
		size_t n = a->bytes - off < CHUNK ? a->bytes - off : CHUNK;
		pattern(a, off, buf, (n + 7) / 8);
		rc = cuapp_failed(&app->cu, app->cu.htod(a->ptr + off, buf, n), "cuMemcpyHtoD");
	}
	free(buf);
	return rc;
}

int cuapp_check(struct cuapp *app, const struct cuapp_alloc *a, size_t off, size_t bytes, char *why, size_t len)
{
	uint64_t *got = malloc(CHUNK), *want = malloc(CHUNK);
	int rc = got == NULL || want == NULL ? -1 : 0;
	if (rc != 0)
		snprintf(why, len, "out of host memory");
	for (size_t pos = off; rc == 0 && pos < off + bytes; pos += CHUNK) {
		size_t n = off + bytes - pos < CHUNK ? off + bytes - pos : CHUNK;
		CUresult r = app->cu.dtoh(got, a->ptr + pos, n);
		if (r != CU_OK) {
			snprintf(why, len, "cuMemcpyDtoH of 0x%llx+%zu -> %d", a->ptr, pos, r);
			rc = -1;
			break;
		}
		pattern(a, pos, want, n / 8);
		for (size_t i = 0; i < n / 8; i++) {
			if (got[i] == want[i])
				continue;
			snprintf(why, len, "allocation %d (0x%llx) byte %zu: 0x%016" PRIx64 " expected 0x%016" PRIx64,
				 (int)(a - app->a), a->ptr, pos + 8 * i, got[i], want[i]);
			rc = -1;
			break;
		}
	}
	free(got);
	free(want);
	return rc;
}

/* Reserve, create, map and give the device read-write access: what a
 * program that manages its own VMM memory does. */
static int vmm_alloc(struct cuapp *app, size_t bytes, CUdeviceptr *ptr, size_t *size)
{
	struct cu *cu = &app->cu;
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
	if (app->vmm_share)
		prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CUmemAccessDesc desc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h;
	size_t gran;
	if (cuapp_failed(cu, cu->granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
			 "cuMemGetAllocationGranularity"))
		return -1;
	*size = (bytes + gran - 1) / gran * gran;
	int rc = cuapp_failed(cu, cu->reserve(ptr, *size, 0, 0, 0), "cuMemAddressReserve") ||
		cuapp_failed(cu, cu->create(&h, *size, &prop, 0), "cuMemCreate") ||
		cuapp_failed(cu, cu->map(*ptr, *size, 0, h, 0), "cuMemMap") ||
		cuapp_failed(cu, cu->access(*ptr, *size, &desc, 1), "cuMemSetAccess");
	if (rc == 0 && app->vmm_first == 0)
		app->vmm_first = h;
	return rc;
}

static int add(struct cuapp *app, size_t bytes, enum cuapp_kind kind)
{
	struct cuapp_alloc *a = &app->a[app->n];
	a->kind = kind;
	a->seed = app->seed;
	a->index = (unsigned int)app->n;
	if (kind == KIND_VMM ? vmm_alloc(app, bytes, &a->ptr, &a->bytes) :
			       cuapp_failed(&app->cu, app->cu.alloc(&a->ptr, bytes), "cuMemAlloc"))
		return -1;
	if (kind == KIND_LEGACY)
		a->bytes = bytes;
	app->n++;
	return cuapp_fill(app, a);
}

int cuapp_allocate(struct cuapp *app)
{
	for (int i = 0; i < app->nalloc_opts; i++)
		for (unsigned int k = 0; k < app->allocs_each; k++)
			if (add(app, app->alloc_bytes[i], KIND_LEGACY) != 0)
				return -1;
	for (int i = 0; i < app->nvmm_opts; i++)
		if (add(app, app->vmm_bytes[i], KIND_VMM) != 0)
			return -1;
	if (app->small_bytes > 0 && add(app, app->small_bytes, KIND_LEGACY) != 0)
		return -1;
	return 0;
}
