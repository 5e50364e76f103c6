#include "proto.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const op_names[FC_OP_COUNT] = {
	[FC_OP_GET_STATE] = "get_state",
	[FC_OP_GET_RESTORE_TID] = "get_restore_tid",
	[FC_OP_LOCK] = "lock",
	[FC_OP_CHECKPOINT] = "checkpoint",
	[FC_OP_RESTORE] = "restore",
	[FC_OP_UNLOCK] = "unlock",
	[FC_OP_MEM_CREATE] = "mem_create",
	[FC_OP_DTOH] = "dtoh",
	[FC_OP_IMPORT] = "import",
	[FC_OP_MEM_UNMAP] = "mem_unmap",
	[FC_OP_SYNC] = "sync",
};

int fc_op_from_name(const char *name)
{
	for (int i = 0; i < FC_OP_COUNT; i++)
		if (strcmp(name, op_names[i]) == 0)
			return i;
	return -1;
}

/* Abstract names vanish with the socket, so a dead target leaves nothing
 * behind that a later process with the same pid could be confused with.
 * They are shared by every pid namespace, hence the namespace in the name:
 * tests isolated in namespaces of their own reuse the same small pids. */
socklen_t fc_sockaddr(unsigned long pidns, int tgid, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "fakecuda.%lu.%d", pidns,
			 tgid);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

unsigned long fc_pidns(int pid)
{
	char path[64];
	struct stat st;
	if (pid > 0)
		snprintf(path, sizeof(path), "/proc/%d/ns/pid", pid);
	else
		snprintf(path, sizeof(path), "/proc/self/ns/pid");
	return stat(path, &st) == 0 ? (unsigned long)st.st_ino : 0;
}

int fc_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int fc_read_all(int fd, void *buf, size_t len)
{
	char *p = buf;
	while (len > 0) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int fc_send_req(int fd, const void *buf, size_t len, const struct fc_req_fds *fds)
{
	int list[2], n = 0;
	if (fds && fds->proc >= 0)
		list[n++] = fds->proc;
	if (fds && fds->room >= 0)
		list[n++] = fds->room;
	/* the one byte sent with them says which of the two came */
	uint8_t what = (uint8_t)((fds && fds->proc >= 0 ? 1 : 0) | (fds && fds->room >= 0 ? 2 : 0));
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(list))];
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct iovec iov = { &what, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n > 0) {
		m.msg_control = ctl.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
		memcpy(CMSG_DATA(c), list, sizeof(int) * (size_t)n);
	}
	ssize_t r;
	while ((r = sendmsg(fd, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return r == 1 ? fc_write_all(fd, buf, len) : -1;
}

int fc_recv_req(int fd, void *buf, size_t len, struct fc_req_fds *fds)
{
	fds->proc = fds->room = -1;
	uint8_t what = 0;
	int list[2] = { -1, -1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(list))];
	} ctl;
	struct iovec iov = { &what, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	ssize_t r;
	while ((r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (r != 1)
		return -1;
	int n = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			n = n > 2 ? 2 : n;
			memcpy(list, CMSG_DATA(c), sizeof(int) * (size_t)n);
		}
	int k = 0;
	if ((what & 1) && k < n)
		fds->proc = list[k++];
	if ((what & 2) && k < n)
		fds->room = list[k++];
	for (; k < n; k++)
		close(list[k]);
	return fc_read_all(fd, buf, len);
}
