/* The files of the history and their lock (lib/record/history_file.h). */
#include "history_file.h"
#include "pool.h"
#include "state.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cs_history_open_current(int statefd, const char **why)
{
	_cleanup_close_ int fd = cs_state_open_file(statefd, CS_HISTORY_NAME, O_WRONLY | O_APPEND | O_CREAT, 0600, why);
	struct stat st;
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0)
		return -errno;
	if ((st.st_mode & 07777) != 0600 && fchmod(fd, 0600) < 0)
		return -errno;
	return TAKE_FD(fd);
}

/* Whether fd is still the file named history.jsonl: a rotation renames it. */
static bool still_current(int statefd, int fd)
{
	struct stat held, now;
	return fstat(fd, &held) == 0 && fstatat(statefd, CS_HISTORY_NAME, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
		held.st_dev == now.st_dev && held.st_ino == now.st_ino;
}

bool cs_history_lock(int statefd, int *fd, int op, int (*reopen)(int statefd, const char **why))
{
	double until = cs_now() + CS_HISTORY_LOCK_WAIT_S;
	for (int renamed = 0; renamed < 8;) {
		if (flock(*fd, op | LOCK_NB) == 0) {
			if (still_current(statefd, *fd))
				return true;
			/* rotated meanwhile: the new file's lock */
			int fresh = reopen(statefd, NULL);
			if (fresh < 0)
				return false;
			close(*fd);
			*fd = fresh;
			renamed++;
			continue;
		}
		if (errno != EWOULDBLOCK || cs_now() >= until)
			return false;
		nanosleep(&(struct timespec){ .tv_nsec = 5000000L }, NULL);
	}
	return false;
}

char *cs_history_tail(int fd, size_t *len, bool *cut)
{
	struct stat st;
	*len = 0;
	*cut = false;
	if (fstat(fd, &st) < 0)
		return NULL;
	if (!S_ISREG(st.st_mode)) {
		errno = EINVAL;
		return NULL;
	}
	off_t from = st.st_size > (off_t)CS_HISTORY_READ_MAX ? st.st_size - (off_t)CS_HISTORY_READ_MAX : 0;
	size_t want = (size_t)(st.st_size - from);
	_cleanup_free_ char *buf = malloc(want + 1);
	if (!buf)
		return NULL;
	ssize_t got = pread(fd, buf, want, from);
	if (got < 0)
		return NULL;
	size_t skip = 0;
	if (from > 0) { /* the first line read is the tail of one that was not */
		const char *nl = memchr(buf, '\n', (size_t)got);
		skip = nl ? (size_t)(nl - buf) + 1 : (size_t)got;
		*cut = true;
	}
	memmove(buf, buf + skip, (size_t)got - skip);
	*len = (size_t)got - skip;
	buf[*len] = '\0';
	return TAKE_PTR(buf);
}
