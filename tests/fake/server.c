#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "internal.h"
#include "proto.h"

/* The restore thread: the real driver keeps a helper thread inside every CUDA
 * process that carries out the checkpoint calls made from outside; here it
 * answers them over an abstract unix socket named after the process. While
 * the process is stopped the requests wait in the socket, as they wait with
 * the real driver. GetRestoreThreadId never comes here: the caller answers
 * it from /proc (caller_tid.c). */

static int listen_fd = -1;
static int conn_fd = -1;

static CUresult dispatch(const struct fc_req *req, const struct fc_fault_hit *hit, const struct fc_req_fds *fds,
			 int32_t *value)
{
	switch (req->op) {
	case FC_OP_GET_STATE:
		pthread_mutex_lock(&fc_tgt.mu);
		*value = (int32_t)fc_tgt.state;
		pthread_mutex_unlock(&fc_tgt.mu);
		return CUDA_SUCCESS;
	case FC_OP_LOCK:
		return fc_op_lock(req->timeout_ms);
	case FC_OP_CHECKPOINT:
		return fc_op_checkpoint(hit->leak_fd, hit->leak_map);
	case FC_OP_RESTORE:
		return fc_op_restore(req, hit->oom, fds);
	case FC_OP_UNLOCK:
		return fc_op_unlock();
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static void serve(int c)
{
	struct fc_req req;
	struct fc_rsp rsp = { 0, 0 };
	struct fc_req_fds fds;
	/* a client that never finishes its request must not wedge the thread */
	struct timeval tv = { 5, 0 };
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	int ok = fc_recv_req(c, &req, sizeof(req), &fds) == 0 && req.magic == FC_MAGIC && req.op <= FC_OP_UNLOCK &&
		 req.npairs <= FC_MAX_PAIRS;
	struct fc_fault_hit hit = { 0 };
	if (ok) {
		fc_faults_check((int)req.op, (int)getpid(), 1, &hit);
		if (hit.delay_ms)
			fc_sleep_ms(hit.delay_ms);
		if (hit.exit_now)
			_exit(1);
		rsp.result = hit.error ? hit.error : dispatch(&req, &hit, &fds, &rsp.value);
	}
	if (fds.proc >= 0)
		close(fds.proc);
	if (fds.room >= 0)
		close(fds.room);
	if (!ok)
		return;
	/* A caller that died meanwhile does not undo the call, and its closed
	 * socket must not kill the target: fc_write_all sends with MSG_NOSIGNAL. */
	fc_write_all(c, &rsp, sizeof(rsp));
}

static void *restore_thread(void *arg)
{
	(void)arg;
	/* named before cuInit returns, so that a caller finds it from then on */
	pthread_setname_np(pthread_self(), FC_RESTORE_THREAD_NAME);
	pthread_mutex_lock(&fc_tgt.mu);
	fc_tgt.restore_tid = (int)gettid();
	pthread_cond_broadcast(&fc_tgt.cv);
	pthread_mutex_unlock(&fc_tgt.mu);
	for (;;) {
		int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno != EINTR && errno != ECONNABORTED)
				fc_sleep_ms(10);
			continue;
		}
		__atomic_store_n(&conn_fd, c, __ATOMIC_SEQ_CST);
		serve(c);
		__atomic_store_n(&conn_fd, -1, __ATOMIC_SEQ_CST);
		close(c);
	}
	return NULL;
}

static int open_listener(void)
{
	struct sockaddr_un sa;
	socklen_t len = fc_sockaddr(fc_pidns(0), getpid(), &sa);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, 64) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Signals meant for the application must never land on the helper thread. */
static int spawn_blocked(pthread_t *t)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(t, &a, restore_thread, NULL);
	pthread_attr_destroy(&a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

int fc_server_start(void)
{
	pthread_t t;
	listen_fd = open_listener();
	if (listen_fd < 0)
		return -1;
	if (spawn_blocked(&t) != 0) {
		close(listen_fd);
		listen_fd = -1;
		return -1;
	}
	pthread_mutex_lock(&fc_tgt.mu);
	while (fc_tgt.restore_tid == 0)
		pthread_cond_wait(&fc_tgt.cv, &fc_tgt.mu);
	pthread_mutex_unlock(&fc_tgt.mu);
	return 0;
}

/* A child forked without exec must not answer for its parent: without the
 * parent's socket, a caller asking about the child finds no restore thread,
 * and one asking about a dead parent is not kept waiting by the child. */
void fc_server_forget(void)
{
	int c = __atomic_load_n(&conn_fd, __ATOMIC_SEQ_CST);
	if (c >= 0)
		close(c);
	if (listen_fd >= 0)
		close(listen_fd);
	listen_fd = -1;
}
