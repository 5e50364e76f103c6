/* What checkpoint, restore, lock and unlock share: selection options, the
 * state-directory lock, signals, progress and the report. */
#ifndef CS_TXNCLI_H
#define CS_TXNCLI_H

#include "cli.h"
#include "progress.h"
#include "sandbox.h"
#include "select.h"

typedef struct txn_cli {
	const char *cmd;
	cs_op op;
	cs_selection sel;
	size_t pcap, tcap;
	unsigned timeout_ms;
	unsigned step_timeout_s;  /* 0: sized by the driver's default */
	unsigned jobs;
	bool sequential;
	bool json;
	bool strict;
	bool no_init;
	bool ignore_manifest;
	bool reuse_warns;      /* a changed start time warns instead of refusing (hook restore) */
	const char *device_map;
	void (*usage)(FILE *f);
} txn_cli;

typedef struct txn_ctx {
	txn_cli *c;
	cs_driver *d;
	cs_ptable after;        /* the namespace after a checkpoint, for leftovers */
	struct cs_leftover *left;
	size_t nleft, nleft_scope;
	int state_fd;
	cs_sandbox sandbox;     /* gVisor or not, privileges */
	txn_watch_state watch;  /* progress of the step in flight */
} txn_ctx;

/* Restore's preparation: manifest order and PID-reuse check, device map,
 * cuInit when persistence mode is off. *pairs is malloc'd. */
int txn_prepare_restore(txn_ctx *x, cs_target *t, size_t n, cs_txn_opts *o, cs_gpu_pair **pairs,
			cs_error *err);

/* Parses the command's options; returns -1 to go on, or an exit status. */
int txn_cli_parse(txn_cli *c, int argc, char **argv);
int txn_cli_execute(txn_cli *c);
void txn_cli_free(txn_cli *c);

/* The option help shared by the four commands. */
void txn_cli_selection_help(FILE *f);
/* --step-timeout and what the deadlines and signals do. */
void txn_cli_deadline_help(FILE *f);

#endif
