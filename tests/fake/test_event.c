/* Events of the double and their IPC, as driver 580 showed them (H200,
 * 2026-12-04): an interprocess event needs DISABLE_TIMING; its creator
 * holds and maps a cuda.shm file, an importer maps it without an fd and
 * keeps the mapping after destroying the event; a stream that waits on an
 * imported event waits for the creator's work; and an importer of an
 * event, kept or destroyed, checkpoints and restores. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipc.h"
#include "test_vmm.h"

#define KERNEL_MS 3000u
#define LONG_MS 10000

struct ev {
	CUresult (*create)(CUevent *, unsigned int);
	CUresult (*destroy)(CUevent);
	CUresult (*record)(CUevent, CUstream);
	CUresult (*query)(CUevent);
	CUresult (*wait)(CUstream, CUevent, unsigned int);
	CUresult (*get)(CUipcEventHandle *, CUevent);
	CUresult (*open)(CUevent *, CUipcEventHandle);
};

#define EVSYM(field, name) (*(void **)&v->field = dlsym(c->handle, name)) != NULL

static int ev_load(const struct cuv *c, struct ev *v)
{
	int ok = EVSYM(create, "cuEventCreate") && EVSYM(destroy, "cuEventDestroy_v2") &&
		EVSYM(record, "cuEventRecord") && EVSYM(query, "cuEventQuery") && EVSYM(wait, "cuStreamWaitEvent") &&
		EVSYM(get, "cuIpcGetEventHandle") && EVSYM(open, "cuIpcOpenEventHandle");
	check(ok, "the event calls are there");
	return ok ? 0 : -1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void creator(const struct cuv *c, const struct ev *v, int sock)
{
	CUevent e = NULL;
	CUipcEventHandle h;
	char hex[2 * sizeof(h) + 1], line[64];
	check(v->create(&e, CU_EVENT_INTERPROCESS) == 1, "interprocess without DISABLE_TIMING: 1");
	unsigned int ms = KERNEL_MS;
	void *params[] = { &ms };
	check(v->create(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) == 0 &&
		      c->launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) == 0 && v->record(e, NULL) == 0 &&
		      v->get(&h, e) == 0,
	      "creator: event created, recorded after a %u ms kernel, shared", KERNEL_MS);
	for (size_t i = 0; i < sizeof(h); i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h.reserved[i]);
	say(sock, hex);
	hear(sock, line, sizeof(line), 60000);
	check(v->destroy(e) == 0, "creator: event destroyed");
}

static void importer(const struct cuv *c, const struct ev *v, int sock, bool keep)
{
	CUipcEventHandle h;
	CUevent e = NULL;
	char line[256];
	hear(sock, line, sizeof(line), LONG_MS);
	for (size_t i = 0; i < sizeof(h) && strlen(line) == 2 * sizeof(h); i++) {
		unsigned int byte = 0;
		sscanf(line + 2 * i, "%2x", &byte);
		h.reserved[i] = (char)byte;
	}
	double t0 = now_s();
	CUresult o = v->open(&e, h), q = v->query(e);
	check(o == 0 && q == 600, "importer: opened (%d), not ready while the creator's kernel runs (%d)", o, q);
	check(v->wait(NULL, e, 0) == 0 && c->sync() == 0 && v->query(e) == 0,
	      "importer: its stream waited for the creator's work");
	double waited = now_s() - t0;
	check(waited > KERNEL_MS / 3000.0, "importer: the wait took %.3f s", waited);
	if (!keep)
		check(v->destroy(e) == 0, "importer: event destroyed");
	say(sock, "opened");
	hear(sock, line, sizeof(line), 60000); /* checkpointed and restored meanwhile */
	check(!keep || (v->wait(NULL, e, 0) == 0 && v->query(e) == 0), "importer: the event works after a restore");
	say(sock, "done");
	hear(sock, line, sizeof(line), 60000);
	if (keep) /* the double's event is the program's memory to free */
		v->destroy(e);
}

int peer_event(const struct cuv *c, int sock, const char *arg)
{
	struct ev v;
	if (cuv_start(c) != 0 || ev_load(c, &v) != 0)
		return -1;
	if (strcmp(arg, "create") == 0)
		creator(c, &v, sock);
	else
		importer(c, &v, sock, strcmp(arg, "keep") == 0);
	return 0;
}

static void one(const struct env *e, const struct drv *d, const char *how)
{
	struct peer x, y;
	char hex[256], path[PATH_MAX];
	if (peer_start(e, &x, "event", "create") != 0)
		return;
	hear(x.sock, hex, sizeof(hex), LONG_MS);
	if (peer_start(e, &y, "event", how) != 0)
		return;
	say(y.sock, hex);
	check(expect(y.sock, "opened", LONG_MS), "%s: the importer opened the event", how);
	int fx, mx, fy, my;
	fc_ipc_file_path(path, sizeof(path), (unsigned int)geteuid(), (int)x.pid, 2);
	path_refs(x.pid, path, &fx, &mx);
	path_refs(y.pid, path, &fy, &my);
	check(fx == 1 && mx == 1 && fy == 0 && my == 1,
	      "%s: the creator holds (%d) and maps (%d) %s, the importer maps it (%d) without an fd (%d)", how, fx, mx,
	      path, my, fy);
	check(d->lock(y.pid, NULL) == 0 && d->checkpoint(y.pid, NULL) == 0 && d->restore(y.pid, NULL) == 0 &&
		      d->unlock(y.pid, NULL) == 0 && state_of(d, y.pid) == CU_PROCESS_STATE_RUNNING,
	      "%s: the importer checkpoints and restores", how);
	say(y.sock, "go");
	check(expect(y.sock, "done", LONG_MS), "%s: the importer is done", how);
	say(x.sock, "end");
	say(y.sock, "end");
	check(peer_end(&x) == 0 && peer_end(&y) == 0, "%s: creator and importer checks pass", how);
}

void test_event(const struct env *e, const struct drv *d)
{
	one(e, d, "keep");
	one(e, d, "drop");
}
