/* A control connection between two interposed processes: a descriptor
 * passed over it (SCM_RIGHTS) with the message it goes with (the
 * exporter's descriptors of its memory, an importer's proof that it holds
 * one), and who is at the other end. */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "park.h"

int park_send_fd(int conn, const void *msg, size_t len, int fd)
{
	struct iovec io = { (void *)msg, len };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1 };
	if (fd >= 0) {
		m.msg_control = u.buf;
		m.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(conn, &m, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

ssize_t park_recv_fd(int conn, void *buf, size_t size, int *fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec io = { buf, size };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	*fd = -1;
	ssize_t n = recvmsg(conn, &m, MSG_CMSG_CLOEXEC);
	struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&m) : NULL;
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
		memcpy(fd, CMSG_DATA(c), sizeof(int));
	return n;
}

pid_t park_peer_pid(int conn)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	return getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 ? cr.pid : 0;
}
