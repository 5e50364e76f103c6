"""Every explanation of lib/driver/explain.c, triggered through the driver double, and
the regression tests named after the two public reports."""
import os
import shutil
import subprocess
import unittest

from harness import APP, BIN, Case

NOBODY = 65534


class Explanations(Case):
    def failing(self, command, op, code, env=None, setup=None):
        pid, = self.start("--mem", "1")
        if setup:
            self.assertEqual(self.cs(setup).rc, 0)
        self.fault(f"{pid} {op} error={code} 1")
        r = self.cs(command, "--json", env=env)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.obj["outcome"], "rolled-back", r)
        self.assertEqual(r.obj["error"]["cuda_result"], code)
        self.assertIn(f"{op} of process {pid} (fakecuda-app) failed", r.err)
        return r.obj["error"]["hint"], r.err

    def test_illegal_state_shows_the_actual_state(self):
        hint, _ = self.failing("checkpoint", "checkpoint", 401)
        self.assertIn("The process is locked", hint)

    def test_not_supported_names_the_unsupported_features(self):
        hint, _ = self.failing("checkpoint", "checkpoint", 801)
        for word in ("UVM", "MIG", "MPS", "IPC", "NCCL"):
            self.assertIn(word, hint)

    def test_not_permitted_at_lock_needs_privileges(self):
        hint, _ = self.failing("checkpoint", "lock", 800)
        self.assertIn("CAP_SYS_PTRACE", hint)

    def test_not_permitted_at_restore_is_persistence(self):
        hint, _ = self.failing("restore", "restore", 800, setup="checkpoint")
        self.assertIn("persistence mode", hint)

    def test_out_of_memory_at_restore_is_lost(self):
        """The driver destroys a process's checkpointed state when its
        restore runs out of GPU memory: it is reported LOST (exit 3), never
        back in its state."""
        pid, = self.start("--mem", "1")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        self.fault(f"{pid} restore error=2 1")
        r = self.cs("restore", "--json")
        self.assertEqual(r.rc, 3, r)
        self.assertEqual(r.obj["outcome"], "incomplete", r)
        self.assertEqual(r.obj["error"]["cuda_result"], 2)
        self.assertIn("GPU memory", r.obj["error"]["hint"])
        self.assertIn("LOST", r.err)
        self.assertIn("destroys a process's checkpointed state", r.err)
        self.assertNotIn("back in its state", r.err)
        lost = [p for p in r.obj["processes"] if p["lost"]]
        self.assertEqual([p["pid"] for p in lost], [pid])
        self.assertTrue(lost[0]["unrestorable"])

    def test_not_initialized(self):
        hint, err = self.failing("checkpoint", "lock", 3)
        self.assertIn("does not know it as a CUDA process", err)
        self.assertIn("never initialized CUDA", hint)

    def test_not_ready_hint_names_the_timeout(self):
        hint, _ = self.failing("lock", "lock", 600)
        self.assertIn("--timeout", hint)

    def test_operating_system_error_on_a_visible_pid(self):
        hint, _ = self.failing("checkpoint", "lock", 304)
        self.assertIn("exited during the call", hint)

    def test_operating_system_error_under_gvisor(self):
        root = os.path.join(self.tmp, "root")
        os.makedirs(os.path.join(root, "proc"))
        with open(os.path.join(root, "proc", "sentry-meminfo"), "w"):
            pass
        hint, _ = self.failing("checkpoint", "lock", 304, env={"CUDASNAP_ROOT": root})
        self.assertIn("runsc", hint)


class PublicReports(Case):
    def test_host_pid_from_nvidia_smi_gets_the_namespace_explanation(self):
        """A wrapper passed nvidia-smi's host PID inside a sandbox and got a bare 304."""
        self.start()
        for cmd in ("checkpoint", "restore", "lock", "unlock"):
            r = self.cs(cmd, "--pid", "4000000")
            self.assertEqual(r.rc, 2, r)
            self.assertIn("no such process in this PID namespace", r.err)
            self.assertIn("nvidia-smi", r.err)
            self.assertNotIn("304", r.err)

    def test_without_a_driver_an_arguments_error_is_said_first(self):
        """On a machine without the driver, a wrong argument is named, not
        hidden behind 'cannot load the NVIDIA driver library'."""
        env = {"CUDASNAP_LIBCUDA": "/nonexistent/libcuda.so.1"}
        for args, said in ((("checkpoint", "--pid", "4000000"), "no such process in this PID namespace"),
                           (("lock", "--tree", "4000000"), "no such process in this PID namespace"),
                           (("restore", "--device-map", "GPU-1"), "is not OLD=NEW"),
                           (("checkpoint", "--cgroup", "/cudasnap-no-such-cgroup"), "no such cgroup")):
            with self.subTest(args=args):
                r = self.cs(*args, env=env)
                self.assertEqual(r.rc, 2, r)
                self.assertIn(said, r.err)
                self.assertNotIn("cannot load the NVIDIA driver", r.err)
        r = self.cs("checkpoint", "--pid", str(os.getpid()), env=env)  # arguments right: the driver's error
        self.assertEqual(r.rc, 2, r)
        self.assertIn("cannot load the NVIDIA driver", r.err)

    def test_children_left_with_device_files_are_named_by_verify(self):
        """Only the parent was checkpointed; its children kept device files and one
        kept a mapping without an fd: the sandbox snapshot then failed."""
        pids = self.start("--fork-after-init", "2", "--forked-close-fds", "1", expect=3)
        parent = [p for p in pids if self.role(p) == "parent"][0]
        children = [p for p in pids if p != parent]
        r = self.cs("checkpoint", "--pid", str(parent))
        self.assertEqual(r.rc, 0, r)
        for c in children:
            self.assertIn(f"{c} (fakecuda-app, device-holder)", r.err)
        v = self.cs("verify", "--json")
        self.assertEqual(v.rc, 1, v)
        left = v.obj["leftovers"]
        self.assertEqual({l["pid"] for l in left}, set(children))
        for l in left:
            self.assertEqual(l["forked_from"], parent)
            self.assertIn("forked from CUDA process", l["reason"])
            # The reason names the fix: workers that need no inherited CUDA state.
            self.assertIn('multiprocessing_context="spawn" or "forkserver"', l["reason"])
            self.assertIn("started before CUDA is initialized, can be checkpointed", l["reason"])
        bare = [l for l in left if l["kind"] == "mapping" and not l["fd_open"]]
        self.assertTrue(bare, left)
        self.assertEqual(len({l["pid"] for l in bare}), 1)
        human = self.cs("verify")
        self.assertIn("without an open fd", human.out)
        for c in children:
            self.assertIn(f"{c} (fakecuda-app, device-holder)", human.out)


class Privileges(Case):
    def as_nobody(self, *args):
        state = os.path.join(self.tmp, "nobody-state")
        os.makedirs(state, exist_ok=True)
        os.chown(state, NOBODY, NOBODY)
        os.chmod(state, 0o700)
        os.chmod(self.tmp, 0o755)
        env = dict(self.env, CUDASNAP_STATE_DIR=state)
        p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                            "--inh-caps=-all", BIN, *args], capture_output=True, text=True, env=env, timeout=60)
        return p

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv")

    def test_non_root_gets_told_what_it_needs(self):
        pid, = self.start()
        for cmd in ("checkpoint", "lock"):
            p = self.as_nobody(cmd)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("CAP_SYS_PTRACE", p.stderr)
            p = self.as_nobody(cmd, "--pid", str(pid))
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("CAP_SYS_PTRACE", p.stderr)
        self.assertStates([pid], "running")

    def test_non_root_without_state_dir_is_told(self):
        p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", BIN,
                            "checkpoint"], capture_output=True, text=True,
                           env=dict(self.env, CUDASNAP_STATE_DIR="/run/cudasnap-test-denied"), timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("needs root", p.stderr)


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
