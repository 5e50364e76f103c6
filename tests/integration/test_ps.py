"""cudasnap ps against the driver test double (issue: foundation)."""
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


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
