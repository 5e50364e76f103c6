/* One line per operation of the plugin to syslog (ident "cudasnap",
 * LOG_DAEMON), which reaches the journal. */
#ifndef CS_CRIU_JOURNAL_H
#define CS_CRIU_JOURNAL_H

#include "history.h"

/* The operation's entry, as one line. */
void plugin_syslog(const cs_history *h);

#endif
