/* The restore's part of a plan: what each process's restore needs on the
 * GPUs it restores onto, against their free memory, before the driver is
 * asked (a restore that runs out of GPU memory destroys the process's
 * state); and the wait for room that --wait-memory asks for. */
#include "gpunode.h"
#include "gpuroom.h"
#include "plan.h"
#include "park.h"
#include "session_int.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024 * 1024)

static cs_target *target_of(const cs_session *s, pid_t pid)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->t[i].pid == pid)
			return &s->t[i];
	return NULL;
}

static unsigned long long need_sum(const cs_target *t)
{
	unsigned long long sum = 0;
	for (unsigned k = 0; k < t->nneed; k++)
		sum += t->need[k].bytes;
	return sum;
}

static void note_gpus(const cs_target *t, const cs_nvml_gpu *gpus, size_t ngpus, cs_plan_entry *e)
{
	e->ngpu = 0;
	for (unsigned k = 0; k < t->nneed; k++) {
		const cs_nvml_gpu *g = cs_gpu_by_uuid(gpus, ngpus, t->need[k].uuid);
		cs_plan_gpu *x = &e->gpu[e->ngpu++];
		*x = (cs_plan_gpu){ .index = g ? (int)g->index : -1,
				    .need = t->need[k].bytes,
				    .free = g ? g->memory_free : 0,
				    .free_known = g && g->memory_known };
		snprintf(x->uuid, sizeof(x->uuid), "%s", t->need[k].uuid);
	}
}

static void add_room_reason(const cs_session *s, const cs_target *t, const cs_gpu_room *r, cs_plan_entry *e)
{
	e->fit.gpu = need_sum(t);
	e->fit.known = r->verdict == CS_GPU_ROOM_UNKNOWN ? CS_GPU_UNKNOWN :
		t->need_bound                            ? CS_GPU_AT_MOST :
							   CS_GPU_EXACT;
	bool ignore = s->ignore_gpu_memory;
	const char *allowed = ignore ? " (allowed by --ignore-gpu-memory: the driver may destroy its state)" : "";
	switch (r->verdict) {
	case CS_GPU_SHORT:
		cs_plan_set_fix(cs_plan_add_reason(e, "gpu-memory", !ignore, "%s%s", r->why, allowed), r->fix);
		break;
	case CS_GPU_ABSENT:
		cs_plan_set_fix(cs_plan_add_reason(e, "gpu-absent", !ignore, "%s%s", r->why, allowed), r->fix);
		break;
	case CS_GPU_ROOM_UNKNOWN:
		/* Unknown is no room: the driver destroys a state that does not fit. */
		cs_plan_set_fix(cs_plan_add_reason(e, "gpu-memory-unknown", !ignore,
						   "whether its restore fits in GPU memory cannot be known: %s%s",
						   r->why, allowed),
				r->fix);
		break;
	default: break;
	}
}

/* The bookings of the restores in flight on the GPUs t restores onto
 * (said, not blocking: they end by themselves, and the restore waits for
 * them), and a book that is not the node's (blocking, as the restore is
 * refused). */
static void add_book_reasons(const cs_session *s, const cs_target *t, const cs_nvml_gpu *gpus, size_t ngpus,
			     const char (*booked)[200], const char *notnode, cs_plan_entry *e)
{
	if (t->nneed && notnode[0])
		cs_plan_set_fix(cs_plan_add_reason(e, "gpu-book", !s->ignore_gpu_memory,
						   "its GPU memory cannot be booked against the node's other restores: %s",
						   notnode),
				"Run it in the node's mount namespace, or mount the node's " CS_GPUBOOK_NODE
				" at the same place, or accept the risk with --ignore-gpu-memory.");
	for (unsigned k = 0; k < t->nneed; k++) {
		const cs_nvml_gpu *g = cs_gpu_by_uuid(gpus, ngpus, t->need[k].uuid);
		if (g && booked[g - gpus][0])
			cs_plan_add_reason(e, "gpu-booked", false, "%s, counted as taken", booked[g - gpus]);
	}
}

void cs_plan_restore_room(cs_session *s, cs_plan_entry *e, size_t n)
{
	_cleanup_(cs_nvml_closep) cs_nvml *nv = NULL;
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_room_gpus_booked(s->d, cs_park_parked_now, &nv, &gpus, &ngpus, NULL, 0);
	/* In a plan shown (--dry-run), what the restores in flight booked is
	 * not room: the restore's own check counts it, and they end within
	 * seconds, their memory then taken. The run itself leaves them to its
	 * booking, where it waits in line. */
	_cleanup_free_ char(*booked)[200] = s->o->dry_run ? calloc(ngpus + 1, sizeof(*booked)) : NULL;
	char notnode[600] = "";
	if (booked)
		cs_gpubook_plan(s->d, cs_park_parked_now, gpus, ngpus, booked, notnode, sizeof(notnode));
	/* t holds pointers: sizeof(*t) is one pointer's size, as meant. */
	_cleanup_free_ const cs_target **t = calloc(n + 1, sizeof(*t)); // NOLINT(bugprone-sizeof-expression)
	_cleanup_free_ cs_gpu_room *room = calloc(n + 1, sizeof(*room));
	_cleanup_free_ size_t *at = calloc(n + 1, sizeof(*at));
	if (!t || !room || !at)
		return;
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		cs_target *x = e[i].target ? target_of(s, e[i].pid) : NULL;
		if (!x)
			continue;
		cs_restore_needs(x, x->gpu_bytes, s->pairs, s->npairs, gpus, ngpus);
		at[m] = i;
		t[m++] = x;
	}
	cs_restore_judge(t, m, gpus, ngpus, nv, s->sandbox.pid_ns == CS_PIDNS_HOST, room);
	for (size_t k = 0; k < m; k++) {
		note_gpus(t[k], gpus, ngpus, &e[at[k]]);
		add_room_reason(s, t[k], &room[k], &e[at[k]]);
		if (booked)
			add_book_reasons(s, t[k], gpus, ngpus, (const char(*)[200])booked, notnode, &e[at[k]]);
	}
}
