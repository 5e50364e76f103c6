/* The ceiling of a directory's storage, to compare checkpoint and restore with: the rate at which N threads, one per
 * file, write G GiB with O_DIRECT (and sync it), then read it back and check it, with nothing else in the way.
 * Run: dio-ceiling DIR [--gib G] [--files N] [--chunk-mib M] [--buffered] [--keep] [--json]   (dio-ceiling --help) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* O_DIRECT wants offsets, lengths and buffers aligned to the device's logical block; 4 KiB covers every one in use. */
#define ALIGN 4096UL
#define MIB (1024UL * 1024UL)
#define GIB (1024.0 * 1024.0 * 1024.0)

struct worker {
	int index;
	int fd;
	char path[PATH_MAX];
	int created;
	uint64_t size;
	unsigned char *ref; /* the pattern, filled once; its page headers are stamped per chunk */
	unsigned char *rbuf; /* what a read brings back */
	int verify;
	double t0, t1;
	pthread_t thread;
};

static struct {
	const char *dir;
	double gib;
	long files;
	long chunk_mib;
	int buffered, keep, json;
} opt = { .gib = 4, .files = 8, .chunk_mib = 32 };

static int direct; /* the mode of this run */
static int dfd = -1;
static size_t chunk;
static pthread_mutex_t go_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go_cond = PTHREAD_COND_INITIALIZER;
static int go;
static atomic_int failed;
static volatile sig_atomic_t interrupted;
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static char err_msg[PATH_MAX + 256];

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: dio-ceiling DIR [--gib G] [--files N] [--chunk-mib M] [--buffered] [--keep] [--json]\n"
		"  Writes G GiB (default 4, fractions allowed) as N files (default 8) DIR/dio-ceiling.PID.I, one\n"
		"  thread per file, in chunks of M MiB (default 32) with O_DIRECT (buffered I/O where O_DIRECT is\n"
		"  refused, or with --buffered), syncs them, then reads them back and checks them.\n"
		"  --keep leaves the files in DIR; --json prints one JSON object instead of the lines.\n"
		"  GB/s is 1e9 bytes a second.\n");
}

/* The first error is the one reported (err 0: none to name); the others are its consequences, and every thread
 * stops at its next chunk. */
static void fail(const char *path, const char *what, int err)
{
	pthread_mutex_lock(&err_lock);
	if (!atomic_load(&failed))
		snprintf(err_msg, sizeof(err_msg), "%s: %s%s%s", path, what, err ? ": " : "", err ? strerror(err) : "");
	atomic_store(&failed, 1);
	pthread_mutex_unlock(&err_lock);
}

static int stopping(void)
{
	return atomic_load(&failed) || interrupted;
}

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* Each 4 KiB page starts with its file and offset, so that a page read back from the wrong place, or never written,
 * fails the check even though every chunk of a file comes from the same buffer. */
static void stamp(unsigned char *buf, size_t n, int index, uint64_t off)
{
	for (size_t p = 0; p < n; p += ALIGN) {
		uint64_t h = ((uint64_t)(index + 1) << 48) ^ (off + p) ^ 0x9e3779b97f4a7c15ULL;
		memcpy(buf + p, &h, sizeof(h));
	}
}

static void fill(unsigned char *buf, size_t n, int index)
{
	uint64_t x = 0x2545f4914f6cdd1dULL * (uint64_t)(index + 1);
	for (size_t i = 0; i + 8 <= n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, sizeof(x));
	}
}

static int write_chunk(struct worker *w, uint64_t off, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = pwrite(w->fd, w->ref + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fail(w->path, "write", errno);
			return -1;
		}
		/* A short direct write means the storage ran out; the rest, now unaligned, would only fail with EINVAL. */
		if (r == 0 || (direct && (size_t)r < n - done)) {
			fail(w->path, "short write", ENOSPC);
			return -1;
		}
		done += (size_t)r;
	}
	return 0;
}

static int read_chunk(struct worker *w, uint64_t off, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = pread(w->fd, w->rbuf + done, n - done, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fail(w->path, "read", errno);
			return -1;
		}
		if (r == 0) {
			fail(w->path, "read: the file is shorter than what was written", 0);
			return -1;
		}
		done += (size_t)r;
	}
	return 0;
}

/* The threads of a phase start together, once all of them exist. */
static void start_line(void)
{
	pthread_mutex_lock(&go_lock);
	while (!go)
		pthread_cond_wait(&go_cond, &go_lock);
	pthread_mutex_unlock(&go_lock);
}

static void *writer(void *arg)
{
	struct worker *w = arg;
	start_line();
	w->t0 = now();
	for (uint64_t off = 0; off < w->size && !stopping(); off += chunk) {
		size_t n = w->size - off < chunk ? (size_t)(w->size - off) : chunk;
		stamp(w->ref, n, w->index, off);
		if (write_chunk(w, off, n))
			break;
		/* Buffered: starts the writeback of the chunk now rather than at the final sync, so that the dirty pages
		 * never pile up and the disk works while the next chunk is copied. */
		if (!direct)
			posix_fadvise(w->fd, (off_t)off, (off_t)n, POSIX_FADV_DONTNEED);
	}
	/* Direct writes into preallocated extents still leave metadata (unwritten extents) and the device's cache to
	 * sync; what the rate means is data that a crash would not lose. */
	if (!stopping() && fdatasync(w->fd))
		fail(w->path, "fdatasync", errno);
	w->t1 = now();
	return NULL;
}

static void *reader(void *arg)
{
	struct worker *w = arg;
	start_line();
	w->t0 = now();
	for (uint64_t off = 0; off < w->size && !stopping(); off += chunk) {
		size_t n = w->size - off < chunk ? (size_t)(w->size - off) : chunk;
		if (read_chunk(w, off, n))
			break;
		if (w->verify) {
			stamp(w->ref, n, w->index, off);
			if (memcmp(w->rbuf, w->ref, n)) {
				size_t i = 0;
				while (w->rbuf[i] == w->ref[i])
					i++;
				char what[96];
				snprintf(what, sizeof(what), "what was read at byte %llu differs from what was written",
					 (unsigned long long)(off + i));
				fail(w->path, what, 0);
				break;
			}
		}
		/* Keeps a buffered read from filling the page cache, which the next pass would read instead. */
		if (!direct)
			posix_fadvise(w->fd, (off_t)off, (off_t)n, POSIX_FADV_DONTNEED);
	}
	w->t1 = now();
	return NULL;
}

/* Runs one phase on every file at once; returns its wall time, from the first thread's start to the last one's end. */
static double phase(struct worker *ws, void *(*fn)(void *))
{
	long started = 0;
	double t0 = 0, t1 = 0;
	go = 0;
	for (; started < opt.files; started++) {
		int e = pthread_create(&ws[started].thread, NULL, fn, &ws[started]);
		if (e) {
			fail("pthread_create", "a thread per file", e);
			break;
		}
	}
	/* After a failure too: the threads that exist see it and end. */
	pthread_mutex_lock(&go_lock);
	go = 1;
	pthread_cond_broadcast(&go_cond);
	pthread_mutex_unlock(&go_lock);
	for (long i = 0; i < started; i++) {
		pthread_join(ws[i].thread, NULL);
		if (i == 0 || ws[i].t0 < t0)
			t0 = ws[i].t0;
		if (ws[i].t1 > t1)
			t1 = ws[i].t1;
	}
	return t1 - t0;
}

/* Drops what the page cache holds of every file, so that the next read comes from the storage. */
static void drop_cache(struct worker *ws)
{
	for (long i = 0; i < opt.files; i++)
		posix_fadvise(ws[i].fd, 0, 0, POSIX_FADV_DONTNEED);
}

static void cleanup(struct worker *ws)
{
	for (long i = 0; i < opt.files; i++) {
		if (ws[i].fd >= 0)
			close(ws[i].fd);
		ws[i].fd = -1;
		if (ws[i].created && !opt.keep && unlink(ws[i].path))
			fprintf(stderr, "dio-ceiling: %s: unlink: %s\n", ws[i].path, strerror(errno));
	}
}

static void release(struct worker *ws)
{
	for (long i = 0; i < opt.files; i++) {
		free(ws[i].ref);
		free(ws[i].rbuf);
	}
	free(ws);
	if (dfd >= 0)
		close(dfd);
	dfd = -1;
}

static int die(struct worker *ws)
{
	if (interrupted && !err_msg[0])
		snprintf(err_msg, sizeof(err_msg), "interrupted");
	fprintf(stderr, "dio-ceiling: %s\n", err_msg);
	opt.keep = 0;
	cleanup(ws);
	release(ws);
	return 1;
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--buffered")) {
			opt.buffered = 1;
		} else if (!strcmp(a, "--keep")) {
			opt.keep = 1;
		} else if (!strcmp(a, "--json")) {
			opt.json = 1;
		} else if (!strcmp(a, "--gib") || !strcmp(a, "--files") || !strcmp(a, "--chunk-mib")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "dio-ceiling: %s needs a value\n", a);
				return -1;
			}
			const char *v = argv[++i];
			if (!strcmp(a, "--gib")) {
				char *end;
				errno = 0;
				opt.gib = strtod(v, &end);
				if (errno || end == v || *end || !isfinite(opt.gib) || opt.gib <= 0 || opt.gib > 1e6) {
					fprintf(stderr, "dio-ceiling: --gib: not a positive size: %s\n", v);
					return -1;
				}
			} else if (!strcmp(a, "--files")) {
				if (parse_long(v, 1, 1024, &opt.files)) {
					fprintf(stderr, "dio-ceiling: --files: not a count from 1 to 1024: %s\n", v);
					return -1;
				}
			} else if (parse_long(v, 1, 1024, &opt.chunk_mib)) {
				fprintf(stderr, "dio-ceiling: --chunk-mib: not a size from 1 to 1024: %s\n", v);
				return -1;
			}
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "dio-ceiling: unknown option: %s\n", a);
			return -1;
		} else if (opt.dir) {
			fprintf(stderr, "dio-ceiling: one directory only: %s\n", a);
			return -1;
		} else {
			opt.dir = a;
		}
	}
	if (!opt.dir) {
		fprintf(stderr, "dio-ceiling: no directory given\n");
		return -1;
	}
	return 0;
}

static void report(const char *name, uint64_t bytes, double s, const char *mode)
{
	printf("%s: %.2f GiB in %.3f s = %.2f GB/s (%ld files, %s)\n", name, (double)bytes / GIB, s,
	       (double)bytes / s / 1e9, opt.files, mode);
}

int main(int argc, char **argv)
{
	if (parse_args(argc, argv)) {
		usage(stderr);
		return 2;
	}

	/* Every file gets the same share, whole 4 KiB blocks, so that every direct I/O is aligned. */
	uint64_t share = (uint64_t)(opt.gib * GIB) / (uint64_t)opt.files / ALIGN * ALIGN;
	if (share == 0) {
		fprintf(stderr, "dio-ceiling: --gib %g is less than 4 KiB a file\n", opt.gib);
		usage(stderr);
		return 2;
	}
	uint64_t bytes = share * (uint64_t)opt.files;
	chunk = (size_t)opt.chunk_mib * MIB;
	if (chunk > share)
		chunk = (size_t)share;

	dfd = open(opt.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		fprintf(stderr, "dio-ceiling: %s: %s\n", opt.dir, strerror(errno));
		return 1;
	}

	struct worker *ws = calloc((size_t)opt.files, sizeof(*ws));
	if (!ws) {
		fprintf(stderr, "dio-ceiling: out of memory\n");
		close(dfd);
		return 1;
	}
	for (long i = 0; i < opt.files; i++)
		ws[i].fd = -1;

	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	/* The buffers and their pattern are made before anything is timed. */
	for (long i = 0; i < opt.files; i++) {
		struct worker *w = &ws[i];
		w->index = (int)i;
		w->size = share;
		if (posix_memalign((void **)&w->ref, ALIGN, chunk) || posix_memalign((void **)&w->rbuf, ALIGN, chunk)) {
			snprintf(err_msg, sizeof(err_msg), "out of memory for %ld buffers of %zu bytes", 2 * opt.files,
				 chunk);
			return die(ws);
		}
		fill(w->ref, chunk, (int)i);
		/* Touched now, or the first read pass would pay for faulting its pages in and read slower than the second. */
		memset(w->rbuf, 0, chunk);
	}

	/* Direct unless asked otherwise or refused: the decision is the first file's, and the run keeps it. */
	const char *mode = "O_DIRECT";
	char refused[128] = "";
	direct = !opt.buffered;
	for (long i = 0; i < opt.files; i++) {
		struct worker *w = &ws[i];
		int n = snprintf(w->path, sizeof(w->path), "%s/dio-ceiling.%ld.%ld", opt.dir, (long)getpid(), i);
		if (n < 0 || (size_t)n >= sizeof(w->path)) {
			snprintf(err_msg, sizeof(err_msg), "%s: the path of its files is too long", opt.dir);
			return die(ws);
		}
		/* Created without O_DIRECT and switched to it after: open(O_CREAT | O_DIRECT) on a filesystem refusing
		 * O_DIRECT makes the file and then fails, which would leave a file behind that O_EXCL then trips on. */
		w->fd = open(w->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (w->fd < 0) {
			fail(w->path, "create", errno);
			return die(ws);
		}
		w->created = 1;
		if (direct && fcntl(w->fd, F_SETFL, fcntl(w->fd, F_GETFL) | O_DIRECT)) {
			int e = errno;
			if (e != EINVAL || i > 0) {
				fail(w->path, "O_DIRECT", e);
				return die(ws);
			}
			direct = 0;
			snprintf(refused, sizeof(refused), "buffered, O_DIRECT refused: %s", strerror(e));
		}
	}
	if (!direct)
		mode = refused[0] ? refused : "buffered";

	double t = now();
	int fallocated = 1;
	for (long i = 0; i < opt.files && fallocated; i++) {
		if (fallocate(ws[i].fd, 0, 0, (off_t)share) == 0)
			continue;
		if (errno != EOPNOTSUPP) {
			fail(ws[i].path, "fallocate", errno);
			return die(ws);
		}
		fallocated = 0;
	}
	double fallocate_s = now() - t;

	double write_s = phase(ws, writer);
	if (!stopping()) {
		/* The files' names are data too: a directory whose entries a crash could lose has not been written. */
		t = now();
		if (fsync(dfd))
			fail(opt.dir, "fsync", errno);
		write_s += now() - t;
	}
	if (stopping())
		return die(ws);

	/* The raw rate comes from a pass without the check, whose memcmp competes with the reads for memory; a second
	 * pass reads the files again and compares every byte. */
	drop_cache(ws);
	double read_s = phase(ws, reader);
	if (stopping())
		return die(ws);
	drop_cache(ws);
	for (long i = 0; i < opt.files; i++)
		ws[i].verify = 1;
	double check_s = phase(ws, reader);
	if (stopping())
		return die(ws);

	if (opt.json) {
		printf("{\"dir\":");
		json_string(opt.dir);
		printf(",\"bytes\":%llu,\"files\":%ld,\"chunk\":%zu,\"mode\":\"%s\",\"fallocate\":%s,\"fallocate_s\":%.6f,"
		       "\"write_s\":%.6f,\"write_gbps\":%.3f,\"read_s\":%.6f,\"read_gbps\":%.3f,"
		       "\"read_check_s\":%.6f,\"read_check_gbps\":%.3f,\"check\":\"ok\"}\n",
		       (unsigned long long)bytes, opt.files, chunk, direct ? "direct" : "buffered",
		       fallocated ? "true" : "false", fallocate_s, write_s, (double)bytes / write_s / 1e9, read_s,
		       (double)bytes / read_s / 1e9, check_s, (double)bytes / check_s / 1e9);
	} else {
		if (fallocated)
			printf("fallocate: %.2f GiB in %.3f s (%ld files)\n", (double)bytes / GIB, fallocate_s,
			       opt.files);
		else
			printf("fallocate: not supported here, files not preallocated (%.3f s)\n", fallocate_s);
		report("write", bytes, write_s, mode);
		report("read", bytes, read_s, mode);
		report("read+check", bytes, check_s, mode);
		printf("check: every byte as written (%zu-byte chunks)\n", chunk);
	}
	cleanup(ws);
	release(ws);
	return fflush(stdout) ? 1 : 0;
}
