"""CUDA IPC: a process that maps another's device memory (an importer, as
torch.multiprocessing makes) checkpoints, but the driver never restores it.
cudasnap refuses it before anything changes, in the command line, the hook
and the cuda-checkpoint drop-in, unless told to go on (--allow-unrestorable),
and then reports its restore as failed for good. The exporter alone
round-trips, while its importer keeps reading its memory."""
import os
import time
import unittest

from harness import APP, LIBCUDA, Case
from test_hostile import Hostile

# A CUDA process (the double's cuInit) that holds argv[2] CUDA IPC files of
# its own, as an exporter with that many interprocess events does (a
# torch.multiprocessing producer sharing many tensors): each created as
# /dev/shm/cuda.shm.<uid>.<pid in hex>.<n>, mapped and held open; and
# argv[3] more descriptors of /dev/null. With argv[4] a path, it also maps
# that file without holding it: an importer.
MANY_FILES = r"""
import ctypes, mmap, os, sys, time
assert ctypes.CDLL(sys.argv[1]).cuInit(0) == 0
count, extra, imported = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
def mapped(path, create):
    fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0), 0o600)
    if create:
        os.ftruncate(fd, mmap.PAGESIZE)
    assert libc.mmap(None, mmap.PAGESIZE, 3, 0x01, fd, 0) not in (None, ctypes.c_void_p(-1).value)
    return fd
held = [mapped(f"/dev/shm/cuda.shm.{os.geteuid()}.{os.getpid():x}.{n}", True) for n in range(1, count + 1)]
held += [os.open("/dev/null", os.O_RDONLY) for _ in range(extra)]
if imported != "-":
    os.close(mapped(imported, False))
open(sys.argv[5], "w").close()
time.sleep(600)
"""

MODE = "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"
TEXT = "it maps device memory that another process shares with it (CUDA IPC, {shm}): the driver"


class Ipc(Case):
    def setUp(self):
        super().setUp()
        self.exporter, = self.start("--ipc-export", "--mem", "4")
        self.importer, = self.start("--ipc-import", str(self.exporter), "--mem", "1")
        self.plain, = self.start("--mem", "1")
        self.all = sorted([self.exporter, self.importer, self.plain])
        # As driver 580 names a torch.multiprocessing exporter's file.
        self.shm = f"/dev/shm/cuda.shm.{os.geteuid()}.{self.exporter:x}.1"

    def refusal(self, pid):
        return f"process {pid} (fakecuda-app) refused: " + TEXT.format(shm=self.shm)

    def assertImporterReads(self):
        got = self.verify_data([self.importer])
        self.assertTrue(got.get(self.importer, "").startswith("ok "), got)
        self.assertIn(" imported=", got[self.importer])

    def assertUntouched(self):
        self.assertStates(self.all, "running")
        self.assertDataOk(self.all)
        self.assertImporterReads()
        self.assertFalse(os.path.exists(os.path.join(self.state, "manifest.json")))

    def test_cli_refuses_the_importer_before_anything(self):
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 2, r)
        self.assertEqual(r.obj["outcome"], "error", r)
        self.assertIn(self.refusal(self.importer), r.err)
        self.assertIn("can never restore it", r.err)
        self.assertNotIn(f"process {self.exporter} (fakecuda-app) refused", r.err)
        self.assertNotIn(f"process {self.plain} (fakecuda-app) refused", r.err)
        self.assertIn("checkpoint refused; nothing was changed", r.err)
        x, = r.obj["refused"]
        self.assertEqual((x["pid"], x["comm"], x["code"]), (self.importer, "fakecuda-app", "ipc-import"), r)
        self.assertTrue(x["text"].startswith(TEXT.format(shm=self.shm)), r)
        self.assertIn("--allow-unrestorable", x["fix"])
        hint = r.obj["error"]["hint"]
        self.assertIn("--allow-unrestorable", hint)
        self.assertIn("CUDASNAP_ALLOW_UNRESTORABLE=1", hint)
        self.assertIn("exported the memory can be checkpointed alone", hint)
        self.assertUntouched()

    def test_json_lists_every_importer(self):
        second, = self.start("--ipc-import", str(self.exporter), "--mem", "1")
        for args in (("checkpoint", "--json"), ("checkpoint", "--json", "--pid", str(second), "--pid",
                                                str(self.importer))):
            with self.subTest(args=args):
                r = self.cs(*args)
                self.assertEqual((r.rc, r.obj["outcome"], r.obj["processes"]), (2, "error", []), r)
                self.assertEqual(sorted((x["pid"], x["comm"], x["code"]) for x in r.obj["refused"]),
                                 sorted([(self.importer, "fakecuda-app", "ipc-import"),
                                         (second, "fakecuda-app", "ipc-import")]), r)
                for x in r.obj["refused"]:
                    self.assertTrue(x["text"].startswith(TEXT.format(shm=self.shm)), r)
                    self.assertIn(f"process {x['pid']} (fakecuda-app) refused: {x['text']}", r.err)
                    self.assertIn("--allow-unrestorable", x["fix"])
        r = self.cs("checkpoint", "--json", "--pid", str(self.exporter))
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("refused", r.obj)
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertStates([second], "running")
        self.assertUntouched()

    def test_hook_refuses_the_importer(self):
        r = self.cs("hook", env={MODE: "save"})
        self.assertEqual(r.rc, 2, r)
        self.assertIn(self.refusal(self.importer), r.err)
        self.assertUntouched()

    def test_drop_in_refuses_the_importer_in_nvidia_words(self):
        r = self.cc("--toggle", "--pid", self.importer)
        self.assertEqual((r.rc, r.out), (1, ""), r)
        self.assertTrue(r.err.splitlines()[0].startswith(
            f'Error toggling CUDA in process ID {self.importer}: "checkpoint refused; nothing was changed: '
            f'process {self.importer} (fakecuda-app): ' + TEXT.format(shm=self.shm)), r)
        self.assertIn("cuda-checkpoint: hint: ", r.err)
        self.assertUntouched()
        # CRIU's plugin: lock, then checkpoint; the refused one is unlocked again.
        self.assertEqual(self.cc("--action", "lock", "--pid", self.importer).rc, 0)
        r = self.cc("--action", "checkpoint", "--pid", self.importer)
        self.assertEqual((r.rc, r.out), (1, ""), r)
        self.assertTrue(r.err.splitlines()[0].startswith(f'Could not checkpoint on process ID {self.importer}: "'),
                        r)
        self.assertIn(f"process {self.importer} was unlocked again", r.err)
        self.assertUntouched()
        # The exporter alone goes through the drop-in, there and back.
        r = self.cc("--toggle", "--pid", self.exporter)
        self.assertEqual((r.rc, r.out, r.err), (0, "", ""), r)
        self.assertStates([self.exporter], "checkpointed")
        self.assertImporterReads()
        r = self.cc("--toggle", "--pid", self.exporter)
        self.assertEqual((r.rc, r.out, r.err), (0, "", ""), r)
        self.assertUntouched()

    def test_exporter_alone_round_trips_while_the_importer_reads(self):
        r = self.cs("checkpoint", "--pid", str(self.exporter), "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual([p["pid"] for p in r.obj["processes"]], [self.exporter])
        self.assertStates([self.exporter], "checkpointed")
        self.assertStates([self.importer, self.plain], "running")
        self.assertImporterReads()
        r = self.cs("restore", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual([p["pid"] for p in r.obj["processes"]], [self.exporter])
        self.assertStates(self.all, "running")
        self.assertDataOk(self.all)
        self.assertImporterReads()

    def test_allowed_importer_checkpoints_but_never_comes_back(self):
        for how in ({"args": ("--allow-unrestorable",)}, {"env": {"CUDASNAP_ALLOW_UNRESTORABLE": "1"}}):
            with self.subTest(how=how):
                r = self.cs("checkpoint", "--json", *how.get("args", ()), env=how.get("env"))
                self.assertEqual(r.rc, 0, r)
                self.assertEqual(sorted(p["pid"] for p in r.obj["processes"]), self.all)
                self.assertStates(self.all, "checkpointed")
                plan = self.cs("restore", "--dry-run", "--json")
                self.assertEqual((plan.rc, plan.obj["real_exit_status"]), (1, 1), plan)
                entry, = [p for p in plan.obj["processes"] if p["pid"] == self.importer]
                self.assertEqual(entry["verdict"], "refused", plan)
                self.assertEqual([(x["code"], x["blocks"]) for x in entry["reasons"]], [("unrestorable", True)])
                r = self.cs("restore", "--json")
                self.assertEqual(r.rc, 1, r)
                procs = {p["pid"]: p for p in r.obj["processes"]}
                self.assertTrue(procs[self.importer]["unrestorable"], r)
                self.assertIn("must be restarted", procs[self.importer]["error"]["message"])
                self.assertIn(f"restore of process {self.importer} (fakecuda-app) failed", r.err)
                self.assertIn("the driver cannot restore it; it must be restarted", r.err)
                self.assertStates([self.importer], "checkpointed")
                # The others come back without it, by the command the report gives.
                others = [self.exporter, self.plain]
                cmd = r.obj["restore_others"]
                self.assertEqual(cmd.split()[:2], ["cudasnap", "restore"], r)
                self.assertEqual(sorted(int(w) for w in cmd.split()[2:] if w != "--pid"), sorted(others), r)
                human = self.cs("restore")
                self.assertIn("to restore the others, without what the driver cannot restore: " + cmd, human.err)
                self.assertEqual(self.cs(*cmd.split()[1:]).rc, 0)
                self.assertStates(others, "running")
                self.assertDataOk(others)
                # A second try fails the same way: nothing to retry.
                r = self.cs("restore", "--pid", str(self.importer), "--json")
                self.assertEqual(r.rc, 1, r)
                self.assertTrue(r.obj["processes"][0]["unrestorable"], r)
                self.doCleanups()
                self.setUp()

    def test_dry_run_names_ipc_import(self):
        r = self.cs("checkpoint", "--dry-run", "--json")
        self.assertEqual((r.rc, r.obj["go"], r.obj["real_exit_status"]), (1, False, 2), r)
        procs = {p["pid"]: p for p in r.obj["processes"]}
        self.assertEqual({p: procs[p]["verdict"] for p in self.all},
                         {self.exporter: "ok", self.importer: "refused", self.plain: "ok"}, r)
        reason, = procs[self.importer]["reasons"]
        self.assertEqual((reason["code"], reason["blocks"]), ("ipc-import", True), r)
        self.assertTrue(reason["text"].startswith(TEXT.format(shm=self.shm)), r)
        self.assertIn("--allow-unrestorable", reason["fix"])
        self.assertIn("! ipc-import:", r.err)
        self.assertEqual(self.cs("hook", "--dry-run", env={MODE: "save"}).rc, 1)
        r = self.cs("checkpoint", "--dry-run", "--json", "--allow-unrestorable")
        self.assertEqual((r.rc, r.obj["go"], r.obj["real_exit_status"]), (0, True, 0), r)
        reason, = [p for p in r.obj["processes"] if p["pid"] == self.importer][0]["reasons"]
        self.assertEqual((reason["code"], reason["blocks"]), ("ipc-import", False), r)
        self.assertIn("(allowed by --allow-unrestorable: it would not come back)", reason["text"])
        r = self.cs("checkpoint", "--dry-run", "--pid", str(self.exporter))
        self.assertEqual(r.rc, 0, r)
        self.assertFalse(os.path.exists(self.state))
        self.assertUntouched()


class ManyFiles(Hostile):
    """An exporter may hold any number of its own CUDA IPC files (the old
    check looked at 16 and took the 17th for an import); a file is its own
    when it holds a descriptor of that very file, whatever the count and
    beside thousands of other descriptors."""

    def files(self, pid):
        return [f"/dev/shm/{f}" for f in os.listdir("/dev/shm") if f.startswith(f"cuda.shm.{os.geteuid()}.{pid:x}.")]

    def many(self, count, extra=0, imported="-"):
        pid = self.child(MANY_FILES, LIBCUDA, str(count), str(extra), imported)
        for path in self.files(pid):
            self.addCleanup(lambda p=path: os.path.exists(p) and os.unlink(p))
        return pid

    def test_exporter_of_many_files_is_no_importer(self):
        exporter = self.many(40, extra=3000)
        self.assertEqual(len(self.files(exporter)), 40)
        importer = self.many(20, imported=sorted(self.files(exporter))[-1])
        got = self.ps()[0]
        self.assertEqual(got[exporter]["ipc_import"], None, got[exporter])
        self.assertEqual(got[importer]["ipc_import"], sorted(self.files(exporter))[-1], got[importer])
        t0 = time.monotonic()
        r = self.cs("checkpoint", "--dry-run", "--json")
        self.assertLess(time.monotonic() - t0, 10, r)
        self.assertEqual((r.rc, r.obj["go"]), (1, False), r)
        verdicts = {p["pid"]: (p["verdict"], [x["code"] for x in p["reasons"]]) for p in r.obj["processes"]}
        self.assertEqual(verdicts, {exporter: ("ok", []), importer: ("refused", ["ipc-import"])}, r)
        r = self.cs("checkpoint")
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"process {importer} (python3) refused: it maps device memory", r.err)
        self.assertNotIn(f"process {exporter} (python3) refused", r.err)
        self.assertEqual(self.cs("checkpoint", "--pid", str(exporter)).rc, 0)
        self.assertStates([exporter], "checkpointed")
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertStates([exporter, importer], "running")


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
