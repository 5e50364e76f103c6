/* dlsym, as the program sees it. glibc resolves RTLD_NEXT and RTLD_DEFAULT
 * relative to the object that calls dlsym, which it reads from its own
 * return address: for those two handles this entry jumps to the real dlsym
 * (found once with dlvsym), so that the return address is still the
 * caller's and the answer the one it would get without the interposer
 * (the sanitizers' runtimes resolve their interceptors so). Any other
 * handle goes to park_dlsym_handle (resolve.c), which hands out gated entry
 * points for the driver's functions. */
	.text

	.globl dlsym
	.type dlsym, @function
	.balign 16
dlsym:
	testq %rdi, %rdi		/* RTLD_DEFAULT */
	je 1f
	cmpq $-1, %rdi			/* RTLD_NEXT */
	je 1f
	jmp park_dlsym_handle
1:	movq park_dlsym_real(%rip), %rax
	testq %rax, %rax
	jz 2f
	jmp *%rax
2:	/* entry: 8 mod 16; two pushes and 8 more make the call aligned */
	pushq %rdi
	pushq %rsi
	subq $8, %rsp
	call park_dlsym_init
	addq $8, %rsp
	popq %rsi
	popq %rdi
	jmp *%rax
	.size dlsym, . - dlsym

	.section .note.GNU-stack,"",@progbits
