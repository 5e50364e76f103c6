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
 * Each object is read in place (elfread.c), while the list of objects holds
 * still (objects.c); one found bound to no driver function is not read
 * again until an object is unloaded. */
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elfread.h"
#include "park.h"
#include "park_find.h"

#define MAX_DRIVERS 8
#define MAX_CLEAN 4096

struct world {
	struct park_range drv[MAX_DRIVERS];
	int ndrv;
	struct park_range self;
};

/* Objects found bound to no driver function, by load address and program
 * headers: valid while no object has been unloaded since (an object loaded
 * later may take the place, and the addresses, of one unloaded). */
struct clean {
	uintptr_t addr;
	const void *phdr;
};

static pthread_mutex_t clean_mu = PTHREAD_MUTEX_INITIALIZER;
static struct clean cleans[MAX_CLEAN];
static size_t nclean;
static unsigned long long clean_subs; /* the loader's count of unloads they hold for */

/* A child of fork() starts with the lock free (a thread of the parent may
 * have held it) and judges its objects afresh (table.c says why). */
static void child_forgets(void)
{
	clean_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	nclean = 0;
}

__attribute__((constructor)) static void bindings_atfork(void)
{
	pthread_atfork(NULL, NULL, child_forgets);
}

static int find_world(const struct park_obj *o, void *arg)
{
	struct world *w = arg;
	struct park_elf e;
	if (park_range_has(o->range, (uintptr_t)(void *)park_bindings_check))
		w->self = o->range;
	else if (park_elf_read(o->base, o->dyn, &e) && e.soname && strcmp(e.soname, "libcuda.so.1") == 0 &&
		 w->ndrv < MAX_DRIVERS)
		w->drv[w->ndrv++] = o->range;
	return 0;
}

static bool in_driver(const struct world *w, uintptr_t v)
{
	for (int i = 0; i < w->ndrv; i++)
		if (park_range_has(w->drv[i], v))
			return true;
	return false;
}

int park_driver_ranges(uintptr_t *lo, uintptr_t *hi, int max)
{
	struct world w = { 0 };
	park_objects(find_world, &w);
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
	park_objects(find_world, &w);
	return in_driver(&w, (uintptr_t)addr);
}

/* Whether o was found clean before. An unload since (the loader's count of
 * them moved, or is not told) forgets every object found clean. */
static bool is_clean(const struct park_obj *o)
{
	pthread_mutex_lock(&clean_mu);
	if (!o->subs_known || o->subs != clean_subs) {
		nclean = 0;
		clean_subs = o->subs;
	}
	bool found = false;
	for (size_t i = 0; i < nclean && !found; i++)
		found = cleans[i].addr == o->base && cleans[i].phdr == o->phdr;
	pthread_mutex_unlock(&clean_mu);
	return found;
}

static void note_clean(const struct park_obj *o)
{
	pthread_mutex_lock(&clean_mu);
	if (o->subs_known && o->subs == clean_subs && nclean < MAX_CLEAN)
		cleans[nclean++] = (struct clean){ o->base, o->phdr };
	pthread_mutex_unlock(&clean_mu);
}

struct check {
	const struct world *w;
	char *why;
	size_t size;
	bool bad;
};

static const char *object_name(const struct park_obj *o)
{
	const char *n = o->name;
	if (n == NULL || n[0] == 0)
		return "the program";
	const char *slash = strrchr(n, '/');
	return slash ? slash + 1 : n;
}

/* What is wrong with one binding of a driver function by o: the words
 * after its name (NULL: nothing); *verb the word before. */
static const char *judge(const struct check *c, const struct park_obj *o, const char *name, uintptr_t v, bool plt,
			 const char **verb)
{
	bool exported = park_name_index(name) >= 0;
	*verb = "binds";
	if (v == 0 || park_range_has(c->w->self, v))
		return NULL;
	if (in_driver(c->w, v))
		return exported ? "to the driver directly (RTLD_DEEPBIND or dlmopen)" :
				  "to the driver directly (a driver function the interposer does not know)";
	if (!plt || !park_range_has(o->range, v))
		return park_range_has(o->range, v) ? NULL : "to another library, past the interposer";
	/* not bound yet: its first call binds it */
	*verb = "calls";
	if (!exported)
		return "(a driver function the interposer does not know) through lazy binding";
	if (o->lm == NULL || park_after_deepbind(o->lm))
		return "through lazy binding, and was loaded with RTLD_DEEPBIND or dlmopen";
	return NULL;
}

/* Looks at the relocations rel[0, n); true when one names a driver
 * function. */
static bool scan(struct check *c, const struct park_obj *o, const struct park_elf *e, const ElfW(Rela) * rel, size_t n)
{
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
		const char *what = judge(c, o, name, v, type == R_X86_64_JUMP_SLOT, &verb);
		if (what) {
			snprintf(c->why, c->size, "%s %s %s %s", object_name(o), verb, name, what);
			c->bad = true;
		}
	}
	return any;
}

static int check_object(const struct park_obj *o, void *arg)
{
	struct check *c = arg;
	struct park_elf e;
	if (o->range.lo == c->w->self.lo || in_driver(c->w, o->range.lo) || is_clean(o) ||
	    !park_elf_read(o->base, o->dyn, &e))
		return 0;
	bool any = scan(c, o, &e, e.jmprel, e.njmprel);
	any = scan(c, o, &e, e.rela, e.nrela) || any;
	if (!any && !c->bad)
		note_clean(o);
	return c->bad;
}

/* Copies of the driver mapped in the process, whatever namespace loaded
 * them (dl_iterate_phdr lists the caller's alone): executable mappings of
 * a file named libcuda.so*; -1 when the maps cannot be read. */
static int mapped_drivers(void)
{
	char *maps = park_find_read_text("/proc/self/maps", 64u << 20);
	if (maps == NULL)
		return -1;
	int n = 0;
	for (char *l = maps, *nl; *l; l = nl ? nl + 1 : l + strlen(l)) {
		nl = strchr(l, '\n');
		if (nl)
			*nl = 0;
		const char *perm = strchr(l, ' '), *name = strrchr(l, '/');
		if (perm && strncmp(perm + 1, "r-xp", 4) == 0 && name && strncmp(name + 1, "libcuda.so", 10) == 0)
			n++;
	}
	free(maps);
	return n;
}

int park_bindings_check(char *why, size_t size)
{
	struct world w = { 0 };
	park_objects(find_world, &w);
	if (w.ndrv > 1) {
		snprintf(why, size,
			 "the driver is loaded more than once (dlmopen), and the interposer stands in front "
			 "of one");
		return -1;
	}
	if (mapped_drivers() > w.ndrv) {
		snprintf(why, size,
			 "a copy of the driver is loaded in another namespace (dlmopen), where the interposer does "
			 "not stand: its calls would go on while parked");
		return -1;
	}
	struct check c = { &w, why, size, false };
	park_objects(check_object, &c);
	return c.bad ? -1 : 0;
}
