#!/usr/bin/env python3
"""Nothing lost, nothing broken by neighbours: the checks of cudasnap that a
real GPU must confirm, each printed as PASS/FAIL with what was measured.

  memory       a process whose checkpoint would not fit its memory cgroup is
               refused (CLI, --dry-run, the hook, the cuda-checkpoint drop-in),
               stays running with its data, no OOM kill; with room it round-trips
  together     two processes that fit one at a time but not together
  ipc          a torch.multiprocessing pair sharing a CUDA tensor: the importer
               refused, the exporter alone checkpointed and restored
  monitors     an nvidia-smi -q loop every 0.1 s beside whole-namespace rounds
  containers   runc + CRIU + cudasnap_plugin.so: a memory-limited container is
               refused (plain and --leave-running), one that fits round-trips
  killed-criu  CRIU SIGKILLed in the middle of a container dump: ps names what
               it left behind, cudasnap restore recovers it, data verified

Usage (root): tests/gpu/safety.py --cudasnap BIN --workload BIN --tools DIR
    --plugin SO --driver-dir DIR [--only a,b] [--json OUT]
With --fake-app (the driver double's fakecuda-app) the same runs on a CPU
machine against the double (set CUDASNAP_LIBCUDA / CUDASNAP_LIBNVML).
Ends with "N passed, N failed".
"""
import argparse
import atexit
import ctypes
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import container_bench as cb  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
results = {"passed": 0, "failed": 0}
rows = []
procs = []


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  [{detail}]" if detail else ""), flush=True)
    return ok


def record(kind, **kw):
    kw["kind"] = kind
    rows.append(kw)
    print("  " + json.dumps(kw)[:600], flush=True)


class Cs:
    def __init__(self, a, state):
        self.bin, self.state, self.a = a.cudasnap, state, a

    def __call__(self, *args, env=None, timeout=300, argv0=None):
        # The default state directory: the one CRIU's plugin (which gets no
        # environment) writes its records into.
        e = dict(os.environ, **(env or {}))
        t0 = time.monotonic()
        p = subprocess.run([argv0 or self.bin, *args], capture_output=True, text=True, env=e, timeout=timeout)
        p.wall = time.monotonic() - t0
        p.obj = None
        if p.stdout.strip().startswith("{"):
            try:
                p.obj = json.loads(p.stdout)
            except ValueError:
                pass
        return p

    def states(self, pids):
        p = self("ps", "--json")
        got = {x["pid"]: x["state"] for x in (p.obj or {}).get("processes", [])}
        return {pid: got.get(pid) for pid in pids}


def tail(p):
    return (p.stderr + p.stdout)[-700:].replace("\n", " | ")


class MemCg:
    """A memory cgroup (v2, else v1) with a limit; processes go in at start."""

    def __init__(self, name, limit):
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            self.v2 = True
            self.dir = os.path.join("/sys/fs/cgroup", name)
            self.limit_file, self.events = "memory.max", "memory.events"
        else:
            self.v2 = False
            self.dir = os.path.join("/sys/fs/cgroup/memory", name)
            self.limit_file, self.events = "memory.limit_in_bytes", "memory.oom_control"
        os.makedirs(self.dir, exist_ok=True)
        self.path = "/" + name
        self.set(limit)

    def set(self, limit):
        with open(os.path.join(self.dir, self.limit_file), "w") as f:
            f.write(str(int(limit)))

    def oom_kills(self):
        for line in open(os.path.join(self.dir, self.events)):
            k, v = line.split()
            if k == "oom_kill":
                return int(v)
        return None

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


def ensure_v2_memory_controller():
    """The memory controller below the cgroup v2 root this process sees."""
    root = "/sys/fs/cgroup"
    if not os.path.exists(os.path.join(root, "cgroup.controllers")):
        return
    if "memory" in open(os.path.join(root, "cgroup.subtree_control")).read().split():
        return
    leaf = os.path.join(root, "safety-init")
    os.makedirs(leaf, exist_ok=True)
    for pid in open(os.path.join(root, "cgroup.procs")).read().split():
        try:
            with open(os.path.join(leaf, "cgroup.procs"), "w") as f:
                f.write(pid)
        except OSError:
            pass
    with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
        f.write("+memory")


class Procs:
    """CUDA processes of one scenario: the real workload, or the double's app."""

    def __init__(self, a):
        self.a, self.dir = a, tempfile.mkdtemp(prefix="safety-")

    def start(self, argv, expect=1, cg=None, env=None):
        before = set(glob.glob(os.path.join(self.dir, "*.ready")))
        if cg:
            argv = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(cg.dir, "cgroup.procs"), *argv]
        p = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=dict(os.environ, **(env or {})))
        procs.append(p)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            now = set(glob.glob(os.path.join(self.dir, "*.ready"))) - before
            if len(now) >= expect:
                return sorted(int(os.path.basename(f).split(".")[0]) for f in now)
            if p.poll() is not None:
                raise RuntimeError(f"{argv} exited: {p.stderr.read()[-1500:]}")
            time.sleep(0.1)
        raise RuntimeError(f"{argv}: not ready")

    def workload(self, gib, cg=None, extra=()):
        if self.a.fake_app:
            return self.start([self.a.fake_app, "--mem", str(int(gib * 1024)), "--ready-dir", self.dir, *extra],
                              cg=cg)[0]
        return self.start([self.a.workload, "--gib", str(gib), "--dir", self.dir, *extra], cg=cg)[0]

    def ipc_pair(self):
        """(exporter, importer)."""
        if self.a.fake_app:
            exp = self.start([self.a.fake_app, "--mem", "64", "--ipc-export", "--ready-dir", self.dir])[0]
            imp = self.start([self.a.fake_app, "--mem", "64", "--ipc-import", str(exp), "--ready-dir", self.dir])[0]
            return exp, imp
        pids = self.start([sys.executable, os.path.join(HERE, "torch_ipc.py"), "--dir", self.dir, "--mib", "1024"],
                          expect=2)
        role = {p: open(os.path.join(self.dir, f"{p}.ready")).read().strip() for p in pids}
        return next(p for p in pids if role[p] == "exporter"), next(p for p in pids if role[p] == "importer")

    def verify(self, pids, timeout=120):
        for pid in pids:
            f = os.path.join(self.dir, f"{pid}.verify")
            if os.path.exists(f):
                os.unlink(f)
            os.kill(pid, signal.SIGUSR1)
        got, deadline = {}, time.monotonic() + timeout
        while len(got) < len(pids) and time.monotonic() < deadline:
            for pid in pids:
                f = os.path.join(self.dir, f"{pid}.verify")
                if pid not in got and os.path.exists(f):
                    got[pid] = open(f).read().strip()
            time.sleep(0.1)
        return all(got.get(p, "").startswith("ok") for p in pids), got


def stop_all():
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    procs.clear()
    cb.reap()
    time.sleep(0.5)


def sizes(a):
    """GPU: the issue's numbers. Double: its device memory is a memfd that is
    already charged to the cgroup, so the limits leave room for that."""
    if a.fake_app:
        return {"big": 0.25, "tight": 384 * MIB, "roomy": GIB, "one": 0.125, "pair_limit": 480 * MIB}
    return {"big": 2, "tight": 1.5 * GIB, "roomy": 4 * GIB, "one": 1, "pair_limit": 2.5 * GIB}


def scenario_memory(a, cs):
    z, w = sizes(a), Procs(a)
    cg = MemCg("cudasnap-safety-a", z["tight"])
    try:
        pid = w.workload(z["big"], cg=cg)
        oom0 = cg.oom_kills()
        d = cs("checkpoint", "--dry-run", "--json", "--pid", str(pid))
        entry = (d.obj or {}).get("processes", [{}])[0]
        check("memory: --dry-run says the checkpoint would not fit (exit 1)",
              d.returncode == 1 and entry.get("verdict") == "refused" and
              "memory" in [r["code"] for r in entry.get("reasons", [])], tail(d))
        r = cs("checkpoint", "--pid", str(pid))
        check("memory: checkpoint refused before anything changed (exit 2, cgroup and limit named)",
              r.returncode == 2 and cg.path in r.stderr and cg.limit_file in r.stderr, tail(r))
        h = cs("hook", env={"GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE": "save"})
        check("memory: the hook's save refused (exit 2)", h.returncode == 2 and cg.path in h.stderr, tail(h))
        link = os.path.join(w.dir, "cuda-checkpoint")
        os.symlink(a.cudasnap, link)
        t = cs("--toggle", "--pid", str(pid), argv0=link)
        check("memory: cuda-checkpoint --toggle refused in NVIDIA's format (exit 1)",
              t.returncode == 1 and t.stderr.startswith(f"Error toggling CUDA in process ID {pid}"), tail(t))
        st = cs.states([pid])[pid]
        ok, got = w.verify([pid])
        check("memory: still running, data verified, no OOM kill",
              st == "running" and ok and cg.oom_kills() == oom0, f"state={st} data={got} oom {oom0}->{cg.oom_kills()}")
        record("memory-refused", need_host=entry.get("memory"), dry_run_s=round(d.wall, 3), refuse_s=round(r.wall, 3))
        cg.set(z["roomy"])
        c = cs("checkpoint", "--pid", str(pid))
        s = cs("restore", "--pid", str(pid))
        ok, got = w.verify([pid])
        check("memory: with room it is checkpointed and restored, data verified",
              c.returncode == 0 and s.returncode == 0 and ok, tail(c) + tail(s))
        record("memory-roomy", checkpoint_s=round(c.wall, 3), restore_s=round(s.wall, 3), oom_kills=cg.oom_kills())
    finally:
        stop_all()
        cg.remove()


def scenario_together(a, cs):
    z, w = sizes(a), Procs(a)
    cg = MemCg("cudasnap-safety-b", z["pair_limit"])
    try:
        p1, p2 = w.workload(z["one"], cg=cg), w.workload(z["one"], cg=cg)
        r = cs("checkpoint", "--pid", str(p1), "--pid", str(p2))
        check("together: two that fit one at a time are refused together (exit 2, 'fewer at once')",
              r.returncode == 2 and "1 of the 2 fit" in r.stderr, tail(r))
        c = cs("checkpoint", "--pid", str(p1))
        s = cs("restore", "--pid", str(p1))
        ok, got = w.verify([p1, p2])
        check("together: one alone goes through; both running with their data",
              c.returncode == 0 and s.returncode == 0 and ok and set(cs.states([p1, p2]).values()) == {"running"},
              tail(c) + tail(s) + str(got))
    finally:
        stop_all()
        cg.remove()


def scenario_ipc(a, cs):
    w = Procs(a)
    try:
        exp, imp = w.ipc_pair()
        r = cs("checkpoint", "--pid", str(exp), "--pid", str(imp))
        check("ipc: the importer is refused before anything changed (exit 2)",
              r.returncode == 2 and f"process {imp}" in r.stderr and "CUDA IPC" in r.stderr, tail(r))
        st = cs.states([exp, imp])
        check("ipc: both still running", set(st.values()) == {"running"}, str(st))
        c = cs("checkpoint", "--pid", str(exp))
        s = cs("restore", "--pid", str(exp))
        ok, got = w.verify([exp, imp])
        check("ipc: the exporter alone is checkpointed and restored; both read the shared data",
              c.returncode == 0 and s.returncode == 0 and ok, tail(c) + tail(s) + str(got))
        record("ipc", refuse_s=round(r.wall, 3), exporter_checkpoint_s=round(c.wall, 3),
               exporter_restore_s=round(s.wall, 3))
    finally:
        stop_all()


def scenario_monitors(a, cs, rounds=5):
    w = Procs(a)
    try:
        pids = [w.workload(1 if not a.fake_app else 0.0625) for _ in range(2)]
        if a.fake_app:
            loop = f"while :; do timeout 0.3 {a.fake_app} --nvml-only >/dev/null 2>&1; sleep 0.1; done"
        else:
            loop = "while :; do nvidia-smi -q >/dev/null 2>&1; sleep 0.1; done"
        mon = subprocess.Popen(["sh", "-c", loop], start_new_session=True)
        procs.append(mon)
        time.sleep(1)
        bad, walls = [], []
        for i in range(rounds):
            c = cs("checkpoint", "--all", "--json")
            s = cs("restore", "--json")
            walls.append((round(c.wall, 3), round(s.wall, 3)))
            taken = [x["comm"] for r in (c, s) for x in (r.obj or {}).get("processes", [])]
            if c.returncode or s.returncode or set(taken) - {"workload", "fakecuda-app"}:
                bad.append((i, c.returncode, s.returncode, taken, tail(c), tail(s)))
        ok, got = w.verify(pids)
        check(f"monitors: {rounds} whole-namespace rounds beside a monitor loop, all clean, no monitor taken",
              not bad and ok and set(cs.states(pids).values()) == {"running"}, f"bad={bad} data={got}")
        record("monitors", rounds_s=walls)
    finally:
        stop_all()


def container_env(a, t, base, way="plugin"):
    env = cb.make_way(t, base, way)
    if a.fake_app:
        env["CUDASNAP_DEV_DIR"] = "/dev"
    return env


def start_container(a, t, base, name, nprocs, limit=None, extra_env=()):
    env = container_env(a, t, os.path.join(base, "way-" + name))
    data = os.path.join(base, "data-" + name)
    os.makedirs(data)
    c = cb.Container(a, env, os.path.join(base, "state"), cb.bundle(a, base, name, nprocs, data, limit, extra_env),
                     name, data)
    rc, err, _ = c.runc("run", "-d", name, stdio=True)
    if rc != 0 and "pivot_root" in err:
        cb.NO_PIVOT = True
        c.runc("delete", "-f", name)
        rc, err, _ = c.runc("run", "-d", name, stdio=True)
    if rc != 0:
        raise RuntimeError(f"runc run {name}: {err}")
    return c, c.host_pids(nprocs)


def dirs(base, name):
    img, work = os.path.join(base, "img-" + name), os.path.join(base, "work-" + name)
    shutil.rmtree(img, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(img)
    os.makedirs(work)
    return img, work


def scenario_containers(a, cs, t, base):
    z = sizes(a)
    a.gib = z["one"]
    c, pids = start_container(a, t, base, "tight", 2, limit=int(z["pair_limit"] * 0.6))
    try:
        for leave in (False, True):
            img, work = dirs(base, "tight")
            args = ["checkpoint", *(["--leave-running"] if leave else []), "--image-path", img, "--work-path", work,
                    "tight"]
            rc, err, secs = c.runc(*args)
            lines = cb.log_lines(os.path.join(work, "dump.log"), ("cudasnap:", "Error"), 8)
            st = cs.states(list(pids.values()))
            ok = c.verify(pids)
            check(f"containers: a memory-limited container's checkpoint{' --leave-running' if leave else ''} is "
                  "refused, every process running with its data",
                  rc != 0 and any("refused" in x and "memory" in x for x in lines) and
                  set(st.values()) == {"running"} and ok, f"rc={rc} {secs:.2f}s {lines[-3:]} states={st}")
    finally:
        c.remove()
    c, pids = start_container(a, t, base, "roomy", 2, limit=int(8 * GIB))
    try:
        img, work = dirs(base, "roomy")
        rc, err, ck = c.runc("checkpoint", "--image-path", img, "--work-path", work, "roomy")
        cb.reap()
        c.runc("delete", "-f", "roomy")
        c.name = "roomyr"
        rrc, err2, rs = c.runc("restore", "-d", "--image-path", img, "--work-path", work, "roomyr", stdio=True)
        after = c.host_pids(2) if rrc == 0 else {}
        ok = bool(after) and c.verify(after)
        check("containers: a container that fits is checkpointed and restored (new pids, data verified)",
              rc == 0 and rrc == 0 and ok, f"checkpoint {ck:.2f}s rc={rc} restore {rs:.2f}s rc={rrc}")
        record("container-fits", procs=2, gib=a.gib, checkpoint_s=round(ck, 3), restore_s=round(rs, 3))
    finally:
        c.remove()


def scenario_killed_criu(a, cs, t, base):
    a.gib = 4 if not a.fake_app else 0.0625
    extra = () if not a.fake_app else ("FAKECUDA_FAULTS=/data/faults",)
    c, pids = start_container(a, t, base, "killed", 2, extra_env=extra)
    try:
        if a.fake_app:
            with open(os.path.join(c.data, "faults"), "w") as f:
                f.write("* checkpoint delay=4000\n")
        img, work = dirs(base, "killed")
        runc = subprocess.Popen([c.env["PATH"].split(":")[0] + "/runc", "--root", c.state, "checkpoint",
                                 "--image-path", img, "--work-path", work, "killed"], cwd=c.bundle, env=c.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        log = os.path.join(work, "dump.log")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("locked in" in x for x in cb.log_lines(log, ("locked in",))):
            time.sleep(0.05)
        time.sleep(0.8 if not a.fake_app else 1.5)  # the checkpoint call is in flight
        killed = []
        for pid in [int(d) for d in os.listdir("/proc") if d.isdigit()]:
            try:
                if open(f"/proc/{pid}/comm").read().strip() == "criu":
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            except OSError:
                pass
        runc.communicate(timeout=120)
        cb.reap()
        time.sleep(3 if not a.fake_app else 4)  # the driver's call completes inside the targets
        if a.fake_app:
            open(os.path.join(c.data, "faults"), "w").close()
        ps = cs("ps", "--json")
        left = [x["pid"] for x in (ps.obj or {}).get("left_behind", [])]
        human = cs("ps").stdout
        st = before = cs.states(list(pids.values()))
        check("killed-criu: ps names every process the killed dump left behind, with the recovery command",
              killed and sorted(left) == sorted(pids.values()) and "LEFT BEHIND" in human and
              "cudasnap restore --pid" in human, f"killed={killed} left={left} states={st}")
        sel = [x for pid in pids.values() for x in ("--pid", str(pid))]
        r = cs("restore", *sel)
        u = cs("unlock", *sel)
        st = cs.states(list(pids.values()))
        ok = c.verify(pids)
        ps2 = cs("ps", "--json")
        check("killed-criu: cudasnap restore (and unlock) recover them; data verified; no record left",
              r.returncode == 0 and u.returncode == 0 and set(st.values()) == {"running"} and ok and
              not (ps2.obj or {}).get("left_behind"), tail(r) + tail(u) + f" states={st}")
        record("killed-criu", states_before_recovery=before, restore_s=round(r.wall, 3))
    finally:
        c.remove()


def arguments(only, extra=()):
    """The options every runner of these checks takes (and extra ones:
    (flag, kwargs) pairs)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudasnap", required=True)
    ap.add_argument("--workload")
    ap.add_argument("--fake-app")
    ap.add_argument("--tools")
    ap.add_argument("--plugin")
    ap.add_argument("--driver-dir")
    ap.add_argument("--only", default=only)
    ap.add_argument("--json")
    for flag, kw in extra:
        ap.add_argument(flag, **kw)
    return ap.parse_args()


def setup(a, prefix):
    """What every runner prepares: the subreaper, the memory controller, a
    base directory, cudasnap, and the container tools when given. Returns
    (cs, tools, base)."""
    a.cudasnap = os.path.abspath(a.cudasnap)
    ctypes.CDLL(None).prctl(cb.PR_SET_CHILD_SUBREAPER, 1)
    ensure_v2_memory_controller()
    base = tempfile.mkdtemp(prefix=prefix)
    os.chmod(base, 0o755)
    # its images take gigabytes of the machine's disk
    atexit.register(shutil.rmtree, base, True)
    state = os.path.join(base, "cs-state")
    os.makedirs(state, mode=0o700)
    t = None
    if a.tools:
        a.tools, a.plugin = os.path.abspath(a.tools), os.path.abspath(a.plugin)
        a.workload = os.path.abspath(a.workload) if a.workload else None
        a.show_log = False
        cb.TOOLS = t = cb.Tools(a)
    return Cs(a, state), t, base


def run_steps(a, steps):
    """Runs the steps --only names, each to its end whatever the others do;
    writes the rows to --json; says "N passed, N failed"."""
    print("date:", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), flush=True)
    for name in a.only.split(","):
        t0 = time.monotonic()
        try:
            steps[name]()
        except Exception as e:  # one broken scenario must not hide the others
            traceback.print_exc()
            check(f"{name}: ran to the end", False, repr(e))
        finally:
            stop_all()
        print(f"  ({name}: {time.monotonic() - t0:.1f} s)", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


def main():
    a = arguments("memory,together,ipc,monitors,containers,killed-criu")
    cs, t, base = setup(a, "safety-")
    steps = {"memory": lambda: scenario_memory(a, cs), "together": lambda: scenario_together(a, cs),
             "ipc": lambda: scenario_ipc(a, cs), "monitors": lambda: scenario_monitors(a, cs),
             "containers": lambda: scenario_containers(a, cs, t, base),
             "killed-criu": lambda: scenario_killed_criu(a, cs, t, base)}
    return run_steps(a, steps)


if __name__ == "__main__":
    sys.exit(main())
