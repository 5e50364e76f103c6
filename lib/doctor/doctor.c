/* The checks of cudasnap doctor. Each looks at one thing that decides whether
 * a checkpoint or a restore can work here, and says what to do when not. */
#include "doctor.h"
#include "gpuledger.h"
#include "proc.h"
#include "util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { PASS = CS_CHECK_PASS, WARN = CS_CHECK_WARN, FAIL = CS_CHECK_FAIL };

/* ---- driver and NVML -------------------------------------------------- */

/* The file the dynamic linker actually chose for name. */
static void loaded_path(const char *name, char *out, size_t size)
{
	snprintf(out, size, "%s", name);
	void *h = dlopen(name, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
	if (!h)
		return;
	struct link_map *lm = NULL;
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
		snprintf(out, size, "%s", lm->l_name);
	dlclose(h); /* only drops the reference taken just now */
}

static void check_driver(cs_doctor_report *r, const cs_driver *d)
{
	const cs_error *e = cs_driver_error(d);
	int v = cs_driver_version(d);
	if (v <= 0) {
		cs_doctor_add(r, "driver-library", FAIL, 0, e->hint, "%s", e->message);
		return;
	}
	char path[PATH_MAX];
	loaded_path(cs_driver_path(d), path, sizeof(path));
	cs_doctor_add(r, "driver-library", PASS, 0, NULL, "%s loaded from %s", cs_driver_path(d), path);
	cs_doctor_add(r, "driver-version", PASS, 0, NULL, "CUDA %d.%d (%d)%s%s", v / 1000, v % 1000 / 10, v,
		      r->nvml_driver_version[0] ? ", driver " : "", r->nvml_driver_version);
	if (cs_driver_loaded(d))
		cs_doctor_add(r, "checkpoint-api", PASS, 0, NULL,
			      "the driver has the checkpoint API (needs CUDA 12.8, driver R570 or newer)");
	else
		cs_doctor_add(r, "checkpoint-api", FAIL, 0, e->hint, "%s", e->message);
	if (cs_driver_can_remap(d))
		cs_doctor_add(r, "device-map", PASS, 0, NULL,
			      "restore can move processes to other GPUs (--device-map; needs CUDA 13.0, R580)");
	else
		cs_doctor_add(r, "device-map", WARN, 0,
			      "Upgrade to driver R580 (CUDA 13.0) or newer to restore onto other GPUs.",
			      "this driver cannot remap GPUs at restore: processes come back only on the "
			      "GPUs they were checkpointed on");
}

static void check_gpus(cs_doctor_report *r, const cs_nvml *n)
{
	char list[768] = "", bad[512] = "";
	for (size_t i = 0; i < r->ngpus; i++) {
		const cs_nvml_gpu *g = &r->gpus[i];
		cs_doctor_list_add(list, sizeof(list), "%u %s %s", g->index, g->name, g->uuid);
		if (g->error)
			cs_doctor_list_add(bad, sizeof(bad), "GPU %u: %s (NVML error %d)", g->index,
					   cs_nvml_strerror(n, g->error), g->error);
	}
	if (r->ngpus == 0)
		cs_doctor_add(r, "gpus", WARN, 0,
			      "Check that the GPUs are passed into this container or sandbox "
			      "(NVIDIA_VISIBLE_DEVICES, --gpus, nvproxy) and that nvidia-smi lists them.",
			      "NVML lists no GPU");
	else if (bad[0])
		cs_doctor_add(r, "gpus", WARN, 0, "Run nvidia-smi -q on the GPUs named for details.",
			      "%zu GPU%s: %s; %s", r->ngpus, r->ngpus == 1 ? "" : "s", list, bad);
	else
		cs_doctor_add(r, "gpus", PASS, 0, NULL, "%zu GPU%s: %s", r->ngpus, r->ngpus == 1 ? "" : "s", list);
}

static void check_persistence(cs_doctor_report *r)
{
	char off[512] = "", unknown[512] = "";
	for (size_t i = 0; i < r->ngpus; i++) {
		const cs_nvml_gpu *g = &r->gpus[i];
		if (g->persistence == 0)
			cs_doctor_list_add(off, sizeof(off), "%u (%s)", g->index, g->uuid);
		else if (g->persistence < 0)
			cs_doctor_list_add(unknown, sizeof(unknown), "%u (%s)", g->index, g->uuid);
	}
	if (off[0])
		cs_doctor_add(r, "persistence", WARN, 0,
			      "Turn it on with 'nvidia-smi -pm 1' (root, on the host) or run nvidia-persistenced. "
			      "Until then cudasnap initializes the driver itself (cuInit) before a restore.",
			      "persistence mode is off on GPU %s: a restore needs the driver kept initialized", off);
	else if (unknown[0])
		cs_doctor_add(r, "persistence", WARN, 0, "Run 'nvidia-smi -q' to see why NVML cannot tell.",
			      "persistence mode is unknown on GPU %s", unknown);
	else if (r->ngpus)
		cs_doctor_add(r, "persistence", PASS, 0, NULL, "persistence mode is on for every GPU");
}

static void check_mig(cs_doctor_report *r, const cs_nvml *n)
{
	char on[512] = "";
	for (size_t i = 0; i < r->ngpus; i++)
		if (r->gpus[i].mig == 1)
			cs_doctor_list_add(on, sizeof(on), "%u (%s)", r->gpus[i].index, r->gpus[i].uuid);
	if (on[0])
		cs_doctor_add(r, "mig", WARN, 0,
			      "Checkpoint only processes on GPUs without MIG, or turn MIG off "
			      "('nvidia-smi -i N -mig 0') where the workload allows it.",
			      "MIG is enabled on GPU %s: the driver's checkpoint does not support MIG slices", on);
	else if (cs_nvml_has_mig(n) && r->ngpus)
		cs_doctor_add(r, "mig", PASS, 0, NULL, "no GPU has MIG enabled");
}

static int check_nvml(cs_doctor_report *r, cs_nvml *n)
{
	const cs_error *e = cs_nvml_error(n);
	if (!cs_nvml_present(n)) {
		cs_doctor_add(r, "nvml", WARN, 0, e->hint,
			      "%s; persistence mode, MIG mode and GPU memory use cannot be checked", e->message);
		return 0;
	}
	cs_error err = { 0 };
	if (cs_nvml_gpus(n, &r->gpus, &r->ngpus, &err) < 0) {
		if (err.status == CS_ESYS)
			return -ENOMEM;
		cs_doctor_add(r, "nvml", WARN, 0, err.hint, "%s", err.message);
		return 0;
	}
	r->nvml_present = true;
	cs_doctor_add(r, "nvml", PASS, 0, NULL, "%s answers (driver %s)", cs_nvml_path(n),
		      r->nvml_driver_version[0] ? r->nvml_driver_version : "version unknown");
	check_gpus(r, n);
	check_persistence(r);
	check_mig(r, n);
	return 0;
}

/* ---- the place -------------------------------------------------------- */

static void check_sandbox(cs_doctor_report *r)
{
	const cs_sandbox *s = &r->env;
	if (s->gvisor)
		cs_doctor_add(r, "gvisor", PASS, 0, NULL, "running under gVisor (runsc): %s", s->gvisor_signal);
	else
		cs_doctor_add(r, "gvisor", PASS, 0, NULL, "not gVisor (kernel %s)",
			      s->kernel_release[0] ? s->kernel_release : "unknown");
	if (s->container)
		cs_doctor_add(r, "container", PASS, 0, NULL, "in a container: %s", s->container_signal);
	else
		cs_doctor_add(r, "container", PASS, 0, NULL, "no sign of a container (a host or a VM)");
	if (s->nspid_depth > 1)
		cs_doctor_add(r, "pid-namespace", WARN, 0,
			      "Mount a procfs of this PID namespace on /proc (unshare --fork --pid --mount-proc "
			      "does), or run cudasnap in the namespace that mounted /proc.",
			      "/proc was mounted by an outer PID namespace (NSpid lists %d PIDs): its PIDs are "
			      "not the ones the driver understands here",
			      s->nspid_depth);
	else if (s->pid_ns == CS_PIDNS_HOST)
		cs_doctor_add(r, "pid-namespace", PASS, 0, NULL, "the host's PID namespace (%s)", s->pid_ns_signal);
	else if (s->pid_ns == CS_PIDNS_CHILD)
		cs_doctor_add(r, "pid-namespace", PASS, 0, NULL,
			      "a child PID namespace (%s): nvidia-smi and NVML show host PIDs, which mean "
			      "nothing here; cudasnap finds processes through /proc",
			      s->pid_ns_signal);
	else
		cs_doctor_add(r, "pid-namespace", WARN, 0, "Mount procfs on /proc.",
			      "cannot tell which PID namespace this is: %s", s->pid_ns_signal);
}

/* The node's book of GPU restores: there, whose, and what it holds. It is
 * only looked at: a restore creates it and removes what is over. */
static void check_gpu_book(cs_doctor_report *r)
{
	const char *path = cs_gpubook_path();
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		if (geteuid() == 0 || errno != ENOENT)
			cs_doctor_add(r, "gpu-book", errno == ENOENT ? PASS : WARN, 0,
				      errno == ENOENT ? NULL : CS_GPUBOOK_HINT, "%s %s", path,
				      errno == ENOENT ? "does not exist yet: the first restore as root makes it" :
							strerror(errno));
		else
			cs_doctor_add(r, "gpu-book", WARN, 0, CS_GPUBOOK_HINT,
				      "%s does not exist, and only root can make it: until then this user's restores "
				      "are refused (they would not be counted by the node's others)",
				      path);
		return;
	}
	cs_error bad = { 0 };
	if (cs_gpubook_check(fd, path, &bad) < 0) {
		cs_doctor_add(r, "gpu-book", WARN, 0, bad.hint, "%s", bad.message);
		return;
	}
	char why[600];
	cs_gpubook_whose(path, fd, why, sizeof(why));
	size_t n = 0;
	_cleanup_closedir_ DIR *d = cs_opendir_at(fd, ".");
	for (struct dirent *de; d && (de = readdir(d));)
		n += strncmp(de->d_name, "b-", 2) == 0;
	if (why[0]) {
		cs_doctor_add(r, "gpu-book", WARN, 0,
			      "Mount the node's " CS_GPUBOOK_NODE " here (a hostPath in Kubernetes), or restore "
			      "from the node's mount namespace.",
			      "%s", why);
		return;
	}
	cs_doctor_add(r, "gpu-book", PASS, 0, NULL, "%s (uid %u, mode %04o): %zu booking%s%s", path,
		      (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), n, n == 1 ? "" : "s",
		      r->env.container ? "; in a container it is the node's only where the node's directory is "
					 "mounted here" :
					 "");
}

/* Which overrides this run honours. With elevated privileges they are all
 * ignored, so a user who set one would otherwise wonder why the doctor
 * looked at the real driver and the real /proc. */
static void check_environment(cs_doctor_report *r)
{
	char list[256] = "";
	for (size_t i = 0; i < r->noverrides; i++)
		cs_doctor_list_add(list, sizeof(list), "%s", r->overrides[i]);
	if (r->at_secure && r->noverrides)
		cs_doctor_add(r, "environment", WARN, 0,
			      "cudasnap runs setuid or with file capabilities (setcap), so it reads no environment "
			      "variable: whoever starts it could otherwise make it load a library of theirs. Unset "
			      "them, or use them with a copy of cudasnap that has neither, run as root or as the "
			      "owner of the processes.",
			      "running with elevated privileges (AT_SECURE): %s ignored", list);
	else if (r->at_secure)
		cs_doctor_add(r, "environment", PASS, 0, NULL,
			      "running with elevated privileges (AT_SECURE): no override is set (any would be ignored)");
	else if (r->noverrides)
		cs_doctor_add(r, "environment", PASS, 0, NULL, "overrides in effect: %s", list);
	else
		cs_doctor_add(r, "environment", PASS, 0, NULL, "no override is set");
}

/* Copies s into itself made safe to print (cs_sanitize never lengthens). */
static void sanitize_in_place(char *s, size_t size)
{
	_cleanup_free_ char *copy = strdup(s);
	if (copy)
		cs_sanitize(s, size, copy, strlen(copy));
	else
		snprintf(s, size, "?");
}

static bool listed(const char *const *names, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

/* What the settings file met, and each value it gives: the file is
 * anyone's text as far as the terminal is concerned. */
static int read_settings(cs_doctor_report *r)
{
	const char *names[CS_ENV_COUNT];
	size_t n = cs_config_settings(names, CS_ARRAY_SIZE(names));
	cs_config_status_get(&r->config);
	sanitize_in_place(r->config.path, sizeof(r->config.path));
	sanitize_in_place(r->config.ignored, sizeof(r->config.ignored));
	for (size_t i = 0; i < n && i < CS_ARRAY_SIZE(names); i++) {
		const char *v = cs_config_value(names[i]);
		cs_doctor_setting *s = &r->settings[r->nsettings];
		if (!v)
			continue;
		if (!(s->value = malloc(strlen(v) + 1)))
			return -ENOMEM;
		cs_sanitize(s->value, strlen(v) + 1, v, strlen(v));
		s->name = names[i];
		/* Under AT_SECURE the environment is not read: the file's value holds. */
		s->overridden = !r->at_secure && listed(r->overrides, r->noverrides, names[i]);
		r->nsettings++;
	}
	return 0;
}

/* The settings file speaks for callers without an environment (CRIU under a
 * container engine): say what it sets, each line it skipped, and why it was
 * not used; the command line lists the values and lines below the check. */
static void check_settings(cs_doctor_report *r)
{
	const cs_config_status *c = &r->config;
	char list[512] = "";
	for (size_t i = 0; i < r->nsettings; i++)
		cs_doctor_list_add(list, sizeof(list), "%s%s", r->settings[i].name,
				   r->settings[i].overridden ? " (the environment overrides it)" : "");
	if (c->ignored[0])
		cs_doctor_add(r, "settings", WARN, 0,
			      "Make it a regular file owned by root, mode 0644 or stricter, in directories owned by "
			      "root that only root can write, with no symbolic link on its path (see cudasnap(7), "
			      "FILES).",
			      "%s is ignored: %s", c->path, c->ignored);
	else if (c->nskipped)
		cs_doctor_add(r, "settings", WARN, 0,
			      "Correct or remove the lines skipped: each is NAME=VALUE with NAME one of the CUDASNAP_* "
			      "variables of cudasnap(1), ENVIRONMENT, other than CUDASNAP_CONFIG.",
			      "%s: %zu line%s skipped; it sets %s", c->path, c->nskipped, c->nskipped == 1 ? "" : "s",
			      list[0] ? list : "nothing");
	else if (r->nsettings)
		cs_doctor_add(r, "settings", PASS, 0, NULL, "%s sets %s", c->path, list);
	else if (c->read)
		cs_doctor_add(r, "settings", PASS, 0, NULL, "%s sets nothing", c->path);
	else
		cs_doctor_add(r, "settings", PASS, 0, NULL, "%s does not exist: nothing is set", c->path);
}

int cs_doctor_run(const cs_doctor_opts *o, cs_doctor_report *r, cs_error *err)
{
	memset(r, 0, sizeof(*r));
	const char *root = o && o->root ? o->root : cs_sandbox_root();
	_cleanup_(cs_nvml_closep) cs_nvml *n = NULL;
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	cs_nvml_open(&n, NULL);
	cs_driver_open(&d, NULL); /* a driver that does not load is a failed check */
	int rc = n && d ? 0 : -ENOMEM;
	cs_sandbox_detect(root, &r->env);
	cs_host_memory(root, &r->mem);
	r->at_secure = cs_env_secure();
	r->noverrides = cs_env_overrides(r->overrides, CS_ARRAY_SIZE(r->overrides));
	if (rc == 0)
		rc = read_settings(r);
	if (rc == 0 && cs_nvml_present(n))
		snprintf(r->nvml_driver_version, sizeof(r->nvml_driver_version), "%s", cs_nvml_driver_version(n));
	if (rc == 0) {
		check_driver(r, d);
		rc = check_nvml(r, n);
	}
	if (rc == 0) {
		check_sandbox(r);
		check_gpu_book(r);
		check_environment(r);
		check_settings(r);
		rc = cs_doctor_check_processes(r, d, o, root);
		cs_doctor_check_history(r);
	}
	if (rc < 0 || r->oom)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	return 0;
}
