#include <stdio.h>
#include <stdlib.h>

#include "fakecuda.h"
#include "internal.h"
#include "settings.h"

CUresult cuDriverGetVersion(int *version)
{
	char buf[32];
	const char *env = fc_setting("FAKECUDA_DRIVER_VERSION", buf, sizeof(buf));
	if (version == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*version = env && *env ? atoi(env) : 13000;
	return CUDA_SUCCESS;
}

/* Runs f with the state lock held, once cuInit has succeeded. */
static CUresult with_devices(CUresult (*f)(void *), void *arg)
{
	pthread_mutex_lock(&fc_tgt.mu);
	CUresult rc = fc_tgt.levels & FC_LEVEL_CUDA ? f(arg) : CUDA_ERROR_NOT_INITIALIZED;
	pthread_mutex_unlock(&fc_tgt.mu);
	return rc;
}

static CUresult get_count(void *arg)
{
	*(int *)arg = fc_tgt.ndev;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
	return count ? with_devices(get_count, count) : CUDA_ERROR_INVALID_VALUE;
}

struct dev_query {
	int ordinal;
	CUuuid *uuid;
};

static CUresult check_ordinal(void *arg)
{
	const struct dev_query *q = arg;
	if (q->ordinal < 0 || q->ordinal >= fc_tgt.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	if (q->uuid)
		*q->uuid = fc_tgt.gpus.uuid[fc_tgt.map[q->ordinal]];
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	struct dev_query q = { ordinal, NULL };
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = with_devices(check_ordinal, &q);
	if (rc == CUDA_SUCCESS)
		*device = ordinal;
	return rc;
}

/* After a restore with a GPU map, an ordinal names the GPU it was mapped to. */
/* The GPU's own UUID, also under MIG. */
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device)
{
	struct dev_query q = { device, uuid };
	return uuid ? with_devices(check_ordinal, &q) : CUDA_ERROR_INVALID_VALUE;
}

/* Under MIG (FAKECUDA_MIG) a device is an instance of its GPU, and this
 * names the instance (a UUID of its own, derived from the GPU's). */
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device)
{
	CUresult rc = cuDeviceGetUuid(uuid, device);
	if (rc == CUDA_SUCCESS && fc_mig_mode())
		uuid->bytes[0] = (char)(uuid->bytes[0] ^ 0x5a);
	return rc;
}

CUresult fakecuda_current_gpu(char *buf, size_t len)
{
	CUuuid u;
	CUresult rc = cuDeviceGetUuid(&u, 0);
	if (rc == CUDA_SUCCESS && (buf == NULL || len < FAKECUDA_UUID_STRLEN))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		fc_uuid_format(&u, buf, len);
	return rc;
}
