/* Discovery in two steps, for callers that must do something between
 * reading /proc and asking the driver (a session claims its candidates
 * first: a question about a process another operation holds would wait
 * behind that operation's calls). cs_discover is both at once. */
#ifndef CS_DISCOVER_H
#define CS_DISCOVER_H

#include "cudasnap.h"

/* Scans the PID namespace from /proc alone: every GPU-related process,
 * classified without the driver (device-holder, unknown). */
int cs_scan(const cs_scan_opts *opts, cs_ptable *out, cs_error *err);
/* Asks the driver about the processes of t that opts lets it ask (all when
 * opts is NULL or names none), skipping busy ones when opts->skip_busy, and
 * drops those it finds unrelated to the GPU (unless opts->keep_all). */
void cs_classify(cs_ptable *t, cs_driver *d, const cs_scan_opts *opts);

#endif
