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
 * checkpoints and restores such memory with its handle unchanged). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
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
};

/* An importer that proved it holds an export's descriptor. */
struct claim {
	uint64_t serial;
	pid_t pid; /* in this process's PID namespace (SO_PEERCRED) */
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
		if (exps[i].h == m->h)
			exps[i] = exps[--nexps];
		else
			i++;
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
	bool ok = made_of(h) && park_grow((void **)&exps, nexps, &capexps, sizeof(*exps)) && tag(fd, serial);
	if (ok)
		exps[nexps++] = (struct export){ serial, h };
	pthread_mutex_unlock(&mu);
	return ok;
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
 * export S when the descriptor carries this process's mark S. */
static bool claim(int conn, uint64_t serial, pid_t pid)
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
	bool ok = park_vmm_mark(fd, &owner, &marked) && owner == getpid() && marked == serial;
	/* Claimed, the mark has served: a lock left on a descriptor the
	 * program keeps open would fail a CRIU dump of it ("file locks"). */
	if (ok)
		mark_lock(fd, F_UNLCK, serial);
	close(fd);
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nclaims;) { /* claimants that died claim nothing */
		if (kill(claims[i].pid, 0) != 0 && errno == ESRCH)
			claims[i] = claims[--nclaims];
		else
			i++;
	}
	ok = ok && export_of(serial) &&
		(claim_of(serial, pid) || park_grow((void **)&claims, nclaims, &capclaims, sizeof(*claims)));
	if (ok && !claim_of(serial, pid))
		claims[nclaims++] = (struct claim){ serial, pid };
	pthread_mutex_unlock(&mu);
	return ok;
}

/* Where h is mapped (one of its mappings), 0 when nowhere; mu held. */
static CUdeviceptr mapped_at(CUmemGenericAllocationHandle h)
{
	for (size_t i = 0; i < nmmaps; i++)
		if (mmaps[i].h == h)
			return mmaps[i].va;
	return 0;
}

/* A new descriptor of export serial's memory for a claimant, -1 when it
 * is gone (or its claimant is not one). */
static int export_again(uint64_t serial, pid_t pid, CUresult *rc)
{
	const struct park_real *r = park_real();
	int fd = -1;
	*rc = CU_ERR_INVALID_HANDLE;
	pthread_mutex_lock(&mu);
	struct export *x = claim_of(serial, pid) ? export_of(serial) : NULL;
	struct made *m = x ? made_of(x->h) : NULL;
	if (r && m && !m->released) {
		*rc = r->export_handle(&fd, m->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	} else if (r && m && m->maps) { /* released, still mapped: a handle again from its address */
		CUmemGenericAllocationHandle h = 0;
		*rc = r->retain ? r->retain(&h, (void *)(uintptr_t)mapped_at(m->h)) : CU_ERR_NOT_SUPPORTED;
		if (*rc == CU_OK) {
			*rc = r->export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
			r->mem_release(h);
		}
	}
	pthread_mutex_unlock(&mu);
	return *rc == CU_OK ? fd : -1;
}

static int send_fd(int conn, const char *reply, int fd)
{
	return park_send_fd(conn, reply, strlen(reply), fd);
}

static void forget(uint64_t serial, pid_t pid)
{
	pthread_mutex_lock(&mu);
	struct claim *c = claim_of(serial, pid);
	if (c)
		*c = claims[--nclaims];
	pthread_mutex_unlock(&mu);
}

/* The exporter's side: "vclaim S" (then the descriptor), "vlive S",
 * "vfd S" (answered with a new descriptor), "vdetach S" and "vdrop S"
 * (the importer detached for a park, or let the import go). */
int park_vmm_serve(int conn, const char *line)
{
	char verb[16];
	unsigned long long serial = 0;
	if (sscanf(line, "%15s %llx", verb, &serial) != 2)
		return send_fd(conn, "error code=0 stage=request\n", -1);
	pid_t pid = park_peer_pid(conn);
	uint64_t key = PARK_VMM_KEY(serial);
	if (strcmp(verb, "vclaim") == 0) {
		bool ok = claim(conn, serial, pid);
		if (ok)
			park_ipc_note(key, pid, true);
		return send_fd(conn, ok ? "ok\n" : "error code=400 stage=claim\n", -1);
	}
	if (strcmp(verb, "vlive") == 0) {
		pthread_mutex_lock(&mu);
		struct export *x = claim_of(serial, pid) ? export_of(serial) : NULL;
		struct made *m = x ? made_of(x->h) : NULL;
		bool live = m && (!m->released || m->maps);
		pthread_mutex_unlock(&mu);
		return send_fd(conn, live ? "ok\n" : "error code=400 stage=live\n", -1);
	}
	if (strcmp(verb, "vfd") == 0) {
		CUresult rc;
		int fd = export_again(serial, pid, &rc);
		char reply[64];
		snprintf(reply, sizeof(reply), fd >= 0 ? "ok\n" : "error code=%d stage=export\n", rc);
		int w = send_fd(conn, reply, fd);
		if (fd >= 0)
			close(fd);
		if (w == 0 && fd >= 0)
			park_ipc_note(key, pid, true);
		return w;
	}
	if (strcmp(verb, "vdetach") == 0 || strcmp(verb, "vdrop") == 0) {
		park_ipc_note(key, pid, false);
		if (strcmp(verb, "vdrop") == 0)
			forget(serial, pid);
		return send_fd(conn, "ok\n", -1);
	}
	return send_fd(conn, "error code=0 stage=request\n", -1);
}
