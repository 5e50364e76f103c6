/* The objects the program has loaded, walked while the dynamic linker's
 * list of them holds still. The list changes under dlopen and dlclose, and
 * an object read while another thread closes it is memory that may be gone;
 * so every walk runs inside dl_iterate_phdr, which holds the lock that
 * guards the list (dl_load_write_lock, not the loader's own lock: a thread
 * in dlopen holds that one while a library's constructor runs, and the
 * constructor may call the driver, which a closed gate holds). Before this
 * library's constructor has run (a sanitizer's runtime looking its
 * functions up as it starts, when dl_iterate_phdr is its own interceptor
 * and not ready yet) the process has one thread, and the list is read
 * directly.
 *
 * Nothing here takes a lock of the interposer: a callback runs with the
 * list's lock held, and a thread that holds one of the interposer's locks
 * may be waiting for it (park_bindings_check). */
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#include "park.h"

struct walk {
	park_obj_fn fn;
	void *arg;
	const struct link_map *cur; /* the program's namespace, in step */
	bool stop;
};

static struct park_range range_of(const struct dl_phdr_info *info)
{
	struct park_range r = { UINTPTR_MAX, 0 };
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

static const ElfW(Dyn) * dynamic_of(const struct dl_phdr_info *info)
{
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			return (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	return NULL;
}

/* The link map of the program's namespace that info describes, NULL when
 * it is another namespace's. dl_iterate_phdr visits that namespace first,
 * in the order of its list. */
static const struct link_map *map_of(struct walk *w, const struct dl_phdr_info *info, const ElfW(Dyn) * dyn)
{
	const struct link_map *l = w->cur;
	if (l && l->l_addr == info->dlpi_addr && l->l_ld == dyn) {
		w->cur = l->l_next;
		return l;
	}
	for (l = _r_debug.r_map; l; l = l->l_next)
		if (l->l_addr == info->dlpi_addr && l->l_ld == dyn) {
			w->cur = l->l_next;
			return l;
		}
	return NULL;
}

static int each(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct walk *w = arg;
	if (w->stop)
		return 1;
	const ElfW(Dyn) *dyn = dynamic_of(info);
	/* the loader's count of unloads, where its answer carries one */
	bool subs = size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs);
	struct park_obj o = { .lm = map_of(w, info, dyn),
			      .base = info->dlpi_addr,
			      .dyn = dyn,
			      .range = range_of(info),
			      .name = info->dlpi_name,
			      .phdr = info->dlpi_phdr,
			      .subs = subs ? info->dlpi_subs : 0,
			      .subs_known = subs };
	w->stop = w->fn(&o, w->arg) != 0;
	return w->stop;
}

/* Before the constructor: the list alone, each object taken to reach up to
 * the next one's load address (objects do not overlap; what this tells is
 * which object holds an address). */
PARK_EARLY static void walk_early(struct walk *w)
{
	for (const struct link_map *l = _r_debug.r_map; l && !w->stop; l = l->l_next) {
		uintptr_t hi = UINTPTR_MAX;
		for (const struct link_map *m = _r_debug.r_map; m; m = m->l_next)
			if (m->l_addr > l->l_addr && m->l_addr < hi)
				hi = m->l_addr;
		struct park_obj o = {
			.lm = l, .base = l->l_addr, .dyn = l->l_ld, .range = { l->l_addr, hi }, .name = l->l_name
		};
		w->stop = w->fn(&o, w->arg) != 0;
	}
}

PARK_EARLY void park_objects(park_obj_fn fn, void *arg)
{
	struct walk w = { fn, arg, _r_debug.r_map, false };
	if (__atomic_load_n(&park_ready, __ATOMIC_ACQUIRE))
		dl_iterate_phdr(each, &w);
	else
		walk_early(&w);
}

PARK_EARLY bool park_range_has(struct park_range r, uintptr_t v)
{
	return v >= r.lo && v < r.hi;
}

/* ---- this library's own range ---- */

static int find_self(const struct park_obj *o, void *arg)
{
	if (!park_range_has(o->range, (uintptr_t)(void *)park_objects))
		return 0;
	*(struct park_range *)arg = o->range;
	return 1;
}

struct park_range park_self_range(void)
{
	static struct park_range self;
	static int known;
	if (__atomic_load_n(&known, __ATOMIC_ACQUIRE))
		return self;
	struct park_range r = { 0, 0 };
	park_objects(find_self, &r);
	/* kept once read from the segments (this library is never unloaded) */
	if (__atomic_load_n(&park_ready, __ATOMIC_ACQUIRE) && r.hi) {
		self = r;
		__atomic_store_n(&known, 1, __ATOMIC_RELEASE);
	}
	return r;
}

bool park_is_ours(const void *addr)
{
	return park_range_has(park_self_range(), (uintptr_t)addr);
}
