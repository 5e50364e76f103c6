/* cudasnap lock / unlock: pause GPU work without releasing its memory. */
#include "txncli.h"

static void usage_for(FILE *f, bool lock)
{
	fprintf(f,
		"Usage: %s %s [OPTIONS]\n"
		"%s every selected CUDA process as one transaction: if one fails, the others\n"
		"are returned to the state they had.%s\n\n",
		cs_prog, lock ? "lock" : "unlock", lock ? "Lock (pause GPU work of)" : "Unlock (resume GPU work of)",
		lock ? " GPU memory stays where it is." : "");
	txn_cli_selection_help(f, lock ? CS_OP_LOCK : CS_OP_UNLOCK);
	fprintf(f,
		"\nOptions:\n"
		"  -t, --timeout MS  driver lock timeout in milliseconds (default 10000; 0 = forever)\n"
		"  -j, --jobs N      concurrent calls (default: one per process, up to 8)\n"
		"      --sequential  one process at a time\n"
		"      --json        print the result as one JSON object on stdout\n"
		"  -h, --help        show this help\n");
	txn_cli_checks_help(f, lock ? CS_OP_LOCK : CS_OP_UNLOCK);
	txn_cli_deadline_help(f);
	fprintf(f,
		"\nExit status: 0 done; 1 failed, every process still there rolled back; 2 usage\n"
		"or environment error, or refused (nothing changed); 3 failed and rollback\n"
		"incomplete.\n");
}

static void lock_usage(FILE *f)
{
	usage_for(f, true);
}
static void unlock_usage(FILE *f)
{
	usage_for(f, false);
}

static int run(int argc, char **argv, bool lock)
{
	_cleanup_(txn_cli_freep) txn_cli c = { .cmd = lock ? "lock" : "unlock",
					       .op = lock ? CS_OP_LOCK : CS_OP_UNLOCK,
					       .usage = lock ? lock_usage : unlock_usage };
	int r = txn_cli_parse(&c, argc, argv);
	return r == CLI_GO_ON ? txn_cli_execute(&c) : r;
}

int cmd_lock(int argc, char **argv)
{
	return run(argc, argv, true);
}
int cmd_unlock(int argc, char **argv)
{
	return run(argc, argv, false);
}
