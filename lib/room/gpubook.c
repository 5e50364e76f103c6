#include "gpubook.h"
#include "pool.h"
#include "state.h"
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

/* The file of a booking: a fixed record, so that reading one is a length
 * check and a few bounds. */
#define BOOK_MAGIC "CSBOOK1"
typedef struct book_file {
	char magic[8];
	cs_booking_rec rec;
} book_file;

static bool owner_ok(const struct stat *st)
{
	return st->st_uid == 0 || st->st_uid == geteuid();
}

/* name in dirfd, created 0700 when missing, as a directory of root's or
 * the caller's alone. */
static int open_dir(int dirfd, const char *name, cs_error *err)
{
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return cs_error_errno(err, CS_ESTATE, errno, HINT_BOOK, "cannot create %s/%s", cs_state_dir(),
				      CS_GPUBOOK_PATH);
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return cs_error_errno(err, CS_ESTATE, errno == ENOTDIR ? ELOOP : errno, HINT_BOOK,
				      "cannot open %s/%s (a symlink is refused)", cs_state_dir(), CS_GPUBOOK_PATH);
	if (!owner_ok(&st) || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return cs_error_set(err, CS_ESTATE, HINT_BOOK,
				    "%s/%s is owned by uid %u with mode %04o: not root's or the caller's alone",
				    cs_state_dir(), CS_GPUBOOK_PATH, (unsigned)st.st_uid,
				    (unsigned)(st.st_mode & 07777));
	return TAKE_FD(fd);
}

int cs_gpubook_open(int statefd, cs_error *err)
{
	_cleanup_close_ int claims = open_dir(statefd, "claims", err);
	return claims < 0 ? claims : open_dir(claims, CS_GPUBOOK_DIR, err);
}

uint64_t cs_gpubook_ticket(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int cs_gpubook_lock(int bookfd, double deadline, const volatile int *interrupted, cs_error *err)
{
	/* An open of its own: flock belongs to the open file description, so
	 * that another thread of this process is kept out too. */
	_cleanup_close_ int fd = openat(bookfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return cs_error_errno(err, CS_ESTATE, errno, HINT_BOOK, "cannot open %s/%s", cs_state_dir(),
				      CS_GPUBOOK_PATH);
	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return TAKE_FD(fd);
		if (errno != EWOULDBLOCK && errno != EINTR)
			return cs_error_errno(err, CS_ESTATE, errno, HINT_BOOK, "cannot lock %s/%s", cs_state_dir(),
					      CS_GPUBOOK_PATH);
		if ((interrupted && *interrupted) || cs_now() >= deadline)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = 10000000L }, NULL);
	}
	char who[160];
	cs_state_describe_holder(fd, who, sizeof(who));
	return cs_error_set(err, CS_ESTATE,
			    "The process named holds it while it reads the GPUs' free memory, which takes well under "
			    "a second; if it is stuck, end it.",
			    "the book of GPU restores (%s/%s) is held by %s", cs_state_dir(), CS_GPUBOOK_PATH, who);
}

int cs_booking_parse(const void *buf, size_t len, cs_booking_rec *rec)
{
	book_file f;
	if (len != sizeof(f))
		return -EINVAL;
	memcpy(&f, buf, sizeof(f));
	if (memcmp(f.magic, BOOK_MAGIC, sizeof(BOOK_MAGIC)) != 0)
		return -EINVAL;
	if ((f.rec.state != CS_BOOKING_WAITING && f.rec.state != CS_BOOKING_HELD) || f.rec.ngpu > CS_TARGET_GPUS)
		return -EINVAL;
	f.rec.who[sizeof(f.rec.who) - 1] = '\0';
	for (unsigned k = 0; k < f.rec.ngpu; k++)
		f.rec.gpu[k].uuid[sizeof(f.rec.gpu[k].uuid) - 1] = '\0';
	*rec = f.rec;
	return 0;
}

/* The booking named name, when it lives: 1 with *rec; 0 when it is dead
 * (then removed) or not a booking. */
static int read_live(int bookfd, const char *name, cs_booking_rec *rec)
{
	_cleanup_close_ int fd = openat(bookfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || !owner_ok(&st))
		return 0;
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		/* Its owner is gone (the kernel released its lock). */
		unlinkat(bookfd, name, 0);
		return 0;
	}
	book_file f;
	ssize_t r = pread(fd, &f, sizeof(f), 0);
	return r == (ssize_t)sizeof(f) && cs_booking_parse(&f, sizeof(f), rec) == 0;
}

/* Whether a waiter has looked lately: one that stopped holds no one back. */
static bool fresh(const cs_booking_rec *rec, uint64_t now)
{
	return rec->beat + (uint64_t)CS_GPUBOOK_STALE_S * 1000000000ULL >= now;
}

static void add_to_tally(const cs_booking_rec *rec, uint64_t ticket, uint64_t now, const char (*uuids)[48], size_t n,
			 cs_book_tally *out)
{
	bool earlier = ticket == 0 || rec->ticket < ticket;
	for (unsigned k = 0; k < rec->ngpu; k++)
		for (size_t i = 0; i < n; i++) {
			if (strcasecmp(rec->gpu[k].uuid, uuids[i]) != 0)
				continue;
			cs_book_tally *t = &out[i];
			unsigned long long need = rec->gpu[k].bytes;
			if (rec->state == CS_BOOKING_HELD) {
				t->held += need;
				t->nheld++;
				if (!t->first_who[0])
					snprintf(t->first_who, sizeof(t->first_who), "%s", rec->who);
			} else if (earlier && need && fresh(rec, now) && (!t->ahead_need || need < t->ahead_need)) {
				t->ahead_need = need;
				snprintf(t->ahead_who, sizeof(t->ahead_who), "%s", rec->who);
			}
		}
}

size_t cs_gpubook_tally(int bookfd, const cs_booking *self, uint64_t ticket, const char (*uuids)[48], size_t n,
			cs_book_tally *out)
{
	memset(out, 0, n * sizeof(*out));
	_cleanup_closedir_ DIR *d = cs_opendir_at(bookfd, ".");
	uint64_t now = cs_gpubook_ticket();
	size_t held = 0;
	for (struct dirent *de; d && (de = readdir(d));) {
		if (strncmp(de->d_name, "b-", 2) != 0 || (self && self->fd >= 0 && strcmp(de->d_name, self->name) == 0))
			continue;
		cs_booking_rec rec;
		if (!read_live(bookfd, de->d_name, &rec))
			continue;
		held += rec.state == CS_BOOKING_HELD;
		add_to_tally(&rec, ticket, now, uuids, n, out);
	}
	return held;
}

/* Creates b's file, locked before anyone can see it unlocked: the book's
 * lock is held, and only holders of it remove files. */
static int create(int bookfd, cs_booking *b)
{
	for (int tries = 0; tries < 8; tries++) {
		unsigned r = (unsigned)(cs_gpubook_ticket() * 2654435761ULL >> 7);
		snprintf(b->name, sizeof(b->name), "b-%016llx-%d-%08x", (unsigned long long)b->rec.ticket,
			 (int)getpid(), r ^ (unsigned)tries);
		int fd = openat(bookfd, b->name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
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
