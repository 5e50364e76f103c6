#include "claim.h"
#include "proc.h"
#include "state.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#define HINT_BUSY \
	"Wait for it to finish: two operations never act on one process at once (operations on other processes " \
	"are not held up)."

void cs_claims_init(cs_claims *c)
{
	*c = (cs_claims){ .dirfd = -1 };
}

void cs_claims_release(cs_claims *c)
{
	for (size_t i = c->n; i-- > 0;) {
		/* Removed while still held, so that a waiter that opened it sees it gone. */
		unlinkat(c->dirfd, c->names[i], 0);
		close(c->fds[i]);
	}
	if (c->dirfd >= 0)
		close(c->dirfd);
	free(c->fds);
	free(c->names);
	cs_claims_init(c);
}

static int open_dir(cs_claims *c, int statefd, cs_error *err)
{
	if (c->dirfd >= 0)
		return 0;
	if (mkdirat(statefd, "claims", 0700) < 0 && errno != EEXIST)
		return cs_error_errno(err, CS_ESTATE, errno, NULL, "cannot create %s/claims", cs_state_dir());
	c->dirfd = openat(statefd, "claims", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (c->dirfd < 0)
		return cs_error_errno(err, CS_ESTATE, errno,
				      "Remove it (a symlink is refused), or set CUDASNAP_STATE_DIR to a directory owned "
				      "by root (or you) with mode 0700.",
				      "cannot open %s/claims%s", cs_state_dir(),
				      errno == ELOOP || errno == ENOTDIR ? " (it is a symlink, which is refused)" : "");
	return 0;
}

/* The file's name, from how the process's own PID namespace names it. */
static int claim_name(pid_t pid, char name[48], cs_error *err)
{
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), pid);
	cs_proc_ident id;
	int r = pdir < 0 ? pdir : cs_proc_read_ident(pdir, pid, &id);
	if (r < 0)
		return cs_error_errno(err, CS_EPROC, -r, NULL, "process %d cannot be read", (int)pid);
	snprintf(name, 48, "%llu-%d", id.ns_ino, (int)id.nspid);
	return 0;
}

/* Opens and locks the file; -EAGAIN when a holder let go of it (and
 * removed it) between our open and our lock: then open it again. */
static int lock_file(int dirfd, const char *name, int *out)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int r = cs_state_take_lock(fd);
	if (r < 0)
		return r;
	struct stat held, now;
	if (fstat(fd, &held) < 0 || fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) < 0 || held.st_ino != now.st_ino ||
	    held.st_dev != now.st_dev)
		return -EAGAIN;
	*out = TAKE_FD(fd);
	return 0;
}

static int busy(int dirfd, const char *name, pid_t pid, const char *comm, cs_error *err)
{
	char who[160] = "unknown process";
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0)
		cs_state_describe_holder(fd, who, sizeof(who));
	return cs_error_set(err, CS_ESTATE, HINT_BUSY, "another cudasnap is running on process %d (%s): %s", (int)pid,
			    comm, who);
}

int cs_claims_add(cs_claims *c, int statefd, pid_t pid, const char *comm, const char *command, cs_error *err)
{
	char name[48];
	int r = open_dir(c, statefd, err);
	if (r == 0)
		r = claim_name(pid, name, err);
	if (r < 0)
		return r;
	size_t cap = c->cap;
	if (cs_grow(&c->fds, &cap, c->n + 1, sizeof(*c->fds)) < 0 ||
	    cs_grow(&c->names, &c->cap, c->n + 1, sizeof(*c->names)) < 0)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	int fd = -1;
	for (int tries = 0; (r = lock_file(c->dirfd, name, &fd)) == -EAGAIN && tries < 100; tries++)
		;
	if (r == -EWOULDBLOCK)
		return busy(c->dirfd, name, pid, comm, err);
	if (r < 0)
		return cs_error_errno(err, CS_ESTATE, -r, NULL, "cannot claim process %d in %s/claims", (int)pid,
				      cs_state_dir());
	cs_state_write_owner(fd, command);
	c->fds[c->n] = fd;
	memcpy(c->names[c->n], name, sizeof(name));
	c->n++;
	return 0;
}
