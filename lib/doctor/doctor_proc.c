/* The checks of cudasnap doctor about processes: who can be reached, which
 * processes the driver knows, and for each CUDA process what it loads, what
 * it shares and which GPUs it sees. Everything is read from /proc/PID, which
 * may vanish at any time; a vanished process just yields fewer hints. */
#include "doctor.h"
#include "capacity.h"
#include "claim.h"
#include "park.h"
#include "state.h"
#include "select.h"
#include "proc.h"
#include "util.h"
#include "verify.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { PASS = CS_CHECK_PASS, WARN = CS_CHECK_WARN, FAIL = CS_CHECK_FAIL };

static void check_privileges(cs_doctor_report *r, const cs_ptable *t)
{
	const cs_sandbox *s = &r->env;
	size_t others = 0;
	for (size_t i = 0; t && i < t->n; i++)
		others += t->procs[i].cls == CS_CLASS_CUDA && t->procs[i].uid != s->euid;
	const char *fix = "Run cudasnap as root, or give it CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE).";
	if (s->cap_sys_ptrace)
		cs_doctor_add(r, "privileges", PASS, 0, NULL,
			      "euid %u with CAP_SYS_PTRACE: processes of every "
			      "user can be checkpointed",
			      (unsigned)s->euid);
	else if (!s->caps_known)
		cs_doctor_add(r, "privileges", WARN, 0, fix,
			      "euid %u; capabilities unknown (no CapEff in "
			      "/proc/self/status)",
			      (unsigned)s->euid);
	else
		cs_doctor_add(r, "privileges", WARN, 0, fix,
			      "euid %u without CAP_SYS_PTRACE: only processes running as uid %u can be "
			      "checkpointed%s%s",
			      (unsigned)s->euid, (unsigned)s->euid, s->euid == 0 ? ", even as root" : "",
			      others == 0         ? "" :
				      others == 1 ? "; 1 CUDA process of another user is out of reach" :
						    "; CUDA processes of other users are out of reach");
}

static const char *comm_lib(const char *base)
{
	static const char *const prefixes[] = {
		"libnccl", "libnvshmem", "libucp", "libucs", "libuct", "libucm", "libucx", "libmpi",
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(prefixes); i++)
		if (strncmp(base, prefixes[i], strlen(prefixes[i])) == 0)
			return prefixes[i];
	return NULL;
}

/* Keeps "what path" as evidence in dst, once, printable. */
static void evidence(char *dst, size_t size, const char *what, const char *path)
{
	char clean[140];
	if (dst[0])
		return;
	cs_sanitize(clean, sizeof(clean), path, strlen(path));
	snprintf(dst, size, "%s %s", what, clean);
}

/* What a path a process maps or holds open says about GPU sharing. */
static void classify_path(cs_doctor_proc *p, const char *path, bool mapped, const char *devdir)
{
	char caps[PATH_MAX], base[96];
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	cs_sanitize(base, sizeof(base), b, strlen(b));
	snprintf(caps, sizeof(caps), "%s/nvidia-caps/", devdir);
	if (mapped && comm_lib(base) && !strstr(p->comm_libs, base))
		cs_doctor_list_add(p->comm_libs, sizeof(p->comm_libs), "%s", base);
	if (strncmp(path, caps, strlen(caps)) == 0)
		evidence(p->mig, sizeof(p->mig), "holds", path);
	if (strstr(path, "nvidia-mps"))
		evidence(p->mps, sizeof(p->mps), "holds", path);
	if (strncmp(path, "/dev/shm/cuda.shm", 17) == 0 || strncmp(path, "/dev/shm/nccl-", 14) == 0)
		evidence(p->ipc, sizeof(p->ipc), "shares", path);
}

static void scan_maps(int pdir, cs_doctor_proc *p, const char *devdir)
{
	_cleanup_fclose_ FILE *f = cs_fopen_at(pdir, "maps");
	if (!f)
		return;
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, f)) > 0) {
		if (line[n - 1] == '\n')
			line[--n] = '\0';
		cs_map_entry m;
		if (cs_parse_maps_line(line, (size_t)n, &m) == 0 && m.path_len && m.path[0] == '/')
			classify_path(p, m.path, true, devdir);
	}
}

static void scan_fds(int pdir, cs_doctor_proc *p, const char *devdir)
{
	_cleanup_closedir_ DIR *dir = cs_opendir_at(pdir, "fd");
	if (!dir)
		return;
	for (struct dirent *de; (de = readdir(dir));) {
		char target[PATH_MAX];
		ssize_t n = readlinkat(dirfd(dir), de->d_name, target, sizeof(target) - 1);
		if (n <= 0 || target[0] != '/')
			continue;
		target[n] = '\0';
		classify_path(p, target, false, devdir);
	}
}

static void read_environ(int pdir, cs_doctor_proc *p)
{
	size_t size = (size_t)1024 * 1024;
	_cleanup_free_ char *buf = malloc(size);
	ssize_t n = buf ? cs_read_at(pdir, "environ", buf, size) : -ENOMEM;
	if (n < 0) {
		p->environ_errno = (int)-n;
		return;
	}
	p->environ_read = true;
	const char *v = cs_environ_get(buf, (size_t)n, "CUDA_VISIBLE_DEVICES");
	if (v) {
		p->visible_set = true;
		cs_sanitize(p->visible_env, sizeof(p->visible_env), v, strlen(v));
	}
	const char *order = cs_environ_get(buf, (size_t)n, "CUDA_DEVICE_ORDER");
	p->pci_order = order && strcmp(order, "PCI_BUS_ID") == 0;
	const char *mps = cs_environ_get(buf, (size_t)n, "CUDA_MPS_PIPE_DIRECTORY");
	if (mps && !p->mps[0]) {
		char dir[120];
		cs_sanitize(dir, sizeof(dir), mps, strlen(mps));
		snprintf(p->mps, sizeof(p->mps), "CUDA_MPS_PIPE_DIRECTORY=%s", dir);
	}
}

static bool all_digits(const char *s)
{
	return *s && strspn(s, "0123456789") == strlen(s);
}

/* The NVML GPU an entry of CUDA_VISIBLE_DEVICES names: an index, or a UUID or
 * a unique prefix of one (CUDA accepts both); -1 when none. */
static int find_gpu(const cs_doctor_report *r, const char *tok)
{
	if (all_digits(tok)) {
		long i;
		return cs_parse_long(tok, 0, INT_MAX, &i) == 0 && (size_t)i < r->ngpus ? (int)i : -1;
	}
	int found = -1;
	for (size_t i = 0; i < r->ngpus && strncmp(tok, "GPU-", 4) == 0; i++)
		if (strncasecmp(r->gpus[i].uuid, tok, strlen(tok)) == 0) {
			if (found >= 0)
				return -1;
			found = (int)i;
		}
	return found;
}

static int add_visible(cs_doctor_proc *p, int index, const char *id)
{
	cs_visible_gpu *v = realloc(p->visible, (p->nvisible + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	p->visible = v;
	v[p->nvisible].index = index;
	snprintf(v[p->nvisible].id, sizeof(v->id), "%s", id);
	p->nvisible++;
	return 0;
}

/* The GPUs the process sees, in CUDA's order; CUDA stops at the first entry
 * that names no device, and so does this. */
static int resolve_visible(const cs_doctor_report *r, cs_doctor_proc *p)
{
	if (!p->visible_set) {
		for (size_t i = 0; i < r->ngpus; i++)
			if (add_visible(p, (int)i, r->gpus[i].uuid) < 0)
				return -ENOMEM;
		return 0;
	}
	char buf[sizeof(p->visible_env)], *save = NULL;
	memcpy(buf, p->visible_env, sizeof(buf));
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		tok += strspn(tok, " ");
		tok[strcspn(tok, " ")] = '\0';
		int i = r->nvml_present ? find_gpu(r, tok) : -1;
		for (size_t k = 0; i >= 0 && k < p->nvisible; k++)
			if (p->visible[k].index == i)
				i = -2; /* listed twice: CUDA stops here too */
		bool mig = strncmp(tok, "MIG-", 4) == 0;
		bool unverified = !r->nvml_present && (all_digits(tok) || strncmp(tok, "GPU-", 4) == 0);
		if (i == -2 || (i < 0 && !mig && !unverified)) {
			snprintf(p->ignored, sizeof(p->ignored), "%.*s", (int)sizeof(p->ignored) - 1,
				 p->visible_env + (tok - buf));
			break;
		}
		if (mig && !p->mig[0])
			snprintf(p->mig, sizeof(p->mig), "CUDA_VISIBLE_DEVICES names MIG instance %.100s", tok);
		if (add_visible(p, i, i >= 0 ? r->gpus[i].uuid : tok) < 0)
			return -ENOMEM;
	}
	return 0;
}

static void check_comm(cs_doctor_report *r, const cs_doctor_proc *p, const char *who)
{
	if (p->comm_libs[0])
		cs_doctor_add(r, "communication", WARN, p->pid,
			      "Checkpoint between steps, with every communicator destroyed (in PyTorch "
			      "torch.distributed.destroy_process_group()), or only single-process jobs.",
			      "%s loads %s: if it has NCCL, NVSHMEM, UCX or MPI communicators open, the "
			      "driver's checkpoint does not support their P2P, IPC or network transfers",
			      who, p->comm_libs);
	else
		cs_doctor_add(r, "communication", PASS, p->pid, NULL, "%s loads no NCCL, NVSHMEM, UCX or MPI library",
			      who);
}

static void check_sharing(cs_doctor_report *r, const cs_doctor_proc *p, const char *who)
{
	char seen[512] = "";
	if (p->mps[0])
		cs_doctor_list_add(seen, sizeof(seen), "MPS (%s)", p->mps);
	if (p->mig[0])
		cs_doctor_list_add(seen, sizeof(seen), "a MIG slice (%s)", p->mig);
	if (p->ipc[0])
		cs_doctor_list_add(seen, sizeof(seen), "CUDA IPC (%s)", p->ipc);
	if (seen[0])
		cs_doctor_add(r, "sharing", WARN, p->pid,
			      "The driver's checkpoint does not support MPS clients, MIG slices or memory "
			      "shared with other processes: run the workload on a whole GPU without MPS.",
			      "%s seems to use %s", who, seen);
	else
		cs_doctor_add(r, "sharing", PASS, p->pid, NULL, "%s shows no sign of MPS, MIG or CUDA IPC", who);
}

static bool mixed_gpus(const cs_doctor_report *r)
{
	for (size_t i = 1; i < r->ngpus; i++)
		if (strcmp(r->gpus[i].name, r->gpus[0].name) != 0)
			return true;
	return false;
}

static void check_visible(cs_doctor_report *r, const cs_doctor_proc *p, const char *who)
{
	char list[768] = "", env[sizeof(p->visible_env) + 32];
	if (!p->environ_read) {
		cs_doctor_add(r, "visible-gpus", WARN, p->pid, "Run cudasnap as root or with CAP_SYS_PTRACE.",
			      "%s: cannot read its environment (%s), so which GPUs it sees is unknown; a "
			      "--device-map at restore must cover every GPU it sees",
			      who, strerror(p->environ_errno));
		return;
	}
	for (size_t i = 0; i < p->nvisible; i++)
		if (p->visible[i].index >= 0)
			cs_doctor_list_add(list, sizeof(list), "%d %s", p->visible[i].index, p->visible[i].id);
		else
			cs_doctor_list_add(list, sizeof(list), "%s", p->visible[i].id);
	if (p->visible_set)
		snprintf(env, sizeof(env), "CUDA_VISIBLE_DEVICES=%s", p->visible_env);
	else
		snprintf(env, sizeof(env), "CUDA_VISIBLE_DEVICES unset");
	if (!p->visible_set && !r->nvml_present) {
		cs_doctor_add(r, "visible-gpus", PASS, p->pid, NULL,
			      "%s sees every GPU (%s; without NVML "
			      "they cannot be listed); a --device-map at restore must map each of them",
			      who, env);
		return;
	}
	bool order = p->visible_set && !p->pci_order && mixed_gpus(r);
	cs_doctor_add(r, "visible-gpus", p->ignored[0] ? WARN : PASS, p->pid,
		      "Fix CUDA_VISIBLE_DEVICES: it names a device that does not exist here.",
		      "%s sees %zu GPU%s (%s)%s%s%s%s%s; a --device-map at restore must map each of them", who,
		      p->nvisible, p->nvisible == 1 ? "" : "s", env, list[0] ? ": " : "", list,
		      order ? " (indices counted in CUDA's fastest-first order may differ from NVML's)" : "",
		      p->ignored[0] ? "; CUDA ignores the entries from " : "", p->ignored);
}

static int inspect_proc(cs_doctor_report *r, const cs_proc *cp, const char *procdir, const char *devdir)
{
	if (cs_grow(&r->procs, &r->pcap, r->nprocs + 1, sizeof(*r->procs)) < 0)
		return -ENOMEM;
	cs_doctor_proc *p = &r->procs[r->nprocs++];
	memset(p, 0, sizeof(*p));
	p->pid = cp->pid;
	p->uid = cp->uid;
	memcpy(p->comm, cp->comm, sizeof(p->comm));
	char who[96];
	_cleanup_close_ int pdir = cs_proc_open(procdir, cp->pid);
	if (pdir >= 0) {
		read_environ(pdir, p);
		scan_maps(pdir, p, devdir);
		scan_fds(pdir, p, devdir);
	} else {
		p->environ_errno = -pdir;
	}
	if (resolve_visible(r, p) < 0)
		return -ENOMEM;
	snprintf(who, sizeof(who), "pid %d (%s)", (int)p->pid, p->comm);
	check_comm(r, p, who);
	check_sharing(r, p, who);
	check_visible(r, p, who);
	return 0;
}

static void check_unreadable(cs_doctor_report *r, const cs_ptable *t)
{
	char list[512] = "";
	for (size_t i = 0; i < t->nunreadable && i < 8; i++)
		cs_doctor_list_add(list, sizeof(list), "%d: %s", (int)t->unreadable[i].pid,
				   strerror(t->unreadable[i].errnum));
	cs_doctor_add(r, "unreadable", WARN, 0, r->env.cap_sys_ptrace ? CS_FIX_UNREADABLE_TRACER : CS_FIX_UNREADABLE,
		      "%zu process%s could not be read (%s%s), so CUDA processes may be missing above", t->nunreadable,
		      t->nunreadable == 1 ? "" : "es", list, t->nunreadable > 8 ? ", ..." : "");
}

/* Processes the driver cannot checkpoint but that hold GPU device files. */
static void check_holders(cs_doctor_report *r, const cs_ptable *t)
{
	char list[768] = "";
	size_t n = 0;
	for (size_t i = 0; i < t->n; i++) {
		const cs_proc *p = &t->procs[i];
		/* an unknown one (no driver to ask, or it did not answer) is
		 * named only when it holds device files, as ps shows them */
		if (p->cls != CS_CLASS_DEVICE_HOLDER && !(p->cls == CS_CLASS_UNKNOWN && p->nrefs > 0))
			continue;
		n++;
		cs_doctor_list_add(list, sizeof(list), "%d (%s, %s)", (int)p->pid, p->comm, cs_class_name(p->cls));
	}
	if (n)
		cs_doctor_add(r, "device-holders", WARN, 0,
			      "End them before a checkpoint, or have each initialize CUDA itself: a process "
			      "forked after CUDA init keeps device files the driver cannot release, and a "
			      "sandbox or CRIU snapshot of it fails. 'cudasnap ps' shows them. Workers (e.g. "
			      "PyTorch DataLoader's) made with multiprocessing_context=\"spawn\" or \"forkserver\", "
			      "or started before CUDA is initialized, can be checkpointed.",
			      "%zu process%s hold%s GPU device files the driver cannot checkpoint: %s", n,
			      n == 1 ? "" : "es", n == 1 ? "s" : "", list);
}

static void check_mps_daemon(cs_doctor_report *r, const cs_ptable *t, const char *root)
{
	char sig[160] = "";
	for (size_t i = 0; i < t->n && !sig[0]; i++)
		if (strncmp(t->procs[i].comm, "nvidia-cuda-mps", 15) == 0)
			snprintf(sig, sizeof(sig), "pid %d (%s) is an MPS daemon", (int)t->procs[i].pid,
				 t->procs[i].comm);
	_cleanup_close_ int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!sig[0] && rootfd >= 0 && faccessat(rootfd, "tmp/nvidia-mps/control", F_OK, 0) == 0)
		snprintf(sig, sizeof(sig), "/tmp/nvidia-mps/control exists (an MPS control daemon's pipe)");
	if (sig[0])
		cs_doctor_add(r, "mps", WARN, 0,
			      "Stop the MPS daemon (echo quit | nvidia-cuda-mps-control) before starting the "
			      "workload: CUDA programs connect to it by themselves, and MPS clients cannot be "
			      "checkpointed.",
			      "%s", sig);
}

#define GIB (1024.0 * 1024 * 1024)

/* Processes that an operation which died in the middle (a CRIU killed by
 * its engine, a cudasnap killed by SIGKILL) left locked or checkpointed. */
static void check_left_behind(cs_doctor_report *r, const cs_ptable *t)
{
	_cleanup_close_ int statefd = open(cs_state_dir(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_free_ cs_left_behind *b = NULL;
	size_t n = 0;
	cs_claims_left_behind(statefd, t, false, &b, &n);
	for (size_t i = 0; i < n; i++) {
		char line[1024], fix[CS_LEFT_FIX_MAX];
		cs_park_left_say(&b[i], t, line, sizeof(line), fix, sizeof(fix));
		cs_doctor_add(r, "left-behind", WARN, b[i].pid, fix[0] ? fix : NULL, "%s", line);
	}
}

/* What a default checkpoint would act on now: running CUDA processes that
 * are neither monitors nor cudasnap itself. */
static bool checkpointable(const cs_proc *p)
{
	return p->cls == CS_CLASS_CUDA && !p->nvml_only && !p->tool && !p->halt && p->state == CS_STATE_RUNNING;
}

static void memory_line(cs_doctor_report *r, const cs_fit *f)
{
	char who[96], room[PATH_MAX + 128] = "no memory cgroup limit";
	snprintf(who, sizeof(who), "pid %d (%s)", (int)f->pid, f->comm);
	long long left = -1, limit = -1;
	const char *which = NULL;
	const cs_memcg_node *n = cs_fit_tightest(f, &left, &limit, &which);
	if (n)
		snprintf(room, sizeof(room), "cgroup %.*s has %.2f GiB left under its %s of %.2f GiB", (int)n->len,
			 f->cg.path, (double)left / GIB, which, (double)limit / GIB);
	else if (f->room == CS_ROOM_UNKNOWN)
		snprintf(room, sizeof(room), "no limit of its memory cgroups can be read here");
	if (f->refused || (f->known && f->room == CS_ROOM_UNKNOWN))
		cs_doctor_add(r, "host-memory", FAIL, f->pid, f->fix, "%s: its checkpoint %s", who, f->why);
	else if (!f->known)
		cs_doctor_add(r, "host-memory", WARN, f->pid,
			      "Run cudasnap where NVML answers (nvidia-smi works), or check the cgroup's room by hand "
			      "before a checkpoint.",
			      "%s: its GPU memory cannot be known here (no NVML figure for it or its GPUs), so whether "
			      "its checkpoint fits in host memory is not known; %s",
			      who, room);
	else
		cs_doctor_add(r, "host-memory", f->room == CS_ROOM_PART ? WARN : PASS, f->pid,
			      f->room == CS_ROOM_PART ?
				      "Run cudasnap in the host's cgroup namespace to read the cgroups "
				      "above as well." :
				      NULL,
			      "%s: its checkpoint needs %s%.2f GiB of host memory (%.2f GiB of GPU memory); %s%s%s",
			      who, f->known == CS_GPU_AT_MOST ? "up to " : "", (double)f->need / GIB,
			      (double)f->gpu / GIB, room, f->room == CS_ROOM_PART ? "; not read: " : "",
			      f->room == CS_ROOM_PART ? f->cg.problem : "");
}

/* Each process against its own cgroup chain, and all of them together
 * (they are checkpointed together) against their shared cgroups and
 * MemAvailable: lib/room/capacity.c, as a checkpoint would judge them. */
static int check_memory(cs_doctor_report *r, const cs_ptable *t)
{
	size_t n = 0;
	for (size_t i = 0; i < t->n; i++)
		n += checkpointable(&t->procs[i]);
	_cleanup_free_ cs_fit *f = calloc(n + 1, sizeof(*f));
	_cleanup_free_ const cs_proc **procs = calloc(n + 1, sizeof(const cs_proc *));
	if (!f || !procs)
		return -ENOMEM;
	for (size_t i = 0, k = 0; i < t->n; i++) {
		const cs_proc *p = &t->procs[i];
		if (!checkpointable(p))
			continue;
		f[k] = (cs_fit){ .pid = p->pid };
		memcpy(f[k].comm, p->comm, sizeof(f[k].comm));
		procs[k++] = p;
	}
	cs_fit_env env;
	cs_fit_env_read(&env, r->env.pid_ns == CS_PIDNS_HOST);
	env.mem_available = r->mem.mem_available; /* the doctor's root (CUDASNAP_ROOT) */
	cs_fit_measure(f, n, procs, &env);
	size_t unknown, refused = cs_fit_judge(f, n, &env, &unknown);
	for (size_t i = 0; i < n; i++)
		memory_line(r, &f[i]);
	unsigned long long total = 0;
	for (size_t i = 0; i < n; i++)
		total += f[i].known ? f[i].need : 0;
	char avail[64] = "unknown";
	if (r->mem.mem_available >= 0)
		snprintf(avail, sizeof(avail), "%.2f GiB", (double)r->mem.mem_available / GIB);
	cs_doctor_add(r, "host-memory",
		      refused         ? FAIL :
			      unknown ? WARN :
					PASS,
		      0, refused ? "See the host-memory check of each process named." : NULL,
		      "a checkpoint of the %zu CUDA process%s here would need %.2f GiB of host memory%s; MemAvailable "
		      "%s%s",
		      n, n == 1 ? "" : "es", (double)total / GIB, unknown ? " (some unknown)" : "", avail,
		      refused ? "; it would not fit, or cannot be judged here" : "");
	return 0;
}

int cs_doctor_check_processes(cs_doctor_report *r, cs_driver *d, const cs_doctor_opts *o, const char *root)
{
	_cleanup_(cs_ptable_freep) cs_ptable t = { 0 };
	cs_error e = { 0 };
	const cs_scan_opts *so = o ? o->scan : NULL;
	/* A process another operation holds is not asked: the driver would make
	 * doctor wait behind that operation's calls. */
	cs_scan_opts skip = so ? *so : (cs_scan_opts){ 0 };
	skip.skip_busy = true;
	if (cs_discover(&skip, d, &t, &e) < 0) {
		check_privileges(r, NULL);
		cs_doctor_add(r, "processes", FAIL, 0, e.hint, "cannot list processes: %s", e.message);
		return e.status == CS_ESYS && strstr(e.message, "out of memory") ? -ENOMEM : 0;
	}
	check_privileges(r, &t);
	char list[768] = "";
	size_t n = 0;
	for (size_t i = 0; i < t.n; i++)
		if (t.procs[i].cls == CS_CLASS_CUDA) {
			n++;
			cs_doctor_list_add(list, sizeof(list), "%d (%s)", (int)t.procs[i].pid, t.procs[i].comm);
		}
	cs_doctor_add(r, "processes", PASS, 0, NULL, "%zu CUDA process%s%s%s (%zu processes scanned)", n,
		      n == 1 ? "" : "es", n ? ": " : "", list, t.scanned);
	if (t.nunreadable)
		check_unreadable(r, &t);
	check_holders(r, &t);
	check_mps_daemon(r, &t, root);
	const char *procdir = so && so->proc_dir ? so->proc_dir : cs_proc_dir();
	const char *devdir = so && so->dev_dir ? so->dev_dir : cs_dev_dir();
	for (size_t i = 0; i < t.n; i++)
		if (t.procs[i].cls == CS_CLASS_CUDA && inspect_proc(r, &t.procs[i], procdir, devdir) < 0)
			return -ENOMEM;
	check_left_behind(r, &t);
	return check_memory(r, &t);
}
