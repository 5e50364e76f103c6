/* Parking at a dump's meetings (processes that run the interposer). The
 * engine meets the processes one at a time and stops each once met, so a
 * process can only park while the engine has not met it yet, and CUDA IPC
 * between processes of the tree orders the parks: an importer detaches
 * (telling its exporter) before its exporter parks, and it can tell it only
 * while the exporter runs. So at the meeting of an exporter whose memory
 * others map, the tree's importers not met yet park first, then the
 * exporter. What cannot be ordered so (an importer outside the tree, one
 * that cannot park) fails the dump: the driver's own path would give an
 * importer back never, or an exporter's importers stale memory. */
#include "engine_int.h"
#include "capacity.h"
#include "discover.h"
#include "env.h"
#include "park.h"
#include "parkfiles.h"
#include "proc.h"
#include "sandbox.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool met(const cs_engine *e, pid_t pid)
{
	for (size_t i = 0; i < e->ntree; i++)
		if (e->tree[i] == pid)
			return true;
	return false;
}

size_t eng_park_importers(cs_engine *e, pid_t exporter, const cs_park_info *info, pid_t *out, unsigned long long *bytes,
			  size_t max)
{
	if (!info->seen || !info->attached || e->ntree == 0)
		return 0;
	_cleanup_(cs_ptable_freep) cs_ptable t = { 0 };
	if (cs_scan(NULL, &t, NULL) < 0)
		return 0;
	size_t n = 0;
	for (size_t i = 0; i < t.n && n < max; i++) {
		const cs_proc *p = &t.procs[i];
		if (p->pid == exporter || !p->maps_park || p->halt || p->busy || met(e, p->pid) ||
		    !cs_ptable_descends(&t, p->pid, e->tree[0]))
			continue;
		cs_park_info pi;
		cs_park_status(p->pid, 2000, &pi);
		if (pi.seen && pi.imports && !pi.parked) {
			bytes[n] = pi.bytes;
			out[n++] = p->pid;
		}
	}
	return n;
}

bool eng_park_fits(const pid_t *pids, size_t n, bool files, char *why, size_t size)
{
	if (n == 0 || cs_env_on("CUDASNAP_IGNORE_MEMORY"))
		return true;
	_cleanup_free_ cs_fit *f = calloc(n, sizeof(*f));
	if (!f) {
		snprintf(why, size, "out of memory judging whether its park fits in host memory");
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		pid_t nspid;
		f[i].pid = pids[i];
		if (eng_identity(pids[i], &nspid, f[i].comm, sizeof(f[i].comm)) < 0)
			snprintf(f[i].comm, sizeof(f[i].comm), "?");
		cs_park_info pi;
		if (files && (cs_park_status(pids[i], 2000, &pi), pi.seen)) {
			f[i].off_host = pi.bytes;
			f[i].staging = cs_park_files_staging(pi.bytes);
		}
	}
	cs_sandbox sb;
	cs_sandbox_detect(NULL, &sb);
	cs_fit_env env;
	cs_fit_env_read(&env, sb.pid_ns == CS_PIDNS_HOST);
	/* no /proc view of them here: a bound, where one is needed, is every GPU's use */
	cs_fit_measure(f, n, NULL, &env);
	size_t unknown;
	if (cs_fit_judge(f, n, &env, &unknown) == 0)
		return true;
	for (size_t i = 0; i < n; i++) {
		if (f[i].refused || (f[i].known && f[i].room == CS_ROOM_UNKNOWN)) {
			snprintf(why, size, "process %d (%s) refused: it %s. Fix: %s", (int)f[i].pid, f[i].comm,
				 f[i].why, f[i].fix);
			break;
		}
	}
	return false;
}

/* The files of t's park into the images, made for what it holds (named
 * into name, n of them): 0, or -1 with err. */
static int make_files(const cs_target *t, const cs_park_info *info, int images, cs_park_files *f, char *name,
		      size_t size, unsigned *n, cs_error *err)
{
	unsigned long long start = 0;
	*n = 0;
	if (cs_proc_start_time(cs_proc_dir(), t->pid, &start) < 0)
		return cs_error_set(err, CS_EPROC, NULL, "process %d is gone", (int)t->pid);
	cs_park_files_name(t->pid, start, name, size);
	unsigned count = cs_park_files_count(info->bytes);
	/* Files of this name are an earlier dump's of this very process (its
	 * pid and start time) into these images, a dump with --leave-running
	 * or one that failed: it is not parked in them now (a parked process
	 * is not parked again), and this dump's images replace that dump's,
	 * these files too. Left there, they would turn this park away. */
	cs_park_files_remove(images, name, PARK_FILES_MAX);
	if (cs_park_files_make(images, "the images directory", name, count, info->bytes, info->version >= 2, f, err) <
	    0)
		return -1;
	*n = count;
	return 0;
}

/* A park (held on *conn), into files of images when images >= 0: 0, or -1
 * with err and no file left. */
static int park_one(cs_driver *d, const cs_target *t, const cs_park_info *info, unsigned ms, int images, int *conn,
		    char *name, size_t size, cs_park_answer *a, cs_error *err)
{
	cs_park_files f = { .n = 0 };
	unsigned files = 0;
	name[0] = 0;
	/* nothing of its own to move (an importer): nothing to write */
	if (images >= 0 && info->bytes && make_files(t, info, images, &f, name, size, &files, err) < 0)
		return -1;
	int rc = cs_park_step(t, true, conn, ms, cs_park_answer_s(d, info->bytes, ms), &f, a, err);
	/* out of the room still being reserved: the reservation's reason */
	cs_error re = { 0 };
	if (cs_park_files_reserved(&f, rc != 0, images, "the images directory", name, info->bytes, &re) != 0 &&
	    rc != 0 && strcmp(a->stage, "room") == 0)
		*err = re;
	cs_park_files_close(&f);
	if (rc < 0 && files)
		cs_park_files_remove(images, name, files);
	if (rc < 0)
		name[0] = 0;
	return rc;
}

/* In the call: one importer parked and the park committed at once (it is
 * not locked now, and keeps its park once the connection is gone). */
static void park_early(cs_driver *d, pid_t pid, unsigned ms, int images, eng_park_reply *r, char *why, size_t size)
{
	cs_target t = { .pid = pid };
	pid_t nspid;
	if (eng_identity(pid, &nspid, t.comm, sizeof(t.comm)) < 0)
		return;
	cs_park_info info;
	cs_park_status(pid, 2000, &info);
	eng_early *x = &r->early[r->nearly];
	cs_error err = { 0 };
	int conn = -1;
	if (park_one(d, &t, &info, ms, images, &conn, x->park_name, sizeof(x->park_name), &x->park, &err) == 0) {
		cs_park_close(&conn, true);
		x->pid = pid;
		r->nearly++;
		return;
	}
	cs_park_close(&conn, false);
	snprintf(why, size, " (process %d (%s): %.300s)", (int)pid, t.comm, err.message);
}

void eng_park_before_lock(cs_driver *d, const cs_target *t, unsigned timeout_s, const pid_t *first, size_t nfirst,
			  int images, int *conn, eng_park_reply *r)
{
	unsigned ms = timeout_s * 1000;
	char early_err[400] = "";
	for (size_t i = 0; i < nfirst && r->nearly < ENG_EARLY_MAX; i++)
		park_early(d, first[i], ms, images, r, early_err, sizeof(early_err));
	cs_park_info info;
	cs_park_status(t->pid, 2000, &info);
	if (!info.seen || info.parked || !cs_park_wanted(&info))
		return;
	/* Left to the driver, an importer never comes back, and an exporter's
	 * importers would keep its old memory. */
	bool ipc = info.attached || info.imports || info.legacy || info.vmm;
	const char *why = !info.parkable ? (info.why[0] ? info.why : "its interposer cannot park it") :
		info.attached            ? "other processes map its memory (CUDA IPC) and could not park before it" :
					   NULL;
	if (why) {
		r->park_failed = true;
		r->refused = ipc;
		snprintf(r->park_err.message, sizeof(r->park_err.message), "%s%s", why, info.attached ? early_err : "");
		return;
	}
	if (park_one(d, t, &info, ms, images, conn, r->park_name, sizeof(r->park_name), &r->park, &r->park_err) == 0) {
		r->parked = true;
		return;
	}
	r->park_failed = true;
	r->refused = ipc;
	/* No answer: whatever it did is undone by the process itself once the
	 * connection closes without a commit. */
	cs_park_close(conn, false);
}

void eng_park_after_lock(cs_driver *d, const cs_target *t, unsigned timeout_s, int lock_rc, int images, int *conn,
			 eng_park_reply *r)
{
	if (!r->parked)
		return;
	if (lock_rc == CS_CU_SUCCESS) {
		cs_park_close(conn, true);
		return;
	}
	cs_park_answer u;
	cs_error err = { 0 };
	unsigned ms = timeout_s * 1000;
	/* from the files the park still holds: its connection is open */
	r->unparked = cs_park_step(t, false, conn, ms, cs_park_answer_s(d, r->park.bytes, ms), NULL, &u, &err) == 0;
	r->parked = !r->unparked;
	cs_park_close(conn, false);
	if (r->unparked && r->park.files)
		cs_park_files_remove(images, r->park_name, r->park.files);
}

static void timed_park(cs_history_proc *h, const cs_park_answer *a)
{
	if (h) {
		h->timed[CS_STEP_PARK] = true;
		h->seconds[CS_STEP_PARK] = a->total_s;
	}
}

void eng_park_note_early(cs_engine *e, pid_t exporter, const char *comm, const eng_park_reply *r)
{
	for (size_t i = 0; i < r->nearly && i < ENG_EARLY_MAX; i++) {
		const cs_park_answer *a = &r->early[i].park;
		eng_task *t = eng_add(e, r->early[i].pid);
		if (!t || eng_identity(t->pid, &t->nspid, t->comm, sizeof(t->comm)) < 0)
			continue;
		t->parked = true;
		t->park_bytes = a->bytes;
		t->park_nfiles = a->files;
		t->park_direct = a->direct;
		snprintf(t->park_name, sizeof(t->park_name), "%s", a->files ? r->early[i].park_name : "");
		timed_park(eng_op_proc(e, t->pid, t->nspid, t->comm), a);
		eng_log(e, CS_LOG_INFO,
			"process %d (%s) parked %.2f GiB of device memory in %.3f s before process %d (%s), whose "
			"memory it maps (CUDA IPC)",
			(int)t->pid, t->comm, (double)a->bytes / (1 << 30), a->total_s, (int)exporter, comm);
	}
}

void eng_park_note(cs_engine *e, eng_task *t, cs_history_proc *h, const eng_park_reply *r)
{
	const cs_park_answer *a = &r->park;
	if (r->park_failed && !r->refused)
		eng_log(e, CS_LOG_WARN,
			"process %d (%s) runs the parking interposer but is not parked: %s; the driver "
			"checkpoints all its memory",
			(int)t->pid, t->comm, r->park_err.message);
	if (!r->parked && !r->unparked)
		return;
	if (r->unparked) {
		eng_log(e, CS_LOG_INFO, "process %d (%s) unparked again after its failed lock", (int)t->pid, t->comm);
		return;
	}
	t->parked = true;
	t->park_bytes = a->bytes;
	t->park_nfiles = a->files;
	t->park_direct = a->direct;
	snprintf(t->park_name, sizeof(t->park_name), "%s", a->files ? r->park_name : "");
	timed_park(h, a);
	char where[96] = "its host memory";
	if (a->files)
		snprintf(where, sizeof(where), "%u files of the images (%u with O_DIRECT)", a->files, a->direct);
	eng_log(e, CS_LOG_INFO,
		"process %d (%s) parked %.2f GiB of device memory in %s in %.3f s (copy %.3f s, %.1f GB/s): the driver "
		"checkpoints the rest",
		(int)t->pid, t->comm, (double)a->bytes / (1 << 30), where, a->total_s, a->copy_s, a->gbps);
}

int eng_park_files_open(const cs_engine *e, const char *name, unsigned n, unsigned long long bytes, cs_park_files *f,
			cs_error *err)
{
	f->n = 0;
	f->room = NULL;
	if (n == 0)
		return 0;
	if (e->images < 0)
		return cs_error_set(err, CS_ESTATE, NULL,
				    "its GPU memory is in files of the images, and no images directory is at hand");
	return cs_park_files_open(e->images, "the images directory", name, n, bytes, 0, f, err);
}

void eng_restore_cmd(const cs_engine *e, const eng_task *t, char *buf, size_t size)
{
	const cs_manifest_entry *me = t->entry < e->record.n ? &e->record.e[t->entry] : NULL;
	pid_t pid = t->pid;
	char dir[256];
	ssize_t len = -1;
	if (me && me->park_nfiles && me->park_name[0] && e->images >= 0) {
		char link[64];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", e->images);
		len = readlink(link, dir, sizeof(dir) - 1);
	}
	if (len > 0 && (size_t)len < sizeof(dir) - 1) {
		char path[400], word[900];
		dir[len] = 0;
		snprintf(path, sizeof(path), "%s/%s", dir, me->park_name);
		/* a command cut short would name other files: none, then */
		if (cs_shell_word(path, word, sizeof(word)) &&
		    (size_t)snprintf(buf, size, "cudasnap restore --pid %d --park-from %s", (int)pid, word) < size)
			return;
	}
	snprintf(buf, size, "cudasnap restore --pid %d", (int)pid);
}

int eng_queue_unpark(cs_engine *e, pid_t pid, const char *name, unsigned n, unsigned long long bytes, cs_error *err)
{
	cs_park_files f = { .n = 0 };
	int rc = eng_park_files_open(e, name, n, bytes, &f, err);
	if (rc == 0 && (rc = cs_park_queue_unpark(pid, eng_lock_timeout_s(e) * 1000, &f)) < 0)
		cs_error_set(err, CS_EPROC, NULL, "its control socket took no request");
	cs_park_files_close(&f);
	return rc;
}

void eng_park_left(cs_engine *e, const eng_task *t, cs_history_proc *h)
{
	if (h) {
		h->outcome = CS_HIST_LEFT_BEHIND;
		snprintf(h->recovery, sizeof(h->recovery), "cudasnap restore --pid %d", (int)t->pid);
	}
	eng_log(e, CS_LOG_ERROR,
		"process %d (%s) is left parked: its device memory is in its host memory and its GPU work waits; "
		"'cudasnap restore --pid %d' unparks it",
		(int)t->pid, t->comm, (int)t->pid);
}
