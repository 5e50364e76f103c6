/* VMM memory the program creates and shares itself: cuMemCreate, then
 * cuMemExportToShareableHandle of a POSIX file descriptor that it passes
 * to another process on its own. The descriptor says nothing of where it
 * came from (each export is a new open of /dev/nvidiactl on driver 580),
 * so the interposer marks every export: a read lock of one byte at an
 * offset that carries the export's serial (an OFD lock) and the exporter as
 * the descriptor's owner (F_SETOWN_EX). Both belong to the open file
 * description, which SCM_RIGHTS and pidfd_getfd pass on; they take no
 * privilege, hold nothing of the driver's and end with the last close.
 *
 * An importer that runs the interposer reads the mark, proves to the
 * exporter that it holds the descriptor (it sends it back), and may then
 * ask for the memory again: before a checkpoint it releases its import,
 * after the restore it asks the exporter for a new descriptor and maps it
 * where it was. The exporter's memory itself stays the driver's (it
 * checkpoints and restores such memory with its handle unchanged).
 *
 * The mark only finds the exporter: anyone can read its offset in
 * /proc/locks and put the same lock on a descriptor of their own. So the
 * exporter keeps a copy of each export's descriptor until its first
 * importer claims it, and takes the claim only for that very open file
 * description (a lock the copy takes is the received descriptor's own:
 * same_description); the claimant then gets a secret of the claim's, which
 * each later request proves (proof.c). The copy is a device file, which a
 * checkpoint must not find open: it is closed at the first claim, when the
 * handle goes, and at a park once it succeeded (cudasnap parks such an
 * exporter first); an export not claimed by then is not carried. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "park.h"
#include "park_find.h"

/* A handle the program made that can be exported as a descriptor. */
struct made {
	CUmemGenericAllocationHandle h;
	bool released;
	unsigned maps;
};

struct made_map {
	CUdeviceptr va;
	size_t size;
	CUmemGenericAllocationHandle h;
};

struct export
{
	uint64_t serial;
	CUmemGenericAllocationHandle h;
	int dup; /* a copy of its descriptor until it is claimed, else -1 */
	bool claimed;
};

/* The importer that proved it holds an export's descriptor (one for each). */
struct claim {
	uint64_t serial;
	pid_t pid; /* in this process's PID namespace (SO_PEERCRED) */
	uint8_t secret[PARK_SECRET_LEN]; /* what its later requests prove */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct made *mades;
static size_t nmades, capmades;
static struct made_map *mmaps;
static size_t nmmaps, capmmaps;
static struct export *exps;
static size_t nexps, capexps;
static struct claim *claims;
static size_t nclaims, capclaims;
static uint64_t next_serial;

/* A child of fork() made and exported nothing (table.c); its copies of the
 * parent's export descriptors (device files) are closed, as a checkpoint
 * must not find them open. */
static void child_forgets(void)
{
	mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	for (size_t i = 0; i < nexps; i++)
		if (exps[i].dup >= 0)
			close(exps[i].dup);
	mades = NULL;
	mmaps = NULL;
	exps = NULL;
	claims = NULL;
	nmades = capmades = nmmaps = capmmaps = nexps = capexps = nclaims = capclaims = 0;
}

__attribute__((constructor)) static void vmm_export_atfork(void)
{
	pthread_atfork(NULL, NULL, child_forgets);
}

static struct made *made_of(CUmemGenericAllocationHandle h)
{
	for (size_t i = 0; i < nmades; i++)
		if (mades[i].h == h)
			return &mades[i];
	return NULL;
}

static struct export *export_of(uint64_t serial)
{
	for (size_t i = 0; i < nexps; i++)
		if (exps[i].serial == serial)
			return &exps[i];
	return NULL;
}

/* A handle released and unmapped is gone, and so are its exports: the
 * driver may give its value to another allocation. */
static void settle(struct made *m)
{
	if (!m->released || m->maps)
		return;
	for (size_t i = 0; i < nexps;) {
		if (exps[i].h != m->h) {
			i++;
			continue;
		}
		if (exps[i].dup >= 0)
			close(exps[i].dup);
		exps[i] = exps[--nexps];
	}
	*m = mades[--nmades];
}

void park_vmm_made(CUmemGenericAllocationHandle h, const CUmemAllocationProp *prop)
{
	if (prop == NULL || !(prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return;
	pthread_mutex_lock(&mu);
	if (park_grow((void **)&mades, nmades, &capmades, sizeof(*mades)))
		mades[nmades++] = (struct made){ .h = h };
	pthread_mutex_unlock(&mu);
}

void park_vmm_made_mapped(CUmemGenericAllocationHandle h, CUdeviceptr va, size_t size)
{
	pthread_mutex_lock(&mu);
	struct made *m = made_of(h);
	if (m && park_grow((void **)&mmaps, nmmaps, &capmmaps, sizeof(*mmaps))) {
		mmaps[nmmaps++] = (struct made_map){ va, size, h };
		m->maps++;
	}
	pthread_mutex_unlock(&mu);
}

void park_vmm_made_unmapped(CUdeviceptr va, size_t size)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nmmaps;) {
		struct made_map mm = mmaps[i];
		if (mm.va < va || mm.va + mm.size > va + size) {
			i++;
			continue;
		}
		mmaps[i] = mmaps[--nmmaps];
		struct made *m = made_of(mm.h);
		if (m && m->maps) {
			m->maps--;
			settle(m);
		}
	}
	pthread_mutex_unlock(&mu);
}

void park_vmm_made_released(CUmemGenericAllocationHandle h)
{
	pthread_mutex_lock(&mu);
	struct made *m = made_of(h);
	if (m) {
		m->released = true;
		settle(m);
	}
	pthread_mutex_unlock(&mu);
}

/* The mark's lock on fd taken (F_RDLCK) or removed (F_UNLCK): 0, or -1. */
static int mark_lock(int fd, short type, uint64_t serial)
{
	struct flock fl = {
		.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)(PARK_TAG_BASE | serial), .l_len = 1
	};
	return fcntl(fd, F_OFD_SETLK, &fl);
}

/* Marks fd as export serial of this process; false when the kernel refused. */
static bool tag(int fd, uint64_t serial)
{
	struct f_owner_ex o = { F_OWNER_PID, getpid() };
	return mark_lock(fd, F_RDLCK, serial) == 0 && fcntl(fd, F_SETOWN_EX, &o) == 0;
}

bool park_vmm_exported(CUmemGenericAllocationHandle h, int fd)
{
	pthread_mutex_lock(&mu);
	/* a random start: a descriptor kept across the exporter's exec must
	 * not match a serial of the program that follows */
	if (next_serial == 0 && getrandom(&next_serial, sizeof(next_serial), 0) != sizeof(next_serial))
		next_serial = (uint64_t)getpid() << 24;
	uint64_t serial = next_serial++ & ~PARK_TAG_MASK;
	if (serial == 0)
		serial = next_serial++ & ~PARK_TAG_MASK;
	int dup = made_of(h) && park_grow((void **)&exps, nexps, &capexps, sizeof(*exps)) ?
		fcntl(fd, F_DUPFD_CLOEXEC, 0) :
		-1;
	bool ok = dup >= 0 && tag(fd, serial);
	if (ok)
		exps[nexps++] = (struct export){ serial, h, dup, false };
	else if (dup >= 0)
		close(dup);
	pthread_mutex_unlock(&mu);
	return ok;
}

unsigned park_vmm_unclaimed(void)
{
	pthread_mutex_lock(&mu);
	unsigned n = 0;
	for (size_t i = 0; i < nexps; i++)
		n += exps[i].dup >= 0;
	pthread_mutex_unlock(&mu);
	return n;
}

void park_vmm_close_unclaimed(void)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nexps; i++)
		if (exps[i].dup >= 0) {
			close(exps[i].dup);
			exps[i].dup = -1;
		}
	pthread_mutex_unlock(&mu);
}

/* Whether received is the open file description that dup is a copy of: the
 * same file, and a lock that dup's description takes does not stand in the
 * way of received (an OFD lock never conflicts with its own description's
 * locks; another description of the same file meets it). Neither needs a
 * privilege (kcmp(2) would, under the usual seccomp profiles). */
static bool same_description(int dup, int received)
{
	struct stat a, b;
	uint64_t rnd = 0;
	if (fstat(dup, &a) != 0 || fstat(received, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino ||
	    a.st_rdev != b.st_rdev || getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		return false;
	/* an offset of its own, below the marks' (read locks: the copy may be
	 * read-only) */
	off_t at = (off_t)(PARK_PROBE_BASE | (rnd & ~PARK_TAG_MASK));
	struct flock held = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1 };
	if (fcntl(dup, F_OFD_SETLK, &held) != 0)
		return false;
	struct flock probe = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1 };
	bool own = fcntl(received, F_OFD_GETLK, &probe) == 0 && probe.l_type == F_UNLCK;
	held.l_type = F_UNLCK;
	fcntl(dup, F_OFD_SETLK, &held);
	return own;
}

/* The serial an imported descriptor was marked with, and its exporter (in
 * this process's PID namespace); false when it carries no mark. */
bool park_vmm_mark(int fd, pid_t *pid, uint64_t *serial)
{
	struct f_owner_ex o = { 0, 0 };
	if (fcntl(fd, F_GETOWN_EX, &o) != 0 || o.type != F_OWNER_PID || o.pid <= 0)
		return false;
	char path[64], text[4096];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	int f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return false;
	ssize_t n = read(f, text, sizeof(text) - 1);
	close(f);
	if (n <= 0)
		return false;
	text[n] = 0;
	*serial = park_tag_in_fdinfo(text);
	*pid = o.pid;
	return *serial != 0;
}

static struct claim *claim_of(uint64_t serial, pid_t pid)
{
	for (size_t i = 0; i < nclaims; i++)
		if (claims[i].serial == serial && claims[i].pid == pid)
			return &claims[i];
	return NULL;
}

/* "vclaim S" and, in a message of its own, the descriptor: the peer holds
 * export S when that descriptor is the export's own open file description
 * (not one marked alike) and nobody claimed it before. out gets the
 * claim's secret. */
static bool claim(int conn, uint64_t serial, pid_t pid, uint8_t out[PARK_SECRET_LEN])
{
	char byte;
	int fd;
	if (park_recv_fd(conn, &byte, 1, &fd) != 1 || fd < 0) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	pid_t owner = 0;
	uint64_t marked = 0;
	bool ok = park_vmm_mark(fd, &owner, &marked) && owner == getpid() && marked == serial && pid > 0;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nclaims;) { /* claimants that died claim nothing */
		if (kill(claims[i].pid, 0) != 0 && errno == ESRCH)
			claims[i] = claims[--nclaims];
		else
			i++;
	}
	struct export *x = ok ? export_of(serial) : NULL;
	ok = x && x->dup >= 0 && same_description(x->dup, fd) &&
		getrandom(out, PARK_SECRET_LEN, 0) == PARK_SECRET_LEN &&
		park_grow((void **)&claims, nclaims, &capclaims, sizeof(*claims));
	if (ok) {
		claims[nclaims] = (struct claim){ .serial = serial, .pid = pid };
		memcpy(claims[nclaims++].secret, out, PARK_SECRET_LEN);
		close(x->dup);
		x->dup = -1;
		/* Claimed, the mark has served: a lock left on a descriptor the
		 * program keeps open would fail a CRIU dump of it ("file locks"). */
		mark_lock(fd, F_UNLCK, serial);
	}
	pthread_mutex_unlock(&mu);
	close(fd);
	return ok;
}

/* The claim's secret of export serial into out, true; a random one (which
 * no asker can prove) when there is none. */
static bool claim_secret(uint64_t serial, uint8_t out[PARK_SECRET_LEN])
{
	pthread_mutex_lock(&mu);
	struct claim *c = NULL;
	for (size_t i = 0; i < nclaims && c == NULL; i++)
		if (claims[i].serial == serial)
			c = &claims[i];
	if (c)
		memcpy(out, c->secret, PARK_SECRET_LEN);
	pthread_mutex_unlock(&mu);
	if (!c && getrandom(out, PARK_SECRET_LEN, 0) != PARK_SECRET_LEN)
		memset(out, 0xa5, PARK_SECRET_LEN);
	return c != NULL;
}

/* Where h is mapped (one of its mappings), 0 when nowhere; mu held. */
static CUdeviceptr mapped_at(CUmemGenericAllocationHandle h)
{
	for (size_t i = 0; i < nmmaps; i++)
		if (mmaps[i].h == h)
			return mmaps[i].va;
	return 0;
}

/* A new descriptor of export serial's memory for its claimant pid, noted
 * attached before it is handed over (park_ipc_attach_begin); -1 when it is
 * gone, or a park holds importers out. */
static int export_again(uint64_t serial, pid_t pid, CUresult *rc)
{
	const struct park_real *r = park_real();
	int fd = -1;
	*rc = CU_ERR_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	struct export *x = export_of(serial);
	struct made *m = x ? made_of(x->h) : NULL;
	bool noted = r && m && park_ipc_attach_begin(PARK_VMM_KEY(serial), pid);
	if (noted && !m->released) {
		*rc = r->export_handle(&fd, m->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	} else if (noted && m->maps) { /* released, still mapped: a handle again from its address */
		CUmemGenericAllocationHandle h = 0;
		*rc = r->retain ? r->retain(&h, (void *)(uintptr_t)mapped_at(m->h)) : CU_ERR_NOT_SUPPORTED;
		if (*rc == CU_OK) {
			*rc = r->export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
			r->mem_release(h);
		}
	}
	if (*rc != CU_OK && noted)
		park_ipc_note(PARK_VMM_KEY(serial), pid, false);
	pthread_mutex_unlock(&mu);
	return *rc == CU_OK ? fd : -1;
}

static int send_fd(int conn, const char *reply, int fd)
{
	return park_send_fd(conn, reply, strlen(reply), fd, 0);
}

static void forget(uint64_t serial, pid_t pid)
{
	pthread_mutex_lock(&mu);
	struct claim *c = claim_of(serial, pid);
	if (c)
		*c = claims[--nclaims];
	pthread_mutex_unlock(&mu);
}

static bool live(uint64_t serial)
{
	pthread_mutex_lock(&mu);
	struct export *x = export_of(serial);
	struct made *m = x ? made_of(x->h) : NULL;
	bool yes = m && (!m->released || m->maps);
	pthread_mutex_unlock(&mu);
	return yes;
}

/* "vlive S N" and "vfd S N", once the asker proved the claim's secret:
 * whether the export's memory is still there, or a new descriptor of it. */
static int serve_proven(int conn, const struct park_req *rq, pid_t pid)
{
	uint8_t secret[PARK_SECRET_LEN];
	bool found = claim_secret(rq->id, secret);
	if (!park_proof_check(conn, rq, secret) || !found)
		return send_fd(conn, "error code=1 stage=proof\n", -1);
	if (rq->verb == PARK_REQ_VLIVE)
		return send_fd(conn, live(rq->id) ? "ok\n" : "error code=400 stage=live\n", -1);
	CUresult rc;
	int fd = export_again(rq->id, pid, &rc);
	char reply[64];
	snprintf(reply, sizeof(reply), fd >= 0 ? "ok\n" : "error code=%d stage=export\n", rc);
	int w = send_fd(conn, reply, fd);
	if (fd >= 0)
		close(fd);
	if (w != 0 && fd >= 0)
		park_ipc_note(PARK_VMM_KEY(rq->id), pid, false);
	return w;
}

/* The exporter's side: "vclaim S" (then the descriptor; answered with the
 * claim's secret), "vlive S N", "vfd S N" (proven; answered with a new
 * descriptor), "vdetach S" and "vdrop S" (the importer detached for a
 * park, or let the import go: a peer speaks only for itself). */
int park_vmm_serve(int conn, const struct park_req *rq)
{
	pid_t pid = park_peer_pid(conn);
	uint64_t key = PARK_VMM_KEY(rq->id);
	if (rq->verb == PARK_REQ_VCLAIM) {
		uint8_t secret[PARK_SECRET_LEN];
		char reply[64], hex[2 * PARK_SECRET_LEN + 1];
		if (!claim(conn, rq->id, pid, secret))
			return send_fd(conn, "error code=400 stage=claim\n", -1);
		park_ipc_note(key, pid, true);
		park_hex(secret, sizeof(secret), hex);
		snprintf(reply, sizeof(reply), "ok %s\n", hex);
		return send_fd(conn, reply, -1);
	}
	if (rq->verb == PARK_REQ_VLIVE || rq->verb == PARK_REQ_VFD)
		return serve_proven(conn, rq, pid);
	park_ipc_note(key, pid, false);
	if (rq->verb == PARK_REQ_VDROP)
		forget(rq->id, pid);
	return send_fd(conn, "ok\n", -1);
}
