#include "gpumem.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "procinfo.h"
#include "settings.h"

/* A process counts when it is a fake CUDA process (its restore thread)
 * holding device memory: a checkpointed one holds none, and an NVML-only one
 * has no context, so neither uses any, as nvidia-smi shows neither. */

#define MIB (1ull << 20)
/* an H200 */
#define DEFAULT_TOTAL_MIB (141ull * 1024ull)

/* Larger figures stand for more than any GPU has, far from overflowing the
 * sums; the used memory is clamped to the total. */
static unsigned long long mib_bytes(unsigned long long mib)
{
	return mib < (1ull << 30) ? mib * MIB : 1ull << 50;
}

unsigned long long fc_mib_setting(const char *name)
{
	char buf[32];
	const char *v = fc_setting(name, buf, sizeof(buf));
	return mib_bytes(v ? strtoull(v, NULL, 10) : 0);
}

/* FAKECUDA_GPU_TOTAL_MIB: one figure for every GPU, or one per GPU in the
 * order of FAKECUDA_GPUS, the last figure standing for the GPUs beyond the
 * list. */
static unsigned long long total_bytes(int index)
{
	char buf[512];
	const char *v = fc_setting("FAKECUDA_GPU_TOTAL_MIB", buf, sizeof(buf));
	unsigned long long mib = DEFAULT_TOTAL_MIB;
	for (int i = 0; v != NULL; i++) {
		char *end;
		unsigned long long figure = strtoull(v, &end, 10);
		if (end == v)
			break;
		mib = figure;
		v = i < index && *end == ',' ? end + 1 : NULL;
	}
	return mib_bytes(mib);
}

/* Once for every GPU the process holds memory on; its context counts on
 * each of them. */
static void visit_pid(const char *root, int pid, unsigned long long context,
		      void (*visit)(const struct fc_gpu_user *u, void *arg), void *arg)
{
	struct fc_devmem_use use[FC_MAX_GPUS];
	int n = fc_proc_devmem_use_in(root, pid, use, FC_MAX_GPUS);
	if (n == 0 || fc_find_restore_tid_in(root, pid) == 0)
		return;
	for (int i = 0; i < n; i++) {
		struct fc_gpu_user u = { pid, use[i].uuid, use[i].bytes + context };
		visit(&u, arg);
	}
}

void fc_gpu_users(void (*visit)(const struct fc_gpu_user *u, void *arg), void *arg)
{
	fc_gpu_users_with("/proc", fc_mib_setting("FAKECUDA_CONTEXT_MIB"), visit, arg);
}

void fc_gpu_users_with(const char *root, unsigned long long context,
		       void (*visit)(const struct fc_gpu_user *u, void *arg), void *arg)
{
	DIR *d = opendir(root);
	struct dirent *de;
	while (d != NULL && (de = readdir(d)) != NULL) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (pid > 0 && *end == '\0')
			visit_pid(root, (int)pid, context, visit, arg);
	}
	if (d != NULL)
		closedir(d);
}

struct tally {
	int count;
	char uuid[FC_MAX_GPUS][FAKECUDA_UUID_STRLEN];
	unsigned long long used[FC_MAX_GPUS];
};

static void add_user(const struct fc_gpu_user *u, void *arg)
{
	struct tally *t = arg;
	for (int i = 0; i < t->count; i++)
		if (strcmp(t->uuid[i], u->uuid) == 0)
			t->used[i] += u->bytes;
}

/* FAKECUDA_GPU_USED_MIB, when set, is the whole figure of every GPU; else the
 * processes found here, and FAKECUDA_OTHER_USED_MIB for those that cannot be
 * found here (other PID namespaces, other tenants of the GPU). */
void fc_gpu_memory(const struct fc_gpus *g, struct fc_gpu_memory *out)
{
	char buf[32];
	int fixed = fc_setting("FAKECUDA_GPU_USED_MIB", buf, sizeof(buf)) != NULL;
	struct tally t = { .count = g->count };
	for (int i = 0; i < g->count; i++)
		fc_uuid_format(&g->uuid[i], t.uuid[i], sizeof(t.uuid[i]));
	if (!fixed)
		fc_gpu_users(add_user, &t);
	unsigned long long fixed_used = fc_mib_setting("FAKECUDA_GPU_USED_MIB");
	unsigned long long other = fc_mib_setting("FAKECUDA_OTHER_USED_MIB");
	for (int i = 0; i < g->count; i++) {
		unsigned long long used = fixed ? fixed_used : t.used[i] + other;
		out[i].total = total_bytes(i);
		out[i].used = used < out[i].total ? used : out[i].total;
		out[i].free = out[i].total - out[i].used;
		out[i].users = fixed ? 0 : t.used[i];
		out[i].scanned = !fixed;
	}
}
