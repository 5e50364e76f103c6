/* fakecuda-app: a stand-in for a CUDA application (a training process, its
 * spawned workers, its forked data loaders) for checkpoint tests. */
#ifndef FAKECUDA_APP_H
#define FAKECUDA_APP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define APP_MAX_KIDS 64

enum app_role { ROLE_PARENT, ROLE_SPAWNED, ROLE_FORKED, ROLE_DEVICE, ROLE_NVML, ROLE_PLAIN };

struct app_opts {
	unsigned int mem_mib;
	unsigned int spawn;
	unsigned int fork_after_init;
	unsigned int forked_close_fds;
	unsigned int kernel_ms;
	int open_device;
	int nvml_only;
	int no_init;
	int ipc_export;
	unsigned int ipc_import; /* pid of the exporter, 0: none */
	int child;
	const char *set_visible; /* CUDA_VISIBLE_DEVICES set before cuInit, or NULL */
	const char *ready_dir;
};

struct app {
	struct app_opts o;
	enum app_role role;
	uint64_t dptr;
	size_t bytes;
	uint64_t seed;
	/* another process's device memory (--ipc-import), filled from its seed */
	uint64_t imp_dptr;
	size_t imp_bytes;
	uint64_t imp_seed;
	pid_t kids[APP_MAX_KIDS];
	int nkids;
	int dev_fd;
	void *dev_map;
	/* worker threads */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int verify_requests;
	int stopping;
	int have_kernel;
	int have_verify;
	pthread_t kernel_thread;
	pthread_t verify_thread;
};

/* app_opts.c: 0 = run, 1 = exit 0 (help shown), -1 = exit 2 */
int app_parse(int argc, char **argv, struct app_opts *o);
const char *app_role_name(enum app_role role);

/* app_files.c */
void app_write_ready(const struct app *a, int tid);
void app_write_verify(const struct app *a, const char *line);

/* app_procs.c */
void app_spawn(struct app *a);
void app_fork_children(struct app *a);
void app_reap(struct app *a);
void app_stop_children(struct app *a);

/* app_work.c */
int app_start_workers(struct app *a);
void app_request_verify(struct app *a);
void app_stop_workers(struct app *a);

#endif
