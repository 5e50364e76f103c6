/* Where the driver's functions are: the real dynamic linker's functions
 * (which this library's own exports of dlsym and dlopen stand in front
 * of), the definition of a driver name that comes after this library (a
 * later interposer's, else libcuda.so.1's), and the functions the
 * interposer itself calls. */
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elfread.h"
#include "park.h"

#define HIDDEN __attribute__((visibility("hidden")))

struct park_real_all {
	struct park_real r;
	bool vmm; /* every VMM function is there */
};

/* Published once loaded. No lock is held while loading: dlopen takes the
 * loader's lock, and a thread that holds that one (dlopen of a library
 * whose constructor calls the driver) may be the next to ask for the
 * driver; behind a once-lock each would wait for the other. Threads that
 * find nothing published load a copy each; the first copy published is
 * kept, the others let go. */
static _Atomic(struct park_real_all *) real_pub;

/* The C library's dynamic linking functions, read from its symbol table:
 * a call by name from here would reach this library's own exports. Also
 * what dl_x86_64.S's stand-ins for them pass on to. */
void *park_dlsym_libc HIDDEN;
void *park_dlvsym_libc HIDDEN;
void *park_dlopen_libc HIDDEN;
void *park_dlmopen_libc HIDDEN;
static dlsym_fn glibc_dlsym;
static void *(*glibc_dlopen)(const char *, int);

/* What dl_x86_64.S passes the program's calls on to: the next definition
 * after this library (a later interposer's, else the C library's). */
void *park_dlsym_next HIDDEN;
void *park_dlvsym_next HIDDEN;
void *park_dlopen_next HIDDEN;
void *park_dlmopen_next HIDDEN;

bool park_passthrough;
bool park_ready;

struct libc_q {
	const char *name;
	void *found;
};

PARK_EARLY static int libc_def(const struct park_obj *o, void *arg)
{
	struct libc_q *q = arg;
	struct park_elf e;
	if (o->lm == NULL || !park_elf_read(o->base, o->dyn, &e) || e.soname == NULL ||
	    (!park_elf_same(e.soname, "libc.so.6") && !park_elf_same(e.soname, "libdl.so.2")))
		return 0;
	const ElfW(Sym) *s = park_elf_find_version(&e, q->name, NULL);
	if (s)
		q->found = (void *)(e.base + s->st_value);
	return s != NULL;
}

PARK_EARLY static void *libc_sym(const char *name)
{
	struct libc_q q = { name, NULL };
	park_objects(libc_def, &q);
	return q.found;
}

PARK_EARLY static void dl_load(void)
{
	void *fn[4] = { libc_sym("dlsym"), libc_sym("dlvsym"), libc_sym("dlopen"), libc_sym("dlmopen") };
	*(void **)&glibc_dlsym = fn[0];
	*(void **)&glibc_dlopen = fn[2];
	if (glibc_dlsym == NULL)
		return;
	/* RTLD_NEXT from here: the next definition after this library */
	void *n[4] = { glibc_dlsym(RTLD_NEXT, "dlsym"), glibc_dlsym(RTLD_NEXT, "dlvsym"),
		       glibc_dlsym(RTLD_NEXT, "dlopen"), glibc_dlsym(RTLD_NEXT, "dlmopen") };
	void **libc[4] = { &park_dlsym_libc, &park_dlvsym_libc, &park_dlopen_libc, &park_dlmopen_libc };
	void **next[4] = { &park_dlsym_next, &park_dlvsym_next, &park_dlopen_next, &park_dlmopen_next };
	for (int i = 3; i >= 0; i--) { /* dlsym's last: dl_x86_64.S tests it */
		__atomic_store_n(libc[i], fn[i], __ATOMIC_RELEASE);
		__atomic_store_n(next[i], n[i] ? n[i] : fn[i], __ATOMIC_RELEASE);
	}
}

static pthread_once_t dl_once = PTHREAD_ONCE_INIT;

void park_dl_init(void)
{
	pthread_once(&dl_once, dl_load);
}

static void *driver_handle(void)
{
	static void *lib;
	void *h = __atomic_load_n(&lib, __ATOMIC_ACQUIRE);
	if (h == NULL && glibc_dlopen) {
		h = glibc_dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
		if (h)
			__atomic_store_n(&lib, h, __ATOMIC_RELEASE);
	}
	return h;
}

void *park_next_sym(const char *name)
{
	park_dl_init();
	if (glibc_dlsym == NULL)
		return NULL;
	/* after this library in the global scope: a later interposer, or the
	 * driver; one loaded locally (the CUDA runtime's dlopen) by its handle */
	void *fn = glibc_dlsym(RTLD_NEXT, name);
	void *h = fn ? NULL : driver_handle();
	return fn ? fn : h ? glibc_dlsym(h, name) : NULL;
}

#define GET(field, name) (*(void **)&r->field = park_next_sym(name))

static void load(struct park_real_all *all)
{
	struct park_real *r = &all->r;
	park_dl_init();
	if (glibc_dlopen == NULL)
		return;
	r->lib = glibc_dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (r->lib == NULL)
		r->lib = glibc_dlopen("libcuda.so.1", RTLD_NOW);
	if (r->lib == NULL)
		return;
	GET(get_proc, "cuGetProcAddress_v2");
	GET(get_proc_v1, "cuGetProcAddress");
	GET(mem_alloc, "cuMemAlloc_v2");
	GET(mem_free, "cuMemFree_v2");
	GET(mem_range, "cuMemGetAddressRange_v2");
	GET(ipc_get, "cuIpcGetMemHandle");
	GET(ipc_open, "cuIpcOpenMemHandle_v2");
	GET(ipc_open_v1, "cuIpcOpenMemHandle");
	GET(ipc_close, "cuIpcCloseMemHandle");
	GET(retain, "cuMemRetainAllocationHandle");
	GET(props, "cuMemGetAllocationPropertiesFromHandle");
	GET(ptr_attr, "cuPointerGetAttribute");
	GET(ptr_attrs, "cuPointerGetAttributes");
	GET(dev_attr, "cuDeviceGetAttribute");
	GET(pool_import, "cuMemPoolImportFromShareableHandle");
	GET(pool_destroy, "cuMemPoolDestroy");
	GET(ctx_create_v1, "cuCtxCreate");
	GET(ctx_create, "cuCtxCreate_v2");
	GET(ctx_create_v3, "cuCtxCreate_v3");
	GET(ctx_create_v4, "cuCtxCreate_v4");
	GET(ctx_destroy_v1, "cuCtxDestroy");
	GET(ctx_destroy, "cuCtxDestroy_v2");
	GET(green_create, "cuGreenCtxCreate");
	GET(green_destroy, "cuGreenCtxDestroy");
	GET(ctx_from_green, "cuCtxFromGreenCtx");
	GET(primary_state, "cuDevicePrimaryCtxGetState");
	GET(primary_retain, "cuDevicePrimaryCtxRetain");
	GET(primary_release, "cuDevicePrimaryCtxRelease_v2");
	void **vmm[] = {
		(void **)&r->addr_reserve,  (void **)&r->addr_free,
		(void **)&r->mem_create,    (void **)&r->mem_release,
		(void **)&r->mem_map,       (void **)&r->mem_unmap,
		(void **)&r->set_access,    (void **)&r->granularity,
		(void **)&r->export_handle, (void **)&r->import_handle,
		(void **)&r->dtoh,          (void **)&r->htod,
		(void **)&r->host_register, (void **)&r->host_unregister,
		(void **)&r->ctx_sync,      (void **)&r->ctx_get,
		(void **)&r->ctx_set,       (void **)&r->ctx_device,
		(void **)&r->can_peer,      (void **)&r->device_count,
	};
	static const char *const names[] = {
		"cuMemAddressReserve",
		"cuMemAddressFree",
		"cuMemCreate",
		"cuMemRelease",
		"cuMemMap",
		"cuMemUnmap",
		"cuMemSetAccess",
		"cuMemGetAllocationGranularity",
		"cuMemExportToShareableHandle",
		"cuMemImportFromShareableHandle",
		"cuMemcpyDtoH_v2",
		"cuMemcpyHtoD_v2",
		"cuMemHostRegister_v2",
		"cuMemHostUnregister",
		"cuCtxSynchronize",
		"cuCtxGetCurrent",
		"cuCtxSetCurrent",
		"cuCtxGetDevice",
		"cuDeviceCanAccessPeer",
		"cuDeviceGetCount",
	};
	_Static_assert(sizeof(vmm) / sizeof(vmm[0]) == sizeof(names) / sizeof(names[0]), "one name per function");
	all->vmm = r->mem_alloc && r->mem_free;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		*vmm[i] = park_next_sym(names[i]);
		all->vmm &= *vmm[i] != NULL;
	}
}

static const struct park_real_all *real_get(void)
{
	struct park_real_all *cur = atomic_load_explicit(&real_pub, memory_order_acquire);
	if (cur)
		return cur;
	struct park_real_all *mine = calloc(1, sizeof(*mine));
	if (mine == NULL)
		return NULL; /* asked again next time */
	load(mine);
	if (atomic_compare_exchange_strong_explicit(&real_pub, &cur, mine, memory_order_acq_rel,
						    memory_order_acquire)) {
		if (mine->r.lib && !mine->vmm)
			park_mark_unparkable("the driver has no virtual memory management");
		return mine;
	}
	if (mine->r.lib)
		dlclose(mine->r.lib);
	free(mine);
	return cur;
}

const struct park_real *park_real(void)
{
	const struct park_real_all *all = real_get();
	return all && all->r.lib ? &all->r : NULL;
}

bool park_vmm(void)
{
	const struct park_real_all *all = real_get();
	return all && all->r.lib && all->vmm;
}

/* ---- the driver's symbol table, for park_ifunc ---- */

/* libcuda.so.1 in the program's namespace, found by its name among the
 * loaded objects; false when it is not loaded. Remembered once the
 * interposer holds it open (park_real), since it stays then. No call into
 * the dynamic linker but dl_iterate_phdr, which takes only the lock of its
 * list of objects (park_ifunc runs while it binds). */
PARK_EARLY static int find_driver(const struct park_obj *o, void *arg)
{
	struct park_elf e;
	if (o->lm == NULL || !park_elf_read(o->base, o->dyn, &e) || e.soname == NULL ||
	    !park_elf_same(e.soname, "libcuda.so.1"))
		return 0;
	*(struct park_elf *)arg = e;
	return 1;
}

PARK_EARLY static bool driver_elf(struct park_elf *out)
{
	static struct park_elf found;
	static int state; /* 0 not yet, 1 found */
	if (__atomic_load_n(&state, __ATOMIC_ACQUIRE)) {
		*out = found;
		return true;
	}
	struct park_elf e = { 0 };
	park_objects(find_driver, &e);
	if (e.symtab == NULL)
		return false;
	*out = e;
	/* kept once the interposer holds the driver open */
	const struct park_real_all *held = atomic_load_explicit(&real_pub, memory_order_acquire);
	if (held && held->r.lib && !__atomic_load_n(&state, __ATOMIC_ACQUIRE)) {
		found = e;
		__atomic_store_n(&state, 1, __ATOMIC_RELEASE);
	}
	return true;
}

PARK_EARLY bool park_driver_defines(const char *name)
{
	struct park_elf e;
	return driver_elf(&e) && park_elf_find(&e, name) != NULL;
}

bool park_driver_versions(void)
{
	struct park_elf e;
	return driver_elf(&e) && e.has_verdef;
}

__thread char park_dlsym_asks[128] HIDDEN;

void park_dlsym_asking(const char *name)
{
	size_t len = name ? strlen(name) : 0;
	park_dlsym_asks[0] = 0;
	if (len && len < sizeof(park_dlsym_asks))
		memcpy(park_dlsym_asks, name, len + 1);
}

/* Whether the lookup under way is this thread's dlsym of name (taken once). */
static bool dlsym_asks(const char *name)
{
	if (!park_dlsym_asks[0] || name == NULL || strcmp(park_dlsym_asks, name) != 0)
		return false;
	park_dlsym_asks[0] = 0;
	return true;
}

/* The resolver of an exported driver name (gate_x86_64.S), once this
 * library is relocated: the name's stub or wrapper when a driver that
 * defines it is loaded. Where none does, a dlsym finds nothing, as it
 * would without the interposer; an object being bound to the name (the
 * dynamic linker cannot be told to skip a defined name) gets its stub,
 * whose call then fails as the dynamic linker fails a lazy binding of a
 * name nobody defines (park_gate_resolve), never a jump to address 0. A
 * library that needs such a name loads with RTLD_NOW, where without the
 * interposer its dlopen fails. Before the constructor below has run (an
 * object bound while the program starts) every name is answered: the
 * objects that bind driver names then are those linked with the driver. */
void *park_ifunc(unsigned slot, void *special) HIDDEN;
PARK_EARLY void *park_ifunc(unsigned slot, void *special)
{
	void *stub = special ? special : park_name_stub(slot);
	if (!__atomic_load_n(&park_ready, __ATOMIC_ACQUIRE))
		return stub;
	const char *name = park_name_at(slot);
	struct park_elf e;
	bool loaded = driver_elf(&e);
	/* Where no driver is loaded yet, the one loaded later answers the
	 * call (through the wrapper where the name has one); where the loaded
	 * one lacks it, the plain stub fails it as the dynamic linker would. */
	if (name == NULL || !loaded || park_elf_find(&e, name) == NULL)
		return dlsym_asks(name) ? NULL : loaded ? park_name_stub(slot) : stub;
	return park_passthrough ? park_next_sym(name) : stub;
}

/* ---- what the program may forbid ---- */

struct seccomp_state {
	int mode, filters; /* -1: not known */
};

static struct seccomp_state at_start = { -1, -1 };

static struct seccomp_state seccomp_now(void)
{
	struct seccomp_state s = { -1, -1 };
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return s;
	char buf[4096];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return s;
	buf[n] = 0;
	const char *m = strstr(buf, "\nSeccomp:"), *f = strstr(buf, "\nSeccomp_filters:");
	if (m)
		s.mode = atoi(m + 9);
	if (f)
		s.filters = atoi(f + 17);
	return s;
}

bool park_syscalls_changed(void)
{
	struct seccomp_state now = seccomp_now();
	if (now.mode < 0 || at_start.mode < 0)
		return true;
	return now.mode != at_start.mode || now.filters != at_start.filters;
}

static bool env_off(const char *name)
{
	const char *e = getenv(name);
	return e && (strcmp(e, "0") == 0 || strcmp(e, "off") == 0);
}

/* Before the program's own code runs (an LD_PRELOAD library is initialized
 * before the objects that need it): what the process allows, then the
 * gate's barrier, then the exported names answer for the driver. */
__attribute__((constructor)) static void init(void)
{
	park_passthrough = env_off("CUDASNAP_PARK");
	at_start = seccomp_now();
	/* A filter that was there from the start (a container's) is known to
	 * have let the program start; membarrier is asked for only without. */
	park_gate_init(at_start.mode == 0);
	park_dl_init();
	__atomic_store_n(&park_ready, true, __ATOMIC_RELEASE);
}
