#!/usr/bin/env python3
"""Checkpoint and restore on a real GPU, every way side by side, in one run.

For each shape (1 x 16 GiB, 4 x 4 GiB, 8 x 2 GiB): cudasnap (concurrent);
the same driver calls one process after another (cudasnap --sequential, the
order of CRIU's plugin); one `cuda-checkpoint --toggle` process per target,
all at once (runsc's and Modal's way, through cudasnap's drop-in); plus the
copy ceilings of the machine, measured in the same run.

Usage: bench/gpu_bench.py --cudasnap BUILD/src/cudasnap --workload PATH --ceiling PATH [--shapes 1x16,4x4,8x2]
"""
import argparse
import datetime
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
import suite  # noqa: E402


def cudasnap_cycle(env, extra):
    c = env.cs_json("checkpoint", *extra)
    r = env.cs_json("restore", *extra)
    if c.returncode or r.returncode:
        raise SystemExit(f"failed: {c.stderr[-500:]} {r.stderr[-500:]}")
    slow_c = max(p["seconds"].get("lock", 0) + p["seconds"].get("checkpoint", 0) for p in c.obj["processes"])
    slow_r = max(p["seconds"].get("restore", 0) + p["seconds"].get("unlock", 0) for p in r.obj["processes"])
    return c.obj["wall_seconds"], r.obj["wall_seconds"], c.obj["bytes"], slow_c, slow_r


def toggle_all(env, pids):
    t0 = time.monotonic()
    ps = [subprocess.Popen([env.cudasnap, "cuda-checkpoint", "--toggle", "--pid", str(p)],
                           stderr=subprocess.PIPE, text=True) for p in pids]
    errs = [(p.wait(), p.stderr.read()) for p in ps]
    wall = time.monotonic() - t0
    bad = [e for e in errs if e[0]]
    if bad:
        raise SystemExit(f"toggle failed: {bad[:2]}")
    return wall


def shape(env, procs, gib):
    pids = []
    for _ in range(procs):
        pids += env.workload_proc(gib)[1]
    par = cudasnap_cycle(env, [])
    seq = cudasnap_cycle(env, ["--sequential"])
    tog = (toggle_all(env, pids), toggle_all(env, pids))
    got = env.verify_data(pids)
    ok = len(got) == len(pids) and all(v.startswith("ok") for v in got.values())
    suite.stop_all()
    return {"par": par, "seq": seq, "tog": tog, "ok": ok, "gib": procs * gib}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudasnap", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--ceiling", required=True)
    ap.add_argument("--shapes", default="1x16,4x4,8x2")
    args = ap.parse_args()
    ceil = subprocess.run([args.ceiling, "4"], capture_output=True, text=True).stdout.split()
    c = {k: float(v) for k, v in (kv.split("=") for kv in ceil[1:]) if k != "bytes"}
    env = suite.Env(os.path.abspath(args.cudasnap), args.workload)
    smi = subprocess.run("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader", shell=True,
                         capture_output=True, text=True).stdout.strip()
    print(f"\n{datetime.date.today()}, {smi}")
    print(f"copy ceilings GB/s: pinned D2H {c['pinned_d2h']:.1f}, H2D {c['pinned_h2d']:.1f}; "
          f"pageable D2H {c['pageable_d2h']:.1f}, H2D {c['pageable_h2d']:.1f}")
    print(f"| shape | way | checkpoint s | restore s | ckpt GB/s | restore GB/s | ckpt / pageable D2H | "
          f"restore / pageable H2D |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for s in args.shapes.split(","):
        n, g = s.split("x")
        res = shape(env, int(n), float(g))
        b = res["gib"] * 2**30
        for way, (ck, rs) in (("cudasnap", res["par"][:2]), ("one after another", res["seq"][:2]),
                              ("cuda-checkpoint --toggle x N at once", res["tog"])):
            print(f"| {s} GiB | {way} | {ck:.3f} | {rs:.3f} | {b / ck / 1e9:.2f} | {b / rs / 1e9:.2f} | "
                  f"{b / ck / 1e9 / c['pageable_d2h']:.2f} | {b / rs / 1e9 / c['pageable_h2d']:.2f} |")
        par, seq = res["par"], res["seq"]
        print(f"| {s} GiB | ratios | speed-up vs one after another {(seq[0] + seq[1]) / (par[0] + par[1]):.2f}x; "
              f"cudasnap / slowest process's own driver time {(par[0] + par[1]) / (par[3] + par[4]):.3f}; "
              f"data {'ok' if res['ok'] else 'CORRUPT'} | | | | | | |")


if __name__ == "__main__":
    main()
