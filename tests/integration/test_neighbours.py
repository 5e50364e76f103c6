"""Safe beside monitors and other operations: NVML clients and cudasnap's
own processes are never taken by a default selection, a second operation on
a process another one holds fails at once and names the holder (across
state directories and mount namespaces, and from the cuda-checkpoint
drop-in), ps shows such processes busy without asking the driver, a holder
that was SIGKILLed leaves its processes named with their recovery until
they are recovered; absurd records and bad options change nothing."""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

from harness import APP, BIN, LIBCUDA, LIBNVML, Case
from memcg import initial_pidns
from test_hostile import sanitizer_preload

# An NVML client that initializes the library later: nvmlInit_v2 opens its
# device files and makes the driver know it. With argv[4] == "nvml" it maps
# NVML at once; with "libcuda" only libcuda at first, and NVML just before
# its nvmlInit_v2, as a program linked with both is seen while the loader
# maps them one after the other.
LATE_MONITOR = r"""
import ctypes, sys, time
libcuda = ctypes.CDLL(sys.argv[5]) if sys.argv[4] == "libcuda" else None
nvml = ctypes.CDLL(sys.argv[1]) if sys.argv[4] == "nvml" else None
open(sys.argv[3], "w").close()
time.sleep(float(sys.argv[2]))
nvml = nvml or ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0
time.sleep(600)
"""


# A process that takes an flock on a pidfd of argv[1], as any user may, and
# says so in argv[2]; with argv[3] == "fork" the lock is kept by a child and
# the locker exits, so that /proc/locks no longer names who holds it.
HOLD_PIDFD = r"""
import fcntl, os, sys, time
fd = os.pidfd_open(int(sys.argv[1]))
fcntl.flock(fd, fcntl.LOCK_EX)
if sys.argv[3] == "fork" and os.fork():
    os._exit(0)
open(sys.argv[2] + "." + str(os.getpid()), "w").close()
time.sleep(600)
"""
NOBODY = 65534
PIDFS_MAGIC = 0x50494446


def pidfs():
    """Whether pidfds live on pidfs (Linux 6.9+), where a flock on one is a
    lock on that process: the kernel's fstatfs type, as lib/record/claim.c checks."""
    try:
        fd = os.pidfd_open(os.getpid())
    except (AttributeError, OSError):
        return False
    try:
        buf = ctypes.create_string_buffer(512)
        ok = ctypes.CDLL(None, use_errno=True).fstatfs(fd, buf) == 0
        return ok and ctypes.c_long.from_buffer(buf).value == PIDFS_MAGIC
    finally:
        os.close(fd)


class Held:
    """A cudasnap command running in the background, its stderr collected."""

    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.out = ""

    def _read(self):
        for line in self.p.stderr:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    def wait_for(self, text, count=1, timeout=20):
        """Until count lines contain text; False when the command ended first."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while sum(text in l for l in self.lines) < count:
                if self.p.poll() is not None or time.monotonic() > deadline:
                    return False
                self.cond.wait(0.05)
        return True

    def finish(self, timeout=60):
        if not self.p.stdout.closed:
            self.out = self.p.stdout.read()
            self.p.stdout.close()
        self.p.wait(timeout)
        self.reader.join(timeout)
        self.p.stderr.close()
        return self.p.returncode

    @property
    def err(self):
        return "".join(self.lines)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.finish()


class Neighbours(Case):
    def held(self, *args, argv0=BIN):
        h = Held([argv0, *map(str, args)], self.env)
        self.addCleanup(h.kill)
        return h

    def background(self, script, *args):
        """A shell loop beside the test, in a process group of its own. A
        sanitizer-built app that exits checks nothing first (as in
        test_hostile.py): with LeakSanitizer it would answer the driver for
        a while as it exits."""
        env = dict(self.env, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1")
        p = subprocess.Popen(["sh", "-c", script, *args], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.apps.append(p)
        return p

    def settle(self, pids, state, timeout=15):
        """Waits until the double has finished what a killed caller asked."""
        deadline = time.monotonic() + timeout
        while self.states(pids) != {p: state for p in pids} and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertStates(pids, state)


class Monitors(Neighbours):
    def test_nvml_clients_beside_ten_rounds(self):
        """Issue 20: monitors that come and go, and cudasnap doctor and ps
        runs, beside whole-namespace checkpoints and restores."""
        work = self.start("--spawn", "2", "--mem", "2", expect=3)
        monitor, = self.start("--nvml-only")
        churn = os.path.join(self.tmp, "churn")
        os.mkdir(churn)
        for _ in range(3):
            self.background('while :; do timeout -s TERM 0.15 "$0" --nvml-only --ready-dir "$1"; done', APP, churn)
        self.background('while :; do "$0" doctor >/dev/null 2>&1; "$0" ps >/dev/null 2>&1; done', BIN)
        time.sleep(0.3)
        for round_ in range(10):
            for cmd, state in (("checkpoint", "checkpointed"), ("restore", "running")):
                r = self.cs(cmd, "--json")
                self.assertEqual(r.rc, 0, f"round {round_}: {r}")
                procs = {p["pid"]: p for p in r.obj["processes"]}
                self.assertEqual({p: procs[p]["final_state"] for p in work}, {p: state for p in work}, r)
                # Restore takes monitors it finds checkpointed, and keeps one
                # whose state it could not learn (an exiting one): that one is
                # left out untouched once it is gone. Checkpoint takes none.
                others = [p for p in procs.values() if p["pid"] not in work]
                if cmd == "checkpoint":
                    self.assertEqual(others, [], f"round {round_}: {r}")
                for p in others:
                    self.assertEqual((p["vanished"], p["seconds"], p["initial_state"]), (True, {}, None), r)
                self.assertEqual(r.obj["lost"], 0, r)
                self.assertStates(work, state)
                self.assertStates([monitor], "running")
        self.assertGreater(len(os.listdir(churn)), 10, "the monitor loop did not run")
        self.assertDataOk(work)

    def test_monitor_that_starts_during_the_selection(self):
        """A monitor that /proc shows before its nvmlInit (no device file
        yet, NVML mapped or only libcuda) and that the driver knows by the
        time it is asked is still told apart: its device files and mappings
        are read again after the driver's answer. The question about the
        workload's restore thread is made to take 1.5 s, so that the monitor
        starts in between."""
        for first in ("nvml", "libcuda"):
            with self.subTest(first=first):
                self.late_monitor(first)
                self.doCleanups()
                self.setUp()

    def late_monitor(self, first):
        work, = self.start("--mem", "1")
        mapped = os.path.join(self.tmp, "mapped")
        env = dict(self.env, **sanitizer_preload(LIBNVML))
        p = subprocess.Popen([sys.executable, "-c", LATE_MONITOR, LIBNVML, "0.5", mapped, first, LIBCUDA],
                             env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.apps.append(p)
        deadline = time.monotonic() + 20
        while not os.path.exists(mapped):
            self.assertIsNone(p.poll(), p.stderr.read() if p.poll() is not None else "")
            self.assertLess(time.monotonic(), deadline, "the monitor did not start")
            time.sleep(0.01)
        self.fault(f"{work} get_restore_tid delay=1500")
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual([x["pid"] for x in r.obj["processes"]], [work], r)
        os.unlink(self.faults)
        got = self.ps()[0]
        self.assertEqual((got[p.pid]["state"], got[p.pid]["nvml_only"]), ("running", True), got.get(p.pid))
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertDataOk([work])

    def test_monitor_only_when_named(self):
        work, = self.start("--mem", "1")
        monitor, = self.start("--nvml-only")
        for cmd, back in (("checkpoint", "restore"), ("lock", "unlock")):
            with self.subTest(cmd=cmd):
                r = self.cs(cmd, "--json")
                self.assertEqual((r.rc, [p["pid"] for p in r.obj["processes"]]), (0, [work]), r)
                self.assertEqual(self.cs(back).rc, 0)
                r = self.cs(cmd, "--pid", str(monitor), "--json")
                self.assertEqual((r.rc, [p["pid"] for p in r.obj["processes"]]), (0, [monitor]), r)
                # A plain restore or unlock brings back a monitor it finds so.
                r = self.cs(back, "--json")
                self.assertEqual((r.rc, [p["pid"] for p in r.obj["processes"]]), (0, [monitor]), r)
                self.assertStates([work, monitor], "running")

    def test_cudasnap_named_by_pid_is_refused(self):
        a, = self.start("--mem", "1")
        self.fault(f"{a} checkpoint delay=3000")
        first = self.held("checkpoint", "--pid", a)
        self.assertTrue(first.wait_for("lock: ok"), first.err)
        r = self.cs("checkpoint", "--pid", str(first.p.pid))
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"--pid {first.p.pid} is cudasnap itself, not a workload", r.err)
        self.assertEqual(first.finish(), 0, first.err)
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertStates([a], "running")


class Claims(Neighbours):
    def hold_all(self, pids, op="checkpoint", ms=3000):
        """A checkpoint of pids whose every driver call of op takes ms, once
        it is in them."""
        self.fault(*(f"{p} {op} delay={ms}" for p in pids))
        first = self.held("checkpoint", *(f"--pid={p}" for p in pids))
        if op != "lock":
            self.assertTrue(first.wait_for("lock: ok", len(pids)), first.err)
        self.assertTrue(self.claimed(pids), first.err)
        return first

    def claimed(self, pids, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.claim_records()) >= len(pids):
                return True
            time.sleep(0.02)
        return False

    def test_second_operation_refused_at_once_naming_the_first(self):
        pids = [self.start("--mem", "1")[0] for _ in range(3)]
        first = self.hold_all(pids, ms=5000)
        for args in (("checkpoint", "--pid", pids[1]), ("checkpoint",), ("restore", "--pid", pids[2]), ("lock",),
                     ("unlock", "--pid", pids[0]), ("hook",)):
            with self.subTest(args=args):
                r = self.cs(*map(str, args), env={"GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE": "save"})
                self.assertEqual(r.rc, 2, r)
                self.assertRegex(r.err, f"another cudasnap is running on process ({'|'.join(map(str, pids))}) "
                                 f"\\(fakecuda-app\\): pid {first.p.pid}, 'cudasnap checkpoint [^']*'")
                self.assertLess(r.wall, 1.0, r)
        r = self.cc("--toggle", "--pid", pids[1])
        self.assertEqual((r.rc, r.out), (1, ""), r)
        self.assertTrue(r.err.splitlines()[0].startswith(
            f'Error toggling CUDA in process ID {pids[1]}: "another cudasnap is running on process {pids[1]} '
            f'(fakecuda-app): pid {first.p.pid}, '), r)
        self.assertLess(r.wall, 1.0, r)
        self.assertEqual(first.finish(), 0, first.err)
        self.assertStates(pids, "checkpointed")
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertEqual(self.claim_records(), [])
        self.assertDataOk(pids)

    def test_second_cudasnap_with_its_own_run_is_refused(self):
        """A container's cudasnap: its own mount namespace and tmpfs /run, so
        its default state directory is not the first one's. The pidfd's
        lock still keeps it off."""
        if not shutil.which("unshare"):
            self.skipTest("needs unshare")
        pids = [self.start("--mem", "1")[0] for _ in range(2)]
        first = self.hold_all(pids)
        env = {k: v for k, v in self.env.items() if k != "CUDASNAP_STATE_DIR"}
        t0 = time.monotonic()
        p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            'mount -t tmpfs tmpfs /run && exec "$@"', "sh", BIN, "checkpoint", "--pid", str(pids[0])],
                           env=env, capture_output=True, text=True, timeout=60)
        wall = time.monotonic() - t0
        if "mount" in p.stderr and p.returncode != 2:
            self.skipTest(f"cannot mount a tmpfs on /run here: {p.stderr}")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(f"another cudasnap is running on process {pids[0]} (fakecuda-app): pid {first.p.pid}, ",
                      p.stderr)
        self.assertLess(wall, 1.0)
        self.assertEqual(first.finish(), 0, first.err)
        self.assertStates(pids, "checkpointed")
        self.assertEqual(self.cs("restore").rc, 0)

    def test_ps_shows_busy_at_once(self):
        pids = [self.start("--mem", "1")[0] for _ in range(2)]
        first = self.hold_all(pids)
        r = self.cs("ps", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertLess(r.wall, 1.0, r)
        procs = {p["pid"]: p for p in r.obj["processes"]}
        for pid in pids:
            self.assertRegex(procs[pid]["busy"] or "", f"^pid {first.p.pid}, 'cudasnap checkpoint [^']*'$", r)
        r = self.cs("ps")
        self.assertLess(r.wall, 1.0, r)
        for pid in pids:
            row, = [l for l in r.out.splitlines() if l.split()[:1] == [str(pid)]]
            self.assertEqual(row.split()[4], "busy", row)
            self.assertIn(f"busy: {pid} (fakecuda-app) is held by another operation (pid {first.p.pid}, ", r.out)
        # A plan says that the real command would be refused at once (2).
        r = self.cs("checkpoint", "--dry-run", "--json", "--pid", str(pids[0]))
        self.assertEqual((r.rc, r.obj["exit_status"], r.obj["real_exit_status"]), (1, 1, 2), r)
        self.assertEqual([x["code"] for x in r.obj["processes"][0]["reasons"]], ["busy"], r)
        self.assertEqual(first.finish(), 0, first.err)
        self.assertEqual(self.cs("restore").rc, 0)

    def test_drop_in_beside_a_strict_checkpoint(self):
        pids = [self.start("--mem", "1")[0] for _ in range(3)]
        # The checkpoint first: the drop-in is refused, in NVIDIA's words.
        self.fault("* checkpoint delay=1500")
        first = self.held("checkpoint", "--strict", "--json")
        self.assertTrue(first.wait_for("lock: ok", 3), first.err)
        r = self.cc("--toggle", "--pid", pids[0])
        self.assertEqual((r.rc, r.out), (1, ""), r)
        self.assertTrue(r.err.splitlines()[0].startswith(f'Error toggling CUDA in process ID {pids[0]}: '
                                                         f'"another cudasnap is running on process {pids[0]} '), r)
        self.assertEqual(first.finish(), 0, first.err)
        self.assertNotIn("left behind", first.err)
        self.assertNotIn("was left", first.err)
        self.assertStates(pids, "checkpointed")
        self.assertEqual(self.cs("restore").rc, 0)
        # The drop-in first: the checkpoint is refused, and names nothing left behind.
        self.fault(f"{pids[0]} lock delay=1500")
        toggle = self.held("--toggle", "--pid", pids[0], argv0=self.cc_path)
        self.assertTrue(self.claimed([pids[0]]))
        r = self.cs("checkpoint", "--strict")
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"another cudasnap is running on process {pids[0]} (fakecuda-app): pid {toggle.p.pid}, ", r.err)
        self.assertNotIn("left behind", r.err)
        self.assertNotIn("was left", r.err)
        self.assertEqual(toggle.finish(), 0, toggle.err)
        self.assertStates(pids[:1], "checkpointed")
        self.assertStates(pids[1:], "running")
        # Both at once, many times: whoever wins, nothing is named left behind.
        os.unlink(self.faults)
        self.assertEqual(self.cc("--toggle", "--pid", pids[0]).rc, 0)
        for i in range(10):
            strict = self.held("checkpoint", "--strict")
            r = self.cc("--toggle", "--pid", pids[i % 3])
            rc = strict.finish()
            self.assertIn(rc, (0, 2), strict.err)
            self.assertNotIn("left behind", strict.err)
            self.assertNotIn("was left", strict.err)
            self.assertIn(r.rc, (0, 1), r)
            if r.rc:
                self.assertTrue(r.err.startswith(f"Error toggling CUDA in process ID {pids[i % 3]}: \""), r)
            ps = self.cs("ps", "--json")
            self.assertEqual(ps.obj["left_behind"], [], ps)
            self.assertEqual(self.cs("restore").rc, 0)
            self.assertStates(pids, "running")
        self.assertDataOk(pids)

    def test_killed_holder_is_named_until_recovered(self):
        for op, state, recover in (("checkpoint", "checkpointed", "restore"), ("lock", "locked", "unlock")):
            with self.subTest(op=op):
                pids = [self.start("--mem", "1")[0] for _ in range(2)]
                other, = self.start("--mem", "1")
                # Killed inside the driver's calls: the checkpoints begin once
                # the locks are reported, the locks soon after the claims.
                first = self.hold_all(pids, op=op, ms=3000)
                time.sleep(0.3 if op == "checkpoint" else 1.0)
                first.p.send_signal(signal.SIGKILL)
                first.finish()
                os.unlink(self.faults)
                self.settle(pids, state)
                r = self.cs("ps", "--json")
                self.assertEqual(sorted((b["pid"], b["recovery"]) for b in r.obj["left_behind"]),
                                 [(p, f"cudasnap {recover} --pid {p}") for p in pids], r)
                for b in r.obj["left_behind"]:
                    self.assertEqual(b["holder"], f"pid {first.p.pid}, 'checkpoint'")
                r = self.cs("ps")
                for pid in pids:
                    self.assertIn(f"LEFT BEHIND: {pid} (fakecuda-app) is {state}: pid {first.p.pid}, 'checkpoint' "
                                  f"ended in the middle of an operation on it; recover with "
                                  f"'cudasnap {recover} --pid {pid}'", r.out)
                # Another command, on another process, names them (it does not
                # ask the driver about them) and keeps them named.
                r = self.cs("lock", "--pid", str(other))
                self.assertEqual(r.rc, 0, r)
                for pid in pids:
                    self.assertIn(f"warning: process {pid} (fakecuda-app) was left in an unknown state by pid "
                                  f"{first.p.pid}, 'checkpoint', which ended in the middle of an operation; "
                                  "'cudasnap ps' shows its state", r.err)
                self.assertEqual(self.cs("unlock", "--pid", str(other)).rc, 0)
                self.assertEqual(len(self.cs("ps", "--json").obj["left_behind"]), 2)
                # The command that recovers them names them with what it found.
                r = self.cs(recover)
                self.assertEqual(r.rc, 0, r)
                for pid in pids:
                    self.assertIn(f"warning: process {pid} (fakecuda-app) was left {state} by pid {first.p.pid}, "
                                  f"'checkpoint', which ended in the middle of an operation; this {recover} "
                                  "acts on it", r.err)
                self.assertStates(pids + [other], "running")
                self.assertDataOk(pids + [other])
                self.assertEqual(self.claim_records(), [])
                self.assertEqual(self.cs("ps", "--json").obj["left_behind"], [])
                self.doCleanups()
                self.setUp()


class PidfdLocks(Neighbours):
    """Anyone may pidfd_open a process and flock it: only a privileged
    holder (root, CAP_SYS_PTRACE in this user namespace, the process's
    owner) keeps a claim off the process; an unprivileged one is named in a
    warning and the command goes on."""

    def setUp(self):
        super().setUp()
        if not pidfs():
            self.skipTest("pidfds are not on pidfs here (Linux < 6.9): a flock on a pidfd is no claim")
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv")
        # python3 as the system has it: pyenv's lives below /root, which nobody may not enter.
        self.python = "/usr/bin/python3"
        if not os.access(self.python, os.X_OK):
            self.skipTest("needs /usr/bin/python3")
        os.chmod(self.tmp, 0o755)
        self.holders = os.path.join(self.tmp, "holders")
        os.mkdir(self.holders)
        os.chmod(self.holders, 0o777)

    def hold(self, pid, wrap=(), fork=False):
        """A holder of a lock on a pidfd of pid, run through wrap; its pid."""
        log = os.path.join(self.tmp, "holder.err")
        with open(log, "w") as err:
            p = subprocess.Popen([*wrap, self.python, "-c", HOLD_PIDFD, str(pid),
                                  os.path.join(self.holders, "held"), "fork" if fork else "-"],
                                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=err)
        self.apps.append(p)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            held = [f for f in os.listdir(self.holders) if f.startswith("held.")]
            if held:
                os.unlink(os.path.join(self.holders, held[0]))
                return int(held[0].split(".")[1])
            if p.poll() is not None and not fork:
                with open(log) as f:
                    self.skipTest(f"the holder {wrap} could not start: {f.read()}")
            time.sleep(0.02)
        self.fail("the holder did not take its lock")

    @staticmethod
    def nobody(*caps):
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                *(["--inh-caps=+" + ",+".join(caps), "--ambient-caps=+" + ",+".join(caps)] if caps else
                  ["--inh-caps=-all"])]

    def warned(self, r, pid, holder):
        self.assertRegex(r.err, f"warning: process {pid} \\(fakecuda-app\\) is locked through a pidfd by pid "
                         f"{holder}, 'python3 -c [^']*' \\(uid {NOBODY}\\), which is not privileged .* and so is "
                         "not another cudasnap: that lock is ignored")

    def test_unprivileged_holder_is_named_and_ignored(self):
        for fork in (False, True):
            with self.subTest(fork=fork):
                pid, = self.start("--mem", "1")
                holder = self.hold(pid, self.nobody(), fork=fork)
                got = self.ps()[0]
                self.assertEqual((got[pid]["state"], got[pid]["busy"]), ("running", None), got[pid])
                r = self.cs("checkpoint", "--dry-run", "--pid", str(pid), "--json")
                self.assertEqual((r.rc, r.obj["go"]), (0, True), r)
                r = self.cs("checkpoint", "--pid", str(pid))
                self.assertEqual(r.rc, 0, r)
                self.warned(r, pid, holder)
                self.assertStates([pid], "checkpointed")
                r = self.cs("restore", "--pid", str(pid))
                self.assertEqual(r.rc, 0, r)
                self.warned(r, pid, holder)
                self.assertStates([pid], "running")
                # The drop-in too, there and back.
                for _ in range(2):
                    r = self.cc("--toggle", "--pid", pid)
                    self.assertEqual((r.rc, r.out), (0, ""), r)
                    self.assertIn(f"cuda-checkpoint: warning: process {pid} (fakecuda-app) is locked through a "
                                  f"pidfd by pid {holder}, ", r.err)
                self.assertDataOk([pid])
                self.assertEqual(self.claim_records(), [])
                self.doCleanups()
                self.setUp()

    def test_root_of_another_user_namespace_is_not_privileged(self):
        pid, = self.start("--mem", "1")
        holder = self.hold(pid, [*self.nobody(), "unshare", "--user", "--map-root-user"])
        with open(f"/proc/{holder}/status") as f:
            self.assertIn("\nUid:\t65534\t65534", f.read())
        r = self.cs("checkpoint", "--pid", str(pid))
        self.assertEqual(r.rc, 0, r)
        self.warned(r, pid, holder)
        self.assertEqual(self.cs("restore", "--pid", str(pid)).rc, 0)
        self.assertDataOk([pid])

    def test_privileged_holder_still_blocks(self):
        for who, wrap in (("root", ()), ("CAP_SYS_PTRACE", self.nobody("sys_ptrace")), ("owner", self.nobody())):
            with self.subTest(who=who):
                if who == "owner":  # a process of nobody's, which nobody holds
                    os.chmod(self.ready, 0o777)
                    for name in os.listdir(self.dev):
                        os.chmod(os.path.join(self.dev, name), 0o666)
                    pid, = self.start("--mem", "1", wrap=self.nobody())
                else:
                    pid, = self.start("--mem", "1")
                holder = self.hold(pid, wrap)
                for args in (("checkpoint", "--pid", str(pid)), ("restore", "--pid", str(pid))):
                    r = self.cs(*args)
                    self.assertEqual(r.rc, 2, r)
                    self.assertIn(f"another cudasnap is running on process {pid} (fakecuda-app): pid {holder}, "
                                  "'python3 -c ", r.err)
                    self.assertNotIn("is not privileged", r.err)
                got = self.ps()[0]
                self.assertRegex(got[pid]["busy"] or "", f"^pid {holder}, 'python3 -c ", got[pid])
                self.doCleanups()
                self.setUp()


class Limits(Neighbours):
    def test_huge_bytes_in_the_manifest(self):
        """A size no process can have counts as unknown, and the largest one
        it can have still gives a deadline a clock can hold: either way the
        restore's deadline does not run out at once, and a slow call is
        waited for."""
        for big in (9000000000000000000, 10 ** 15, 1e15, (16 << 40) + 1, 16 << 40):
            with self.subTest(bytes=big):
                pids = [self.start("--mem", "1")[0] for _ in range(2)]
                self.assertEqual(self.cs("checkpoint").rc, 0)
                man = os.path.join(self.state, "manifest.json")
                with open(man) as f:
                    m = json.load(f)
                for e in m["processes"]:
                    e["bytes"] = big
                with open(man, "w") as f:
                    json.dump(m, f)
                self.fault("* restore delay=1500")
                # No GPU holds the largest size: told to restore anyway.
                r = self.cs("restore", "--json", *(["--ignore-gpu-memory"] if big == 16 << 40 else []))
                self.assertEqual(r.rc, 0, r)
                self.assertGreaterEqual(r.wall, 1.5, r)
                self.assertStates(pids, "running")
                self.assertDataOk(pids)
                self.doCleanups()
                self.setUp()

    def test_step_timeout_bounds_a_restore_whatever_the_record(self):
        pid, = self.start("--mem", "1")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        with open(man) as f:
            m = json.load(f)
        m["processes"][0]["bytes"] = 9000000000000000000
        with open(man, "w") as f:
            json.dump(m, f)
        self.fault("* restore delay=4000 1")
        r = self.cs("restore", "--step-timeout", "1", "--json")
        self.assertLess(r.wall, 3.5, r)
        self.assertEqual(r.rc, 3, r)
        self.assertIn(f"cudasnap restore --pid {pid}", r.obj["processes"][0]["recovery"], r)
        self.assertIn("Raise --step-timeout", r.err)
        # The call goes on in the process: once it is done, the process is
        # locked, and an unlock resumes it.
        self.settle([pid], "locked")
        self.assertEqual(self.cs("unlock").rc, 0)
        self.assertDataOk([pid])

    def test_all_is_what_no_selection_means_here(self):
        """Outside the initial PID namespace --all means what no selection
        means, for every mutating command (a script's checkpoint --all then
        restore --all brings everything back); each takes --dry-run; --all
        goes with no other selection."""
        if initial_pidns():
            self.skipTest("acts on every CUDA process of its PID namespace: run it through isolate.sh")
        pids = [self.start("--mem", "1")[0] for _ in range(2)]
        monitor, = self.start("--nvml-only")
        for cmd, back, state in (("checkpoint", "restore", "checkpointed"), ("lock", "unlock", "locked")):
            with self.subTest(cmd=cmd):
                r = self.cs(cmd, "--all", "--dry-run", "--json")
                self.assertEqual((r.rc, r.obj["real_exit_status"]), (0, 0), r)
                self.assertStates(pids, "running")
                r = self.cs(cmd, "--all", "--json")
                self.assertEqual((r.rc, sorted(p["pid"] for p in r.obj["processes"])), (0, pids), r)
                self.assertStates(pids, state)
                self.assertStates([monitor], "running")
                r = self.cs(back, "--all", "--dry-run", "--json")
                self.assertEqual((r.rc, r.obj["real_exit_status"]), (0, 0), r)
                self.assertStates(pids, state)
                self.assertEqual(self.cs(back, "--all").rc, 0)
                self.assertStates(pids, "running")
        r = self.cs("checkpoint", "--all", "--dry-run", "--json")
        self.assertEqual((r.rc, sorted(p["pid"] for p in r.obj["processes"] if p["verdict"] == "ok")), (0, pids), r)
        for args in (("checkpoint", "--all", "--pid", str(pids[0])), ("lock", "--tree", str(pids[0]), "--all"),
                     ("checkpoint", "--all", "--cgroup", "/"), ("restore", "--all", "--pid", str(pids[0])),
                     ("unlock", "--all", "--tree", str(pids[0]))):
            with self.subTest(args=args):
                r = self.cs(*args)
                self.assertEqual(r.rc, 2, r)
                self.assertIn("--help", r.err)
        self.assertStates(pids + [monitor], "running")
        self.assertDataOk(pids)

    def test_bad_cgroup_and_device_map_are_usage_errors(self):
        pid, = self.start("--mem", "1")
        cases = [
            (("checkpoint", "--cgroup", "/cudasnap-no-such-cgroup"), "no such cgroup"),
            (("checkpoint", "--cgroup", "/sys/fs/cgroup/../../etc"), "'..' is not allowed"),
            (("lock", "--cgroup", "relative/path"), "not an absolute cgroup path"),
            (("restore", "--cgroup", "/cudasnap-no-such-cgroup"), "no such cgroup"),
            (("restore", "--cgroup", "/a/.."), "'..' is not allowed"),
            (("restore", "--device-map", "GPU-123"), "--device-map"),
            (("restore", "--device-map", "0=1=2"), "--device-map"),
            (("restore", "--device-map", "0=1,0=1"), "--device-map"),
        ]
        for args, needle in cases:
            with self.subTest(args=args):
                for extra in ((), ("--dry-run",), ("--json",)):
                    r = self.cs(*args, *extra)
                    self.assertEqual(r.rc, 2, r)
                    self.assertIn(needle, r.err)
                    self.assertNotIn("nothing to", r.err)
                    self.assertFalse(os.path.exists(self.state), f"{args}: the state directory was created")
        self.assertStates([pid], "running")
        # Also where there is something to restore: nothing is done.
        self.assertEqual(self.cs("checkpoint").rc, 0)
        for args, _ in cases[3:]:
            r = self.cs(*args)
            self.assertEqual(r.rc, 2, r)
            self.assertStates([pid], "checkpointed")
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertDataOk([pid])


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
