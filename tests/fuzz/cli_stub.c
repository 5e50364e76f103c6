/* The pieces of src/main.c that src/txncli.c calls, without output, so that
 * the option parser can be fuzzed on its own. */
#include "cli.h"

#include <stdarg.h>

const char *cs_prog = "cudasnap";
bool cli_timestamps;

void cli_msg(const char *fmt, ...)
{
	(void)fmt;
}

void cli_error(const cs_error *e)
{
	(void)e;
}

void cli_errorf(const char *hint, const char *fmt, ...)
{
	(void)hint;
	(void)fmt;
}

int cli_usage_error(const char *cmd)
{
	(void)cmd;
	return EXIT_USAGE;
}
