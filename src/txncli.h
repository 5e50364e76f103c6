/* What checkpoint, restore, lock and unlock share: selection options, the
 * state-directory lock, signals, progress and the report. */
#ifndef CS_TXNCLI_H
#define CS_TXNCLI_H

#include "cli.h"
#include "progress.h"
#include "select.h"
#include "util.h"

typedef struct txn_cli {
	const char *cmd;
	cs_op op;
	cs_selection sel;
	size_t pcap, tcap;
	unsigned timeout_ms;
	unsigned step_timeout_s; /* 0: sized by the driver's default */
	unsigned jobs;
	bool sequential;
	bool json;
	bool strict;
	bool no_init;
	bool ignore_manifest;
	bool reuse_warns; /* a changed start time warns instead of refusing (hook restore) */
	bool dry_run;
	bool ignore_memory;
	bool allow_unrestorable;
	unsigned wait_memory_s; /* restore */
	bool ignore_gpu_memory; /* restore */
	bool no_park; /* checkpoint, restore */
	const char *park_to; /* checkpoint: --park-to DIR */
	bool park_keep; /* restore: --keep */
	const char *park_from; /* restore: --park-from DIR/NAME */
	/* checkpoint and lock: --all, every CUDA process of the namespace, which
	 * the initial PID namespace asks for by name (the hook sets it too) */
	bool all;
	const char *device_map;
	/* who runs it, for the history of operations: "cli" when NULL, "hook" */
	const char *front;
	void (*usage)(FILE *f);
} txn_cli;

typedef struct txn_ctx {
	txn_cli *c;
	cs_driver *d;
	cs_session *s;
	txn_watch_state watch; /* progress of the step in flight */
} txn_ctx;

/* The report (src/txnreport.c). */
void txn_progress(void *ctx, const cs_target *t, cs_step s, bool undo, int res, double secs);
void txn_print_human(const txn_ctx *x, const cs_target *t, size_t n, const cs_txn_result *r);
void txn_print_json(const txn_ctx *x, const cs_target *t, size_t n, const cs_txn_result *r, int status);
/* A failure before anything changed: reported, and its exit status. */
int txn_early_error(const txn_ctx *x, const cs_error *e);

/* --dry-run: the plan, printed (src/dryrun.c); exit 0 when it would go
 * through, 1 when not. */
int txn_dry_run(txn_ctx *x);

/* Parses the command's options; returns CLI_GO_ON, or an exit status. */
int txn_cli_parse(txn_cli *c, int argc, char **argv);
int txn_cli_execute(txn_cli *c);
/* Frees the selection lists txn_cli_parse made; c may be zeroed. */
void txn_cli_free(txn_cli *c);
CS_DEFINE_CLEANUP_STRUCT(txn_cli, txn_cli_free)

/* The option help shared by the four commands; op says whether --all is
 * one of them (checkpoint and lock). */
void txn_cli_selection_help(FILE *f, cs_op op);
/* --step-timeout and what the deadlines and signals do. */
void txn_cli_deadline_help(FILE *f);
/* --dry-run, and for checkpoint what is checked before anything changes. */
void txn_cli_checks_help(FILE *f, cs_op op);
/* --no-park, and what parking is */
void txn_cli_park_help(FILE *f, cs_op op);

#endif
