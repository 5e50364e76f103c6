/* The shape of untrusted JSON text, counted before json-c parses it: each
 * object json-c builds costs it most of a KiB (a hash table of 16 slots),
 * so a 16 MiB file of "{}," would cost gigabytes. A caller refuses text
 * with more than its largest legitimate instance has. */
#include "json.h"

void cs_json_shape_of(const char *buf, size_t len, cs_json_shape *out)
{
	*out = (cs_json_shape){ 0 };
	bool in_string = false;
	for (size_t i = 0; i < len; i++) {
		char c = buf[i];
		if (in_string) {
			if (c == '\\')
				i++; /* the escaped byte (a \uXXXX's digits are no quote) */
			else if (c == '"')
				in_string = false;
			continue;
		}
		switch (c) {
		case '"': in_string = true; break;
		case '{': out->objects++; break;
		case '[': out->arrays++; break;
		case ',': out->commas++; break;
		default: break;
		}
	}
}

bool cs_json_shape_within(const cs_json_shape *s, const cs_json_shape *max)
{
	return s->objects <= max->objects && s->arrays <= max->arrays && s->commas <= max->commas;
}
