/* A park into files: the device memory goes through pinned staging buffers
 * straight into the files cudasnap passed (park_find.h gives the layout),
 * never into the process's memory, and comes back the same way. Each file
 * has PARK_LANES threads of its own, each with its staging, taking its
 * pieces in turn: with O_DIRECT where the file system takes it, else
 * buffered, each piece
 * flushed and dropped from the page cache once written, so that the
 * process's memory cgroup is charged with the staging alone. Every piece
 * carries a MAC under a random key of the park: GMAC (AES-GCM over the
 * piece as its associated data, the piece's number its nonce) where the
 * CPU has AES-NI and PCLMUL, else Poly1305 with a one-time key derived
 * with keyed BLAKE2b from the park's key and the piece's number. The key
 * and the MACs stay in the process's own memory (which the checkpoint
 * keeps), never in the files: whoever can write the files but not read
 * the process's memory cannot make a piece that passes, and a file
 * changed, cut short, swapped for another or for another park's is seen
 * before any of it reaches the device. An unkeyed checksum would not do:
 * anyone who can read a file can write another with the same sum. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>
#include <sys/random.h>

#include "park.h"
#include "park_find.h"

_Static_assert(PARK_REQ_FILES_MAX == PARK_FILES_MAX, "one bound on the files");
_Static_assert(PARK_LANES >= 1 && PARK_LANES <= 4, "one to four threads for each file");

int park_files_check(struct park_files *f, bool out, char *why, size_t size)
{
	for (unsigned i = 0; i < f->n; i++) {
		struct stat st;
		int fl = fcntl(f->fd[i], F_GETFL);
		int mode = fl & O_ACCMODE;
		if (fl < 0 || fstat(f->fd[i], &st) != 0 || !S_ISREG(st.st_mode) ||
		    (out ? mode == O_RDONLY : mode == O_WRONLY)) {
			snprintf(why, size, "file %u is not a regular file open for %s", i,
				 out ? "writing" : "reading");
			return -1;
		}
		/* The probe: the file system takes O_DIRECT or says so here. */
		f->direct[i] = (fl & O_DIRECT) || fcntl(f->fd[i], F_SETFL, fl | O_DIRECT) == 0;
	}
	return 0;
}

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_ok = -1;
static bool poly1305_only;

/* Read as the library loads: getenv is not thread-safe, and parks run on
 * the interposer's own thread. CUDASNAP_PARK_MAC=poly1305 takes Poly1305
 * where GMAC could be had (for the tests of both). */
__attribute__((constructor)) static void mac_setting(void)
{
	const char *mac = getenv("CUDASNAP_PARK_MAC");
	poly1305_only = mac && strcmp(mac, "poly1305") == 0;
}

static void start_sodium(void)
{
	/* it picks the fastest code for this CPU */
	sodium_ok = sodium_init();
}

struct park_tags *park_tags_new(unsigned long long pieces)
{
	struct park_tags *t = calloc(1, sizeof(*t) + (pieces ? pieces : 1) * sizeof(t->tag[0]));
	if (t == NULL)
		return NULL;
	/* The key first: libsodium, started where no random bytes can be had,
	 * would end the program. */
	if (getrandom(t->key, sizeof(t->key), 0) != (ssize_t)sizeof(t->key)) {
		free(t);
		return NULL;
	}
	pthread_once(&sodium_once, start_sodium);
	if (sodium_ok < 0) {
		park_tags_free(t);
		return NULL;
	}
	t->pieces = pieces;
	/* GMAC runs about half as fast again as Poly1305 where it can */
	t->gcm = crypto_aead_aes256gcm_is_available() != 0 && !poly1305_only;
	return t;
}

bool park_tags_usable(const struct park_tags *t)
{
	/* a checkpoint restored on a CPU without AES-NI cannot check GMAC */
	return t != NULL && (!t->gcm || crypto_aead_aes256gcm_is_available() != 0);
}

void park_tags_free(struct park_tags *t)
{
	if (t == NULL)
		return;
	sodium_memzero(t->key, sizeof(t->key));
	free(t);
}

/* Piece k's number, little-endian, as a GCM nonce (unique under the
 * park's key). */
static void piece_nonce(unsigned long long k, unsigned char n[crypto_aead_aes256gcm_NPUBBYTES])
{
	memset(n, 0, crypto_aead_aes256gcm_NPUBBYTES);
	for (int i = 0; i < 8; i++)
		n[i] = (unsigned char)(k >> (8 * i));
}

/* Piece k's one-time Poly1305 key: a key used for one message only. */
static void piece_key(const struct park_tags *t, unsigned long long k,
		      unsigned char out[crypto_onetimeauth_poly1305_KEYBYTES])
{
	unsigned char n[crypto_aead_aes256gcm_NPUBBYTES];
	piece_nonce(k, n);
	crypto_generichash_blake2b(out, crypto_onetimeauth_poly1305_KEYBYTES, n, 8, t->key, sizeof(t->key));
}

_Static_assert(sizeof(((struct park_tags *)0)->tag[0]) == crypto_onetimeauth_poly1305_BYTES, "one tag size");
_Static_assert(sizeof(((struct park_tags *)0)->key) == crypto_generichash_blake2b_KEYBYTES, "one key size");

_Static_assert(sizeof(((struct park_tags *)0)->tag[0]) == crypto_aead_aes256gcm_ABYTES, "one GCM tag size");
_Static_assert(sizeof(((struct park_tags *)0)->key) == crypto_aead_aes256gcm_KEYBYTES, "one GCM key size");

static void tag_piece(const struct park_tags *t, unsigned long long k, const unsigned char *buf, size_t len,
		      unsigned char *tag)
{
	if (t->gcm) {
		unsigned char n[crypto_aead_aes256gcm_NPUBBYTES], none[1];
		unsigned long long tlen;
		piece_nonce(k, n);
		/* nothing encrypted: the piece is the associated data */
		crypto_aead_aes256gcm_encrypt_detached(none, tag, &tlen, none, 0, buf, len, NULL, n, t->key);
		return;
	}
	unsigned char otk[crypto_onetimeauth_poly1305_KEYBYTES];
	piece_key(t, k, otk);
	crypto_onetimeauth_poly1305(tag, buf, len, otk);
	sodium_memzero(otk, sizeof(otk));
}

static bool piece_ok(const struct park_tags *t, unsigned long long k, const unsigned char *buf, size_t len)
{
	if (k >= t->pieces)
		return false;
	if (t->gcm) {
		unsigned char n[crypto_aead_aes256gcm_NPUBBYTES], none[1] = { 0 };
		piece_nonce(k, n);
		return crypto_aead_aes256gcm_decrypt_detached(none, NULL, none, 0, t->tag[k], buf, len, n, t->key) == 0;
	}
	unsigned char otk[crypto_onetimeauth_poly1305_KEYBYTES];
	piece_key(t, k, otk);
	bool ok = crypto_onetimeauth_poly1305_verify(t->tag[k], buf, len, otk) == 0;
	sodium_memzero(otk, sizeof(otk));
	return ok;
}

void park_files_close(struct park_files *f)
{
	for (unsigned i = 0; i < f->n; i++)
		if (f->fd[i] >= 0)
			close(f->fd[i]);
	f->n = 0;
	if (f->has_room)
		close(f->room);
	f->has_room = false;
}

/* The room a park writes into: cudasnap reserves each file's space from
 * its start on while the park writes it (every page of a memory-backed
 * file taken by cudasnap is charged to cudasnap's memory cgroup, and one
 * the park wrote first would be charged to the process's), and holds the
 * write end of f->room open until it is done. A file's size is how far
 * its space is reserved: the reservation grows it, and a write lands
 * only below it. A cudasnap that stopped (stopped, or ended) has that
 * long before: the park fails. */
#define ROOM_STALL_MS 30000
#define ROOM_POLL_MS 2

/* Whether cudasnap's reservation has ended: its end of the pipe closed
 * (waiting up to ms for it). A failed poll says nothing. */
static bool room_over(const struct park_files *f, int ms)
{
	struct pollfd p = { .fd = f->room, .events = POLLIN };
	return poll(&p, 1, ms) > 0 && (p.revents & (POLLHUP | POLLIN | POLLERR | POLLNVAL));
}

/* How far the reservation has got in all the files: what tells it still
 * goes on. */
static unsigned long long room_reserved(const struct park_files *f)
{
	unsigned long long sum = 0;
	struct stat st;
	for (unsigned i = 0; i < f->n; i++)
		if (fstat(f->fd[i], &st) == 0)
			sum += (unsigned long long)st.st_size;
	return sum;
}

/* Waits while the reservation goes on, until ready() (file i, end) or it
 * ends or makes no progress for ROOM_STALL_MS: 0, or EFBIG (it ended, and
 * ready() is false: the process holds more than cudasnap reserved for),
 * ETIMEDOUT, or fstat's errno. */
static int room_wait(const struct park_files *f, unsigned i, unsigned long long end,
		     int (*ready)(const struct park_files *, unsigned, unsigned long long))
{
	unsigned long long seen = 0;
	double stalled = park_now();
	for (;;) {
		int rc = ready(f, i, end);
		if (rc <= 0)
			return -rc;
		unsigned long long now = room_reserved(f);
		if (now != seen) {
			seen = now;
			stalled = park_now();
		}
		if (room_over(f, ROOM_POLL_MS))
			return (rc = ready(f, i, end)) <= 0 ? -rc : EFBIG;
		if ((park_now() - stalled) * 1000 > ROOM_STALL_MS)
			return ETIMEDOUT;
	}
}

/* Bytes [0, end) of file i reserved: 0, 1 not yet, or -errno. */
static int reserved_to(const struct park_files *f, unsigned i, unsigned long long end)
{
	struct stat st;
	if (fstat(f->fd[i], &st) != 0)
		return -errno;
	return (unsigned long long)st.st_size >= end ? 0 : 1;
}

/* Never ready: waits for the reservation's end. */
static int never(const struct park_files *f, unsigned i, unsigned long long end)
{
	(void)f, (void)i, (void)end;
	return 1;
}

/* Whether bytes [0, end) of file i are reserved, waiting for the
 * reservation while it goes on: 0, or an errno. */
static int room_for(const struct park_files *f, unsigned i, unsigned long long end)
{
	return room_wait(f, i, end, reserved_to);
}

/* A park's file is cut to its size once the reservation, which would
 * grow it, has ended: 0, or ETIMEDOUT. */
static int room_done(const struct park_files *f)
{
	int rc = room_wait(f, 0, 0, never);
	return rc == EFBIG ? 0 : rc;
}

/* Buffered from now on: the file system refused an O_DIRECT transfer. The
 * other lane of the file may have switched it already: whether to try
 * again. */
static pthread_mutex_t direct_mu = PTHREAD_MUTEX_INITIALIZER;
static bool undirect(struct park_files *f, unsigned i)
{
	pthread_mutex_lock(&direct_mu);
	int fl = fcntl(f->fd[i], F_GETFL);
	bool again = fl >= 0 && (!(fl & O_DIRECT) || fcntl(f->fd[i], F_SETFL, fl & ~O_DIRECT) == 0);
	if (again)
		f->direct[i] = false;
	pthread_mutex_unlock(&direct_mu);
	return again;
}

static bool is_direct(struct park_files *f, unsigned i)
{
	pthread_mutex_lock(&direct_mu);
	bool d = f->direct[i];
	pthread_mutex_unlock(&direct_mu);
	return d;
}

/* pwrite or pread of all of len bytes at off: 0 or an errno (EIO for a
 * file that ends before). */
static int transfer(struct park_files *f, unsigned i, bool out, unsigned char *p, size_t len, off_t off)
{
	size_t done = 0;
	bool retried = false;
	while (done < len) {
		ssize_t n = out ? pwrite(f->fd[i], p + done, len - done, off + (off_t)done) :
				  pread(f->fd[i], p + done, len - done, off + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EINVAL && !retried && undirect(f, i)) {
			retried = true;
			continue;
		}
		if (n < 0)
			return errno;
		if (n == 0)
			return EIO;
		done += (size_t)n;
	}
	/* Buffered: written through now and out of the page cache, which
	 * would be charged to the process's memory cgroup. */
	if (!is_direct(f, i)) {
		if (out &&
		    sync_file_range(f->fd[i], off, (off_t)len,
				    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) !=
			    0)
			return errno;
		posix_fadvise(f->fd[i], off, (off_t)len, POSIX_FADV_DONTNEED);
	}
	return 0;
}

/* The allocation holding byte pos of the memory laid end to end (host_off
 * ascending). */
static size_t alloc_at(unsigned long long pos)
{
	size_t lo = 0, hi = park_tab.n;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (park_tab.a[mid].host_off <= pos)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* Between the staging buffer and the allocations [0, limit) that bytes
 * [pos, pos + len) of the memory lie in. */
static CUresult copy_piece(const struct park_real *r, bool out, unsigned char *buf, unsigned long long pos, size_t len,
			   size_t limit)
{
	size_t done = 0;
	for (size_t i = alloc_at(pos); done < len && i < park_tab.n; i++) {
		struct park_alloc *a = &park_tab.a[i];
		unsigned long long at = pos + done - a->host_off;
		size_t n = a->size - at < len - done ? (size_t)(a->size - at) : len - done;
		if (i < limit) {
			CUresult rc = r->ctx_set(a->ctx);
			if (rc == CU_OK)
				rc = out ? r->dtoh(buf + done, a->va + at, n) : r->htod(a->va + at, buf + done, n);
			if (rc != CU_OK)
				return rc;
		}
		done += n;
	}
	return CU_OK;
}

struct job {
	const struct park_real *r;
	struct park_files *f;
	struct park_tags *tags;
	bool out;
	size_t limit;
	unsigned long long total;
	atomic_int failed;
	atomic_uint busy[PARK_FILES_MAX]; /* each file's lanes still writing */
	pthread_mutex_t mu;
};

/* The first failure is the one answered. */
static void failed(struct job *j, const char *stage, unsigned file, unsigned long long piece, int err, CUresult cu)
{
	pthread_mutex_lock(&j->mu);
	if (!atomic_exchange(&j->failed, 1)) {
		j->f->stage = stage;
		j->f->file = file;
		j->f->piece = piece;
		j->f->err = err;
		j->f->cu = cu;
	}
	pthread_mutex_unlock(&j->mu);
}

/* One piece out (copied, summed, written) or in (read, checked, copied). */
static void one_piece(struct job *j, unsigned i, unsigned long long k, unsigned char *buf)
{
	unsigned long long pos = k * PARK_PIECE;
	size_t len = j->total - pos < PARK_PIECE ? (size_t)(j->total - pos) : PARK_PIECE;
	off_t off = (off_t)(k / j->f->n * PARK_PIECE);
	CUresult rc;
	int err;
	if (j->out) {
		if ((rc = copy_piece(j->r, true, buf, pos, len, j->limit)) != CU_OK)
			return failed(j, "copy", i, k, 0, rc);
		tag_piece(j->tags, k, buf, len, j->tags->tag[k]);
		if (j->f->has_room && (err = room_for(j->f, i, (unsigned long long)off + len)) != 0)
			return failed(j, "room", i, k, err, CU_OK);
		if ((err = transfer(j->f, i, true, buf, len, off)) != 0)
			return failed(j, "write", i, k, err, CU_OK);
		return;
	}
	if ((err = transfer(j->f, i, false, buf, len, off)) != 0)
		return failed(j, "read", i, k, err, CU_OK);
	if (!piece_ok(j->tags, k, buf, len))
		return failed(j, "verify", i, k, 0, CU_OK);
	if ((rc = copy_piece(j->r, false, buf, pos, len, j->limit)) != CU_OK)
		return failed(j, "copy", i, k, 0, rc);
}

/* File i's pieces first, first + n * lanes, ... through a staging buffer
 * of this thread's own. */
static void move_pieces(struct job *j, unsigned i, unsigned long long first, unsigned lanes)
{
	struct park_stage st = { .size = park_files_stage(j->total) };
	/* pinning takes a current context: the first allocation's */
	CUresult rc = j->r->ctx_set(park_tab.a[0].ctx);
	if (rc == CU_OK)
		rc = park_stage_get(j->r, &st);
	if (rc != CU_OK) {
		park_stage_drop(j->r, &st); /* mapped, and pinning it failed */
		failed(j, "staging", i, first, 0, rc);
		return;
	}
	for (unsigned long long k = first; k < park_pieces(j->total) && !atomic_load(&j->failed);
	     k += (unsigned long long)j->f->n * lanes)
		one_piece(j, i, k, st.p);
	park_stage_drop(j->r, &st);
}

/* One lane of file i: its pieces i + n * lane, then every n * lanes. At a
 * park, the file's last lane to finish leaves the file exactly its part
 * (cudasnap sized the files from what the process held before its calls
 * were held; it may have freed or allocated since) and on the storage,
 * beside the other files' lanes. */
static void run_lane(struct job *j, unsigned i, unsigned lane, unsigned lanes)
{
	unsigned long long first = i + (unsigned long long)j->f->n * lane;
	if (first < park_pieces(j->total))
		move_pieces(j, i, first, lanes);
	if (!j->out || atomic_fetch_sub(&j->busy[i], 1) != 1 || atomic_load(&j->failed))
		return;
	int err = j->f->has_room ? room_done(j->f) : 0;
	if (err != 0)
		failed(j, "room", i, 0, err, CU_OK);
	else if (ftruncate(j->f->fd[i], (off_t)park_file_size(j->total, j->f->n, i)) != 0 ||
		 fdatasync(j->f->fd[i]) != 0)
		failed(j, "flush", i, 0, errno, CU_OK);
}

struct one_lane {
	struct job *j;
	unsigned i, lane, lanes;
};

static void *lane_thread(void *arg)
{
	struct one_lane *o = arg;
	park_gate_exempt();
	run_lane(o->j, o->i, o->lane, o->lanes);
	return NULL;
}

int park_files_move(const struct park_real *r, struct park_files *f, struct park_tags *tags, bool out, size_t limit)
{
	struct job j = { .r = r, .f = f, .tags = tags, .out = out, .limit = limit };
	atomic_init(&j.failed, 0);
	pthread_mutex_init(&j.mu, NULL);
	for (size_t i = 0; i < park_tab.n; i++)
		j.total += park_tab.a[i].size;
	f->stage = NULL;
	unsigned lanes = PARK_LANES, workers = f->n * lanes, started = 0, w = 1;
	for (unsigned i = 0; i < PARK_FILES_MAX; i++)
		atomic_init(&j.busy[i], lanes);
	pthread_t t[PARK_FILES_MAX * PARK_LANES];
	struct one_lane o[PARK_FILES_MAX * PARK_LANES];
	/* As many threads as can be had: a pids.max of the process's cgroup
	 * just above its own threads refuses some. The lanes no thread took,
	 * this thread takes in turn: slower, the same result. */
	for (; w < workers; w++) {
		o[w] = (struct one_lane){ &j, w % f->n, w / f->n, lanes };
		if (pthread_create(&t[started], NULL, lane_thread, &o[w]) != 0)
			break;
		started++;
	}
	if (f->n)
		run_lane(&j, 0, 0, lanes); /* this thread takes the first file's first lane */
	for (; w < workers && !atomic_load(&j.failed); w++)
		run_lane(&j, w % f->n, w / f->n, lanes);
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&j.mu);
	f->bytes = j.total;
	if (out && f->has_room) { /* written (or not): the room is no more of use */
		close(f->room);
		f->has_room = false;
	}
	return atomic_load(&j.failed) ? -1 : 0;
}

unsigned park_files_direct(const struct park_files *f)
{
	unsigned n = 0;
	for (unsigned i = 0; i < f->n; i++)
		n += f->direct[i];
	return n;
}
