#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakecuda.h"
#include "internal.h"
#include "ipc.h"
#include "procinfo.h"

/* CUDA IPC, what torch.multiprocessing does with cudaIpcGetMemHandle and
 * cudaIpcOpenMemHandle to share a CUDA tensor. On driver 580 the exporter
 * creates /dev/shm/cuda.shm.<A>.<B>, maps it and keeps it open; an importer
 * maps the same file without keeping an fd; a plain CUDA process has no
 * such file. Here the file's record tells an importer where the exported
 * memory is in the exporter's device memory memfd, which the importer maps
 * through /proc/<exporter>/fd: both then see the same bytes, also after the
 * exporter's own checkpoint and restore (the importer keeps the old memfd,
 * whose bytes the exporter's restore brought back unchanged). */

static pthread_mutex_t ipc_mu = PTHREAD_MUTEX_INITIALIZER;
static char export_path[PATH_MAX];
static pid_t export_pid; /* the process that created export_path; 0: none */
static int export_fd = -1;
static struct fc_ipc_record *export_rec;

/* A normal exit removes the file; SIGKILL leaves it behind, as it leaves the
 * real driver's. A child forked without exec inherits the variables but not
 * the file. */
__attribute__((destructor)) static void remove_export(void)
{
	if (export_pid != 0 && export_pid == getpid())
		unlink(export_path);
}

static size_t page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

/* A file left by a killed process that had our pid is replaced, not
 * truncated: an importer that still maps it must not lose its pages. */
static int create_shm(const char *path)
{
	if (unlink(path) != 0 && errno != ENOENT)
		return -1;
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)page_size()) != 0) {
		close(fd);
		unlink(path);
		return -1;
	}
	return fd;
}

/* Called with ipc_mu held; the file stays mapped and open until exit. */
static int open_export(void)
{
	char path[PATH_MAX];
	if (export_pid == getpid())
		return 0;
	if (fc_ipc_shm_path(path, sizeof(path), (unsigned int)geteuid(), (int)getpid()) != 0)
		return -1;
	int fd = create_shm(path);
	if (fd < 0)
		return -1;
	void *p = mmap(NULL, page_size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		unlink(path);
		return -1;
	}
	export_fd = fd;
	export_rec = p;
	snprintf(export_path, sizeof(export_path), "%s", path);
	export_pid = getpid();
	return 0;
}

CUresult fakecuda_ipc_export(uint64_t dptr, size_t bytes)
{
	uint64_t offset;
	return fc_ipc_export(dptr, bytes, &offset);
}

CUresult fc_ipc_export(uint64_t dptr, size_t bytes, uint64_t *offset)
{
	struct fc_region r;
	if (bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	/* only memory of our own can be exported */
	if (fc_devmem_locate(dptr, bytes, &r) != 0 || r.mem != NULL)
		rc = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&ipc_mu);
	if (rc == CUDA_SUCCESS && open_export() != 0)
		rc = CUDA_ERROR_OPERATING_SYSTEM;
	if (rc == CUDA_SUCCESS) {
		export_rec->pid = (int32_t)getpid();
		export_rec->offset = (uint64_t)r.off;
		export_rec->bytes = bytes;
		*offset = (uint64_t)r.off;
		__atomic_store_n(&export_rec->magic, FC_IPC_MAGIC, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&ipc_mu);
	fc_gate_leave();
	return rc;
}

/* The exporter's shared file, mapped without keeping an fd, as the real
 * importer maps it; *rec is its record. The name is the one the exporter
 * gave it: its uid and the pid it calls itself. */
static CUresult map_shared_file(int pid, struct fc_ipc_record *rec, void **map)
{
	char path[PATH_MAX], proc[64];
	struct stat st;
	int own, local;
	snprintf(proc, sizeof(proc), "/proc/%d", pid);
	if (stat(proc, &st) != 0 || fc_proc_tgid(pid, &own, &local) != 0 ||
	    fc_ipc_shm_path(path, sizeof(path), (unsigned int)st.st_uid, own) != 0)
		return CUDA_ERROR_INVALID_HANDLE;
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	void *p = MAP_FAILED;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)sizeof(*rec))
		p = mmap(NULL, page_size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return CUDA_ERROR_INVALID_HANDLE;
	memcpy(rec, p, sizeof(*rec));
	/* a file left by a dead process whose pid is now another's */
	if (rec->magic != FC_IPC_MAGIC || rec->pid != own || rec->bytes == 0) {
		munmap(p, page_size());
		return CUDA_ERROR_INVALID_HANDLE;
	}
	*map = p;
	return CUDA_SUCCESS;
}

/* The exported bytes, mapped from the exporter's memfd; *mem points at the
 * first, *base and *len are the mapping (page-aligned). */
static CUresult map_exported(int pid, const struct fc_ipc_record *rec, unsigned char **mem,
			     void **base, size_t *len)
{
	struct fc_devmem_info m;
	struct stat st;
	char path[96];
	if (fc_proc_devmem(pid, &m) != 0 || rec->offset > (uint64_t)m.bytes ||
	    rec->bytes > (uint64_t)m.bytes - rec->offset)
		return CUDA_ERROR_INVALID_HANDLE;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, m.fd);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	uint64_t start = rec->offset / page_size() * page_size();
	*len = (size_t)(rec->offset - start + rec->bytes);
	*base = MAP_FAILED;
	/* the exporter may have dropped its memfd since, and the fd number
	 * named another file: only the memfd seen is mapped */
	if (fstat(fd, &st) == 0 && st.st_dev == m.dev && st.st_ino == m.ino)
		*base = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
	close(fd);
	if (*base == MAP_FAILED)
		return CUDA_ERROR_INVALID_HANDLE;
	*mem = (unsigned char *)*base + (rec->offset - start);
	return CUDA_SUCCESS;
}

/* want: the bytes a handle names, else (NULL) those of the shared file's
 * record, the last export */
static CUresult import_from(int pid, const struct fc_ipc_record *want, struct fakecuda_ipc_mem *out)
{
	struct fc_ipc_record rec;
	void *file = NULL, *base = NULL;
	unsigned char *mem = NULL;
	size_t len = 0;
	CUresult rc = map_shared_file(pid, &rec, &file);
	if (rc == CUDA_SUCCESS && want != NULL) {
		rec.offset = want->offset;
		rec.bytes = want->bytes;
	}
	if (rc == CUDA_SUCCESS)
		rc = map_exported(pid, &rec, &mem, &base, &len);
	if (rc == CUDA_SUCCESS)
		rc = fc_devmem_import(mem, (size_t)rec.bytes, base, len, &out->dptr);
	if (rc != CUDA_SUCCESS) {
		if (base != NULL)
			munmap(base, len);
		if (file != NULL)
			munmap(file, page_size());
		return rc;
	}
	/* the shared file stays mapped for the life of the process, the
	 * memory until it is closed (cuIpcCloseMemHandle) */
	out->bytes = (size_t)rec.bytes;
	out->owner_pid = rec.pid;
	return CUDA_SUCCESS;
}

CUresult fakecuda_ipc_import(int pid, struct fakecuda_ipc_mem *mem)
{
	return fc_ipc_import(pid, NULL, mem);
}

CUresult fc_ipc_import(int pid, const struct fc_ipc_record *want, struct fakecuda_ipc_mem *mem)
{
	if (mem == NULL || pid <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = fc_gate_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = import_from(pid, want, mem);
	if (rc == CUDA_SUCCESS) {
		pthread_mutex_lock(&fc_tgt.mu);
		fc_tgt.ipc_imported = 1;
		pthread_mutex_unlock(&fc_tgt.mu);
	}
	fc_gate_leave();
	return rc;
}
