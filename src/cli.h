/* Shared pieces of the command line. */
#ifndef CS_CLI_H
#define CS_CLI_H

#include "cudasnap.h"

#include <stdbool.h>
#include <stdio.h>

/* Exit statuses, documented in cudasnap(1), and the one value a step of
 * the command line returns when there is no exit status yet. */
enum {
	CLI_GO_ON = -1,
	EXIT_DONE = 0,
	EXIT_FAILED = 1, /* failed, everything rolled back */
	EXIT_USAGE = 2, /* usage or environment error */
	EXIT_INCOMPLETE = 3, /* failed, rollback incomplete */
};

typedef struct cs_command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} cs_command;

extern const char *cs_prog;
/* When set (hook mode), every message line starts with a UTC timestamp. */
extern bool cli_timestamps;

/* One line on stderr: "cudasnap: message", timestamped in hook mode. */
void cli_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Replaces the one updating status line of a terminal (stderr); NULL or ""
 * wipes it. The next cli_msg wipes it too. */
void cli_status(const char *line);

/* Prints "cudasnap: message" and the hint on stderr. */
void cli_error(const cs_error *e);
void cli_errorf(const char *hint, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reports an unknown option or missing argument and returns EXIT_USAGE. */
int cli_usage_error(const char *cmd);
/* Options of a command that takes only --json and --help: returns CLI_GO_ON to go
 * on, or the exit status to return. */
/* --json and --help only, any arguments left at optind for the caller;
 * CLI_GO_ON to go on, else the exit status. */
int cli_parse_json_opts(int argc, char **argv, const char *cmd, void (*usage)(FILE *f), bool *json);
int cli_parse_json_only(int argc, char **argv, const char *cmd, void (*usage)(FILE *f), bool *json);
/* True (and says so) when processes could not be read and the caller lacks
 * CAP_SYS_PTRACE: the listing may then miss CUDA processes, so exit 2. */
bool cli_blind(const cs_ptable *t);
/* Whether this process may trace every process (cs_sandbox_may_trace_all):
 * then more privilege would not make an unreadable process readable. */
bool cli_may_trace_all(void);
/* The exit status for a failure before anything changed (2), and for a
 * transaction's result (0, 1 or 3): the one place that decides them. */
int cli_exit_for(const cs_error *e);
int cli_exit_txn(const cs_txn_result *r, int rc);
/* The exit status a --dry-run's plan says the real command would give: 0
 * when it would go through; 2 when it would be refused before anything
 * changes (another operation holds a process, host memory, CUDA IPC import,
 * restore's manifest or device map); 1 when the transaction would refuse it
 * (a stopped or frozen process) or roll it back (a process the driver
 * cannot restore, device references that --strict refuses). */
struct cs_plan;
int cli_exit_plan(const struct cs_plan *p);

int cmd_ps(int argc, char **argv);
int cmd_checkpoint(int argc, char **argv);
int cmd_restore(int argc, char **argv);
int cmd_lock(int argc, char **argv);
int cmd_unlock(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_history(int argc, char **argv);
int cmd_hook(int argc, char **argv);
int cmd_run(int argc, char **argv);
/* NVIDIA's cuda-checkpoint command line; argv[0] is the program name. */
int cmd_cuda_checkpoint(int argc, char **argv);

#endif
