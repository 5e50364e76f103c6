/* cs_proc_scan_maps over a real file, against a line-by-line reading of the
 * same bytes. The input is scanned once as it is and once repeated past the
 * reader's 64 KiB buffer, so that lines of every length straddle the buffer
 * boundary and lines made of many copies outgrow it, and once behind a line
 * whose length is near the buffer size. */
#include "fuzz.h"
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define READER_BUF (64 * 1024)

static char dir[64];
static int maps_dir_fd = -1;

static void cleanup(void)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/maps", dir);
	unlink(path);
	rmdir(dir);
}

static void init(void)
{
	/* Rewriting the file on every input is most of the cost on a disk. */
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp || strlen(tmp) >= 40)
		tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/cs-fuzz-XXXXXX", tmp);
	if (!mkdtemp(dir))
		abort();
	maps_dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (maps_dir_fd < 0)
		abort();
	atexit(cleanup);
}

static void write_maps(const char *buf, size_t len)
{
	int fd = openat(maps_dir_fd, "maps", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		abort();
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, buf + off, len - off);
		if (w <= 0)
			abort();
		off += (size_t)w;
	}
	close(fd);
}

/* What the reader must make of one line. */
static void expect_line(const char *line, size_t len, cs_proc *want)
{
	if (len >= READER_BUF)
		return;
	cs_map_entry m;
	if (cs_parse_maps_line(line, len, &m) < 0 || m.path_len == 0 || m.path[0] != '/')
		return;
	/* Anything in the device directory is a device, whatever its name. */
	if (cs_path_is_device(m.path, m.path_len, "/dev")) {
		cs_devref ref = { .kind = CS_REF_MAP, .fd = -1, .start = m.start, .end = m.end };
		cs_sanitize(ref.path, sizeof(ref.path), m.path, m.path_len);
		if (cs_proc_add_ref(want, &ref) < 0)
			abort();
	} else if (cs_path_is_libcuda(m.path, m.path_len)) {
		want->maps_libcuda = true;
	} else if (cs_path_is_nvml(m.path, m.path_len)) {
		want->maps_nvml = true;
	}
}

static void check(const char *buf, size_t len)
{
	cs_proc want = { 0 }, got = { 0 };
	size_t start = 0;
	for (size_t i = 0; i < len; i++) {
		if (buf[i] == '\n') {
			expect_line(buf + start, i - start, &want);
			start = i + 1;
		}
	}
	if (start < len)
		expect_line(buf + start, len - start, &want);

	write_maps(buf, len);
	FUZZ_CHECK(cs_proc_scan_maps(maps_dir_fd, "/dev", &got) == 0);
	FUZZ_CHECK(got.maps_libcuda == want.maps_libcuda);
	FUZZ_CHECK(got.maps_nvml == want.maps_nvml);
	FUZZ_CHECK(got.device_maps == want.device_maps && got.device_fds == 0);
	FUZZ_CHECK(got.nrefs == want.nrefs);
	for (size_t i = 0; i < got.nrefs; i++) {
		FUZZ_CHECK(got.refs[i].kind == CS_REF_MAP);
		FUZZ_CHECK(got.refs[i].start == want.refs[i].start);
		FUZZ_CHECK(got.refs[i].end == want.refs[i].end);
		FUZZ_CHECK(strcmp(got.refs[i].path, want.refs[i].path) == 0);
	}
	cs_proc_clear(&got);
	cs_proc_clear(&want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (maps_dir_fd < 0)
		init();
	char *buf = fuzz_copy(data, size, 0);
	check(buf, size);
	if (size > 0) {
		size_t reps = READER_BUF / size + 2, len = reps * size;
		char *big = malloc(len);
		if (!big)
			abort();
		for (size_t i = 0; i < reps; i++)
			memcpy(big + i * size, buf, size);
		check(big, len);
		free(big);

		/* A device line of about the buffer's size in front of the input:
		 * read or skipped depending on its length, never half of it. */
		static const char head[] = "1000-2000 rw-s 0 00:05 1 /dev/nvidia";
		size_t flen = READER_BUF - 128 + data[0];
		len = flen + 1 + size;
		big = malloc(len);
		if (!big)
			abort();
		memcpy(big, head, sizeof(head) - 1);
		memset(big + sizeof(head) - 1, 'x', flen - (sizeof(head) - 1));
		big[flen] = '\n';
		memcpy(big + flen + 1, buf, size);
		check(big, len);
		free(big);
	}
	free(buf);
	return 0;
}
