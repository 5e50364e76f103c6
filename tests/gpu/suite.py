#!/usr/bin/env python3
"""cudasnap on a real NVIDIA GPU: every scenario end to end, data verified.

Usage: tests/gpu/suite.py --cudasnap BUILD/src/cudasnap [--workload PATH] [--only NAME,...]
Builds tests/gpu/workload.cu with nvcc when --workload is not given. Prints
one line per check and ends with "N passed, N failed".
"""
import argparse
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
results = {"passed": 0, "failed": 0}
procs = []


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  [{detail}]" if detail else ""), flush=True)
    return ok


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True, **kw)


class Env:
    def __init__(self, cudasnap, workload):
        self.cudasnap = cudasnap
        self.workload = workload
        self.dir = tempfile.mkdtemp(prefix="cudasnap-gpu-")
        self.state = os.path.join(self.dir, "state")
        os.makedirs(self.state, mode=0o700)

    def cs(self, *args, timeout=300):
        env = dict(os.environ, CUDASNAP_STATE_DIR=self.state)
        t0 = time.monotonic()
        p = subprocess.run([self.cudasnap, *args], capture_output=True, text=True, env=env, timeout=timeout)
        p.wall = time.monotonic() - t0
        return p

    def cs_json(self, *args, timeout=300):
        p = self.cs(*args, "--json", timeout=timeout)
        try:
            p.obj = json.loads(p.stdout)
        except ValueError:
            p.obj = None
        return p

    def start(self, argv, expect_ready):
        before = set(glob.glob(os.path.join(self.dir, "*.ready")))
        p = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(p)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            now = set(glob.glob(os.path.join(self.dir, "*.ready"))) - before
            if len(now) >= expect_ready:
                return p, sorted(int(os.path.basename(f).split(".")[0]) for f in now)
            if p.poll() is not None:
                raise RuntimeError(f"{argv} exited: {p.stderr.read()[-2000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"{argv} not ready in time")

    def workload_proc(self, gib=1, extra=(), expect=1):
        return self.start([self.workload, "--gib", str(gib), "--dir", self.dir, *extra], expect)

    def verify_data(self, pids, timeout=120):
        for pid in pids:
            try:
                os.unlink(os.path.join(self.dir, f"{pid}.verify"))
            except FileNotFoundError:
                pass
            os.kill(pid, signal.SIGUSR1)
        out = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(out) < len(pids):
            for pid in pids:
                f = os.path.join(self.dir, f"{pid}.verify")
                if pid not in out and os.path.exists(f):
                    out[pid] = open(f).read().strip()
            time.sleep(0.1)
        return out


def stop_all():
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    procs.clear()
    time.sleep(1)


def ready_roles(env, pids):
    return {pid: open(os.path.join(env.dir, f"{pid}.ready")).read().strip() for pid in pids}


def data_ok(env, pids, what):
    got = env.verify_data(pids)
    bad = {p: v for p, v in got.items() if not v.startswith("ok")}
    missing = [p for p in pids if p not in got]
    return check(f"{what}: data verified in {len(pids)} processes", not bad and not missing,
                 f"bad={bad} missing={missing}" if bad or missing else "")


def by_pid(obj):
    return {p["pid"]: p for p in obj["processes"]}


def scenario_ps_tree(env):
    """Issue 2 and 4: ps, verify, checkpoint/restore of a mixed namespace."""
    _, w = env.workload_proc(1)
    _, t = env.start([sys.executable, os.path.join(HERE, "torch_tree.py"), "--dir", env.dir, "--mib", "256",
                      "--fork-worker"], 4)
    _, n = env.start([sys.executable, os.path.join(HERE, "nvml_only.py"), env.dir], 1)
    _, f = env.workload_proc(1, ["--fork-child"], 2)
    roles = ready_roles(env, w + t + n + f)
    forked = [p for p, r in roles.items() if r == "forked"]
    cuda = [p for p, r in roles.items() if r != "forked"]
    # A monitor is left alone unless named, and warned about as a leftover.
    taken = [p for p in cuda if roles[p] != "nvml"]
    monitors = [p for p in cuda if roles[p] == "nvml"]
    p = env.cs("ps")
    print(p.stdout, p.stderr, sep="\n")
    j = env.cs_json("ps").obj
    got = by_pid(j)
    check("ps: driver loaded", j["driver"]["loaded"], str(j["driver"]))
    for pid in cuda:
        e = got.get(pid)
        check(f"ps: {pid} ({roles[pid]}) is cuda/running with a restore tid",
              e is not None and e["class"] == "cuda" and e["state"] == "running" and e["restore_tid"],
              str(e))
    for pid in forked:
        e = got.get(pid)
        check(f"ps: {pid} (forked after init) is device-holder", e is not None and e["class"] == "device-holder",
              str(e))
    v = env.cs("verify")
    print(v.stdout)
    check("verify before checkpoint: exit 1 (references held)", v.returncode == 1, str(v.returncode))
    c = env.cs_json("checkpoint", "--all")
    print(c.stderr)
    check("checkpoint of the mixed namespace: exit 0", c.returncode == 0, c.stderr[-500:])
    left = {l["pid"] for l in (c.obj or {}).get("leftovers", [])}
    check("checkpoint warns about exactly the forked children and the monitor", left == set(forked + monitors),
          f"{left} vs {forked + monitors}")
    j = env.cs_json("ps").obj
    got = by_pid(j)
    check("ps after checkpoint: every cuda process checkpointed with 0 fds and 0 maps, the monitor running",
          all(got.get(p, {}).get("state") == "checkpointed" and got[p]["device_fds"] == 0 and
              got[p]["device_maps"] == 0 for p in taken) and
          all(got.get(p, {}).get("state") == "running" for p in monitors), str({p: got.get(p) for p in cuda}))
    print(env.cs("ps").stdout)
    v = env.cs_json("verify")
    print(env.cs("verify").stdout)
    check("verify after checkpoint names only the forked children and the monitor",
          {l["pid"] for l in v.obj["leftovers"]} == set(forked + monitors), str(v.obj["leftovers"][:3]))
    s = env.cs_json("checkpoint", "--all", "--strict")
    check("checkpoint --strict with leftovers: nothing to do (already checkpointed) exit 0",
          s.returncode == 0, s.stderr[-300:])
    r = env.cs_json("restore")
    print(r.stderr)
    check("restore: exit 0", r.returncode == 0, r.stderr[-500:])
    data_ok(env, [p for p in cuda if roles[p] != "nvml"], "mixed namespace after restore")
    stop_all()


def scenario_four(env, gib=2):
    """Issue 3: four CUDA processes and a PyTorch spawn tree."""
    pids = []
    for _ in range(4):
        pids += env.workload_proc(gib)[1]
    _, t = env.start([sys.executable, os.path.join(HERE, "torch_tree.py"), "--dir", env.dir, "--mib", "512"], 3)
    allp = pids + t
    c = env.cs_json("checkpoint", "--all")
    print(c.stderr)
    check(f"checkpoint 4 x {gib} GiB + torch tree: exit 0", c.returncode == 0, c.stderr[-500:])
    if c.obj:
        print(f"  checkpoint wall {c.obj['wall_seconds']:.3f} s, {c.obj['bytes'] / 2**30:.2f} GiB, "
              f"{c.obj['gb_per_s']:.2f} GB/s")
        man = json.load(open(os.path.join(env.state, "manifest.json")))
        check("manifest lists all 7 processes with start times", len(man["processes"]) == 7, str(len(man["processes"])))
        check("manifest mode 0600", oct(os.stat(os.path.join(env.state, "manifest.json")).st_mode & 0o777) == "0o600")
    r = env.cs_json("restore")
    print(r.stderr)
    check("restore: exit 0", r.returncode == 0, r.stderr[-500:])
    if r.obj:
        print(f"  restore wall {r.obj['wall_seconds']:.3f} s, {r.obj['bytes'] / 2**30:.2f} GiB")
    data_ok(env, allp, "4 workloads + torch tree after restore")
    # PID reuse at restore: a manifest whose start time no longer matches is refused.
    c = env.cs_json("checkpoint", "--pid", str(pids[0]))
    man_path = os.path.join(env.state, "manifest.json")
    man = json.load(open(man_path))
    man["processes"][0]["start_time"] += 1
    with open(man_path, "w") as fh:
        json.dump(man, fh)
    r = env.cs_json("restore")
    check("restore refuses a PID whose start time changed (exit != 0, nothing restored)",
          r.returncode != 0 and "reused" in r.stderr, r.stderr[-300:])
    r = env.cs_json("restore", "--ignore-manifest")
    check("restore --ignore-manifest then restores it", r.returncode == 0, r.stderr[-300:])
    data_ok(env, [pids[0]], "after PID-reuse refusal and restore")
    stop_all()


def scenario_lock_timeout(env):
    """Issue 3: a lock that times out behind a 5 s kernel rolls everything back."""
    _, a = env.workload_proc(1)
    _, b = env.workload_proc(1, ["--kernel-ms", "5000"])
    time.sleep(1)
    t0 = time.monotonic()
    c = env.cs_json("checkpoint", "--all", "--timeout", "1000")
    print(c.stderr)
    check("checkpoint behind a 5 s kernel with --timeout 1000: exit 1", c.returncode == 1,
          f"rc={c.returncode} wall={time.monotonic() - t0:.2f}")
    check("the error is CUDA_ERROR_NOT_READY with a --timeout hint",
          "NOT_READY" in c.stderr and "--timeout" in c.stderr, c.stderr[-400:])
    got = by_pid(env.cs_json("ps").obj)
    check("after rollback both processes are running", all(got[p]["state"] == "running" for p in a + b),
          str({p: got[p]["state"] for p in a + b}))
    data_ok(env, a, "after lock-timeout rollback")
    stop_all()


def scenario_errors(env):
    """Issue 3/4: a host PID and a non-CUDA PID are rejected before the driver sees them."""
    c = env.cs("checkpoint", "--pid", "4000000")
    check("--pid of a PID not in this namespace: exit 2 with the nvidia-smi hint",
          c.returncode == 2 and "nvidia-smi" in c.stderr, c.stderr[-300:])
    c = env.cs("checkpoint", "--pid", "1")
    check("--pid 1 (not CUDA, or not readable here): exit 2, says why",
          c.returncode == 2 and ("not a CUDA process" in c.stderr or "cannot read the process" in c.stderr),
          c.stderr[-300:])
    c = env.cs("checkpoint", "--all")
    check("no CUDA process: exit 0, says so", c.returncode == 0 and "no CUDA process" in c.stderr, c.stderr[-200:])


def scenario_cycles(env, rounds=10):
    """Issue 6: repeated checkpoint/restore rounds on one process without drift."""
    _, w = env.workload_proc(1)
    fds = by_pid(env.cs_json("ps").obj)[w[0]]["device_fds"]
    ok = True
    for i in range(rounds):
        c, r = env.cs("checkpoint", "--all"), env.cs("restore")
        ok &= c.returncode == 0 and r.returncode == 0
    after = by_pid(env.cs_json("ps").obj)[w[0]]
    check(f"{rounds} checkpoint/restore rounds: all exit 0, running, fds {fds} -> {after['device_fds']}",
          ok and after["state"] == "running")
    data_ok(env, w, f"after {rounds} rounds")
    stop_all()


def scenario_lock_unlock(env):
    """lock / unlock: pause GPU work without moving memory."""
    _, w = env.workload_proc(1)
    l = env.cs_json("lock", "--all")
    check("lock: exit 0, locked", l.returncode == 0 and by_pid(env.cs_json("ps").obj)[w[0]]["state"] == "locked",
          l.stderr[-300:])
    u = env.cs_json("unlock")
    check("unlock: exit 0, running", u.returncode == 0 and by_pid(env.cs_json("ps").obj)[w[0]]["state"] == "running",
          u.stderr[-300:])
    data_ok(env, w, "after lock/unlock")


def scenario_devmap_identity(env):
    """--device-map on one GPU: identity maps by UUID and by index; a partial map is refused."""
    _, w = env.workload_proc(1)
    uuid = sh("nvidia-smi --query-gpu=uuid --format=csv,noheader").stdout.split()[0]
    for form in (f"{uuid}={uuid}", "0=0"):
        c = env.cs("checkpoint", "--all")
        r = env.cs("restore", "--device-map", form)
        check(f"restore --device-map {form}: exit 0", c.returncode == 0 and r.returncode == 0, r.stderr[-300:])
        data_ok(env, w, f"after identity map {form}")
    c = env.cs("checkpoint", "--all")
    ghost = "GPU-00000000-1111-2222-3333-444444444444"
    r = env.cs_json("restore", "--device-map", f"{uuid}={ghost}")
    check("restore onto an unknown GPU: driver refuses (exit 1), process stays checkpointed",
          r.returncode == 1 and by_pid(env.cs_json("ps").obj)[w[0]]["state"] == "checkpointed", r.stderr[-300:])
    r = env.cs("restore")
    check("then a plain restore succeeds", r.returncode == 0, r.stderr[-300:])
    data_ok(env, w, "after refused map and plain restore")


def scenario_hook(env):
    """gVisor's save/restore hook: save, then restore, with timestamped lines."""
    _, w = env.workload_proc(1)
    _, t = env.start([sys.executable, os.path.join(HERE, "torch_tree.py"), "--dir", env.dir, "--mib", "256"], 3)
    envs = dict(os.environ, CUDASNAP_STATE_DIR=env.state)
    s = subprocess.run([env.cudasnap, "hook"], env=dict(envs, GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE="save"),
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    print(s.stderr)
    lines = [l for l in s.stderr.splitlines() if l]
    check("hook save: exit 0, every line timestamped", s.returncode == 0 and lines and
          all(l[:4].isdigit() and "T" in l[:11] for l in lines), s.stderr[-300:])
    got = by_pid(env.cs_json("ps").obj)
    check("hook save: all checkpointed", all(got[p]["state"] == "checkpointed" for p in w + t))
    r = subprocess.run([env.cudasnap, "hook"], env=dict(envs, GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE="restore"),
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    check("hook restore: exit 0", r.returncode == 0, r.stderr[-300:])
    data_ok(env, w + t, "after hook save/restore")


def link_cuda_checkpoint(env):
    path = os.path.join(env.dir, "cuda-checkpoint")
    if not os.path.exists(path):
        os.symlink(env.cudasnap, path)
    return path


def scenario_compat_criu(env):
    """CRIU's CUDA plugin call sequence, with cudasnap as cuda-checkpoint, on a PyTorch spawn tree."""
    cc = link_cuda_checkpoint(env)
    _, t = env.start([sys.executable, os.path.join(HERE, "torch_tree.py"), "--dir", env.dir, "--mib", "256"], 3)
    h = sh([cc, "-h"])
    check("cuda-checkpoint -h mentions --action", "--action" in h.stdout + h.stderr)
    ok = True
    for p in t:
        tid = sh([cc, "--get-restore-tid", "--pid", str(p)])
        st = sh([cc, "--get-state", "--pid", tid.stdout.strip()])
        lk = sh([cc, "--action", "lock", "--pid", str(p), "--timeout", "10000"])
        ck = sh([cc, "--action", "checkpoint", "--pid", str(p)])
        ok &= tid.returncode == 0 and st.stdout == "running\n" and lk.returncode == 0 and ck.returncode == 0
    check("CRIU dump sequence on 3 processes: all exit 0", ok)
    got = by_pid(env.cs_json("ps").obj)
    check("all checkpointed, no device fds", all(got[p]["state"] == "checkpointed" and got[p]["device_fds"] == 0
                                                for p in t))
    ok = True
    for p in t:
        ok &= sh([cc, "--action", "restore", "--pid", str(p)]).returncode == 0
        ok &= sh([cc, "--action", "unlock", "--pid", str(p)]).returncode == 0
    check("CRIU restore sequence: all exit 0", ok)
    data_ok(env, t, "PyTorch tree after the CRIU sequence")
    e = sh([cc, "--get-state", "--pid", "1"])
    check("get-state of a non-CUDA pid: exit 1, NVIDIA's error line",
          e.returncode == 1 and 'Error getting process state for process ID 1: "initialization error"' in e.stderr,
          e.stderr[-200:])


def scenario_compat_runsc(env):
    """runsc's automation: --get-state on every candidate, then --toggle on all in parallel, twice."""
    cc = link_cuda_checkpoint(env)
    _, t = env.start([sys.executable, os.path.join(HERE, "torch_tree.py"), "--dir", env.dir, "--mib", "256",
                      "--fork-worker"], 4)
    roles = ready_roles(env, t)
    cuda = []
    for p in t:
        if sh([cc, "--get-state", "--pid", str(p)]).returncode == 0:
            cuda.append(p)
    check("get-state keeps the 3 CUDA processes, skips the forked worker",
          sorted(cuda) == sorted(p for p in t if roles[p] != "forked"), f"{cuda} {roles}")
    for want in ("checkpointed", "running"):
        t0 = time.monotonic()
        ps = [subprocess.Popen([cc, "--toggle", "--pid", str(p)], stderr=subprocess.PIPE) for p in cuda]
        rcs = [p.wait() for p in ps]
        got = by_pid(env.cs_json("ps").obj)
        check(f"parallel --toggle -> {want} in {time.monotonic() - t0:.2f} s",
              rcs == [0] * len(cuda) and all(got[p]["state"] == want for p in cuda), str(rcs))
    data_ok(env, cuda, "PyTorch tree after runsc-style toggles")


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


def wait_stopped(pid):
    deadline = time.monotonic() + 5
    while proc_state(pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.01)


def recover(env, pids):
    """Brings every process back to running with cudasnap's own commands."""
    got = by_pid(env.cs_json("ps").obj)
    for p in pids:
        st = got.get(p, {}).get("state")
        if st == "checkpointed":
            env.cs("restore", "--pid", str(p))
        elif st == "locked":
            env.cs("unlock", "--pid", str(p))
    got = by_pid(env.cs_json("ps").obj)
    return {p: got.get(p, {}).get("state") for p in pids}


def scenario_stopped(env, gib=4):
    """Issue 11: three CUDA processes, one stopped."""
    pids = [env.workload_proc(gib)[1][0] for _ in range(3)]
    a, b, c = pids
    try:
        os.kill(a, signal.SIGSTOP)
        wait_stopped(a)
        r = env.cs("ps")
        print(r.stdout)
        row = [line for line in r.stdout.splitlines() if line.startswith(str(a))]
        check(f"ps with one stopped: exit 0 in {r.wall:.3f} s (< 1 s), shows it stopped",
              r.returncode == 0 and r.wall < 1 and row and "stopped" in row[0], r.stderr[-300:])
        v = env.cs("verify")
        check(f"verify with one stopped ends in {v.wall:.3f} s", v.wall < 5 and v.returncode in (0, 1))
        ck = env.cs_json("checkpoint", "--pid", str(b), "--pid", str(c))
        check(f"checkpoint of the two others: exit 0 in {ck.wall:.3f} s", ck.returncode == 0, ck.stderr[-400:])
        rs = env.cs_json("restore", "--pid", str(b), "--pid", str(c))
        check(f"restore of the two others: exit 0 in {rs.wall:.3f} s", rs.returncode == 0, rs.stderr[-400:])
        al = env.cs_json("checkpoint", "--all")
        print(al.stderr)
        check(f"checkpoint of all refused in {al.wall:.3f} s, exit 1, names {a} and kill -CONT",
              al.returncode == 1 and al.wall < 1 and f"process {a}" in al.stderr and "kill -CONT" in al.stderr
              and (al.obj or {}).get("outcome") == "refused", al.stderr[-400:])
        got = by_pid(env.cs_json("ps").obj)
        check("nothing changed by the refusal", got[b]["state"] == got[c]["state"] == "running")
        os.kill(a, signal.SIGCONT)
        data_ok(env, pids, "three after the stopped-process checks")

        # SIGTERM while a checkpoint is blocked on a process stopped in the middle of it.
        p = subprocess.Popen([env.cudasnap, "checkpoint", "--all"], env=dict(os.environ, CUDASNAP_STATE_DIR=env.state),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.4)
        os.kill(a, signal.SIGSTOP)
        time.sleep(1.2)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        wall = time.monotonic() - t0
        print(err)
        check(f"SIGTERM on a blocked checkpoint: exit {p.returncode} after {wall:.3f} s (< 5 s)",
              wall < 5 and p.returncode != 0, err[-300:])
        os.kill(a, signal.SIGCONT)
        time.sleep(8)
        states = recover(env, pids)
        check(f"all running after SIGCONT and recovery ({states})", set(states.values()) == {"running"})
        data_ok(env, pids, "after SIGTERM, SIGCONT and recovery")

        # A deadline that expires: a 1 s step timeout on a checkpoint of several GiB.
        dl = env.cs_json("checkpoint", "--pid", str(a), "--step-timeout", "1")
        print(dl.stderr)
        check(f"--step-timeout 1: exit {dl.returncode} after {dl.wall:.3f} s, process abandoned with a recovery line",
              dl.returncode == 3 and dl.wall < 4 and "cudasnap restore --pid" in dl.stderr, dl.stderr[-300:])
        time.sleep(10)
        states = recover(env, [a])
        check(f"the abandoned checkpoint completed in the target; recovered ({states})", states[a] == "running")
        data_ok(env, pids, "after the expired deadline and recovery")

        # Progress on a pipe: a plain line every 5 s and a stall named.
        big = env.workload_proc(24)[1][0]
        pr = env.cs("checkpoint", "--pid", str(big))
        lines = [x for x in pr.stderr.splitlines() if "processes done" in x]
        print("\n".join(lines[:4]))
        check(f"24 GiB checkpoint in {pr.wall:.1f} s: exit 0", pr.returncode == 0, pr.stderr[-300:])
        rr = env.cs("restore", "--pid", str(big))
        print("\n".join(x for x in rr.stderr.splitlines() if "processes done" in x or "restore" in x))
        check(f"24 GiB restore in {rr.wall:.1f} s: exit 0", rr.returncode == 0, rr.stderr[-300:])
        data_ok(env, [big], "24 GiB after progress-watched checkpoint and restore")
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def find_nvidia_cuda_checkpoint():
    for path in [shutil.which("cuda-checkpoint") or ""] + sorted(glob.glob("/usr/local/cuda*/bin/cuda-checkpoint")) + \
            sorted(glob.glob("/usr/bin/cuda-checkpoint")):
        if path and os.path.isfile(path) and not os.path.islink(path):
            return path
    return None


def scenario_criu_forked(env):
    """Issue 11: CRIU 4.2 dumping a tree with a forked child fails as fast with the drop-in as with NVIDIA's."""
    criu = os.environ.get("CUDASNAP_TEST_CRIU", "")
    if not criu or not os.path.exists(criu):
        check("CRIU available (CUDASNAP_TEST_CRIU)", False, criu)
        return
    plugins = os.path.join(os.path.dirname(os.path.dirname(criu)), "plugins")
    nv = find_nvidia_cuda_checkpoint()
    print("NVIDIA cuda-checkpoint:", nv)
    ways = [("cudasnap drop-in", env.cudasnap)] + ([("NVIDIA binary", nv)] if nv else [])
    for name, binary in ways:
        bindir = tempfile.mkdtemp(prefix="cc-")
        os.symlink(binary, os.path.join(bindir, "cuda-checkpoint"))
        proc, pids = env.workload_proc(1, ["--fork-child"], expect=2)
        roles = ready_roles(env, pids)
        parent = [p for p in pids if roles[p] == "cuda"]
        child = [p for p in pids if roles[p] == "forked"]
        root = proc.pid
        tid = sh([binary, "--get-restore-tid", "--pid", str(child[0])]) if child else None
        if tid:
            print(f"  {name}: --get-restore-tid on the forked child: exit {tid.returncode}, "
                  f"{(tid.stdout + tid.stderr).strip()[:200]}")
        images = tempfile.mkdtemp(prefix="criu-img-")
        t0 = time.monotonic()
        d = subprocess.run([criu, "dump", "-t", str(root), "-D", images, "-L", plugins, "-v4", "-o", "dump.log"],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PATH=bindir + ":" + os.environ["PATH"]))
        wall = time.monotonic() - t0
        log = open(os.path.join(images, "dump.log"), errors="replace").read()
        err = [x for x in log.splitlines() if "Error" in x or "cuda" in x.lower()][-6:]
        print(f"  {name}: criu dump exit {d.returncode} in {wall:.2f} s")
        print("   " + "\n   ".join(err))
        check(f"CRIU dump of a tree with a forked child, {name}: fails in {wall:.2f} s (< 6 s)",
              d.returncode != 0 and wall < 6)
        states = recover(env, parent)
        check(f"{name}: the CUDA parent runs after the failed dump ({states})",
              all(v == "running" for v in states.values()))
        stop_all()


def describe(env):
    smi = sh("nvidia-smi --query-gpu=name,driver_version,persistence_mode,memory.total --format=csv,noheader")
    print("GPU:", smi.stdout.strip())
    print("nvcc:", sh("nvcc --version | tail -1").stdout.strip())
    print("kernel:", sh("uname -r").stdout.strip())
    d = env.cs("doctor")
    print(d.stdout, d.stderr)
    dj = env.cs_json("doctor").obj or {}
    print("gVisor:", (dj.get("environment") or {}).get("gvisor"))
    check("doctor runs and reports (exit 0 or 1)", d.returncode in (0, 1), str(d.returncode))


# A monitor that a program linked with libcuda and NVML would be: libcuda
# first, then NVML and nvmlInit_v2, then it exits (argv[1]: seconds between).
LATE_MONITOR = r"""
import ctypes, sys, time
ctypes.CDLL("libcuda.so.1")
time.sleep(float(sys.argv[1]))
assert ctypes.CDLL("libnvidia-ml.so.1").nvmlInit_v2() == 0
time.sleep(float(sys.argv[1]))
"""


def scenario_monitor_churn(env, rounds=10):
    """Monitors that come and go beside whole-namespace checkpoints: nvidia-smi
    in a loop, and processes that map libcuda before NVML and initialize NVML
    while the selection runs. Only the workload is ever taken."""
    _, w = env.workload_proc(1)
    loops = [subprocess.Popen(["sh", "-c", 'while :; do nvidia-smi >/dev/null 2>&1; done'], start_new_session=True)]
    for delay in ("0.01", "0.05", "0.2"):
        loops.append(subprocess.Popen(["sh", "-c", 'while :; do "$0" -c "$1" "$2"; done', sys.executable,
                                       LATE_MONITOR, delay], start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    procs.extend(loops)
    time.sleep(1)
    taken, failed = set(), []
    for i in range(rounds):
        for cmd in (("checkpoint", "--all"), ("restore",)):
            r = env.cs_json(*cmd)
            got = {p["pid"] for p in (r.obj or {}).get("processes", []) if not p.get("vanished")}
            taken |= got - set(w)
            if r.returncode != 0 or not set(w) <= got:
                failed.append(f"round {i} {cmd[0]}: rc={r.returncode} {r.stderr[-300:]}")
    check(f"monitor churn: {rounds} checkpoint/restore rounds exit 0 with the workload", not failed,
          "; ".join(failed[:2]))
    check("monitor churn: no monitor was ever checkpointed or restored", not taken, str(sorted(taken)))
    data_ok(env, w, "monitor churn")
    stop_all()


SCENARIOS = {
    "errors": scenario_errors,
    "ps_tree": scenario_ps_tree,
    "four": scenario_four,
    "lock_timeout": scenario_lock_timeout,
    "cycles": scenario_cycles,
    "lock_unlock": scenario_lock_unlock,
    "devmap_identity": scenario_devmap_identity,
    "hook": scenario_hook,
    "compat_criu": scenario_compat_criu,
    "compat_runsc": scenario_compat_runsc,
    "stopped": scenario_stopped,
    "criu_forked": scenario_criu_forked,
    "monitor_churn": scenario_monitor_churn,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudasnap", required=True)
    ap.add_argument("--workload")
    ap.add_argument("--only", default=",".join(SCENARIOS))
    args = ap.parse_args()
    workload = args.workload
    if not workload:
        workload = os.path.join(tempfile.mkdtemp(), "workload")
        b = sh(["nvcc", "-O2", "-arch=sm_90", "-o", workload, os.path.join(HERE, "workload.cu")])
        if b.returncode:
            print(b.stderr)
            return 2
    # Killed trees must not leave zombies that keep their PIDs (PID 1 may not reap).
    ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    env = Env(os.path.abspath(args.cudasnap), workload)
    describe(env)
    for name in args.only.split(","):
        print(f"== {name}", flush=True)
        t0 = time.monotonic()
        try:
            SCENARIOS[name](env)
        except Exception as e:  # a broken scenario is a failure, not a crash of the suite
            check(f"{name} ran to the end", False, repr(e))
        finally:
            stop_all()
        print(f"== {name}: {time.monotonic() - t0:.1f} s", flush=True)
    shutil.rmtree(env.dir, ignore_errors=True)
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
