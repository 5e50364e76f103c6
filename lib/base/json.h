/* JSON helpers for every layer (lib/base/json.c), and the shape of
 * untrusted JSON text (lib/base/jsonshape.c). Renderings of the library
 * objects: lib/session/jsonout.h. */
#ifndef CS_JSON_H
#define CS_JSON_H

#include "cudasnap.h"
#include "util.h"

#include <json-c/json.h>

CS_DEFINE_CLEANUP(json_object, json_object_put)
CS_DEFINE_CLEANUP(json_tokener, json_tokener_free)

json_object *cs_json_error(const cs_error *e);
/* Adds key -> int, or null when !valid. */
void cs_json_add_int_or_null(json_object *o, const char *key, long long v, bool valid);
void cs_json_add_str_or_null(json_object *o, const char *key, const char *s);
/* What untrusted JSON text holds, counted outside its strings, before it
 * is parsed (lib/base/jsonshape.c). */
typedef struct cs_json_shape {
	size_t objects, arrays, commas;
} cs_json_shape;
void cs_json_shape_of(const char *buf, size_t len, cs_json_shape *out);
/* Whether s has no more of each than max. */
bool cs_json_shape_within(const cs_json_shape *s, const cs_json_shape *max);

/* The version of the JSON the commands print: a key added keeps it; a key
 * removed, renamed or given another meaning raises it. */
#define CS_JSON_SCHEMA 1

/* Prints o on stdout with a newline, and releases it; an object gets
 * "schema_version" (CS_JSON_SCHEMA). */
int cs_json_print(json_object *o);

#endif
