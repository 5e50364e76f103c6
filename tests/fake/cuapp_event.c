#include <stdio.h>
#include <string.h>

#include "cuapp.h"

static int load(struct cu *cu)
{
	return cuapp_resolve(cu->get, "cuEventCreate", &cu->event_create) |
		cuapp_resolve(cu->get, "cuEventRecord", &cu->event_record) |
		cuapp_resolve(cu->get, "cuEventSynchronize", &cu->event_sync) |
		cuapp_resolve(cu->get, "cuEventQuery", &cu->event_query) |
		cuapp_resolve(cu->get, "cuStreamWaitEvent", &cu->stream_wait) |
		cuapp_resolve(cu->get, "cuIpcGetEventHandle", &cu->ipc_event_get) |
		cuapp_resolve(cu->get, "cuIpcOpenEventHandle", &cu->ipc_event_open);
}

int cuapp_event_export(struct cuapp *app, FILE *f)
{
	struct cu *cu = &app->cu;
	CUipcEventHandle h;
	if (load(cu) != 0 ||
	    cuapp_failed(cu, cu->event_create(&app->event, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS),
			 "cuEventCreate") ||
	    cuapp_failed(cu, cu->event_record(app->event, NULL), "cuEventRecord") ||
	    cuapp_failed(cu, cu->ipc_event_get(&h, app->event), "cuIpcGetEventHandle"))
		return -1;
	return cuapp_write_handle(f, h.reserved);
}

int cuapp_event_import(struct cuapp *app)
{
	struct cu *cu = &app->cu;
	CUipcEventHandle h;
	if (load(cu) != 0 || cuapp_read_handle(app->ipc_import, 1, h.reserved) != 0) {
		fprintf(stderr, "fakecuda-cuapp: no event handle in %s\n", app->ipc_import);
		return -1;
	}
	if (cuapp_failed(cu, cu->ipc_event_open(&app->event, h), "cuIpcOpenEventHandle") ||
	    cuapp_failed(cu, cu->stream_wait(NULL, app->event, 0), "cuStreamWaitEvent"))
		return -1;
	return 0;
}

/* The exporter records and waits; the importer's stream waits on it. */
int cuapp_event_verify(struct cuapp *app, char *why, size_t len)
{
	struct cu *cu = &app->cu;
	CUresult rc;
	const char *what;
	if (app->ipc_export) {
		what = "cuEventRecord";
		rc = cu->event_record(app->event, NULL);
		if (rc == CU_OK) {
			what = "cuEventSynchronize";
			rc = cu->event_sync(app->event);
		}
	} else {
		what = "cuStreamWaitEvent";
		rc = cu->stream_wait(NULL, app->event, 0);
	}
	if (rc == CU_OK) {
		what = "cuEventQuery";
		rc = cu->event_query(app->event);
		rc = rc == 600 ? CU_OK : rc; /* not ready yet is an answer */
	}
	if (rc != CU_OK)
		snprintf(why, len, "%s -> %d", what, rc);
	return rc == CU_OK ? 0 : -1;
}
