"""Hostile processes, /proc and state files: targets that exit in the middle
of a transaction, command names made to break parsers and terminals, tens of
thousands of mappings, unreadable and malformed /proc entries, a tampered
state directory, and cudasnap itself killed while it writes the manifest.
PID reuse between two driver calls is tested in tests/unit/test_txn.c, where
a fake /proc can change between the calls."""
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import unittest

from harness import APP, BIN, LIBCUDA, Case

NOBODY = 65534
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A CUDA process (through the double's cuInit) whose comm is set from hex.
COMM_CHILD = r"""
import ctypes, sys, time
assert ctypes.CDLL(sys.argv[1]).cuInit(0) == 0
ctypes.CDLL(None).prctl(15, ctypes.c_char_p(bytes.fromhex(sys.argv[2])), 0, 0, 0)
open(sys.argv[3], "w").close()
time.sleep(600)
"""

# N anonymous mappings (read-only pages between writable ones keep them
# apart), one mapping of a device file whose fd is closed, N more.
MAPS_CHILD = r"""
import ctypes, mmap, os, sys, time
n, dev, ready = int(sys.argv[1]), sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
page, failed = mmap.PAGESIZE, ctypes.c_void_p(-1).value
def anon(count):
    base = libc.mmap(None, 2 * count * page, 3, 0x22, -1, 0)
    assert base not in (None, failed)
    for i in range(count):
        assert libc.mprotect(base + 2 * i * page, page, 1) == 0
anon(n // 2)
fd = os.open(dev, os.O_RDONLY)
assert libc.mmap(None, page, 1, 0x01, fd, 0) not in (None, failed)
os.close(fd)
anon(n - n // 2)
open(ready, "w").close()
time.sleep(600)
"""


def sanitizer_preload(lib):
    """In the sanitizer build the double is instrumented: a python that
    loads it needs the ASan runtime first (and no leak report at its exit)."""
    try:
        out = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
    except OSError:
        return {}
    m = re.search(r"(/\S*libasan\.so\S*)", out)
    return {"LD_PRELOAD": m.group(1), "ASAN_OPTIONS": "detect_leaks=0"} if m else {}


# Fake apps that exit on purpose do it at once: with LeakSanitizer on, a
# sanitizer-built app would first scan its memory at _exit, still answering
# the driver as a live process meanwhile. cudasnap itself keeps its checks.
QUICK_EXIT = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1"}


class Hostile(Case):
    def child(self, script, *args):
        """Runs a python child; returns its pid once it has created its ready file."""
        ready = os.path.join(self.tmp, f"child-{len(self.apps)}.ready")
        env = dict(self.env, **sanitizer_preload(LIBCUDA))
        p = subprocess.Popen([sys.executable, "-c", script, *args, ready], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.apps.append(p)
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if p.poll() is not None:
                self.fail(f"child exited: {p.stderr.read().decode(errors='replace')}")
            self.assertLess(time.monotonic(), deadline, "child not ready")
            time.sleep(0.02)
        return p.pid

    def cs_bytes(self, *args, env=None):
        """cudasnap's raw output, for checks that text decoding would hide."""
        return subprocess.run([BIN, *args], capture_output=True, env=dict(self.env, **(env or {})), timeout=120)


class ExitMidTransaction(Hostile):
    """A target exits (the double's 'exit' fault: _exit(1) inside the call)
    and stays a zombie, unreaped, as an orphan would in a container whose
    init is slow. During its lock nothing of it has changed: it is left out
    and the others go on (exit 0). During its checkpoint or its restore its
    GPU state dies with it: it is reported LOST, never back in its state, and
    the command exits 3. During its unlock (restored already) it is reported
    exited, and the command exits 1. Every other process ends in its starting
    state, or the goal when the command went through."""

    EXPECT = {  # op: (exit status, outcome, lost)
        "lock": (0, "done", False),
        "checkpoint": (3, "incomplete", True),
        "restore": (3, "incomplete", True),
        "unlock": (1, "rolled-back", False),
    }

    def exit_during(self, op):
        rc, outcome, lost = self.EXPECT[op]
        for which in (0, 2):
            with self.subTest(op=op, which=which):
                pids = [self.start("--mem", "1", env=QUICK_EXIT)[0] for _ in range(3)]
                restore = op in ("restore", "unlock")
                if restore:
                    self.assertEqual(self.cs("checkpoint").rc, 0)
                self.fault(f"{pids[which]} {op} exit")
                r = self.cs("restore" if restore else "checkpoint", "--json")
                self.assertEqual(r.rc, rc, r)
                self.assertEqual(r.obj["outcome"], outcome, r)
                procs = {p["pid"]: p for p in r.obj["processes"]}
                self.assertEqual(procs[pids[which]]["final_state"], "exited", r)
                self.assertEqual(procs[pids[which]]["lost"], lost, r)
                self.assertEqual(r.obj["lost"], int(lost), r)
                if lost:
                    self.assertIn("LOST", r.err)
                    self.assertNotIn("every process is back", r.err)
                elif rc == 0:
                    self.assertEqual(r.obj["vanished"], 1, r)
                    self.assertIn(f"{pids[which]} (fakecuda-app) exited before it was touched", r.err)
                else:
                    self.assertIn("every process that is still there is back", r.err)
                survivors = [p for p in pids if p != pids[which]]
                start = "checkpointed" if restore else "running"
                end = start if rc else ("running" if restore else "checkpointed")
                self.assertEqual({p: procs[p]["final_state"] for p in survivors}, {p: end for p in survivors}, r)
                self.assertStates(survivors, end)
                os.unlink(self.faults)
                if end == "checkpointed":
                    r = self.cs("restore")
                    self.assertEqual(r.rc, 0, r)
                    if restore:
                        self.assertIn(f"process {pids[which]} (fakecuda-app) of the last checkpoint has exited",
                                      r.err)
                self.assertStates(survivors, "running")
                self.assertDataOk(survivors)
                self.doCleanups()
                self.setUp()

    def test_exit_during_lock(self):
        self.exit_during("lock")

    def test_exit_during_checkpoint(self):
        self.exit_during("checkpoint")

    def test_exit_during_restore(self):
        self.exit_during("restore")

    def test_exit_during_unlock(self):
        self.exit_during("unlock")


class OddProcesses(Hostile):
    COMM = b"a) b\nc\x1b[1m\xff"      # 11 bytes: fits the kernel's 15
    SHOWN = "a) b?c?[1m?"

    def test_comm_with_paren_space_newline_is_sanitized(self):
        pid = self.child(COMM_CHILD, LIBCUDA, self.COMM.hex())
        with open(f"/proc/{pid}/stat", "rb") as f:
            self.assertIn(b"(" + self.COMM + b")", f.read())
        raw = self.cs_bytes("ps", "--json")
        self.assertEqual(raw.returncode, 0, raw.stderr)
        obj = json.loads(raw.stdout.decode("utf-8"))   # strict: invalid UTF-8 raises
        procs = {p["pid"]: p for p in obj["processes"]}
        self.assertEqual(procs[pid]["comm"], self.SHOWN)
        self.assertEqual(procs[pid]["class"], "cuda")
        human = self.cs_bytes("ps")
        self.assertEqual(human.returncode, 0, human.stderr)
        text = human.stdout.decode("utf-8")
        self.assertNotIn("\x1b", text)
        rows = [l for l in text.splitlines() if l.split()[:1] == [str(pid)]]
        self.assertEqual(len(rows), 1, text)
        self.assertIn(self.SHOWN, rows[0])
        # The name also travels through the transaction's report and the manifest.
        r = self.cs_bytes("checkpoint", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(b"\x1b", r.stderr + r.stdout)
        done = json.loads(r.stdout.decode("utf-8"))
        self.assertEqual([p["comm"] for p in done["processes"] if p["pid"] == pid], [self.SHOWN])
        with open(os.path.join(self.state, "manifest.json"), "rb") as f:
            man = json.loads(f.read().decode("utf-8"))
        self.assertEqual([e["comm"] for e in man["processes"]], [self.SHOWN])
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertStates([pid], "running")

    def test_tens_of_thousands_of_mappings(self):
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
        n = min(20000, (limit - 4000) // 2)
        if n < 2000:
            self.skipTest(f"vm.max_map_count is {limit}")
        pid = self.child(MAPS_CHILD, str(n), os.path.join(self.dev, "nvidia0"))
        with open(f"/proc/{pid}/maps") as f:
            lines = sum(1 for _ in f)
        self.assertGreaterEqual(lines, 2 * n)
        r = self.cs("ps", "--json", env={"CUDASNAP_LIBCUDA": "/nonexistent/libcuda.so.1"})
        self.assertEqual(r.rc, 0, r)
        procs = {p["pid"]: p for p in r.obj["processes"]}
        self.assertIn(pid, procs, r)
        self.assertEqual((procs[pid]["class"], procs[pid]["device_fds"], procs[pid]["device_maps"]),
                         ("device-holder", 0, 1))
        # Reading the maps is most of it; the kernel takes about as long to write them.
        self.assertLess(r.wall, 10 if os.environ.get("CUDASNAP_SANITIZE", "none") != "none" else 3, r.wall)
        v = self.cs("verify", "--json", env={"CUDASNAP_LIBCUDA": "/nonexistent/libcuda.so.1"})
        self.assertEqual(v.rc, 1, v)
        mine = [l for l in v.obj["leftovers"] if l["pid"] == pid]
        self.assertEqual([(l["kind"], l["fd_open"]) for l in mine], [("mapping", False)])
        print(f"{lines} mappings scanned in {r.wall:.3f} s", file=sys.stderr)


class HostileProc(Hostile):
    """A /proc tree (through CUDASNAP_PROC_DIR) with every kind of bad entry,
    next to three processes that hold a device file."""

    def stat(self, pid, comm="app", start=100):
        return (f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 1 0 0 0 3 1 0 0 20 0 1 0 {start} 8478720 896 "
                "18446744073709551615 1 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")

    def put(self, rel, data=""):
        path = os.path.join(self.proc, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data.encode(errors="surrogateescape") if isinstance(data, str) else data)

    def holder(self, pid, comm="app", maps=""):
        self.put(f"{pid}/stat", self.stat(pid, comm))
        self.put(f"{pid}/maps", maps)
        os.makedirs(os.path.join(self.proc, str(pid), "fd"), exist_ok=True)
        if not maps:
            os.symlink(os.path.join(self.dev, "nvidia0"), os.path.join(self.proc, str(pid), "fd", "3"))

    def build(self):
        self.proc = os.path.join(self.tmp, "proc")
        nv = os.path.join(self.dev, "nvidia0")
        self.holder(100)
        self.holder(105, maps="1000-2000 r--p 0 00:01 1 /lib/x\n" + "7" * 200000 + "\0\n"
                    f"\0\0\n3000-4000 rw-s 0 00:05 9 {nv}\n5000-6000 rw-s 0 00:05 9 {nv} (deleted)")
        self.holder(106, comm="x) 1 2 (y\n\x1b]0;t\x07")
        os.makedirs(os.path.join(self.proc, "101"))                      # no stat: vanished
        self.put("102/stat", "garbage without parentheses")               # malformed
        self.put("103/stat", self.stat(103))
        os.makedirs(os.path.join(self.proc, "103", "maps"))               # maps is a directory
        os.makedirs(os.path.join(self.proc, "103", "fd"))
        self.put("104/stat", self.stat(104))
        self.put("104/maps", "")
        self.put("104/fd", "not a directory")                             # fd is a file
        self.put("108/stat", self.stat(108, comm="c" * 3000))             # longer than a stat can be
        os.symlink("/nonexistent", os.path.join(self.proc, "107"))        # dangling
        os.makedirs(os.path.join(self.proc, "109", "fd"))
        self.put("109/stat", self.stat(109)[:40])                         # cut short
        for name in ("abc", "-1", "0", "99999999999", "12a"):
            os.makedirs(os.path.join(self.proc, name))
            self.put(f"{name}/stat", self.stat(5))

    def test_bad_entries_are_reported_not_fatal(self):
        self.build()
        env = {"CUDASNAP_PROC_DIR": self.proc, "CUDASNAP_LIBCUDA": "/nonexistent/libcuda.so.1"}
        raw = self.cs_bytes("ps", "--json", env=env)
        self.assertEqual(raw.returncode, 0, raw.stderr)
        obj = json.loads(raw.stdout.decode("utf-8"))
        got = {p["pid"]: (p["class"], p["device_fds"], p["device_maps"]) for p in obj["processes"]}
        self.assertEqual(got, {100: ("device-holder", 1, 0), 105: ("device-holder", 0, 2),
                               106: ("device-holder", 1, 0)})
        self.assertEqual(sorted(u["pid"] for u in obj["unreadable"]), [102, 103, 104, 108, 109])
        comm = [p["comm"] for p in obj["processes"] if p["pid"] == 106][0]
        self.assertEqual(comm, "x) 1 2 (y??]0;t?")
        human = self.cs_bytes("ps", env=env)
        self.assertEqual(human.returncode, 0, human.stderr)
        self.assertIn(b"cannot read 5 processes", human.stdout)
        self.assertFalse(re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", human.stdout), human.stdout)
        v = self.cs("verify", "--json", env=env)
        self.assertEqual(v.rc, 1, v)
        self.assertEqual(sorted({l["pid"] for l in v.obj["leftovers"]}), [100, 105, 106])


class Privileges(Hostile):
    def setUp(self):
        super().setUp()
        if os.geteuid() != 0 or not __import__("shutil").which("setpriv"):
            self.skipTest("needs root and setpriv")
        os.chmod(self.tmp, 0o755)

    def as_nobody(self, *args):
        return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                               "--inh-caps=-all", BIN, *args], capture_output=True, text=True, env=self.env,
                              timeout=60)

    def test_ps_and_verify_name_the_processes_they_cannot_read(self):
        pid, = self.start()
        for cmd in ("ps", "verify"):
            with self.subTest(cmd=cmd):
                p = self.as_nobody(cmd)
                self.assertEqual(p.returncode, 2, p.stderr)  # the list may miss CUDA processes
                self.assertIn("CAP_SYS_PTRACE", p.stderr)
                line = [l for l in p.stdout.splitlines() if l.startswith("cannot read ")]
                self.assertEqual(len(line), 1, p.stdout)
                self.assertIn(f"as uid {NOBODY}:", line[0])
                self.assertIn("Permission denied", line[0])
                self.assertRegex(line[0], rf"[ :]{pid}\b")
                p = self.as_nobody(cmd, "--json")
                obj = json.loads(p.stdout)
                self.assertIn({"pid": pid, "error": "Permission denied"}, obj["unreadable"])
        p = self.as_nobody("verify")
        self.assertIn("No GPU device reference found in the processes that could be read", p.stdout)
        self.assertNotIn("No GPU device reference remains", p.stdout)

    def test_nothing_runs_programs(self):
        """cudasnap executes nothing but its own command line (cudasnap run),
        so nothing taken from a target (comm, environ, paths) can be run: no
        exec*/system/popen/spawn/fork in lib/ or src/ but src/run.c's execvp
        and lib/inspect/archive_child.c's fork, which executes nothing
        (tests/lint/no_exec.py, also a meson test of its own)."""
        lint = os.path.join(SOURCE_ROOT, "tests", "lint", "no_exec.py")
        p = subprocess.run([sys.executable, lint, SOURCE_ROOT, BIN], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


class StateDirectory(Hostile):
    def refused(self, needle):
        pid, = self.start()
        r = self.cs("checkpoint")
        self.assertEqual(r.rc, 2, r)
        self.assertIn(needle, r.err)
        self.assertIn("CUDASNAP_STATE_DIR", r.err)
        self.assertStates([pid], "running")

    def test_symlinked_state_dir_is_refused(self):
        real = os.path.join(self.tmp, "real-state")
        os.mkdir(real, 0o700)
        os.symlink(real, self.state)
        self.refused("a symlink is refused")
        self.assertEqual(os.listdir(real), [])

    def test_group_or_world_writable_state_dir_is_refused(self):
        for mode in (0o770, 0o703, 0o777):
            with self.subTest(mode=oct(mode)):
                os.mkdir(self.state)
                os.chmod(self.state, mode)
                self.refused("writable by group or others")
                os.rmdir(self.state)

    def test_state_dir_of_another_user_is_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to chown")
        os.mkdir(self.state, 0o700)
        os.chown(self.state, NOBODY, NOBODY)
        self.refused(f"owned by uid {NOBODY}")

    def test_symlinked_claims_directory_is_refused(self):
        os.mkdir(self.state, 0o700)
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.mkdir(elsewhere, 0o700)
        os.symlink(elsewhere, os.path.join(self.state, "claims"))
        self.refused("claims (it is a symlink, which is refused)")
        self.assertEqual(os.listdir(elsewhere), [])

    def precious(self, name):
        """A file elsewhere that a state file links to."""
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write("keep me\n")
        os.chmod(path, 0o644)
        return path

    def assertUntouched(self, path):
        with open(path) as f:
            self.assertEqual(f.read(), "keep me\n")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o644)

    def test_hard_linked_state_files_are_refused(self):
        """A state file cudasnap writes, truncates or chmods is refused when it
        is a hard link: the file it names elsewhere stays as it was."""
        os.mkdir(self.state, 0o700)
        pid, = self.start("--mem", "1")
        target = self.precious("lock-target")
        os.link(target, os.path.join(self.state, "lock"))
        r = self.cs("checkpoint")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("the manifest was not updated", r.err)
        self.assertIn("lock (it is a hard link (it has more than one name), which is refused)", r.err)
        self.assertUntouched(target)
        os.unlink(os.path.join(self.state, "lock"))
        self.assertEqual(self.cs("restore").rc, 0)
        # the history: neither appended to nor chmod'ed, nor read
        target = self.precious("history-target")
        os.unlink(os.path.join(self.state, "history.jsonl"))
        os.link(target, os.path.join(self.state, "history.jsonl"))
        r = self.cs("lock")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("is not recorded in the history of operations", r.err)
        self.assertIn("history.jsonl (it is a hard link", r.err)
        self.assertUntouched(target)
        r = self.cs("history")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("history.jsonl (it is a hard link", r.err)
        os.unlink(os.path.join(self.state, "history.jsonl"))
        self.assertEqual(self.cs("unlock").rc, 0)
        # the manifest: not believed
        self.assertEqual(self.cs("checkpoint").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        os.link(man, os.path.join(self.tmp, "manifest-copy"))
        r = self.cs("restore")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("manifest.json (it is a hard link", r.err)
        self.assertStates([pid], "running")
        # a claim's record: the claim is refused, nothing done
        with open(f"/proc/{pid}/status") as f:
            nspid = re.search(r"NSpid:\s+(.*)", f.read()).group(1).split()[-1]
        record = f"{os.stat(f'/proc/{pid}/ns/pid').st_ino}-{nspid}"
        os.makedirs(os.path.join(self.state, "claims"), 0o700, exist_ok=True)
        target = self.precious("claim-target")
        os.link(target, os.path.join(self.state, "claims", record))
        r = self.cs("lock")
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn(f"claims: its record {record}: it is a hard link", r.err)
        self.assertUntouched(target)
        self.assertStates([pid], "running")

    def test_a_state_file_of_another_user_is_refused(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to chown")
        os.mkdir(self.state, 0o700)
        pid, = self.start("--mem", "1")
        hist = os.path.join(self.state, "history.jsonl")
        with open(hist, "w") as f:
            f.write("")
        os.chown(hist, NOBODY, NOBODY)
        r = self.cs("lock")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("history.jsonl (it is owned by another user than root or the caller)", r.err)
        self.assertEqual(os.path.getsize(hist), 0)
        self.assertEqual(self.cs("unlock").rc, 0)
        self.assertStates([pid], "running")

    def test_symlinked_lock_is_not_followed(self):
        """The lock only guards the manifest's updates: a checkpoint behind a
        symlinked one goes on, writes no manifest and says so."""
        os.mkdir(self.state, 0o700)
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.symlink(elsewhere, os.path.join(self.state, "lock"))
        pid, = self.start()
        r = self.cs("checkpoint")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("the manifest was not updated", r.err)
        self.assertIn("it is a symlink, which is refused", r.err)
        self.assertFalse(os.path.exists(elsewhere))
        self.assertFalse(os.path.exists(os.path.join(self.state, "manifest.json")))
        self.assertEqual(self.cs("restore").rc, 0)
        self.assertStates([pid], "running")

    def test_symlinked_manifest_is_not_followed(self):
        pids = [self.start("--mem", "1")[0] for _ in range(2)]
        self.assertEqual(self.cs("checkpoint").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        with open(man) as f:
            m = json.load(f)
        m["processes"][0]["start_time"] += 1     # followed, this would refuse the restore
        decoy = os.path.join(self.tmp, "decoy.json")
        with open(decoy, "w") as f:
            json.dump(m, f)
        os.unlink(man)
        os.symlink(decoy, man)
        r = self.cs("restore")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("manifest.json (it is a symlink, which is refused)", r.err)
        self.assertStates(pids, "running")
        # A checkpoint replaces the link itself; the file it named is untouched.
        os.symlink(decoy, man)
        before = open(decoy).read()
        self.assertEqual(self.cs("checkpoint").rc, 0)
        self.assertFalse(os.path.islink(man))
        self.assertEqual(open(decoy).read(), before)
        self.assertEqual(self.cs("restore").rc, 0)

    def test_state_files_are_opened_without_following_links_and_not_inherited(self):
        # At run time: the lock file of a running cudasnap.
        self.start("--mem", "1")
        self.fault("* lock delay=1500")
        p = subprocess.Popen([BIN, "checkpoint"], env=self.env, stderr=subprocess.PIPE, text=True)
        claims = os.path.join(self.state, "claims") + "/"
        flags, deadline = None, time.monotonic() + 10
        while flags is None and time.monotonic() < deadline:
            for fd in os.listdir(f"/proc/{p.pid}/fd"):
                try:
                    if os.readlink(f"/proc/{p.pid}/fd/{fd}").startswith(claims):
                        with open(f"/proc/{p.pid}/fdinfo/{fd}") as f:
                            flags = int(re.search(r"flags:\s+(\d+)", f.read()).group(1), 8)
                except OSError:
                    pass
            time.sleep(0.02)
        p.communicate(timeout=30)
        self.assertIsNotNone(flags, "claim file not seen open")
        self.assertTrue(flags & os.O_CLOEXEC and flags & os.O_NOFOLLOW, oct(flags))
        self.assertEqual(self.cs("restore").rc, 0)
        # In the source: every file lib/record/state.c and lib/record/claim.c open.
        calls = []
        for name in ("state.c", "claim.c"):
            with open(os.path.join(SOURCE_ROOT, "lib", "record", name)) as f:
                calls += re.findall(r"\bopen(?:at)?\((.*?)\)", f.read(), re.S)
        self.assertGreaterEqual(len(calls), 7)
        for c in calls:
            self.assertIn("O_NOFOLLOW", c)
            self.assertIn("O_CLOEXEC", c)


class ManifestContent(Hostile):
    """A manifest that cudasnap did not write (or that was cut, replaced or
    tampered with) is named in a warning, and restore falls back to
    discovery: every checkpointed process comes back."""

    def restore_with(self, writer, needle):
        pids = [self.start("--mem", "1")[0] for _ in range(2)]
        self.assertEqual(self.cs("checkpoint").rc, 0)
        man = os.path.join(self.state, "manifest.json")
        os.unlink(man)
        writer(man)
        r = self.cs("restore")
        self.assertEqual(r.rc, 0, r)
        self.assertIn(needle, r.err)
        self.assertIn("restoring the checkpointed processes found by discovery", r.err)
        self.assertStates(pids, "running")
        self.assertDataOk(pids)

    @staticmethod
    def text(data):
        def write(path):
            with open(path, "wb") as f:
                f.write(data)
        return write

    def test_huge_manifest(self):
        def write(path):
            with open(path, "wb") as f:
                f.truncate(17 << 20)     # sparse: larger than CS_MANIFEST_MAX
        self.restore_with(write, "is too large")

    def test_wrong_types(self):
        bad = b'{"version": 1, "processes": [{"pid": "12", "start_time": 1, "order": 0, "comm": "x"}]}'
        self.restore_with(self.text(bad), "has a malformed entry (#0)")

    def test_wrong_version_and_shape(self):
        for data in (b'{"version": 2, "processes": []}', b'[1, 2, 3]', b'{"version": 1, "processes": {}}'):
            with self.subTest(data=data):
                self.restore_with(self.text(data), "is not a cudasnap manifest of version 1")
                self.doCleanups()
                self.setUp()

    def test_truncated_empty_and_binary(self):
        for data, needle in ((b"", "is corrupt or truncated"), (b'{"version": 1, "proc', "is corrupt or truncated"),
                             (b'{"version": 1, "processes": []}\0garbage', "is corrupt or truncated"),
                             (b"\xff\xfe\x00\x01" * 64, "is corrupt or truncated"),
                             # refused before json-c parses it
                             (b"[" * 100000, "holds 0 JSON objects, 100000 arrays")):
            with self.subTest(data=data[:40]):
                self.restore_with(self.text(data), needle)
                self.doCleanups()
                self.setUp()

    def test_directory_instead_of_a_file(self):
        self.restore_with(os.mkdir, "is not a regular file")


class KilledMidWrite(Hostile):
    """cudasnap SIGKILLed at moments spread over a whole checkpoint, the
    manifest write included: a manifest is either absent or complete (it is
    written to a temporary file, synced and renamed). Best effort: the
    moments are spread, not aimed."""

    def test_manifest_is_whole_or_absent(self):
        pids = [self.start("--mem", "1")[0] for _ in range(4)]
        man = os.path.join(self.state, "manifest.json")
        t0 = time.monotonic()
        self.assertEqual(self.cs("checkpoint").rc, 0)
        span = time.monotonic() - t0
        self.assertEqual(self.cs("restore").rc, 0)
        seen = {"absent": 0, "whole": 0}
        for i in range(12):
            p = subprocess.Popen([BIN, "checkpoint"], env=self.env, stderr=subprocess.DEVNULL)
            time.sleep(span * i / 10)
            p.send_signal(signal.SIGKILL)
            p.wait()
            if os.path.exists(man):
                with open(man) as f:
                    m = json.load(f)      # raises on a partial file
                self.assertEqual(m["version"], 1)
                self.assertLessEqual({e["pid"] for e in m["processes"]}, set(pids))
                seen["whole"] += 1
            else:
                seen["absent"] += 1
            # Whatever the kill left behind, restore and unlock bring it back.
            self.assertIn(self.cs("restore").rc, (0,), "restore after kill")
            self.assertIn(self.cs("unlock").rc, (0,), "unlock after kill")
            self.assertStates(pids, "running")
            if os.path.exists(man):
                os.unlink(man)
        self.assertDataOk(pids)
        print(f"manifest after SIGKILL: {seen}", file=sys.stderr)


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
