"""Who may reach a program's parking interposer (park/control.c), tried as an
attacker would: a process that swaps its own control socket for a link to
another's, a peer without the process's key, a peer whose uid the process's
user namespace does not map, requests for memory the program never exported
or without its handle's secret, a forged VMM export mark, a CUDA IPC handle
opened in another PID namespace, hostile bytes on the socket. And what the
interposer must hold to: memory the program retained or exported itself is
never parked away, a forked child keeps no connection, a held park lasts as
long as its connection and a committed one until cudasnap restore, and the
driver is loaded without waiting on the loader's lock."""
import array
import fcntl
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness import BIN, LIBCUDA
from test_hostile import sanitizer_preload
from test_park import AS_USER, CUAPP, PARK_LIB, App, ParkCase, as_user_env, control, key_of, socket_path, status

SLOW_FD_ANSWER = os.environ.get("SLOW_FD_ANSWER", "")
GONE_AFTER_STATUS = os.environ.get("GONE_AFTER_STATUS", "")

PARK_LOADER = os.environ.get("PARK_LOADER", "")
PARK_LOADER_PROBE = os.environ.get("PARK_LOADER_PROBE", "")
F_OFD_SETLK, F_SETOWN_EX, F_OWNER_PID = 37, 15, 1
TAG_BASE = 0x4353000000000000

# A process that poses as an interposed CUDA program (it initializes the
# driver double and maps a file named like the interposer), answers
# cudasnap's status as the real one would, and after the status a checkpoint
# asks last before it parks (argv[6]: the how-manyth) swaps its socket file
# for a symbolic link to another process's socket (argv[4]): the checkpoint
# must never reach that other process.
FAKE_INTERPOSER = r"""
import ctypes, mmap, os, socket, sys, time
libcuda, libfile, sockdir, victim, ready, swap_after = sys.argv[1:7]
assert ctypes.CDLL(libcuda).cuInit(0) == 0
with open(libfile, "wb") as f:
    f.write(b"\0" * mmap.PAGESIZE)
with open(libfile, "rb") as f:
    keep = mmap.mmap(f.fileno(), mmap.PAGESIZE, prot=mmap.PROT_READ)
os.makedirs(sockdir, mode=0o700)
path = os.path.join(sockdir, "control")
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(8)
open(ready, "w").close()
swapped, statuses = False, 0
while True:
    c, _ = s.accept()
    line = c.makefile("rb").readline()
    if line.startswith(b"status"):
        statuses += 1
        c.sendall(b"ok version=1 pid=%d parked=0 parkable=1 bytes=8388608 allocs=1 gate=open ipc_exports=0 "
                  b"ipc_attached=0 ipc_imports=0 legacy_imports=0 vmm_imports=0 held=0 unclaimed=0\n" % os.getpid())
    c.close()
    if not swapped and statuses == int(swap_after):
        os.unlink(path)
        os.symlink(victim, path)
        swapped = True
"""

# Runs argv[3:] as uid argv[2] (and its gid) of a new user namespace that
# maps it, and nothing else, to host uid argv[1]: the program then sees
# every other user (root included) as the overflow uid.
USERNS_AS = r"""
import ctypes, os, sys
outer, inner, cmd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
libc = ctypes.CDLL(None, use_errno=True)
go_r, go_w = os.pipe()
done_r, done_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(go_w)
    os.close(done_r)
    if libc.unshare(0x10000000) != 0:
        os._exit(90)
    os.write(done_w, b"u")
    os.read(go_r, 1)
    os.setresgid(inner, inner, inner)
    os.setresuid(inner, inner, inner)
    os.execvp(cmd[0], cmd)
os.close(go_r)
os.close(done_w)
os.read(done_r, 1)
for name, text in (("setgroups", "deny"), ("uid_map", f"{inner} {outer} 1"), ("gid_map", f"{inner} {outer} 1")):
    with open(f"/proc/{pid}/{name}", "w") as f:
        f.write(text)
os.write(go_w, b"g")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


# Gives the program a descriptor that /proc names as the key's marker: a
# FIFO of that name in a mount of its own, opened without a writer, its
# name and mount gone (argv: the program and its arguments).
FORGED_MARKER = r"""
import os, subprocess, sys
d = "/tmp/forged-marker.%d" % os.getpid()
os.makedirs(d)
subprocess.run(["mount", "-t", "tmpfs", "none", d], check=True)
p = os.path.join(d, "memfd:cudasnap-park-key")
os.mkfifo(p)
fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
os.unlink(p)
subprocess.run(["umount", "-l", d], check=True)
os.rmdir(d)
os.set_inheritable(fd, True)
os.execvp(sys.argv[1], sys.argv[1:])
"""


def connect(path, timeout=10):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(path)
    return s


def read_lines(s, n=1):
    """Up to n answer lines from s (fewer when it ends first)."""
    buf = b""
    while buf.count(b"\n") < n:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace").splitlines()


def recv_with_fds(s):
    """One message from s and the descriptors that came with it (closed)."""
    fds = array.array("i")
    msg, anc, _, _ = s.recvmsg(256, socket.CMSG_SPACE(4 * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    for fd in fds:
        os.close(fd)
    return msg.decode(errors="replace"), len(fds)


def via_root(pid):
    return f"/proc/{pid}/root{socket_path(pid)}"


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class Access(ParkCase):
    """Who may ask the interposer what."""

    def app(self, *args, **kw):
        return App(self, ["--alloc-mib", "8", "--interval-ms", "20", *args], **kw)

    def test_a_socket_swapped_for_a_link_never_reaches_another_process(self):
        # The attacker answers cudasnap's status as an interposed program
        # would, then points its socket's path at the victim's socket:
        # cudasnap's park must reach nobody, not the victim. A checkpoint
        # asks for the status twice (its plan, then its transaction) before
        # it parks.
        victim = self.app()
        ready = os.path.join(self.tmp, "fake.ready")
        fake = subprocess.Popen([sys.executable, "-c", FAKE_INTERPOSER, LIBCUDA,
                                 os.path.join(self.tmp, "libcudasnap-park.so"),
                                 os.path.join(self.tmp, ".cudasnap-park.fake"), socket_path(victim.pid), ready,
                                 "2"],
                                env=dict(self.env, **sanitizer_preload(LIBCUDA)), start_new_session=True)
        self.apps.append(fake)
        deadline = time.monotonic() + 20
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertTrue(os.path.exists(ready))
        self.cs("checkpoint", "--pid", fake.pid, "--json")
        self.cs("restore", "--pid", fake.pid)
        self.assertEqual(status(victim.pid)["parked"], "0")
        self.assertEqual(status(victim.pid)["gate"], "open")
        self.assertEqual(self.states([victim.pid]), {victim.pid: "running"})
        self.assertEqual(victim.verify(), f"verify ok bytes={victim.bytes}")

    def test_park_and_unpark_take_the_process_key(self):
        a = self.app()
        path = via_root(a.pid)
        # root without the key: no status, no park, no unpark (what it
        # holds is told only to who may read its memory)
        for request in ("status", "status key=" + "00" * 32, "park 2000", "park 2000 key=" + "00" * 32,
                        "unpark 2000"):
            with self.subTest(request):
                with connect(path) as s:
                    s.sendall(request.encode() + b"\n")
                    self.assertEqual(read_lines(s), ["error code=800 stage=access"])
                self.assertEqual(status(a.pid)["parked"], "0")
        # with the key that /proc/PID/fd shows to whoever may ptrace it
        held = []
        answer, _ = control(a.pid, "park 2000", keep=held, key=True)
        self.assertTrue(answer.startswith("ok parked=1"), answer)
        answer, _ = control(a.pid, "unpark 2000", key=True)
        self.assertTrue(answer.startswith("ok parked=0"), answer)
        held[0].close()
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_the_key_takes_attach_access_not_read_access(self):
        """The key lets the process's device memory be read and written. A
        process of its user may open /proc/PID/fd (ptrace read access, all
        that Yama leaves to a non-ancestor), and as the owner change the
        mode of what it finds there: every descriptor it can read so holds
        no key. cudasnap takes the key's socket itself (pidfd_getfd, attach
        access), so the user's own cudasnap still reads what it holds."""
        env = as_user_env(self)
        user = AS_USER
        a = App(self, ["--alloc-mib", "8", "--interval-ms", "20"], wrap=user, env_more=env)
        reader = ("import os, sys\n"
                  "d = f'/proc/{sys.argv[1]}/fd'\n"
                  "for n in os.listdir(d):\n"
                  "    try:\n"
                  "        os.chmod(f'{d}/{n}', 0o600)\n"
                  "    except OSError:\n"
                  "        pass\n"
                  "    try:\n"
                  "        with open(f'{d}/{n}', 'rb') as f:\n"
                  "            print(n, f.read(1 << 16).hex())\n"
                  "    except OSError as e:\n"
                  "        print(n, 'refused', e.errno)\n")
        r = subprocess.run([*user, sys.executable, "-c", reader, str(a.pid)], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn("refused", r.stdout)  # the key's socket, among others
        self.assertNotIn(key_of(a.pid), r.stdout)
        r = subprocess.run([*user, BIN, "ps", "--json"], capture_output=True, text=True, env=dict(self.env, **env),
                           timeout=60)
        self.assertIn(r.returncode, (0, 2), r)  # 2: root's processes it cannot read
        proc, = [p for p in json.loads(r.stdout)["processes"] if p["pid"] == a.pid]
        self.assertTrue(proc["park"]["parkable"], proc)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_forged_marker_holds_nobody_up(self):
        """A process of another user names a FIFO as the key's marker (its
        /proc link reads as the marker's): cudasnap takes the marker itself
        and reads only a sealed memfd, so neither ps nor a checkpoint waits
        on it, and the process's real key is still found."""
        a = App(self, ["--alloc-mib", "8", "--interval-ms", "600000"],
                wrap=[*AS_USER, "unshare", "-Urm", "/usr/bin/python3", "-c", FORGED_MARKER], env_more=as_user_env(self))
        links = [os.readlink(f"/proc/{a.pid}/fd/{n}") for n in os.listdir(f"/proc/{a.pid}/fd")]
        self.assertEqual(links.count("/memfd:cudasnap-park-key (deleted)"), 2, links)
        r = self.cs("ps", timeout=20)
        self.assertEqual(r.rc, 0, r)
        r = self.cs("checkpoint", "--pid", a.pid, timeout=30)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(status(a.pid)["parked"], "1")
        self.assertEqual(self.cs("restore", "--pid", a.pid, timeout=30).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_peer_the_user_namespace_does_not_map_is_refused(self):
        # The program runs as uid 65534 of a user namespace that maps only
        # that uid (to host uid 1000): every other user, root of the host
        # too, reaches it as the overflow uid 65534, which is the program's
        # own uid in its namespace but stands for anyone. Only the key
        # (which takes ptrace access to read) lets such a peer in.
        a = App(self, ["--alloc-mib", "8", "--interval-ms", "20"],
                wrap=[sys.executable, "-c", USERNS_AS, "1000", "65534"], env_more=as_user_env(self))
        with open(f"/proc/{a.pid}/status") as f:
            self.assertIn("\nUid:\t1000\t1000\t1000\t1000\n", f.read())
        with connect(via_root(a.pid)) as s:
            s.sendall(b"status\n")
            self.assertEqual(read_lines(s), ["error code=800 stage=access"])
        answer, _ = control(a.pid, "status", key=True)
        self.assertTrue(answer.startswith("ok "), answer)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_memory_is_served_only_as_exported_and_to_the_handle_holder(self):
        handle = os.path.join(self.tmp, "handle")
        e = App(self, ["--alloc-mib", "8", "--alloc-mib", "4", "--seed", "7", "--ipc-export", handle])
        addrs = [int(x, 16) for x in dict(kv.split("=", 1) for kv in e.ready.split()[1:])["addrs"].split(",")]
        path = via_root(e.pid)
        # the request an importer sent before (no proof), for the exported
        # allocation and the one never exported; then a made-up proof
        for va in addrs:
            with self.subTest(va=hex(va)):
                with connect(path) as s:
                    s.sendall(b"fd %x\n" % va)
                    msg, nfds = recv_with_fds(s)
                    self.assertEqual(nfds, 0, msg)
                    self.assertTrue(msg.startswith("error"), msg)
                with connect(path) as s:
                    s.sendall(b"fd %x %s\n" % (va, b"11" * 16))
                    chal = read_lines(s)[0]
                    self.assertRegex(chal, r"^chal [0-9a-f]{32} [0-9a-f]{16}$")
                    s.sendall(b"proof 0123456789abcdef\n")
                    msg, nfds = recv_with_fds(s)
                    self.assertEqual((msg, nfds), ("error code=1 stage=proof\n", 0))
        self.assertEqual(status(e.pid)["ipc_attached"], "0")
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")

    def test_a_forged_vmm_export_mark_gets_nothing(self):
        # Anyone can read an export's mark (its lock's offset) in
        # /proc/locks and put it on a descriptor of their own, here of the
        # very same file: the exporter gives the claim to its export's own
        # descriptor only, and nothing to a claimant that did not make it.
        share = os.path.join(self.tmp, "vmmfd")
        e = App(self, ["--vmm-mib", "4", "--seed", "7", "--vmm-share", share])
        with open(share) as f:
            pid, fd = map(int, f.read().split())
        with open(f"/proc/{pid}/fdinfo/{fd}") as f:
            marks = [int(ln.split()[-1]) for ln in f if ln.startswith("lock:") and "OFDLCK" in ln]
        self.assertEqual(len(marks), 1, marks)
        serial = marks[0] - TAG_BASE
        forged = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY)  # a new open of the same file
        self.addCleanup(os.close, forged)
        fcntl.fcntl(forged, F_OFD_SETLK, struct.pack("@hhqqi4x", fcntl.F_RDLCK, 0, marks[0], 1, 0))
        fcntl.fcntl(forged, F_SETOWN_EX, struct.pack("@ii", F_OWNER_PID, pid))
        path = via_root(e.pid)
        with connect(path) as s:
            s.sendall(b"vclaim %x\n" % serial)
            socket.send_fds(s, [b"f"], [forged])
            msg, nfds = recv_with_fds(s)
            self.assertEqual((msg, nfds), ("error code=400 stage=claim\n", 0))
        for request in (b"vfd %x" % serial, b"vfd %x %s" % (serial, b"22" * 16)):
            with self.subTest(request):
                with connect(path) as s:
                    s.sendall(request + b"\n")
                    first = read_lines(s)[0]
                    if first.startswith("chal "):
                        s.sendall(b"proof 0123456789abcdef\n")
                        first, nfds = recv_with_fds(s)
                        self.assertEqual(nfds, 0)
                    self.assertTrue(first.startswith("error"), first)
        self.assertEqual(status(e.pid)["ipc_attached"], "0")
        # the refused claim changed nothing: the export's own descriptor
        # is still claimed by a real importer, and the pair comes back
        self.assertEqual(status(e.pid)["unclaimed"], "1")
        i = App(self, ["--vmm-mib", "4", "--vmm-import", share, "--peer-seed", "7"])
        self.assertEqual((status(i.pid)["vmm_imports"], status(i.pid)["ipc_imports"]), ("0", "1"))
        self.assertEqual((status(e.pid)["unclaimed"], status(e.pid)["ipc_attached"]), ("0", "1"))
        self.assertEqual(self.cs("checkpoint", "--pid", e.pid, "--pid", i.pid).rc, 0)
        self.assertEqual(self.cs("restore", "--pid", e.pid, "--pid", i.pid).rc, 0)
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")

    def test_an_export_not_claimed_by_a_checkpoint_is_no_longer_carried(self):
        # the exporter keeps a copy of the export's descriptor (a device
        # file) for its first claim; a checkpoint must not find it open, so
        # cudasnap parks such an exporter first, which closes it
        share = os.path.join(self.tmp, "vmmfd")
        e = App(self, ["--vmm-mib", "4", "--seed", "7", "--vmm-share", share])
        with open(share) as f:
            pid, fd = map(int, f.read().split())

        def same(n):  # a descriptor closed meanwhile (a connection that ended) is none of them
            try:
                return os.path.samestat(os.stat(f"/proc/{pid}/fd/{n}"), os.stat(f"/proc/{pid}/fd/{fd}"))
            except FileNotFoundError:
                return False

        def opens():  # of the exported memory's file (the double's memfd)
            return sorted(n for n in os.listdir(f"/proc/{pid}/fd") if same(n))
        before = opens()
        self.assertEqual(status(e.pid)["unclaimed"], "1")
        r = self.cs("checkpoint", "--pid", e.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("park", r.obj["processes"][0]["seconds"])
        self.assertEqual(status(e.pid)["unclaimed"], "0")
        # the checkpoint dropped the driver's own (the double's memfd), the
        # park the copy: the program's descriptor alone is left
        self.assertEqual(opens(), [str(fd)], before)
        self.assertEqual(self.cs("restore", "--pid", e.pid).rc, 0)
        i = App(self, ["--vmm-mib", "4", "--vmm-import", share, "--peer-seed", "7"])
        self.assertEqual(status(i.pid)["vmm_imports"], "1")  # not carried: refused at checkpoint
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")

    def test_a_refused_park_keeps_its_exports_claimable(self):
        # a park refused before anything moved (here: a handle the program
        # retained) changes nothing: the copy stays for the first importer
        share = os.path.join(self.tmp, "vmmfd")
        e = App(self, ["--alloc-mib", "8", "--retain", "--vmm-mib", "4", "--seed", "7", "--vmm-share", share])
        self.assertEqual(status(e.pid)["unclaimed"], "1")
        answer, _ = control(e.pid, "park 2000", key=True)
        self.assertTrue(answer.startswith("error code=801 stage=check"), answer)
        self.assertEqual((status(e.pid)["unclaimed"], status(e.pid)["parked"]), ("1", "0"))
        i = App(self, ["--vmm-mib", "4", "--vmm-import", share, "--peer-seed", "7"])
        self.assertEqual((status(i.pid)["vmm_imports"], status(e.pid)["unclaimed"]), ("0", "0"))  # claimed
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")

    def test_a_park_refused_at_its_sync_keeps_its_exports_claimable(self):
        # a park refused later, when the program's GPU work does not finish
        # in time, leaves the copy for the first importer too
        share = os.path.join(self.tmp, "vmmfd")
        e = App(self, ["--alloc-mib", "8", "--vmm-mib", "4", "--seed", "7", "--vmm-share", share,
                       "--interval-ms", "100000"])
        self.assertEqual(status(e.pid)["unclaimed"], "1")
        self.fault("* sync delay=3000 1")  # the park's own wait for the GPU work
        answer, _ = control(e.pid, "park 500", key=True)
        self.assertTrue(answer.startswith("error code=600 stage=sync"), answer)
        self.assertEqual((status(e.pid)["unclaimed"], status(e.pid)["parked"]), ("1", "0"))
        self.fault()
        time.sleep(3)  # the delayed wait ends
        i = App(self, ["--vmm-mib", "4", "--vmm-import", share, "--peer-seed", "7"])
        self.assertEqual((status(i.pid)["vmm_imports"], status(e.pid)["unclaimed"]), ("0", "0"))  # claimed
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")

    def test_hostile_bytes_change_nothing(self):
        a = self.app()
        path = via_root(a.pid)
        rnd = random.Random(36)
        words = [b"status", b"park", b"unpark", b"commit", b"fd", b"detach", b"vclaim", b"vlive", b"vfd",
                 b"vdetach", b"vdrop", b"proof", b"key=", b"unpin", b"0", b"ffffffffffffffffff", b" ", b"\0",
                 b"\xff", b"-1", b"99999999999999999999"]
        for _ in range(300):
            line = b" ".join(rnd.choice(words) + bytes(rnd.randrange(256) for _ in range(rnd.randrange(4)))
                             for _ in range(rnd.randrange(1, 6)))
            with connect(path) as s:
                s.sendall(line[:400] + b"\n")
                got = read_lines(s)
                self.assertTrue(got and got[0].split()[0] in ("ok", "error", "chal"), (line, got))
        # a line too long is refused whole: its tail is no request of its own
        with connect(path) as s:
            s.sendall(b"x" * 300 + b" status\n" + f"status key={key_of(a.pid)}\n".encode())
            got = read_lines(s, 2)
            self.assertEqual(got[0], "error code=0 stage=request")
            self.assertTrue(got[1].startswith("ok version=2"), got)
        # no newline at all, then the end; many connections at once
        with connect(path) as s:
            s.sendall(b"park" * 1000)
        held = [connect(path, timeout=None) for _ in range(80)]  # waits for room in the queue
        for s in held:
            s.close()
        # beyond 64 at once a connection is closed unanswered; the others end
        answer, deadline = [], time.monotonic() + 20
        while not answer and time.monotonic() < deadline:
            try:
                with connect(path, timeout=None) as s:  # waits for room in the queue
                    s.sendall(f"status key={key_of(a.pid)}\n".encode())
                    answer = read_lines(s)
            except OSError:
                time.sleep(0.05)
        self.assertTrue(answer and answer[0].startswith("ok version=2"), answer)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(status(a.pid)["gate"], "open")
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_the_socket_is_the_owners_alone_whatever_the_umask(self):
        # made in a world-writable sticky directory with umask 0: its own
        # directory is 0700 and the socket 0600 from the start
        shared = tempfile.mkdtemp(prefix="cudasnap-shm-")
        self.addCleanup(subprocess.run, ["rm", "-rf", shared])
        os.chmod(shared, 0o1777)
        a = self.app(env_more={"CUDASNAP_PARK_DIR": shared}, umask=0)
        path = socket_path(a.pid)
        self.assertTrue(path.startswith(shared + "/.cudasnap-park."), path)
        st = os.stat(os.path.dirname(path))
        self.assertEqual((oct(st.st_mode & 0o7777), st.st_uid), ("0o700", os.geteuid()))
        self.assertEqual(oct(os.stat(path).st_mode & 0o777), "0o600")
        # a directory others may rename entries in is not used
        loose = tempfile.mkdtemp(prefix="cudasnap-loose-")
        self.addCleanup(subprocess.run, ["rm", "-rf", loose])
        os.chmod(loose, 0o777)
        b = self.app(env_more={"CUDASNAP_PARK_DIR": loose})
        self.assertFalse(socket_path(b.pid).startswith(loose), socket_path(b.pid))
        self.assertTrue(status(b.pid)["parkable"], "1")


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class Ipc(ParkCase):
    def test_a_handle_opened_in_another_pid_namespace_fails_as_the_drivers(self):
        # The importer runs in a PID namespace of its own, where it has the
        # pid the exporter has in the test's (ns_last_pid), and the same
        # first allocation's address: resolved in its own /proc the handle
        # names the importer itself. It must fail, as the driver fails a
        # handle of a process it cannot reach (CUDA_ERROR_INVALID_VALUE),
        # not map the importer's own memory.
        handle = os.path.join(self.tmp, "handle")
        e = App(self, ["--alloc-mib", "8", "--seed", "7", "--ipc-export", handle])
        env = dict(self.env, CUDASNAP_PARK_LIB=PARK_LIB, CUDASNAP_PARK_DIR=self.tmp)
        asan = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        script = (f"echo {e.pid - 1} > /proc/sys/kernel/ns_last_pid; "
                  f"{BIN} run -- {CUAPP} --alloc-mib 8 --seed 9 --ipc-import {handle} --peer-seed 7 "
                  "--interval-ms 20 & wait $!")
        p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.apps.append(p)
        try:
            out, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        self.assertIn("cuIpcOpenMemHandle -> 1 (CUDA_ERROR_INVALID_VALUE)", err, (out, err))
        self.assertNotIn("ready", out, err)
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")

    @unittest.skipUnless(SLOW_FD_ANSWER, "built with the interposer")
    def test_a_park_while_an_importer_is_given_the_memory_is_refused(self):
        # the exporter answers the importer's request for its memory's
        # descriptor 2 s late: a park that comes meanwhile must know of the
        # importer (it would take the memory from under it)
        handle = os.path.join(self.tmp, "handle")
        e = App(self, ["--alloc-mib", "8", "--seed", "7", "--ipc-export", handle],
                env_more={"LD_PRELOAD": SLOW_FD_ANSWER})
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("i", App(
            self, ["--alloc-mib", "4", "--ipc-import", handle, "--peer-seed", "7"])))
        t.start()
        time.sleep(1.0)  # the importer's request is being answered
        answer, _ = control(e.pid, "park 5000", key=True)
        t.join()
        self.assertTrue(answer.startswith("error code=801 stage=check importer="), answer)
        i = box["i"]
        self.assertEqual((status(e.pid)["parked"], status(e.pid)["ipc_attached"]), ("0", "1"))
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")

    @unittest.skipUnless(SLOW_FD_ANSWER, "built with the interposer")
    def test_a_park_while_a_vmm_importer_attaches_again_is_refused(self):
        # the importer of VMM memory the program exported parks (it lets
        # go of the memory) and unparks: it asks its exporter for the
        # memory again, which answers 2 s late; a park of the exporter
        # meanwhile must know of it
        share = os.path.join(self.tmp, "vmmfd")
        e = App(self, ["--alloc-mib", "8", "--vmm-mib", "4", "--seed", "7", "--vmm-share", share],
                env_more={"LD_PRELOAD": SLOW_FD_ANSWER})
        i = App(self, ["--vmm-mib", "4", "--vmm-import", share, "--peer-seed", "7"])
        self.assertEqual(status(e.pid)["ipc_attached"], "1")
        held = []
        answer, _ = control(i.pid, "park 5000", keep=held, key=True)
        self.assertTrue(answer.startswith("ok parked=1"), answer)
        self.assertEqual(status(e.pid)["ipc_attached"], "0")
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("unpark", read_lines(held[0])))
        held[0].sendall(f"unpark 10000 key={key_of(i.pid)}\n".encode())
        t.start()
        time.sleep(1.0)  # the importer's request is being answered
        answer, _ = control(e.pid, "park 5000", key=True)
        t.join()
        held[0].close()
        self.assertTrue(answer.startswith("error code=801 stage=check importer="), answer)
        self.assertTrue(box["unpark"][0].startswith("ok parked=0"), box)
        self.assertEqual((status(e.pid)["parked"], status(e.pid)["ipc_attached"]), ("0", "1"))
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class Backed(ParkCase):
    """Memory the program takes hold of itself is never parked from under it."""

    def test_a_retained_handle_keeps_its_allocation_from_parking(self):
        a = App(self, ["--alloc-mib", "8", "--interval-ms", "20", "--retain"])
        st = status(a.pid)
        self.assertEqual(st["parkable"], "0")
        procs, _ = self.ps()
        self.assertIn("cuMemRetainAllocationHandle", procs[a.pid]["park"]["why_not"])
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("park", r.obj["processes"][0]["seconds"])
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_memory_exported_to_a_peer_is_never_parked_away(self):
        # as NCCL registers a user buffer: retain, export, release; the
        # peer maps the memory, which a park would take from under it
        share = os.path.join(self.tmp, "retained")
        e = App(self, ["--alloc-mib", "8", "--seed", "7", "--interval-ms", "20", "--retain-share", share])
        i = App(self, ["--vmm-mib", "8", "--vmm-import", share, "--peer-seed", "7", "--interval-ms", "20"],
                park=False)
        self.assertEqual(status(e.pid)["parkable"], "0")
        self.assertIn("cuMemExportToShareableHandle", control(e.pid, "status", key=True)[0].split(" why=", 1)[1])
        r = self.cs("checkpoint", "--pid", e.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("park", r.obj["processes"][0]["seconds"])
        self.assertEqual(self.cs("restore", "--pid", e.pid).rc, 0)
        self.assertEqual(e.verify(), f"verify ok bytes={e.bytes}")
        self.assertEqual(i.verify(), f"verify ok bytes={i.bytes}")


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class Leases(ParkCase):
    def app(self, *args, **kw):
        return App(self, ["--alloc-mib", "8", "--interval-ms", "20", *args], **kw)

    def test_a_forked_child_keeps_no_connection_open(self):
        # cudasnap waits for the interposer to close its end; a child the
        # program forks meanwhile must not hold it open
        a = self.app()
        with connect(via_root(a.pid)) as s:
            s.sendall(f"status key={key_of(a.pid)}\n".encode())
            self.assertTrue(read_lines(s)[0].startswith("ok "))
            os.kill(a.pid, signal.SIGUSR2)  # it forks a child that sleeps
            deadline = time.monotonic() + 10
            children = []
            while not children and time.monotonic() < deadline:
                with open(f"/proc/{a.pid}/task/{a.pid}/children") as f:
                    children = f.read().split()
                time.sleep(0.02)
            self.assertTrue(children, "no child forked")
            time.sleep(0.2)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(3)
            t0 = time.monotonic()
            self.assertEqual(s.recv(10), b"")
            self.assertLess(time.monotonic() - t0, 2)

    def test_a_connection_that_gives_no_key_is_let_go_within_a_second(self):
        a = self.app()
        with connect(via_root(a.pid)) as s:
            s.settimeout(10)
            t0 = time.monotonic()
            self.assertEqual(s.recv(10), b"")
            self.assertLess(time.monotonic() - t0, 3)
        with connect(via_root(a.pid)) as s:  # nor after a request of its own
            s.sendall(b"status\n")
            self.assertEqual(read_lines(s), ["error code=800 stage=access"])
            s.settimeout(10)
            t0 = time.monotonic()
            self.assertEqual(s.recv(10), b"")
            self.assertLess(time.monotonic() - t0, 3)

    def test_silent_connections_do_not_keep_cudasnap_out(self):
        # anyone who can connect takes every place it can, and says nothing:
        # cudasnap, which gives the key, still parks the process
        a = self.app()
        path = via_root(a.pid)
        held = []
        try:
            for _ in range(64):
                s = socket.socket(socket.AF_UNIX)
                s.connect(path)
                held.append(s)
            time.sleep(0.3)
            r = self.cs("checkpoint", "--pid", a.pid, "--json")
            self.assertEqual(r.rc, 0, r)
            self.assertIn("park", r.obj["processes"][0]["seconds"])
            r = self.cs("restore", "--pid", a.pid)
            self.assertEqual(r.rc, 0, r)
        finally:
            for s in held:
                s.close()
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_process_whose_socket_is_gone_is_refused_not_left_to_the_driver(self):
        # its control socket's file removed (a cleaner of /dev/shm): cudasnap
        # cannot park it, nor tell what it imports through the interposer
        a = self.app()
        os.unlink(socket_path(a.pid))
        r = self.cs("checkpoint", "--pid", a.pid)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("whose control socket does not answer", r.err)
        self.assertIn("--allow-unrestorable", r.err)
        self.assertEqual(self.states([a.pid]), {a.pid: "running"})
        r = self.cs("checkpoint", "--pid", a.pid, "--dry-run", "--json")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("park-unreachable", json.dumps(r.obj))
        self.assertIn(f"UNREACHABLE: {a.pid} (fakecuda-cuapp) runs the parking interposer", self.cs("ps").out)
        # told to, the driver checkpoints it alone
        r = self.cs("checkpoint", "--pid", a.pid, "--allow-unrestorable", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("park", r.obj["processes"][0]["seconds"])
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    @unittest.skipUnless(GONE_AFTER_STATUS, "built with the interposer")
    def test_a_socket_gone_after_the_checks_is_refused_by_the_transaction(self):
        # the socket's file goes right after the checkpoint's own checks
        # read the status: the transaction, which asks again, must refuse
        # it before anything changes rather than leave it to the driver
        trigger = os.path.join(self.tmp, "go")
        a = self.app(env_more={"LD_PRELOAD": GONE_AFTER_STATUS, "GONE_AFTER_STATUS": trigger})
        open(trigger, "w").close()
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertFalse(os.path.exists(trigger), "no status was answered")
        self.assertFalse(os.path.exists(socket_path(a.pid)))
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn("whose control socket does not answer", r.err + r.out)
        self.assertEqual(self.states([a.pid]), {a.pid: "running"})
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_process_that_turned_the_interposer_off_is_the_drivers(self):
        # CUDASNAP_PARK=0: no control socket, by the program's own choice
        a = self.app(env_more={"CUDASNAP_PARK": "0"})
        self.assertNotIn("UNREACHABLE", self.cs("ps").out)
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("park", r.obj["processes"][0]["seconds"])
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_held_park_outlasts_the_idle_limit(self):
        # a connection that holds nothing is let go after the idle limit; one
        # that holds a park keeps it as long as it lives
        a = self.app(env_more={"CUDASNAP_PARK_IDLE_S": "1"})
        with connect(via_root(a.pid)) as idle:
            time.sleep(2.5)
            self.assertEqual(idle.recv(10), b"")
        held = []
        answer, _ = control(a.pid, "park 2000", keep=held, key=True)
        self.assertTrue(answer.startswith("ok parked=1"), answer)
        time.sleep(2.5)
        st = status(a.pid)
        self.assertEqual((st["parked"], st["held"]), ("1", "1"))
        held[0].close()
        deadline = time.monotonic() + 10
        while status(a.pid)["parked"] != "0" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_committed_park_whose_holder_is_gone_is_left_behind_until_restore(self):
        a = self.app()
        held = []
        answer, _ = control(a.pid, "park 2000", keep=held, key=True)
        self.assertTrue(answer.startswith("ok parked=1"), answer)
        held[0].sendall(b"commit\n")
        self.assertEqual(read_lines(held[0]), ["ok committed=1"])
        held[0].close()
        time.sleep(0.3)
        st = status(a.pid)
        self.assertEqual((st["parked"], st["held"]), ("1", "0"))
        out = self.cs("ps").out
        self.assertIn(f"LEFT BEHIND: {a.pid} (fakecuda-cuapp) is running, parked", out)
        self.assertIn(f"'cudasnap restore --pid {a.pid}'", out)
        _, obj = self.ps()
        self.assertIn({"pid": a.pid, "comm": "fakecuda-cuapp", "holder": "none (its park was committed)",
                       "recovery": f"cudasnap restore --pid {a.pid}", "files": None,
                       "what": f"{a.pid} (fakecuda-cuapp) is running, parked, and nothing holds its park"},
                      obj["left_behind"])
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertNotIn("LEFT BEHIND", self.cs("ps").out)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")


@unittest.skipUnless(PARK_LIB and PARK_LOADER, "the interposer is built for x86-64 only")
class Loader(ParkCase):
    def test_the_first_driver_call_does_not_wait_on_the_loader_lock(self):
        env = dict(self.env, LD_PRELOAD=PARK_LIB, LD_LIBRARY_PATH=os.path.dirname(LIBCUDA))
        asan = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        p = subprocess.Popen([PARK_LOADER, PARK_LOADER_PROBE], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.apps.append(p)
        try:
            out, err = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.fail("park-loader hangs: the interposer waits for itself across the loader's lock")
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(out.strip(), "ok get=0 probe=loaded", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
