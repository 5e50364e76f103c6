#include "gpunode.h"
#include "env.h"
#include "gpuorphan.h"
#include "gpuprobe.h"
#include "gpuroom.h"
#include "pool.h"
#include "sandbox.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GIB (1024.0 * 1024 * 1024)

cs_book_whose cs_gpubook_whose(const char *path, int bookfd, char *why, size_t size)
{
	why[0] = '\0';
	cs_sandbox sb;
	cs_sandbox_detect(NULL, &sb);
	if (sb.gvisor) {
		snprintf(why, size,
			 "cudasnap runs in gVisor, whose file locks are the sandbox's own: the book %s counts the "
			 "restores of this sandbox only, not those of other sandboxes on the node",
			 path);
		return CS_BOOK_SANDBOXS;
	}
	/* PID 1's root shows the book of PID 1's mount namespace, the node's
	 * where PID 1 is the node's init (in a container, the container's):
	 * ours must be the same directory. A book named by CUDASNAP_GPU_BOOK
	 * is the operator's word. */
	const char *set = cs_env("CUDASNAP_GPU_BOOK");
	if ((set && *set) || strcmp(path, CS_GPUBOOK_NODE) != 0)
		return CS_BOOK_NODES;
	char there[PATH_MAX];
	struct stat a, b;
	snprintf(there, sizeof(there), "%s/1/root%s", cs_proc_dir(), path);
	if (fstat(bookfd, &a) < 0)
		return CS_BOOK_NODES;
	int r = stat(there, &b) < 0 ? -errno : 0;
	if (r < 0 && r != -ENOENT)
		return CS_BOOK_NODES; /* not ours to look at */
	if (r == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		return CS_BOOK_NODES;
	snprintf(why, size,
		 "this cudasnap's mount namespace has a %s of its own, not the node's as PID 1 sees it (%s): "
		 "restores made from the node's mount namespace are not counted",
		 path, there);
	return CS_BOOK_PRIVATE;
}

/* What the book's bookings hold of each of gpus[0..n) (the book locked),
 * orphans judged as a restore would: n tallies to free, or NULL. */
static cs_book_tally *tally_of(int fd, cs_driver *d, cs_parked_fn parked, const cs_nvml_gpu *gpus, size_t n)
{
	_cleanup_free_ char(*uuids)[48] = calloc(n + 1, sizeof(*uuids));
	cs_book_tally *tally = calloc(n + 1, sizeof(*tally));
	if (!uuids || !tally) {
		free(tally);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		snprintf(uuids[i], sizeof(uuids[i]), "%s", gpus[i].uuid);
	cs_orphans o;
	cs_orphans_init(&o, d);
	o.parked = parked;
	cs_orphan_judge oj = { .counts = cs_orphan_counts, .ctx = &o };
	cs_gpubook_tally(fd, NULL, 0, (const char(*)[48])uuids, n, &oj, tally);
	return tally;
}

void cs_gpubook_plan(cs_driver *d, cs_parked_fn parked, cs_nvml_gpu *gpus, size_t n, char (*booked)[200], char *why,
		     size_t size)
{
	why[0] = '\0';
	for (size_t i = 0; i < n; i++)
		booked[i][0] = '\0';
	const char *path = cs_gpubook_path();
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return; /* none yet: no restore is in flight, the first creates it */
	if (cs_gpubook_whose(path, fd, why, size) != CS_BOOK_PRIVATE)
		why[0] = '\0'; /* said (doctor, the restore's warning), not refused */
	cs_error err = { 0 };
	_cleanup_close_ int lk = cs_gpubook_lock(fd, cs_now() + 2, NULL, &err);
	if (lk < 0)
		return;
	_cleanup_free_ cs_book_tally *tally = tally_of(fd, d, parked, gpus, n);
	for (size_t i = 0; tally && i < n; i++) {
		cs_nvml_gpu *g = &gpus[i];
		const cs_book_tally *y = &tally[i];
		if (!y->whole && !y->held)
			continue;
		unsigned long long take = y->whole ? g->memory_free : y->held;
		g->memory_free -= take < g->memory_free ? take : g->memory_free;
		if (y->whole)
			snprintf(booked[i], sizeof(booked[i]), "%.120s counts as all of GPU %u", y->first_who,
				 g->index);
		else
			snprintf(booked[i], sizeof(booked[i]), "restores in flight book %.2f GiB of GPU %u (%.100s%s)",
				 (double)y->held / GIB, g->index, y->first_who, y->nheld > 1 ? ", and others" : "");
	}
}

/* The ordinals (as the probe counts them) of gpus[0..n) where no booking
 * takes memory now: the probe may take a context there. */
static uint64_t unbooked(int fd, cs_driver *d, cs_parked_fn parked, const cs_nvml_gpu *gpus, size_t n)
{
	_cleanup_free_ cs_book_tally *tally = tally_of(fd, d, parked, gpus, n);
	uint64_t ctx = 0;
	for (size_t i = 0; tally && i < n; i++)
		if (!tally[i].held && !tally[i].whole && gpus[i].index < 64)
			ctx |= 1ULL << gpus[i].index;
	return ctx;
}

bool cs_room_gpus_booked(cs_driver *d, cs_parked_fn parked, cs_nvml **nv, cs_nvml_gpu **gpus, size_t *n, char *why,
			 size_t size)
{
	if (!cs_room_gpus(nv, gpus, n, 0, why, size))
		return false; /* NVML's figures, or none */
	/* the driver's list, with no free memory yet: read under the book's
	 * rule (a book not there yet holds no restore) */
	const char *path = cs_gpubook_path();
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	cs_error err = { 0 };
	_cleanup_close_ int lk = fd < 0 ? -1 : cs_gpubook_lock(fd, cs_now() + 2, NULL, &err);
	if (fd >= 0 && lk < 0)
		return true; /* held by another: the free memory stays unknown */
	uint64_t ctx = fd < 0 ? CS_PROBE_ALL : unbooked(fd, d, parked, *gpus, *n);
	if (!ctx)
		return true;
	_cleanup_free_ cs_nvml_gpu *fresh = NULL;
	size_t nfresh = 0;
	if (cs_gpu_probe(&fresh, &nfresh, ctx, NULL, &err) < 0)
		return true;
	for (size_t i = 0; i < *n; i++) {
		const cs_nvml_gpu *f = cs_gpu_by_uuid(fresh, nfresh, (*gpus)[i].uuid);
		if (f && f->memory_known)
			(*gpus)[i] = *f;
	}
	return true;
}
