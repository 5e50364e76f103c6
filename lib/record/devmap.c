#include "devmap.h"
#include "util.h"

#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define HINT_MAP \
	"Write --device-map OLD=NEW,... with GPU UUIDs (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) " \
	"or GPU indices, one pair for every GPU the process can see; 'cudasnap doctor' lists the GPUs."

/* The GPU list a map is read against; syntax: any index stands for itself
 * (which GPU it names is checked at restore, against NVML's list). */
typedef struct gpu_list {
	const cs_nvml_gpu *gpus;
	size_t n;
	bool syntax;
} gpu_list;

static int side(const char *s, const gpu_list *l, uint8_t out[16], cs_error *err)
{
	const cs_nvml_gpu *gpus = l->gpus;
	size_t ngpus = l->n;
	if (cs_gpu_uuid_parse(s, out) == 0)
		return 0;
	long idx;
	if (cs_parse_long(s, 0, INT_MAX, &idx) < 0)
		return cs_error_set(err, CS_EUSAGE, HINT_MAP,
				    "--device-map: '%s' is neither a GPU UUID nor a GPU index", s);
	if (l->syntax) {
		/* Not a UUID's bytes (no UUID is all ones there): only told apart from other indices. */
		memset(out, 0xff, 16);
		memcpy(out, &idx, sizeof(idx));
		return 0;
	}
	for (size_t i = 0; i < ngpus; i++)
		if (gpus[i].index == (unsigned)idx && cs_gpu_uuid_parse(gpus[i].uuid, out) == 0)
			return 0;
	return cs_error_set(err, CS_EUSAGE,
			    ngpus ? HINT_MAP :
				    "GPU indices need NVML (libnvidia-ml.so.1); "
				    "give GPU UUIDs instead.",
			    "--device-map: there is no GPU %ld here", idx);
}

static int parse(const char *spec, const gpu_list *l, cs_gpu_pair **pairs, unsigned *npairs, cs_error *err)
{
	*pairs = NULL;
	*npairs = 0;
	_cleanup_free_ char *copy = strdup(spec);
	size_t cap = 1;
	for (const char *c = spec; *c; c++)
		cap += *c == ',';
	_cleanup_free_ cs_gpu_pair *v = calloc(cap, sizeof(*v));
	if (!copy || !v)
		return cs_error_set(err, CS_ESYS, NULL, "out of memory");
	unsigned n = 0;
	char *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq || strchr(eq + 1, '='))
			return cs_error_set(err, CS_EUSAGE, HINT_MAP, "--device-map: '%s' is not OLD=NEW", tok);
		*eq = '\0';
		int r = side(tok, l, v[n].old_uuid, err);
		if (r == 0)
			r = side(eq + 1, l, v[n].new_uuid, err);
		for (unsigned k = 0; r == 0 && k < n; k++)
			if (memcmp(v[k].old_uuid, v[n].old_uuid, 16) == 0)
				r = cs_error_set(err, CS_EUSAGE, HINT_MAP, "--device-map: GPU %s is mapped twice", tok);
		if (r < 0)
			return r;
		n++;
	}
	if (n == 0)
		return cs_error_set(err, CS_EUSAGE, HINT_MAP, "--device-map is empty");
	*pairs = TAKE_PTR(v);
	*npairs = n;
	return 0;
}

int cs_devmap_parse(const char *spec, const cs_nvml_gpu *gpus, size_t ngpus, cs_gpu_pair **pairs, unsigned *npairs,
		    cs_error *err)
{
	gpu_list l = { .gpus = gpus, .n = ngpus };
	return parse(spec, &l, pairs, npairs, err);
}

int cs_devmap_check(const char *spec, cs_error *err)
{
	gpu_list l = { .syntax = true };
	_cleanup_free_ cs_gpu_pair *pairs = NULL;
	unsigned n;
	return parse(spec, &l, &pairs, &n, err);
}

static bool mapped(const cs_gpu_pair *pairs, unsigned n, const char *uuid)
{
	uint8_t u[16];
	if (cs_gpu_uuid_parse(uuid, u) < 0)
		return false;
	for (unsigned i = 0; i < n; i++)
		if (memcmp(pairs[i].old_uuid, u, 16) == 0)
			return true;
	return false;
}

/* The GPU that one CUDA_VISIBLE_DEVICES entry names, or NULL: a decimal
 * index, or a prefix of exactly one GPU's UUID starting with "GPU-"; CUDA
 * ignores leading blanks. */
static const cs_nvml_gpu *visible_entry(const char *e, size_t len, const cs_nvml_gpu *gpus, size_t ngpus)
{
	while (len && isspace((unsigned char)*e))
		e++, len--;
	size_t digits = 0;
	while (digits < len && e[digits] >= '0' && e[digits] <= '9')
		digits++;
	if (len && digits == len) {
		unsigned long long idx = 0;
		for (size_t i = 0; i < len && idx <= UINT_MAX; i++)
			idx = idx * 10 + (unsigned long long)(e[i] - '0');
		for (size_t i = 0; i < ngpus; i++)
			if (gpus[i].index == idx)
				return &gpus[i];
		return NULL;
	}
	if (len < 4 || strncasecmp(e, "GPU-", 4) != 0)
		return NULL;
	const cs_nvml_gpu *found = NULL;
	for (size_t i = 0; i < ngpus; i++) {
		if (strnlen(gpus[i].uuid, sizeof(gpus[i].uuid)) < len || strncasecmp(gpus[i].uuid, e, len) != 0)
			continue;
		if (found)
			return NULL; /* ambiguous */
		found = &gpus[i];
	}
	return found;
}

size_t cs_visible_gpus(const char *visible, const cs_nvml_gpu *gpus, size_t ngpus, const cs_nvml_gpu **out, size_t max)
{
	size_t n = 0;
	if (!visible || !*visible) {
		for (; n < ngpus && n < max; n++)
			out[n] = &gpus[n];
		return n;
	}
	/* As CUDA reads the list: it ends at the first entry that names no GPU
	 * or one already named, and empty entries are skipped. */
	for (const char *e = visible; *e && n < max;) {
		size_t len = strcspn(e, ",");
		const cs_nvml_gpu *g = len ? visible_entry(e, len, gpus, ngpus) : NULL;
		e += len + (e[len] == ',');
		if (!len)
			continue;
		for (size_t k = 0; g && k < n; k++)
			if (out[k] == g)
				g = NULL;
		if (!g)
			break;
		out[n++] = g;
	}
	return n;
}

int cs_devmap_covers(const cs_gpu_pair *pairs, unsigned npairs, const char *visible, const cs_nvml_gpu *gpus,
		     size_t ngpus, const cs_target *t, cs_error *err)
{
	if (ngpus == 0)
		return 1;
	const cs_nvml_gpu *seen[64];
	size_t n = cs_visible_gpus(visible, gpus, ngpus, seen, CS_ARRAY_SIZE(seen));
	for (size_t i = 0; i < n; i++)
		if (!mapped(pairs, npairs, seen[i]->uuid))
			return cs_error_set(err, CS_EUSAGE, HINT_MAP,
					    "--device-map leaves out GPU %u (%s), which "
					    "process %d (%s) can see (%s%s)",
					    seen[i]->index, seen[i]->uuid, (int)t->pid, t->comm,
					    visible && *visible ? "CUDA_VISIBLE_DEVICES=" :
								  "it has no "
								  "CUDA_VISIBLE_DEVICES",
					    visible && *visible ? visible : "");
	return 0;
}

int cs_devmap_covers_recorded(const cs_gpu_pair *pairs, unsigned npairs, const cs_nvml_gpu *gpus, size_t ngpus,
			      const cs_target *t, cs_error *err)
{
	for (const char *g = t->gpus; *g;) {
		size_t len = strcspn(g, ",");
		char uuid[CS_NVML_UUID_SIZE], which[CS_NVML_UUID_SIZE + 24];
		snprintf(uuid, sizeof(uuid), "%.*s", (int)len, g);
		snprintf(which, sizeof(which), "%s", uuid);
		for (size_t i = 0; i < ngpus; i++)
			if (strcasecmp(gpus[i].uuid, uuid) == 0)
				snprintf(which, sizeof(which), "GPU %u (%s)", gpus[i].index, uuid);
		if (!mapped(pairs, npairs, uuid))
			return cs_error_set(err, CS_EUSAGE, HINT_MAP,
					    "--device-map leaves out %s, which process %d (%s) saw when it was "
					    "checkpointed",
					    which, (int)t->pid, t->comm);
		g += len + (g[len] == ',');
	}
	return 0;
}
