/* The manifest: what the last checkpoint did, for restore's order and its
 * PID-reuse check. JSON, written atomically in the state directory. */
#ifndef CS_MANIFEST_H
#define CS_MANIFEST_H

#include "cudasnap.h"
#include "util.h"

#define CS_MANIFEST_NAME "manifest.json"
#define CS_MANIFEST_MAX (16u << 20)

/* The CRIU plugin's record of the processes, in CRIU's images directory: a
 * cudasnap manifest whose entries also give each process's pid inside its
 * own PID namespace ("nspid"), which a restore keeps, and its GPUs. */
#define CS_PLUGIN_RECORD "cudasnap-plugin.json"
/* The name the plugin gives itself in CRIU's inventory of the images, which
 * a restore then needs. */
#define CS_PLUGIN_NAME "cudasnap"

typedef struct cs_manifest_entry {
	pid_t pid;
	unsigned long long start_time;
	char comm[64];
	int order;
	char visible_devices[128];
	pid_t nspid; /* its pid in its own PID namespace, 0 when not recorded */
	char gpus[512]; /* UUIDs of the GPUs it saw, comma-separated, "" when not recorded */
	unsigned long long bytes;
	bool bytes_known; /* bytes is a measurement (0: nothing moved), not absent */
	double seconds[CS_STEP_COUNT];
	/* "used_gpus": the GPUs it used, with its memory on each when known
	 * apart; use_known false when the record does not say. */
	cs_gpu_use use[CS_TARGET_GPUS];
	unsigned nuse;
	bool use_known;
	/* "park_files": where a park into files put its GPU memory (count 0:
	 * none), and how many bytes */
	char park_dir[256];
	char park_name[64];
	unsigned park_nfiles;
	unsigned long long park_bytes;
} cs_manifest_entry;

/* A GPU the processes saw or used, as the record keeps it in its top-level
 * "gpus": what a restore elsewhere needs to know of it. */
typedef struct cs_manifest_gpu {
	char uuid[48]; /* lowercase "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
	char name[96]; /* NVML's, "" when not recorded */
	unsigned long long memory_total; /* bytes; 0 when not recorded */
} cs_manifest_gpu;

/* The most GPUs a record's "gpus" may list (NVML's own bound). */
#define CS_MANIFEST_GPUS_MAX 1024
/* The most processes a manifest or record may list: more than the CUDA
 * processes eight GPUs hold (each has a context of hundreds of MiB). A
 * record is untrusted (it travels in images): each process costs a reader
 * kilobytes, and a 16 MiB record could list 150,000. */
#define CS_MANIFEST_PROCS_MAX 4096

typedef struct cs_manifest {
	int version;
	int driver_version;
	char created[40];
	char cudasnap_version[64]; /* of the cudasnap that wrote it; "" when not recorded */
	cs_manifest_gpu *gpus; /* the top-level "gpus", when gpus_known */
	size_t ngpus;
	bool gpus_known; /* records of earlier versions have none */
	cs_manifest_entry *e;
	size_t n;
} cs_manifest;

/* Renders the targets that this checkpoint left checkpointed, in the order
 * their checkpoints completed, with the cudasnap version and the GPUs they
 * saw or used: those of gpus (this machine's, as NVML lists them; NULL when
 * NVML does not answer) with their names and sizes, and any other UUID a
 * target names without them. Returns a malloc'd string or NULL. */
struct cs_nvml_gpu;
char *cs_manifest_render(const cs_target *t, size_t n, const cs_driver *d, double wall_seconds,
			 const struct cs_nvml_gpu *gpus, size_t ngpus);
/* Parses untrusted text; a corrupt manifest is an error with a hint, and
 * so is one with more than CS_MANIFEST_PROCS_MAX processes, or whose text
 * holds more JSON objects, arrays or values than such a one can (refused
 * before it is parsed, so that its parse costs a bounded amount of
 * memory). */
int cs_manifest_parse(const char *buf, size_t len, cs_manifest *out, cs_error *err);
/* The same for a record read elsewhere: what names it in messages ("the
 * record /ckpt/cudasnap-plugin.json") and the hint of a corrupt one. */
int cs_manifest_parse_as(const char *buf, size_t len, const char *what, const char *hint, cs_manifest *out,
			 cs_error *err);
void cs_manifest_free(cs_manifest *m);
CS_DEFINE_CLEANUP_STRUCT(cs_manifest, cs_manifest_free)
/* The manifest text without the entries of targets this restore brought back
 * to running; *left is how many entries remain. NULL when buf does not parse. */
char *cs_manifest_prune(const char *buf, size_t len, const cs_target *t, size_t n, size_t *left);

/* The manifest text without the entry of t's process (pid and start
 * time); the rest as cs_manifest_prune. */
char *cs_manifest_forget(const char *buf, size_t len, const cs_target *t, size_t *left);

/* The manifest after checkpoint fresh (rendered from targets t): the
 * entries of the older manifest old (len bytes; NULL or unparsable: none)
 * whose processes are alive and not among t, then fresh's, ordered so.
 * Checkpoints of other processes may have run beside this one. Returns a
 * malloc'd string or NULL. */
char *cs_manifest_merge(const char *old, size_t len, const char *fresh, const cs_target *t, size_t n);

/* Merges the entries of targets t[0..n) that a checkpoint left
 * checkpointed into the state directory's manifest, under its lock (other
 * operations may update it at the same time). Fills err and returns <0
 * when it could not. */
int cs_manifest_record(int statefd, const char *command, const cs_target *t, size_t n, const cs_driver *d, double wall,
		       cs_error *err);

/* Removes t's entry (its process restored outside a session) from the
 * state directory's manifest, under its lock; the file goes with the last
 * entry. Fills err and returns <0 when it could not. */
int cs_manifest_drop(int statefd, const char *command, const cs_target *t, cs_error *err);

/* What a record says of a process, read before and after its checkpoint:
 * the GPUs it sees (t->gpus, from its CUDA_VISIBLE_DEVICES), and the GPUs
 * it uses (t->use: those whose device file p holds, with NVML's figure for
 * each where exact, i.e. NVML's pids are this namespace's). */
struct cs_nvml;
void cs_target_note_gpus(cs_target *t, const struct cs_nvml_gpu *gpus, size_t ngpus);
void cs_target_note_use(cs_target *t, const cs_proc *p, struct cs_nvml *nv, const struct cs_nvml_gpu *gpus,
			size_t ngpus, bool exact);

#endif
