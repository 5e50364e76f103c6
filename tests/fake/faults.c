#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "proto.h"
#include "settings.h"

/* $FAKECUDA_FAULTS, one fault a line: <pid|*> <op> <action> [times].
 * Read again at every request, since tests rewrite it while targets run;
 * any change to the file re-arms the counts. Targets check it from their
 * restore thread, callers for get_restore_tid (which never reaches the
 * target) from any number of threads: hence the lock. */

#define MAX_LINES 64
#define MAX_BYTES 65536

enum fault_kind { F_ERROR, F_DELAY, F_EXIT, F_LEAK_FD, F_LEAK_MAP, F_OOM };

struct fault {
	int pid; /* 0 = any */
	int op;
	enum fault_kind kind;
	long arg;
	long times; /* -1 = always */
};

static pthread_mutex_t faults_mu = PTHREAD_MUTEX_INITIALIZER;
static struct stat seen;
static uint64_t seen_hash;
static int fired[MAX_LINES];

static int parse_action(const char *s, struct fault *f)
{
	static const char *const plain[] = { [F_EXIT] = "exit", [F_LEAK_FD] = "leak-fd",
					     [F_LEAK_MAP] = "leak-map", [F_OOM] = "oom" };
	for (int k = F_EXIT; k <= F_OOM; k++) {
		if (strcmp(s, plain[k]) == 0) {
			f->kind = (enum fault_kind)k;
			return 0;
		}
	}
	CUresult code;
	if (strncmp(s, "error=", 6) == 0 && fc_error_parse(s + 6, &code) == 0) {
		f->kind = F_ERROR;
		f->arg = code;
		return 0;
	}
	char *end;
	if (strncmp(s, "delay=", 6) != 0)
		return -1;
	f->kind = F_DELAY;
	f->arg = strtol(s + 6, &end, 10);
	return s[6] != '\0' && *end == '\0' && f->arg >= 0 && f->arg <= 3600000 ? 0 : -1;
}

static int parse_number(const char *s, long *out)
{
	char *end;
	*out = strtol(s, &end, 10);
	return *s != '\0' && *end == '\0' && *out > 0 ? 0 : -1;
}

/* 1 = a fault, 0 = blank or comment, -1 = malformed */
static int parse_line(char *line, struct fault *f)
{
	char *save = NULL, *tok[5];
	int n = 0;
	for (char *t = strtok_r(line, " \t\r\n", &save); t && n < 5; t = strtok_r(NULL, " \t\r\n", &save))
		tok[n++] = t;
	if (n == 0 || tok[0][0] == '#')
		return 0;
	long pid = 0;
	f->times = -1;
	if (n < 3 || n > 4 || (strcmp(tok[0], "*") != 0 && parse_number(tok[0], &pid) != 0))
		return -1;
	f->pid = (int)pid;
	f->op = fc_op_from_name(tok[1]);
	if (f->op < 0 || parse_action(tok[2], f) != 0)
		return -1;
	/* running out of GPU memory is what a restore does */
	if (f->kind == F_OOM && f->op != FC_OP_RESTORE)
		return -1;
	if (n == 4 && parse_number(tok[3], &f->times) != 0)
		return -1;
	return 1;
}

static void apply(const struct fault *f, struct fc_fault_hit *hit)
{
	switch (f->kind) {
	case F_ERROR:
		if (hit->error == CUDA_SUCCESS)
			hit->error = (CUresult)f->arg;
		break;
	case F_DELAY:
		hit->delay_ms += (unsigned int)f->arg;
		break;
	case F_EXIT:
		hit->exit_now = 1;
		break;
	case F_LEAK_FD:
		hit->leak_fd = 1;
		break;
	case F_LEAK_MAP:
		hit->leak_map = 1;
		break;
	case F_OOM:
		hit->oom = 1;
		break;
	}
}

static void check_line(char *line, int idx, int op, int pid, int warn, struct fc_fault_hit *hit)
{
	char copy[256];
	snprintf(copy, sizeof(copy), "%s", line);
	copy[strcspn(copy, "\r\n")] = '\0';
	struct fault f;
	memset(&f, 0, sizeof(f));
	int r = parse_line(line, &f);
	if (r < 0 && warn)
		fprintf(stderr, "fakecuda: ignoring fault line %d: %s\n", idx + 1, copy);
	if (r <= 0 || f.op != op || (f.pid != 0 && f.pid != pid))
		return;
	if (f.times >= 0 && fired[idx] >= f.times)
		return;
	fired[idx]++;
	apply(&f, hit);
}

static int changed(const struct stat *st)
{
	return st->st_ino != seen.st_ino || st->st_dev != seen.st_dev ||
	       st->st_size != seen.st_size || st->st_mtim.tv_sec != seen.st_mtim.tv_sec ||
	       st->st_mtim.tv_nsec != seen.st_mtim.tv_nsec;
}

/* Timestamps are coarse and inode numbers get reused, so the content
 * counts as part of the file's identity too. */
static uint64_t hash(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h;
}

static char *slurp(const char *path, struct stat *st, size_t *len)
{
	FILE *f = path && *path ? fopen(path, "re") : NULL;
	char *text = NULL;
	if (f && fstat(fileno(f), st) == 0 && (text = malloc(MAX_BYTES + 1)) != NULL) {
		*len = fread(text, 1, MAX_BYTES, f);
		text[*len] = '\0';
	}
	if (f)
		fclose(f);
	return text;
}

/* Must be called with faults_mu held. */
static void check_text(char *text, size_t len, const struct stat *st, int op, int pid,
		       int warn, struct fc_fault_hit *hit)
{
	uint64_t h = hash(text, len);
	int fresh = changed(st) || h != seen_hash;
	if (fresh) {
		seen = *st;
		seen_hash = h;
		memset(fired, 0, sizeof(fired));
	}
	char *line = text;
	for (int idx = 0; line && *line && idx < MAX_LINES; idx++) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		check_line(line, idx, op, pid, warn && fresh, hit);
		line = nl ? nl + 1 : NULL;
	}
}

void fc_faults_check(int op, int pid, int warn, struct fc_fault_hit *hit)
{
	struct stat st;
	size_t len = 0;
	char path[PATH_MAX];
	memset(hit, 0, sizeof(*hit));
	char *text = slurp(fc_setting("FAKECUDA_FAULTS", path, sizeof(path)), &st, &len);
	if (text == NULL)
		return;
	pthread_mutex_lock(&faults_mu);
	check_text(text, len, &st, op, pid, warn, hit);
	pthread_mutex_unlock(&faults_mu);
	free(text);
}
