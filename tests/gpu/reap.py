"""Runs a shell command as a child subreaper, then ends and reaps what it left.

A GPU machine whose PID 1 reaps no orphans keeps the zombies (and, for a
CUDA process, the GPU memory) of a killed tree: run each GPU script under
this, e.g.  python3 tests/gpu/reap.py 'tests/gpu/park.sh TOOLS OUT 4'
"""
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def children():
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def main():
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1)
    rc = subprocess.call(["bash", "-c", sys.argv[1]])
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in children():
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        time.sleep(1)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break
    return rc


if __name__ == "__main__":
    sys.exit(main())
