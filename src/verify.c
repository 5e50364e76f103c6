/* cudasnap verify: every GPU device reference left in this PID namespace. */
#include "cli.h"
#include "json.h"
#include "jsonout.h"
#include "util.h"
#include "verify.h"

#include <getopt.h>
#include <stdlib.h>

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s verify [--json]\n"
		"List every GPU device reference (/dev/nvidia* fds and mappings, also mappings\n"
		"whose fd was closed) still held in this PID namespace, with the process and the\n"
		"reason it was not released. Run it after 'cudasnap checkpoint' and before the\n"
		"snapshot: gVisor and CRIU fail on such references ('frontendFD is not\n"
		"saveable', 'Can't save pma ...'). cudasnap's own process is left out.\n\n"
		"Options:\n"
		"  --json      print one JSON object on stdout\n"
		"  -h, --help  show this help\n"
		"\nExit status: 0 no reference remains; 1 some remain; 2 usage or environment error,\n"
		"or processes could not be read (run as root or with CAP_SYS_PTRACE).\n",
		cs_prog);
}

static void print_human(const cs_ptable *t, const cs_leftover *l, size_t n)
{
	char unread[1024];
	cs_unreadable_line(t, unread, sizeof(unread));
	if (unread[0])
		printf("%s (run as root or with CAP_SYS_PTRACE to check them)\n", unread);
	if (n == 0) {
		printf(unread[0] ? "No GPU device reference found in the processes that could be read.\n" :
				   "No GPU device reference remains in this PID namespace.\n");
		return;
	}
	for (size_t i = 0, used; i < n; i += used) {
		char line[768];
		cs_verify_line(l + i, n - i, &used, line, sizeof(line));
		printf("%s\n", line);
	}
	printf("%zu GPU device reference%s remain%s.\n", n, n == 1 ? "" : "s", n == 1 ? "s" : "");
}

static int print_json(const cs_ptable *t, const cs_leftover *l, size_t n, const cs_driver *d)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "driver", cs_json_driver(d));
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < n; i++) {
		const cs_devref *r = l[i].ref;
		json_object *e = json_object_new_object();
		json_object_object_add(e, "pid", json_object_new_int(l[i].proc->pid));
		json_object_object_add(e, "comm", json_object_new_string(l[i].proc->comm));
		json_object_object_add(e, "class", json_object_new_string(cs_class_name(l[i].proc->cls)));
		cs_json_add_str_or_null(e, "state", cs_state_name(l[i].proc->state));
		json_object_object_add(e, "kind", json_object_new_string(r->kind == CS_REF_FD ? "fd" : "mapping"));
		cs_json_add_int_or_null(e, "fd", r->fd, r->kind == CS_REF_FD);
		json_object_object_add(e, "file", json_object_new_string(r->path));
		if (r->kind == CS_REF_MAP) {
			char range[48];
			snprintf(range, sizeof(range), "%lx-%lx", r->start, r->end);
			json_object_object_add(e, "range", json_object_new_string(range));
			json_object_object_add(e, "fd_open", json_object_new_boolean(r->fd_open));
		}
		cs_json_add_int_or_null(e, "forked_from", l[i].cuda_ancestor, l[i].cuda_ancestor > 0);
		json_object_object_add(e, "reason", json_object_new_string(l[i].reason));
		json_object_array_add(a, e);
	}
	json_object_object_add(o, "leftovers", a);
	json_object_object_add(o, "count", json_object_new_int64((int64_t)n));
	json_object_object_add(o, "unreadable", cs_json_unreadable(t));
	return cs_json_print(o);
}

int cmd_verify(int argc, char **argv)
{
	bool json;
	int rc0 = cli_parse_json_only(argc, argv, "verify", usage, &json);
	if (rc0 != CLI_GO_ON)
		return rc0;
	_cleanup_(cs_driver_freep) cs_driver *d = NULL;
	cs_error err = { 0 };
	cs_driver_open(&d, &err);
	_cleanup_(cs_ptable_freep) cs_ptable t = { 0 };
	_cleanup_free_ cs_leftover *l = NULL;
	size_t n = 0;
	int status;
	/* A list that could not be made says nothing: never report it as clean. */
	/* A process another operation holds is not asked: the question would
	 * wait behind that operation's calls. */
	cs_scan_opts opts = { .skip_busy = true };
	if (cs_discover(&opts, d, &t, &err) < 0 || cs_verify(&t, &l, &n, &err) < 0) {
		cli_error(&err);
		status = cli_exit_for(&err);
	} else {
		if (json)
			print_json(&t, l, n, d);
		else
			print_human(&t, l, n);
		status = cli_blind(&t) ? EXIT_USAGE : n ? EXIT_FAILED : EXIT_DONE;
	}
	return status;
}
