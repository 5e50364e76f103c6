#include "config.h"

#include <string.h>

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

static bool is_name_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

static void trim(const char **s, size_t *len)
{
	while (*len && is_blank(**s))
		(*s)++, (*len)--;
	while (*len && is_blank((*s)[*len - 1]))
		(*len)--;
}

/* One line without its newline. */
static void parse_line(const char *s, size_t len, unsigned no, cs_config_fn fn, cs_config_bad_fn bad, void *ctx)
{
	trim(&s, &len);
	if (len == 0 || s[0] == '#')
		return;
	const char *eq = memchr(s, '=', len);
	const char *name = s, *value = eq ? eq + 1 : NULL;
	size_t nlen = eq ? (size_t)(eq - s) : 0, vlen = eq ? len - nlen - 1 : 0;
	trim(&name, &nlen);
	trim(&value, &vlen);
	bool ok = eq && nlen > 0 && !memchr(s, '\0', len);
	for (size_t i = 0; ok && i < nlen; i++)
		ok = is_name_char(name[i]);
	if (!ok) {
		if (bad)
			bad(ctx, no);
		return;
	}
	fn(ctx, name, nlen, value, vlen, no);
}

void cs_config_parse(const char *text, size_t len, cs_config_fn fn, cs_config_bad_fn bad, void *ctx)
{
	unsigned no = 1;
	for (size_t at = 0; at < len; no++) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t end = nl ? (size_t)(nl - text) : len;
		parse_line(text + at, end - at, no, fn, bad, ctx);
		at = end + 1;
	}
}
