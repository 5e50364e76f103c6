#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"
#include "internal.h"

struct fc_error_text {
	CUresult code;
	const char *name;
	const char *text;
};

/* The texts are the ones the real driver's cuGetErrorString returns, since
 * callers quote them verbatim in their own error messages. */
static const struct fc_error_text error_texts[] = {
	{ 0, "CUDA_SUCCESS", "no error" },
	{ 1, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ 3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ 4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down" },
	{ 100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
	{ 101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ 201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
	{ 208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped" },
	{ 211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped" },
	{ 304, "CUDA_ERROR_OPERATING_SYSTEM",
	  "OS call failed or operation not supported on this OS" },
	{ 400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
	{ 401, "CUDA_ERROR_ILLEGAL_STATE",
	  "the operation cannot be performed in the present state" },
	{ 500, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	{ 600, "CUDA_ERROR_NOT_READY", "device not ready" },
	{ 712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	  "part or all of the requested memory range is already mapped" },
	{ 713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	  "pointer does not correspond to a registered memory region" },
	{ 800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted" },
	{ 801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
	{ 999, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

#define N_ERRORS (sizeof(error_texts) / sizeof(error_texts[0]))

static const struct fc_error_text *find_code(CUresult code)
{
	for (size_t i = 0; i < N_ERRORS; i++)
		if (error_texts[i].code == code)
			return &error_texts[i];
	return NULL;
}

CUresult cuGetErrorName(CUresult error, const char **str)
{
	const struct fc_error_text *e = find_code(error);
	if (str == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*str = e ? e->name : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **str)
{
	const struct fc_error_text *e = find_code(error);
	if (str == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*str = e ? e->text : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Fault files may name a result ("CUDA_ERROR_UNKNOWN") or give its number. */
int fc_error_parse(const char *s, CUresult *out)
{
	for (size_t i = 0; i < N_ERRORS; i++) {
		if (strcmp(s, error_texts[i].name) == 0) {
			*out = error_texts[i].code;
			return 0;
		}
	}
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < 0 || v > 100000)
		return -1;
	*out = (CUresult)v;
	return 0;
}
