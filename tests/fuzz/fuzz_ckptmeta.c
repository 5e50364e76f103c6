/* The engine's files beside CRIU's images (config.dump, spec.dump) from
 * arbitrary bytes: the first byte picks which parser reads the rest. What
 * is kept is sanitized text; what does not parse, or holds more JSON than
 * such a file has, leaves nothing. */
#include "ckptmeta.h"
#include "fuzz.h"
#include "json.h"
#include "utf8check.h"

#include <stdbool.h>

static void check_field(const char *s, size_t size)
{
	size_t len = strnlen(s, size);
	FUZZ_CHECK(len < size);
	FUZZ_CHECK(cs_check_utf8(s, len, false));
}

static bool parse(bool spec, const char *buf, size_t len, cs_ckpt_meta *m)
{
	return spec ? cs_ckpt_meta_spec(buf, len, m) : cs_ckpt_meta_config(buf, len, m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	char *buf = fuzz_copy(data + 1, size - 1, 0);
	cs_ckpt_meta m = { 0 };
	bool spec = data[0] & 1;
	bool ok = parse(spec, buf, size - 1, &m);
	if (!ok)
		FUZZ_CHECK(!cs_ckpt_meta_any(&m));
	/* What parses holds no more JSON than an engine's file has. */
	cs_json_shape shape;
	cs_json_shape_of(buf, size - 1, &shape);
	if (ok)
		FUZZ_CHECK(shape.objects <= 16384 && shape.arrays <= 16384 && shape.commas <= 131072);
	check_field(m.name, sizeof(m.name));
	check_field(m.id, sizeof(m.id));
	check_field(m.image, sizeof(m.image));
	check_field(m.k8s_container, sizeof(m.k8s_container));
	check_field(m.pod, sizeof(m.pod));
	check_field(m.pod_namespace, sizeof(m.pod_namespace));
	/* A second reading fills nothing new: the first value of each field stays. */
	cs_ckpt_meta again = m;
	FUZZ_CHECK(parse(spec, buf, size - 1, &again) == ok);
	FUZZ_CHECK(memcmp(&again, &m, sizeof(m)) == 0);
	free(buf);
	return 0;
}
