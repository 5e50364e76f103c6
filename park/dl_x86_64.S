/* dlsym, dlvsym, dlopen and dlmopen, as the program sees them. glibc
 * resolves RTLD_NEXT and RTLD_DEFAULT relative to the object that calls
 * dlsym, and dlopen searches that object's run path, both read from the
 * return address: for those, each entry jumps to the next definition (a
 * later interposer's, else the C library's: resolve.c) with the return
 * address still the caller's, so that the answer is the one it would get
 * without the interposer (the sanitizers' runtimes resolve their
 * interceptors so). Before the jump, dl.c notes what the interposer must
 * know: a driver name looked up so (park_dl_lookup_note), a library loaded
 * with RTLD_DEEPBIND or into another namespace (park_dl_open_note, which
 * also holds a load back while a park is under way). dlsym and dlvsym with
 * a handle go to dl.c, which hands out gated entry points for the
 * driver's functions. */
	.text

/* %rax: the next definition, found once (park_dl_init) */
	.macro next_of var
	movq \var(%rip), %rax
	testq %rax, %rax
	jnz 1f
	/* entry: 8 mod 16; the pushes and 8 more make the call aligned */
	pushq %rdi
	.cfi_adjust_cfa_offset 8
	pushq %rsi
	.cfi_adjust_cfa_offset 8
	pushq %rdx
	.cfi_adjust_cfa_offset 8
	pushq %rcx
	.cfi_adjust_cfa_offset 8
	subq $8, %rsp
	.cfi_adjust_cfa_offset 8
	call park_dl_init
	addq $8, %rsp
	.cfi_adjust_cfa_offset -8
	popq %rcx
	.cfi_adjust_cfa_offset -8
	popq %rdx
	.cfi_adjust_cfa_offset -8
	popq %rsi
	.cfi_adjust_cfa_offset -8
	popq %rdi
	.cfi_adjust_cfa_offset -8
	movq \var(%rip), %rax
1:
	.endm

/* Calls \fn(%rdi, %rsi, %rdx, the caller's return address), keeping the
 * argument registers (five pushes: the call is aligned). */
	.macro note fn
	pushq %rdi
	.cfi_adjust_cfa_offset 8
	pushq %rsi
	.cfi_adjust_cfa_offset 8
	pushq %rdx
	.cfi_adjust_cfa_offset 8
	pushq %rcx
	.cfi_adjust_cfa_offset 8
	pushq %r8
	.cfi_adjust_cfa_offset 8
	movq 40(%rsp), %rcx
	call \fn
	popq %r8
	.cfi_adjust_cfa_offset -8
	popq %rcx
	.cfi_adjust_cfa_offset -8
	popq %rdx
	.cfi_adjust_cfa_offset -8
	popq %rsi
	.cfi_adjust_cfa_offset -8
	popq %rdi
	.cfi_adjust_cfa_offset -8
	.endm

	.globl dlsym
	.type dlsym, @function
	.balign 16
dlsym:
	.cfi_startproc
	endbr64
	testq %rdi, %rdi		/* RTLD_DEFAULT */
	je 2f
	cmpq $-1, %rdi			/* RTLD_NEXT */
	je 2f
	jmp park_dlsym_handle
2:	testq %rsi, %rsi
	jz 3f
	cmpw $0x7563, (%rsi)		/* "cu" */
	jne 3f
	xorl %edx, %edx
	note park_dl_lookup_note
3:	next_of park_dlsym_next
	jmp *%rax
	.cfi_endproc
	.size dlsym, . - dlsym

	.globl dlvsym
	.type dlvsym, @function
	.balign 16
dlvsym:
	.cfi_startproc
	endbr64
	testq %rdi, %rdi
	je 2f
	cmpq $-1, %rdi
	je 2f
	jmp park_dlvsym_handle
2:	testq %rsi, %rsi
	jz 3f
	cmpw $0x7563, (%rsi)
	jne 3f
	note park_dl_lookup_note
3:	next_of park_dlvsym_next
	jmp *%rax
	.cfi_endproc
	.size dlvsym, . - dlvsym

	.globl dlopen
	.type dlopen, @function
	.balign 16
dlopen:
	.cfi_startproc
	endbr64
	movq %rsi, %rdx			/* mode */
	movq $0, %rsi			/* the base namespace */
	note park_dl_open_note
	movl %edx, %esi
	next_of park_dlopen_next
	jmp *%rax
	.cfi_endproc
	.size dlopen, . - dlopen

	.globl dlmopen
	.type dlmopen, @function
	.balign 16
dlmopen:
	.cfi_startproc
	endbr64
	/* park_dl_open_note(file, namespace, mode, caller) */
	xchgq %rdi, %rsi
	note park_dl_open_note
	xchgq %rdi, %rsi
	next_of park_dlmopen_next
	jmp *%rax
	.cfi_endproc
	.size dlmopen, . - dlmopen

	.section .note.GNU-stack,"",@progbits

#ifdef __CET__
	.section .note.gnu.property,"a"
	.balign 8
	.long 4
	.long 16
	.long 5
	.asciz "GNU"
	.long 0xc0000002
	.long 4
	.long 3
	.balign 8
#endif
