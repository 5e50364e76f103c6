#include "capacity.h"
#include "nvml.h"
#include "proc.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024ULL * 1024)
#define GIB (1024.0 * 1024 * 1024)

/* What a checkpoint charges beyond the GPU memory NVML counts for the
 * process (its context included): memory.peak of its own cgroup minus
 * memory.current before, on the H200 with driver 580.159.04 (2026-12-03,
 * bench/gpu_probe.py), was 12.5 MiB over NVML's 1544 MiB, 18.7 over 4616
 * and 42.5 over 16904: about 10 MiB and 2 MiB per GiB. Counted here with
 * twice the margin: 16 MiB and 4 MiB per GiB. */
#define NEED_FIXED (16 * MIB)
#define NEED_SHARE_DIV 256 /* 4 MiB per GiB */

unsigned long long cs_checkpoint_host_need(unsigned long long gpu)
{
	return gpu + NEED_FIXED + gpu / NEED_SHARE_DIV;
}

void cs_fit_env_read(cs_fit_env *env, bool host_pidns)
{
	*env = (cs_fit_env){ .host_pidns = host_pidns, .procdir = cs_proc_dir() };
	cs_cgroup_mounts_read(env->procdir, &env->mounts);
	env->mem_available = cs_meminfo_available(env->procdir);
}

/* NVML names processes by their PIDs in the initial PID namespace: only
 * there is its figure for one process this namespace's. A process NVML
 * lists without a figure stays unknown here, to be bounded as one NVML
 * cannot name (bounded_bytes): it holds GPU memory, how much is not said. */
static void exact_bytes(cs_fit *f, size_t n, const cs_fit_env *env)
{
	if (!env->host_pidns)
		return;
	_cleanup_free_ cs_nvml_proc *procs = NULL;
	size_t count = 0;
	bool all = cs_nvml_proc_list(&procs, &count);
	for (size_t i = 0; i < n; i++) {
		bool listed = false;
		for (size_t k = 0; k < count; k++) {
			if (procs[k].pid != f[i].pid)
				continue;
			listed = true;
			if (!procs[k].unknown) {
				f[i].gpu = procs[k].bytes;
				f[i].known = CS_GPU_EXACT;
			}
		}
		/* Not listed while NVML answered for every GPU: no GPU memory. */
		if (all && !listed && f[i].known == CS_GPU_UNKNOWN)
			f[i].known = CS_GPU_EXACT;
	}
}

static const cs_memcg_node *node_in(const cs_fit *f, const cs_memcg_node *node);

/* The GPUs (bit = NVML index) whose device file the process holds open or
 * mapped: the ones it uses. Its CUDA_VISIBLE_DEVICES is not asked: /proc
 * shows the environment it started with, which a program may change before
 * it initialises CUDA. None found (a process that holds none under the
 * device directory cudasnap reads): every GPU. */
static uint64_t used_gpus(const cs_proc *p, const cs_nvml_gpu *gpus, size_t ngpus)
{
	uint64_t mask = 0;
	for (size_t r = 0; p && r < p->nrefs; r++) {
		int minor = cs_path_gpu_minor(p->refs[r].path);
		for (size_t g = 0; minor >= 0 && g < ngpus && g < 64; g++)
			mask |= gpus[g].minor == minor ? 1ULL << g : 0;
	}
	for (size_t g = 0; !mask && g < ngpus && g < 64; g++)
		mask |= 1ULL << g;
	return mask;
}

/* Elsewhere, the memory in use on the GPUs a process uses bounds its own. */
static void bounded_bytes(cs_fit *f, size_t n, const cs_proc *const *procs, cs_fit_env *env)
{
	_cleanup_free_ cs_nvml_gpu *gpus = NULL;
	size_t ngpus = 0;
	cs_nvml_list(&gpus, &ngpus);
	for (size_t g = 0; g < ngpus && g < CS_ARRAY_SIZE(env->gpu_used); g++)
		env->gpu_used[g] = gpus[g].memory_used;
	/* past 64 GPUs a bound could miss the one a process uses */
	for (size_t i = 0; ngpus && ngpus <= 64 && i < n; i++) {
		if (f[i].known != CS_GPU_UNKNOWN)
			continue;
		uint64_t mask = used_gpus(procs ? procs[i] : NULL, gpus, ngpus);
		bool all_known = true;
		unsigned long long used = 0;
		for (size_t g = 0; g < ngpus; g++) {
			if (!(mask >> g & 1))
				continue;
			all_known &= gpus[g].memory_known;
			used += gpus[g].memory_used;
		}
		if (all_known) {
			f[i].gpu = used;
			f[i].known = CS_GPU_AT_MOST;
			f[i].seen = mask;
		}
	}
}

/* What the processes for which in() holds need together: exact needs add
 * up; bounded ones count each GPU they see once, however many see it. */
static unsigned long long group_need(const cs_fit *f, size_t n, const cs_fit_env *env, const cs_memcg_node *in)
{
	unsigned long long sum = 0, used = 0;
	uint64_t seen = 0;
	size_t bounded = 0;
	unsigned long long off = 0;
	for (size_t i = 0; i < n; i++) {
		if (!f[i].known || (in && !node_in(&f[i], in)))
			continue;
		if (f[i].known == CS_GPU_EXACT) {
			sum += f[i].need;
			continue;
		}
		/* a bound of what stays in host memory: the GPUs' use less what
		 * parks into files, and the staging that takes instead */
		off += f[i].off_host;
		sum += f[i].staging;
		seen |= f[i].seen;
		bounded++;
	}
	for (size_t g = 0; g < 64; g++)
		used += seen >> g & 1 ? env->gpu_used[g] : 0;
	used = used > off ? used - off : 0;
	return bounded ? sum + cs_checkpoint_host_need(used) + NEED_FIXED * (bounded - 1) : sum;
}

void cs_fit_measure(cs_fit *f, size_t n, const cs_proc *const *procs, cs_fit_env *env)
{
	exact_bytes(f, n, env);
	bounded_bytes(f, n, procs, env);
	for (size_t i = 0; i < n; i++) {
		unsigned long long kept = f[i].gpu > f[i].off_host ? f[i].gpu - f[i].off_host : 0;
		f[i].need = f[i].known ? cs_checkpoint_host_need(kept) + f[i].staging : 0;
		if (cs_memcg_read(env->procdir, f[i].pid, &env->mounts, &f[i].cg) < 0)
			f[i].cg.version = 0;
	}
}

/* The node of f's chain that is the same cgroup as node, or NULL. */
static const cs_memcg_node *node_in(const cs_fit *f, const cs_memcg_node *node)
{
	return cs_memcg_find(&f->cg, node);
}

static int by_need(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
	return (x > y) - (x < y);
}

/* How many of the needs fit in room together, smallest first. */
static size_t how_many_fit(unsigned long long *needs, size_t m, long long room)
{
	qsort(needs, m, sizeof(*needs), by_need);
	unsigned long long sum = 0;
	size_t k = 0;
	while (k < m && sum + needs[k] <= (unsigned long long)room)
		sum += needs[k++];
	return k;
}

/* What happens to a process whose copy does not fit under the limit that
 * decides. Over memory.high the kernel does not kill: it reclaims and
 * throttles the process, measured on the H200 (a checkpoint of 2 GiB under
 * memory.high of 1.5 GiB, no memory.max) until it stood still, still in its
 * checkpoint after 30 s and wedged 9 minutes later. */
static const char *over_limit(const char *which)
{
	return strcmp(which, "memory.high") == 0 ?
		"the kernel throttles it to a standstill when it does not fit under memory.high: it is not "
		"killed, but stays wedged in its checkpoint" :
		"the kernel kills it when it does not fit";
}

static void refuse(cs_fit *f, size_t n, const cs_memcg_node *node, unsigned long long sum, size_t members,
		   long long room, const char *which, long long limit, size_t fit)
{
	char fewer[160] = "";
	if (members > 1 && fit > 0)
		snprintf(fewer, sizeof(fewer), ", or checkpoint fewer of its processes at once (%zu of the %zu fit)",
			 fit, members);
	for (size_t i = 0; i < n; i++) {
		cs_fit *x = &f[i];
		const cs_memcg_node *mine = x->refused || !x->known ? NULL : node_in(x, node);
		if (!mine)
			continue;
		x->refused = true;
		/* The cgroup as this process's own chain names it. */
		int plen = (int)mine->len;
		const char *path = x->cg.path;
		char with[96] = "";
		if (members > 1)
			snprintf(with, sizeof(with), "; with the %zu other process%s of that cgroup %.2f GiB",
				 members - 1, members == 2 ? "" : "es", (double)sum / GIB);
		snprintf(x->why, sizeof(x->why),
			 "needs %s%.2f GiB of host memory in cgroup %.*s (%.2f GiB of GPU memory%s, plus the driver's "
			 "own)%s; the cgroup has %.2f GiB left under its %s of %.2f GiB",
			 x->known == CS_GPU_AT_MOST ? "up to " : "", (double)x->need / GIB, plen, path,
			 (double)x->gpu / GIB, x->known == CS_GPU_AT_MOST ? " in use on the GPUs it uses" : "", with,
			 (double)(room > 0 ? room : 0) / GIB, which, (double)limit / GIB);
		snprintf(x->fix, sizeof(x->fix),
			 "Raise %s of %.*s by at least %.2f GiB (to %.2f GiB or more), or free memory in that cgroup%s. The "
			 "checkpoint's copy is charged to the process's own cgroup, and %s.",
			 which, plen, path, (double)(sum - (unsigned long long)(room > 0 ? room : 0)) / GIB,
			 (double)(limit + (long long)sum - room) / GIB, fewer, over_limit(which));
	}
}

/* Every cgroup with a limit, once, against the needs of its processes. */
static void judge_cgroups(cs_fit *f, size_t n, const cs_fit_env *env)
{
	_cleanup_free_ unsigned long long *needs = calloc(n + 1, sizeof(*needs));
	if (!needs)
		return;
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < f[i].cg.n; k++) {
			const cs_memcg_node *node = &f[i].cg.node[k];
			const char *which = NULL;
			long long limit = -1, room = cs_memcg_node_room(node, &which, &limit);
			bool first = true; /* judged once, at the first process under it */
			for (size_t j = 0; j < i && first; j++)
				first = !node_in(&f[j], node);
			if (room < 0 || !first)
				continue;
			unsigned long long sum = group_need(f, n, env, node);
			size_t m = 0;
			for (size_t j = 0; j < n; j++)
				if (f[j].known && node_in(&f[j], node))
					needs[m++] = f[j].need;
			if (sum > (unsigned long long)room)
				refuse(f, n, node, sum, m, room, which, limit, how_many_fit(needs, m, room));
		}
	}
}

static void judge_available(cs_fit *f, size_t n, const cs_fit_env *env)
{
	long long avail = env->mem_available;
	unsigned long long sum = group_need(f, n, env, NULL);
	if (avail < 0 || sum <= (unsigned long long)avail)
		return;
	for (size_t i = 0; i < n; i++) {
		cs_fit *x = &f[i];
		if (x->refused || !x->known)
			continue;
		x->refused = true;
		snprintf(x->why, sizeof(x->why),
			 "needs %s%.2f GiB of host memory; the checkpoint needs %.2f GiB in all, and the machine has "
			 "%.2f GiB available (MemAvailable)",
			 x->known == CS_GPU_AT_MOST ? "up to " : "", (double)x->need / GIB, (double)sum / GIB,
			 (double)avail / GIB);
		snprintf(x->fix, sizeof(x->fix),
			 "Free at least %.2f GiB of host memory, or checkpoint fewer processes at once.",
			 (double)(sum - (unsigned long long)avail) / GIB);
	}
}

/* A chain read in part is judged by the limits it shows; one that shows
 * none, where one may exist above what could be read, cannot be judged:
 * "no limit" would send the process into an OOM kill it never saw coming. */
static void judge_unread(cs_fit *x)
{
	long long room = -1, limit = -1;
	const char *which = NULL;
	bool limited = cs_fit_tightest(x, &room, &limit, &which) != NULL;
	x->room = x->cg.seen == CS_MEMCG_UNREAD ? CS_ROOM_UNKNOWN :
		x->cg.seen != CS_MEMCG_PART     ? CS_ROOM_KNOWN :
		limited                         ? CS_ROOM_PART :
						  CS_ROOM_UNKNOWN;
	if (x->room != CS_ROOM_UNKNOWN || x->refused)
		return;
	char need[64] = "an unknown amount of";
	if (x->known)
		snprintf(need, sizeof(need), "%s%.2f GiB of", x->known == CS_GPU_AT_MOST ? "up to " : "",
			 (double)x->need / GIB);
	const char *problem = x->cg.problem[0] ? x->cg.problem : "nothing of it can be read";
	if (x->cg.seen == CS_MEMCG_PART && x->cg.n)
		snprintf(x->why, sizeof(x->why),
			 "needs %s host memory in its memory cgroup %s, with no limit up to %.*s; %s", need, x->cg.path,
			 (int)x->cg.node[x->cg.n - 1].len, x->cg.path, problem);
	else
		snprintf(x->why, sizeof(x->why),
			 "needs %s host memory in its memory cgroup %s, and none of its memory cgroups can be read here: %s",
			 need, x->cg.path[0] ? x->cg.path : "(unknown)", problem);
	snprintf(x->fix, sizeof(x->fix),
		 "Run cudasnap where it sees the whole cgroup chain: in the host's cgroup namespace (on the host, or "
		 "in a pod with hostPID and CAP_SYS_ADMIN, which lets it enter that namespace). Or check by hand that "
		 "the cgroups above have room for the copy of its GPU memory, and then --ignore-memory "
		 "(CUDASNAP_IGNORE_MEMORY=1) skips this check. A copy that does not fit gets the process OOM-killed "
		 "(or, under memory.high, throttled until it stands still), and its GPU memory is lost.");
}

size_t cs_fit_judge(cs_fit *f, size_t n, const cs_fit_env *env, size_t *unknown)
{
	judge_cgroups(f, n, env);
	judge_available(f, n, env);
	size_t stopped = 0;
	*unknown = 0;
	for (size_t i = 0; i < n; i++) {
		judge_unread(&f[i]);
		stopped += f[i].refused || (f[i].known && f[i].room == CS_ROOM_UNKNOWN);
		*unknown += !f[i].known;
	}
	return stopped;
}

const cs_memcg_node *cs_fit_tightest(const cs_fit *f, long long *room, long long *limit, const char **which)
{
	const cs_memcg_node *best = NULL;
	for (size_t k = 0; k < f->cg.n; k++) {
		const char *w = NULL;
		long long l = -1, r = cs_memcg_node_room(&f->cg.node[k], &w, &l);
		if (r >= 0 && (!best || r < *room)) {
			best = &f->cg.node[k];
			*room = r;
			*limit = l;
			*which = w;
		}
	}
	return best;
}
