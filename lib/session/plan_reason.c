/* The reasons of a plan's entries, and the plan's memory. */
#include "plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cs_plan_free(cs_plan *p)
{
	free(p->e);
	memset(p, 0, sizeof(*p));
}

cs_reason *cs_plan_add_reason(cs_plan_entry *e, const char *code, bool blocks, const char *fmt, ...)
{
	static __thread cs_reason spare;
	cs_reason *r = e->nreasons < CS_PLAN_REASONS ? &e->reason[e->nreasons++] : &spare;
	r->code = code;
	r->blocks = blocks;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->text, sizeof(r->text), fmt, ap);
	va_end(ap);
	r->fix[0] = '\0';
	return r;
}

void cs_plan_set_fix(cs_reason *r, const char *fix)
{
	snprintf(r->fix, sizeof(r->fix), "%s", fix);
}
