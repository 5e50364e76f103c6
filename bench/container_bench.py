"""runc containers with GPU processes checkpointed and restored through CRIU,
every way side by side in one run, data verified after each restore and
after each --leave-running checkpoint:

  plugin   cudasnap_plugin.so alone in CRIU's plugin directory
  nvidia   CRIU's own cuda_plugin.so calling NVIDIA's cuda-checkpoint
  dropin   CRIU's own cuda_plugin.so calling cudasnap's cuda-checkpoint drop-in
  baseline cudasnap_plugin.so built from another commit (--baseline-plugin),
           to measure what a change costs side by side
  park     cudasnap_plugin.so, with each workload started by `cudasnap run`
           (the parking interposer, bound into the container from beside
           --cudasnap): its memory parks in its host memory before the lock
           (CUDASNAP_PARK_FILES=0), and CRIU dumps it with the process
  parkfiles the same, its memory parked into files of CRIU's images
           directory (the plugin's default), which CRIU does not dump

runc runs `criu swrk` and sends its options over CRIU's RPC, as under
containerd, CRI-O and Podman. Each container has its own PID, mount, IPC and
UTS namespaces and a tmpfs /dev with the GPU's device files (no network
namespace: CRIU would need iptables there), and runs N CUDA processes under
a shell. The driver's libraries are copied (--driver-dir) and bound into the
container, since the machine's own driver mount may be one CRIU cannot dump.

For each way and each N: checkpoint --leave-running (the container goes on,
every process must be running on the GPU with its data), checkpoint, then
restore as a new container (other host PIDs; data verified).

Usage (root, on a GPU machine):
  python3 bench/container_bench.py --tools DIR --cudasnap BIN --plugin SO --workload BIN --driver-dir DIR
DIR holds runc, criu, cuda_plugin.so and NVIDIA's cuda-checkpoint (.carry/ of
the GPU runs). With --fake-app (the driver double's fakecuda-app) and
CUDASNAP_LIBCUDA pointing at the double, the same runs without a GPU.
"""
import argparse
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

from criu_bench import reap  # noqa: E402  (same folder)

PR_SET_CHILD_SUBREAPER = 36


class Tools:
    def __init__(self, a):
        self.runc = os.path.join(a.tools, "bin", "runc")
        self.criu = os.path.join(a.tools, "bin", "criu")
        self.cuda_plugin = os.path.join(a.tools, "criu", "plugins", "cuda_plugin.so")
        self.nvidia = os.path.join(a.tools, "nvidia", "cuda-checkpoint")
        self.libs = os.path.join(a.tools, "lib")
        self.cudasnap = os.path.abspath(a.cudasnap)
        self.plugin = os.path.abspath(a.plugin)
        base = getattr(a, "baseline_plugin", None)
        self.baseline = base and os.path.abspath(base)


def make_way(t, base, name):
    """A directory of plugins (CRIU_LIBS_DIR) and one of programs first on
    the PATH that runc, and so CRIU and its plugin, get."""
    plugins, bindir = os.path.join(base, name, "plugins"), os.path.join(base, name, "bin")
    os.makedirs(plugins)
    os.makedirs(bindir)
    os.symlink(t.runc, os.path.join(bindir, "runc"))
    os.symlink(t.criu, os.path.join(bindir, "criu"))
    if name in ("plugin", "baseline", "park", "parkfiles"):
        shutil.copy(t.baseline if name == "baseline" else t.plugin, os.path.join(plugins, "cudasnap_plugin.so"))
    else:
        shutil.copy(t.cuda_plugin, plugins)
        os.symlink(t.nvidia if name == "nvidia" else t.cudasnap, os.path.join(bindir, "cuda-checkpoint"))
    env = dict(os.environ, PATH=bindir + ":" + os.environ["PATH"], CRIU_LIBS_DIR=plugins,
               LD_LIBRARY_PATH=t.libs)
    if name == "park":
        env["CUDASNAP_PARK_FILES"] = "0"  # CRIU's environment, which its plugin reads
    return env


def gpu_devices():
    devs = []
    for name in sorted(os.listdir("/dev")):
        if name.startswith("nvidia") and not os.path.isdir("/dev/" + name):
            st = os.stat("/dev/" + name)
            devs.append({"path": "/dev/" + name, "type": "c", "major": os.major(st.st_rdev),
                         "minor": os.minor(st.st_rdev), "fileMode": 0o666, "uid": 0, "gid": 0})
    return devs


def torch_site(root):
    """PyTorch where it lies outside /usr (a virtual environment): its
    site-packages bound at the same path and put on PYTHONPATH."""
    p = subprocess.run(["python3", "-c", "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"],
                       capture_output=True, text=True)
    site = p.stdout.strip()
    if p.returncode == 0 and site and not site.startswith("/usr/"):
        os.makedirs(root + site, exist_ok=True)
        return [{"destination": site, "type": "bind", "source": site, "options": ["rbind", "ro"]}], ["PYTHONPATH=" + site]
    return [], []


def torch_mounts(a, root):
    """--torch-ipc: the script's folder at /tw, a /dev/shm for
    multiprocessing's semaphores, and PyTorch (torch_site)."""
    m = [{"destination": "/tw", "type": "bind", "source": os.path.dirname(os.path.abspath(a.torch_ipc)),
          "options": ["rbind", "ro"]},
         {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "nodev", "mode=1777"]}]
    os.makedirs(os.path.join(root, "tw"))
    more, env = torch_site(root)
    return m + more, env


def bundle(a, base, name, nprocs, data, memory_limit=None, extra_env=(), park=False):
    """A runc bundle: rootfs of read-only binds of /usr (the merged /bin,
    /lib and /lib64 point into it; not recursive, so that a driver mount
    below it, which CRIU cannot dump, stays out), the data directory, the
    driver copy."""
    b = os.path.join(base, "bundles", name)
    root = os.path.join(b, "rootfs")
    os.makedirs(root)
    for d in ("bin", "lib", "lib64", "sbin"):
        os.symlink("usr/" + d, os.path.join(root, d))
    for d in ("usr", "proc", "sys", "dev", "tmp", "data", "drv", "work"):
        os.makedirs(os.path.join(root, d))
    mounts = [{"destination": "/proc", "type": "proc", "source": "proc"},
              {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
              {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
              {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["bind", "ro"]},
              {"destination": "/data", "type": "bind", "source": data, "options": ["rbind", "rw"]}]
    env = ["PATH=/usr/bin:/bin", "HOME=/tmp"]
    if a.fake_app:
        # the double: its build directory (the app's rpath) at the same path
        work = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(a.fake_app))))
        mounts.append({"destination": work, "type": "bind", "source": work, "options": ["rbind", "ro"]})
        os.makedirs(root + work, exist_ok=True)
        mib = int(a.gib * 1024)
        cmd = f"exec {a.fake_app} --spawn {nprocs - 1} --mem {mib} --ready-dir /data"
        env += ["CUDASNAP_DEV_DIR=/dev", "FAKECUDA_GPUS=GPU-fa4ec0da-0000-4000-8000-000000000001"]
        devices = []
    else:
        mounts.append({"destination": "/drv", "type": "bind", "source": a.driver_dir, "options": ["rbind", "ro"]})
        mounts.append({"destination": "/work", "type": "bind", "source": os.path.dirname(a.workload),
                       "options": ["rbind", "ro"]})
        w = "/work/" + os.path.basename(a.workload)
        if w.endswith(".py"):
            # a PyTorch workload (tests/gpu/park_workload.py): whole GiB
            more, penv = torch_site(root)
            mounts += more
            env += penv
            w = f"python3 {w}"
            gib = int(a.gib)
        else:
            gib = a.gib
        run = ""
        if park:
            cs = os.path.dirname(os.path.abspath(a.cudasnap))
            mounts.append({"destination": "/cs", "type": "bind", "source": cs, "options": ["rbind", "ro"]})
            os.makedirs(os.path.join(root, "cs"))
            run = "/cs/cudasnap run -- "
        cmd = f"for i in $(seq {nprocs}); do {run}{w} --gib {gib} --dir /data & done; wait"
        if a.torch_ipc:
            more, penv = torch_mounts(a, root)
            mounts += more
            env += penv
            cmd = (f"exec {run}python3 /tw/{os.path.basename(a.torch_ipc)} --dir /data --mib {int(a.gib * 1024)} "
                   "> /data/torch.log 2>&1")
        env += ["LD_LIBRARY_PATH=/drv"]
        devices = gpu_devices()
    env += list(extra_env)
    caps = ["CAP_SYS_ADMIN", "CAP_KILL", "CAP_SYS_PTRACE", "CAP_DAC_OVERRIDE", "CAP_CHOWN", "CAP_FOWNER",
            "CAP_SETUID", "CAP_SETGID", "CAP_MKNOD"]
    spec = {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["/bin/sh", "-c", cmd], "env": env,
                    "cwd": "/", "capabilities": {k: caps for k in ("bounding", "effective", "permitted")}},
        "root": {"path": "rootfs", "readonly": False},
        "hostname": name,
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in ("pid", "mount", "ipc", "uts")],
                  "devices": devices,
                  "resources": dict({"devices": [{"allow": True, "access": "rwm"}]},
                                    **({"memory": {"limit": memory_limit}} if memory_limit else {}))},
    }
    if a.torch_ipc:
        # multiprocessing maps semaphores it unlinked: CRIU needs link-remap,
        # which runc passes from the configuration file this names
        conf = os.path.join(b, "criu.conf")
        with open(conf, "w") as f:
            f.write("link-remap\n")
        spec["annotations"] = {"org.criu.config": conf}
    with open(os.path.join(b, "config.json"), "w") as f:
        json.dump(spec, f, indent=1)
    return b


class Container:
    def __init__(self, a, env, state, b, name, data):
        self.a, self.env, self.state, self.bundle, self.name, self.data = a, env, state, b, name, data
        self.io = []
        self.seen = set()  # host pids, killed at the end whatever runc says

    def runc(self, *args, stdio=False, timeout=600):
        if args and args[0] in ("run", "restore") and NO_PIVOT:
            args = (args[0], "--no-pivot", *args[1:])
        """runc with pipes for the container's stdio, as runc's own
        checkpoint tests have it (CRIU hands pipes over; a file outside the
        container it cannot)."""
        t0 = time.monotonic()
        if stdio:
            fds = [os.pipe() for _ in range(3)]
            self.io.append(fds)
            p = subprocess.run([self.env["PATH"].split(":")[0] + "/runc", "--root", self.state, *args],
                               stdin=fds[0][0], stdout=fds[1][1], stderr=fds[2][1], cwd=self.bundle,
                               env=self.env, timeout=timeout)
            err = ""
            if p.returncode != 0:
                os.set_blocking(fds[2][0], False)
                try:
                    err = os.read(fds[2][0], 65536).decode(errors="replace")
                except BlockingIOError:
                    pass
            return p.returncode, err, time.monotonic() - t0
        p = subprocess.run([self.env["PATH"].split(":")[0] + "/runc", "--root", self.state, *args],
                           capture_output=True, text=True, cwd=self.bundle, env=self.env, timeout=timeout)
        return p.returncode, p.stderr, time.monotonic() - t0

    def init_pid(self):
        p = subprocess.run([self.env["PATH"].split(":")[0] + "/runc", "--root", self.state, "state", self.name],
                           capture_output=True, text=True, env=self.env, timeout=60)
        return json.loads(p.stdout)["pid"] if p.returncode == 0 else None

    def host_pids(self, expect, timeout=120):
        """{pid inside: host pid} of the CUDA processes that said ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = sorted(int(f.split(".")[0]) for f in os.listdir(self.data) if f.endswith(".ready"))
            init = self.init_pid()
            if len(ready) >= expect and init:
                ns = os.stat(f"/proc/{init}/ns/pid").st_ino
                found = {}
                for d in os.listdir("/proc"):
                    if not d.isdigit():
                        continue
                    try:
                        if os.stat(f"/proc/{d}/ns/pid").st_ino != ns:
                            continue
                        with open(f"/proc/{d}/status") as f:
                            inner = int(next(x for x in f if x.startswith("NSpid:")).split()[-1])
                    except (OSError, StopIteration, ValueError):
                        continue
                    if inner in ready:
                        found[inner] = int(d)
                if len(found) == len(ready):
                    self.seen.update(found.values())
                    return found
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: {expect} processes not ready")

    def remove(self):
        self.runc("delete", "-f", self.name)
        for pid in self.seen:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()

    def verify(self, pids, timeout=180):
        for inner, host in pids.items():
            path = os.path.join(self.data, f"{inner}.verify")
            if os.path.exists(path):
                os.unlink(path)
            os.kill(host, signal.SIGUSR1)
        deadline, got = time.monotonic() + timeout, {}
        while len(got) < len(pids) and time.monotonic() < deadline:
            for inner in pids:
                path = os.path.join(self.data, f"{inner}.verify")
                if inner not in got and os.path.exists(path):
                    with open(path) as f:
                        got[inner] = f.read().strip()
            time.sleep(0.05)
        return len(got) == len(pids) and all(v.startswith("ok") for v in got.values())


def states(t, pids):
    p = subprocess.run([t.cudasnap, "ps", "--json"], capture_output=True, text=True, timeout=120)
    try:
        procs = {x["pid"]: x for x in json.loads(p.stdout)["processes"]}
    except (ValueError, KeyError):
        return {"ps": p.stderr.strip()[-200:]}
    return {host: procs.get(host, {}).get("state") for host in pids.values()}


def tids(pids):
    """The restore thread ps reports, and whether it is a thread id of this
    PID namespace (the driver may answer in the container's)."""
    out = {}
    p = subprocess.run([TOOLS.cudasnap, "ps", "--json"], capture_output=True, text=True, timeout=120)
    try:
        procs = {x["pid"]: x for x in json.loads(p.stdout)["processes"]}
    except (ValueError, KeyError):
        return out
    for inner, host in pids.items():
        tid = procs.get(host, {}).get("restore_tid")
        out[inner] = (host, tid, bool(tid) and os.path.exists(f"/proc/{host}/task/{tid}"))
    return out


def log_lines(path, words=("Error", "cudasnap:", "cuda_plugin"), last=12):
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return []
    return [x for x in lines if any(w in x for w in words)][-last:]


def one(a, t, base, way, nprocs, rnd):
    env = make_way(t, os.path.join(base, f"r{rnd}-{way}-{nprocs}"), way)
    state = os.path.join(base, f"state-{rnd}-{way}-{nprocs}")
    data = os.path.join(base, f"data-{rnd}-{way}-{nprocs}")
    os.makedirs(data)
    name = f"c{rnd}{way}{nprocs}"
    b = bundle(a, base, name, nprocs, data, park=way in ("park", "parkfiles"))
    c = Container(a, env, state, b, name, data)
    row = {"way": way, "procs": nprocs, "gib": a.gib, "round": rnd}
    rc, err, _ = c.runc("run", "-d", name, stdio=True)
    global NO_PIVOT
    if rc != 0 and "pivot_root" in err and not NO_PIVOT:
        NO_PIVOT = True  # a root file system pivot_root cannot leave (an initramfs)
        c.runc("delete", "-f", name)
        rc, err, _ = c.runc("run", "-d", name, stdio=True)
    if rc != 0:
        row["error"] = f"runc run failed: {err}"
        return row
    try:
        pids = c.host_pids(nprocs)
        row["data_before"] = c.verify(pids)
        if rnd == 0 and way == "plugin":
            row["restore_tids"] = tids(pids)
        # the images where --images-dir says (a memory-backed directory, or the disk)
        img, work = os.path.join(a.images_dir or base, "img-" + name), os.path.join(base, "work-" + name)
        for d in (img, work):
            os.makedirs(d)
        # 1. checkpoint --leave-running: the container goes on
        rc, err, row["leave_running_s"] = c.runc("checkpoint", "--leave-running", "--image-path", img,
                                                 "--work-path", work, name)
        row["leave_running_rc"] = rc
        row["after_leave_running"] = states(t, pids)
        row["data_after_leave_running"] = c.verify(pids)
        if rc != 0 or a.show_log:
            row["leave_running_log"] = log_lines(os.path.join(work, "dump.log"))
        shutil.rmtree(img)
        shutil.rmtree(work)
        os.makedirs(img)
        os.makedirs(work)
        # 2. checkpoint: the container ends
        rc, err, row["checkpoint_s"] = c.runc("checkpoint", "--image-path", img, "--work-path", work, name)
        row["checkpoint_rc"] = rc
        row["images_bytes"] = sum(os.path.getsize(os.path.join(img, f)) for f in os.listdir(img))
        row["gpumem_files_bytes"] = sum(os.path.getsize(os.path.join(img, f)) for f in os.listdir(img)
                                        if f.startswith("cudasnap-gpumem."))
        if rc != 0 or a.show_log:
            row["checkpoint_log"] = log_lines(os.path.join(work, "dump.log"))
        reap()
        if rc != 0:
            return row
        # 3. restore as another container
        new = name + "r"
        c.runc("delete", "-f", name)
        if a.drop_caches:
            drop_caches()
        c.name = new
        rc, err, row["restore_s"] = c.runc("restore", "-d", "--image-path", img, "--work-path", work, new,
                                           stdio=True)
        row["restore_rc"] = rc
        if rc != 0 or a.show_log:
            row["restore_log"] = log_lines(os.path.join(work, "restore.log"))
        if rc == 0:
            after = c.host_pids(nprocs)
            row["new_host_pids"] = sorted(after.values()) != sorted(pids.values())
            row["after_restore"] = states(t, after)
            row["data_after_restore"] = c.verify(after)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        row["error"] = str(e)
    finally:
        c.remove()
        shutil.rmtree(os.path.join(a.images_dir or base, "img-" + name), ignore_errors=True)
        shutil.rmtree(os.path.join(base, "work-" + name), ignore_errors=True)
    return row


def drop_caches():
    """--drop-caches: the images come back from the disk, not from the page
    cache that the checkpoint just filled (as on another node, or later)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


TOOLS = None
NO_PIVOT = False


def pair(a, t, base, nprocs):
    """Two containers checkpointed at once through the plugin (two pods of
    a node), then both restored: each a transaction of its own."""
    env = make_way(t, os.path.join(base, "pair"), "plugin")
    cs = []
    for k in range(2):
        data = os.path.join(base, f"pair-data-{k}")
        os.makedirs(data)
        name = f"pair{k}"
        c = Container(a, env, os.path.join(base, "pair-state"), bundle(a, base, name, nprocs, data), name, data)
        rc, err, _ = c.runc("run", "-d", name, stdio=True)
        if rc != 0:
            return {"pair": nprocs, "error": err}
        cs.append(c)
    row = {"pair": nprocs, "way": "plugin"}
    try:
        for c in cs:  # every process ready before the dump
            c.host_pids(nprocs)
        dirs = []
        for c in cs:
            img, work = os.path.join(base, "img-" + c.name), os.path.join(base, "work-" + c.name)
            os.makedirs(img)
            os.makedirs(work)
            dirs.append((img, work))
        t0 = time.monotonic()
        procs = [subprocess.Popen([c.env["PATH"].split(":")[0] + "/runc", "--root", c.state, "checkpoint",
                                   "--image-path", img, "--work-path", work, c.name], cwd=c.bundle, env=c.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for c, (img, work) in zip(cs, dirs)]
        outs = [p.communicate(timeout=600)[0] for p in procs]
        row["both_s"] = time.monotonic() - t0
        row["rc"] = [p.returncode for p in procs]
        row["logs"] = [log_lines(os.path.join(w, "dump.log"), ("checkpointed", "Error", "another")) for _, w in dirs]
        if any(row["rc"]):
            row["out"] = outs
            return row
        reap()
        row["restored"] = []
        for c, (img, work) in zip(cs, dirs):
            c.runc("delete", "-f", c.name)
            c.name += "r"
            rc, err, secs = c.runc("restore", "-d", "--image-path", img, "--work-path", work, c.name, stdio=True)
            after = c.host_pids(nprocs) if rc == 0 else {}
            row["restored"].append({"rc": rc, "s": secs, "states": states(t, after), "data": c.verify(after)})
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        row["error"] = str(e)
    finally:
        for c in cs:
            c.remove()
    return row


def side_by_side(rows):
    """Medians of the rounds that went through, this plugin over the
    baseline's, per number of processes."""
    print("\n| processes | step | plugin median | baseline median | plugin / baseline |")
    print("|---:|---|---:|---:|---:|")
    for n in sorted({r["procs"] for r in rows}):
        for k in ("leave_running_s", "checkpoint_s", "restore_s"):
            med = {}
            for way in ("plugin", "baseline"):
                got = [r[k] for r in rows if r["procs"] == n and r["way"] == way and isinstance(r.get(k), float)
                       and r.get(k.replace("_s", "_rc")) == 0]
                med[way] = statistics.median(got) if got else None
            if med["plugin"] and med["baseline"]:
                print(f"| {n} | {k[:-2]} | {med['plugin']:.2f} s | {med['baseline']:.2f} s | "
                      f"{med['plugin'] / med['baseline']:.3f} |")


def main():
    global TOOLS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True)
    ap.add_argument("--cudasnap", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--workload", help="bin/workload (tests/gpu/workload.cu), or tests/gpu/park_workload.py: "
                    "PyTorch, run by the container's python3, whole GiB")
    ap.add_argument("--torch-ipc", help="tests/gpu/torch_ipc.py: each container runs that torch.multiprocessing "
                    "pair (2 processes, --gib each shared) instead of --workload")
    ap.add_argument("--driver-dir")
    ap.add_argument("--fake-app")
    ap.add_argument("--gib", type=float, default=1)
    ap.add_argument("--procs", default="2,8")
    ap.add_argument("--ways", default="plugin,nvidia,dropin")
    ap.add_argument("--baseline-plugin", help="cudasnap_plugin.so of another commit, the way 'baseline'")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--show-log", action="store_true")
    ap.add_argument("--pair", type=int, default=0, help="also two containers of N processes at once (plugin)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--images-dir", help="where the images go (a memory-backed directory, or one on the disk); "
                    "default: beside the bundles")
    ap.add_argument("--drop-caches", action="store_true", help="empty the page cache before each restore "
                    "(root), so that images on a disk are read from it")
    a = ap.parse_args()
    if "baseline" in a.ways.split(",") and not a.baseline_plugin:
        ap.error("the way 'baseline' needs --baseline-plugin")
    if a.workload:
        a.workload = os.path.abspath(a.workload)
        if a.workload.endswith(".py") and a.gib != int(a.gib):
            ap.error("a PyTorch workload holds whole GiB: give --gib a whole number")
    TOOLS = t = Tools(a)
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1)
    base = tempfile.mkdtemp(prefix="cbench-")
    os.chmod(base, 0o755)
    print("date:", time.strftime("%Y-%m-%d %H:%M:%S"), "| ways:", a.ways, "| processes:", a.procs,
          "| GiB each:", a.gib, flush=True)
    rows = []
    for rnd in range(a.rounds):
        for n in (int(x) for x in a.procs.split(",")):
            # every other round the other way round: the machine's drift
            # then favours no way
            ways = a.ways.split(",")
            for way in ways if rnd % 2 == 0 else ways[::-1]:
                r = one(a, t, base, way, n, rnd)
                rows.append(r)
                print(json.dumps(r), flush=True)
    if a.pair:
        r = pair(a, t, base, a.pair)
        rows.append(r)
        print(json.dumps(r), flush=True)
    rows_table = [r for r in rows if "procs" in r]
    print("\n| round | processes | way | checkpoint --leave-running | checkpoint | restore | data (before / after -R / after restore) |")
    print("|---:|---:|---|---:|---:|---:|---|")
    for r in rows_table:
        def s(k):
            return f"{r[k]:.2f} s" if isinstance(r.get(k), float) and r.get(k.replace('_s', '_rc'), 1) == 0 else \
                f"failed ({r.get(k.replace('_s', '_rc'))})" if k in r else "-"
        print(f"| {r['round'] + 1} | {r['procs']} | {r['way']} | {s('leave_running_s')} | {s('checkpoint_s')} | {s('restore_s')} | "
              f"{r.get('data_before')} / {r.get('data_after_leave_running')} / {r.get('data_after_restore')} |")
    if a.baseline_plugin:
        side_by_side(rows_table)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
