#!/usr/bin/env python3
"""What a checkpoint costs a process's memory cgroup, and what tells a CUDA
IPC importer apart, measured on a real GPU.

  bench/gpu_probe.py --cudasnap PATH --workload PATH --ipc-pair PATH [--gib 1,4,16]

Host memory: each workload runs alone in a fresh cgroup v2 child; the
cgroup's memory.current before, its peak during (memory.peak, reset just
before the checkpoint), after the checkpoint and after the restore, NVML's
per-process used memory, and memory.stat's growth. IPC: the maps and fds of
an exporter, an importer, an importer that closed its mapping, a plain CUDA
process, an NVML-only process, a cuInit-only process and nvidia-smi, and
what the driver answers when each is checkpointed and restored.
Prints one JSON object per measurement.
"""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
procs = []
CG = "/sys/fs/cgroup"


def emit(kind, **kw):
    print(json.dumps({"kind": kind, **kw}), flush=True)


def sh(argv, timeout=120, env=None):
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    p.wall = time.monotonic() - t0
    return p


def start(argv, d, expect=1, cg=None, env=None):
    before = set(glob.glob(os.path.join(d, "*.ready")))
    if cg:
        argv = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *argv]
    p = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    procs.append(p)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        now = set(glob.glob(os.path.join(d, "*.ready"))) - before
        if len(now) >= expect:
            return sorted(int(os.path.basename(f).split(".")[0]) for f in now)
        if p.poll() is not None:
            raise RuntimeError(f"{argv} exited: {p.stderr.read()[-2000:]}")
        time.sleep(0.1)
    raise RuntimeError(f"{argv} not ready")


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
    time.sleep(1)


def verify(d, pids, timeout=60):
    for pid in pids:
        try:
            os.unlink(os.path.join(d, f"{pid}.verify"))
        except FileNotFoundError:
            pass
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    out, deadline = {}, time.monotonic() + timeout
    while time.monotonic() < deadline and len(out) < len(pids):
        for pid in pids:
            f = os.path.join(d, f"{pid}.verify")
            if pid not in out and os.path.exists(f):
                out[pid] = open(f).read().strip()
        time.sleep(0.1)
    return out


def nvml_used():
    p = sh(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
    out = {}
    for line in p.stdout.splitlines():
        try:
            pid, mib = (x.strip() for x in line.split(","))
            out[int(pid)] = int(mib)
        except ValueError:
            pass
    return out


def gpu_view(pid):
    """Device files, shared-memory files and driver libraries of pid, from /proc."""
    maps, fds = [], []
    try:
        for line in open(f"/proc/{pid}/maps"):
            parts = line.split(None, 5)
            path = parts[5].strip() if len(parts) > 5 else ""
            if "nvidia" in path or "/dev/shm" in path or "cuda" in path or path.startswith("/memfd"):
                maps.append(path)
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if "nvidia" in t or "/dev/shm" in t or "anon_inode" in t or "memfd" in t:
                fds.append(t)
    except OSError as e:
        return {"error": str(e)}
    summary = {}
    for m in maps:
        summary["map " + m] = summary.get("map " + m, 0) + 1
    for f in fds:
        summary["fd " + f] = summary.get("fd " + f, 0) + 1
    return summary


def cs(args, cudasnap, state, timeout=300):
    env = dict(os.environ, CUDASNAP_STATE_DIR=state)
    p = sh([cudasnap, *args], timeout=timeout, env=env)
    return {"rc": p.returncode, "wall": round(p.wall, 3), "err": p.stderr[-1500:], "out": p.stdout[-3000:]}


def stat_of(cg):
    out = {}
    for line in open(os.path.join(cg, "memory.stat")):
        k, v = line.split()
        out[k] = int(v)
    return out


def read_int(path):
    with open(path) as f:
        v = f.read().strip()
    return int(v) if v.isdigit() else v


def enable_memory_controller():
    """A child cgroup with the memory controller, under the cgroup v2 root this
    container sees. Moves every process of the root into a leaf first, as the
    kernel requires before a controller is enabled below a cgroup with
    processes (not needed at the real root)."""
    info = {"controllers": open(os.path.join(CG, "cgroup.controllers")).read().strip(),
            "subtree": open(os.path.join(CG, "cgroup.subtree_control")).read().strip()}
    if "memory" not in info["subtree"].split():
        leaf = os.path.join(CG, "probe-init")
        os.makedirs(leaf, exist_ok=True)
        for pid in open(os.path.join(CG, "cgroup.procs")).read().split():
            try:
                with open(os.path.join(leaf, "cgroup.procs"), "w") as f:
                    f.write(pid)
            except OSError:
                pass
        with open(os.path.join(CG, "cgroup.subtree_control"), "w") as f:
            f.write("+memory")
    info["subtree_after"] = open(os.path.join(CG, "cgroup.subtree_control")).read().strip()
    emit("cgroup-setup", **info)


def new_cg(name):
    path = os.path.join(CG, name)
    os.makedirs(path, exist_ok=True)
    return path


def host_memory(args, d, state):
    enable_memory_controller()
    for gib in [float(x) for x in args.gib.split(",")]:
        cg = new_cg(f"probe-{gib:g}")
        pid = start([args.workload, "--gib", str(gib), "--dir", d], d, cg=cg)[0]
        time.sleep(0.5)
        used = nvml_used().get(pid)
        before, st0 = read_int(os.path.join(cg, "memory.current")), stat_of(cg)
        fd = os.open(os.path.join(cg, "memory.peak"), os.O_RDWR)
        try:
            os.write(fd, b"reset\n")
            peak_reset = True
        except OSError:
            peak_reset = False
        plan = dry(args, state, pid)
        samples, stop = [], threading.Event()

        def sample():
            while not stop.is_set():
                samples.append(read_int(os.path.join(cg, "memory.current")))
                time.sleep(0.005)
        th = threading.Thread(target=sample)
        th.start()
        ck = cs(["checkpoint", "--pid", str(pid), "--json"], args.cudasnap, state)
        stop.set()
        th.join()
        after, st1 = read_int(os.path.join(cg, "memory.current")), stat_of(cg)
        peak = int(os.pread(fd, 64, 0).decode().strip())
        os.close(fd)
        rss = [l for l in open(f"/proc/{pid}/status") if l.startswith(("VmRSS", "RssAnon", "RssShmem"))]
        rs = cs(["restore", "--pid", str(pid)], args.cudasnap, state)
        time.sleep(0.3)
        back = read_int(os.path.join(cg, "memory.current"))
        ok = verify(d, [pid])
        grew = {k: st1[k] - st0.get(k, 0) for k in st1 if abs(st1[k] - st0.get(k, 0)) >= (4 << 20)}
        emit("host-memory", gib=gib, dry_run=plan, nvml_used_mib=used, current_before=before, peak=peak,
             peak_reset=peak_reset, sampled_max=max(samples) if samples else None, current_after=after,
             current_after_restore=back, need_mib=round((peak - before) / (1 << 20), 1),
             over_nvml_mib=round((peak - before) / (1 << 20) - (used or 0), 1), stat_growth=grew,
             rss=[r.strip() for r in rss], checkpoint_rc=ck["rc"], checkpoint_wall=ck["wall"],
             restore_rc=rs["rc"], verify=ok)
        stop_all()
        try:
            os.rmdir(cg)
        except OSError as e:
            emit("note", what=f"rmdir {cg}: {e}")


def dry(args, state, pid):
    p = cs(["checkpoint", "--dry-run", "--json", "--pid", str(pid)], args.cudasnap, state)
    try:
        e = json.loads(p["out"])["processes"][0]
        return {"rc": p["rc"], "verdict": e["verdict"], "reasons": [r["code"] for r in e["reasons"]],
                "memory": e.get("memory")}
    except (ValueError, KeyError, IndexError):
        return p


def round_trip(args, state, pid, label, d, check_pids):
    plan = dry(args, state, pid)
    ck = cs(["checkpoint", "--allow-unrestorable", "--pid", str(pid)], args.cudasnap, state, timeout=120)
    view = gpu_view(pid)
    rs = cs(["restore", "--pid", str(pid)], args.cudasnap, state, timeout=120)
    st = cs(["ps", "--json"], args.cudasnap, state)
    try:
        states = {p["pid"]: p["state"] for p in json.loads(st["out"])["processes"]}
    except ValueError:
        states = st
    emit("ipc-round-trip", case=label, pid=pid, dry_run=plan, checkpoint=ck, view_checkpointed=view, restore=rs,
         state_after=states.get(pid) if isinstance(states, dict) else states, verify=verify(d, check_pids))


def ipc(args, state):
    for vmm in (False, True):
        d = tempfile.mkdtemp(prefix="ipc-")
        flag = ["--vmm"] if vmm else []
        mode = "vmm-fd" if vmm else "legacy"
        exp = start([args.ipc_pair, "export", "--dir", d, "--mib", "512", *flag], d)[0]
        emit("ipc-view", mode=mode, role="exporter-alone", pid=exp, view=gpu_view(exp),
             shm=sorted(os.listdir("/dev/shm")))
        imp = start([args.ipc_pair, "import", "--dir", d, *flag], d)[0]
        clo = start([args.ipc_pair, "import", "--dir", d, "--close", *flag], d)[0]
        for role, pid in (("exporter", exp), ("importer", imp), ("importer-closed", clo)):
            emit("ipc-view", mode=mode, role=role, pid=pid, view=gpu_view(pid), nvml_mib=nvml_used().get(pid))
        emit("ipc-shm", mode=mode, shm=sorted(os.listdir("/dev/shm")), pids={"exp": exp, "imp": imp, "clo": clo})
        round_trip(args, state, clo, f"{mode}: importer that closed its mapping", d, [exp, clo])
        round_trip(args, state, exp, f"{mode}: exporter alone, importer running", d, [exp, imp])
        round_trip(args, state, imp, f"{mode}: importer alone", d, [exp, imp])
        stop_all()
    d = tempfile.mkdtemp(prefix="tipc-")
    pids = start([sys.executable, os.path.join(HERE, "..", "tests", "gpu", "torch_ipc.py"), "--dir", d,
                  "--mib", "1024"], d, expect=2)
    roles = {p: open(os.path.join(d, f"{p}.ready")).read().strip() for p in pids}
    for pid in pids:
        emit("ipc-view", mode="torch", role=roles[pid], pid=pid, view=gpu_view(pid), nvml_mib=nvml_used().get(pid))
    emit("ipc-shm", mode="torch", shm=sorted(os.listdir("/dev/shm")), pids=roles)
    exp = [p for p in pids if roles[p] == "exporter"][0]
    imp = [p for p in pids if roles[p] == "importer"][0]
    round_trip(args, state, exp, "torch: exporter alone", d, pids)
    round_trip(args, state, imp, "torch: importer alone", d, pids)
    stop_all()


def bystanders(args, state):
    """NVML-only, cuInit-only and nvidia-smi: what /proc shows of each."""
    d = tempfile.mkdtemp(prefix="nv-")
    nv = start([sys.executable, os.path.join(HERE, "..", "tests", "gpu", "nvml_only.py"), d], d)[0]
    code = ("import ctypes,os,time;c=ctypes.CDLL('libcuda.so.1');print(c.cuInit(0));"
            f"open('{d}/'+str(os.getpid())+'.ready','w').write('init');time.sleep(600)")
    ini = start([sys.executable, "-c", code], d)[0]
    smi = subprocess.Popen(["nvidia-smi", "-q", "-lms", "100"], stdout=subprocess.DEVNULL, start_new_session=True)
    procs.append(smi)
    time.sleep(2)
    for role, pid in (("nvml-only", nv), ("cuinit-only", ini), ("nvidia-smi -lms", smi.pid)):
        libs = sorted({l.split()[-1] for l in open(f"/proc/{pid}/maps") if "libcuda" in l or "libnvidia-ml" in l})
        emit("bystander", role=role, pid=pid, view=gpu_view(pid), libs=libs)
    ps = cs(["ps"], args.cudasnap, state)
    emit("bystander-ps", ps=ps["err"] + ps["out"])
    stop_all()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudasnap", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--ipc-pair", required=True)
    ap.add_argument("--gib", default="1,4,16")
    ap.add_argument("--only", default="bystanders,ipc,memory")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="probe-")
    state = os.path.join(d, "state")
    os.makedirs(state, mode=0o700)
    steps = {"bystanders": lambda: bystanders(args, state), "ipc": lambda: ipc(args, state),
             "memory": lambda: host_memory(args, d, state)}
    for name in args.only.split(","):
        try:
            steps[name]()
        except Exception as e:  # report and go on: one run has to tell everything
            emit("error", step=name, error=repr(e))
        finally:
            stop_all()


if __name__ == "__main__":
    main()
