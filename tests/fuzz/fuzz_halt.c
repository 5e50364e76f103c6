/* The two parsers of lib/proc/halt.c on the same bytes, read both as
 * /proc/self/mountinfo and as /proc/PID/cgroup, in a buffer of exactly the
 * input's length. Checks: the mount strings end inside their buffers and a
 * mount is taken with its root or not at all; with no mounts nothing is
 * frozen; with mounts laid out under a scratch directory (each frozen at its
 * top), a yes names a file below the right mount and never a "/.." path. */
#include "fuzz.h"
#include "halt.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static cs_cgroup_mounts scratch;

static void remove_scratch(void)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/v2/cgroup.events", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/freezer/freezer.state", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/v2", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/freezer", dir);
	rmdir(path);
	rmdir(dir);
}

static void write_file(const char *sub, const char *name, const char *text)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	if (mkdir(path, 0700) < 0)
		abort();
	snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		abort();
}

/* Both mounts frozen at their top, so that any line that reaches them says
 * yes; the v1 mount shows a container's cgroup, so that its root is taken
 * off. Built once: replay.c has no initializer hook. */
static void init(void)
{
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp || strlen(tmp) >= 40)
		tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/cs-fuzz-XXXXXX", tmp);
	if (!mkdtemp(dir))
		abort();
	atexit(remove_scratch);
	write_file("v2", "cgroup.events", "populated 1\nfrozen 1\n");
	write_file("freezer", "freezer.state", "FROZEN\n");
	snprintf(scratch.v2, sizeof(scratch.v2), "%s/v2", dir);
	snprintf(scratch.v2_root, sizeof(scratch.v2_root), "/");
	snprintf(scratch.v1, sizeof(scratch.v1), "%s/freezer", dir);
	snprintf(scratch.v1_root, sizeof(scratch.v1_root), "/docker/abc");
}

static void check_string(const char *s, size_t size)
{
	FUZZ_CHECK(memchr(s, '\0', size) != NULL);
}

static void check_mounts(const cs_cgroup_mounts *m)
{
	check_string(m->v2, sizeof(m->v2));
	check_string(m->v2_root, sizeof(m->v2_root));
	check_string(m->v1, sizeof(m->v1));
	check_string(m->v1_root, sizeof(m->v1_root));
	check_string(m->v1mem, sizeof(m->v1mem));
	check_string(m->v1mem_root, sizeof(m->v1mem_root));
	/* A mount point without its root could not be matched against paths. */
	FUZZ_CHECK(!m->v2[0] == !m->v2_root[0]);
	FUZZ_CHECK(!m->v1[0] == !m->v1_root[0]);
	FUZZ_CHECK(!m->v1mem[0] == !m->v1mem_root[0]);
}

/* A yes names a file below one of the mounts, reached without "/..". */
static void check_where(const char *where, size_t size)
{
	check_string(where, size);
	size_t l2 = strlen(scratch.v2), l1 = strlen(scratch.v1);
	const char *below = strncmp(where, scratch.v2, l2) == 0 && where[l2] == '/' ? where + l2
			    : strncmp(where, scratch.v1, l1) == 0 && where[l1] == '/' ? where + l1
										 : NULL;
	FUZZ_CHECK(below != NULL);
	FUZZ_CHECK(strstr(below, "/..") == NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0])
		init();
	/* Exactly size bytes: a parser that reads on finds no terminator. */
	char *text = fuzz_copy(data, size, 0);

	cs_cgroup_mounts m;
	memset(&m, 0xff, sizeof(m));
	cs_cgroup_mounts_parse(text, size, &m);
	check_mounts(&m);

	char where[256];
	memset(where, 'x', sizeof(where));
	cs_cgroup_mounts none;
	memset(&none, 0, sizeof(none));
	FUZZ_CHECK(!cs_cgroup_frozen(text, size, &none, where, sizeof(where)));
	FUZZ_CHECK(where[0] == 'x');

	memset(where, 0, sizeof(where));
	if (cs_cgroup_frozen(text, size, &scratch, where, sizeof(where)))
		check_where(where, sizeof(where));
	else
		FUZZ_CHECK(where[0] == '\0');

	if (size) {
		cs_halt h = cs_halt_from_state((char)data[0]);
		FUZZ_CHECK(h == (data[0] == 'T' ? CS_HALT_STOPPED : data[0] == 't' ? CS_HALT_TRACED : CS_HALT_NONE));
	}
	free(text);
	return 0;
}
