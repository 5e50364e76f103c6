/* Who holds the flock on a process's pidfd, and whether that holder is one
 * that keeps a claim off the process (the rule is in claim.h). Only /proc
 * is read. */
#ifndef CS_HOLDER_H
#define CS_HOLDER_H

#include <stddef.h>
#include <sys/types.h>

typedef enum cs_holder_kind {
	/* No process of this PID namespace holds it: a holder in another one. */
	CS_HOLDER_UNKNOWN = 0,
	/* At least one holder is privileged over the process. */
	CS_HOLDER_PRIVILEGED,
	/* Every holder found is unprivileged: the lock is not a claim. */
	CS_HOLDER_UNPRIVILEGED,
} cs_holder_kind;

/* Judges the holders of the flock that another open file holds on fd's
 * file, fd being a pidfd of target (on pidfs, one inode per process). With
 * CS_HOLDER_UNPRIVILEGED, who names them ("pid 7, 'python3 hold.py' (uid
 * 65534)", and how many more); else who is "". */
cs_holder_kind cs_holder_judge(int fd, pid_t target, char *who, size_t size);

#endif
