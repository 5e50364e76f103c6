/* Gated entry points: one small stub per driver function the program
 * obtained, whatever its signature. A stub saves the argument registers,
 * asks park_tramp_enter (gate.c) for the real function (waiting there while
 * the gate is closed), puts park_tramp_leave in place of its caller's
 * return address, and jumps to the real function with the arguments and
 * the stack as the caller left them. park_tramp_leave counts the call out
 * and returns to the caller with the real function's result. */
	.text

#define PARK_SLOTS 4096

	.globl park_tramp_base
	.hidden park_tramp_base
	.type park_tramp_base, @function
	.balign 16
park_tramp_base:
	.set slot, 0
	.rept PARK_SLOTS
	.balign 16
	movl $slot, %r11d
	.byte 0xe9
	.long park_tramp_common - . - 4
	.set slot, slot + 1
	.endr
	.size park_tramp_base, . - park_tramp_base

	.type park_tramp_common, @function
	.balign 16
park_tramp_common:
	/* at entry: (%rsp) the caller's return address, 8 mod 16 */
	pushq %rdi
	pushq %rsi
	pushq %rdx
	pushq %rcx
	pushq %r8
	pushq %r9
	pushq %rax
	subq $128, %rsp
	movdqu %xmm0, 0(%rsp)
	movdqu %xmm1, 16(%rsp)
	movdqu %xmm2, 32(%rsp)
	movdqu %xmm3, 48(%rsp)
	movdqu %xmm4, 64(%rsp)
	movdqu %xmm5, 80(%rsp)
	movdqu %xmm6, 96(%rsp)
	movdqu %xmm7, 112(%rsp)
	movl %r11d, %edi
	leaq 184(%rsp), %rsi
	call park_tramp_enter
	movq %rax, %r11
	movdqu 0(%rsp), %xmm0
	movdqu 16(%rsp), %xmm1
	movdqu 32(%rsp), %xmm2
	movdqu 48(%rsp), %xmm3
	movdqu 64(%rsp), %xmm4
	movdqu 80(%rsp), %xmm5
	movdqu 96(%rsp), %xmm6
	movdqu 112(%rsp), %xmm7
	addq $128, %rsp
	popq %rax
	popq %r9
	popq %r8
	popq %rcx
	popq %rdx
	popq %rsi
	popq %rdi
	jmp *%r11
	.size park_tramp_common, . - park_tramp_common

	.globl park_tramp_leave
	.hidden park_tramp_leave
	.type park_tramp_leave, @function
	.balign 16
park_tramp_leave:
	/* the real function returned here: 0 mod 16, result in rax/rdx/xmm0-1 */
	pushq %rax
	pushq %rdx
	subq $32, %rsp
	movdqu %xmm0, 0(%rsp)
	movdqu %xmm1, 16(%rsp)
	call park_tramp_exit
	movq %rax, %r11
	movdqu 0(%rsp), %xmm0
	movdqu 16(%rsp), %xmm1
	addq $32, %rsp
	popq %rdx
	popq %rax
	jmp *%r11
	.size park_tramp_leave, . - park_tramp_leave

	.section .note.GNU-stack,"",@progbits
