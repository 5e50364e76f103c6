"""criu dump and criu restore (with cudasnap_plugin.so) of a program that runs
the parking interposer: its control socket is an ordinary listening unix
socket that CRIU carries, and nothing cudasnap does during the dump may leave
a connection waiting in it (CRIU refuses to dump a listening socket holding
one whose peer has gone). After the restore the interposer answers again,
and parks and unparks."""
import os
import signal
import subprocess
import time
import unittest

from criu_case import CriuCase
from harness import BIN

CUAPP = os.environ.get("FAKE_CUAPP", "")
PARK_LIB = os.environ.get("PARK_LIB", "")


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class ParkUnderCriu(CriuCase):
    def start(self):
        # output to a file: CRIU restores files, not a pipe to this test
        self.out = os.path.join(self.tmp, "app.out")
        env = dict(self.env, CUDASNAP_PARK_LIB=PARK_LIB, CUDASNAP_PARK_DIR=self.tmp)
        asan = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        with open(self.out, "ab") as out:
            p = subprocess.Popen([BIN, "run", "--", CUAPP, "--alloc-mib", "8", "--allocs", "2", "--interval-ms", "50"],
                                 env=env, start_new_session=True, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        self.apps.append(p)
        self.root = p.pid
        self.tree_pids.append(p.pid)
        self.assertTrue(self.wait_line("ready"), self.text())
        return p.pid

    def text(self):
        with open(self.out, errors="replace") as f:
            return f.read()

    def wait_line(self, prefix, after=0, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [ln for ln in self.text().splitlines()[after:] if ln.startswith(prefix)]
            if lines:
                return lines[-1]
            time.sleep(0.05)
        return None

    def verify(self, pid):
        n = len(self.text().splitlines())
        os.kill(pid, signal.SIGUSR1)
        return self.wait_line("verify", after=n)

    def lines(self, run, word):
        return [ln for ln in run.cudasnap_lines() if word in ln]

    def parked(self, pid):
        return f"parked: {pid} (" in self.cs("ps").out

    def test_dump_and_restore_then_park(self):
        pid = self.start()
        r = self.cs("ps")
        self.assertIn(f"parking: {pid} (", r.out)
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        # parked before the lock: the driver checkpointed the context alone
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) parked 0.02 GiB"), r)
        self.assertGone([pid])
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        # unparked once CRIU let it run, in the plugin's exit
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) unparked 0.02 GiB"), r)
        self.assertFalse(self.parked(pid))
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")
        # the interposer answers again: a parked cycle, data verified
        r = self.cs("checkpoint", "--pid", str(pid), "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("park", r.obj["processes"][0]["seconds"])
        r = self.cs("restore", "--pid", str(pid))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    def test_lock_fails_after_park(self):
        """The lock fails after the park: the dump fails, and the process
        unparks while it still runs, its data intact."""
        pid = self.start()
        self.fault(f"{pid} lock error=999 1")
        r = self.dump("--shell-job")
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) unparked again after its failed lock"), r)
        os.unlink(self.faults)
        self.assertStates([pid], "running")
        self.assertFalse(self.parked(pid))
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    def test_leave_running_unparks_once_resumed(self):
        """criu dump --leave-running: the way back restores and unlocks the
        process while CRIU holds it, and it unparks once CRIU lets it go."""
        pid = self.start()
        r = self.dump("--shell-job", "--leave-running")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) unparks its 0.02 GiB once CRIU lets it run"), r)
        deadline = time.monotonic() + 20
        while self.parked(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertFalse(self.parked(pid))
        self.assertStates([pid], "running")
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")
        # the images restore too, once the original is gone
        os.kill(pid, signal.SIGKILL)
        self.assertGone([pid])
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    def test_failed_unpark_after_restore(self):
        """The unpark after the restore fails (no GPU memory to map back): the
        GPU restore failed, and the restored process is killed as for any
        failed GPU restore; the images are intact and restore once the cause
        is gone."""
        pid = self.start()
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertGone([pid])
        self.fault("* mem_create error=2")  # out of GPU memory
        r = self.restore()
        self.assertTrue(self.lines(r, "unpark of process"), r)
        self.assertTrue(self.lines(r, "the GPU restore failed"), r)
        self.assertGone([pid])
        os.unlink(self.faults)
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")


if __name__ == "__main__":
    unittest.main(verbosity=2)
