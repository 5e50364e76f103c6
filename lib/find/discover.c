/* Process table -> GPU-related processes, classified by asking the driver. */
#include "cudasnap.h"
#include "claim.h"
#include "discover.h"
#include "env.h"
#include "halt.h"
#include "proc.h"
#include "state.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *cs_class_name(int cls)
{
	switch (cls) {
	case CS_CLASS_CUDA: return "cuda";
	case CS_CLASS_DEVICE_HOLDER: return "device-holder";
	case CS_CLASS_UNKNOWN: return "unknown";
	default: return "none";
	}
}

typedef struct scan_ctx {
	const char *devdir;
	bool keep_all;
	cs_ptable *t;
	size_t cap, ucap, lcap;
	struct stat self_exe; /* st_ino 0 when unknown */
} scan_ctx;

static bool vanished(int e)
{
	return e == ENOENT || e == ESRCH;
}

static int note_unreadable(scan_ctx *c, pid_t pid, int errnum)
{
	cs_ptable *t = c->t;
	if (cs_grow(&t->unreadable, &c->ucap, t->nunreadable + 1, sizeof(*t->unreadable)) < 0)
		return -ENOMEM;
	t->unreadable[t->nunreadable++] = (cs_unreadable){ .pid = pid, .errnum = errnum };
	return 0;
}

/* Marks mappings whose file is also open through an fd. */
static void link_refs(cs_proc *p)
{
	for (size_t i = 0; i < p->nrefs; i++) {
		cs_devref *m = &p->refs[i];
		if (m->kind != CS_REF_MAP)
			continue;
		for (size_t j = 0; j < p->nrefs && !m->fd_open; j++)
			if (p->refs[j].kind == CS_REF_FD && strcmp(p->refs[j].path, m->path) == 0)
				m->fd_open = true;
	}
}

/* cudasnap itself, in another process (a doctor loop beside a workload, a
 * drop-in called by CRIU's plugin), or NVIDIA's cuda-checkpoint: a tool
 * that comes and goes, never part of the workload. */
static bool is_tool(const scan_ctx *c, int pdir, const char *comm)
{
	if (strcmp(comm, "cudasnap") == 0 || strcmp(comm, "cuda-checkpoint") == 0)
		return true;
	struct stat st;
	return c->self_exe.st_ino && fstatat(pdir, "exe", &st, 0) == 0 && st.st_ino == c->self_exe.st_ino &&
		st.st_dev == c->self_exe.st_dev;
}

/* Whether p maps a GPU's device file (/dev/nvidia0...) or nvidia-uvm, as
 * every process with a CUDA context does (and one that only called cuInit
 * maps nvidia0). An NVML client maps at most nvidiactl (nvidia-smi does, a
 * pynvml script not at all: driver 580, H200), and a checkpointed CUDA
 * process holds no device file at all. */
static bool maps_gpu_memory(const cs_proc *p)
{
	for (size_t i = 0; i < p->nrefs; i++) {
		const char *b = strrchr(p->refs[i].path, '/');
		b = b ? b + 1 : p->refs[i].path;
		if (p->refs[i].kind == CS_REF_MAP &&
		    (strcmp(b, "nvidia-uvm") == 0 || cs_path_gpu_minor(p->refs[i].path) >= 0))
			return true;
	}
	return false;
}

/* A monitor: it maps NVML and holds device files, but no GPU memory. */
static bool is_nvml_only(const cs_proc *p)
{
	return p->maps_nvml && p->device_fds > 0 && !maps_gpu_memory(p);
}

/* Reads one process; returns 1 when kept, 0 when skipped, <0 on fatal error. */
static int scan_one(scan_ctx *c, int procfd, const char *name, pid_t pid)
{
	_cleanup_close_ int pdir = openat(procfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pdir < 0)
		return vanished(errno) ? 0 : note_unreadable(c, pid, errno);
	cs_stat st;
	int r = cs_proc_read_stat(pdir, &st);
	if (r < 0)
		return vanished(-r) ? 0 : note_unreadable(c, pid, r == -EINVAL ? EIO : -r);
	struct stat sb;
	if (fstat(pdir, &sb) < 0)
		return 0;
	cs_ptable *t = c->t;
	if (cs_grow(&t->links, &c->lcap, t->nlinks + 1, sizeof(*t->links)) < 0)
		return -ENOMEM;
	t->links[t->nlinks++] = (cs_link){ .pid = pid, .ppid = st.ppid };
	_cleanup_(cs_proc_clearp) cs_proc p = { .pid = pid,
						.ppid = st.ppid,
						.uid = sb.st_uid,
						.start_time = st.start_time,
						.state = CS_STATE_UNKNOWN,
						.cu_result = -1 };
	memcpy(p.comm, st.comm, sizeof(p.comm));
	int rf = cs_proc_scan_fds(pdir, c->devdir, &p);
	int rm = rf == -ENOMEM ? 0 : cs_proc_scan_maps(pdir, c->devdir, &p);
	if (rf == -ENOMEM || rm == -ENOMEM)
		return -ENOMEM;
	int bad = rf < 0 && !vanished(-rf) ? -rf : rm < 0 && !vanished(-rm) ? -rm : 0;
	/* Kernel threads have no maps and no fds worth reading. */
	if (bad && !(st.flags & CS_PF_KTHREAD))
		return note_unreadable(c, pid, bad);
	if (!c->keep_all && p.nrefs == 0 && !p.maps_libcuda)
		return 0;
	link_refs(&p);
	if (rf == 0 && rm == 0)
		cs_proc_scan_ipc(pdir, &p);
	p.tool = is_tool(c, pdir, p.comm);
	p.nvml_only = is_nvml_only(&p);
	if (cs_grow(&t->procs, &c->cap, t->n + 1, sizeof(p)) < 0)
		return -ENOMEM;
	t->procs[t->n++] = TAKE_STRUCT(p);
	return 1;
}

static int scan(scan_ctx *c, const char *procdir, cs_error *err)
{
	_cleanup_close_ int procfd = open(procdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (procfd < 0)
		return cs_error_errno(err, CS_EENV, errno, "Mount procfs on /proc.", "cannot open %s", procdir);
	/* The stream gets a descriptor of its own (closedir closes it), above
	 * the standard three and closed on exec like every other. */
	int dfd = fcntl(procfd, F_DUPFD_CLOEXEC, 3);
	if (dfd < 0)
		return cs_error_errno(err, CS_ESYS, errno, NULL, "dup");
	_cleanup_closedir_ DIR *dir = cs_fdopendir(dfd);
	if (!dir)
		return cs_error_errno(err, CS_ESYS, errno, NULL, "cannot list %s", procdir);
	pid_t self = getpid();
	for (struct dirent *de; (de = readdir(dir));) {
		long pid;
		if (cs_parse_long(de->d_name, 1, INT_MAX, &pid) < 0 || pid == self)
			continue;
		c->t->scanned++;
		if (scan_one(c, procfd, de->d_name, (pid_t)pid) < 0)
			return cs_error_set(err, CS_ESYS, NULL, "out of memory while scanning %s", procdir);
	}
	return 0;
}

/* Asks the driver what it knows of p and sets class, state and restore tid. */
static void classify(cs_proc *p, cs_driver *d)
{
	bool holds = p->nrefs > 0;
	if (!cs_driver_loaded(d)) {
		p->cls = holds ? CS_CLASS_DEVICE_HOLDER : p->maps_libcuda ? CS_CLASS_UNKNOWN : CS_CLASS_NONE;
		return;
	}
	/* The restore thread first: the driver names it without asking the
	 * process, and it is the thread that must run for anything else. */
	pid_t tid;
	int rt = cs_cu_get_restore_tid(d, p->pid, &tid);
	pid_t here = rt == CS_CU_SUCCESS ? cs_proc_thread_here(cs_proc_dir(), p->pid, tid) : 0;
	if (here)
		tid = here; /* the driver may name it as the target's own namespace does */
	cs_halt_info h;
	if (cs_proc_halt(cs_proc_dir(), p->pid, rt == CS_CU_SUCCESS ? tid : 0, &h) != CS_HALT_NONE) {
		p->halt = h.halt;
		p->restore_tid = rt == CS_CU_SUCCESS ? tid : 0;
		p->cls = rt == CS_CU_SUCCESS        ? CS_CLASS_CUDA :
			holds                       ? CS_CLASS_DEVICE_HOLDER :
			rt == CS_CU_NOT_INITIALIZED ? CS_CLASS_NONE :
						      CS_CLASS_UNKNOWN;
		return;
	}
	int state;
	p->cu_result = cs_cu_get_state(d, p->pid, &state);
	if (p->cu_result == CS_CU_SUCCESS) {
		p->cls = CS_CLASS_CUDA;
		p->state = state;
		if (rt == CS_CU_SUCCESS)
			p->restore_tid = tid;
	} else if ((p->cu_result == CS_CU_TIMED_OUT || p->cu_result == CS_CU_INTERRUPTED) && rt == CS_CU_SUCCESS) {
		/* Known to the driver, but it did not answer (stopped since the check). */
		p->cls = CS_CLASS_CUDA;
		p->restore_tid = tid;
	} else if (p->cu_result == CS_CU_NOT_INITIALIZED) {
		/* Loaded libcuda but never initialized it: no GPU relation. */
		p->cls = holds ? CS_CLASS_DEVICE_HOLDER : CS_CLASS_NONE;
	} else {
		p->cls = CS_CLASS_UNKNOWN;
	}
}

/* Whether the caller asked about pid (all processes when it named none). */
static bool asked(const cs_scan_opts *o, const cs_ptable *t, pid_t pid)
{
	if (o && o->only) {
		for (size_t i = 0; i < o->nonly; i++)
			if (o->only[i] == pid)
				return true;
		return false;
	}
	return !o || !o->ask || o->ask(o->ask_ctx, t, pid);
}

static int by_pid(const void *a, const void *b)
{
	const cs_proc *x = a, *y = b;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

static int by_link(const void *a, const void *b)
{
	const cs_link *x = a, *y = b;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* The state directory as it is, for the claims of other operations; -1
 * when there is none (nothing is created here). */
static int state_dir_if_any(void)
{
	return open(cs_state_dir(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* A process another operation holds: only the restore thread is asked,
 * which the driver answers without the process. */
static void classify_busy(cs_proc *p, cs_driver *d)
{
	pid_t tid;
	p->busy = true;
	if (cs_driver_loaded(d) && cs_cu_get_restore_tid(d, p->pid, &tid) == CS_CU_SUCCESS) {
		pid_t here = cs_proc_thread_here(cs_proc_dir(), p->pid, tid);
		p->cls = CS_CLASS_CUDA;
		p->restore_tid = here ? here : tid;
	} else {
		p->cls = p->nrefs ? CS_CLASS_DEVICE_HOLDER : CS_CLASS_UNKNOWN;
	}
}

/* A process the driver knows as running, but that held no device file when
 * /proc was read, was starting then: an NVML monitor opens its device files
 * in nvmlInit, about when the driver comes to know it, and /proc may even
 * have shown it before the loader mapped NVML (a program linked with
 * libcuda and NVML gets them mapped one after the other). Its files and
 * mappings are read again, after the driver's answer, so that it is not
 * taken for a CUDA process that the default selection checkpoints. */
static void reread_starting(cs_proc *p, const cs_scan_opts *opts)
{
	if (p->cls != CS_CLASS_CUDA || p->state != CS_STATE_RUNNING || p->nrefs)
		return;
	const char *devdir = opts && opts->dev_dir ? opts->dev_dir : cs_dev_dir();
	_cleanup_close_ int pdir = cs_proc_open(opts && opts->proc_dir ? opts->proc_dir : cs_proc_dir(), p->pid);
	_cleanup_(cs_proc_clearp) cs_proc now = { .pid = p->pid };
	if (pdir < 0 || cs_proc_scan_fds(pdir, devdir, &now) < 0 || cs_proc_scan_maps(pdir, devdir, &now) < 0)
		return;
	free(p->refs);
	p->refs = TAKE_PTR(now.refs);
	p->nrefs = now.nrefs;
	p->device_fds = now.device_fds;
	p->device_maps = now.device_maps;
	p->maps_nvml = now.maps_nvml;
	p->maps_libcuda = now.maps_libcuda;
	p->maps_park = now.maps_park;
	link_refs(p);
	p->nvml_only = is_nvml_only(p);
}

void cs_classify(cs_ptable *t, cs_driver *d, const cs_scan_opts *opts)
{
	bool keep_all = opts && opts->keep_all;
	_cleanup_close_ int statefd = opts && opts->skip_busy ? state_dir_if_any() : -1;
	size_t kept = 0;
	for (size_t i = 0; i < t->n; i++) {
		cs_proc *p = &t->procs[i];
		bool ask = (p->nrefs || p->maps_libcuda) && asked(opts, t, p->pid);
		if (ask && opts && opts->skip_busy &&
		    cs_claims_busy(statefd, p->pid, p->busy_holder, sizeof(p->busy_holder)))
			classify_busy(p, d);
		else if (p->nrefs || p->maps_libcuda)
			classify(p, ask ? d : NULL);
		if (ask)
			reread_starting(p, opts);
		if (p->cls == CS_CLASS_NONE && !keep_all) {
			cs_proc_clear(p);
			continue;
		}
		t->procs[kept++] = *p;
	}
	t->n = kept;
}

int cs_scan(const cs_scan_opts *opts, cs_ptable *out, cs_error *err)
{
	memset(out, 0, sizeof(*out));
	_cleanup_(cs_ptable_freep) cs_ptable t = { .self = getpid() };
	scan_ctx c = {
		.devdir = opts && opts->dev_dir ? opts->dev_dir : cs_dev_dir(),
		.keep_all = opts && opts->keep_all,
		.t = &t,
	};
	if (stat("/proc/self/exe", &c.self_exe) < 0)
		c.self_exe.st_ino = 0;
	const char *procdir = opts && opts->proc_dir ? opts->proc_dir : cs_proc_dir();
	int r = scan(&c, procdir, err);
	if (r < 0)
		return r;
	/* The links first: a caller's ask() may look for ancestors. */
	if (t.nlinks)
		qsort(t.links, t.nlinks, sizeof(*t.links), by_link);
	/* From /proc alone until the driver is asked (cs_classify). */
	for (size_t i = 0; i < t.n; i++)
		classify(&t.procs[i], NULL);
	if (t.n)
		qsort(t.procs, t.n, sizeof(*t.procs), by_pid);
	*out = TAKE_STRUCT(t);
	return 0;
}

int cs_discover(const cs_scan_opts *opts, cs_driver *d, cs_ptable *out, cs_error *err)
{
	int r = cs_scan(opts, out, err);
	if (r == 0)
		cs_classify(out, d, opts);
	return r;
}

void cs_ptable_free(cs_ptable *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		cs_proc_clear(&t->procs[i]);
	free(t->procs);
	free(t->unreadable);
	free(t->links);
	memset(t, 0, sizeof(*t));
}

const cs_proc *cs_ptable_find(const cs_ptable *t, pid_t pid)
{
	cs_proc key = { .pid = pid };
	if (!t->n)
		return NULL;
	return bsearch(&key, t->procs, t->n, sizeof(*t->procs), by_pid);
}

pid_t cs_ptable_parent(const cs_ptable *t, pid_t pid)
{
	cs_link key = { .pid = pid };
	if (!t->nlinks)
		return 0;
	const cs_link *l = bsearch(&key, t->links, t->nlinks, sizeof(*t->links), by_link);
	return l ? l->ppid : 0;
}

pid_t cs_ptable_listed_ancestor(const cs_ptable *t, pid_t pid)
{
	/* Bounded: a PID namespace cannot nest deeper than its process count,
	 * and a parent cycle (PID reuse mid-scan) ends when it comes back. */
	pid_t start = pid;
	for (size_t hops = 0; hops <= t->nlinks; hops++) {
		pid = cs_ptable_parent(t, pid);
		if (pid <= 0 || pid == start)
			return 0;
		if (cs_ptable_find(t, pid))
			return pid;
	}
	return 0;
}

bool cs_ptable_descends(const cs_ptable *t, pid_t pid, pid_t anc)
{
	for (size_t hops = 0; hops <= t->nlinks && pid > 0; hops++) {
		if (pid == anc)
			return true;
		pid = cs_ptable_parent(t, pid);
	}
	return false;
}
