"""criu dump / criu restore of fake CUDA process trees through cudasnap_plugin.so,
with a real CRIU (4.1 or newer) and the driver test double.

Environment (set by meson, except the first):
  CUDASNAP_TEST_CRIU  the criu binary (else `criu` from $PATH); without a
                      CRIU >= 4.1 every test is skipped, saying why
  CUDASNAP_PLUGIN     the built cudasnap_plugin.so
  CUDASNAP_SANITIZE   meson's b_sanitize of the build
  CUDASNAP_BIN, FAKE_LIBCUDA, FAKE_LIBNVML, FAKE_APP: see harness.py

Runs as root under isolate.sh (private PID, net and mount namespaces). A
dump without --leave-running kills the tree and a restore needs the same
PIDs free again, so this process is a child subreaper that reaps every
killed process (a zombie keeps its PID: "Can't fork for N: File exists"),
and the restored trees (criu restore -d) become its children too.
"""
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import unittest

from harness import APP, Case

PLUGIN = os.environ.get("CUDASNAP_PLUGIN", "")
SANITIZE = os.environ.get("CUDASNAP_SANITIZE", "none")
PR_SET_CHILD_SUBREAPER = 36
RECORD = "cudasnap-plugin.json"


def find_criu():
    """(path, None) for a usable CRIU, or (None, why not)."""
    path = os.environ.get("CUDASNAP_TEST_CRIU") or shutil.which("criu")
    if not path:
        return None, "no CRIU found: set CUDASNAP_TEST_CRIU to a criu (>= 4.1) binary"
    if not os.access(path, os.X_OK):
        return None, f"CRIU {path} is not an executable file"
    try:
        p = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        return None, f"{path} --version: {e}"
    m = re.search(r"Version:\s*(\d+)\.(\d+)", p.stdout)
    if not m:
        return None, f"{path} --version printed no version: {(p.stdout + p.stderr).strip()[:200]!r}"
    version = (int(m.group(1)), int(m.group(2)))
    if version < (4, 1):
        return None, (f"{path} is CRIU {version[0]}.{version[1]}; these tests need 4.1 or newer "
                      "(older ones cannot dump on kernels >= 6.13: 'vdso: Unexpected rt vDSO area bounds')")
    return path, None


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


def loopback_up():
    """A new network namespace starts with 'lo' down, and CRIU's start-up
    checks (TCP repair) need it up."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, siocgifflags, struct.pack("16sH22x", b"lo", 0))
        flags = struct.unpack("16sH22x", ifr)[1]
        if not flags & iff_up:
            fcntl.ioctl(s, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


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


class Criu(Case):
    def setUp(self):
        why = why_skip()
        if why:
            self.skipTest(why)
        super().setUp()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            self.fail(f"PR_SET_CHILD_SUBREAPER: {os.strerror(ctypes.get_errno())}")
        loopback_up()
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

    def tree(self, *args, expect, stdin=subprocess.DEVNULL):
        """Starts the fake app in a session of its own, without a terminal or
        any other fd of this process; returns the pids that reported ready."""
        before = set(os.listdir(self.ready))
        with open(os.path.join(self.tmp, "app.err"), "ab") as err:
            p = subprocess.Popen([APP, "--ready-dir", self.ready, *args], env=self.env, start_new_session=True,
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

    def criu(self, *args, log):
        t0 = time.monotonic()
        p = subprocess.run([CRIU, *args, "-v4", "-o", log], capture_output=True, text=True, env=self.env,
                           timeout=120)
        wall = time.monotonic() - t0
        try:
            with open(os.path.join(self.images, log), errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            text = ""
        return Run(p, wall, text)

    def dump(self, *extra):
        return self.criu("dump", "-t", str(self.root), "-D", self.images, "-L", self.plugins, *extra, log="dump.log")

    def restore(self, plugins=None, log="restore.log"):
        return self.criu("restore", "-D", self.images, "-L", plugins or self.plugins, "-d", log=log)

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

    # the plugin alone: the whole tree out and back, data intact
    def test_dump_and_restore_a_tree(self):
        pids = self.tree("--spawn", "3", "--mem", "32", expect=4)
        self.assertEqual(len(pids), 4)
        r = self.assertDumped(pids)
        print(f"dump of 4 x 32 MiB: {r.wall:.2f} s", file=sys.stderr)
        self.assertTrue(any("checkpointed 4 processes" in line for line in r.cudasnap_lines()), r)
        with open(os.path.join(self.images, RECORD)) as f:
            rec = json.load(f)
        self.assertEqual(sorted(e["pid"] for e in rec["processes"]), pids)
        self.assertIn(b"cudasnap", self.inventory_plugins())
        r = self.restore()
        print(f"restore: {r.wall:.2f} s", file=sys.stderr)
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(any("restored 4 processes" in line for line in r.cudasnap_lines()), r)
        self.assertRunningAndOk(pids)
        # The dump's manifest described the processes it ended; none is left
        # to be taken for the restored ones.
        self.assertFalse(os.path.exists(os.path.join(self.state, "manifest.json")))

    # a tree without CUDA: the plugin stays out of the images
    def test_tree_without_cuda_needs_no_plugin(self):
        pids = self.tree("--no-init", expect=1)
        self.assertDumped(pids)
        self.assertFalse(os.path.exists(os.path.join(self.images, RECORD)))
        self.assertNotIn(b"cudasnap", self.inventory_plugins())
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.cudasnap_lines(), [], r)
        self.assertTrue(os.path.exists(f"/proc/{pids[0]}"))

    # the images require the plugin
    def test_restore_without_the_plugin_is_refused(self):
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        self.assertDumped(pids)
        r = self.restore(plugins=self.empty, log="restore-without.log")
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(any("Missing required plugin" in line and "cudasnap" in line
                            for line in r.log.splitlines()), r)
        self.assertGone(pids)
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(pids)

    # a driver error at each step of each process
    def fault_matrix(self, op, side):
        for which in (0, 1, 2):
            with self.subTest(op=op, which=which):
                pids = self.tree("--spawn", "2", "--mem", "2", expect=3)
                self.assertEqual(pids[0], self.root)
                victim = pids[which]
                if side == "dump":
                    self.fault(f"{victim} {op} error=999 1")
                    r = self.dump()
                    self.assertNotEqual(r.rc, 0, r)
                    self.assertIn(f"{op} of process {victim}", r.log, r)
                    self.assertIn("CUDA_ERROR_UNKNOWN", r.log, r)
                    os.unlink(self.faults)
                    self.assertRunningAndOk(pids)
                else:
                    self.assertDumped(pids)
                    self.fault(f"{victim} {op} error=999 1")
                    r = self.restore()
                    # CRIU ignores the result of RESUME_DEVICES_LATE: the
                    # tree runs, its GPU state stays checkpointed.
                    self.assertEqual(r.rc, 0, r)
                    os.unlink(self.faults)
                    self.assertStates(pids, "checkpointed")
                    for pid in pids:
                        self.assertTrue(any(f"process {pid} (" in line and "NOT restored" in line
                                            for line in r.cudasnap_lines()), f"{pid} not named: {r}")
                    self.assertIn("GPU restore FAILED", r.log, r)
                    if which == 1:
                        # what the log tells to run, one process at a time
                        advice = re.findall(r"run '(cudasnap restore [^']*)'", r.log)
                        self.assertEqual(len(advice), len(pids), r)
                        for line in advice:
                            c = self.cs(*line.split()[1:])
                            self.assertEqual(c.rc, 0, c)
                    else:
                        c = self.cs("restore")
                        self.assertEqual(c.rc, 0, c)
                    self.assertRunningAndOk(pids)
                self.doCleanups()
                self.setUp()

    def test_error_at_lock_fails_the_dump(self):
        self.fault_matrix("lock", "dump")

    def test_error_at_checkpoint_fails_the_dump(self):
        self.fault_matrix("checkpoint", "dump")

    def test_error_at_restore_leaves_the_tree_checkpointed(self):
        self.fault_matrix("restore", "restore")

    def test_error_at_unlock_leaves_the_tree_checkpointed(self):
        self.fault_matrix("unlock", "restore")

    # CRIU itself fails after the GPU checkpoint: the exit hook gives the
    # GPU state back before CRIU lets the tree go
    def test_criu_failure_after_the_checkpoint_gives_the_gpu_state_back(self):
        outside, inside = socket.socketpair()
        self.addCleanup(outside.close)
        with inside:
            # a unix socket connected outside the tree: CRIU refuses it
            # (without --ext-unix-sk) while it dumps the files
            pids = self.tree("--spawn", "2", "--mem", "8", expect=3, stdin=inside.fileno())
        r = self.dump()
        self.assertNotEqual(r.rc, 0, r)
        lines = r.cudasnap_lines()
        self.assertTrue(any("checkpointed 3 processes" in line for line in lines), r)
        self.assertTrue(any("3 processes back to running after the failed dump" in line for line in lines), r)
        self.assertRunningAndOk(pids)

    # --leave-running: the GPU state comes back at the end of the dump
    def test_leave_running(self):
        pids = self.tree("--spawn", "2", "--mem", "8", expect=3)
        r = self.dump("-R")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(any("3 processes back to running" in line for line in r.cudasnap_lines()), r)
        self.assertTrue(os.path.exists(os.path.join(self.images, RECORD)))
        self.assertRunningAndOk(pids)
        self.assertFalse(os.path.exists(os.path.join(self.state, "manifest.json")))

    # a child forked after CUDA init fails the dump at once, named
    def test_forked_device_holder_fails_at_once(self):
        pids = self.tree("--fork-after-init", "1", "--mem", "4", expect=2)
        holder = next(p for p in pids if self.role(p) == "forked")
        parent = self.root
        r = self.dump()
        print(f"dump refused in {r.wall:.2f} s", file=sys.stderr)
        self.assertNotEqual(r.rc, 0, r)
        self.assertLess(r.wall, 5, r)
        self.assertTrue(any(f"process {holder} " in line and "forked" in line for line in r.cudasnap_lines()), r)
        self.assertRunningAndOk([parent])
        self.assertTrue(os.path.exists(f"/proc/{holder}"))

    # the processes are checkpointed concurrently
    def test_checkpoints_run_concurrently(self):
        pids = self.tree("--spawn", "3", "--mem", "4", expect=4)
        self.fault("* checkpoint delay=1500")
        r = self.dump()
        print(f"dump of 4 processes with a 1.5 s checkpoint each: {r.wall:.2f} s", file=sys.stderr)
        self.assertEqual(r.rc, 0, r)
        self.assertLess(r.wall, 4.5, f"one after another would take > 6 s: {r}")
        self.assertGone(pids)

    # not beside CRIU's own CUDA plugin
    def test_refuses_criu_cuda_plugin_beside_it(self):
        if not CRIU_CUDA_PLUGIN:
            self.skipTest("CRIU's cuda_plugin.so is neither beside this criu (../plugins/) nor in /usr/lib/criu/")
        shutil.copy(CRIU_CUDA_PLUGIN, self.plugins)
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        r = self.dump()
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(any("CRIU's CUDA plugin" in line and "cuda_plugin.so" in line
                            for line in r.cudasnap_lines()), r)
        self.assertRunningAndOk(pids)


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    prog = unittest.main(verbosity=2, exit=False)
    res = prog.result
    if not res.wasSuccessful():
        sys.exit(1)
    # Nothing ran (no CRIU, a sanitized build): meson reports it as skipped.
    sys.exit(77 if res.testsRun and len(res.skipped) == res.testsRun else 0)
