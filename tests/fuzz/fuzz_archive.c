/* cs_archive_read over arbitrary bytes as a checkpoint archive, through the
 * machine's libarchive (nothing is checked where it cannot be loaded): the
 * members asked for come back whole and within their bounds, or the read
 * fails with a message; never more than asked, and never past the bounds
 * on decompressing by more than a block. And cs_archive_name over the same
 * bytes as a member's name: what it gives is normalized (no empty, "." or
 * ".." component, no leading or trailing slash) and normalizes to itself. */
#include "archive.h"
#include "fuzz.h"

#include <limits.h>
#include <sys/mman.h>
#include <unistd.h>

static void check_name(const uint8_t *data, size_t size)
{
	char *path = fuzz_copy(data, size, 1), out[64], again[64];
	int r = cs_archive_name(path, out, sizeof(out));
	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ENAMETOOLONG);
	if (r == 0) {
		size_t len = strlen(out);
		FUZZ_CHECK(len < sizeof(out) && len <= strlen(path));
		FUZZ_CHECK(len == 0 || (out[0] != '/' && out[len - 1] != '/'));
		FUZZ_CHECK(!strstr(out, "//"));
		for (const char *c = out; *c; c += strcspn(c, "/") + (c[strcspn(c, "/")] == '/')) {
			size_t k = strcspn(c, "/");
			FUZZ_CHECK(k > 0 && !(k == 1 && c[0] == '.') && !(k == 2 && c[0] == '.' && c[1] == '.'));
		}
		FUZZ_CHECK(cs_archive_name(out, again, sizeof(again)) == 0 && strcmp(out, again) == 0);
	}
	free(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static cs_archive *a;
	static bool tried;
	if (size == 0)
		return 0;
	check_name(data + 1, size - 1 < 200 ? size - 1 : 200);
	if (!tried) {
		tried = true;
		if (cs_archive_load(&a, NULL) < 0)
			a = NULL;
	}
	if (!a)
		return 0;
	int fd = memfd_create("fuzz-archive", MFD_CLOEXEC);
	if (fd < 0)
		abort();
	/* The first byte: whether to read within small bounds on decompressing. */
	if (write(fd, data + 1, size - 1) != (ssize_t)(size - 1) || lseek(fd, 0, SEEK_SET) != 0)
		abort();
	cs_archive_member m[] = {
		{ .name = "inventory.img", .max = 64 },
		{ .name = "checkpoint/cudasnap-plugin.json", .max = 4096 },
		{ .name = "config.dump", .max = 0 },
	};
	cs_archive_limits small = { .max_bytes = 64 << 10, .max_ratio = 4, .ratio_after = 4 << 10 };
	cs_archive_info info;
	cs_error err = { 0 };
	int r = cs_archive_read(a, fd, "fuzz", m, CS_ARRAY_SIZE(m), data[0] & 1 ? &small : NULL, &info, &err);
	close(fd);
	FUZZ_CHECK(r == 0 || (r < 0 && err.message[0]));
	FUZZ_CHECK(r < 0 || !info.bound[0]);
	FUZZ_CHECK(!info.bound[0] || r < 0);
	FUZZ_CHECK(info.members <= CS_ARCHIVE_MEMBERS_MAX);
	FUZZ_CHECK(strnlen(info.format, sizeof(info.format)) < sizeof(info.format));
	FUZZ_CHECK(strnlen(info.filters, sizeof(info.filters)) < sizeof(info.filters));
	FUZZ_CHECK(strnlen(info.bound, sizeof(info.bound)) < sizeof(info.bound));
	/* libarchive decompresses a block ahead of what it hands out */
	if (data[0] & 1)
		FUZZ_CHECK(r < 0 || info.bytes <= small.max_bytes);
	for (size_t i = 0; i < CS_ARRAY_SIZE(m); i++) {
		FUZZ_CHECK(!m[i].found || (m[i].data && m[i].len <= m[i].max && m[i].data[m[i].len] == '\0'));
		FUZZ_CHECK(m[i].found || !m[i].data);
	}
	cs_archive_members_free(m, CS_ARRAY_SIZE(m));
	return 0;
}
