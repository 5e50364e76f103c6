/* elfread.c: a loaded object's dynamic section, read in place. */
#ifndef CS_PARK_ELFREAD_H
#define CS_PARK_ELFREAD_H

#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* see park.h */
#define PARK_ELF_EARLY __attribute__((no_sanitize("address", "undefined")))

struct park_elf {
	uintptr_t base; /* load bias */
	const ElfW(Sym) * symtab;
	const char *strtab;
	size_t strsz;
	const uint32_t *gnu_hash, *sysv_hash;
	const ElfW(Rela) * jmprel; /* the PLT's relocations */
	size_t njmprel;
	const ElfW(Rela) * rela; /* the others */
	size_t nrela;
	const char *soname; /* NULL when it has none */
	bool has_verdef; /* it defines symbol versions */
	const uint16_t *versym; /* each symbol's version (NULL: none) */
	const ElfW(Verdef) * verdef;
	size_t nverdef;
};

/* Fills e from the object loaded at base with dynamic section dyn; false
 * when it has no symbol table. */
bool park_elf_read(uintptr_t base, const ElfW(Dyn) * dyn, struct park_elf *e);
/* The function (or indirect function) e defines under name, or NULL. */
const ElfW(Sym) * park_elf_find(const struct park_elf *e, const char *name);
/* The same, as the dynamic linker's lookup with version finds it (dlvsym:
 * that version exactly), or without one (dlsym: the default version). */
const ElfW(Sym) * park_elf_find_version(const struct park_elf *e, const char *name, const char *version);
/* Whether two strings are equal (no call into the C library). */
bool park_elf_same(const char *a, const char *b);
/* A symbol's name ("" when it lies outside the string table). */
const char *park_elf_name(const struct park_elf *e, const ElfW(Sym) * s);

#endif
