"""Parking into files (cudasnap checkpoint --park-to DIR): the interposer in
fakecuda-cuapp writes its device memory into files cudasnap made and passed
it, and reads them back at the restore, each piece checked. Each test checks
what the program holds afterwards, byte for byte, the files left in DIR, and
the state the driver reports."""
import json
import os
import subprocess
import time
import unittest

from harness import BIN, Case
from test_park import AS_USER, App, CUAPP, PARK_LIB, as_user_env, status

IO_FAULT = os.environ.get("IO_FAULT", "")
XXH3_FORGE = os.environ.get("XXH3_FORGE", "")
SHIM = os.environ.get("PARK_FILES_SHIM", "")
LANES1 = os.environ.get("PARK_LIB_LANES1", "")
PIECE = 32 << 20


def file_size(total, n, f):
    """park_find.h's park_file_size."""
    pieces = (total + PIECE - 1) // PIECE
    if pieces <= f:
        return 0
    size = ((pieces - 1 - f) // n + 1) * PIECE
    if (pieces - 1) % n == f:
        size -= pieces * PIECE - total
    return size


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class ParkFiles(Case):
    park_lib = PARK_LIB

    def setUp(self):
        super().setUp()
        self.dir = os.path.join(self.tmp, "parked")
        os.mkdir(self.dir, 0o700)
        self.faultfile = os.path.join(self.tmp, "io-fault")

    def cs(self, *args, **kw):
        return super().cs(*map(str, args), **kw)

    def app(self, mib=40, allocs=2, **kw):
        env = {"CS_IO_FAULT_FILE": self.faultfile, "CUDASNAP_PARK_LIB": self.park_lib}
        if IO_FAULT:
            env["LD_PRELOAD"] = IO_FAULT
        return App(self, ["--alloc-mib", str(mib), "--allocs", str(allocs), "--interval-ms", "600000"],
                   env_more=env, **kw)

    def faulty_cs(self):
        """cudasnap's environment with the fault library preloaded (in the
        sanitizer build, before the runtime cudasnap links itself)."""
        asan = self.env.get("ASAN_OPTIONS", "")
        return {"LD_PRELOAD": IO_FAULT, "CS_IO_FAULT_FILE": self.faultfile,
                "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}

    def io_fault(self, line=None):
        if line is None:
            if os.path.exists(self.faultfile):
                os.unlink(self.faultfile)
            return
        with open(self.faultfile, "w") as f:
            f.write(line + "\n")

    def files(self):
        return sorted(os.listdir(self.dir))

    def checkpoint(self, a, *extra, rc=0, env=None):
        r = self.cs("checkpoint", "--pid", a.pid, "--json", "--park-to", self.dir, *extra, env=env)
        self.assertEqual(r.rc, rc, r)
        return r

    def assertBack(self, a):
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(status(a.pid)["gate"], "open")
        self.assertEqual(self.states([a.pid]), {a.pid: "running"})
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def assertKeptThenRestores(self, a, kept):
        """After a restore that failed: still checkpointed with its files
        kept, then restored by the next restore, which removes them."""
        self.assertEqual((self.states([a.pid]), self.files()), ({a.pid: "checkpointed"}, kept))
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.files(), [])
        self.assertBack(a)

    def flip(self, path, at, mask):
        """Byte at of the file xor mask; returns the byte it held."""
        with open(path, "r+b") as f:
            f.seek(at)
            was = f.read(1)
            f.seek(at)
            f.write(bytes([was[0] ^ mask]))
        return was

    def put_back(self, path, at, was):
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(was)

    def test_parks_into_files_and_back_with_the_data(self):
        a = self.app()
        total = 2 * 40 << 20
        before = rss(a.pid)
        r = self.checkpoint(a)
        t = r.obj["processes"][0]
        pf = t["park"]["files"]
        self.assertEqual((pf["dir"], pf["count"]), (self.dir, 3), pf)  # 80 MiB: three pieces
        self.assertTrue(t["park"]["parked"])
        names = [f"{pf['name']}.{i}" for i in range(3)]
        self.assertEqual(self.files(), names)
        for i, n in enumerate(names):
            st = os.stat(os.path.join(self.dir, n))
            self.assertEqual(st.st_size, file_size(total, 3, i))
            self.assertEqual(st.st_mode & 0o777, 0o600)
        st = status(a.pid)
        self.assertEqual((st["parked"], st["files"], st["bytes"]), ("1", "3", str(total)))
        self.assertEqual(self.states([a.pid]), {a.pid: "checkpointed"})
        # it holds no host copy of its memory (a park into host memory
        # grows its resident memory by the bytes parked)
        self.assertLess(rss(a.pid), before + total // 4, (before, rss(a.pid)))
        # the manifest says where they are
        with open(os.path.join(self.state, "manifest.json")) as f:
            m = json.load(f)
        self.assertEqual(m["processes"][0]["park_files"]["count"], 3)
        h = self.cs("history", "--json", "-n", "1")
        self.assertEqual(json.loads(h.out)[0]["processes"][0]["park_files"], f"{self.dir}/{pf['name']}.*", h)
        self.assertIn(f"parked into {self.dir}/{pf['name']}.*", self.cs("history", "-n", "1").out)
        r = self.cs("restore", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("unpark", r.obj["processes"][0]["seconds"])
        self.assertEqual(self.files(), [])  # removed once it is back
        self.assertBack(a)
        # and again
        self.checkpoint(a)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertBack(a)

    def test_keep_keeps_the_files_and_a_second_park_into_them_is_refused(self):
        a = self.app()
        self.checkpoint(a)
        kept = self.files()
        r = self.cs("restore", "--pid", a.pid, "--keep")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.files(), kept)
        self.assertBack(a)
        # the same process into the same directory: its files are there
        r = self.checkpoint(a, rc=2)
        self.assertIn("are left from an earlier park of it", r.err)
        self.assertEqual(self.files(), kept)  # not touched
        self.assertBack(a)

    def test_a_directory_without_room_is_refused_before_anything_changes(self):
        small = os.path.join(self.tmp, "small")
        os.mkdir(small, 0o700)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs", small]).returncode:
            self.skipTest("no private mount namespace to mount a small file system in")
        self.addCleanup(subprocess.run, ["umount", "-l", small])
        a = self.app()
        r = self.cs("checkpoint", "--pid", a.pid, "--park-to", small)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("nothing was changed", r.err)
        self.assertIn("free for the 0.08 GiB", r.err)
        self.assertEqual(os.listdir(small), [])
        self.assertBack(a)

    def test_a_directory_others_can_write_or_a_link_is_refused(self):
        a = self.app(mib=8, allocs=1)
        os.chmod(self.dir, 0o777)
        r = self.cs("checkpoint", "--pid", a.pid, "--park-to", self.dir)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("another user could replace", r.err)
        os.chmod(self.dir, 0o700)
        link = os.path.join(self.tmp, "link")
        os.symlink(self.dir, link)
        r = self.cs("checkpoint", "--pid", a.pid, "--park-to", link)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("symbolic link", r.err)
        r = self.cs("checkpoint", "--pid", a.pid, "--park-to", "relative/dir")
        self.assertEqual(r.rc, 2, r)
        self.assertEqual(self.files(), [])
        self.assertBack(a)

    @unittest.skipUnless(IO_FAULT, "no I/O fault library")
    def test_a_disk_full_half_way_undoes_the_park(self):
        a = self.app()
        self.io_fault(f"write 28 {PIECE}")  # ENOSPC after the first piece
        r = self.checkpoint(a, rc=1)
        self.io_fault()
        self.assertEqual(r.obj["outcome"], "rolled-back", r)
        self.assertIn("writing file", r.err)
        self.assertIn("No space left on device", r.err)
        self.assertEqual(self.files(), [])
        self.assertBack(a)
        self.checkpoint(a)  # without the fault it parks
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertBack(a)

    @unittest.skipUnless(IO_FAULT, "no I/O fault library")
    def test_a_read_error_at_the_restore_leaves_it_checkpointed_with_its_files(self):
        a = self.app()
        self.checkpoint(a)
        kept = self.files()
        self.io_fault(f"read 5 {PIECE}")  # EIO after the first piece
        r = self.cs("restore", "--pid", a.pid, "--json")
        self.io_fault()
        self.assertEqual(r.rc, 1, r)
        self.assertIn("reading file", r.err)
        self.assertEqual(status(a.pid)["parked"], "1")
        self.assertKeptThenRestores(a, kept)

    def test_no_gpu_room_at_the_restore_says_it_stays_in_its_files(self):
        a = self.app()
        self.checkpoint(a)
        kept = self.files()
        self.fault("* mem_create error=2 1")  # out of GPU memory (once) when it maps its memory back
        r = self.cs("restore", "--pid", a.pid)
        self.fault()
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn("the driver answered CUDA error 2 when it mapped device memory back", r.err)
        self.assertIn("it stays parked in its files, nothing is lost", r.err)
        self.assertKeptThenRestores(a, kept)

    def test_eleven_pieces_over_eight_files(self):
        """2 x 170 MiB: eleven pieces over eight files, the first three of
        which hold two (read by two threads, each file's second piece is
        its second thread's): back byte for byte; a byte changed in piece 8
        (file 0's second) is named; a read error half-way names its file;
        each restores once mended."""
        a = self.app(mib=170)
        total = 2 * 170 << 20
        pf = self.checkpoint(a).obj["processes"][0]["park"]["files"]
        names = [f"{pf['name']}.{i}" for i in range(8)]
        self.assertEqual((pf["count"], self.files()), (8, names), pf)
        self.assertEqual([os.path.getsize(os.path.join(self.dir, n)) for n in names],
                         [file_size(total, 8, i) for i in range(8)])
        path = os.path.join(self.dir, names[0])
        was = self.flip(path, PIECE + 777, 0x10)
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("file 0 does not hold what the park wrote (piece 8:", r.err)
        self.put_back(path, PIECE + 777, was)
        self.io_fault(f"read 5 {9 * PIECE}")  # EIO once nine pieces are read
        r = self.cs("restore", "--pid", a.pid)
        self.io_fault()
        self.assertEqual(r.rc, 1, r)
        self.assertIn("reading file", r.err)
        self.assertKeptThenRestores(a, names)

    def test_a_changed_file_is_seen_and_the_original_restores(self):
        a = self.app()
        self.checkpoint(a)
        path = os.path.join(self.dir, self.files()[1])
        was = self.flip(path, 12345, 0x40)
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("does not hold what the park wrote", r.err)
        self.assertEqual(self.states([a.pid]), {a.pid: "checkpointed"})
        self.assertEqual(status(a.pid)["parked"], "1")
        self.put_back(path, 12345, was)
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertBack(a)

    @unittest.skipUnless(XXH3_FORGE, "xxh3-forge is built where xxhash.h is")
    def test_a_change_that_keeps_an_unkeyed_checksum_is_seen(self):
        """Whoever can write a file (its user, where no other right to the
        process is had) changes four words of a piece and keeps its XXH3:
        a keyed MAC, whose key is in the process alone, still refuses it
        before any byte reaches the device: GMAC where the CPU has AES-NI,
        Poly1305 where not."""
        for mac in ("", "poly1305"):
            with self.subTest(mac=mac or "default"):
                self.forged_is_refused(mac)

    def forged_is_refused(self, mac):
        a = self.app(env={"CUDASNAP_PARK_MAC": mac})
        self.checkpoint(a)
        path = os.path.join(self.dir, self.files()[0])  # piece 0: 32 MiB at 0
        with open(path, "rb") as f:
            f.seek(100 * 1024)
            was = f.read(1024)
        r = subprocess.run([XXH3_FORGE, path, "0", str(32 << 20), "100"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r)
        before, after = r.stdout.split()
        self.assertEqual(before, after)  # the same XXH3, other bytes
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("does not hold what the park wrote", r.err)
        self.assertEqual(self.states([a.pid]), {a.pid: "checkpointed"})
        self.assertEqual(status(a.pid)["parked"], "1")
        self.put_back(path, 100 * 1024, was)
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertBack(a)

    def test_roots_park_of_another_users_process_is_roots_alone(self):
        """Root parks a process of uid 1000 into files: they are root's,
        mode 0600, so its user (perhaps the uid a privileged program
        dropped to) can neither read its memory there nor change it. Files
        of the process's user (a park of its own) are taken; of another
        user, refused before anything changes."""
        env = as_user_env(self)
        os.chmod(self.tmp, 0o755)
        a = App(self, ["--alloc-mib", "40", "--allocs", "2", "--interval-ms", "600000"], wrap=AS_USER,
                env_more=dict(env, CUDASNAP_PARK_LIB=self.park_lib))
        self.checkpoint(a)
        names = self.files()
        for n in names:
            st = os.stat(os.path.join(self.dir, n))
            self.assertEqual((st.st_uid, st.st_mode & 0o777), (0, 0o600), n)
        path = os.path.join(self.dir, names[0])
        os.chown(path, 2000, 2000)
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("owned by another user", r.err)
        self.assertEqual(self.states([a.pid]), {a.pid: "checkpointed"})
        os.chown(path, 1000, 1000)  # as a park of its user's own would leave it
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")

    def test_a_rollback_parks_back_into_files_not_host_memory(self):
        """Two processes parked into files, the second's file changed: the
        restore fails. The first may have been unparked already; its files
        are kept until the whole restore has succeeded, and the rollback
        parks it back into files, never into host memory (what --park-to is
        for: a process whose GPU memory its memory limit cannot hold)."""
        a, b = self.app(), self.app()
        r = self.cs("checkpoint", "--pid", a.pid, "--pid", b.pid, "--json", "--park-to", self.dir)
        self.assertEqual(r.rc, 0, r)
        before = {p.pid: rss(p.pid) for p in (a, b)}
        names = self.files()
        self.assertEqual(len(names), 6, names)
        mine = [n for n in names if n.startswith(f"cudasnap-gpumem.{b.pid}.")]
        self.assertEqual(len(mine), 3, names)
        bad = os.path.join(self.dir, mine[1])
        was = self.flip(bad, 12345, 0x40)
        t0 = time.monotonic()
        r = self.cs("restore", "--pid", a.pid, "--pid", b.pid, "--json", timeout=200)
        self.assertNotEqual(r.rc, 0, r)
        self.assertLess(time.monotonic() - t0, 30, r)
        self.assertIn("does not hold what the park wrote", r.err)
        self.assertEqual(self.states([a.pid, b.pid]), {a.pid: "checkpointed", b.pid: "checkpointed"})
        self.assertEqual(len(self.files()), 6, self.files())
        for p in (a, b):
            st = status(p.pid)
            self.assertEqual((st["parked"], st["files"]), ("1", "3"), (p.pid, st))
            self.assertLess(rss(p.pid), before[p.pid] + (40 << 20), p.pid)
        self.put_back(bad, 12345, was)
        r = self.cs("restore", "--pid", a.pid, "--pid", b.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.files(), [])
        self.assertBack(a)
        self.assertBack(b)

    def test_a_rollback_that_fails_after_its_park_leaves_it_unparked(self):
        """The rollback parks the first process back into its files, then
        its lock fails: the process runs on, and so must not be left parked
        with its GPU work held; its rollback park, never committed, undoes
        itself."""
        a, b = self.app(), self.app()
        r = self.cs("checkpoint", "--pid", a.pid, "--pid", b.pid, "--json", "--park-to", self.dir)
        self.assertEqual(r.rc, 0, r)
        # a: the one the restore takes first (the record's order), b then
        with open(os.path.join(self.state, "manifest.json")) as f:
            order = {e["pid"]: e["order"] for e in json.load(f)["processes"]}
        if (order[b.pid], b.pid) < (order[a.pid], a.pid):
            a, b = b, a
        mine = [n for n in self.files() if n.startswith(f"cudasnap-gpumem.{b.pid}.")]
        was = self.flip(os.path.join(self.dir, mine[1]), 12345, 0x40)
        self.fault(f"{a.pid} lock error=999")  # a restore locks only in its rollback
        r = self.cs("restore", "--pid", a.pid, "--pid", b.pid, "--sequential", "--json")
        self.fault()
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn(f"{a.pid} (fakecuda-cuapp) rollback park: ok", r.err)
        deadline = time.monotonic() + 10
        while status(a.pid)["parked"] != "0" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual((status(a.pid)["parked"], status(a.pid)["gate"]), ("0", "open"), r.err)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")
        self.put_back(os.path.join(self.dir, mine[1]), 12345, was)
        r = self.cs("restore", "--pid", b.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertBack(b)

    def test_a_pids_max_just_above_its_threads_parks_with_fewer(self):
        """The park into files takes threads of the process (two a file);
        a cgroup whose pids.max leaves room for few of them gets a park
        with fewer, not a failed one."""
        v1, v2 = "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cgroup.controllers"
        root = v1 if os.path.isdir(v1) else "/sys/fs/cgroup" if os.path.exists(v2) else None
        if root is None:
            self.skipTest("no pids controller")
        cg = os.path.join(root, f"cs-park-pids-{os.urandom(6).hex()}")  # PID 1 in each test namespace
        try:
            os.mkdir(cg)
        except OSError as e:
            self.skipTest(f"no cgroup of its own: {e}")
        a = self.app()
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(a.pid))

        def put_back():
            try:
                with open(os.path.join(root, "cgroup.procs"), "w") as f:
                    f.write(str(a.pid))
            except OSError:
                pass  # it ended
            os.rmdir(cg)
        self.addCleanup(put_back)
        with open(os.path.join(cg, "pids.current")) as f:
            now = int(f.read())
        # its connections' threads, and one lane's: five would be wanted
        with open(os.path.join(cg, "pids.max"), "w") as f:
            f.write(str(now + 3))
        # the plan says so first
        r = self.cs("checkpoint", "--pid", a.pid, "--dry-run", "--park-to", self.dir)
        self.assertEqual(r.rc, 0, r)
        self.assertIn("its park into files runs 5 threads beside the park's own, and the pids.max of cgroup "
                      f"/{os.path.basename(cg)} leaves room for 3", r.out + r.err)
        r = self.checkpoint(a)
        self.assertEqual(r.obj["processes"][0]["park"]["files"]["count"], 3, r)
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertBack(a)

    def test_a_missing_or_cut_file_is_named_and_nothing_changes(self):
        a = self.app()
        self.checkpoint(a)
        names = self.files()
        path = os.path.join(self.dir, names[2])
        os.rename(path, path + ".away")
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 1, r)
        self.assertIn(names[2], r.err)
        self.assertEqual(self.states([a.pid]), {a.pid: "checkpointed"})
        os.rename(path + ".away", path)
        size = os.path.getsize(path)
        os.truncate(path, size - 4096)
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("of another size", r.err)
        os.truncate(path, size)  # the end is zeros now: its checksum tells
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("does not hold what the park wrote", r.err)
        self.assertEqual(status(a.pid)["parked"], "1")

    def test_a_failed_lock_unparks_from_the_files_and_removes_them(self):
        a = self.app()
        self.fault(f"{a.pid} lock error=999")
        r = self.checkpoint(a, rc=1)
        self.fault()
        self.assertEqual(r.obj["outcome"], "rolled-back", r)
        self.assertEqual(self.files(), [])
        self.assertBack(a)

    def shim_app(self, mode, **env):
        log = os.path.join(self.tmp, "shim.log")
        return App(self, ["--alloc-mib", "40", "--allocs", "2", "--interval-ms", "600000"],
                   env_more={"LD_PRELOAD": SHIM, "PFS_MODE": mode, "PFS_LOG": log, **env})

    @unittest.skipUnless(SHIM, "no shim")
    def test_memory_freed_between_status_and_park_restores(self):
        # the program frees 8 MiB after cudasnap sized the files from its
        # status: the interposer writes what it holds at the park, and each
        # file ends up exactly its part of that
        a = self.shim_app("free_at_park", PFS_MIB="8")
        r = self.checkpoint(a)
        total = 2 * 40 << 20
        pf = r.obj["processes"][0]["park"]["files"]
        sizes = [os.path.getsize(os.path.join(self.dir, f"{pf['name']}.{i}")) for i in range(pf["count"])]
        self.assertEqual(sizes, [file_size(total, pf["count"], i) for i in range(pf["count"])])
        r = self.cs("restore", "--pid", a.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertBack(a)

    @unittest.skipUnless(SHIM, "no shim")
    def test_memory_allocated_between_status_and_park_is_refused(self):
        # the program allocates 40 MiB after cudasnap sized (and began to
        # reserve) the files: the park needs room nobody reserved, which
        # it would take in the process's own memory cgroup; it is refused
        a = self.shim_app("alloc_at_park", PFS_MIB="40")
        r = self.checkpoint(a, rc=1)
        self.assertEqual(r.obj["outcome"], "rolled-back", r)
        self.assertIn("it holds more GPU memory than when its files were sized", r.err)
        self.assertEqual(self.files(), [])
        self.assertEqual(self.states([a.pid]), {a.pid: "running"})
        self.assertEqual(status(a.pid)["parked"], "0")
        r = self.checkpoint(a)  # sized for what it holds now, it parks
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertBack(a)

    @unittest.skipUnless(IO_FAULT, "no I/O fault library")
    def test_the_park_writes_while_its_room_is_reserved_and_never_past_it(self):
        """cudasnap reserves the files' space while the park writes them:
        with each 32 MiB of it taking 0.4 s more, the park waits for it
        (its copy takes the reservation's time, not a reservation before
        it), and no write of the program lands past what is reserved (the
        fault library fails such a write with EFBIG)."""
        a = self.app(mib=170)  # eleven pieces: files 0-2 take two each
        self.io_fault("slowroom 400 0")
        r = self.checkpoint(a, env=self.faulty_cs())
        self.io_fault()
        park = r.obj["processes"][0]["park"]
        self.assertGreaterEqual(park["copy_seconds"], 0.7, park)
        self.assertEqual(len(self.files()), 8)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertBack(a)

    @unittest.skipUnless(IO_FAULT, "no I/O fault library")
    def test_a_reservation_that_runs_out_half_way_undoes_the_park(self):
        a = self.app(mib=170)
        self.io_fault(f"fallocate 28 {3 * PIECE}")  # ENOSPC once 96 MiB are reserved
        r = self.checkpoint(a, rc=1, env=self.faulty_cs())
        self.io_fault()
        self.assertEqual(r.obj["outcome"], "rolled-back", r)
        self.assertIn("has no room for the 0.33 GiB of GPU memory a park into files writes", r.err)
        self.assertEqual(self.files(), [])
        self.assertBack(a)

    @unittest.skipUnless(IO_FAULT, "no I/O fault library")
    def test_a_park_that_fails_stops_the_reservation_of_its_files(self):
        """The park fails at its first copy while cudasnap still reserves
        the files (each 32 MiB taking 2 s more, files 0-2 two of them):
        the reservation stops after the pieces under way, the error is the
        copy's, and everything is as it was."""
        a = self.app(mib=170)
        self.io_fault("slowroom 2000 0")
        self.fault(f"{a.pid} dtoh error=999")
        r = self.checkpoint(a, rc=1, env=self.faulty_cs())
        self.io_fault()
        self.fault()
        self.assertLess(r.wall, 3.5, r)  # 4 s and more when the whole reservation is waited for
        self.assertNotIn("no room", r.err)
        self.assertEqual(self.files(), [])
        self.assertBack(a)

    @unittest.skipUnless(IO_FAULT, "no I/O fault library")
    def test_a_file_system_without_fallocate_gets_its_space_written(self):
        # fallocate answers EOPNOTSUPP (ramfs reserves nothing that way):
        # cudasnap writes the space with zeros, a piece at a time, and the
        # park waits for it as for any reservation
        a = self.app(mib=170)
        self.io_fault("fallocate 95 0\nslowroom 0 0")
        self.checkpoint(a, env=self.faulty_cs())
        self.io_fault()
        self.assertEqual(len(self.files()), 8)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertBack(a)

    @unittest.skipUnless(SHIM, "no shim")
    def test_a_failed_release_whose_undo_cannot_read_is_named_and_held(self):
        # the driver fails the second allocation's release, and the files
        # cannot be read to give the first one back: the process stays
        # parked, its calls held (never running on with memory gone), the
        # files kept, and the error says so
        faults = os.path.join(self.tmp, "shim-faults")
        with open(faults, "w") as f:
            f.write("* mem_unmap error=999\n")
        a = self.shim_app("release_fail", PFS_FAULTS=faults, PFS_FILES="3")
        r = self.checkpoint(a, rc=3)
        self.assertEqual(r.obj["outcome"], "incomplete", r)
        self.assertEqual(r.obj["processes"][0]["final_state"], "running, parked", r)
        self.assertIn("failed half-way and could not be undone", r.err)
        self.assertIn(self.dir, r.err)
        self.assertIn(f"to recover: cudasnap restore --pid {a.pid}", r.err)
        self.assertEqual(len(self.files()), 3)
        st = status(a.pid)
        self.assertEqual((st["parked"], st["gate"], st["files"]), ("1", "closed", "3"))
        # the manifest names its files: the restore the error names unparks
        # it from them (here it fails again: the shim fails every read now)
        with open(os.path.join(self.state, "manifest.json")) as f:
            self.assertEqual(json.load(f)["processes"][0]["park_files"]["count"], 3)
        r = self.cs("restore", "--pid", a.pid)
        self.assertIn("reading file", r.err)
        self.assertEqual(status(a.pid)["parked"], "1")

    def test_cudasnap_killed_while_it_holds_the_park_leaves_it_running(self):
        # cudasnap dies after the park, before its commit (the lock waits):
        # the interposer unparks itself from the files it still holds
        a = self.app()
        self.fault(f"{a.pid} lock delay=4000")
        p = subprocess.Popen([BIN, "checkpoint", "--pid", str(a.pid), "--park-to", self.dir],
                             env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.apps.append(p)
        deadline = time.monotonic() + 10
        while status(a.pid).get("files") != "3" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(status(a.pid)["files"], "3")
        p.kill()
        p.wait()
        deadline = time.monotonic() + 10
        while status(a.pid)["parked"] != "0" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.fault()
        # the driver's lock it was waiting for completes without it: what
        # 'cudasnap ps' names left behind, and unlock recovers
        deadline = time.monotonic() + 10
        while self.states([a.pid])[a.pid] != "locked" and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.cs("unlock", "--pid", a.pid).rc, 0)
        self.assertBack(a)
        # its files stay (nobody removed them): ps and doctor name them,
        # and a second checkpoint's refusal says what they are
        self.assertLeftFiles(a, "a park into them")
        self.checkpoint(a)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertBack(a)

    def holds_files(self, pid):
        fds = f"/proc/{pid}/fd"
        for fd in os.listdir(fds):
            try:
                if "/cudasnap-gpumem." in os.readlink(os.path.join(fds, fd)):
                    return True
            except OSError:
                pass
        return False

    def assertLeftFiles(self, a, during):
        """Files a killed cudasnap left beside a process that runs with its
        memory: named by ps, ps --json and doctor, refused by a park into
        them, gone from every report once removed as ps says."""
        left = self.files()
        self.assertEqual(len(left), 3)
        base = os.path.join(self.dir, left[0][:-2])
        ps = self.cs("ps")
        self.assertIn(f"LEFT BEHIND: {a.pid} ", ps.out)
        self.assertIn(f"is running with its GPU memory, and its 3 park files {base}.0 ... are left", ps.out)
        self.assertIn(f"in the middle of {during}", ps.out)
        self.assertIn(f"remove them with 'rm {base}.*'", ps.out)
        entry = [b for b in self.cs("ps", "--json").obj["left_behind"] if b["files"]]
        self.assertEqual([(b["pid"], b["files"], b["recovery"]) for b in entry], [(a.pid, base, f"rm {base}.*")])
        doc = self.cs("doctor", "--json").obj
        checks = [c for c in doc["checks"] if c["name"] == "left-behind"]
        self.assertTrue(any(f"rm {base}.*" == (c.get("fix") or "") for c in checks), checks)
        r = self.checkpoint(a, rc=2)
        self.assertIn(f"{base}.* are left from an earlier park of it", r.err)
        self.assertIn("hold nothing it needs", r.err)
        r = self.cs("checkpoint", "--pid", a.pid, "--dry-run", "--park-to", self.dir)
        self.assertIn(f"{base}.* are left from an earlier park of it", r.out + r.err)
        self.assertEqual(self.files(), left)  # not touched
        for n in left:
            os.unlink(os.path.join(self.dir, n))
        self.assertEqual(self.cs("ps", "--json").obj["left_behind"], [])

    @unittest.skipUnless(IO_FAULT, "no I/O fault library")
    def test_cudasnap_killed_during_the_unpark_leaves_files_that_ps_names(self):
        a = self.app()
        self.checkpoint(a)
        self.io_fault("slowread 1500 0")  # each read of a piece takes 1.5 s more
        p = subprocess.Popen([BIN, "restore", "--pid", str(a.pid)], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.apps.append(p)
        # its unpark has begun once the program holds the files (asking it
        # would wait for the unpark)
        deadline = time.monotonic() + 10
        while not self.holds_files(a.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertIsNone(p.poll())
        p.kill()
        p.wait()
        deadline = time.monotonic() + 15
        while status(a.pid)["parked"] != "0" and time.monotonic() < deadline:
            time.sleep(0.1)
        self.io_fault()
        self.assertBack(a)
        self.assertLeftFiles(a, "an unpark from them")

    @unittest.skipUnless(IO_FAULT, "no I/O fault library")
    def test_a_file_system_that_refuses_direct_transfers_is_written_buffered(self):
        a = self.app()
        r = self.checkpoint(a)
        direct = r.obj["processes"][0]["park"]["files"]["direct"]
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        if direct == 0:
            self.skipTest(f"{self.dir} takes no O_DIRECT: nothing falls back")
        self.io_fault("direct 22 0")  # EINVAL at every O_DIRECT transfer
        r = self.checkpoint(a)
        self.assertEqual(r.obj["processes"][0]["park"]["files"]["direct"], 0, r.obj)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.io_fault()
        self.assertBack(a)

    def test_dry_run_and_ps_say_where_it_parks(self):
        a = self.app()
        r = self.cs("checkpoint", "--pid", a.pid, "--dry-run", "--park-to", self.dir)
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"parks into 3 files of {self.dir}", r.out + r.err)
        self.checkpoint(a)
        r = self.cs("ps")
        self.assertIn("in 3 files (--park-to)", r.out)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertBack(a)


@unittest.skipUnless(LANES1 and CUAPP, "no interposer built with one thread per file (x86-64 only)")
class ParkFilesOneLane(ParkFiles):
    """Every case above with an interposer that writes and reads each file
    with one thread (built with -DPARK_LANES=1, as tests/gpu/park_files.sh
    compares it on a GPU)."""
    park_lib = LANES1


if __name__ == "__main__":
    unittest.main()
