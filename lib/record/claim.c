#include "claim.h"
#include "holder.h"
#include "proc.h"
#include "state.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <time.h>

#define PIDFS_MAGIC 0x50494446
/* A probe (cs_claims_busy, cs_claims_left_behind) holds a lock for
 * microseconds; a claimer that meets one tries again for this long before
 * it calls the process busy. Real holders keep theirs for seconds. */
#define RETRY_NAPS 25
#define RETRY_NAP_NS 2000000L
/* A record: its holder, its process, and the files it parks into. */
#define RECORD_MAX 1024

void cs_claims_init(cs_claims *c)
{
	*c = (cs_claims){ .dirfd = -1 };
}

static void let_go(cs_claims *c, cs_claim *cl)
{
	if (cl->fd >= 0 && cl->left) {
		/* Still left behind: the dead holder's record goes back. */
		size_t len = strlen(cl->left);
		if (ftruncate(cl->fd, 0) < 0 || pwrite(cl->fd, cl->left, len, 0) != (ssize_t)len) {
			/* Then only its description is lost. */
		}
	} else if (cl->fd >= 0) {
		/* Removed while still held, so that a waiter that opened it sees it gone. */
		unlinkat(c->dirfd, cl->name, 0);
	}
	if (cl->fd >= 0)
		close(cl->fd);
	if (cl->pidfd >= 0)
		close(cl->pidfd);
	free(cl->left);
}

static bool text_files(const char *text, cs_left_behind *e);

void cs_claims_settled(cs_claims *c, pid_t pid)
{
	for (size_t i = 0; i < c->n; i++) {
		cs_left_behind e = { 0 };
		/* files the dead holder left stay named until they are removed */
		if (c->v[i].pid == pid && !(c->v[i].left && text_files(c->v[i].left, &e))) {
			free(c->v[i].left);
			c->v[i].left = NULL;
		}
	}
}

/* The length of a record's first two lines (holder, process), 0 when it
 * has not both. */
static size_t head_len(const char *text)
{
	const char *l1 = strchr(text, '\n');
	const char *l2 = l1 ? strchr(l1 + 1, '\n') : NULL;
	return l2 ? (size_t)(l2 + 1 - text) : 0;
}

int cs_claims_files(cs_claims *c, pid_t pid, const char *step, const char *dir, const char *name, unsigned n)
{
	for (size_t i = 0; i < c->n; i++) {
		cs_claim *cl = &c->v[i];
		char text[RECORD_MAX + 512];
		ssize_t got = cl->pid == pid && cl->fd >= 0 ? pread(cl->fd, text, RECORD_MAX - 1, 0) : -1;
		text[got > 0 ? got : 0] = '\0';
		size_t head = head_len(text);
		if (head == 0)
			continue;
		int len = snprintf(text + head, sizeof(text) - head, "files %s %u %s/%s\n", step, n, dir, name);
		if (len < 0 || head + (size_t)len >= RECORD_MAX)
			return -1; /* a path this long is not noted, rather than cut */
		/* A dead holder's record that this command took over says no more:
		 * this command now acts on the process and its files. */
		free(cl->left);
		cl->left = NULL;
		/* written over, then cut: never an empty record, whenever it dies */
		if (pwrite(cl->fd, text, head + (size_t)len, 0) == (ssize_t)(head + len) &&
		    ftruncate(cl->fd, (off_t)(head + (size_t)len)) == 0)
			return 0;
		return -1;
	}
	return -1;
}

void cs_claims_release(cs_claims *c)
{
	for (size_t i = c->n; i-- > 0;)
		let_go(c, &c->v[i]);
	if (c->dirfd >= 0)
		close(c->dirfd);
	free(c->v);
	cs_warn_fn warn = c->warn;
	void *ctx = c->warn_ctx;
	cs_claims_init(c);
	c->warn = warn;
	c->warn_ctx = ctx;
}

void cs_claims_drop(cs_claims *c, pid_t pid)
{
	for (size_t i = 0; i < c->n; i++) {
		if (c->v[i].pid != pid)
			continue;
		let_go(c, &c->v[i]);
		c->v[i] = c->v[--c->n];
		return;
	}
}

/* flock with LOCK_NB, tried again for a moment while a probe holds it. */
static int lock_retry(int fd, int op)
{
	for (int i = 0;; i++) {
		if (flock(fd, op | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK || i == RETRY_NAPS)
			return -errno;
		nanosleep(&(struct timespec){ .tv_nsec = RETRY_NAP_NS }, NULL);
	}
}

/* A pidfd of pid on pidfs, where flock means this one process; -ENOTSUP
 * on a kernel that has no pidfs, -ESRCH when the process is gone. */
static int pidfs_fd(pid_t pid)
{
	_cleanup_close_ int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return errno == ESRCH ? -ESRCH : -ENOTSUP;
	struct statfs fs;
	if (fstatfs(fd, &fs) < 0 || (unsigned long)fs.f_type != PIDFS_MAGIC)
		return -ENOTSUP;
	return TAKE_FD(fd);
}

/* How the record names the process: the inode of its own PID namespace and
 * its pid there (the file name), and its start time (pid reuse). */
typedef struct ident {
	char name[48];
	pid_t nspid;
	unsigned long long start;
} ident;

static int read_ident(pid_t pid, ident *out)
{
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), pid);
	cs_proc_ident id = { 0 };
	cs_stat st = { 0 };
	int r = pdir < 0 ? pdir : cs_proc_read_ident(pdir, pid, &id);
	if (r == 0)
		r = cs_proc_read_stat(pdir, &st);
	if (r < 0)
		return r;
	snprintf(out->name, sizeof(out->name), "%llu-%d", id.ns_ino, (int)id.nspid);
	out->nspid = id.nspid;
	out->start = st.start_time;
	return 0;
}

static int open_dir(cs_claims *c, int statefd, cs_error *err)
{
	if (c->dirfd >= 0)
		return 0;
	if (mkdirat(statefd, "claims", 0700) < 0 && errno != EEXIST)
		return cs_error_errno(err, CS_ESTATE, errno, NULL, "cannot create %s/claims", cs_state_dir());
	c->dirfd = openat(statefd, "claims", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int e = errno;
	struct stat st;
	/* O_NOFOLLOW with O_DIRECTORY answers ENOTDIR for a symlink too. */
	bool link = c->dirfd < 0 && fstatat(statefd, "claims", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
	errno = e;
	if (c->dirfd < 0)
		return cs_error_errno(err, CS_ESTATE, errno,
				      "Remove it (a symlink is refused), or set CUDASNAP_STATE_DIR to a directory owned "
				      "by root (or you) with mode 0700.",
				      "cannot open %s/claims%s", cs_state_dir(),
				      errno == ELOOP || link   ? " (it is a symlink, which is refused)" :
					      errno == ENOTDIR ? " (it is not a directory)" :
								 "");
	return 0;
}

/* Opens and locks the record; -ESTALE when a holder let go of it (and
 * removed it) between our open and our lock: then open it again. (Not
 * -EAGAIN: that is -EWOULDBLOCK, a holder that keeps it.) */
static int lock_file(int dirfd, const char *name, int *out, const char **why)
{
	_cleanup_close_ int fd = cs_state_open_file(dirfd, name, O_RDWR | O_CREAT, 0600, why);
	if (fd < 0)
		return fd;
	int r = lock_retry(fd, LOCK_EX);
	if (r < 0)
		return r;
	struct stat held, now;
	if (fstat(fd, &held) < 0 || fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) < 0 || held.st_ino != now.st_ino ||
	    held.st_dev != now.st_dev)
		return -ESTALE;
	*out = TAKE_FD(fd);
	return 0;
}

/* The first line of a record: who holds, or held, it. "" when empty. */
static void record_holder(int fd, char *who, size_t size)
{
	char line[200];
	ssize_t n = pread(fd, line, sizeof(line) - 1, 0);
	line[n > 0 ? n : 0] = '\0';
	line[strcspn(line, "\n")] = '\0';
	cs_sanitize(who, size, line, strlen(line));
}

/* Names the holder of fd's lock, and says when that process is stopped:
 * it will not let go until it runs again. */
static void describe(int lockfd, int recordfd, char *who, size_t size, char *fix, size_t fixsize)
{
	pid_t holder = cs_state_lock_holder(lockfd);
	who[0] = '\0';
	if (holder > 0)
		cs_state_describe_holder(lockfd, who, size);
	if (!who[0] && recordfd >= 0)
		record_holder(recordfd, who, size);
	if (!who[0])
		snprintf(who, size, "a process of a PID namespace this one cannot see");
	char state = 0;
	_cleanup_close_ int pdir = holder > 0 ? cs_proc_open(cs_proc_dir(), holder) : -1;
	cs_stat st;
	if (pdir >= 0 && cs_proc_read_stat(pdir, &st) == 0)
		state = st.state;
	if (state == 'T' || state == 't')
		snprintf(fix, fixsize,
			 "Its holder, process %d, is stopped%s and keeps the claim until it runs again: resume it "
			 "(kill -CONT %d, or end the debugger that holds it). Two operations never act on one process "
			 "at once.",
			 (int)holder, state == 't' ? " by a tracer" : "", (int)holder);
	else
		snprintf(fix, fixsize,
			 "Wait for it to finish: two operations never act on one process at once (operations on "
			 "other processes are not held up).");
}

static int busy(int lockfd, int recordfd, pid_t pid, const char *comm, cs_error *err)
{
	char who[160], fix[320];
	describe(lockfd, recordfd, who, sizeof(who), fix, sizeof(fix));
	return cs_error_set(err, CS_ESTATE, fix, "another cudasnap is running on process %d (%s): %s", (int)pid, comm,
			    who);
}

static void write_record(int fd, const char *command, const ident *id, const char *comm)
{
	char text[400];
	int len = snprintf(text, sizeof(text), "pid %d, '%s'\nprocess %d %llu %s\n", (int)getpid(), command,
			   (int)id->nspid, id->start, comm);
	if (len > (int)sizeof(text) - 1)
		len = (int)sizeof(text) - 1;
	if (ftruncate(fd, 0) < 0 || pwrite(fd, text, (size_t)len, 0) != len) {
		/* The lock is held; a record that cannot be written only loses its description. */
	}
}

static bool record_process(int fd, unsigned long long *start, char *comm, size_t size);

/* The record's lock and content; left gets a dead holder's line. */
static int claim_record(cs_claims *c, int statefd, cs_claim *cl, const ident *id, const char *comm, const char *command,
			char *left, size_t leftsize, cs_error *err)
{
	int r = open_dir(c, statefd, err);
	if (r < 0)
		return r;
	snprintf(cl->name, sizeof(cl->name), "%s", id->name);
	const char *why = "";
	for (int tries = 0; (r = lock_file(c->dirfd, cl->name, &cl->fd, &why)) == -ESTALE && tries < 100; tries++)
		;
	if (r == -EWOULDBLOCK) {
		_cleanup_close_ int fd = cs_state_open_file(c->dirfd, cl->name, O_RDONLY, 0, NULL);
		return busy(fd, fd, cl->pid, comm, err);
	}
	if (r < 0)
		return cs_error_errno(err, CS_ESTATE, -r, why[0] ? "Remove it: cudasnap makes it again." : NULL,
				      "cannot claim process %d in %s/claims%s%s%s%s", (int)cl->pid, cs_state_dir(),
				      why[0] ? ": its record " : "", why[0] ? cl->name : "", why[0] ? ": " : "", why);
	char old[RECORD_MAX];
	ssize_t n = pread(cl->fd, old, sizeof(old) - 1, 0);
	old[n > 0 ? n : 0] = '\0';
	unsigned long long start;
	char was[64];
	/* A record of this very process (same start time) that nobody held. */
	if (old[0] && record_process(cl->fd, &start, was, sizeof(was)) && start == id->start) {
		cl->left = strdup(old);
		if (left)
			record_holder(cl->fd, left, leftsize);
	}
	write_record(cl->fd, command, id, comm);
	return 0;
}

/* Whether the lock another open file holds on pid's pidfd is held by
 * unprivileged processes alone (claim.h), which are then named. */
static bool not_a_claim(const cs_claims *c, int pidfd, pid_t pid, const char *comm)
{
	char who[400];
	if (cs_holder_judge(pidfd, pid, who, sizeof(who)) != CS_HOLDER_UNPRIVILEGED)
		return false;
	if (c->warn) {
		char line[640];
		snprintf(line, sizeof(line),
			 "warning: process %d (%s) is locked through a pidfd by %s, which is not privileged (not "
			 "root, no CAP_SYS_PTRACE in this user namespace, not the process's owner) and so is not "
			 "another cudasnap: that lock is ignored",
			 (int)pid, comm, who);
		c->warn(c->warn_ctx, line);
	}
	return true;
}

bool cs_claims_holds(const cs_claims *c, pid_t pid)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->v[i].pid == pid)
			return true;
	return false;
}

int cs_claims_add(cs_claims *c, int statefd, pid_t pid, const char *comm, const char *command, char *left,
		  size_t leftsize, cs_error *err)
{
	if (left && leftsize)
		left[0] = '\0';
	ident id;
	int r = read_ident(pid, &id);
	if (r < 0)
		return cs_error_errno(err, CS_EPROC, -r, NULL, "process %d (%s) cannot be read", (int)pid, comm);
	if (cs_grow(&c->v, &c->cap, c->n + 1, sizeof(*c->v)) < 0)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	cs_claim cl = { .pid = pid, .pidfd = -1, .fd = -1 };
	int pfd = pidfs_fd(pid);
	if (pfd == -ESRCH)
		return cs_error_set(err, CS_EPROC, NULL, "process %d (%s) exited", (int)pid, comm);
	if (pfd >= 0) {
		cl.pidfd = pfd;
		r = lock_retry(pfd, LOCK_EX);
		if (r == -EWOULDBLOCK && not_a_claim(c, pfd, pid, comm)) {
			close(pfd);
			cl.pidfd = -1;
			r = 0;
		}
		if (r < 0) {
			int recfd = c->dirfd >= 0 ? cs_state_open_file(c->dirfd, id.name, O_RDONLY, 0, NULL) : -1;
			r = r == -EWOULDBLOCK ?
				busy(pfd, recfd, pid, comm, err) :
				cs_error_errno(err, CS_ESTATE, -r, NULL, "cannot claim process %d", (int)pid);
			if (recfd >= 0)
				close(recfd);
			close(pfd);
			return r;
		}
	}
	if (statefd >= 0) {
		r = claim_record(c, statefd, &cl, &id, comm, command, left, leftsize, err);
		if (r < 0) {
			if (cl.pidfd >= 0)
				close(cl.pidfd);
			return r;
		}
	}
	c->v[c->n++] = cl;
	return 0;
}

/* Tries fd's lock shared and lets go at once: false when another holds it
 * exclusively. */
static bool free_now(int fd)
{
	if (flock(fd, LOCK_SH | LOCK_NB) < 0)
		return errno != EWOULDBLOCK;
	flock(fd, LOCK_UN);
	return true;
}

bool cs_claims_busy(int statefd, pid_t pid, char *who, size_t size)
{
	char fix[320];
	ident id;
	_cleanup_close_ int recfd = -1;
	if (statefd >= 0 && read_ident(pid, &id) == 0) {
		_cleanup_close_ int dir = openat(statefd, "claims", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		recfd = dir >= 0 ? cs_state_open_file(dir, id.name, O_RDONLY, 0, NULL) : -1;
	}
	int pfd = pidfs_fd(pid);
	_cleanup_close_ int pidfd = pfd >= 0 ? pfd : -1;
	char ignored[8];
	if (pidfd >= 0 && !free_now(pidfd) &&
	    cs_holder_judge(pidfd, pid, ignored, sizeof(ignored)) != CS_HOLDER_UNPRIVILEGED) {
		describe(pidfd, recfd, who, size, fix, sizeof(fix));
		return true;
	}
	if (recfd >= 0 && !free_now(recfd)) {
		describe(recfd, recfd, who, size, fix, sizeof(fix));
		return true;
	}
	return false;
}

/* The process a record names, if t has it alive: same PID namespace, same
 * pid there, same start time. */
static const cs_proc *find_named(const cs_ptable *t, const char *name, unsigned long long start)
{
	for (size_t i = 0; i < t->n; i++) {
		const cs_proc *p = &t->procs[i];
		ident id;
		if (p->start_time == start && read_ident(p->pid, &id) == 0 && strcmp(id.name, name) == 0)
			return p;
	}
	return NULL;
}

/* "process NSPID START COMM" on the record's second line. */
static bool record_process(int fd, unsigned long long *start, char *comm, size_t size)
{
	char buf[400];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	const char *l = strchr(buf, '\n');
	if (!l || strncmp(l + 1, "process ", 8) != 0)
		return false;
	char *end;
	errno = 0;
	long nspid = strtol(l + 9, &end, 10);
	if (errno || nspid <= 0 || *end != ' ')
		return false;
	*start = strtoull(end + 1, &end, 10);
	if (errno || *end != ' ')
		return false;
	cs_sanitize(comm, size, end + 1, strcspn(end + 1, "\n"));
	return true;
}

/* The record's "files STEP N DIR/NAME" line, when it has one whose first
 * file is still there. */
static bool record_files(int fd, cs_left_behind *e)
{
	char text[RECORD_MAX];
	ssize_t got = pread(fd, text, sizeof(text) - 1, 0);
	text[got > 0 ? got : 0] = '\0';
	return text_files(text, e);
}

/* The same, of a record's text. */
static bool text_files(const char *text, cs_left_behind *e)
{
	const char *l = text + head_len(text), *end = strchr(l, '\n');
	const char *step = strncmp(l, "files park ", 11) == 0 ? "park" :
		strncmp(l, "files unpark ", 13) == 0          ? "unpark" :
								NULL;
	if (head_len(text) == 0 || end == NULL || step == NULL)
		return false;
	const char *p = l + 7 + strlen(step);
	unsigned n = 0;
	for (; p < end && *p >= '0' && *p <= '9' && n <= 64; p++)
		n = n * 10 + (unsigned)(*p - '0');
	char path[sizeof(e->files)], first[sizeof(e->files) + 8];
	if (n == 0 || n > 64 || p >= end || *p != ' ' || (size_t)(end - p - 1) >= sizeof(path))
		return false;
	snprintf(path, sizeof(path), "%.*s", (int)(end - p - 1), p + 1);
	struct stat st;
	snprintf(first, sizeof(first), "%s.0", path);
	if (path[0] != '/' || fstatat(AT_FDCWD, first, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
		return false;
	if (!cs_shell_word(path, e->files_word, sizeof(e->files_word)))
		return false;
	cs_sanitize(e->files, sizeof(e->files), path, strlen(path));
	snprintf(e->step, sizeof(e->step), "%s", step);
	e->nfiles = n;
	return true;
}

static void look_at(int dirfd, const char *name, const cs_ptable *t, bool tidy, cs_left_behind **out, size_t *n,
		    size_t *cap)
{
	_cleanup_close_ int fd = cs_state_open_file(dirfd, name, O_RDWR, 0, NULL);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
		return; /* gone, not one of ours (a link, another's), or its holder lives */
	unsigned long long start;
	cs_left_behind e = { 0 };
	bool named = record_process(fd, &start, e.comm, sizeof(e.comm));
	const cs_proc *p = named ? find_named(t, name, start) : NULL;
	bool files = named && record_files(fd, &e);
	e.files_only = !p || p->state == CS_STATE_RUNNING;
	if (e.files_only && !files) {
		if (tidy)
			unlinkat(dirfd, name, 0);
		return;
	}
	e.pid = p ? p->pid : 0;
	record_holder(fd, e.holder, sizeof(e.holder));
	if (cs_grow(out, cap, *n + 1, sizeof(**out)) == 0)
		(*out)[(*n)++] = e;
}

void cs_claims_left_behind(int statefd, const cs_ptable *t, bool tidy, cs_left_behind **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	size_t cap = 0;
	int fd = statefd >= 0 ? openat(statefd, "claims", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	_cleanup_closedir_ DIR *dir = fd >= 0 ? cs_fdopendir(fd) : NULL;
	if (!dir)
		return;
	for (struct dirent *de; (de = readdir(dir));)
		if (de->d_name[0] != '.')
			look_at(dirfd(dir), de->d_name, t, tidy, out, n, &cap);
}

static void say(const cs_left_behind *b, int state, int parked, char *line, size_t lsize, char *fix, size_t fsize)
{
	const char *st = cs_state_name(state) ? cs_state_name(state) : "in an unknown state";
	char files[sizeof(b->files) + 96] = "";
	if (b->files[0])
		snprintf(files, sizeof(files), "%u park file%s %s.0%s", b->nfiles, b->nfiles == 1 ? "" : "s", b->files,
			 b->nfiles > 1 ? " ..." : "");
	if (!b->files_only) {
		snprintf(line, lsize, "%d (%s) is %s: %s ended in the middle of an operation on it%s%s", (int)b->pid,
			 b->comm, st, b->holder, files[0] ? "; its GPU memory may be in its " : "", files);
		if (state == CS_STATE_LOCKED)
			snprintf(fix, fsize, "cudasnap unlock --pid %d", (int)b->pid);
		else
			snprintf(fix, fsize, "cudasnap restore --pid %d%s%s", (int)b->pid,
				 files[0] ? " --park-from " : "", files[0] ? b->files_word : "");
		return;
	}
	const char *during = strcmp(b->step, "unpark") == 0 ? "an unpark from them" : "a park into them";
	if (b->pid == 0) {
		snprintf(line, lsize, "the %s of process %s, which has exited, are left: %s ended in the middle of %s",
			 files, b->comm, b->holder, during);
		snprintf(fix, fsize, "rm %s.*", b->files_word);
	} else if (parked == 1) {
		snprintf(line, lsize,
			 "%d (%s) is running but parked, its GPU memory in its %s: %s ended in the middle of %s",
			 (int)b->pid, b->comm, files, b->holder, during);
		snprintf(fix, fsize, "cudasnap restore --pid %d --park-from %s", (int)b->pid, b->files_word);
	} else if (parked == 0) {
		snprintf(line, lsize,
			 "%d (%s) is running with its GPU memory, and its %s are left: %s ended in the middle of %s; "
			 "they hold nothing it needs",
			 (int)b->pid, b->comm, files, b->holder, during);
		snprintf(fix, fsize, "rm %s.*", b->files_word);
	} else {
		snprintf(line, lsize,
			 "%d (%s) is running, and its %s are left: %s ended in the middle of %s; whether it is "
			 "parked in them is not known here (its interposer did not answer, or was not asked: "
			 "'cudasnap ps' asks it): keep them until it is",
			 (int)b->pid, b->comm, files, b->holder, during);
		snprintf(fix, fsize, "%s", "");
	}
}

void cs_left_behind_say(const cs_left_behind *b, int state, int parked, char *line, size_t lsize, char *fix,
			size_t fsize)
{
	say(b, state, parked, line, lsize, fix, fsize);
	/* a command cut short would name something else: none, then */
	if (fsize && strlen(fix) + 1 >= fsize)
		fix[0] = 0;
}
