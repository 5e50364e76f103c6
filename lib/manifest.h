/* The manifest: what the last checkpoint did, for restore's order and its
 * PID-reuse check. JSON, written atomically in the state directory. */
#ifndef CS_MANIFEST_H
#define CS_MANIFEST_H

#include "cudasnap.h"
#include "util.h"

#define CS_MANIFEST_NAME "manifest.json"
#define CS_MANIFEST_MAX (16u << 20)

typedef struct cs_manifest_entry {
	pid_t pid;
	unsigned long long start_time;
	char comm[64];
	int order;
	char visible_devices[128];
	pid_t nspid; /* its pid in its own PID namespace, 0 when not recorded */
	char gpus[512]; /* UUIDs of the GPUs it saw, comma-separated, "" when not recorded */
	unsigned long long bytes;
	double seconds[CS_STEP_COUNT];
} cs_manifest_entry;

typedef struct cs_manifest {
	int version;
	int driver_version;
	char created[40];
	cs_manifest_entry *e;
	size_t n;
} cs_manifest;

/* Renders the targets that this checkpoint left checkpointed, in the order
 * their checkpoints completed. Returns a malloc'd string or NULL. */
char *cs_manifest_render(const cs_target *t, size_t n, const cs_driver *d, double wall_seconds);
/* Parses untrusted text; a corrupt manifest is an error with a hint. */
int cs_manifest_parse(const char *buf, size_t len, cs_manifest *out, cs_error *err);
void cs_manifest_free(cs_manifest *m);
CS_DEFINE_CLEANUP_STRUCT(cs_manifest, cs_manifest_free)
/* The manifest text without the entries of targets this restore brought back
 * to running; *left is how many entries remain. NULL when buf does not parse. */
char *cs_manifest_prune(const char *buf, size_t len, const cs_target *t, size_t n, size_t *left);

/* The manifest after checkpoint fresh (rendered from targets t): the
 * entries of the older manifest old (len bytes; NULL or unparsable: none)
 * whose processes are alive and not among t, then fresh's, ordered so.
 * Checkpoints of other processes may have run beside this one. Returns a
 * malloc'd string or NULL. */
char *cs_manifest_merge(const char *old, size_t len, const char *fresh, const cs_target *t, size_t n);

#endif
