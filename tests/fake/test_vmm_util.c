#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_vmm.h"

#define SYM(field, name) (*(void **)&c->field = dlsym(c->handle, name)) != NULL

int cuv_load(struct cuv *c, const char *lib)
{
	c->handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	return c->handle != NULL && SYM(init, "cuInit") &&
			SYM(retain, "cuDevicePrimaryCtxRetain") &&
			SYM(release_ctx, "cuDevicePrimaryCtxRelease_v2") &&
			SYM(ctx_set, "cuCtxSetCurrent") && SYM(ctx_get, "cuCtxGetCurrent") &&
			SYM(ctx_device, "cuCtxGetDevice") && SYM(sync, "cuCtxSynchronize") &&
			SYM(can_peer, "cuDeviceCanAccessPeer") && SYM(alloc, "cuMemAlloc_v2") &&
			SYM(free, "cuMemFree_v2") && SYM(range, "cuMemGetAddressRange_v2") &&
			SYM(htod, "cuMemcpyHtoD_v2") && SYM(dtoh, "cuMemcpyDtoH_v2") &&
			SYM(dtod, "cuMemcpyDtoD_v2") && SYM(set8, "cuMemsetD8_v2") &&
			SYM(set32, "cuMemsetD32_v2") &&
			SYM(host_register, "cuMemHostRegister_v2") &&
			SYM(host_unregister, "cuMemHostUnregister") &&
			SYM(host_alloc, "cuMemHostAlloc") && SYM(free_host, "cuMemFreeHost") &&
			SYM(granularity, "cuMemGetAllocationGranularity") &&
			SYM(reserve, "cuMemAddressReserve") && SYM(addr_free, "cuMemAddressFree") &&
			SYM(create, "cuMemCreate") && SYM(release, "cuMemRelease") &&
			SYM(map, "cuMemMap") && SYM(unmap, "cuMemUnmap") &&
			SYM(access, "cuMemSetAccess") &&
			SYM(export_fd, "cuMemExportToShareableHandle") &&
			SYM(import_fd, "cuMemImportFromShareableHandle") &&
			SYM(ipc_get, "cuIpcGetMemHandle") &&
			SYM(ipc_open, "cuIpcOpenMemHandle_v2") &&
			SYM(ipc_close, "cuIpcCloseMemHandle") && SYM(launch, "cuLaunchKernel") &&
			SYM(get_proc, "cuGetProcAddress_v2") &&
			SYM(get_proc_v1, "cuGetProcAddress") ?
		0 :
		-1;
}

int cuv_start(const struct cuv *c)
{
	CUcontext ctx = NULL;
	int ok = c->init(0) == 0 && c->retain(&ctx, 0) == 0 && ctx != NULL && c->ctx_set(ctx) == 0;
	check(ok, "peer %d: cuInit, device 0's primary context current", (int)getpid());
	return ok ? 0 : -1;
}

int cuv_vmm(const struct cuv *c, size_t bytes, int handle_types, CUdeviceptr *ptr,
	    CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .requestedHandleTypes =
					     (CUmemAllocationHandleType)handle_types,
				     .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
	CUmemAccessDesc rw = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
			       CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	return c->reserve(ptr, bytes, 0, 0, 0) == 0 && c->create(h, bytes, &prop, 0) == 0 &&
			c->map(*ptr, bytes, 0, *h, 0) == 0 && c->access(*ptr, bytes, &rw, 1) == 0 ?
		0 :
		-1;
}

int cuv_all(const struct cuv *c, CUdeviceptr dptr, size_t bytes, unsigned int value)
{
	unsigned int *buf = malloc(bytes);
	int ok = buf != NULL && c->dtoh(buf, dptr, bytes) == 0;
	for (size_t i = 0; ok && i < bytes / 4; i++)
		ok = buf[i] == value;
	free(buf);
	return ok;
}

int peer_start(const struct env *e, struct peer *p, const char *role, const char *arg)
{
	int sv[2];
	char fd[16];
	p->pid = -1;
	p->sock = -1;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
		check(0, "socketpair for peer %s", role);
		return -1;
	}
	fcntl(sv[0], F_SETFD, FD_CLOEXEC);
	snprintf(fd, sizeof(fd), "%d", sv[1]);
	fflush(stdout);
	p->pid = fork();
	if (p->pid == 0) {
		execl("/proc/self/exe", "test-fake-driver", "--peer", role, e->lib, fd,
		      arg ? arg : "", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	p->sock = sv[0];
	check(p->pid > 0, "peer %s starts", role);
	return p->pid > 0 ? 0 : -1;
}

int peer_end(struct peer *p)
{
	int status = -1;
	if (p->sock >= 0)
		close(p->sock);
	p->sock = -1;
	if (p->pid <= 0)
		return -1;
	for (int i = 0; i < 1000 && waitpid(p->pid, &status, WNOHANG) == 0; i++)
		sleep_ms(10);
	if (kill(p->pid, 0) == 0 && waitpid(p->pid, &status, WNOHANG) == 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, &status, 0);
		status = -1;
	} else {
		status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	}
	p->pid = -1;
	return status;
}

int say(int sock, const char *line)
{
	char buf[256];
	int n = snprintf(buf, sizeof(buf), "%s\n", line);
	return write(sock, buf, (size_t)n) == n ? 0 : -1;
}

void hear(int sock, char *buf, size_t len, unsigned int ms)
{
	size_t n = 0;
	uint64_t until = now_ms() + ms;
	buf[0] = '\0';
	while (n + 1 < len) {
		struct pollfd pfd = { sock, POLLIN, 0 };
		uint64_t now = now_ms();
		if (now >= until || poll(&pfd, 1, (int)(until - now)) <= 0 ||
		    read(sock, buf + n, 1) != 1)
			break;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
}

int expect(int sock, const char *want, unsigned int ms)
{
	char line[256];
	hear(sock, line, sizeof(line), ms);
	return strcmp(line, want) == 0;
}

int send_fd(int sock, int fd)
{
	char byte = 'F';
	char ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &byte, 1 };
	struct msghdr m = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)
	};
	memset(ctl, 0, sizeof(ctl));
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

int recv_fd(int sock, unsigned int ms)
{
	char byte, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { &byte, 1 };
	struct msghdr m = {
		.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)
	};
	struct pollfd pfd = { sock, POLLIN, 0 };
	int fd = -1;
	if (poll(&pfd, 1, (int)ms) != 1 || recvmsg(sock, &m, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	if (c != NULL && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

int cuapp_start(const struct env *e, const char *const *args, struct cuapp_proc *p)
{
	char path[PATH_MAX];
	const char *argv[24] = { "fakecuda-cuapp" };
	int n = 1, out[2];
	snprintf(path, sizeof(path), "%s", e->app);
	snprintf(strrchr(path, '/') + 1, sizeof(path) - (size_t)(strrchr(path, '/') + 1 - path),
		 "fakecuda-cuapp");
	for (int i = 0; args[i] && n < 23; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	p->pid = -1;
	p->ready[0] = '\0';
	if (pipe2(out, O_CLOEXEC) != 0)
		return -1;
	fflush(stdout);
	p->pid = fork();
	if (p->pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(out[1], 1);
		execv(path, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	p->out = out[0];
	hear(p->out, p->ready, sizeof(p->ready), 10000);
	check(strncmp(p->ready, "ready pid=", 10) == 0, "fakecuda-cuapp %s... is ready: '%s'",
	      args[0], p->ready);
	return strncmp(p->ready, "ready pid=", 10) == 0 ? 0 : -1;
}

int cuapp_stop(struct cuapp_proc *p)
{
	int status = app_stop(p->pid);
	close(p->out);
	p->pid = -1;
	return status;
}
