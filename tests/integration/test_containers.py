"""Checkpoint and restore of real containers through cudasnap_plugin.so: runc,
Podman and containerd (runc under it) drive a real CRIU (4.1 or newer) over
its RPC, as they do on a node, and the containers run the fake CUDA
application against the driver double.

What differs from `criu dump -t PID` (test_criu.py), and is tested here:
CRIU runs as `criu swrk 3` (retitled `criu: dump --rpc -t PID` while it
dumps) with its options in an RPC message; the container
has its own PID, mount, IPC, UTS and network namespaces and a tmpfs /dev;
after a restore its processes keep their PIDs inside and get new ones on the
host; no engine passes CRIU an environment, so the plugin and the driver
double in CRIU learn everything from files (/etc/cudasnap/cudasnap.conf,
/etc/fakecuda.conf) and from CRIU itself.

Environment (set by meson, except the first):
  CUDASNAP_TEST_CRIU  the criu binary (else `criu` from $PATH)
  CUDASNAP_PLUGIN     the built cudasnap_plugin.so
  CUDASNAP_SANITIZE   meson's b_sanitize of the build
  CUDASNAP_BIN, FAKE_LIBCUDA, FAKE_LIBNVML, FAKE_APP: see harness.py
  FAKE_CUAPP, PARK_LIB: fakecuda-cuapp and the parking interposer

Runs as root under isolate.sh; containers.py arranges the private machine
(overlays over /usr, /etc, /var and a tmpfs /run in the test's own mount
namespace). This process is PID 1 of its namespace and a child subreaper:
every container, conmon and CRIU dies with it.
"""
import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import containers
import memcg
from containers import APP, Containerd, Machine, Podman, Runc, machine_env, reap, run
from harness import BIN, GPU0, GPU1, LIBCUDA, LIBNVML
from harness import APP as BUILT_APP

PLUGIN = os.environ.get("CUDASNAP_PLUGIN", "")
# the CUDA application on the driver API and the parking interposer (built
# for x86-64 only)
BUILT_CUAPP = os.environ.get("FAKE_CUAPP", "")
BUILT_PARK_LIB = os.environ.get("PARK_LIB", "")
SANITIZE = os.environ.get("CUDASNAP_SANITIZE", "none")
PR_SET_CHILD_SUBREAPER = 36
CRIU, NO_CRIU = containers.find_criu()
MACHINE = None
ENGINES = {}
SERIAL = 0


def why_skip():
    if SANITIZE not in ("", "none"):
        return (f"this build's plugin is sanitized (b_sanitize={SANITIZE}): an uninstrumented criu aborts when it "
                "loads it; the normal build runs these tests")
    if NO_CRIU:
        return NO_CRIU
    if os.geteuid() != 0:
        return "containers and criu need root"
    if not PLUGIN or not os.path.exists(PLUGIN):
        return "CUDASNAP_PLUGIN does not name the built cudasnap_plugin.so"
    if os.getpid() != 1:
        return "not in a PID namespace of its own (isolate.sh could not make one): the machine is not private"
    return None


def setUpModule():
    """The private machine, once for every case (the cases differ only in
    what they write to /etc/fakecuda.conf and /etc/cudasnap/cudasnap.conf)."""
    global MACHINE
    if why_skip():
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_CHILD_SUBREAPER")
    tmp = tempfile.mkdtemp(prefix="cudasnap-ct-")
    MACHINE = Machine(tmp, libcuda=LIBCUDA, libnvml=LIBNVML, app=BUILT_APP, plugin=PLUGIN, criu=CRIU,
                      cuapp=BUILT_CUAPP, park_lib=BUILT_PARK_LIB)
    try:
        MACHINE.setup()
    except BaseException:
        # unittest runs no tearDownModule after a failed setUpModule
        MACHINE.teardown()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    MACHINE.why_not = MACHINE.check()


def tearDownModule():
    try:
        for engine in ENGINES.values():
            engine.cleanup()
        reap()
    finally:
        if MACHINE:
            MACHINE.teardown()
            left = MACHINE.cgroup_paths()
            shutil.rmtree(MACHINE.tmp, ignore_errors=True)
            if left:
                print(f"cgroups left behind: {left}", file=sys.stderr)


def word(n):
    return re.compile(rf"(?<![\d.]){n}(?![\d.])")


class Cases:
    """The cases every engine goes through, and the helpers of the engine
    specific ones; a TestCase once mixed with an engine."""

    engine_class = None

    def setUp(self):
        why = why_skip() or (MACHINE.why_not if MACHINE else "the private machine was not set up")
        if why:
            self.skipTest(why)
        name = self.engine_class.name
        if name not in ENGINES:
            ENGINES[name] = self.engine_class(MACHINE, MACHINE.tmp)
        self.engine = ENGINES[name]
        if self.engine.missing():
            self.skipTest(f"{name}: {self.engine.missing()}")
        self.tmp = tempfile.mkdtemp(prefix=f"{self._testMethodName[5:30]}-", dir=MACHINE.tmp)
        MACHINE.fakecuda({})
        MACHINE.cudasnap({})
        self.containers = []
        self.addCleanup(self.cleanup)
        self.count = 0

    def cleanup(self):
        for c in self.containers:
            self.engine.remove(c)
        reap()

    # --- containers and what they run ---

    def new_share(self):
        """A new container's name and the directory it shares with the test."""
        global SERIAL
        SERIAL += 1
        self.count += 1
        name = f"c{SERIAL}-{self._testMethodName[5:25].strip('_').replace('_', '-')}"
        share = os.path.join(self.tmp, f"share{self.count}")
        os.makedirs(os.path.join(share, "ready"))
        return name, share

    def container(self, *args, expect, env=None):
        """A container running fakecuda-app with args: its device files in
        its own /dev (CUDASNAP_DEV_DIR=/dev), its faults in a file of the
        test's directory bound at the same path."""
        name, share = self.new_share()
        env = dict({"PATH": containers.PATH, "CUDASNAP_DEV_DIR": "/dev", "FAKECUDA_GPUS": GPU0,
                    "FAKECUDA_FAULTS": os.path.join(share, "faults")}, **(env or {}))
        c = self.engine.start(name, share, [APP, "--ready-dir", os.path.join(share, "ready"), *args], env, expect)
        self.containers.append(c)
        c.wait_ready()
        return c

    def restored(self, c, outcome_and_container):
        outcome, n = outcome_and_container
        if n is not c:
            self.containers.append(n)
        return outcome, n

    def checkpoint(self, c, *extra):
        return self.engine.checkpoint(c, *extra)

    def restore(self, c):
        return self.restored(c, self.engine.restore(c))

    def cs(self, *args, timeout=60):
        """The built cudasnap, as an administrator on the node runs it: no
        CUDASNAP_* variable, the machine's libcuda.so.1 (the double)."""
        return subprocess.run([BIN, *args], capture_output=True, text=True, env=machine_env(), timeout=timeout)

    def states(self, c):
        """{container pid: GPU state} from `cudasnap ps --json` on the host."""
        p = self.cs("ps", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        got = {q["pid"]: q["state"] for q in json.loads(p.stdout)["processes"]}
        return {cpid: got.get(hpid) for cpid, hpid in c.pids().items() if cpid in c.ready_pids()}

    def assertStates(self, c, state, note=""):
        want = {cpid: state for cpid in c.ready_pids()}
        self.assertEqual(self.states(c), want, note)

    def assertDataOk(self, c, gpu=None):
        got = c.verify()
        self.assertEqual(sorted(got), c.ready_pids(), f"no verify answer from some processes: {got}")
        for cpid, line in got.items():
            self.assertTrue(line.startswith("ok"), f"container pid {cpid}: {line}")
            if gpu:
                self.assertIn(f"gpu={gpu}", line, f"container pid {cpid}")

    def assertRunningAndOk(self, c, note="", gpu=None):
        self.assertStates(c, "running", note)
        self.assertDataOk(c, gpu)

    def assertLogNames(self, outcome, pattern, what):
        self.assertTrue(any(re.search(pattern, line) for line in outcome.cudasnap_lines()),
                        f"no cudasnap: line with {what}:\n{outcome}")

    # --- the cases of every engine ---

    def test_checkpoint_and_restore(self):
        c = self.container("--spawn", "2", "--mem", "8", expect=3)
        before = c.pids()
        r = self.checkpoint(c)
        self.assertEqual(r.rc, 0, r)
        if r.gone:
            self.log_gone(r, sorted(before.values()))
        self.assertEqual(c.pids(), {}, "the container still runs after its checkpoint")
        r, n = self.restore(c)
        self.assertEqual(r.rc, 0, r)
        after = n.pids()
        self.assertEqual(sorted(after), sorted(before), "the container's own PIDs changed")
        for cpid in before:
            self.assertNotEqual(after[cpid], before[cpid], f"container pid {cpid} has the same host pid")
        self.assertRunningAndOk(n, f"after the restore:\n{r}")
        # what the plugin did stays on the node, whatever the engine keeps of CRIU's logs
        p = self.cs("history", "--json", "-n", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        restore, dump = json.loads(p.stdout)
        for e, front, op, pids in ((dump, "criu-dump", "dump", before), (restore, "criu-restore", "restore", after)):
            self.assertEqual((e["front"], e["outcome"]), (front, "done"), e)
            self.assertRegex(e["caller"]["cmdline"], f"^criu: {op} --rpc")
            self.assertRegex(e["caller"]["parent_cmdline"], r"\b(runc|crun)\b", e)
            self.assertEqual(sorted((x["nspid"], x["pid"]) for x in e["processes"]), sorted(pids.items()), e)
            self.assertTrue(all(x["outcome"] == "done" for x in e["processes"]), e)

    def test_leave_running(self):
        """The engines pass --leave-running in the RPC message, never on a
        command line (CRIU's is `criu swrk 3`, then `criu: dump --rpc -t
        PID`): a plugin that looks for -R there checkpoints the GPU state and
        leaves it so in a container that keeps running."""
        c = self.container("--spawn", "2", "--mem", "8", expect=3)
        before = c.pids()
        r = self.checkpoint(c, "--leave-running")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(c.pids(), before, "--leave-running: the container should keep its processes")
        self.assertRunningAndOk(c, f"after checkpoint --leave-running:\n{r}")
        # the images restore too, once the original is gone
        self.engine.stop(c)
        r, n = self.restore(c)
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(n, f"after the restore:\n{r}")

    def test_memory_limit_too_small_refuses_checkpoint_and_leave_running(self):
        """A container whose memory limit leaves less room than its
        checkpoint's copy needs (the limit set on the cgroup the engine made,
        as `runc update --memory` or a pod's limit does): both checkpoints
        refused at once, naming the cgroup; every process runs on with its
        data, none OOM-killed. With room, the same container goes through."""
        MACHINE.fakecuda({"FAKECUDA_GPUS": GPU0})  # the containers' GPU is the machine's
        c = self.container("--spawn", "1", "--mem", "64", expect=2)
        cg = memcg.cgroup_of(c.pids()[c.ready_pids()[0]])
        if cg is None:
            self.skipTest("the container's memory cgroup is not visible here")
        cg.set_room(40 * 1024 * 1024)
        ooms = cg.oom_kills()
        before = c.pids()
        for extra in ((), ("--leave-running",)):
            with self.subTest(extra=extra):
                r = self.checkpoint(c, *extra)
                self.assertNotEqual(r.rc, 0, r)
                self.assertLess(r.wall, 10, r)
                self.assertLogNames(r, r"refused: it needs (up to )?\d+\.\d\d GiB of host memory in cgroup "
                                    + re.escape(cg.path), "the refusal and the container's cgroup")
                self.assertEqual(c.pids(), before, "the container lost processes")
                self.assertRunningAndOk(c, f"after the refused checkpoint:\n{r}")
                self.assertEqual(cg.oom_kills(), ooms, "a process was OOM-killed")
        cg.set_room(512 * 1024 * 1024)
        r = self.checkpoint(c)  # the engine removes the cgroup with the container
        self.assertEqual(r.rc, 0, r)
        r, n = self.restore(c)
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(n, f"after the restore:\n{r}")

    def filler(self, mib):
        """A process of the machine, outside any container, that holds mib
        MiB of the GPU's memory."""
        ready = os.path.join(self.tmp, "filler")
        os.makedirs(ready, exist_ok=True)
        p = subprocess.Popen([APP, "--ready-dir", ready, "--mem", str(mib)], env=machine_env(),
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (p.poll() is None and os.killpg(p.pid, signal.SIGKILL), p.wait()))
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(ready, f"{p.pid}.ready")):
            self.assertLess(time.monotonic(), deadline, "the filler did not start")
            time.sleep(0.02)
        return p

    def test_restore_refused_before_criu_creates_anything_while_the_gpu_is_full(self):
        """Another process took the GPU after the checkpoint: the engine's
        restore fails at the plugin's init, before CRIU creates any process,
        so the engine says so and the images are intact; once the GPU has room
        the same images restore, data verified."""
        MACHINE.fakecuda({"FAKECUDA_GPUS": GPU0, "FAKECUDA_GPU_TOTAL_MIB": "1024"})
        c = self.container("--spawn", "1", "--mem", "64", expect=2)
        r = self.checkpoint(c)
        self.assertEqual(r.rc, 0, r)
        f = self.filler(900)
        r, n = self.restore(c)
        self.assertNotEqual(r.rc, 0, f"the engine took a refused GPU restore for a restored container:\n{r}")
        self.assertLogNames(r, r"REFUSED before CRIU created any process", "the refusal at the restore's init")
        self.assertLogNames(r, r"cannot be restored here: its restore needs 0\.\d\d GiB on GPU 0", "the numbers")
        self.assertFalse(any("restore: CUDA" in line for line in r.cudasnap_lines()), r)
        if n.name != c.name:
            self.engine.remove(n)
        os.killpg(f.pid, signal.SIGKILL)
        f.wait()
        r, n = self.restore(c)
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(n, f"after the restore:\n{r}")

    def restore_onto_gpu_b(self, settings):
        """Dumped where the machine has GPU A, restored where it has only B.
        The container's own double knows both (its environment lists them),
        so it takes either; the plugin and the double in CRIU see the
        machine through /etc/fakecuda.conf."""
        MACHINE.fakecuda({"FAKECUDA_GPUS": GPU0})
        c = self.container("--spawn", "1", "--mem", "4", expect=2,
                           env={"FAKECUDA_GPUS": f"{GPU0},{GPU1}", "CUDA_VISIBLE_DEVICES": "0"})
        self.assertDataOk(c, gpu=GPU0)
        r = self.checkpoint(c)
        self.assertEqual(r.rc, 0, r)
        MACHINE.fakecuda({"FAKECUDA_GPUS": GPU1})
        MACHINE.cudasnap(settings)
        r, n = self.restore(c)
        self.assertEqual(r.rc, 0, r)
        if not settings:
            # mapped without being told: the log must say so
            self.assertTrue(any(GPU0 in line and GPU1 in line for line in r.cudasnap_lines()),
                            f"the restore log does not say {GPU0} -> {GPU1}:\n{r}")
        else:
            # the file's map was read (and not refused): nothing was chosen for it
            self.assertFalse(any("to choose" in line for line in r.cudasnap_lines()),
                             f"the plugin did not take the settings file's map:\n{r}")
        self.assertRunningAndOk(n, f"after the restore:\n{r}", gpu=GPU1)

    def test_plugin_directory_named_in_criu_configuration(self):
        """No engine passes CRIU --libdir: where the plugin is not in CRIU's
        default plugin directory, CRIU's own configuration names its
        directory, in /etc/criu/default.conf (every CRIU reads it, `criu
        swrk` too) or in /etc/criu/runc.conf (the file runc hands CRIU with
        its RPC request). The restore's log proves the plugin was loaded
        (CRIU alone would restore the double's device files, regular files
        here, without a word)."""
        moved = "/usr/local/lib/cudasnap-criu"
        plugin = os.path.join(containers.CRIU_PLUGIN_DIR, "cudasnap_plugin.so")
        os.makedirs(moved, exist_ok=True)
        os.rename(plugin, os.path.join(moved, "cudasnap_plugin.so"))
        self.addCleanup(os.rename, os.path.join(moved, "cudasnap_plugin.so"), plugin)
        for conf in ("/etc/criu/default.conf", "/etc/criu/runc.conf"):
            with self.subTest(conf=conf):
                self.assertFalse(os.path.exists(conf), f"{conf} of the machine would be overwritten")
                containers.write(conf, f"libdir {moved}\n")
                try:
                    c = self.container("--spawn", "1", "--mem", "4", expect=2)
                    host = c.pids()
                    r = self.checkpoint(c)
                    self.assertEqual(r.rc, 0, r)
                    if r.gone:
                        self.log_gone(r, sorted(host.values()))
                    else:
                        self.assertLogNames(r, r"checkpointed 2 processes", "the checkpoint")
                    r, n = self.restore(c)
                    self.assertEqual(r.rc, 0, r)
                    self.assertLogNames(r, r"restored 2 processes", "the restore")
                    self.assertRunningAndOk(n, f"after the restore:\n{r}")
                finally:
                    os.unlink(conf)

    def test_restore_onto_other_gpus(self):
        self.restore_onto_gpu_b({})

    def test_restore_onto_other_gpus_with_a_device_map(self):
        """The map of the plugin's settings file (no environment reaches CRIU
        under Podman)."""
        self.restore_onto_gpu_b({"CUDASNAP_DEVICE_MAP": f"{GPU0}={GPU1}"})

    def test_two_containers_at_once(self):
        """Two pods of one node checkpointed at the same moment: two CRIUs, two
        plugins, each on its own processes; neither waits for the other (each
        checkpoint takes 4 s in the driver, longer than the engines' own part,
        which took up to 3 s here on two cores with other tests running; one
        after the other takes more than twice that)."""
        delay = 4.0
        a = self.container("--spawn", "1", "--mem", "4", expect=2)
        b = self.container("--spawn", "1", "--mem", "4", expect=2)
        for c in (a, b):
            c.fault(f"* checkpoint delay={int(delay * 1000)}")
        pa, pb = self.engine.checkpoint_async(a), self.engine.checkpoint_async(b)
        ra, rb = pa.wait(), pb.wait()
        # The commands' own times: an engine may take a while to start the
        # second (Podman asks for the container's directory first) and
        # containerd's engine removes the container after its command. From
        # the later start to the later end, and how long both were running.
        starts, ends = (pa.t0, pb.t0), (pa.t0 + ra.wall, pb.t0 + rb.wall)
        both, together = max(ends) - max(starts), min(ends) - max(starts)
        self.assertEqual(ra.rc, 0, f"first container:\n{ra}\nsecond:\n{rb}")
        self.assertEqual(rb.rc, 0, f"second container:\n{rb}\nfirst:\n{ra}")
        print(f"{self.engine.name}: two checkpoints at once: {ra.wall:.2f} s and {rb.wall:.2f} s, the second "
              f"started {max(starts) - min(starts):.2f} s after the first, {both:.2f} s from then for both",
              file=sys.stderr)
        self.assertGreater(min(ra.wall, rb.wall), delay, "the checkpoint delay did not apply")
        self.assertGreater(together, delay / 2, f"they were not running together:\n{ra}\n{rb}")
        self.assertLess(both, 2 * delay, f"they did not overlap:\n{ra}\n{rb}")
        for c in (a, b):
            c.clear_faults()
            r, n = self.restore(c)
            self.assertEqual(r.rc, 0, r)
            self.assertRunningAndOk(n, f"after the restore:\n{r}")

    def test_container_dump_and_cudasnap_at_once(self):
        """A container's dump and a `cudasnap checkpoint` of one of its
        processes from the host at the same moment: one is refused, naming
        the other, and nothing is left locked. Every lock takes 1.5 s and
        every checkpoint 2 s, so both are in flight together: on the
        container's first process the dump is there first, on its last one
        the command line is (it claims before it asks the driver anything,
        and holds the process through its lock and its checkpoint)."""
        for which in ("first", "last"):
            with self.subTest(process=which):
                c = self.container("--spawn", "1", "--mem", "4", expect=2)
                c.fault("* lock delay=1500", "* checkpoint delay=2000")
                host = c.pids()
                cpid = min(host) if which == "first" else max(host)
                self.dump_against_cudasnap(c, cpid, host[cpid])
                self.engine.remove(c)

    def dump_against_cudasnap(self, c, cpid, victim):
        dump = self.engine.checkpoint_async(c)
        # from the moment the plugin speaks in the dump's log
        deadline = time.monotonic() + 30
        while "cudasnap:" not in dump.log() and dump.p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        criu_pids = containers.pids_of("criu")
        cli = subprocess.Popen([BIN, "checkpoint", "--pid", str(victim)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=machine_env())
        out, err = cli.communicate(timeout=60)
        r = dump.wait()
        c.clear_faults()
        note = f"dump:\n{r}\ncudasnap checkpoint --pid {victim}: rc={cli.returncode}\n{out}{err}"
        if r.rc == 0:
            refusal = err.strip()
        else:
            refusal = "\n".join(line for line in r.cudasnap_lines() if word(cli.pid).search(line))
        print(f"{self.engine.name}: on container pid {cpid}, "
              f"{'the container dump' if r.rc == 0 else 'cudasnap checkpoint'} won; the other: {refusal[:300]}",
              file=sys.stderr)
        self.assertTrue((r.rc == 0) != (cli.returncode == 0), f"exactly one should win:\n{note}")
        if r.rc == 0:
            # the command line lost: it names the CRIU that holds the process
            self.assertEqual(cli.returncode, 2, note)
            self.assertTrue("criu" in err or any(word(p).search(err) for p in criu_pids), note)
            r, n = self.restore(c)
            self.assertEqual(r.rc, 0, r)
            self.assertRunningAndOk(n, f"after the restore:\n{r}")
        else:
            # the dump lost: the plugin names the cudasnap that holds it, and
            # gives every process back; the command line's one is restorable
            self.assertLogNames(r, word(cli.pid), f"the pid of cudasnap checkpoint ({cli.pid})")
            want = {p: "running" for p in c.ready_pids()}
            want[cpid] = "checkpointed"
            self.assertEqual(self.states(c), want, note)
            p = self.cs("restore", "--pid", str(victim))
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertRunningAndOk(c, note)

    def test_forked_device_holder_fails_fast(self):
        c = self.container("--fork-after-init", "1", "--mem", "4", expect=2)
        forked = next(cpid for cpid in c.ready_pids() if c.role(cpid) == "forked")
        host = c.pids()
        r = self.checkpoint(c)
        print(f"{self.engine.name}: dump refused in {r.wall:.2f} s", file=sys.stderr)
        self.assertNotEqual(r.rc, 0, r)
        self.assertLess(r.wall, 5, r)
        self.assertTrue(any("forked" in line and (word(host[forked]).search(line) or f"{forked} in its namespace"
                                                  in line) for line in r.cudasnap_lines()),
                        f"the forked process (container pid {forked}, host pid {host[forked]}) is not named:\n{r}")
        self.assertEqual(c.pids(), host, "the container lost processes")
        parent = [cpid for cpid in c.ready_pids() if cpid != forked]
        self.assertEqual({k: v for k, v in self.states(c).items() if k in parent}, {p: "running" for p in parent},
                         f"after the refused dump:\n{r}")
        got = c.verify()
        self.assertTrue(got.get(parent[0], "").startswith("ok"), f"the parent's data: {got}")

    # --- a program that runs the parking interposer ---

    def cuapp_container(self, alloc_mib=8, allocs=2):
        """A container whose program, fakecuda-cuapp, runs the parking
        interposer: LD_PRELOAD in the container's environment (what `cudasnap
        run` sets), the control socket in the container's own /dev/shm (the
        interposer's default). A shell starts it with its output in a file
        of the share directory (bound at the same path: CRIU carries the
        open file, and this test reads it); `exec` leaves the program alone
        in the container, its PID 1."""
        if not (BUILT_CUAPP and BUILT_PARK_LIB):
            self.skipTest("the parking interposer is built for x86-64 only (no FAKE_CUAPP or PARK_LIB)")
        name, share = self.new_share()
        out = os.path.join(share, "out")
        env = {"PATH": containers.PATH, "CUDASNAP_DEV_DIR": "/dev", "FAKECUDA_GPUS": GPU0,
               "FAKECUDA_FAULTS": os.path.join(share, "faults"), "LD_PRELOAD": containers.PARK_LIB}
        cmd = (f"exec {containers.CUAPP} --alloc-mib {alloc_mib} --allocs {allocs} --interval-ms 50 "
               f">>{out} 2>&1")
        c = self.engine.start(name, share, ["sh", "-c", cmd], env, 1)
        self.containers.append(c)
        c.out = out
        self.assertTrue(self.cuapp_line(c, "ready pid=1 "), f"{containers.read(out)}\n{self.engine.diagnose(c)}")
        return c

    def cuapp_line(self, c, prefix, after=0, timeout=30):
        """The last line of c's program that starts with prefix, among those
        after the first `after`; None when none comes in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [ln for ln in containers.read(c.out).splitlines()[after:] if ln.startswith(prefix)]
            if lines:
                return lines[-1]
            time.sleep(0.05)
        return None

    def cuapp_verify(self, c, hpid):
        """SIGUSR1 to the program (its host pid): it checks every byte of its
        device memory and says 'verify ok bytes=N' or 'verify FAILED ...'."""
        n = len(containers.read(c.out).splitlines())
        os.kill(hpid, signal.SIGUSR1)
        return self.cuapp_line(c, "verify", after=n, timeout=15)

    def park_of(self, hpid):
        """What `cudasnap ps --json` on the host says of the process's
        interposer (its "park"; None where it says nothing of one)."""
        p = self.cs("ps", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        procs = {q["pid"]: q for q in json.loads(p.stdout)["processes"]}
        self.assertIn(hpid, procs, f"cudasnap ps does not show host pid {hpid}: {p.stdout}")
        return procs[hpid], procs[hpid].get("park")

    def test_parked_memory_travels_in_the_checkpoint(self):
        """A container whose program runs the parking interposer, checkpointed
        in the form that moves to another node (runc: its images directory;
        Podman: the exported archive; containerd: the checkpoint image of its
        content store) and restored from that alone: the plugin parks the
        program's 16 MiB of device memory into a file of CRIU's images
        directory, the checkpoint carries that file and CRIU's pages do not
        hold the memory, and after the restore the program runs unparked
        with every byte of its data."""
        parked = 16 << 20
        c = self.cuapp_container()
        host = c.pids()
        self.assertEqual(sorted(host), [1], "the program alone, the container's PID 1")
        hpid = host[1]
        proc, park = self.park_of(hpid)
        self.assertEqual((proc["state"], park and park["parkable"], park and park["parked"], park and park["bytes"]),
                         ("running", True, False, parked), f"before the checkpoint: {proc}")
        r = self.engine.checkpoint_to_move(c)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(c.pids(), {}, "the container still runs after its checkpoint")
        # (1) parked into files of the images: the plugin's line where the
        # engine keeps CRIU's log, and the node's history in any case
        if r.gone:
            self.log_gone(r, [hpid])
        else:
            self.assertLogNames(r, rf"process {hpid} \(fakecuda-cuapp\) parked 0\.02 GiB of device memory in 1 files "
                                r"of the images", "the park into one file of the images")
        p = self.cs("history", "--json", "-n", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        (dump,) = json.loads(p.stdout)
        self.assertEqual((dump["front"], dump["outcome"]), ("criu-dump", "done"), dump)
        self.assertEqual([(x["pid"], x["nspid"], x["outcome"]) for x in dump["processes"]], [(hpid, 1, "done")], dump)
        self.assertIn("park", dump["processes"][0]["seconds"], f"the history has no park: {dump}")
        # (2) what the checkpoint carries, as the engine keeps it
        files = self.engine.carried(c)
        gpumem = {k: v for k, v in files.items() if k.startswith("cudasnap-gpumem.")}
        self.assertEqual(list(gpumem.values()), [parked], f"the checkpoint's files: {files}")
        record = json.loads(self.engine.carried_file(c, "cudasnap-plugin.json"))
        self.assertEqual(len(record["processes"]), 1, record)
        pf = record["processes"][0].get("park_files")
        self.assertTrue(pf, f"the record names no park files: {record}")
        self.assertEqual((pf["dir"], pf["name"] + ".0", pf["count"], pf["bytes"]),
                         (None, next(iter(gpumem)), 1, parked), record)
        pages = sum(v for k, v in files.items() if re.fullmatch(r"pages-\d+\.img", k))
        print(f"{self.engine.name}: checkpoint in {r.wall:.2f} s carries {sorted(gpumem.items())} and "
              f"{pages / (1 << 20):.1f} MiB of CRIU's pages", file=sys.stderr)
        self.assertGreater(pages, 0, f"no CRIU pages among the checkpoint's files: {files}")
        self.assertLess(pages, parked, f"CRIU's pages carry the parked memory: {files}")
        # (3) restored from it: unparked from the file, every byte checked
        r, n = self.restored(c, self.engine.restore_moved(c))
        self.assertEqual(r.rc, 0, r)
        n.out = c.out
        after = n.pids()
        self.assertEqual(sorted(after), [1], f"after the restore:\n{r}")
        self.assertNotEqual(after[1], hpid, "the restored program has its old host pid")
        self.assertLogNames(r, rf"process {after[1]} \(fakecuda-cuapp\) unparked 0\.02 GiB of device memory",
                            "the unpark from the file")
        deadline = time.monotonic() + 20
        while (self.park_of(after[1])[1] or {}).get("parked") and time.monotonic() < deadline:
            time.sleep(0.1)
        proc, park = self.park_of(after[1])
        self.assertEqual((proc["state"], park and park["parked"], park and park["bytes"]), ("running", False, parked),
                         f"after the restore: {proc}\n{r}")
        print(f"{self.engine.name}: restore in {r.wall:.2f} s", file=sys.stderr)
        self.assertEqual(self.cuapp_verify(n, after[1]), "verify ok bytes=16777216", containers.read(c.out))

    def test_a_failed_unpark_fails_the_engines_restore(self):
        """The unpark from the images' files runs at CRIU's exit hook, once
        CRIU has let the tree run and before it answers: one that fails (no
        GPU memory to map back) kills the tree and ends CRIU with status 1,
        so that the engine's restore fails rather than report a container
        whose GPU memory is not back; the checkpoint restores again once
        the cause is gone, every byte checked."""
        c = self.cuapp_container()
        r = self.checkpoint(c)
        self.assertEqual(r.rc, 0, r)
        c.fault("* mem_create error=2")  # out of GPU memory
        r, n = self.restore(c)
        c.clear_faults()
        self.assertNotEqual(r.rc, 0, f"the engine took a failed unpark for a restored container:\n{r}")
        self.assertIn("CRIU ends now with exit status 1", r.log, r)
        self.assertEqual(n.pids(), {}, f"the restored container still runs:\n{r}")
        if n.name != c.name:  # runc: a container of its own; Podman restores c again
            self.engine.remove(n)
        r, n = self.restore(c)
        self.assertEqual(r.rc, 0, r)
        n.out = c.out
        after = n.pids()
        self.assertEqual(sorted(after), [1], f"after the second restore:\n{r}")
        deadline = time.monotonic() + 20
        while (self.park_of(after[1])[1] or {}).get("parked") and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.cuapp_verify(n, after[1]), "verify ok bytes=16777216", containers.read(c.out))

    # --- a node whose /run/cudasnap cannot be used ---
    # The engines pass CRIU no environment: the state directory comes from
    # /etc/cudasnap/cudasnap.conf or is /run/cudasnap.

    @contextlib.contextmanager
    def unusable_run(self, how):
        """/run/cudasnap made unusable as a node has it: on a read-only
        filesystem (all of /run, or a mount of its own), or made 0775 by a
        tmpfiles rule."""
        if how == "read-only /run":
            run(["mount", "-o", "remount,ro", "/run"])
            try:
                yield
            finally:
                run(["mount", "-o", "remount,rw", "/run"])
            return
        os.makedirs("/run/cudasnap", mode=0o700, exist_ok=True)
        if how == "read-only /run/cudasnap":
            run(["mount", "-t", "tmpfs", "-o", "mode=0700", "cudasnap-it-ro", "/run/cudasnap"])
            try:
                run(["mount", "-o", "remount,ro", "/run/cudasnap"])
                yield
            finally:
                run(["umount", "/run/cudasnap"])
            return
        mode = os.stat("/run/cudasnap").st_mode & 0o7777
        os.chmod("/run/cudasnap", 0o775)
        try:
            yield
        finally:
            os.chmod("/run/cudasnap", mode)

    def plain_container(self):
        """A container that never loads the driver (a shell and a sleep):
        what most containers of a GPU node are."""
        global SERIAL
        SERIAL += 1
        self.count += 1
        name = f"c{SERIAL}-plain"
        share = os.path.join(self.tmp, f"share{self.count}")
        ready = os.path.join(share, "ready")
        os.makedirs(ready)
        c = self.engine.start(name, share, ["sh", "-c", f"sleep 600 & echo > {ready}/$$.ready; wait"],
                              {"PATH": containers.PATH}, 1)
        self.containers.append(c)
        c.wait_ready()
        self.assertEqual(len(c.pids()), 2, "the shell and its sleep")
        return c

    def assertSilent(self, outcome):
        self.assertEqual(outcome.rc, 0, outcome)
        if outcome.gone:
            self.log_gone(outcome, [])
            return
        self.assertEqual(outcome.cudasnap_lines(), [], outcome)

    def log_gone(self, outcome, processes):
        """The hook for what the plugin said where the engine deleted CRIU's
        log (containerd, after a successful checkpoint): processes are the
        host pids the plugin had to checkpoint ([]: none, the plugin had to
        stay silent). CRIU's log cannot tell it any more; the callers assert
        the engine's result and the processes' states (`cudasnap ps`). An
        operation log of the state directory, which outlives the engine's
        cleanup, can be asserted here; this asserts nothing else."""
        self.assertTrue(outcome.gone, outcome)

    def test_container_without_cuda_needs_no_state_directory(self):
        for how in self.unusable:
            with self.subTest(how=how), self.unusable_run(how):
                c = self.plain_container()
                before = c.pids()
                self.assertSilent(self.checkpoint(c, "--leave-running"))
                self.assertEqual(c.pids(), before, "--leave-running: the container should keep its processes")
                self.engine.stop(c)
                r, n = self.restore(c)
                self.assertSilent(r)
                self.assertEqual(sorted(n.pids()), sorted(before), f"after the restore:\n{r}")
                self.assertSilent(self.checkpoint(n))
                self.assertEqual(n.pids(), {}, "the container still runs after its checkpoint")
                r, n = self.restore(n)
                self.assertSilent(r)
                self.assertEqual(sorted(n.pids()), sorted(before), f"after the restore:\n{r}")

    def test_cuda_container_with_an_unusable_state_directory_fails_naming_the_fix(self):
        """The dump fails at the first CUDA process, naming it and a fix that
        reaches CRIU; the container runs on, untouched; the fix works."""
        for how in self.unusable:
            with self.subTest(how=how), self.unusable_run(how):
                c = self.container("--spawn", "1", "--mem", "4", expect=2)
                host = c.pids()
                r = self.checkpoint(c)
                self.assertNotEqual(r.rc, 0, r)
                named = [line for line in r.cudasnap_lines() if "state directory" in line]
                self.assertEqual(len(named), 1, r)
                self.assertTrue(word(host[1]).search(named[0]) and "(fakecuda-app)" in named[0], r)
                self.assertIn(f"CUDASNAP_STATE_DIR=<a directory owned by root, mode 0700, on a writable "
                              f"filesystem> in {containers.CUDASNAP_CONF}", named[0], r)
                self.assertIn("/run/cudasnap", named[0], r)
                self.assertEqual(c.pids(), host, f"the container lost processes:\n{r}")
                self.assertRunningAndOk(c, f"after the refused dump:\n{r}")
                # the fix the line gives, and for the restore the node's book
                # of GPU restores, which the state directory does not move,
                # on a writable filesystem too
                state = tempfile.mkdtemp(prefix="state-", dir=self.tmp)  # root's, 0700
                book = tempfile.mkdtemp(prefix="book-", dir=self.tmp)
                MACHINE.cudasnap({"CUDASNAP_STATE_DIR": state, "CUDASNAP_GPU_BOOK": book})
                try:
                    r = self.checkpoint(c)
                    self.assertEqual(r.rc, 0, r)
                    r, n = self.restore(c)
                    self.assertEqual(r.rc, 0, r)
                    self.assertRunningAndOk(n, f"after the restore:\n{r}")
                finally:
                    MACHINE.cudasnap({})

    # --- a driver error at each step ---

    def fault_at_dump(self, c, op, victim):
        host = c.pids()
        c.fault(f"{victim} {op} error=999 1")
        r = self.checkpoint(c)
        c.clear_faults()
        self.assertNotEqual(r.rc, 0, r)
        self.assertEqual(c.pids(), host, f"the container should keep running:\n{r}")
        self.assertTrue(any("CUDA_ERROR_UNKNOWN" in line and (word(host[victim]).search(line) or
                                                              f"{victim} in its namespace" in line)
                            for line in r.cudasnap_lines()),
                        f"no cudasnap: line names host pid {host[victim]} (container pid {victim}) with "
                        f"CUDA_ERROR_UNKNOWN:\n{r}")
        self.assertRunningAndOk(c, f"after the failed {op}:\n{r}")

    def fault_at_restore(self, c, op, victim, keep=False):
        """CRIU ignores the result of RESUME_DEVICES_LATE: the plugin kills
        the restored processes, so that the engine's restore fails and says
        so, and the images restore again once the fault is gone. With
        CUDASNAP_KEEP_FAILED_RESTORE=1 in the settings file the engine's
        restore succeeds, the GPU state stays checkpointed, and the log says
        what to run."""
        r = self.checkpoint(c)
        self.assertEqual(r.rc, 0, r)
        c.fault(f"{victim} {op} error=999 1")
        MACHINE.cudasnap({"CUDASNAP_KEEP_FAILED_RESTORE": "1"} if keep else {})
        r, n = self.restore(c)
        n.clear_faults()
        MACHINE.cudasnap({})
        self.assertTrue(any("NOT restored" in line for line in r.cudasnap_lines()), r)
        if not keep:
            self.assertNotEqual(r.rc, 0, f"the engine took a failed GPU restore for a restored container:\n{r}")
            self.assertIn("restored processes are killed", r.log, r)
            if n.name != c.name:  # runc: a container of its own; Podman restores c again
                self.engine.remove(n)
            r, n = self.restore(c)
            self.assertEqual(r.rc, 0, r)
            self.assertRunningAndOk(n, f"restored again after a failed {op}:\n{r}")
            return n
        self.assertEqual(r.rc, 0, r)
        self.assertStates(n, "checkpointed", f"after a failed {op}:\n{r}")
        host = n.pids()
        for cpid in n.ready_pids():
            self.assertTrue(any(word(host[cpid]).search(line) and "NOT restored" in line
                                for line in r.cudasnap_lines()),
                            f"host pid {host[cpid]} (container pid {cpid}) is not named NOT restored:\n{r}")
        advice = sorted(set(m.strip() for m in re.findall(r"cudasnap restore (?:--pid \d+ ?)+", r.log)))
        named = {int(p) for a in advice for p in re.findall(r"--pid (\d+)", a)}
        self.assertEqual(named, set(host.values()), f"`cudasnap restore --pid N` for every process:\n{r}")
        for line in advice:
            p = self.cs(*line.split()[1:])
            self.assertEqual(p.returncode, 0, f"{line}: {p.stdout}{p.stderr}")
        self.assertRunningAndOk(n, f"after {advice}")
        return n


class RuncCases(Cases, unittest.TestCase):
    engine_class = Runc
    unusable = ("read-only /run", "/run/cudasnap 0775")

    def test_fault_at_each_step_of_each_process(self):
        """The whole matrix on one container of three processes: a failed dump
        leaves it running; a restore with a failed step fails, the images
        restore again, or (kept, as the settings file asks) the container
        stays checkpointed until the advice of the log is followed."""
        c = self.container("--spawn", "2", "--mem", "2", expect=3)
        for op in ("lock", "checkpoint"):
            for victim in c.ready_pids():
                with self.subTest(op=op, victim=victim):
                    self.fault_at_dump(c, op, victim)
        for op in ("restore", "unlock"):
            for i, victim in enumerate(sorted(c.ready_pids())):
                with self.subTest(op=op, victim=victim):
                    c = self.fault_at_restore(c, op, victim, keep=i == 1)


class ContainerdCases(Cases, unittest.TestCase):
    """containerd 1.6 (Debian 12's) with runc under it, driven by `ctr` (see
    containers.Containerd): every shared case, with containerd's checkpoint,
    `ctr c checkpoint --task`, which pauses the container first and leaves
    it running (runc's --leave-running); where a case wants the container
    gone after its checkpoint, the engine then removes it, as a node does to
    move a container. containerd deletes CRIU's dump.log once a checkpoint
    has succeeded: those cases assert the engine's result and the
    processes' states (Outcome.gone, Cases.log_gone); a failed checkpoint's
    log is the bundle's criu-dump.log, a restore's the shim's restore.log."""

    engine_class = Containerd
    # the shims' sockets are in /run/containerd/s (containerd 1.6 puts them
    # there whatever --state says): all of /run cannot be read-only
    unusable = ("read-only /run/cudasnap", "/run/cudasnap 0775")

    def test_fault_at_each_step(self):
        """One cell for each step (the whole matrix runs under runc); a
        refused checkpoint leaves the task RUNNING, not paused."""
        c = self.container("--spawn", "1", "--mem", "2", expect=2)
        child = max(c.ready_pids())
        for op in ("lock", "checkpoint"):
            with self.subTest(op=op):
                self.fault_at_dump(c, op, child if op == "lock" else 1)
                self.assertEqual((self.engine.task(c) or (0, None))[1], "RUNNING", "the task was left paused")
        for op in ("restore", "unlock"):
            with self.subTest(op=op):
                c = self.fault_at_restore(c, op, child if op == "restore" else 1, keep=op == "unlock")

    def test_paused_before_the_checkpoint_running_after(self):
        """containerd pauses the container (freezes its cgroup) before runc
        starts CRIU; CRIU seizes the tree with ptrace, as the plugin asks, and
        thaws the cgroup for that ("unfreezing cgroup for plugin
        compatibility"), so the plugin's lock, which needs the processes' own
        threads, goes through; containerd resumes the container at the end.
        Each checkpoint takes 2 s in the driver, long enough to watch the
        task's state and the cgroup's freezer meanwhile."""
        c = self.container("--spawn", "1", "--mem", "4", expect=2)
        c.fault("* checkpoint delay=2000")
        before = c.pids()
        freezer = containers.freezer_state_file(before[1])
        if not freezer:
            self.skipTest("the container's freezer cgroup is not visible here")
        pending = self.engine.checkpoint_async(c, "--leave-running")
        tasks, frozen = set(), []  # frozen: (time, state) at each change

        def watch_tasks():
            # apart: `ctr t ls` waits while the shim checkpoints
            while pending.p.poll() is None:
                t = self.engine.task(c)
                tasks.add(t[1] if t else None)
                time.sleep(0.02)

        watcher = threading.Thread(target=watch_tasks, daemon=True)
        watcher.start()
        while pending.p.poll() is None:
            state = containers.FROZEN.get(containers.read(freezer).strip(), "?")
            if not frozen or frozen[-1][1] != state:
                frozen.append((time.monotonic() - pending.t0, state))
            time.sleep(0.003)
        r = pending.wait()
        watcher.join()
        c.clear_faults()
        timeline = " ".join(f"{state}@{t:.2f}" for t, state in frozen)
        note = f"task states {tasks}, freezer {timeline}:\n{r}"
        print(f"containerd: checkpoint --leave-running in {r.wall:.2f} s; freezer {timeline}", file=sys.stderr)
        self.assertEqual(r.rc, 0, note)
        self.assertTrue(tasks & {"PAUSING", "PAUSED"}, f"the task was never paused during the checkpoint: {note}")
        states = [state for _, state in frozen]
        self.assertIn("FROZEN", states, note)
        # thawed after containerd froze it, for the driver's 2 s at least
        first = states.index("FROZEN")
        ends = [t for t, _ in frozen[first + 1:]] + [r.wall]
        thawed = sum(end - t for (t, state), end in zip(frozen[first:], ends) if state == "THAWED")
        self.assertGreater(thawed, 1.5, f"CRIU did not thaw the cgroup for the plugin: {note}")
        self.assertEqual(self.engine.task(c)[1], "RUNNING", note)
        self.assertEqual(containers.FROZEN.get(containers.read(freezer).strip()), "THAWED", note)
        self.assertEqual(c.pids(), before, "the container lost processes")
        self.assertRunningAndOk(c, f"after the checkpoint:\n{note}")
        self.log_gone(r, sorted(before.values()))

    def test_checkpoint_with_rw_layer_and_image_restored_with_rw(self):
        """`ctr c checkpoint --task --rw --image`, `ctr c restore --live --rw`:
        the container's writable layer (a file written to its root
        filesystem) comes back with its processes and their GPU data."""
        c = self.container("--spawn", "1", "--mem", "8", expect=2)
        write = os.path.join(self.engine.bundle(c), "rootfs", "tmp", "written-before")
        with open(write, "w") as f:
            f.write("rw layer\n")
        r = self.checkpoint(c, "--rw", "--image")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(c.pids(), {}, "the container still runs after its checkpoint and removal")
        r, n = self.restored(c, self.engine.restore(c, flags=("--rw",)))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(sorted(n.pids()), c.ready_pids(), "the restored container's own PIDs changed")
        self.assertRunningAndOk(n, f"after the restore:\n{r}")
        with open(os.path.join(self.engine.bundle(n), "rootfs", "tmp", "written-before")) as f:
            self.assertEqual(f.read(), "rw layer\n")

    def test_task_checkpoint_exit(self):
        """`ctr t checkpoint --exit --image-path DIR --work-path DIR`: the
        checkpoint that stops the task (CRIU ends the tree after the dump,
        the GPU state stays in the images), and the one whose CRIU log
        containerd keeps (a work path was given). ctr 1.6 has no command
        that restores such images (`ctr c restore` takes only the image of
        `ctr c checkpoint`, which always leaves the task running): images of
        the same kind restore under runc (RuncCases)."""
        c = self.container("--spawn", "1", "--mem", "8", expect=2)
        host = c.pids()
        images, work = os.path.join(self.tmp, "images"), os.path.join(self.tmp, "work")
        t0 = time.monotonic()
        p = self.engine.ctr("tasks", "checkpoint", "--exit", "--image-path", images, "--work-path", work, c.name)
        wall = time.monotonic() - t0
        r = containers.Outcome(p.returncode, p.stdout + p.stderr, wall, containers.read(os.path.join(work, "dump.log")))
        self.assertEqual(r.rc, 0, r)
        deadline = time.monotonic() + 10
        while c.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(c.pids(), {}, f"the task still runs after checkpoint --exit:\n{r}")
        for hpid in host.values():
            self.assertFalse(os.path.exists(f"/proc/{hpid}"), f"host pid {hpid} still exists")
        lines = r.cudasnap_lines()
        self.assertTrue(any("enabled for the dump" in line and "tree killed after a dump" in line
                            for line in lines), r)
        self.assertTrue(any(f"checkpointed {len(host)} processes" in line for line in lines), r)
        with open(os.path.join(images, "cudasnap-plugin.json")) as f:
            record = json.load(f)
        print(f"containerd: checkpoint --exit in {wall:.2f} s", file=sys.stderr)
        self.assertEqual(sorted(e.get("nspid", e["pid"]) for e in record["processes"]), c.ready_pids(), record)


class PodmanCases(Cases, unittest.TestCase):
    engine_class = Podman
    # Podman's runc keeps its own state in /run/runc: all of /run cannot be
    # read-only here
    unusable = ("read-only /run/cudasnap", "/run/cudasnap 0775")

    def test_export_and_import_under_another_name(self):
        c = self.container("--spawn", "1", "--mem", "8", expect=2)
        tarball = os.path.join(self.tmp, "ckpt.tar.gz")
        r = self.checkpoint(c, f"--export={tarball}")
        self.assertEqual(r.rc, 0, r)
        # what the exported archive holds, as a node about to import it sees it
        p = self.cs("inspect", tarball, "--json")
        self.assertEqual(p.returncode, 0, f"{p.stdout}{p.stderr}")
        o = json.loads(p.stdout)
        self.assertEqual((o["images"], o["container"]["name"], o["would_restore"]), ("checkpoint/", c.name, True), o)
        # whatever the file is called, Podman compresses with zstd unless told --compress
        self.assertIn(o["archive"]["compression"], ("zstd", "gzip"), o)
        self.assertEqual(sorted(x["pid"] for x in o["record"]["processes"]), c.ready_pids(), o)
        self.assertEqual([g["uuid"] for g in o["record"]["gpus"]], [g["uuid"] for g in o["node"]["gpus"]], o)
        self.assertEqual(o["record"]["gpus"][0]["name"], "NVIDIA H200", o)
        self.engine.remove(c)
        r, n = self.restored(c, self.engine.restore_import(c, tarball, "other-" + c.name))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(sorted(n.pids()), c.ready_pids(), "the imported container's own PIDs changed")
        self.assertRunningAndOk(n, f"after the import:\n{r}")

    def test_fault_at_each_step(self):
        """One cell for each step (the whole matrix runs under runc)."""
        c = self.container("--spawn", "1", "--mem", "2", expect=2)
        child = max(c.ready_pids())
        for op in ("lock", "checkpoint"):
            with self.subTest(op=op):
                self.fault_at_dump(c, op, child if op == "lock" else 1)
        for op in ("restore", "unlock"):
            with self.subTest(op=op):
                c = self.fault_at_restore(c, op, child if op == "restore" else 1, keep=op == "unlock")


if __name__ == "__main__":
    assert BUILT_APP, "FAKE_APP is not set"
    prog = unittest.main(verbosity=2, exit=False)
    res = prog.result
    if not res.wasSuccessful():
        sys.exit(1)
    # Nothing ran (no CRIU, a sanitized build, no engine): meson reports it as skipped.
    sys.exit(77 if res.testsRun and len(res.skipped) == res.testsRun else 0)
