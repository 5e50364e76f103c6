/* What dl_x86_64.S asks of C: lookups with a handle, answered with gated
 * entry points for the driver's functions; lookups of the dynamic linker's
 * own functions, answered with this library's; and what lookups and loads
 * the interposer cannot stand in front of tell it. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "elfread.h"
#include "park.h"

#define HIDDEN __attribute__((visibility("hidden")))

/* The first object of the program's namespace loaded by a dlopen with
 * RTLD_DEEPBIND may come after this one: objects after it are looked at
 * as such (bindings.c). NULL: none yet. Read and set only while the list
 * of objects holds still (park_objects), then under dl_mu. */
static const struct link_map *before_deepbind;
static bool deepbind_all; /* that object is gone: every object is suspect */
static pthread_mutex_t dl_mu = PTHREAD_MUTEX_INITIALIZER;

/* A child of fork() starts with the lock free: a thread of the parent may
 * have held it. What it guards stays true of the child's objects. */
static void child_frees(void)
{
	dl_mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

__attribute__((constructor)) static void dl_atfork(void)
{
	pthread_atfork(NULL, NULL, child_frees);
}

static bool looks_cu(const char *name)
{
	return name && name[0] == 'c' && name[1] == 'u';
}

/* A function of the driver's that name and fn stand for, gated; fn itself
 * for anything else. */
static void *gated(const char *name, void *fn)
{
	if (fn == NULL || park_passthrough || !looks_cu(name) || park_is_ours(fn) || !park_driver_defines(name))
		return fn;
	return park_hand_out(name, fn, false, 1 << 30);
}

/* ---- the dynamic linker's own functions ---- */

/* dl_x86_64.S: this library's stand-ins for the C library's functions */
extern char park_libc_dlsym[] HIDDEN, park_libc_dlvsym[] HIDDEN, park_libc_dlopen[] HIDDEN, park_libc_dlmopen[] HIDDEN;

static const char *const own_names[] = { "dlsym", "dlvsym", "dlopen", "dlmopen" };

PARK_EARLY static int own_index(const char *name)
{
	for (int i = 0; name && i < 4; i++)
		if (park_elf_same(name, own_names[i]))
			return i;
	return -1;
}

/* Whether name is one of them (dl_x86_64.S). */
int park_dl_own(void *handle, const char *name) HIDDEN;
PARK_EARLY int park_dl_own(void *handle, const char *name)
{
	(void)handle;
	return own_index(name) >= 0;
}

struct holder {
	uintptr_t addr;
	bool libc; /* it lies in the C library */
};

PARK_EARLY static bool is_libc(const struct park_obj *o)
{
	struct park_elf e;
	return park_elf_read(o->base, o->dyn, &e) && e.soname &&
		(park_elf_same(e.soname, "libc.so.6") || park_elf_same(e.soname, "libdl.so.2"));
}

PARK_EARLY static int find_holder(const struct park_obj *o, void *arg)
{
	struct holder *h = arg;
	if (!park_range_has(o->range, h->addr))
		return 0;
	h->libc = is_libc(o);
	return 1;
}

/* What a lookup of own_names[k] answers: this library's stand-in where the
 * dynamic linker found the C library's function, else what it found (this
 * library's export, or a later interposer's function). */
PARK_EARLY static void *own_answer(int k, void *fn)
{
	static char *const stand_ins[] = { park_libc_dlsym, park_libc_dlvsym, park_libc_dlopen, park_libc_dlmopen };
	struct holder h = { (uintptr_t)fn, false };
	if (fn == NULL || k < 0)
		return fn;
	park_objects(find_holder, &h);
	return h.libc ? stand_ins[k] : fn;
}

struct next_def {
	uintptr_t caller;
	const char *name, *version;
	bool seen; /* the caller's object came */
	void *found;
};

/* RTLD_NEXT: the first definition after the caller's object, in the order
 * of the program's namespace. */
PARK_EARLY static int next_def(const struct park_obj *o, void *arg)
{
	struct next_def *q = arg;
	if (!q->seen) {
		q->seen = park_range_has(o->range, q->caller);
		return 0;
	}
	struct park_elf e;
	const ElfW(Sym) *s = park_elf_read(o->base, o->dyn, &e) ? park_elf_find_version(&e, q->name, q->version) : NULL;
	if (s == NULL || s->st_shndx == SHN_UNDEF)
		return 0;
	q->found = (void *)(e.base + s->st_value);
	return 1;
}

/* dlsym or dlvsym of dlsym, dlvsym, dlopen or dlmopen with RTLD_DEFAULT or
 * RTLD_NEXT (dl_x86_64.S, with the caller's return address). */
void *park_dl_self_lookup(void *handle, const char *name, const char *version, void *caller) HIDDEN;
PARK_EARLY void *park_dl_self_lookup(void *handle, const char *name, const char *version, void *caller)
{
	park_dl_init();
	void *(*by_name)(void *, const char *) = NULL;
	void *(*by_version)(void *, const char *, const char *) = NULL;
	*(void **)&by_name = park_dlsym_libc;
	*(void **)&by_version = park_dlvsym_libc;
	void *fn = NULL;
	if (handle == RTLD_DEFAULT) {
		/* from this library: the program's global scope, as for any
		 * object of its namespace */
		fn = version ? (by_version ? by_version(RTLD_DEFAULT, name, version) : NULL) :
			       (by_name ? by_name(RTLD_DEFAULT, name) : NULL);
	} else {
		struct next_def q = { (uintptr_t)caller, name, version, false, NULL };
		park_objects(next_def, &q);
		fn = q.found;
		/* a library loaded with RTLD_LOCAL looks in its own scope
		 * (itself, then its dependencies, the C library among them),
		 * which may hold nothing after it in the order of the namespace */
		void *const libc[] = { park_dlsym_libc, park_dlvsym_libc, park_dlopen_libc, park_dlmopen_libc };
		int k = own_index(name);
		if (fn == NULL && k >= 0)
			fn = libc[k];
	}
	return own_answer(own_index(name), fn);
}

void *park_dlsym_handle(void *handle, const char *name, int libc) HIDDEN;
void *park_dlsym_handle(void *handle, const char *name, int libc)
{
	void *(*next)(void *, const char *) = NULL;
	park_dl_init();
	*(void **)&next = libc ? park_dlsym_libc : park_dlsym_next;
	park_dlsym_asking(name);
	void *fn = next ? next(handle, name) : NULL;
	park_dlsym_asking(NULL);
	int own = own_index(name);
	return own >= 0 ? own_answer(own, fn) : gated(name, fn);
}

void *park_dlvsym_handle(void *handle, const char *name, const char *version, int libc) HIDDEN;
void *park_dlvsym_handle(void *handle, const char *name, const char *version, int libc)
{
	void *(*next)(void *, const char *, const char *) = NULL;
	park_dl_init();
	*(void **)&next = libc ? park_dlvsym_libc : park_dlvsym_next;
	park_dlsym_asking(name);
	void *fn = next ? next(handle, name, version) : NULL;
	park_dlsym_asking(NULL);
	int own = own_index(name);
	return own >= 0 ? own_answer(own, fn) : gated(name, fn);
}

/* ---- what the interposer cannot stand in front of ---- */

/* The list of objects holds still (park_objects). */
bool park_after_deepbind(const struct link_map *lm)
{
	pthread_mutex_lock(&dl_mu);
	bool after = deepbind_all;
	if (!after && before_deepbind) {
		bool seen = false;
		for (const struct link_map *l = _r_debug.r_map; l && !after; l = l->l_next) {
			after = seen && l == lm;
			seen = seen || l == before_deepbind;
		}
		deepbind_all = !seen;
		after = after || !seen;
	}
	pthread_mutex_unlock(&dl_mu);
	return after;
}

/* What is known of the object that holds an address. */
struct caller {
	uintptr_t addr;
	bool found, other_ns, main, deepbound;
};

static int find_caller(const struct park_obj *o, void *arg)
{
	struct caller *c = arg;
	if (!park_range_has(o->range, c->addr))
		return 0;
	c->found = true;
	c->other_ns = o->lm == NULL;
	c->main = o->lm == _r_debug.r_map;
	c->deepbound = o->lm && park_after_deepbind(o->lm);
	return 1;
}

/* A lookup of a driver name the driver lacks that reaches this library's
 * definition of it (RTLD_DEFAULT, or RTLD_NEXT from the program, which
 * comes before this library): its resolver answers it nothing. Noted only
 * then: a note the resolver never takes would answer nothing to a later
 * binding of the name. */
static void note_missing(void *handle, const char *name, void *caller)
{
	if (park_name_index(name) < 0)
		return;
	if (handle == RTLD_NEXT) {
		struct caller c = { .addr = (uintptr_t)caller };
		park_objects(find_caller, &c);
		if (!c.main)
			return;
	}
	park_dlsym_asking(name);
}

/* dlsym or dlvsym of a driver name with RTLD_DEFAULT or RTLD_NEXT, just
 * before the dynamic linker answers it for the caller. The answer is the
 * interposer's gated name (it comes first in the program's global scope),
 * except: RTLD_NEXT from an object after the interposer (the next
 * definition is the driver's), RTLD_DEFAULT from an object that looks in
 * its own dependencies first (RTLD_DEEPBIND) or lives in another
 * namespace, and dlvsym of a driver that versions its names. Such a caller
 * may hold a function the gate cannot hold: the process is not parked. */
void park_dl_lookup_note(void *handle, const char *name, const char *version, void *caller) HIDDEN;
void park_dl_lookup_note(void *handle, const char *name, const char *version, void *caller)
{
	park_dlsym_asking(NULL);
	if (!park_driver_defines(name)) {
		note_missing(handle, name, caller);
		return;
	}
	if (park_passthrough)
		return;
	struct caller c = { .addr = (uintptr_t)caller };
	park_objects(find_caller, &c);
	const char *why = NULL;
	if (version && park_driver_versions())
		why = "it looked up a driver function with dlvsym, which reaches the driver past the interposer";
	else if (version)
		return; /* the driver defines no version: nothing is found */
	else if (handle == RTLD_NEXT && !c.main)
		why = "a library of it looked up a driver function with dlsym(RTLD_NEXT), which reaches the driver "
		      "past the interposer";
	else if (handle == RTLD_DEFAULT && (c.other_ns || !c.found || c.deepbound))
		why = "a library of it that looks in its own dependencies first (RTLD_DEEPBIND, dlmopen) looked up a "
		      "driver function";
	if (why)
		park_mark_unparkable(why);
}

static int note_last(const struct park_obj *o, void *arg)
{
	if (o->lm == NULL)
		return 1; /* the program's namespace comes first: its end */
	*(const struct link_map **)arg = o->lm;
	if (o->lm->l_next == NULL) {
		pthread_mutex_lock(&dl_mu);
		if (before_deepbind == NULL && !deepbind_all)
			before_deepbind = o->lm;
		pthread_mutex_unlock(&dl_mu);
	}
	return 0;
}

/* dlopen or dlmopen, just before the dynamic linker loads: a load that a
 * park would not see the bindings of waits for it to end (the driver's own
 * loads, and the interposer's, go on), and one with RTLD_DEEPBIND marks
 * where its objects begin. */
void park_dl_open_note(const char *file, long ns, int mode, void *caller) HIDDEN;
void park_dl_open_note(const char *file, long ns, int mode, void *caller)
{
	(void)file;
	park_dlsym_asking(NULL); /* a load binds names: no dlsym is under way */
	if (park_passthrough)
		return;
	if (park_gate_closed() && !park_gate_exempt_now() && !park_in_driver(caller))
		park_gate_wait_open();
	if (!(mode & RTLD_DEEPBIND) && ns == LM_ID_BASE)
		return;
	if (ns != LM_ID_BASE) {
		pthread_mutex_lock(&dl_mu);
		deepbind_all = true; /* its objects bind within their own namespace */
		pthread_mutex_unlock(&dl_mu);
		return;
	}
	const struct link_map *last = NULL;
	park_objects(note_last, &last);
	if (last == NULL) {
		pthread_mutex_lock(&dl_mu);
		deepbind_all = before_deepbind == NULL;
		pthread_mutex_unlock(&dl_mu);
	}
}
