"""The cuda-checkpoint drop-in of two builds side by side on the same
processes: `cuda-checkpoint --toggle --pid P` out (lock + checkpoint) and in
(restore + unlock), each build in turn, the order swapped every round, the
data of every process verified after each restore.

Usage (root, on a GPU machine):
  python3 bench/dropin_bench.py --workload BIN --new CUDASNAP --old CUDASNAP [--procs 2] [--gib 2] [--rounds 3]
Prints a table of medians and the ratio new / old, and "N passed, N failed".
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time


def wait_file(path, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            with open(path) as f:
                return f.read().strip()
        time.sleep(0.05)
    return None


def verify(d, pid):
    path = os.path.join(d, f"{pid}.verify")
    if os.path.exists(path):
        os.unlink(path)
    os.kill(pid, signal.SIGUSR1)
    return wait_file(path, 60) or "no answer"


def toggle(binary, pids):
    """Toggles every process, one call each (as callers of NVIDIA's binary
    do); returns the seconds of all, and whether every call succeeded."""
    t0 = time.monotonic()
    ok = True
    for pid in pids:
        r = subprocess.run([binary, "cuda-checkpoint", "--toggle", "--pid", str(pid)], capture_output=True,
                           text=True, timeout=300)
        ok = ok and r.returncode == 0
        if r.returncode:
            print(f"  {binary} --toggle {pid}: rc={r.returncode} {r.stderr.strip()[-300:]}")
    return time.monotonic() - t0, ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--old", required=True)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--gib", type=float, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="dropin-")
    procs = [subprocess.Popen([a.workload, "--gib", str(a.gib), "--dir", d]) for _ in range(a.procs)]
    pids = [p.pid for p in procs]
    passed = failed = 0
    times = {"new": {"out": [], "in": []}, "old": {"out": [], "in": []}}
    try:
        if not all(wait_file(os.path.join(d, f"{pid}.ready"), 120) for pid in pids):
            print("the workloads did not start")
            return 1
        print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} | processes: {a.procs} | "
              f"GiB each: {a.gib}")
        for rnd in range(a.rounds):
            order = ["new", "old"] if rnd % 2 == 0 else ["old", "new"]
            for way in order:
                binary = a.new if way == "new" else a.old
                out_s, ok_out = toggle(binary, pids)
                in_s, ok_in = toggle(binary, pids)
                data = [verify(d, pid) for pid in pids]
                ok = ok_out and ok_in and all(x.startswith("ok") for x in data)
                passed, failed = passed + ok, failed + (not ok)
                times[way]["out"].append(out_s)
                times[way]["in"].append(in_s)
                print(f"| {rnd + 1} | {way} | {out_s:.3f} s | {in_s:.3f} s | {'ok' if ok else data} |", flush=True)
        print("\n| step | new median | old median | new / old |\n|---|---:|---:|---:|")
        for step, name in (("out", "--toggle out (lock + checkpoint)"), ("in", "--toggle in (restore + unlock)")):
            n, o = statistics.median(times["new"][step]), statistics.median(times["old"][step])
            print(f"| {name} | {n:.3f} s | {o:.3f} s | {n / o:.3f} |")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
