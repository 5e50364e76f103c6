/* Reading loaded objects' dynamic sections in place: their symbols, their
 * relocations, their names. No call into the dynamic linker, so that
 * park_ifunc may use it while an object is being bound, and none into the
 * C library, so that it runs while a sanitizer's runtime is still setting
 * up the interceptors of the library's functions (dlsym comes here
 * then); nothing here allocates. */

#include "elfread.h"

/* The dynamic linker adjusts these entries by the load address in place on
 * x86-64; the vdso's are left as they are. */
PARK_ELF_EARLY static uintptr_t at(uintptr_t base, ElfW(Addr) v)
{
	return v < base ? base + v : v;
}

PARK_ELF_EARLY bool park_elf_read(uintptr_t base, const ElfW(Dyn) * dyn, struct park_elf *e)
{
	*e = (struct park_elf){ .base = base };
	if (dyn == NULL)
		return false;
	size_t soname = 0, pltrelsz = 0, relasz = 0;
	bool has_soname = false;
	for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB: e->symtab = (const ElfW(Sym) *)at(base, d->d_un.d_ptr); break;
		case DT_STRTAB: e->strtab = (const char *)at(base, d->d_un.d_ptr); break;
		case DT_STRSZ: e->strsz = d->d_un.d_val; break;
		case DT_GNU_HASH: e->gnu_hash = (const uint32_t *)at(base, d->d_un.d_ptr); break;
		case DT_HASH: e->sysv_hash = (const uint32_t *)at(base, d->d_un.d_ptr); break;
		case DT_JMPREL: e->jmprel = (const ElfW(Rela) *)at(base, d->d_un.d_ptr); break;
		case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
		case DT_RELA: e->rela = (const ElfW(Rela) *)at(base, d->d_un.d_ptr); break;
		case DT_RELASZ: relasz = d->d_un.d_val; break;
		case DT_SONAME:
			soname = d->d_un.d_val;
			has_soname = true;
			break;
		case DT_VERDEF:
			e->has_verdef = true;
			e->verdef = (const ElfW(Verdef) *)at(base, d->d_un.d_ptr);
			break;
		case DT_VERDEFNUM: e->nverdef = d->d_un.d_val; break;
		case DT_VERSYM: e->versym = (const uint16_t *)at(base, d->d_un.d_ptr); break;
		default: break;
		}
	}
	e->njmprel = e->jmprel ? pltrelsz / sizeof(ElfW(Rela)) : 0;
	e->nrela = e->rela ? relasz / sizeof(ElfW(Rela)) : 0;
	if (e->symtab == NULL || e->strtab == NULL)
		return false;
	if (has_soname && soname < e->strsz)
		e->soname = e->strtab + soname;
	return true;
}

PARK_ELF_EARLY const char *park_elf_name(const struct park_elf *e, const ElfW(Sym) * s)
{
	return s->st_name < e->strsz ? e->strtab + s->st_name : "";
}

PARK_ELF_EARLY bool park_elf_same(const char *a, const char *b)
{
	while (*a && *a == *b) {
		a++;
		b++;
	}
	return *a == *b;
}

PARK_ELF_EARLY static bool defines(const struct park_elf *e, const ElfW(Sym) * s, const char *name)
{
	unsigned type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);
	return s->st_shndx != SHN_UNDEF && (type == STT_FUNC || type == STT_GNU_IFUNC) &&
		(bind == STB_GLOBAL || bind == STB_WEAK) && park_elf_same(park_elf_name(e, s), name);
}

/* Whether version ndx of e is named version. */
PARK_ELF_EARLY static bool verdef_named(const struct park_elf *e, unsigned ndx, const char *version)
{
	const ElfW(Verdef) *d = e->verdef;
	for (size_t i = 0; d && i < e->nverdef; i++) {
		if (d->vd_ndx == ndx) {
			const ElfW(Verdaux) *a = (const ElfW(Verdaux) *)((const char *)d + d->vd_aux);
			return a->vda_name < e->strsz && park_elf_same(e->strtab + a->vda_name, version);
		}
		if (d->vd_next == 0)
			break;
		d = (const ElfW(Verdef) *)((const char *)d + d->vd_next);
	}
	return false;
}

/* How the dynamic linker matches the version of symbol idx: a lookup
 * without one takes any definition but a hidden one (name@VERSION, not
 * name@@VERSION); one with a version (dlvsym) takes that version only,
 * and an object without versions answers any lookup. any: versions are not
 * looked at. */
PARK_ELF_EARLY static bool version_ok(const struct park_elf *e, size_t idx, const char *version, bool any)
{
	if (any || e->versym == NULL)
		return true;
	uint16_t v = e->versym[idx];
	if (version == NULL)
		return !(v & 0x8000);
	return (v & 0x7fff) >= 2 && verdef_named(e, v & 0x7fff, version);
}

PARK_ELF_EARLY static const ElfW(Sym) *
	find_gnu(const struct park_elf *e, const char *name, const char *version, bool any)
{
	const uint32_t *h = e->gnu_hash;
	uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2], bloom_shift = h[3];
	const ElfW(Addr) *bloom = (const ElfW(Addr) *)&h[4];
	const uint32_t *buckets = (const uint32_t *)&bloom[bloom_size];
	const uint32_t *chain = &buckets[nbuckets];
	uint32_t hash = 5381;
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		hash = hash * 33 + *c;
	if (nbuckets == 0 || bloom_size == 0)
		return NULL;
	ElfW(Addr) word = bloom[(hash / (8 * sizeof(ElfW(Addr)))) % bloom_size];
	ElfW(Addr) mask = ((ElfW(Addr))1 << (hash % (8 * sizeof(ElfW(Addr))))) |
		((ElfW(Addr))1 << ((hash >> bloom_shift) % (8 * sizeof(ElfW(Addr)))));
	if ((word & mask) != mask)
		return NULL;
	uint32_t i = buckets[hash % nbuckets];
	if (i < symoffset)
		return NULL;
	for (;; i++) {
		uint32_t h2 = chain[i - symoffset];
		if ((hash | 1) == (h2 | 1) && defines(e, &e->symtab[i], name) && version_ok(e, i, version, any))
			return &e->symtab[i];
		if (h2 & 1)
			return NULL;
	}
}

PARK_ELF_EARLY static const ElfW(Sym) *
	find_sysv(const struct park_elf *e, const char *name, const char *version, bool any)
{
	const uint32_t *h = e->sysv_hash;
	uint32_t nbucket = h[0], nchain = h[1], hash = 0;
	const uint32_t *bucket = &h[2], *chain = &bucket[nbucket];
	for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
		hash = (hash << 4) + *c;
		uint32_t g = hash & 0xf0000000u;
		hash ^= g >> 24;
		hash &= ~g;
	}
	if (nbucket == 0)
		return NULL;
	for (uint32_t i = bucket[hash % nbucket]; i != STN_UNDEF && i < nchain; i = chain[i])
		if (defines(e, &e->symtab[i], name) && version_ok(e, i, version, any))
			return &e->symtab[i];
	return NULL;
}

PARK_ELF_EARLY static const ElfW(Sym) * find(const struct park_elf *e, const char *name, const char *version, bool any)
{
	if (e->gnu_hash)
		return find_gnu(e, name, version, any);
	if (e->sysv_hash)
		return find_sysv(e, name, version, any);
	return NULL;
}

PARK_ELF_EARLY const ElfW(Sym) * park_elf_find(const struct park_elf *e, const char *name)
{
	return find(e, name, NULL, true);
}

PARK_ELF_EARLY const ElfW(Sym) * park_elf_find_version(const struct park_elf *e, const char *name, const char *version)
{
	return find(e, name, version, false);
}
