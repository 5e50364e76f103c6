"""Restores at once onto one GPU through CRIU and cudasnap_plugin.so, beside
each other and beside the command line (criu_case.py: a real CRIU, the
driver double). Each restore books its room in the state directory from the
check until the driver answers, whoever runs it (lib/room/gpubook.h), so that two
restores that each fit alone are never both let through; the double's
allocations are atomic as the real driver's, so one let through without room
would show as LOST.

The GPU: 1 GiB, of which 300 MiB are held outside the test; two processes of
400 MiB: one fits at a time. A restore that finds no room fails: the plugin
kills the tree it restored and CRIU's restore fails with the images intact;
the command line leaves its process checkpointed. Either restores once the
other process is gone.
"""
import os
import signal
import threading

from criu_case import CriuCase, main


class Together(CriuCase):
    def setUp(self):
        super().setUp()
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        self.env["FAKECUDA_OTHER_USED_MIB"] = "300"

    def dumped(self, images):
        """A tree of one 400 MiB process, dumped into images."""
        pid, = self.tree("--mem", "400", expect=1)
        os.makedirs(images, exist_ok=True)
        r = self.criu("dump", "-t", str(self.root), "-D", images, "-L", self.plugins, log="dump.log")
        self.assertEqual(r.rc, 0, r)
        self.assertGone([pid])
        return pid

    def criu_restore(self, images, log="restore.log"):
        r = self.criu("restore", "-D", images, "-L", self.plugins, "-d", log=log)
        with open(os.path.join(images, log), errors="replace") as f:
            r.log = f.read()  # CRIU writes its log into the images directory it was given
        return r

    def at_once(self, *fns):
        out = [None] * len(fns)
        start = threading.Barrier(len(fns))

        def run(i):
            start.wait()
            out[i] = fns[i]()
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def assertRefusedRoom(self, r):
        """Refused for room before the driver was asked: by the check at the
        start of the GPU restore, or by the booking right before the call."""
        self.assertTrue(any("not asked of the driver" in line or "refused: its restore needs" in line
                            for line in r.cudasnap_lines()), r)

    def assertNothingLost(self, *runs):
        for r in runs:
            text = r.err + getattr(r, "log", "")
            self.assertNotIn("LOST", text, r)
            self.assertNotIn("CUDA_ERROR_OUT_OF_MEMORY", text, r)

    def test_two_criu_restores_at_once(self):
        a_img, b_img = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        a = self.dumped(a_img)
        b = self.dumped(b_img)
        self.fault("* restore delay=600")
        ra, rb = self.at_once(lambda: self.criu_restore(a_img), lambda: self.criu_restore(b_img))
        self.fault()
        self.reap()
        self.assertNothingLost(ra, rb)
        self.assertEqual(sorted([ra.rc == 0, rb.rc == 0]), [False, True], (ra, rb))
        won, lost_img = (a, b_img) if ra.rc == 0 else (b, a_img)
        failed = rb if ra.rc == 0 else ra
        self.assertRefusedRoom(failed)
        self.assertRunningAndOk([won])
        os.kill(won, signal.SIGKILL)
        self.reap([won])
        # the images of the one refused are intact
        r = self.criu_restore(lost_img, log="again.log")
        self.assertEqual(r.rc, 0, r)
        other = b if won == a else a
        self.tree_pids.append(other)
        self.assertRunningAndOk([other])

    def test_criu_restore_and_the_command_line_at_once(self):
        img = os.path.join(self.tmp, "a")
        a = self.dumped(img)
        b, = self.tree("--mem", "400", expect=1)
        r = self.cs("checkpoint", "--pid", str(b))
        self.assertEqual(r.rc, 0, r)
        # long enough for CRIU to reach its GPU restore while the command
        # line's is still in flight
        self.fault("* restore delay=3000")
        rc, rl = self.at_once(lambda: self.criu_restore(img), lambda: self.cs("restore", "--pid", str(b)))
        self.fault()
        self.reap()
        self.assertNothingLost(rc, rl)
        self.assertEqual(sorted([rc.rc == 0, rl.rc == 0]), [False, True], (rc, rl))
        if rc.rc == 0:
            self.assertIn(f"restore of process {b} (fakecuda-app) not asked of the driver", rl.err)
            self.assertStates([b], "checkpointed")
            self.assertRunningAndOk([a])
            os.kill(a, signal.SIGKILL)
            self.reap([a])
            self.assertEqual(self.cs("restore", "--pid", str(b)).rc, 0)
            self.assertRunningAndOk([b])
        else:
            self.assertRefusedRoom(rc)
            self.assertRunningAndOk([b])
            os.kill(b, signal.SIGKILL)
            self.reap([b])
            r = self.criu_restore(img, log="again.log")
            self.assertEqual(r.rc, 0, r)
            self.tree_pids.append(a)
            self.assertRunningAndOk([a])


if __name__ == "__main__":
    main()
