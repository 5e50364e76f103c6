"""criu dump and criu restore (with cudasnap_plugin.so) of a program that runs
the parking interposer: its control socket is an ordinary listening unix
socket that CRIU carries, and nothing cudasnap does during the dump may leave
a connection waiting in it (CRIU refuses to dump a listening socket holding
one whose peer has gone). After the restore the interposer answers again,
and parks and unparks."""
import json
import os
import signal
import subprocess
import time
import unittest

import memcg
from criu_case import CRIU, CriuCase
from harness import BIN, Case, trusted_tmpdir
from test_park import socket_path

CUAPP = os.environ.get("FAKE_CUAPP", "")
PARK_LIB = os.environ.get("PARK_LIB", "")
SILENT_STATUS_LIB = os.environ.get("SILENT_STATUS_LIB", "")
IO_FAULT = os.environ.get("IO_FAULT", "")
HOST_PARKS = {"CUDASNAP_PARK_FILES": "0"}  # parks into host memory, as before files of the images


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class ParkUnderCriu(CriuCase):
    def start(self, wrap=(), env_more=None):
        # output to a file: CRIU restores files, not a pipe to this test
        self.out = os.path.join(self.tmp, "app.out")
        env = dict(self.env, CUDASNAP_PARK_LIB=PARK_LIB, CUDASNAP_PARK_DIR=self.tmp, **(env_more or {}))
        asan = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        with open(self.out, "ab") as out:
            p = subprocess.Popen([*wrap, BIN, "run", "--", CUAPP, "--alloc-mib", "8", "--allocs", "2", "--interval-ms", "50"],
                                 env=env, start_new_session=True, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        self.apps.append(p)
        self.root = p.pid
        self.tree_pids.append(p.pid)
        self.assertTrue(self.wait_line("ready"), self.text())
        return p.pid

    def text(self):
        with open(self.out, errors="replace") as f:
            return f.read()

    def wait_line(self, prefix, after=0, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [ln for ln in self.text().splitlines()[after:] if ln.startswith(prefix)]
            if lines:
                return lines[-1]
            time.sleep(0.05)
        return None

    def verify(self, pid):
        n = len(self.text().splitlines())
        os.kill(pid, signal.SIGUSR1)
        return self.wait_line("verify", after=n)

    def lines(self, run, word):
        return [ln for ln in run.cudasnap_lines() if word in ln]

    def parked(self, pid):
        return f"parked: {pid} (" in self.cs("ps").out

    def restored_once_gone(self, pid):
        """The images of a --leave-running dump restore with the data, once
        the original is gone."""
        os.kill(pid, signal.SIGKILL)
        self.assertGone([pid])
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    def wait_unparked(self, pid, timeout=20):
        """Until ps no longer shows pid parked (it unparks once it runs)."""
        deadline = time.monotonic() + timeout
        while self.parked(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertFalse(self.parked(pid))

    def test_dump_and_restore_then_park(self):
        pid = self.start()
        r = self.cs("ps")
        self.assertIn(f"parking: {pid} (", r.out)
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        # parked before the lock: the driver checkpointed the context alone
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) parked 0.02 GiB"), r)
        self.assertGone([pid])
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        # unparked once CRIU let it run, in the plugin's exit
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) unparked 0.02 GiB"), r)
        self.assertFalse(self.parked(pid))
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")
        # the room its restore left booked for that unpark ended with it
        self.assertEqual(self.bookings(), [])
        # the interposer answers again: a parked cycle, data verified
        r = self.cs("checkpoint", "--pid", str(pid), "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("park", r.obj["processes"][0]["seconds"])
        r = self.cs("restore", "--pid", str(pid))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    def gpumem(self):
        return sorted(n for n in os.listdir(self.images) if n.startswith("cudasnap-gpumem."))

    def test_parked_memory_travels_in_files_of_the_images(self):
        """The park writes the memory into files of the images directory:
        CRIU's pages hold none of it, the record names the files, and the
        restore unparks from them with the data."""
        pid = self.start()
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) parked 0.02 GiB of device memory in 1 files "
                                   "of the images"), r)
        files = self.gpumem()
        self.assertEqual(len(files), 1, files)
        self.assertEqual(os.path.getsize(os.path.join(self.images, files[0])), 16 << 20)
        self.assertGone([pid])
        pages = sum(os.path.getsize(os.path.join(self.images, n)) for n in os.listdir(self.images)
                    if n.startswith("pages-"))
        self.assertLess(pages, 12 << 20, "CRIU's pages carry the parked memory")
        with open(os.path.join(self.images, "cudasnap-plugin.json")) as f:
            pf = json.load(f)["processes"][0]["park_files"]
        self.assertEqual((pf["dir"], pf["name"] + ".0", pf["count"]), (None, files[0], 1))
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) unparked 0.02 GiB"), r)
        self.assertFalse(self.parked(pid))
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")
        self.assertEqual(self.gpumem(), files)  # the images keep what they hold

    def test_leave_running_unparks_from_the_files(self):
        pid = self.start()
        r = self.dump("--shell-job", "--leave-running")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(len(self.gpumem()), 1)
        self.wait_unparked(pid)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")
        self.assertEqual(len(self.gpumem()), 1)

    def test_a_second_dump_into_the_same_images_parks_again(self):
        """Two dumps with --leave-running into one images directory: the
        first's files, kept with its images, are replaced by the second's
        park, not left to turn it away (the driver would then carry the
        memory, and the images an old copy of it)."""
        pid = self.start()
        for n in (1, 2):
            with self.subTest(dump=n):
                r = self.dump("--shell-job", "--leave-running")
                self.assertEqual(r.rc, 0, r)
                self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) parked 0.02 GiB of device memory in "
                                           "1 files of the images"), r)
                self.assertEqual(len(self.gpumem()), 1)
                self.wait_unparked(pid)
                self.assertEqual(self.verify(pid), "verify ok bytes=16777216")
        self.restored_once_gone(pid)

    def end_foreground(self, p, pid):
        """Ends a foreground criu restore p: with its tree (pid)."""
        if os.path.exists(f"/proc/{pid}"):
            os.kill(pid, signal.SIGKILL)
        try:
            p.wait(timeout=30)  # CRIU ends with its tree
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def test_a_restore_in_the_foreground_unparks_as_the_tree_runs(self):
        """criu restore without -d waits for the tree to end before the
        plugin's exit hook, where a restore otherwise unparks: there the
        unpark is left in each process's control socket while CRIU holds
        it, with its files of the images, and answered as CRIU lets it run
        (a park into files, then one into host memory)."""
        for env, args in ((None, []), (HOST_PARKS, []), (None, ["-d", "--no-restore-detached"])):
            with self.subTest(env=env, args=args):
                if os.path.exists(os.path.join(self.tmp, "app.out")):
                    os.unlink(os.path.join(self.tmp, "app.out"))
                pid = self.start()
                r = self.dump("--shell-job", env=env)
                self.assertEqual(r.rc, 0, r)
                self.assertGone([pid])
                log = os.path.join(self.images, "restore-fg.log")
                p = subprocess.Popen([CRIU, "restore", "-D", self.images, "-L", self.plugins, *args, "-v4", "-o", log],
                                     env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
                said = f"process {pid} (fakecuda-cuapp) unparks once CRIU lets it run"

                def logged():
                    if not os.path.exists(log):
                        return ""
                    with open(log, errors="replace") as f:
                        return f.read()
                try:
                    deadline = time.monotonic() + 30
                    while p.poll() is None and time.monotonic() < deadline and said not in logged():
                        time.sleep(0.05)
                    self.assertIsNone(p.poll(), "criu restore ended")
                    # the room of its unpark stays booked, left to the
                    # process while CRIU holds it, until the unpark is over
                    # (the file stays until a restore's look judges it)
                    self.assertTrue(self.bookings())
                    for name in self.bookings():
                        with open(os.path.join(self.book, name), "rb") as f:
                            self.assertIn(f"pid {pid} (fakecuda-cuapp), unparking".encode(), f.read())
                    self.wait_unparked(pid)
                    self.assertEqual(self.verify(pid), "verify ok bytes=16777216")
                    # the next restore's look sees the unpark over
                    other = Case.start(self, "--mem", "16")[0]
                    self.assertEqual(self.cs("checkpoint", "--pid", str(other)).rc, 0)
                    self.assertEqual(self.cs("restore", "--pid", str(other)).rc, 0)
                    self.assertEqual(self.bookings(), [])
                    self.assertIsNone(p.poll(), "criu restore in the foreground ended with its tree running")
                finally:
                    self.end_foreground(p, pid)
                self.assertIn(said, logged())
                for name in os.listdir(self.images):
                    os.unlink(os.path.join(self.images, name))

    def test_a_restore_detached_in_other_words_still_fails_on_a_failed_unpark(self):
        """Whether CRIU restores detached comes from its options, whatever
        set them: --daemon, an abbreviation, a configuration file. Each such
        restore still runs the unparks at the exit hook, where one that
        fails fails the restore."""
        conf = os.path.join(self.tmp, "criu.conf")
        with open(conf, "w") as f:
            f.write("restore-detached\n")
        for args, env in ((["--daemon"], None), (["--restore-detach"], None), ([], {"CRIU_CONFIG_FILE": conf})):
            with self.subTest(args=args, env=env):
                for name in os.listdir(self.images):
                    os.unlink(os.path.join(self.images, name))
                pid = self.start()
                r = self.dump("--shell-job")
                self.assertEqual(r.rc, 0, r)
                self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) parked"), r)  # else nothing unparks
                self.assertGone([pid])
                self.fault("* mem_create error=2")  # out of GPU memory
                r = self.criu("restore", "-D", self.images, "-L", self.plugins, *args, log="restore.log", env=env)
                os.unlink(self.faults)
                self.assertNotEqual(r.rc, 0, r)
                self.assertFalse(self.lines(r, "unparks once CRIU lets it run"), r)
                self.assertTrue(self.lines(r, "CRIU ends now with exit status 1"), r)
                self.assertGone([pid])

    def test_a_failed_unpark_kills_the_whole_tree_so_that_it_restores_again(self):
        """A tree whose root is not a PID namespace's init: the processes
        that are not CUDA ones are killed too, as CRIU's own failure kills
        them, so that the images restore again (a survivor would hold a pid
        the next restore needs)."""
        pid = self.start(wrap=["/bin/sh", "-c", 'sleep 1000 & exec "$@"', "sh"])
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(x) for x in f.read().split()]
        self.assertEqual(len(kids), 1, kids)
        self.tree_pids += kids
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertGone([pid, *kids])
        self.fault("* mem_create error=2")
        r = self.restore()
        os.unlink(self.faults)
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, "2 restored processes are killed"), r)
        self.assertGone([pid, *kids])
        r = self.restore(log="restore2.log")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    @unittest.skipUnless(SILENT_STATUS_LIB, "built with the interposer")
    def test_a_restored_interposer_that_does_not_answer_fails_the_restore(self):
        """The exit hook asks each restored process whether it came back
        parked: one whose interposer does not answer (its answers held
        back) is not taken for one with nothing to unpark. The restore
        fails, named, and restores again once it answers."""
        silent = os.path.join(self.tmp, "silent")
        pid = self.start(env_more={"LD_PRELOAD": SILENT_STATUS_LIB, "SILENT_STATUS": silent})
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertGone([pid])
        open(silent, "w").close()
        r = self.restore()
        os.unlink(silent)
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) runs the parking interposer, whose control "
                                   "socket did not answer within 10 s"), r)
        self.assertGone([pid])
        r = self.restore(log="restore2.log")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    def test_a_changed_file_fails_the_restore_and_kills_the_tree(self):
        pid = self.start()
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertGone([pid])
        path = os.path.join(self.images, self.gpumem()[0])
        with open(path, "r+b") as f:
            f.seek(4 << 20)
            b = f.read(1)
            f.seek(4 << 20)
            f.write(bytes([b[0] ^ 1]))
        # The unpark runs once CRIU has let the tree run (its exit hook,
        # before CRIU answers): the tree is killed, as after any GPU restore
        # that failed, CRIU ends with status 1 rather than answer that the
        # restore succeeded, and the images stay as they are.
        r = self.restore()
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, "does not hold what the park wrote"), r)
        self.assertTrue(self.lines(r, "restored process is killed"), r)
        self.assertTrue(self.lines(r, "CRIU ends now with exit status 1"), r)
        self.assertGone([pid])
        self.assertTrue(os.path.exists(path))

    def test_a_fifo_or_a_hard_link_in_place_of_a_file_refuses_the_restore_at_once(self):
        # the images travel: what stands where a park's file belongs is
        # looked at without waiting on it, and only a plain file of one name
        # is handed to a process
        pid = self.start()
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertGone([pid])
        path = os.path.join(self.images, self.gpumem()[0])
        os.rename(path, path + ".kept")
        os.mkfifo(path, 0o600)
        r = self.restore()
        self.assertNotEqual(r.rc, 0, r)
        self.assertLess(r.wall, 20, r)
        self.assertTrue(self.lines(r, "is not a regular file"), r)
        os.unlink(path)
        os.link(path + ".kept", path)
        r = self.restore()
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, "a hard link"), r)
        self.assertGone([pid])

    def test_a_missing_or_cut_file_refuses_the_restore_before_any_process(self):
        pid = self.start()
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertGone([pid])
        path = os.path.join(self.images, self.gpumem()[0])
        os.truncate(path, 8 << 20)
        r = self.restore()
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, "of another size"), r)
        self.assertGone([pid])
        os.unlink(path)
        r = self.restore()
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, "No such file or directory"), r)
        self.assertGone([pid])

    def test_a_park_that_does_not_fit_is_refused_before_it(self):
        """A park copies device memory into the process's own memory at
        PAUSE_DEVICES, before the checkpoint's check of host memory: it is
        judged first, in the process's real memory cgroup, and a process
        whose copy would not fit is neither parked nor locked, nor
        OOM-killed. With room, the same process parks. (Parks into host
        memory: CUDASNAP_PARK_FILES=0; into files of the images, the copy
        takes no host memory.)"""
        cg = memcg.for_test(self).make("park")
        pid = self.start(wrap=cg.enter_argv())
        cg.set_room(8 << 20)
        ooms = cg.oom_kills()
        r = self.dump("--shell-job", env=HOST_PARKS)
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) refused: it needs"), r)
        self.assertTrue(self.lines(r, f"before process {pid} (fakecuda-cuapp) parked its device memory"), r)
        self.assertFalse(self.lines(r, f"process {pid} (fakecuda-cuapp) parked 0.02 GiB"), r)
        self.assertEqual(cg.oom_kills(), ooms, "the process was OOM-killed")
        self.assertStates([pid], "running")
        self.assertFalse(self.parked(pid))
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")
        cg.set_room(512 << 20)
        r = self.dump("--shell-job", "--leave-running", env=HOST_PARKS)
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) parked 0.02 GiB"), r)
        self.wait_unparked(pid)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    def test_a_process_whose_socket_is_gone_is_refused_not_left_to_the_driver(self):
        pid = self.start()
        os.unlink(socket_path(pid))  # a cleaner of the socket's directory
        r = self.dump("--shell-job")
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) refused before anything changed: it runs "
                                   "the parking interposer, whose control socket does not answer"), r)
        self.assertStates([pid], "running")
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    @unittest.skipUnless(IO_FAULT, "no I/O fault library")
    def test_a_park_longer_than_criu_seize_timeout_dumps(self):
        """CRIU calls PAUSE_DEVICES under the alarm that bounds its seize and
        aborts when it has rung six times (--timeout 1: after 6 s). A park
        slowed to 8 s (as a large one to a disk is) still dumps: the alarm
        waits while the plugin parks."""
        slow = os.path.join(self.tmp, "io-fault")
        with open(slow, "w") as f:
            f.write("slow 8000 0\n")
        pid = self.start(env_more={"LD_PRELOAD": IO_FAULT, "CS_IO_FAULT_FILE": slow})
        r = self.dump("--shell-job", "--timeout", "1")
        self.assertEqual(r.rc, 0, r)
        self.assertGreater(r.wall, 8, r)
        self.assertNotIn("Timeout reached", r.log)
        os.unlink(slow)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) parked 0.02 GiB"), r)
        self.assertGone([pid])
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    def test_lock_fails_after_park(self):
        """The lock fails after the park: the dump fails, and the process
        unparks while it still runs, its data intact."""
        pid = self.start()
        self.fault(f"{pid} lock error=999 1")
        r = self.dump("--shell-job")
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) unparked again after its failed lock"), r)
        os.unlink(self.faults)
        self.assertStates([pid], "running")
        self.assertFalse(self.parked(pid))
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    def test_leave_running_unparks_once_resumed(self):
        """criu dump --leave-running: the way back restores and unlocks the
        process while CRIU holds it, and it unparks once CRIU lets it go."""
        pid = self.start()
        r = self.dump("--shell-job", "--leave-running")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {pid} (fakecuda-cuapp) unparks its 0.02 GiB once CRIU lets it run"), r)
        self.wait_unparked(pid)
        self.assertStates([pid], "running")
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")
        self.restored_once_gone(pid)  # the images restore too

    def test_failed_unpark_after_restore(self):
        """The unpark after the restore fails (no GPU memory to map back): the
        GPU restore failed, and the restored process is killed as for any
        failed GPU restore; the images are intact and restore once the cause
        is gone."""
        pid = self.start()
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertGone([pid])
        self.fault("* mem_create error=2")  # out of GPU memory
        r = self.restore()
        self.assertNotEqual(r.rc, 0, r)  # not answered as a success
        self.assertTrue(self.lines(r, "unpark of process"), r)
        self.assertTrue(self.lines(r, "the GPU restore failed"), r)
        self.assertGone([pid])
        os.unlink(self.faults)
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")

    def test_a_process_kept_parked_in_files_of_the_images_comes_back_with_park_from(self):
        """A failed unpark with CUDASNAP_KEEP_FAILED_RESTORE=1 keeps the
        restored process running, parked in files of the images, which no
        record of the command line names: the plugin names the command that
        brings it back (--park-from its files in the images), a restore
        without them, or with other files, says so before anything changes,
        and with them unparks from them."""
        pid = self.start()
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertGone([pid])
        self.fault("* mem_create error=2")  # out of GPU memory at the unpark
        r = self.restore(env=dict(self.env, CUDASNAP_KEEP_FAILED_RESTORE="1"))
        files = os.path.join(self.images, self.gpumem()[0].rsplit(".", 1)[0])
        self.assertTrue(self.lines(r, f"'cudasnap restore --pid {pid} --park-from {files}' brings it back"), r)
        h = json.loads(self.cs("history", "--json", "-n", "1").out)[0]["processes"][0]
        self.assertEqual((h["outcome"], h["recovery"]),
                         ("left-behind", f"cudasnap restore --pid {pid} --park-from {files}"), h)
        left = f"LEFT BEHIND: {pid} (fakecuda-cuapp) is running, parked"
        self.assertIn(left, self.cs("ps").out)
        self.assertIn("--park-from", self.cs("ps").out)
        os.unlink(self.faults)
        r = self.cs("restore", "--pid", str(pid))
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn("--park-from", r.err)
        # another park's files, or a directory alone, are refused before anything changes
        for wrong in (self.images, os.path.join(self.images, "cudasnap-gpumem.1.2")):
            r = self.cs("restore", "--pid", str(pid), "--park-from", wrong)
            self.assertNotEqual(r.rc, 0, r)
        self.assertIn(left, self.cs("ps").out)
        r = self.cs("restore", "--pid", str(pid), "--park-from", files)
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn(f"{pid} (fakecuda-cuapp) is running, parked", self.cs("ps").out)
        self.assertEqual(self.verify(pid), "verify ok bytes=16777216")


    def test_a_foreground_restore_whose_unpark_fails_comes_back_with_park_from(self):
        """criu restore in the foreground leaves the unpark to the process
        as CRIU lets it run; one that fails there (out of GPU memory) leaves
        it running, parked in files of the images: the log names the command
        that brings it back, ps names it, and that command does."""
        pid = self.start()
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertGone([pid])
        files = os.path.join(self.images, self.gpumem()[0].rsplit(".", 1)[0])
        self.fault("* mem_create error=2")  # out of GPU memory at the unpark
        log = os.path.join(self.tmp, "restore-fg.log")
        p = subprocess.Popen([CRIU, "restore", "-D", self.images, "-L", self.plugins, "-v4", "-o", log],
                             env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        left = f"LEFT BEHIND: {pid} (fakecuda-cuapp) is running, parked"
        try:
            deadline = time.monotonic() + 30
            while p.poll() is None and time.monotonic() < deadline and left not in self.cs("ps").out:
                time.sleep(0.1)
            self.assertIsNone(p.poll(), "criu restore ended")
            ps = self.cs("ps").out
            self.assertIn(left, ps)
            self.assertIn("--park-from", ps)
            with open(log, errors="replace") as f:
                self.assertIn(f"'cudasnap restore --pid {pid} --park-from {files}' brings it back", f.read())
            os.unlink(self.faults)
            r = self.cs("restore", "--pid", str(pid), "--park-from", files)
            self.assertEqual(r.rc, 0, r)
            self.assertNotIn(left, self.cs("ps").out)
            self.assertEqual(self.verify(pid), "verify ok bytes=16777216")
        finally:
            self.end_foreground(p, pid)


@unittest.skipUnless(PARK_LIB and CUAPP, "the interposer is built for x86-64 only")
class PairUnderCriu(CriuCase):
    """An exporter and an importer of CUDA IPC (through the interposer, with
    an interprocess event as PyTorch shares one) in one tree: CRIU meets
    the exporter first and stops it, so the importer parks before it."""

    def start(self, importer_in_tree=True, wrap=(), vmm=False):
        handle = os.path.join(self.tmp, "handle")
        self.outs = {}
        env = dict(self.env, CUDASNAP_PARK_LIB=PARK_LIB, CUDASNAP_PARK_DIR=self.tmp)
        asan = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        exp = f"{CUAPP} --alloc-mib 8 --seed 7 --interval-ms 50 --ipc-export {handle} --ipc-event"
        imp = f"{CUAPP} --alloc-mib 4 --interval-ms 50 --ipc-import {handle} --peer-seed 7 --ipc-event"
        if vmm:  # VMM memory the program passes as a file descriptor itself
            exp = f"{CUAPP} --vmm-mib 4 --seed 7 --interval-ms 50 --vmm-share {handle}"
            imp = f"{CUAPP} --vmm-mib 4 --interval-ms 50 --vmm-import {handle} --peer-seed 7"
        e_out, i_out = os.path.join(self.tmp, "e.out"), os.path.join(self.tmp, "i.out")
        script = f"{exp} > {e_out} 2>&1 & " + (f"{imp} > {i_out} 2>&1 & " if importer_in_tree else "") + "wait"
        p = subprocess.Popen([*wrap, BIN, "run", "--", "/bin/sh", "-c", script], env=env, start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.apps.append(p)
        self.root = p.pid
        self.tree_pids.append(p.pid)
        if not importer_in_tree:
            with open(i_out, "ab") as out:
                q = subprocess.Popen([BIN, "run", "--", "/bin/sh", "-c", "exec " + imp], env=env,
                                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
            self.apps.append(q)
        for name, path in (("e", e_out), ("i", i_out)):
            line = self.wait_line(path, "ready")
            self.assertTrue(line, f"{name}: {self.text(path)}")
            pid = int(line.split()[1].split("=")[1])
            self.outs[pid] = path
            self.tree_pids.append(pid)
            setattr(self, name, pid)

    def text(self, path):
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def wait_line(self, path, prefix, after=0, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [ln for ln in self.text(path).splitlines()[after:] if ln.startswith(prefix)]
            if lines:
                return lines[-1]
            time.sleep(0.05)
        return None

    def verify(self, pid):
        path = self.outs[pid]
        n = len(self.text(path).splitlines())
        os.kill(pid, signal.SIGUSR1)
        return self.wait_line(path, "verify", after=n)

    def assertBothOk(self):
        self.assertEqual(self.verify(self.e), "verify ok bytes=8388608")
        self.assertEqual(self.verify(self.i), "verify ok bytes=12582912")

    def lines(self, run, word):
        return [ln for ln in run.cudasnap_lines() if word in ln]

    def test_importer_parks_before_its_exporter(self):
        self.start()
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {self.i} (fakecuda-cuapp) parked 0.00 GiB of device memory"), r)
        self.assertTrue(self.lines(r, f"before process {self.e} (fakecuda-cuapp), whose memory it maps"), r)
        self.assertTrue(self.lines(r, f"process {self.e} (fakecuda-cuapp) parked 0.01 GiB"), r)
        self.assertGone([self.e, self.i])
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        unparks = [ln for ln in r.cudasnap_lines() if " unparked " in ln]
        self.assertEqual(len(unparks), 2, r)
        self.assertIn(f"process {self.e} ", unparks[0])  # the exporter first
        self.assertBothOk()

    def test_a_vmm_import_is_released_before_its_exporter_and_made_again(self):
        self.start(vmm=True)
        r = self.dump("--shell-job")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {self.i} (fakecuda-cuapp) parked 0.00 GiB of device memory"), r)
        self.assertTrue(self.lines(r, f"before process {self.e} (fakecuda-cuapp), whose memory it maps"), r)
        self.assertGone([self.e, self.i])
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        unparks = [ln for ln in r.cudasnap_lines() if " unparked " in ln]
        self.assertEqual(len(unparks), 1, r)
        self.assertIn(f"process {self.i} ", unparks[0])
        for pid in (self.e, self.i):
            self.assertTrue(self.verify(pid).startswith("verify ok "), self.text(self.outs[pid]))

    def test_an_importer_outside_the_tree_fails_the_dump(self):
        self.start(importer_in_tree=False)
        r = self.dump("--shell-job")
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, "could not park before it"), r)
        self.assertStates([self.e, self.i], "running")
        self.assertBothOk()

    def test_a_pair_whose_parks_do_not_fit_together_is_refused(self):
        """The importer parks at its exporter's meeting, so both parks are
        judged there, together: in a cgroup with room for the exporter's
        alone, neither parks, the dump fails, and both run on."""
        cg = memcg.for_test(self).make("pair")
        self.start(wrap=cg.enter_argv())
        cg.set_room(40 << 20)
        ooms = cg.oom_kills()
        r = self.dump("--shell-job", env=HOST_PARKS)
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, "refused: it needs"), r)
        self.assertTrue(self.lines(r, f"before process {self.e} (fakecuda-cuapp) parked its device memory"), r)
        self.assertFalse(self.lines(r, " parked 0.0"), r)
        self.assertEqual(cg.oom_kills(), ooms, "a process was OOM-killed")
        self.assertStates([self.e, self.i], "running")
        self.assertNotIn("parked: ", self.cs("ps").out)
        self.assertBothOk()

    def test_lock_fails_after_the_importer_parked(self):
        self.start()
        self.fault(f"{self.e} lock error=999 1")
        r = self.dump("--shell-job")
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {self.i} (fakecuda-cuapp) unparks its 0.00 GiB once CRIU lets it run"), r)
        os.unlink(self.faults)
        deadline = time.monotonic() + 20
        while f"parked: {self.i} (" in self.cs("ps").out and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertNotIn("parked: ", self.cs("ps").out)
        self.assertStates([self.e, self.i], "running")
        self.assertBothOk()

    def test_parking_turned_off_refuses_the_importer(self):
        # CUDASNAP_NO_PARK=1: the importer's memory, which only parking
        # carries, would never come back through the driver
        self.start()
        confdir = trusted_tmpdir(self, "park-settings-")
        conf = os.path.join(confdir, "cudasnap.conf")
        with open(conf, "w") as f:
            f.write("CUDASNAP_NO_PARK=1\n")
        r = self.criu("dump", "-t", str(self.root), "-D", self.images, "-L", self.plugins, "--shell-job",
                      log="dump.log", env={"CUDASNAP_CONFIG": conf})
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(self.lines(r, f"process {self.i} (fakecuda-cuapp) maps device memory that another process "
                                      "shares with it (CUDA IPC: 1 import through cudasnap's interposer"), r)
        self.assertStates([self.e, self.i], "running")
        self.assertBothOk()

    def test_leave_running_unparks_both(self):
        self.start()
        r = self.dump("--shell-job", "--leave-running")
        self.assertEqual(r.rc, 0, r)
        deadline = time.monotonic() + 20
        while "parked: " in self.cs("ps").out and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertNotIn("parked: ", self.cs("ps").out)
        self.assertStates([self.e, self.i], "running")
        self.assertBothOk()


if __name__ == "__main__":
    unittest.main(verbosity=2)
