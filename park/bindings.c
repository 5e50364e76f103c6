/* Whether every function of the driver that a loaded object calls by name
 * goes through the gate. The interposer exports the driver's names
 * (driver_api.inc), so that an object linked with -lcuda binds them to its
 * gated stubs. What it cannot stand in front of shows in the objects'
 * relocations, and such a process is not parked:
 * - a name it does not export (a newer driver's): bound to the driver, or
 *   to be bound to it at the first call (lazy binding);
 * - an object that looks in its own dependencies first (RTLD_DEEPBIND) or
 *   lives in another namespace (dlmopen): bound to the driver, or, lazily,
 *   possibly so;
 * - a name bound to another object that defines it (an interposer loaded
 *   after this one, for a name this one does not export).
 * Each object is read in place (elfread.c); one found bound to no driver
 * function is not read again. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "elfread.h"
#include "park.h"

#define MAX_DRIVERS 8
#define MAX_CLEAN 4096

struct range {
	uintptr_t lo, hi;
};

struct world {
	struct range drv[MAX_DRIVERS];
	int ndrv;
	struct range self;
};

struct clean {
	uintptr_t addr;
	const void *phdr;
};

static pthread_mutex_t clean_mu = PTHREAD_MUTEX_INITIALIZER;
static struct clean cleans[MAX_CLEAN];
static size_t nclean;

static struct range range_of(const struct dl_phdr_info *info)
{
	struct range r = { UINTPTR_MAX, 0 };
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type != PT_LOAD)
			continue;
		uintptr_t lo = info->dlpi_addr + p->p_vaddr, hi = lo + p->p_memsz;
		r.lo = lo < r.lo ? lo : r.lo;
		r.hi = hi > r.hi ? hi : r.hi;
	}
	return r;
}

static bool in(struct range r, uintptr_t v)
{
	return v >= r.lo && v < r.hi;
}

static bool read_elf(const struct dl_phdr_info *info, struct park_elf *e)
{
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			return park_elf_read(info->dlpi_addr,
					     (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr), e);
	return false;
}

static int find_world(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct world *w = arg;
	struct range r = range_of(info);
	struct park_elf e;
	if (in(r, (uintptr_t)(void *)park_bindings_check))
		w->self = r;
	else if (read_elf(info, &e) && e.soname && strcmp(e.soname, "libcuda.so.1") == 0 && w->ndrv < MAX_DRIVERS)
		w->drv[w->ndrv++] = r;
	return 0;
}

static bool in_driver(const struct world *w, uintptr_t v)
{
	for (int i = 0; i < w->ndrv; i++)
		if (in(w->drv[i], v))
			return true;
	return false;
}

int park_driver_ranges(uintptr_t *lo, uintptr_t *hi, int max)
{
	struct world w = { 0 };
	dl_iterate_phdr(find_world, &w);
	int n = w.ndrv < max ? w.ndrv : max;
	for (int i = 0; i < n; i++) {
		lo[i] = w.drv[i].lo;
		hi[i] = w.drv[i].hi;
	}
	return n;
}

bool park_in_driver(const void *addr)
{
	struct world w = { 0 };
	dl_iterate_phdr(find_world, &w);
	return in_driver(&w, (uintptr_t)addr);
}

bool park_is_ours(const void *addr)
{
	Dl_info a, b;
	return dladdr(addr, &a) != 0 && dladdr((void *)park_bindings_check, &b) != 0 && a.dli_fbase == b.dli_fbase;
}

static bool is_clean(const struct dl_phdr_info *info)
{
	pthread_mutex_lock(&clean_mu);
	bool found = false;
	for (size_t i = 0; i < nclean && !found; i++)
		found = cleans[i].addr == info->dlpi_addr && cleans[i].phdr == info->dlpi_phdr;
	pthread_mutex_unlock(&clean_mu);
	return found;
}

static void note_clean(const struct dl_phdr_info *info)
{
	pthread_mutex_lock(&clean_mu);
	if (nclean < MAX_CLEAN)
		cleans[nclean++] = (struct clean){ info->dlpi_addr, info->dlpi_phdr };
	pthread_mutex_unlock(&clean_mu);
}

struct check {
	const struct world *w;
	char *why;
	size_t size;
	bool bad;
};

static const char *object_name(const struct dl_phdr_info *info)
{
	const char *n = info->dlpi_name;
	if (n == NULL || n[0] == 0)
		return "the program";
	const char *slash = strrchr(n, '/');
	return slash ? slash + 1 : n;
}

/* What is wrong with one binding of a driver function: the words after
 * its name (NULL: nothing); *verb the word before. */
static const char *judge(const struct check *c, struct range self_obj, const char *name, uintptr_t v, bool plt,
			 const char **verb)
{
	bool exported = park_name_index(name) >= 0;
	*verb = "binds";
	if (v == 0 || in(c->w->self, v))
		return NULL;
	if (in_driver(c->w, v))
		return exported ? "to the driver directly (RTLD_DEEPBIND or dlmopen)" :
				  "to the driver directly (a driver function the interposer does not know)";
	if (!plt || !in(self_obj, v))
		return in(self_obj, v) ? NULL : "to another library, past the interposer";
	/* not bound yet: its first call binds it */
	*verb = "calls";
	if (!exported)
		return "(a driver function the interposer does not know) through lazy binding";
	bool other_ns = false;
	Dl_info di;
	struct link_map *lm = NULL;
	if (dladdr1((void *)self_obj.lo, &di, (void **)&lm, RTLD_DL_LINKMAP) != 0 && lm) {
		Lmid_t ns = LM_ID_BASE;
		other_ns = dlinfo(lm, RTLD_DI_LMID, &ns) == 0 && ns != LM_ID_BASE;
	}
	if (other_ns || lm == NULL || park_after_deepbind(lm))
		return "through lazy binding, and was loaded with RTLD_DEEPBIND or dlmopen";
	return NULL;
}

/* Looks at the relocations rel[0, n); true when one names a driver
 * function. */
static bool scan(struct check *c, const struct dl_phdr_info *info, const struct park_elf *e, const ElfW(Rela) * rel,
		 size_t n)
{
	struct range self_obj = range_of(info);
	bool any = false;
	for (size_t i = 0; i < n && !c->bad; i++) {
		unsigned long type = ELF64_R_TYPE(rel[i].r_info), sym = ELF64_R_SYM(rel[i].r_info);
		if (sym == 0 || (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT && type != R_X86_64_64))
			continue;
		const ElfW(Sym) *s = &e->symtab[sym];
		const char *name = park_elf_name(e, s);
		if (s->st_shndx != SHN_UNDEF || name[0] != 'c' || name[1] != 'u' || !park_driver_defines(name))
			continue;
		any = true;
		uintptr_t v = *(const uintptr_t *)(e->base + rel[i].r_offset);
		if (type == R_X86_64_64)
			v -= (uintptr_t)rel[i].r_addend;
		const char *verb;
		const char *what = judge(c, self_obj, name, v, type == R_X86_64_JUMP_SLOT, &verb);
		if (what) {
			snprintf(c->why, c->size, "%s %s %s %s", object_name(info), verb, name, what);
			c->bad = true;
		}
	}
	return any;
}

static int check_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct check *c = arg;
	struct range r = range_of(info);
	struct park_elf e;
	if (c->bad || r.lo == c->w->self.lo || in_driver(c->w, r.lo) || is_clean(info) || !read_elf(info, &e))
		return 0;
	bool any = scan(c, info, &e, e.jmprel, e.njmprel);
	any = scan(c, info, &e, e.rela, e.nrela) || any;
	if (!any && !c->bad)
		note_clean(info);
	return 0;
}

int park_bindings_check(char *why, size_t size)
{
	struct world w = { 0 };
	dl_iterate_phdr(find_world, &w);
	if (w.ndrv > 1) {
		snprintf(why, size,
			 "the driver is loaded more than once (dlmopen), and the interposer stands in front "
			 "of one");
		return -1;
	}
	struct check c = { &w, why, size, false };
	dl_iterate_phdr(check_object, &c);
	return c.bad ? -1 : 0;
}
