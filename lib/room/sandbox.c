/* Detection of gVisor, containers and PID namespaces, and the host memory
 * left, from files under a root directory (/ in real use).
 *
 * gVisor (runsc) implements its own /proc, so its signals are files no Linux
 * kernel has, or text it never changes:
 *   - /proc/sentry-meminfo exists (only the gVisor Sentry's procfs has it);
 *   - the kernel version is "#1 SMP Sun Jan 10 15:06:54 PST 2016", gVisor's
 *     fixed build stamp in every release (release 4.4.0, later 4.19.0-gvisor);
 *   - the kernel release contains "gvisor".
 * A container shows itself by /.dockerenv, /run/.containerenv,
 * /run/systemd/container, container= in the environment of this process or
 * of PID 1, a Kubernetes service variable, a cgroup path of a container
 * runtime, or a root filesystem from a container runtime's storage. None is
 * certain; each is what the runtimes themselves leave for this purpose. */
#include "sandbox.h"
#include "env.h"
#include "memcg.h"
#include "proc.h"
#include "util.h"

#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#define GVISOR_STAMP "#1 SMP Sun Jan 10 15:06:54 PST 2016"
#define CAP_SYS_PTRACE_BIT 19

const char *cs_sandbox_root(void)
{
	const char *e = cs_env("CUDASNAP_ROOT");
	return e ? e : "/";
}

const char *cs_pidns_name(int ns)
{
	switch (ns) {
	case CS_PIDNS_HOST: return "host";
	case CS_PIDNS_CHILD: return "child";
	default: return "unknown";
	}
}

static bool real_root(const char *root)
{
	return strcmp(root, "/") == 0;
}

/* Reads root/rel (rel without a leading slash) into buf; length or -errno. */
static ssize_t read_rel(int rootfd, const char *rel, char *buf, size_t size)
{
	if (rootfd < 0)
		return -EBADF;
	return cs_read_at(rootfd, rel, buf, size);
}

static bool exists_rel(int rootfd, const char *rel)
{
	return rootfd >= 0 && faccessat(rootfd, rel, F_OK, 0) == 0;
}

static void set_signal(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_signal(char *dst, const char *fmt, ...)
{
	char s[CS_SIGNAL_SIZE];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s, sizeof(s), fmt, ap);
	va_end(ap);
	cs_sanitize(dst, CS_SIGNAL_SIZE, s, strlen(s));
}

static void read_kernel(int rootfd, const char *root, char *release, size_t rsize, char *version, size_t vsize)
{
	char buf[512];
	release[0] = version[0] = '\0';
	if (read_rel(rootfd, "proc/sys/kernel/osrelease", buf, sizeof(buf)) > 0)
		snprintf(release, rsize, "%.*s", (int)strcspn(buf, "\n"), buf);
	if (read_rel(rootfd, "proc/version", buf, sizeof(buf)) > 0)
		snprintf(version, vsize, "%.*s", (int)strcspn(buf, "\n"), buf);
	struct utsname u;
	/* Without procfs only uname(2) is left, and it only speaks for the real root. */
	if (real_root(root) && (!release[0] || !version[0]) && uname(&u) == 0) {
		if (!release[0])
			snprintf(release, rsize, "%.*s", (int)rsize - 1, u.release);
		if (!version[0])
			snprintf(version, vsize, "%.*s", (int)vsize - 1, u.version);
	}
}

static void detect_gvisor(int rootfd, const char *root, cs_sandbox *s)
{
	char version[512];
	read_kernel(rootfd, root, s->kernel_release, sizeof(s->kernel_release), version, sizeof(version));
	if (exists_rel(rootfd, "proc/sentry-meminfo"))
		set_signal(s->gvisor_signal, "/proc/sentry-meminfo exists (only gVisor's procfs has it)");
	else if (strstr(version, GVISOR_STAMP))
		set_signal(s->gvisor_signal, "kernel version '%s' is gVisor's fixed build stamp", GVISOR_STAMP);
	else if (strstr(s->kernel_release, "gvisor"))
		set_signal(s->gvisor_signal, "kernel release '%s'", s->kernel_release);
	s->gvisor = s->gvisor_signal[0] != '\0';
}

/* Value of name in a process's environ file under root, copied to val. */
static bool environ_value(int rootfd, const char *rel, const char *name, char *val, size_t vsize)
{
	size_t size = (size_t)256 * 1024;
	_cleanup_free_ char *buf = malloc(size);
	if (!buf)
		return false;
	ssize_t n = read_rel(rootfd, rel, buf, size);
	if (n <= 0)
		return false;
	const char *v = cs_environ_get(buf, (size_t)n, name);
	if (!v)
		return false;
	cs_sanitize(val, vsize, v, strnlen(v, (size_t)n - (size_t)(v - buf)));
	return true;
}

/* Whether a cgroup path has a segment named the way container runtimes name
 * their containers' cgroups (docker-ID.scope, /docker/ID, kubepods...,
 * cri-containerd-ID.scope, libpod-ID.scope, crio-ID.scope, /lxc/NAME). The
 * runtimes' own daemons (docker.service, containerd.service) do not count. */
static bool runtime_cgroup(const char *path)
{
	static const char *const marks[] = {
		"docker", "kubepods", "containerd", "libpod", "podman", "crio", "lxc", "garden",
	};
	for (const char *seg = path; *seg;) {
		size_t len = strcspn(seg, "/");
		bool service = len >= 8 && strncmp(seg + len - 8, ".service", 8) == 0;
		for (size_t i = 0; i < CS_ARRAY_SIZE(marks) && !service; i++)
			if (memmem(seg, len, marks[i], strlen(marks[i])))
				return true;
		seg += len + (seg[len] == '/');
	}
	return false;
}

static bool cgroup_signal(int rootfd, cs_sandbox *s)
{
	char buf[8192];
	if (read_rel(rootfd, "proc/self/cgroup", buf, sizeof(buf)) <= 0)
		return false;
	char *save = NULL;
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *path = strchr(line, ':');
		path = path ? strchr(path + 1, ':') : NULL;
		if (path && runtime_cgroup(path + 1)) {
			set_signal(s->container_signal, "cgroup %s", path + 1);
			return true;
		}
	}
	return false;
}

/* The root mount's source in a runtime's image store: overlay upperdir=... */
static bool rootfs_signal(int rootfd, cs_sandbox *s)
{
	static const char *const stores[] = {
		"/var/lib/docker/",
		"io.containerd.",
		"/containers/storage/",
		"/var/lib/kubelet/",
	};
	if (rootfd < 0)
		return false;
	_cleanup_fclose_ FILE *f = cs_fopen_at(rootfd, "proc/self/mountinfo");
	if (!f)
		return false;
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, f) > 0) {
		/* id parent major:minor root mountpoint ... */
		char mnt[8];
		if (sscanf(line, "%*s %*s %*s %*s %7s", mnt) != 1 || strcmp(mnt, "/") != 0)
			continue;
		for (size_t i = 0; i < CS_ARRAY_SIZE(stores); i++)
			if (strstr(line, stores[i])) {
				set_signal(s->container_signal, "root filesystem from %s", stores[i]);
				return true;
			}
	}
	return false;
}

static void detect_container(int rootfd, cs_sandbox *s)
{
	char val[96];
	if (s->gvisor)
		set_signal(s->container_signal, "gVisor runs every sandbox as an OCI container");
	else if (exists_rel(rootfd, ".dockerenv"))
		set_signal(s->container_signal, "/.dockerenv (Docker)");
	else if (exists_rel(rootfd, "run/.containerenv"))
		set_signal(s->container_signal, "/run/.containerenv (Podman)");
	else if (read_rel(rootfd, "run/systemd/container", val, sizeof(val)) > 0) {
		val[strcspn(val, "\n")] = '\0';
		set_signal(s->container_signal, "/run/systemd/container says '%s'", val);
	} else if (environ_value(rootfd, "proc/self/environ", "container", val, sizeof(val)) ||
		   environ_value(rootfd, "proc/1/environ", "container", val, sizeof(val))) {
		set_signal(s->container_signal, "container=%s in the environment", val);
	} else if (environ_value(rootfd, "proc/self/environ", "KUBERNETES_SERVICE_HOST", val, sizeof(val)))
		set_signal(s->container_signal, "KUBERNETES_SERVICE_HOST is set (a Kubernetes pod)");
	else if (!cgroup_signal(rootfd, s))
		rootfs_signal(rootfd, s);
	s->container = s->container_signal[0] != '\0';
}

/* What follows "key:" on a line of a status file, or NULL. */
static const char *status_line(const char *status, const char *key)
{
	size_t klen = strlen(key);
	for (const char *l = status; l && *l;) {
		if (strncmp(l, key, klen) == 0 && l[klen] == ':')
			return l + klen + 1;
		l = strchr(l, '\n');
		if (l)
			l++;
	}
	return NULL;
}

/* Entries on the NSpid line, 0 when absent. */
static int nspid_depth(const char *status)
{
	const char *p = status_line(status, "NSpid");
	int n = 0;
	while (p && *p && *p != '\n') {
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p < '0' || *p > '9')
			break;
		n++;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	return n;
}

/* Kernel threads exist only in the initial PID namespace, and kthreadd is PID 2. */
static bool kthreadd_visible(int rootfd)
{
	char buf[1024];
	ssize_t n = read_rel(rootfd, "proc/2/stat", buf, sizeof(buf));
	cs_stat st;
	return n > 0 && cs_parse_stat(buf, (size_t)n, &st) == 0 && st.ppid == 0 && strcmp(st.comm, "kthreadd") == 0;
}

/* "pid:[4026531836]" -> 4026531836 */
static bool parse_ns_link(const char *link, unsigned long *ino)
{
	if (strncmp(link, "pid:[", 5) != 0)
		return false;
	const char *p = link + 5;
	size_t digits = strspn(p, "0123456789");
	if (digits == 0 || digits > 19 || strcmp(p + digits, "]") != 0)
		return false;
	*ino = strtoul(p, NULL, 10);
	return true;
}

static void detect_pidns(int rootfd, const char *status, cs_sandbox *s)
{
	char link[64];
	unsigned long ino;
	s->nspid_depth = status ? nspid_depth(status) : 0;
	ssize_t n = rootfd < 0 ? -1 : readlinkat(rootfd, "proc/self/ns/pid", link, sizeof(link) - 1);
	if (n > 0)
		link[n] = '\0';
	if (s->gvisor) {
		s->pid_ns = CS_PIDNS_CHILD;
		set_signal(s->pid_ns_signal, "gVisor: the sandbox's PIDs are never the host's");
	} else if (n > 0 && parse_ns_link(link, &ino)) {
		s->pid_ns = ino == CS_PIDNS_INIT_INO ? CS_PIDNS_HOST : CS_PIDNS_CHILD;
		set_signal(s->pid_ns_signal, "%s is %sthe kernel's initial PID namespace", link,
			   ino == CS_PIDNS_INIT_INO ? "" : "not ");
	} else if (s->nspid_depth > 1) {
		s->pid_ns = CS_PIDNS_CHILD;
		set_signal(s->pid_ns_signal, "NSpid lists %d nested namespaces", s->nspid_depth);
	} else if (kthreadd_visible(rootfd)) {
		s->pid_ns = CS_PIDNS_HOST;
		set_signal(s->pid_ns_signal, "kernel threads are visible (kthreadd is PID 2)");
	} else {
		s->pid_ns = CS_PIDNS_UNKNOWN;
		set_signal(s->pid_ns_signal, "/proc/self/ns/pid is unreadable and no other signal decides");
	}
}

static void detect_privileges(const char *status, cs_sandbox *s)
{
	unsigned long long v;
	s->euid =
		status && cs_parse_status_nth(status, "Uid", 1, 10, &v) == 0 && v <= UINT32_MAX ? (uid_t)v : geteuid();
	s->caps_known = status && cs_parse_status_nth(status, "CapEff", 0, 16, &v) == 0;
	s->cap_sys_ptrace = s->caps_known && (v >> CAP_SYS_PTRACE_BIT & 1);
}

void cs_sandbox_detect(const char *root, cs_sandbox *out)
{
	memset(out, 0, sizeof(*out));
	if (!root)
		root = cs_sandbox_root();
	_cleanup_close_ int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char status[8192];
	bool have_status = read_rel(rootfd, "proc/self/status", status, sizeof(status)) > 0;
	detect_gvisor(rootfd, root, out);
	detect_container(rootfd, out);
	detect_pidns(rootfd, have_status ? status : NULL, out);
	detect_privileges(have_status ? status : NULL, out);
}

bool cs_sandbox_may_trace_all(const cs_sandbox *s)
{
	return s->cap_sys_ptrace || (s->euid == 0 && !s->caps_known);
}

void cs_host_memory(const char *root, cs_hostmem *out)
{
	memset(out, 0, sizeof(*out));
	if (!root)
		root = cs_sandbox_root();
	char procdir[PATH_MAX];
	if (snprintf(procdir, sizeof(procdir), "%s/proc", real_root(root) ? "" : root) >= (int)sizeof(procdir))
		return;
	out->mem_available = cs_meminfo_available(procdir);
}
