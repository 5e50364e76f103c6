/* Small helpers shared by the library and the command line. */
#ifndef CS_UTIL_H
#define CS_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void cs_freep(void *p) { free(*(void **)p); }
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

#define _cleanup_free_ __attribute__((cleanup(cs_freep)))
#define _cleanup_close_ __attribute__((cleanup(cs_closep)))
#define _cleanup_fclose_ __attribute__((cleanup(cs_fclosep)))
#define _cleanup_closedir_ __attribute__((cleanup(cs_closedirp)))

#define CS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Grows *v (element size sz) so that it can hold at least need elements. */
int cs_grow(void *v, size_t *cap, size_t need, size_t sz);

/* Strict decimal parse of a whole string into [min, max]; returns -EINVAL or -ERANGE. */
int cs_parse_long(const char *s, long min, long max, long *out);

/* Reads a whole small file relative to dirfd into buf (NUL-terminated);
 * returns the length or -errno. Never reads more than size-1 bytes. */
ssize_t cs_read_at(int dirfd, const char *name, char *buf, size_t size);

#endif
