"""cudasnap ps against the driver test double (issue: foundation)."""
import json
import os
import unittest

from harness import APP, LIBCUDA_LEGACY, Case


class Ps(Case):
    def test_parent_with_two_spawned_cuda_children(self):
        pids = self.start("--spawn", "2", expect=3)
        got, obj = self.ps()
        self.assertTrue(obj["driver"]["loaded"])
        self.assertEqual(obj["driver"]["version"], 13000)
        parent = [p for p in pids if self.role(p) == "parent"][0]
        for pid in pids:
            p = got[pid]
            self.assertEqual((p["class"], p["state"]), ("cuda", "running"), p)
            self.assertGreater(p["device_fds"], 0)
            self.assertGreater(p["device_maps"], 0)
            self.assertTrue(os.path.exists(f"/proc/{pid}/task/{p['restore_tid']}"), p)
            if pid != parent:
                self.assertEqual(p["parent"], parent)
        table = self.cs("ps").out
        self.assertRegex(table, r"\n\d+ +\d+ +  \\_ \S+ +cuda ")
        self.assertIn("3 cuda (3 running", table)

    def test_child_forked_after_init_is_a_device_holder(self):
        pids = self.start("--fork-after-init", "1", expect=2)
        got, _ = self.ps()
        for pid in pids:
            want = "device-holder" if self.role(pid) == "forked" else "cuda"
            self.assertEqual(got[pid]["class"], want, got[pid])
        forked = [p for p in pids if self.role(p) == "forked"][0]
        self.assertIsNone(got[forked]["state"])
        self.assertEqual(got[forked]["driver_answer"], "CUDA_ERROR_NOT_INITIALIZED")
        self.assertGreater(got[forked]["device_fds"], 0)

    def test_process_that_opened_device_files_itself(self):
        pid, = self.start("--open-device")
        p = self.ps()[0][pid]
        self.assertEqual(p["class"], "device-holder")
        self.assertGreaterEqual(p["device_fds"], 1)
        self.assertGreaterEqual(p["device_maps"], 1)

    def test_nvml_only_process_is_cuda(self):
        pid, = self.start("--nvml-only")
        p = self.ps()[0][pid]
        self.assertEqual((p["class"], p["state"]), ("cuda", "running"))
        self.assertTrue(p["maps_nvml"])

    def test_library_loaded_but_never_initialized_is_not_listed(self):
        pid, = self.start("--no-init")
        self.assertNotIn(pid, self.ps()[0])

    def test_checkpointed_process_is_still_found(self):
        pid, = self.start()
        r = self.cs("checkpoint", "--pid", str(pid))
        self.assertEqual(r.rc, 0, r)
        p = self.ps()[0][pid]
        self.assertEqual((p["state"], p["device_fds"], p["device_maps"]), ("checkpointed", 0, 0), p)
        self.assertEqual(self.cs("restore").rc, 0)

    def test_no_driver_still_lists_device_holders(self):
        pids = self.start("--spawn", "1", expect=2)
        got, obj = self.ps(env={"CUDASNAP_LIBCUDA": "/nonexistent/libcuda.so.1"})
        self.assertFalse(obj["driver"]["loaded"])
        self.assertIn("cannot load", obj["driver"]["error"])
        for pid in pids:
            self.assertEqual((got[pid]["class"], got[pid]["state"]), ("device-holder", None))
        r = self.cs("ps", env={"CUDASNAP_LIBCUDA": "/nonexistent/libcuda.so.1"})
        self.assertEqual(r.rc, 0)
        self.assertIn("no checkpoint states are shown", r.out)
        r = self.cs("checkpoint", env={"CUDASNAP_LIBCUDA": "/nonexistent/libcuda.so.1"})
        self.assertEqual(r.rc, 2, r)
        self.assertIn("hint:", r.err)

    def test_driver_without_checkpoint_api_names_the_symbol(self):
        _, obj = self.ps(env={"CUDASNAP_LIBCUDA": LIBCUDA_LEGACY})
        self.assertFalse(obj["driver"]["loaded"])
        self.assertIn("cuCheckpointProcess", obj["driver"]["error"])
        self.assertIn("R570", obj["driver"]["hint"])

    def test_driver_too_old(self):
        _, obj = self.ps(env={"FAKECUDA_DRIVER_VERSION": "12040"})
        self.assertFalse(obj["driver"]["loaded"])
        self.assertIn("12.4", obj["driver"]["error"])
        self.assertIn("12.8", obj["driver"]["error"])

    def test_help_version_and_usage_errors(self):
        self.assertEqual(self.cs("--version").rc, 0)
        r = self.cs("--help")
        self.assertEqual(r.rc, 0)
        for cmd in ("ps", "checkpoint", "restore", "lock", "unlock", "verify"):
            self.assertIn(cmd, r.out)
            h = self.cs(cmd, "--help")
            self.assertEqual(h.rc, 0, h)
            self.assertIn("Usage:", h.out)
        self.assertEqual(self.cs("frobnicate").rc, 2)
        self.assertEqual(self.cs("ps", "--bogus").rc, 2)
        self.assertEqual(self.cs("ps", "extra").rc, 2)
        self.assertEqual(self.cs().rc, 2)



class Unreadable(Case):
    """A process the scan cannot read, through a fake /proc (CUDASNAP_PROC_DIR),
    seen by callers whose privileges a fake /proc/self/status sets
    (CUDASNAP_ROOT): a root with CAP_SYS_PTRACE cannot get more of them, so
    ps must not tell it to."""

    HOLDER, BROKEN = 40100, 40102

    def fake_proc(self):
        proc = os.path.join(self.tmp, "proc")
        os.makedirs(os.path.join(proc, str(self.HOLDER), "fd"))
        with open(os.path.join(proc, str(self.HOLDER), "stat"), "w") as f:
            f.write(f"{self.HOLDER} (app) S 1 {self.HOLDER} {self.HOLDER} 0 -1 4194560 1 0 0 0 3 1 0 0 20 0 1 0 "
                    "100 8478720 896 18446744073709551615 1 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
        with open(os.path.join(proc, str(self.HOLDER), "maps"), "w"):
            pass
        os.symlink(os.path.join(self.dev, "nvidia0"), os.path.join(proc, str(self.HOLDER), "fd", "3"))
        os.makedirs(os.path.join(proc, str(self.BROKEN)))
        with open(os.path.join(proc, str(self.BROKEN), "stat"), "w") as f:
            f.write("garbage without parentheses")
        return proc

    def caller(self, uid, capeff):
        root = os.path.join(self.tmp, f"root-{uid}")
        os.makedirs(os.path.join(root, "proc", "self"))
        with open(os.path.join(root, "proc", "self", "status"), "w") as f:
            f.write(f"Name:\tcudasnap\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCapEff:\t{capeff}\n")
        return {"CUDASNAP_ROOT": root, "CUDASNAP_PROC_DIR": self.fake_proc(),
                "CUDASNAP_LIBCUDA": "/nonexistent/libcuda.so.1"}

    def test_caller_without_ptrace_is_told_to_get_it(self):
        r = self.cs("ps", env=self.caller(1000, "0000000000000000"))
        self.assertEqual(r.rc, 2, r)
        self.assertIn(", 1 unreadable (run as root or with CAP_SYS_PTRACE to see them)\n", r.out)
        self.assertNotIn("Even CAP_SYS_PTRACE", r.out)

    def test_root_with_ptrace_gets_what_doctor_says(self):
        env = self.caller(0, "000001ffffffffff")
        r = self.cs("ps", env=env)
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("run as root", r.out)
        self.assertIn(", 1 unreadable\n", r.out)
        self.assertRegex(r.out, rf"\ncannot read 1 process as uid \d+: {self.BROKEN} ")
        hints = [l[len("  hint: "):] for l in r.out.splitlines() if l.startswith("  hint: Even")]
        self.assertEqual(len(hints), 1, r.out)
        self.assertIn("Even CAP_SYS_PTRACE was refused", hints[0])
        d = self.cs("doctor", "--json", env=env)
        fixes = [c["fix"] for c in json.loads(d.out)["checks"] if c["name"] == "unreadable"]
        self.assertEqual(fixes, hints, d)

if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
