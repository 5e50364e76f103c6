#!/usr/bin/env python3
"""Checkpoint + restore of N CUDA processes x G GiB on a real GPU, side by side:
cudasnap (concurrent) vs the same driver calls one process after another
(cudasnap --sequential), in one run. Also compares cudasnap's wall time with
the slowest single process's own driver time.

Usage: bench/gpu_txn.py --cudasnap BUILD/src/cudasnap --workload PATH [--procs 4] [--gib 4] [--rounds 1]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
import suite  # noqa: E402


def cycle(env, extra):
    c = env.cs_json("checkpoint", *extra)
    r = env.cs_json("restore", *extra)
    if c.returncode or r.returncode:
        raise SystemExit(f"failed: {c.stderr[-500:]} {r.stderr[-500:]}")
    slow_c = max(p["seconds"].get("lock", 0) + p["seconds"].get("checkpoint", 0) for p in c.obj["processes"])
    slow_r = max(p["seconds"].get("restore", 0) + p["seconds"].get("unlock", 0) for p in r.obj["processes"])
    return c.obj["wall_seconds"], r.obj["wall_seconds"], slow_c, slow_r, c.obj["bytes"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudasnap", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--gib", type=float, default=4)
    args = ap.parse_args()
    env = suite.Env(os.path.abspath(args.cudasnap), args.workload)
    pids = []
    for _ in range(args.procs):
        pids += env.workload_proc(args.gib)[1]
    par = cycle(env, [])
    seq = cycle(env, ["--sequential"])
    got = env.verify_data(pids)
    suite.stop_all()
    smi = subprocess.run("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader", shell=True,
                         capture_output=True, text=True).stdout.strip()
    print(f"\n{args.procs} x {args.gib:g} GiB, {datetime.date.today()}, {smi}")
    print(f"{'':28}{'checkpoint s':>14}{'restore s':>12}{'total s':>10}")
    print(f"{'cudasnap (concurrent)':28}{par[0]:14.3f}{par[1]:12.3f}{par[0] + par[1]:10.3f}")
    print(f"{'one after another':28}{seq[0]:14.3f}{seq[1]:12.3f}{seq[0] + seq[1]:10.3f}")
    print(f"{'slowest process, own calls':28}{par[2]:14.3f}{par[3]:12.3f}{par[2] + par[3]:10.3f}")
    print(f"GiB moved per checkpoint: {par[4] / 2**30:.2f}; checkpoint {par[4] / par[0] / 1e9:.2f} GB/s, "
          f"restore {par[4] / par[1] / 1e9:.2f} GB/s")
    print(f"speed-up over one after another: {(seq[0] + seq[1]) / (par[0] + par[1]):.2f}x "
          f"(checkpoint {seq[0] / par[0]:.2f}x, restore {seq[1] / par[1]:.2f}x)")
    print(f"cudasnap wall / slowest process's driver time: {(par[0] + par[1]) / (par[2] + par[3]):.3f}")
    print("data after both cycles:", "ok" if all(v.startswith("ok") for v in got.values()) and
          len(got) == len(pids) else got)


if __name__ == "__main__":
    main()
