/* cudasnap doctor: checks of the driver, the GPUs, the sandbox and every CUDA
 * process, each a pass, a warning or a failure with what to do about it. */
#ifndef CS_DOCTOR_H
#define CS_DOCTOR_H

#include "cudasnap.h"
#include "env.h"
#include "nvml.h"
#include "sandbox.h"
#include "util.h"

typedef enum cs_check_status {
	CS_CHECK_PASS = 0,
	CS_CHECK_WARN = 1,
	CS_CHECK_FAIL = 2,
} cs_check_status;

typedef struct cs_check {
	char name[32];
	int status; /* cs_check_status */
	pid_t pid; /* the process it is about; 0 for the others */
	char message[1024];
	char fix[512]; /* "" when there is nothing to do */
} cs_check;

/* One GPU a process can see: an NVML index, or -1 with the entry as written
 * (a MIG instance, or a GPU that NVML does not list). */
typedef struct cs_visible_gpu {
	int index;
	char id[CS_NVML_UUID_SIZE];
} cs_visible_gpu;

typedef struct cs_doctor_proc {
	pid_t pid;
	uid_t uid;
	char comm[64];
	char comm_libs[256]; /* communication libraries mapped, ", "-separated */
	/* Hints of GPU sharing, each the evidence seen; "" when none. */
	char mps[160], ipc[160], mig[160];
	bool environ_read;
	int environ_errno;
	bool pci_order; /* CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA counts GPUs as NVML does */
	bool visible_set; /* CUDA_VISIBLE_DEVICES present in its environment */
	char visible_env[1024]; /* its value */
	/* The GPUs it sees, in CUDA's order; every GPU NVML lists when !visible_set. */
	cs_visible_gpu *visible;
	size_t nvisible;
	char ignored[256]; /* the entries CUDA ignores, from the first bad one on */
} cs_doctor_proc;

/* One setting the settings file gives. */
typedef struct cs_doctor_setting {
	const char *name; /* a static string */
	char *value; /* sanitized: control bytes and invalid UTF-8 as '?' (heap) */
	bool overridden; /* the environment gives it too, and wins */
} cs_doctor_setting;

typedef struct cs_doctor_report {
	cs_check *checks;
	size_t nchecks, cap;
	size_t counts[3]; /* by cs_check_status */
	cs_sandbox env;
	cs_hostmem mem;
	bool at_secure; /* elevated privileges: no environment override is read */
	const char *overrides[CS_ENV_COUNT]; /* documented variables set (static strings) */
	size_t noverrides;
	cs_doctor_setting settings[CS_ENV_COUNT]; /* what the settings file sets */
	size_t nsettings;
	cs_config_status config; /* the settings file: its path, why ignored, lines skipped */
	bool nvml_present;
	char nvml_driver_version[CS_NVML_VERSION_SIZE];
	cs_nvml_gpu *gpus;
	size_t ngpus;
	cs_doctor_proc *procs; /* CUDA processes, by pid */
	size_t nprocs;
	size_t pcap;
	bool oom; /* a check could not be recorded */
	/* The history of operations: those of the last 24 h, how many failed,
	 * and the last failure (its stored JSON, malloc'd; NULL when none). */
	size_t history_recent, history_failures;
	size_t history_unread; /* alerts no one has read, whatever their age */
	char *history_last;
} cs_doctor_report;

typedef struct cs_doctor_opts {
	const char *root; /* NULL: cs_sandbox_root() */
	const cs_scan_opts *scan; /* NULL: defaults */
} cs_doctor_opts;

/* Runs every check. Returns <0 only when out of memory; a missing driver,
 * NVML or procfs is a failed or warned check, not an error. */
int cs_doctor_run(const cs_doctor_opts *opts, cs_doctor_report *out, cs_error *err);
void cs_doctor_report_free(cs_doctor_report *r);
CS_DEFINE_CLEANUP_STRUCT(cs_doctor_report, cs_doctor_report_free)
const char *cs_check_status_name(int status); /* "pass", "warn", "fail" */

/* Records one check; sets r->oom when it cannot. */
void cs_doctor_add(cs_doctor_report *r, const char *name, int status, pid_t pid, const char *fix, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

/* Shared by the doctor's source files. */
void cs_doctor_list_add(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int cs_doctor_check_processes(cs_doctor_report *r, cs_driver *d, const cs_doctor_opts *o, const char *root);
/* The "history" check: the last failure of the last 24 h; and
 * "history-unread", when alerts no one has read are kept
 * (lib/doctor/doctor_history.c). */
void cs_doctor_check_history(cs_doctor_report *r);

#endif
