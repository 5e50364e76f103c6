/* cs_manifest_parse over arbitrary bytes (exactly the input, with no
 * terminator after it), and the round trip: what a parsed manifest says,
 * rendered by cs_manifest_render and parsed again, comes back the same (its
 * GPUs standing for this machine's NVML list, of which the render keeps
 * those the processes saw). */
#include "fuzz.h"
#include "json.h"
#include "manifest.h"
#include "nvml.h"
#include "utf8check.h"

#include <ctype.h>
#include <stdbool.h>

/* JSON text (RFC 8259) is UTF-8, here one object surrounded by whitespace
 * only: no comment, and no raw NUL byte anywhere. */
static bool looks_like_one_object(const char *buf, size_t len)
{
	if (!cs_check_utf8(buf, len, true))
		return false;
	size_t a = 0, b = len;
	while (a < b && strchr(" \t\r\n", buf[a]) && buf[a])
		a++;
	while (b > a && strchr(" \t\r\n", buf[b - 1]) && buf[b - 1])
		b--;
	return b - a >= 2 && buf[a] == '{' && buf[b - 1] == '}' && !memchr(buf, '\0', len);
}

static void check_entries(const cs_manifest *m)
{
	FUZZ_CHECK(m->version == 1);
	for (size_t i = 0; i < m->n; i++) {
		const cs_manifest_entry *e = &m->e[i];
		FUZZ_CHECK(e->pid >= 1 && e->order >= 0);
		size_t cl = strnlen(e->comm, sizeof(e->comm)),
		       vl = strnlen(e->visible_devices, sizeof(e->visible_devices));
		FUZZ_CHECK(cl < sizeof(e->comm) && vl < sizeof(e->visible_devices));
		FUZZ_CHECK(cs_check_utf8_clean(e->comm, cl));
		FUZZ_CHECK(cs_check_utf8_clean(e->visible_devices, vl));
		FUZZ_CHECK(e->nspid >= 0 && strnlen(e->gpus, sizeof(e->gpus)) < sizeof(e->gpus));
		/* Only UUIDs, lowercase, comma-separated. */
		for (const char *g = e->gpus; *g; g += *g == ',')
			for (size_t k = 0; k < 40; k++, g++)
				FUZZ_CHECK(k == 0        ? *g == 'G' :
						   k < 4 ? *g == "GPU-"[k] :
						   (k == 12 || k == 17 || k == 22 || k == 27) ?
							   *g == '-' :
							   isxdigit((unsigned char)*g) && !isupper((unsigned char)*g));
	}
}

static void check_gpus(const cs_manifest *m)
{
	FUZZ_CHECK(m->gpus_known || (m->ngpus == 0 && m->gpus == NULL));
	FUZZ_CHECK(m->ngpus <= CS_MANIFEST_GPUS_MAX);
	FUZZ_CHECK(strnlen(m->cudasnap_version, sizeof(m->cudasnap_version)) < sizeof(m->cudasnap_version));
	FUZZ_CHECK(cs_check_utf8_clean(m->cudasnap_version, strlen(m->cudasnap_version)));
	for (size_t k = 0; k < m->ngpus; k++) {
		uint8_t u[16];
		FUZZ_CHECK(cs_gpu_uuid_parse(m->gpus[k].uuid, u) == 0);
		FUZZ_CHECK(strnlen(m->gpus[k].name, sizeof(m->gpus[k].name)) < sizeof(m->gpus[k].name));
		FUZZ_CHECK(cs_check_utf8_clean(m->gpus[k].name, strlen(m->gpus[k].name)));
		FUZZ_CHECK(m->gpus[k].memory_total <= CS_GPU_BYTES_MAX);
	}
}

static bool entry_saw(const cs_manifest_entry *e, const char *uuid)
{
	for (const char *g = e->gpus; *g; g += strcspn(g, ",") + (g[strcspn(g, ",")] == ','))
		if (strncmp(g, uuid, strlen(uuid)) == 0)
			return true;
	return false;
}

/* What the render of m's entries (reversed: rendered newest-last) lists as
 * its GPUs: m's own that an entry saw, then the other UUIDs the entries name,
 * unnamed. */
static size_t expected_gpus(const cs_manifest *m, cs_manifest_gpu *out)
{
	size_t n = 0;
	for (size_t k = 0; k < m->ngpus; k++)
		for (size_t i = 0; i < m->n; i++)
			if (entry_saw(&m->e[i], m->gpus[k].uuid)) {
				out[n++] = m->gpus[k];
				break;
			}
	for (size_t i = m->n; i-- > 0;)
		for (const char *g = m->e[i].gpus; *g; g += strcspn(g, ",") + (g[strcspn(g, ",")] == ',')) {
			bool listed = false;
			for (size_t k = 0; k < n && !listed; k++)
				listed = strncmp(out[k].uuid, g, 40) == 0;
			if (!listed) {
				out[n] = (cs_manifest_gpu){ 0 };
				snprintf(out[n++].uuid, sizeof(out[0].uuid), "%.40s", g);
			}
		}
	return n;
}

static void check_gpus_back(const cs_manifest *m, const cs_manifest *back)
{
	size_t most = m->ngpus + m->n * 16 + 1;
	cs_manifest_gpu *want = calloc(most, sizeof(*want));
	if (!want)
		abort();
	size_t n = expected_gpus(m, want);
	FUZZ_CHECK(back->gpus_known && back->ngpus == n);
	FUZZ_CHECK(strcmp(back->cudasnap_version, CUDASNAP_VERSION) == 0);
	for (size_t k = 0; k < n; k++) {
		FUZZ_CHECK(strcmp(back->gpus[k].uuid, want[k].uuid) == 0);
		FUZZ_CHECK(strcmp(back->gpus[k].name, want[k].name) == 0);
		FUZZ_CHECK(back->gpus[k].memory_total == want[k].memory_total);
	}
	free(want);
}

/* m's GPUs as NVML would list them. */
static cs_nvml_gpu *as_nvml(const cs_manifest *m)
{
	cs_nvml_gpu *g = calloc(m->ngpus + 1, sizeof(*g));
	if (!g)
		abort();
	for (size_t k = 0; k < m->ngpus; k++) {
		g[k].index = (unsigned)k;
		snprintf(g[k].uuid, sizeof(g[k].uuid), "%s", m->gpus[k].uuid);
		snprintf(g[k].name, sizeof(g[k].name), "%s", m->gpus[k].name);
		g[k].memory_total = m->gpus[k].memory_total;
		g[k].memory_known = m->gpus[k].memory_total > 0;
	}
	return g;
}

static void round_trip(const cs_manifest *m)
{
	cs_target *t = calloc(m->n ? m->n : 1, sizeof(*t));
	if (!t)
		abort();
	for (size_t i = 0; i < m->n; i++) {
		const cs_manifest_entry *e = &m->e[i];
		t[i] = (cs_target){ .pid = e->pid,
				    .nspid = e->nspid,
				    .start_time = e->start_time,
				    .bytes = e->bytes,
				    .state = CS_STATE_CHECKPOINTED };
		memcpy(t[i].comm, e->comm, sizeof(t[i].comm));
		memcpy(t[i].gpus, e->gpus, sizeof(t[i].gpus));
		memcpy(t[i].visible_devices, e->visible_devices, sizeof(t[i].visible_devices));
		t[i].done[CS_STEP_CHECKPOINT] = true;
		t[i].seq[CS_STEP_CHECKPOINT] = m->n - i; /* rendered newest-last: reversed */
	}
	cs_nvml_gpu *gpus = as_nvml(m);
	char *s = cs_manifest_render(t, m->n, NULL, 1.5, gpus, m->ngpus);
	FUZZ_CHECK(s != NULL);
	cs_manifest back;
	cs_error err = { 0 };
	int r = cs_manifest_parse(s, strlen(s), &back, &err);
	if (r < 0)
		fprintf(stderr, "%s\n%s\n", err.message, s);
	FUZZ_CHECK(r == 0 && back.n == m->n);
	for (size_t i = 0; i < m->n; i++) {
		const cs_manifest_entry *a = &m->e[m->n - 1 - i], *b = &back.e[i];
		FUZZ_CHECK(b->pid == a->pid && b->start_time == a->start_time && b->bytes == a->bytes);
		FUZZ_CHECK(b->bytes_known == (a->bytes > 0)); /* 0 unmeasured (no resident size after): null */
		FUZZ_CHECK(b->order == (int)i);
		FUZZ_CHECK(strcmp(b->comm, a->comm) == 0);
		FUZZ_CHECK(strcmp(b->visible_devices, a->visible_devices) == 0);
		FUZZ_CHECK(b->nspid == a->nspid && strcmp(b->gpus, a->gpus) == 0);
	}
	check_gpus_back(m, &back);
	cs_manifest_free(&back);
	free(s);
	free(t);
	free(gpus);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = fuzz_copy(data, size, 0);
	cs_manifest m;
	cs_error err = { 0 };
	int r = cs_manifest_parse(buf, size, &m, &err);
	if (r < 0) {
		FUZZ_CHECK(err.status == CS_ESTATE || err.status == CS_ESYS);
		FUZZ_CHECK(err.message[0] != '\0');
		FUZZ_CHECK(m.e == NULL && m.n == 0);
	} else {
		FUZZ_CHECK(r == 0);
		FUZZ_CHECK(looks_like_one_object(buf, size));
		/* Bounded before json-c saw it: the processes, and what the text holds. */
		cs_json_shape shape;
		cs_json_shape_of(buf, size, &shape);
		FUZZ_CHECK(m.n <= CS_MANIFEST_PROCS_MAX && shape.objects >= 1 + m.n);
		FUZZ_CHECK(shape.objects <= CS_MANIFEST_PROCS_MAX * (2 + CS_TARGET_GPUS) + CS_MANIFEST_GPUS_MAX + 16);
		FUZZ_CHECK(shape.arrays <= CS_MANIFEST_PROCS_MAX * 2 + 16);
		check_entries(&m);
		check_gpus(&m);
		round_trip(&m);
		cs_manifest_free(&m);
	}
	free(buf);
	return 0;
}
