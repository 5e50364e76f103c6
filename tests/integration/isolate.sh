#!/bin/sh
# Runs a test in a PID namespace of its own, as cudasnap runs in a container:
# it then sees only the processes the test started, not those of other tests.
# Falls back to the shared namespace where unshare is not allowed.
if unshare --pid --fork --mount-proc true 2>/dev/null; then
	exec unshare --pid --fork --mount-proc "$@"
fi
echo "isolate.sh: no PID namespace (not root?): running in the shared one" >&2
exec "$@"
