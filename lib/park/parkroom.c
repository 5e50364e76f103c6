/* The space of a park's files, reserved by cudasnap (parkfiles.h): before
 * the park, or while it writes. A page of a memory-backed file is charged
 * to the memory cgroup of whoever makes it: the reservation makes every
 * one here, in cudasnap's cgroup, so that the process (whose GPU memory
 * may be far more than its memory limit, which is what --park-to is for)
 * is charged with none. Reserving first costs a park that whole
 * allocation before its copy (0.6 s of 1.7 s for 16 GiB of tmpfs on an
 * H100 host); reserving while it writes hides it: each file grows from
 * its start on, a piece at a time, and the interposer writes a piece
 * only once the file's size has passed it (park/files.c). The pipe's
 * write end, closed when every file's reservation has ended, tells it
 * when to stop waiting. */
#include "parkfiles.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

struct cs_park_room {
	struct grow {
		struct cs_park_room *room;
		int fd;
		off_t size;
		int rc;
		bool thread;
		pthread_t th;
	} g[PARK_FILES_MAX];
	unsigned n;
	atomic_uint left; /* files still being reserved */
	atomic_bool stop; /* the park failed: no more of it */
	int rfd, wfd;
};

/* [off, off + len) of fd written with zeros: where fallocate reserves
 * nothing (ramfs), the pages are taken here, as glibc's posix_fallocate
 * would. Aligned for O_DIRECT, which the interposer may set on the file
 * (its descriptor shares this one's flags; pieces are whole pages). 0 or
 * an errno. */
static int fill_zeros(int fd, off_t off, off_t len)
{
	_Alignas(4096) static const unsigned char zeros[1 << 16];
	while (len > 0) {
		ssize_t n = pwrite(fd, zeros, len < (off_t)sizeof(zeros) ? (size_t)len : sizeof(zeros), off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EIO;
		off += n;
		len -= n;
	}
	return 0;
}

int cs_park_reserve(int fd, off_t size, const atomic_bool *stop)
{
	bool zeros = false;
	for (off_t off = 0; off < size;) {
		if (stop && atomic_load(stop))
			return ECANCELED;
		off_t len = size - off < (off_t)PARK_PIECE ? size - off : (off_t)PARK_PIECE;
		int rc = zeros ? fill_zeros(fd, off, len) : fallocate(fd, 0, off, len) == 0 ? 0 : errno;
		if (rc == EOPNOTSUPP && !zeros) {
			zeros = true;
			continue;
		}
		if (rc == EINTR)
			continue;
		if (rc != 0)
			return rc;
		off += len;
	}
	return 0;
}

static void *grow_one(void *arg)
{
	struct grow *g = arg;
	g->rc = cs_park_reserve(g->fd, g->size, &g->room->stop);
	if (atomic_fetch_sub(&g->room->left, 1) == 1)
		close(g->room->wfd); /* the last: the park waits no more */
	return NULL;
}

int cs_park_room_start(cs_park_files *f, unsigned long long bytes)
{
	int p[2];
	cs_park_room *room = calloc(1, sizeof(*room));
	if (room == NULL || pipe2(p, O_CLOEXEC) != 0) {
		free(room);
		return -1;
	}
	room->rfd = p[0];
	room->wfd = p[1];
	room->n = f->n;
	atomic_init(&room->left, f->n);
	atomic_init(&room->stop, false);
	f->room = room;
	if (f->n == 0)
		close(room->wfd);
	for (unsigned i = 0; i < f->n; i++) {
		struct grow *g = &room->g[i];
		*g = (struct grow){ .room = room, .fd = f->fd[i], .size = (off_t)park_file_size(bytes, f->n, i) };
		/* without a thread of its own, a file is reserved here, first */
		g->thread = pthread_create(&g->th, NULL, grow_one, g) == 0;
		if (!g->thread)
			grow_one(g);
	}
	return 0;
}

int cs_park_room_fd(const cs_park_files *f)
{
	return f->room ? f->room->rfd : -1;
}

void cs_park_room_stop(cs_park_files *f)
{
	if (f->room)
		atomic_store(&f->room->stop, true);
}

int cs_park_room_end(cs_park_files *f)
{
	cs_park_room *room = f->room;
	int rc = 0;
	if (room == NULL)
		return 0;
	for (unsigned i = 0; i < room->n; i++) {
		if (room->g[i].thread)
			pthread_join(room->g[i].th, NULL);
		rc = rc ? rc : room->g[i].rc == ECANCELED ? 0 : room->g[i].rc;
	}
	close(room->rfd);
	free(room);
	f->room = NULL;
	return rc;
}
