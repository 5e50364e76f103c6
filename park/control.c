/* The socket through which cudasnap parks and unparks this process, and
 * through which another process of the same user that runs the interposer
 * imports memory (CUDA IPC). It is a unix socket bound in a directory the
 * process can write (CUDASNAP_PARK_DIR, else /dev/shm, else /tmp) under a
 * name no other process can guess in advance; cudasnap finds it among the
 * process's own sockets (/proc/PID/net/unix) and reaches it through
 * /proc/PID/root, so that containers need nothing of it. Only root and the
 * process's own user may ask (the file is 0600, and the peer's credentials
 * are checked). One request per line, one answer per line.
 *
 * A park answered on a connection holds only while that connection is
 * open, until cudasnap says "commit": should cudasnap die before that, the
 * process unparks itself. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "park.h"

static pthread_once_t started = PTHREAD_ONCE_INIT;
static char sock_path[108];
static int listen_fd = -1;

/* A child forked without exec has no control thread, and must not hold its
 * parent's socket: cudasnap would find the parent's answers there. */
static void forget_in_child(void)
{
	if (listen_fd >= 0)
		close(listen_fd);
	listen_fd = -1;
	sock_path[0] = 0;
}

static void remove_socket(void)
{
	if (sock_path[0])
		unlink(sock_path);
}

static int bind_in(int fd, const char *dir)
{
	unsigned int rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
		rnd = (unsigned)(park_now() * 1e9);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int n = snprintf(a.sun_path, sizeof(a.sun_path), "%s/.cudasnap-park.%d.%08x", dir, (int)getpid(), rnd);
	if (n < 0 || (size_t)n >= sizeof(a.sun_path))
		return -1;
	/* Not umask: it is the whole process's, and the program may be creating
	 * files meanwhile. Until the chmod, the peer check keeps others out. */
	int rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
	if (rc == 0 && chmod(a.sun_path, 0600) != 0) {
		unlink(a.sun_path);
		return -1;
	}
	if (rc == 0)
		snprintf(sock_path, sizeof(sock_path), "%s", a.sun_path);
	return rc;
}

static bool peer_allowed(int conn)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
		return false;
	return cr.uid == 0 || cr.uid == getuid() || cr.uid == geteuid();
}

/* One line (without its newline) from conn; 0 at the end. */
static ssize_t read_line(int conn, char *buf, size_t size)
{
	size_t n = 0;
	while (n + 1 < size) {
		char c;
		ssize_t r = read(conn, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return n ? (ssize_t)n : r;
		if (c == '\n')
			break;
		buf[n++] = c;
	}
	buf[n] = 0;
	return (ssize_t)n + 1;
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

static unsigned timeout_of(const char *line)
{
	const char *sp = strchr(line, ' ');
	unsigned long ms = sp ? strtoul(sp + 1, NULL, 10) : 0;
	return ms ? (ms > 600000 ? 600000 : (unsigned)ms) : 10000;
}

/* Serves one connection; a park it made and did not commit is undone when
 * it ends. */
static void serve(int conn)
{
	char line[256], reply[1024];
	bool held = false;
	ssize_t n;
	while ((n = read_line(conn, line, sizeof(line))) > 0) {
		if (strcmp(line, "status") == 0) {
			park_status(reply, sizeof(reply));
		} else if (strncmp(line, "park", 4) == 0 && (line[4] == 0 || line[4] == ' ')) {
			bool was = park_is_parked();
			held = park_park(timeout_of(line), strstr(line, " unpin") != NULL, reply, sizeof(reply)) == 0 &&
				!was;
		} else if (strncmp(line, "unpark", 6) == 0 && (line[6] == 0 || line[6] == ' ')) {
			int rc = park_unpark(timeout_of(line), reply, sizeof(reply));
			answer(conn, reply);
			if (rc == 0)
				park_drop_host_copy();
			held = held && rc != 0;
			continue;
		} else if (strcmp(line, "commit") == 0) {
			held = false;
			snprintf(reply, sizeof(reply), "ok committed=1\n");
		} else if (strncmp(line, "fd ", 3) == 0 || strncmp(line, "detach ", 7) == 0) {
			park_ipc_serve(conn, line);
			continue;
		} else if (line[0] == 'v') {
			park_vmm_serve(conn, line);
			continue;
		} else {
			snprintf(reply, sizeof(reply), "error code=0 stage=request\n");
		}
		answer(conn, reply);
	}
	if (held && park_unpark(0, reply, sizeof(reply)) == 0)
		park_drop_host_copy();
}

static void *one(void *arg)
{
	int conn = (int)(intptr_t)arg;
	if (peer_allowed(conn))
		serve(conn);
	close(conn);
	return NULL;
}

/* Each connection has a thread of its own: cudasnap holds its park's
 * connection open through its whole command, and asks other things
 * meanwhile. */
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
		/* A request that never ends must not hold the next one for ever. */
		struct timeval tv = { .tv_sec = 600 };
		setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		pthread_t t;
		if (pthread_create(&t, &at, one, (void *)(intptr_t)conn) != 0)
			close(conn);
	}
	return NULL;
}

static void start(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	const char *env = getenv("CUDASNAP_PARK_DIR");
	const char *dirs[] = { env && env[0] ? env : "/dev/shm", "/dev/shm", "/tmp" };
	bool bound = false;
	for (size_t i = 0; i < 3 && !bound; i++)
		bound = bind_in(fd, dirs[i]) == 0;
	if (!bound || listen(fd, 16) != 0) {
		close(fd);
		park_mark_unparkable("no directory to place its control socket in (CUDASNAP_PARK_DIR)");
		return;
	}
	atexit(remove_socket);
	listen_fd = fd;
	pthread_atfork(NULL, NULL, forget_in_child);
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
