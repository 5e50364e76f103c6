#include "gpus.h"
#include "settings.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, the form nvidia-smi prints. */
int fc_uuid_parse(const char *s, CUuuid *u)
{
	static const int dash_at[] = { 8, 13, 18, 23 };
	if (strncmp(s, "GPU-", 4) != 0 || strlen(s) != 40)
		return -1;
	s += 4;
	int nbytes = 0, d = 0;
	for (int i = 0; i < 36; i++) {
		if (d < 4 && i == dash_at[d]) {
			if (s[i] != '-')
				return -1;
			d++;
			continue;
		}
		int hi = hexval((unsigned char)s[i]), lo = hexval((unsigned char)s[i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		u->bytes[nbytes++] = (unsigned char)(hi << 4 | lo);
		i++;
	}
	return nbytes == 16 ? 0 : -1;
}

void fc_uuid_format(const CUuuid *u, char *buf, size_t len)
{
	const unsigned char *b = u->bytes;
	snprintf(buf, len,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
		 b[12], b[13], b[14], b[15]);
}

static void add_gpu(struct fc_gpus *g, const char *s)
{
	CUuuid u;
	if (g->count >= FC_MAX_GPUS || fc_uuid_parse(s, &u) != 0) {
		fprintf(stderr, "fakecuda: ignoring GPU '%s' in FAKECUDA_GPUS\n", s);
		return;
	}
	g->uuid[g->count++] = u;
}

int fc_gpus_load(struct fc_gpus *g)
{
	char buf[FC_MAX_GPUS * 48], setting[FC_MAX_GPUS * 48];
	const char *env = fc_setting("FAKECUDA_GPUS", setting, sizeof(setting));
	snprintf(buf, sizeof(buf), "%s", env ? env : FC_DEFAULT_GPU);
	g->count = 0;
	char *save = NULL;
	for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
		add_gpu(g, tok);
	return g->count;
}

int fc_gpus_find(const struct fc_gpus *g, const CUuuid *u)
{
	for (int i = 0; i < g->count; i++)
		if (memcmp(g->uuid[i].bytes, u->bytes, sizeof(u->bytes)) == 0)
			return i;
	return -1;
}

/* A decimal index, or a unique prefix of a UUID as nvidia-smi prints it. */
static int lookup(const struct fc_gpus *g, const char *tok)
{
	char *end, name[48];
	long idx = strtol(tok, &end, 10);
	if (*tok != '\0' && *end == '\0')
		return idx >= 0 && idx < g->count ? (int)idx : -1;
	int found = -1;
	for (int i = 0; i < g->count; i++) {
		fc_uuid_format(&g->uuid[i], name, sizeof(name));
		if (strncmp(name, tok, strlen(tok)) != 0)
			continue;
		if (found >= 0)
			return -1;
		found = i;
	}
	return strncmp(tok, "GPU-", 4) == 0 ? found : -1;
}

static int listed(const int *map, int n, int idx)
{
	for (int i = 0; i < n; i++)
		if (map[i] == idx)
			return 1;
	return 0;
}

/* As CUDA does, the list ends at the first entry that names no GPU (or one
 * already listed); what follows it is ignored. */
int fc_gpus_visible(const struct fc_gpus *g, const char *cvd, int *map)
{
	char buf[1024];
	int n = 0;
	if (cvd == NULL) {
		for (; n < g->count; n++)
			map[n] = n;
		return n;
	}
	snprintf(buf, sizeof(buf), "%s", cvd);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok && n < g->count;
	     tok = strtok_r(NULL, ",", &save)) {
		while (isspace((unsigned char)*tok))
			tok++;
		int idx = lookup(g, tok);
		if (idx < 0 || listed(map, n, idx))
			break;
		map[n++] = idx;
	}
	return n;
}
