/* One line per operation of the plugin to syslog (ident "cudasnap",
 * LOG_DAEMON), which reaches the journal: containerd deletes CRIU's work
 * directory, dump.log with it, after a checkpoint that succeeded, and the
 * history of operations may be on a node the operator does not read.
 * syslog(3) starts no thread, and the socket it opens is closed again before
 * the hook returns (closelog). */
#include "journal.h"
#include "proc.h"
#include "json.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

/* One line for syslog: the header, then each process, " | " between them. */
void plugin_syslog(const cs_history *h)
{
	_cleanup_free_ char *line = cs_history_render(h);
	_cleanup_(json_object_putp) json_object *e = line ? cs_history_parse_line(line, strlen(line) - 1) : NULL;
	_cleanup_free_ char *text = e ? cs_history_describe(e) : NULL;
	if (!text)
		return;
	/* Lines become " | " parts; the header's own line ends the first. */
	char out[2048];
	size_t n = 0;
	for (const char *s = text; *s && n + 4 < sizeof(out); s++) {
		if (*s != '\n') {
			out[n++] = *s;
			continue;
		}
		if (!s[1])
			break;
		memcpy(out + n, " |", 2);
		n += 2;
		while (s[1] == ' ' && s[2] == ' ')
			s++;
	}
	out[n] = '\0';
	char clean[sizeof(out)]; /* a cut in the middle of a character is not UTF-8 */
	cs_sanitize(clean, sizeof(clean), out, n);
	bool failed = strcmp(h->outcome, "done") != 0;
	openlog("cudasnap", LOG_PID, LOG_DAEMON);
	syslog(failed ? LOG_ERR : LOG_INFO, "%s", clean);
	closelog(); /* no socket stays open in CRIU's process */
}
