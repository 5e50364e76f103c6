/* A session's warning lines, through its caller's callback: the library
 * never prints. Every file of the session speaks through this one. */
#include "session_int.h"

#include <stdarg.h>
#include <stdio.h>

void cs_session_warn(const cs_session *s, const char *fmt, ...)
{
	if (!s->o->warn)
		return;
	char line[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	s->o->warn(s->o->warn_ctx, line);
}
