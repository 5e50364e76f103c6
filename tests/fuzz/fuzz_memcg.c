/* The parsers of lib/memcg.c on the same bytes, read as a value file, as
 * "key value" lines and as /proc/PID/cgroup, in a buffer of exactly the
 * input's length; each answer is checked against a plain reference. The
 * first bytes, read as a node's numbers, also go through the room
 * computation. */
#include "fuzz.h"
#include "memcg.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

/* Reference of cs_memcg_parse_value, by strtoull on a terminated copy (a
 * NUL byte in the text is no digit, and not its end either). */
static int ref_value(const char *s, size_t len, long long *out)
{
	while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\n'))
		len--;
	if (len == 3 && memcmp(s, "max", 3) == 0) {
		*out = -1;
		return 0;
	}
	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		if (!memchr("0123456789", s[i], 10))
			return -EINVAL;
	while (len > 1 && *s == '0')
		s++, len--;
	if (len > 20)
		return -EINVAL;
	char buf[21];
	memcpy(buf, s, len);
	buf[len] = '\0';
	errno = 0;
	unsigned long long v = strtoull(buf, NULL, 10);
	if (errno == ERANGE)
		return -EINVAL;
	*out = v >= (1ULL << 62) ? -1 : (long long)v;
	return 0;
}

static void check_value(const char *text, size_t size)
{
	long long got = 77, want = 77;
	int r = cs_memcg_parse_value(text, size, &got);
	int w = ref_value(text, size, &want);
	FUZZ_CHECK(r == w);
	FUZZ_CHECK(got == want);
	FUZZ_CHECK(got == 77 || got == -1 || (got >= 0 && got < (1LL << 62)));
}

/* The first line whose first field is key, or NULL; its value in *v, *vlen. */
static const char *ref_line(const char *text, size_t size, const char *key, const char **v, size_t *vlen)
{
	size_t kl = strlen(key);
	for (size_t at = 0; at < size;) {
		const char *line = text + at, *nl = memchr(line, '\n', size - at);
		size_t ll = nl ? (size_t)(nl - line) : size - at;
		at += ll + 1;
		if (ll > kl && memcmp(line, key, kl) == 0 && line[kl] == ' ') {
			size_t skip = kl;
			while (skip < ll && line[skip] == ' ')
				skip++;
			*v = line + skip;
			*vlen = ll - skip;
			return line;
		}
	}
	return NULL;
}

static void check_key(const char *text, size_t size, const char *key)
{
	long long got = 77, want = 77;
	const char *v;
	size_t vlen;
	int r = cs_memcg_parse_key(text, size, key, &got);
	int w = ref_line(text, size, key, &v, &vlen) ? ref_value(v, vlen, &want) : -ENOENT;
	FUZZ_CHECK(r == w);
	FUZZ_CHECK(got == want);
}

/* Whether some line "ID:CONTROLLERS:/..." lists memory among its controllers. */
static bool ref_has_v1(const char *text, size_t size)
{
	for (size_t at = 0; at < size;) {
		const char *line = text + at, *nl = memchr(line, '\n', size - at);
		size_t ll = nl ? (size_t)(nl - line) : size - at;
		at += ll + 1;
		const char *c1 = memchr(line, ':', ll);
		const char *c2 = c1 ? memchr(c1 + 1, ':', ll - (size_t)(c1 + 1 - line)) : NULL;
		if (!c2 || c2 + 1 >= line + ll || c2[1] != '/' || memchr(c2, '\0', (size_t)(line + ll - c2)))
			continue;
		for (const char *c = c1 + 1; c < c2;) {
			const char *comma = memchr(c, ',', (size_t)(c2 - c));
			const char *e = comma ? comma : c2;
			if (e - c == 6 && memcmp(c, "memory", 6) == 0)
				return true;
			c = e + 1;
		}
	}
	return false;
}

static void check_proc_cgroup(const char *text, size_t size)
{
	char big[4096], small[8];
	memset(big, 'x', sizeof(big));
	memset(small, 'x', sizeof(small));
	int v = cs_memcg_parse_proc_cgroup(text, size, big, sizeof(big));
	int vs = cs_memcg_parse_proc_cgroup(text, size, small, sizeof(small));
	FUZZ_CHECK(v >= 0 && v <= 2 && vs >= 0 && vs <= 2);
	FUZZ_CHECK(memchr(big, '\0', sizeof(big)) && memchr(small, '\0', sizeof(small)));
	if (!v) {
		FUZZ_CHECK(big[0] == '\0' && small[0] == '\0' && vs == 0);
		return;
	}
	size_t pl = strlen(big);
	FUZZ_CHECK(big[0] == '/' && !strchr(big, '\n'));
	FUZZ_CHECK(memmem(text, size, big, pl) != NULL);
	/* The memory controller's line wins wherever it is. */
	FUZZ_CHECK((v == 1) == ref_has_v1(text, size));
	/* A smaller buffer takes the same path, or none: never a cut one. */
	FUZZ_CHECK(vs == (pl < sizeof(small) ? v : 0));
	FUZZ_CHECK(vs ? strcmp(small, big) == 0 : small[0] == '\0');
}

static void check_room(const uint8_t *data, size_t size)
{
	long long f[8] = { 0 };
	memcpy(f, data, size < sizeof(f) ? size : sizeof(f));
	cs_memcg_node n = { .version = (int)(f[0] & 3),
			    .usage = f[1],
			    .inactive_file = f[2],
			    .max = f[3],
			    .high = f[4],
			    .swap_max = -1,
			    .memsw_max = f[5],
			    .memsw_usage = f[6],
			    .oom_kills = f[7] };
	const char *which = "x";
	long long limit = 77;
	long long room = cs_memcg_node_room(&n, &which, &limit);
	FUZZ_CHECK(room >= -1);
	FUZZ_CHECK((room < 0) == (which == NULL));
	FUZZ_CHECK(room < 0 ? limit == -1 : limit >= 0 && room <= limit);
	FUZZ_CHECK(room < 0 || limit == n.max || limit == n.high || limit == n.memsw_max);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Exactly size bytes: a parser that reads on finds no terminator. */
	char *text = fuzz_copy(data, size, 0);
	check_value(text, size);
	check_key(text, size, "oom_kill");
	check_key(text, size, "inactive_file");
	check_key(text, size, "total_inactive_file");
	check_proc_cgroup(text, size);
	check_room(data, size);
	free(text);
	return 0;
}
