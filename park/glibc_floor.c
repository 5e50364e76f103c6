/* The stat family for glibc_floor.h: glibc exports fstat, fstat64 and
 * stat64 only from 2.33 (before, they were inline calls of __fxstat64 and
 * __xstat64, which every glibc since keeps). Hidden: the interposer's own
 * (and its libsodium's), never the program's. No <sys/stat.h> here, whose
 * declarations name these functions otherwise. */
struct stat;
struct stat64;

extern int __fxstat64(int ver, int fd, struct stat64 *buf);
extern int __xstat64(int ver, const char *path, struct stat64 *buf);
__asm__(".symver __fxstat64,__fxstat64@GLIBC_2.2.5");
__asm__(".symver __xstat64,__xstat64@GLIBC_2.2.5");

#define STAT_VER 1 /* _STAT_VER_LINUX on x86-64: struct stat is the kernel's */
#define HIDDEN __attribute__((visibility("hidden")))

HIDDEN int fstat(int fd, struct stat *buf);
HIDDEN int fstat64(int fd, struct stat64 *buf);
HIDDEN int stat64(const char *path, struct stat64 *buf);

int fstat(int fd, struct stat *buf)
{
	return __fxstat64(STAT_VER, fd, (struct stat64 *)buf);
}

int fstat64(int fd, struct stat64 *buf)
{
	return __fxstat64(STAT_VER, fd, buf);
}

int stat64(const char *path, struct stat64 *buf)
{
	return __xstat64(STAT_VER, path, buf);
}
