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
 * driver's functions. A lookup of dlsym, dlvsym, dlopen or dlmopen
 * themselves, which would answer the C library's (dlvsym with its
 * version, a handle of the C library, RTLD_NEXT from a library after this
 * one), answers this library's stand-in for it (dl.c). */
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

/* dlsym as \name: lookups with a handle go to park_dlsym_handle (\which:
 * 0 this library's export, whose next definition is a later interposer's
 * or the C library's; 1 the C library's own, stood in front of), a driver
 * name with RTLD_DEFAULT or RTLD_NEXT is noted, the dynamic linker's own
 * names are answered by park_dl_self_lookup, and anything else jumps to
 * \next with the caller's return address. */
	.macro dlsym_entry name, next, which
	.balign 16
\name:
	.cfi_startproc
	endbr64
	testq %rdi, %rdi		/* RTLD_DEFAULT */
	je 2f
	cmpq $-1, %rdi			/* RTLD_NEXT */
	je 2f
	movl $\which, %edx
	jmp park_dlsym_handle
2:	testq %rsi, %rsi
	jz 3f
	xorl %edx, %edx			/* no version */
	cmpw $0x7563, (%rsi)		/* "cu" */
	jne 4f
	note park_dl_lookup_note
	jmp 3f
4:	cmpw $0x6c64, (%rsi)		/* "dl" */
	jne 3f
	note park_dl_own
	testl %eax, %eax
	jz 3f
	movq (%rsp), %rcx		/* park_dl_self_lookup(handle, name, NULL, caller) */
	jmp park_dl_self_lookup
3:	next_of \next
	jmp *%rax
	.cfi_endproc
	.size \name, . - \name
	.endm

/* dlvsym likewise: \which goes to park_dlvsym_handle in %rcx. */
	.macro dlvsym_entry name, next, which
	.balign 16
\name:
	.cfi_startproc
	endbr64
	testq %rdi, %rdi
	je 2f
	cmpq $-1, %rdi
	je 2f
	movl $\which, %ecx
	jmp park_dlvsym_handle
2:	testq %rsi, %rsi
	jz 3f
	cmpw $0x7563, (%rsi)
	jne 4f
	note park_dl_lookup_note
	jmp 3f
4:	cmpw $0x6c64, (%rsi)
	jne 3f
	note park_dl_own
	testl %eax, %eax
	jz 3f
	movq (%rsp), %rcx		/* park_dl_self_lookup(handle, name, version, caller) */
	jmp park_dl_self_lookup
3:	next_of \next
	jmp *%rax
	.cfi_endproc
	.size \name, . - \name
	.endm

	.macro dlopen_entry name, next
	.balign 16
\name:
	.cfi_startproc
	endbr64
	movq %rsi, %rdx			/* mode */
	movq $0, %rsi			/* the base namespace */
	note park_dl_open_note
	movl %edx, %esi
	next_of \next
	jmp *%rax
	.cfi_endproc
	.size \name, . - \name
	.endm

	.macro dlmopen_entry name, next
	.balign 16
\name:
	.cfi_startproc
	endbr64
	/* park_dl_open_note(file, namespace, mode, caller) */
	xchgq %rdi, %rsi
	note park_dl_open_note
	xchgq %rdi, %rsi
	next_of \next
	jmp *%rax
	.cfi_endproc
	.size \name, . - \name
	.endm

/* The exported names, in front of the next definition. */
	.globl dlsym
	.type dlsym, @function
	dlsym_entry dlsym, park_dlsym_next, 0
	.globl dlvsym
	.type dlvsym, @function
	dlvsym_entry dlvsym, park_dlvsym_next, 0
	.globl dlopen
	.type dlopen, @function
	dlopen_entry dlopen, park_dlopen_next
	.globl dlmopen
	.type dlmopen, @function
	dlmopen_entry dlmopen, park_dlmopen_next

/* What a lookup of the C library's own dlsym, dlvsym, dlopen or dlmopen
 * answers instead (dl.c): the same in front of the C library's function
 * itself, so that a later interposer that looks up its next definition
 * does not come back to this library's export (and to itself). */
	.globl park_libc_dlsym
	.hidden park_libc_dlsym
	.type park_libc_dlsym, @function
	dlsym_entry park_libc_dlsym, park_dlsym_libc, 1
	.globl park_libc_dlvsym
	.hidden park_libc_dlvsym
	.type park_libc_dlvsym, @function
	dlvsym_entry park_libc_dlvsym, park_dlvsym_libc, 1
	.globl park_libc_dlopen
	.hidden park_libc_dlopen
	.type park_libc_dlopen, @function
	dlopen_entry park_libc_dlopen, park_dlopen_libc
	.globl park_libc_dlmopen
	.hidden park_libc_dlmopen
	.type park_libc_dlmopen, @function
	dlmopen_entry park_libc_dlmopen, park_dlmopen_libc

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
