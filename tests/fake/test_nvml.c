#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>

#include "gpus.h"
#include "nvml_api.h"
#include "test_util.h"

struct nvml {
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*shutdown)(void);
	nvmlReturn_t (*driver_version)(char *, unsigned int);
	nvmlReturn_t (*count)(unsigned int *);
	nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned int);
	nvmlReturn_t (*memory_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
	nvmlReturn_t (*minor)(nvmlDevice_t, unsigned int *);
};

static int load(void *h, struct nvml *n)
{
	*(void **)&n->init = dlsym(h, "nvmlInit_v2");
	*(void **)&n->shutdown = dlsym(h, "nvmlShutdown");
	*(void **)&n->driver_version = dlsym(h, "nvmlSystemGetDriverVersion");
	*(void **)&n->count = dlsym(h, "nvmlDeviceGetCount_v2");
	*(void **)&n->by_index = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	*(void **)&n->uuid = dlsym(h, "nvmlDeviceGetUUID");
	*(void **)&n->memory_v2 = dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
	*(void **)&n->minor = dlsym(h, "nvmlDeviceGetMinorNumber");
	return n->init && n->shutdown && n->driver_version && n->count && n->by_index &&
			       n->uuid && n->memory_v2 && n->minor
		       ? 0
		       : -1;
}

static void check_device(const struct nvml *n)
{
	char uuid[96];
	nvmlDevice_t dev = NULL;
	nvmlMemory_v2_t mem = { .version = nvmlMemory_v2 };
	check(n->by_index(0, &dev) == NVML_SUCCESS && n->uuid(dev, uuid, sizeof(uuid)) == 0 &&
		      strcmp(uuid, FC_DEFAULT_GPU) == 0,
	      "NVML: device 0 is %s", FC_DEFAULT_GPU);
	check(n->memory_v2(dev, &mem) == NVML_SUCCESS && mem.total == 141ull << 30 && mem.used == 0,
	      "NVML: 141 GiB total, none used");
	unsigned int minor = 9;
	nvmlReturn_t rc = n->minor(dev, &minor);
	check(rc == NVML_SUCCESS && minor == 0, "NVML: device 0 is /dev/nvidia0 (minor %u)", minor);
}

/* The NVML double sits next to the driver double it loads. */
void test_nvml(const struct env *e)
{
	char path[PATH_MAX], dir[PATH_MAX], version[96];
	unsigned int count = 0;
	struct nvml n;
	snprintf(dir, sizeof(dir), "%s", e->lib);
	snprintf(path, sizeof(path), "%s/libnvidia-ml.so.1", dirname(dir));
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL || load(h, &n) != 0) {
		const char *why = dlerror();
		check(0, "NVML double loads: %s", why ? why : "a symbol is missing");
		if (h)
			dlclose(h);
		return;
	}
	check(n.driver_version(version, sizeof(version)) == NVML_ERROR_UNINITIALIZED,
	      "NVML: calls before nvmlInit_v2 -> NVML_ERROR_UNINITIALIZED");
	check(n.init() == NVML_SUCCESS && n.driver_version(version, sizeof(version)) == 0 &&
		      strcmp(version, "580.159.04") == 0 && n.count(&count) == 0 && count == 1,
	      "NVML: driver 580.159.04, 1 GPU");
	check_device(&n);
	check(n.shutdown() == NVML_SUCCESS, "NVML: shutdown");
	dlclose(h);
}
