/* The node's book of GPU restores seen from outside a restore: whether the
 * book reached is the node's, and what the restores in flight booked, for
 * a plan shown before anything changes (gpubook.h). */
#ifndef CS_GPUNODE_H
#define CS_GPUNODE_H

#include "gpubook.h"
#include "nvml.h"

#include <stddef.h>

/* For a plan (--dry-run) before any restore: what the restores in flight
 * book on each of gpus[0..n) is taken off its free memory (a booking that
 * cannot be read: all of it) and said in booked[i] ("" where none); why
 * gets, when the node's book cannot be used, why not (a restore is then
 * refused), else "". Waits at most 2 s for the book's lock; creates
 * nothing. d: to judge orphans (may be NULL). */
void cs_gpubook_plan(cs_driver *d, cs_nvml_gpu *gpus, size_t n, char (*booked)[200], char *why, size_t size);

/* Whether the book at path is the node's as far as can be told: "" when it
 * is or cannot be told, else why not (this cudasnap's mount namespace has
 * its own, gVisor keeps file locks to the sandbox). For doctor and
 * --dry-run as for the restore. */
void cs_gpubook_whose(const char *path, int bookfd, char *why, size_t size);

#endif
