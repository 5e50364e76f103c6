/* The program's contexts, and waiting for their work with a bound. A park
 * must know that no GPU work of the program still uses the memory it
 * releases: work of any context may (backed memory is mapped for every
 * device that can reach it, and copies between contexts need no peer
 * access), so it waits for every context the process has: the devices'
 * primary contexts that are active, and those the program created
 * (cuCtxCreate, green contexts), tracked here. The waits run on threads of
 * their own: GPU work may wait on a host thread of the program that the
 * closed gate holds, and then never ends while the program is held; the
 * park gives up at its deadline, and the waits end by themselves once the
 * program runs again. */
#include <stdlib.h>

#include "park.h"

#define MAX_DEVS 64

struct ent {
	CUcontext ctx; /* NULL for a green context */
	CUgreenCtx green;
	unsigned busy; /* waits under way on it */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct ent *ents;
static size_t nents, capents;

/* A child of fork() made no context, and no wait of its parent's goes on
 * in it (table.c). */
static void child_forgets(void)
{
	mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	cv = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
	ents = NULL;
	nents = capents = 0;
}

__attribute__((constructor)) static void ctx_atfork(void)
{
	pthread_atfork(NULL, NULL, child_forgets);
}

static void note(CUcontext ctx, CUgreenCtx green)
{
	pthread_mutex_lock(&mu);
	if (park_grow((void **)&ents, nents, &capents, sizeof(*ents)))
		ents[nents++] = (struct ent){ ctx, green, 0 };
	else
		park_mark_unparkable("it lost track of a context it created (out of memory)");
	pthread_mutex_unlock(&mu);
}

/* Forgets ctx (or green), once no wait uses it: its destruction would
 * pull it from under the wait. */
static void forget(CUcontext ctx, CUgreenCtx green)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nents;) {
		if ((ctx && ents[i].ctx == ctx) || (green && ents[i].green == green)) {
			while (ents[i].busy)
				pthread_cond_wait(&cv, &mu);
			ents[i] = ents[--nents];
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&mu);
}

/* After a context was made: noted, and the gate left. */
static CUresult created(CUresult rc, CUcontext *ctx)
{
	if (rc == CU_OK && ctx && *ctx)
		note(*ctx, NULL);
	park_gate_leave();
	return rc;
}

CUresult park_ctx_create(CUcontext *ctx, unsigned flags, CUdevice dev)
{
	const struct park_real *r = park_real();
	cu_ctx_create_fn create = r ? (r->ctx_create ? r->ctx_create : r->ctx_create_v1) : NULL;
	if (create == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	return created(create(ctx, flags, dev), ctx);
}

CUresult park_ctx_create_v3(CUcontext *ctx, void *params, int n, unsigned flags, CUdevice dev)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->ctx_create_v3 == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	return created(r->ctx_create_v3(ctx, params, n, flags, dev), ctx);
}

CUresult park_ctx_create_v4(CUcontext *ctx, void *params, unsigned flags, CUdevice dev)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->ctx_create_v4 == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	return created(r->ctx_create_v4(ctx, params, flags, dev), ctx);
}

CUresult park_ctx_destroy(CUcontext ctx)
{
	const struct park_real *r = park_real();
	cu_ctx_destroy_fn destroy = r ? (r->ctx_destroy ? r->ctx_destroy : r->ctx_destroy_v1) : NULL;
	if (destroy == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	forget(ctx, NULL);
	CUresult rc = destroy(ctx);
	if (rc != CU_OK && ctx)
		note(ctx, NULL); /* it is still there */
	park_gate_leave();
	return rc;
}

CUresult park_green_create(CUgreenCtx *g, void *desc, CUdevice dev, unsigned flags)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->green_create == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	CUresult rc = r->green_create(g, desc, dev, flags);
	if (rc == CU_OK && g && *g)
		note(NULL, *g);
	park_gate_leave();
	return rc;
}

CUresult park_green_destroy(CUgreenCtx g)
{
	const struct park_real *r = park_real();
	if (r == NULL || r->green_destroy == NULL)
		return CU_ERR_NOT_INITIALIZED;
	park_gate_enter();
	forget(NULL, g);
	CUresult rc = r->green_destroy(g);
	if (rc != CU_OK && g)
		note(NULL, g);
	park_gate_leave();
	return rc;
}

CUresult park_sync_ctx(const struct park_real *r, CUcontext ctx)
{
	CUcontext prev = NULL;
	CUresult rc = r->ctx_get(&prev);
	if (rc == CU_OK && prev != ctx)
		rc = r->ctx_set(ctx);
	if (rc != CU_OK)
		return rc;
	rc = r->ctx_sync();
	if (prev != ctx) {
		CUresult back = r->ctx_set(prev);
		rc = rc != CU_OK ? rc : back;
	}
	return rc;
}

/* One round of waits: the park waits for all of them to end, or for its
 * deadline; the last one to let go of it frees it. */
struct round {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned pending, refs;
	CUresult rc;
};

struct wait {
	struct round *round;
	const struct park_real *r;
	CUcontext ctx;
	CUgreenCtx green; /* made a context first */
	CUdevice primary; /* -1, or the device whose primary context it retained */
	size_t ent; /* busy mark to clear, or SIZE_MAX */
};

static void let_go(struct round *rd)
{
	bool last = --rd->refs == 0;
	pthread_mutex_unlock(&rd->mu);
	if (last) {
		pthread_mutex_destroy(&rd->mu);
		pthread_cond_destroy(&rd->cv);
		free(rd);
	}
}

static void unbusy(const struct wait *w)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nents; i++)
		if ((w->ctx && ents[i].ctx == w->ctx) || (w->green && ents[i].green == w->green))
			ents[i].busy--;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void *waiter(void *arg)
{
	struct wait *w = arg;
	park_gate_exempt();
	CUresult rc = CU_OK;
	if (w->green && w->r->ctx_from_green)
		rc = w->r->ctx_from_green(&w->ctx, w->green);
	if (rc == CU_OK && w->ctx)
		rc = park_sync_ctx(w->r, w->ctx);
	if (w->primary >= 0)
		w->r->primary_release(w->primary);
	if (w->ent != SIZE_MAX)
		unbusy(w);
	struct round *rd = w->round;
	pthread_mutex_lock(&rd->mu);
	if (rc != CU_OK && rd->rc == CU_OK)
		rd->rc = rc;
	rd->pending--;
	pthread_cond_broadcast(&rd->cv);
	let_go(rd);
	free(w);
	return NULL;
}

static int start_wait(struct round *rd, const struct wait *tmpl)
{
	struct wait *w = malloc(sizeof(*w));
	if (w == NULL)
		return -1;
	*w = *tmpl;
	w->round = rd;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&rd->mu);
	rd->pending++;
	rd->refs++;
	pthread_t t;
	int err = pthread_create(&t, &at, waiter, w);
	if (err != 0) {
		rd->pending--;
		rd->refs--;
	}
	pthread_mutex_unlock(&rd->mu);
	pthread_attr_destroy(&at);
	if (err != 0)
		free(w);
	return err ? -1 : 0;
}

static bool listed(CUcontext *seen, size_t n, CUcontext c)
{
	for (size_t i = 0; i < n; i++)
		if (seen[i] == c)
			return true;
	return false;
}

/* Starts a wait for every context; -1 when one could not start. */
static int start_all(const struct park_real *r, struct round *rd)
{
	CUcontext seen[MAX_DEVS + 64];
	size_t nseen = 0;
	int bad = 0, count = 0;
	if (r->device_count(&count) != CU_OK)
		count = 0;
	for (int d = 0; d < count && d < MAX_DEVS && r->primary_state && r->primary_retain; d++) {
		unsigned flags = 0;
		int active = 0;
		CUcontext c = NULL;
		if (r->primary_state(d, &flags, &active) != CU_OK || !active || r->primary_retain(&c, d) != CU_OK)
			continue;
		if (nseen < sizeof(seen) / sizeof(seen[0]))
			seen[nseen++] = c;
		bad |= start_wait(rd, &(struct wait){ .r = r, .ctx = c, .primary = d, .ent = SIZE_MAX });
	}
	for (size_t i = 0; i < park_tab.n; i++) {
		CUcontext c = park_tab.a[i].ctx;
		if (listed(seen, nseen, c) || nseen == sizeof(seen) / sizeof(seen[0]))
			continue;
		seen[nseen++] = c;
		bad |= start_wait(rd, &(struct wait){ .r = r, .ctx = c, .primary = -1, .ent = SIZE_MAX });
	}
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nents; i++) {
		if (ents[i].ctx && listed(seen, nseen, ents[i].ctx))
			continue;
		ents[i].busy++;
		struct wait w = { .r = r, .ctx = ents[i].ctx, .green = ents[i].green, .primary = -1, .ent = i };
		if (start_wait(rd, &w) != 0) {
			ents[i].busy--;
			bad = -1;
		}
	}
	pthread_mutex_unlock(&mu);
	return bad;
}

CUresult park_sync_all(const struct park_real *r, double until)
{
	struct round *rd = calloc(1, sizeof(*rd));
	if (rd == NULL)
		return CU_ERR_OUT_OF_MEMORY;
	pthread_mutex_init(&rd->mu, NULL);
	pthread_cond_init(&rd->cv, NULL);
	rd->refs = 1;
	CUresult rc = start_all(r, rd) == 0 ? CU_OK : CU_ERR_OUT_OF_MEMORY;
	pthread_mutex_lock(&rd->mu);
	while (rc == CU_OK && rd->pending > 0) {
		double left = until - park_now();
		if (left <= 0) {
			rc = CU_ERR_NOT_READY;
			break;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		double ns = ts.tv_nsec + (left < 0.05 ? left : 0.05) * 1e9;
		ts.tv_sec += (time_t)(ns / 1e9);
		ts.tv_nsec = (long)ns % 1000000000L;
		pthread_cond_timedwait(&rd->cv, &rd->mu, &ts);
	}
	if (rc == CU_OK)
		rc = rd->rc;
	let_go(rd);
	return rc;
}
