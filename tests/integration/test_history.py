"""The history of operations: every checkpoint, restore, lock and unlock that
changed a process or refused to, whoever ran it (the command line, the gVisor
hook, the cuda-checkpoint drop-in; the CRIU plugin's are in
test_history_criu.py), as one JSON line in <state dir>/history.jsonl, read by
`cudasnap history` and named by `cudasnap doctor`. And how the file is kept:
written whole by concurrent writers, rotated at its bound, read bounded, a
corrupt line skipped and counted, an operation never failed by a history that
cannot be written.

Runs in a PID namespace of its own (tests/integration/isolate.sh), as the
other transaction tests do."""
import datetime
import fcntl
import json
import os
import re
import signal
import stat
import subprocess
import time
import unittest

from harness import APP, GPU0, Case
import memcg
from memcg import initial_pidns

MIB = 1 << 20
ROTATE = 1 << 20
READ_MAX = ROTATE + (256 << 10)
MODE = "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"


def parse_time(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class HistoryCase(Case):
    def setUp(self):
        super().setUp()
        if initial_pidns():
            self.skipTest("acts on every CUDA process of its PID namespace: run it through isolate.sh")

    @property
    def file(self):
        return os.path.join(self.state, "history.jsonl")

    @property
    def old_file(self):
        return os.path.join(self.state, "history.1.jsonl")

    def history(self, *args, env=None):
        """`cudasnap history --json` (every entry unless args say otherwise): the list."""
        r = self.cs("history", "--json", *(args or ("-n", "1000000")), env=env)
        self.assertEqual(r.rc, 0, r)
        return json.loads(r.out)

    def last(self):
        h = self.history("-n", "1")
        self.assertEqual(len(h), 1, h)
        return h[0]

    def raw_lines(self):
        lines = []
        for path in (self.old_file, self.file):
            if os.path.exists(path):
                with open(path, "rb") as f:
                    lines += f.read().decode().splitlines()
        return lines

    def procs(self, entry):
        return {p["pid"]: p for p in entry["processes"]}

    def make_state(self):
        os.makedirs(self.state, mode=0o700, exist_ok=True)
        os.chmod(self.state, 0o700)

    def sample_line(self, t=None, outcome="done", op="checkpoint", proc=None, pid=42, start=None, caller=7,
                    note=None):
        """One entry as cudasnap writes it (for files the test fills)."""
        e = {"v": 1, "time": iso(t if t is not None else time.time()), "seconds": 0.25, "front": "cli", "op": op,
             "outcome": outcome, "exit_status": 0 if outcome == "done" else 1, "bytes": 4096,
             "caller": {"pid": caller, "cmdline": "cudasnap checkpoint", "parent_pid": 1, "parent_cmdline": "sh"},
             "note": note, "error": None if outcome == "done" else {"kind": "driver", "message": "it failed"},
             "processes": [{"pid": pid, "nspid": pid, "comm": "python3", "outcome": proc or outcome, "bytes": 4096, "seconds": {"lock": 0.001, "checkpoint": 0.2},
                            "code": None, "why": None, "step": None, "cu": None, "recovery": None}]}
        if start is not None:
            e["processes"][0]["start_time"] = start
        return json.dumps(e, separators=(",", ":")) + "\n"


class Cli(HistoryCase):
    def test_checkpoint_and_restore_are_recorded(self):
        pids = self.start("--mem", "16", "--spawn", "1", expect=2)
        t0 = time.time()
        self.assertEqual(self.cs("checkpoint").rc, 0)
        self.assertEqual(self.cs("restore").rc, 0)
        t1 = time.time()
        h = self.history()
        self.assertEqual([e["op"] for e in h], ["restore", "checkpoint"], h)
        for e, steps in zip(h, (("restore", "unlock"), ("lock", "checkpoint"))):
            self.assertEqual((e["v"], e["front"], e["outcome"], e["exit_status"], e["error"]), (1, "cli", "done", 0, None))
            self.assertLessEqual(t0 - 0.01, parse_time(e["time"]))
            self.assertLessEqual(parse_time(e["time"]) + e["seconds"], t1 + 0.01)
            self.assertEqual(e["caller"]["parent_pid"], os.getpid())
            self.assertIn("python", e["caller"]["parent_cmdline"])
            self.assertRegex(e["caller"]["cmdline"], f"cudasnap {e['op']}$")
            self.assertEqual(sorted(self.procs(e)), pids)
            for pid, p in self.procs(e).items():
                self.assertEqual((p["nspid"], p["outcome"], p["step"], p["cu"]), (pid, "done", None, None))
                self.assertIn(p["comm"], ("fakecuda-app", "exe"))
                self.assertEqual(sorted(p["seconds"]), sorted(steps))
                if e["op"] == "checkpoint":  # (a sanitized app's restore gives no memory back to the system)
                    self.assertGreaterEqual(p["bytes"], 16 * MIB)
            self.assertEqual(e["bytes"], sum(p["bytes"] for p in e["processes"]))
        self.assertEqual(stat.S_IMODE(os.stat(self.file).st_mode), 0o600)
        r = self.cs("history")
        self.assertEqual(r.rc, 0, r)
        heads = [line for line in r.out.splitlines() if not line.startswith("    ")]
        self.assertEqual(len(heads), 2, r.out)
        self.assertRegex(heads[0], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z cli restore done \(exit 0\) in "
                         r"\d+\.\d{3} s: 2 processes, 0\.\d\d GiB; pid \d+ '.*cudasnap restore', parent "
                         f"{os.getpid()} ")
        self.assertRegex(r.out, f"\n    {pids[0]} \\(fakecuda-app\\): done, 0\\.02 GiB, lock 0\\.\\d{{3}} s, "
                         "checkpoint \\d+\\.\\d{3} s\n")
        r = self.cs("history", "-n", "1")
        self.assertEqual(r.rc, 0, r)
        self.assertIn(" cli restore done", r.out)
        self.assertNotIn(" cli checkpoint ", r.out)
        self.assertIn("(1 older operation: -n 2 shows them all)", r.out)
        self.assertEqual([e["op"] for e in self.history("-n", "1")], ["restore"])

    def test_dry_runs_and_nothing_to_do_are_not_operations(self):
        self.start("--mem", "1")
        for args in (("checkpoint", "--dry-run"), ("restore", "--dry-run"), ("unlock",), ("restore",)):
            r = self.cs(*args)
            self.assertIn(r.rc, (0, 1), r)
        self.assertFalse(os.path.exists(self.file))
        r = self.cs("history")
        self.assertEqual((r.rc, r.out.strip()), (0, f"no operation is recorded in {self.file}"), r)
        self.assertEqual(self.history(), [])

    def test_a_rollback_names_the_step_and_the_driver_code(self):
        pids = self.start("--spawn", "2", "--mem", "2", expect=3)
        victim = pids[1]
        self.fault(f"{victim} checkpoint error=999 1")
        r = self.cs("checkpoint")
        self.assertEqual(r.rc, 1, r)
        e = self.last()
        self.assertEqual((e["op"], e["outcome"], e["exit_status"]), ("checkpoint", "rolled-back", 1), e)
        self.assertIn(f"checkpoint of process {victim}", e["error"]["message"])
        self.assertEqual(e["error"]["cu"], 999)
        procs = self.procs(e)
        self.assertEqual(sorted(procs), pids)
        v = procs[victim]
        self.assertEqual((v["outcome"], v["step"], v["cu"]), ("rolled-back", "checkpoint", 999), v)
        self.assertIn("CUDA_ERROR_UNKNOWN", v["why"])
        self.assertIn("lock", v["seconds"])
        for pid in pids:
            self.assertEqual(procs[pid]["outcome"], "rolled-back")
        r = self.cs("history", "-n", "1")
        self.assertIn(" cli checkpoint ROLLED-BACK (exit 1) in ", r.out)
        self.assertIn(f"    {victim} (", r.out)
        self.assertIn("rolled back, lock ", r.out)
        self.assertIn("its checkpoint failed (driver 999): ", r.out)
        self.assertIn("    error: checkpoint of process", r.out)
        self.assertStates(pids, "running")

    def test_a_lost_process_is_recorded_with_why(self):
        pid, = self.start("--mem", "4")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        # The driver's out-of-memory answer to a restore destroys the state.
        self.fault(f"{pid} restore error=2 1")
        r = self.cs("restore")
        self.assertEqual(r.rc, 3, r)
        e = self.last()
        self.assertEqual((e["op"], e["outcome"], e["exit_status"]), ("restore", "incomplete", 3), e)
        p, = e["processes"]
        self.assertEqual((p["pid"], p["outcome"], p["step"], p["cu"]), (pid, "lost", "restore", 2), p)
        self.assertIn("ran out of GPU memory during its restore", p["why"])
        self.assertIn(f"    {pid} (fakecuda-app): LOST, its restore failed (driver 2): the driver ran out",
                      self.cs("history").out)

    def test_a_restore_refused_for_gpu_memory(self):
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        pid, = self.start("--mem", "64")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        filler = subprocess.Popen([APP, "--ready-dir", self.ready, "--mem", "900"], env=self.env,
                                  start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.apps.append(filler)
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(self.ready, f"{filler.pid}.ready")) and time.monotonic() < deadline:
            time.sleep(0.01)
        r = self.cs("restore")
        self.assertEqual(r.rc, 2, r)
        e = self.last()
        self.assertEqual((e["op"], e["outcome"], e["exit_status"]), ("restore", "refused", 2), e)
        p = self.procs(e)[pid]
        self.assertEqual((p["outcome"], p["code"], p["seconds"]), ("refused", "gpu-memory", {}), p)
        self.assertIn(f"on GPU 0 (NVIDIA H200, {GPU0})", p["why"])
        self.assertIn("restore refused; nothing was changed", e["error"]["message"])
        self.assertIn(f"{pid} (fakecuda-app): refused (gpu-memory): ", self.cs("history").out)
        os.killpg(filler.pid, signal.SIGKILL)
        filler.wait()
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertEqual([(x["op"], x["outcome"]) for x in self.history()],
                         [("restore", "done"), ("restore", "refused"), ("checkpoint", "done")])

    def test_a_checkpoint_refused_for_host_memory(self):
        cgroups = memcg.for_test(self)
        cg = cgroups.make("tight")
        pid, = self.start("--mem", "64", wrap=cg.enter_argv())
        cg.set_room(40 * MIB)
        r = self.cs("checkpoint")
        self.assertEqual(r.rc, 2, r)
        e = self.last()
        self.assertEqual((e["op"], e["outcome"], e["exit_status"]), ("checkpoint", "refused", 2), e)
        p = self.procs(e)[pid]
        self.assertEqual((p["outcome"], p["code"]), ("refused", "memory"), p)
        self.assertIn(f"of host memory in cgroup {cg.path}", p["why"])
        self.assertStates([pid], "running")

    def test_a_process_another_operation_holds_is_refused(self):
        pid, = self.start("--mem", "1")
        # The claim's record of the process, held as another operation holds it.
        claims = os.path.join(self.state, "claims")
        self.make_state()
        os.makedirs(claims, mode=0o700)
        name = f"{os.stat(f'/proc/{pid}/ns/pid').st_ino}-{pid}"
        with open(os.path.join(claims, name), "w") as f:
            f.write("pid 1, 'criu dump'\n")
            f.flush()
            fcntl.flock(f, fcntl.LOCK_EX)
            r = self.cs("lock")
        self.assertEqual(r.rc, 2, r)
        e = self.last()
        self.assertEqual((e["op"], e["outcome"], e["exit_status"]), ("lock", "refused", 2), e)
        p, = e["processes"]
        self.assertEqual((p["pid"], p["outcome"], p["code"]), (pid, "refused", "busy"), p)
        self.assertIn(f"another cudasnap is running on process {pid}", p["why"])


class Hook(HistoryCase):
    def test_save_and_restore_are_recorded_as_the_hook(self):
        pids = self.start("--mem", "4", "--spawn", "1", expect=2)
        for mode in ("save", "restore"):
            r = self.cs("hook", env={MODE: mode})
            self.assertEqual(r.rc, 0, r)
        h = self.history()
        self.assertEqual([(e["front"], e["op"], e["outcome"], e["exit_status"]) for e in h],
                         [("hook", "restore", "done", 0), ("hook", "checkpoint", "done", 0)], h)
        for e in h:
            self.assertTrue(e["caller"]["cmdline"].endswith("cudasnap hook"), e)
            self.assertEqual(sorted(self.procs(e)), pids)
        self.assertEqual(sorted(h[1]["processes"][0]["seconds"]), ["checkpoint", "lock"])
        # A dry run of the hook is not an operation.
        self.assertIn(self.cs("hook", "--dry-run", env={MODE: "save"}).rc, (0, 1))
        self.assertEqual(len(self.history()), 2)


class DropIn(HistoryCase):
    def test_each_state_changing_call_is_recorded(self):
        pid, = self.start("--mem", "8")
        self.make_state()  # the drop-in writes where the state directory exists
        for args in (("--toggle",), ("--toggle",), ("--action", "lock"), ("--action", "unlock")):
            r = self.cc(*args, "--pid", pid)
            self.assertEqual((r.rc, r.err), (0, ""), r)
        # Questions change nothing: not operations.
        self.assertEqual(self.cc("--get-state", "--pid", pid).rc, 0)
        self.assertEqual(self.cc("--get-restore-tid", "--pid", pid).rc, 0)
        h = self.history()
        self.assertEqual([(e["front"], e["op"], e["outcome"], e["exit_status"]) for e in h],
                         [("drop-in", "unlock", "done", 0), ("drop-in", "lock", "done", 0),
                          ("drop-in", "toggle", "done", 0), ("drop-in", "toggle", "done", 0)], h)
        steps = [sorted(e["processes"][0]["seconds"]) for e in h]
        self.assertEqual(steps, [["unlock"], ["lock"], ["restore", "unlock"], ["checkpoint", "lock"]])
        p = h[3]["processes"][0]
        self.assertEqual((p["pid"], p["nspid"], p["comm"], p["outcome"]), (pid, pid, "fakecuda-app", "done"))
        self.assertGreaterEqual(p["bytes"], 8 * MIB)
        self.assertIn(f"cuda-checkpoint --toggle --pid {pid}", h[3]["caller"]["cmdline"])

    def test_failures_and_refusals_are_recorded(self):
        pid, = self.start("--mem", "2")
        self.make_state()
        self.fault(f"{pid} lock error=999 1")
        r = self.cc("--action", "lock", "--pid", pid)
        self.assertEqual(r.rc, 1, r)
        e = self.last()
        self.assertEqual((e["op"], e["outcome"], e["exit_status"]), ("lock", "failed", 1), e)
        p, = e["processes"]
        self.assertEqual((p["outcome"], p["step"], p["cu"]), ("failed", "lock", 999), p)
        self.assertIn("CUDA_ERROR_UNKNOWN", p["why"])
        # A checkpoint that fails is unlocked again by --toggle: rolled back.
        self.fault(f"{pid} checkpoint error=999 1")
        r = self.cc("--toggle", "--pid", pid)
        self.assertEqual(r.rc, 1, r)
        e = self.last()
        self.assertEqual((e["op"], e["outcome"]), ("toggle", "rolled-back"), e)
        p, = e["processes"]
        self.assertEqual((p["outcome"], p["step"], p["cu"], sorted(p["seconds"])),
                         ("rolled-back", "checkpoint", 999, ["lock"]), p)
        os.unlink(self.faults)
        # A locked process: --toggle refuses to guess a direction.
        self.assertEqual(self.cc("--action", "lock", "--pid", pid).rc, 0)
        r = self.cc("--toggle", "--pid", pid)
        self.assertEqual(r.rc, 1, r)
        e = self.last()
        self.assertEqual((e["op"], e["outcome"], e["exit_status"]), ("toggle", "refused", 1), e)
        self.assertEqual((e["processes"][0]["outcome"], e["processes"][0]["code"]), ("refused", "state"))
        self.assertEqual(self.cc("--action", "unlock", "--pid", pid).rc, 0)
        self.assertStates([pid], "running")

    def test_no_state_directory_no_history(self):
        pid, = self.start("--mem", "2")
        r = self.cc("--toggle", "--pid", pid)
        self.assertEqual((r.rc, r.err), (0, ""), r)
        self.assertFalse(os.path.exists(self.state), "the drop-in created the state directory")
        self.assertEqual(self.cc("--toggle", "--pid", pid).rc, 0)


class Storage(HistoryCase):
    def fill(self, path, size, t=None, mode="w"):
        """Entries of exactly size bytes in all (the last one's note pads
        it), a history file of its own or (mode "a") added to what it holds;
        returns their count. Exact, so that whether the next entry rotates
        the file does not hang on the length of paths in entries."""
        line = self.sample_line(t)
        n = size // len(line)
        last = line
        if n and size % len(line):  # a note of k bytes adds k - 2 to "note":null
            last = self.sample_line(t, note="x" * (size % len(line) + 2))
            self.assertEqual(len(last), len(line) + size % len(line))
        self.make_state()
        with open(path, mode) as f:
            f.write(line * (n - 1) + last if n else "")
        os.chmod(path, 0o600)
        return n

    def test_rotated_at_its_bound_keeping_one_older_file(self):
        pid, = self.start("--mem", "1")
        first = self.fill(self.file, ROTATE - 300)
        with open(self.file) as f:
            prefilled = f.read()
        self.assertEqual(self.cs("lock").rc, 0)
        with open(self.old_file) as f:
            self.assertEqual(f.read(), prefilled)
        with open(self.file) as f:
            self.assertEqual([json.loads(x)["op"] for x in f.read().splitlines()], ["lock"])
        h = self.history()
        self.assertEqual(len(h), first + 1)
        self.assertEqual(h[0]["op"], "lock")
        # Again: the oldest file goes, so the history stays bounded.
        second = self.fill(self.file, ROTATE - 300, t=time.time())
        self.assertEqual(self.cs("unlock").rc, 0)
        for path in (self.file, self.old_file):
            self.assertLessEqual(os.path.getsize(path), ROTATE)
        h = self.history()
        self.assertEqual(len(h), second + 1)
        self.assertEqual([e["op"] for e in h[:2]], ["unlock", "checkpoint"])

    def test_concurrent_writers_tear_and_lose_no_line(self):
        pids = self.start("--spawn", "11", "--mem", "1", expect=12)
        # Close to the bound, so that one of them rotates in the middle.
        prefilled = self.fill(self.file, ROTATE - 4000)
        for cmd in ("lock", "unlock"):
            procs = [subprocess.Popen([os.environ["CUDASNAP_BIN"], cmd, "--pid", str(pid)], env=self.env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for pid in pids]
            for p in procs:
                _, err = p.communicate(timeout=120)
                self.assertEqual(p.returncode, 0, err)
                self.assertNotIn("history", err)
        self.assertTrue(os.path.exists(self.old_file), "no rotation happened")
        lines = self.raw_lines()
        entries = [json.loads(x) for x in lines]  # every line whole
        self.assertEqual(len(entries), prefilled + 2 * len(pids))
        for cmd in ("lock", "unlock"):
            got = sorted(e["processes"][0]["pid"] for e in entries if e["op"] == cmd)
            self.assertEqual(got, pids, cmd)
        r = self.cs("history", "-n", "1000000")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("skipped", r.err)

    def hold(self, path, seconds, cmd):
        """Runs cmd while this process holds an exclusive flock of path for
        seconds; returns when cmd ended (seconds after its start, None when
        it was still running when the lock was let go)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.addCleanup(os.close, fd)
        fcntl.flock(fd, fcntl.LOCK_EX)
        t0 = time.monotonic()
        p = subprocess.Popen([os.environ["CUDASNAP_BIN"], cmd], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        ended = None
        while time.monotonic() < t0 + seconds:
            if ended is None and p.poll() is not None:
                ended = time.monotonic() - t0
            time.sleep(0.02)
        fcntl.flock(fd, fcntl.LOCK_UN)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertNotIn("history", err)
        return ended

    def test_a_writer_never_waits_on_the_state_directory_lock(self):
        """A stuck holder of the state directory's lock (a manifest update)
        holds up no entry: the history has a lock of its own."""
        pid, = self.start("--mem", "1")
        prefilled = self.fill(self.file, ROTATE - 300)
        ended = self.hold(os.path.join(self.state, "lock"), 3.0, "lock")
        self.assertIsNotNone(ended, "it waited for the state directory's lock")
        self.assertLess(ended, 1.5)
        with open(self.old_file) as f:  # and it rotated
            self.assertEqual(len(f.read().splitlines()), prefilled)
        with open(self.file) as f:
            self.assertEqual([json.loads(x)["op"] for x in f.read().splitlines()], ["lock"])
        self.assertEqual(self.cs("unlock").rc, 0)
        self.assertStates([pid], "running")

    def test_writers_take_turns_under_the_historys_lock_for_a_moment(self):
        """A writer waits a quarter of a second at most for the history's
        own lock (another writer, which holds it for one write), then
        appends without it, without rotating, which another writer may be
        in the middle of."""
        pid, = self.start("--mem", "1")
        prefilled = self.fill(self.file, ROTATE - 300)
        ended = self.hold(self.file, 2.0, "lock")
        self.assertIsNotNone(ended, "it waited for the history's lock longer than 2 s")
        self.assertGreaterEqual(ended, 0.25)
        self.assertLess(ended, 1.5)
        with open(self.file) as f:
            lines = f.read().splitlines()
        self.assertEqual((len(lines), json.loads(lines[-1])["op"]), (prefilled + 1, "lock"))
        self.assertFalse(os.path.exists(self.old_file))
        # let go, the next writer rotates
        self.assertEqual(self.cs("unlock").rc, 0)
        with open(self.old_file) as f:
            self.assertEqual(len(f.read().splitlines()), prefilled + 1)
        self.assertStates([pid], "running")

    def rotate_twice(self, pid, at):
        """Two rotations by lock and unlock of pid, each of a full file of
        entries of time at: what history.1.jsonl held before goes."""
        for cmd in ("lock", "unlock"):
            size = os.path.getsize(self.file) if os.path.exists(self.file) else 0
            self.fill(self.file, ROTATE - 100 - size, t=at, mode="a")
            old = os.stat(self.file).st_ino
            self.assertEqual(self.cs(cmd, "--pid", str(pid)).rc, 0)
            self.assertNotEqual(os.stat(self.file).st_ino, old, f"{cmd} did not rotate the history")

    def ops_in_files(self):
        return [(e["outcome"], e["processes"][0]["outcome"], e["processes"][0]["pid"])
                for e in map(json.loads, self.raw_lines()) if e["outcome"] != "done"]

    @staticmethod
    def start_time(pid):
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])

    def test_lost_and_left_behind_outlive_rotation_until_read(self):
        # pid stays left behind; other, which no alert names, drives the rotations
        pid, other = self.start("--mem", "1", "--spawn", "1", expect=2)
        start = self.start_time(pid)
        gone = 4194400  # above any pid_max: no process has it
        t = time.time() - 600
        self.make_state()
        alerts = [self.sample_line(t, "incomplete", proc="lost", pid=gone + 1),
                  self.sample_line(t + 1, "incomplete", proc="unrestorable", pid=gone + 3),
                  # left behind: a process still there, one that is gone, one a later entry brought back
                  self.sample_line(t + 2, "incomplete", proc="left-behind", pid=pid, start=start),
                  self.sample_line(t + 3, "incomplete", proc="left-behind", pid=pid, start=start + 1),
                  self.sample_line(t + 4, "incomplete", proc="left-behind", pid=gone + 4, start=7, caller=8),
                  self.sample_line(t + 5, "rolled-back", proc="rolled-back", pid=gone + 5)]
        with open(self.file, "w") as f:
            f.write("".join(alerts))
        os.chmod(self.file, 0o600)
        later = self.sample_line(t + 6, "done", pid=gone + 4, start=7)
        with open(self.file, "a") as f:
            f.write(later)
        self.rotate_twice(other, t + 10)
        kept = [("incomplete", "lost", gone + 1), ("incomplete", "unrestorable", gone + 3),
                ("incomplete", "left-behind", pid)]
        self.assertEqual(self.ops_in_files(), kept)
        # again: still unread, still kept
        self.rotate_twice(other, t + 20)
        self.assertEqual(self.ops_in_files(), kept)
        self.history()  # shows them, and marks nothing
        self.assertFalse(os.path.exists(os.path.join(self.state, "history.seen")))
        h = self.history("--mark-read", "-n", "1000000")  # read, said outright
        self.assertEqual([(e["outcome"], e["processes"][0]["outcome"], e["processes"][0]["pid"])
                          for e in h if e["outcome"] != "done"], kept[::-1])
        self.assertEqual(h[0]["op"], "unlock")  # newest first, the carried ones among the oldest
        with open(os.path.join(self.state, "history.seen")) as f:
            self.assertEqual(len(f.read().splitlines()), 3)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.state, "history.seen")).st_mode), 0o600)
        self.rotate_twice(other, t + 30)
        self.assertEqual(self.ops_in_files(), [])

    def test_left_behind_brought_back_in_the_file_that_stays_is_not_carried(self):
        """The entry that brings a process back may be in history.jsonl,
        the file that stays, while its alert is in the one that goes."""
        pid, other = self.start("--mem", "1", "--spawn", "1", expect=2)
        t = time.time() - 600
        self.make_state()
        with open(self.file, "w") as f:
            f.write(self.sample_line(t, "incomplete", proc="left-behind", pid=pid, start=self.start_time(pid)) +
                    self.sample_line(t + 1, "incomplete", proc="left-behind", pid=other,
                                     start=self.start_time(other)))
        os.chmod(self.file, 0o600)
        self.fill(self.file, ROTATE - 100 - os.path.getsize(self.file), t=t + 10, mode="a")
        # pid's lock rotates: the alerts are now in history.1.jsonl, its lock in history.jsonl
        self.assertEqual(self.cs("lock", "--pid", str(pid)).rc, 0)
        self.assertEqual(self.cs("unlock", "--pid", str(pid)).rc, 0)
        self.assertEqual([x[2] for x in self.ops_in_files()], [pid, other])
        self.fill(self.file, ROTATE - 100 - os.path.getsize(self.file), t=t + 20, mode="a")
        self.assertEqual(self.cs("lock", "--pid", str(other)).rc, 0)  # history.1.jsonl goes
        self.assertEqual(self.ops_in_files(), [("incomplete", "left-behind", other)])
        self.assertEqual(self.cs("unlock", "--pid", str(other)).rc, 0)

    def test_carried_alerts_are_bounded(self):
        pid, = self.start("--mem", "1")
        t = time.time() - 600
        self.make_state()
        with open(self.file, "w") as f:
            for i in range(70):
                f.write(self.sample_line(t + i, "incomplete", proc="lost", pid=1000 + i))
        os.chmod(self.file, 0o600)
        self.rotate_twice(pid, t + 100)
        self.assertEqual([x[2] for x in self.ops_in_files()], list(range(1006, 1070)))  # the newest 64

    def test_a_read_only_state_directory_fails_nothing_and_warns_once(self):
        pid, = self.start("--mem", "2")
        claims = os.path.join(self.state, "claims")
        self.make_state()
        os.makedirs(claims, mode=0o700)
        rw = os.path.join(self.tmp, "claims-rw")
        os.makedirs(rw, mode=0o700)
        # The state directory read-only (a read-only /run), its claims where they can be taken.
        try:
            subprocess.run(["mount", "--make-rprivate", "/"], check=True, capture_output=True)
            subprocess.run(["mount", "--bind", self.state, self.state], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as e:
            self.skipTest(f"cannot bind-mount here: {e}")
        self.addCleanup(subprocess.run, ["umount", "-l", self.state])
        subprocess.run(["mount", "-o", "remount,bind,ro", self.state], check=True)
        subprocess.run(["mount", "--bind", rw, claims], check=True)
        self.addCleanup(subprocess.run, ["umount", claims])
        for cmd, state in (("checkpoint", "checkpointed"), ("restore", "running")):
            r = self.cs(cmd)
            self.assertEqual(r.rc, 0, r)
            warned = [line for line in r.err.splitlines() if "history of operations" in line]
            self.assertEqual(warned, [f"cudasnap: warning: this {cmd} is not recorded in the history of operations "
                                      f"({self.file}): cannot write {self.file}: Read-only file system"], r)
            self.assertStates([pid], state)
        self.assertDataOk([pid])
        self.assertFalse(os.path.exists(self.file))

    def test_a_full_disk_leaves_no_torn_line(self):
        """An entry that does not fit on the filesystem is taken back whole:
        the next one starts a line of its own, and no reader skips any."""
        pid, = self.start("--mem", "1")
        self.make_state()
        try:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "cudasnap-test-full", self.state],
                           check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as e:
            self.skipTest(f"cannot mount a tmpfs here: {e}")
        self.addCleanup(subprocess.run, ["umount", "-l", self.state])
        self.assertEqual(self.cs("lock").rc, 0)  # the lock file and the claims
        self.assertEqual(self.cs("unlock").rc, 0)
        with open(self.file) as f:
            kept = f.read()
        # 4000 bytes into its last page, then nothing left on the filesystem
        line = self.sample_line()
        kept += line * ((12288 + 4000 - len(kept)) // len(line))
        kept += "x" * (12288 + 4000 - len(kept) - 1) + "\n"
        with open(self.file, "w") as f:
            f.write(kept)
        fd = os.open(os.path.join(self.state, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096) > 0:
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        r = self.cs("lock")
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"warning: this lock is not recorded in the history of operations ({self.file}): cannot write "
                      f"{self.file}: No space left on device", r.err)
        with open(self.file) as f:
            self.assertEqual(f.read(), kept)
        os.unlink(os.path.join(self.state, "filler"))
        self.assertEqual(self.cs("unlock").rc, 0)
        with open(self.file) as f:
            self.assertEqual(json.loads(f.read().splitlines()[-1])["op"], "unlock")
        r = self.cs("history", "-n", "1000")
        self.assertIn("1 line of the history was skipped", r.err)  # the "x" line, and no other
        self.assertStates([pid], "running")

    def test_a_history_that_is_not_a_file_fails_nothing(self):
        pid, = self.start("--mem", "2")
        self.make_state()
        os.mkdir(self.file)
        r = self.cs("lock")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(len([x for x in r.err.splitlines() if "not recorded in the history" in x]), 1, r)
        self.assertStates([pid], "locked")
        r = self.cs("history")
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"{self.file} is not a regular file", r.err)
        self.assertEqual(self.cs("unlock").rc, 0)

    def test_corrupt_lines_are_skipped_and_counted(self):
        self.make_state()
        good = [self.sample_line(time.time() - 30 + i) for i in range(3)]
        evil = json.loads(good[2])
        evil["processes"][0]["comm"] = "\x1b[2Jevil\u202e"
        evil["caller"]["cmdline"] = "sh -c '\x07\x1b]0;title\x07'"
        evil = json.dumps(evil, ensure_ascii=False) + "\n"
        v2 = json.loads(good[1])
        v2["v"] = 2
        with open(self.file, "w") as f:
            f.write(good[0] + "{\n" + good[1][:100] + "\nnot json\n" + json.dumps(v2) + "\n" + good[1] +
                    "x" * (300 << 10) + "\n\n" + evil + good[2][:-30])
        r = self.cs("history", "--json", "-n", "100")
        self.assertEqual(r.rc, 0, r)
        got = json.loads(r.out)
        self.assertEqual([e["time"] for e in got], [json.loads(evil)["time"], json.loads(good[1])["time"],
                                                      json.loads(good[0])["time"]])
        self.assertIn("warning: 6 lines of the history were skipped: not a well-formed entry (corrupt or "
                      "truncated)", r.err)
        r = self.cs("history")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("\x1b", r.out)
        self.assertNotIn("\x07", r.out)
        self.assertIn("    42 (?[2Jevil?): done", r.out)

    def test_a_huge_file_is_read_bounded(self):
        lines = self.fill(self.file, 3 * ROTATE)
        with open(self.file, "a") as f:
            f.write(self.sample_line(time.time() + 5, op="unlock"))
        r = self.cs("history", "--json", "-n", "1000000")
        self.assertEqual(r.rc, 0, r)
        got = json.loads(r.out)
        self.assertEqual(got[0]["op"], "unlock")
        self.assertLess(len(got), lines / 2)
        self.assertGreater(len(got), (ROTATE // len(self.sample_line())) - 2)
        self.assertIn("only its last 1280 KiB were read", r.err)
        self.assertNotIn("skipped", r.err)

    def test_count_and_usage(self):
        self.fill(self.file, 10 * len(self.sample_line()))
        self.assertEqual(len(self.history("-n", "3")), 3)
        self.assertEqual(len(self.history("--count", "4")), 4)
        self.assertEqual(len(self.history()), 10)
        self.assertEqual(len(self.history("-n", "20")), 10)
        r = self.cs("history")
        self.assertEqual(len([x for x in r.out.splitlines() if not x.startswith("    ")]), 10, r)
        for args in (("-n", "0"), ("-n", "x"), ("-n", "-1"), ("extra",), ("--bogus",)):
            r = self.cs("history", *args)
            self.assertEqual(r.rc, 2, (args, r))

    def test_root_reads_it_alone(self):
        pid, = self.start("--mem", "1")
        self.assertEqual(self.cs("lock").rc, 0)
        self.assertEqual(stat.S_IMODE(os.stat(self.state).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(self.file).st_mode), 0o600)
        os.chmod(self.tmp, 0o755)
        r = self.cs("history", wrap=("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"))
        self.assertEqual(r.rc, 2, r)
        self.assertIn("Run it as root", r.err)
        self.assertEqual(self.cs("unlock").rc, 0)


class Doctor(HistoryCase):
    def check(self, r):
        got = [c for c in r.obj["checks"] if c["name"] == "history"]
        self.assertEqual(len(got), 1, r)
        return got[0]

    def test_doctor_names_the_last_failure_of_the_day(self):
        pids = self.start("--spawn", "1", "--mem", "1", expect=2)
        self.assertEqual(self.cs("lock").rc, 0)
        self.assertEqual(self.cs("unlock").rc, 0)
        r = self.cs("doctor", "--json")
        c = self.check(r)
        self.assertEqual((c["status"], c["message"]), ("pass", "no failure among the 2 operations of the last 24 h"))
        self.assertEqual(r.obj["history"], {"operations_24h": 2, "failures_24h": 0, "last_failure": None, "unread_alerts": 0})
        self.fault(f"{pids[1]} checkpoint error=999 1")
        self.assertEqual(self.cs("checkpoint").rc, 1)
        failure = self.last()
        r = self.cs("doctor", "--json")
        c = self.check(r)
        self.assertEqual(c["status"], "warn", c)
        self.assertRegex(c["message"], f"^1 of the 3 operations of the last 24 h failed; the last at "
                         f"{re.escape(failure['time'])} \\(\\d+ s ago\\): cli checkpoint ROLLED-BACK: process "
                         f"{pids[0]} \\(fakecuda-app\\) rolled-back")
        self.assertIn("Read 'cudasnap history -n 5'", c["fix"])
        self.assertEqual((r.obj["history"]["operations_24h"], r.obj["history"]["failures_24h"]), (3, 1))
        self.assertEqual(r.obj["history"]["last_failure"], failure)
        r = self.cs("doctor")
        self.assertIn("WARN  history: 1 of the 3 operations of the last 24 h failed", r.out)
        self.assertIn("      fix: Read 'cudasnap history -n 5'", r.out)

    def test_a_failure_of_yesterday_is_not_named(self):
        self.make_state()
        with open(self.file, "w") as f:
            f.write(self.sample_line(time.time() - 2 * 86400, outcome="rolled-back"))
            f.write(self.sample_line(time.time() - 60))
        os.chmod(self.file, 0o600)
        r = self.cs("doctor", "--json")
        self.assertEqual(self.check(r)["status"], "pass", r)
        self.assertEqual(r.obj["history"], {"operations_24h": 1, "failures_24h": 0, "last_failure": None, "unread_alerts": 0})
        with open(self.file, "a") as f:
            f.write(self.sample_line(time.time() - 3 * 3600, outcome="rolled-back"))
        c = self.check(self.cs("doctor", "--json"))
        self.assertEqual(c["status"], "warn", c)
        self.assertIn("(3.0 h ago): cli checkpoint ROLLED-BACK: process 42 (python3) rolled-back", c["message"])

    def test_doctor_names_an_alert_no_one_has_read_whatever_its_age(self):
        self.make_state()
        with open(self.file, "w") as f:
            f.write(self.sample_line(time.time() - 5 * 86400, "incomplete", proc="lost", pid=41))
            f.write(self.sample_line(time.time() - 4 * 86400, "incomplete", proc="left-behind", pid=43, caller=9))
            f.write(self.sample_line(time.time() - 60))
        os.chmod(self.file, 0o600)
        r = self.cs("doctor", "--json")
        c = [x for x in r.obj["checks"] if x["name"] == "history-unread"]
        self.assertEqual(len(c), 1, r)
        self.assertEqual(c[0]["status"], "warn")
        self.assertRegex(c[0]["message"], r"^2 operations left a process LOST, UNRESTORABLE or LEFT BEHIND, and no "
                         r"one has marked them read yet; the last at .* \(4\.0 days? ago|96\.0 h ago\)")
        self.assertIn("process 43 (python3) left-behind", c[0]["message"])
        self.assertEqual(r.obj["history"]["unread_alerts"], 2)
        self.assertEqual(self.check(r)["status"], "pass", r)  # no failure of the last 24 h
        # a monitor running doctor, or history, hides nothing: only
        # --mark-read marks, and only what it shows
        seen = os.path.join(self.state, "history.seen")
        self.assertEqual(self.cs("history").rc, 0)
        self.assertFalse(os.path.exists(seen))
        self.assertEqual(self.cs("doctor", "--json").obj["history"]["unread_alerts"], 2)
        self.assertEqual(self.cs("history", "-n", "1", "--mark-read").rc, 0)  # the newest: not an alert
        self.assertFalse(os.path.exists(seen) and open(seen).read().strip())
        self.assertEqual(self.cs("history", "-n", "2", "--mark-read").rc, 0)
        with open(seen) as f:
            self.assertEqual(len(f.read().splitlines()), 1)
        self.assertEqual(self.cs("history", "--mark-read").rc, 0)
        with open(seen) as f:
            self.assertEqual(len(f.read().splitlines()), 2)
        r = self.cs("doctor", "--json")
        self.assertEqual((r.obj["history"]["unread_alerts"],
                          [x for x in r.obj["checks"] if x["name"] == "history-unread"]), (0, []), r)

    def test_no_history(self):
        r = self.cs("doctor", "--json")
        c = self.check(r)
        self.assertEqual((c["status"], c["message"]),
                         ("pass", f"no operation in the last 24 h ({self.file} holds 0)"), r)


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
