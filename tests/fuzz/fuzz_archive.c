/* cs_archive_read over arbitrary bytes as a checkpoint archive, through the
 * machine's libarchive (nothing is checked where it cannot be loaded): the
 * members asked for come back whole and within their bounds, or the read
 * fails with a message; never more than asked. */
#include "archive.h"
#include "fuzz.h"

#include <sys/mman.h>
#include <unistd.h>

static bool first_two(void *ctx, const cs_archive_member *m, size_t n)
{
	(void)ctx;
	(void)n;
	return m[0].found && m[1].found;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static cs_archive *a;
	static bool tried;
	if (!tried) {
		tried = true;
		if (cs_archive_load(&a, NULL) < 0)
			a = NULL;
	}
	if (!a || size == 0)
		return 0;
	int fd = memfd_create("fuzz-archive", MFD_CLOEXEC);
	if (fd < 0)
		abort();
	/* The first byte: whether to stop once both files are read. */
	if (write(fd, data + 1, size - 1) != (ssize_t)(size - 1) || lseek(fd, 0, SEEK_SET) != 0)
		abort();
	cs_archive_member m[] = {
		{ .name = "inventory.img", .max = 64 },
		{ .name = "checkpoint/cudasnap-plugin.json", .max = 4096 },
		{ .name = "config.dump", .max = 0 },
	};
	cs_archive_info info;
	cs_error err = { 0 };
	int r = cs_archive_read(a, fd, "fuzz", m, CS_ARRAY_SIZE(m), data[0] & 1 ? first_two : NULL, NULL, &info, &err);
	close(fd);
	FUZZ_CHECK(r == 0 || (r < 0 && err.message[0]));
	FUZZ_CHECK(info.members <= CS_ARCHIVE_MEMBERS_MAX);
	FUZZ_CHECK(strnlen(info.format, sizeof(info.format)) < sizeof(info.format));
	FUZZ_CHECK(strnlen(info.filters, sizeof(info.filters)) < sizeof(info.filters));
	for (size_t i = 0; i < CS_ARRAY_SIZE(m); i++) {
		FUZZ_CHECK(!m[i].found || (m[i].data && m[i].len <= m[i].max && m[i].data[m[i].len] == '\0'));
		FUZZ_CHECK(m[i].found || !m[i].data);
	}
	FUZZ_CHECK(!info.stopped_early || (m[0].found && m[1].found));
	cs_archive_members_free(m, CS_ARRAY_SIZE(m));
	return 0;
}
