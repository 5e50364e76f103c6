/* cs_config_parse (the settings file) on any bytes: every setting it hands
 * out has a name of letters, digits and '_', no newline in name or value,
 * no blank at either end, and line numbers that only grow; and every line
 * is a setting, bad, blank or a comment, never two of these. */
#include "config.h"
#include "fuzz.h"

#include <stdbool.h>
#include <string.h>

typedef struct seen {
	unsigned last;
	size_t settings, bad;
} seen;

static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

static void setting(void *ctx, const char *name, size_t nlen, const char *value, size_t vlen, unsigned line)
{
	seen *s = ctx;
	FUZZ_CHECK(nlen > 0);
	for (size_t i = 0; i < nlen; i++)
		FUZZ_CHECK((name[i] >= 'A' && name[i] <= 'Z') || (name[i] >= 'a' && name[i] <= 'z') ||
			   (name[i] >= '0' && name[i] <= '9') || name[i] == '_');
	FUZZ_CHECK(!memchr(value, '\n', vlen) && !memchr(value, '\0', vlen));
	FUZZ_CHECK(vlen == 0 || (!blank(value[0]) && !blank(value[vlen - 1])));
	FUZZ_CHECK(line > s->last);
	s->last = line;
	s->settings++;
}

static void bad(void *ctx, unsigned line)
{
	seen *s = ctx;
	FUZZ_CHECK(line > s->last);
	s->last = line;
	s->bad++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_copy(data, size, 0);
	seen s = { 0 };
	cs_config_parse(text, size, setting, bad, &s);
	size_t lines = 1;
	for (size_t i = 0; i < size; i++)
		lines += text[i] == '\n';
	FUZZ_CHECK(s.settings + s.bad <= lines);
	free(text);
	return 0;
}
