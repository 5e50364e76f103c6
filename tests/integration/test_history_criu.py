"""What the CRIU plugin did, read after the work directory is gone: containerd
deletes CRIU's work directory (dump.log with it) after a checkpoint that
succeeded, so the plugin records each criu dump and criu restore that met GPU
processes in the history of operations (<state dir>/history.jsonl, `cudasnap
history`) and sends one line to syslog. The set-up is criu_case.py's; the
history's own rules are test_history.py's."""
import json
import os
import shutil
import signal
import socket
import subprocess

import criu_rpc
from criu_case import CRIU, CriuCase, main
from harness import APP


class CriuHistory(CriuCase):
    def history(self):
        r = self.cs("history", "--json", "-n", "1000")
        self.assertEqual(r.rc, 0, r)
        return json.loads(r.out)

    def procs(self, entry):
        return {p["pid"]: p for p in entry["processes"]}

    def dump_without_work_dir(self, *extra):
        """criu dump with its log in a work directory of its own, deleted
        afterwards as containerd deletes it."""
        work = os.path.join(self.tmp, "work")
        os.makedirs(work, exist_ok=True)
        r = self.criu("dump", "-t", str(self.root), "-D", self.images, "-W", work, "-L", self.plugins, *extra,
                      log="dump.log")
        self.assertTrue(os.path.exists(os.path.join(work, "dump.log")))
        shutil.rmtree(work)
        return r

    def test_dump_and_restore_are_recorded(self):
        pids = self.tree("--spawn", "1", "--mem", "16", expect=2)
        r = self.dump_without_work_dir()
        self.assertEqual(r.rc, 0, r)
        self.assertGone(pids)
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(pids)
        shutil.rmtree(self.images)
        restore, dump = self.history()
        self.assertEqual((dump["front"], dump["op"], dump["outcome"], dump["exit_status"], dump["error"]),
                         ("criu-dump", "checkpoint", "done", None, None), dump)
        self.assertEqual(dump["note"], "criu dump succeeded; the tree killed")
        self.assertTrue(dump["caller"]["cmdline"].startswith(f"{CRIU} dump -t {self.root} "), dump)
        self.assertEqual(dump["caller"]["parent_pid"], os.getpid())
        self.assertEqual(sorted(self.procs(dump)), pids)
        for pid, p in self.procs(dump).items():
            self.assertEqual((p["nspid"], p["outcome"], sorted(p["seconds"])), (pid, "done", ["checkpoint", "lock"]), p)
            self.assertGreaterEqual(p["bytes"], 16 << 20)
            self.assertIn(p["comm"], ("fakecuda-app", "exe"))
        self.assertEqual((restore["front"], restore["op"], restore["outcome"], restore["note"]),
                         ("criu-restore", "restore", "done", "criu restore succeeded"), restore)
        self.assertTrue(restore["caller"]["cmdline"].startswith(f"{CRIU} restore -D {self.images}"), restore)
        self.assertEqual(sorted(self.procs(restore)), pids)
        for p in restore["processes"]:
            self.assertEqual((p["outcome"], sorted(p["seconds"])), ("done", ["restore", "unlock"]), p)
        out = self.cs("history").out
        self.assertIn(" criu-dump checkpoint done in ", out)
        self.assertIn("(criu dump succeeded; the tree killed); pid ", out)

    def test_a_failed_dump_is_recorded_with_its_step_and_code(self):
        pids = self.tree("--spawn", "2", "--mem", "2", expect=3)
        victim = pids[2]
        self.fault(f"{victim} checkpoint error=999 1")
        r = self.dump_without_work_dir()
        self.assertNotEqual(r.rc, 0, r)
        self.assertRunningAndOk(pids)
        e, = self.history()
        self.assertEqual((e["front"], e["outcome"], e["note"]), ("criu-dump", "rolled-back", "criu dump failed"), e)
        self.assertIn(f"checkpoint of process {victim}", e["error"]["message"])
        procs = self.procs(e)
        self.assertEqual(sorted(procs), pids)
        v = procs[victim]
        self.assertEqual((v["outcome"], v["step"], v["cu"]), ("rolled-back", "checkpoint", 999), v)
        for p in procs.values():
            self.assertEqual(p["outcome"], "rolled-back", p)
            self.assertIn("lock", p["seconds"])
            self.assertIn("unlock", p["seconds"])  # given back at the dump's exit

    def test_a_dump_refused_at_a_forked_device_holder(self):
        pids = self.tree("--fork-after-init", "1", "--mem", "4", expect=2)
        holder = next(p for p in pids if self.role(p) == "forked")
        r = self.dump_without_work_dir()
        self.assertNotEqual(r.rc, 0, r)
        e, = self.history()
        self.assertEqual(e["outcome"], "refused", e)
        p = self.procs(e)[holder]
        self.assertEqual((p["outcome"], p["code"]), ("refused", "device-holder"), p)
        self.assertIn("forked from a CUDA process", p["why"])
        self.assertEqual(self.procs(e)[self.root]["outcome"], "rolled-back")
        self.assertRunningAndOk([self.root])

    def test_a_restore_refused_at_init_is_recorded(self):
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        pids = self.tree("--spawn", "1", "--mem", "64", expect=2)
        self.assertDumped(pids)
        filler, = self.start("--mem", "900")
        r = self.restore()
        self.assertNotEqual(r.rc, 0, r)
        entries = self.history()
        self.assertEqual([(e["front"], e["outcome"]) for e in entries],
                         [("criu-restore", "refused"), ("criu-dump", "done")], entries)
        e = entries[0]
        self.assertIn("REFUSED before CRIU created any process", e["error"]["message"])
        self.assertEqual(sorted(p["nspid"] for p in e["processes"]), pids)
        for p in e["processes"]:
            self.assertEqual((p["pid"], p["outcome"], p["code"]), (None, "refused", "gpu-memory"), p)
            self.assertIn("its restore needs", p["why"])
        self.assertIn("    - (fakecuda-app, ", self.cs("history").out)
        os.kill(filler, signal.SIGKILL)

    def test_leave_running_and_over_rpc(self):
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        env = dict(self.env, CRIU_LIBS_DIR=self.plugins)
        r = criu_rpc.dump(CRIU, self.root, self.images, leave_running=True, env=env)
        self.assertTrue(r.success, r)
        self.assertRunningAndOk(pids)
        e, = self.history()
        self.assertEqual((e["front"], e["outcome"], e["note"]),
                         ("criu-dump", "done", "criu dump succeeded; the tree left running"), e)
        # criu swrk names itself so for the request it serves; its parent is the engine (here, the test)
        self.assertRegex(e["caller"]["cmdline"], f"^criu: dump --rpc -t {self.root} ")
        self.assertEqual(e["caller"]["parent_pid"], os.getpid())
        for p in e["processes"]:
            self.assertEqual((p["outcome"], sorted(p["seconds"])), ("done", ["checkpoint", "lock", "restore", "unlock"]))

    def test_dumps_of_several_trees_at_once_each_leave_one_whole_entry(self):
        """Pods checkpointed at the same moment are CRIUs ending together:
        each entry whole, none lost, each with its own processes."""
        trees = {}
        for _ in range(4):
            pids = self.tree("--spawn", "1", "--mem", "2", expect=2)
            trees[self.root] = pids
        procs = []
        for root in trees:
            d = os.path.join(self.tmp, f"images-{root}")
            os.makedirs(d)
            procs.append(subprocess.Popen([CRIU, "dump", "-t", str(root), "-D", d, "-L", self.plugins, "-v4", "-o",
                                           "dump.log"], env=self.env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        for p in procs:
            out = p.communicate(timeout=60)[0]
            self.assertEqual(p.returncode, 0, out)
        self.assertGone([p for pids in trees.values() for p in pids])
        with open(os.path.join(self.state, "history.jsonl")) as f:
            entries = [json.loads(line) for line in f.read().splitlines()]
        self.assertEqual(len(entries), len(trees), entries)
        got = {}
        for e in entries:
            self.assertEqual((e["front"], e["outcome"]), ("criu-dump", "done"), e)
            root = int(e["caller"]["cmdline"].split(" -t ")[1].split()[0])
            got[root] = sorted(p["pid"] for p in e["processes"])
        self.assertEqual(got, trees)

    def test_a_tree_without_cuda_leaves_no_trace(self):
        with open(os.path.join(self.tmp, "plain.out"), "ab") as out:
            p = subprocess.Popen(["sleep", "600"], start_new_session=True, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=out)
        self.apps.append(p)
        self.root = p.pid
        self.tree_pids.append(p.pid)
        r = self.dump()
        self.assertEqual(r.rc, 0, r)
        self.assertGone([p.pid])
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertFalse(os.path.exists(self.state), "the state directory was created")


class Syslog(CriuCase):
    """One line per operation reaches syslog (/dev/log): a socket of the
    test's own there, in an overlay over /dev in the test's mount namespace
    (isolate.sh), so that the machine's /dev is not touched."""

    def setUp(self):
        super().setUp()
        top = os.path.join(self.tmp, "devoverlay")
        ref, layer = os.path.join(top, "ref"), os.path.join(top, "layer")
        os.makedirs(ref)
        os.makedirs(layer)
        try:
            subprocess.run(["mount", "-t", "tmpfs", "cudasnap-test-dev", layer], check=True, capture_output=True)
            os.makedirs(os.path.join(layer, "up"))
            os.makedirs(os.path.join(layer, "work"))
            subprocess.run(["mount", "--rbind", "/dev", ref], check=True, capture_output=True)
            subprocess.run(["mount", "-t", "overlay", "cudasnap-test-dev", "-o",
                            f"lowerdir=/dev,upperdir={layer}/up,workdir={layer}/work", "/dev"], check=True,
                           capture_output=True)
        except subprocess.CalledProcessError as e:
            self.skipTest(f"no overlay over /dev here: {e.stderr}")
        self.addCleanup(subprocess.run, ["umount", "-l", layer])
        self.addCleanup(subprocess.run, ["umount", "-l", ref])
        self.addCleanup(subprocess.run, ["umount", "-l", "/dev"])
        for sub in ("pts", "shm", "mqueue"):
            if os.path.ismount(os.path.join(ref, sub)):
                subprocess.run(["mount", "--rbind", os.path.join(ref, sub), f"/dev/{sub}"], check=True)
        if os.path.lexists("/dev/log"):
            os.unlink("/dev/log")
        self.log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(self.log.close)
        self.log.bind("/dev/log")
        self.log.settimeout(0.5)

    def lines(self):
        got = []
        try:
            while True:
                got.append(self.log.recv(65536).decode())
        except socket.timeout:
            return got

    def test_one_line_per_operation(self):
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        self.assertDumped(pids)
        dump = self.lines()
        self.assertEqual(len(dump), 1, dump)
        self.assertRegex(dump[0], r"^<30>.* cudasnap\[\d+\]: \d{4}-\d\d-\d\dT[0-9:.]+Z criu-dump checkpoint done in "
                         r"[0-9.]+ s: 2 processes, 0\.01 GiB \(criu dump succeeded; the tree killed\); pid \d+ ")
        for pid in pids:
            self.assertIn(f" | {pid} (", dump[0])
        self.fault(f"{pids[1]} restore error=999 1")
        r = self.restore()
        self.assertNotEqual(r.rc, 0, r)
        restore = self.lines()
        self.assertEqual(len(restore), 1, restore)
        self.assertRegex(restore[0], r"^<27>.* criu-restore restore FAILED in ")  # LOG_DAEMON | LOG_ERR
        self.assertIn(f" | {pids[1]} (", restore[0])
        self.assertIn("its restore failed (driver 999)", restore[0])
        self.assertIn("killed", restore[0])
        # a dump of a tree without CUDA says nothing
        with open(os.path.join(self.tmp, "plain.out"), "ab") as out:
            p = subprocess.Popen(["sleep", "600"], start_new_session=True, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=out)
        self.apps.append(p)
        self.root = p.pid
        self.tree_pids.append(p.pid)
        shutil.rmtree(self.images)
        os.makedirs(self.images)
        self.assertEqual(self.dump().rc, 0)
        self.assertEqual(self.lines(), [])


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    main()
