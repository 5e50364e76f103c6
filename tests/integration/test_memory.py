"""Host memory before a checkpoint: the driver copies a process's GPU memory
into its own host memory, charged to its memory cgroup, so a checkpoint that
does not fit is refused before anything changes (the command line, the hook
and the cuda-checkpoint drop-in), goes through where it fits, and when told
to go on anyway (--ignore-memory) ends with the OOM killer, which the report
names. The memory cgroups are real ones that the test creates (memcg.py).

The double's device memory is a memfd already charged to the cgroup, and its
checkpoint copies it into the process's heap: a checkpoint needs room for a
second copy, and one that has none gets the process OOM-killed for real.

Most cases run in a PID namespace of their own (tests/integration/isolate.sh),
where NVML cannot name the process and cudasnap counts the memory in use on
the GPUs it uses as an upper bound. ExactFigures runs in the initial PID
namespace (registered without isolate.sh), where NVML's figure for each
process is exact, and selects its processes by --pid and --cgroup only."""
import os
import re
import shutil
import unittest

from harness import APP, GPU0, GPU1, Case
import memcg
from memcg import initial_pidns

MIB = 1 << 20
GIB = 1 << 30
MODE = "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"


def host_need(gpu):
    """cs_checkpoint_host_need: the GPU memory, 16 MiB and 4 MiB per GiB."""
    return gpu + 16 * MIB + gpu // 256


def gib(b):
    return f"{b / GIB:.2f} GiB"


class MemoryCase(Case):
    def setUp(self):
        super().setUp()
        self.cgroups = memcg.for_test(self)

    def start_in(self, cg, *args, **kw):
        return self.start(*args, wrap=cg.enter_argv(), **kw)

    def plan(self, *args, env=None):
        r = self.cs("checkpoint", "--dry-run", "--json", *args, env=env)
        self.assertIn(r.rc, (0, 1), r)
        return r, {p["pid"]: p for p in r.obj["processes"]}

    def assertNoManifest(self):
        self.assertFalse(os.path.exists(os.path.join(self.state, "manifest.json")))

    def assertRefusalNames(self, text, pid, cg, need, limit, bound=True, path=None):
        """The refusal of pid names its cgroup (by cg.path, or as path when
        cudasnap names it otherwise), its need, the room left and the limit
        that decides, with its value."""
        files = "|".join(map(re.escape, sorted(cg.limit_files())))
        m = re.search(f"process {pid} \\(fakecuda-app\\) refused: it needs {'up to ' if bound else ''}"
                      f"{re.escape(gib(need))} of host memory in cgroup {re.escape(path or cg.path)} "
                      r"\([^)]*\)(?:; with the \d+ other process(?:es)? of that cgroup \d+\.\d\d GiB)?; "
                      r"the cgroup has (\d+\.\d\d) GiB left under its "
                      f"({files}) of {re.escape(gib(limit))}", text)
        self.assertTrue(m, f"refusal of {pid} not named as expected in:\n{text}")
        return float(m.group(1))


    def assertUntouched(self, pids, *cgroups):
        """Running with their data, no OOM kill in the cgroups (cg, kills
        before), nothing checkpointed."""
        self.assertStates(pids, "running")
        self.assertDataOk(pids)
        for cg, before in cgroups:
            self.assertEqual(cg.oom_kills(), before, cg.path)
        self.assertNoManifest()


class Refused(MemoryCase):
    """A target whose cgroup has 40 MiB left and whose checkpoint needs 80:
    refused wherever a checkpoint starts, nothing changed."""

    MEM = 64

    def setUp(self):
        super().setUp()
        if initial_pidns():
            self.skipTest("acts on every CUDA process of its PID namespace: run it through isolate.sh")
        self.cg = self.cgroups.make("tight")
        self.pid, = self.start_in(self.cg, "--mem", str(self.MEM))
        self.limit = self.cg.set_room(40 * MIB)
        self.ooms = self.cg.oom_kills()
        self.need = host_need(self.MEM * MIB)

    def assertUntouched(self):
        self.assertStates([self.pid], "running")
        self.assertDataOk([self.pid])
        self.assertEqual(self.cg.oom_kills(), self.ooms)
        self.assertNoManifest()

    def test_cli_checkpoint(self):
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 2, r)
        self.assertEqual(r.obj["outcome"], "error", r)
        self.assertEqual(r.obj["processes"], [])
        self.assertEqual([(x["pid"], x["comm"], x["code"]) for x in r.obj["refused"]],
                         [(self.pid, "fakecuda-app", "memory")], r)
        room = self.assertRefusalNames(r.err, self.pid, self.cg, self.need, self.limit)
        self.assertLess(room * GIB, self.need)
        self.assertIn("checkpoint refused; nothing was changed", r.err)
        hint = r.obj["error"]["hint"]
        self.assertRegex(hint, f"Raise memory\\.[a-z_.]+ of {re.escape(self.cg.path)} by at least \\d+\\.\\d\\d GiB")
        self.assertIn("--ignore-memory", hint)
        self.assertIn("CUDASNAP_IGNORE_MEMORY=1", hint)
        self.assertUntouched()

    def test_json_lists_every_refused_process(self):
        """Two processes refused: the error names the first, the JSON's
        refused lists both, each with its reason, text and fix; the dry run
        says that the real command would exit with status 2."""
        cg2 = self.cgroups.make("tight2")
        second, = self.start_in(cg2, "--mem", str(self.MEM))
        limit2 = cg2.set_room(40 * MIB)
        for cmd in (("checkpoint", "--json"), ("hook", "--json")):
            with self.subTest(cmd=cmd):
                r = self.cs(*cmd, env={MODE: "save"})
                self.assertEqual((r.rc, r.obj["outcome"], r.obj["exit_status"]), (2, "error", 2), r)
                self.assertIn("(and 1 more reasons, above)", r.obj["error"]["message"])
                got = {x["pid"]: x for x in r.obj["refused"]}
                self.assertEqual(len(r.obj["refused"]), 2, r)
                self.assertEqual(sorted(got), sorted([self.pid, second]), r)
                for pid, cg, limit in ((self.pid, self.cg, self.limit), (second, cg2, limit2)):
                    # Both use one GPU: each is bounded by the memory of both.
                    x = got[pid]
                    self.assertEqual((x["comm"], x["code"]), ("fakecuda-app", "memory"), r)
                    self.assertRegex(x["text"], f"^it needs up to \\d+\\.\\d\\d GiB of host memory in cgroup "
                                     f"{re.escape(cg.path)} .* of {re.escape(gib(limit))}$")
                    self.assertIn(f"process {pid} (fakecuda-app) refused: {x['text']}", r.err)
                    self.assertRegex(x["fix"], f"Raise memory\\.[a-z_.]+ of {re.escape(cg.path)} by at least")
                    self.assertIn("--ignore-memory", x["fix"])
        r, procs = self.plan()
        self.assertEqual((r.rc, r.obj["exit_status"], r.obj["real_exit_status"]), (1, 1, 2), r)
        self.assertIn("checkpoint would FAIL, with exit status 2", r.err)
        r, procs = self.plan("--ignore-memory")
        self.assertEqual((r.rc, r.obj["exit_status"], r.obj["real_exit_status"]), (0, 0, 0), r)
        self.assertStates([self.pid, second], "running")
        self.assertDataOk([self.pid, second])
        self.assertNoManifest()

    def test_hook_save(self):
        r = self.cs("hook", env={MODE: "save"})
        self.assertEqual(r.rc, 2, r)
        self.assertRefusalNames(r.err, self.pid, self.cg, self.need, self.limit)
        for line in r.err.splitlines():
            self.assertRegex(line, r"^\d{4}-\d\d-\d\dT[0-9:.]+Z ")
        self.assertUntouched()

    def test_drop_in_toggle(self):
        r = self.cc("--toggle", "--pid", self.pid)
        self.assertEqual((r.rc, r.out), (1, ""), r)
        first = r.err.splitlines()[0]
        self.assertTrue(first.startswith(f'Error toggling CUDA in process ID {self.pid}: "checkpoint refused; '
                                         f'nothing was changed: process {self.pid} (fakecuda-app): it needs up to '
                                         f'{gib(self.need)} of host memory in cgroup {self.cg.path} '), r)
        self.assertIn("cuda-checkpoint: hint: Raise memory.", r.err)
        self.assertUntouched()

    def test_drop_in_checkpoint_of_a_locked_process(self):
        """CRIU's plugin locks first, then checkpoints: the refused process
        is unlocked again, running as the plugin found it."""
        r = self.cc("--action", "lock", "--pid", self.pid)
        self.assertEqual((r.rc, r.out, r.err), (0, "", ""), r)
        self.assertStates([self.pid], "locked")
        r = self.cc("--action", "checkpoint", "--pid", self.pid)
        self.assertEqual((r.rc, r.out), (1, ""), r)
        self.assertTrue(r.err.splitlines()[0].startswith(f'Could not checkpoint on process ID {self.pid}: "'), r)
        self.assertRefusalNames(r.err, self.pid, self.cg, self.need, self.limit)
        self.assertIn(f"process {self.pid} was unlocked again, so that it keeps running", r.err)
        self.assertUntouched()

    def test_ignore_memory_from_the_environment_reaches_the_check(self):
        """CUDASNAP_IGNORE_MEMORY=1 turns the refusal into a note in the plan."""
        r, procs = self.plan(env={"CUDASNAP_IGNORE_MEMORY": "1"})
        self.assertEqual(r.rc, 0, r)
        reasons = {x["code"]: x for x in procs[self.pid]["reasons"]}
        self.assertFalse(reasons["memory"]["blocks"], r)
        self.assertIn("(allowed by --ignore-memory)", reasons["memory"]["text"])
        self.assertUntouched()


class Fits(MemoryCase):
    def setUp(self):
        super().setUp()
        if initial_pidns():
            self.skipTest("acts on every CUDA process of its PID namespace: run it through isolate.sh")

    def test_room_to_spare_checkpoints_and_restores(self):
        cg = self.cgroups.make("roomy")
        pids = self.start_in(cg, "--spawn", "1", "--mem", "32", expect=2)
        # Two processes of 32 MiB in one cgroup: 2 x (32 MiB copied + 16) at most.
        limit = cg.set_room(160 * MIB)
        ooms = cg.oom_kills()
        r, procs = self.plan()
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(r.obj["go"])
        for pid in pids:
            mem = procs[pid]["memory"]
            self.assertEqual((procs[pid]["verdict"], mem["gpu_bytes_known"], mem["gpu_bytes"]),
                             ("ok", "at-most", 64 * MIB), r)
            self.assertEqual((mem["cgroup"]["path"], mem["cgroup"]["tightest"], mem["cgroup"]["limit_bytes"]),
                             (cg.path, cg.path, limit), r)
            self.assertEqual(mem["cgroup"]["version"], cg.version)
            self.assertNotIn("memory", [x["code"] for x in procs[pid]["reasons"]])
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertStates(pids, "checkpointed")
        self.assertEqual(cg.oom_kills(), ooms)
        r = self.cs("restore")
        self.assertEqual(r.rc, 0, r)
        self.assertStates(pids, "running")
        self.assertDataOk(pids)
        self.assertEqual(cg.oom_kills(), ooms)


class OomKilled(MemoryCase):
    """--ignore-memory (or CUDASNAP_IGNORE_MEMORY=1) past a cgroup without
    room: the kernel kills the process during its checkpoint. It is LOST
    (exit 3) and named with the cgroup whose OOM killer struck; the others
    are rolled back."""

    def setUp(self):
        super().setUp()
        if initial_pidns():
            self.skipTest("acts on every CUDA process of its PID namespace: run it through isolate.sh")

    def test_oom_kill_during_checkpoint_is_lost_and_named(self):
        for how in (("--ignore-memory",), ()):
            with self.subTest(how=how):
                tight, roomy = self.cgroups.make("tight"), self.cgroups.make("roomy")
                victim, = self.start_in(tight, "--mem", "64")
                others = [self.start_in(roomy, "--mem", "4")[0] for _ in range(2)]
                tight.set_room(16 * MIB)
                roomy.set_room(512 * MIB)
                before = tight.oom_kills()
                env = {} if how else {"CUDASNAP_IGNORE_MEMORY": "1"}
                r = self.cs("checkpoint", "--json", *how, env=env)
                self.assertEqual(r.rc, 3, r)
                self.assertEqual((r.obj["outcome"], r.obj["lost"]), ("incomplete", 1), r)
                procs = {p["pid"]: p for p in r.obj["processes"]}
                self.assertEqual((procs[victim]["lost"], procs[victim]["final_state"]), (True, "exited"), r)
                after = tight.oom_kills()
                self.assertGreater(after, before)
                self.assertEqual(procs[victim]["lost_why"],
                                 f"killed by the OOM killer of cgroup {tight.path} (oom_kill {before} -> {after}) "
                                 "during its checkpoint", r)
                self.assertIn("LOST", r.err)
                self.assertIn(f"killed by the OOM killer of cgroup {tight.path}", r.err)
                self.assertEqual({p: procs[p]["final_state"] for p in others}, {p: "running" for p in others}, r)
                self.assertStates(others, "running")
                self.assertDataOk(others)
                self.assertNoManifest()
                self.doCleanups()
                self.setUp()


class DryRun(MemoryCase):
    def setUp(self):
        super().setUp()
        if initial_pidns():
            self.skipTest("acts on every CUDA process of its PID namespace: run it through isolate.sh")

    def assertNothingHeld(self):
        self.assertEqual(self.claim_records(), [])
        self.assertNoManifest()

    def test_plan_reports_the_memory_verdict_and_changes_nothing(self):
        cg = self.cgroups.make("tight")
        pid, = self.start_in(cg, "--mem", "64")
        limit = cg.set_room(40 * MIB)
        need = host_need(64 * MIB)
        r, procs = self.plan()
        self.assertEqual((r.rc, r.obj["exit_status"], r.obj["go"], r.obj["dry_run"]), (1, 1, False, True), r)
        self.assertEqual(r.obj["real_exit_status"], 2, r)
        e = procs[pid]
        self.assertEqual((e["verdict"], e["state"], e["target"]), ("refused", "running", True), r)
        mem = e["memory"]
        self.assertEqual((mem["gpu_bytes_known"], mem["gpu_bytes"], mem["host_bytes_needed"]),
                         ("at-most", 64 * MIB, need), r)
        cgj = mem["cgroup"]
        self.assertEqual((cgj["path"], cgj["tightest"], cgj["limit_bytes"], cgj["version"]),
                         (cg.path, cg.path, limit, cg.version), r)
        self.assertIn(cgj["limit_file"], cg.limit_files())
        self.assertTrue(39 * MIB <= cgj["room_bytes"] < need, r)
        reason, = [x for x in e["reasons"] if x["code"] == "memory"]
        self.assertTrue(reason["blocks"])
        self.assertRefusalNames("process %d (fakecuda-app) refused: %s" % (pid, reason["text"]), pid, cg, need,
                                limit)
        self.assertIn("--ignore-memory", reason["fix"])
        self.assertEqual((r.obj["totals"]["targets"], r.obj["totals"]["refused"]), (1, 1), r)
        self.assertEqual(r.obj["totals"]["host_bytes_needed"], need)
        self.assertIn("WOULD FAIL", r.err)
        self.assertIn("! memory: it needs up to", r.err)
        self.assertIn("checkpoint would FAIL", r.err)
        # Nothing changed, not even the state directory.
        self.assertFalse(os.path.exists(self.state))
        self.assertStates([pid], "running")
        h = self.cs("hook", "--dry-run", env={MODE: "save"})
        self.assertEqual(h.rc, 1, h)
        self.assertIn("WOULD FAIL", h.err)
        self.assertFalse(os.path.exists(self.state))
        # With room, the same plan goes through.
        cg.set_room(512 * MIB)
        r, procs = self.plan()
        self.assertEqual((r.rc, r.obj["go"], procs[pid]["verdict"]), (0, True, "ok"), r)
        self.assertEqual((r.obj["exit_status"], r.obj["real_exit_status"]), (0, 0), r)
        self.assertEqual(self.cs("hook", "--dry-run", env={MODE: "save"}).rc, 0)
        self.assertFalse(os.path.exists(self.state))
        self.assertStates([pid], "running")
        self.assertDataOk([pid])

    def test_plan_in_an_existing_state_directory_leaves_no_trace(self):
        cg = self.cgroups.make("roomy")
        pids = self.start_in(cg, "--spawn", "1", "--mem", "8", expect=2)
        cg.set_room(256 * MIB)
        self.assertEqual(self.cs("lock").rc, 0)
        self.assertEqual(self.cs("unlock").rc, 0)
        self.assertTrue(os.path.isdir(self.state))
        r, _ = self.plan()
        self.assertEqual(r.rc, 0, r)
        self.assertNothingHeld()
        self.assertStates(pids, "running")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        with open(man) as f:
            before = f.read()
        r = self.cs("restore", "--dry-run", "--json")
        self.assertEqual((r.rc, r.obj["go"]), (0, True), r)
        self.assertEqual(sorted(p["pid"] for p in r.obj["processes"] if p["target"]), pids)
        with open(man) as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(self.claim_records(), [])
        self.assertStates(pids, "checkpointed")
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertDataOk(pids)


class BoundByDeviceFiles(MemoryCase):
    """Where NVML cannot name a process, the use of the GPUs whose device
    files it holds bounds its GPU memory: not the CUDA_VISIBLE_DEVICES that
    /proc shows, which is what the program started with."""

    gpus = f"{GPU0},{GPU1}"

    def setUp(self):
        super().setUp()
        if initial_pidns():
            self.skipTest("NVML names every process here: run it through isolate.sh")

    def test_a_program_that_changed_its_visible_devices(self):
        # /proc says GPU 1, idle; the program set GPU 0 itself and filled 64 MiB there.
        cg = self.cgroups.make("changed")
        pid, = self.start_in(cg, "--mem", "64", "--set-visible", "0", env={"CUDA_VISIBLE_DEVICES": "1"})
        with open(f"/proc/{pid}/environ", "rb") as f:
            self.assertIn(b"CUDA_VISIBLE_DEVICES=1\0", f.read())
        limit = cg.set_room(40 * MIB)
        ooms = cg.oom_kills()
        # Bounded by GPU 0's use (by its environment, GPU 1's: nothing, and
        # the checkpoint would go ahead into the OOM killer) ...
        r, procs = self.plan("--pid", str(pid))
        mem = procs[pid]["memory"]
        self.assertEqual((mem["gpu_bytes_known"], mem["gpu_bytes"]), ("at-most", 64 * MIB), r)
        # ... and a neighbour on GPU 1 does not count against it.
        other, = self.start("--mem", "256", env={"CUDA_VISIBLE_DEVICES": "1"})
        r, procs = self.plan("--pid", str(pid))
        mem = procs[pid]["memory"]
        self.assertEqual((mem["gpu_bytes_known"], mem["gpu_bytes"]), ("at-most", 64 * MIB), r)
        r = self.cs("checkpoint", "--pid", str(pid))
        self.assertEqual(r.rc, 2, r)
        self.assertRefusalNames(r.err, pid, cg, host_need(64 * MIB), limit)
        self.assertStates([pid, other], "running")
        self.assertDataOk([pid, other])
        self.assertEqual(cg.oom_kills(), ooms)
        self.assertNoManifest()


class CgroupNamespace(MemoryCase):
    """cudasnap in a cgroup namespace of its own (a privileged debug pod, a
    node agent with hostPID, `unshare -C`), where its own cgroup mount does
    not show the target's cgroup ("/../tight"), or shows the namespace's top
    as "/" with the limit above it hidden. With CAP_SYS_ADMIN it reads the
    chain from the initial cgroup namespace and refuses with the numbers;
    without, a limit it cannot see refuses with memory-unknown, never "no
    limit"; a namespace whose own limit it sees is judged by it, with a
    note. Each time the process keeps running with its data, no OOM kill."""

    MEM = 64

    def setUp(self):
        super().setUp()
        if initial_pidns():
            self.skipTest("acts on every CUDA process of its PID namespace: run it through isolate.sh")
        for tool in ("unshare", "setpriv"):
            if not shutil.which(tool):
                self.skipTest(f"needs {tool} (util-linux)")
        self.need = host_need(self.MEM * MIB)

    def unshared(self, cg, mount=False, caps=True):
        """A wrap: into cg, then into a cgroup namespace of its own there;
        with mount, in a mount namespace where the hierarchy is mounted
        again (its top then is the namespace's, "/"); without caps, with no
        CAP_SYS_ADMIN (root's capabilities after exec are its bounding set)."""
        argv = cg.enter_argv() + ["unshare", "-C"]
        if mount:
            point, fstype, opts = self.cgroups.mount()
            argv += ["-m", "sh", "-c",
                     f'umount -l "{point}" && mount -t {fstype} -o {opts} none "{point}" && exec "$@"', "sh"]
        if not caps:
            argv += ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin"]
        return argv

    def memory_of(self, r, pid):
        return {p["pid"]: p for p in r.obj["processes"]}[pid]

    def assertUnseenRefused(self, r, pid):
        """Refused with memory-unknown: what could not be read, and the way out."""
        self.assertEqual(r.rc, 2, r)
        self.assertIn("checkpoint refused; nothing was changed", r.err)
        self.assertIn(f"process {pid} (fakecuda-app) refused: it needs up to {gib(self.need)} of host memory in "
                      "its memory cgroup ", r.err)
        hint = r.obj["error"]["hint"]
        self.assertIn("host's cgroup namespace", hint)
        self.assertIn("--ignore-memory (CUDASNAP_IGNORE_MEMORY=1)", hint)

    def test_beside_the_target_refused_with_the_numbers(self):
        """The target's cgroup lies beside cudasnap's namespace: read from
        the initial cgroup namespace, with its path from the real root."""
        tight, ns = self.cgroups.make("tight"), self.cgroups.make("ns")
        pid, = self.start_in(tight, "--mem", str(self.MEM))
        limit = tight.set_room(40 * MIB)
        ooms = tight.oom_kills()
        wrap = self.unshared(ns)
        r = self.cs("checkpoint", "--dry-run", "--json", wrap=wrap)
        self.assertEqual(r.rc, 1, r)
        cg = self.memory_of(r, pid)["memory"]["cgroup"]
        self.assertEqual((cg["route"], cg["seen"], cg["path"], cg["tightest"], cg["limit_bytes"]),
                         ("initial-namespace", "whole", tight.path, tight.path, limit), r)
        r = self.cs("checkpoint", "--json", wrap=wrap)
        self.assertEqual(r.rc, 2, r)
        self.assertRefusalNames(r.err, pid, tight, self.need, limit)
        self.assertUntouched([pid], (tight, ooms))

    def test_beside_the_target_without_cap_sys_admin(self):
        """Nothing of the chain can be read: refused as unknown, and
        --ignore-memory lets it through (in the plan)."""
        tight, ns = self.cgroups.make("tight"), self.cgroups.make("ns")
        pid, = self.start_in(tight, "--mem", str(self.MEM))
        tight.set_room(40 * MIB)
        ooms = tight.oom_kills()
        wrap = self.unshared(ns, caps=False)
        r = self.cs("checkpoint", "--json", wrap=wrap)
        self.assertUnseenRefused(r, pid)
        self.assertIn("its memory cgroup /../tight, and none of its memory cgroups can be read here: ", r.err)
        self.assertIn("lies outside", r.err)
        self.assertIn("CAP_SYS_ADMIN", r.err)
        r = self.cs("checkpoint", "--dry-run", "--json", wrap=wrap)
        self.assertEqual(r.rc, 1, r)
        e = self.memory_of(r, pid)
        self.assertEqual((e["verdict"], e["memory"]["cgroup"]["seen"], e["memory"]["cgroup"]["room_known"]),
                         ("refused", "unread", "unknown"), r)
        reason, = [x for x in e["reasons"] if x["code"] == "memory-unknown"]
        self.assertTrue(reason["blocks"], r)
        self.assertIn("--ignore-memory", reason["fix"])
        r = self.cs("checkpoint", "--dry-run", "--json", wrap=wrap, env={"CUDASNAP_IGNORE_MEMORY": "1"})
        self.assertEqual(r.rc, 0, r)
        reason, = [x for x in self.memory_of(r, pid)["reasons"] if x["code"] == "memory-unknown"]
        self.assertFalse(reason["blocks"], r)
        self.assertIn("(allowed by --ignore-memory)", reason["text"])
        self.assertUntouched([pid], (tight, ooms))

    def test_limit_above_the_namespace_top(self):
        """The namespace's own mount shows its top as "/", without a limit;
        its parent has one, too small. Read whole from the initial
        namespace; without CAP_SYS_ADMIN refused as unknown (on v1 with the
        limit that memory.stat gives away)."""
        outer = self.cgroups.make("outer")
        inner = self.cgroups.make("inner", under=outer)
        pid, = self.start_in(inner, "--mem", str(self.MEM))
        limit = outer.set_room(40 * MIB)
        kills = [(outer, outer.oom_kills()), (inner, inner.oom_kills())]
        for caps in (True, False):
            with self.subTest(caps=caps):
                r = self.cs("checkpoint", "--json", wrap=self.unshared(inner, mount=True, caps=caps))
                if caps:
                    self.assertEqual(r.rc, 2, r)
                    self.assertRefusalNames(r.err, pid, outer, self.need, limit)
                else:
                    self.assertUnseenRefused(r, pid)
                    self.assertIn("its memory cgroup /, with no limit up to /; the cgroups above / cannot be read here",
                                  r.err)
                    if outer.version == 1:
                        self.assertIn(f"one of them has a limit of {gib(limit)}", r.err)
                self.assertUntouched([pid], *kills)

    def test_the_namespace_own_limit_judged_and_the_rest_noted(self):
        """Inside the target's own namespace (its container) without
        CAP_SYS_ADMIN: its own limit is visible, its parents' are not. Judged
        by the one it sees, with a note that does not refuse."""
        outer = self.cgroups.make("outer")
        ctr = self.cgroups.make("ctr", under=outer)
        pid, = self.start_in(ctr, "--mem", str(self.MEM))
        limit = ctr.set_room(40 * MIB)
        kills = [(outer, outer.oom_kills()), (ctr, ctr.oom_kills())]
        wrap = self.unshared(ctr, mount=True, caps=False)
        r = self.cs("checkpoint", "--json", wrap=wrap)
        self.assertEqual(r.rc, 2, r)
        self.assertRefusalNames(r.err, pid, ctr, self.need, limit, path="/")
        self.assertUntouched([pid], *kills)
        ctr.set_room(512 * MIB)
        r = self.cs("checkpoint", "--dry-run", "--json", wrap=wrap)
        self.assertEqual((r.rc, r.obj["go"]), (0, True), r)
        e = self.memory_of(r, pid)
        self.assertEqual((e["memory"]["cgroup"]["seen"], e["memory"]["cgroup"]["room_known"]), ("part", "part"), r)
        note, = [x for x in e["reasons"] if x["code"] == "memory-unknown"]
        self.assertFalse(note["blocks"], r)
        self.assertIn("could be read only up to /, and it was judged by the limits up to there", note["text"])
        r = self.cs("checkpoint", wrap=wrap)
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"warning: process {pid} (fakecuda-app): its memory cgroup chain could be read only up to /",
                      r.err)
        self.assertStates([pid], "checkpointed")
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertUntouched([pid], *kills)

    def test_room_to_spare_goes_through(self):
        """No false refusal: with room, the checkpoint from the namespace
        goes through and the process comes back."""
        roomy, ns = self.cgroups.make("roomy"), self.cgroups.make("ns")
        pid, = self.start_in(roomy, "--mem", str(self.MEM))
        roomy.set_room(512 * MIB)
        ooms = roomy.oom_kills()
        r = self.cs("checkpoint", wrap=self.unshared(ns))
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("warning", r.err)
        self.assertStates([pid], "checkpointed")
        self.assertEqual(self.cs("restore", wrap=self.unshared(ns)).rc, 0)
        self.assertUntouched([pid], (roomy, ooms))


class ExactFigures(MemoryCase):
    """In the initial PID namespace NVML names each process with its own
    memory: two processes of one cgroup that fit one at a time but not
    together are refused together, and each goes through alone. NVML's
    figure includes each process's context (FAKECUDA_CONTEXT_MIB), which
    makes a large need out of little real memory."""

    CONTEXT_MIB = 200

    def setUp(self):
        super().setUp()
        if not initial_pidns():
            self.skipTest("needs NVML's per-process figures: runs without isolate.sh (integration-memory-host)")
        self.env["FAKECUDA_CONTEXT_MIB"] = str(self.CONTEXT_MIB)

    def state_of(self, pid):
        """From the drop-in: ps would ask about every process of the machine."""
        r = self.cc("--get-state", "--pid", pid)
        self.assertEqual(r.rc, 0, r)
        return r.out.strip()

    def test_two_that_fit_one_at_a_time(self):
        cg = self.cgroups.make("pair")
        pids = [self.start_in(cg, "--mem", "8")[0] for _ in range(2)]
        gpu = (8 + self.CONTEXT_MIB) * MIB
        need = host_need(gpu)
        # Room for one need and a half: one fits, two do not.
        limit = cg.set_room(need * 3 // 2)
        r = self.cs("checkpoint", "--cgroup", cg.path, "--dry-run", "--json")
        self.assertEqual(r.rc, 1, r)
        procs = {p["pid"]: p for p in r.obj["processes"]}
        self.assertEqual(sorted(procs), pids)
        for pid in pids:
            self.assertEqual((procs[pid]["memory"]["gpu_bytes_known"], procs[pid]["memory"]["gpu_bytes"]),
                             ("exact", gpu), r)
        r = self.cs("checkpoint", "--cgroup", cg.path, "--json")
        self.assertEqual(r.rc, 2, r)
        for pid in pids:
            self.assertRefusalNames(r.err, pid, cg, need, limit, bound=False)
        self.assertIn(f"with the 1 other process of that cgroup {gib(2 * need)}", r.err)
        self.assertIn("or checkpoint fewer of its processes at once (1 of the 2 fit)", r.obj["error"]["hint"])
        self.assertEqual([self.state_of(p) for p in pids], ["running"] * 2)
        self.assertDataOk(pids)
        for pid in pids:
            r = self.cs("checkpoint", "--pid", str(pid))
            self.assertEqual(r.rc, 0, r)
            self.assertEqual(self.state_of(pid), "checkpointed")
            r = self.cs("restore", "--pid", str(pid))
            self.assertEqual(r.rc, 0, r)
        self.assertEqual([self.state_of(p) for p in pids], ["running"] * 2)
        self.assertDataOk(pids)

    def test_a_process_listed_without_a_figure_is_bounded(self):
        """NVML lists the process with NVML_VALUE_NOT_AVAILABLE as its used
        memory: it holds GPU memory, bounded by the use of the GPUs it uses,
        never counted as 0 (which let its checkpoint into the OOM killer)."""
        cg = self.cgroups.make("na")
        pid, = self.start_in(cg, "--mem", "64")
        limit = cg.set_room(40 * MIB)
        ooms = cg.oom_kills()
        env = {"FAKECUDA_NVML_PROC_NA": "1"}
        r = self.cs("checkpoint", "--pid", str(pid), "--dry-run", "--json", env=env)
        self.assertEqual(r.rc, 1, r)
        mem = {p["pid"]: p for p in r.obj["processes"]}[pid]["memory"]
        self.assertEqual(mem["gpu_bytes_known"], "at-most", r)
        self.assertGreaterEqual(mem["gpu_bytes"], (64 + self.CONTEXT_MIB) * MIB, r)
        r = self.cs("checkpoint", "--pid", str(pid), env=env)
        self.assertEqual(r.rc, 2, r)
        # The bound counts every process on the GPU, other tests' too: only its shape is certain.
        self.assertRegex(r.err, f"process {pid} \\(fakecuda-app\\) refused: it needs up to \\d+\\.\\d\\d GiB of host "
                         f"memory in cgroup {re.escape(cg.path)} .* under its [a-z_.]+ of {re.escape(gib(limit))}")
        self.assertEqual(self.state_of(pid), "running")
        self.assertDataOk([pid])
        self.assertEqual(cg.oom_kills(), ooms)


class HostSelection(Case):
    """In the initial PID namespace every CUDA process of the namespace is
    every one of the node: a checkpoint or a lock without a selection is
    refused before anything is done, and --all says it outright. Runs
    without isolate.sh (integration-memory-host); whatever it runs without a
    selection sees, through CUDASNAP_PROC_DIR, a /proc with this test's
    process alone, so that a refusal that did not happen would act on no
    other test's processes."""

    def setUp(self):
        super().setUp()
        if not initial_pidns():
            self.skipTest("needs the initial PID namespace: runs without isolate.sh (integration-memory-host)")

    def only(self, pids):
        """A /proc that shows pids alone (links to their real entries)."""
        proc = os.path.join(self.tmp, "proc")
        os.mkdir(proc)
        for pid in pids:
            os.symlink(f"/proc/{pid}", os.path.join(proc, str(pid)))
        return {"CUDASNAP_PROC_DIR": proc}

    def state_of(self, pid):
        r = self.cc("--get-state", "--pid", pid)
        self.assertEqual(r.rc, 0, r)
        return r.out.strip()

    def test_bare_checkpoint_and_lock_are_refused(self):
        pid, = self.start("--mem", "1")
        env = self.only([pid])
        for args in (("checkpoint",), ("checkpoint", "--strict"), ("checkpoint", "--dry-run"), ("lock",),
                     ("checkpoint", "--json"), ("checkpoint", "--dry-run", "--json"), ("lock", "--json")):
            with self.subTest(args=args):
                r = self.cs(*args, env=env)
                self.assertEqual(r.rc, 2, r)
                self.assertIn(f"error: {args[0]} without --pid, --tree or --cgroup would take every CUDA process "
                              "of this node, every container's included: this is the host's PID namespace", r.err)
                self.assertIn(f"pass --all to {args[0]} every CUDA process of the node", r.err)
                self.assertNotIn("no CUDA process", r.err)
                if "--json" in args:
                    self.assertEqual((r.obj["outcome"], r.obj["exit_status"], r.obj["error"]["kind"]),
                                     ("error", 2, "usage"), r)
                    self.assertIn("--all", r.obj["error"]["hint"])
                self.assertFalse(os.path.exists(self.state), "the state directory was created")
                self.assertEqual(self.state_of(pid), "running")
        r = self.cs("checkpoint", "--all", "--pid", str(pid), env=env)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("--all selects every CUDA process: it does not go with --pid, --tree or --cgroup", r.err)
        # --all --dry-run says what a checkpoint of the node would do, changing nothing.
        r = self.cs("checkpoint", "--all", "--dry-run", "--json", env=env)
        self.assertEqual((r.rc, r.obj["go"], [p["pid"] for p in r.obj["processes"]]), (0, True, [pid]), r)
        self.assertFalse(os.path.exists(self.state), "the state directory was created")
        # A selection goes through as before.
        for cmd, back, state in (("checkpoint", "restore", "checkpointed"), ("lock", "unlock", "locked")):
            r = self.cs(cmd, "--pid", str(pid), env=env)
            self.assertEqual(r.rc, 0, r)
            self.assertEqual(self.state_of(pid), state)
            r = self.cs(back, "--pid", str(pid), env=env)
            self.assertEqual(r.rc, 0, r)
            self.assertEqual(self.state_of(pid), "running")
        self.assertDataOk([pid])


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
