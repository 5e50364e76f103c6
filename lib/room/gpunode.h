/* The node's book of GPU restores seen from outside a restore: whether the
 * book reached is the node's, and what the restores in flight booked, for
 * a plan shown before anything changes (gpubook.h). */
#ifndef CS_GPUNODE_H
#define CS_GPUNODE_H

#include "gpuorphan.h"
#include "nvml.h"

#include <stddef.h>

/* cs_room_gpus for a judgement before a booking (a plan, the CRIU
 * plugin's check, inspect): without NVML, the driver's probe reads the
 * free memory, under the book's lock, of the GPUs where no restore in
 * flight is booked (its context would take their room); the others' is not
 * known. d, parked: to judge orphans (may be NULL). */
bool cs_room_gpus_booked(cs_driver *d, cs_parked_fn parked, cs_nvml **nv, cs_nvml_gpu **gpus, size_t *n, char *why,
			 size_t size);

/* For a plan (--dry-run) before any restore: what the restores in flight
 * book on each of gpus[0..n) is taken off its free memory (a booking that
 * cannot be read: all of it) and said in booked[i] ("" where none); why
 * gets, when the node's book cannot be used, why not (a restore is then
 * refused), else "". Waits at most 2 s for the book's lock; creates
 * nothing. d, parked: to judge orphans (may be NULL). */
void cs_gpubook_plan(cs_driver *d, cs_parked_fn parked, cs_nvml_gpu *gpus, size_t n, char (*booked)[200], char *why,
		     size_t size);

typedef enum cs_book_whose {
	CS_BOOK_NODES = 0, /* the node's, or it cannot be told */
	CS_BOOK_SANDBOXS, /* gVisor: file locks are the sandbox's own (a warning) */
	CS_BOOK_PRIVATE, /* this mount namespace has its own (a restore is refused) */
} cs_book_whose;

/* Whether the book at path is the node's as far as can be told; why gets
 * why not ("" for CS_BOOK_NODES). For doctor and --dry-run as for the
 * restore. */
cs_book_whose cs_gpubook_whose(const char *path, int bookfd, char *why, size_t size);

#endif
