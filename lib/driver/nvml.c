/* NVML through dlopen, so that the binary needs only glibc and still runs
 * where the NVIDIA driver (or just its management library) is missing. */
#include "nvml.h"
#include "env.h"
#include "util.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The slice of nvml.h used here; numbers and layouts are NVML's ABI. */
typedef int nvml_ret;
typedef struct nvml_device_st *nvml_device;
typedef struct {
	unsigned long long total, free, used;
} nvml_memory_v1;
typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvml_memory_v2;

_Static_assert(sizeof(nvml_memory_v2) == 40, "nvmlMemory_v2_t ABI");
/* nvmlProcessInfo_t (the v2 layout, also used by the _v3 call). */
typedef struct {
	unsigned int pid;
	unsigned long long used;
	/* cppcheck-suppress unusedStructMember ; NVML fills them, only pid and used are read */
	unsigned int gpu_instance, compute_instance;
} nvml_proc_info;
_Static_assert(sizeof(nvml_proc_info) == 24, "nvmlProcessInfo_t ABI");
/* NVML_STRUCT_VERSION(Memory, 2): the size in the low bits, 2 in the top byte. */
#define NVML_MEMORY_V2_VERSION ((unsigned)sizeof(nvml_memory_v2) | (2u << 24))

enum {
	NVML_OK = 0,
	NVML_ERR_NOT_SUPPORTED = 3,
	NVML_ERR_INSUFFICIENT_SIZE = 7,
};

/* NVML_VALUE_NOT_AVAILABLE: the used memory of a process NVML may not see. */
#define NVML_NOT_AVAILABLE (~0ULL)

struct cs_nvml {
	void *handle;
	bool present;
	char path[256];
	char driver_version[CS_NVML_VERSION_SIZE];
	cs_error error;
	nvml_ret (*init)(void);
	nvml_ret (*shutdown)(void);
	const char *(*error_string)(nvml_ret);
	nvml_ret (*driver_ver)(char *, unsigned);
	nvml_ret (*count)(unsigned *);
	nvml_ret (*by_index)(unsigned, nvml_device *);
	nvml_ret (*uuid)(nvml_device, char *, unsigned);
	nvml_ret (*name)(nvml_device, char *, unsigned);
	nvml_ret (*persistence)(nvml_device, int *);
	nvml_ret (*memory)(nvml_device, nvml_memory_v1 *);
	nvml_ret (*memory_v2)(nvml_device, nvml_memory_v2 *); /* optional */
	nvml_ret (*mig_mode)(nvml_device, unsigned *, unsigned *); /* optional */
	nvml_ret (*minor)(nvml_device, unsigned *); /* optional */
	nvml_ret (*procs)(nvml_device, unsigned *, nvml_proc_info *); /* optional */
};

#define HINT_NVML \
	"NVML (libnvidia-ml.so.1) comes with the NVIDIA driver; in containers the NVIDIA " \
	"container toolkit mounts it. Set CUDASNAP_LIBNVML to its path if it lives elsewhere."

static const struct {
	int code;
	const char *text;
} nvml_texts[] = {
	{ 0, "Success" },
	{ 1, "Uninitialized" },
	{ 2, "Invalid Argument" },
	{ 3, "Not Supported" },
	{ 4, "Insufficient Permissions" },
	{ 5, "Already Initialized" },
	{ 6, "Not Found" },
	{ 7, "Insufficient Size" },
	{ 8, "Insufficient External Power" },
	{ 9, "Driver Not Loaded" },
	{ 10, "Timeout" },
	{ 11, "Interrupt Request Issue" },
	{ 12, "NVML Shared Library Not Found" },
	{ 13, "Function Not Found" },
	{ 14, "Corrupted infoROM" },
	{ 15, "GPU is lost" },
	{ 16, "GPU requires restart" },
	{ 17, "The operating system has blocked the request" },
	{ 18, "RM has detected an NVML/RM version mismatch" },
	{ 19, "In use by another client" },
	{ 20, "Insufficient Memory" },
	{ 21, "No data" },
	{ 999, "Unknown Error" },
};

const char *cs_nvml_strerror(const cs_nvml *n, int ret)
{
	if (n && n->error_string) {
		const char *s = n->error_string(ret);
		if (s && *s)
			return s;
	}
	for (size_t i = 0; i < CS_ARRAY_SIZE(nvml_texts); i++)
		if (nvml_texts[i].code == ret)
			return nvml_texts[i].text;
	return "unrecognized NVML error";
}

static int load_symbols(cs_nvml *n)
{
	struct {
		const char *name;
		void **slot;
		bool required;
	} syms[] = {
		{ "nvmlInit_v2", (void **)&n->init, true },
		{ "nvmlShutdown", (void **)&n->shutdown, true },
		{ "nvmlErrorString", (void **)&n->error_string, false },
		{ "nvmlSystemGetDriverVersion", (void **)&n->driver_ver, false },
		{ "nvmlDeviceGetCount_v2", (void **)&n->count, true },
		{ "nvmlDeviceGetHandleByIndex_v2", (void **)&n->by_index, true },
		{ "nvmlDeviceGetUUID", (void **)&n->uuid, true },
		{ "nvmlDeviceGetName", (void **)&n->name, true },
		{ "nvmlDeviceGetPersistenceMode", (void **)&n->persistence, true },
		{ "nvmlDeviceGetMemoryInfo", (void **)&n->memory, true },
		{ "nvmlDeviceGetMemoryInfo_v2", (void **)&n->memory_v2, false },
		{ "nvmlDeviceGetMigMode", (void **)&n->mig_mode, false },
		{ "nvmlDeviceGetMinorNumber", (void **)&n->minor, false },
		{ "nvmlDeviceGetComputeRunningProcesses_v3", (void **)&n->procs, false },
	};
	for (size_t i = 0; i < CS_ARRAY_SIZE(syms); i++) {
		*syms[i].slot = dlsym(n->handle, syms[i].name);
		if (!*syms[i].slot && syms[i].required)
			return cs_error_set(&n->error, CS_EENV, HINT_NVML,
					    "NVML library %s has no symbol %s (a driver older than R450?)", n->path,
					    syms[i].name);
	}
	return 0;
}

static int load(cs_nvml *n)
{
	const char *env = cs_env("CUDASNAP_LIBNVML");
	snprintf(n->path, sizeof(n->path), "%s", env ? env : "libnvidia-ml.so.1");
	n->handle = dlopen(n->path, RTLD_NOW | RTLD_LOCAL);
	if (!n->handle)
		return cs_error_set(&n->error, CS_EENV, HINT_NVML, "NVML not found: cannot load %s: %s", n->path,
				    dlerror());
	int r = load_symbols(n);
	if (r < 0)
		return r;
	nvml_ret ret = n->init();
	if (ret != NVML_OK)
		return cs_error_set(&n->error, CS_EENV,
				    "Check that the NVIDIA kernel module is loaded and /dev/nvidiactl is "
				    "accessible here (nvidia-smi shows the same error).",
				    "NVML did not initialize: nvmlInit_v2: %s (%d)", cs_nvml_strerror(n, ret), ret);
	if (n->driver_ver && n->driver_ver(n->driver_version, sizeof(n->driver_version)) != NVML_OK)
		n->driver_version[0] = '\0';
	n->driver_version[sizeof(n->driver_version) - 1] = '\0';
	return 0;
}

int cs_nvml_open(cs_nvml **out, cs_error *err)
{
	cs_nvml *n = calloc(1, sizeof(*n));
	*out = n;
	if (!n)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	n->present = load(n) == 0;
	return 0;
}

void cs_nvml_close(cs_nvml *n)
{
	if (!n)
		return;
	if (n->present && n->shutdown)
		n->shutdown();
	/* Not unloaded: libnvidia-ml loads libcuda, whose threads may outlive dlclose. */
	free(n);
}

bool cs_nvml_present(const cs_nvml *n)
{
	return n && n->present;
}
const char *cs_nvml_path(const cs_nvml *n)
{
	return n ? n->path : "";
}
const cs_error *cs_nvml_error(const cs_nvml *n)
{
	return n ? &n->error : NULL;
}
const char *cs_nvml_driver_version(const cs_nvml *n)
{
	return n ? n->driver_version : "";
}
bool cs_nvml_has_mig(const cs_nvml *n)
{
	return cs_nvml_present(n) && n->mig_mode;
}

/* NOT_SUPPORTED only leaves a value unknown (MIG slices, vGPUs); anything
 * else is worth reporting. */
static void note(cs_nvml_gpu *g, nvml_ret ret)
{
	if (ret != NVML_OK && ret != NVML_ERR_NOT_SUPPORTED && !g->error)
		g->error = ret;
}

static void read_memory(cs_nvml *n, nvml_device dev, cs_nvml_gpu *g)
{
	/* v2 leaves out the memory the driver reserves for itself, which is never
	 * checkpointed; v1 counts it as used. */
	if (n->memory_v2) {
		nvml_memory_v2 m = { .version = NVML_MEMORY_V2_VERSION };
		if (n->memory_v2(dev, &m) == NVML_OK) {
			g->memory_known = true;
			g->memory_total = m.total;
			g->memory_used = m.used;
			g->memory_free = m.free;
			return;
		}
	}
	nvml_memory_v1 m = { 0 };
	nvml_ret ret = n->memory(dev, &m);
	note(g, ret);
	if (ret == NVML_OK) {
		g->memory_known = true;
		g->memory_total = m.total;
		g->memory_used = m.used;
		g->memory_free = m.free;
	}
}

void cs_nvml_gpu_memory(cs_nvml *n, cs_nvml_gpu *g)
{
	nvml_device dev = NULL;
	g->memory_known = false;
	if (cs_nvml_present(n) && n->by_index(g->index, &dev) == NVML_OK)
		read_memory(n, dev, g);
}

static void read_gpu(cs_nvml *n, unsigned i, cs_nvml_gpu *g)
{
	memset(g, 0, sizeof(*g));
	g->index = i;
	g->persistence = g->mig = -1;
	nvml_device dev = NULL;
	nvml_ret ret = n->by_index(i, &dev);
	note(g, ret);
	if (ret != NVML_OK)
		return;
	note(g, n->uuid(dev, g->uuid, sizeof(g->uuid)));
	note(g, n->name(dev, g->name, sizeof(g->name)));
	g->uuid[sizeof(g->uuid) - 1] = g->name[sizeof(g->name) - 1] = '\0';
	int mode = -1;
	ret = n->persistence(dev, &mode);
	note(g, ret);
	if (ret == NVML_OK)
		g->persistence = mode == 1;
	read_memory(n, dev, g);
	unsigned cur = 0, pending = 0;
	/* NOT_SUPPORTED is the answer of every GPU without MIG: not an error. */
	if (n->mig_mode && n->mig_mode(dev, &cur, &pending) == NVML_OK)
		g->mig = cur == 1;
	g->minor = -1;
	if (n->minor && n->minor(dev, &cur) == NVML_OK && cur < 4096)
		g->minor = (int)cur;
}

int cs_nvml_gpus(cs_nvml *n, cs_nvml_gpu **gpus, size_t *count, cs_error *err)
{
	*gpus = NULL;
	*count = 0;
	if (!cs_nvml_present(n))
		return cs_error_set(err, CS_EENV, n ? n->error.hint : NULL, "%s",
				    n ? n->error.message : "NVML not loaded");
	unsigned c = 0;
	nvml_ret ret = n->count(&c);
	if (ret != NVML_OK)
		return cs_error_set(err, CS_EDRIVER, NULL, "nvmlDeviceGetCount_v2: %s (%d)", cs_nvml_strerror(n, ret),
				    ret);
	if (c == 0)
		return 0;
	if (c > 1024)
		return cs_error_set(err, CS_EDRIVER, NULL, "NVML reports %u GPUs", c);
	cs_nvml_gpu *g = calloc(c, sizeof(*g));
	if (!g)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	for (unsigned i = 0; i < c; i++)
		read_gpu(n, i, &g[i]);
	*gpus = g;
	*count = c;
	return 0;
}

void cs_nvml_list(cs_nvml_gpu **gpus, size_t *count)
{
	_cleanup_(cs_nvml_closep) cs_nvml *n = NULL;
	cs_nvml_open(&n, NULL);
	if (cs_nvml_gpus(n, gpus, count, NULL) < 0) {
		*gpus = NULL;
		*count = 0;
	}
}

/* Adds the GPU memory NVML reports for each process of one GPU into *out.
 * Returns 1 when NVML answered for the GPU, 0 when not, or -ENOMEM. */
static int add_procs(cs_nvml *n, nvml_device dev, cs_nvml_proc **out, size_t *count, size_t *cap)
{
	unsigned c = 64;
	_cleanup_free_ nvml_proc_info *v = NULL;
	nvml_ret ret;
	for (int tries = 0; tries < 4; tries++) {
		free(v);
		v = calloc(c, sizeof(*v));
		if (!v)
			return -ENOMEM;
		unsigned got = c;
		ret = n->procs(dev, &got, v);
		c = ret == NVML_ERR_INSUFFICIENT_SIZE ? got + 16 : got;
		if (ret != NVML_ERR_INSUFFICIENT_SIZE)
			break;
	}
	if (ret != NVML_OK)
		return 0; /* unknown for this GPU: processes keep 0 */
	for (unsigned i = 0; i < c; i++) {
		size_t k = 0;
		while (k < *count && (*out)[k].pid != (pid_t)v[i].pid)
			k++;
		if (k == *count) {
			if (cs_grow(out, cap, *count + 1, sizeof(**out)) < 0)
				return -ENOMEM;
			(*out)[(*count)++] = (cs_nvml_proc){ .pid = (pid_t)v[i].pid };
		}
		/* Listed without a figure (no permission to read it, some
		 * drivers under MIG): it holds memory, how much is unknown. */
		if (v[i].used == NVML_NOT_AVAILABLE)
			(*out)[k].unknown = true;
		else
			(*out)[k].bytes += v[i].used;
	}
	return 1;
}

/* NVML's list of one GPU's processes into *v (malloc'd), *c of them; the
 * NVML result. */
static nvml_ret list_procs(cs_nvml *n, nvml_device dev, nvml_proc_info **v, unsigned *c)
{
	unsigned cap = 64;
	nvml_ret ret = NVML_ERR_INSUFFICIENT_SIZE;
	*v = NULL;
	for (int tries = 0; tries < 4 && ret == NVML_ERR_INSUFFICIENT_SIZE; tries++) {
		free(*v);
		*v = calloc(cap, sizeof(**v));
		if (!*v)
			return NVML_ERR_INSUFFICIENT_SIZE;
		unsigned got = cap;
		ret = n->procs(dev, &got, *v);
		cap = ret == NVML_ERR_INSUFFICIENT_SIZE ? got + 16 : got;
	}
	*c = cap;
	return ret;
}

int cs_nvml_holders(cs_nvml *n, unsigned idx, cs_nvml_proc **out, size_t *count)
{
	*out = NULL;
	*count = 0;
	nvml_device dev = NULL;
	if (!cs_nvml_present(n) || !n->procs || n->by_index(idx, &dev) != NVML_OK)
		return -ENOENT;
	_cleanup_free_ nvml_proc_info *v = NULL;
	unsigned c = 0;
	if (list_procs(n, dev, &v, &c) != NVML_OK)
		return -EIO;
	cs_nvml_proc *p = calloc(c + 1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (unsigned i = 0; i < c; i++)
		p[i] = (cs_nvml_proc){ .pid = (pid_t)v[i].pid, .bytes = v[i].used };
	*out = p;
	*count = c;
	return 0;
}

bool cs_nvml_proc_list(cs_nvml_proc **out, size_t *count)
{
	*out = NULL;
	*count = 0;
	_cleanup_(cs_nvml_closep) cs_nvml *n = NULL;
	cs_nvml_open(&n, NULL);
	unsigned c = 0;
	size_t cap = 0;
	if (!cs_nvml_present(n) || !n->procs || n->count(&c) != NVML_OK)
		return false;
	bool all = true;
	for (unsigned i = 0; i < c && i < 1024; i++) {
		nvml_device dev = NULL;
		int r = n->by_index(i, &dev) == NVML_OK ? add_procs(n, dev, out, count, &cap) : 0;
		if (r < 0)
			return false;
		all &= r == 1;
	}
	return all;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int cs_gpu_uuid_parse(const char *s, uint8_t out[16])
{
	/* Where the dashes sit after "GPU-": 8-4-4-4-12 hex digits. */
	static const unsigned char dash[36] = { [8] = 1, [13] = 1, [18] = 1, [23] = 1 };
	uint8_t b[16];
	if (!s || strncmp(s, "GPU-", 4) != 0)
		return -EINVAL;
	s += 4;
	size_t nb = 0;
	for (size_t i = 0; i < 36; i++) {
		if (dash[i]) {
			if (s[i] != '-')
				return -EINVAL;
			continue;
		}
		int hi = hex_digit(s[i]);
		int lo = hi < 0 ? -1 : hex_digit(s[i + 1]);
		if (lo < 0)
			return -EINVAL;
		b[nb++] = (uint8_t)(hi << 4 | lo);
		i++;
	}
	if (s[36] != '\0' || nb != 16)
		return -EINVAL;
	memcpy(out, b, sizeof(b));
	return 0;
}

void cs_gpu_uuid_format(const uint8_t in[16], char out[CS_GPU_UUID_STRLEN])
{
	static const char hex[] = "0123456789abcdef";
	char *p = out;
	memcpy(p, "GPU-", 4);
	p += 4;
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		*p++ = hex[in[i] >> 4];
		*p++ = hex[in[i] & 0xf];
	}
	*p = '\0';
}
