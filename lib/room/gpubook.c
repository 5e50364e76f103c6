#include "gpubook.h"
#include "env.h"
#include "pool.h"
#include "state.h"
#include "text.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

#define HINT_BOOK CS_GPUBOOK_HINT
#define NS_PER_S 1000000000ULL

/* The file of a booking: a fixed record, so that reading one is a length
 * check and a few bounds. The magic names the version: a file with
 * another is not read, and counts as the whole of every GPU. */
#define BOOK_MAGIC "CSBOOK3"
typedef struct book_file {
	char magic[8];
	cs_booking_rec rec;
} book_file;

const char *cs_gpubook_path(void)
{
	const char *e = cs_env("CUDASNAP_GPU_BOOK");
	return e && *e ? e : CS_GPUBOOK_NODE;
}

static bool owner_ok(const struct stat *st)
{
	return st->st_uid == 0 || st->st_uid == geteuid();
}

/* A directory writable by others must keep their files from each other
 * (the sticky bit) and be root's. */
static bool mode_ok(const struct stat *st)
{
	if (!(st->st_mode & (S_IWGRP | S_IWOTH)))
		return true;
	return (st->st_mode & S_ISVTX) && st->st_uid == 0;
}

static int made(const char *path)
{
	/* Root's book takes every user's bookings; another user makes one
	 * only where it was named for it, never the node's, which root must
	 * own. */
	bool root = geteuid() == 0;
	if (!root && strcmp(path, CS_GPUBOOK_NODE) == 0)
		return 0;
	mode_t mode = root ? 01777 : 0700;
	if (mkdir(path, 0700) < 0)
		return errno == EEXIST ? 0 : -errno;
	/* mkdir's mode passes through the umask, and drops the sticky bit. */
	return chmod(path, mode) < 0 ? -errno : 0;
}

int cs_gpubook_open(const char *path, cs_error *err)
{
	if (!path)
		path = cs_gpubook_path();
	int r = made(path);
	if (r < 0 && r != -EACCES && r != -EROFS)
		return cs_error_errno(err, CS_ESTATE, -r, HINT_BOOK, "cannot create the book of GPU restores %s", path);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno == ENOTDIR ? ELOOP : errno;
		cs_error_errno(err, CS_ESTATE, e, HINT_BOOK, "cannot open the book of GPU restores %s%s", path,
			       e == ELOOP ? " (a symlink is refused)" : "");
		return -e;
	}
	r = cs_gpubook_check(fd, path, err);
	return r < 0 ? r : TAKE_FD(fd);
}

int cs_gpubook_check(int fd, const char *path, cs_error *err)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return cs_error_errno(err, CS_ESTATE, errno, HINT_BOOK, "cannot read the book of GPU restores %s",
				      path);
	if (!S_ISDIR(st.st_mode) || !owner_ok(&st) || !mode_ok(&st))
		return cs_error_set(err, CS_ESTATE, HINT_BOOK,
				    "the book of GPU restores %s is owned by uid %u with mode %04o: not root's or the "
				    "caller's, or writable by others without the sticky bit",
				    path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
	return 0;
}

uint64_t cs_gpubook_ticket(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

int cs_gpubook_lock(int bookfd, double deadline, const volatile int *interrupted, cs_error *err)
{
	/* An open of its own: flock belongs to the open file description, so
	 * that another thread of this process is kept out too. */
	_cleanup_close_ int fd = openat(bookfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return cs_error_errno(err, CS_ESTATE, errno, HINT_BOOK, "cannot open %s", cs_gpubook_path());
	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return TAKE_FD(fd);
		if (errno != EWOULDBLOCK && errno != EINTR)
			return cs_error_errno(err, CS_ESTATE, errno, HINT_BOOK, "cannot lock %s", cs_gpubook_path());
		if ((interrupted && *interrupted) || cs_now() >= deadline)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = 10000000L }, NULL);
	}
	char who[160];
	cs_state_describe_holder(fd, who, sizeof(who));
	return cs_error_set(err, CS_ESTATE,
			    "The process named holds it while it reads the GPUs' free memory, which takes well under "
			    "a second; if it is stuck, end it.",
			    "the book of GPU restores (%s) is held by %s", cs_gpubook_path(), who);
}

int cs_booking_parse(const void *buf, size_t len, cs_booking_rec *rec)
{
	book_file f;
	if (len != sizeof(f))
		return -EINVAL;
	memcpy(&f, buf, sizeof(f));
	if (memcmp(f.magic, BOOK_MAGIC, sizeof(BOOK_MAGIC)) != 0)
		return -EINVAL;
	if ((f.rec.state != CS_BOOKING_WAITING && !cs_booking_takes(f.rec.state)) || f.rec.ngpu > CS_TARGET_GPUS)
		return -EINVAL;
	f.rec.who[sizeof(f.rec.who) - 1] = '\0';
	for (unsigned k = 0; k < f.rec.ngpu; k++)
		f.rec.gpu[k].uuid[sizeof(f.rec.gpu[k].uuid) - 1] = '\0';
	*rec = f.rec;
	return 0;
}

/* ---- reading the book ------------------------------------------------------ */

typedef enum entry {
	E_NONE, /* not a booking */
	E_OVER, /* a booking that is over: removed */
	E_LIVE, /* its owner holds it */
	E_ORPHAN, /* its owner is gone, its restore may not be over */
	E_WHOLE, /* it cannot be read: it takes every GPU */
} entry;

static bool read_rec(int fd, cs_booking_rec *rec)
{
	book_file f;
	return pread(fd, &f, sizeof(f), 0) == (ssize_t)sizeof(f) && cs_booking_parse(&f, sizeof(f), rec) == 0;
}

/* Whether a file changed within CS_GPUBOOK_ORPHAN_MAX_S: the kernel's
 * clock, not a record's word. */
static bool young(const struct stat *st)
{
	struct timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	return rt.tv_sec < st->st_ctim.tv_sec + CS_GPUBOOK_ORPHAN_MAX_S;
}

/* A HELD or UNPARK booking that may outlive its owner: while its owner holds it,
 * within its bound (a lock held past that, by anyone, proves nothing);
 * else as the judge says. */
static entry held(const char *name, const cs_booking_rec *rec, const struct stat *st, bool locked, uint64_t now,
		  const cs_orphan_judge *judge)
{
	bool expired = now >= rec->until || !young(st);
	if (locked && !expired)
		return E_LIVE;
	if (!judge)
		return expired ? E_OVER : E_ORPHAN;
	return judge->counts(judge->ctx, name, rec, st->st_uid, now, expired) ? E_ORPHAN : E_OVER;
}

/* One file of the book. Anything that cannot be read is not nothing: it
 * takes every GPU, within the bound of its change time. */
static entry read_entry(int bookfd, const char *name, uint64_t now, const cs_orphan_judge *judge, cs_booking_rec *rec,
			uid_t *owner)
{
	struct stat st;
	if (fstatat(bookfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? E_NONE : E_WHOLE;
	*owner = st.st_uid;
	/* cudasnap makes regular files: a link to anything else is none of
	 * its bookings. A hard link of a booking is read as the booking
	 * (a link only adds). */
	if (!S_ISREG(st.st_mode))
		return E_NONE;
	_cleanup_close_ int fd = openat(bookfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? E_NONE : young(&st) ? E_WHOLE : E_OVER;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return E_WHOLE;
	bool locked = flock(fd, LOCK_SH | LOCK_NB) < 0;
	if (!read_rec(fd, rec))
		return young(&st) ? E_WHOLE : E_OVER;
	if (cs_booking_takes(rec->state) && rec->until)
		return held(name, rec, &st, locked, now, judge);
	return locked ? E_LIVE : E_OVER;
}

/* Whether a waiter has looked lately: one that stopped holds no one back. */
static bool fresh(const cs_booking_rec *rec, uint64_t now)
{
	return rec->beat + (uint64_t)CS_GPUBOOK_STALE_S * NS_PER_S >= now;
}

/* Names a booking for the words, made safe to print: its text is its
 * writer's, who may be another user. */
static void name_it(char *dst, size_t size, const char *who, uid_t owner, bool orphan)
{
	if (dst[0])
		return;
	char safe[100];
	cs_sanitize(safe, sizeof(safe), who, strlen(who));
	snprintf(dst, size, "%.96s, booked by uid %u%s", safe, (unsigned)owner,
		 orphan ? ", whose cudasnap is gone" : "");
}

static void add_to_tally(const cs_booking_rec *rec, uid_t owner, bool orphan, uint64_t ticket, uint64_t now,
			 const char (*uuids)[48], size_t n, cs_book_tally *out)
{
	bool earlier = ticket == 0 || rec->ticket < ticket;
	for (unsigned k = 0; k < rec->ngpu; k++)
		for (size_t i = 0; i < n; i++) {
			if (strcasecmp(rec->gpu[k].uuid, uuids[i]) != 0)
				continue;
			cs_book_tally *t = &out[i];
			unsigned long long need = rec->gpu[k].bytes;
			/* short on another of its GPUs: it cannot be served here now */
			bool stuck = (rec->short_gpus & ~(1u << k)) != 0;
			if (cs_booking_takes(rec->state)) {
				t->held += need;
				t->nheld++;
				name_it(t->first_who, sizeof(t->first_who), rec->who, owner, orphan);
			} else if (earlier && need && !stuck && fresh(rec, now) &&
				   (!t->ahead_need || need < t->ahead_need)) {
				t->ahead_need = need;
				cs_sanitize(t->ahead_who, sizeof(t->ahead_who), rec->who, strlen(rec->who));
			}
		}
}

static void add_whole(const char *name, uid_t owner, size_t n, cs_book_tally *out)
{
	char who[100];
	snprintf(who, sizeof(who), "a booking that this cudasnap cannot read (%.48s)", name);
	for (size_t i = 0; i < n; i++) {
		out[i].whole = true;
		out[i].nheld++;
		name_it(out[i].first_who, sizeof(out[i].first_who), who, owner, false);
	}
}

size_t cs_gpubook_tally(int bookfd, const cs_booking *self, uint64_t ticket, const char (*uuids)[48], size_t n,
			const cs_orphan_judge *judge, cs_book_tally *out)
{
	memset(out, 0, n * sizeof(*out));
	_cleanup_closedir_ DIR *d = cs_opendir_at(bookfd, ".");
	if (!d) {
		/* A book that cannot be read may hold anything. */
		add_whole(".", geteuid(), n, out);
		return 1;
	}
	uint64_t now = cs_gpubook_ticket();
	size_t nheld = 0;
	errno = 0;
	for (struct dirent *de; (de = readdir(d)); errno = 0) {
		if (strncmp(de->d_name, "b-", 2) != 0 || (self && self->fd >= 0 && strcmp(de->d_name, self->name) == 0))
			continue;
		cs_booking_rec rec;
		uid_t owner = 0;
		entry e = read_entry(bookfd, de->d_name, now, judge, &rec, &owner);
		if (e == E_WHOLE) {
			add_whole(de->d_name, owner, n, out);
			nheld++;
		} else if (e == E_LIVE || e == E_ORPHAN) {
			add_to_tally(&rec, owner, e == E_ORPHAN, ticket, now, uuids, n, out);
			nheld += cs_booking_takes(rec.state);
		} else if (e == E_OVER) {
			/* In a shared book only its owner or root may remove it. */
			unlinkat(bookfd, de->d_name, 0);
		}
	}
	if (errno) {
		add_whole(".", geteuid(), n, out);
		nheld++;
	}
	return nheld;
}

/* Creates b's file, locked before anyone can see it unlocked: the book's
 * lock is held, and only holders of it remove files. Readable by all, so
 * that the restores of other users count it. */
static int create(int bookfd, cs_booking *b)
{
	for (int tries = 0; tries < 8; tries++) {
		unsigned r = (unsigned)(cs_gpubook_ticket() * 2654435761ULL >> 7);
		snprintf(b->name, sizeof(b->name), "b-%016llx-%d-%08x", (unsigned long long)b->rec.ticket,
			 (int)getpid(), r ^ (unsigned)tries);
		int fd = openat(bookfd, b->name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd < 0)
			return -errno;
		if (fchmod(fd, 0644) < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int e = errno;
			unlinkat(bookfd, b->name, 0);
			close(fd);
			return -e;
		}
		b->fd = fd;
		return 0;
	}
	return -EEXIST;
}

int cs_gpubook_write(int bookfd, cs_booking *b)
{
	if (b->fd < 0) {
		int r = create(bookfd, b);
		if (r < 0)
			return r;
	}
	book_file f = { .rec = b->rec };
	memcpy(f.magic, BOOK_MAGIC, sizeof(BOOK_MAGIC));
	ssize_t w = pwrite(b->fd, &f, sizeof(f), 0);
	return w == (ssize_t)sizeof(f) ? 0 : w < 0 ? -errno : -EIO;
}

void cs_gpubook_drop(int bookfd, cs_booking *b)
{
	if (b->fd < 0)
		return;
	unlinkat(bookfd, b->name, 0);
	close(b->fd);
	b->fd = -1;
	b->name[0] = '\0';
}

void cs_gpubook_keep(cs_booking *b)
{
	/* The descriptor is left open on purpose (O_CLOEXEC: no child keeps
	 * it): its lock ends with this process. */
	b->fd = -1;
	b->name[0] = '\0';
}

void cs_gpubook_settle(int bookfd, pid_t target, uint64_t start, uint64_t pidns)
{
	_cleanup_closedir_ DIR *d = cs_opendir_at(bookfd, ".");
	for (struct dirent *de; d && pidns && (de = readdir(d));) {
		if (strncmp(de->d_name, "b-", 2) != 0)
			continue;
		_cleanup_close_ int fd = openat(bookfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		cs_booking_rec rec;
		/* an owner alive holds its booking, and ends it itself */
		if (fd < 0 || flock(fd, LOCK_SH | LOCK_NB) < 0 || !read_rec(fd, &rec))
			continue;
		if (rec.state == CS_BOOKING_UNPARK && rec.target == (int32_t)target && rec.target_start == start &&
		    rec.target_pidns == pidns)
			unlinkat(bookfd, de->d_name, 0);
	}
}
