#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "proto.h"

/* The caller's way to a target's restore thread. Two things of containers
 * stand in the way of the plain connect to @fakecuda.<pidns>.<tgid>:
 *
 * - An abstract unix socket belongs to a network namespace, so a caller on
 *   the host cannot reach a target in a container with a network namespace
 *   of its own. The socket is then created inside the target's namespace:
 *   a connect looks names up in the namespace of the socket, not of the
 *   thread that calls it.
 * - CRIU restores a process into a new pid namespace with its sockets as
 *   they were, so the restore thread listens under the inode of the old
 *   namespace. When nobody listens under the expected name, the caller looks
 *   for the name among the target's own listening sockets. */

struct ns_socket {
	int nsfd;
	int fd;
};

/* setns(CLONE_NEWNET) changes only the calling thread, hence a thread of its
 * own that ends with the call. It first takes an fs_struct of its own: a
 * thread that shares it (CLONE_FS, as every pthread does) makes the
 * kernel refuse setns(CLONE_NEWNS) to the whole process (EINVAL), and
 * pthread_join returns before an exiting thread gives its share back. CRIU
 * enters the mount namespaces of containers that way from the same process
 * as its plugins. */
static void *socket_in_netns(void *arg)
{
	struct ns_socket *s = arg;
	if (unshare(CLONE_FS) == 0 && setns(s->nsfd, CLONE_NEWNET) == 0)
		s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	return NULL;
}

static int same_file(const char *a, const char *b, int *same)
{
	struct stat sa, sb;
	if (stat(a, &sa) != 0 || stat(b, &sb) != 0)
		return -1;
	*same = sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev;
	return 0;
}

/* A stream socket in pid's network namespace; -1 on any error. */
static int target_socket(int pid)
{
	char path[64];
	int same;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
	if (same_file(path, "/proc/thread-self/ns/net", &same) != 0)
		return -1;
	if (same)
		return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct ns_socket s = { open(path, O_RDONLY | O_CLOEXEC), -1 };
	if (s.nsfd < 0)
		return -1;
	/* the caller's signals must not land on the helper thread */
	sigset_t all, old;
	pthread_t t;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&t, NULL, socket_in_netns, &s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0)
		pthread_join(t, NULL);
	close(s.nsfd);
	return s.fd;
}

/* Inode numbers of the sockets pid holds, up to max. */
static int socket_inodes(int pid, unsigned long *inodes, int max)
{
	char dir[64], link[320], target[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	DIR *d = opendir(dir);
	if (d == NULL)
		return 0;
	int n = 0;
	struct dirent *de;
	while (n < max && (de = readdir(d)) != NULL) {
		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		if (sscanf(target, "socket:[%lu]", &inodes[n]) == 1)
			n++;
	}
	closedir(d);
	return n;
}

static int held(const unsigned long *inodes, int n, unsigned long ino)
{
	for (int i = 0; i < n; i++)
		if (inodes[i] == ino)
			return 1;
	return 0;
}

/* The name of the restore thread's socket as the target holds it: one of its
 * listening sockets in /proc/PID/net/unix (its network namespace) named
 * @fakecuda.<any pidns>.<tgid>. */
static int bound_name(int pid, int tgid, struct sockaddr_un *sa, socklen_t *len)
{
	unsigned long inodes[256];
	int n = socket_inodes(pid, inodes, 256);
	char path[64], line[512], suffix[32];
	snprintf(path, sizeof(path), "/proc/%d/net/unix", pid);
	snprintf(suffix, sizeof(suffix), ".%d", tgid);
	FILE *f = n > 0 ? fopen(path, "re") : NULL;
	if (f == NULL)
		return -1;
	int found = -1;
	while (found < 0 && fgets(line, sizeof(line), f)) {
		unsigned int flags, st;
		unsigned long ino;
		char name[sizeof(sa->sun_path) + 1];
		/* Num RefCount Protocol Flags Type St Inode Path */
		if (sscanf(line, "%*s %*s %*s %x %*s %x %lu %108s", &flags, &st, &ino, name) != 4)
			continue;
		size_t nlen = strlen(name), slen = strlen(suffix);
		if (!(flags & 0x10000) || strncmp(name, "@fakecuda.", 10) != 0 || nlen <= slen ||
		    strcmp(name + nlen - slen, suffix) != 0 || !held(inodes, n, ino))
			continue;
		memset(sa, 0, sizeof(*sa));
		sa->sun_family = AF_UNIX;
		memcpy(sa->sun_path + 1, name + 1, nlen - 1);
		*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + nlen);
		found = 0;
	}
	fclose(f);
	return found;
}

static int try_connect(int pid, const struct sockaddr_un *sa, socklen_t len, int *fd)
{
	*fd = target_socket(pid);
	if (*fd < 0)
		return EIO;
	int r;
	do
		r = connect(*fd, (const struct sockaddr *)sa, len);
	while (r != 0 && errno == EINTR);
	if (r == 0)
		return 0;
	int err = errno;
	close(*fd);
	*fd = -1;
	return err;
}

CUresult fc_connect_target(int pid, unsigned long pidns, int tgid, int *fd)
{
	struct sockaddr_un sa;
	socklen_t len = fc_sockaddr(pidns, tgid, &sa);
	int err = try_connect(pid, &sa, len, fd);
	if ((err == ECONNREFUSED || err == ENOENT) && bound_name(pid, tgid, &sa, &len) == 0)
		err = try_connect(pid, &sa, len, fd);
	if (err == 0)
		return CUDA_SUCCESS;
	/* nobody listening: the process never initialized the driver */
	return err == ECONNREFUSED || err == ENOENT ? CUDA_ERROR_NOT_INITIALIZED
						   : CUDA_ERROR_OPERATING_SYSTEM;
}
