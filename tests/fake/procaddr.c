#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_vmm_api.h"

/* cuGetProcAddress as the real driver answers it: from the driver's own
 * table, never through the process's symbol lookup (where an interposer
 * stands in front of the driver's names and of dlsym itself). A base name
 * without its version suffix ("cuMemAlloc") gives the version of the
 * function that the caller's CUDA version knows: the newest suffix
 * introduced at or before it (versions below); a function introduced after
 * that version answers CUDA_ERROR_NOT_FOUND with
 * CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT. The table is this library's
 * own dynamic symbol table, read in place. The per-thread stream variants
 * are the same functions here (there is one stream per device). */

struct versioned {
	const char *base;
	int since; /* the function itself */
	int v2, v3; /* its _v2 and _v3 (0: none) */
};

static const struct versioned versions[] = {
	{ "cuMemAlloc", 2000, 3020, 0 },
	{ "cuMemFree", 2000, 3020, 0 },
	{ "cuMemGetAddressRange", 2000, 3020, 0 },
	{ "cuMemcpyHtoD", 2000, 3020, 0 },
	{ "cuMemcpyDtoH", 2000, 3020, 0 },
	{ "cuMemcpyDtoD", 2000, 3020, 0 },
	{ "cuMemsetD8", 2000, 3020, 0 },
	{ "cuMemsetD32", 2000, 3020, 0 },
	{ "cuMemHostRegister", 4000, 6050, 0 },
	{ "cuEventDestroy", 2000, 4000, 0 },
	{ "cuDevicePrimaryCtxRelease", 7000, 11000, 0 },
	{ "cuIpcOpenMemHandle", 4010, 11000, 0 },
	{ "cuDeviceGetUuid", 9020, 11040, 0 },
	{ "cuStreamWaitValue32", 8000, 11070, 0 },
	{ "cuGetProcAddress", 11030, 12000, 0 },
	{ "cuMemCreate", 10020, 0, 0 },
	{ "cuMemMap", 10020, 0, 0 },
	{ "cuMemUnmap", 10020, 0, 0 },
	{ "cuMemRelease", 10020, 0, 0 },
	{ "cuMemAddressReserve", 10020, 0, 0 },
	{ "cuMemAddressFree", 10020, 0, 0 },
	{ "cuMemSetAccess", 10020, 0, 0 },
	{ "cuMemExportToShareableHandle", 10020, 0, 0 },
	{ "cuMemImportFromShareableHandle", 10020, 0, 0 },
	{ "cuMemGetAllocationGranularity", 10020, 0, 0 },
	{ "cuMemRetainAllocationHandle", 11000, 0, 0 },
	{ "cuMemPoolCreate", 11020, 0, 0 },
	{ "cuMemPoolDestroy", 11020, 0, 0 },
	{ "cuMemPoolExportToShareableHandle", 11020, 0, 0 },
	{ "cuMemPoolImportFromShareableHandle", 11020, 0, 0 },
	/* the double has cuCtxCreate_v2 only (the real driver answers _v4 from
	 * 12050): call it by name */
	{ "cuCtxCreate", 2000, 3020, 0 },
	{ "cuCtxDestroy", 2000, 4000, 0 },
};

static pthread_once_t self_once = PTHREAD_ONCE_INIT;
static const ElfW(Sym) * symtab;
static const char *strtab;
static const uint32_t *gnu_hash;
static ElfW(Addr) self_base;

/* A function of this library's own: the address of an exported one may be
 * an interposer's (the global scope binds it first). */
static void anchor(void) {}

static ElfW(Addr) at(ElfW(Addr) v)
{
	return v < self_base ? self_base + v : v;
}

static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		ElfW(Addr) lo = info->dlpi_addr + p->p_vaddr;
		if (p->p_type != PT_LOAD || (ElfW(Addr))anchor < lo || (ElfW(Addr))anchor >= lo + p->p_memsz)
			continue;
		self_base = info->dlpi_addr;
		for (int k = 0; k < info->dlpi_phnum; k++) {
			if (info->dlpi_phdr[k].p_type != PT_DYNAMIC)
				continue;
			for (const ElfW(Dyn) *d = (const void *)(info->dlpi_addr + info->dlpi_phdr[k].p_vaddr);
			     d->d_tag != DT_NULL; d++) {
				if (d->d_tag == DT_SYMTAB)
					symtab = (const void *)at(d->d_un.d_ptr);
				else if (d->d_tag == DT_STRTAB)
					strtab = (const void *)at(d->d_un.d_ptr);
				else if (d->d_tag == DT_GNU_HASH)
					gnu_hash = (const void *)at(d->d_un.d_ptr);
			}
		}
		return 1;
	}
	return 0;
}

static void open_self(void)
{
	dl_iterate_phdr(find_self, NULL);
}

/* The exported function name of this library, by its GNU hash table. */
static void *own(const char *name)
{
	pthread_once(&self_once, open_self);
	if (symtab == NULL || strtab == NULL || gnu_hash == NULL)
		return NULL;
	uint32_t nbuckets = gnu_hash[0], symoffset = gnu_hash[1], bloom_size = gnu_hash[2];
	const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)&gnu_hash[4] + bloom_size);
	const uint32_t *chain = buckets + nbuckets;
	uint32_t h = 5381;
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		h = h * 33 + *c;
	for (uint32_t i = nbuckets ? buckets[h % nbuckets] : 0; i >= symoffset && i != 0; i++) {
		const ElfW(Sym) *s = &symtab[i];
		uint32_t h2 = chain[i - symoffset];
		if ((h | 1) == (h2 | 1) && s->st_shndx != SHN_UNDEF && strcmp(strtab + s->st_name, name) == 0)
			return (void *)(self_base + s->st_value);
		if (h2 & 1)
			break;
	}
	return NULL;
}

static const struct versioned *versioned(const char *base)
{
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++)
		if (strcmp(versions[i].base, base) == 0)
			return &versions[i];
	return NULL;
}

/* *too_new: the function came after cuda_version */
static void *lookup(const char *symbol, int cuda_version, int *too_new)
{
	char name[256];
	*too_new = 0;
	if (strncmp(symbol, "cu", 2) != 0 || strlen(symbol) > 200)
		return NULL;
	const struct versioned *v = versioned(symbol);
	if (v == NULL) {
		static const char *const suffixes[] = { "_v3", "_v2", "" };
		for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
			snprintf(name, sizeof(name), "%s%s", symbol, suffixes[i]);
			void *f = own(name);
			if (f != NULL)
				return f;
		}
		return NULL;
	}
	if (cuda_version < v->since) {
		*too_new = 1;
		return NULL;
	}
	const char *suffix = v->v3 && cuda_version >= v->v3 ? "_v3" : v->v2 && cuda_version >= v->v2 ? "_v2" : "";
	snprintf(name, sizeof(name), "%s%s", symbol, suffix);
	return own(name);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *status)
{
	if (symbol == NULL || pfn == NULL || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
		return CUDA_ERROR_INVALID_VALUE;
	int too_new;
	*pfn = lookup(symbol, cuda_version, &too_new);
	if (status != NULL)
		*status = *pfn  ? CU_GET_PROC_ADDRESS_SUCCESS :
			too_new ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT :
				  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags)
{
	return cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, NULL);
}
