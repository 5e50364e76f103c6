/* txn_cli_parse, the options of checkpoint, restore, lock and unlock,
 * against a model of GNU getopt_long and of the options' documented values.
 * Input: one byte picks the command; the rest, split at NUL bytes, is argv
 * after the command name. Linked with cli_stub.c instead of src/main.c. */
#include "fuzz.h"
#include "txncli.h"

#include <getopt.h>
#include <limits.h>
#include <stdbool.h>

#define MAXARGS 64

typedef struct model {
	int ret;
	pid_t pids[MAXARGS], trees[MAXARGS];
	size_t npids, ntrees;
	const char *cgroup, *device_map, *park_to;
	unsigned timeout_ms, jobs, step_timeout_s, wait_memory_s;
	bool sequential, json, strict, no_init, ignore_manifest, dry_run, ignore_memory, allow_unrestorable, all,
		no_park, ignore_gpu_memory, park_keep;
} model;

typedef struct opt {
	const char *name;
	char shortname;
	bool arg;
	int ops; /* bit per cs_op that has it */
} opt;

#define ALL 0xf
static const opt opts[] = {
	{ "pid", 'p', true, ALL },
	{ "tree", 0, true, ALL },
	{ "cgroup", 0, true, ALL },
	{ "timeout", 't', true, ALL },
	{ "step-timeout", 0, true, ALL },
	{ "jobs", 'j', true, ALL },
	{ "sequential", 0, false, ALL },
	{ "json", 0, false, ALL },
	{ "help", 'h', false, ALL },
	{ "strict", 0, false, 1 << CS_OP_CHECKPOINT },
	{ "device-map", 'd', true, 1 << CS_OP_RESTORE },
	{ "no-init", 0, false, 1 << CS_OP_RESTORE },
	{ "ignore-manifest", 0, false, 1 << CS_OP_RESTORE },
	{ "dry-run", 0, false, 1 << CS_OP_CHECKPOINT | 1 << CS_OP_RESTORE },
	{ "ignore-memory", 0, false, 1 << CS_OP_CHECKPOINT },
	{ "allow-unrestorable", 0, false, 1 << CS_OP_CHECKPOINT },
	{ "all", 0, false, 1 << CS_OP_CHECKPOINT | 1 << CS_OP_LOCK },
	{ "no-park", 0, false, 1 << CS_OP_CHECKPOINT },
	{ "wait-memory", 0, true, 1 << CS_OP_RESTORE },
	{ "ignore-gpu-memory", 0, false, 1 << CS_OP_RESTORE },
	{ "park-to", 0, true, 1 << CS_OP_CHECKPOINT },
	{ "keep", 0, false, 1 << CS_OP_RESTORE },
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

/* A strict decimal (one leading '-' allowed) within [min, max]. */
static bool number(const char *s, long long min, long long max, long long *out)
{
	bool neg = *s == '-';
	s += neg;
	if (!*s)
		return false;
	long long v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		if (v <= (long long)INT_MAX * 10)
			v = v * 10 + (*s - '0');
	}
	v = neg ? -v : v;
	if (v < min || v > max)
		return false;
	*out = v;
	return true;
}

/* Applies one option; false when its value is refused. */
static bool apply(model *m, const opt *o, const char *val)
{
	long long v;
	const char *n = o->name;
	if (!strcmp(n, "pid") || !strcmp(n, "tree")) {
		if (!number(val, 1, INT_MAX, &v))
			return false;
		if (n[0] == 'p')
			m->pids[m->npids++] = (pid_t)v;
		else
			m->trees[m->ntrees++] = (pid_t)v;
	} else if (!strcmp(n, "cgroup")) {
		if (val[0] != '/')
			return false;
		m->cgroup = val;
	} else if (!strcmp(n, "timeout")) {
		if (!number(val, 0, INT_MAX, &v))
			return false;
		m->timeout_ms = (unsigned)v;
	} else if (!strcmp(n, "step-timeout")) {
		if (!number(val, 1, 86400, &v))
			return false;
		m->step_timeout_s = (unsigned)v;
	} else if (!strcmp(n, "jobs")) {
		if (!number(val, 1, 1024, &v))
			return false;
		m->jobs = (unsigned)v;
	} else if (!strcmp(n, "wait-memory")) {
		if (!number(val, 0, CS_WAIT_MEMORY_MAX, &v))
			return false;
		m->wait_memory_s = (unsigned)v;
	} else if (!strcmp(n, "device-map")) {
		m->device_map = val;
	} else if (!strcmp(n, "park-to")) {
		m->park_to = val;
	} else {
		bool *flag = !strcmp(n, "sequential")    ? &m->sequential :
			!strcmp(n, "json")               ? &m->json :
			!strcmp(n, "strict")             ? &m->strict :
			!strcmp(n, "no-init")            ? &m->no_init :
			!strcmp(n, "dry-run")            ? &m->dry_run :
			!strcmp(n, "ignore-memory")      ? &m->ignore_memory :
			!strcmp(n, "allow-unrestorable") ? &m->allow_unrestorable :
			!strcmp(n, "all")                ? &m->all :
			!strcmp(n, "no-park")            ? &m->no_park :
			!strcmp(n, "ignore-gpu-memory")  ? &m->ignore_gpu_memory :
			!strcmp(n, "keep")               ? &m->park_keep :
							   &m->ignore_manifest;
		*flag = true;
	}
	return true;
}

/* An exact name, or a prefix of exactly one (getopt_long's abbreviations). */
static const opt *find_long(cs_op op, const char *name, size_t len)
{
	const opt *hit = NULL;
	for (size_t i = 0; i < NOPTS; i++)
		if ((opts[i].ops >> op & 1) && strlen(opts[i].name) == len && !strncmp(opts[i].name, name, len))
			return &opts[i];
	for (size_t i = 0; i < NOPTS; i++) {
		if (!(opts[i].ops >> op & 1) || strncmp(opts[i].name, name, len) != 0)
			continue;
		if (hit)
			return NULL;
		hit = &opts[i];
	}
	return hit;
}

static const opt *find_short(cs_op op, char c)
{
	for (size_t i = 0; c && i < NOPTS; i++)
		if ((opts[i].ops >> op & 1) && opts[i].shortname == c)
			return &opts[i];
	return NULL;
}

/* Runs one option with its value; returns -1 to go on or the exit status. */
static int take(model *m, const opt *o, const char *val)
{
	if (!strcmp(o->name, "help"))
		return EXIT_DONE;
	return apply(m, o, val) ? -1 : EXIT_USAGE;
}

static int run_model(model *m, cs_op op, int argc, char **argv)
{
	m->timeout_ms = 10000;
	size_t nonopts = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int r = -1;
		if (!strcmp(a, "--")) {
			nonopts += (size_t)(argc - i - 1);
			break;
		}
		if (a[0] != '-' || a[1] == '\0') {
			nonopts++;
		} else if (a[1] == '-') {
			const char *eq = strchr(a + 2, '=');
			const opt *o = find_long(op, a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
			if (!o || (!o->arg && eq) || (o->arg && !eq && i + 1 >= argc))
				return EXIT_USAGE;
			r = take(m, o, !o->arg ? NULL : eq ? eq + 1 : argv[++i]);
		} else {
			for (const char *c = a + 1; *c && r < 0; c++) {
				const opt *o = find_short(op, *c);
				if (!o || (o->arg && !c[1] && i + 1 >= argc))
					return EXIT_USAGE;
				if (!o->arg) {
					r = take(m, o, NULL);
					continue;
				}
				r = take(m, o, c[1] ? c + 1 : argv[++i]);
				break;
			}
		}
		if (r >= 0)
			return r;
	}
	/* --all is every process: it goes with no selection; --park-to parks, which --no-park does not */
	return nonopts || (m->park_to && m->no_park) || (m->all && (m->npids || m->ntrees || m->cgroup)) ? EXIT_USAGE :
													   -1;
}

static void quiet_usage(FILE *f)
{
	(void)f;
}

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = { "checkpoint", "restore", "lock", "unlock" };
	if (size < 1)
		return 0;
	cs_op op = (cs_op)(data[0] % 4);
	char *text = fuzz_copy(data + 1, size - 1, 1);
	char *argv[MAXARGS + 2], *orig[MAXARGS + 2];
	int argc = 0;
	argv[argc++] = (char *)names[op];
	for (size_t at = 0; at < size - 1 && argc <= MAXARGS; argc++) {
		argv[argc] = text + at;
		at += strlen(text + at) + 1;
	}
	argv[argc] = NULL;
	memcpy(orig, argv, sizeof(argv));

	model m = { 0 };
	int want = run_model(&m, op, argc, orig);

	txn_cli c = { .cmd = names[op], .op = op, .usage = quiet_usage };
	optind = 0; /* a full reset of getopt's state */
	opterr = 0;
	int got = txn_cli_parse(&c, argc, argv);
	if (got != want)
		fprintf(stderr, "%s: parse %d, model %d\n", names[op], got, want);
	FUZZ_CHECK(got == want);
	if (got == -1) {
		FUZZ_CHECK(c.sel.npids == m.npids && c.sel.ntrees == m.ntrees);
		FUZZ_CHECK(!m.npids || !memcmp(c.sel.pids, m.pids, m.npids * sizeof(pid_t)));
		FUZZ_CHECK(!m.ntrees || !memcmp(c.sel.trees, m.trees, m.ntrees * sizeof(pid_t)));
		FUZZ_CHECK(same_str(c.sel.cgroup, m.cgroup) && same_str(c.device_map, m.device_map));
		FUZZ_CHECK(c.timeout_ms == m.timeout_ms && c.jobs == m.jobs && c.step_timeout_s == m.step_timeout_s);
		FUZZ_CHECK(c.sequential == m.sequential && c.json == m.json && c.strict == m.strict);
		FUZZ_CHECK(c.no_init == m.no_init && c.ignore_manifest == m.ignore_manifest);
		FUZZ_CHECK(c.dry_run == m.dry_run && c.ignore_memory == m.ignore_memory);
		FUZZ_CHECK(c.allow_unrestorable == m.allow_unrestorable && c.all == m.all);
		FUZZ_CHECK(c.no_park == m.no_park && c.ignore_gpu_memory == m.ignore_gpu_memory);
		FUZZ_CHECK(c.wait_memory_s == m.wait_memory_s);
		FUZZ_CHECK(same_str(c.park_to, m.park_to) && c.park_keep == m.park_keep);
	}
	txn_cli_free(&c);
	free(text);
	return 0;
}
