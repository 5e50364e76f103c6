"""What cudasnap_plugin.so refuses in criu dump before anything changes, with
a real CRIU and the driver double (criu_case.py):

- a tree whose checkpoint would not fit in its memory cgroup (a real one,
  v1's memory controller or cgroup v2, made by memcg.py): the dump fails at
  once, plain and with --leave-running, naming the cgroup; every process
  runs on with its data and none is OOM-killed. With room, the same tree is
  dumped and restored.
- a process that imported another's device memory (CUDA IPC), which the
  driver checkpoints but can never restore: its dump fails at once, naming
  it; its exporter alone is dumped and restored while the importer reads on.

The double's device memory is a memfd charged to the process's cgroup, and
its checkpoint copies it into the process's heap, so a dump that went ahead
without room would end with the OOM killer for real."""
import os
import re

import memcg
from criu_case import RECORD, CriuCase, main

MIB = 1 << 20


class Memory(CriuCase):
    def setUp(self):
        super().setUp()
        self.cg = memcg.for_test(self).make("tree")

    def tree_in_cgroup(self):
        """Two processes of 64 MiB of device memory each in self.cg."""
        return self.tree("--spawn", "1", "--mem", "64", expect=2, wrap=self.cg.enter_argv())

    def test_a_tree_that_does_not_fit_is_refused_and_runs_on(self):
        pids = self.tree_in_cgroup()
        self.cg.set_room(40 * MIB)
        ooms = self.cg.oom_kills()
        for extra in ((), ("--leave-running",)):
            with self.subTest(extra=extra):
                r = self.dump(*extra)
                self.assertNotEqual(r.rc, 0, r)
                self.assertLess(r.wall, 10, r)
                refusal = re.compile(r"refused: it needs (up to )?\d+\.\d\d GiB of host memory in cgroup "
                                     + re.escape(self.cg.path) + r"\b")
                self.assertTrue(any(refusal.search(line) for line in r.cudasnap_lines()), r)
                self.assertRunningAndOk(pids)
                self.assertEqual(self.cg.oom_kills(), ooms, "a process was OOM-killed")
                self.assertFalse(os.path.exists(os.path.join(self.images, RECORD)), r)

    def test_a_tree_with_room_is_dumped_and_restored(self):
        pids = self.tree_in_cgroup()
        self.cg.set_room(512 * MIB)
        ooms = self.cg.oom_kills()
        self.assertDumped(pids)
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(pids)
        self.assertEqual(self.cg.oom_kills(), ooms)


class Ipc(CriuCase):
    def test_importer_refused_exporter_alone_dumped_and_restored(self):
        exporter, = self.tree("--ipc-export", "--mem", "4", expect=1)
        importer, = self.tree("--ipc-import", str(exporter), "--mem", "1", expect=1)
        # self.root is the importer, the last tree started
        r = self.dump()
        self.assertNotEqual(r.rc, 0, r)
        self.assertLess(r.wall, 10, r)
        self.assertTrue(any(f"process {importer} (" in line and "CUDA IPC" in line and "never restore" in line
                            for line in r.cudasnap_lines()), r)
        self.assertRunningAndOk([exporter, importer])
        self.assertFalse(os.path.exists(os.path.join(self.images, RECORD)), r)
        # the exporter's tree alone
        self.root = exporter
        self.assertDumped([exporter])
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk([exporter, importer])
        got = self.verify_data([importer])
        self.assertIn(" imported=", got.get(importer, ""), got)


if __name__ == "__main__":
    main()
