/* The files a park writes a process's GPU memory into (cudasnap checkpoint
 * --park-to DIR), made, checked and removed by cudasnap, never by the
 * process: cudasnap opens them and passes the descriptors, so the process
 * needs to see nothing of DIR, and whatever the host memory of the files
 * costs (a memory-backed DIR) is allocated here, in cudasnap's memory
 * cgroup, by the preallocation. Layout: park_find.h. */
#ifndef CS_PARK_FILES_H
#define CS_PARK_FILES_H

#include "cudasnap.h"
#include "park_find.h"

#include <stdatomic.h>

typedef struct cs_park_room cs_park_room;
typedef struct cs_park_files {
	int fd[PARK_FILES_MAX];
	unsigned n;
	cs_park_room *room; /* their space still being reserved (parkroom.c); NULL none */
} cs_park_files;

/* The directory given: an absolute path to a directory (not a symbolic
 * link, at no step of the path) owned by root or cudasnap's user, that no
 * other user can write (a sticky one neither: the files of a checkpoint
 * must not be replaced between its checkpoint and its restore). A
 * descriptor, or -1 with err (CS_EUSAGE). */
int cs_park_dir_open(const char *path, cs_error *err);
/* Bytes free in it for cudasnap's user; -1 when the file system does not say. */
long long cs_park_dir_free(int dirfd);
/* The files for bytes of memory: enough to keep a storage device busy,
 * none empty. */
unsigned cs_park_files_count(unsigned long long bytes);
/* The pinned staging the interposer holds in the process while it parks
 * bytes into files (one buffer per file's thread). */
unsigned long long cs_park_files_staging(unsigned long long bytes);
/* The base name of a process's files: "cudasnap-gpumem.PID.START"; file i
 * is NAME.i. */
void cs_park_files_name(pid_t pid, unsigned long long start_time, char *out, size_t size);
/* Makes the n files of bytes (new: an existing one is refused, which two
 * checkpoints of one process into one DIR would meet) with their space
 * allocated, this user's and mode 0600: what root parks, the process's
 * user can neither read nor change. grow: their space is reserved while
 * the park writes them (an interposer that waits for it: cs_park_info's
 * version 2), until cs_park_files_reserved; else before this returns. 0,
 * or -1 with err and nothing left behind. */
int cs_park_files_make(int dirfd, const char *dir, const char *name, unsigned n, unsigned long long bytes, bool grow,
		       cs_park_files *f, cs_error *err);
/* After the park: the reservation's end, waited for (failed: the park
 * failed, and the reservation stops at its next piece). 0, or -1 with err
 * saying that dir has no room (the files, dir/name.*, are left to the
 * caller). */
int cs_park_files_reserved(cs_park_files *f, bool failed, int dirfd, const char *dir, const char *name,
			   unsigned long long bytes, cs_error *err);
/* Whether name.0 .. name.(n-1) in dirfd, and no more, are the files of a
 * park of bytes (each of its size). */
bool cs_park_files_match(int dirfd, const char *name, unsigned n, unsigned long long bytes);
/* --park-from DIR/NAME: an absolute directory and a park's base name
 * (cs_park_files_name's), each fitting its buffer: 0, or -1 with err. */
int cs_park_from_split(const char *path, char *dir, size_t dsize, char *name, size_t nsize, cs_error *err);
/* Opens the n files of bytes for an unpark of process pid (0: not known),
 * checking each is a regular file of one name, root's, this user's or
 * pid's user's, of the size it had: 0, or -1 with err naming what is
 * missing, of another size or owner, or replaced by a link. */
int cs_park_files_open(int dirfd, const char *dir, const char *name, unsigned n, unsigned long long bytes, pid_t pid,
		       cs_park_files *f, cs_error *err);
/* Closes them, once a reservation under way has ended. */
void cs_park_files_close(cs_park_files *f);

/* parkroom.c: the files' space. bytes [0, size) of fd reserved, a piece
 * at a time from its start (the size grows with it), until *stop: 0 or an
 * errno (ECANCELED: stopped). Where the file system reserves nothing
 * (ramfs), zeros are written: its pages are then this process's too. */
int cs_park_reserve(int fd, off_t size, const atomic_bool *stop);
/* Reserves f's files for a park of bytes in threads of their own, each
 * file from its start on: 0, or -1 (nothing started). */
int cs_park_room_start(cs_park_files *f, unsigned long long bytes);
/* The pipe's read end the park is given (its write end closes when the
 * reservation ends); -1 when none is under way. */
int cs_park_room_fd(const cs_park_files *f);
/* Asks it to stop at its next piece (nothing will be written). */
void cs_park_room_stop(cs_park_files *f);
/* Waits for it to end: 0, or the first file's errno. */
int cs_park_room_end(cs_park_files *f);
/* Removes them (the directory synced after). */
void cs_park_files_remove(int dirfd, const char *name, unsigned n);

#endif
