"""criu dump + criu restore of GPU process trees, every way side by side in
one run, data verified after each restore:

  plugin      cudasnap_plugin.so alone in CRIU's plugin directory
  cuda_plugin CRIU 4.2's own CUDA plugin, calling cudasnap's cuda-checkpoint drop-in
  nvidia      CRIU 4.2's own CUDA plugin, calling NVIDIA's cuda-checkpoint (when installed)
  script      docs/criu.md's action script (cudasnap checkpoint --strict --tree / restore)

Trees: (a) bash + 4 CUDA programs of 2 GiB, (b) a PyTorch spawn tree (parent + 2
children), (c) a PyTorch parent with a forked DataLoader-style worker (cannot be
dumped: every way must fail, and how fast and in which state it leaves the
processes is what is compared).

Usage (as root, on a GPU machine): python3 bench/criu_bench.py --cudasnap BIN
    --plugin cudasnap_plugin.so --criu DIST   (DIST: bin/criu and plugins/cuda_plugin.so)
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
import suite  # noqa: E402  (Env, data checks, the workload build)

SCRIPT = """#!/bin/sh
case "${CRTOOLS_SCRIPT_ACTION:-}" in
pre-dump) exec cudasnap checkpoint --strict --tree "$CKPT_ROOT_PID" ;;
post-resume) exec cudasnap restore --ignore-manifest --tree "$CRTOOLS_INIT_PID" ;;
esac
exit 0
"""


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class Way:
    def __init__(self, name, plugindir, bindir, script=None):
        self.name, self.plugindir, self.bindir, self.script = name, plugindir, bindir, script


def make_ways(args, base):
    ways = []
    def d(name):
        p = os.path.join(base, name)
        os.makedirs(p)
        return p
    p = d("plugin")
    shutil.copy(args.plugin, p)
    ways.append(Way("plugin", p, d("plugin-bin")))
    cp = d("cuda_plugin")
    shutil.copy(os.path.join(args.criu, "plugins", "cuda_plugin.so"), cp)
    b = d("dropin-bin")
    os.symlink(args.cudasnap, os.path.join(b, "cuda-checkpoint"))
    ways.append(Way("cuda_plugin+drop-in", cp, b))
    nv = suite.find_nvidia_cuda_checkpoint()
    if nv:
        b = d("nvidia-bin")
        os.symlink(nv, os.path.join(b, "cuda-checkpoint"))
        ways.append(Way("cuda_plugin+nvidia", cp, b))
    b = d("script-bin")
    os.symlink(args.cudasnap, os.path.join(b, "cudasnap"))
    script = os.path.join(b, "cudasnap-criu-action")
    with open(script, "w") as f:
        f.write(SCRIPT)
    os.chmod(script, 0o755)
    ways.append(Way("action script", d("empty"), b, script))
    return ways


def criu(args, way, verb, extra, env, log):
    cmd = [os.path.join(args.criu, "bin", "criu"), verb, *extra, "-L", way.plugindir, "-v4", "-o", log]
    if way.script:
        cmd += ["--action-script", way.script]
    env = dict(env, PATH=way.bindir + ":" + os.environ["PATH"])
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    return p.returncode, time.monotonic() - t0


def start_tree(env, tree):
    w = env.workload
    if tree == "a":
        cmd = ["bash", "-c", f"for i in 1 2 3 4; do {w} --gib 2 --dir {env.dir} & done; wait"]
        return env.start(cmd, 4)
    torch = [sys.executable, os.path.join(HERE, "..", "tests", "gpu", "torch_tree.py"), "--dir", env.dir,
             "--mib", "512"]
    return env.start(torch + (["--fork-worker"] if tree == "c" else []), 4 if tree == "c" else 3)


def log_lines(path, words, last=4):
    try:
        text = open(path, errors="replace").read().splitlines()
    except OSError:
        return []
    return [x for x in text if any(w in x for w in words)][-last:]


def one(args, env, way, tree):
    proc, pids = start_tree(env, tree)
    root = proc.pid
    roles = suite.ready_roles(env, pids)
    cuda = [p for p in pids if "forked" not in roles[p]]
    img = tempfile.mkdtemp(prefix="criu-img-")
    cenv = dict(os.environ, CUDASNAP_STATE_DIR=env.state, CKPT_ROOT_PID=str(root))
    rc, dump_s = criu(args, way, "dump", ["-t", str(root), "-D", img], cenv, "dump.log")
    time.sleep(0.5)
    reap()
    row = {"way": way.name, "tree": tree, "dump_rc": rc, "dump_s": dump_s, "restore_rc": None, "restore_s": None,
           "data": None}
    if args.show_log and rc == 0:
        print(f"   {way.name} ({tree}) dump log:", *log_lines(os.path.join(img, "dump.log"), args.show_log.split("|"),
                                                           40), sep="\n     ")
    if rc == 0 and tree != "c":
        rrc, rs = criu(args, way, "restore", ["-D", img, "-d"], cenv, "restore.log")
        if args.show_log:
            print(f"   {way.name} ({tree}) restore log:", *log_lines(os.path.join(img, "restore.log"),
                                                                  args.show_log.split("|"), 40), sep="\n     ")
        row.update(restore_rc=rrc, restore_s=rs)
        if rrc == 0:
            got = env.verify_data(cuda, timeout=120)
            row["data"] = all(v.startswith("ok") for v in got.values()) and len(got) == len(cuda)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    else:
        print(f"   {way.name} ({tree}) dump log:", *log_lines(os.path.join(img, "dump.log"),
                                                           ["Error", "cudasnap:"]), sep="\n     ")
        states = suite.recover(env, cuda)
        row["after_failed_dump"] = states
    suite.stop_all()
    reap()
    shutil.rmtree(img, ignore_errors=True)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudasnap", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--criu", required=True)
    ap.add_argument("--workload")
    ap.add_argument("--trees", default="a,b,c")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--ways", default="", help="comma-separated names to run (default: all)")
    ap.add_argument("--show-log", default="", help="print the log lines holding these words (a|b), also on success")
    args = ap.parse_args()
    args.cudasnap = os.path.abspath(args.cudasnap)
    args.plugin = os.path.abspath(args.plugin)
    import ctypes
    ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: killed trees must not keep their PIDs
    workload = args.workload or os.path.join(tempfile.mkdtemp(), "workload")
    if not args.workload:
        subprocess.run(["nvcc", "-O2", "-arch=sm_90", "-o", workload, os.path.join(HERE, "..", "tests", "gpu",
                                                                                   "workload.cu")], check=True)
    env = suite.Env(args.cudasnap, workload)
    base = tempfile.mkdtemp(prefix="criu-ways-")
    ways = [w for w in make_ways(args, base) if not args.ways or w.name in args.ways.split(",")]
    print("date:", time.strftime("%Y-%m-%d"), "| ways:", ", ".join(w.name for w in ways), flush=True)
    rows = []
    for _ in range(args.rounds):
        for tree in args.trees.split(","):
            for way in ways:
                r = one(args, env, way, tree)
                rows.append(r)
                print(f"{r['tree']} {r['way']:<22} dump rc {r['dump_rc']} {r['dump_s']:.2f} s  restore rc "
                      f"{r['restore_rc']} {r['restore_s'] or 0:.2f} s  data {r['data']}  "
                      f"{r.get('after_failed_dump', '')}", flush=True)
    print("\n| tree | way | criu dump | criu restore | data after restore |")
    print("|---|---|---:|---:|---|")
    for r in rows:
        rest = f"{r['restore_s']:.2f} s" if r["restore_s"] is not None else "-"
        print(f"| {r['tree']} | {r['way']} | {r['dump_s']:.2f} s (exit {r['dump_rc']}) | {rest} | {r['data']} |")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
