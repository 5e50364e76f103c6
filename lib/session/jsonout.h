/* JSON renderings of the library's objects, shared by the commands. */
#ifndef CS_JSONOUT_H
#define CS_JSONOUT_H

#include "json.h"

json_object *cs_json_driver(const cs_driver *d);
json_object *cs_json_proc(const cs_proc *p, const cs_driver *d);
/* [{"pid": 1, "error": "Permission denied"}, ...]: the processes a scan could not read. */
json_object *cs_json_unreadable(const cs_ptable *t);
struct cs_plan;
/* A plan (lib/session/plan.h): what an operation would do to each process. */
json_object *cs_json_plan(const struct cs_plan *p);

#endif
