"""GPU memory before a restore: a restore that runs out of GPU memory
destroys the process's checkpointed state for good (driver 580), so cudasnap
never asks the driver for one that cannot fit. The driver double gives each
GPU FAKECUDA_GPU_TOTAL_MIB of memory, counts what the fake processes on it
hold, answers a restore that does not fit with CUDA_ERROR_OUT_OF_MEMORY and
then CUDA_ERROR_OPERATING_SYSTEM for good, as the real driver does.

Each test: processes checkpointed, another process (the "filler") takes GPU
memory, the restore is refused with the numbers and nothing changes, and
once the filler is gone the restore brings every process back with its data.
"""
import json
import os
import signal
import subprocess
import threading
import time
import unittest

from harness import APP, GPU0, Case

MIB = 1 << 20
TOTAL_MIB = 1024


class Room(Case):
    def setUp(self):
        super().setUp()
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = str(TOTAL_MIB)

    def filler(self, mib, after=0.0):
        """A process that holds mib MiB of the GPU's memory (after a delay
        of after seconds: started from a thread); returns its Popen (or the
        thread, whose .proc is set once it runs)."""
        def run():
            before = set(os.listdir(self.ready))
            p = subprocess.Popen([APP, "--ready-dir", self.ready, "--mem", str(mib)], env=self.env,
                                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.apps.append(p)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not [f for f in set(os.listdir(self.ready)) - before
                                                       if f == f"{p.pid}.ready"]:
                time.sleep(0.01)
            return p
        if not after:
            return run()
        th = threading.Thread(target=lambda: (time.sleep(after), setattr(th, "proc", run())))
        th.start()
        self.addCleanup(th.join)
        return th

    def stop(self, p):
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()

    def checkpointed(self, *mibs):
        pids = [self.start("--mem", str(m))[0] for m in mibs]
        # one at a time, in pid order: the manifest's order, which restore follows
        r = self.cs("checkpoint", "--sequential", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertStates(pids, "checkpointed")
        return pids

    def test_restore_refused_with_the_numbers_then_restored_once_there_is_room(self):
        pid, = self.checkpointed(64)
        f = self.filler(900)
        r = self.cs("restore", "--json")
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"process {pid} (fakecuda-app)", r.err)
        self.assertIn(f"on GPU 0 (NVIDIA H200, {GPU0})", r.err)
        self.assertRegex(r.err, r"restore needs 0\.2\d GiB")
        self.assertRegex(r.err, r"the GPU has 0\.1\d GiB free of 1\.00 GiB")
        self.assertIn("destroys the process's checkpointed state", r.err)
        self.assertIn("--wait-memory", r.obj["error"]["hint"])
        self.assertEqual(r.obj["outcome"], "error")
        self.assertEqual([(x["pid"], x["code"]) for x in r.obj["refused"]], [(pid, "gpu-memory")], r)
        self.assertStates([pid], "checkpointed")
        d = self.cs("restore", "--dry-run", "--json")
        self.assertEqual((d.rc, d.obj["real_exit_status"]), (1, 2), d)
        entry, = [p for p in d.obj["processes"] if p["target"]]
        self.assertEqual([x["code"] for x in entry["reasons"] if x["blocks"]], ["gpu-memory"])
        gm = entry["gpu_memory"]
        self.assertEqual(gm["gpu_bytes_known"], "exact")
        g, = gm["gpus"]
        self.assertEqual((g["uuid"], g["index"]), (GPU0, 0))
        self.assertGreater(g["bytes_needed"], 64 * MIB)
        self.assertLess(g["free_bytes"], g["bytes_needed"])
        self.stop(f)
        d = self.cs("restore", "--dry-run", "--json")
        self.assertEqual((d.rc, d.obj["go"]), (0, True), d)
        self.assertGreater(d.obj["totals"]["gpu_bytes"], 64 * MIB)
        r = self.cs("restore", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertStates([pid], "running")
        self.assertDataOk([pid])

    def test_processes_restored_onto_one_gpu_add_up(self):
        a, b = self.checkpointed(200, 200)
        f = self.filler(500)
        r = self.cs("restore", "--json")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("1 of the 2 fit", r.err)
        self.assertIn("with the 1 other process restored onto it", r.err)
        self.assertStates([a, b], "checkpointed")
        r = self.cs("restore", "--pid", str(a))
        self.assertEqual(r.rc, 0, r)
        r = self.cs("restore", "--pid", str(b))
        self.assertEqual(r.rc, 2, r)
        self.stop(f)
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertStates([a, b], "running")
        self.assertDataOk([a, b])

    def test_wait_memory_waits_for_room(self):
        pid, = self.checkpointed(64)
        f = self.filler(900)
        threading.Timer(2.0, self.stop, (f,)).start()
        r = self.cs("restore", "--wait-memory", "30", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertGreaterEqual(r.wall, 1.9, r)
        self.assertIn("waiting up to", r.err)
        self.assertStates([pid], "running")
        self.assertDataOk([pid])

    def test_wait_memory_runs_out(self):
        pid, = self.checkpointed(64)
        self.filler(900)
        r = self.cs("restore", "--wait-memory", "2", "--json")
        self.assertEqual(r.rc, 2, r)
        self.assertGreaterEqual(r.wall, 2.0, r)
        self.assertIn("waiting up to", r.err)
        self.assertStates([pid], "checkpointed")
        # The setting does what the option does.
        r = self.cs("restore", env={"CUDASNAP_WAIT_MEMORY": "1"})
        self.assertEqual(r.rc, 2, r)
        self.assertGreaterEqual(r.wall, 1.0, r)
        r = self.cs("restore", env={"CUDASNAP_WAIT_MEMORY": "soon"})
        self.assertEqual(r.rc, 2, r)
        self.assertIn("CUDASNAP_WAIT_MEMORY is not a whole number", r.err)
        self.assertStates([pid], "checkpointed")

    def test_driver_out_of_memory_is_lost_never_back_in_its_state(self):
        """Told to ignore the check, the restore runs out of memory in the
        driver, which destroys the state: LOST, exit 3, and every later
        restore fails."""
        pid, = self.checkpointed(64)
        f = self.filler(990)
        r = self.cs("restore", "--ignore-gpu-memory", "--json")
        self.assertEqual(r.rc, 3, r)
        self.assertIn("LOST", r.err)
        self.assertNotIn("back in its state", r.err)
        p, = r.obj["processes"]
        self.assertTrue(p["lost"] and p["unrestorable"], r)
        self.assertIn("destroys", p["lost_why"])
        self.stop(f)
        r = self.cs("restore", "--json")
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn("CUDA_ERROR_OPERATING_SYSTEM", r.err)

    def test_gpu_filled_between_the_check_and_a_restore(self):
        """One at a time: while the first restore runs, another process
        takes the GPU; the second is checked again right before its own
        restore and refused without a driver call, and the first is
        returned to checkpointed."""
        a, b = self.checkpointed(64, 64)
        self.fault(f"{a} restore delay=6000 1")
        self.filler(820, after=1.5)
        r = self.cs("restore", "--sequential", "--json")
        self.assertEqual(r.rc, 1, r)
        self.assertIn(f"restore of process {b} (fakecuda-app) not asked of the driver", r.err)
        self.assertIn("every process is back in its state", r.err)
        self.assertStates([a, b], "checkpointed")

    def test_rollback_restore_without_room_leaves_the_process_checkpointed(self):
        a, b = [self.start("--mem", "64")[0] for _ in range(2)]
        self.fault(f"{b} checkpoint delay=6000 1", f"{b} checkpoint error=999 1")
        th = self.filler(900, after=1.5)
        r = self.cs("checkpoint", "--sequential", "--json")
        self.assertEqual(r.rc, 3, r)
        self.assertIn("LEFT BEHIND", r.err)
        self.assertIn("the rollback did not ask the driver to restore it", r.err)
        self.assertIn(f"cudasnap restore --pid {a}", r.err)
        self.assertStates([a], "checkpointed")
        self.assertStates([b], "running")
        self.assertDataOk([b])
        th.join()
        self.stop(th.proc)
        r = self.cs("restore", "--pid", str(a))
        self.assertEqual(r.rc, 0, r)
        self.assertDataOk([a, b])

    def test_hook_restore_refused(self):
        pid, = self.checkpointed(64)
        f = self.filler(900)
        env = {"GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE": "restore"}
        r = self.cs("hook", env=env)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("restore refused", r.err)
        self.assertStates([pid], "checkpointed")
        self.stop(f)
        self.assertEqual(self.cs("hook", env=env).rc, 0)
        self.assertDataOk([pid])

    def test_drop_in_refuses_in_nvidia_words(self):
        os.makedirs(self.state, mode=0o700)
        pid, = self.start("--mem", "64")
        r = self.cc("--toggle", "--pid", pid)
        self.assertEqual((r.rc, r.out, r.err), (0, "", ""), r)
        with open(os.path.join(self.state, "manifest.json")) as m:
            e, = json.load(m)["processes"]
        self.assertEqual(e["pid"], pid)
        self.assertGreaterEqual(e["bytes"], 64 * MIB)
        self.assertEqual([g["uuid"] for g in e["used_gpus"]], [GPU0])
        f = self.filler(900)
        for args in (("--toggle",), ("--action", "restore")):
            r = self.cc(*args, "--pid", pid)
            self.assertEqual((r.rc, r.out), (1, ""), r)
            first = r.err.splitlines()[0]
            self.assertTrue(first.startswith(f"Error toggling CUDA in process ID {pid}: \"restore refused"
                                             if args == ("--toggle",) else
                                             f"Could not restore on process ID {pid}: \"restore refused"), r)
            self.assertIn("cuda-checkpoint: hint: ", r.err)
            self.assertStates([pid], "checkpointed")
        self.stop(f)
        r = self.cc("--toggle", "--pid", pid)
        self.assertEqual((r.rc, r.out, r.err), (0, "", ""), r)
        self.assertFalse(os.path.exists(os.path.join(self.state, "manifest.json")))
        self.assertDataOk([pid])

    def test_without_a_record_the_need_is_bounded_by_resident_memory(self):
        """A process checkpointed where no record is kept (the drop-in
        without a state directory): its resident memory, which holds its
        checkpointed data, bounds its need."""
        pid, = self.start("--mem", "64")
        r = self.cc("--toggle", "--pid", pid)
        self.assertEqual(r.rc, 0, r)
        self.assertFalse(os.path.exists(self.state))
        d = self.cs("restore", "--dry-run", "--json")
        self.assertEqual(d.rc, 0, d)
        entry, = [p for p in d.obj["processes"] if p["target"]]
        self.assertEqual(entry["gpu_memory"]["gpu_bytes_known"], "at-most")
        self.assertGreater(entry["gpu_memory"]["gpu_bytes_needed"], 64 * MIB)
        self.filler(900)
        r = self.cs("restore")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("needs up to", r.err)
        self.assertIn("its record gives no size", r.err)
        self.assertStates([pid], "checkpointed")

    def test_judged_on_the_gpu_the_device_map_restores_onto(self):
        gpu1 = "GPU-11111111-1111-4111-8111-111111111111"
        self.env["FAKECUDA_GPUS"] = f"{GPU0},{gpu1}"
        with open(os.path.join(self.dev, "nvidia1"), "w"):
            pass
        pid, = self.checkpointed(64)
        self.env["CUDA_VISIBLE_DEVICES"] = "1"
        self.filler(900)
        del self.env["CUDA_VISIBLE_DEVICES"]
        r = self.cs("restore", "--device-map", f"{GPU0}={gpu1},{gpu1}={GPU0}")
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"on GPU 1 (NVIDIA H200, {gpu1})", r.err)
        self.assertStates([pid], "checkpointed")
        r = self.cs("restore")
        self.assertEqual(r.rc, 0, r)
        self.assertStates([pid], "running")
        self.assertDataOk([pid])

if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
