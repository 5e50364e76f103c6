#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A CRIU that a container engine starts (Podman runs runc, and runc CRIU,
 * without the caller's environment) hands its plugin no FAKECUDA_* variable,
 * so the caller half inside the plugin would see another machine than the
 * targets do. The file stands in for the environment there: lines
 * NAME=VALUE, '#' comments and blank lines; a missing file sets nothing.
 * The environment wins, so that the tests that set variables see no change. */

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n > 0 && strchr(" \t\r\n", s[n - 1]))
		s[--n] = '\0';
	return s;
}

static const char *from_file(const char *name, char *buf, size_t len)
{
	FILE *f = fopen(FC_SETTINGS_FILE, "re");
	if (f == NULL)
		return NULL;
	char line[4096];
	size_t nlen = strlen(name);
	const char *found = NULL;
	while (fgets(line, sizeof(line), f)) {
		char *s = trim(line);
		if (*s == '#' || strncmp(s, name, nlen) != 0)
			continue;
		char *eq = s + nlen;
		while (*eq == ' ' || *eq == '\t')
			eq++;
		if (*eq != '=')
			continue;
		/* the last line that sets it wins, as in a shell */
		snprintf(buf, len, "%s", trim(eq + 1));
		found = buf;
	}
	fclose(f);
	return found;
}

const char *fc_setting(const char *name, char *buf, size_t len)
{
	const char *env = getenv(name);
	if (env != NULL)
		return env;
	return len > 0 ? from_file(name, buf, len) : NULL;
}

bool fc_mig_mode(void)
{
	char buf[32];
	const char *v = fc_setting("FAKECUDA_MIG", buf, sizeof(buf));
	return v != NULL && atoi(v) != 0;
}
