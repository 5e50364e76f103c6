#!/usr/bin/env python3
"""Checkpoint and restore on a real GPU, every way side by side, in one run.

For each shape (1 x 16 GiB, 4 x 4 GiB, 8 x 2 GiB): cudasnap (concurrent);
the same driver calls one process after another (cudasnap --sequential, the
order of CRIU's plugin); one `cuda-checkpoint --toggle` process per target,
all at once (runsc's and Modal's way, through cudasnap's drop-in); plus the
copy ceilings of the machine, measured in the same run.

With --baseline BIN (cudasnap built from another commit), both binaries
checkpoint and restore the same processes in turns, --rounds times, the
order swapped every round; the medians and their ratio tell what a change
costs, measured side by side.

Usage: bench/gpu_bench.py --cudasnap BUILD/src/cudasnap --workload PATH --ceiling PATH [--shapes 1x16,4x4,8x2]
       bench/gpu_bench.py --cudasnap BIN --baseline OLD_BIN --workload PATH [--shapes 4x4] [--rounds 5]
"""
import argparse
import copy
import datetime
import statistics
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
import suite  # noqa: E402


def select(pids):
    """The processes by --pid: every build, old or new, takes that."""
    return [x for p in pids for x in ("--pid", str(p))]


def cudasnap_cycle(env, pids, extra):
    c = env.cs_json("checkpoint", *select(pids), *extra)
    r = env.cs_json("restore", *select(pids), *extra)
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
    par = cudasnap_cycle(env, pids, [])
    seq = cudasnap_cycle(env, pids, ["--sequential"])
    tog = (toggle_all(env, pids), toggle_all(env, pids))
    got = env.verify_data(pids)
    ok = len(got) == len(pids) and all(v.startswith("ok") for v in got.values())
    suite.stop_all()
    return {"par": par, "seq": seq, "tog": tog, "ok": ok, "gib": procs * gib}


def versus(env, baseline, procs, gib, rounds):
    """This build and the baseline in turns on the same processes: the
    whole command's wall time, and what it spends beside the slowest
    process's own driver calls (discovery, checks, records)."""
    pids = []
    for _ in range(procs):
        pids += env.workload_proc(gib)[1]
    old = copy.copy(env)
    old.cudasnap = baseline
    got = {"new": [], "old": []}
    for r in range(rounds):
        order = (("new", env), ("old", old)) if r % 2 == 0 else (("old", old), ("new", env))
        for name, e in order:
            got[name].append(cudasnap_cycle(e, pids, []))
    dry = [env.cs("checkpoint", *select(pids), "--dry-run").wall for _ in range(rounds)]
    data = env.verify_data(pids)
    ok = len(data) == len(pids) and all(v.startswith("ok") for v in data.values())
    suite.stop_all()

    def med(k, i, j=None):
        return statistics.median(c[i] - (c[j] if j is not None else 0) for c in got[k])
    print(f"| {procs}x{gib:g} GiB | {rounds} | {med('new', 0):.3f} | {med('old', 0):.3f} | "
          f"{med('new', 0) / med('old', 0):.3f} | {med('new', 1):.3f} | {med('old', 1):.3f} | "
          f"{med('new', 1) / med('old', 1):.3f} | {'ok' if ok else 'CORRUPT'} |", flush=True)
    print(f"| beside the driver | | {med('new', 0, 3):.3f} | {med('old', 0, 3):.3f} | | {med('new', 1, 4):.3f} | "
          f"{med('old', 1, 4):.3f} | | checkpoint --dry-run median {statistics.median(dry):.3f} s |", flush=True)
    return {"shape": f"{procs}x{gib:g}", "rounds": got, "dry_run": dry, "data_ok": ok}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudasnap", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--ceiling")
    ap.add_argument("--shapes", default="1x16,4x4,8x2")
    ap.add_argument("--baseline", help="cudasnap built from another commit, run in turns with --cudasnap")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.baseline:
        env = suite.Env(os.path.abspath(args.cudasnap), args.workload)
        print(f"\n{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, medians of whole-command wall "
              f"seconds, this build (new) and {args.baseline} (old) in turns")
        print("| shape | rounds | checkpoint new | old | new / old | restore new | old | new / old | data |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for s in args.shapes.split(","):
            n, g = s.split("x")
            versus(env, os.path.abspath(args.baseline), int(n), float(g), args.rounds)
        return
    if not args.ceiling:
        ap.error("--ceiling is needed unless --baseline is given")
    ceil = subprocess.run([args.ceiling, "4"], capture_output=True, text=True).stdout.split()
    c = {k: float(v) for k, v in (kv.split("=") for kv in ceil[1:]) if k != "bytes"}
    env = suite.Env(os.path.abspath(args.cudasnap), args.workload)
    smi = subprocess.run("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader", shell=True,
                         capture_output=True, text=True).stdout.strip()
    print(f"\n{datetime.date.today()}, {smi}")
    print(f"copy ceilings GB/s: pinned D2H {c['pinned_d2h']:.1f}, H2D {c['pinned_h2d']:.1f}; "
          f"pageable D2H {c['pageable_d2h']:.1f}, H2D {c['pageable_h2d']:.1f}")
    print("| shape | way | checkpoint s | restore s | ckpt GB/s | restore GB/s | ckpt / pageable D2H | "
          "restore / pageable H2D |")
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
