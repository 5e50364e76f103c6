/* The holders of a process's pidfd lock, found in /proc, and whether any of
 * them is privileged over the process (claim.h: only such a holder is
 * another operation; anyone may pidfd_open a process and flock it). */
#include "holder.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define CAP_SYS_PTRACE_BIT 19
/* Holders /proc/locks names that are looked at (a shared lock has several). */
#define NAMED_MAX 16
/* Unprivileged holders named in the warning; the others are counted. */
#define SHOWN_MAX 2
/* A pidfd's link reads so on pidfs too: other files are not looked at (a
 * stat of a file on a hung network mount would wait). */
#define PIDFD_LINK "anon_inode:[pidfd]"

/* Whether an open file's fdinfo lists an flock: its "lock:" lines are the
 * locks that this open file description holds. */
static bool fdinfo_flock(int infodir, const char *name)
{
	char buf[4096];
	if (cs_read_at(infodir, name, buf, sizeof(buf)) <= 0)
		return false;
	for (const char *l = buf; *l;) {
		size_t len = strcspn(l, "\n");
		char line[256];
		snprintf(line, sizeof(line), "%.*s", (int)len, l);
		if (strncmp(line, "lock:", 5) == 0 && strstr(line, " FLOCK ") && !strstr(line, "->"))
			return true;
		l += len + (l[len] == '\n');
	}
	return false;
}

/* Whether the process of pdir holds a descriptor of the file st describes
 * with an flock on it. */
static bool holds_flock(int pdir, const struct stat *st)
{
	_cleanup_closedir_ DIR *fds = cs_opendir_at(pdir, "fd");
	_cleanup_close_ int info = openat(pdir, "fdinfo", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!fds || info < 0)
		return false;
	for (struct dirent *de; (de = readdir(fds));) {
		char link[sizeof(PIDFD_LINK) + 1];
		struct stat fst;
		ssize_t n = de->d_name[0] == '.' ? -1 : readlinkat(dirfd(fds), de->d_name, link, sizeof(link));
		if (n != (ssize_t)strlen(PIDFD_LINK) || memcmp(link, PIDFD_LINK, (size_t)n) != 0)
			continue;
		if (fstatat(dirfd(fds), de->d_name, &fst, 0) == 0 && fst.st_dev == st->st_dev &&
		    fst.st_ino == st->st_ino && fdinfo_flock(info, de->d_name))
			return true;
	}
	return false;
}

/* Credentials as /proc of this namespace shows them: uids mapped into this
 * user namespace (an unmapped one is the overflow uid). */
typedef struct creds {
	unsigned long long ruid, euid, suid, capeff;
} creds;

static bool read_creds(int pdir, creds *c)
{
	char buf[8192];
	return cs_read_at(pdir, "status", buf, sizeof(buf)) > 0 &&
		cs_parse_status_nth(buf, "Uid", 0, 10, &c->ruid) == 0 &&
		cs_parse_status_nth(buf, "Uid", 1, 10, &c->euid) == 0 &&
		cs_parse_status_nth(buf, "Uid", 2, 10, &c->suid) == 0 &&
		cs_parse_status_nth(buf, "CapEff", 0, 16, &c->capeff) == 0;
}

/* Whether the process of pdir lives in this process's user namespace,
 * where its capabilities reach the processes this one acts on. */
static bool same_userns(int pdir)
{
	struct stat mine, its;
	return stat("/proc/self/ns/user", &mine) == 0 && fstatat(pdir, "ns/user", &its, 0) == 0 &&
		mine.st_dev == its.st_dev && mine.st_ino == its.st_ino;
}

/* The rule of claim.h. A holder that cannot be read counts as privileged:
 * nothing shows that it is not another operation. */
static bool privileged(int pdir, const creds *target, bool target_known, unsigned long long *euid)
{
	creds c;
	if (!read_creds(pdir, &c))
		return true;
	*euid = c.euid;
	if (c.euid == 0)
		return true;
	if ((c.capeff >> CAP_SYS_PTRACE_BIT & 1) && same_userns(pdir))
		return true;
	return target_known && c.euid == target->ruid && c.euid == target->euid && c.euid == target->suid;
}

typedef struct judgement {
	const struct stat *st;
	creds target;
	bool target_known;
	size_t found; /* holders found, all unprivileged so far */
	bool privileged; /* one of them is */
	pid_t shown[SHOWN_MAX];
	unsigned long long shown_uid[SHOWN_MAX];
} judgement;

/* Looks at one process: whether it holds the lock, and what it is. */
static void look_at(judgement *j, int procfd, pid_t pid)
{
	char name[16];
	snprintf(name, sizeof(name), "%d", (int)pid);
	_cleanup_close_ int pdir = openat(procfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pdir < 0 || !holds_flock(pdir, j->st))
		return;
	for (size_t i = 0; i < j->found && i < SHOWN_MAX; i++)
		if (j->shown[i] == pid)
			return;
	unsigned long long euid = 0;
	if (privileged(pdir, &j->target, j->target_known, &euid)) {
		j->privileged = true;
		return;
	}
	if (j->found < SHOWN_MAX) {
		j->shown[j->found] = pid;
		j->shown_uid[j->found] = euid;
	}
	j->found++;
}

/* Every process of /proc, for a lock whose locker /proc/locks cannot name:
 * it exited and a child it forked keeps the lock, or it was reused. */
static void look_everywhere(judgement *j, int procfd)
{
	_cleanup_closedir_ DIR *dir = cs_opendir_at(procfd, ".");
	for (struct dirent *de; dir && !j->privileged && (de = readdir(dir));) {
		long pid;
		if (cs_parse_long(de->d_name, 1, INT_MAX, &pid) == 0)
			look_at(j, procfd, (pid_t)pid);
	}
}

static void name_holders(const judgement *j, char *who, size_t size)
{
	size_t len = 0;
	who[0] = '\0';
	for (size_t i = 0; i < j->found && i < SHOWN_MAX; i++) {
		char one[160];
		if (!cs_state_describe_pid(j->shown[i], one, sizeof(one)))
			snprintf(one, sizeof(one), "pid %d", (int)j->shown[i]);
		if (len < size)
			len += (size_t)snprintf(who + len, size - len, "%s%s (uid %llu)", i ? " and " : "", one,
						j->shown_uid[i]);
	}
	if (j->found > SHOWN_MAX && len < size)
		snprintf(who + len, size - len, " and %zu more", j->found - SHOWN_MAX);
}

cs_holder_kind cs_holder_judge(int fd, pid_t target, char *who, size_t size)
{
	struct stat st;
	who[0] = '\0';
	_cleanup_close_ int procfd = open(cs_proc_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (procfd < 0 || fstat(fd, &st) < 0)
		return CS_HOLDER_UNKNOWN;
	judgement j = { .st = &st };
	char name[16];
	snprintf(name, sizeof(name), "%d", (int)target);
	_cleanup_close_ int tdir = openat(procfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	j.target_known = tdir >= 0 && read_creds(tdir, &j.target);
	pid_t named[NAMED_MAX];
	size_t n = cs_state_lock_holders(fd, named, NAMED_MAX);
	for (size_t i = 0; i < n && !j.privileged; i++)
		look_at(&j, procfd, named[i]);
	if (!j.found && !j.privileged)
		look_everywhere(&j, procfd);
	if (j.privileged)
		return CS_HOLDER_PRIVILEGED;
	if (!j.found)
		return CS_HOLDER_UNKNOWN;
	name_holders(&j, who, size);
	return CS_HOLDER_UNPRIVILEGED;
}
