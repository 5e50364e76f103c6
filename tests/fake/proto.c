#include "proto.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *const op_names[FC_OP_COUNT] = {
	[FC_OP_GET_STATE] = "get_state",
	[FC_OP_GET_RESTORE_TID] = "get_restore_tid",
	[FC_OP_LOCK] = "lock",
	[FC_OP_CHECKPOINT] = "checkpoint",
	[FC_OP_RESTORE] = "restore",
	[FC_OP_UNLOCK] = "unlock",
};

const char *fc_op_name(int op)
{
	return op >= 0 && op < FC_OP_COUNT ? op_names[op] : "?";
}

int fc_op_from_name(const char *name)
{
	for (int i = 0; i < FC_OP_COUNT; i++)
		if (strcmp(name, op_names[i]) == 0)
			return i;
	return -1;
}

/* Abstract names vanish with the socket, so a dead target leaves nothing
 * behind that a later process with the same pid could be confused with. */
socklen_t fc_sockaddr(int tgid, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "fakecuda.%d", tgid);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
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
