/* The socket through which cudasnap parks and unparks this process, and
 * through which another interposed process imports memory (CUDA IPC). It
 * is a unix socket (mode 0600) in a directory of its own (mode 0700,
 * .cudasnap-park.PID.RANDOM) made in a directory the process can write
 * (CUDASNAP_PARK_DIR, else /dev/shm, else /tmp) that nobody else can
 * rename its entries in (sticky, or writable only by its owner). cudasnap
 * finds it among the process's own sockets (/proc/PID/net/unix) and
 * reaches it through /proc/PID/root, so that containers need nothing of
 * it. One request per line, one answer per line (request.h).
 *
 * Who may ask what:
 * - park and unpark carry the process's key (queued in a socket the
 *   process keeps open, park_find.h): cudasnap takes it with pidfd_getfd,
 *   which takes ptrace attach access to the process, as reading or
 *   writing its memory does (commit only keeps the park its own
 *   connection made);
 * - status needs the key too: what the process holds and does is told
 *   only to who may read its memory;
 * - a peer's CUDA IPC requests need the key or a peer that is root or the
 *   process's own user as its user namespace maps them (never the
 *   overflow uid, which stands for every user it does not map), and then
 *   prove the handle's secret (proof.c) on top.
 *
 * A park answered on a connection holds while that connection is open (its
 * lease: no read timeout while it holds one), until cudasnap says
 * "commit": should cudasnap die before that, the kernel closes the
 * connection and the process unparks itself. A connection that gives no
 * key is let go after a second of silence, and those cannot take the
 * places kept for the ones that give it (CONNS_MAX). A committed park has no
 * holder: it lasts until an unpark (cudasnap restore), and cudasnap ps
 * names a process that is parked while the driver says it runs. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "park.h"
#include "park_find.h"

_Static_assert(PARK_REQ_KEY_LEN == PARK_KEY_LEN, "one key length");

/* Connections served at once: PROVEN_MAX for those that gave the key (a
 * park, an unpark, cudasnap's status), UNPROVEN_MAX for the others (a
 * peer's CUDA IPC request, or anyone who can connect). An unproven one
 * waits at most UNPROVEN_S for each line, and when they are all taken the
 * oldest makes room for a new one: silent connections keep neither
 * cudasnap nor a peer out. Room for as many again that were let go and
 * whose threads are ending. */
#define PROVEN_MAX 48
#define UNPROVEN_MAX 16
#define UNPROVEN_S 1
#define CONNS_MAX (PROVEN_MAX + 2 * UNPROVEN_MAX)

static pthread_once_t started = PTHREAD_ONCE_INIT;
static atomic_uint holding; /* connections that hold a park */
static char sock_dir[108], sock_path[108];
static int listen_fd = -1, key_fd = -1, marker_fd = -1;
static uint8_t key[PARK_KEY_LEN];

/* The connections being served. A child forked without exec gets a copy
 * of each, which would keep cudasnap from seeing the end of its
 * connection (and CRIU from dumping the child): the child closes them. */
struct conn {
	int fd;
	bool proven; /* it gave the key */
	bool let_go; /* shut down to make room, its thread ending */
	unsigned long seq; /* the order of their coming */
};

static pthread_mutex_t conns_mu = PTHREAD_MUTEX_INITIALIZER;
static struct conn conns[CONNS_MAX];
static size_t nconns;
static unsigned long conns_seq;

static void conns_lock(void)
{
	pthread_mutex_lock(&conns_mu);
}

static void conns_unlock(void)
{
	pthread_mutex_unlock(&conns_mu);
}

/* A child forked without exec has no control thread, and must hold nothing
 * of its parent's socket: cudasnap would find the parent's answers there. */
static void forget_in_child(void)
{
	for (size_t i = 0; i < nconns; i++)
		close(conns[i].fd);
	nconns = 0;
	conns_unlock();
	if (listen_fd >= 0)
		close(listen_fd);
	if (key_fd >= 0)
		close(key_fd);
	if (marker_fd >= 0)
		close(marker_fd);
	listen_fd = key_fd = marker_fd = -1;
	sock_path[0] = sock_dir[0] = 0;
}

/* A new connection, unproven: when those are all taken, the oldest of them
 * is let go (its thread sees the end and ends it). */
static bool conns_add(int conn)
{
	conns_lock();
	size_t unproven = 0, oldest = nconns;
	for (size_t i = 0; i < nconns; i++) {
		if (conns[i].proven || conns[i].let_go)
			continue;
		unproven++;
		if (oldest == nconns || conns[i].seq < conns[oldest].seq)
			oldest = i;
	}
	if (unproven >= UNPROVEN_MAX && oldest < nconns) {
		shutdown(conns[oldest].fd, SHUT_RDWR);
		conns[oldest].let_go = true;
	}
	bool room = nconns < CONNS_MAX;
	if (room)
		conns[nconns++] = (struct conn){ .fd = conn, .seq = conns_seq++ };
	conns_unlock();
	return room;
}

/* conn gave the key: it keeps its place while PROVEN_MAX are not taken. */
static bool conns_prove(int conn)
{
	conns_lock();
	size_t proven = 0, at = nconns;
	for (size_t i = 0; i < nconns; i++) {
		proven += conns[i].proven;
		if (conns[i].fd == conn)
			at = i;
	}
	bool ok = at < nconns && (conns[at].proven || (!conns[at].let_go && proven < PROVEN_MAX));
	if (ok)
		conns[at].proven = true;
	conns_unlock();
	return ok;
}

/* Ends conn for everyone who holds a copy (a forked child), then closes it. */
static void conns_end(int conn)
{
	shutdown(conn, SHUT_RDWR);
	conns_lock();
	for (size_t i = 0; i < nconns; i++)
		if (conns[i].fd == conn) {
			conns[i] = conns[--nconns];
			break;
		}
	close(conn);
	conns_unlock();
}

static void remove_socket(void)
{
	if (sock_path[0])
		unlink(sock_path);
	if (sock_dir[0])
		rmdir(sock_dir);
}

/* A directory where nobody else can replace what the process makes in it:
 * owned by root or the process's user, and writable by nobody else or
 * sticky. */
static bool safe_base(const char *dir)
{
	struct stat st;
	return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_uid == 0 || st.st_uid == geteuid()) &&
		(!(st.st_mode & (S_IWGRP | S_IWOTH)) || (st.st_mode & S_ISVTX));
}

static int bind_in(int fd, const char *base)
{
	unsigned int rnd = 0;
	if (!safe_base(base) || getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
		return -1;
	char dir[108];
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int n = snprintf(dir, sizeof(dir), "%s/.cudasnap-park.%d.%08x", base, (int)getpid(), rnd);
	int m = snprintf(a.sun_path, sizeof(a.sun_path), "%s/control", dir);
	if (n < 0 || (size_t)n >= sizeof(dir) || m < 0 || (size_t)m >= sizeof(a.sun_path))
		return -1;
	/* The directory's mode only loses bits to the umask (the process's
	 * own, which it may change meanwhile: never touched here), so it is
	 * the owner's alone from its creation; so is the socket, whose mode is
	 * set before bind creates it. */
	if (mkdir(dir, 0700) != 0)
		return -1;
	if (fchmod(fd, 0600) != 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		rmdir(dir);
		return -1;
	}
	snprintf(sock_dir, sizeof(sock_dir), "%s", dir);
	snprintf(sock_path, sizeof(sock_path), "%s", a.sun_path);
	return 0;
}

/* The key, random, queued in a socket of a pair whose other end is gone:
 * a socket cannot be opened again through /proc/PID/fd, so only who takes
 * the descriptor itself reads it (pidfd_getfd: ptrace attach access), and
 * peeks, leaving it there for the next. Beside it, a memfd of
 * PARK_KEY_NAME, readable by all who can see it, says which descriptor it
 * is (nothing secret: a file there can be opened, or made readable by its
 * owner, with read access alone). 0, with *sock and *marker, or -1. */
static int make_key(int *sock, int *marker)
{
	int sv[2] = { -1, -1 };
	unsigned char msg[sizeof(PARK_KEY_MAGIC) - 1 + PARK_KEY_LEN];
	char where[32];
	*sock = *marker = -1;
	if (getrandom(key, sizeof(key), 0) != sizeof(key) ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return -1;
	memcpy(msg, PARK_KEY_MAGIC, sizeof(PARK_KEY_MAGIC) - 1);
	memcpy(msg + sizeof(PARK_KEY_MAGIC) - 1, key, sizeof(key));
	bool sent = send(sv[0], msg, sizeof(msg), MSG_NOSIGNAL) == (ssize_t)sizeof(msg);
	explicit_bzero(msg, sizeof(msg));
	close(sv[0]); /* what is queued stays; nothing more can come */
	int fd = sent ? memfd_create(PARK_KEY_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING) : -1;
	int len = snprintf(where, sizeof(where), "fd=%d\n", sv[1]);
	if (fd < 0 || pwrite(fd, where, (size_t)len, 0) != len ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
		if (fd >= 0)
			close(fd);
		close(sv[1]);
		return -1;
	}
	*sock = sv[1];
	*marker = fd;
	return 0;
}

static uid_t overflow_uid(void)
{
	static uid_t uid = (uid_t)-1;
	if (uid == (uid_t)-1) {
		char text[16] = "65534";
		int fd = open("/proc/sys/kernel/overflowuid", O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t n = read(fd, text, sizeof(text) - 1);
			text[n > 0 ? n : 0] = 0;
			close(fd);
		}
		uid = (uid_t)strtoul(text, NULL, 10);
	}
	return uid;
}

/* Root or the process's own user, as its user namespace maps them. A peer
 * whose uid it does not map shows as the overflow uid: whoever it is, it
 * is not known. */
static bool peer_known(int conn)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || cr.uid == overflow_uid())
		return false;
	return cr.uid == 0 || cr.uid == getuid() || cr.uid == geteuid();
}

static void answer(int conn, const char *reply)
{
	size_t len = strlen(reply), done = 0;
	while (done < len) {
		ssize_t w = send(conn, reply + done, len - done, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		done += (size_t)w;
	}
}

static bool allowed(const struct park_req *rq, bool known)
{
	bool owner = rq->has_key && park_same(rq->key, key, sizeof(key));
	switch (rq->verb) {
	case PARK_REQ_PARK:
	case PARK_REQ_UNPARK: return owner;
	case PARK_REQ_COMMIT: return true; /* it keeps only this connection's own park */
	case PARK_REQ_STATUS: return owner; /* what it holds is told to who may read it */
	default: return known;
	}
}

/* How long a connection that holds no park may stay silent before it is
 * let go (CUDASNAP_PARK_IDLE_S, 600 s): a peer must not keep a thread for
 * ever. */
static time_t idle_s(void)
{
	static time_t s = -1;
	if (s < 0) {
		const char *e = getenv("CUDASNAP_PARK_IDLE_S");
		unsigned long v = e && e[0] ? strtoul(e, NULL, 10) : 0;
		s = v > 0 && v <= 86400 ? (time_t)v : 600;
	}
	return s;
}

/* While a park is held by this connection it has no read timeout: the
 * connection's end is the holder's death, which the kernel tells at once.
 * One that did not give the key waits UNPROVEN_S for each line. */
static void lease(int conn, bool held, bool proven)
{
	struct timeval tv = { .tv_sec = held ? 0 : proven ? idle_s() : UNPROVEN_S };
	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

unsigned park_control_held(void)
{
	return atomic_load(&holding);
}

/* The read end of the pipe of a reservation under way (park_req: room),
 * after the files: 0, or -1 (nothing kept). */
static int take_room(int conn, struct park_files *f)
{
	char c;
	int fd = -1;
	struct stat st;
	if (park_recv_fd(conn, &c, 1, &fd) != 1 || fd < 0 || c != 'R' || fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode) ||
	    (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDONLY) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	f->room = fd;
	f->has_room = true;
	return 0;
}

/* The descriptors of a park or unpark into or from files: one message of
 * one byte each, after the request's line. 0, or -1 with the answer given
 * (those received are closed). */
static int take_files(int conn, const struct park_req *rq, struct park_files *f)
{
	char why[160];
	f->n = 0;
	for (unsigned i = 0; i < rq->files; i++) {
		char c;
		int fd = -1;
		if (park_recv_fd(conn, &c, 1, &fd) != 1 || fd < 0) {
			if (fd >= 0)
				close(fd);
			park_files_close(f);
			answer(conn, "error code=0 stage=files why=a file did not come with the request\n");
			return -1;
		}
		f->fd[f->n++] = fd;
	}
	if (rq->room && take_room(conn, f) != 0) {
		park_files_close(f);
		answer(conn, "error code=0 stage=files why=the reservation's pipe did not come with the request\n");
		return -1;
	}
	if (f->n && park_files_check(f, rq->verb == PARK_REQ_PARK, why, sizeof(why)) != 0) {
		park_files_close(f);
		char reply[256];
		snprintf(reply, sizeof(reply), "error code=0 stage=files why=%s\n", why);
		answer(conn, reply);
		return -1;
	}
	return 0;
}

/* One request of the owner's; whether this connection holds a park after it. */
static bool owner_request(int conn, const struct park_req *rq, bool held)
{
	char reply[1024];
	unsigned ms = rq->timeout_ms ? rq->timeout_ms : 10000;
	struct park_files f = { .n = 0 };
	if (rq->verb != PARK_REQ_COMMIT && take_files(conn, rq, &f) != 0)
		return held;
	if (rq->verb == PARK_REQ_PARK) {
		bool was = park_is_parked();
		held = (park_park(ms, rq->unpin, &f, reply, sizeof(reply)) == 0 && !was) || held;
		answer(conn, reply);
	} else if (rq->verb == PARK_REQ_UNPARK) {
		int rc = park_unpark(ms, &f, reply, sizeof(reply));
		answer(conn, reply);
		if (rc == 0)
			park_drop_host_copy();
		held = held && rc != 0;
	} else {
		/* Its files are let go of: a process being checkpointed holds
		 * none of them open. */
		if (held)
			park_files_let_go();
		held = false;
		answer(conn, "ok committed=1\n");
	}
	return held;
}

/* Serves one connection; a park it made and did not commit is undone when
 * it ends. */
static void serve(int conn, bool known)
{
	char line[PARK_LINE_MAX], reply[1024];
	bool held = false, proven = false;
	ssize_t n;
	while ((n = park_read_line(conn, line, sizeof(line))) > 0) {
		struct park_req rq;
		park_req_parse(line, (size_t)n - 1, &rq);
		if (!proven && rq.has_key && park_same(rq.key, key, sizeof(key)) && conns_prove(conn)) {
			proven = true;
			lease(conn, held, proven);
		}
		if (rq.verb == PARK_REQ_BAD || rq.verb == PARK_REQ_PROOF) {
			answer(conn, "error code=0 stage=request\n");
		} else if (!allowed(&rq, known)) {
			snprintf(reply, sizeof(reply), "error code=%d stage=access\n", CU_ERR_NOT_PERMITTED);
			answer(conn, reply);
		} else if (rq.verb == PARK_REQ_STATUS) {
			park_status(reply, sizeof(reply));
			answer(conn, reply);
		} else if (rq.verb == PARK_REQ_FD || rq.verb == PARK_REQ_DETACH) {
			park_ipc_serve(conn, &rq);
		} else if (rq.verb >= PARK_REQ_VCLAIM) {
			park_vmm_serve(conn, &rq);
		} else {
			bool was = held;
			held = owner_request(conn, &rq, held);
			if (held != was) {
				if (held)
					atomic_fetch_add(&holding, 1);
				else
					atomic_fetch_sub(&holding, 1);
				lease(conn, held, proven);
			}
		}
	}
	if (held && park_unpark(0, NULL, reply, sizeof(reply)) == 0)
		park_drop_host_copy();
	if (held)
		atomic_fetch_sub(&holding, 1);
}

static void *one(void *arg)
{
	int conn = (int)(intptr_t)arg;
	serve(conn, peer_known(conn));
	conns_end(conn);
	return NULL;
}

/* Each connection has a thread of its own: cudasnap holds its park's
 * connection open through its whole command, and asks other things
 * meanwhile. At most CONNS_MAX at once. */
static void *server(void *arg)
{
	int fd = (int)(intptr_t)arg;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	for (;;) {
		int conn = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		if (conn < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			usleep(100000);
			continue;
		}
		if (!conns_add(conn)) {
			close(conn);
			continue;
		}
		lease(conn, false, false);
		pthread_t t;
		if (pthread_create(&t, &at, one, (void *)(intptr_t)conn) != 0)
			conns_end(conn);
	}
	return NULL;
}

static bool listen_somewhere(int fd)
{
	const char *env = getenv("CUDASNAP_PARK_DIR");
	const char *dirs[] = { env && env[0] ? env : "/dev/shm", "/dev/shm", "/tmp" };
	for (size_t i = 0; i < 3; i++)
		if (bind_in(fd, dirs[i]) == 0)
			return listen(fd, 16) == 0;
	return false;
}

/* A process that keeps its key must answer on its socket (cudasnap refuses
 * one that does not): a socket that could not be made lets the key go. */
static void drop_key(void)
{
	close(key_fd);
	close(marker_fd);
	key_fd = marker_fd = -1;
}

static void start(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (make_key(&key_fd, &marker_fd) < 0) {
		close(fd);
		park_mark_unparkable("it could not make the key of its control socket (socketpair, memfd_create)");
		return;
	}
	if (!listen_somewhere(fd)) {
		close(fd);
		drop_key();
		remove_socket();
		park_mark_unparkable("no directory to place its control socket in (CUDASNAP_PARK_DIR)");
		return;
	}
	atexit(remove_socket);
	listen_fd = fd;
	idle_s(); /* read here, before any thread of ours: getenv is not thread-safe */
	pthread_atfork(conns_lock, conns_unlock, forget_in_child);
	/* The thread must take no signal meant for the program. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_t t;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&t, &at, server, (void *)(intptr_t)fd);
	pthread_attr_destroy(&at);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		close(fd);
		listen_fd = -1;
		drop_key();
		remove_socket();
		park_mark_unparkable("its control thread could not start");
		return;
	}
	pthread_setname_np(t, "cudasnap-park");
}

void park_control_start(void)
{
	pthread_once(&started, start);
}
