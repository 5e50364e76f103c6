/* JSON helpers every layer may use: a null for what is not known, an
 * error, and printing (lib/base/json.h). */
#include "json.h"

#include <stdio.h>

void cs_json_add_int_or_null(json_object *o, const char *key, long long v, bool valid)
{
	json_object_object_add(o, key, valid ? json_object_new_int64(v) : NULL);
}

void cs_json_add_str_or_null(json_object *o, const char *key, const char *s)
{
	json_object_object_add(o, key, s ? json_object_new_string(s) : NULL);
}

json_object *cs_json_error(const cs_error *e)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "kind", json_object_new_string(cs_status_name(e->status)));
	json_object_object_add(o, "message", json_object_new_string(e->message));
	cs_json_add_str_or_null(o, "hint", e->hint[0] ? e->hint : NULL);
	cs_json_add_int_or_null(o, "cuda_result", e->cu, e->status == CS_EDRIVER);
	return o;
}

int cs_json_print(json_object *o)
{
	/* what a reader checks before it trusts the keys (an array is the
	 * history's, whose entries are kept as they were written) */
	if (json_object_is_type(o, json_type_object) && !json_object_object_get_ex(o, "schema_version", NULL))
		json_object_object_add(o, "schema_version", json_object_new_int(CS_JSON_SCHEMA));
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
	int r = printf("%s\n", s) < 0 ? -1 : 0;
	json_object_put(o);
	return fflush(stdout) == 0 ? r : -1;
}
