/* What dl_x86_64.S asks of C: lookups with a handle, answered with gated
 * entry points for the driver's functions; and what lookups and loads the
 * interposer cannot stand in front of tell it. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "park.h"

#define HIDDEN __attribute__((visibility("hidden")))

/* The first object of the program's namespace loaded by a dlopen with
 * RTLD_DEEPBIND may come after this one: objects after it are looked at
 * as such (bindings.c). NULL: none yet. */
static struct link_map *before_deepbind;
static bool deepbind_all; /* that object is gone: every object is suspect */
static pthread_mutex_t dl_mu = PTHREAD_MUTEX_INITIALIZER;

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

void *park_dlsym_handle(void *handle, const char *name) HIDDEN;
void *park_dlsym_handle(void *handle, const char *name)
{
	void *(*next)(void *, const char *) = NULL;
	park_dl_init();
	*(void **)&next = park_dlsym_next;
	return gated(name, next ? next(handle, name) : NULL);
}

void *park_dlvsym_handle(void *handle, const char *name, const char *version) HIDDEN;
void *park_dlvsym_handle(void *handle, const char *name, const char *version)
{
	void *(*next)(void *, const char *, const char *) = NULL;
	park_dl_init();
	*(void **)&next = park_dlvsym_next;
	return gated(name, next ? next(handle, name, version) : NULL);
}

/* The object that holds addr, in the program's namespace: its link map,
 * or NULL. */
static struct link_map *object_of(void *addr, bool *other_ns)
{
	Dl_info info;
	struct link_map *lm = NULL;
	*other_ns = false;
	if (dladdr1(addr, &info, (void **)&lm, RTLD_DL_LINKMAP) == 0 || lm == NULL)
		return NULL;
	Lmid_t ns = LM_ID_BASE;
	if (dlinfo(lm, RTLD_DI_LMID, &ns) == 0 && ns != LM_ID_BASE)
		*other_ns = true;
	return lm;
}

bool park_after_deepbind(const struct link_map *lm)
{
	pthread_mutex_lock(&dl_mu);
	bool after = deepbind_all;
	if (!after && before_deepbind) {
		bool seen = false;
		for (struct link_map *l = _r_debug.r_map; l && !after; l = l->l_next) {
			after = seen && l == lm;
			seen = seen || l == before_deepbind;
		}
		deepbind_all = !seen;
		after = after || !seen;
	}
	pthread_mutex_unlock(&dl_mu);
	return after;
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
	if (park_passthrough || !park_driver_defines(name))
		return;
	bool other_ns;
	struct link_map *lm = object_of(caller, &other_ns);
	const char *why = NULL;
	if (version && park_driver_versions())
		why = "it looked up a driver function with dlvsym, which reaches the driver past the interposer";
	else if (version)
		return; /* the driver defines no version: nothing is found */
	else if (handle == RTLD_NEXT && lm != _r_debug.r_map)
		why = "a library of it looked up a driver function with dlsym(RTLD_NEXT), which reaches the driver "
		      "past the interposer";
	else if (handle == RTLD_DEFAULT && (other_ns || lm == NULL || park_after_deepbind(lm)))
		why = "a library of it that looks in its own dependencies first (RTLD_DEEPBIND, dlmopen) looked up a "
		      "driver function";
	if (why)
		park_mark_unparkable(why);
}

/* dlopen or dlmopen, just before the dynamic linker loads: a load that a
 * park would not see the bindings of waits for it to end (the driver's own
 * loads, and the interposer's, go on), and one with RTLD_DEEPBIND marks
 * where its objects begin. */
void park_dl_open_note(const char *file, long ns, int mode, void *caller) HIDDEN;
void park_dl_open_note(const char *file, long ns, int mode, void *caller)
{
	(void)file;
	if (park_passthrough)
		return;
	if (park_gate_closed() && !park_gate_exempt_now() && !park_in_driver(caller))
		park_gate_wait_open();
	if (!(mode & RTLD_DEEPBIND) && ns == LM_ID_BASE)
		return;
	pthread_mutex_lock(&dl_mu);
	if (ns != LM_ID_BASE) {
		deepbind_all = true; /* its objects bind within their own namespace */
	} else if (before_deepbind == NULL && !deepbind_all) {
		struct link_map *l = _r_debug.r_map;
		while (l && l->l_next)
			l = l->l_next;
		before_deepbind = l;
		deepbind_all = l == NULL;
	}
	pthread_mutex_unlock(&dl_mu);
}
