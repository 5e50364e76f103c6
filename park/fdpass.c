/* A control connection between two interposed processes: a descriptor
 * received over it (SCM_RIGHTS) with the message it goes with (the
 * exporter's descriptors of its memory, an importer's proof that it holds
 * one; park_send_fd in park_find.c sends them), and who is at the other
 * end. */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "park.h"

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
