#include "gpuledger.h"
#include "gpuprobe.h"
#include "pool.h"
#include "util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define GIB (1024.0 * 1024 * 1024)
/* How long the book's lock may be held by another: it reads NVML, or runs
 * the driver's probe, under it. */
#define BOOK_LOCK_WAIT_S (CS_GPU_PROBE_S + 10)

struct ledger_held {
	const cs_target *t;
	cs_booking b;
};

/* What a booking is for: a restore forward or a checkpoint's rollback
 * (which waits only for restores in flight), each through the driver or
 * the interposer's unpark. */
typedef struct kind {
	bool rollback, unpark;
} kind;

void cs_gpu_ledger_init(cs_gpu_ledger *l, cs_driver *d, const char *command, double deadline, volatile int *interrupted,
			bool host_pidns, cs_warn_fn warn, void *warn_ctx)
{
	*l = (cs_gpu_ledger){ .bookfd = -1,
			      .d = d,
			      .deadline = deadline,
			      .interrupted = interrupted,
			      .host_pidns = host_pidns,
			      .command = command ? command : "cudasnap",
			      .warn = warn,
			      .warn_ctx = warn_ctx };
	pthread_mutex_init(&l->mu, NULL);
	pthread_mutex_init(&l->held_mu, NULL);
	cs_orphans_init(&l->orphans, d);
	/* The book is opened at the first restore: a command that restores
	 * nothing leaves no trace of it. */
}

void cs_gpu_ledger_fini(cs_gpu_ledger *l)
{
	for (size_t i = 0; i < l->nheld; i++)
		cs_gpubook_drop(l->bookfd, &l->held[i].b);
	free(l->held);
	if (l->bookfd >= 0)
		close(l->bookfd);
	cs_nvml_close(l->nv);
	free(l->gpus);
	pthread_mutex_destroy(&l->mu);
	pthread_mutex_destroy(&l->held_mu);
	l->held = NULL;
	l->nheld = 0;
	l->bookfd = -1;
	l->nv = NULL;
	l->gpus = NULL;
}

/* ---- judging one restore against the GPUs and the book ----------------- */

typedef enum verdict {
	V_FITS,
	V_THEIRS, /* restores in flight, or waiters that came first, hold the room */
	V_SHORT, /* other processes hold the GPU's memory */
	V_UNREAD, /* the free memory could not be read this time */
	V_NEVER, /* it needs more than the GPU has in all: no wait helps */
	V_UNKNOWN, /* it cannot be known: no GPU list, MIG, no size */
	V_ABSENT, /* the GPU is not on this machine */
} verdict;

typedef struct judgement {
	verdict v;
	unsigned k; /* the need it is about */
	uint32_t short_gpus; /* bit k: need k is short of memory, or its free memory unread */
	const cs_nvml_gpu *g;
	cs_book_tally tally[CS_TARGET_GPUS];
	char why[400]; /* V_UNKNOWN, V_UNREAD */
} judgement;

/* The driver's probe takes a context on each GPU it reads: only on the
 * GPUs t needs where no booking takes memory (a restore in flight there
 * may need what the context would take), each judged on its own. read[k]:
 * need k's GPU was read now. */
static void probe_needs(cs_gpu_ledger *l, const cs_target *t, judgement *j, bool *read)
{
	uint64_t ctx = 0;
	for (unsigned k = 0; k < t->nneed; k++) {
		const cs_nvml_gpu *g = cs_gpu_by_uuid(l->gpus, l->ngpus, t->need[k].uuid);
		read[k] = g && !j->tally[k].held && !j->tally[k].whole && g->index < 64;
		if (read[k])
			ctx |= 1ULL << g->index;
	}
	if (!ctx)
		return;
	_cleanup_free_ cs_nvml_gpu *fresh = NULL;
	size_t nfresh = 0;
	cs_error err = { 0 };
	if (cs_gpu_probe(&fresh, &nfresh, ctx, l->interrupted, &err) < 0)
		snprintf(j->why, sizeof(j->why), "the driver did not give the GPUs' free memory: %.300s", err.message);
	for (unsigned k = 0; k < t->nneed; k++) {
		cs_nvml_gpu *g = read[k] ? (cs_nvml_gpu *)cs_gpu_by_uuid(l->gpus, l->ngpus, t->need[k].uuid) : NULL;
		const cs_nvml_gpu *f = g ? cs_gpu_by_uuid(fresh, nfresh, g->uuid) : NULL;
		if (!g)
			continue;
		g->memory_known = f && f->memory_known;
		g->memory_free = g->memory_known ? f->memory_free : 0;
		g->memory_total = g->memory_known ? f->memory_total : g->memory_total;
	}
}

static void set(judgement *j, verdict v, unsigned k)
{
	if (v > j->v) {
		j->v = v;
		j->k = k;
	}
}

static void judge_need(const cs_gpu_ledger *l, const cs_target *t, unsigned k, bool probed, judgement *j)
{
	const cs_nvml_gpu *g = cs_gpu_by_uuid(l->gpus, l->ngpus, t->need[k].uuid);
	unsigned long long need = t->need[k].bytes, held = j->tally[k].held;
	bool busy = l->probed && !probed; /* not read: restores of it are in flight */
	if (!l->ngpus) {
		snprintf(j->why, sizeof(j->why), "%s (%.260s)", CS_ROOM_NO_GPUS, l->why_none);
		set(j, V_UNKNOWN, k);
	} else if (!g) {
		set(j, V_ABSENT, k);
	} else if (g->mig == 1) {
		snprintf(j->why, sizeof(j->why), CS_ROOM_MIG, g->index, g->uuid);
		set(j, V_UNKNOWN, k);
	} else if (!need) {
		snprintf(j->why, sizeof(j->why), "its record gives no size and its memory cannot be read");
		set(j, V_UNKNOWN, k);
	} else if (!busy && !g->memory_known) {
		if (!j->why[0])
			snprintf(j->why, sizeof(j->why),
				 "neither NVML nor the driver gives the free memory of GPU %u (%s)", g->index, g->uuid);
		j->short_gpus |= 1u << k;
		set(j, V_UNREAD, k);
	} else if (!busy && g->memory_total && need > g->memory_total) {
		set(j, V_NEVER, k);
	} else if ((!busy && g->memory_free < need) || j->tally[k].whole) {
		/* A booking that cannot be read may never end by itself: no
		 * room, as for the memory of other processes. */
		j->short_gpus |= 1u << k;
		set(j, V_SHORT, k);
	} else if (busy || g->memory_free < need + held ||
		   (j->tally[k].ahead_need && j->tally[k].ahead_need + held <= g->memory_free)) {
		/* Restores in flight hold the room, or a waiter that came earlier
		 * could have it now: it goes first. */
		set(j, V_THEIRS, k);
	}
	if (j->k == k && j->v != V_FITS)
		j->g = g;
}

/* With the book's lock held: what stands between t and its room now. */
static void judge(cs_gpu_ledger *l, const cs_target *t, const cs_booking *b, judgement *j)
{
	char uuids[CS_TARGET_GPUS][48];
	*j = (judgement){ .v = V_FITS };
	for (unsigned k = 0; k < t->nneed; k++)
		memcpy(uuids[k], t->need[k].uuid, sizeof(uuids[k]));
	cs_orphans_look(&l->orphans, (const char(*)[48])uuids, t->nneed);
	cs_orphan_judge oj = { .counts = cs_orphan_counts, .ctx = &l->orphans };
	cs_gpubook_tally(l->bookfd, b, b->rec.ticket, (const char(*)[48])uuids, t->nneed, &oj, j->tally);
	bool read[CS_TARGET_GPUS];
	for (unsigned k = 0; k < t->nneed; k++)
		read[k] = true;
	if (l->probed)
		probe_needs(l, t, j, read);
	else
		for (unsigned k = 0; k < t->nneed; k++) {
			const cs_nvml_gpu *c = cs_gpu_by_uuid(l->gpus, l->ngpus, t->need[k].uuid);
			if (c)
				cs_nvml_gpu_memory(l->nv, &l->gpus[c - l->gpus]);
		}
	for (unsigned k = 0; k < t->nneed; k++)
		judge_need(l, t, k, read[k], j);
}

/* ---- the words ------------------------------------------------------------ */

/* Why t has no room now; waiting: for the line that says it waits, not
 * for a refusal. */
static void because(const cs_target *t, const judgement *j, bool waiting, char *buf, size_t size)
{
	const cs_nvml_gpu *g = j->g;
	const cs_book_tally *y = &j->tally[j->k];
	double need = (double)t->need[j->k].bytes / GIB;
	char booked[200] = "";
	if (y->whole)
		snprintf(booked, sizeof(booked), "; %s counts as all of it", y->first_who);
	else if (y->held)
		snprintf(booked, sizeof(booked), "; restores in flight book %.2f GiB more of it (%s%s)",
			 (double)y->held / GIB, y->first_who, y->nheld > 1 ? ", and others" : "");
	switch (j->v) {
	case V_ABSENT:
		snprintf(buf, size, "it restores onto %s, which is not a GPU of this machine", t->need[j->k].uuid);
		break;
	case V_UNKNOWN:
	case V_UNREAD: snprintf(buf, size, "%s", j->why); break;
	case V_SHORT:
		snprintf(buf, size, "GPU %u (%s) has %.2f GiB free, and its restore needs %.2f GiB%s", g->index,
			 g->uuid, (double)g->memory_free / GIB, need, booked);
		break;
	case V_NEVER:
		snprintf(buf, size, "its restore needs %.2f GiB on GPU %u (%s), which has %.2f GiB in all", need,
			 g->index, g->uuid, (double)g->memory_total / GIB);
		break;
	case V_THEIRS:
		if (y->held || !y->ahead_need)
			snprintf(buf, size, "its restore needs %.2f GiB on GPU %u (%s)%s%s", need, g->index, g->uuid,
				 booked[0] ? booked : "; restores in flight hold it",
				 waiting ? "" : ", and they did not end in time");
		else
			snprintf(buf, size,
				 "its restore needs %.2f GiB on GPU %u (%s), where a restore that came first (%s) goes "
				 "before it",
				 need, g->index, g->uuid, y->ahead_who);
		break;
	default: snprintf(buf, size, "no room"); break;
	}
}

static int no_room(const cs_target *t, const judgement *j, bool rollback, bool unpark, cs_error *err)
{
	char why[700];
	because(t, j, false, why, sizeof(why));
	bool unknown = j->v == V_UNKNOWN || j->v == V_UNREAD;
	if (unpark)
		/* An unpark that does not start loses nothing: the memory stays
		 * where the park put it. */
		return cs_error_set(err, CS_EPROC,
				    "Its memory is safe where its park put it (host memory, or its files); its GPU work "
				    "waits. Free GPU memory, then bring it back: cudasnap restore --pid N (the process "
				    "named above).",
				    "process %d (%s) stays parked: its unpark was not started, because %s", (int)t->pid,
				    t->comm, why);
	if (rollback)
		return cs_error_set(err, CS_EPROC,
				    "Its checkpointed data is safe in its host memory. Free GPU memory, then restore it: "
				    "cudasnap restore --pid N (the process named above).",
				    "process %d (%s) was left checkpointed: the rollback did not ask the driver to restore "
				    "it, because %s",
				    (int)t->pid, t->comm, why);
	return cs_error_set(
		err, CS_EPROC,
		unknown ?
			CS_ROOM_UNKNOWN_FIX :
			"Free GPU memory, or let the restore wait for it (--wait-memory SECONDS, CUDASNAP_WAIT_MEMORY); "
			"the process is still checkpointed, with its data.",
		"restore of process %d (%s) not asked of the driver: %s; a restore that runs out of GPU memory "
		"destroys the process's state",
		(int)t->pid, t->comm, why);
}

static void say_waiting(cs_gpu_ledger *l, const cs_target *t, const judgement *j, double until)
{
	if (l->warned || !l->warn)
		return;
	char why[700], line[1000];
	because(t, j, true, why, sizeof(why));
	/* Restores in flight end by themselves; what they leave is judged
	 * then, and waited for only as long as --wait-memory says. */
	bool theirs = j->v == V_THEIRS;
	snprintf(line, sizeof(line), "waiting up to %.0f s for %s: process %d (%s): %s%s", until - cs_now(),
		 theirs ? "the restores in flight that hold its room" : "room (--wait-memory)", (int)t->pid, t->comm,
		 why,
		 theirs && l->deadline <= cs_now() ? "; then, without --wait-memory, refused if the GPU has no room" :
						     "");
	l->warn(l->warn_ctx, line);
	l->warned = true;
}

/* ---- booking ----------------------------------------------------------------- */

static void open_gpus(cs_gpu_ledger *l)
{
	l->opened = true;
	/* The driver's list names the GPUs alone: their free memory is read
	 * under the book's lock, where no restore in flight needs it. */
	l->probed = cs_room_gpus(&l->nv, &l->gpus, &l->ngpus, 0, l->why_none, sizeof(l->why_none));
}

static void new_booking(const cs_gpu_ledger *l, const cs_target *t, bool unpark, cs_booking *b)
{
	*b = CS_BOOKING_NONE;
	b->rec = (cs_booking_rec){ .ticket = cs_gpubook_ticket(),
				   .pid = (int32_t)getpid(),
				   .ngpu = t->nneed,
				   .target = (int32_t)t->pid,
				   .target_pidns = l->orphans.pidns,
				   .timens = l->orphans.timens,
				   .target_start = t->start_time };
	snprintf(b->rec.who, sizeof(b->rec.who), "%s: pid %d (%.20s)%s", l->command, (int)t->pid, t->comm,
		 unpark ? ", unparking" : "");
	memcpy(b->rec.gpu, t->need, sizeof(b->rec.gpu));
}

static int keep(cs_gpu_ledger *l, const cs_target *t, cs_booking *b)
{
	pthread_mutex_lock(&l->held_mu);
	int r = cs_grow(&l->held, &l->capheld, l->nheld + 1, sizeof(*l->held));
	if (r == 0) {
		l->held[l->nheld++] = (struct ledger_held){ .t = t, .b = *b };
		*b = CS_BOOKING_NONE;
	}
	pthread_mutex_unlock(&l->held_mu);
	return r;
}

/* The node's book, or l->book_err saying why none: a book of one's own
 * (a user's where root's cannot be reached) would let its restores and
 * the node's each see room the other takes. */
static void open_book(cs_gpu_ledger *l)
{
	const char *path = cs_gpubook_path();
	int fd = cs_gpubook_open(path, &l->book_err);
	if (fd < 0)
		return;
	char why[600];
	cs_book_whose whose = cs_gpubook_whose(path, fd, why, sizeof(why));
	if (whose == CS_BOOK_PRIVATE) {
		/* Its restores and the node's would each see room the other takes. */
		cs_error_set(&l->book_err, CS_ESTATE,
			     "Run it in the node's mount namespace, or mount the node's " CS_GPUBOOK_NODE
			     " at the same place, or accept the risk with --ignore-gpu-memory (CUDASNAP_IGNORE_GPU_MEMORY=1).",
			     "its GPU memory cannot be booked against the node's other restores: %s", why);
		close(fd);
		return;
	}
	if (whose == CS_BOOK_SANDBOXS && l->warn) {
		char line[700];
		snprintf(line, sizeof(line), "warning: %s", why);
		l->warn(l->warn_ctx, line);
	}
	snprintf(l->book_path, sizeof(l->book_path), "%.250s", path);
	l->bookfd = fd;
}

/* How long a booking outlives its cudasnap at most where its process cannot
 * be seen: the driver carries out a restore its caller gave up on, so well
 * past the restore's own deadline for its size (not --step-timeout's). */
static uint64_t orphan_bound(const cs_gpu_ledger *l, const cs_target *t)
{
	unsigned long long bytes = 0;
	for (unsigned k = 0; k < t->nneed; k++)
		bytes += t->need[k].bytes;
	double s = 2 * cs_move_deadline(NULL, bytes) + 60;
	if (s > CS_GPUBOOK_ORPHAN_MAX_S)
		s = CS_GPUBOOK_ORPHAN_MAX_S;
	return cs_gpubook_ticket() + (uint64_t)(s * 1e9);
}

/* What a waiter saw at its last look, so that it reads the book again only
 * when the book or the free memory could have changed for it. */
typedef struct look {
	bool settled; /* the orphans left for t were ended */
	bool valid; /* it waits, for the reason seen then */
	double at, until; /* cs_now() of the look; when that wait ends */
	struct timespec book; /* the book's mtime: a booking made or ended changes it */
	unsigned long long free[CS_TARGET_GPUS]; /* NVML's free memory of its GPUs */
} look;

static bool book_mtime(const cs_gpu_ledger *l, struct timespec *m)
{
	struct stat st;
	if (fstat(l->bookfd, &st) < 0)
		return false;
	*m = st.st_mtim;
	return true;
}

/* Whether a waiter's last look still stands: within a second of it (what
 * changes in place, an orphan that ends, a waiter ahead that leaves, is
 * seen then), no booking made or ended since, no GPU of its with more
 * free memory, and the wait not over. Only a look that waits stands: a
 * restore is booked only on a reading of the book under its lock. NVML's
 * reading is cheap. */
static bool still_waits(cs_gpu_ledger *l, const cs_target *t, const look *w)
{
	double now = cs_now();
	struct timespec m;
	if (!w->valid || now - w->at >= 1.0 || now + 0.5 >= w->until || (l->interrupted && *l->interrupted) ||
	    !book_mtime(l, &m) || m.tv_sec != w->book.tv_sec || m.tv_nsec != w->book.tv_nsec)
		return false;
	for (unsigned k = 0; k < t->nneed; k++) {
		const cs_nvml_gpu *c = cs_gpu_by_uuid(l->gpus, l->ngpus, t->need[k].uuid);
		if (!c)
			continue;
		cs_nvml_gpu *g = &l->gpus[c - l->gpus];
		cs_nvml_gpu_memory(l->nv, g);
		if (!g->memory_known || g->memory_free > w->free[k])
			return false;
	}
	return true;
}

static void remember(const cs_gpu_ledger *l, const cs_target *t, const struct timespec *book, double until, look *w)
{
	/* the driver's probe is read once a second anyway */
	w->valid = !l->probed;
	w->at = cs_now();
	w->until = until;
	w->book = *book;
	for (unsigned k = 0; k < t->nneed; k++) {
		const cs_nvml_gpu *g = cs_gpu_by_uuid(l->gpus, l->ngpus, t->need[k].uuid);
		w->free[k] = g && g->memory_known ? g->memory_free : 0;
	}
}

/* One look under the book's lock: booked (1), wait (0), or refused (<0). */
static int attempt(cs_gpu_ledger *l, const cs_target *t, cs_booking *b, kind k, double start, look *w, cs_error *err)
{
	if (still_waits(l, t, w))
		return 0;
	w->valid = false;
	/* Each wait for the lock is bounded, not the sum of them: a restore
	 * that waits in line meets the lock held many times. */
	_cleanup_close_ int lk = cs_gpubook_lock(l->bookfd, cs_now() + BOOK_LOCK_WAIT_S, l->interrupted, err);
	if (lk < 0)
		return -CS_EPROC;
	/* Bookings left to an unpark of t by a cudasnap that is gone: this
	 * restore or unpark of t stands for them now (restored again, its
	 * earlier unpark is over). Only t's own restore or unpark leaves
	 * them, so once is enough. */
	if (!w->settled)
		cs_gpubook_settle(l->bookfd, t->pid, t->start_time, l->orphans.pidns);
	w->settled = true;
	/* before the reading: a change made while it reads is seen next time */
	struct timespec seen = { 0 };
	bool dated = book_mtime(l, &seen);
	judgement j = { .v = V_FITS };
	if (!l->ignore)
		judge(l, t, b, &j);
	if (j.v == V_FITS) {
		b->rec.state = k.unpark ? CS_BOOKING_UNPARK : CS_BOOKING_HELD;
		b->rec.until = orphan_bound(l, t);
		int wr = cs_gpubook_write(l->bookfd, b);
		if (wr == 0 && keep(l, t, b) == 0)
			return 1;
		return cs_error_errno(err, CS_EPROC, wr < 0 ? -wr : ENOMEM, CS_GPUBOOK_HINT,
				      "%s of process %d (%s) %s: its GPU memory could not be booked in %s",
				      k.unpark ? "unpark" : "restore", (int)t->pid, t->comm,
				      k.unpark ? "not started" : "not asked of the driver", l->book_path);
	}
	double now = cs_now(), inflight = (l->deadline > start ? l->deadline : start) + CS_GPU_INFLIGHT_WAIT_S;
	bool stop = l->interrupted && *l->interrupted;
	bool wait = (j.v == V_THEIRS && now < inflight) ||
		((j.v == V_SHORT || j.v == V_UNREAD) && !k.rollback && now < l->deadline);
	if (stop || !wait)
		return no_room(t, &j, k.rollback, k.unpark, err);
	/* In line, and still there: later restores of these GPUs let it go
	 * first where it could be served. */
	b->rec.state = CS_BOOKING_WAITING;
	b->rec.beat = cs_gpubook_ticket();
	b->rec.short_gpus = j.short_gpus;
	cs_gpubook_write(l->bookfd, b);
	say_waiting(l, t, &j, j.v == V_THEIRS ? inflight : l->deadline);
	if (dated)
		remember(l, t, &seen, j.v == V_THEIRS ? inflight : l->deadline, w);
	return 0;
}

static int take(cs_gpu_ledger *l, const cs_target *t, kind k, cs_error *err)
{
	if (!t->nneed && (t->need_none || l->ignore))
		return 0;
	if (!t->nneed) {
		/* No need listed, yet it may have one: where is not known. */
		judgement j = { .v = V_UNKNOWN };
		snprintf(j.why, sizeof(j.why), "which GPUs it restores onto, and what it needs there, is not known");
		return no_room(t, &j, k.rollback, k.unpark, err);
	}
	pthread_mutex_lock(&l->mu);
	if (l->bookfd < 0 && !l->book_err.message[0])
		open_book(l);
	if (l->bookfd < 0) {
		pthread_mutex_unlock(&l->mu);
		if (l->ignore)
			return 0; /* told to take the risk: the others cannot count it */
		return cs_error_set(err, CS_EPROC, l->book_err.hint[0] ? l->book_err.hint : NULL,
				    "%s of process %d (%s) %s: %s", k.unpark ? "unpark" : "restore", (int)t->pid,
				    t->comm, k.unpark ? "not started" : "not asked of the driver", l->book_err.message);
	}
	if (!l->opened)
		open_gpus(l);
	cs_booking b;
	new_booking(l, t, k.unpark, &b);
	double start = cs_now();
	look w = { 0 };
	int r;
	/* The book's lock keeps the other threads out of the GPU list too. */
	while ((r = attempt(l, t, &b, k, start, &w, err)) == 0) {
		pthread_mutex_unlock(&l->mu);
		/* a look through the driver's probe costs a context: one a second */
		struct timespec pause = { .tv_sec = 0, .tv_nsec = 250000000L };
		if (l->probed)
			pause = (struct timespec){ .tv_sec = 1, .tv_nsec = 0 };
		nanosleep(&pause, NULL);
		pthread_mutex_lock(&l->mu);
	}
	pthread_mutex_unlock(&l->mu);
	cs_gpubook_drop(l->bookfd, &b); /* a place in line, when refused */
	return r < 0 ? r : 0;
}

int cs_gpu_ledger_take(cs_gpu_ledger *l, const cs_target *t, bool rollback, cs_error *err)
{
	return take(l, t, (kind){ .rollback = rollback }, err);
}

static struct ledger_held *held_of(cs_gpu_ledger *l, const cs_target *t)
{
	for (size_t i = 0; i < l->nheld; i++)
		if (l->held[i].t == t)
			return &l->held[i];
	return NULL;
}

/* An unpark's need: on each GPU t restores onto, what its park holds
 * (bytes, where known) at most. */
static void unpark_needs(cs_target *t, unsigned long long bytes)
{
	for (unsigned k = 0; bytes && k < t->nneed; k++)
		if (!t->need[k].bytes || t->need[k].bytes > bytes)
			t->need[k].bytes = bytes;
}

int cs_gpu_ledger_take_unpark(cs_gpu_ledger *l, cs_target *t, unsigned long long bytes, bool rollback, cs_error *err)
{
	pthread_mutex_lock(&l->held_mu);
	bool booked = held_of(l, t) != NULL; /* by its restore, just before */
	pthread_mutex_unlock(&l->held_mu);
	if (booked)
		return 0;
	pthread_mutex_lock(&l->mu);
	if (!l->opened)
		open_gpus(l);
	/* A process left parked has no restore's need: the GPUs it can see. */
	if (!t->nneed && !t->need_none)
		cs_restore_needs(t, bytes, NULL, 0, l->gpus, l->ngpus);
	pthread_mutex_unlock(&l->mu);
	unpark_needs(t, bytes);
	return take(l, t, (kind){ .rollback = rollback, .unpark = true }, err);
}

void cs_gpu_ledger_rollback_needs(cs_gpu_ledger *l, cs_target *t)
{
	pthread_mutex_lock(&l->mu);
	if (!l->opened)
		open_gpus(l);
	/* What its checkpoint just moved is measured, 0 included, where its
	 * resident memory could be read after it. */
	t->gpu_bytes_known = t->rss_after > 0;
	cs_restore_needs(t, t->bytes ? t->bytes : t->gpu_bytes, NULL, 0, l->gpus, l->ngpus);
	pthread_mutex_unlock(&l->mu);
}

/* Ends t's booking: dropped, or, while a call given up on may still act
 * (pending), kept for as long as this process lives, then an orphan. */
static void end(cs_gpu_ledger *l, const cs_target *t, bool pending)
{
	pthread_mutex_lock(&l->held_mu);
	struct ledger_held *h = held_of(l, t);
	if (h) {
		if (pending)
			cs_gpubook_keep(&h->b);
		else
			cs_gpubook_drop(l->bookfd, &h->b);
		*h = l->held[--l->nheld];
	}
	pthread_mutex_unlock(&l->held_mu);
}

void cs_gpu_ledger_give(cs_gpu_ledger *l, const cs_target *t, int res)
{
	/* Not answered: the driver may still carry the restore out. */
	end(l, t, res == CS_CU_TIMED_OUT || res == CS_CU_INTERRUPTED);
}

void cs_gpu_ledger_to_unpark(cs_gpu_ledger *l, const cs_target *t, unsigned long long bytes, bool left)
{
	/* Under the book's lock where it can be had: readers then see the
	 * booking as before or as after (either counts what is to come). */
	pthread_mutex_lock(&l->mu);
	cs_error e = { 0 };
	_cleanup_close_ int lk = l->bookfd < 0 ? -1 : cs_gpubook_lock(l->bookfd, cs_now() + BOOK_LOCK_WAIT_S, NULL, &e);
	(void)lk; /* held until the end of this function */
	pthread_mutex_lock(&l->held_mu);
	struct ledger_held *h = held_of(l, t);
	if (h) {
		cs_booking_rec *rec = &h->b.rec;
		rec->state = CS_BOOKING_UNPARK;
		/* what the unpark brings back, where it is known; the whole need
		 * (the restore's part counted twice) where not */
		for (unsigned k = 0; bytes && k < rec->ngpu; k++)
			if (!rec->gpu[k].bytes || rec->gpu[k].bytes > bytes)
				rec->gpu[k].bytes = bytes;
		size_t len = strlen(rec->who);
		snprintf(rec->who + len, sizeof(rec->who) - len, "%s", len < 80 ? ", unparking" : "");
		rec->until = orphan_bound(l, t);
		cs_gpubook_write(l->bookfd, &h->b);
	}
	if (h && left) {
		cs_gpubook_keep(&h->b);
		*h = l->held[--l->nheld];
	}
	pthread_mutex_unlock(&l->held_mu);
	pthread_mutex_unlock(&l->mu);
}

void cs_gpu_ledger_unparked(cs_gpu_ledger *l, const cs_target *t, bool pending)
{
	end(l, t, pending);
}

void cs_gpu_ledger_settle(pid_t target, unsigned long long start)
{
	cs_error e = { 0 };
	_cleanup_close_ int fd = cs_gpubook_open(NULL, &e);
	_cleanup_close_ int lk = fd < 0 ? -1 : cs_gpubook_lock(fd, cs_now() + BOOK_LOCK_WAIT_S, NULL, &e);
	if (lk >= 0)
		cs_gpubook_settle(fd, target, start, cs_proc_pidns());
}
