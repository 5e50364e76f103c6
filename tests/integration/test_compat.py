"""cudasnap called as cuda-checkpoint: NVIDIA's R580 command line, replayed
exactly as CRIU's CUDA plugin and runsc's automation call it."""
import ctypes
import os
import signal
import subprocess
import time
import unittest

from harness import APP, GPU0, GPU1, LIBCUDA_LEGACY, Case

OS_TEXT = "OS call failed or operation not supported on this OS"
STATE_TEXT = "the operation cannot be performed in the present state"


class CompatCase(Case):
    def popen(self, *args):
        return subprocess.Popen([self.cc_path, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self.env)

    def assertFails(self, r, first_line):
        """NVIDIA's binary: exit 1, nothing on stdout, its line first on stderr."""
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.out, "", r)
        self.assertEqual(r.err.splitlines()[0], first_line, r)

    def assertQuiet(self, r):
        self.assertEqual((r.rc, r.out, r.err), (0, "", ""), r)

    def sleeper(self):
        p = subprocess.Popen(["sleep", "60"])
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        return p.pid

    def device_holders(self):
        """What runsc looks at: every process with an fd on a device file."""
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                fds = os.listdir(f"/proc/{name}/fd")
                links = [os.readlink(f"/proc/{name}/fd/{fd}") for fd in fds]
            except OSError:
                continue
            if any(l.startswith(self.dev + "/") for l in links):
                found.append(int(name))
        return sorted(found)



class Compat(CompatCase):
    # ---- CRIU's CUDA plugin ------------------------------------------------

    def test_help_names_action_for_criu(self):
        for flag in ("-h", "--help"):
            r = self.cc(flag)
            self.assertEqual(r.rc, 0, r)
            self.assertIn("--action", r.out[:2048])
            self.assertIn("--device-map", r.out)

    def test_criu_plugin_sequence(self):
        pids = self.start("--spawn", "2", expect=3)
        tids = {}
        for pid in pids:
            r = self.cc("--get-restore-tid", "--pid", pid)
            self.assertEqual((r.rc, r.err), (0, ""), r)
            self.assertRegex(r.out, r"^[1-9][0-9]*\n$")
            self.assertLessEqual(len(r.out), 128)
            tids[pid] = int(r.out)
            self.assertTrue(os.path.exists(f"/proc/{pid}/task/{tids[pid]}"))
            r = self.cc("--get-state", "--pid", tids[pid])
            self.assertEqual((r.rc, r.out, r.err), (0, "running\n", ""), r)
            self.assertQuiet(self.cc("--action", "lock", "--pid", pid, "--timeout", 10000))
            self.assertQuiet(self.cc("--action", "checkpoint", "--pid", pid))
        self.assertStates(pids, "checkpointed")
        for pid in pids:
            self.assertEqual(self.cc("--get-state", "--pid", tids[pid]).out, "checkpointed\n")
            self.assertQuiet(self.cc("--action", "restore", "--pid", pid))
            self.assertQuiet(self.cc("--action", "unlock", "--pid", pid))
        self.assertStates(pids, "running")
        self.assertDataOk(pids)

    def test_criu_skips_a_process_without_restore_thread(self):
        pid = self.sleeper()
        r = self.cc("--get-restore-tid", "--pid", pid)
        self.assertFails(r, f'Error getting restore thread ID for process ID {pid}: "initialization error"')

    # ---- runsc --cuda-checkpoint-path -------------------------------------

    def toggle_all(self, pids):
        procs = [self.popen("--toggle", "--pid", pid) for pid in pids]
        outs = [p.communicate(timeout=60) for p in procs]
        return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]

    def test_runsc_sequence(self):
        tree = self.start("--spawn", "2", "--mem", "2", expect=3)
        pair = self.start("--fork-after-init", "1", expect=2)
        forked = [p for p in pair if self.role(p) == "forked"]
        candidates = self.device_holders()
        self.assertEqual(candidates, sorted(tree + pair))
        cuda = []
        for pid in candidates:
            r = self.cc("--get-state", "--pid", pid)
            if pid in forked:
                self.assertFails(r, f'Error getting process state for process ID {pid}: "initialization error"')
                self.assertIn("forked", r.err)
                self.assertIn('multiprocessing_context="spawn" or "forkserver"', r.err)
                self.assertIn("started before CUDA is initialized, can be checkpointed", r.err)
            else:
                self.assertEqual((r.rc, r.out), (0, "running\n"), r)
                cuda.append(pid)
        self.assertEqual(self.toggle_all(cuda), [(0, "", "")] * len(cuda))
        self.assertStates(cuda, "checkpointed")
        self.assertEqual(self.toggle_all(cuda), [(0, "", "")] * len(cuda))
        self.assertStates(cuda, "running")
        self.assertDataOk(cuda)

    def test_toggle_with_failed_checkpoint_leaves_the_process_running(self):
        a, = self.start()
        b, = self.start()
        self.fault(f"{a} checkpoint error=999 1")
        got = dict(zip((a, b), self.toggle_all([a, b])))
        self.assertEqual(got[b], (0, "", ""))
        rc, out, err = got[a]
        self.assertEqual((rc, out), (1, ""), err)
        self.assertEqual(err.splitlines()[0], f'Error toggling CUDA in process ID {a}: "unknown error"')
        self.assertStates([a], "running")
        self.assertStates([b], "checkpointed")
        self.assertQuiet(self.cc("--toggle", "--pid", b))
        self.assertDataOk([a, b])

    def test_toggle_says_when_the_unlock_after_a_failed_checkpoint_fails(self):
        pid, = self.start()
        self.fault(f"{pid} checkpoint error=999 1", f"{pid} unlock error=999 1")
        r = self.cc("--toggle", "--pid", pid)
        self.assertFails(r, f'Error toggling CUDA in process ID {pid}: "unknown error"')
        self.assertIn(f"process {pid} could not be unlocked again", r.err)
        self.assertIn("it is locked", r.err)
        self.assertStates([pid], "locked")
        self.assertQuiet(self.cc("--action", "unlock", "--pid", pid))
        self.assertDataOk([pid])

    def test_toggle_restore_failure_stays_checkpointed(self):
        pid, = self.start()
        self.assertQuiet(self.cc("--toggle", "--pid", pid))
        self.fault(f"{pid} restore error=2 1")
        r = self.cc("--toggle", "--pid", pid)
        self.assertFails(r, f'Error toggling CUDA in process ID {pid}: "out of memory"')
        self.assertStates([pid], "checkpointed")
        self.assertQuiet(self.cc("--toggle", "--pid", pid))
        self.assertDataOk([pid])

    def test_toggle_of_a_locked_process_is_refused(self):
        pid, = self.start()
        self.assertQuiet(self.cc("--action", "lock", "--pid", pid))
        r = self.cc("--toggle", "--pid", pid)
        self.assertFails(r, f'Error toggling CUDA in process ID {pid}: "{STATE_TEXT}"')
        self.assertIn("--action unlock", r.err)
        self.assertStates([pid], "locked")
        self.assertQuiet(self.cc("--action", "unlock", "--pid", pid))

    # ---- exact words and statuses -----------------------------------------

    def test_get_state_of_a_process_that_never_loaded_cuda(self):
        pid = self.sleeper()
        r = self.cc("--get-state", "--pid", pid)
        self.assertFails(r, f'Error getting process state for process ID {pid}: "initialization error"')
        self.assertRegex(r.err.splitlines()[1], r"^cuda-checkpoint: hint: ")

    def test_get_state_of_a_missing_pid(self):
        for pid in (4000000, 0):
            r = self.cc("--get-state", "--pid", pid)
            self.assertFails(r, f'Error getting process state for process ID {pid}: "{OS_TEXT}"')
        self.assertIn("nvidia-smi", r.err)

    def test_actions_in_the_wrong_state(self):
        pid, = self.start()
        for action in ("checkpoint", "restore", "unlock"):
            r = self.cc("--action", action, "--pid", pid)
            self.assertFails(r, f'Could not {action} on process ID {pid}: "{STATE_TEXT}"')
        self.assertQuiet(self.cc("--action", "lock", "--pid", pid))
        r = self.cc("--action", "lock", "--pid", pid)
        self.assertFails(r, f'Could not lock on process ID {pid}: "{STATE_TEXT}"')
        self.assertIn("locked", r.err.splitlines()[1])
        self.assertQuiet(self.cc("--action", "unlock", "--pid", pid))
        self.assertStates([pid], "running")

    def test_lock_timeout_behind_a_long_kernel(self):
        pid, = self.start("--kernel-loop", "3000")
        time.sleep(0.3)
        r = self.cc("--action", "lock", "--pid", pid, "--timeout", 500)
        self.assertFails(r, f'Could not lock on process ID {pid}: "device not ready"')
        self.assertIn("--timeout", r.err)
        self.assertLess(r.wall, 2.5)
        self.assertStates([pid], "running")

    def test_device_map_only_with_restore(self):
        pid, = self.start()
        for args in (("--action", "lock"), ("--action", "checkpoint"), ("--toggle",), ("--get-state",)):
            r = self.cc(*args, "--pid", pid, "--device-map", f"{GPU0}={GPU0}")
            self.assertEqual((r.rc, r.out), (1, ""), r)
            self.assertIn("--device-map is only valid with --action restore", r.err)
        self.assertStates([pid], "running")

    def assertUsage(self, r, first_line):
        """NVIDIA's shape: the line, an empty line, the whole help; exit 1."""
        self.assertEqual((r.rc, r.out), (1, ""), r)
        lines = r.err.split("\n", 2)
        self.assertEqual(lines[0], first_line, r)
        self.assertEqual(lines[1], "", r)
        self.assertEqual(lines[2], self.cc("--help").out, r)

    def test_usage_errors_in_nvidia_words(self):
        for args, line in ((("--get-state", "--pid", "abc"), "pid must be a non-negative integer"),
                           (("--get-state", "--pid", "-5"), "pid must be a non-negative integer"),
                           (("--pid", "abc"), "pid must be a non-negative integer"),
                           ((), "No operation selected"),
                           (("--pid", "1"), "No operation selected"),
                           (("--get-state",), "Missing pid to perform operation on"),
                           (("--action", "lock"), "Missing pid to perform operation on"),
                           (("--toggle",), "Missing pid to perform operation on"),
                           (("--get-restore-tid",), "Missing pid to perform operation on"),
                           (("--action", "bogus", "--pid", "1"), "Invalid process state"),
                           (("--action", "bogus"), "Invalid process state")):
            with self.subTest(args=args):
                self.assertUsage(self.cc(*args), line)

    def test_other_usage_errors_take_the_same_shape(self):
        for args in (("--get-state", "--toggle", "--pid", "1"), ("--bogus",), ("--get-state", "--pid"),
                     ("--get-state", "--pid", "1", "extra"), ("--get-state", "--pid", "1", "--timeout", "x"),
                     ("--get-state", "--pid", "1", "--device-map", f"{GPU0}={GPU0}")):
            with self.subTest(args=args):
                r = self.cc(*args)
                self.assertRegex(r.err.split("\n", 1)[0], r"^cuda-checkpoint: ", r)
                self.assertUsage(r, r.err.split("\n", 1)[0])

    def test_option_spellings(self):
        pid, = self.start()
        for args in (("--get-state", f"--pid={pid}"), ("--get-state", "-p", pid), ("--get-state", f"-p{pid}")):
            r = self.cc(*args)
            self.assertEqual((r.rc, r.out), (0, "running\n"), r)
        self.assertQuiet(self.cc("--action=lock", "-p", pid, "-t", 1000))
        self.assertQuiet(self.cc("--action", "unlock", "-p", pid))
        r = self.cs("cuda-checkpoint", "--get-state", "--pid", str(pid))
        self.assertEqual((r.rc, r.out), (0, "running\n"), r)

    def test_no_state_directory(self):
        """Neither a checkpoint nor a restore leaves anything behind, as
        NVIDIA's binary does: a restore books its GPU memory in the node's
        book, not in the state directory, and leaves no booking there."""
        pid, = self.start()
        self.assertQuiet(self.cc("--toggle", "--pid", pid))
        self.assertFalse(os.path.exists(self.state))
        self.assertQuiet(self.cc("--toggle", "--pid", pid))
        self.assertFalse(os.path.exists(self.state))
        self.assertTrue(os.path.isdir(self.book))
        self.assertEqual(self.bookings(), [])

    def test_restore_without_persistence_mode_calls_cuinit(self):
        pid, = self.start()
        self.assertQuiet(self.cc("--toggle", "--pid", pid))
        self.assertQuiet(self.cc("--action", "restore", "--pid", pid, env={"FAKECUDA_PERSISTENCE": "0"}))
        self.assertQuiet(self.cc("--action", "unlock", "--pid", pid))
        self.assertDataOk([pid])

    def test_driver_without_checkpoint_api(self):
        r = self.cc("--get-state", "--pid", 1, env={"CUDASNAP_LIBCUDA": LIBCUDA_LEGACY})
        self.assertEqual((r.rc, r.out), (1, ""), r)
        self.assertTrue(r.err.startswith("cuda-checkpoint: "), r)


def task_states(pid):
    """State letter of every thread of pid, by thread id."""
    states = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states[int(tid)] = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            pass
    return states


PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207
WALL = 0x40000000


class CompatStopped(CompatCase):
    """The driver's calls wait without bound while the target's restore
    thread cannot run; the drop-in must refuse at once instead."""

    # Generous: a drop-in that waits for the target is killed at this point.
    HANG = 8

    def restore_tid(self, pid):
        with open(os.path.join(self.ready, f"{pid}.ready")) as f:
            return int(dict(kv.split("=", 1) for kv in f.read().split())["tid"])

    def sigstop(self, pid):
        # Registered after Case's cleanup, so it runs first: the target
        # resumes before it is killed.
        self.addCleanup(self.sigcont, pid)
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while set(task_states(pid).values()) != {"T"}:
            self.assertLess(time.monotonic(), deadline, task_states(pid))
            time.sleep(0.01)

    @staticmethod
    def sigcont(pid):
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def assertRefusedAtOnce(self, r, first_line):
        self.assertFails(r, first_line)
        self.assertLess(r.wall, 2, r)
        self.assertRegex(r.err.splitlines()[1], r"^cuda-checkpoint: hint: ", r)

    def test_stopped_target_is_refused_at_once(self):
        pid, = self.start()
        tid = self.restore_tid(pid)
        self.sigstop(pid)
        said = '"the process is stopped and cannot answer"'
        for args, line in ((("--action", "lock", "--pid", pid, "--timeout", 1000), f"Could not lock on process ID {pid}: {said}"),
                           (("--get-state", "--pid", pid), f"Error getting process state for process ID {pid}: {said}"),
                           (("--get-state", "--pid", tid), f"Error getting process state for process ID {tid}: {said}"),
                           (("--action", "checkpoint", "--pid", pid), f"Could not checkpoint on process ID {pid}: {said}"),
                           (("--toggle", "--pid", pid), f"Error toggling CUDA in process ID {pid}: {said}")):
            with self.subTest(args=args):
                r = self.cc(*args, timeout=self.HANG)
                self.assertRefusedAtOnce(r, line)
                self.assertIn(f"kill -CONT {pid}", r.err)
        self.sigcont(pid)
        self.assertStates([pid], "running")
        self.assertDataOk([pid])

    def test_restore_tid_of_a_stopped_target_still_answers(self):
        pid, = self.start()
        self.sigstop(pid)
        r = self.cc("--get-restore-tid", "--pid", pid, timeout=self.HANG)
        self.assertEqual((r.rc, r.out, r.err), (0, f"{self.restore_tid(pid)}\n", ""), r)
        self.assertLess(r.wall, 2, r)

    def test_forked_child_of_a_stopped_parent(self):
        # CRIU stops a tree's parent before it asks about the child.
        pids = self.start("--fork-after-init", "1", expect=2)
        parent, = [p for p in pids if self.role(p) == "parent"]
        child, = [p for p in pids if self.role(p) == "forked"]
        self.sigstop(parent)
        r = self.cc("--get-state", "--pid", child, timeout=self.HANG)
        self.assertRefusedAtOnce(r, f'Error getting process state for process ID {child}: "initialization error"')
        self.assertIn("forked from a CUDA process", r.err)

    def test_traced_target_with_its_restore_thread_resumed(self):
        # CRIU's plugin at checkpoint time: every thread ptrace-stopped but
        # the restore thread, which it resumed to answer the driver.
        pid, = self.start()
        tid = self.restore_tid(pid)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        others = [t for t in task_states(pid) if t != tid]
        self.assertTrue(others)
        for t in others:
            if libc.ptrace(PTRACE_SEIZE, t, None, None) != 0:
                self.skipTest(f"ptrace: {os.strerror(ctypes.get_errno())}")
            self.addCleanup(libc.ptrace, PTRACE_DETACH, t, None, None)
            libc.ptrace(PTRACE_INTERRUPT, t, None, None)
            os.waitpid(t, WALL)
        self.assertEqual({t: s for t, s in task_states(pid).items() if t != tid}, {t: "t" for t in others})
        self.assertEqual(self.cc("--get-state", "--pid", tid, timeout=self.HANG).out, "running\n")
        self.assertQuiet(self.cc("--action", "lock", "--pid", pid, "--timeout", 10000, timeout=self.HANG))
        self.assertQuiet(self.cc("--action", "checkpoint", "--pid", pid, timeout=self.HANG))
        self.assertQuiet(self.cc("--action", "restore", "--pid", pid, timeout=self.HANG))
        self.assertQuiet(self.cc("--action", "unlock", "--pid", pid, timeout=self.HANG))

    def test_traced_restore_thread_is_refused(self):
        pid, = self.start()
        tid = self.restore_tid(pid)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        if libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
            self.skipTest(f"ptrace: {os.strerror(ctypes.get_errno())}")
        self.addCleanup(libc.ptrace, PTRACE_DETACH, tid, None, None)
        libc.ptrace(PTRACE_INTERRUPT, tid, None, None)
        os.waitpid(tid, WALL)
        r = self.cc("--action", "checkpoint", "--pid", pid, timeout=self.HANG)
        self.assertRefusedAtOnce(r, f'Could not checkpoint on process ID {pid}: '
                                    f'"the process is stopped and cannot answer"')
        self.assertIn(f"stopped by its tracer, process {os.getpid()}", r.err)


class CompatDeviceMap(CompatCase):
    gpus = f"{GPU0},{GPU1}"

    def setUp(self):
        super().setUp()
        self.pid, = self.start()
        self.assertQuiet(self.cc("--toggle", "--pid", self.pid))

    def restore(self, spec):
        return self.cc("--action", "restore", "--pid", self.pid, "--device-map", spec)

    def test_swap_by_uuid_then_by_index(self):
        self.assertQuiet(self.restore(f"{GPU0}={GPU1},{GPU1}={GPU0}"))
        self.assertQuiet(self.cc("--action", "unlock", "--pid", self.pid))
        self.assertDataOk([self.pid])
        self.assertQuiet(self.cc("--toggle", "--pid", self.pid))
        self.assertQuiet(self.cc("-d", "0=1,1=0", "--action", "restore", "--pid", self.pid))
        self.assertQuiet(self.cc("--action", "unlock", "--pid", self.pid))

    def test_partial_map_is_the_driver_s_invalid_argument(self):
        r = self.restore(f"{GPU0}={GPU1}")
        self.assertFails(r, f'Could not restore on process ID {self.pid}: "invalid argument"')
        self.assertStates([self.pid], "checkpointed")

    def test_malformed_map_is_refused_before_the_driver(self):
        for bad in ("GPU-123", "0=", "0=7", "0=1,0=1"):
            with self.subTest(bad=bad):
                r = self.restore(bad)
                self.assertEqual((r.rc, r.out), (1, ""), r)
                self.assertIn("--device-map", r.err)
        self.assertStates([self.pid], "checkpointed")


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
