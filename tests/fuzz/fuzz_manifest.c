/* cs_manifest_parse over arbitrary bytes (exactly the input, with no
 * terminator after it), and the round trip: what a parsed manifest says,
 * rendered by cs_manifest_render and parsed again, comes back the same. */
#include "fuzz.h"
#include "manifest.h"
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
	char *s = cs_manifest_render(t, m->n, NULL, 1.5);
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
		FUZZ_CHECK(b->order == (int)i);
		FUZZ_CHECK(strcmp(b->comm, a->comm) == 0);
		FUZZ_CHECK(strcmp(b->visible_devices, a->visible_devices) == 0);
		FUZZ_CHECK(b->nspid == a->nspid && strcmp(b->gpus, a->gpus) == 0);
	}
	cs_manifest_free(&back);
	free(s);
	free(t);
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
		check_entries(&m);
		round_trip(&m);
		cs_manifest_free(&m);
	}
	free(buf);
	return 0;
}
