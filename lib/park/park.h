/* cudasnap's side of parking (park/): asking an interposed process to park
 * its device memory before the driver's lock, and to unpark it after the
 * driver's restore and unlock. What the process answers is untrusted text,
 * parsed with bounds. */
#ifndef CS_PARK_CLIENT_H
#define CS_PARK_CLIENT_H

#include "cudasnap.h"
#include "claim.h"

/* What a process's control socket says of it. */
typedef struct cs_park_info {
	bool seen; /* it runs the interposer and answered */
	/* its interposer's: 2 waits for the space of a park's files while
	 * cudasnap reserves it (park/files.c); 1 writes at once */
	unsigned version;
	/* it runs an interposer that started its control socket, which did not
	 * answer: removed, every connection taken, or the process overloaded */
	bool unreachable;
	bool parked; /* its memory is in host memory now */
	bool parkable; /* nothing it does stops a park */
	unsigned long long bytes; /* the memory a park moves (or moved) */
	unsigned imports; /* other interposed processes' memory it maps and can detach (CUDA IPC, VMM) */
	unsigned legacy; /* the driver's CUDA IPC imports (never restorable) */
	unsigned vmm; /* VMM imports the program made itself that cannot be detached (never restorable) */
	unsigned pools; /* memory pools imported from another process (never restorable) */
	unsigned attached; /* other processes that map its memory */
	unsigned held; /* connections that hold its park (0: a committed park, or none) */
	unsigned unclaimed; /* VMM exports whose descriptor its interposer keeps until a park */
	unsigned files; /* parked into this many files (0: into host memory, or not parked) */
	/* VMM memory the program maps itself (cuMemCreate, cuMemMap), which a
	 * park leaves to the driver's checkpoint: the bytes of its mappings (a
	 * handle mapped twice counts twice), and how many */
	unsigned long long own_vmm_bytes;
	unsigned own_vmm_maps;
	char why[160]; /* when not parkable */
} cs_park_info;

/* A parsed answer: ok (0) or error (-1), with its keys. */
typedef struct cs_park_answer {
	bool ok;
	int code;
	char stage[32];
	long busy;
	int busy_tid; /* quiesce: a thread with a call under way */
	int pid; /* status: the answering process, in its own PID namespace */
	int importer; /* check: a process that maps its memory */
	char why[160];
	unsigned long long bytes;
	double quiesce_s, copy_s, release_s, map_s, total_s, gbps;
	unsigned files, direct; /* park into files: how many, written with O_DIRECT */
	int file, err_no; /* a file's failure: which, and its errno */
	unsigned long long piece;
} cs_park_answer;

/* Parses one answer line into a (and info, for a status answer, when not
 * NULL); -1 when it is not one. Exposed for the fuzzer. */
int cs_park_parse(const char *line, cs_park_answer *a, cs_park_info *info);

/* Asks pid (in cudasnap's /proc) what it is; info->seen false when it runs
 * no interposer or does not answer within timeout_ms. */
void cs_park_status(pid_t pid, unsigned timeout_ms, cs_park_info *info);
/* Whether pid's interposer says its memory is parked (1), not parked (0),
 * or cannot tell within a second (<0): the judge of UNPARK orphans
 * (gpuorphan.h). */
int cs_park_parked_now(pid_t pid);

/* cs_left_behind_say (claim.h) of b, its process found in t and, where
 * only its park files are left beside it, its interposer asked whether it
 * is parked in them: what ps, doctor and the commands' warnings say. */
void cs_park_left_say(const cs_left_behind *b, const cs_ptable *t, char *line, size_t lsize, char *fix, size_t fsize);

/* Why a process whose interposer cannot be reached (info->unreachable) is
 * refused, and what to do about it. */
extern const char cs_park_unreachable_why[], cs_park_unreachable_fix[];

/* Whether a park of info's process has anything to do: memory to move,
 * imports to let go of, or importers of its memory to answer for (an
 * exporter of VMM memory the program made has nothing to move itself). */
bool cs_park_wanted(const cs_park_info *info);

/* Whether a CUDA IPC file (/dev/shm/cuda.shm.*) that info's process maps
 * without holding it is an interprocess event's, not imported memory's.
 * Both leave such a file (PyTorch shares a CUDA tensor with an event), and
 * the driver restores an event's importer (driver 580, kept or destroyed)
 * but never a memory importer. A process that runs the interposer makes
 * every memory import through it and counts those the driver made
 * (legacy): with none, the file is an event's. */
bool cs_park_shm_is_events(const cs_park_info *info);

/* Whether info (cs_park_status's) says that its process maps memory of
 * another process in a way the driver can never restore after a
 * checkpoint: imports it cannot detach (the driver's own CUDA IPC, VMM
 * memory the program imported itself from a process without the
 * interposer), or any
 * import when it will not be parked (parking false). What to call it goes
 * into what. */
bool cs_park_import_what(const cs_park_info *info, bool parking, char *what, size_t size);

/* What of its memory a park leaves to the driver: the VMM memory the
 * program maps itself, in words; false when there is none. */
bool cs_park_own_vmm_say(const cs_park_info *info, char *out, size_t size);
/* Whether the driver could never give back a process: proc_file, the CUDA
 * IPC file /proc shows it mapping without holding it (cs_proc.ipc_import,
 * "" none), when its interposer did not answer (info->seen false); else
 * what the interposer counts (cs_park_import_what), which tells an event's
 * file from imported memory. What names it goes into what. */
bool cs_park_unrestorable(const cs_park_info *info, const char *proc_file, bool parking, char *what, size_t size);

/* The step itself: park (held on a connection kept in *conn until
 * cs_park_close; *conn -1 opens one) or unpark; timeout_ms bounds the wait
 * for the program's calls in flight, answer_s the whole answer. 0, or -1
 * with err filled; a gets the answer's timings. */
/* How long the answer to a park or unpark of bytes may take: the driver's
 * deadline for moving as much, plus timeout_ms for the calls in flight. */
double cs_park_answer_s(const cs_driver *d, unsigned long long bytes, unsigned timeout_ms);
/* files: the files the memory goes into or comes from (parkfiles.h),
 * passed to the process with the request; NULL or none: host memory. */
struct cs_park_files;
int cs_park_step(const cs_target *t, bool park, int *conn, unsigned timeout_ms, double answer_s,
		 const struct cs_park_files *files, cs_park_answer *a, cs_error *err);
/* Ends a held park: commit keeps it parked once cudasnap is gone; without,
 * the process unparks itself. */
void cs_park_close(int *conn, bool commit);
/* Leaves an unpark request in the control socket of pid, which may be
 * stopped (by a snapshot engine that holds it): the process unparks once it
 * runs again, and nobody waits for its answer. 0, or -1 when the request
 * could not be left. */
int cs_park_queue_unpark(pid_t pid, unsigned timeout_ms, const struct cs_park_files *files);

#endif
