/* Park and unpark. A park holds the program's driver calls at the gate,
 * waits for its GPU work to finish, copies every backed allocation into
 * host memory and releases the physical memory, keeping the address
 * ranges. The host memory is obtained as fast as the machine gives it:
 * transparent huge pages that several threads fill through pinned staging
 * buffers of their own (or, to keep the copy pinned, populated and pinned
 * in chunks while other threads already copy into theirs). An unpark maps new
 * physical memory at the same addresses, copies the data back and opens
 * the gate. Either one that fails half-way undoes what it did. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "park.h"
#include "park_find.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define CHUNK (256ull << 20)
/* Threads that populate, pin and copy: more than 4 populate slower (the
 * kernel's page allocation contends). */
#define WORKERS 4
/* Threads that copy back a host copy that is not pinned, each through a
 * pinned staging buffer of its own: the CPU's copy into it and the DMA out
 * of it alternate in each thread, and overlap across threads. */
#define BOUNCERS 12
#define STAGE PARK_PIECE
#define HUGE (2ull << 20)

struct chunk {
	size_t alloc; /* index in park_tab */
	size_t off; /* in the allocation */
	size_t len;
	size_t host_off;
	bool registered;
};

static pthread_mutex_t move_mu = PTHREAD_MUTEX_INITIALIZER;
static bool parked;
static unsigned char *host;
static size_t host_len;
static struct chunk *chunks;
static size_t nchunks;
static unsigned long long parked_bytes;
/* A park into files: the files while the park holds them, and each
 * piece's MAC (files.c) until the memory is back. */
static bool in_files;
static struct park_files files_held;
static unsigned files_count; /* how many the memory is in */
/* The allocations parked: all of them, but after a release that failed
 * and whose undo could not read them back, those before it. */
static size_t parked_upto;
static struct park_tags *tags;

/* A child of fork() has no park: its parent's host copy is left to it
 * untouched (a park may have been half way through making it). */
static void child_forgets(void)
{
	move_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	parked = false;
	host = NULL;
	chunks = NULL;
	host_len = nchunks = 0;
	parked_bytes = 0;
	park_files_close(&files_held);
	in_files = false;
	tags = NULL;
}

__attribute__((constructor)) static void move_atfork(void)
{
	pthread_atfork(NULL, NULL, child_forgets);
}

bool park_is_parked(void)
{
	pthread_mutex_lock(&move_mu);
	bool p = parked;
	pthread_mutex_unlock(&move_mu);
	return p;
}

enum pass { PASS_OUT, PASS_IN, PASS_UNPIN };

struct work {
	const struct park_real *r;
	enum pass pass;
	bool staged; /* out through staging: the copy is not pinned */
	size_t limit; /* only the chunks of the allocations before it */
	atomic_size_t next;
	atomic_int failed;
	CUresult rc;
	pthread_mutex_t mu;
};

static int populate(unsigned char *p, size_t len)
{
	if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
		return 0;
	if (errno != EINVAL)
		return -1;
	long page = sysconf(_SC_PAGESIZE); /* a kernel before 5.14 */
	for (size_t o = 0; o < len; o += (size_t)page)
		p[o] = 0;
	return 0;
}

CUresult park_stage_get(const struct park_real *r, struct park_stage *st)
{
	if (st->pinned)
		return CU_OK;
	if (st->size == 0 || st->size > STAGE)
		st->size = STAGE;
	if (st->p == NULL) {
		void *p = mmap(NULL, st->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return CU_ERR_OUT_OF_MEMORY;
		st->p = p;
	}
	CUresult rc = r->host_register(st->p, st->size, 0);
	st->pinned = rc == CU_OK;
	return rc;
}

void park_stage_drop(const struct park_real *r, struct park_stage *st)
{
	if (st->pinned)
		r->host_unregister(st->p);
	if (st->p)
		munmap(st->p, st->size);
	*st = (struct park_stage){ 0 };
}

/* Back to the device from a host copy that is not pinned: pinning it again
 * ran at 23-27 GB/s on the H200, well below the copy's 55 GB/s. */
static CUresult bounce_in(const struct park_real *r, struct park_stage *st, CUdeviceptr dst, const unsigned char *src,
			  size_t len)
{
	CUresult rc = park_stage_get(r, st);
	for (size_t off = 0; rc == CU_OK && off < len; off += STAGE) {
		size_t n = len - off < STAGE ? len - off : STAGE;
		memcpy(st->p, src + off, n);
		rc = r->htod(dst + off, st->p, n); /* from pinned memory: done when it returns */
	}
	return rc;
}

/* Out into host memory that is not pinned (its pages come as the copy
 * touches them): on the H200, 64 GiB with 8-12 threads in 3.6-4.7 s, where
 * populating, pinning and copying with 4 took 6.5-12.5 s and unpinning
 * after 1.1-1.3 s more (probe of 2026-12-04). */
static CUresult bounce_out(const struct park_real *r, struct park_stage *st, unsigned char *dst, CUdeviceptr src,
			   size_t len)
{
	CUresult rc = park_stage_get(r, st);
	for (size_t off = 0; rc == CU_OK && off < len; off += STAGE) {
		size_t n = len - off < STAGE ? len - off : STAGE;
		rc = r->dtoh(st->p, src + off, n); /* into pinned memory: done when it returns */
		if (rc == CU_OK)
			memcpy(dst + off, st->p, n);
	}
	return rc;
}

static CUresult move_chunk(struct work *w, struct chunk *c, struct park_stage *st)
{
	const struct park_real *r = w->r;
	struct park_alloc *a = &park_tab.a[c->alloc];
	unsigned char *h = host + c->host_off;
	CUresult rc = r->ctx_set(a->ctx);
	if (rc != CU_OK)
		return rc;
	if (w->pass == PASS_UNPIN) {
		if (c->registered)
			r->host_unregister(h);
		c->registered = false;
		return CU_OK;
	}
	if (w->pass == PASS_IN && !c->registered)
		return bounce_in(r, st, a->va + c->off, h, c->len);
	if (w->pass == PASS_OUT && w->staged)
		return bounce_out(r, st, h, a->va + c->off, c->len);
	if (w->pass == PASS_OUT && populate(h, c->len) != 0)
		return CU_ERR_OUT_OF_MEMORY;
	if (!c->registered) {
		rc = r->host_register(h, c->len, 0);
		if (rc != CU_OK)
			return rc;
		c->registered = true;
	}
	if (w->pass == PASS_OUT)
		return r->dtoh(h, a->va + c->off, c->len);
	return r->htod(a->va + c->off, h, c->len);
}

static void *worker(void *arg)
{
	struct work *w = arg;
	struct park_stage st = { 0 };
	park_gate_exempt();
	for (;;) {
		size_t i = atomic_fetch_add(&w->next, 1);
		if (i >= nchunks || atomic_load(&w->failed))
			break;
		if (chunks[i].alloc >= w->limit)
			continue;
		CUresult rc = move_chunk(w, &chunks[i], &st);
		if (rc != CU_OK && !atomic_exchange(&w->failed, 1))
			w->rc = rc;
	}
	park_stage_drop(w->r, &st);
	return NULL;
}

/* Moves the chunks of the allocations [0, limit), out (staged: through
 * staging, into memory left unpinned) or back (or unpins them), with up to
 * WORKERS threads, BOUNCERS through staging. */
static CUresult move_all(const struct park_real *r, enum pass pass, bool staged, size_t limit)
{
	struct work w = { .r = r, .pass = pass, .staged = staged && pass == PASS_OUT, .limit = limit };
	atomic_init(&w.next, 0);
	atomic_init(&w.failed, 0);
	pthread_t t[BOUNCERS > WORKERS ? BOUNCERS : WORKERS];
	size_t most = WORKERS;
	if (pass == PASS_IN || w.staged) {
		/* staging of at most 1/16 of the copy on top of it (a memory limit
		 * that fits the copy must fit the unpark too) */
		most = (size_t)(parked_bytes / (16 * STAGE));
		most = most < 1 ? 1 : most > BOUNCERS ? BOUNCERS : most;
	}
	size_t n = nchunks < most ? nchunks : most, started = 0;
	for (; started + 1 < n; started++)
		if (pthread_create(&t[started], NULL, worker, &w) != 0)
			break;
	worker(&w); /* this thread works too */
	for (size_t i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	return atomic_load(&w.failed) ? w.rc : CU_OK;
}

static void drop_chunks(const struct park_real *r)
{
	for (size_t i = 0; i < nchunks; i++)
		if (chunks[i].registered)
			r->host_unregister(host + chunks[i].host_off);
	if (host)
		munmap(host, host_len);
	free(chunks);
	host = NULL;
	chunks = NULL;
	host_len = nchunks = 0;
}

static int plan_chunks(void)
{
	size_t total = 0, n = 0;
	for (size_t i = 0; i < park_tab.n; i++) {
		total += park_tab.a[i].size;
		n += (park_tab.a[i].size + CHUNK - 1) / CHUNK;
	}
	chunks = calloc(n ? n : 1, sizeof(*chunks));
	host_len = (total + HUGE - 1) / HUGE * HUGE;
	host = host_len ?
		mmap(NULL, host_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) :
		NULL;
	if (chunks == NULL || host == MAP_FAILED) {
		host = NULL;
		free(chunks);
		chunks = NULL;
		return -1;
	}
	if (host)
		madvise(host, host_len, MADV_HUGEPAGE);
	size_t pos = 0;
	for (size_t i = 0; i < park_tab.n; i++) {
		park_tab.a[i].host_off = pos;
		for (size_t off = 0; off < park_tab.a[i].size; off += CHUNK) {
			size_t len = park_tab.a[i].size - off < CHUNK ? park_tab.a[i].size - off : CHUNK;
			chunks[nchunks++] = (struct chunk){ i, off, len, pos + off, false };
		}
		pos += park_tab.a[i].size;
	}
	parked_bytes = total;
	return 0;
}

/* Unmaps and releases the allocations [from, to) (their copies are safe). */
static CUresult release_range(const struct park_real *r, size_t from, size_t to, size_t *done)
{
	for (*done = from; *done < to; (*done)++) {
		struct park_alloc *a = &park_tab.a[*done];
		CUresult rc = r->mem_unmap(a->va, a->size);
		if (rc != CU_OK)
			return rc;
		r->mem_release(a->handle);
		a->handle = 0;
	}
	return CU_OK;
}

/* Maps new memory into the allocations [0, to); on failure unmaps what it
 * mapped and answers the error. */
static CUresult map_range(const struct park_real *r, size_t to)
{
	for (size_t i = 0; i < to; i++) {
		CUresult rc = park_map_new(&park_tab.a[i], r);
		if (rc == CU_OK)
			continue;
		size_t undone;
		release_range(r, 0, i, &undone);
		return rc;
	}
	return CU_OK;
}

static int fail(char *reply, size_t size, const char *what, CUresult rc)
{
	snprintf(reply, size, "error code=%d stage=%s\n", rc, what);
	return -1;
}

/* What it maps of other processes' memory (legacy CUDA IPC, VMM imports):
 * let go of before a park, or none of it is; a failure says in *lost the
 * exporter that no longer has its memory, if that is why. */
static CUresult detach_imports(const struct park_real *r, pid_t *lost)
{
	CUresult rc = park_ipc_detach_all(r);
	if (rc == CU_OK && (rc = park_vmm_detach_all(r, lost)) != CU_OK)
		park_vmm_attach_all(r, 0);
	if (rc != CU_OK)
		park_ipc_attach_all(r, 0);
	return rc;
}

/* A park undone: whatever was let go of is mapped again. */
static void attach_imports_again(const struct park_real *r)
{
	park_vmm_attach_all(r, 0);
	park_ipc_attach_all(r, 0);
}

/* After an unpark, all of it mapped again (its exporters asked for up to
 * wait_ms), or none of it is. */
static CUresult attach_imports(const struct park_real *r, unsigned wait_ms)
{
	pid_t lost = 0;
	CUresult rc = park_ipc_attach_all(r, wait_ms);
	if (rc == CU_OK && (rc = park_vmm_attach_all(r, wait_ms)) != CU_OK)
		park_vmm_detach_all(r, &lost);
	if (rc != CU_OK)
		park_ipc_detach_all(r);
	return rc;
}

/* What in the table stops a park of its own, park_tab.mu held; NULL:
 * nothing. */
static const char *why_not_table(void)
{
	if (park_tab.unparkable)
		return park_tab.unparkable;
	const char *backed = park_backed_why();
	if (backed)
		return backed;
	if (park_tab.legacy_imports)
		return "it imported memory through the driver's CUDA IPC";
	if (park_vmm_imports())
		return "it imported VMM memory through a file descriptor (cuMemImportFromShareableHandle) from a process "
		       "that runs no interposer, which nothing can carry";
	if (park_tab.pool_imports)
		return "it imported a memory pool of another process (cuMemPoolImportFromShareableHandle), which "
		       "neither the driver nor parking can give back";
	return NULL;
}

/* What stops a park of its own, park_tab.mu held; NULL: nothing (else the
 * reason, which may be written into buf). */
static const char *park_why_not(char *buf, size_t size)
{
	const char *why = why_not_table();
	if (why)
		return why;
	return park_bindings_check_within(buf, size) == 0 ? NULL : buf;
}

/* A park refused, undone or ended: the program's calls and new importers
 * (park_ipc_hold_out) come in again. */
static void open_again(void)
{
	park_ipc_let_in();
	park_gate_open();
}

static int refuse(char *reply, size_t size, pid_t importer, const char *why)
{
	open_again();
	snprintf(reply, size, "error code=%d stage=check importer=%d why=%s\n", CU_ERR_NOT_SUPPORTED, (int)importer,
		 why);
	return -1;
}

/* The gate closed, nothing inside, nothing stops the park, the program's
 * GPU work done: 0 with park_tab.mu held, or -1 with the answer written and
 * the gate open again. */
static int hold(const struct park_real *r, double t0, unsigned timeout_ms, char *reply, size_t size)
{
	long inside = 0;
	pid_t tid = 0;
	const char *cannot = NULL;
	if (park_gate_close(timeout_ms, &inside, &tid, &cannot) != 0) {
		if (cannot)
			snprintf(reply, size, "error code=%d stage=check importer=0 why=%s\n", CU_ERR_NOT_SUPPORTED,
				 cannot);
		else
			snprintf(reply, size, "error code=0 stage=quiesce busy=%ld tid=%d\n", inside, (int)tid);
		return -1;
	}
	pthread_mutex_lock(&park_tab.mu);
	char buf[256];
	pid_t importer = 0;
	const char *why = park_why_not(buf, sizeof(buf));
	if (why == NULL && park_ipc_hold_out(&importer))
		why = "another process maps its memory (CUDA IPC)";
	if (why) {
		pthread_mutex_unlock(&park_tab.mu);
		return refuse(reply, size, importer, why);
	}
	/* Bounded: GPU work that waits on a thread the gate holds never ends
	 * while it is held. */
	CUresult rc = park_sync_all(r, t0 + timeout_ms / 1000.0);
	if (rc == CU_OK)
		return 0;
	pthread_mutex_unlock(&park_tab.mu);
	open_again();
	if (rc == CU_ERR_NOT_READY)
		snprintf(reply, size,
			 "error code=%d stage=sync why=its GPU work did not finish within %.1f s while its driver calls "
			 "were held (work that waits on one of its own threads cannot)\n",
			 rc, timeout_ms / 1000.0);
	else
		snprintf(reply, size, "error code=%d stage=sync\n", rc);
	return -1;
}

static int unpark_locked(const struct park_real *r, unsigned timeout_ms, struct park_files *f, char *reply,
			 size_t size);

/* Copies out and releases everything, park_tab.mu held; on failure, as it
 * was. *stage: where it failed. */
static CUresult move_out(const struct park_real *r, bool unpin, double *t2, const char **stage)
{
	CUresult rc = plan_chunks() == 0 ? CU_OK : CU_ERR_OUT_OF_MEMORY;
	if (rc == CU_OK)
		rc = move_all(r, PASS_OUT, unpin, park_tab.n);
	*t2 = park_now();
	size_t released = 0;
	*stage = "copy";
	if (rc == CU_OK) {
		rc = release_range(r, 0, park_tab.n, &released);
		*stage = "release";
		/* Those released before the failure come back from their copies. */
		if (rc != CU_OK && released && map_range(r, released) == CU_OK)
			move_all(r, PASS_IN, false, released);
	}
	/* Kept pinned, the driver's checkpoint and restore carry the pinning
	 * (1.6-2 s for 64 GiB on the H200); a staged copy has nothing pinned,
	 * and the unpark copies it back through staging too. */
	if (rc == CU_OK && unpin)
		move_all(r, PASS_UNPIN, false, park_tab.n);
	if (rc != CU_OK)
		drop_chunks(r);
	return rc;
}

/* The allocations laid end to end, as the files take them; their bytes. */
static unsigned long long lay_out(void)
{
	unsigned long long pos = 0;
	for (size_t i = 0; i < park_tab.n; i++) {
		park_tab.a[i].host_off = pos;
		pos += park_tab.a[i].size;
	}
	return pos;
}

static int fail_files(char *reply, size_t size, const struct park_files *f)
{
	snprintf(reply, size, "error code=%d stage=%s file=%u piece=%llu errno=%d\n", f->cu,
		 f->stage ? f->stage : "files", f->file, f->piece, f->err);
	return -1;
}

/* Whether a file is not exactly its part of total bytes (cut short or
 * grown since the park; park_file_fits): the answer is written. */
static bool files_misfit(const struct park_files *f, unsigned long long total, char *reply, size_t size)
{
	for (unsigned i = 0; i < f->n; i++) {
		struct stat st = { 0 };
		unsigned long long want = park_file_size(total, f->n, i);
		if (fstat(f->fd[i], &st) != 0 || !park_file_fits((unsigned long long)st.st_size, total, f->n, i)) {
			snprintf(reply, size,
				 "error code=0 stage=files file=%u why=file %u holds %lld bytes of the %llu its part of %llu bytes takes\n",
				 i, i, (long long)st.st_size, want, total);
			return true;
		}
	}
	return false;
}

/* A release failed at allocation released and those before it could not
 * be read back (their memory is in the files alone): they stay parked, the
 * program's calls held, until an unpark reads them (cudasnap's rollback
 * tries at once). 1, with the answer written. */
static int parked_partly(const struct park_real *r, size_t released, bool mapped, struct park_tags *s,
			 unsigned long long total, CUresult rc, char *reply, size_t size)
{
	size_t undone;
	if (mapped)
		release_range(r, 0, released, &undone);
	tags = s;
	parked_bytes = total;
	parked_upto = released;
	snprintf(reply, size,
		 "error code=%d stage=undo bytes=%llu why=a release failed, and %zu allocations released before it "
		 "could not be read back from the files: they stay parked in them, its GPU work held\n",
		 rc, total, released);
	return 1;
}

/* Writes everything into the files and releases it, park_tab.mu held; on
 * failure, as it was, with the answer written (1: parked partly). */
static int move_out_files(const struct park_real *r, struct park_files *f, double *t2, char *reply, size_t size)
{
	unsigned long long total = lay_out(), pieces = park_pieces(total);
	struct park_tags *s = park_tags_new(pieces);
	*t2 = park_now();
	if (s == NULL)
		return fail(reply, size, "copy", CU_ERR_OUT_OF_MEMORY);
	if (park_files_move(r, f, s, true, park_tab.n) != 0) {
		park_tags_free(s);
		return fail_files(reply, size, f);
	}
	*t2 = park_now();
	size_t released = 0;
	CUresult rc = release_range(r, 0, park_tab.n, &released);
	if (rc != CU_OK) {
		/* Those released before the failure come back from the files. */
		bool mapped = released == 0 || map_range(r, released) == CU_OK;
		if (!mapped || (released && park_files_move(r, f, s, false, released) != 0))
			return parked_partly(r, released, mapped, s, total, rc, reply, size);
		park_tags_free(s);
		return fail(reply, size, "release", rc);
	}
	tags = s;
	parked_bytes = total;
	parked_upto = park_tab.n;
	return 0;
}

/* Into host memory (move_out), or into files: 0, or -1 with the answer
 * written and everything as it was. */
static int move_out_any(const struct park_real *r, bool unpin, struct park_files *f, double *t2, char *reply,
			size_t size)
{
	if (f && f->n)
		return move_out_files(r, f, t2, reply, size);
	const char *stage = "copy";
	CUresult rc = move_out(r, unpin, t2, &stage);
	parked_upto = park_tab.n;
	return rc == CU_OK ? 0 : fail(reply, size, stage, rc);
}

static int park_locked(const struct park_real *r, unsigned timeout_ms, bool unpin, struct park_files *f, char *reply,
		       size_t size)
{
	double t0 = park_now();
	if (hold(r, t0, timeout_ms, reply, size) != 0)
		return -1;
	/* What it maps of others goes first: their exporters park after it. */
	pid_t lost = 0;
	CUresult rc = detach_imports(r, &lost);
	if (rc != CU_OK && lost) {
		char why[160];
		snprintf(why, sizeof(why),
			 "the process %d it imported VMM memory from no longer has that memory to give again (or is "
			 "gone)",
			 (int)lost);
		pthread_mutex_unlock(&park_tab.mu);
		return refuse(reply, size, 0, why);
	}
	double t1 = park_now(), t2 = t1;
	int out = rc == CU_OK ? move_out_any(r, unpin, f, &t2, reply, size) : fail(reply, size, "copy", rc);
	double t3 = park_now();
	if (out > 0) { /* parked partly: held so, in its files */
		pthread_mutex_unlock(&park_tab.mu);
		parked = in_files = true;
		files_held = *f;
		files_count = f->n;
		f->n = 0;
		return -1;
	}
	if (out != 0) {
		attach_imports_again(r);
		pthread_mutex_unlock(&park_tab.mu);
		open_again();
		return -1;
	}
	pthread_mutex_unlock(&park_tab.mu);
	parked = true;
	if (f && f->n) {
		in_files = true;
		files_held = *f;
		files_count = f->n;
		f->n = 0; /* the park's now */
	}
	/* A library whose load began before the park may have bound a driver
	 * function past the gate meanwhile: the park is undone. */
	char why[256];
	if (park_bindings_check_within(why, sizeof(why)) != 0) {
		char back[256];
		if (unpark_locked(r, timeout_ms, NULL, back, sizeof(back)) != 0)
			return fail(reply, size, "undo", CU_ERR_UNKNOWN);
		drop_chunks(r);
		snprintf(reply, size, "error code=%d stage=check importer=0 why=%s\n", CU_ERR_NOT_SUPPORTED, why);
		return -1;
	}
	/* No device file of its own may be open at the checkpoint that follows
	 * (vmm_export.c); closed only now: a park that is refused or undone
	 * leaves the exports claimable, as they were. */
	park_vmm_close_unclaimed();
	double gb = parked_bytes / 1e9;
	snprintf(reply, size,
		 "ok parked=1 bytes=%llu allocs=%zu quiesce_s=%.4f copy_s=%.4f release_s=%.4f total_s=%.4f "
		 "copy_gbps=%.2f files=%u direct=%u\n",
		 parked_bytes, park_tab.n, t1 - t0, t2 - t1, t3 - t2, t3 - t0, t2 > t1 ? gb / (t2 - t1) : 0.0,
		 in_files ? files_count : 0, in_files ? park_files_direct(&files_held) : 0);
	return 0;
}

int park_park(unsigned timeout_ms, bool unpin, struct park_files *files, char *reply, size_t size)
{
	park_gate_exempt(); /* the interposer's own thread */
	const struct park_real *r = park_real();
	int rc = 0;
	if (r == NULL) {
		rc = fail(reply, size, "driver", CU_ERR_NOT_INITIALIZED);
	} else if (files && files->n && park_syscalls_changed()) {
		snprintf(reply, size,
			 "error code=%d stage=check importer=0 why=the program installed a seccomp filter since it "
			 "started, which may forbid the file I/O of a park into files\n",
			 CU_ERR_NOT_SUPPORTED);
		rc = -1;
	} else {
		pthread_mutex_lock(&move_mu);
		if (parked)
			snprintf(reply, size, "ok parked=1 bytes=%llu already=1 files=%u\n", parked_bytes,
				 in_files ? files_count : 0);
		else
			rc = park_locked(r, timeout_ms, unpin, files, reply, size);
		pthread_mutex_unlock(&move_mu);
	}
	if (files)
		park_files_close(files); /* none left when the park took them */
	return rc;
}

/* Back from the files, park_tab.mu held, everything mapped: 0, or -1 with
 * the answer written. */
static int move_in_files(const struct park_real *r, struct park_files *f, char *reply, size_t size)
{
	if (f == NULL || f->n == 0) {
		snprintf(reply, size,
			 "error code=0 stage=files why=its memory is in files, which the unpark must give (cudasnap "
			 "restore does)\n");
		return -1;
	}
	if (files_misfit(f, parked_bytes, reply, size))
		return -1;
	if (!park_tags_usable(tags)) {
		snprintf(reply, size,
			 "error code=0 stage=files why=the MACs of its files are GMAC, which this CPU (no AES-NI) "
			 "cannot check: restore it where the CPU has AES-NI\n");
		return -1;
	}
	if (park_files_move(r, f, tags, false, parked_upto) != 0)
		return fail_files(reply, size, f);
	return 0;
}

static int unpark_locked(const struct park_real *r, unsigned timeout_ms, struct park_files *f, char *reply, size_t size)
{
	double t0 = park_now();
	/* The files given, else those the park still holds. */
	struct park_files *src = f && f->n ? f : &files_held;
	if (in_files && src->n && src->n != files_count) {
		snprintf(reply, size, "error code=0 stage=files why=%u files given, its memory is in %u\n", src->n,
			 files_count);
		return -1;
	}
	pthread_mutex_lock(&park_tab.mu);
	CUresult rc = map_range(r, parked_upto);
	double t1 = park_now();
	const char *stage = "map";
	int copied = -1;
	if (rc == CU_OK) {
		stage = "copy";
		copied = in_files ? move_in_files(r, src, reply, size) : 0;
		rc = copied == 0 && !in_files ? move_all(r, PASS_IN, false, park_tab.n) : CU_OK;
		if (rc == CU_OK && copied == 0)
			rc = park_sync_all(r, park_now() + 60 + timeout_ms / 1000.0);
		/* Its exporters are back (they unpark first): attach again. */
		if (rc == CU_OK && copied == 0 && (rc = attach_imports(r, timeout_ms)) != CU_OK)
			stage = "attach";
		if (rc != CU_OK || copied != 0) { /* stays parked: the copies are whole */
			size_t undone;
			release_range(r, 0, parked_upto, &undone);
		}
	}
	double t2 = park_now();
	pthread_mutex_unlock(&park_tab.mu);
	if (copied != 0 && rc == CU_OK)
		return -1; /* answered by move_in_files */
	if (rc != CU_OK)
		return fail(reply, size, stage, rc);
	parked = false;
	if (in_files) {
		park_files_close(&files_held);
		park_tags_free(tags);
		tags = NULL;
		in_files = false;
	}
	open_again();
	double gb = parked_bytes / 1e9;
	snprintf(reply, size, "ok parked=0 bytes=%llu allocs=%zu map_s=%.4f copy_s=%.4f total_s=%.4f copy_gbps=%.2f\n",
		 parked_bytes, park_tab.n, t1 - t0, t2 - t1, t2 - t0, t2 > t1 ? gb / (t2 - t1) : 0.0);
	return 0;
}

int park_unpark(unsigned timeout_ms, struct park_files *files, char *reply, size_t size)
{
	/* the driver bounds its own calls; only an import waits, for its exporter */
	park_gate_exempt();
	const struct park_real *r = park_real();
	int rc = 0;
	if (r == NULL) {
		rc = fail(reply, size, "driver", CU_ERR_NOT_INITIALIZED);
	} else {
		pthread_mutex_lock(&move_mu);
		if (!parked)
			snprintf(reply, size, "ok parked=0 bytes=0 already=1\n");
		else
			rc = unpark_locked(r, timeout_ms, files, reply, size);
		pthread_mutex_unlock(&move_mu);
	}
	if (files)
		park_files_close(files);
	return rc;
}

void park_files_let_go(void)
{
	pthread_mutex_lock(&move_mu);
	park_files_close(&files_held);
	pthread_mutex_unlock(&move_mu);
}

void park_drop_host_copy(void)
{
	const struct park_real *r = park_real();
	pthread_mutex_lock(&move_mu);
	if (!parked && r)
		drop_chunks(r);
	pthread_mutex_unlock(&move_mu);
}

/* One line for cudasnap: what the process holds and whether it can park. */
void park_status(char *reply, size_t size)
{
	pthread_mutex_lock(&move_mu);
	/* The walk of the loaded objects outside the table's lock, which the
	 * program's allocations take: a status costs them nothing. */
	char buf[256];
	bool bound = park_bindings_check_within(buf, sizeof(buf)) == 0;
	pthread_mutex_lock(&park_tab.mu);
	unsigned exported = 0;
	for (size_t i = 0; i < park_tab.n; i++)
		exported += park_tab.a[i].exported;
	const char *why = why_not_table();
	why = why ? why : bound ? "" : buf;
	const char *gate = why[0] ? NULL : park_gate_refuses();
	why = gate ? gate : why;
	unsigned own_maps = 0;
	unsigned long long own_bytes = park_vmm_own_bytes(&own_maps);
	int len = snprintf(reply, size,
			   "ok version=2 pid=%d parked=%d parkable=%d bytes=%llu allocs=%zu gate=%s ipc_exports=%u "
			   "ipc_attached=%u ipc_imports=%u legacy_imports=%u vmm_imports=%u pool_imports=%u held=%u "
			   "unclaimed=%u files=%u own_vmm_bytes=%llu own_vmm_maps=%u",
			   (int)getpid(), parked, why[0] == 0, parked ? parked_bytes : park_tab.backed_bytes,
			   park_tab.n, park_gate_closed() ? "closed" : "open", exported, park_ipc_attached(NULL),
			   park_ipc_imports() + park_vmm_carried(), park_tab.legacy_imports, park_vmm_imports(),
			   park_tab.pool_imports, park_control_held(), park_vmm_unclaimed(), in_files ? files_count : 0,
			   own_bytes, own_maps);
	/* the reason last, to the end of the line */
	if (len >= 0 && (size_t)len < size)
		snprintf(reply + len, size - (size_t)len, "%s%s\n", why[0] ? " why=" : "", why);
	pthread_mutex_unlock(&park_tab.mu);
	pthread_mutex_unlock(&move_mu);
}
