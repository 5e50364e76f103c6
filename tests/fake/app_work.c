#include <stdio.h>

#include "app.h"
#include "fakecuda.h"

/* Work runs off the main thread: a verify waits while the process is locked
 * or checkpointed, and the main thread must still see SIGTERM meanwhile. */

static int stopping(struct app *a)
{
	pthread_mutex_lock(&a->mu);
	int s = a->stopping;
	pthread_mutex_unlock(&a->mu);
	return s;
}

static void *kernel_main(void *arg)
{
	struct app *a = arg;
	while (!stopping(a) && fakecuda_kernel(a->o.kernel_ms) == CUDA_SUCCESS)
		;
	return NULL;
}

/* Our own memory, then the imported one (its exporter's data). */
static CUresult verify_memory(struct app *a, char *why, size_t len)
{
	char imp_why[200];
	CUresult rc = CUDA_SUCCESS;
	if (a->bytes > 0)
		rc = fakecuda_verify(a->dptr, a->bytes, a->seed, why, len);
	if (rc != CUDA_SUCCESS || a->imp_bytes == 0)
		return rc;
	rc = fakecuda_verify(a->imp_dptr, a->imp_bytes, a->imp_seed, imp_why, sizeof(imp_why));
	snprintf(why, len, "imported memory: %s", imp_why);
	return rc;
}

static void verify_once(struct app *a)
{
	char why[256], gpu[FAKECUDA_UUID_STRLEN], line[400], imported[48] = "";
	CUresult rc = verify_memory(a, why, sizeof(why));
	if (rc == CUDA_ERROR_DEINITIALIZED)
		return;
	if (rc == CUDA_SUCCESS && fakecuda_current_gpu(gpu, sizeof(gpu)) != CUDA_SUCCESS)
		snprintf(gpu, sizeof(gpu), "unknown");
	if (a->imp_bytes > 0)
		snprintf(imported, sizeof(imported), " imported=%zu", a->imp_bytes);
	if (rc == CUDA_SUCCESS)
		snprintf(line, sizeof(line), "ok bytes=%zu gpu=%s%s", a->bytes, gpu, imported);
	else
		snprintf(line, sizeof(line), "fail %s", why);
	app_write_verify(a, line);
}

static void *verify_main(void *arg)
{
	struct app *a = arg;
	pthread_mutex_lock(&a->mu);
	while (!a->stopping) {
		if (a->verify_requests == 0) {
			pthread_cond_wait(&a->cv, &a->mu);
			continue;
		}
		a->verify_requests--;
		pthread_mutex_unlock(&a->mu);
		verify_once(a);
		pthread_mutex_lock(&a->mu);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

int app_start_workers(struct app *a)
{
	if (pthread_create(&a->verify_thread, NULL, verify_main, a) != 0)
		return -1;
	a->have_verify = 1;
	if (a->o.kernel_ms == 0)
		return 0;
	/* queued before the ready file appears, so a test's first lock meets it */
	if (fakecuda_kernel(a->o.kernel_ms) != CUDA_SUCCESS)
		return -1;
	if (pthread_create(&a->kernel_thread, NULL, kernel_main, a) != 0)
		return -1;
	a->have_kernel = 1;
	return 0;
}

void app_request_verify(struct app *a)
{
	pthread_mutex_lock(&a->mu);
	a->verify_requests++;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

void app_stop_workers(struct app *a)
{
	pthread_mutex_lock(&a->mu);
	a->stopping = 1;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	fakecuda_shutdown();
	if (a->have_kernel)
		pthread_join(a->kernel_thread, NULL);
	if (a->have_verify)
		pthread_join(a->verify_thread, NULL);
	a->have_kernel = a->have_verify = 0;
}
