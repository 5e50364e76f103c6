/* What gate_x86_64.S and gate.c share: the layout of a thread's record of
 * calls in the gate, and the numbering of the gated stubs. */
#ifndef CS_PARK_GATE_ABI_H
#define CS_PARK_GATE_ABI_H

/* A stub is 16 bytes: endbr64, the slot's number into %r11d, a jump. */
#define GATE_STUB_SIZE 16
/* Stubs made at run time for entry points obtained by dlsym or
 * cuGetProcAddress; the named ones (driver_api.inc) come first. */
#define GATE_DYN_SLOTS 4096
/* The most bytes of the caller's stack arguments copied for the driver's
 * function, and what is copied for a function whose arguments are not
 * known (driver_stack.inc): 16 words, room for 22 integer arguments; the
 * driver's largest function (cuTensorMapEncodeIm2colWide) takes 16. */
#define GATE_STACK_ARGS 128

/* struct gate_rec (gate.c): offsets of its counters */
#define GATE_REC_COUNT 0 /* calls begun (some may step back) */
#define GATE_REC_HELD 8 /* calls let through, nested ones included */

#endif
