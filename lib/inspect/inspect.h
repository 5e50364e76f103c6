/* cudasnap inspect: what the GPU part of a checkpoint holds (CRIU's images,
 * in a directory or a checkpoint archive, as the CRIU plugin recorded its
 * processes), and whether it would restore on this node, judged by the
 * checks the plugin's restore makes. */
#ifndef CS_INSPECT_H
#define CS_INSPECT_H

#include "archive.h"
#include "automap.h"
#include "ckptmeta.h"
#include "cudasnap.h"
#include "gpuroom.h"
#include "inventory.h"
#include "json.h"
#include "manifest.h"
#include "nvml.h"
#include "util.h"

#include <limits.h>

/* What a checkpoint holds, as read. */
typedef struct cs_inspect {
	char path[PATH_MAX];
	bool archive; /* a tar archive (else a directory) */
	char format[64], filters[64]; /* the archive's format and compression */
	char bound[16]; /* the bound its reading stopped at (cs_archive_info), "" none */
	char images[16]; /* where CRIU's images lie: "" at the top, or "checkpoint/" (Podman, the kubelet) */
	cs_inventory inventory;
	/* The images need the plugin: their inventory names it, or (images of a
	 * CRIU before 4.0, which lists no plugin) they hold its record. */
	bool gpu_part;
	cs_manifest record; /* its record, when gpu_part */
	cs_ckpt_meta meta; /* the engine's config.dump and spec.dump, what of them parsed */
	/* The files the record's parks into files wrote (its processes' in
	 * order, park_nfiles each): each one's size, -1 when it is not there
	 * (or is a link); park_checked false when they could not be looked
	 * at (an archive read from a pipe, which is read once). */
	long long *park_sizes;
	size_t npark;
	bool park_checked;
} cs_inspect;

/* The bounds on reading an archive, unless the caller gives others:
 * decompressed bytes, their ratio to the compressed ones (judged past
 * CS_INSPECT_RATIO_AFTER), the memory its reader may take and the time. */
#define CS_INSPECT_MAX_BYTES (1ULL << 40)
#define CS_INSPECT_MAX_RATIO 1000u
#define CS_INSPECT_RATIO_AFTER (1ULL << 30)
#define CS_INSPECT_MAX_MEMORY (1ULL << 30)
#define CS_INSPECT_SECONDS 600.0
void cs_inspect_default_bounds(cs_archive_bounds *b);

/* Reads path: a CRIU image directory (or one holding checkpoint/, an
 * unpacked archive), or a checkpoint archive (a tar, plain or compressed,
 * through libarchive, in a child process within bounds: NULL, the
 * defaults); images under checkpoint/ are taken before any at the top.
 * Only inventory.img, the plugin's record and the engine's config.dump and
 * spec.dump are kept, each bounded in size, and what a directory and an
 * archive refuse is the same: a link (symbolic or hard) where one of them,
 * or checkpoint/, belongs; an archive also a second copy of one of them
 * (cs_archive_read). c->path is path made safe to print. Returns 0, or <0
 * with err filled (and only out->path and out->bound, the bound passed,
 * set) when path is not a checkpoint, cannot be read within the bounds,
 * or its GPU part is damaged (the command's exit status 2). */
int cs_inspect_read(const char *path, const cs_archive_bounds *bounds, cs_inspect *out, cs_error *err);
void cs_inspect_free(cs_inspect *c);
CS_DEFINE_CLEANUP_STRUCT(cs_inspect, cs_inspect_free)

#define CS_VERDICT_REASONS 64

/* One thing that would fail the restore here, or that it cannot judge. */
typedef struct cs_verdict_reason {
	const char *
		code; /* "criu-plugin", "criu-plugin-conflict", "park-files", "park-files-unchecked", "driver", "driver-version",
			     "driver-remap", "device-map", "gpu-absent", "gpu-memory", "gpu-memory-unknown",
			     "driver-version-unknown" */
	bool blocks; /* the restore would fail here because of it */
	long entry; /* the record's process it is about, -1 for none */
	char text[1024];
	char fix[768]; /* "" when nothing needs doing */
} cs_verdict_reason;

/* Whether the checkpoint would restore here, and why not. */
typedef struct cs_verdict {
	cs_nvml_gpu *gpus; /* this node's, with their free memory */
	size_t ngpus;
	char *device_map; /* the map the plugin would restore onto, NULL none */
	cs_target *t; /* the record's processes (record.n), with their needs on this node's GPUs */
	cs_gpu_room *room; /* each one's judgement, when judged */
	size_t nreasons;
	cs_automap automap; /* the GPUs that stand in for absent ones (automatic map) */
	cs_verdict_reason reason[CS_VERDICT_REASONS];
	int driver_version; /* cuDriverGetVersion, 0 unknown */
	cs_error driver_error; /* why the driver cannot restore, when !driver_loaded */
	bool driver_loaded;
	bool can_remap;
	bool nvml;
	bool map_from_settings; /* CUDASNAP_DEVICE_MAP, else chosen as the plugin chooses */
	bool judged;
	bool ignore_gpu_memory; /* CUDASNAP_IGNORE_GPU_MEMORY=1: the plugin does not check */
	bool go; /* no reason blocks it */
	char nvidia_driver[CS_NVML_VERSION_SIZE]; /* NVML's "580.159.04"; "" unknown */
	char criu_plugin_dir[PATH_MAX]; /* CUDASNAP_CRIU_PLUGIN_DIR, else CS_CRIU_PLUGIN_DIR */
	bool criu_plugin; /* cudasnap_plugin.so is there */
	bool criu_cuda_plugin; /* and so is CRIU's own cuda_plugin.so */
} cs_verdict;

/* Where CRIU loads its plugins from, unless CUDASNAP_CRIU_PLUGIN_DIR says:
 * CS_CRIU_PLUGIN_DIR, meson's criu_plugin_dir (meson.build defines it for
 * every file; CRIU's default where something else builds it, as
 * tests/fuzz/run.sh does); the plugin's file, and CRIU's own. */
#ifndef CS_CRIU_PLUGIN_DIR
#define CS_CRIU_PLUGIN_DIR "/usr/lib/criu"
#endif
#define CS_CRIU_PLUGIN_FILE "cudasnap_plugin.so"
#define CS_CRIU_CUDA_PLUGIN_FILE "cuda_plugin.so"

/* Judges c's GPU part (c->gpu_part) against this node, as the CRIU plugin's
 * restore would (settings from the environment and the settings file):
 * the plugin in CRIU's plugin directory without CRIU's own beside it, the
 * driver (loaded, with the checkpoint API, not older than the one that
 * checkpointed, able to remap where a map applies), the map onto this
 * node's GPUs (CUDASNAP_DEVICE_MAP, else absent GPUs onto others), and the
 * GPU memory each process needs there against the free memory
 * (cs_record_judge). Never fails: what cannot be known is a reason. */
void cs_inspect_judge(const cs_inspect *c, cs_verdict *v);
void cs_verdict_free(cs_verdict *v);
CS_DEFINE_CLEANUP_STRUCT(cs_verdict, cs_verdict_free)

/* "13.0" for a cuDriverGetVersion of 13000. */
void cs_cuda_version_text(int version, char *buf, size_t size);

/* The whole report as one JSON object (documented in cudasnap(7)); v may
 * be NULL (no GPU part). */
json_object *cs_json_inspect(const cs_inspect *c, const cs_verdict *v, int exit_status);
/* The object of an inspect that could not read c->path: "path",
 * "would_restore" false, "exit_status", "error" and "bound". */
json_object *cs_json_inspect_error(const cs_inspect *c, const cs_error *e, int exit_status);

#endif
