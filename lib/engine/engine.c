/* What every stage of a staged session (lib/engine/engine.h) uses: its tasks, its
 * calls through the engine's runner, and its log. */
#include "engine_int.h"
#include "park.h"
#include "pool.h"
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cs_engine_error_line(cs_engine *e, const char *line)
{
	if (e && !e->op.error[0] && !e->op.failed)
		snprintf(e->op.error, sizeof(e->op.error), "%.*s", (int)sizeof(e->op.error) - 1, line);
}

void eng_log(cs_engine *e, int level, const char *fmt, ...)
{
	char line[1536];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (level == CS_LOG_ERROR)
		cs_engine_error_line(e, line);
	if (e->o.log)
		e->o.log(e->o.ctx, level, line);
}

eng_task *eng_find(cs_engine *e, pid_t pid)
{
	for (size_t i = 0; i < e->ntasks; i++)
		if (e->tasks[i].pid == pid)
			return &e->tasks[i];
	return NULL;
}

eng_task *eng_add(cs_engine *e, pid_t pid)
{
	eng_task *t = eng_find(e, pid);
	if (t)
		return t;
	if (cs_grow(&e->tasks, &e->cap, e->ntasks + 1, sizeof(*t)) < 0)
		return NULL;
	t = &e->tasks[e->ntasks++];
	*t = (eng_task){ .pid = pid };
	return t;
}

pid_t *eng_pids(const cs_engine *e, bool (*which)(const eng_task *t), size_t *n)
{
	pid_t *v = calloc(e->ntasks + 1, sizeof(*v));
	*n = 0;
	for (size_t i = 0; v && i < e->ntasks; i++)
		if (which(&e->tasks[i]))
			v[(*n)++] = e->tasks[i].pid;
	return v;
}

int eng_identity(pid_t pid, pid_t *nspid, char *comm, size_t size)
{
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), pid);
	cs_stat st;
	cs_proc_ident id;
	if (pdir < 0 || cs_proc_read_stat(pdir, &st) < 0 || cs_proc_read_ident(pdir, pid, &id) < 0)
		return -1;
	*nspid = id.nspid;
	snprintf(comm, size, "%s", st.comm);
	return 0;
}

int eng_call(cs_engine *e, const char *what, double seconds, int (*fn)(void *, void **, size_t *), void *arg,
	     bool (*which)(const eng_task *t), void **reply, size_t *len)
{
	*reply = NULL;
	*len = 0;
	_cleanup_free_ cs_engine_thread *th = calloc(e->ntasks + 1, sizeof(*th));
	if (!th)
		return -1;
	size_t n = 0;
	for (size_t i = 0; which && i < e->ntasks; i++)
		if (which(&e->tasks[i]) && e->tasks[i].tid > 0)
			th[n++] = (cs_engine_thread){ .pid = e->tasks[i].pid, .tid = e->tasks[i].tid };
	cs_engine_call c = { .what = what, .seconds = seconds, .fn = fn, .arg = arg, .threads = th, .nthreads = n };
	return e->o.run(e->o.ctx, &c, reply, len);
}

typedef struct probe_reply {
	int version;
	cs_error err;
} probe_reply;

static int probe(void *arg, void **out, size_t *len)
{
	(void)arg;
	probe_reply *r = calloc(1, sizeof(*r));
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	if (!r)
		return 1;
	int rc = cs_driver_open(&d, &r->err);
	r->version = cs_driver_version(d);
	*out = r;
	*len = sizeof(*r);
	return rc < 0 ? 1 : 0;
}

int eng_probe(cs_engine *e, int *version, cs_error *err)
{
	_cleanup_free_ void *buf = NULL;
	size_t len;
	int rc = eng_call(e, "loading the driver", eng_bound_quick(), probe, NULL, NULL, &buf, &len);
	if (rc < 0 || !buf || len != sizeof(probe_reply))
		return cs_error_set(err, CS_ESYS, NULL, "the driver could not be probed (see the lines above)");
	const probe_reply *r = buf;
	*version = r->version;
	if (rc != 0) {
		*err = r->err;
		return -(err->status ? err->status : CS_EENV);
	}
	return 0;
}

/* A call loads libcuda (tens of milliseconds) before its first driver call. */
double eng_bound_quick(void)
{
	return 3 * 10 + 10;
}

double eng_bound_lock(unsigned lock_s)
{
	return eng_bound_quick() + lock_s + 5;
}

/* Parking, the lock's helper also moves device memory, at the storage's
 * rate: each importer parked first (first[i] bytes), the process, and its
 * unpark after a failed lock, each within the deadline it gets there. */
double eng_bound_park_lock(unsigned lock_s, unsigned long long bytes, const unsigned long long *first, size_t nfirst)
{
	unsigned ms = lock_s * 1000;
	double s = eng_bound_lock(lock_s) + 2 * cs_park_answer_s(NULL, bytes, ms);
	for (size_t i = 0; i < nfirst; i++)
		s += cs_park_answer_s(NULL, first[i], ms);
	return s;
}

double eng_bound_moves(void)
{
	/* the move, the leftover check, the rollback's move */
	return 2 * cs_move_deadline(NULL, 0) + eng_bound_quick();
}

/* An engine's timeout of 0 disables its own; the driver's lock still needs one. */
#define LOCK_TIMEOUT_FOR_ZERO 600

unsigned eng_lock_timeout_s(const cs_engine *e)
{
	return e->o.timeout_s ? e->o.timeout_s : LOCK_TIMEOUT_FOR_ZERO;
}
