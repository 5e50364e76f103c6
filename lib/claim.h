/* Claims: two operations never act on one process at once, whoever runs
 * them (the command line, the CRIU plugin of one pod and of another, the
 * gVisor hook), while operations on different processes run side by side.
 *
 * A claim is an flock on <state dir>/claims/<pidns inode>-<pid there>,
 * names every PID namespace agrees on, so that a caller on the host and one
 * in the process's container sharing the state directory meet on the same
 * file. The kernel drops it when its holder dies; a holder removes the file
 * when it lets go. */
#ifndef CS_CLAIM_H
#define CS_CLAIM_H

#include "cudasnap.h"
#include "util.h"

typedef struct cs_claims {
	int dirfd; /* <state dir>/claims */
	int *fds;
	char (*names)[48];
	size_t n, cap;
} cs_claims;

/* Adds the claim of pid (comm names it in messages) for command, which is
 * written into the file for whoever meets it. Fails, with err naming the
 * process and the holder, when another holds it; what c held before stays
 * held. c starts empty (cs_claims_init) and lets go of everything at
 * cs_claims_release. */
int cs_claims_add(cs_claims *c, int statefd, pid_t pid, const char *comm, const char *command, cs_error *err);
void cs_claims_init(cs_claims *c);
void cs_claims_release(cs_claims *c);
CS_DEFINE_CLEANUP_STRUCT(cs_claims, cs_claims_release)

#endif
