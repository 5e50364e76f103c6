/* cudasnap history: what cudasnap did on this node, newest first, from the
 * history of operations that every front-end writes (lib/record/history.h). */
#include "cli.h"
#include "history.h"
#include "json.h"
#include "state.h"

#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_COUNT 20

static void history_usage(FILE *f)
{
	fprintf(f,
		"Usage: %s history [--json] [-n N] [--mark-read]\n"
		"What cudasnap did on this node, newest first: every checkpoint, restore, lock\n"
		"and unlock that changed a process or refused to, whoever ran it (cli: the\n"
		"command line; hook: gVisor's hook; drop-in: cuda-checkpoint; criu-dump and\n"
		"criu-restore: the CRIU plugin, under runc, Podman or containerd too). One\n"
		"header line per operation (its time in UTC, who ran it, the operation, its\n"
		"outcome and exit status, how long it took, the caller and its parent), then one\n"
		"line per process (pid, pid inside its namespace, command, what became of it,\n"
		"GPU memory moved, seconds per step, the step and driver code that failed, why,\n"
		"and the command that recovers it), and the error. Dry runs are not recorded.\n\n"
		"Options:\n"
		"  -n, --count N  the N newest operations (default %d)\n"
		"  --json         print the stored entries as one JSON array on stdout\n"
		"  --mark-read    note the alerts shown as read (history.seen)\n"
		"  -h, --help     show this help\n\n"
		"An operation that left a process LOST, UNRESTORABLE or LEFT BEHIND is an\n"
		"alert: kept across the history's rotation, and named by doctor, until someone\n"
		"marks it read with --mark-read. Nothing else marks it: a monitor that runs\n"
		"doctor or history hides nothing from people.\n\n"
		"Files: history.jsonl, history.1.jsonl and history.seen in the state directory\n"
		"(%s; CUDASNAP_STATE_DIR), readable by root alone.\n\n"
		"Exit status: 0 listed (also when nothing is recorded); 2 usage error, or the\n"
		"history cannot be read.\n",
		cs_prog, DEFAULT_COUNT, cs_state_dir());
}

static int parse(int argc, char **argv, bool *json, size_t *count, bool *mark)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "mark-read", no_argument, NULL, 'M' },
		{ "count", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	*json = false;
	*mark = false;
	*count = DEFAULT_COUNT;
	for (int c; (c = getopt_long(argc, argv, "hn:", opts, NULL)) != -1;) {
		long v;
		switch (c) {
		case 'h': history_usage(stdout); return EXIT_DONE;
		case 'j': *json = true; break;
		case 'M': *mark = true; break;
		case 'n':
			if (cs_parse_long(optarg, 1, INT_MAX, &v) < 0) {
				cli_errorf(NULL, "history: -n takes a whole number from 1, not '%s'", optarg);
				return cli_usage_error("history");
			}
			*count = (size_t)v;
			break;
		default: return cli_usage_error("history");
		}
	}
	if (optind < argc) {
		cli_errorf(NULL, "history takes no arguments ('%s')", argv[optind]);
		return cli_usage_error("history");
	}
	return CLI_GO_ON;
}

static void print_human(const cs_history_log *l, size_t count)
{
	if (l->n == 0) {
		printf("no operation is recorded in %s/%s\n", cs_state_dir(), CS_HISTORY_NAME);
		return;
	}
	for (size_t i = 0; i < l->n && i < count; i++) {
		_cleanup_free_ char *text = cs_history_describe(l->e[i]);
		if (text)
			fputs(text, stdout);
	}
	if (l->n > count)
		printf("(%zu older operation%s: -n %zu shows them all)\n", l->n - count, l->n - count == 1 ? "" : "s",
		       l->n);
}

static int print_json(const cs_history_log *l, size_t count)
{
	json_object *a = json_object_new_array();
	for (size_t i = 0; i < l->n && i < count; i++)
		json_object_array_add(a, json_object_get(l->e[i]));
	return cs_json_print(a);
}

/* --mark-read: the alerts shown are read, and the history need not carry
 * them any longer. */
static void mark_read(const cs_history_log *l, size_t count)
{
	bool any = false;
	for (size_t i = 0; i < l->n && i < count; i++)
		any |= l->unread[i];
	cs_error err = { 0 };
	_cleanup_close_ int statefd = any ? cs_state_open_existing(&err) : -1;
	if (statefd >= 0)
		cs_history_mark_seen(statefd, l->e, l->n < count ? l->n : count);
}

int cmd_history(int argc, char **argv)
{
	bool json, mark;
	size_t count;
	int r = parse(argc, argv, &json, &count, &mark);
	if (r != CLI_GO_ON)
		return r;
	_cleanup_(cs_history_log_freep) cs_history_log l = { 0 };
	cs_error err = { 0 };
	if (cs_history_read(-1, &l, &err) < 0) {
		cli_error(&err);
		return EXIT_USAGE;
	}
	if (l.skipped)
		cli_msg("warning: %zu line%s of the history %s skipped: not a well-formed entry (corrupt or truncated)",
			l.skipped, l.skipped == 1 ? "" : "s", l.skipped == 1 ? "was" : "were");
	if (l.cut)
		cli_msg("warning: a history file is larger than cudasnap writes it: only its last %u KiB were read",
			CS_HISTORY_READ_MAX >> 10);
	int rc = EXIT_DONE;
	if (json)
		rc = print_json(&l, count) < 0 ? EXIT_FAILED : EXIT_DONE;
	else
		print_human(&l, count);
	if (mark)
		mark_read(&l, count);
	return rc;
}
