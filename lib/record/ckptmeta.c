#include "ckptmeta.h"
#include "json.h"
#include "proc.h"

#include <limits.h>
#include <string.h>

/* More than an engine's files have (a Podman config.dump holds the
 * container's whole configuration, a few thousand values): text with more
 * is not parsed, so that its parse costs a bounded amount of memory. */
static const cs_json_shape meta_shape_max = { .objects = 16384, .arrays = 16384, .commas = 131072 };

/* One JSON object and nothing else, or NULL. */
static json_object *parse_object(const char *buf, size_t len)
{
	if (len > CS_CKPTMETA_MAX || len > INT_MAX || !cs_utf8_valid(buf, len))
		return NULL;
	cs_json_shape shape;
	cs_json_shape_of(buf, len, &shape);
	if (!cs_json_shape_within(&shape, &meta_shape_max))
		return NULL;
	_cleanup_(json_tokener_freep) json_tokener *tok = json_tokener_new_ex(64);
	if (!tok)
		return NULL;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	json_object *o = json_tokener_parse_ex(tok, buf, (int)len);
	size_t end = json_tokener_get_parse_end(tok);
	if (!o || json_tokener_get_error(tok) != json_tokener_success || !json_object_is_type(o, json_type_object) ||
	    (end < len && strspn(buf + end, " \t\r\n") != len - end)) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

/* A string member of o into dst (sanitized), when dst is still empty. */
static void take(json_object *o, const char *key, char *dst, size_t size)
{
	json_object *v;
	if (dst[0] || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return;
	cs_sanitize(dst, size, json_object_get_string(v), (size_t)json_object_get_string_len(v));
}

bool cs_ckpt_meta_config(const char *buf, size_t len, cs_ckpt_meta *m)
{
	_cleanup_(json_object_putp) json_object *o = parse_object(buf, len);
	if (!o)
		return false;
	take(o, "name", m->name, sizeof(m->name));
	take(o, "id", m->id, sizeof(m->id));
	take(o, "rootfsImageName", m->image, sizeof(m->image));
	return true;
}

bool cs_ckpt_meta_spec(const char *buf, size_t len, cs_ckpt_meta *m)
{
	_cleanup_(json_object_putp) json_object *o = parse_object(buf, len);
	json_object *a;
	if (!o)
		return false;
	if (!json_object_object_get_ex(o, "annotations", &a) || !json_object_is_type(a, json_type_object))
		return true;
	take(a, "io.kubernetes.container.name", m->k8s_container, sizeof(m->k8s_container));
	take(a, "io.kubernetes.cri.container-name", m->k8s_container, sizeof(m->k8s_container));
	take(a, "io.kubernetes.pod.name", m->pod, sizeof(m->pod));
	take(a, "io.kubernetes.cri.sandbox-name", m->pod, sizeof(m->pod));
	take(a, "io.kubernetes.pod.namespace", m->pod_namespace, sizeof(m->pod_namespace));
	take(a, "io.kubernetes.cri.sandbox-namespace", m->pod_namespace, sizeof(m->pod_namespace));
	return true;
}

bool cs_ckpt_meta_any(const cs_ckpt_meta *m)
{
	return m->name[0] || m->id[0] || m->image[0] || m->k8s_container[0] || m->pod[0] || m->pod_namespace[0];
}
