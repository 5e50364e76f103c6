#!/usr/bin/env python3
"""A restore never destroys a process: the checks of GPU memory before a
restore that a real GPU must confirm, each printed as PASS/FAIL with what it
measured (the helpers are tests/gpu/safety.py's).

  cli        a checkpointed process, then another process takes the GPU:
             restore --dry-run and restore refuse with the numbers (exit 1,
             2), the process stays checkpointed and is not destroyed; once
             the other process ends it is restored with its data
  wait       restore --wait-memory waits while the other process holds the
             GPU and restores once it ends
  dropin     cuda-checkpoint --toggle of it refused in NVIDIA's format, then
             restored once there is room
  container  a runc container (cudasnap_plugin.so): runc restore refused
             before CRIU creates any process while the GPU is full; the
             image restored later, data verified
  at-once    two checkpointed processes, room on the GPU for one: two
             `cudasnap restore --pid` started together, several rounds; one
             restored, the other refused before the driver is asked (never
             CUDA_ERROR_OUT_OF_MEMORY, never LOST) and restored with its
             data once there is room
  orphan     two checkpointed processes, room for one: the first's cudasnap
             killed while the driver carries its restore out; the second
             restore is not let into that room (never OUT_OF_MEMORY, never
             LOST), the first comes back with its data, the second once
             there is room; and what the driver answers of the first's state
             while its restore is pending, and when
  orphan-race  both restores started together, the cudasnap of the one that
             booked first killed while the other waits behind its booking
  parked     a PyTorch process under `cudasnap run` (its memory parks) and
             a plain one, room for one: while the first's restore waits for
             its unpark (its booking says "unparking"), the second's restore
             is not let into that room (exit 2, never OUT_OF_MEMORY, never
             LOST); both back with their data once there is room
             (needs CUDASNAP_PARK_LIB)
  no-nvml    NVML hidden (CUDASNAP_LIBNVML): the GPU's free memory comes from
             cudasnap's driver probe; its figure beside NVML's (what the
             probe's own context takes), a restore that does not fit refused
             by it, one that fits restored with its data

Usage (root): tests/gpu/room.py --cudasnap BIN --workload BIN [--tools DIR
    --plugin SO --driver-dir DIR] [--only a,b] [--gib 8] [--json OUT]
With --fake-app the same runs against the driver double (CUDASNAP_LIBCUDA,
CUDASNAP_LIBNVML and FAKECUDA_GPU_TOTAL_MIB set). Ends with "N passed, N
failed".
"""
import json
import os
import subprocess
import tarfile
import sys
import threading
import time

import safety as s

GIB, MIB = s.GIB, s.MIB

class Filler:
    """Another process that takes the GPU until only left bytes are free."""

    def __init__(self, a, w, left):
        if a.fake_app:
            total = int(os.environ.get("FAKECUDA_GPU_TOTAL_MIB", "0")) * MIB
            mib = max(1, (total - left) // MIB)
            self.pid = w.start([a.fake_app, "--mem", str(mib), "--ready-dir", w.dir])[0]
            self.p = s.procs[-1]
            self.free = total - mib * MIB
            return
        from gpu_restore_probe import FILLER  # it needs pynvml, which only a GPU machine has

        self.p = subprocess.Popen([sys.executable, "-c", FILLER, str(left)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, start_new_session=True)
        s.procs.append(self.p)
        self.pid = self.p.pid
        self.free = int(self.p.stdout.readline() or 0)

    def stop(self):
        try:
            os.killpg(self.p.pid, 9)
        except ProcessLookupError:
            pass
        self.p.wait()


def moved(c):
    return sum(p["bytes"] for p in (c.obj or {}).get("processes", []))


def checkpointed(a, cs, w, gib):
    pid = w.workload(gib)
    c = cs("checkpoint", "--pid", str(pid), "--json")
    if c.returncode != 0:
        raise RuntimeError("checkpoint failed: " + s.tail(c))
    return pid, c


def scenario_cli(a, cs):
    w = s.Procs(a)
    pid, c = checkpointed(a, cs, w, a.gib)
    f = Filler(a, w, moved(c) // 2)
    d = cs("restore", "--dry-run", "--json", "--pid", str(pid))
    e = ((d.obj or {}).get("processes") or [{}])[0]
    g = (e.get("gpu_memory") or {}).get("gpus", [{}])[0]
    s.check("cli: --dry-run says the restore would not fit (exit 1, gpu-memory, the need and the free memory)",
            d.returncode == 1 and "gpu-memory" in [r["code"] for r in e.get("reasons", [])] and
            g.get("bytes_needed", 0) > moved(c) and g.get("free_bytes", 1 << 62) < g.get("bytes_needed", 0),
            s.tail(d))
    r = cs("restore", "--json", "--pid", str(pid))
    # NVML names the other process where its pids are this namespace's (the
    # driver double answers that only in the initial PID namespace)
    named = f"pid {f.pid} (" in r.stderr or a.fake_app
    s.check("cli: restore refused before the driver is asked (exit 2; the GPU, the numbers, the other process)",
            r.returncode == 2 and "GPU 0" in r.stderr and "free" in r.stderr and named, s.tail(r))
    st = cs.states([pid])[pid]
    s.check("cli: the process is still checkpointed", st == "checkpointed", f"state={st}")
    s.record("restore-refused", moved=moved(c), need=g.get("bytes_needed"), free=g.get("free_bytes"),
             filler_free=f.free, refuse_s=round(r.wall, 3), dry_run_s=round(d.wall, 3))
    f.stop()
    time.sleep(0.5)
    r = cs("restore", "--json", "--pid", str(pid))
    ok, got = w.verify([pid])
    s.check("cli: once the other process ended, restored with its data (not destroyed)",
            r.returncode == 0 and ok, s.tail(r) + str(got))
    s.record("restore-after", restore_s=round(r.wall, 3))


def scenario_wait(a, cs):
    w = s.Procs(a)
    pid, c = checkpointed(a, cs, w, a.gib)
    f = Filler(a, w, moved(c) // 2)
    threading.Timer(5.0, f.stop).start()
    r = cs("restore", "--wait-memory", "120", "--json", "--pid", str(pid))
    ok, got = w.verify([pid])
    s.check("wait: restore --wait-memory waits for the other process to end, then restores with its data",
            r.returncode == 0 and r.wall >= 5 and "waiting up to" in r.stderr and ok,
            f"{r.wall:.2f}s " + s.tail(r) + str(got))
    s.record("wait-memory", wall_s=round(r.wall, 3))


def scenario_dropin(a, cs):
    w = s.Procs(a)
    pid = w.workload(a.gib)
    link = os.path.join(w.dir, "cuda-checkpoint")
    os.symlink(a.cudasnap, link)
    t = cs("--toggle", "--pid", str(pid), argv0=link)
    f = Filler(a, w, GIB // 4 if not a.fake_app else 32 * MIB)
    r = cs("--toggle", "--pid", str(pid), argv0=link)
    st = cs.states([pid])[pid]
    s.check("dropin: cuda-checkpoint --toggle refuses the restore in NVIDIA's format (exit 1), still checkpointed",
            t.returncode == 0 and r.returncode == 1 and
            r.stderr.startswith(f"Error toggling CUDA in process ID {pid}: \"restore refused") and
            st == "checkpointed", s.tail(r) + f" state={st}")
    f.stop()
    time.sleep(0.5)
    r = cs("--toggle", "--pid", str(pid), argv0=link)
    ok, got = w.verify([pid])
    s.check("dropin: restored by the next toggle once there is room, data verified", r.returncode == 0 and ok,
            s.tail(r) + str(got))


def scenario_container(a, cs, t, base):
    a.gib = 1 if not a.fake_app else 0.0625
    c, pids = s.start_container(a, t, base, "room", 2)
    try:
        img, work = s.dirs(base, "room")
        rc, err, ck = c.runc("checkpoint", "--image-path", img, "--work-path", work, "room")
        s.cb.reap()
        c.runc("delete", "-f", "room")
        inspect_images(cs, img, base, fits=True, libs=a.archive_libs)
        w = s.Procs(a)
        f = Filler(a, w, GIB // 2 if not a.fake_app else 32 * MIB)
        inspect_images(cs, img, base, fits=False, libs=a.archive_libs)
        c.name = "roomr"
        rrc, err2, rs = c.runc("restore", "-d", "--image-path", img, "--work-path", work, "roomr", stdio=True)
        lines = s.cb.log_lines(os.path.join(work, "restore.log"), ("cudasnap:",), 12)
        left = c.host_pids(2, timeout=3) if rrc == 0 else {}
        s.check("container: runc restore refused before CRIU created any process, and runc says it failed",
                rc == 0 and rrc != 0 and any("REFUSED before CRIU created any process" in x for x in lines) and
                not left, f"checkpoint rc={rc} restore rc={rrc} {rs:.2f}s {lines[-4:]}")
        c.runc("delete", "-f", "roomr")
        f.stop()
        time.sleep(0.5)
        c.name = "roomr2"
        rrc, err2, rs2 = c.runc("restore", "-d", "--image-path", img, "--work-path", work, "roomr2", stdio=True)
        after = c.host_pids(2) if rrc == 0 else {}
        ok = bool(after) and c.verify(after)
        s.check("container: the same image restored once the GPU has room (new pids, data verified)",
                rrc == 0 and ok, f"rc={rrc} {rs2:.2f}s {err2[-300:]}")
        s.record("container-room", checkpoint_s=round(ck, 3), refused_s=round(rs, 3), restore_s=round(rs2, 3))
        h = cs("history", "--json", "-n", "3")
        try:
            entries = json.loads(h.stdout)
        except ValueError:
            entries = []
        got = [(e.get("front"), e.get("outcome")) for e in entries if isinstance(e, dict)]
        s.check("container: cudasnap history shows the plugin's dump, the refused restore and the restore",
                got == [("criu-restore", "done"), ("criu-restore", "refused"), ("criu-dump", "done")],
                f"{got} {s.tail(h)[-300:]}")
    finally:
        c.remove()


def restore_at_once(cs, pids):
    """`cudasnap restore --pid P` for each of pids, started together."""
    out, start = {}, threading.Barrier(len(pids))

    def run(pid):
        start.wait()
        out[pid] = cs("restore", "--json", "--pid", str(pid))
    threads = [threading.Thread(target=run, args=(p,)) for p in pids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def room_for_one(a, cs):
    """Two checkpointed processes and a filler that leaves the GPU room for
    one of them: (procs, (pid, checkpoint) twice, filler)."""
    w = s.Procs(a)
    (pa, ca), (pb, cb) = checkpointed(a, cs, w, a.gib), checkpointed(a, cs, w, a.gib)
    need = max(moved(ca), moved(cb)) + 144 * MIB
    return w, (pa, ca), (pb, cb), Filler(a, w, need + need // 2)


def scenario_at_once(a, cs, rounds=3):
    for rnd in range(rounds):
        w, (pa, ca), (pb, cb), f = room_for_one(a, cs)
        out = restore_at_once(cs, [pa, pb])
        st = cs.states([pa, pb])
        won = [p for p in (pa, pb) if out[p].returncode == 0]
        lost = any("LOST" in r.stderr or "OUT_OF_MEMORY" in r.stderr for r in out.values())
        s.check(f"at-once {rnd}: one restored, the other refused before the driver was asked, nothing lost",
                len(won) == 1 and not lost and sorted(st.values()) == ["checkpointed", "running"],
                f"rc={[out[p].returncode for p in (pa, pb)]} states={st} " +
                " || ".join(r.stderr[-400:] for r in out.values()))
        s.record("at-once", round=rnd, moved=[moved(ca), moved(cb)], filler_free=f.free,
                 walls=[round(out[p].wall, 3) for p in (pa, pb)], rcs=[out[p].returncode for p in (pa, pb)])
        f.stop()
        time.sleep(1.0)
        rest = [p for p in (pa, pb) if st[p] == "checkpointed"]
        r = cs("restore", "--json", *[x for p in rest for x in ("--pid", str(p))]) if rest else None
        ok, got = w.verify([pa, pb])
        s.check(f"at-once {rnd}: the refused one restored once there is room, both verified",
                (r is None or r.returncode == 0) and ok, (s.tail(r) if r else "") + str(got))
        s.stop_all()


# The driver's state of a process, and how long the answer took.
GET_STATE = r"""
import ctypes, sys, time
cu = ctypes.CDLL("libcuda.so.1")
st = ctypes.c_int(-1)
t0 = time.monotonic()
r = cu.cuCheckpointProcessGetState(int(sys.argv[1]), ctypes.byref(st))
print(r, st.value, round(time.monotonic() - t0, 3), flush=True)
"""


def book_dir():
    return os.environ.get("CUDASNAP_GPU_BOOK") or "/run/cudasnap-gpu-book"


def book_files():
    return set(os.listdir(book_dir())) if os.path.isdir(book_dir()) else set()


def held(name):
    """Whether the booking file name holds its room (its restore is in
    flight), not a place in line: the state word after the magic."""
    try:
        with open(os.path.join(book_dir(), name), "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return len(head) == 12 and head[:7] == b"CSBOOK3" and int.from_bytes(head[8:12], "little") in (2, 3)


def unparking():
    """Whether a booking of the book waits for an unpark (its words say so)."""
    for name in book_files():
        try:
            with open(os.path.join(book_dir(), name), "rb") as f:
                if b", unparking" in f.read():
                    return True
        except OSError:
            pass
    return False


def killed_while_pending(a, cs, pid):
    """`cudasnap restore --pid pid`, SIGKILLed 0.3 s after its booking shows
    (its request is with the driver then). Seconds until booked and killed."""
    before = book_files()
    p = subprocess.Popen([a.cudasnap, "restore", "--pid", str(pid)], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60 and not book_files() - before and p.poll() is None:
        time.sleep(0.005)
    booked = time.monotonic() - t0
    time.sleep(0.3)
    os.killpg(p.pid, 9)
    p.wait()
    return booked, time.monotonic() - t0


def scenario_orphan(a, cs, rounds=2):
    for rnd in range(rounds):
        w, (pa, ca), (pb, cb), f = room_for_one(a, cs)
        booked, killed = killed_while_pending(a, cs, pa)
        g = subprocess.Popen([sys.executable, "-c", GET_STATE, str(pa)], stdout=subprocess.PIPE, text=True)
        r = cs("restore", "--json", "--pid", str(pb))
        answer = (g.communicate(timeout=300)[0].split() + ["?"] * 3)[:3]
        st = cs.states([pa, pb])
        lost = "LOST" in r.stderr or "OUT_OF_MEMORY" in r.stderr
        # refused by its plan (exit 2: the driver had taken the memory by
        # then) or by the book (exit 1: the orphan's booking)
        s.check(f"orphan {rnd}: the second restore not let into the room the killed one's pending restore takes",
                r.returncode in (1, 2) and not lost and st == {pa: "locked", pb: "checkpointed"},
                f"rc={r.returncode} states={st} " + s.tail(r))
        s.record("orphan", round=rnd, moved=[moved(ca), moved(cb)], filler_free=f.free, booked_s=round(booked, 3),
                 killed_s=round(killed, 3), second_rc=r.returncode, second_s=round(r.wall, 3),
                 by_orphan="whose cudasnap is gone" in r.stderr, get_state_during=answer)
        u = cs("unlock", "--pid", str(pa))
        ok, got = w.verify([pa])
        s.check(f"orphan {rnd}: the first process, restored by the driver after its cudasnap died, has its data",
                u.returncode == 0 and ok, s.tail(u) + str(got))
        f.stop()
        time.sleep(1.0)
        r2 = cs("restore", "--json", "--pid", str(pb))
        ok, got = w.verify([pa, pb])
        s.check(f"orphan {rnd}: the second restored once there is room, both verified, no booking left",
                r2.returncode == 0 and ok and not book_files(), s.tail(r2) + str(got) + str(book_files()))
        s.stop_all()


def scenario_orphan_race(a, cs, rounds=3):
    """Both restores start together; the one that booked first has its
    cudasnap killed 0.2 s after its booking shows, while the other waits
    in the book behind it: the other meets an orphan, not an empty book."""
    for rnd in range(rounds):
        w, (pa, ca), (pb, cb), f = room_for_one(a, cs)
        before = book_files()
        ps = {p: subprocess.Popen([a.cudasnap, "restore", "--pid", str(p)], start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for p in (pa, pb)}
        by_pid = {q.pid: p for p, q in ps.items()}
        first, t0 = None, time.monotonic()
        while first is None and time.monotonic() - t0 < 60:
            for name in book_files() - before:
                owner = int(name.split("-")[2]) if name.count("-") >= 3 else 0
                if owner in by_pid and held(name):
                    first = by_pid[owner]
            time.sleep(0.005)
        if first is None:
            s.check(f"orphan-race {rnd}: a booking showed", False, str(book_files()))
            continue
        time.sleep(0.2)
        os.killpg(ps[first].pid, 9)
        other = pb if first == pa else pa
        errs = {p: q.communicate(timeout=600)[1] for p, q in ps.items()}
        st = cs.states([pa, pb])
        lost = any("LOST" in e or "OUT_OF_MEMORY" in e for e in errs.values())
        s.check(f"orphan-race {rnd}: the waiting restore not let into the killed one's room; nothing lost",
                ps[other].returncode in (1, 2) and not lost and st == {first: "locked", other: "checkpointed"},
                f"rc={ps[other].returncode} states={st} " + errs[other][-600:])
        s.record("orphan-race", round=rnd, moved=[moved(ca), moved(cb)], filler_free=f.free, killed=first,
                 other_rc=ps[other].returncode, by_orphan="whose cudasnap is gone" in errs[other],
                 waited="waiting up to" in errs[other])
        u = cs("unlock", "--pid", str(first))
        f.stop()
        time.sleep(1.0)
        r2 = cs("restore", "--json", "--pid", str(other))
        ok, got = w.verify([pa, pb])
        s.check(f"orphan-race {rnd}: both back with their data, no booking left",
                u.returncode == 0 and r2.returncode == 0 and ok and not book_files(), s.tail(r2) + str(got))
        s.stop_all()


def scenario_parked(a, cs, rounds=2):
    here = os.path.dirname(os.path.abspath(__file__))
    for rnd in range(rounds):
        w = s.Procs(a)
        pa = w.start([a.cudasnap, "run", "--", sys.executable, os.path.join(here, "park_workload.py"), "--dir", w.dir,
                      "--gib", str(int(a.gib))])[0]
        ca = cs("checkpoint", "--pid", str(pa), "--json")
        parked = ((ca.obj or {}).get("processes") or [{}])[0].get("park") or {}
        pb, cb = checkpointed(a, cs, w, a.gib)
        if ca.returncode != 0 or not parked.get("parked"):
            s.check(f"parked {rnd}: the PyTorch process parked at its checkpoint", False, s.tail(ca))
            s.stop_all()
            continue
        need = max(parked.get("bytes", 0), moved(cb)) + 144 * MIB
        f = Filler(a, w, need + need // 2)
        p = subprocess.Popen([a.cudasnap, "restore", "--pid", str(pa), "--json"], start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t0, seen = time.monotonic(), None
        while seen is None and time.monotonic() - t0 < 120 and p.poll() is None:
            if unparking():
                seen = time.monotonic() - t0
            time.sleep(0.002)
        r = cs("restore", "--json", "--pid", str(pb)) if seen is not None else None
        out, err = p.communicate(timeout=600)
        st = cs.states([pa, pb])
        lost = r is not None and ("LOST" in r.stderr or "OUT_OF_MEMORY" in r.stderr)
        s.check(f"parked {rnd}: a booking waited for the unpark, and the restore started then was not let in "
                "(exit 2), nothing lost",
                seen is not None and r is not None and r.returncode == 2 and not lost and p.returncode == 0 and
                st == {pa: "running", pb: "checkpointed"},
                f"seen={seen} rc={r and r.returncode} first_rc={p.returncode} states={st} " +
                (s.tail(r) if r else "") + err[-400:])
        first = (json.loads(out or "{}").get("processes") or [{}])[0]
        s.record("parked", round=rnd, parked_bytes=parked.get("bytes"), moved_b=moved(cb), filler_free=f.free,
                 unparking_seen_s=None if seen is None else round(seen, 3), second_rc=r and r.returncode,
                 second_s=r and round(r.wall, 3), first_s=first.get("seconds"),
                 by_unpark=r is not None and "unparking" in r.stderr)
        ok, got = w.verify([pa])
        s.check(f"parked {rnd}: the parked process is back with its data", ok, str(got))
        f.stop()
        time.sleep(1.0)
        r2 = cs("restore", "--json", "--pid", str(pb))
        ok, got = w.verify([pa, pb])
        s.check(f"parked {rnd}: the second restored once there is room, both verified, no booking left",
                r2.returncode == 0 and ok and not book_files(), s.tail(r2) + str(got) + str(book_files()))
        s.stop_all()


def gpu_of(d, pid):
    e = next((x for x in (d.obj or {}).get("processes", []) if x.get("pid") == pid), {})
    return ((e.get("gpu_memory") or {}).get("gpus") or [{}])[0], e


def scenario_no_nvml(a, cs):
    w = s.Procs(a)
    pid, c = checkpointed(a, cs, w, a.gib)
    hidden = {"CUDASNAP_LIBNVML": "/nonexistent/libnvidia-ml.so.1"}
    # NVML's figure before and after the driver's: compared only while the
    # GPU's use did not change in between (other tenants come and go)
    for _ in range(3):
        d_nvml = cs("restore", "--dry-run", "--json", "--pid", str(pid))
        d_drv = cs("restore", "--dry-run", "--json", "--pid", str(pid), env=hidden)
        d_again = cs("restore", "--dry-run", "--json", "--pid", str(pid))
        fn, fd = gpu_of(d_nvml, pid)[0].get("free_bytes"), gpu_of(d_drv, pid)[0].get("free_bytes")
        if fn == gpu_of(d_again, pid)[0].get("free_bytes"):
            break
        time.sleep(1)
    s.check("no-nvml: without NVML the restore is judged by the driver's free memory (fits: exit 0)",
            d_drv.returncode == 0 and isinstance(fd, int) and isinstance(fn, int) and fd <= fn,
            f"nvml free={fn} driver free={fd} " + s.tail(d_drv))
    s.record("no-nvml-figures", nvml_free=fn, driver_free=fd, probe_cost=(fn - fd) if fn and fd else None,
             dry_run_nvml_s=round(d_nvml.wall, 3), dry_run_driver_s=round(d_drv.wall, 3))
    f = Filler(a, w, moved(c) // 2)
    r = cs("restore", "--json", "--pid", str(pid), env=hidden)
    st = cs.states([pid])[pid]
    s.check("no-nvml: a restore that does not fit is refused by the driver's figures (exit 2), still checkpointed",
            r.returncode == 2 and st == "checkpointed" and "gpu-memory" in r.stdout, s.tail(r) + f" state={st}")
    f.stop()
    time.sleep(0.5)
    r = cs("restore", "--json", "--pid", str(pid), env=hidden)
    ok, got = w.verify([pid])
    s.check("no-nvml: restored with its data once there is room", r.returncode == 0 and ok, s.tail(r) + str(got))
    s.record("no-nvml-restore", restore_s=round(r.wall, 3))


def inspect_images(cs, img, base, fits, libs=None):
    """cudasnap inspect of the images, as a directory and as Podman's
    archive (a tar.gz with checkpoint/ inside): exit 0 while they fit on the
    GPU, 1 with the numbers while another process holds it. libs: a folder
    with libarchive.so.13 and what it needs, for a machine without it."""
    archive = os.path.join(base, "room.tar.gz")
    if not os.path.exists(archive):
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(img, arcname="checkpoint")
    for path in (img, archive):
        env = {"LD_LIBRARY_PATH": libs, "CUDASNAP_LIBARCHIVE": os.path.join(libs, "libarchive.so.13")} if libs else None
        r = cs("inspect", path, "--json", env=env)
        if r.returncode == 2 and path == archive and "libarchive" in r.stderr:
            s.check("inspect: the archive needs libarchive, which this machine lacks", True, s.tail(r)[-200:])
            continue
        o = r.obj or {}
        reasons = [x.get("code") for x in o.get("reasons", [])] if isinstance(o.get("reasons"), list) else []
        what = "fits" if fits else "does not fit"
        ok = r.returncode == 0 if fits else r.returncode == 1 and "gpu-memory" in reasons
        s.check(f"inspect: {os.path.basename(path)} {what} on this GPU (exit {0 if fits else 1})", ok,
                s.tail(r)[-400:])
        s.record("inspect", path=os.path.basename(path), fits=fits, rc=r.returncode, wall_s=round(r.wall, 3),
                 reasons=reasons)


def main():
    a = s.arguments("cli,wait,dropin,container,at-once,orphan,orphan-race,parked,no-nvml", [("--gib", {"type": float, "default": 8}),
                                                  ("--archive-libs", {"help": "libarchive.so.13 and its libraries"})])
    if a.fake_app:
        a.gib = min(a.gib, 0.25)
    cs, t, base = s.setup(a, "room-")
    steps = {"cli": lambda: scenario_cli(a, cs), "wait": lambda: scenario_wait(a, cs),
             "dropin": lambda: scenario_dropin(a, cs), "container": lambda: scenario_container(a, cs, t, base),
             "at-once": lambda: scenario_at_once(a, cs), "orphan": lambda: scenario_orphan(a, cs),
             "orphan-race": lambda: scenario_orphan_race(a, cs), "parked": lambda: scenario_parked(a, cs),
             "no-nvml": lambda: scenario_no_nvml(a, cs)}
    return s.run_steps(a, steps)


if __name__ == "__main__":
    sys.exit(main())
