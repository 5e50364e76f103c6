/* The history of operations: each entry built, rendered as one line of
 * JSON, and appended to the state directory's history (lib/record/history.h). */
#include "history.h"
#include "json.h"
#include "pool.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

const char *cs_hist_outcome_name(int outcome)
{
	static const char *const n[] = {
		[CS_HIST_DONE] = "done",
		[CS_HIST_LEFT] = "left",
		[CS_HIST_UNTOUCHED] = "untouched",
		[CS_HIST_VANISHED] = "vanished",
		[CS_HIST_REFUSED] = "refused",
		[CS_HIST_ROLLED_BACK] = "rolled-back",
		[CS_HIST_FAILED] = "failed",
		[CS_HIST_EXITED] = "exited",
		[CS_HIST_LOST] = "lost",
		[CS_HIST_UNRESTORABLE] = "unrestorable",
		[CS_HIST_LEFT_BEHIND] = "left-behind",
		[CS_HIST_KILLED] = "killed",
	};
	return (unsigned)outcome < CS_ARRAY_SIZE(n) ? n[outcome] : NULL;
}

/* A process's command line, arguments joined by spaces, cut to size and
 * safe to print; "" when it cannot be read (a zombie, another namespace). */
static void read_cmdline(const char *pid, char *out, size_t size)
{
	char path[64], raw[2048];
	snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
	ssize_t n = cs_read_at(AT_FDCWD, path, raw, sizeof(raw));
	while (n > 0 && raw[n - 1] == '\0')
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (raw[i] == '\0')
			raw[i] = ' ';
	out[0] = '\0';
	if (n > 0)
		cs_sanitize(out, size, raw, (size_t)n);
}

void cs_history_begin(cs_history *h, const char *front, const char *op)
{
	memset(h, 0, sizeof(*h));
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	h->started = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	h->t0 = cs_now();
	h->exit_status = -1;
	snprintf(h->front, sizeof(h->front), "%s", front && front[0] ? front : "library");
	snprintf(h->op, sizeof(h->op), "%s", op && op[0] ? op : "?");
	h->pid = getpid();
	h->ppid = getppid();
	read_cmdline("self", h->cmdline, sizeof(h->cmdline));
	char ppid[24];
	snprintf(ppid, sizeof(ppid), "%d", (int)h->ppid);
	read_cmdline(ppid, h->parent, sizeof(h->parent));
}

void cs_history_free(cs_history *h)
{
	free(h->p);
	h->p = NULL;
	h->n = h->cap = 0;
}

cs_history_proc *cs_history_proc_of(cs_history *h, pid_t pid, const char *comm)
{
	for (size_t i = 0; pid > 0 && i < h->n; i++)
		if (h->p[i].pid == pid)
			return &h->p[i];
	if (cs_grow(&h->p, &h->cap, h->n + 1, sizeof(*h->p)) < 0)
		return NULL;
	cs_history_proc *p = &h->p[h->n++];
	*p = (cs_history_proc){ .pid = pid, .step = -1, .outcome = CS_HIST_UNTOUCHED };
	snprintf(p->comm, sizeof(p->comm), "%s", comm ? comm : "");
	return p;
}

static size_t op_steps(cs_op op, cs_step steps[2])
{
	switch (op) {
	case CS_OP_CHECKPOINT: steps[0] = CS_STEP_LOCK, steps[1] = CS_STEP_CHECKPOINT; return 2;
	case CS_OP_RESTORE: steps[0] = CS_STEP_RESTORE, steps[1] = CS_STEP_UNLOCK; return 2;
	case CS_OP_LOCK: steps[0] = CS_STEP_LOCK; return 1;
	case CS_OP_CHECKPOINT_LOCKED: steps[0] = CS_STEP_CHECKPOINT; return 1;
	default: steps[0] = CS_STEP_UNLOCK; return 1;
	}
}

int cs_history_failed_step(cs_op op, const cs_target *t)
{
	cs_step steps[2];
	size_t n = op_steps(op, steps);
	if (!t->failed)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!t->done[steps[i]])
			return (int)steps[i];
	return -1; /* every step done: failed by a check after them (--strict) */
}

static void set_why(cs_history_proc *p, const char *why)
{
	if (!p->why[0] && why && why[0])
		snprintf(p->why, sizeof(p->why), "%s", why);
}

/* What became of t, from the flags the transaction left on it. */
static int target_outcome(const cs_target *t, const cs_txn_result *res, int rc)
{
	if (t->lost)
		return CS_HIST_LOST;
	if (t->vanished)
		return CS_HIST_VANISHED;
	if (t->skipped)
		return CS_HIST_LEFT;
	if (t->unrestorable)
		return CS_HIST_UNRESTORABLE;
	if (t->rollback_failed || t->abandoned)
		return CS_HIST_LEFT_BEHIND;
	if (t->exited)
		return CS_HIST_EXITED;
	if (rc == 0)
		return CS_HIST_DONE;
	if (res->outcome == CS_OUTCOME_REFUSED)
		return t->halted ? CS_HIST_REFUSED : CS_HIST_UNTOUCHED;
	return CS_HIST_ROLLED_BACK;
}

void cs_history_target(cs_history_proc *p, cs_op op, const cs_target *t, const cs_txn_result *res, int rc)
{
	p->pid = t->pid;
	p->start_time = t->start_time;
	p->nspid = t->nspid;
	memcpy(p->comm, t->comm, sizeof(p->comm));
	p->comm[sizeof(p->comm) - 1] = '\0';
	p->bytes = t->bytes;
	for (int s = 0; s < CS_STEP_COUNT; s++) {
		p->timed[s] = t->done[s];
		p->seconds[s] = t->done[s] ? t->seconds[s] : 0;
	}
	p->outcome = res->ran ? target_outcome(t, res, rc) : CS_HIST_UNTOUCHED;
	if (t->park_name[0])
		snprintf(p->park_files, sizeof(p->park_files), "%.250s/%.63s.*",
			 t->park_dir[0] ? t->park_dir : "(images)", t->park_name);
	if (!res->ran)
		return;
	if (p->outcome == CS_HIST_LOST)
		set_why(p, t->lost_why[0] ? t->lost_why : "it exited");
	if (p->outcome == CS_HIST_EXITED)
		set_why(p, t->lost_why[0] ? t->lost_why : "it exited");
	if (p->outcome == CS_HIST_REFUSED)
		snprintf(p->code, sizeof(p->code), "%s", strstr(t->error.message, "frozen") ? "frozen" : "stopped");
	if (p->outcome == CS_HIST_LEFT)
		snprintf(p->why, sizeof(p->why), "already %s",
			 cs_state_name(t->state) ? cs_state_name(t->state) : "past the goal");
	if (t->failed || t->rollback_failed) {
		p->step = cs_history_failed_step(op, t);
		p->cu = t->error.cu;
		set_why(p, t->error.message);
	}
	if (p->outcome == CS_HIST_LEFT_BEHIND)
		cs_target_recovery(t, p->recovery, sizeof(p->recovery));
}

void cs_history_refused(cs_history_proc *p, const char *code, const char *why)
{
	p->outcome = CS_HIST_REFUSED;
	snprintf(p->code, sizeof(p->code), "%s", code);
	snprintf(p->why, sizeof(p->why), "%s", why ? why : "");
}

int cs_history_exit_status(bool ran, const cs_txn_result *res, int rc)
{
	if (!ran)
		return 2;
	if (res->outcome == CS_OUTCOME_INCOMPLETE)
		return 3;
	return rc < 0 ? 1 : 0;
}

const char *cs_history_outcome(const cs_history *h, bool failed, bool ran)
{
	bool refused = false, incomplete = false, back = true, rolled = false;
	for (size_t i = 0; i < h->n; i++) {
		int o = h->p[i].outcome;
		refused |= o == CS_HIST_REFUSED;
		rolled |= o == CS_HIST_ROLLED_BACK;
		incomplete |= o == CS_HIST_LOST || o == CS_HIST_LEFT_BEHIND || o == CS_HIST_UNRESTORABLE;
		back &= o == CS_HIST_ROLLED_BACK || o == CS_HIST_UNTOUCHED || o == CS_HIST_LEFT ||
			o == CS_HIST_VANISHED || o == CS_HIST_EXITED || o == CS_HIST_REFUSED;
	}
	if (refused)
		return "refused";
	if (incomplete)
		return "incomplete";
	if (!failed)
		return "done";
	if (!ran)
		return "refused";
	return back && rolled ? "rolled-back" : "failed";
}

void cs_history_finish(cs_history *h, const char *outcome, int exit_status, const cs_error *err)
{
	h->seconds = cs_now() - h->t0;
	snprintf(h->outcome, sizeof(h->outcome), "%s", outcome && outcome[0] ? outcome : "failed");
	h->exit_status = exit_status;
	if (err && err->status)
		h->error = *err;
	h->bytes = 0;
	for (size_t i = 0; i < h->n; i++)
		h->bytes += h->p[i].bytes;
}

/* ---- the line ------------------------------------------------------------ */

static void format_time(double t, char *buf, size_t size)
{
	time_t s = (time_t)t;
	struct tm tm;
	char day[32];
	int ms = (int)((t - (double)s) * 1000);
	strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", gmtime_r(&s, &tm));
	snprintf(buf, size, "%s.%03dZ", day, ms < 0 ? 0 : ms > 999 ? 999 : ms);
}

/* Seconds to the microsecond, written so (json-c writes every digit of a double). */
static json_object *secs_json(double v)
{
	char text[40];
	snprintf(text, sizeof(text), "%.6f", v);
	return json_object_new_double_s(v, text);
}

/* A string of the entry, made safe: a field cut short may end in the middle
 * of a UTF-8 sequence, and a reader skips a line that is not UTF-8 whole. */
static json_object *str_json(const char *s)
{
	size_t len = strlen(s);
	_cleanup_free_ char *clean = malloc(len + 1);
	if (!clean)
		return NULL;
	cs_sanitize(clean, len + 1, s, len);
	return json_object_new_string(clean);
}

static json_object *str_or_null(const char *s)
{
	return s && s[0] ? str_json(s) : NULL;
}

static json_object *int_or_null(long long v, bool valid)
{
	return valid ? json_object_new_int64(v) : NULL;
}

static json_object *proc_json(const cs_history_proc *p)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "pid", int_or_null(p->pid, p->pid > 0));
	json_object_object_add(o, "nspid", int_or_null(p->nspid, p->nspid > 0));
	if (p->start_time)
		json_object_object_add(o, "start_time", json_object_new_uint64(p->start_time));
	json_object_object_add(o, "comm", str_json(p->comm));
	const char *outcome = cs_hist_outcome_name(p->outcome);
	json_object_object_add(o, "outcome", json_object_new_string(outcome ? outcome : "untouched"));
	json_object_object_add(o, "bytes", json_object_new_uint64(p->bytes));
	json_object *secs = json_object_new_object();
	for (int s = 0; s < CS_STEP_COUNT; s++)
		if (p->timed[s])
			json_object_object_add(secs, cs_step_name((cs_step)s), secs_json(p->seconds[s]));
	json_object_object_add(o, "seconds", secs);
	json_object_object_add(o, "code", str_or_null(p->code));
	json_object_object_add(o, "why", str_or_null(p->why));
	json_object_object_add(o, "step", p->step >= 0 ? json_object_new_string(cs_step_name((cs_step)p->step)) : NULL);
	json_object_object_add(o, "cu", int_or_null(p->cu, p->cu != 0));
	json_object_object_add(o, "recovery", str_or_null(p->recovery));
	json_object_object_add(o, "park_files", str_or_null(p->park_files));
	return o;
}

static json_object *error_json(const cs_error *e)
{
	if (!e->status)
		return NULL;
	json_object *o = json_object_new_object();
	json_object_object_add(o, "kind", json_object_new_string(cs_status_name(e->status)));
	json_object_object_add(o, "message", str_json(e->message));
	json_object_object_add(o, "hint", str_or_null(e->hint));
	json_object_object_add(o, "cu", int_or_null(e->cu, e->cu != 0));
	return o;
}

/* The entry with its first nproc processes. */
static json_object *entry_json(const cs_history *h, size_t nproc)
{
	json_object *o = json_object_new_object();
	char when[48];
	format_time(h->started, when, sizeof(when));
	json_object_object_add(o, "v", json_object_new_int(CS_HISTORY_VERSION));
	json_object_object_add(o, "time", json_object_new_string(when));
	json_object_object_add(o, "seconds", secs_json(h->seconds));
	json_object_object_add(o, "front", str_json(h->front));
	json_object_object_add(o, "op", str_json(h->op));
	json_object_object_add(o, "outcome", str_json(h->outcome[0] ? h->outcome : "failed"));
	json_object_object_add(o, "exit_status", int_or_null(h->exit_status, h->exit_status >= 0));
	json_object_object_add(o, "bytes", json_object_new_uint64(h->bytes));
	json_object *who = json_object_new_object();
	json_object_object_add(who, "pid", json_object_new_int(h->pid));
	json_object_object_add(who, "cmdline", str_json(h->cmdline));
	json_object_object_add(who, "parent_pid", int_or_null(h->ppid, h->ppid > 0));
	json_object_object_add(who, "parent_cmdline", str_or_null(h->parent));
	json_object_object_add(o, "caller", who);
	json_object_object_add(o, "note", str_or_null(h->note));
	json_object_object_add(o, "error", error_json(&h->error));
	json_object *arr = json_object_new_array();
	for (size_t i = 0; i < nproc && i < h->n; i++)
		json_object_array_add(arr, proc_json(&h->p[i]));
	json_object_object_add(o, "processes", arr);
	if (nproc < h->n)
		json_object_object_add(o, "processes_omitted", json_object_new_uint64(h->n - nproc));
	return o;
}

char *cs_history_render(const cs_history *h)
{
	/* An entry of a great many processes keeps as many as fit in a line. */
	for (size_t nproc = h->n;; nproc /= 2) {
		_cleanup_(json_object_putp) json_object *o = entry_json(h, nproc);
		const char *s = o ?
			json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE) :
			NULL;
		if (!s)
			return NULL;
		size_t len = strlen(s);
		if (len + 1 < CS_HISTORY_LINE_MAX || nproc == 0) {
			char *line = malloc(len + 2);
			if (line) {
				memcpy(line, s, len);
				line[len] = '\n';
				line[len + 1] = '\0';
			}
			return line;
		}
	}
}

/* ---- storage ------------------------------------------------------------- */

/* Appends text (one write: O_APPEND writes of a regular file do not
 * interleave); a torn one is taken back where the lock is held (back: the
 * size before), else ended with a newline so that the next entry starts a
 * line of its own. 0 or -errno. */
static int append(int fd, const char *text, size_t len, bool locked)
{
	struct stat st;
	off_t was = locked && fstat(fd, &st) == 0 ? st.st_size : -1;
	ssize_t w = write(fd, text, len);
	if (w == (ssize_t)len)
		return 0;
	int r = w < 0 ? -errno : -ENOSPC;
	bool taken_back = w > 0 && was >= 0 && ftruncate(fd, was) == 0;
	if (w > 0 && !taken_back && write(fd, "\n", 1) != 1) {
		/* the disk is full: nothing more can be done */
	}
	return r;
}

/* Under the history's lock: before this entry would take the current file
 * past the bound, it becomes history.1.jsonl (the older one goes), and the
 * entries of the one that goes that still matter (cs_history_carry) start
 * the new one. *fd is then the new file, locked when its lock could be had. */
static int rotate_if_full(int statefd, int *fd, size_t len, bool *locked)
{
	struct stat st;
	if (fstat(*fd, &st) < 0)
		return -errno;
	if ((unsigned long long)st.st_size + len <= CS_HISTORY_ROTATE || st.st_size == 0)
		return 0;
	size_t carried_len = 0;
	_cleanup_free_ char *carried = cs_history_carry(statefd, &carried_len);
	if (renameat(statefd, CS_HISTORY_NAME, statefd, CS_HISTORY_OLD_NAME) < 0)
		return -errno;
	close(*fd);
	*fd = cs_history_open_current(statefd, NULL);
	if (*fd < 0)
		return *fd;
	*locked = cs_history_lock(statefd, fd, LOCK_EX, cs_history_open_current);
	return carried_len ? append(*fd, carried, carried_len, *locked) : 0;
}

int cs_history_append(int statefd, const char *line, size_t len, cs_error *err)
{
	const char *why = "";
	_cleanup_close_ int fd = cs_history_open_current(statefd, &why);
	int r = fd < 0 ? fd : 0;
	/* Its own lock, for a moment at most: past that, appended without it
	 * (one write), and without rotating, which another writer may be in the
	 * middle of. */
	bool locked = r == 0 && cs_history_lock(statefd, &fd, LOCK_EX, cs_history_open_current);
	if (locked)
		r = rotate_if_full(statefd, &fd, len, &locked);
	if (r == 0)
		r = append(fd, line, len, locked);
	if (r < 0)
		return cs_error_errno(err, CS_ESTATE, -r, why[0] ? "Remove it: cudasnap makes it again." : NULL,
				      "cannot write %s/%s%s%s%s", cs_state_dir(), CS_HISTORY_NAME, why[0] ? " (" : "",
				      why, why[0] ? ")" : "");
	return 0;
}

static void warn_unwritten(const cs_history *h, const cs_error *err, cs_warn_fn warn, void *warn_ctx)
{
	char msg[1024];
	if (!warn)
		return;
	snprintf(msg, sizeof(msg), "warning: this %s is not recorded in the history of operations (%s/%s): %s", h->op,
		 cs_state_dir(), CS_HISTORY_NAME, err->message);
	warn(warn_ctx, msg);
}

static int write_into(const cs_history *h, int statefd, cs_warn_fn warn, void *warn_ctx)
{
	cs_error err = { 0 };
	_cleanup_free_ char *line = cs_history_render(h);
	int r = line ? cs_history_append(statefd, line, strlen(line), &err) :
		       cs_error_set(&err, CS_ESYS, NULL, "out of memory");
	if (r < 0)
		warn_unwritten(h, &err, warn, warn_ctx);
	return r;
}

int cs_history_write(const cs_history *h, int statefd, bool create, cs_warn_fn warn, void *warn_ctx)
{
	if (statefd >= 0)
		return write_into(h, statefd, warn, warn_ctx);
	cs_error err = { 0 };
	_cleanup_close_ int own = create ? cs_state_open(&err) : cs_state_open_existing(&err);
	if (own < 0 && !create && err.sys == ENOENT)
		return 1;
	if (own < 0) {
		warn_unwritten(h, &err, warn, warn_ctx);
		return own;
	}
	return write_into(h, own, warn, warn_ctx);
}
