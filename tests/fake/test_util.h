/* Helpers for the double's self-test: the driver loaded as a caller loads it,
 * fake applications in a scratch directory, and what /proc says of them. */
#ifndef FAKECUDA_TEST_UTIL_H
#define FAKECUDA_TEST_UTIL_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "cuda_api.h"
#include "nvml_api.h"

struct drv {
	void *handle;
	CUresult (*init)(unsigned int);
	CUresult (*error_string)(CUresult, const char **);
	CUresult (*error_name)(CUresult, const char **);
	CUresult (*driver_version)(int *);
	CUresult (*get_state)(int, CUprocessState *);
	CUresult (*get_tid)(int, int *);
	CUresult (*lock)(int, CUcheckpointLockArgs *);
	CUresult (*checkpoint)(int, CUcheckpointCheckpointArgs *);
	CUresult (*restore)(int, CUcheckpointRestoreArgs *);
	CUresult (*unlock)(int, CUcheckpointUnlockArgs *);
};

struct nvml {
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*shutdown)(void);
	nvmlReturn_t (*driver_version)(char *, unsigned int);
	nvmlReturn_t (*count)(unsigned int *);
	nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
	nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
	nvmlReturn_t (*memory_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
	nvmlReturn_t (*minor)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*procs)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
};

struct env {
	const char *app;
	const char *lib;
	const char *legacy;
	/* short enough that every path built from them fits in PATH_MAX */
	char root[1024];
	char dev[1100];
	char ready[1100];
	char faults[1100];
};

struct ready {
	int pid;
	int ppid;
	int tid;
	char role[16];
};

extern int t_failures;

void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int drv_load(struct drv *d, const char *path);
uint64_t now_ms(void);
void sleep_ms(unsigned int ms);

/* args: argv after the program name; env: "NAME=value" additions; both
 * NULL-terminated, env may be NULL */
pid_t app_start(const struct env *e, const char *const *args, const char *const *env);
/* the same in namespaces of its own (unshare(2) flags) */
pid_t app_start_ns(const struct env *e, const char *const *args, const char *const *env,
		   int unshare_flags);
int wait_ready(const struct env *e, int pid, struct ready *r);
/* app_start + wait_ready; -1 (a failed check) if it never got ready */
pid_t app_start_ready(const struct env *e, const char *const *args, const char *const *env,
		      struct ready *r);
void apps_cleanup(void);
/* ready files of pids other than skip, in the order found */
int find_ready(const struct env *e, int ppid, const char *role, struct ready *out, int max);
/* SIGUSR1, then the verify line; "" if none came within ms */
void ask_verify(const struct env *e, int pid, char *line, size_t len, unsigned int ms);
void wait_verify(const struct env *e, int pid, char *line, size_t len, unsigned int ms);
long rss_kib(int pid);
int app_stop(pid_t pid);
int dev_fds(const struct env *e, int pid);
int dev_maps(const struct env *e, int pid);
/* fds and mappings of pid whose path starts with prefix; -1 when unreadable */
void path_refs(int pid, const char *prefix, int *fds, int *maps);
int other_thread(int pid, int not_tid);
CUprocessState state_of(const struct drv *d, int pid);
void write_faults(const struct env *e, const char *text);
/* The NVML double next to the driver double (e->lib): its handle, or NULL
 * when it does not load or lacks a symbol (dlerror() may say why). */
void *nvml_open(const struct env *e, struct nvml *n);
void remove_tree(const char *path);

/* the groups of checks */
void test_codes(const struct env *e, const struct drv *d);
void test_cycle(const struct env *e, const struct drv *d);
void test_remap(const struct env *e, const struct drv *d);
void test_lock_timeout(const struct env *e, const struct drv *d);
void test_persistence(const struct env *e, const struct drv *d);
void test_faults(const struct env *e, const struct drv *d);
void test_roles(const struct env *e, const struct drv *d);
void test_spawn(const struct env *e, const struct drv *d);
void test_concurrency(const struct env *e, const struct drv *d);
void test_stopped(const struct env *e, const struct drv *d);
void test_legacy(const struct env *e);
void test_nvml(const struct env *e, const struct drv *d);
void test_ipc(const struct env *e, const struct drv *d);
void test_settings(const struct env *e, const struct drv *d);
void test_netns(const struct env *e, const struct drv *d);
void test_gpu_memory(const struct env *e, const struct drv *d);

#endif
