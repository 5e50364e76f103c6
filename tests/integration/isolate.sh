#!/bin/sh
# Runs a test in PID and network namespaces of its own, as cudasnap runs in a
# container: it then sees only the processes the test started. The network
# namespace matters too: the driver double names its sockets by pid, and two
# test runs at once would otherwise collide. Falls back to the shared
# namespaces where unshare is not allowed.
if unshare --pid --net --fork --mount-proc true 2>/dev/null; then
	exec unshare --pid --net --fork --mount-proc "$@"
fi
echo "isolate.sh: no private PID namespace (not root?): running in the shared one" >&2
exec "$@"
