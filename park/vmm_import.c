/* VMM memory the program imports itself from another process
 * (cuMemImportFromShareableHandle of a POSIX file descriptor it passed on
 * its own). The driver checkpoints such a process but never restores it
 * (driver 580: CUDA_ERROR_NOT_SUPPORTED, for good), and nothing in /proc
 * shows it. When the exporter runs the interposer too, the descriptor
 * carries its mark (vmm_export.c) and the import is carried: a park unmaps
 * and releases it (its exporter told), an unpark asks the exporter for a
 * new descriptor and maps it at the same addresses with the same access.
 * Any other import is counted while its handle or a mapping of it lives,
 * and cudasnap refuses the process.
 *
 * The driver gives the new import a new handle value. The program keeps
 * the old one, so the interposer answers for it from then on: the calls
 * that take a handle are given the new value, and a value the driver hands
 * out that equals such an old one is not passed to the program (asked for
 * again: park_create_fresh, park_import_fresh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "park.h"
#include "park_find.h"

#define NACC 8

struct vmap {
	CUdeviceptr va;
	size_t size, offset;
	uint64_t id; /* its import's */
	CUmemAccessDesc acc[NACC];
	unsigned nacc;
};

struct vimport {
	uint64_t id;
	CUmemGenericAllocationHandle prog; /* the value the program holds (refs > 0) */
	CUmemGenericAllocationHandle real; /* the driver's, while attached and refs > 0 */
	unsigned refs; /* the program's references; the interposer holds one of the driver's for them all */
	unsigned maps;
	bool attached;
	pid_t from; /* its exporter (claimed), 0 when unknown */
	bool lost; /* something of it the interposer could not note: not carried */
	uint64_t serial;
	uint8_t secret[PARK_SECRET_LEN]; /* its claim's, which its requests prove */
	CUcontext ctx;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct vimport *imps;
static size_t nimps, capimps;
static struct vmap *maps;
static size_t nmaps, capmaps;
static uint64_t next_id = 1;

/* A child of fork() imported nothing (table.c). */
static void child_forgets(void)
{
	mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	imps = NULL;
	maps = NULL;
	nimps = capimps = nmaps = capmaps = 0;
}

__attribute__((constructor)) static void vmm_import_atfork(void)
{
	pthread_atfork(NULL, NULL, child_forgets);
}

static struct vimport *by_prog(CUmemGenericAllocationHandle h)
{
	for (size_t i = 0; h && i < nimps; i++)
		if (imps[i].refs && imps[i].prog == h)
			return &imps[i];
	return NULL;
}

static struct vimport *by_id(uint64_t id)
{
	for (size_t i = 0; i < nimps; i++)
		if (imps[i].id == id)
			return &imps[i];
	return NULL;
}

/* *h (rc CU_OK) goes to the program, or stands for an import (mine): not a
 * value the program still holds for another import, which the driver may
 * give out again once it was released. Such a value is held while another
 * is asked for (again), then given back; mu held. */
static CUresult fresh(CUresult rc, CUmemGenericAllocationHandle *h,
		      CUresult (*again)(void *, CUmemGenericAllocationHandle *), void *arg, const struct vimport *mine)
{
	const struct park_real *r = park_real();
	CUmemGenericAllocationHandle held[8];
	size_t n = 0;
	while (rc == CU_OK && n < 8 && by_prog(*h) && by_prog(*h) != mine) {
		held[n++] = *h;
		rc = again(arg, h);
	}
	for (size_t i = 0; i < n; i++)
		r->mem_release(held[i]);
	if (rc == CU_OK && by_prog(*h) && by_prog(*h) != mine) {
		r->mem_release(*h);
		rc = CU_ERR_OUT_OF_MEMORY;
	}
	return rc;
}

struct create_args {
	const struct park_real *r;
	size_t size;
	const CUmemAllocationProp *prop;
	unsigned long long flags;
};

static CUresult create_again(void *arg, CUmemGenericAllocationHandle *h)
{
	struct create_args *a = arg;
	return a->r->mem_create(h, a->size, a->prop, a->flags);
}

CUresult park_create_fresh(const struct park_real *r, CUmemGenericAllocationHandle *h, size_t size,
			   const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct create_args a = { r, size, prop, flags };
	pthread_mutex_lock(&mu);
	CUresult rc = fresh(r->mem_create(h, size, prop, flags), h, create_again, &a, NULL);
	pthread_mutex_unlock(&mu);
	return rc;
}

struct import_args {
	const struct park_real *r;
	void *os_handle;
	CUmemAllocationHandleType type;
};

static CUresult import_again(void *arg, CUmemGenericAllocationHandle *h)
{
	struct import_args *a = arg;
	return a->r->import_handle(h, a->os_handle, a->type);
}

CUresult park_import_fresh(const struct park_real *r, CUmemGenericAllocationHandle *h, void *os_handle,
			   CUmemAllocationHandleType type)
{
	struct import_args a = { r, os_handle, type };
	pthread_mutex_lock(&mu);
	CUresult rc = fresh(r->import_handle(h, os_handle, type), h, import_again, &a, NULL);
	pthread_mutex_unlock(&mu);
	return rc;
}

/* The answer to a request sent on conn: its first line into reply (and a
 * descriptor that comes with it into *got, when got is not NULL): 0 for
 * "ok", -1 otherwise. */
static int answer_of(int conn, char *reply, size_t size, int *got)
{
	int in = -1, rc = -1;
	ssize_t n = park_recv_fd(conn, reply, size - 1, &in);
	if (n > 0) {
		reply[n] = 0;
		rc = strncmp(reply, "ok", 2) == 0 ? 0 : -1;
	}
	if (in >= 0 && got && rc == 0)
		*got = in;
	else if (in >= 0)
		close(in);
	return rc;
}

/* One request to an exporter, about export serial: "vlive" and "vfd" are
 * proven with the claim's secret; "vclaim" sends fd with it. 0 when it
 * answered ok (its first line in reply, a descriptor in *got). */
static int ask(pid_t from, enum park_verb verb, uint64_t serial, const uint8_t *secret, int fd, char *reply,
	       size_t size, int *got)
{
	int conn = park_find_connect(from, "/proc", 5000);
	if (conn < 0)
		return -1;
	bool sent;
	if (verb == PARK_REQ_VLIVE || verb == PARK_REQ_VFD) {
		sent = park_proof_ask(conn, verb, serial, secret);
	} else {
		char req[64];
		int len = snprintf(req, sizeof(req), "%s %llx\n", park_req_word(verb), (unsigned long long)serial);
		sent = send(conn, req, (size_t)len, MSG_NOSIGNAL) == len;
	}
	if (sent && fd >= 0)
		sent = park_send_fd(conn, "f", 1, fd, 0) == 0;
	int rc = sent ? answer_of(conn, reply, size, got) : -1;
	close(conn);
	return rc;
}

static int tell(pid_t from, enum park_verb verb, uint64_t serial, const uint8_t *secret)
{
	char reply[64];
	return ask(from, verb, serial, secret, -1, reply, sizeof(reply), NULL);
}

/* Claims export serial of from with fd, the descriptor the program
 * imported: 0 with the claim's secret in secret. */
static int claim(pid_t from, uint64_t serial, int fd, uint8_t secret[PARK_SECRET_LEN])
{
	char reply[128];
	if (ask(from, PARK_REQ_VCLAIM, serial, NULL, fd, reply, sizeof(reply), NULL) != 0)
		return -1;
	size_t len = strcspn(reply, "\n");
	return len == 3 + 2 * PARK_SECRET_LEN && park_unhex(reply + 3, len - 3, secret, PARK_SECRET_LEN) ? 0 : -1;
}

/* An import the program let go of (no handle, nothing mapped); mu held.
 * The driver's reference, when the interposer holds one, goes into *drop;
 * whether its exporter is to be told. */
static bool settle(struct vimport *x, CUmemGenericAllocationHandle *drop, pid_t *from, uint64_t *serial)
{
	if (x->refs || x->maps)
		return false;
	*drop = x->attached ? x->real : 0;
	*from = x->from;
	*serial = x->serial;
	*x = imps[--nimps];
	return *from != 0;
}

/* What settle left to do, mu released. */
static void let_go(CUmemGenericAllocationHandle drop, bool told, pid_t from, uint64_t serial)
{
	const struct park_real *r = park_real();
	if (drop && r)
		r->mem_release(drop);
	if (told)
		tell(from, PARK_REQ_VDROP, serial, NULL);
}

CUmemGenericAllocationHandle park_vmm_real(CUmemGenericAllocationHandle h)
{
	pthread_mutex_lock(&mu);
	struct vimport *x = by_prog(h);
	CUmemGenericAllocationHandle real = x && x->attached ? x->real : h;
	pthread_mutex_unlock(&mu);
	return real;
}

void park_vmm_imported(CUmemGenericAllocationHandle h, int fd)
{
	pid_t from = 0;
	uint64_t serial = 0;
	uint8_t secret[PARK_SECRET_LEN] = { 0 };
	if (fd >= 0 && park_vmm_mark(fd, &from, &serial) && claim(from, serial, fd, secret) != 0)
		from = 0;
	const struct park_real *r = park_real();
	CUcontext ctx = NULL;
	if (r)
		r->ctx_get(&ctx);
	pthread_mutex_lock(&mu);
	bool ok = park_grow((void **)&imps, nimps, &capimps, sizeof(*imps));
	if (ok) {
		imps[nimps] = (struct vimport){ .id = next_id++,
						.prog = h,
						.real = h,
						.refs = 1,
						.attached = true,
						.from = from,
						.serial = serial,
						.ctx = ctx };
		memcpy(imps[nimps++].secret, secret, sizeof(secret));
	}
	pthread_mutex_unlock(&mu);
	if (!ok)
		park_mark_unparkable("out of memory tracking its imports");
}

bool park_vmm_mapped(CUmemGenericAllocationHandle h, CUdeviceptr va, size_t size, size_t offset)
{
	pthread_mutex_lock(&mu);
	struct vimport *x = by_prog(h);
	if (x && park_grow((void **)&maps, nmaps, &capmaps, sizeof(*maps))) {
		maps[nmaps++] = (struct vmap){ .va = va, .size = size, .offset = offset, .id = x->id };
		x->maps++;
	} else if (x) {
		x->lost = true; /* one of its mappings is not known */
	}
	pthread_mutex_unlock(&mu);
	return x != NULL;
}

/* Access is kept per device: a later call for a device replaces what an
 * earlier one gave it, others add to it. false when there is no room. */
static bool note_access(struct vmap *m, const CUmemAccessDesc *d)
{
	for (unsigned k = 0; k < m->nacc; k++)
		if (m->acc[k].location.type == d->location.type && m->acc[k].location.id == d->location.id) {
			m->acc[k] = *d;
			return true;
		}
	if (m->nacc == NACC)
		return false;
	m->acc[m->nacc++] = *d;
	return true;
}

void park_vmm_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nmaps; i++) {
		struct vmap *m = &maps[i];
		if (m->va >= va + size || va >= m->va + m->size)
			continue;
		bool whole = m->va >= va && m->va + m->size <= va + size, kept = whole;
		for (size_t k = 0; kept && k < count; k++)
			kept = note_access(m, &desc[k]);
		struct vimport *x = by_id(m->id);
		if (!kept && x)
			x->lost = true; /* access it could not note (on part of a mapping, or too much) */
	}
	pthread_mutex_unlock(&mu);
}

void park_vmm_unmapped(CUdeviceptr va, size_t size)
{
	for (;;) {
		CUmemGenericAllocationHandle drop = 0;
		pid_t from = 0;
		uint64_t serial = 0;
		bool told = false, found = false;
		pthread_mutex_lock(&mu);
		for (size_t i = 0; i < nmaps && !found; i++) {
			struct vmap *m = &maps[i];
			if (m->va < va || m->va + m->size > va + size)
				continue;
			found = true;
			struct vimport *x = by_id(m->id);
			*m = maps[--nmaps];
			if (x && x->maps) {
				x->maps--;
				told = settle(x, &drop, &from, &serial);
			}
		}
		pthread_mutex_unlock(&mu);
		if (!found)
			return;
		let_go(drop, told, from, serial);
	}
}

/* The program's release of h: true when the interposer answered for it
 * (one of its imports; the driver's reference is dropped once nothing of
 * the import is left), false when it is the driver's to answer. */
bool park_vmm_release(CUmemGenericAllocationHandle h)
{
	CUmemGenericAllocationHandle drop = 0;
	pid_t from = 0;
	uint64_t serial = 0;
	bool told = false;
	pthread_mutex_lock(&mu);
	struct vimport *x = by_prog(h);
	if (x) {
		x->refs--;
		told = settle(x, &drop, &from, &serial);
	}
	pthread_mutex_unlock(&mu);
	if (x)
		let_go(drop, told, from, serial);
	return x != NULL;
}

/* cuMemRetainAllocationHandle gave h for va: the program's value for it.
 * For an import the driver's reference the interposer holds serves the
 * program's as well, so the new one is dropped. */
CUmemGenericAllocationHandle park_vmm_retained(CUmemGenericAllocationHandle h, CUdeviceptr va)
{
	const struct park_real *r = park_real();
	CUmemGenericAllocationHandle got = h;
	bool drop = false;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nmaps && !drop; i++) {
		struct vimport *x = va >= maps[i].va && va - maps[i].va < maps[i].size ? by_id(maps[i].id) : NULL;
		if (x == NULL || !x->attached || x->real != h)
			continue;
		if (x->refs++ == 0)
			x->prog = x->real;
		h = x->prog;
		drop = true;
	}
	pthread_mutex_unlock(&mu);
	if (drop && r)
		r->mem_release(got);
	return h;
}

unsigned park_vmm_imports(void)
{
	pthread_mutex_lock(&mu);
	unsigned n = 0;
	for (size_t i = 0; i < nimps; i++)
		n += imps[i].from == 0 || imps[i].lost;
	pthread_mutex_unlock(&mu);
	return n;
}

unsigned park_vmm_carried(void)
{
	pthread_mutex_lock(&mu);
	unsigned n = 0;
	for (size_t i = 0; i < nimps; i++)
		n += imps[i].from != 0 && !imps[i].lost;
	pthread_mutex_unlock(&mu);
	return n;
}

static CUresult map_one(const struct park_real *r, const struct vmap *m, CUmemGenericAllocationHandle h)
{
	CUresult rc = r->mem_map(m->va, m->size, m->offset, h, 0);
	if (rc == CU_OK && m->nacc && (rc = r->set_access(m->va, m->size, m->acc, m->nacc)) != CU_OK)
		r->mem_unmap(m->va, m->size);
	return rc;
}

/* Park: every import's exporter still has the memory to give again, then
 * every mapping unmapped and the driver's reference dropped (the addresses
 * stay reserved), and the exporters told. The program's calls are held at
 * the gate meanwhile. */
CUresult park_vmm_detach_all(const struct park_real *r, pid_t *lost)
{
	pthread_mutex_lock(&mu);
	CUresult rc = CU_OK;
	for (size_t i = 0; i < nimps && rc == CU_OK; i++) {
		if (imps[i].attached && tell(imps[i].from, PARK_REQ_VLIVE, imps[i].serial, imps[i].secret) != 0) {
			*lost = imps[i].from;
			rc = CU_ERR_NOT_FOUND;
		}
	}
	for (size_t i = 0; i < nimps && rc == CU_OK; i++) {
		struct vimport *x = &imps[i];
		if (!x->attached)
			continue;
		size_t k = 0;
		for (; k < nmaps && rc == CU_OK; k++)
			if (maps[k].id == x->id)
				rc = r->mem_unmap(maps[k].va, maps[k].size);
		if (rc != CU_OK) { /* those unmapped come back: x stays as it was */
			for (size_t j = 0; j + 1 < k; j++)
				if (maps[j].id == x->id)
					map_one(r, &maps[j], x->real);
			break;
		}
		r->mem_release(x->real);
		x->real = 0;
		x->attached = false;
	}
	pid_t *who = calloc(nimps ? nimps : 1, sizeof(*who));
	uint64_t *serials = calloc(nimps ? nimps : 1, sizeof(*serials));
	size_t n = 0;
	for (size_t i = 0; who && serials && i < nimps; i++)
		if (!imps[i].attached) {
			who[n] = imps[i].from;
			serials[n++] = imps[i].serial;
		}
	pthread_mutex_unlock(&mu);
	for (size_t i = 0; i < n; i++)
		tell(who[i], PARK_REQ_VDETACH, serials[i], NULL);
	free(who);
	free(serials);
	return rc;
}

/* A new descriptor from x's exporter, asked again for up to until (an
 * exporter not restored yet has nothing to give). */
static int fetch(const struct vimport *x, double until)
{
	for (;;) {
		char reply[64];
		int fd = -1;
		if (ask(x->from, PARK_REQ_VFD, x->serial, x->secret, -1, reply, sizeof(reply), &fd) == 0 && fd >= 0)
			return fd;
		if (park_now() >= until)
			return -1;
		usleep(20000);
	}
}

/* x's memory mapped again where the program had it, with the access it
 * gave; mu held. */
static CUresult attach_one(const struct park_real *r, struct vimport *x, double until)
{
	CUresult rc = r->ctx_set(x->ctx);
	int fd = rc == CU_OK ? fetch(x, until) : -1;
	if (fd < 0)
		return rc == CU_OK ? CU_ERR_INVALID_HANDLE : rc;
	CUmemGenericAllocationHandle h = 0;
	struct import_args a = { r, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
	rc = fresh(r->import_handle(&h, a.os_handle, a.type), &h, import_again, &a, x);
	close(fd);
	if (rc != CU_OK)
		return rc;
	size_t done = 0;
	for (size_t k = 0; k < nmaps && rc == CU_OK; k++)
		if (maps[k].id == x->id && (rc = map_one(r, &maps[k], h)) == CU_OK)
			done++;
	if (rc != CU_OK) {
		for (size_t k = 0; k < nmaps && done; k++)
			if (maps[k].id == x->id && r->mem_unmap(maps[k].va, maps[k].size) == CU_OK)
				done--;
		r->mem_release(h);
		return rc;
	}
	x->real = h;
	x->attached = true;
	return CU_OK;
}

CUresult park_vmm_attach_all(const struct park_real *r, unsigned wait_ms)
{
	double until = park_now() + wait_ms / 1000.0;
	pthread_mutex_lock(&mu);
	CUresult rc = CU_OK;
	for (size_t i = 0; i < nimps && rc == CU_OK; i++)
		if (!imps[i].attached)
			rc = attach_one(r, &imps[i], until);
	pthread_mutex_unlock(&mu);
	return rc;
}
