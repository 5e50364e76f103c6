#!/usr/bin/env python3
"""What a restore needs on the GPU, measured on a real GPU.

  bench/gpu_restore_probe.py --cudasnap PATH --workload PATH [--gib 1,4,16] [--edge-gib 2] [--edges 0,128,512]

Footprint: for each size, a workload process alone on the GPU; NVML's figure
for it, the GPU's used memory before the checkpoint, after it and after the
restore, what the checkpoint moved (cudasnap's bytes: the growth of its
resident memory) and its VmRSS after the checkpoint, and the peak of the
GPU's used memory during the restore, sampled every millisecond or so.

Edge: a process of --edge-gib GiB is checkpointed, a filler process takes
the GPU's memory until only what the checkpoint moved plus EDGE MiB is free,
and the restore is tried once (a restore that runs out of GPU memory destroys
the process's state, so every try uses a fresh process). Says for each EDGE
whether the restore went through.

Prints one JSON object per measurement.
"""
import argparse
import glob
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

import pynvml

procs = []


def emit(kind, **kw):
    print(json.dumps({"kind": kind, **kw}), flush=True)


def start(argv, d):
    before = set(glob.glob(os.path.join(d, "*.ready")))
    p = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs.append(p)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        now = set(glob.glob(os.path.join(d, "*.ready"))) - before
        if now:
            return p, int(os.path.basename(sorted(now)[0]).split(".")[0])
        if p.poll() is not None:
            raise RuntimeError(f"{argv} exited: {p.stderr.read()[-2000:]}")
        time.sleep(0.05)
    raise RuntimeError(f"{argv} not ready")


def stop(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def cs(cudasnap, *args):
    r = subprocess.run([cudasnap, *args, "--json"], capture_output=True, text=True, timeout=600)
    try:
        out = json.loads(r.stdout)
    except ValueError:
        out = {}
    return r.returncode, out, r.stderr[-1500:]


def gpu():
    return pynvml.nvmlDeviceGetHandleByIndex(0)


def used():
    return pynvml.nvmlDeviceGetMemoryInfo(gpu()).used


def free():
    return pynvml.nvmlDeviceGetMemoryInfo(gpu()).free


def nvml_of(pid):
    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu()):
        if p.pid == pid:
            return p.usedGpuMemory
    return None


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


class Sampler(threading.Thread):
    """The peak of the GPU's used memory while it runs."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = 0
        self.samples = 0
        self.done = threading.Event()

    def run(self):
        h = gpu()
        while not self.done.is_set():
            u = pynvml.nvmlDeviceGetMemoryInfo(h).used
            self.peak = max(self.peak, u)
            self.samples += 1

    def stop(self):
        self.done.set()
        self.join()
        return self.peak


def verify(d, pid):
    path = os.path.join(d, f"{pid}.verify")
    if os.path.exists(path):
        os.unlink(path)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return open(path).read().strip()
        time.sleep(0.05)
    return "no answer"


def footprint(a, gib, d):
    p, pid = start([a.workload, "--gib", str(gib), "--dir", d], d)
    time.sleep(0.5)
    before = used()
    mine = nvml_of(pid)
    rc, ck, err = cs(a.cudasnap, "checkpoint", "--pid", str(pid))
    moved = ck.get("bytes")
    after_ckpt = used()
    rss_ckpt = rss(pid)
    s = Sampler()
    s.start()
    t0 = time.monotonic()
    rc2, rs, err2 = cs(a.cudasnap, "restore", "--pid", str(pid))
    wall = time.monotonic() - t0
    peak = s.stop()
    after = used()
    emit("footprint", gib=gib, nvml_process=mine, used_before=before, used_after_checkpoint=after_ckpt,
         moved=moved, vmrss_checkpointed=rss_ckpt, checkpoint_rc=rc, restore_rc=rc2, restore_wall=round(wall, 3),
         restore_peak_used=peak, used_after_restore=after, samples=s.samples,
         peak_over_checkpointed=peak - after_ckpt, settled_over_checkpointed=after - after_ckpt,
         peak_over_moved=(peak - after_ckpt - moved) if moved else None, verify=verify(d, pid),
         errors=(err if rc else "") + (err2 if rc2 else ""))
    stop(p)


FILLER = r"""
import sys, time, torch
target = int(sys.argv[1])
torch.cuda.init()
held = []
def free():
    return torch.cuda.mem_get_info()[0]
for chunk in (1 << 30, 64 << 20, 2 << 20):
    while free() - chunk >= target:
        held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
print(free(), flush=True)
sys.stdin.read()
"""


def edge(a, gib, edge_mib, d):
    p, pid = start([a.workload, "--gib", str(gib), "--dir", d], d)
    time.sleep(0.5)
    rc, ck, err = cs(a.cudasnap, "checkpoint", "--pid", str(pid))
    moved = ck.get("bytes") or 0
    target = moved + edge_mib * (1 << 20)
    f = subprocess.Popen(["python3", "-c", FILLER, str(target)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, start_new_session=True)
    procs.append(f)
    left = int(f.stdout.readline() or 0)
    nv_free = free()
    rc2, rs, err2 = cs(a.cudasnap, "restore", "--pid", str(pid))
    stop(f)
    time.sleep(0.5)
    again = None
    if rc2 != 0:
        rc3, _, err3 = cs(a.cudasnap, "restore", "--pid", str(pid))
        again = {"rc": rc3, "error": err3[-400:]}
    emit("edge", gib=gib, edge_mib=edge_mib, moved=moved, filler_left=left, nvml_free=nv_free,
         free_over_moved_mib=round((nv_free - moved) / (1 << 20), 1), restore_rc=rc2,
         error=err2[-600:] if rc2 else "", retry_after_filler_left=again,
         verify=verify(d, pid) if rc2 == 0 else None)
    stop(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudasnap", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--gib", default="1,4,16")
    ap.add_argument("--edge-gib", type=float, default=2)
    ap.add_argument("--edges", default="0,128,512")
    a = ap.parse_args()
    pynvml.nvmlInit()
    emit("machine", gpu=pynvml.nvmlDeviceGetName(gpu()), driver=pynvml.nvmlSystemGetDriverVersion(),
         total=pynvml.nvmlDeviceGetMemoryInfo(gpu()).total, when=time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                              time.gmtime()))
    d = tempfile.mkdtemp(prefix="rprobe.")
    try:
        for g in [float(x) for x in a.gib.split(",") if x]:
            footprint(a, g, d)
        for e in [int(x) for x in a.edges.split(",") if x]:
            edge(a, a.edge_gib, e, d)
    finally:
        for p in procs:
            stop(p)


if __name__ == "__main__":
    main()
