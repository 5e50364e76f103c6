"""What the tests of criu dump / restore through cudasnap_plugin.so share
(test_criu.py, test_criu_refusals.py, test_inspect.py): a real CRIU (4.1 or newer), the driver
test double, and a test case that starts fake CUDA process trees and runs
criu on them.

Environment (set by meson, except the first):
  CUDASNAP_TEST_CRIU  the criu binary (else `criu` from $PATH); without a
                      CRIU >= 4.1 every test is skipped, saying why
  CUDASNAP_PLUGIN     the built cudasnap_plugin.so
  CUDASNAP_SANITIZE   meson's b_sanitize of the build
  CUDASNAP_BIN, FAKE_LIBCUDA, FAKE_LIBNVML, FAKE_APP: see harness.py

Runs as root under isolate.sh (private PID, net and mount namespaces). A
dump without --leave-running kills the tree and a restore needs the same
PIDs free again, so the test process is a child subreaper that reaps every
killed process (a zombie keeps its PID: "Can't fork for N: File exists"),
and the restored trees (criu restore -d) become its children too.
"""
import ctypes
import os
import signal
import subprocess
import sys
import time
import unittest

from containers import find_criu, loopback_up
from harness import APP, Case

PLUGIN = os.environ.get("CUDASNAP_PLUGIN", "")
SANITIZE = os.environ.get("CUDASNAP_SANITIZE", "none")
PR_SET_CHILD_SUBREAPER = 36
RECORD = "cudasnap-plugin.json"


CRIU, NO_CRIU = find_criu()
# CRIU's own CUDA plugin: beside a CRIU distribution (bin/criu, plugins/), or
# in CRIU's default plugin directory.
CRIU_CUDA_PLUGIN = next((p for p in ([os.path.join(os.path.dirname(os.path.dirname(CRIU)), "plugins", "cuda_plugin.so")]
                                     if CRIU else []) + ["/usr/lib/criu/cuda_plugin.so"]
                         if os.path.exists(p)), "")


def why_skip():
    if SANITIZE not in ("", "none"):
        # Preloading the runtime into criu does not help either: criu then
        # fails on its own (leaks at exit, a crash in its kernel probes).
        return (f"this build's plugin is sanitized (b_sanitize={SANITIZE}): an uninstrumented criu aborts when it "
                "loads it ('ASan runtime does not come first in initial library list'); the normal build runs "
                "these tests")
    if NO_CRIU:
        return NO_CRIU
    if os.geteuid() != 0:
        return "criu dump / restore need root"
    if not PLUGIN or not os.path.exists(PLUGIN):
        return "CUDASNAP_PLUGIN does not name the built cudasnap_plugin.so"
    return None


RUN_PRIVATE = []


def private_run():
    """CRIU caches what it learned of the kernel in /run/criu.kdat: a tmpfs
    over /run in this test's own mount namespace (isolate.sh made it) keeps
    that file, and anything else, off the machine's /run."""
    if RUN_PRIVATE:
        return
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "cudasnap-test-run", "/run"], check=True)
    RUN_PRIVATE.append(True)


class Run:
    def __init__(self, proc, wall, log):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.wall = wall
        self.log = log

    def cudasnap_lines(self):
        return [line for line in self.log.splitlines() if "cudasnap: " in line]

    def __repr__(self):
        errors = [line for line in self.log.splitlines() if "Error" in line or "cudasnap: " in line]
        return (f"rc={self.rc} wall={self.wall:.2f}s\nstdout={self.out[-2000:]}\nstderr={self.err[-2000:]}\n"
                "log (errors and cudasnap lines):\n" + "\n".join(errors[-60:]))


class CriuCase(Case):
    """A test of criu dump / restore with the plugin: the helpers, no test."""

    def setUp(self):
        why = why_skip()
        if why:
            self.skipTest(why)
        super().setUp()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            self.fail(f"PR_SET_CHILD_SUBREAPER: {os.strerror(ctypes.get_errno())}")
        loopback_up()
        private_run()
        self.plugins = os.path.join(self.tmp, "plugins")
        self.empty = os.path.join(self.tmp, "no-plugins")
        os.makedirs(self.plugins)
        os.makedirs(self.empty)
        os.symlink(PLUGIN, os.path.join(self.plugins, "cudasnap_plugin.so"))
        self.images = os.path.join(self.tmp, "images")
        os.makedirs(self.images)
        self.tree_pids = []
        self.root = None

    def cleanup(self):
        for pid in self.tree_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.reap(self.tree_pids)
        super().cleanup()

    @staticmethod
    def reap(pids=(), timeout=10):
        """Reaps every dead child (the tree's processes are reparented
        here); returns those of pids still there after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                pass
            left = [p for p in pids if os.path.exists(f"/proc/{p}")]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.02)

    def tree(self, *args, expect, stdin=subprocess.DEVNULL, env=None, wrap=()):
        """Starts the fake app in a session of its own, without a terminal or
        any other fd of this process (through the command wrap, which ends by
        exec'ing its arguments); returns the pids that reported ready."""
        before = set(os.listdir(self.ready))
        with open(os.path.join(self.tmp, "app.err"), "ab") as err:
            p = subprocess.Popen([*wrap, APP, "--ready-dir", self.ready, *args], env=dict(self.env, **(env or {})),
                                 start_new_session=True,
                                 stdin=stdin, stdout=subprocess.DEVNULL, stderr=err)
        self.apps.append(p)
        self.root = p.pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = [f for f in set(os.listdir(self.ready)) - before if f.endswith(".ready")]
            if len(now) >= expect:
                pids = sorted(int(f.split(".")[0]) for f in now)
                self.tree_pids += pids
                return pids
            if p.poll() is not None:
                self.fail(f"fake app {args} exited: {self.app_err()}")
            time.sleep(0.02)
        self.fail(f"fake app {args} not ready")

    def app_err(self):
        with open(os.path.join(self.tmp, "app.err"), errors="replace") as f:
            return f.read()[-2000:]

    def criu(self, *args, log, env=None):
        """env: variables to set over the test's, or to unset (None)."""
        env = {k: v for k, v in dict(self.env, **(env or {})).items() if v is not None}
        t0 = time.monotonic()
        p = subprocess.run([CRIU, *args, "-v4", "-o", log], capture_output=True, text=True, env=env, timeout=120)
        wall = time.monotonic() - t0
        try:
            with open(os.path.join(self.images, log), errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            text = ""
        return Run(p, wall, text)

    def dump(self, *extra, env=None):
        return self.criu("dump", "-t", str(self.root), "-D", self.images, "-L", self.plugins, *extra, log="dump.log",
                         env=env)

    def restore(self, plugins=None, log="restore.log", env=None):
        return self.criu("restore", "-D", self.images, "-L", plugins or self.plugins, "-d", log=log, env=env)

    def assertGone(self, pids):
        self.assertEqual(self.reap(pids), [], "processes still there after the dump")

    def assertDumped(self, pids):
        r = self.dump()
        self.assertEqual(r.rc, 0, r)
        self.assertGone(pids)
        return r

    def assertRunningAndOk(self, pids):
        self.assertStates(pids, "running")
        self.assertDataOk(pids)

    def inventory_plugins(self):
        with open(os.path.join(self.images, "inventory.img"), "rb") as f:
            return f.read()


def main():
    """unittest's main, with meson's exit status for a run that skipped
    every test (no CRIU, a sanitized build): 77."""
    assert APP, "FAKE_APP is not set"
    prog = unittest.main(verbosity=2, exit=False)
    res = prog.result
    if not res.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if res.testsRun and len(res.skipped) == res.testsRun else 0)
