/* A process's pids cgroup chain: the threads it may still start. A park
 * into files runs threads in the process (two for each file); where its
 * pids.max leaves fewer, the park's own thread takes the other lanes in
 * turn, and the plan says so. */
#ifndef CS_PIDS_H
#define CS_PIDS_H

#include <stddef.h>
#include <sys/types.h>

/* The smallest pids.max - pids.current (0 at the least) from pid's own
 * pids cgroup up to the top this process's cgroup mounts show (v1 pids
 * controller, else v2); -1 when no limit is seen there or none can be
 * read. where gets the cgroup whose limit decides ("" for -1). */
long long cs_pids_room(pid_t pid, char *where, size_t size);

#endif
