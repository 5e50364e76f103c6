#include "cudasnap.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 5, 0))) static int vset(cs_error *err, int status, int errnum, const char *hint,
						      const char *fmt, va_list ap)
{
	if (!err)
		return -status;
	err->status = status;
	err->cu = 0;
	err->sys = errnum;
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	if (errnum) {
		size_t n = strlen(err->message);
		snprintf(err->message + n, sizeof(err->message) - n, ": %s", strerror(errnum));
	}
	snprintf(err->hint, sizeof(err->hint), "%s", hint ? hint : "");
	return -status;
}

int cs_error_set(cs_error *err, int status, const char *hint, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vset(err, status, 0, hint, fmt, ap);
	va_end(ap);
	return r;
}

int cs_error_errno(cs_error *err, int status, int errnum, const char *hint, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vset(err, status, errnum < 0 ? -errnum : errnum, hint, fmt, ap);
	va_end(ap);
	return r;
}

void cs_error_clear(cs_error *err)
{
	if (err)
		memset(err, 0, sizeof(*err));
}

const char *cs_status_name(int status)
{
	static const char *const names[] = {
		[CS_OK] = "ok",         [CS_EUSAGE] = "usage", [CS_EENV] = "environment", [CS_EDRIVER] = "driver",
		[CS_EPROC] = "process", [CS_ESYS] = "system",  [CS_ESTATE] = "state",     [CS_EINTR] = "interrupted",
	};
	if (status < 0)
		status = -status;
	if ((size_t)status < sizeof(names) / sizeof(names[0]) && names[status])
		return names[status];
	return "unknown";
}
