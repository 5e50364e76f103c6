/* Small helpers shared by the library and the command line. */
#ifndef CS_UTIL_H
#define CS_UTIL_H

#include "cudasnap.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- cleanup attributes -------------------------------------------------
 * A variable declared with one of these is released when it goes out of
 * scope, on every return path; a function that builds something and hands
 * it out does so with TAKE_PTR / TAKE_FD / TAKE_STRUCT, which leave the
 * variable empty so that nothing is released twice. */

static inline void cs_freep(void *p)
{
	free(*(void **)p);
}
static inline void cs_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}
static inline void cs_fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}
static inline void cs_closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(cs_freep)
#define _cleanup_close_ _cleanup_(cs_closep)
#define _cleanup_fclose_ _cleanup_(cs_fclosep)
#define _cleanup_closedir_ _cleanup_(cs_closedirp)

/* type is a type name, which cannot be put in parentheses. */
// NOLINTBEGIN(bugprone-macro-parentheses)

/* For a heap object released by func(type *): defines func##p, so that
 * `_cleanup_(func##p) type *x = NULL;` calls func(x) unless x is NULL. */
#define CS_DEFINE_CLEANUP(type, func) \
	static inline void func##p(type **p) \
	{ \
		if (*p) \
			func(*p); \
	}

/* For a struct on the stack emptied by func(type *), which must accept a
 * zeroed struct: defines func##p, so that `_cleanup_(func##p) type x = { 0 };`
 * calls func(&x). */
#define CS_DEFINE_CLEANUP_STRUCT(type, func) \
	static inline void func##p(type *p) \
	{ \
		func(p); \
	}

// NOLINTEND(bugprone-macro-parentheses)

/* Returns p and sets it to NULL: the caller now owns what p pointed to. */
#define TAKE_PTR(p) \
	({ \
		__typeof__(p) *take_ptr_p_ = &(p); \
		__typeof__(p) take_ptr_v_ = *take_ptr_p_; \
		*take_ptr_p_ = NULL; \
		take_ptr_v_; \
	})

/* Returns fd and sets it to -1: the caller now owns the descriptor. */
#define TAKE_FD(fd) \
	({ \
		int *take_fd_p_ = &(fd); \
		int take_fd_v_ = *take_fd_p_; \
		*take_fd_p_ = -1; \
		take_fd_v_; \
	})

/* Returns struct s and zeroes it: what s owned now belongs to the copy. */
#define TAKE_STRUCT(s) \
	({ \
		__typeof__(s) *take_struct_p_ = &(s); \
		__typeof__(s) take_struct_v_ = *take_struct_p_; \
		memset(take_struct_p_, 0, sizeof(s)); \
		take_struct_v_; \
	})

/* The library's own types. */
CS_DEFINE_CLEANUP(cs_driver, cs_driver_free)
CS_DEFINE_CLEANUP(cs_session, cs_session_free)
CS_DEFINE_CLEANUP_STRUCT(cs_ptable, cs_ptable_free)

/* ---- files and directories ------------------------------------------------ */

/* Wraps a directory fd in a stream, which then owns it (dirfd(d) gives it
 * back for *at calls); on failure closes fd and returns NULL, errno kept. */
DIR *cs_fdopendir(int fd);

/* Opens path (relative to dirfd, or AT_FDCWD) as a directory stream, with
 * O_RDONLY | O_DIRECTORY | O_CLOEXEC; NULL with errno set on failure, and no
 * fd left open. */
DIR *cs_opendir_at(int dirfd, const char *path);

/* Opens path (relative to dirfd) for reading as a stream, O_CLOEXEC; NULL
 * with errno set on failure, and no fd left open. */
FILE *cs_fopen_at(int dirfd, const char *path);

#define CS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Grows *v (element size sz) so that it can hold at least need elements. */
int cs_grow(void *v, size_t *cap, size_t need, size_t sz);

/* Strict decimal parse of a whole string into [min, max]; returns -EINVAL or -ERANGE. */
int cs_parse_long(const char *s, long min, long max, long *out);

/* Writes all len bytes (retrying short writes and EINTR); 0 or -errno. */
int cs_write_all(int fd, const void *data, size_t len);

/* Reads a whole small file relative to dirfd into buf (NUL-terminated);
 * returns the length or -errno. Never reads more than size-1 bytes. */
ssize_t cs_read_at(int dirfd, const char *name, char *buf, size_t size);

#endif
