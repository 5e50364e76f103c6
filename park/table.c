/* What the interposer knows of the program: the allocations it backs, and
 * what the program did that parking cannot carry. Every other file of the
 * interposer stands on this one. */
#include <stdlib.h>
#include <time.h>

#include "park.h"

struct park_table park_tab = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* A child of fork() owns none of its parent's allocations: they live in the
 * parent's contexts, which the child cannot use, and the parent's park may
 * hold the table's lock, which the child would wait for for ever. Its calls
 * on those addresses reach the driver as they would without the
 * interposer; what it allocates itself is its own. Each file of the
 * interposer forgets its parent's state alike (its lock first). */
static void child_forgets(void)
{
	park_tab = (struct park_table){ .mu = PTHREAD_MUTEX_INITIALIZER };
}

__attribute__((constructor)) static void table_atfork(void)
{
	pthread_atfork(NULL, NULL, child_forgets);
}

void park_mark_unparkable(const char *why)
{
	pthread_mutex_lock(&park_tab.mu);
	if (park_tab.unparkable == NULL)
		park_tab.unparkable = why;
	pthread_mutex_unlock(&park_tab.mu);
}

bool park_grow(void **arr, size_t n, size_t *cap, size_t elem)
{
	if (n < *cap)
		return true;
	size_t ncap = *cap ? *cap * 2 : 16;
	void *na = realloc(*arr, ncap * elem);
	if (na == NULL)
		return false;
	*arr = na;
	*cap = ncap;
	return true;
}

struct park_alloc *park_find(CUdeviceptr dptr)
{
	for (size_t i = 0; i < park_tab.n; i++) {
		struct park_alloc *a = &park_tab.a[i];
		if (dptr >= a->va && dptr - a->va < a->size)
			return a;
	}
	return NULL;
}

double park_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}
