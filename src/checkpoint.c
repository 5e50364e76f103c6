/* cudasnap checkpoint: lock and checkpoint every selected CUDA process. */
#include "txncli.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s checkpoint [OPTIONS]\n"
		"Lock every selected CUDA process, checkpoint them all concurrently (GPU memory\n"
		"moves into each process's host memory and its device files are released), then\n"
		"check that no GPU device reference is left. On any failure, a lock timeout, a\n"
		"process that exits, or SIGINT/SIGTERM, every process is returned to the state it\n"
		"had, newest change first. Processes already locked or checkpointed are left as\n"
		"they are. A manifest is written to the state directory for restore.\n\n",
		cs_prog);
	txn_cli_selection_help(f, CS_OP_CHECKPOINT);
	fprintf(f,
		"\nOptions:\n"
		"  -t, --timeout MS  driver lock timeout in milliseconds (default 10000; 0 waits\n"
		"                    forever behind running GPU work)\n"
		"  -j, --jobs N      concurrent checkpoints (default: one per process, up to 8)\n"
		"      --sequential  one process at a time, in a stable order (pid)\n"
		"      --strict      fail and roll back when device references remain (CRIU and\n"
		"                    older gVisor cannot save them); default: warn\n"
		"      --json        print the result as one JSON object on stdout\n"
		"  -h, --help        show this help\n");
	txn_cli_checks_help(f, CS_OP_CHECKPOINT);
	txn_cli_park_help(f, CS_OP_CHECKPOINT);
	txn_cli_deadline_help(f);
	fprintf(f,
		"\nEnvironment: CUDASNAP_STATE_DIR (default /run/cudasnap), CUDASNAP_LIBCUDA.\n"
		"Exit status: 0 done; 1 failed, every process still there rolled back; 2 usage\n"
		"or environment error, or refused (nothing changed); 3 failed and rollback\n"
		"incomplete, or a process LOST (named on stderr).\n");
}

int cmd_checkpoint(int argc, char **argv)
{
	_cleanup_(txn_cli_freep) txn_cli c = { .cmd = "checkpoint", .op = CS_OP_CHECKPOINT, .usage = usage };
	int r = txn_cli_parse(&c, argc, argv);
	return r == CLI_GO_ON ? txn_cli_execute(&c) : r;
}
