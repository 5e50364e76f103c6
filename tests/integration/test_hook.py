"""cudasnap hook, run as runsc runs its save/restore exec hook."""
import json
import os
import re
import time
import unittest

from harness import APP, Case

MODE = "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z ")


class Hook(Case):
    def hook(self, mode, *args, **env):
        if mode is not None:
            env[MODE] = mode
        return self.cs("hook", *args, env=env)

    def assertStamped(self, r):
        lines = r.err.splitlines()
        self.assertTrue(lines, r)
        for line in lines:
            self.assertRegex(line, STAMP)

    def test_save_restore_cycle(self):
        pids = self.start("--spawn", "2", expect=3)
        r = self.hook("save")
        self.assertEqual(r.rc, 0, r)
        self.assertStamped(r)
        self.assertIn("(not strict)", r.err)
        self.assertStates(pids, "checkpointed")
        r = self.hook("restore")
        self.assertEqual(r.rc, 0, r)
        self.assertStamped(r)
        self.assertStates(pids, "running")
        self.assertDataOk(pids)

    def test_restore_in_a_restored_sandbox_warns_on_changed_start_times(self):
        pids = self.start("--spawn", "2", expect=3)
        self.assertEqual(self.hook("save").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        with open(man) as f:
            m = json.load(f)
        m["processes"][0]["start_time"] += 3
        with open(man, "w") as f:
            json.dump(m, f)
        r = self.hook("restore")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("as at the checkpoint", r.err)
        self.assertStates(pids, "running")

    def test_resume_after_leave_running_has_nothing_to_do(self):
        pids = self.start("--spawn", "1", expect=2)
        r = self.hook("resume")
        self.assertEqual(r.rc, 0, r)
        self.assertStamped(r)
        self.assertIn("nothing to restore", r.err)
        self.assertStates(pids, "running")

    def test_resume_restores_what_is_checkpointed(self):
        pids = self.start("--spawn", "1", expect=2)
        self.assertEqual(self.hook("save").rc, 0)
        r = self.hook("resume", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.obj["outcome"], "done")
        self.assertStates(pids, "running")

    def test_missing_or_unknown_mode(self):
        pid, = self.start()
        for mode in (None, "", "snapshot"):
            with self.subTest(mode=mode):
                r = self.hook(mode)
                self.assertEqual(r.rc, 2, r)
                self.assertStamped(r)
                self.assertIn(MODE, r.err)
                self.assertIn("nothing was done", r.err)
        self.assertStates([pid], "running")

    def test_usage_errors_are_stamped(self):
        for args in (("--bogus",), ("--timeout", "soon"), ("extra",)):
            with self.subTest(args=args):
                r = self.hook("save", *args)
                self.assertEqual(r.rc, 2, r)
                self.assertStamped(r)

    def test_help_explains_the_runsc_flags(self):
        r = self.cs("hook", "--help")
        self.assertEqual(r.rc, 0, r)
        for word in ("--save-restore-exec-argv", "dev.gvisor.internal.checkpoint.save-restore-exec-argv",
                     "dev.gvisor.internal.checkpoint.save-restore-exec-timeout", MODE, "CUDASNAP_HOOK_STRICT"):
            self.assertIn(word, r.out)

    def test_leftover_reference_warns_unless_strict(self):
        pid, = self.start()
        self.fault(f"{pid} checkpoint leak-fd")
        r = self.hook("save")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("warning:", r.err)
        self.assertStates([pid], "checkpointed")
        self.assertEqual(self.hook("restore").rc, 0)

    def test_strict_from_the_environment_rolls_back(self):
        pids = self.start("--spawn", "1", expect=2)
        self.fault(f"{pids[0]} checkpoint leak-fd")
        r = self.hook("save", CUDASNAP_HOOK_STRICT="1")
        self.assertEqual(r.rc, 1, r)
        self.assertStamped(r)
        self.assertIn("--strict", r.err)
        self.assertStates(pids, "running")
        self.assertDataOk(pids)

    def test_option_overrides_the_environment(self):
        pid, = self.start()
        self.fault(f"{pid} checkpoint leak-fd")
        r = self.hook("save", "--no-strict", CUDASNAP_HOOK_STRICT="1")
        self.assertEqual(r.rc, 0, r)
        self.assertStates([pid], "checkpointed")
        self.assertEqual(self.hook("restore").rc, 0)
        r = self.hook("save", "--strict", CUDASNAP_HOOK_STRICT="0")
        self.assertEqual(r.rc, 1, r)
        self.assertStates([pid], "running")

    def test_bad_strict_value(self):
        r = self.hook("save", CUDASNAP_HOOK_STRICT="yes please")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("CUDASNAP_HOOK_STRICT", r.err)

    def test_deadline_ends_the_hook_before_runsc_kills_it(self):
        pids = self.start("--spawn", "2", expect=3)
        self.fault(f"{pids[0]} checkpoint delay=6000")
        r = self.hook("save", "--deadline", "1")
        self.assertLess(r.wall, 5.0, r)
        self.assertEqual(r.rc, 3, r)  # the slow one is given up on, the others rolled back
        self.assertStamped(r)
        self.assertIn(f"cudasnap restore --pid {pids[0]}", r.err)
        self.assertStates(pids[1:], "running")
        self.fault()
        deadline = time.monotonic() + 15
        while self.states([pids[0]])[pids[0]] != "checkpointed" and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(self.cs("restore", "--pid", str(pids[0])).rc, 0)
        self.assertDataOk(pids)

    def test_bad_deadline(self):
        r = self.hook("save", "--deadline", "0")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("--deadline", r.err)

    def test_failed_save_rolls_back(self):
        pids = self.start("--spawn", "2", expect=3)
        self.fault(f"{pids[1]} checkpoint error=999 1")
        r = self.hook("save", "--json")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.obj["outcome"], "rolled-back")
        self.assertStamped(r)
        self.assertStates(pids, "running")
        self.assertDataOk(pids)


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
