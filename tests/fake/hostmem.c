#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cuda_vmm_api.h"
#include "internal.h"

/* Pinned host memory: host memory, only recorded, so that the calls answer
 * as the real driver's do (a range registered twice, an unknown pointer). */

struct pinned {
	unsigned char *p;
	size_t bytes;
	int allocated; /* by cuMemHostAlloc, else registered */
};

static pthread_mutex_t pin_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pinned *pins;
static int npins, pin_cap;

/* Called with pin_mu held. */
static int overlaps(const unsigned char *p, size_t bytes)
{
	for (int i = 0; i < npins; i++)
		if (pins[i].p < p + bytes && p < pins[i].p + pins[i].bytes)
			return 1;
	return 0;
}

/* Called with pin_mu held. */
static CUresult add(void *p, size_t bytes, int allocated)
{
	if (npins == pin_cap) {
		int c = pin_cap ? pin_cap * 2 : 16;
		struct pinned *bigger = realloc(pins, sizeof(*pins) * (size_t)c);
		if (bigger == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		pins = bigger;
		pin_cap = c;
	}
	pins[npins++] = (struct pinned){ p, bytes, allocated };
	return CUDA_SUCCESS;
}

/* Called with pin_mu held; -1 when p starts no record of that kind. */
static int find(const void *p, int allocated)
{
	for (int i = 0; i < npins; i++)
		if (pins[i].p == p && pins[i].allocated == allocated)
			return i;
	return -1;
}

int fc_host_registered(const void *p, size_t bytes)
{
	const unsigned char *c = p;
	pthread_mutex_lock(&pin_mu);
	int in = 0;
	for (int i = 0; i < npins && !in; i++)
		in = c >= pins[i].p && bytes <= pins[i].bytes && (size_t)(c - pins[i].p) <= pins[i].bytes - bytes;
	pthread_mutex_unlock(&pin_mu);
	return in;
}

static CUresult enter(void)
{
	CUresult rc = fc_ctx_check(NULL);
	return rc == CUDA_SUCCESS ? fc_gate_enter() : rc;
}

CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
	if (p == NULL || bytes == 0 || (uintptr_t)p + bytes < (uintptr_t)p)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&pin_mu);
	rc = overlaps(p, bytes) ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : add(p, bytes, 0);
	pthread_mutex_unlock(&pin_mu);
	fc_gate_leave();
	return rc;
}

CUresult cuMemHostUnregister(void *p)
{
	CUresult rc = enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&pin_mu);
	int i = find(p, 0);
	if (i < 0)
		rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	else
		pins[i] = pins[--npins];
	pthread_mutex_unlock(&pin_mu);
	fc_gate_leave();
	return rc;
}

/* Page-aligned, as the real driver's. */
CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
	if (pp == NULL || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		pthread_mutex_lock(&pin_mu);
		rc = add(p, bytes, 1);
		pthread_mutex_unlock(&pin_mu);
		if (rc != CUDA_SUCCESS)
			munmap(p, bytes);
		else
			*pp = p;
	}
	fc_gate_leave();
	return rc;
}

CUresult cuMemFreeHost(void *p)
{
	CUresult rc = enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&pin_mu);
	int i = find(p, 1);
	struct pinned gone = { 0 };
	if (i < 0) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else {
		gone = pins[i];
		pins[i] = pins[--npins];
	}
	pthread_mutex_unlock(&pin_mu);
	if (gone.p != NULL)
		munmap(gone.p, gone.bytes);
	fc_gate_leave();
	return rc;
}
