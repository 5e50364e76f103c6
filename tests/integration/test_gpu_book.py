"""Restores at once onto one GPU, and a GPU whose free memory NVML cannot
give: no process is ever lost.

A restore that runs out of GPU memory destroys the process's checkpointed
state for good (driver 580). Two restores that each fit alone but not
together both read the same free memory: every cudasnap of the node books
the room of a restore in the state directory, under one lock, from the
check until the driver answers (lib/room/gpubook.h). The driver double's
allocations are atomic as the real driver's are (a restore measured after
another took its memory runs out of memory), so a restore let through
without room shows as LOST here.

The GPU: 1 GiB, of which processes outside the test hold 300 MiB; two
checkpointed processes of 400 MiB each, of which one fits at a time (each
restore needs its memory plus 144 MiB, CS_RESTORE_EXTRA, by cudasnap's
count).
"""
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

from harness import APP, BIN, GPU0, GPU1, Case

ROUNDS = int(os.environ.get("CUDASNAP_BOOK_ROUNDS", "8"))
CUAPP = os.environ.get("FAKE_CUAPP", "")
PARK_LIB = os.environ.get("PARK_LIB", "")


def booking_file(state, needs, who, beat=1, until=0, pid=None, target=0, pidns=0, start=0, short=0):
    """The bytes of a booking file of this version (cs_booking_rec in
    lib/room/gpubook.h, its ticket 1), as another cudasnap writes it: needs,
    [(uuid, MiB)]; pid, the booking process (default: the test's)."""
    import struct
    gpus = b"".join(struct.pack("<48sQ", u.encode(), m << 20) for u, m in needs)
    rec = struct.pack("<IIQQQiiQQQ96s", state, len(needs), 1, beat, until, os.getpid() if pid is None else pid,
                      target, pidns, start, 0, who.encode()) + \
        gpus + b"\0" * (56 * (16 - len(needs))) + struct.pack("<II", short, 0)
    return b"CSBOOK3\0" + rec


class OneGpu(Case):
    """The GPU of every test here, and what the tests share."""

    def setUp(self):
        super().setUp()
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        self.env["FAKECUDA_OTHER_USED_MIB"] = "300"

    def checkpointed(self, *mibs):
        pids = [self.start("--mem", str(m))[0] for m in mibs]
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertStates(pids, "checkpointed")
        return pids

    def together(self, *argvs, env=None, envs=None):
        """Runs every argv (a cudasnap command line, or a drop-in one when it
        starts with 'cuda-checkpoint') at once, each with env and its own of
        envs; their results, in order."""
        out = [None] * len(argvs)
        start = threading.Barrier(len(argvs))

        def run(i, argv):
            e = dict(env or {}, **(envs[i] if envs else {}))
            start.wait()
            if argv[0] == "cuda-checkpoint":
                out[i] = self.cc(*argv[1:], env=e, timeout=240)
            else:
                out[i] = self.cs(*argv, env=e, timeout=240)
        threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(argvs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def assertOneBackOneKept(self, pids, results):
        """Exactly one process restored (running, or locked after the
        drop-in's restore action), the other still checkpointed with its
        data (it restores once the first is gone); nothing lost."""
        for r in results:
            self.assertNotIn("LOST", r.err, r)
            self.assertNotIn("CUDA_ERROR_OUT_OF_MEMORY", r.err, r)
        states = self.states(pids)
        back = [p for p in pids if states[p] in ("running", "locked")]
        kept = [p for p in pids if states[p] == "checkpointed"]
        self.assertEqual((len(back), len(kept)), (1, 1), (states, results))
        if states[back[0]] == "running":
            self.assertDataOk(back)
        return back[0], kept[0]

    def as_nobody(self):
        """The test's files opened to user nobody, with a state directory of
        its own: (the command that runs a program as nobody, that directory)."""
        nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
        if not shutil.which("setpriv"):
            self.skipTest("no setpriv")
        os.chmod(self.tmp, 0o755)
        os.chmod(self.ready, 0o777)
        for n in os.listdir(self.dev):
            os.chmod(os.path.join(self.dev, n), 0o666)
        state = os.path.join(self.tmp, "user-state")
        os.mkdir(state, 0o700)
        os.chown(state, 65534, 65534)
        self.env["CUDASNAP_STATE_DIR"] = state
        return nobody, state

    def rounds(self, n):
        """Each round on fresh processes, whatever the last one left."""
        for rnd in range(n):
            with self.subTest(round=rnd):
                yield rnd
            self.doCleanups()
            self.setUp()



class Together(OneGpu):
    def test_two_restores_at_once_never_lose_a_process(self):
        """Rounds of two `cudasnap restore --pid` started together (each
        restore slowed down, so that both always check before either has
        taken its memory): one goes through, the other is refused before the
        driver is asked, and restores with its data once there is room."""
        for _ in self.rounds(ROUNDS):
            a, b = self.checkpointed(400, 400)
            self.fault("* restore delay=600")
            results = self.together(["restore", "--pid", str(a)], ["restore", "--pid", str(b)])
            self.fault()
            back, kept = self.assertOneBackOneKept([a, b], results)
            refused = results[[a, b].index(kept)]
            self.assertIn(f"restore of process {kept} (fakecuda-app) not asked of the driver", refused.err)
            self.assertIn("GPU 0", refused.err)
            os.kill(back, signal.SIGKILL)
            r = self.cs("restore", "--pid", str(kept))
            self.assertEqual(r.rc, 0, r)
            self.assertDataOk([kept])

    def test_wait_memory_waits_for_the_restore_in_flight_and_then_for_room(self):
        """Both wait (--wait-memory): the second waits behind the first's
        booking, then for room, which comes when the first process ends."""
        a, b = self.checkpointed(400, 400)
        self.fault("* restore delay=600")
        states = {}

        def end_the_first_back():
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                states.update(self.states([a, b]))
                back = [p for p in (a, b) if states[p] == "running"]
                if back:
                    time.sleep(1.0)
                    os.kill(back[0], signal.SIGKILL)
                    states["killed"] = back[0]
                    return
                time.sleep(0.1)
        killer = threading.Thread(target=end_the_first_back)
        killer.start()
        results = self.together(["restore", "--pid", str(a), "--wait-memory", "30"],
                                ["restore", "--pid", str(b), "--wait-memory", "30"])
        killer.join()
        for r in results:
            self.assertEqual(r.rc, 0, r)
            self.assertNotIn("LOST", r.err, r)
        first = states["killed"]
        second = b if first == a else a
        self.assertIn("waiting up to", results[[a, b].index(second)].err)
        self.assertStates([second], "running")
        self.assertDataOk([second])

    def test_wait_memory_runs_out_without_a_driver_call(self):
        a, b = self.checkpointed(400, 400)
        self.fault("* restore delay=600")
        results = self.together(["restore", "--pid", str(a), "--wait-memory", "2"],
                                ["restore", "--pid", str(b), "--wait-memory", "2"])
        back, kept = self.assertOneBackOneKept([a, b], results)
        refused = results[[a, b].index(kept)]
        self.assertGreaterEqual(refused.wall, 2.0, refused)
        self.assertIn("not asked of the driver", refused.err)

    def test_waiters_are_served_in_the_order_they_came(self):
        """Three restores of one GPU, one at a time: while the first is in
        flight, the second and third wait in line; once its process ends the
        second, which came first, takes the room, and the third, which would
        fit as well as the second, waits on behind it."""
        a, b, c = self.checkpointed(400, 400, 400)
        self.fault(f"{a} restore delay=1500")
        out = {}

        def run(pid, delay):
            time.sleep(delay)
            out[pid] = self.cs("restore", "--pid", str(pid), "--wait-memory", "8", timeout=240)
        threads = [threading.Thread(target=run, args=(p, d)) for p, d in ((a, 0), (b, 0.5), (c, 1.0))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while self.states([a])[a] != "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        os.kill(a, signal.SIGKILL)
        for t in threads:
            t.join()
        self.assertEqual(out[a].rc, 0, out[a])
        self.assertEqual(out[b].rc, 0, out[b])
        self.assertNotEqual(out[c].rc, 0, out[c])
        self.assertIn("not asked of the driver", out[c].err)
        self.assertStates([b], "running")
        self.assertStates([c], "checkpointed")
        for r in out.values():
            self.assertNotIn("LOST", r.err, r)

    def test_drop_in_and_command_line_at_once(self):
        """cuda-checkpoint (as runsc or CRIU's plugin run it) and cudasnap
        restore, together: the drop-in books as cudasnap does."""
        for _ in self.rounds(max(2, ROUNDS // 2)):
            a, b = self.checkpointed(400, 400)
            self.fault("* restore delay=600")
            results = self.together(["restore", "--pid", str(a)],
                                    ["cuda-checkpoint", "--action", "restore", "--pid", str(b)])
            self.fault()
            back, kept = self.assertOneBackOneKept([a, b], results)
            if kept == b:
                self.assertTrue(results[1].err.startswith(f"Could not restore on process ID {b}"), results[1])
            os.kill(back, signal.SIGKILL)
            if kept == b:
                self.assertEqual(self.cc("--action", "restore", "--pid", str(b)).rc, 0)
                self.assertEqual(self.cc("--action", "unlock", "--pid", str(b)).rc, 0)
            else:
                self.assertEqual(self.cs("restore", "--pid", str(a)).rc, 0)
            self.assertDataOk([kept])

    def pending_restore(self, pid, end, *extra):
        """Starts `cudasnap restore --pid pid` (extra: its options) on a
        restore the target carries out 3 s after it is asked, and ends that
        cudasnap while the request is with the driver: end is a signal, or
        None for one that gives up by itself (--step-timeout in extra)."""
        self.fault(f"{pid} restore delay=3000 1")
        p = subprocess.Popen([BIN, "restore", "--pid", str(pid), *extra], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not self.bookings():
            time.sleep(0.02)
        self.assertTrue(self.bookings(), "no booking seen while the restore was in flight")
        time.sleep(0.5)  # the request is with the target now
        if end is not None:
            os.killpg(p.pid, end)
        _, err = p.communicate(timeout=60)
        return p.returncode, err

    def test_a_restore_whose_cudasnap_ends_keeps_its_room_until_the_driver_is_done(self):
        """The first restore's cudasnap is killed, told to stop, or gives up
        at its deadline while its request is with the driver, which carries
        it out 3 s later: its booking outlives it, so a second restore onto
        the same room is not let through meanwhile (it would have made the
        first run out of memory when the target admitted it, destroying its
        state). Both processes keep their data."""
        for mode, end, extra in (("SIGKILL", signal.SIGKILL, ()), ("SIGTERM", signal.SIGTERM, ()),
                                 ("--step-timeout", None, ("--step-timeout", "1"))):
            with self.subTest(mode=mode):
                a, b = self.checkpointed(400, 400)
                rc, err = self.pending_restore(a, end, *extra)
                self.assertNotEqual(rc, 0, err)
                r = self.cs("restore", "--pid", str(b), timeout=200)
                self.assertNotEqual(r.rc, 0, r)
                self.assertIn(f"restore of process {b} (fakecuda-app) not asked of the driver", r.err)
                self.assertIn(f"pid {a} (fakecuda-app), booked by uid 0, whose cudasnap is gone", r.err)
                self.assertNotIn("LOST", r.err, r)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and self.states([a])[a] != "locked":
                    time.sleep(0.1)
                self.assertStates([a], "locked")
                self.assertStates([b], "checkpointed")
                self.assertEqual(self.cs("unlock", "--pid", str(a)).rc, 0)
                self.assertDataOk([a])
                # its restore over, the orphan goes at the next look
                os.kill(a, signal.SIGKILL)
                r = self.cs("restore", "--pid", str(b))
                self.assertEqual(r.rc, 0, r)
                self.assertDataOk([b])
                self.assertEqual(self.bookings(), [])
            self.doCleanups()
            self.setUp()

    def test_an_orphan_whose_target_is_gone_holds_no_one_back(self):
        """A cudasnap killed with its request pending, and its process
        killed too: nothing will take that room, and the next restore
        goes through at once."""
        a, b = self.checkpointed(400, 400)
        self.pending_restore(a, signal.SIGKILL)
        os.kill(a, signal.SIGKILL)
        time.sleep(0.2)
        r = self.cs("restore", "--pid", str(b))
        self.assertEqual(r.rc, 0, r)
        self.assertLess(r.wall, 10, r)
        self.assertDataOk([b])
        self.assertEqual(self.bookings(), [])

    def test_two_state_directories_book_in_the_one_book_of_the_node(self):
        """Two restores through two state directories (two operators, an
        engine's configuration beside the command line's): one book."""
        for _ in self.rounds(max(2, ROUNDS // 2)):
            a, b = self.checkpointed(400, 400)
            other = os.path.join(self.tmp, "other-state")
            os.mkdir(other, 0o700)
            shutil.copy(os.path.join(self.state, "manifest.json"), other)
            self.fault("* restore delay=600")
            results = self.together(["restore", "--pid", str(a)],
                                    ["restore", "--pid", str(b)], envs=[{}, {"CUDASNAP_STATE_DIR": other}])
            self.fault()
            back, kept = self.assertOneBackOneKept([a, b], results)
            os.kill(back, signal.SIGKILL)
            self.assertEqual(self.cs("restore", "--pid", str(kept)).rc, 0)
            self.assertDataOk([kept])

    def test_a_booking_this_cudasnap_cannot_read_counts_as_the_whole_gpu(self):
        """A booking of another cudasnap version (another magic), or one cut
        short: never nothing. Held by a live owner, or left by one that is
        gone within the bound, it takes the whole GPU."""
        import fcntl
        pid, = self.checkpointed(64)
        for what, data in (("another version", b"CSBOOK9\0" + b"\1" * 400), ("cut short", b"CSBOOK3\0\2\0")):
            with self.subTest(what=what):
                path = os.path.join(self.book, "b-0000000000000001-1-00000000")
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                self.addCleanup(lambda p=path: os.path.exists(p) and os.unlink(p))
                try:
                    os.write(fd, data)
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    r = self.cs("restore", "--pid", str(pid))
                    self.assertEqual(r.rc, 2, r)
                    self.assertIn("not asked of the driver", r.err)
                    self.assertIn("a booking that this cudasnap cannot read", r.err)
                finally:
                    os.close(fd)
                # its owner gone: it counts all the same, within the bound
                r = self.cs("restore", "--pid", str(pid))
                self.assertEqual(r.rc, 2, r)
                self.assertIn("a booking that this cudasnap cannot read", r.err)
                self.assertStates([pid], "checkpointed")
                os.unlink(path)
        r = self.cs("restore", "--pid", str(pid))
        self.assertEqual(r.rc, 0, r)
        self.assertDataOk([pid])

    def held_booking(self, mib, who="cudasnap restore: pid 1 (held)"):
        """A booking of this version held by the test (its flock taken), as a
        restore in flight holds it: (fd, path)."""
        import fcntl
        path = os.path.join(self.book, "b-0000000000000001-1-00000001")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, booking_file(2, [(GPU0, mib)], who))
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.addCleanup(lambda: (os.path.exists(path) and os.unlink(path), os.close(fd)))
        return fd, path

    def test_each_wait_for_the_books_lock_is_bounded_not_their_sum(self):
        """A restore waiting in line behind a restore in flight for more than
        the lock's bound (30 s) meets the book's lock held for a moment: it
        waits that moment, not refused as if it had waited all along."""
        import fcntl
        pid, = self.checkpointed(400)
        _, path = self.held_booking(600)
        out = {}
        t = threading.Thread(target=lambda: out.update(r=self.cs("restore", "--pid", str(pid), timeout=200)))
        t.start()
        time.sleep(32)
        lock = os.open(self.book, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(lock, fcntl.LOCK_EX)
        time.sleep(1.0)
        os.unlink(path)  # the restore in flight is over
        os.close(lock)
        t.join()
        r = out["r"]
        self.assertEqual(r.rc, 0, r)
        self.assertIn("waiting up to", r.err)
        self.assertNotIn("is held by", r.err)
        self.assertDataOk([pid])

    def test_a_waiter_reads_the_book_again_when_it_changed_or_each_second(self):
        """A restore waiting behind a restore in flight does not read every
        booking at every look (four a second, each of them every booking of
        the node): it reads them again when a booking is made or ended, and
        once a second for what changes in place. The end of the booking it
        waits for is seen at once."""
        import ctypes
        import struct
        pid, = self.checkpointed(400)
        _, path = self.held_booking(600)
        libc = ctypes.CDLL(None, use_errno=True)
        ino = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self.assertGreaterEqual(ino, 0)
        self.addCleanup(os.close, ino)
        in_open, in_close_nowrite = 0x20, 0x10
        # opens and closes alternate: inotify folds only events alike in a row
        self.assertGreaterEqual(libc.inotify_add_watch(ino, path.encode(), in_open | in_close_nowrite), 0)
        p = subprocess.Popen([BIN, "restore", "--pid", str(pid)], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        time.sleep(4)
        opens = 0
        try:
            data = os.read(ino, 65536)
        except BlockingIOError:
            data = b""
        for off in range(0, len(data), 16):
            _, mask, _, length = struct.unpack_from("iIII", data, off)
            self.assertEqual(length, 0)
            opens += bool(mask & in_open)
        self.assertIsNone(p.poll())
        # about one a second, not eight (the book and the orphans of its
        # target read at every look)
        self.assertGreaterEqual(opens, 2)
        self.assertLessEqual(opens, 7, opens)
        ended = time.monotonic()
        os.unlink(path)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        self.assertLess(time.monotonic() - ended, 1.0, err)
        self.assertDataOk([pid])

    def test_another_users_words_reach_the_terminal_made_safe(self):
        """A booking's text is its writer's, who may be another user: control
        bytes in it are not printed as they are."""
        pid, = self.checkpointed(400)
        self.held_booking(600, who="x\x1b[31m\ncudasnap: hint: run rm -rf /")
        p = subprocess.Popen([BIN, "restore", "--pid", str(pid)], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        p.terminate()
        _, err = p.communicate(timeout=30)
        self.assertIn("booked by uid 0", err)
        self.assertNotIn("\x1b", err)
        self.assertNotIn("\ncudasnap: hint: run rm", err)
        self.assertStates([pid], "checkpointed")

    def test_dry_run_counts_the_restores_in_flight(self):
        """--dry-run while another restore holds its booking: the room that
        restore takes is not counted as free, the plan says so and refuses
        as the restore would."""
        a, b = self.checkpointed(400, 400)
        self.fault(f"{a} restore delay=3000 1")
        p = subprocess.Popen([BIN, "restore", "--pid", str(a)], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not self.bookings():
            time.sleep(0.02)
        d = self.cs("restore", "--dry-run", "--json", "--pid", str(b))
        self.assertEqual(p.wait(timeout=60), 0)
        entry, = [x for x in d.obj["processes"] if x["pid"] == b]
        codes = {x["code"]: x for x in entry["reasons"]}
        self.assertIn("gpu-booked", codes, entry)
        self.assertIn(f"pid {a} (fakecuda-app)", codes["gpu-booked"]["text"])
        self.assertTrue(codes["gpu-memory"]["blocks"], entry)
        self.assertNotEqual(d.obj["real_exit_status"], 0, d)
        self.assertStates([a], "running")
        self.assertDataOk([a])

    def test_a_user_who_cannot_reach_the_nodes_book_is_refused(self):
        """The drop-in run by the process's owner (not root) where the node's
        book is root's alone: refused before the driver is asked, naming the
        book, never booked in a book of its own that root's restores would
        not count."""
        nobody, state = self.as_nobody()
        os.chmod(self.book, 0o700)
        pid, = self.start("--mem", "64", wrap=nobody)
        run = [*nobody, self.cc_path, "--toggle", "--pid", str(pid)]
        p = subprocess.run(run, capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run(run, capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(self.book, p.stderr)
        self.assertNotIn("out of memory", p.stderr)
        self.assertStates([pid], "checkpointed")
        self.assertFalse(os.path.exists(os.path.join(state, "gpu-book")))
        os.chmod(self.book, 0o1777)
        p = subprocess.run(run, capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertDataOk([pid])

    def test_a_mount_namespace_with_a_book_of_its_own_is_refused(self):
        """cudasnap in a mount namespace whose /run is its own (the node's
        book not mounted in): its book is not the node's, and its restores
        and the node's would each see room the other takes. Refused before
        the driver is asked, saying so; the node's book (mounted in, or
        named) lets it through."""
        if not shutil.which("unshare"):
            self.skipTest("no unshare")
        pid, = self.checkpointed(64)
        env = {k: v for k, v in self.env.items() if k != "CUDASNAP_GPU_BOOK"}
        wrap = ("unshare", "-m", "--propagation", "private", "sh", "-c",
                'mount -t tmpfs cudasnap-it-run /run && exec "$@"', "sh")
        p = subprocess.run([*wrap, BIN, "restore", "--pid", str(pid)], capture_output=True, text=True, env=env,
                           timeout=60)
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertIn("not the node's", p.stderr)
        self.assertIn("not asked of the driver", p.stderr)
        self.assertStates([pid], "checkpointed")
        p = subprocess.run([*wrap, BIN, "restore", "--pid", str(pid)], capture_output=True, text=True,
                           env=self.env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertDataOk([pid])


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class Parked(OneGpu):
    """A parked process's memory comes back by its unpark, after the
    driver's restore (which brings back only its context) and the unlock:
    it stays booked until then. Without that, a restore admitted in between
    ran out of memory when its target admitted it, after the unpark had
    taken the room: its process destroyed."""

    def parked_and_checkpointed(self):
        from test_park import App, status
        a = App(self, ["--alloc-mib", "100", "--allocs", "4", "--interval-ms", "600000"])
        b = self.start("--mem", "400")[0]
        r = self.cs("checkpoint", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertStates([a.pid, b], "checkpointed")
        self.assertEqual(status(a.pid)["parked"], "1")
        # the window: the unlock comes 1.5 s after the driver's restore,
        # then the unpark; b's target admits its restore 2.5 s after it is
        # asked
        self.fault(f"{a.pid} unlock delay=1500", f"{b} restore delay=2500")
        return a, b, status

    def restore_a_then_b(self, a, b, end=None):
        """Restores a, and b while a's unpark is to come (a's cudasnap
        ended by end first, when given; b's then only planned: a restore
        would wait for the orphan up to 120 s)."""
        p = subprocess.Popen([BIN, "restore", "--pid", str(a.pid)], env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(0.6)  # a's driver restore is over, its unlock pending
        if end is not None:
            os.killpg(p.pid, end)
            time.sleep(0.2)
        rb = self.cs("restore", "--pid", str(b), *(("--dry-run",) if end else ()), timeout=200)
        _, err = p.communicate(timeout=60)
        return p.returncode, err, rb

    def test_a_parked_process_keeps_its_room_until_its_unpark_is_done(self):
        a, b, status = self.parked_and_checkpointed()
        rc, err, rb = self.restore_a_then_b(a, b)
        self.assertEqual(rc, 0, err)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")
        self.assertNotEqual(rb.rc, 0, rb)
        self.assertNotIn("LOST", rb.err, rb)
        self.assertIn(f"restore of process {b} (fakecuda-app) not asked of the driver", rb.err)
        self.assertStates([b], "checkpointed")
        self.fault()
        a.p.kill()
        a.p.wait()
        r = self.cs("restore", "--pid", str(b))
        self.assertEqual(r.rc, 0, r)
        self.assertDataOk([b])
        self.assertEqual(self.bookings(), [])

    def test_an_unpark_whose_cudasnap_died_keeps_its_room_while_the_process_is_parked(self):
        """The first restore's cudasnap is killed before its unpark: the
        process stays parked, and its booking, an orphan, counts while its
        interposer says so. The next restore of it books anew (the orphan
        ends) and brings it back."""
        a, b, status = self.parked_and_checkpointed()
        rc, err, rb = self.restore_a_then_b(a, b, end=signal.SIGKILL)
        self.assertEqual(rc, -signal.SIGKILL, err)
        self.assertEqual(rb.rc, 1, rb)
        self.assertIn("restore would FAIL", rb.err)
        self.assertIn(f"pid {a.pid} (fakecuda-cuapp), unparking, booked by uid 0, whose cudasnap is gone", rb.err)
        self.assertStates([b], "checkpointed")
        self.assertEqual(status(a.pid)["parked"], "1")
        self.fault()
        r = self.cs("restore", "--pid", str(a.pid))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(status(a.pid)["parked"], "0")
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")
        self.assertEqual(self.bookings(), [])
        a.p.kill()
        a.p.wait()
        r = self.cs("restore", "--pid", str(b))
        self.assertEqual(r.rc, 0, r)
        self.assertDataOk([b])

    def test_an_unpark_without_room_leaves_the_process_parked(self):
        """A process left parked is unparked by restore only where its memory
        fits: another process took the room meanwhile, and the unpark is not
        started (its memory stays in host memory), with the reason."""
        a, b, status = self.parked_and_checkpointed()
        self.fault(f"{a.pid} unlock delay=1500")
        rc, err, rb = self.restore_a_then_b(a, b, end=signal.SIGKILL)
        # b was refused: a's orphan counts. Now a process takes the room.
        self.fault()
        self.start("--mem", "400")
        r = self.cs("restore", "--pid", str(a.pid))
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn(f"process {a.pid} (fakecuda-cuapp) stays parked: its unpark was not started", r.err)
        self.assertEqual(status(a.pid)["parked"], "1")
        self.assertNotIn("LOST", r.err, r)


class Forged(OneGpu):
    def test_an_interposer_that_drips_its_answer_holds_no_restore(self):
        """Any user may leave a booking in the node's book naming their own
        process, which the next restore asks whether it is parked, under
        the book's lock. One that answers a byte every half second held
        that lock, and every restore of the node, for good: each read had a
        bound, the answer none. Unanswered in its bound, it counts as
        parked until its booking's bound; the restores go on."""
        pid, = self.checkpointed(100)
        d = os.path.join(self.tmp, "dripping")
        os.mkdir(d)
        here = os.path.dirname(os.path.abspath(__file__))
        p = subprocess.Popen([sys.executable, os.path.join(here, "dripping_interposer.py"), d],
                             start_new_session=True)
        self.apps.append(p)
        for _ in range(300):
            if os.path.exists(os.path.join(d, "ready")):
                break
            time.sleep(0.02)
        with open(f"/proc/{p.pid}/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        now = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        pidns = os.stat("/proc/self/ns/pid").st_ino
        data = booking_file(3, [(GPU0, 50)], "forged unpark", beat=now, until=now + 600 * 10**9, pid=1,
                            target=p.pid, pidns=pidns, start=start)
        os.makedirs(self.book, exist_ok=True)
        with open(os.path.join(self.book, "b-0000000000000001-1-0000000e"), "wb") as f:
            f.write(data)
        r = self.cs("restore", "--pid", str(pid), timeout=60)
        self.assertEqual(r.rc, 0, r)
        self.assertLess(r.wall, 20, r)
        self.assertDataOk([pid])


class TwoGpus(OneGpu):
    """Each GPU judged on its own."""

    def setUp(self):
        super().setUp()
        self.env["FAKECUDA_GPUS"] = f"{GPU0},{GPU1}"

    def waiter(self, needs, short, who="cudasnap restore: pid 1 (waiter)", state=1):
        """A restore waiting in line (a booking held by the test, its ticket
        the earliest, its beat now), needing needs: [(uuid, MiB)]; short:
        the bits of the GPUs it found short at its last look. state 2: a
        restore in flight instead."""
        import fcntl
        beat = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        path = os.path.join(self.book, "b-0000000000000001-1-00000002")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.write(fd, booking_file(state, needs, who, beat=beat, short=short))
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.addCleanup(lambda: (os.path.exists(path) and os.unlink(path), os.close(fd)))

    def test_a_waiter_short_on_one_gpu_holds_back_no_restore_onto_another(self):
        """A two-GPU restore that waits for memory on GPU 0 (short there)
        would fit on GPU 1: it cannot be served before GPU 0 frees, so a
        restore onto GPU 1 alone goes ahead of it (it waited 120 s, then was
        refused)."""
        b = self.start("--mem", "400", env={"CUDA_VISIBLE_DEVICES": "1"})[0]
        self.assertEqual(self.cs("checkpoint", "--pid", str(b)).rc, 0)
        self.waiter([(GPU0, 900), (GPU1, 100)], short=1)
        r = self.cs("restore", "--pid", str(b), timeout=200)
        self.assertEqual(r.rc, 0, r)
        self.assertLess(r.wall, 10, r)
        self.assertDataOk([b])

    def test_without_nvml_a_restore_in_flight_on_one_gpu_holds_back_no_restore_onto_another(self):
        """Without NVML the driver's probe reads the free memory through a
        context of its own: only on the GPUs where no restore in flight is
        booked. One in flight on GPU 0 leaves a restore onto GPU 1 to go at
        once (it waited 120 s for every GPU, then was refused)."""
        b = self.start("--mem", "400", env={"CUDA_VISIBLE_DEVICES": "1"})[0]
        self.assertEqual(self.cs("checkpoint", "--pid", str(b)).rc, 0)
        self.env["CUDASNAP_LIBNVML"] = os.path.join(self.tmp, "no-libnvidia-ml.so.1")
        self.waiter([(GPU0, 500)], short=0, who="cudasnap restore: pid 1 (in flight)", state=2)
        d = self.cs("restore", "--pid", str(b), "--dry-run", "--json")
        self.assertEqual(d.rc, 0, d)
        r = self.cs("restore", "--pid", str(b), timeout=200)
        self.assertEqual(r.rc, 0, r)
        self.assertLess(r.wall, 10, r)
        self.assertDataOk([b])

    def test_without_nvml_the_gpu_of_a_restore_in_flight_is_not_probed(self):
        """The GPU a restore in flight is booked on: its free memory is not
        read (the probe's context could take what that restore needs), and
        a plan says so."""
        b = self.start("--mem", "400", env={"CUDA_VISIBLE_DEVICES": "1"})[0]
        self.assertEqual(self.cs("checkpoint", "--pid", str(b)).rc, 0)
        self.env["CUDASNAP_LIBNVML"] = os.path.join(self.tmp, "no-libnvidia-ml.so.1")
        self.waiter([(GPU1, 100)], short=0, who="cudasnap restore: pid 1 (in flight)", state=2)
        d = self.cs("restore", "--pid", str(b), "--dry-run", "--json")
        entry, = [p for p in d.obj["processes"] if p["pid"] == b]
        self.assertIn("gpu-memory-unknown", [x["code"] for x in entry["reasons"] if x["blocks"]], d)

    def test_a_waiter_that_could_be_served_keeps_its_place(self):
        """The same waiter, short nowhere (it waits behind restores in
        flight): it keeps its place on GPU 1, and the later restore waits
        behind it, until the waiter stops looking (5 s)."""
        b = self.start("--mem", "400", env={"CUDA_VISIBLE_DEVICES": "1"})[0]
        self.assertEqual(self.cs("checkpoint", "--pid", str(b)).rc, 0)
        self.waiter([(GPU0, 100), (GPU1, 100)], short=0)
        r = self.cs("restore", "--pid", str(b), timeout=200)
        self.assertEqual(r.rc, 0, r)
        self.assertIn("where a restore that came first (cudasnap restore: pid 1 (waiter)) goes before it", r.err)
        self.assertGreater(r.wall, 3, r)
        self.assertDataOk([b])


class Careless(OneGpu):
    """Restores that do not check, or whose check could not run: they must
    neither be let through blind nor go unseen by the others."""

    def test_a_restore_that_ignores_the_room_is_booked_for_the_others(self):
        a, b = self.checkpointed(400, 400)
        self.fault(f"{a} restore delay=1500")
        out = {}
        t = threading.Thread(target=lambda: out.update(a=self.cs("restore", "--pid", str(a),
                                                                 "--ignore-gpu-memory", timeout=120)))
        t.start()
        time.sleep(0.5)  # a is inside the driver's restore now
        out["b"] = self.cs("restore", "--pid", str(b), timeout=240)
        t.join()
        self.assertEqual(out["a"].rc, 0, out["a"])
        self.assertNotEqual(out["b"].rc, 0, out["b"])
        self.assertNotIn("LOST", out["b"].err, out["b"])
        self.assertIn("not asked of the driver", out["b"].err)
        self.assertStates([b], "checkpointed")
        os.kill(a, signal.SIGKILL)
        self.assertEqual(self.cs("restore", "--pid", str(b)).rc, 0)
        self.assertDataOk([b])

    def test_the_drop_in_told_to_ignore_the_room_still_books(self):
        """The drop-in told to ignore the room asks the driver where its
        check would refuse: its booking is there all the same, so that a
        restore beside it waits for it rather than counting room that the
        first takes."""
        a, = self.checkpointed(400)
        b = self.start("--mem", "100")[0]
        self.assertEqual(self.cs("checkpoint", "--pid", str(b)).rc, 0)
        self.start("--mem", "300")  # 424 MiB free: a does not fit, b does
        # the driver's own need as cudasnap counts it: a runs out of memory
        # (its state is lost: it was told to take the risk), b then fits
        self.env["FAKECUDA_RESTORE_EXTRA_MIB"] = "144"
        self.fault(f"{a} restore delay=1500")
        out = {}
        t = threading.Thread(target=lambda: out.update(a=self.cc(
            "--action", "restore", "--pid", a, env={"CUDASNAP_IGNORE_GPU_MEMORY": "1"}, timeout=120)))
        t.start()
        time.sleep(0.5)  # a is inside the driver's restore now
        out["b"] = self.cs("restore", "--pid", str(b), timeout=240)
        t.join()
        self.assertEqual(out["b"].rc, 0, out["b"])
        self.assertIn("waiting up to", out["b"].err)
        self.assertIn(f"pid {a} (fakecuda-app), booked by uid 0", out["b"].err)
        self.assertDataOk([b])
        self.assertEqual(self.bookings(), [])

    def test_the_drop_in_refuses_a_restore_whose_check_could_not_run(self):
        pid, = self.checkpointed(400)
        filler, = self.start("--mem", "400")
        r = self.cc("--action", "restore", "--pid", pid, env={"CUDASNAP_WAIT_MEMORY": "5s"})
        self.assertEqual(r.rc, 1, r)
        self.assertNotIn("out of memory", r.err)
        self.assertIn("CUDASNAP_WAIT_MEMORY", r.err)
        self.assertStates([pid], "checkpointed")
        os.kill(filler, signal.SIGKILL)
        time.sleep(0.3)
        self.assertEqual(self.cc("--action", "restore", "--pid", pid).rc, 0)
        self.assertEqual(self.cc("--action", "unlock", "--pid", pid).rc, 0)
        self.assertDataOk([pid])

    def test_the_drop_in_of_a_user_checks_the_room_of_the_users_process(self):
        """cuda-checkpoint as the owner of the process, not root (NVIDIA's
        binary allows it): the room is judged all the same, and a restore
        without it refused; with room, restored."""
        nobody, _ = self.as_nobody()
        pid, = self.start("--mem", "400", wrap=nobody)

        def cc(*args):
            p = subprocess.run([*nobody, self.cc_path, *map(str, args)], capture_output=True, text=True,
                               env=self.env, timeout=60)
            return p.returncode, p.stderr
        self.assertEqual(cc("--toggle", "--pid", pid), (0, ""))
        self.env["FAKECUDA_OTHER_USED_MIB"] = "700"  # the GPU filled meanwhile: 324 MiB free
        rc, err = cc("--action", "restore", "--pid", pid)
        self.assertEqual(rc, 1, err)
        self.assertIn("restore refused", err)
        self.assertNotIn("out of memory", err)
        self.assertStates([pid], "checkpointed")
        self.env["FAKECUDA_OTHER_USED_MIB"] = "0"
        self.assertEqual(cc("--toggle", "--pid", pid), (0, ""))
        self.assertDataOk([pid])

    def test_a_stopped_waiter_holds_no_one_back(self):
        """A waiter stopped in line (Ctrl-Z) and one that could not be served
        now anyway leave the room to a restore that fits."""
        a, b, c = self.checkpointed(400, 400, 64)
        self.fault(f"{a} restore delay=3000 1")
        pa = subprocess.Popen([BIN, "restore", "--pid", str(a)], env=self.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(1.0)
        pb = subprocess.Popen([BIN, "restore", "--pid", str(b), "--wait-memory", "3600"], env=self.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(lambda: (os.killpg(pb.pid, signal.SIGKILL), pb.wait()))
        time.sleep(1.0)
        os.killpg(pb.pid, signal.SIGSTOP)
        pa.wait()
        os.kill(a, signal.SIGKILL)  # a's memory is free again: 724 MiB free
        time.sleep(0.5)
        r = self.cs("restore", "--pid", str(c), timeout=400)
        self.assertEqual(r.rc, 0, r)
        self.assertLess(r.wall, 20, r)
        self.assertDataOk([c])


class RollbackWithoutNvml(OneGpu):
    def test_a_rollback_restore_is_booked_and_checked_by_the_driver_figures(self):
        """A checkpoint fails half-way without NVML while another restore
        takes the room the first process freed: its rollback restore is not
        asked of the driver, and the process is left checkpointed with its
        data, named."""
        y, = self.checkpointed(400)
        x, = self.start("--mem", "400")
        z, = self.start("--mem", "64")
        self.env["CUDASNAP_LIBNVML"] = os.path.join(self.tmp, "no-libnvidia-ml.so.1")
        self.fault(f"{z} checkpoint delay=9000 1", f"{z} checkpoint error=999 1")
        ck = subprocess.Popen([BIN, "checkpoint", "--pid", str(x), "--pid", str(z)], env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # x's checkpoint is done within about 2 s (ps calls it busy meanwhile: the checkpoint holds it)
        time.sleep(4.5)
        r = self.cs("restore", "--pid", str(y))
        self.assertEqual(r.rc, 0, r)
        _, err = ck.communicate(timeout=120)
        self.assertNotIn("LOST", err)
        self.assertIn("the rollback did not ask the driver to restore it", err)
        self.assertStates([x], "checkpointed")
        os.kill(y, signal.SIGKILL)
        self.assertEqual(self.cs("restore", "--pid", str(x)).rc, 0)
        self.assertDataOk([x, z])


class WithoutNvml(Case):
    """A container given only the 'compute' driver capability: libcuda, no
    NVML. The free memory comes from the driver itself (a probe process of
    cudasnap's own binary); where that fails too, unknown is no room."""

    def setUp(self):
        super().setUp()
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        self.env["FAKECUDA_CONTEXT_MIB"] = "64"

    def checkpointed(self, mib):
        pid, = self.start("--mem", str(mib))
        self.assertEqual(self.cs("checkpoint").rc, 0)
        self.assertStates([pid], "checkpointed")
        return pid

    def no_nvml(self):
        self.env["CUDASNAP_LIBNVML"] = os.path.join(self.tmp, "no-libnvidia-ml.so.1")

    def filler(self, mib):
        pid, = self.start("--mem", str(mib))
        return pid

    def test_refused_with_the_driver_figures(self):
        pid = self.checkpointed(400)
        filler = self.filler(700)
        self.no_nvml()
        d = self.cs("restore", "--dry-run", "--json")
        self.assertEqual(d.obj["real_exit_status"], 2, d)
        entry, = [p for p in d.obj["processes"] if p["pid"] == pid]
        self.assertEqual([x["code"] for x in entry["reasons"] if x["blocks"]], ["gpu-memory"], entry)
        for way in (("restore",), ("hook",)):
            r = self.cs(*way, env={"GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE": "restore"})
            self.assertEqual(r.rc, 2, r)
            self.assertStates([pid], "checkpointed")
        r = self.cc("--action", "restore", "--pid", pid)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("restore refused", r.err)
        self.assertStates([pid], "checkpointed")
        os.kill(filler, signal.SIGKILL)
        r = self.cs("restore")
        self.assertEqual(r.rc, 0, r)
        self.assertDataOk([pid])

    def test_fits_by_the_driver_figures(self):
        pid = self.checkpointed(400)
        self.no_nvml()
        d = self.cs("restore", "--dry-run", "--json")
        self.assertEqual((d.rc, d.obj["go"]), (0, True), d)
        entry, = [p for p in d.obj["processes"] if p["pid"] == pid]
        g, = entry["gpu_memory"]["gpus"]
        # the probe's own context (FAKECUDA_CONTEXT_MIB) is counted as used
        self.assertLessEqual(g["free_bytes"], (1024 - 64) << 20)
        r = self.cs("restore")
        self.assertEqual(r.rc, 0, r)
        self.assertDataOk([pid])

    def test_unknown_is_no_room(self):
        """Neither NVML nor the driver answers: refused, naming what is
        missing and the option that accepts the risk."""
        pid = self.checkpointed(64)
        self.no_nvml()
        # The probe runs with cudasnap's environment: a driver with no GPU
        # for it (the target keeps its own).
        probe_env = {"FAKECUDA_GPUS": ""}
        d = self.cs("restore", "--dry-run", "--json", env=probe_env)
        self.assertEqual(d.obj["real_exit_status"], 2, d)
        entry, = [p for p in d.obj["processes"] if p["pid"] == pid]
        reason, = [x for x in entry["reasons"] if x["blocks"]]
        self.assertEqual(reason["code"], "gpu-memory-unknown")
        self.assertIn("neither NVML nor the driver", reason["text"])
        self.assertIn("--ignore-gpu-memory", reason["fix"])
        r = self.cs("restore", env=probe_env)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("--ignore-gpu-memory", r.err)
        self.assertStates([pid], "checkpointed")
        r = self.cs("restore", "--ignore-gpu-memory")
        self.assertEqual(r.rc, 0, r)
        self.assertDataOk([pid])


class Mig(Case):
    def test_a_gpu_in_mig_mode_is_not_judged_by_its_whole_memory(self):
        """Under MIG a process restores into its instance, whose free memory
        the whole GPU's does not tell: unknown, so refused, naming MIG and
        the option that accepts the risk."""
        pid, = self.start("--mem", "64")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        self.env["FAKECUDA_MIG"] = "1"
        r = self.cs("restore", "--json")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("is in MIG mode", r.err)
        self.assertEqual([x["code"] for x in r.obj["refused"]], ["gpu-memory-unknown"], r)
        self.assertIn("--ignore-gpu-memory", r.obj["error"]["hint"])
        self.assertStates([pid], "checkpointed")
        r = self.cs("restore", "--ignore-gpu-memory")
        self.assertEqual(r.rc, 0, r)
        self.assertDataOk([pid])


    def test_without_nvml_the_driver_tells_mig_apart(self):
        """Without NVML the driver's probe sees the MIG instance (its UUID
        and name differ from its GPU's): refused the same way, naming the
        GPU by its own UUID, not taken for a GPU that is not here."""
        pid, = self.start("--mem", "64")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        self.env["CUDASNAP_LIBNVML"] = os.path.join(self.tmp, "no-libnvidia-ml.so.1")
        self.env["FAKECUDA_MIG"] = "1"
        r = self.cs("restore", "--json")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("is in MIG mode", r.err)
        self.assertEqual([x["code"] for x in r.obj["refused"]], ["gpu-memory-unknown"], r)
        self.assertStates([pid], "checkpointed")
        r = self.cs("restore", "--ignore-gpu-memory")
        self.assertEqual(r.rc, 0, r)
        self.assertDataOk([pid])


class RecordWithoutGpus(Case):
    def test_a_record_of_unknown_size_and_no_gpu_used_is_unknown_not_none(self):
        """"bytes": null (its size could not be read) and "used_gpus": []:
        where its memory is and how much is unknown, so it needs room on
        every GPU it saw, judged by its resident memory."""
        import json
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        pid, = self.start("--mem", "400")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        with open(man) as f:
            m = json.load(f)
        e, = m["processes"]
        e["bytes"], e["used_gpus"] = None, []
        with open(man, "w") as f:
            json.dump(m, f)
        filler, = self.start("--mem", "700")
        d = self.cs("restore", "--dry-run", "--json")
        self.assertEqual(d.obj["real_exit_status"], 2, d)
        r = self.cs("restore")
        self.assertEqual(r.rc, 2, r)
        self.assertStates([pid], "checkpointed")
        os.kill(filler, signal.SIGKILL)
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertDataOk([pid])

    def test_no_minor_numbers_make_the_gpus_used_unknown(self):
        """NVML gives no minor number: which GPU's device file the process
        holds cannot be told, so its record says the GPUs it used are not
        known (no list), never an empty one."""
        import json
        self.env["FAKECUDA_NVML_NO_MINOR"] = "1"
        pid, = self.start("--mem", "64")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        with open(os.path.join(self.state, "manifest.json")) as f:
            e, = json.load(f)["processes"]
        self.assertGreater(e["bytes"], 64 << 20)
        self.assertIsNone(e.get("used_gpus"), e)
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertDataOk([pid])

    def test_an_empty_list_of_gpus_used_with_bytes_moved_is_unknown_not_none(self):
        """A record that says no GPU was used but that memory moved (NVML
        gave no minor numbers): the restore needs room on every GPU the
        process saw, not none."""
        import json
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        pid, = self.start("--mem", "400")
        self.assertEqual(self.cs("checkpoint").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        with open(man) as f:
            m = json.load(f)
        e, = m["processes"]
        self.assertGreater(e["bytes"], 400 << 20)
        e["used_gpus"] = []
        with open(man, "w") as f:
            json.dump(m, f)
        filler, = self.start("--mem", "700")
        d = self.cs("restore", "--dry-run", "--json")
        self.assertEqual(d.obj["real_exit_status"], 2, d)
        r = self.cs("restore")
        self.assertEqual(r.rc, 2, r)
        self.assertStates([pid], "checkpointed")
        os.kill(filler, signal.SIGKILL)
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertDataOk([pid])


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
