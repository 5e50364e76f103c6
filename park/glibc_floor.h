/* Included first into every object of the interposer (park/meson.build):
 * it is preloaded into containers whose C library may be as old as the
 * oldest CUDA images still ship (UBI 8 and Rocky Linux 8: glibc 2.28), and
 * the loader refuses a library that needs a symbol version its C library
 * lacks, stopping the program. The functions glibc 2.32-2.34 versioned
 * anew (when libpthread and libdl moved into libc) are bound to the
 * versions every glibc since 2.12 has, which new ones keep; libpthread.so.0
 * and libdl.so.2, where old ones define them, are needed by name (new ones
 * keep both, empty). The stat family, which glibc exported only from 2.33,
 * is glibc_floor.c's. A .symver binds the references of its own object
 * alone: the interposer is built without link-time optimization, which
 * would move code away from them. tests/lint/glibc_floor.py checks the
 * result, in the package's build too. */
#ifndef CS_PARK_GLIBC_FLOOR_H
#define CS_PARK_GLIBC_FLOOR_H

#if defined(__x86_64__) && defined(__linux__) && !defined(__ASSEMBLER__)
#include <features.h>
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
__asm__(".symver pthread_setname_np,pthread_setname_np@GLIBC_2.12");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
/* glibc 2.38's headers turn strtol and its kin, under _GNU_SOURCE, into
 * their C23 forms (which also read "0b"): the interposer parses decimal
 * and hex, which the old ones read alike. */
#if __GLIBC_PREREQ(2, 38)
__asm__(".symver __isoc23_strtol,strtol@GLIBC_2.2.5");
__asm__(".symver __isoc23_strtoul,strtoul@GLIBC_2.2.5");
__asm__(".symver __isoc23_strtoll,strtoll@GLIBC_2.2.5");
__asm__(".symver __isoc23_strtoull,strtoull@GLIBC_2.2.5");
#endif
#endif

#endif
