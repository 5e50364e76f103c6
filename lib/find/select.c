#include "select.h"
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define HINT_HOST_PID \
	"PIDs from nvidia-smi or NVML are host PIDs, which mean nothing inside a " \
	"container or sandbox. Run 'cudasnap ps' here to see the PIDs of this namespace, or leave out " \
	"--pid to act on every CUDA process."

bool cs_selection_empty(const cs_selection *sel)
{
	return !sel || (sel->npids == 0 && sel->ntrees == 0 && !sel->cgroup);
}

void cs_visible_devices(pid_t pid, char *buf, size_t n)
{
	char path[64];
	buf[0] = '\0';
	snprintf(path, sizeof(path), "%d/environ", (int)pid);
	_cleanup_close_ int dfd = open(cs_proc_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	enum { MAX = 1 << 20 };
	_cleanup_free_ char *env = malloc(MAX);
	ssize_t len;
	if (dfd < 0 || !env || (len = cs_read_at(dfd, path, env, MAX)) <= 0)
		return;
	const char *v = cs_environ_get(env, (size_t)len, "CUDA_VISIBLE_DEVICES");
	if (v)
		cs_sanitize(buf, n, v, strnlen(v, (size_t)len - (size_t)(v - env)));
}

/* Whether path (plen bytes) is want or a cgroup below it. */
static bool path_under(const char *path, size_t plen, const char *want, size_t wlen)
{
	if (wlen == 1 && want[0] == '/')
		return true;
	return plen >= wlen && memcmp(path, want, wlen) == 0 && (plen == wlen || path[wlen] == '/');
}

/* Whether dir, the first directory of a path under /sys/fs/cgroup, is where
 * a line's hierarchy is mounted: "cpu,cpuacct" (or its "cpu" symlink) for
 * the controllers "cpu,cpuacct", "systemd" for "name=systemd", "unified"
 * for the v2 hierarchy of a hybrid setup. */
static bool names_hierarchy(const char *dir, size_t dlen, const char *ctl, size_t clen)
{
	if (clen == 0)
		return dlen == 7 && memcmp(dir, "unified", 7) == 0;
	if (dlen == clen && memcmp(dir, ctl, clen) == 0)
		return true;
	for (const char *c = ctl, *end = ctl + clen;;) {
		const char *comma = memchr(c, ',', (size_t)(end - c));
		const char *stop = comma ? comma : end;
		if ((size_t)(stop - c) > 5 && memcmp(c, "name=", 5) == 0)
			c += 5;
		if ((size_t)(stop - c) == dlen && memcmp(c, dir, dlen) == 0)
			return true;
		if (!comma)
			return false;
		c = comma + 1;
	}
}

/* One line, "hierarchy:controllers:path", without its newline. */
static bool cgroup_line_matches(const char *line, size_t len, const char *want, size_t wlen)
{
	const char *c1 = memchr(line, ':', len);
	const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
	if (!c2)
		return false;
	const char *path = c2 + 1;
	size_t plen = len - (size_t)(path - line);
	if (path_under(path, plen, want, wlen))
		return true;
	/* Under /sys/fs/cgroup a v1 hierarchy sits below its controllers'
	 * directory, which /proc/PID/cgroup does not show. Only that line's
	 * own directory may be dropped: "/cpu/a" must not select "/a" of
	 * another hierarchy, nor "/x/a" the v2 cgroup "/a". */
	const char *dir = want + 1, *slash = memchr(dir, '/', wlen - 1);
	if (!slash)
		return false;
	return names_hierarchy(dir, (size_t)(slash - dir), c1 + 1, (size_t)(c2 - c1 - 1)) &&
		path_under(path, plen, slash, wlen - (size_t)(slash - want));
}

bool cs_cgroup_matches(const char *text, size_t len, const char *cg)
{
	/* Accept the path as /proc/PID/cgroup shows it, or under /sys/fs/cgroup. */
	const char *want = cg;
	if (strncmp(want, "/sys/fs/cgroup", 14) == 0 && (want[14] == '/' || want[14] == '\0'))
		want = want[14] ? want + 14 : "/";
	size_t wlen = strlen(want);
	while (wlen > 1 && want[wlen - 1] == '/')
		wlen--;
	if (wlen == 0 || want[0] != '/')
		return false;
	for (size_t i = 0; i < len;) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t l = nl ? (size_t)(nl - (text + i)) : len - i;
		if (cgroup_line_matches(text + i, l, want, wlen))
			return true;
		i += l + 1;
	}
	return false;
}

static bool in_cgroup(pid_t pid, const char *cg)
{
	char path[64], buf[8192];
	snprintf(path, sizeof(path), "%d/cgroup", (int)pid);
	_cleanup_close_ int dfd = open(cs_proc_dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ssize_t n = dfd < 0 ? -1 : cs_read_at(dfd, path, buf, sizeof(buf));
	return n > 0 && cs_cgroup_matches(buf, (size_t)n, cg);
}

/* Whether the selection takes in pid: named by --pid (with its
 * descendants when descendants is set), in a --tree, in the --cgroup. */
static bool takes_in(const cs_ptable *t, const cs_selection *sel, pid_t pid, bool descendants)
{
	if (cs_selection_empty(sel))
		return true;
	for (size_t i = 0; i < sel->npids; i++) {
		pid_t tg = sel->pids[i];
		cs_tid_to_tgid(cs_proc_dir(), sel->pids[i], &tg);
		if (tg == pid || (descendants && cs_ptable_descends(t, pid, tg)))
			return true;
	}
	for (size_t i = 0; i < sel->ntrees; i++)
		if (cs_ptable_descends(t, pid, sel->trees[i]))
			return true;
	return sel->cgroup && in_cgroup(pid, sel->cgroup);
}

bool cs_selection_names(const cs_ptable *t, const cs_selection *sel, pid_t pid)
{
	return takes_in(t, sel, pid, false);
}

static bool named_by_pid(const cs_selection *sel, pid_t pid)
{
	for (size_t i = 0; sel && i < sel->npids; i++) {
		pid_t tg = sel->pids[i];
		cs_tid_to_tgid(cs_proc_dir(), sel->pids[i], &tg);
		if (tg == pid)
			return true;
	}
	return false;
}

bool cs_selection_takes(const cs_ptable *t, const cs_selection *sel, const cs_proc *p, bool monitors)
{
	if (named_by_pid(sel, p->pid))
		return true;
	if (p->tool || (p->nvml_only && !monitors))
		return false;
	return (p->nrefs || p->maps_libcuda || p->maps_nvml) && cs_selection_names(t, sel, p->pid);
}

/* Whether a cgroup of that path exists in some hierarchy this process sees:
 * the v2 one mounted on /sys/fs/cgroup, or any hierarchy mounted below it. */
static bool cgroup_exists(const char *cg)
{
	struct stat st;
	char path[PATH_MAX];
	if (strncmp(cg, "/sys/fs/cgroup", 14) == 0 && (cg[14] == '/' || cg[14] == '\0'))
		return stat(cg, &st) == 0 && S_ISDIR(st.st_mode);
	if (snprintf(path, sizeof(path), "/sys/fs/cgroup%s", cg) < (int)sizeof(path) && stat(path, &st) == 0 &&
	    S_ISDIR(st.st_mode))
		return true;
	_cleanup_closedir_ DIR *d = opendir("/sys/fs/cgroup");
	for (struct dirent *de; d && (de = readdir(d));) {
		if (de->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "/sys/fs/cgroup/%s%s", de->d_name, cg) < (int)sizeof(path) &&
		    stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			return true;
	}
	return false;
}

static int check_visible(pid_t pid, const char *opt, pid_t *tgid, cs_error *err)
{
	if (cs_tid_to_tgid(cs_proc_dir(), pid, tgid) < 0)
		return cs_error_set(err, CS_EUSAGE, HINT_HOST_PID, "%s %d: no such process in this PID namespace", opt,
				    (int)pid);
	return 0;
}

int cs_selection_check(const cs_selection *sel, cs_error *err)
{
	/* a PID that is not here (a host PID from nvidia-smi) is an argument's
	 * error, said before anything else is done */
	for (size_t i = 0; sel && i < sel->npids + sel->ntrees; i++) {
		pid_t tg;
		bool tree = i >= sel->npids;
		int r = check_visible(tree ? sel->trees[i - sel->npids] : sel->pids[i], tree ? "--tree" : "--pid", &tg,
				      err);
		if (r < 0)
			return r;
	}
	const char *cg = sel ? sel->cgroup : NULL;
	if (!cg)
		return 0;
	if (cg[0] != '/')
		return cs_error_set(err, CS_EUSAGE, NULL, "--cgroup %s: not an absolute cgroup path", cg);
	for (const char *c = cg; (c = strstr(c, "/..")); c += 3)
		if (c[3] == '/' || c[3] == '\0')
			return cs_error_set(err, CS_EUSAGE,
					    "Give the cgroup's path itself, as /proc/PID/cgroup shows it.",
					    "--cgroup %s: '..' is not allowed in a cgroup path", cg);
	if (!cgroup_exists(cg))
		return cs_error_set(err, CS_EUSAGE,
				    "Give a path as /proc/PID/cgroup shows it (cat /proc/PID/cgroup), or one under "
				    "/sys/fs/cgroup; a typo would otherwise select nothing.",
				    "--cgroup %s: no such cgroup (looked under /sys/fs/cgroup and each hierarchy "
				    "mounted there)",
				    cg);
	return 0;
}

bool cs_selection_covers(const cs_ptable *t, const cs_selection *sel, pid_t pid)
{
	return takes_in(t, sel, pid, true);
}

static const char *why_not_cuda(const cs_proc *p)
{
	if (!p)
		return "it holds no GPU device file and has not loaded the CUDA driver";
	if (p->cls == CS_CLASS_DEVICE_HOLDER)
		return "it holds GPU device files but the driver does not know it (forked from a CUDA process "
		       "without exec, or it opened the device files itself)";
	return "the driver gave no state for it (see 'cudasnap ps')";
}

static int explicit_pids(const cs_ptable *t, const cs_selection *sel, bool *want, cs_error *err)
{
	for (size_t i = 0; i < sel->npids; i++) {
		pid_t tg;
		int r = check_visible(sel->pids[i], "--pid", &tg, err);
		if (r < 0)
			return r;
		const cs_proc *p = cs_ptable_find(t, tg);
		for (size_t k = 0; !p && k < t->nunreadable; k++)
			if (t->unreadable[k].pid == tg)
				return cs_error_errno(err, CS_EENV, t->unreadable[k].errnum,
						      "Run cudasnap as root, or "
						      "give it CAP_SYS_PTRACE.",
						      "--pid %d: cannot read the process", (int)sel->pids[i]);
		if (p && p->tool)
			return cs_error_set(err, CS_EUSAGE,
					    "cudasnap and cuda-checkpoint processes are tools, never targets.",
					    "--pid %d is %s itself, not a workload", (int)sel->pids[i], p->comm);
		if (!p || p->cls != CS_CLASS_CUDA)
			return cs_error_set(err, CS_EUSAGE,
					    "Only processes listed as 'cuda' by 'cudasnap ps' can "
					    "be checkpointed.",
					    "--pid %d is not a CUDA process: %s", (int)sel->pids[i], why_not_cuda(p));
		want[p - t->procs] = true;
	}
	for (size_t i = 0; i < sel->ntrees; i++) {
		pid_t tg;
		int r = check_visible(sel->trees[i], "--tree", &tg, err);
		if (r < 0)
			return r;
		sel->trees[i] = tg;
	}
	return 0;
}

/* Its pid inside its own PID namespace: what survives a restore into a
 * new one. */
static pid_t own_pid(pid_t pid)
{
	_cleanup_close_ int pdir = cs_proc_open(cs_proc_dir(), pid);
	cs_proc_ident id = { .nspid = pid };
	if (pdir >= 0)
		cs_proc_read_ident(pdir, pid, &id);
	return id.nspid;
}

int cs_select(const cs_ptable *t, const cs_selection *sel, bool monitors, cs_target **out, size_t *n, cs_error *err)
{
	*out = NULL;
	*n = 0;
	_cleanup_free_ bool *want = calloc(t->n ? t->n : 1, sizeof(bool));
	if (!want)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	int r = cs_selection_empty(sel) ? 0 : explicit_pids(t, sel, want, err);
	if (r < 0)
		return r;
	size_t m = 0;
	for (size_t i = 0; i < t->n; i++) {
		const cs_proc *p = &t->procs[i];
		if (p->cls != CS_CLASS_CUDA)
			continue;
		if (!want[i] && !p->tool && (monitors || !p->nvml_only)) {
			want[i] = cs_selection_empty(sel);
			for (size_t k = 0; k < (sel ? sel->ntrees : 0) && !want[i]; k++)
				want[i] = cs_ptable_descends(t, p->pid, sel->trees[k]);
			if (!want[i] && sel && sel->cgroup)
				want[i] = in_cgroup(p->pid, sel->cgroup);
		}
		m += want[i];
	}
	_cleanup_free_ cs_target *v = calloc(m ? m : 1, sizeof(*v));
	if (!v)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < t->n; i++) {
		if (!want[i])
			continue;
		const cs_proc *p = &t->procs[i];
		v[k] = (cs_target){ .pid = p->pid,
				    .start_time = p->start_time,
				    .order = (int)k,
				    .state = p->state,
				    .initial_state = p->state,
				    .restore_tid = p->restore_tid };
		memcpy(v[k].comm, p->comm, sizeof(v[k].comm));
		cs_visible_devices(p->pid, v[k].visible_devices, sizeof(v[k].visible_devices));
		v[k].nspid = own_pid(p->pid);
		k++;
	}
	*out = TAKE_PTR(v);
	*n = m;
	return 0;
}
