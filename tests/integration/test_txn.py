"""checkpoint / restore / lock / unlock as transactions, against the test double."""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

from harness import APP, BIN, GPU0, GPU1, Case


class Transaction(Case):
    def tree(self, mem="4"):
        return self.start("--spawn", "2", "--mem", mem, expect=3)

    def test_checkpoint_and_restore_a_three_process_tree(self):
        pids = self.tree()
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.obj["outcome"], "done")
        self.assertEqual(sorted(p["pid"] for p in r.obj["processes"]), pids)
        self.assertStates(pids, "checkpointed")
        man = os.path.join(self.state, "manifest.json")
        self.assertEqual(os.stat(man).st_mode & 0o777, 0o600)
        with open(man) as f:
            m = json.load(f)
        self.assertEqual(sorted(e["pid"] for e in m["processes"]), pids)
        self.assertTrue(all(e["start_time"] > 0 for e in m["processes"]))
        self.assertIn("checkpoint", m["processes"][0]["seconds"])
        self.assertEqual([e["gpus"] for e in m["processes"]], [[GPU0]] * 3)
        r = self.cs("restore", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertStates(pids, "running")
        self.assertFalse(os.path.exists(man))
        self.assertDataOk(pids)

    def fault_matrix(self, command, setup, op, start_state):
        for which in (0, 1, 2):
            with self.subTest(op=op, which=which):
                pids = self.tree("1")
                if setup:
                    self.assertEqual(self.cs(setup).rc, 0)
                self.fault(f"{pids[which]} {op} error=999 1")
                r = self.cs(command, "--json")
                self.assertEqual(r.rc, 1, r)
                self.assertEqual(r.obj["outcome"], "rolled-back", r)
                self.assertIn("CUDA_ERROR_UNKNOWN", r.err)
                self.assertIn(f"{op} of process {pids[which]}", r.err)
                self.assertStates(pids, start_state)
                os.unlink(self.faults)
                if setup:
                    self.assertEqual(self.cs("restore").rc, 0)
                self.assertDataOk(pids)
                self.doCleanups()
                self.setUp()

    def test_error_at_lock_rolls_back(self):
        self.fault_matrix("checkpoint", None, "lock", "running")

    def test_error_at_checkpoint_rolls_back(self):
        self.fault_matrix("checkpoint", None, "checkpoint", "running")

    def test_error_at_restore_rolls_back(self):
        self.fault_matrix("restore", "checkpoint", "restore", "checkpointed")

    def test_error_at_unlock_rolls_back(self):
        self.fault_matrix("restore", "checkpoint", "unlock", "checkpointed")

    def test_error_in_lock_and_unlock_commands(self):
        pids = self.tree("1")
        self.fault(f"{pids[2]} lock error=999 1")
        self.assertEqual(self.cs("lock").rc, 1)
        self.assertStates(pids, "running")
        self.assertEqual(self.cs("lock").rc, 0)
        self.assertStates(pids, "locked")
        self.fault(f"{pids[0]} unlock error=999 1")
        self.assertEqual(self.cs("unlock").rc, 1)
        self.assertStates(pids, "locked")
        self.assertEqual(self.cs("unlock").rc, 0)
        self.assertStates(pids, "running")

    def test_lock_timeout_behind_a_long_kernel(self):
        a, = self.start()
        b, = self.start("--kernel-loop", "3000")
        time.sleep(0.3)
        r = self.cs("checkpoint", "--timeout", "500")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("CUDA_ERROR_NOT_READY", r.err)
        self.assertIn("--timeout", r.err)
        self.assertLess(r.wall, 2.5)
        self.assertStates([a, b], "running")

    def test_process_exits_during_checkpoint(self):
        """A process that dies while its memory moves is lost: exit 3, named
        as lost, never "back in its state"; the others are rolled back."""
        pids = self.tree("1")
        self.fault(f"{pids[1]} checkpoint exit")
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 3, r)
        self.assertEqual(r.obj["outcome"], "incomplete")
        self.assertEqual(r.obj["lost"], 1)
        final = {p["pid"]: p["final_state"] for p in r.obj["processes"]}
        self.assertEqual(final[pids[1]], "exited")
        lost = [p for p in r.obj["processes"] if p["lost"]]
        self.assertEqual([p["pid"] for p in lost], [pids[1]])
        self.assertIn("exited during its checkpoint", lost[0]["lost_why"])
        self.assertIn("LOST", r.err)
        self.assertNotIn("every process is back", r.err)
        survivors = [p for p in pids if p != pids[1]]
        self.assertStates(survivors, "running")
        self.assertDataOk(survivors)

    def test_sigint_during_checkpoint_rolls_back(self):
        pids = self.tree("1")
        self.fault("* checkpoint delay=1500")
        p = subprocess.Popen([BIN, "checkpoint"], env=self.env, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 1, err)
        self.assertIn("interrupted", err)
        self.assertStates(pids, "running")
        self.assertDataOk(pids)

    def test_two_operations_on_one_process_exclude_each_other(self):
        pids = self.tree("1")
        self.fault("* lock delay=1500")
        first = subprocess.Popen([BIN, "checkpoint"], env=self.env, stderr=subprocess.PIPE, text=True)
        time.sleep(0.4)
        second = self.cs("checkpoint", "--pid", str(pids[1]))
        self.assertEqual(second.rc, 2, second)
        self.assertIn(f"another cudasnap is running on process {pids[1]} (", second.err)
        self.assertIn(f"pid {first.pid}", second.err)
        self.assertIn("checkpoint", second.err)
        first.communicate(timeout=30)
        self.assertEqual(first.returncode, 0)
        self.assertStates(pids, "checkpointed")
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertEqual(self.claim_records(), [], "claims left behind")
        self.assertEqual(self.bookings(), [], "bookings left behind")

    def test_operations_on_other_processes_run_side_by_side(self):
        """A checkpoint of b while a's takes 5 s: b's neither waits for a's
        claim nor asks the driver about a (which would answer only once its
        checkpoint is over)."""
        a = self.start("--mem", "1")
        b = self.start("--mem", "1")
        self.fault(f"{a[0]} checkpoint delay=5000")
        first = subprocess.Popen([BIN, "checkpoint", "--pid", str(a[0])], env=self.env, stderr=subprocess.PIPE,
                                 text=True)
        time.sleep(1)
        second = self.cs("checkpoint", "--pid", str(b[0]))
        first.communicate(timeout=30)
        self.assertEqual(second.rc, 0, second)
        self.assertEqual(first.returncode, 0)
        self.assertLess(second.wall, 3, f"waited for the other checkpoint: {second}")
        self.assertStates(a + b, "checkpointed")
        # Both are in the manifest, whichever wrote it last.
        with open(os.path.join(self.state, "manifest.json")) as f:
            self.assertEqual(sorted(e["pid"] for e in json.load(f)["processes"]), sorted(a + b))
        r = self.cs("restore", "--pid", str(a[0]))
        self.assertEqual(r.rc, 0, r)
        with open(os.path.join(self.state, "manifest.json")) as f:
            self.assertEqual([e["pid"] for e in json.load(f)["processes"]], b)
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertStates(a + b, "running")
        self.assertDataOk(a + b)

    def claim_path(self, pid):
        ino = os.stat(f"/proc/{pid}/ns/pid").st_ino
        with open(f"/proc/{pid}/status") as f:
            nspid = next(line.split()[-1] for line in f if line.startswith("NSpid:"))
        return os.path.join(self.state, "claims", f"{ino}-{nspid}")

    def hold_claim(self, pid, owner_line):
        """A child that takes the claim of pid with flock and writes nothing, as
        a cudasnap does in the moment between its flock and its owner line."""
        path = self.claim_path(pid)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with open(path, "w") as f:
            f.write(owner_line)
        code = ("import fcntl, os, sys\n"
                "fd = os.open(sys.argv[1], os.O_RDWR)\n"
                "fcntl.flock(fd, fcntl.LOCK_EX)\n"
                "print('held', flush=True)\n"
                "sys.stdin.read()\n")
        child = subprocess.Popen([sys.executable, "-c", code, path], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        self.addCleanup(self.release, child)
        self.assertEqual(child.stdout.readline(), "held\n")
        return child, path

    @staticmethod
    def release(child):
        if child.returncode is None:
            child.kill()
            child.communicate()

    def test_holder_is_named_before_it_writes_its_owner_line(self):
        # An empty claim file, and one whose owner line an earlier holder left.
        for line in ("", "pid 999999, 'checkpoint'\n"):
            with self.subTest(owner_line=line):
                pid = self.start("--mem", "1")[0]
                child, path = self.hold_claim(pid, line)
                r = self.cs("lock")
                self.assertEqual(r.rc, 2, r)
                exe = os.path.basename(sys.executable)
                self.assertRegex(r.err, f"another cudasnap is running on process {pid} \\([^)]*\\): "
                                 f"pid {child.pid}, '{exe} -c import fcntl")
                self.assertNotIn("unknown process", r.err)
                self.assertNotIn("999999", r.err)
                self.assertLess(r.wall, 5)
                self.release(child)
                self.assertStates([pid], "running")
                if os.path.exists(path):  # ps removes a record nobody holds, of a running process
                    os.unlink(path)
                self.doCleanups()
                self.setUp()

    def test_holder_is_read_from_proc_locks(self):
        """/proc/locks (a fake /proc, through CUDASNAP_PROC_DIR, whose entries
        link to the real ones): waiters and other files are skipped, device
        numbers are hex, the command line is cut short and its control bytes
        replaced."""
        pid = self.start("--mem", "1")[0]
        child, path = self.hold_claim(pid, "")
        st = os.stat(path)
        dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
        proc = os.path.join(self.tmp, "proc")
        os.makedirs(os.path.join(proc, "4242"))
        os.symlink(f"/proc/{pid}", os.path.join(proc, str(pid)))
        with open(os.path.join(proc, "locks"), "w") as f:
            f.write(f"1: POSIX  ADVISORY  WRITE 4000 {dev}:{st.st_ino} 0 EOF\n"
                    f"2: FLOCK  ADVISORY  WRITE 4001 {dev}:{st.st_ino + 1} 0 EOF\n"
                    f"3: FLOCK  ADVISORY  WRITE 4242 {dev}:{st.st_ino} 0 EOF\n"
                    f"3: -> FLOCK  ADVISORY  WRITE 4003 {dev}:{st.st_ino} 0 EOF\n")
        with open(os.path.join(proc, "4242", "cmdline"), "wb") as f:
            f.write(b"/opt/bin/trainer\0--name\0\x1b[31mred\0" + b"x" * 300 + b"\0")
        r = self.cs("lock", env={"CUDASNAP_PROC_DIR": proc})
        self.assertEqual(r.rc, 2, r)
        self.assertRegex(r.err, r"another cudasnap is running on process \d+ \([^)]*\): "
                         r"pid 4242, 'trainer --name \?\[31mred x+\.\.\.'")
        self.assertNotIn(f"pid {child.pid},", r.err)

    def test_pid_reuse_at_restore_is_refused(self):
        pids = self.tree("1")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        with open(man) as f:
            m = json.load(f)
        m["processes"][1]["start_time"] += 7
        with open(man, "w") as f:
            json.dump(m, f)
        r = self.cs("restore")
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"PID {m['processes'][1]['pid']} was reused", r.err)
        self.assertStates(pids, "checkpointed")
        self.assertEqual(self.cs("restore", "--ignore-manifest").rc, 0)
        self.assertStates(pids, "running")

    def test_partial_restore_keeps_the_rest_of_the_manifest(self):
        pids = self.tree("1")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        self.assertEqual(self.cs("restore", "--pid", str(pids[1])).rc, 0)
        with open(man) as f:
            left = sorted(e["pid"] for e in json.load(f)["processes"])
        self.assertEqual(left, [pids[0], pids[2]])
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertFalse(os.path.exists(man))
        self.assertStates(pids, "running")

    def test_corrupt_manifest_falls_back_to_discovery(self):
        pids = self.tree("1")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        with open(os.path.join(self.state, "manifest.json"), "w") as f:
            f.write('{"version": 1, "processes": [')
        r = self.cs("restore")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("corrupt or truncated", r.err)
        self.assertStates(pids, "running")

    def test_restore_follows_checkpoint_order(self):
        pids = self.tree("1")
        self.assertEqual(self.cs("checkpoint", "--sequential").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        with open(man) as f:
            m = json.load(f)
        self.assertEqual([e["pid"] for e in m["processes"]], pids)
        for e in m["processes"]:
            e["order"] = len(pids) - 1 - e["order"]
        with open(man, "w") as f:
            json.dump(m, f)
        r = self.cs("restore", "--sequential")
        self.assertEqual(r.rc, 0, r)
        order = [int(l.split()[1]) for l in r.err.splitlines() if " restore: " in l]
        self.assertEqual(order, list(reversed(pids)))

    def test_host_pid_is_rejected_before_the_driver(self):
        r = self.cs("checkpoint", "--pid", "4000000")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("no such process in this PID namespace", r.err)
        self.assertIn("nvidia-smi", r.err)
        self.assertNotIn("304", r.err)

    def test_non_cuda_pid_is_rejected(self):
        pid, = self.start("--open-device")
        r = self.cs("checkpoint", "--pid", str(pid))
        self.assertEqual(r.rc, 2, r)
        self.assertIn("not a CUDA process", r.err)

    def test_thread_id_names_its_process(self):
        pid, = self.start()
        tid = self.ps()[0][pid]["restore_tid"]
        r = self.cs("lock", "--pid", str(tid), "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual([p["pid"] for p in r.obj["processes"]], [pid])
        self.assertEqual(self.cs("unlock").rc, 0)

    def test_nothing_selected(self):
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.obj["outcome"], "nothing-to-do")
        self.assertIn("no CUDA process", r.err)

    def test_already_checkpointed_is_left_alone(self):
        a, = self.start()
        b, = self.start()
        self.assertEqual(self.cs("checkpoint", "--pid", str(a)).rc, 0)
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 0, r)
        skipped = {p["pid"]: p["skipped"] for p in r.obj["processes"]}
        self.assertEqual(skipped, {a: True, b: False})
        self.assertIn(f"{a} (fakecuda-app) left as it was: checkpointed", r.err)

    def test_tree_and_cgroup_selection(self):
        pids = self.tree("1")
        other, = self.start()
        parent = [p for p in pids if self.role(p) == "parent"][0]
        r = self.cs("lock", "--tree", str(parent), "--json")
        self.assertEqual(sorted(p["pid"] for p in r.obj["processes"]), pids)
        self.assertStates([other], "running")
        self.assertEqual(self.cs("unlock").rc, 0)
        with open(f"/proc/{other}/cgroup") as f:
            cg = f.read().splitlines()[0].split(":", 2)[2]
        r = self.cs("lock", "--cgroup", cg, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertIn(other, [p["pid"] for p in r.obj["processes"]])
        self.assertEqual(self.cs("unlock").rc, 0)

    def test_rollback_incomplete_exits_3_and_names_the_process(self):
        pids = self.tree("1")
        # The last checkpoint fails; the rollback's restore of the first fails too.
        self.fault(f"{pids[2]} checkpoint error=999 1", f"{pids[0]} restore error=999 1")
        r = self.cs("checkpoint", "--sequential", "--json")
        self.assertEqual(r.rc, 3, r)
        self.assertEqual(r.obj["outcome"], "incomplete")
        self.assertIn("LEFT BEHIND", r.err)
        left = [p for p in r.obj["processes"] if p["rollback_failed"]]
        self.assertEqual([(p["pid"], p["final_state"]) for p in left], [(pids[0], "checkpointed")])
        self.assertStates(pids[1:], "running")
        os.unlink(self.faults)
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertDataOk(pids)

    def test_leftover_reference_warns_or_fails_with_strict(self):
        pid, = self.start()
        self.fault(f"{pid} checkpoint leak-fd")
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("warning:", r.err)
        self.assertEqual([l["pid"] for l in r.obj["leftovers"]], [pid])
        self.assertEqual(self.cs("restore").rc, 0)
        r = self.cs("checkpoint", "--strict", "--json")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("--strict", r.err)
        self.assertStates([pid], "running")

    def test_a_cuda_process_left_out_is_named_so_and_strict_does_not_call_it_an_error(self):
        # --strict fails on references in the selection's scope; a CUDA
        # process the selection leaves out is a warning, and a CUDA one
        pid, other = self.start()[0], self.start()[0]
        r = self.cs("checkpoint", "--pid", str(pid), "--strict")
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"warning: {other} (fakecuda-app, cuda, not selected) holds", r.err)
        self.assertNotIn("error:", r.err)
        self.assertNotIn("device-holder", r.err)
        self.assertEqual(self.cs("restore", "--pid", str(pid)).rc, 0)

    def test_every_json_object_says_its_schema_version(self):
        pid, = self.start()
        for args in (("ps", "--json"), ("verify", "--json"), ("doctor", "--json"),
                     ("lock", "--dry-run", "--json"), ("checkpoint", "--json"), ("restore", "--json"),
                     ("restore", "--device-map", "GPU-1", "--json")):
            with self.subTest(args=args):
                r = self.cs(*args)
                self.assertIsNotNone(r.obj, r)
                self.assertEqual(r.obj["schema_version"], 1, r)

    def test_restore_without_persistence_mode_calls_cuinit(self):
        pid, = self.start()
        self.assertEqual(self.cs("checkpoint").rc, 0)
        r = self.cs("restore", "--no-init", env={"FAKECUDA_PERSISTENCE": "0"})
        self.assertEqual(r.rc, 1, r)
        self.assertIn("persistence", r.err)
        self.assertStates([pid], "checkpointed")
        r = self.cs("restore", env={"FAKECUDA_PERSISTENCE": "0"})
        self.assertEqual(r.rc, 0, r)
        self.assertStates([pid], "running")


class DeviceMap(Case):
    gpus = f"{GPU0},{GPU1}"

    def setUp(self):
        super().setUp()
        self.pid, = self.start()
        self.assertEqual(self.cs("checkpoint").rc, 0)

    def test_malformed_maps_are_rejected(self):
        for bad in ("GPU-123", "0", "0=", "=1", "0=1=2", "0=7", "0=1,0=1"):
            with self.subTest(bad=bad):
                r = self.cs("restore", "--device-map", bad)
                self.assertEqual(r.rc, 2, r)
                self.assertIn("--device-map", r.err)
        self.assertStates([self.pid], "checkpointed")

    def test_map_must_cover_every_visible_gpu(self):
        r = self.cs("restore", "--device-map", f"{GPU0}={GPU1}")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("leaves out GPU 1", r.err)
        self.assertStates([self.pid], "checkpointed")

    def test_manifest_names_the_gpus_each_process_sees(self):
        pid, = self.start(env={"CUDA_VISIBLE_DEVICES": "1"})
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertEqual(self.cs("checkpoint").rc, 0)
        with open(os.path.join(self.state, "manifest.json")) as f:
            gpus = {e["pid"]: e["gpus"] for e in json.load(f)["processes"]}
        self.assertEqual(gpus, {self.pid: [GPU0, GPU1], pid: [GPU1]})
        r = self.cs("restore", "--device-map", f"{GPU1}={GPU0}", "--pid", str(pid))
        self.assertEqual(r.rc, 0, r)

    def test_swap_by_uuid_and_by_index(self):
        r = self.cs("restore", "--device-map", f"{GPU0}={GPU1},{GPU1}={GPU0}")
        self.assertEqual(r.rc, 0, r)
        self.assertDataOk([self.pid])
        self.assertEqual(self.cs("checkpoint").rc, 0)
        r = self.cs("restore", "-d", "0=1,1=0")
        self.assertEqual(r.rc, 0, r)
        self.assertStates([self.pid], "running")

    def test_unknown_gpu_is_refused_before_the_driver_and_stays_checkpointed(self):
        ghost = "GPU-99999999-9999-4999-8999-999999999999"
        r = self.cs("restore", "--device-map", f"{GPU0}={ghost},{GPU1}={GPU1}", "--json")
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"{ghost}, which is not a GPU of this machine", r.err)
        self.assertNotIn("CUDA_ERROR", r.err)
        # the fix maps the GPU it used (the OLD side) onto one that is here
        self.assertNotIn(f"--device-map {ghost}=", r.err)
        self.assertIn(f"map each GPU it used ({GPU0}", r.err)
        self.assertStates([self.pid], "checkpointed")
        self.assertEqual(self.cs("restore").rc, 0)

    def test_unknown_gpu_fails_in_the_driver_when_told_to_ignore_gpu_memory(self):
        ghost = "GPU-99999999-9999-4999-8999-999999999999"
        r = self.cs("restore", "--device-map", f"{GPU0}={ghost},{GPU1}={GPU1}", "--ignore-gpu-memory")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("CUDA_ERROR_INVALID_VALUE", r.err)
        self.assertStates([self.pid], "checkpointed")
        self.assertEqual(self.cs("restore").rc, 0)


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
