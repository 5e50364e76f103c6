/* Restoring onto other GPUs without being told: a container restored on
 * another node finds other GPUs than the dump recorded, and no engine
 * passes a device map. The choice is lib/automap.c's, which 'cudasnap
 * inspect' makes too; this says it in CRIU's log. Runs in a helper process
 * (it asks NVML). */
#ifndef CS_CRIU_GPUMAP_H
#define CS_CRIU_GPUMAP_H

#include "manifest.h"

#include <sys/types.h>

/* The map (OLD=NEW,...) that puts every GPU the record names onto a GPU of
 * this machine that the restored processes can use: the GPUs whose device
 * file /dev/nvidia<minor> is in the root of process sample (its container),
 * else every GPU. A recorded GPU that is here stays itself. Returns 0 with
 * *map NULL when every recorded GPU is here or nothing is known, 0 with a
 * malloc'd *map (logged: what goes where, and why), or -1 (logged) when
 * there are fewer such GPUs than the record names. */
int auto_device_map(const cs_manifest *m, pid_t sample, char **map);

#endif
