#include "gpuroom.h"
#include "devmap.h"
#include "gpuprobe.h"
#include "env.h"
#include "manifest.h"
#include "pool.h"
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define GIB (1024.0 * 1024 * 1024)

const cs_nvml_gpu *cs_gpu_by_uuid(const cs_nvml_gpu *gpus, size_t n, const char *uuid)
{
	for (size_t i = 0; i < n; i++)
		if (strcasecmp(gpus[i].uuid, uuid) == 0)
			return &gpus[i];
	return NULL;
}

/* ---- what each target needs ------------------------------------------- */

/* VmRSS + VmSwap of pid now: a checkpointed process's host memory, which
 * holds the GPU memory its checkpoint moved (the growth of its resident
 * memory, on the H200). 0 when unreadable. */
static unsigned long long held_now(pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "%d/status", (int)pid);
	_cleanup_close_ int dfd = open(cs_proc_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long rss = 0, swap = 0;
	if (dfd < 0 || cs_read_at(dfd, path, buf, sizeof(buf)) < 0 || cs_parse_status_field(buf, "VmRSS", &rss) < 0)
		return 0;
	if (cs_parse_status_field(buf, "VmSwap", &swap) < 0)
		swap = 0;
	return (unsigned long long)(rss + swap) * 1024;
}

/* The GPU uuid restores onto: the map's new GPU for it, else itself. */
static void restored_onto(const char *uuid, const cs_gpu_pair *pairs, unsigned npairs, char *out, size_t size)
{
	uint8_t u[16];
	snprintf(out, size, "%s", uuid);
	if (cs_gpu_uuid_parse(uuid, u) < 0)
		return;
	for (unsigned i = 0; i < npairs; i++)
		if (memcmp(pairs[i].old_uuid, u, sizeof(u)) == 0) {
			char text[CS_GPU_UUID_STRLEN];
			cs_gpu_uuid_format(pairs[i].new_uuid, text);
			snprintf(out, size, "%s", text);
			return;
		}
}

static void add_need(cs_target *t, const char *uuid, unsigned long long bytes, const cs_gpu_pair *pairs,
		     unsigned npairs)
{
	char onto[48];
	restored_onto(uuid, pairs, npairs, onto, sizeof(onto));
	for (unsigned k = 0; k < t->nneed; k++)
		if (strcasecmp(t->need[k].uuid, onto) == 0) {
			/* Two GPUs mapped onto one: their needs add up (unknown stays unknown). */
			t->need[k].bytes = t->need[k].bytes && bytes ? t->need[k].bytes + bytes : 0;
			return;
		}
	if (t->nneed == CS_TARGET_GPUS)
		return;
	snprintf(t->need[t->nneed].uuid, sizeof(t->need[0].uuid), "%s", onto);
	t->need[t->nneed++].bytes = bytes;
}

void cs_restore_needs(cs_target *t, unsigned long long bytes, const cs_gpu_pair *pairs, unsigned npairs,
		      const cs_nvml_gpu *gpus, size_t ngpus)
{
	t->nneed = 0;
	t->need_bound = t->need_none = false;
	unsigned long long size = bytes;
	bool measured = bytes || t->gpu_bytes_known; /* a record's 0: nothing moved */
	if (!measured) {
		size = t->pid > 0 ? held_now(t->pid) : 0;
		t->need_bound = size > 0;
	}
	/* 0: unknown, which the judgement says so. */
	unsigned long long whole = size || measured ? size + CS_RESTORE_EXTRA : 0;
	if (t->use_known && t->nuse > 0) {
		for (unsigned k = 0; k < t->nuse; k++)
			add_need(t, t->use[k].uuid, t->use[k].bytes ? t->use[k].bytes + CS_RESTORE_EXTRA : whole, pairs,
				 npairs);
		return;
	}
	/* It used no GPU's memory only where its record says so and measured
	 * nothing moved; a record that lists no GPU used yet moved memory, or
	 * says not what moved, does not know where it was (NVML gave no minor
	 * numbers, say): unknown, not none. */
	if (t->use_known && bytes == 0 && t->gpu_bytes_known) {
		t->need_none = true;
		return;
	}
	/* Which GPUs it used is not recorded: each it saw must have room. */
	for (const char *g = t->gpus; *g;) {
		size_t len = strcspn(g, ",");
		char uuid[48];
		snprintf(uuid, sizeof(uuid), "%.*s", (int)(len < sizeof(uuid) ? len : sizeof(uuid) - 1), g);
		add_need(t, uuid, whole, pairs, npairs);
		g += len + (g[len] == ',');
	}
	if (t->nneed || t->gpus[0])
		return;
	const cs_nvml_gpu *seen[CS_TARGET_GPUS];
	size_t k = cs_visible_gpus(t->visible_devices, gpus, ngpus, seen, CS_ARRAY_SIZE(seen));
	for (size_t i = 0; i < k; i++)
		add_need(t, seen[i]->uuid, whole, pairs, npairs);
}

/* ---- judging the set -------------------------------------------------- */

static unsigned long long need_on(const cs_target *t, const char *uuid)
{
	for (unsigned k = 0; k < t->nneed; k++)
		if (strcasecmp(t->need[k].uuid, uuid) == 0)
			return t->need[k].bytes;
	return 0;
}

static int by_bytes_desc(const void *a, const void *b)
{
	const cs_nvml_proc *x = a, *y = b;
	unsigned long long p = x->bytes == CS_NVML_NOT_AVAILABLE ? 0 : x->bytes;
	unsigned long long q = y->bytes == CS_NVML_NOT_AVAILABLE ? 0 : y->bytes;
	return (p < q) - (p > q);
}

void cs_gpu_holders_text(cs_nvml *nv, const cs_nvml_gpu *g, bool host_pidns, char *buf, size_t size)
{
	_cleanup_free_ cs_nvml_proc *h = NULL;
	size_t n = 0, len = 0;
	buf[0] = '\0';
	if (!nv || cs_nvml_holders(nv, g->index, &h, &n) < 0 || n == 0)
		return;
	qsort(h, n, sizeof(*h), by_bytes_desc);
	unsigned long long sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += h[i].bytes == CS_NVML_NOT_AVAILABLE ? 0 : h[i].bytes;
	if (!host_pidns) {
		snprintf(buf, size, "%zu process%s of other PID namespaces hold %.2f GiB of it", n, n == 1 ? "" : "es",
			 (double)sum / GIB);
		return;
	}
	for (size_t i = 0; i < n && i < 3 && len < size; i++) {
		char comm[64] = "?", path[64];
		snprintf(path, sizeof(path), "%s/%d/comm", cs_proc_dir(), (int)h[i].pid);
		ssize_t r = cs_read_at(AT_FDCWD, path, comm, sizeof(comm) - 1);
		if (r > 0) {
			comm[r] = '\0';
			comm[strcspn(comm, "\n")] = '\0';
			cs_sanitize(comm, sizeof(comm), comm, strlen(comm));
		}
		char bytes[32] = "an unknown amount";
		if (h[i].bytes != CS_NVML_NOT_AVAILABLE)
			snprintf(bytes, sizeof(bytes), "%.2f GiB", (double)h[i].bytes / GIB);
		len += (size_t)snprintf(buf + len, size - len, "%spid %d (%s) %s", i ? ", " : "", (int)h[i].pid, comm,
					bytes);
	}
	if (n > 3 && len < size)
		snprintf(buf + len, size - len, ", and %zu more", n - 3);
}

static size_t how_many_fit(unsigned long long *needs, size_t m, unsigned long long room)
{
	/* smallest first, as the host-memory check counts it */
	for (size_t i = 1; i < m; i++)
		for (size_t j = i; j > 0 && needs[j - 1] > needs[j]; j--) {
			unsigned long long x = needs[j];
			needs[j] = needs[j - 1];
			needs[j - 1] = x;
		}
	unsigned long long sum = 0;
	size_t k = 0;
	while (k < m && sum + needs[k] <= room)
		sum += needs[k++];
	return k;
}

typedef struct gpu_sum {
	unsigned long long sum;
	size_t members;
} gpu_sum;

static void short_text(const cs_target *x, const cs_nvml_gpu *g, const gpu_sum *s, const char *holders, size_t fit,
		       cs_gpu_room *r)
{
	unsigned long long need = need_on(x, g->uuid);
	char with[128] = "", held[400] = "", fewer[128] = "";
	if (s->members > 1)
		snprintf(with, sizeof(with), "; with the %zu other process%s restored onto it %.2f GiB in all",
			 s->members - 1, s->members == 2 ? "" : "es", (double)s->sum / GIB);
	if (holders[0])
		snprintf(held, sizeof(held), " (in use: %s)", holders);
	if (s->members > 1 && fit > 0)
		snprintf(fewer, sizeof(fewer), ", restore fewer of them at once (%zu of the %zu fit)", fit, s->members);
	r->verdict = CS_GPU_SHORT;
	snprintf(r->why, sizeof(r->why),
		 "its restore needs %s%.2f GiB on GPU %u (%s, %s)%s%s; the GPU has %.2f GiB free of %.2f GiB%s. A "
		 "restore that runs out of GPU memory destroys the process's checkpointed state for good",
		 x->need_bound ? "up to " : "", (double)need / GIB, g->index, g->name, g->uuid,
		 x->need_bound ? " (its record gives no size: its resident memory, which holds its checkpointed data)" :
				 "",
		 with, (double)g->memory_free / GIB, (double)g->memory_total / GIB, held);
	snprintf(r->fix, sizeof(r->fix),
		 "Free at least %.2f GiB on GPU %u (end a process that holds it)%s, restore onto another GPU "
		 "(--device-map), or let the restore wait for room (--wait-memory SECONDS, CUDASNAP_WAIT_MEMORY). "
		 "Nothing was changed: the process stays checkpointed with its data.",
		 (double)(s->sum - g->memory_free) / GIB, g->index, fewer);
}

static void unknown(cs_gpu_room *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void unknown(cs_gpu_room *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	r->verdict = CS_GPU_ROOM_UNKNOWN;
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
	snprintf(r->fix, sizeof(r->fix), "%s", CS_ROOM_UNKNOWN_FIX);
}

/* A GPU it restores onto is not here. The map's old side is a GPU it used
 * (its record's): where the GPU not here is one of those, the fix maps it;
 * where a device map sent it there, the fix maps the GPUs it used again. */
static void absent(const cs_target *x, const char *uuid, cs_gpu_room *r)
{
	r->verdict = CS_GPU_ABSENT;
	snprintf(r->why, sizeof(r->why), "it restores onto %s, which is not a GPU of this machine", uuid);
	bool used = false;
	char list[CS_TARGET_GPUS * 50] = "";
	for (unsigned i = 0; i < x->nuse; i++) {
		used = used || strcmp(x->use[i].uuid, uuid) == 0;
		size_t len = strlen(list);
		snprintf(list + len, sizeof(list) - len, "%s%s", len ? ", " : "", x->use[i].uuid);
	}
	if (used || !list[0])
		snprintf(r->fix, sizeof(r->fix),
			 "Restore it onto a GPU of this machine: --device-map %s=INDEX-or-UUID (CUDASNAP_DEVICE_MAP "
			 "for the CRIU plugin); 'cudasnap doctor' lists the GPUs.",
			 uuid);
	else
		snprintf(r->fix, sizeof(r->fix),
			 "The device map sends it there: map each GPU it used (%s) onto a GPU of this machine, "
			 "--device-map OLD=INDEX-or-UUID (CUDASNAP_DEVICE_MAP for the CRIU plugin); 'cudasnap doctor' "
			 "lists the GPUs.",
			 list);
}

/* Marks what cannot be judged: no GPU list, a GPU not here, no size. */
static void judge_one(const cs_target *x, const cs_nvml_gpu *gpus, size_t ngpus, cs_gpu_room *r)
{
	*r = (cs_gpu_room){ .verdict = CS_GPU_FITS };
	if (x->nneed == 0) {
		r->verdict = CS_GPU_NONE;
		if (!x->need_none && ngpus)
			unknown(r, "which GPUs it restores onto is not known (no record of it, and it names none)");
		else if (!x->need_none)
			unknown(r, "%s", CS_ROOM_NO_GPUS);
		return;
	}
	for (unsigned k = 0; k < x->nneed; k++) {
		const cs_nvml_gpu *g = cs_gpu_by_uuid(gpus, ngpus, x->need[k].uuid);
		if (!ngpus) {
			unknown(r, "%s (it restores onto %s)", CS_ROOM_NO_GPUS, x->need[k].uuid);
			return;
		}
		if (!g) {
			absent(x, x->need[k].uuid, r);
			return;
		}
		if (g->mig == 1) {
			unknown(r, CS_ROOM_MIG, g->index, g->uuid);
			return;
		}
		if (!g->memory_known) {
			unknown(r, "neither NVML nor the driver gives the free memory of GPU %u (%s)", g->index,
				g->uuid);
			return;
		}
		if (!x->need[k].bytes) {
			unknown(r, "its record gives no size and its memory cannot be read");
			return;
		}
	}
}

size_t cs_restore_judge(const cs_target *const *t, size_t n, const cs_nvml_gpu *gpus, size_t ngpus, cs_nvml *nv,
			bool host_pidns, cs_gpu_room *room)
{
	for (size_t i = 0; i < n; i++)
		judge_one(t[i], gpus, ngpus, &room[i]);
	_cleanup_free_ unsigned long long *needs = calloc(n + 1, sizeof(*needs));
	for (size_t g = 0; needs && g < ngpus; g++) {
		gpu_sum s = { 0 };
		for (size_t i = 0; i < n; i++) {
			unsigned long long b = room[i].verdict == CS_GPU_FITS ? need_on(t[i], gpus[g].uuid) : 0;
			s.sum += b;
			if (b)
				needs[s.members++] = b;
		}
		if (s.sum <= gpus[g].memory_free)
			continue;
		char holders[320];
		cs_gpu_holders_text(nv, &gpus[g], host_pidns, holders, sizeof(holders));
		size_t fit = how_many_fit(needs, s.members, gpus[g].memory_free);
		for (size_t i = 0; i < n; i++)
			if (room[i].verdict == CS_GPU_FITS && need_on(t[i], gpus[g].uuid))
				short_text(t[i], &gpus[g], &s, holders, fit, &room[i]);
	}
	size_t refused = 0;
	for (size_t i = 0; i < n; i++)
		refused += room[i].verdict == CS_GPU_SHORT || room[i].verdict == CS_GPU_ABSENT ||
			room[i].verdict == CS_GPU_ROOM_UNKNOWN;
	return refused;
}

const char *cs_gpu_verdict_code(int verdict)
{
	switch (verdict) {
	case CS_GPU_SHORT: return "gpu-memory";
	case CS_GPU_ABSENT: return "gpu-absent";
	case CS_GPU_ROOM_UNKNOWN: return "gpu-memory-unknown";
	default: return "";
	}
}

int cs_wait_memory_setting(double *out, cs_error *err)
{
	const char *v = cs_env("CUDASNAP_WAIT_MEMORY");
	long secs;
	if (!v)
		return 0;
	if (cs_parse_long(v, 0, CS_WAIT_MEMORY_MAX, &secs) < 0)
		return cs_error_set(err, CS_EUSAGE, "Set it to a whole number of seconds, or remove it.",
				    "CUDASNAP_WAIT_MEMORY is not a whole number of seconds from 0 to %d: '%s'",
				    CS_WAIT_MEMORY_MAX, v);
	*out = (double)secs;
	return 0;
}

void cs_record_targets(const cs_manifest *m, const cs_gpu_pair *pairs, unsigned npairs, const cs_nvml_gpu *gpus,
		       size_t ngpus, cs_target *t)
{
	for (size_t i = 0; i < m->n; i++) {
		const cs_manifest_entry *e = &m->e[i];
		cs_target *x = &t[i];
		*x = (cs_target){ .pid = 0,
				  .nspid = e->nspid ? e->nspid : e->pid,
				  .bytes = e->bytes,
				  .gpu_bytes_known = e->bytes_known };
		snprintf(x->comm, sizeof(x->comm), "%s", e->comm);
		memcpy(x->gpus, e->gpus, sizeof(x->gpus));
		memcpy(x->visible_devices, e->visible_devices, sizeof(x->visible_devices));
		memcpy(x->use, e->use, sizeof(x->use));
		x->nuse = e->nuse;
		x->use_known = e->use_known;
		/* No process yet whose memory could bound an unknown size. */
		cs_restore_needs(x, e->bytes, pairs, npairs, gpus, ngpus);
	}
}

size_t cs_record_judge(const cs_manifest *m, const cs_gpu_pair *pairs, unsigned npairs, const cs_nvml_gpu *gpus,
		       size_t ngpus, cs_nvml *nv, bool host_pidns, cs_gpu_room *room)
{
	_cleanup_free_ cs_target *t = calloc(m->n + 1, sizeof(*t));
	/* v holds pointers: sizeof(*v) is one pointer's size, as meant. */
	_cleanup_free_ const cs_target **v = calloc(m->n + 1, sizeof(*v)); // NOLINT(bugprone-sizeof-expression)
	if (!t || !v)
		return 0;
	cs_record_targets(m, pairs, npairs, gpus, ngpus, t);
	for (size_t i = 0; i < m->n; i++)
		v[i] = &t[i];
	return cs_restore_judge(v, m->n, gpus, ngpus, nv, host_pidns, room);
}

bool cs_room_gpus(cs_nvml **nv, cs_nvml_gpu **gpus, size_t *n, uint64_t ctx, char *why, size_t size)
{
	*gpus = NULL;
	*n = 0;
	if (why && size)
		why[0] = '\0';
	if (cs_nvml_open(nv, NULL) < 0 || cs_nvml_gpus(*nv, gpus, n, NULL) < 0)
		*n = 0;
	if (*n)
		return false;
	free(*gpus);
	*gpus = NULL;
	cs_error err = { 0 };
	int r = cs_gpu_probe(gpus, n, ctx, NULL, &err);
	if (why && size)
		snprintf(why, size, "NVML: %s; the driver: %s",
			 cs_nvml_present(*nv) ? "lists no GPU" : cs_nvml_error(*nv)->message,
			 r < 0      ? err.message :
				 *n ? "answered" :
				      "lists no GPU");
	return *n > 0;
}
