/* Restoring onto other GPUs without being told: a container restored on
 * another node finds other GPUs than its checkpoint recorded, and no engine
 * passes a device map. The CRIU plugin restores onto the map this chooses,
 * and 'cudasnap inspect' judges a checkpoint against the same map. */
#ifndef CS_AUTOMAP_H
#define CS_AUTOMAP_H

#include "manifest.h"
#include "nvml.h"

#include <sys/types.h>

/* At most this many distinct GPUs of a record are mapped. */
#define CS_AUTOMAP_GPUS 64

/* A GPU the record names that is not on this machine, and the one that
 * stands in for it. */
typedef struct cs_stand_in {
	char absent[CS_GPU_UUID_STRLEN];
	const cs_nvml_gpu *onto; /* into the caller's gpus; NULL: none was left */
} cs_stand_in;

typedef struct cs_automap {
	char *map; /* "OLD=NEW,..." (malloc'd); NULL when nothing needs mapping */
	size_t nrecorded, nabsent; /* distinct GPUs the record names, and those not here */
	cs_stand_in stand_in[CS_AUTOMAP_GPUS]; /* each absent GPU in the record's order, up to the first left over */
	size_t nstand_in;
	bool by_device_file; /* chosen among the GPUs whose device file the sample process has */
} cs_automap;

/* The map (OLD=NEW,...) that puts every GPU the record's processes saw onto
 * a GPU of this machine (gpus, NVML's list) that the restored processes can
 * use: those whose device file /dev/nvidia<minor> (under CUDASNAP_DEV_DIR) is
 * in the root of process sample (its container), else, with none of those
 * or sample 0, every GPU. A recorded GPU that is here stays itself, and no
 * other is mapped onto it. Returns 0 with a->map NULL when every recorded
 * GPU is here or nothing is known (no GPU here), 0 with a->map set, -ENOSPC
 * when there are fewer such GPUs than the record needs (the last stand-in
 * has onto NULL), or -ENOMEM. Free a with cs_automap_free. */
int cs_automap_make(const cs_manifest *m, const cs_nvml_gpu *gpus, size_t ngpus, pid_t sample, cs_automap *a);
void cs_automap_free(cs_automap *a);
CS_DEFINE_CLEANUP_STRUCT(cs_automap, cs_automap_free)

#endif
