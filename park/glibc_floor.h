/* Included first into every object of the interposer (park/meson.build):
 * it is preloaded into containers whose C library may be as old as the
 * oldest CUDA images still ship (UBI 8 and Rocky Linux 8: glibc 2.28), and
 * the loader refuses a library that needs a symbol version its C library
 * lacks, stopping the program. The functions glibc 2.32-2.34 versioned
 * anew (when libpthread and libdl moved into libc) are bound to the
 * versions every glibc since 2.12 has, which new ones keep; libpthread.so.0
 * and libdl.so.2, where old ones define them, are needed by name (new ones
 * keep both, empty). The stat family, which glibc exported only from 2.33,
 * is glibc_floor.c's. tests/lint/glibc_floor.py checks the result. */
#ifndef CS_PARK_GLIBC_FLOOR_H
#define CS_PARK_GLIBC_FLOOR_H

#if defined(__x86_64__) && defined(__linux__) && !defined(__ASSEMBLER__)
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
__asm__(".symver pthread_setname_np,pthread_setname_np@GLIBC_2.12");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
#endif

#endif
