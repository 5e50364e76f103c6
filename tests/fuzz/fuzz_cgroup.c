/* cs_cgroup_matches against a reading of /proc/PID/cgroup by path
 * components. Input: the wanted cgroup path, a NUL byte, then the file's
 * text (a want that is not absolute gets a leading '/', as --cgroup only
 * takes absolute paths). */
#include "fuzz.h"
#include "select.h"

#include <stdbool.h>
#include <string.h>

#define MAXC 64

typedef struct comps {
	const char *p[MAXC];
	size_t n[MAXC];
	size_t count;
} comps;

/* Splits s[0..len) at every '/'; "/a/b" gives "", "a", "b". False when
 * there are too many components for this reference to judge. */
static bool split(const char *s, size_t len, comps *c)
{
	c->count = 0;
	for (size_t start = 0;;) {
		const char *slash = memchr(s + start, '/', len - start);
		size_t end = slash ? (size_t)(slash - s) : len;
		if (c->count == MAXC)
			return false;
		c->p[c->count] = s + start;
		c->n[c->count++] = end - start;
		if (!slash)
			return true;
		start = end + 1;
	}
}

static bool same(const char *a, size_t an, const char *b, size_t bn)
{
	return an == bn && memcmp(a, b, an) == 0;
}

/* Whether w[from..] (after a leading "") is a component prefix of p. */
static bool prefix(const comps *w, size_t from, const comps *p)
{
	size_t need = 1 + (w->count - from);
	if (p->count < need || p->n[0] != 0)
		return false;
	for (size_t i = from, k = 1; i < w->count; i++, k++)
		if (!same(w->p[i], w->n[i], p->p[k], p->n[k]))
			return false;
	return true;
}

/* Whether directory d names the hierarchy of the controller field ctl. */
static bool hierarchy_dir(const char *d, size_t dn, const char *ctl, size_t cn)
{
	if (cn == 0)
		return same(d, dn, "unified", 7);
	if (same(d, dn, ctl, cn))
		return true;
	size_t start = 0;
	for (size_t i = 0; i <= cn; i++) {
		if (i < cn && ctl[i] != ',')
			continue;
		const char *item = ctl + start;
		size_t in = i - start;
		if (in > 5 && strncmp(item, "name=", 5) == 0)
			item += 5, in -= 5;
		if (same(item, in, d, dn))
			return true;
		start = i + 1;
	}
	return false;
}

/* -1 when the reference cannot judge (too many components). */
static int reference(const char *text, size_t len, const char *want)
{
	size_t wlen = strlen(want);
	if (wlen >= 14 && strncmp(want, "/sys/fs/cgroup", 14) == 0 && (wlen == 14 || want[14] == '/')) {
		want += 14;
		wlen -= 14;
	}
	while (wlen > 1 && want[wlen - 1] == '/')
		wlen--;
	bool root = wlen == 0 || (wlen == 1 && want[0] == '/');
	comps w = { .count = 0 }, p = { .count = 0 };
	if (!root && !split(want, wlen, &w))
		return -1;
	int verdict = 0;
	for (size_t start = 0; start < len;) {
		const char *nl = memchr(text + start, '\n', len - start);
		size_t end = nl ? (size_t)(nl - text) : len;
		const char *line = text + start;
		size_t ll = end - start;
		start = end + 1;
		const char *c1 = memchr(line, ':', ll);
		const char *c2 = c1 ? memchr(c1 + 1, ':', ll - (size_t)(c1 + 1 - line)) : NULL;
		if (!c2)
			continue;
		if (root)
			return 1;
		const char *path = c2 + 1;
		if (!split(path, ll - (size_t)(path - line), &p))
			return -1;
		if (prefix(&w, 1, &p))
			verdict = 1;
		if (w.count >= 3 && hierarchy_dir(w.p[1], w.n[1], c1 + 1, (size_t)(c2 - c1 - 1)) && prefix(&w, 2, &p))
			verdict = 1;
	}
	return verdict;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t wn = nul ? (size_t)(nul - data) : size;
	size_t tn = nul ? size - wn - 1 : 0;
	char *want = calloc(wn + 2, 1);
	if (!want)
		abort();
	size_t at = 0;
	if (wn == 0 || data[0] != '/')
		want[at++] = '/';
	memcpy(want + at, data, wn);
	char *text = fuzz_copy(nul ? nul + 1 : data, tn, 0);
	bool got = cs_cgroup_matches(text, tn, want);
	int ref = reference(text, tn, want);
	if (ref >= 0 && got != (ref == 1))
		fprintf(stderr, "want '%s': got %d, reference %d\n", want, got, ref);
	FUZZ_CHECK(ref < 0 || got == (ref == 1));
	free(text);
	free(want);
	return 0;
}
