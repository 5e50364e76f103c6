"""Shared pieces of the integration tests: a private device directory, the
fake CUDA application, and cudasnap runs against the driver test double.

Paths come from the environment (set by meson): CUDASNAP_BIN, FAKE_LIBCUDA,
FAKE_LIBCUDA_LEGACY, FAKE_LIBNVML, FAKE_APP.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

BIN = os.environ.get("CUDASNAP_BIN", "cudasnap")
LIBCUDA = os.environ.get("FAKE_LIBCUDA", "")
LIBCUDA_LEGACY = os.environ.get("FAKE_LIBCUDA_LEGACY", "")
LIBNVML = os.environ.get("FAKE_LIBNVML", "")
APP = os.environ.get("FAKE_APP", "")
GPU0 = "GPU-00000000-0000-4000-8000-000000000000"
GPU1 = "GPU-11111111-1111-4111-8111-111111111111"


class Result:
    def __init__(self, proc, wall):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr
        self.wall = wall
        try:
            self.obj = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
        except ValueError:
            self.obj = None

    def __repr__(self):
        return f"rc={self.rc}\nstdout={self.out[-3000:]}\nstderr={self.err[-3000:]}"


class Case(unittest.TestCase):
    """Each test gets its own device directory, state directory and processes."""

    gpus = GPU0

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cudasnap-it-")
        self.dev = os.path.join(self.tmp, "dev")
        self.ready = os.path.join(self.tmp, "ready")
        self.state = os.path.join(self.tmp, "state")
        # The node's book of GPU restores, one per test (the node's own is
        # /run/cudasnap-gpu-book, which the tests beside this one share).
        self.book = os.path.join(self.tmp, "gpu-book")
        self.faults = os.path.join(self.tmp, "faults")
        for d in (self.dev, self.ready):
            os.makedirs(d)
        # as the package's tmpfiles.d entry makes the node's
        os.mkdir(self.book)
        os.chmod(self.book, 0o1777)
        for name in ("nvidiactl", "nvidia0", "nvidia-uvm"):
            with open(os.path.join(self.dev, name), "w"):
                pass
        self.apps = []
        self.addCleanup(self.cleanup)
        self.env = dict(os.environ, CUDASNAP_DEV_DIR=self.dev, CUDASNAP_STATE_DIR=self.state,
                        CUDASNAP_GPU_BOOK=self.book, CUDASNAP_LIBCUDA=LIBCUDA, CUDASNAP_LIBNVML=LIBNVML, FAKECUDA_GPUS=self.gpus,
                        FAKECUDA_FAULTS=self.faults)

    def cleanup(self):
        for p in self.apps:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, *args, expect=1, env=None, wrap=()):
        """Starts the fake app (through the command wrap, which ends by
        exec'ing its arguments); returns the pids that reported ready, sorted."""
        before = set(os.listdir(self.ready))
        p = subprocess.Popen([*wrap, APP, "--ready-dir", self.ready, *args], env=dict(self.env, **(env or {})),
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.apps.append(p)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = [f for f in set(os.listdir(self.ready)) - before if f.endswith(".ready")]
            if len(now) >= expect:
                return sorted(int(f.split(".")[0]) for f in now)
            if p.poll() is not None:
                self.fail(f"fake app {args} exited: {p.stderr.read()}")
            time.sleep(0.02)
        self.fail(f"fake app {args} not ready")

    @property
    def cc_path(self):
        """cudasnap as cuda-checkpoint: callers run the binary by that name,
        and argv[0] picks the mode (a symlink in the test's directory)."""
        path = os.path.join(self.tmp, "cuda-checkpoint")
        if not os.path.lexists(path):
            os.symlink(os.path.abspath(BIN), path)
        return path

    def cc(self, *args, env=None, timeout=60):
        t0 = time.monotonic()
        p = subprocess.run([self.cc_path, *map(str, args)], capture_output=True, text=True,
                           env=dict(self.env, **(env or {})), timeout=timeout)
        return Result(p, time.monotonic() - t0)

    def role(self, pid):
        with open(os.path.join(self.ready, f"{pid}.ready")) as f:
            return dict(kv.split("=", 1) for kv in f.read().split())["role"]

    def cs(self, *args, env=None, timeout=60, wrap=()):
        """cudasnap with args, run through the command wrap (which ends by
        exec'ing its arguments), as start runs the fake app."""
        t0 = time.monotonic()
        p = subprocess.run([*wrap, BIN, *args], capture_output=True, text=True, env=dict(self.env, **(env or {})),
                           timeout=timeout)
        return Result(p, time.monotonic() - t0)

    def ps(self, env=None):
        r = self.cs("ps", "--json", env=env)
        self.assertEqual(r.rc, 0, r)
        return {p["pid"]: p for p in r.obj["processes"]}, r.obj

    def states(self, pids):
        got, _ = self.ps()
        return {pid: got[pid]["state"] if pid in got else None for pid in pids}

    def fault(self, *lines):
        with open(self.faults, "w") as f:
            f.write("".join(line + "\n" for line in lines))

    def verify_data(self, pids, timeout=10):
        for pid in pids:
            path = os.path.join(self.ready, f"{pid}.verify")
            if os.path.exists(path):
                os.unlink(path)
            os.kill(pid, signal.SIGUSR1)
        out, deadline = {}, time.monotonic() + timeout
        while len(out) < len(pids) and time.monotonic() < deadline:
            for pid in pids:
                path = os.path.join(self.ready, f"{pid}.verify")
                if pid not in out and os.path.exists(path):
                    with open(path) as f:
                        out[pid] = f.read().strip()
            time.sleep(0.02)
        return out

    def assertDataOk(self, pids):
        got = self.verify_data(pids)
        self.assertEqual(sorted(got), sorted(pids), f"no verify answer from some of {pids}: {got}")
        for pid, line in got.items():
            self.assertTrue(line.startswith("ok"), f"{pid}: {line}")

    def assertStates(self, pids, state):
        self.assertEqual(self.states(pids), {p: state for p in pids})

    def bookings(self):
        """The files of the test's book of GPU restores."""
        return sorted(os.listdir(self.book)) if os.path.isdir(self.book) else []

    def claim_records(self):
        """The claim records of the state directory, sorted."""
        claims = os.path.join(self.state, "claims")
        return sorted(f for f in os.listdir(claims) if not f.startswith(".")) if os.path.isdir(claims) else []


def path_trusted(path):
    """Whether only root and this user can change any directory of path: the
    settings file is refused below any other (/tmp, whoever can write it)."""
    parts = os.path.realpath(path).split("/")
    for i in range(1, len(parts) + 1):
        st = os.lstat("/".join(parts[:i]) or "/")
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            return False
    return True


def trusted_tmpdir(test, prefix):
    """A fresh directory (mode 0755) where a settings file is trusted, removed
    at the test's cleanup: below the build directory (meson's
    CS_TEST_TRUSTED_DIR) when its path is trusted, else below /var/lib (a
    checkout under /tmp); the test is skipped, saying why, when neither is."""
    for base in (os.environ.get("CS_TEST_TRUSTED_DIR", ""), "/var/lib"):
        if base and os.path.isdir(base) and os.access(base, os.W_OK) and path_trusted(base):
            d = tempfile.mkdtemp(prefix=prefix, dir=base)
            os.chmod(d, 0o755)
            test.addCleanup(shutil.rmtree, d, ignore_errors=True)
            return d
    test.skipTest("no directory whose every parent only root or this user can change (CS_TEST_TRUSTED_DIR, "
                  "/var/lib): a settings file would be refused")
