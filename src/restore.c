/* cudasnap restore: restore and unlock every checkpointed CUDA process. */
#include "txncli.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s restore [OPTIONS]\n"
		"Restore every checkpointed process of the selection, in the order of the last\n"
		"checkpoint (from the manifest), then unlock them. A PID whose process changed\n"
		"since the checkpoint (PID reuse) is refused. On any failure every process is\n"
		"returned to the state it had.\n\n",
		cs_prog);
	txn_cli_selection_help(f, CS_OP_RESTORE);
	fprintf(f,
		"\nOptions:\n"
		"  -d, --device-map OLD=NEW,...  restore onto other GPUs (driver R580+); each side\n"
		"                    a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) or index;\n"
		"                    must cover every GPU the processes can see\n"
		"  -j, --jobs N      concurrent restores (default: one per process, up to 8)\n"
		"      --sequential  one process at a time, in checkpoint order\n"
		"  -t, --timeout MS  lock timeout used if a rollback must lock again (default 10000)\n"
		"      --no-init     do not call cuInit when persistence mode is off or unknown\n"
		"      --ignore-manifest  restore whatever is checkpointed now, by pid\n"
		"      --json        print the result as one JSON object on stdout\n"
		"  -h, --help        show this help\n");
	txn_cli_checks_help(f, CS_OP_RESTORE);
	txn_cli_park_help(f, CS_OP_RESTORE);
	txn_cli_deadline_help(f);
	fprintf(f,
		"\nExit status: 0 done; 1 failed, every process still there rolled back; 2 usage\n"
		"or environment error, or refused (nothing changed); 3 failed and rollback\n"
		"incomplete, or a process LOST (named on stderr).\n");
}

int cmd_restore(int argc, char **argv)
{
	_cleanup_(txn_cli_freep) txn_cli c = { .cmd = "restore", .op = CS_OP_RESTORE, .usage = usage };
	int r = txn_cli_parse(&c, argc, argv);
	return r == CLI_GO_ON ? txn_cli_execute(&c) : r;
}
