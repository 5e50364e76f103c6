/* CUDA IPC as the real driver (580.159.04, H200) showed it: the exporter
 * maps and holds /dev/shm/cuda.shm.<A>.<B>, the importer maps it without an
 * fd; the importer checkpoints but is never restored; the exporter cycles
 * freely and the importer still reads its memory. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpus.h"
#include "ipc.h"
#include "test_util.h"

#define IMPORTER_OK "ok bytes=2097152 gpu=" FC_DEFAULT_GPU " imported=4194304"

struct trio {
	pid_t exp, imp, plain;
	char path[PATH_MAX]; /* the exporter's shared file */
};

static pid_t start_importer(const struct env *e, pid_t exporter, const char *const *env)
{
	char pid[16];
	struct ready r;
	snprintf(pid, sizeof(pid), "%d", (int)exporter);
	const char *args[] = { "--mem", "2", "--ipc-import", pid, NULL };
	return app_start_ready(e, args, env, &r);
}

static int start_trio(const struct env *e, struct trio *t)
{
	static const char *const exp_args[] = { "--mem", "4", "--ipc-export", NULL };
	static const char *const plain_args[] = { "--mem", "1", NULL };
	struct ready r;
	t->exp = app_start_ready(e, exp_args, NULL, &r);
	t->imp = t->exp > 0 ? start_importer(e, t->exp, NULL) : -1;
	t->plain = app_start_ready(e, plain_args, NULL, &r);
	fc_ipc_shm_path(t->path, sizeof(t->path), (unsigned int)geteuid(), (int)t->exp);
	return t->exp > 0 && t->imp > 0 && t->plain > 0 ? 0 : -1;
}

static void check_shape(const struct trio *t, const char *when)
{
	char dir[PATH_MAX];
	int fx, mx, fi, mi, fp, mp;
	/* the plain process holds nothing of the directory, whatever the name */
	snprintf(dir, sizeof(dir), "%s", t->path);
	*(strrchr(dir, '/') + 1) = '\0';
	path_refs(t->exp, t->path, &fx, &mx);
	path_refs(t->imp, t->path, &fi, &mi);
	path_refs(t->plain, dir, &fp, &mp);
	check(fx >= 1 && mx >= 1, "%s: the exporter holds %s open (%d fds) and maps it (%d)", when,
	      t->path, fx, mx);
	check(fi == 0 && mi >= 1, "%s: the importer maps it (%d) without an fd (%d)", when, mi, fi);
	check(fp == 0 && mp == 0, "%s: a plain CUDA process holds nothing in %s (%d fds, %d maps)",
	      when, dir, fp, mp);
}

static void check_verify(const struct env *e, pid_t pid, const char *want, const char *what)
{
	char line[256];
	ask_verify(e, pid, line, sizeof(line), 3000);
	check(strcmp(line, want) == 0, "%s verifies: '%s'", what, line);
}

static int cycle(const struct drv *d, pid_t pid)
{
	return d->lock(pid, NULL) == 0 && d->checkpoint(pid, NULL) == 0 &&
	       state_of(d, pid) == CU_PROCESS_STATE_CHECKPOINTED && d->restore(pid, NULL) == 0 &&
	       d->unlock(pid, NULL) == 0 && state_of(d, pid) == CU_PROCESS_STATE_RUNNING;
}

static void check_exporter_cycles(const struct env *e, const struct drv *d, const struct trio *t)
{
	check(cycle(d, t->exp), "the exporter checkpoints and restores while its importer runs");
	check_verify(e, t->exp, "ok bytes=4194304 gpu=" FC_DEFAULT_GPU, "the restored exporter");
	check_verify(e, t->imp, IMPORTER_OK, "the importer, reading the exporter's memory,");
}

static CUresult restore_identity(const struct drv *d, pid_t pid)
{
	CUcheckpointGpuPair pair;
	CUcheckpointRestoreArgs ra = { .gpuPairs = &pair, .gpuPairsCount = 1 };
	fc_uuid_parse(FC_DEFAULT_GPU, &pair.oldUuid);
	pair.newUuid = pair.oldUuid;
	return d->restore(pid, &ra);
}

static void check_importer_stuck(const struct drv *d, const struct trio *t)
{
	check(d->lock(t->imp, NULL) == 0 && d->checkpoint(t->imp, NULL) == 0 &&
		      state_of(d, t->imp) == CU_PROCESS_STATE_CHECKPOINTED,
	      "the importer locks and checkpoints");
	CUresult r[3] = { d->restore(t->imp, NULL), d->restore(t->imp, NULL),
			  restore_identity(d, t->imp) };
	check(r[0] == 1 && r[1] == 1 && r[2] == 1 &&
		      state_of(d, t->imp) == CU_PROCESS_STATE_CHECKPOINTED,
	      "the importer's restore -> 1 every time (%d %d %d, identity map last), still "
	      "CHECKPOINTED",
	      r[0], r[1], r[2]);
	check(d->unlock(t->imp, NULL) == 401 && d->lock(t->imp, NULL) == 401 &&
		      d->checkpoint(t->imp, NULL) == 401 &&
		      state_of(d, t->imp) == CU_PROCESS_STATE_CHECKPOINTED,
	      "the importer: unlock, lock, checkpoint -> 401, still CHECKPOINTED");
	check(cycle(d, t->exp), "the exporter still cycles with its importer checkpointed");
}

static void check_exit(const struct trio *t)
{
	check(app_stop(t->exp) == 0 && access(t->path, F_OK) != 0 && errno == ENOENT,
	      "the exporter removes its shared file when it exits");
	check(app_stop(t->imp) == 0, "the checkpointed importer exits cleanly");
	app_stop(t->plain);
}

/* Exit status of a process that ends by itself, -1 if it does not. */
static int exit_status(pid_t pid, unsigned int ms)
{
	int status;
	for (unsigned int waited = 0; waited <= ms; waited += 10) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		sleep_ms(10);
	}
	app_stop(pid);
	return -1;
}

static void check_nothing_to_import(const struct env *e)
{
	static const char *const args[] = { "--mem", "1", NULL };
	struct ready r;
	char pid[16];
	pid_t plain = app_start_ready(e, args, NULL, &r);
	if (plain < 0)
		return;
	snprintf(pid, sizeof(pid), "%d", (int)plain);
	const char *imp_args[] = { "--ipc-import", pid, NULL };
	int st = exit_status(app_start(e, imp_args, NULL), 5000);
	check(st == 2, "--ipc-import of a process that exports nothing fails (exit %d)", st);
	app_stop(plain);
}

static int ns_last_pid(int set)
{
	FILE *f = fopen("/proc/sys/kernel/ns_last_pid", set ? "we" : "re");
	int v = -1;
	if (f == NULL)
		return -1;
	int ok = set ? fprintf(f, "%d", set) > 0 : fscanf(f, "%d", &v) == 1;
	return fclose(f) == 0 && ok ? (set ? set : v) : -1;
}

/* A file that a killed process left, under the pid the exporter is about to
 * get: a record that claims more memory than anyone has. */
static int plant_stale(const char *path, int pid)
{
	struct fc_ipc_record rec = { FC_IPC_MAGIC, pid, 0, 1ull << 40 };
	FILE *f = fopen(path, "we");
	if (f == NULL)
		return -1;
	fwrite(&rec, sizeof(rec), 1, f);
	return fclose(f);
}

/* The next process started gets pid want, when this pid namespace lets the
 * test choose: root in a namespace of its own, as isolate.sh gives; never
 * the machine's, whose other processes fork meanwhile. */
static pid_t start_exporter_as(const struct env *e, int want, const char *const *env)
{
	static const char *const args[] = { "--mem", "4", "--ipc-export", NULL };
	struct ready r;
	struct stat st;
	if (stat("/proc/self/ns/pid", &st) != 0 || st.st_ino == 0xEFFFFFFCul ||
	    ns_last_pid(want - 1) < 0)
		return 0;
	return app_start_ready(e, args, env, &r);
}

static void check_shm_dir_and_stale(const struct env *e)
{
	char dir[PATH_MAX], var[PATH_MAX + 32], path[PATH_MAX], dflt[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/shm", e->root);
	snprintf(var, sizeof(var), "FAKECUDA_SHM_DIR=%s", dir);
	const char *const env[] = { var, NULL };
	int want = ns_last_pid(0) + 100;
	mkdir(dir, 0755);
	setenv("FAKECUDA_SHM_DIR", dir, 1);
	fc_ipc_shm_path(path, sizeof(path), (unsigned int)geteuid(), want);
	unsetenv("FAKECUDA_SHM_DIR");
	fc_ipc_shm_path(dflt, sizeof(dflt), (unsigned int)geteuid(), want);
	plant_stale(path, want);
	pid_t exp = start_exporter_as(e, want, env);
	if (exp == 0) {
		printf("# skipped: a stale shared file (this pid namespace lets no pid be chosen)\n");
		return;
	}
	pid_t imp = exp == want ? start_importer(e, exp, env) : -1;
	check(exp == want && imp > 0, "an exporter whose pid left a stale file (pid %d) exports, "
				      "and an importer maps its memory",
	      (int)exp);
	check(access(path, F_OK) == 0 && access(dflt, F_OK) != 0,
	      "FAKECUDA_SHM_DIR: the shared file is in %s, not in the default directory", dir);
	if (imp > 0)
		check_verify(e, imp, IMPORTER_OK, "that importer");
	app_stop(imp);
	app_stop(exp);
	check(access(path, F_OK) != 0, "and the exporter's exit removes the file");
	unlink(path);
}

void test_ipc(const struct env *e, const struct drv *d)
{
	struct trio t;
	if (start_trio(e, &t) != 0) {
		app_stop(t.exp);
		app_stop(t.imp);
		app_stop(t.plain);
		return;
	}
	check_shape(&t, "IPC");
	check_verify(e, t.imp, IMPORTER_OK, "the importer (its memory and the exporter's)");
	check_exporter_cycles(e, d, &t);
	check_shape(&t, "IPC after the exporter's restore");
	check_importer_stuck(d, &t);
	check_exit(&t);
	check_nothing_to_import(e);
	check_shm_dir_and_stale(e);
}
