#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_vmm_api.h"

/* cuGetProcAddress as the CUDA runtime uses it: a base name without its
 * version suffix ("cuMemAlloc") gives the newest version the driver has
 * ("cuMemAlloc_v2"). The names are looked up in this library itself, never
 * in the process's global scope, where an interposer may stand in front of
 * it: the interposer wraps cuGetProcAddress for that. The per-thread stream
 * variants are the same functions here (there is one stream). */

static pthread_once_t self_once = PTHREAD_ONCE_INIT;
static void *self;

/* A function of this library's own: the address of an exported one may be
 * an interposer's (the global scope binds it first). */
static void anchor(void)
{
}

static void open_self(void)
{
	Dl_info info;
	if (dladdr((void *)anchor, &info) != 0 && info.dli_fname != NULL)
		self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
}

static void *lookup(const char *symbol)
{
	static const char *const suffixes[] = { "_v3", "_v2", "" };
	char name[256];
	pthread_once(&self_once, open_self);
	if (self == NULL || strncmp(symbol, "cu", 2) != 0)
		return NULL;
	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		if (snprintf(name, sizeof(name), "%s%s", symbol, suffixes[i]) >= (int)sizeof(name))
			return NULL;
		void *f = dlsym(self, name);
		if (f != NULL)
			return f;
	}
	return NULL;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *status)
{
	if (symbol == NULL || pfn == NULL || flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = lookup(symbol);
	if (status != NULL)
		*status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags)
{
	return cuGetProcAddress_v2(symbol, pfn, cuda_version, flags, NULL);
}
