"""Stopped, traced and frozen processes: cudasnap sees them in /proc before it
asks the driver (whose calls would wait for them), refuses a selection that
holds one, bounds every call, and ends on a signal within 5 seconds.

Three fake CUDA processes; one of them is stopped in each test."""
import os
import signal
import subprocess
import time
import unittest

from harness import BIN, Case


class Stopped(Case):
    def setUp(self):
        super().setUp()
        self.pids = [self.start("--mem", "32")[0] for _ in range(3)]
        self.stopped = []
        self.addCleanup(self.resume_all)

    def stop(self, pid):
        os.kill(pid, signal.SIGSTOP)
        self.stopped.append(pid)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.proc_state(pid) != "T":
            time.sleep(0.01)

    def resume_all(self):
        for pid in self.stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    @staticmethod
    def proc_state(pid):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    def resume(self, pid):
        os.kill(pid, signal.SIGCONT)
        self.stopped.remove(pid)

    def test_ps_lists_stopped_without_asking(self):
        a, b, c = self.pids
        self.stop(a)
        r = self.cs("ps", timeout=10)
        self.assertEqual(r.rc, 0, r)
        self.assertLess(r.wall, 1.0, r)
        row = [line for line in r.out.splitlines() if line.startswith(str(a))][0]
        self.assertIn("stopped", row)
        got, obj = self.ps()
        self.assertEqual(got[a]["state"], "stopped")
        self.assertEqual(got[a]["halt"], "stopped")
        self.assertEqual(got[a]["class"], "cuda")
        self.assertIsNone(got[a]["driver_answer"])
        self.assertEqual({got[b]["state"], got[c]["state"]}, {"running"})

    def test_verify_and_doctor_do_not_wait(self):
        self.stop(self.pids[0])
        for cmd in (["verify"], ["verify", "--json"], ["doctor"]):
            r = self.cs(*cmd, timeout=20)
            self.assertIn(r.rc, (0, 1), r)
            self.assertLess(r.wall, 5.0, (cmd, r))
        self.assertIn("stopped", self.cs("verify").err + self.cs("verify").out)

    def test_checkpoint_of_others_works(self):
        a, b, c = self.pids
        self.stop(a)
        r = self.cs("checkpoint", "--pid", str(b), "--pid", str(c), timeout=20)
        self.assertEqual(r.rc, 0, r)
        self.assertStates([b, c], "checkpointed")
        self.assertEqual(self.cs("restore", "--pid", str(b), "--pid", str(c), timeout=20).rc, 0)
        self.resume(a)
        self.assertStates(self.pids, "running")
        self.assertDataOk(self.pids)

    def assertRefused(self, r, pid, word="kill -CONT"):
        self.assertEqual(r.rc, 2, r)  # refused before anything changed, as every refusal
        self.assertLess(r.wall, 2.0, r)
        self.assertIn(f"process {pid}", r.err)
        self.assertIn(word, r.err)
        self.assertIn("nothing was changed", r.err)

    def test_every_command_refuses_a_stopped_selection(self):
        a, b, c = self.pids
        self.stop(a)
        for cmd in ("checkpoint", "lock"):
            self.assertRefused(self.cs(cmd, timeout=10), a)
            self.assertRefused(self.cs(cmd, "--pid", str(a), timeout=10), a)
            self.assertStates([b, c], "running")
        r = self.cs("checkpoint", "--json", timeout=10)
        self.assertEqual(r.obj["outcome"], "refused", r)
        self.assertEqual(r.obj["exit_status"], 2)
        self.assertTrue([p for p in r.obj["processes"] if p["pid"] == a][0]["halted"])
        # The dry run says so: exit 1 of its own, and 2 for the real run.
        r = self.cs("checkpoint", "--dry-run", "--json", timeout=10)
        self.assertEqual((r.rc, r.obj["exit_status"], r.obj["real_exit_status"]), (1, 1, 2), r)
        self.assertIn("checkpoint would FAIL, with exit status 2", r.err)
        self.resume(a)
        # restore and unlock: the stopped one is checkpointed / locked
        for setup, cmd, state in (("checkpoint", "restore", "checkpointed"), ("lock", "unlock", "locked")):
            self.assertEqual(self.cs(setup, timeout=20).rc, 0)
            self.stop(a)
            self.assertRefused(self.cs(cmd, timeout=10), a)
            self.resume(a)
            self.assertStates(self.pids, state)
            self.assertEqual(self.cs(cmd, timeout=20).rc, 0)
        self.assertStates(self.pids, "running")
        self.assertDataOk(self.pids)

    def run_bg(self, *args):
        return subprocess.Popen([BIN, *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def test_sigterm_while_blocked_on_a_process_that_stopped(self):
        a, b, c = self.pids
        self.fault(f"{a} checkpoint delay=1500")
        p = self.run_bg("checkpoint")
        time.sleep(0.6)  # a is inside its checkpoint; b and c are done
        self.stop(a)
        time.sleep(0.3)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        wall = time.monotonic() - t0
        self.assertLess(wall, 5.0, err)
        self.assertEqual(p.returncode, 3, err)
        self.assertIn(f"{a} (fakecuda-app)", err)
        self.assertIn("LEFT BEHIND", err)
        self.assertIn(f"cudasnap restore --pid {a}", err)
        self.resume(a)
        # the call finishes inside the target: a ends checkpointed
        deadline = time.monotonic() + 10
        while self.states([a])[a] != "checkpointed" and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertStates([a], "checkpointed")
        self.assertStates([b, c], "running")
        self.fault()
        self.assertEqual(self.cs("restore", "--pid", str(a), timeout=20).rc, 0)
        self.assertStates(self.pids, "running")
        self.assertDataOk(self.pids)

    def test_second_signal_exits_at_once(self):
        a = self.pids[0]
        self.fault(f"{a} checkpoint delay=1500")
        p = self.run_bg("checkpoint", "--pid", str(a))
        time.sleep(0.5)
        self.stop(a)
        p.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        self.assertLess(time.monotonic() - t0, 1.0, err)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("second signal", err)
        self.resume(a)
        self.fault()
        deadline = time.monotonic() + 10
        while self.states([a])[a] != "checkpointed" and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.cs("restore", "--pid", str(a), timeout=20).rc, 0)
        self.assertDataOk([a])

    def test_step_deadline_expires(self):
        a, b, c = self.pids
        # The deadline bounds the rollback's restores too: leave them room on a busy machine.
        self.fault(f"{a} checkpoint delay=5000")
        r = self.cs("checkpoint", "--step-timeout", "2", "--json", timeout=30)
        self.assertEqual(r.rc, 3, r)
        self.assertLess(r.wall, 4.5, r)
        row = [p for p in r.obj["processes"] if p["pid"] == a][0]
        self.assertTrue(row["abandoned"], r)
        self.assertEqual(row["final_state"], "unknown")
        self.assertIn(f"cudasnap restore --pid {a}", row["recovery"])
        self.assertIn("CUDASNAP_CALL_TIMED_OUT", r.err)
        self.assertStates([b, c], "running")
        time.sleep(3.5)  # the abandoned call completes inside the target
        self.fault()
        self.assertStates([a], "checkpointed")
        self.assertEqual(self.cs("restore", "--pid", str(a), timeout=20).rc, 0)
        self.assertDataOk(self.pids)

    def test_lock_deadline_is_timeout_plus_grace(self):
        a = self.pids[0]
        self.fault(f"{a} lock delay=100")
        p = self.run_bg("lock", "--pid", str(a), "--timeout", "100")
        self.stop(a)  # usually before the call: refused (2); else the call waits 0.1 + 5 s (1 or 3)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode in (1, 2, 3), True, err)
        if p.returncode == 2:
            self.assertIn("nothing was changed", err)
        self.resume(a)
        time.sleep(0.5)
        st = self.states([a])[a]
        if st == "locked":
            self.assertEqual(self.cs("unlock", "--pid", str(a), timeout=20).rc, 0)
        self.assertStates([a], "running")

    def test_progress_lines_and_stall_on_a_pipe(self):
        a, b, c = self.pids
        self.fault(f"{a} checkpoint delay=6500")
        p = self.run_bg("checkpoint", "--pid", str(a), "--step-timeout", "8")
        time.sleep(1.0)
        self.stop(a)
        _, err = p.communicate(timeout=60)
        self.resume(a)
        self.assertEqual(p.returncode, 3, err)
        self.assertIn("processes done", err)  # a plain progress line every 5 s
        self.assertIn(f"{a} (fakecuda-app) checkpoint stalled", err)
        self.assertIn("stopped", err)
        self.fault()
        time.sleep(1.0)
        if self.states([a])[a] == "checkpointed":
            self.assertEqual(self.cs("restore", "--pid", str(a), timeout=20).rc, 0)
        self.assertDataOk([a])

    def test_a_call_that_moves_nothing_for_a_while_is_not_called_stalled(self):
        """A process that runs while the driver takes its time is still in
        the driver, not stalled: only one that is stopped or frozen is."""
        a = self.pids[0]
        self.fault(f"{a} checkpoint delay=6500")
        r = self.cs("checkpoint", "--pid", str(a), timeout=60)
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"{a} (fakecuda-app) checkpoint still in the driver: no memory moved for 5 s", r.err)
        self.assertNotIn("stalled", r.err)
        self.fault()
        self.assertEqual(self.cs("restore", "--pid", str(a), timeout=20).rc, 0)
        self.assertDataOk([a])


class Frozen(Case):
    """A cgroup freeze (docker pause): v2 cgroup.freeze or the v1 freezer,
    whichever this machine lets a test create."""

    def setUp(self):
        super().setUp()
        self.cg = None
        for make in (self.make_v2, self.make_v1):
            try:
                self.cg = make()
                break
            except OSError as e:
                self.why = str(e)
        if self.cg is None:
            self.skipTest(f"no cgroup freezer can be made here: {self.why}")
        self.addCleanup(self.drop_cgroup)

    def make_v2(self):
        root = self.mount_of("cgroup2")
        path = os.path.join(root, f"cudasnap-test-{os.getpid()}")
        os.mkdir(path)
        if not os.path.exists(os.path.join(path, "cgroup.freeze")):
            os.rmdir(path)
            raise OSError("cgroup v2 without cgroup.freeze")
        return ("v2", path)

    def make_v1(self):
        root = self.mount_of("cgroup", "freezer")
        path = os.path.join(root, f"cudasnap-test-{os.getpid()}")
        os.mkdir(path)
        return ("v1", path)

    @staticmethod
    def mount_of(fstype, option=None):
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, right = line.split(" - ", 1)
                kind, _, opts = right.split()[:3]
                if kind == fstype and (option is None or option in opts.split(",")):
                    return left.split()[4]
        raise OSError(f"no {fstype} mount{' with ' + option if option else ''}")

    def freeze(self, on):
        kind, path = self.cg
        if kind == "v2":
            with open(os.path.join(path, "cgroup.freeze"), "w") as f:
                f.write("1" if on else "0")
        else:
            with open(os.path.join(path, "freezer.state"), "w") as f:
                f.write("FROZEN" if on else "THAWED")
        time.sleep(0.3)

    def drop_cgroup(self):
        kind, path = self.cg
        try:
            self.freeze(False)
        except OSError:
            pass
        for p in self.apps:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
        try:
            os.rmdir(path)
        except OSError:
            pass

    def test_frozen_process_is_seen_and_refused(self):
        a = self.start("--mem", "16")[0]
        b = self.start("--mem", "16")[0]
        kind, path = self.cg
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(a))
        except OSError as e:
            self.skipTest(f"cannot move a process into {path}: {e}")
        self.freeze(True)
        r = self.cs("ps", timeout=10)
        self.assertLess(r.wall, 1.0, r)
        got, _ = self.ps()
        self.assertEqual(got[a]["state"], "frozen", (kind, got[a]))
        self.assertEqual(got[b]["state"], "running")
        r = self.cs("checkpoint", timeout=10)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("frozen", r.err)
        self.assertIn("thaw", r.err.lower())
        self.assertStates([b], "running")
        r = self.cs("checkpoint", "--pid", str(b), timeout=20)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.cs("restore", "--pid", str(b), timeout=20).rc, 0)
        self.freeze(False)
        self.assertStates([a, b], "running")
        self.assertDataOk([a, b])


if __name__ == "__main__":
    unittest.main(verbosity=2)
