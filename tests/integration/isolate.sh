#!/bin/sh
# Runs a test in PID and network namespaces of its own, as cudasnap runs in a
# container: it then sees only the processes the test started. The network
# namespace matters too: the driver double names its sockets by pid, and two
# test runs at once would otherwise collide. So does /dev/shm, where the
# double's CUDA IPC exporters create cuda.shm.<uid>.<pid>: a private tmpfs
# there (in the mount namespace that --mount-proc makes) keeps the same small
# pids of parallel tests apart. Falls back to the shared namespaces where
# unshare is not allowed.
if unshare --pid --net --fork --mount-proc true 2>/dev/null; then
	exec unshare --pid --net --fork --mount-proc sh -c '
		mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm ||
			echo "isolate.sh: /dev/shm stays shared" >&2
		exec "$@"' isolate.sh "$@"
fi
echo "isolate.sh: no private PID namespace (not root?): running in the shared one" >&2
exec "$@"
