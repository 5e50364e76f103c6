/* cudasnap doctor: can a checkpoint and a restore work here, and if not, why. */
#include "cli.h"
#include "doctor.h"
#include "env.h"
#include "json.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void doctor_usage(FILE *f)
{
	fprintf(f,
		"Usage: %s doctor [--json]\n"
		"Check what a checkpoint and a restore of the CUDA processes here depend on, and\n"
		"say what to do about each problem:\n"
		"  the driver library, its version, the checkpoint API (R570+) and GPU remapping\n"
		"  at restore (R580+); NVML, the GPUs, persistence and MIG modes; whether host\n"
		"  memory can take the GPU memory in use; gVisor, container and PID namespace;\n"
		"  privileges; the environment overrides in effect; the settings file (what it\n"
		"  sets, each line it skipped, why it was ignored); and for every CUDA process,\n"
		"  communication libraries (NCCL, MPI, ...), signs of MPS, MIG or CUDA IPC, and\n"
		"  the GPUs it sees; and the last failure of the last 24 h in the history of\n"
		"  operations ('cudasnap history').\n"
		"Each check prints PASS, WARN or FAIL, and a fix for WARN and FAIL.\n\n"
		"Options:\n"
		"  --json      print one JSON object on stdout\n"
		"  -h, --help  show this help\n\n"
		"Environment:\n"
		"  CUDASNAP_LIBCUDA   path of the driver library (default: libcuda.so.1)\n"
		"  CUDASNAP_LIBNVML   path of NVML (default: libnvidia-ml.so.1)\n"
		"Both are ignored when cudasnap runs with elevated privileges (setuid or file\n"
		"capabilities: AT_SECURE); the 'environment' check names the ignored ones.\n\n"
		"Exit status: 0 no check failed; 1 a check failed; 2 usage error.\n",
		cs_prog);
}

static const char *const labels[] = { "PASS", "WARN", "FAIL" };

/* Below the settings check: each setting of the file and each line skipped. */
static void print_settings(const cs_doctor_report *r)
{
	const cs_config_status *c = &r->config;
	for (size_t i = 0; i < r->nsettings; i++)
		printf("      %s=%s%s\n", r->settings[i].name, r->settings[i].value,
		       r->settings[i].overridden ? " (the environment overrides it)" : "");
	for (size_t i = 0; i < c->nskipped && i < CS_ARRAY_SIZE(c->skipped); i++)
		printf("      line %u skipped: %s\n", c->skipped[i].line, c->skipped[i].why);
	if (c->nskipped > CS_ARRAY_SIZE(c->skipped))
		printf("      and %zu more line%s skipped\n", c->nskipped - CS_ARRAY_SIZE(c->skipped),
		       c->nskipped - CS_ARRAY_SIZE(c->skipped) == 1 ? "" : "s");
}

static void print_human(const cs_doctor_report *r)
{
	for (size_t i = 0; i < r->nchecks; i++) {
		const cs_check *c = &r->checks[i];
		printf("%s  %s: %s\n", labels[c->status], c->name, c->message);
		if (strcmp(c->name, "settings") == 0)
			print_settings(r);
		if (c->status != CS_CHECK_PASS && c->fix[0])
			printf("      fix: %s\n", c->fix);
	}
	printf("%zu passed, %zu warning%s, %zu failed\n", r->counts[CS_CHECK_PASS], r->counts[CS_CHECK_WARN],
	       r->counts[CS_CHECK_WARN] == 1 ? "" : "s", r->counts[CS_CHECK_FAIL]);
}

static json_object *json_checks(const cs_doctor_report *r)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < r->nchecks; i++) {
		const cs_check *c = &r->checks[i];
		json_object *o = json_object_new_object();
		json_object_object_add(o, "name", json_object_new_string(c->name));
		json_object_object_add(o, "status", json_object_new_string(cs_check_status_name(c->status)));
		json_object_object_add(o, "message", json_object_new_string(c->message));
		cs_json_add_str_or_null(o, "fix", c->fix[0] ? c->fix : NULL);
		cs_json_add_int_or_null(o, "pid", c->pid, c->pid > 0);
		json_object_array_add(a, o);
	}
	return a;
}

static json_object *json_names(const char *const *names, size_t n)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < n; i++)
		json_object_array_add(a, json_object_new_string(names[i]));
	return a;
}

static json_object *json_environment(const cs_doctor_report *r)
{
	const cs_sandbox *s = &r->env;
	json_object *o = json_object_new_object();
	json_object_object_add(o, "gvisor", json_object_new_boolean(s->gvisor));
	json_object_object_add(o, "container", json_object_new_boolean(s->container));
	json_object_object_add(o, "pid_namespace", json_object_new_string(cs_pidns_name(s->pid_ns)));
	json_object_object_add(o, "euid", json_object_new_int64(s->euid));
	json_object_object_add(o, "cap_sys_ptrace", json_object_new_boolean(s->cap_sys_ptrace));
	json_object_object_add(o, "at_secure", json_object_new_boolean(r->at_secure));
	json_object_object_add(o, "overrides", json_names(r->overrides, r->noverrides));
	json_object_object_add(o, "overrides_ignored", json_names(r->overrides, r->at_secure ? r->noverrides : 0));
	json_object_object_add(o, "settings_file", json_object_new_string(r->config.path));
	const char *names[CS_ENV_COUNT];
	for (size_t i = 0; i < r->nsettings; i++)
		names[i] = r->settings[i].name;
	json_object_object_add(o, "settings", json_names(names, r->nsettings));
	cs_json_add_str_or_null(o, "gvisor_signal", s->gvisor ? s->gvisor_signal : NULL);
	cs_json_add_str_or_null(o, "container_signal", s->container ? s->container_signal : NULL);
	json_object_object_add(o, "pid_namespace_signal", json_object_new_string(s->pid_ns_signal));
	cs_json_add_int_or_null(o, "nspid_depth", s->nspid_depth, s->nspid_depth > 0);
	cs_json_add_str_or_null(o, "kernel_release", s->kernel_release[0] ? s->kernel_release : NULL);
	cs_json_add_int_or_null(o, "mem_available", r->mem.mem_available, r->mem.mem_available >= 0);
	return o;
}

static json_object *json_settings(const cs_doctor_report *r)
{
	const cs_config_status *c = &r->config;
	json_object *o = json_object_new_object(), *set = json_object_new_array(), *skipped = json_object_new_array();
	json_object_object_add(o, "path", json_object_new_string(c->path));
	json_object_object_add(o, "read", json_object_new_boolean(c->read));
	cs_json_add_str_or_null(o, "ignored", c->ignored[0] ? c->ignored : NULL);
	for (size_t i = 0; i < r->nsettings; i++) {
		json_object *s = json_object_new_object();
		json_object_object_add(s, "name", json_object_new_string(r->settings[i].name));
		cs_json_add_str_or_null(s, "value", r->settings[i].value);
		json_object_object_add(s, "overridden", json_object_new_boolean(r->settings[i].overridden));
		json_object_array_add(set, s);
	}
	json_object_object_add(o, "settings", set);
	for (size_t i = 0; i < c->nskipped && i < CS_ARRAY_SIZE(c->skipped); i++) {
		json_object *s = json_object_new_object();
		json_object_object_add(s, "line", json_object_new_int64(c->skipped[i].line));
		json_object_object_add(s, "reason", json_object_new_string(c->skipped[i].why));
		json_object_array_add(skipped, s);
	}
	json_object_object_add(o, "skipped", skipped);
	json_object_object_add(o, "skipped_total", json_object_new_int64((int64_t)c->nskipped));
	return o;
}

static json_object *json_gpus(const cs_doctor_report *r)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < r->ngpus; i++) {
		const cs_nvml_gpu *g = &r->gpus[i];
		json_object *o = json_object_new_object();
		json_object_object_add(o, "index", json_object_new_int((int)g->index));
		json_object_object_add(o, "uuid", json_object_new_string(g->uuid));
		json_object_object_add(o, "name", json_object_new_string(g->name));
		json_object_object_add(o, "persistence_mode",
				       g->persistence < 0 ? NULL : json_object_new_boolean(g->persistence));
		cs_json_add_int_or_null(o, "memory_total", (long long)g->memory_total, g->memory_known);
		cs_json_add_int_or_null(o, "memory_used", (long long)g->memory_used, g->memory_known);
		json_object_object_add(o, "mig_mode", g->mig < 0 ? NULL : json_object_new_boolean(g->mig));
		json_object_array_add(a, o);
	}
	return a;
}

static json_object *json_visible(const cs_doctor_proc *p)
{
	if (!p->environ_read)
		return NULL;
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < p->nvisible; i++) {
		json_object *o = json_object_new_object();
		cs_json_add_int_or_null(o, "index", p->visible[i].index, p->visible[i].index >= 0);
		json_object_object_add(o, "id", json_object_new_string(p->visible[i].id));
		json_object_array_add(a, o);
	}
	return a;
}

static json_object *json_procs(const cs_doctor_report *r)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < r->nprocs; i++) {
		const cs_doctor_proc *p = &r->procs[i];
		json_object *o = json_object_new_object();
		json_object_object_add(o, "pid", json_object_new_int(p->pid));
		json_object_object_add(o, "comm", json_object_new_string(p->comm));
		json_object_object_add(o, "uid", json_object_new_int64(p->uid));
		cs_json_add_str_or_null(o, "communication_libraries", p->comm_libs[0] ? p->comm_libs : NULL);
		cs_json_add_str_or_null(o, "mps", p->mps[0] ? p->mps : NULL);
		cs_json_add_str_or_null(o, "mig", p->mig[0] ? p->mig : NULL);
		cs_json_add_str_or_null(o, "ipc", p->ipc[0] ? p->ipc : NULL);
		cs_json_add_str_or_null(o, "cuda_visible_devices", p->visible_set ? p->visible_env : NULL);
		json_object_object_add(o, "visible_gpus", json_visible(p));
		json_object_array_add(a, o);
	}
	return a;
}

/* The operations of the last 24 h: how many, how many failed, and the
 * last failure as the history stores it. */
static json_object *json_history(const cs_doctor_report *r)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "operations_24h", json_object_new_int64((int64_t)r->history_recent));
	json_object_object_add(o, "unread_alerts", json_object_new_int64((int64_t)r->history_unread));
	json_object_object_add(o, "failures_24h", json_object_new_int64((int64_t)r->history_failures));
	json_object_object_add(o, "last_failure", r->history_last ? json_tokener_parse(r->history_last) : NULL);
	return o;
}

static int print_json(const cs_doctor_report *r)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "checks", json_checks(r));
	json_object *sum = json_object_new_object();
	for (int s = 0; s < 3; s++)
		json_object_object_add(sum, cs_check_status_name(s), json_object_new_int64((int64_t)r->counts[s]));
	json_object_object_add(o, "summary", sum);
	json_object_object_add(o, "environment", json_environment(r));
	json_object_object_add(o, "settings", json_settings(r));
	json_object_object_add(o, "gpus", json_gpus(r));
	json_object_object_add(o, "processes", json_procs(r));
	json_object_object_add(o, "history", json_history(r));
	return cs_json_print(o);
}

int cmd_doctor(int argc, char **argv)
{
	bool json;
	int rc0 = cli_parse_json_only(argc, argv, "doctor", doctor_usage, &json);
	if (rc0 != CLI_GO_ON)
		return rc0;
	_cleanup_(cs_doctor_report_freep) cs_doctor_report r = { 0 };
	cs_error err = { 0 };
	if (cs_doctor_run(NULL, &r, &err) < 0) {
		cli_error(&err);
		return EXIT_FAILED;
	}
	int rc = r.counts[CS_CHECK_FAIL] ? EXIT_FAILED : EXIT_DONE;
	if (json) {
		if (print_json(&r) < 0)
			rc = EXIT_FAILED;
	} else {
		print_human(&r);
	}
	return rc;
}
