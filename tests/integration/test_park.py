"""Parking (park/, cudasnap run): the interposer in fakecuda-cuapp, a program
that reaches the driver double as the CUDA runtime reaches libcuda (dlopen,
cuGetProcAddress). Each test checks what the program holds afterwards, byte
for byte, and the state the driver reports."""
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import sys
import time
import unittest

from harness import BIN, Case

CUAPP = os.environ.get("FAKE_CUAPP", "")
PARK_LIB = os.environ.get("PARK_LIB", "")
MODE = "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"


class Lines:
    """The output lines of a test program (self.p, its Popen; self.buf)."""

    def line(self, prefix, timeout=20):
        """The next line that starts with prefix, None at its end or past timeout seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\n" in self.buf:
                ln, self.buf = self.buf.split(b"\n", 1)
                if ln.decode().startswith(prefix):
                    return ln.decode()
            r, _, _ = select.select([self.p.stdout], [], [], 0.1)
            if r:
                chunk = os.read(self.p.stdout.fileno(), 4096)
                if not chunk:
                    return None
                self.buf += chunk
        return None


class App(Lines):
    """A fakecuda-cuapp process and its output lines."""

    def __init__(self, case, args, park=True, wrap=(), env_more=None, umask=None, env=None):
        """wrap: a command that ends by running its arguments (the program's
        pid is then the one its ready line says); env_more, env: more
        variables; umask: the program's."""
        argv = [*wrap, *([BIN, "run", "--"] if park else []), CUAPP, *args]
        env = dict(case.env, CUDASNAP_PARK_LIB=PARK_LIB, CUDASNAP_PARK_DIR=case.tmp, **(env or {}))
        env.update(env_more or {})
        # in the sanitizer build the preloaded interposer comes before
        # libasan, which the program itself also links
        asan = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True, umask=-1 if umask is None else umask)
        case.apps.append(self.p)
        self.pid = self.p.pid
        self.buf = b""
        self.ready = self.line("ready", 20)
        if self.ready is None:
            case.fail(f"{argv}: not ready: {self.p.stderr.read1(4096) if self.p.poll() is not None else ''}")
        fields = dict(kv.split("=", 1) for kv in self.ready.split()[1:])
        self.bytes = int(fields["bytes"])
        self.pid = int(fields["pid"]) if wrap else self.pid

    def verify(self):
        os.kill(self.pid, signal.SIGUSR1)
        return self.line("verify", 20)


def key_of(pid):
    """The key of pid's interposer, taken as cudasnap takes it: the socket
    its marker names, through pidfd_getfd (ptrace attach access), its one
    message peeked; in hex."""
    libc = ctypes.CDLL(None, use_errno=True)
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "/memfd:cudasnap-park-key (deleted)":
                continue
            # the name may be a FIFO's (test_park_access.py FORGED_MARKER)
            m = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
            try:
                if not stat.S_ISREG(os.fstat(m).st_mode):
                    continue
                n = int(os.read(m, 64).decode().strip().split("=", 1)[1])
            finally:
                os.close(m)
        except (OSError, ValueError, IndexError):
            continue
        pidfd = os.pidfd_open(pid)
        try:
            sock = libc.syscall(438, pidfd, n, 0)  # pidfd_getfd
            if sock < 0:
                raise OSError(ctypes.get_errno(), "pidfd_getfd")
            with socket.socket(fileno=sock) as k:
                msg = k.recv(64, socket.MSG_PEEK)
        finally:
            os.close(pidfd)
        if msg.startswith(b"CSPKEY1\n") and len(msg) == 40:
            return msg[8:].hex()
    raise AssertionError(f"no key in /proc/{pid}/fd")


def socket_path(pid):
    """The path pid's control socket was bound to (its /proc/PID/net/unix)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    path = None
    with open(f"/proc/{pid}/net/unix") as f:
        for ln in f.read().splitlines()[1:]:
            parts = ln.split()
            if len(parts) >= 8 and int(parts[6]) in inodes and "/.cudasnap-park." in parts[7]:
                path = parts[7]
    assert path, f"no control socket for {pid}"
    return path


def control(pid, request, keep=None, key=False):
    """One request to pid's control socket, found as cudasnap finds it (with
    the process's key, when key); returns the answer and the socket's path
    (and leaves the connection in keep, a list, open)."""
    path = socket_path(pid)
    if key:
        request += f" key={key_of(pid)}"
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect(f"/proc/{pid}/root{path}")
    s.sendall(request.encode() + b"\n")
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            break
        answer += chunk
    if keep is not None:
        keep.append(s)
    else:
        s.close()
    return answer.decode(), path


AS_USER = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups"]


def as_user_env(case):
    """What a program run as uid 1000 (AS_USER) needs of the double: device
    files it may open and a directory for its control socket, in a
    directory it can reach (the test's own is root's alone)."""
    shared = tempfile.mkdtemp(prefix="cudasnap-user-")
    case.addCleanup(subprocess.run, ["rm", "-rf", shared])
    os.chmod(shared, 0o755)
    dev, park_dir = os.path.join(shared, "dev"), os.path.join(shared, "park")
    os.makedirs(dev)
    os.makedirs(park_dir)
    os.chown(park_dir, 1000, 1000)
    for name in ("nvidiactl", "nvidia0", "nvidia-uvm"):
        with open(os.path.join(dev, name), "w"):
            pass
        os.chmod(os.path.join(dev, name), 0o666)
    return {"CUDASNAP_DEV_DIR": dev, "CUDASNAP_PARK_DIR": park_dir, "FAKECUDA_FAULTS": "/nonexistent"}


def status(pid):
    return dict(kv.split("=", 1) for kv in control(pid, "status", key=True)[0].split()[1:] if "=" in kv)


class ParkCase(Case):
    def cs(self, *args, **kw):
        return super().cs(*map(str, args), **kw)


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class Park(ParkCase):
    def app(self, *args, park=True):
        return App(self, ["--alloc-mib", "8", "--allocs", "3", "--small-kib", "64", "--interval-ms", "20", *args],
                   park=park)

    def target(self, r):
        self.assertIsNotNone(r.obj, r)
        return r.obj["processes"][0]

    def assertParkedCycle(self, a, *extra):
        r = self.cs("checkpoint", "--pid", a.pid, "--json", *extra)
        self.assertEqual(r.rc, 0, r)
        t = self.target(r)
        self.assertIn("park", t["seconds"], t)
        self.assertEqual(t["park"]["bytes"], 3 * 8 << 20)
        self.assertTrue(t["park"]["parked"])
        # the device memory left the GPU: the program holds only what the
        # interposer does not back (64 KiB), and its host copy
        self.assertEqual(status(a.pid)["parked"], "1")
        self.assertEqual(self.states([a.pid]), {a.pid: "checkpointed"})
        r = self.cs("restore", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        t = self.target(r)
        self.assertIn("unpark", t["seconds"], t)
        self.assertFalse(t["park"]["parked"])
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_parks_and_unparks_with_the_data(self):
        a = self.app()
        st = status(a.pid)
        self.assertEqual((st["parkable"], st["allocs"], st["bytes"]), ("1", "3", str(3 * 8 << 20)))
        self.assertParkedCycle(a)
        self.assertParkedCycle(a)  # and again

    def test_a_host_copy_kept_pinned_comes_back_too(self):
        # CUDASNAP_PARK_PIN=keep: the host copy stays pinned through the
        # driver's checkpoint, and the unpark copies straight from it (by
        # default it is unpinned, and copied back through pinned staging
        # buffers of 32 MiB, of which these allocations take several)
        a = App(self, ["--alloc-mib", "40", "--allocs", "2", "--interval-ms", "20"])
        env = {"CUDASNAP_PARK_PIN": "keep"}
        r = self.cs("checkpoint", "--pid", a.pid, "--json", env=env)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.target(r)["park"]["bytes"], 2 * 40 << 20)
        self.assertEqual(status(a.pid)["parked"], "1")
        r = self.cs("restore", "--pid", a.pid, "--json", env=env)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_no_park_leaves_it_to_the_driver(self):
        a = self.app()
        r = self.cs("checkpoint", "--pid", a.pid, "--json", "--no-park")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("park", self.target(r)["seconds"])
        self.assertEqual(status(a.pid)["parked"], "0")
        r = self.cs("restore", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("unpark", self.target(r)["seconds"])
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")
        r = self.cs("checkpoint", "--pid", a.pid, "--json", env={"CUDASNAP_NO_PARK": "1"})
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("park", self.target(r)["seconds"])
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)

    def test_without_the_interposer_nothing_changes(self):
        a = self.app(park=False)
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("park", self.target(r))
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_failed_checkpoint_unparks(self):
        a = self.app()
        self.fault(f"{a.pid} checkpoint error=999")
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.obj["outcome"], "rolled-back", r)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(status(a.pid)["gate"], "open")
        self.assertEqual(self.states([a.pid]), {a.pid: "running"})
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_failed_lock_unparks(self):
        a = self.app()
        self.fault(f"{a.pid} lock error=999")
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.obj["outcome"], "rolled-back", r)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(self.states([a.pid]), {a.pid: "running"})
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_an_unpark_that_fails_in_a_rollback_is_left_behind_not_back(self):
        a = self.app("--interval-ms", "600000")
        # the checkpoint fails, and so does every unpark (no GPU memory)
        self.fault(f"{a.pid} checkpoint error=999", "* mem_create error=2")
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 3, r)
        self.assertEqual(r.obj["outcome"], "incomplete", r)
        t = self.target(r)
        self.assertEqual(t["final_state"], "running, parked")
        self.assertTrue(t["rollback_failed"])
        self.assertEqual(t["recovery"], f"cudasnap restore --pid {a.pid}")
        self.assertIn("LEFT BEHIND", r.err)
        # the process undid nothing itself either (its own unpark fails too)
        time.sleep(0.3)
        self.assertEqual(status(a.pid)["parked"], "1")
        self.fault()
        r = self.cs("restore", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("unpark", self.target(r)["seconds"])
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_park_that_fails_half_way_changes_nothing(self):
        a = self.app("--interval-ms", "600000")  # no copy of its own meanwhile
        self.fault("* dtoh error=999")
        r = self.cs("checkpoint", "--pid", a.pid)
        self.fault()
        self.assertEqual(r.rc, 1, r)
        self.assertIn("park of process", r.err)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(self.states([a.pid]), {a.pid: "running"})
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")
        self.assertParkedCycle(a)  # without the fault it parks

    def test_an_unpark_that_fails_rolls_the_restore_back(self):
        a = self.app()
        r = self.cs("checkpoint", "--pid", a.pid)
        self.assertEqual(r.rc, 0, r)
        self.fault("* mem_create error=2 1")  # out of GPU memory, once
        r = self.cs("restore", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.obj["outcome"], "rolled-back", r)
        self.assertIn("stays parked in host memory", r.err)
        self.assertEqual(self.states([a.pid]), {a.pid: "checkpointed"})
        self.assertEqual(status(a.pid)["parked"], "1")
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_park_cudasnap_does_not_see_through_is_undone(self):
        a = self.app()
        held = []
        answer, _ = control(a.pid, "park 5000", keep=held, key=True)
        self.assertTrue(answer.startswith("ok parked=1"), answer)
        self.assertEqual(status(a.pid)["gate"], "closed")
        held[0].close()  # as if cudasnap died before its commit
        deadline = time.monotonic() + 10
        while status(a.pid)["parked"] != "0" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(status(a.pid)["gate"], "open")
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_only_root_and_its_user_may_ask(self):
        a = self.app()
        _, path = control(a.pid, "status")
        probe = ("import socket,sys; s=socket.socket(socket.AF_UNIX)\n"
                 "try:\n s.connect(sys.argv[1]); s.sendall(b'park 100\\n'); print(s.recv(100))\n"
                 "except OSError as e: print('refused', e.errno)\n")
        # a python that another user may run (not one under /root)
        python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
        p = subprocess.run([python, "-c", probe, f"/proc/{a.pid}/root{path}"], capture_output=True,
                           text=True, user=65534, group=65534, timeout=20)
        self.assertIn("refused", p.stdout, p)
        self.assertEqual(status(a.pid)["parked"], "0")

    def test_ps_and_dry_run_say_it(self):
        a = self.app()
        procs, _ = self.ps()
        self.assertEqual(procs[a.pid]["park"]["parkable"], True)
        self.assertEqual(procs[a.pid]["park"]["bytes"], 3 * 8 << 20)
        self.assertIn(f"parking: {a.pid} (", self.cs("ps").out)
        r = self.cs("checkpoint", "--pid", a.pid, "--dry-run", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("24.0 MiB of its device memory parks before the lock", r.err)
        self.assertNotIn("driver-path", r.err)  # nor that the driver takes it all
        self.assertNotIn("park-own-vmm", r.err)
        self.assertEqual(self.cs("checkpoint", "--pid", a.pid).rc, 0)
        self.assertIn(f"parked: {a.pid} (", self.cs("ps").out)
        r = self.cs("restore", "--pid", a.pid, "--dry-run")
        self.assertIn("is parked: unparked after the unlock", r.err)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        procs, _ = self.ps()
        self.assertEqual(procs[a.pid]["park"]["parked"], False)

    def test_vmm_memory_the_program_maps_itself_is_named_as_left_to_the_driver(self):
        # PyTorch's expandable segments, JAX: cuMemCreate and cuMemMap of its
        # own; the park moves the rest, and ps and the plan say how much the
        # driver's checkpoint moves instead
        a = self.app("--vmm-mib", "4")
        st = status(a.pid)
        self.assertEqual((st["own_vmm_bytes"], st["own_vmm_maps"]), (str(4 << 20), "1"))
        procs, _ = self.ps()
        self.assertEqual((procs[a.pid]["park"]["own_vmm_bytes"], procs[a.pid]["park"]["own_vmm_maps"]), (4 << 20, 1))
        said = ("the VMM memory it maps itself (4.0 MiB in 1 mapping with cuMemMap: PyTorch's "
                "expandable_segments, JAX, NCCL) is not parked: the driver's checkpoint moves it")
        self.assertIn(f"parking: {a.pid} (fakecuda-cuapp) runs the interposer: a checkpoint parks its 24.0 MiB of "
                      f"device memory first; {said}", self.cs("ps").out)
        r = self.cs("checkpoint", "--pid", a.pid, "--dry-run")
        self.assertEqual(r.rc, 0, r)
        self.assertIn(said, r.err)
        self.assertParkedCycle(a)
        procs, _ = self.ps()
        self.assertEqual(procs[a.pid]["park"]["own_vmm_bytes"], 4 << 20)

    def test_a_stopped_process_is_not_asked(self):
        # it could not accept: the question would wait in its socket's queue
        a = self.app()
        os.kill(a.pid, signal.SIGSTOP)
        try:
            r = self.cs("ps")
            self.assertEqual(r.rc, 0, r)
            self.assertLess(r.wall, 1.5, r)
            self.assertNotIn(f"parking: {a.pid}", r.out)
            r = self.cs("checkpoint", "--pid", a.pid)
            self.assertEqual(r.rc, 2, r)  # refused before anything changed
            self.assertIn("it is stopped", r.err)
            self.assertLess(r.wall, 1.5, r)
        finally:
            os.kill(a.pid, signal.SIGCONT)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_hook_parks_too(self):
        a = self.app()
        r = self.cs("hook", "--json", env={MODE: "save"})
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(status(a.pid)["parked"], "1")
        r = self.cs("hook", "--json", env={MODE: "restore"})
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class IpcPairs(ParkCase):
    """CUDA IPC between interposed processes: cuIpcGetMemHandle / cuIpcOpenMemHandle,
    and VMM memory the program passes as a file descriptor itself."""

    def pair(self, importer_parked=True, exporter_parked=True, event=False):
        handle = os.path.join(self.tmp, "handle")
        ev = ["--ipc-event"] if event else []
        e = App(self, ["--alloc-mib", "8", "--seed", "7", "--ipc-export", handle, *ev], park=exporter_parked)
        i = App(self, ["--alloc-mib", "4", "--ipc-import", handle, "--peer-seed", "7", *ev], park=importer_parked)
        return e, i

    def shm_maps(self, pid):
        with open(f"/proc/{pid}/maps") as f:
            return [ln.split()[-1] for ln in f if "/cuda.shm." in ln]

    def test_a_shared_event_as_pytorch_shares_one_does_not_stop_the_pair(self):
        # PyTorch shares a CUDA tensor with an interprocess event: the
        # importer maps the event's file, which /proc alone cannot tell from
        # imported memory; the interposer carries the memory, and the driver
        # restores an event's importer
        e, i = self.pair(event=True)
        self.assertEqual(len(self.shm_maps(i.pid)), 1)
        out = self.cs("ps").out
        self.assertIn(f"CUDA IPC: {i.pid} (fakecuda-cuapp) shares interprocess events", out)
        r = self.cs("checkpoint", "--pid", e.pid, "--pid", i.pid, "--dry-run", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("ipc-import", json.dumps(r.obj))
        r = self.cs("checkpoint", "--pid", e.pid, "--pid", i.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(status(i.pid)["parked"], "1")
        r = self.cs("restore", "--pid", e.pid, "--pid", i.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        # each check records (exporter) or waits on (importer) the event
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")

    def test_a_shared_event_with_memory_the_driver_shared_is_refused(self):
        # the exporter runs no interposer: the importer's memory import is
        # the driver's, and the file it maps tells nothing more
        e, i = self.pair(exporter_parked=False, event=True)
        r = self.cs("checkpoint", "--pid", i.pid)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("(CUDA IPC, 1 import through the driver): the driver checkpoints such a process but can "
                      "never restore it", r.err)
        self.assertEqual(self.states([i.pid]), {i.pid: "running"})
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")

    def assertBothOk(self, e, i):
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")

    def assertTogetherCycle(self, e, i):
        r = self.cs("checkpoint", "--pid", e.pid, "--pid", i.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.states([e.pid, i.pid]), {e.pid: "checkpointed", i.pid: "checkpointed"})
        self.assertEqual(status(e.pid)["ipc_attached"], "0")
        r = self.cs("restore", "--pid", e.pid, "--pid", i.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(status(e.pid)["ipc_attached"], "1")
        self.assertBothOk(e, i)

    def assertExporterAloneRefused(self, e, i):
        r = self.cs("checkpoint", "--pid", e.pid)
        self.assertEqual(r.rc, 1, r)
        self.assertIn(f"process {i.pid} maps its memory", r.err)
        self.assertEqual(self.states([e.pid]), {e.pid: "running"})
        self.assertBothOk(e, i)

    def assertImporterAloneCycle(self, e, i):
        self.assertEqual(self.cs("checkpoint", "--pid", i.pid).rc, 0)
        self.assertEqual(status(e.pid)["ipc_attached"], "0")
        r = self.cs("restore", "--pid", i.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(status(e.pid)["ipc_attached"], "1")
        self.assertBothOk(e, i)

    def test_an_importer_of_an_old_cuda_version_opens_the_interposers_handle(self):
        # cuGetProcAddress("cuIpcOpenMemHandle") below CUDA 11.0 gives the
        # function's first version, which takes the same arguments: still
        # the interposer's, or the driver would be handed its handle
        handle = os.path.join(self.tmp, "handle")
        e = App(self, ["--alloc-mib", "8", "--seed", "7", "--ipc-export", handle])
        i = App(self, ["--alloc-mib", "4", "--ipc-import", handle, "--peer-seed", "7", "--cuda-version", "10020"])
        self.assertEqual(status(i.pid)["ipc_imports"], "1")
        self.assertTogetherCycle(e, i)

    def test_parked_together_both_come_back(self):
        e, i = self.pair()
        self.assertEqual(status(i.pid)["ipc_imports"], "1")
        self.assertEqual(status(e.pid)["ipc_attached"], "1")
        self.assertTogetherCycle(e, i)

    def test_the_exporter_alone_is_refused_naming_the_importer(self):
        self.assertExporterAloneRefused(*self.pair())

    def test_the_importer_alone_comes_back(self):
        self.assertImporterAloneCycle(*self.pair())

    def test_an_importer_left_to_the_driver_is_refused(self):
        # --no-park: the driver would checkpoint the importer and never
        # restore it, so the checkpoint refuses it before anything changes
        e, i = self.pair()
        r = self.cs("checkpoint", "--pid", i.pid, "--no-park", "--dry-run", "--json")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("ipc-import", json.dumps(r.obj))
        r = self.cs("checkpoint", "--pid", i.pid, "--no-park")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("through cudasnap's interposer (--no-park)", r.err)
        self.assertEqual(self.states([i.pid]), {i.pid: "running"})

    def test_an_importer_whose_socket_is_gone_is_refused(self):
        # the driver alone would checkpoint it and never restore it
        e, i = self.pair()
        os.unlink(socket_path(i.pid))
        r = self.cs("checkpoint", "--pid", i.pid)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("whose control socket does not answer", r.err)
        self.assertEqual(self.states([e.pid, i.pid]), {e.pid: "running", i.pid: "running"})
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")

    def vmm_pair(self, exporter_parked=True):
        share = os.path.join(self.tmp, "vmmfd")
        e = App(self, ["--vmm-mib", "4", "--seed", "7", "--vmm-share", share], park=exporter_parked)
        i = App(self, ["--vmm-mib", "4", "--vmm-import", share, "--peer-seed", "7"])
        return e, i

    def test_a_vmm_pair_the_program_made_comes_back(self):
        # the program passed a VMM allocation's fd on its own; both run the
        # interposer, so the fd carries the exporter's mark, and the import
        # is released before the checkpoint and made again after it. The
        # importer's check maps the import again with the handle it kept,
        # which the driver no longer knows after a cycle, and then makes and
        # releases memory of its own, for which the double gives out the
        # value that handle had (as the real driver may): the interposer
        # must neither pass the old value on nor hand it out again.
        e, i = self.vmm_pair()
        self.assertEqual(status(i.pid)["vmm_imports"], "0")
        self.assertEqual(status(i.pid)["ipc_imports"], "1")
        self.assertEqual(status(e.pid)["ipc_attached"], "1")
        procs, _ = self.ps()
        self.assertTrue(procs[i.pid]["park"]["parkable"], procs[i.pid])
        self.assertIn(f"parking: {e.pid} (fakecuda-cuapp) runs the interposer, with no memory it can park "
                      "(its checkpoint is the driver's); processes that map its memory let go of it first",
                      self.cs("ps").out)
        for _ in range(2):
            self.assertTogetherCycle(e, i)

    def test_the_vmm_importer_alone_comes_back_and_the_exporter_alone_is_refused(self):
        e, i = self.vmm_pair()
        self.assertExporterAloneRefused(e, i)
        self.assertImporterAloneCycle(e, i)

    def test_a_vmm_import_that_fails_half_way_changes_nothing(self):
        # the park fails as it unmaps the import, then the unpark as it
        # imports again: each time the importer ends as it began
        e, i = self.vmm_pair()
        self.fault(f"{i.pid} mem_unmap error=999 1")
        r = self.cs("checkpoint", "--pid", i.pid)
        self.fault()
        self.assertEqual(r.rc, 1, r)
        self.assertIn("park of process", r.err)
        self.assertEqual(self.states([i.pid]), {i.pid: "running"})
        self.assertEqual(status(i.pid)["parked"], "0")
        self.assertEqual(status(e.pid)["ipc_attached"], "1")
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")
        self.assertEqual(self.cs("checkpoint", "--pid", i.pid).rc, 0)
        self.fault(f"{i.pid} import error=2 1")
        r = self.cs("restore", "--pid", i.pid, "--json")
        self.fault()
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.obj["outcome"], "rolled-back", r)
        self.assertEqual(self.states([i.pid]), {i.pid: "checkpointed"})
        self.assertEqual(status(i.pid)["parked"], "1")
        r = self.cs("restore", "--pid", i.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")

    def test_a_vmm_importer_whose_exporter_is_gone_is_refused(self):
        e, i = self.vmm_pair()
        e.p.kill()
        e.p.wait()
        r = self.cs("checkpoint", "--pid", i.pid)
        self.assertEqual(r.rc, 1, r)
        self.assertIn(f"the process {e.pid} it imported VMM memory from no longer has that memory", r.err)
        self.assertEqual(self.states([i.pid]), {i.pid: "running"})
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")

    def test_vmm_memory_imported_from_a_process_without_the_interposer_is_refused(self):
        # the fd carries no mark: the interposer cannot ask for the memory
        # again, the driver would checkpoint the importer and never restore
        # it, and /proc shows nothing of it
        e, i = self.vmm_pair(exporter_parked=False)
        self.assertEqual(status(i.pid)["vmm_imports"], "1")
        procs, _ = self.ps()
        self.assertIn("cuMemImportFromShareableHandle", procs[i.pid]["park"]["why_not"])
        self.assertIn(f"parking: {i.pid} (fakecuda-cuapp) runs the interposer, but a checkpoint refuses it "
                      "(CUDA IPC, 1 VMM import through a file descriptor", self.cs("ps").out)
        for extra in ((), ("--no-park",)):
            r = self.cs("checkpoint", "--pid", i.pid, *extra)
            self.assertEqual(r.rc, 2, r)
            self.assertIn("(CUDA IPC, 1 VMM import through a file descriptor)", r.err)
        self.assertEqual(self.states([i.pid]), {i.pid: "running"})
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")

    def test_an_import_through_the_driver_goes_the_drivers_way(self):
        # the exporter runs no interposer: the driver made the handle, the
        # importer's interposer cannot carry the import, and the driver could
        # never restore it
        e, i = self.pair(exporter_parked=False)
        procs, _ = self.ps()
        self.assertEqual(procs[i.pid]["park"]["parkable"], False)
        self.assertIn("through the driver's CUDA IPC", procs[i.pid]["park"]["why_not"])
        r = self.cs("checkpoint", "--pid", i.pid, "--dry-run")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("driver-path", r.err)
        self.assertIn("ipc-import", r.err)
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
