/* The report of cudasnap doctor: its checks and lists. The checks of the
 * environment (doctor.c) and of each process (doctor_proc.c) both add to it,
 * so it lives apart from both. */
#include "doctor.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PASS = CS_CHECK_PASS };

const char *cs_check_status_name(int status)
{
	static const char *const names[] = { "pass", "warn", "fail" };
	return status >= 0 && status <= 2 ? names[status] : "unknown";
}

void cs_doctor_add(cs_doctor_report *r, const char *name, int status, pid_t pid, const char *fix, const char *fmt, ...)
{
	if (cs_grow(&r->checks, &r->cap, r->nchecks + 1, sizeof(*r->checks)) < 0) {
		r->oom = true;
		return;
	}
	cs_check *c = &r->checks[r->nchecks++];
	memset(c, 0, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->status = status;
	c->pid = pid;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->message, sizeof(c->message), fmt, ap);
	va_end(ap);
	snprintf(c->fix, sizeof(c->fix), "%s", fix && status != PASS ? fix : "");
	r->counts[status]++;
}

void cs_doctor_list_add(char *buf, size_t size, const char *fmt, ...)
{
	size_t n = strlen(buf);
	if (n && n + 2 < size) {
		memcpy(buf + n, ", ", 3);
		n += 2;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + n, size - n, fmt, ap);
	va_end(ap);
}

void cs_doctor_report_free(cs_doctor_report *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nprocs; i++)
		free(r->procs[i].visible);
	free(r->procs);
	for (size_t i = 0; i < r->nsettings; i++)
		free(r->settings[i].value);
	free(r->checks);
	free(r->gpus);
	free(r->history_last);
	memset(r, 0, sizeof(*r));
}
