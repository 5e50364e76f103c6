/* Gated entry points: one small stub per driver function, whatever its
 * signature. Two kinds: the driver's names, exported (driver_api.inc),
 * which a program linked with -lcuda binds by name, and stubs handed out
 * at run time for what dlsym and cuGetProcAddress return (gate.c).
 *
 * A stub puts its number in %r11 and jumps to park_tramp_common, which
 * counts the call in the calling thread's record (gate.c), copies the
 * caller's stack arguments (as many bytes as the function takes,
 * park_slot_stack: a copy past them could cross the end of a makecontext
 * stack into its guard page), and calls the real function: an ordinary
 * call and return, so that the shadow stack (CET) and the unwinder (the
 * CFI below) see an ordinary frame. While a park holds the gate, a call
 * that is not already inside it waits in gate.c.
 *
 * The count is a plain increment of a record only this thread (and its
 * signal handlers) writes; the park orders it against its own store of
 * park_gate_closed with membarrier(2). Where membarrier cannot be used,
 * park_gate_plain is 0 and the increments are locked. */
#include "gate_abi.h"

#define N(name) gate_named name
#define S(name) gate_named name

	.text

/* ---- the stubs ---- */

	.set gate_i, 0
	.macro gate_named name
	.balign GATE_STUB_SIZE
	endbr64
	movl $gate_i, %r11d
	jmp park_tramp_common
	.set gate_i, gate_i + 1
	.endm

	.globl park_name_stubs
	.hidden park_name_stubs
	.type park_name_stubs, @function
	.balign GATE_STUB_SIZE
park_name_stubs:
	/* The stubs touch no stack: the caller's frame is the unwinder's. */
	.cfi_startproc
#include "driver_api.inc"
	.set park_nnames, gate_i
	.globl park_dyn_stubs
	.hidden park_dyn_stubs
park_dyn_stubs:
	.rept GATE_DYN_SLOTS
	.balign GATE_STUB_SIZE
	endbr64
	movl $gate_i, %r11d
	jmp park_tramp_common
	.set gate_i, gate_i + 1
	.endr
	.cfi_endproc
	.size park_name_stubs, . - park_name_stubs

/* ---- the common part ---- */

/* Frame below %rbp: -8 the real function, -16 the thread's record (0: the
 * shared one), -24 how many bytes of stack arguments it takes, then 192
 * bytes at %rsp: the argument registers while C runs, later the stack
 * arguments passed on (at most GATE_STACK_ARGS bytes). */
#define FRAME 224

#define SAVE_ARGS \
	movq %rdi, 0(%rsp); movq %rsi, 8(%rsp); movq %rdx, 16(%rsp); \
	movq %rcx, 24(%rsp); movq %r8, 32(%rsp); movq %r9, 40(%rsp); \
	movq %rax, 48(%rsp); movdqa %xmm0, 64(%rsp); movdqa %xmm1, 80(%rsp); \
	movdqa %xmm2, 96(%rsp); movdqa %xmm3, 112(%rsp); movdqa %xmm4, 128(%rsp); \
	movdqa %xmm5, 144(%rsp); movdqa %xmm6, 160(%rsp); movdqa %xmm7, 176(%rsp)

#define RESTORE_ARGS \
	movq 0(%rsp), %rdi; movq 8(%rsp), %rsi; movq 16(%rsp), %rdx; \
	movq 24(%rsp), %rcx; movq 32(%rsp), %r8; movq 40(%rsp), %r9; \
	movq 48(%rsp), %rax; movdqa 64(%rsp), %xmm0; movdqa 80(%rsp), %xmm1; \
	movdqa 96(%rsp), %xmm2; movdqa 112(%rsp), %xmm3; movdqa 128(%rsp), %xmm4; \
	movdqa 144(%rsp), %xmm5; movdqa 160(%rsp), %xmm6; movdqa 176(%rsp), %xmm7

	.globl park_tramp_common
	.hidden park_tramp_common
	.type park_tramp_common, @function
	.balign 16
park_tramp_common:
	.cfi_startproc
	/* at entry: (%rsp) the caller's return address, 8 mod 16; %r11 the slot */
	pushq %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	movq %rsp, %rbp
	.cfi_def_cfa_register %rbp
	subq $FRAME, %rsp
	leaq park_slot_stack(%rip), %r10
	movzbl (%r10,%r11), %r10d
	movq %r10, -24(%rbp)
	leaq park_slot_real(%rip), %r10
	movq (%r10,%r11,8), %r10
	testq %r10, %r10
	jz .Lresolve
.Lhave_real:
	movq %r10, -8(%rbp)
	movq park_gate_rec@gottpoff(%rip), %r11
	movq %fs:(%r11), %r10
	testq %r10, %r10
	jz .Lclaim
.Lhave_rec:
	cmpb $0, park_gate_plain(%rip)
	je .Llocked_in
	incq GATE_REC_COUNT(%r10)
.Lcounted:
	cmpl $0, park_gate_shut(%rip)
	jne .Lclosed
.Lpass:
	incq GATE_REC_HELD(%r10)
	movq %r10, -16(%rbp)
.Lcall:
	/* the stack arguments, last word first: only %r10 and %r11 are free */
	movq -24(%rbp), %r11
1:	testq %r11, %r11
	jz 2f
	subq $8, %r11
	movq 16(%rbp,%r11), %r10
	movq %r10, (%rsp,%r11)
	jmp 1b
2:	call *-8(%rbp)
	movq -16(%rbp), %r10
	testq %r10, %r10
	jz .Lleave_shared
	decq GATE_REC_HELD(%r10)
	cmpb $0, park_gate_plain(%rip)
	je .Llocked_out
	decq GATE_REC_COUNT(%r10)
.Lret:
	leave
	.cfi_remember_state
	.cfi_def_cfa %rsp, 8
	ret
	.cfi_restore_state

.Llocked_in:
	lock incq GATE_REC_COUNT(%r10)
	jmp .Lcounted
.Llocked_out:
	lock decq GATE_REC_COUNT(%r10)
	jmp .Lret

	/* The gate is closed: a call of a thread already inside goes on (a
	 * signal handler's, or a wrapper's that calls the next library), and
	 * so does one the driver makes itself (its caller lies in the driver);
	 * any other steps back and waits for the gate to open. */
.Lclosed:
	cmpq $0, GATE_REC_HELD(%r10)
	jne .Lpass
	movq %r10, -16(%rbp)
	SAVE_ARGS
	movq 8(%rbp), %rdi
	call park_gate_from_driver
	movl %eax, %r11d
	RESTORE_ARGS
	movq -16(%rbp), %r10
	testl %r11d, %r11d
	jnz .Lpass
	cmpb $0, park_gate_plain(%rip)
	je 1f
	decq GATE_REC_COUNT(%r10)
	jmp 2f
1:	lock decq GATE_REC_COUNT(%r10)
2:	SAVE_ARGS
	call park_gate_wait_open
	RESTORE_ARGS
	movq park_gate_rec@gottpoff(%rip), %r11
	movq %fs:(%r11), %r10
	jmp .Lhave_rec

	/* A named stub's first call: the next definition of its name. */
.Lresolve:
	SAVE_ARGS
	movl %r11d, %edi
	call park_gate_resolve
	movq %rax, -8(%rbp)
	RESTORE_ARGS
	movq -8(%rbp), %r10
	jmp .Lhave_real

	/* The thread's first call: a record of its own, or the shared one. */
.Lclaim:
	SAVE_ARGS
	call park_gate_claim
	movq %rax, -16(%rbp)
	RESTORE_ARGS
	movq -16(%rbp), %r10
	testq %r10, %r10
	jnz .Lhave_rec
	SAVE_ARGS
	call park_gate_enter_shared
	RESTORE_ARGS
	movq $0, -16(%rbp)
	jmp .Lcall

.Lleave_shared:
	movq %rax, 0(%rsp)
	movq %rdx, 8(%rsp)
	movdqa %xmm0, 16(%rsp)
	movdqa %xmm1, 32(%rsp)
	call park_gate_leave_shared
	movq 0(%rsp), %rax
	movq 8(%rsp), %rdx
	movdqa 16(%rsp), %xmm0
	movdqa 32(%rsp), %xmm1
	jmp .Lret
	.cfi_endproc
	.size park_tramp_common, . - park_tramp_common

/* ---- the exported names ----
 * Each driver name is a GNU indirect function: the dynamic linker asks its
 * resolver for the address when it binds the name (a call by name, or
 * dlsym). The resolver answers the name's gated stub or wrapper; where
 * the loaded driver lacks the name, nothing to a dlsym of it and the
 * plain stub to a binding (resolve.c: park_ifunc). Before this
 * library is relocated (an object relocated ahead of it binds a name), it
 * answers the stub or wrapper at once: park_ifunc could not run yet. */

#undef N
#undef S
#define N(name) gate_resolver name, 0
#define S(name) gate_resolver name, 1

	.set gate_i, 0
	.macro gate_resolver name, special
	.globl \name
	.type \name, @gnu_indirect_function
	.balign 16
\name:
	endbr64
	movl $gate_i, %edi
	.if \special
	leaq park_sp_\name(%rip), %rsi
	.else
	xorl %esi, %esi
	.endif
	jmp park_ifunc_common
	.size \name, . - \name
	.set gate_i, gate_i + 1
	.endm

#include "driver_api.inc"

	.type park_ifunc_common, @function
	.balign 16
park_ifunc_common:
	.cfi_startproc
	movq park_self(%rip), %rax
	leaq park_self(%rip), %rdx
	cmpq %rax, %rdx
	jne 1f
	jmp park_ifunc
1:	movq %rsi, %rax
	testq %rax, %rax
	jnz 2f
	movl %edi, %eax
	shlq $4, %rax
	leaq park_name_stubs(%rip), %rdx
	addq %rdx, %rax
2:	ret
	.cfi_endproc
	.size park_ifunc_common, . - park_ifunc_common

/* ---- the names, for gate.c ---- */

#undef N
#undef S
#define N(name) gate_string name
#define S(name) gate_string name

	.macro gate_string name
.Ls_\name:
	.asciz "\name"
	.endm
	.macro gate_offset name
	.long .Ls_\name - park_name_strs
	.endm

	.section .rodata
	.globl park_name_strs
	.hidden park_name_strs
park_name_strs:
#include "driver_api.inc"

#undef N
#undef S
#define N(name) gate_offset name
#define S(name) gate_offset name

	.balign 4
	.globl park_name_offs
	.hidden park_name_offs
park_name_offs:
#include "driver_api.inc"

	.globl park_name_count
	.hidden park_name_count
park_name_count:
	.long park_nnames

/* Bytes of stack arguments each stub's function takes: a named stub's from
 * driver_stack.inc (GATE_STACK_ARGS where it does not know the name), a
 * dynamic stub's set with its function. */
#undef N
#undef S
#define K(name, bytes) .set park_stk_##name, bytes;
#define U(name) .set park_stk_##name, GATE_STACK_ARGS;
#include "driver_stack.inc"
#define N(name) gate_stack name
#define S(name) gate_stack name
	.macro gate_stack name
	.ifdef park_stk_\name
	.if park_stk_\name % 8 || park_stk_\name > GATE_STACK_ARGS
	.error "stack arguments of \name: not whole words, or more than GATE_STACK_ARGS"
	.endif
	.byte park_stk_\name
	.else
	.byte GATE_STACK_ARGS
	.endif
	.endm

	.data
	.globl park_slot_stack
	.hidden park_slot_stack
park_slot_stack:
#include "driver_api.inc"
	.rept GATE_DYN_SLOTS
	.byte GATE_STACK_ARGS
	.endr

/* Whether this library has been relocated: the word holds its own address
 * once the dynamic linker has applied its relocations. */
	.section .data.rel.ro, "aw"
	.balign 8
park_self:
	.quad park_self

/* The real function behind each stub; a named stub's is found at its first
 * call (gate.c: park_gate_resolve), a dynamic stub's is set before the stub
 * is handed out. */
	.bss
	.balign 64
	.globl park_slot_real
	.hidden park_slot_real
park_slot_real:
	.zero 8 * (park_nnames + GATE_DYN_SLOTS)

	.section .note.GNU-stack,"",@progbits

#ifdef __CET__
/* Indirect branch tracking and shadow stack: every entry starts with
 * endbr64, and every call returns where it was called from. */
	.section .note.gnu.property,"a"
	.balign 8
	.long 4
	.long 16
	.long 5 /* NT_GNU_PROPERTY_TYPE_0 */
	.asciz "GNU"
	.long 0xc0000002 /* GNU_PROPERTY_X86_FEATURE_1_AND */
	.long 4
	.long 3 /* IBT, SHSTK */
	.balign 8
#endif
