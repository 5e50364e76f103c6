/* What cudasnap reads about parking, all of it written by the process it
 * asks or by the kernel on its behalf: the interposer's answer line
 * (cs_park_parse), /proc/PID/net/unix (park_find_in_unix) and the
 * interposer's own /proc/self/fdinfo/FD (park_tag_in_fdinfo), a thread's
 * /proc stat line (park_stat_start). Checks: an
 * answer is ok exactly when it says "ok"; the strings end inside their
 * buffers and the reason has no control characters; a socket found is a
 * listening one named like a control socket, with one of the inodes asked
 * about, and its path is a line's tail; a mark found is a serial inside
 * the mark's range that the text spells in decimal. */
#include "fuzz.h"
#include "park.h"
#include "park_find.h"

#include <stdio.h>
#include <string.h>

static void check_string(const char *s, size_t size)
{
	FUZZ_CHECK(memchr(s, '\0', size) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_copy(data, size, 1);

	cs_park_answer a;
	cs_park_info info;
	memset(&info, 0, sizeof(info));
	int rc = cs_park_parse(text, &a, &info);
	bool ok = strncmp(text, "ok", 2) == 0 && (text[2] == 0 || text[2] == ' ' || text[2] == '\n');
	FUZZ_CHECK((rc == 0) == ok);
	FUZZ_CHECK(rc == 0 || rc == -1);
	check_string(a.stage, sizeof(a.stage));
	check_string(a.why, sizeof(a.why));
	check_string(info.why, sizeof(info.why));
	for (const char *c = info.why; *c; c++)
		FUZZ_CHECK((unsigned char)*c >= 0x20 && *c != 0x7f);

	static const unsigned long inodes[] = { 12345, 7 };
	char path[256];
	memset(path, 'x', sizeof(path));
	if (park_find_in_unix(text, inodes, 2, path, sizeof(path)) == 0) {
		check_string(path, sizeof(path));
		FUZZ_CHECK(path[0] == '/');
		FUZZ_CHECK(strstr(path, "/.cudasnap-park.") != NULL);
		FUZZ_CHECK(strstr(text, path) != NULL);
	} else {
		FUZZ_CHECK(path[0] == 'x');
	}

	unsigned long long serial = park_tag_in_fdinfo(text);
	FUZZ_CHECK((serial & PARK_TAG_MASK) == 0);
	if (serial) {
		char spelled[32];
		snprintf(spelled, sizeof(spelled), "%llu", PARK_TAG_BASE | serial);
		FUZZ_CHECK(strstr(text, spelled) != NULL);
	}
	/* a start time read from the raw bytes (no NUL) is spelled there,
	 * after the last ')' */
	unsigned long long start = park_stat_start((const char *)data, size);
	if (start) {
		char spelled[32];
		int len = snprintf(spelled, sizeof(spelled), " %llu", start);
		const uint8_t *paren = memrchr(data, ')', size);
		FUZZ_CHECK(paren != NULL);
		FUZZ_CHECK(memmem(paren, size - (size_t)(paren - data), spelled, (size_t)len) != NULL);
	}
	free(text);
	return 0;
}
