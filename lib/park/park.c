/* Parking, seen from cudasnap: the control socket of an interposed process
 * (found by lib/proc/park_find.c), one request and one answer per line. */
#include "park.h"
#include "park_find.h"
#include "parkfiles.h"
#include "pool.h"
#include "env.h"
#include "halt.h"
#include "proc.h"
#include "util.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define LINE_MAX_PARK 2048

static bool key_is(const char *tok, size_t klen, const char *key)
{
	return strlen(key) == klen && strncmp(tok, key, klen) == 0;
}

static void take(cs_park_answer *a, cs_park_info *info, const char *k, size_t klen, const char *v)
{
	char *end;
	if (key_is(k, klen, "code"))
		a->code = (int)strtol(v, &end, 10);
	else if (key_is(k, klen, "stage"))
		snprintf(a->stage, sizeof(a->stage), "%.*s", (int)strcspn(v, " "), v);
	else if (key_is(k, klen, "busy"))
		a->busy = strtol(v, &end, 10);
	else if (key_is(k, klen, "tid"))
		a->busy_tid = (int)strtol(v, &end, 10);
	else if (key_is(k, klen, "pid"))
		a->pid = (int)strtol(v, &end, 10);
	else if (key_is(k, klen, "importer"))
		a->importer = (int)strtol(v, &end, 10);
	else if (key_is(k, klen, "bytes"))
		a->bytes = strtoull(v, &end, 10);
	else if (key_is(k, klen, "quiesce_s"))
		a->quiesce_s = strtod(v, &end);
	else if (key_is(k, klen, "copy_s"))
		a->copy_s = strtod(v, &end);
	else if (key_is(k, klen, "release_s"))
		a->release_s = strtod(v, &end);
	else if (key_is(k, klen, "map_s"))
		a->map_s = strtod(v, &end);
	else if (key_is(k, klen, "total_s"))
		a->total_s = strtod(v, &end);
	else if (key_is(k, klen, "copy_gbps"))
		a->gbps = strtod(v, &end);
	else if (key_is(k, klen, "files"))
		a->files = (unsigned)strtoul(v, &end, 10);
	else if (key_is(k, klen, "direct"))
		a->direct = (unsigned)strtoul(v, &end, 10);
	else if (key_is(k, klen, "file"))
		a->file = (int)strtol(v, &end, 10);
	else if (key_is(k, klen, "piece"))
		a->piece = strtoull(v, &end, 10);
	else if (key_is(k, klen, "errno"))
		a->err_no = (int)strtol(v, &end, 10);
	if (info == NULL)
		return;
	if (key_is(k, klen, "parked"))
		info->parked = v[0] == '1';
	else if (key_is(k, klen, "parkable"))
		info->parkable = v[0] == '1';
	else if (key_is(k, klen, "ipc_imports"))
		info->imports = (unsigned)strtoul(v, &end, 10);
	else if (key_is(k, klen, "legacy_imports"))
		info->legacy = (unsigned)strtoul(v, &end, 10);
	else if (key_is(k, klen, "vmm_imports"))
		info->vmm = (unsigned)strtoul(v, &end, 10);
	else if (key_is(k, klen, "pool_imports"))
		info->pools = (unsigned)strtoul(v, &end, 10);
	else if (key_is(k, klen, "ipc_attached"))
		info->attached = (unsigned)strtoul(v, &end, 10);
	else if (key_is(k, klen, "held"))
		info->held = (unsigned)strtoul(v, &end, 10);
	else if (key_is(k, klen, "unclaimed"))
		info->unclaimed = (unsigned)strtoul(v, &end, 10);
	else if (key_is(k, klen, "own_vmm_bytes"))
		info->own_vmm_bytes = strtoull(v, &end, 10);
	else if (key_is(k, klen, "version"))
		info->version = (unsigned)strtoul(v, &end, 10);
	else if (key_is(k, klen, "own_vmm_maps"))
		info->own_vmm_maps = (unsigned)strtoul(v, &end, 10);
}

int cs_park_parse(const char *line, cs_park_answer *a, cs_park_info *info)
{
	memset(a, 0, sizeof(*a));
	bool ok = strncmp(line, "ok", 2) == 0 && (line[2] == 0 || line[2] == ' ' || line[2] == '\n');
	bool bad = strncmp(line, "error", 5) == 0 && (line[5] == 0 || line[5] == ' ' || line[5] == '\n');
	if (!ok && !bad)
		return -1;
	a->ok = ok;
	const char *p = line + (ok ? 2 : 5);
	while (*p) {
		p += strspn(p, " \n");
		if (*p == 0)
			break;
		size_t tok = strcspn(p, " \n");
		const char *eq = memchr(p, '=', tok);
		if (eq && key_is(p, (size_t)(eq - p), "why")) {
			/* the reason runs to the end of the line */
			cs_sanitize(a->why, sizeof(a->why), eq + 1, strcspn(eq + 1, "\n"));
			if (info)
				snprintf(info->why, sizeof(info->why), "%s", a->why);
			break;
		}
		if (eq) {
			/* numbers and words; longer values are cut */
			char v[64];
			size_t vlen = tok - (size_t)(eq + 1 - p);
			snprintf(v, sizeof(v), "%.*s", (int)(vlen < sizeof(v) ? vlen : sizeof(v) - 1), eq + 1);
			take(a, info, p, (size_t)(eq - p), v);
		}
		p += tok;
	}
	if (info) {
		info->bytes = a->bytes;
		info->files = a->files;
	}
	return ok ? 0 : -1;
}

/* " key=HEX", the key of pid's interposer as a request carries it; ""
 * when it cannot be read (no ptrace access to the process): a park or an
 * unpark is then refused, and a status answered only to root and the
 * process's own user. */
static void key_field(pid_t pid, char *out, size_t size)
{
	unsigned char key[PARK_KEY_LEN];
	out[0] = 0;
	if (size < sizeof(" key=") + 2 * (size_t)PARK_KEY_LEN || park_find_key(pid, cs_proc_dir(), key) != 0)
		return;
	char *p = out + snprintf(out, size, " key=");
	for (size_t i = 0; i < PARK_KEY_LEN; i++)
		p += snprintf(p, 3, "%02x", key[i]);
	explicit_bzero(key, sizeof(key));
}

/* " files=N" (and " room" while their space is still being reserved),
 * the words of a request whose files follow it; "" none. */
static void files_word(const cs_park_files *f, char *out, size_t size)
{
	out[0] = 0;
	if (f && f->n)
		snprintf(out, size, " files=%u%s", f->n, cs_park_room_fd(f) >= 0 ? " room" : "");
}

/* When the whole answer on conn is due: its receive timeout from now. A
 * timeout per read alone would let a peer that drips a byte at a time
 * hold its caller (and the node's book, under whose lock the orphan judge
 * asks) for as long as it likes. */
static double answer_by(int conn)
{
	struct timeval tv = { 0 };
	socklen_t len = sizeof(tv);
	if (getsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) != 0 || (tv.tv_sec == 0 && tv.tv_usec == 0))
		tv.tv_sec = 10;
	return cs_now() + (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* One byte from conn by the time by (cs_now's clock): 1, or 0 at its
 * end, -1 on an error or past by. */
static int recv_byte_by(int conn, char *c, double by)
{
	for (;;) {
		double left = by - cs_now();
		if (left <= 0)
			return -1;
		struct pollfd p = { .fd = conn, .events = POLLIN };
		int r = poll(&p, 1, (int)(left * 1000) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		ssize_t got = recv(conn, c, 1, MSG_DONTWAIT);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		return got < 0 ? -1 : (int)got;
	}
}

/* One request (its files after it), one answer line (the sending bounded
 * by the socket's send timeout, the whole answer by its receive timeout). */
static int send_files(int conn, const cs_park_files *f, int flags);
static int ask_with(int conn, const char *req, const cs_park_files *files, char *line, size_t size)
{
	size_t len = strlen(req);
	if (send(conn, req, len, MSG_NOSIGNAL) != (ssize_t)len || send_files(conn, files, 0) != 0)
		return -1;
	double by = answer_by(conn);
	size_t n = 0;
	while (n + 1 < size) {
		if (recv_byte_by(conn, line + n, by) <= 0)
			return -1;
		if (line[n++] == '\n')
			break;
	}
	line[n] = 0;
	return n ? 0 : -1;
}

/* The files after the request's line: one byte and one descriptor each. */
static int send_files(int conn, const cs_park_files *f, int flags)
{
	for (unsigned i = 0; f && i < f->n; i++)
		if (park_send_fd(conn, "F", 1, f->fd[i], flags) != 0)
			return -1;
	if (f && f->n && cs_park_room_fd(f) >= 0 && park_send_fd(conn, "R", 1, cs_park_room_fd(f), flags) != 0)
		return -1;
	return 0;
}

static int ask(int conn, const char *req, char *line, size_t size)
{
	return ask_with(conn, req, NULL, line, size);
}

/* Closes conn once the interposer has closed its end (bounded by the
 * socket's timeout): a snapshot engine may stop the process right after,
 * and CRIU refuses to dump a connected socket whose peer has gone. */
static void hang_up(int *conn)
{
	char c;
	shutdown(*conn, SHUT_WR);
	double by = answer_by(*conn);
	while (recv_byte_by(*conn, &c, by) > 0)
		;
	close(*conn);
	*conn = -1;
}

const char cs_park_unreachable_why[] =
	"it runs the parking interposer, whose control socket does not answer (its file was removed, or every "
	"connection to it is taken): cudasnap can neither park it nor tell whether it maps another process's "
	"memory through the interposer, which the driver alone could never restore";
const char cs_park_unreachable_fix[] =
	"Find what removed the socket (a cleaner of /dev/shm or of CUDASNAP_PARK_DIR) or holds its connections, "
	"then restart the process; --allow-unrestorable (CUDASNAP_ALLOW_UNRESTORABLE=1) leaves it to the driver "
	"anyway, knowing that it may not come back.";

/* Asks the process at path; whether it answered, as itself. */
static bool ask_status(pid_t pid, const char *path, unsigned timeout_ms, cs_park_info *info)
{
	/* A child forked without exec holds its parent's socket: the answer
	 * must come from the process itself, as its own namespace names it. */
	cs_proc_ident id = { .nspid = pid };
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), pid);
	if (pdir < 0 || cs_proc_read_ident(pdir, pid, &id) < 0)
		return false;
	int conn = park_find_connect_path(pid, cs_proc_dir(), path, (int)timeout_ms);
	if (conn < 0)
		return false;
	char line[LINE_MAX_PARK], key[128], req[160];
	cs_park_answer a;
	key_field(pid, key, sizeof(key));
	snprintf(req, sizeof(req), "status%s\n", key);
	bool seen = ask(conn, req, line, sizeof(line)) == 0 && cs_park_parse(line, &a, info) == 0 && a.pid == id.nspid;
	hang_up(&conn);
	return seen;
}

void cs_park_status(pid_t pid, unsigned timeout_ms, cs_park_info *info)
{
	memset(info, 0, sizeof(*info));
	/* The common case, a process without the interposer, costs one read
	 * of its maps. */
	if (!park_find_mapped(pid, cs_proc_dir()))
		return;
	/* A stopped, traced or frozen process cannot accept: the connection
	 * would wait in its socket's queue, and CRIU refuses to dump a
	 * listening socket holding one whose peer has gone. */
	if (cs_proc_halt(cs_proc_dir(), pid, 0, NULL) != CS_HALT_NONE)
		return;
	char path[256];
	info->seen =
		park_find_path(pid, cs_proc_dir(), path, sizeof(path)) == 0 && ask_status(pid, path, timeout_ms, info);
	if (!info->seen) {
		memset(info, 0, sizeof(*info));
		/* Without its key it has no socket by design (CUDASNAP_PARK=0,
		 * no memory backed yet): the driver's alone, as without it. */
		info->unreachable = park_find_started(pid, cs_proc_dir());
	}
}

bool cs_park_wanted(const cs_park_info *info)
{
	return info->bytes > 0 || info->imports > 0 || info->attached > 0 || info->unclaimed > 0;
}

bool cs_park_shm_is_events(const cs_park_info *info)
{
	return info->seen && info->legacy == 0;
}

bool cs_park_unrestorable(const cs_park_info *info, const char *proc_file, bool parking, char *what, size_t size)
{
	if (info->seen)
		return cs_park_import_what(info, parking, what, size);
	if (!proc_file[0])
		return false;
	snprintf(what, size, "%s", proc_file);
	return true;
}

bool cs_park_import_what(const cs_park_info *info, bool parking, char *what, size_t size)
{
	if (!info->seen)
		return false;
	if (info->legacy)
		snprintf(what, size, "%u import%s through the driver", info->legacy, info->legacy == 1 ? "" : "s");
	else if (info->vmm)
		snprintf(what, size, "%u VMM import%s through a file descriptor", info->vmm, info->vmm == 1 ? "" : "s");
	else if (info->pools)
		snprintf(what, size, "%u memory pool%s imported from another process", info->pools,
			 info->pools == 1 ? "" : "s");
	else if (info->imports && !(parking && info->parkable))
		snprintf(what, size, "%u import%s through cudasnap's interposer%s", info->imports,
			 info->imports == 1 ? "" : "s", parking ? ", which cannot park it" : " (--no-park)");
	else
		return false;
	return true;
}

bool cs_park_own_vmm_say(const cs_park_info *info, char *out, size_t size)
{
	if (!info->seen || info->own_vmm_maps == 0)
		return false;
	snprintf(out, size,
		 "the VMM memory it maps itself (%.1f MiB in %u mapping%s with cuMemMap: PyTorch's "
		 "expandable_segments, JAX, NCCL) is not parked: the driver's checkpoint moves it",
		 (double)info->own_vmm_bytes / (1 << 20), info->own_vmm_maps, info->own_vmm_maps == 1 ? "" : "s");
	return true;
}

/* A park into files, or an unpark from them, that failed at a file. */
static bool explain_files(const cs_target *t, bool park, const cs_park_answer *a, cs_error *err)
{
	static const char *const stages[] = { "files", "write", "read", "verify", "flush", "staging", "thread", "room" };
	bool ours = false;
	for (size_t i = 0; i < sizeof(stages) / sizeof(stages[0]); i++)
		ours = ours || strcmp(a->stage, stages[i]) == 0;
	if (!ours)
		return false;
	char what[200];
	if (strcmp(a->stage, "verify") == 0)
		snprintf(what, sizeof(what),
			 "file %d does not hold what the park wrote (piece %llu: its MAC does not match)", a->file,
			 a->piece);
	else if (strcmp(a->stage, "files") == 0)
		snprintf(what, sizeof(what), "%s", a->why[0] ? a->why : "its files were refused");
	else if (strcmp(a->stage, "room") == 0 && a->err_no == EFBIG)
		snprintf(what, sizeof(what), "%s",
			 "it holds more GPU memory than when its files were sized (it allocated since): run the "
			 "checkpoint again");
	else if (strcmp(a->stage, "room") == 0 && a->err_no == ETIMEDOUT)
		snprintf(what, sizeof(what), "%s", "the reservation of the files' space made no progress for 30 s");
	else if (strcmp(a->stage, "room") == 0)
		snprintf(what, sizeof(what), "reading how far the files' space is reserved (file %d): %s", a->file,
			 strerror(a->err_no));
	else
		snprintf(what, sizeof(what), "%s file %d (piece %llu): %s",
			 strcmp(a->stage, "read") == 0          ? "reading" :
				 strcmp(a->stage, "write") == 0 ? "writing" :
								  a->stage,
			 a->file, a->piece,
			 a->err_no       ? strerror(a->err_no) :
				 a->code ? "CUDA error" :
					   "failed");
	if (a->code && !a->err_no) {
		size_t len = strlen(what);
		snprintf(what + len, sizeof(what) - len, " %d", a->code);
	}
	cs_error_set(err, park ? CS_ESYS : CS_ESTATE,
		     park ? "Nothing was parked: its memory stays on the GPU and it runs on; the files are removed." :
			    "It stays checkpointed, its GPU memory in its files as they are; bring back the files it "
			    "was parked into and run cudasnap restore again.",
		     "%s of process %d (%s) %s files failed: %s", park ? "park" : "unpark", (int)t->pid, t->comm,
		     park ? "into" : "from", what);
	return true;
}

/* What the interposer was doing at a driver step that failed, in words. */
static const char *step_words(const char *stage)
{
	static const char *const words[][2] = {
		{ "copy", "copied its memory" },        { "release", "released its device memory" },
		{ "map", "mapped device memory back" }, { "attach", "mapped the memory it imports again" },
		{ "driver", "reached the driver" },     { "undo", "undid a failed park" },
	};
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strcmp(stage, words[i][0]) == 0)
			return words[i][1];
	return stage[0] ? stage : "answered";
}

/* How a failed unpark leaves the process: its memory stays where it was
 * parked (host memory, or files). */
static const char *unpark_hint(const cs_park_answer *a, bool in_files)
{
	if (a->code == CS_CU_OUT_OF_MEMORY)
		return in_files ?
			"The GPU has no room for its memory now; it stays parked in its files, nothing is lost. "
			"Free GPU memory and run cudasnap restore again." :
			"The GPU has no room for its memory now; it stays parked in host memory, nothing is "
			"lost. Free GPU memory and run cudasnap restore again.";
	return in_files ? "It stays parked in its files, nothing is lost; cudasnap restore tries again." :
			  "It stays parked in host memory, nothing is lost; cudasnap restore tries again.";
}

static void explain(const cs_target *t, bool park, const cs_park_answer *a, bool answered, unsigned timeout_ms,
		    bool in_files, cs_error *err)
{
	if (answered && explain_files(t, park, a, err))
		return;
	const char *what = park ? "park" : "unpark";
	if (!answered)
		cs_error_set(err, CS_EPROC,
			     "Its interposer's control thread did not answer; the process may be stopped or "
			     "overloaded. Nothing was parked.",
			     "%s of process %d (%s) failed: no answer from its interposer within %.1f s", what,
			     (int)t->pid, t->comm, timeout_ms / 1000.0);
	else if (strcmp(a->stage, "quiesce") == 0)
		cs_error_set(err, CS_EPROC,
			     "The program kept driver calls running (a long kernel, or a wait on another thread's "
			     "work); try again, or give a longer --timeout. Nothing was parked.",
			     "park of process %d (%s) failed: %ld of its driver calls (thread %d) did not finish within "
			     "%.1f s",
			     (int)t->pid, t->comm, a->busy, a->busy_tid, timeout_ms / 1000.0);
	else if (strcmp(a->stage, "sync") == 0)
		cs_error_set(err, CS_EPROC,
			     "GPU work that waits on one of the program's own threads (a host function, a flag a thread "
			     "sets) cannot finish while its driver calls are held: it runs on, nothing was parked; try "
			     "again, or give a longer --timeout.",
			     "park of process %d (%s) failed: %s", (int)t->pid, t->comm,
			     a->why[0] ? a->why : "its GPU work did not finish in time");
	else if (strcmp(a->stage, "access") == 0)
		cs_error_set(err, CS_EENV,
			     "Parking and unparking take ptrace access to the process: run cudasnap as root, or as "
			     "its user where ptrace is allowed.",
			     "%s of process %d (%s) refused by its interposer: cudasnap could not read its key "
			     "(/proc/%d/fd)",
			     what, (int)t->pid, t->comm, (int)t->pid);
	else if (strcmp(a->stage, "check") == 0 && a->importer > 0)
		cs_error_set(err, CS_EPROC,
			     "A process that maps another's memory parks first, and its exporter after it: "
			     "checkpoint them together (--pid both, or --tree), or the importer alone.",
			     "park of process %d (%s) refused: process %d maps its memory (CUDA IPC) and is not "
			     "parked",
			     (int)t->pid, t->comm, a->importer);
	else if (strcmp(a->stage, "check") == 0)
		cs_error_set(err, CS_EPROC, "--no-park checkpoints it through the driver alone.",
			     "park of process %d (%s) refused by its interposer: %s", (int)t->pid, t->comm,
			     a->why[0] ? a->why : "it does something the interposer cannot carry");
	else
		cs_error_set(err, CS_EDRIVER,
			     park ? "The process keeps its memory on the GPU; nothing was parked." :
				    unpark_hint(a, in_files),
			     "%s of process %d (%s) failed: the driver answered CUDA error %d when it %s", what,
			     (int)t->pid, t->comm, a->code, step_words(a->stage));
}

double cs_park_answer_s(const cs_driver *d, unsigned long long bytes, unsigned timeout_ms)
{
	return cs_move_deadline(d, bytes) + timeout_ms / 1000.0;
}

int cs_park_step(const cs_target *t, bool park, int *conn, unsigned timeout_ms, double answer_s,
		 const cs_park_files *files, cs_park_answer *a, cs_error *err)
{
	memset(a, 0, sizeof(*a));
	if (*conn < 0)
		*conn = park_find_connect(t->pid, cs_proc_dir(), (int)(answer_s * 1000));
	char req[192], line[LINE_MAX_PARK], key[128];
	key_field(t->pid, key, sizeof(key));
	/* The host copy is made and copied back through pinned staging
	 * buffers and never pinned itself, so the driver's checkpoint neither
	 * carries nor pins it again at the restore: faster both ways on the
	 * H200 (docs/performance.md). CUDASNAP_PARK_PIN=keep pins it and keeps
	 * it pinned through the checkpoint, to measure other machines. */
	const char *pin = cs_env("CUDASNAP_PARK_PIN");
	bool unpin = !(pin && strcmp(pin, "keep") == 0);
	char nfiles[24];
	files_word(files, nfiles, sizeof(nfiles));
	snprintf(req, sizeof(req), "%s %u%s%s%s\n", park ? "park" : "unpark", timeout_ms, park && unpin ? " unpin" : "",
		 nfiles, key);
	/* an answer: "ok ..." (parsed 0) or "error ..." (parsed -1, with its keys) */
	bool answered = *conn >= 0 && ask_with(*conn, req, files, line, sizeof(line)) == 0 &&
		(cs_park_parse(line, a, NULL) == 0 || strncmp(line, "error", 5) == 0);
	if (answered && a->ok)
		return 0;
	explain(t, park, a, answered, timeout_ms, files && files->n, err);
	return -1;
}

void cs_park_close(int *conn, bool commit)
{
	if (*conn < 0)
		return;
	if (commit) {
		char line[256];
		ask(*conn, "commit\n", line, sizeof(line));
	}
	hang_up(conn);
}

int cs_park_queue_unpark(pid_t pid, unsigned timeout_ms, const cs_park_files *files)
{
	/* connect() to a listening socket completes in the kernel's queue:
	 * the process need not run, only exist. */
	int conn = park_find_connect(pid, cs_proc_dir(), 2000);
	if (conn < 0)
		return -1;
	char req[192], key[128], nfiles[24];
	key_field(pid, key, sizeof(key));
	files_word(files, nfiles, sizeof(nfiles));
	int len = snprintf(req, sizeof(req), "unpark %u%s%s\n", timeout_ms, nfiles, key);
	int rc = send(conn, req, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT) == len &&
			send_files(conn, files, MSG_DONTWAIT) == 0 ?
		0 :
		-1;
	close(conn);
	return rc;
}

int cs_park_parked_now(pid_t pid)
{
	cs_park_info info;
	cs_park_status(pid, 1000, &info);
	return info.seen && !info.unreachable ? info.parked : -1;
}

void cs_park_left_say(const cs_left_behind *b, const cs_ptable *t, char *line, size_t lsize, char *fix, size_t fsize)
{
	const cs_proc *p = b->pid ? cs_ptable_find(t, b->pid) : NULL;
	int parked = p && b->files_only && b->files[0] ? cs_park_parked_now(p->pid) : -1;
	cs_left_behind_say(b, p ? p->state : CS_STATE_UNKNOWN, parked, line, lsize, fix, fsize);
}
