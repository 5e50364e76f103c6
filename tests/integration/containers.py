"""Real containers for the integration tests: a private copy of the machine,
runc bundles, Podman containers and containerd containers that run the fake
CUDA application, and the mapping of their processes to the pids this test
sees.

The machine: in the test's own mount namespace (isolate.sh made one) /usr,
/etc and /var are overlays whose upper directories lie in the test's
temporary directory, and /run is a tmpfs. There the driver doubles are "the
machine's" libcuda.so.1 and libnvidia-ml.so.1, the plugin sits in CRIU's
default plugin directory and CRIU is `criu` on the PATH, as on a node where
runc, Podman and containerd find them without being told: none passes
--libdir, and Podman and containerd pass no environment. Nothing is written
outside the temporary directory; every engine, CRIU and the test's own
processes die with the test's PID namespace.
"""
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sysconfig
import tarfile
import threading
import time

LIBDIR = "/usr/lib/" + (sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu")
CRIU_PLUGIN_DIR = "/usr/lib/criu"
FAKECUDA_CONF = "/etc/fakecuda.conf"
CUDASNAP_CONF = "/etc/cudasnap/cudasnap.conf"
APP = "/usr/local/bin/fakecuda-app"
# the CUDA application on the driver API, and the parking interposer that a
# container's program preloads (LD_PRELOAD), where `cudasnap run` looks first
CUAPP = "/usr/local/bin/fakecuda-cuapp"
PARK_LIB = "/usr/local/lib/cudasnap/libcudasnap-park.so"
# What a service manager gives runc and conmon; no LD_LIBRARY_PATH (meson
# sets one to the build's doubles), no CUDASNAP_* or FAKECUDA_* variable.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Every container's cgroups go below these, one per test run, removed at the end.
CGROUP_ROOT = "/sys/fs/cgroup"
# An OCI image's architecture for uname's machine
GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


def loopback_up():
    """A new network namespace starts with 'lo' down, and CRIU's start-up
    checks (TCP repair) fail without it."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, siocgifflags, struct.pack("16sH22x", b"lo", 0))
        flags = struct.unpack("16sH22x", ifr)[1]
        if not flags & iff_up:
            fcntl.ioctl(s, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def machine_env(**extra):
    env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def run(args, check=True, timeout=120, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.rename(tmp, path)


def system_dirs(rootfs):
    """The machine's /usr (and /lib, /lib64, /bin, /sbin where they are
    directories and not the merged-/usr links, which are copied into
    rootfs instead): what a container binds read-only to run the machine's
    programs and libraries."""
    out = ["/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64"):
        path = "/" + name
        if os.path.islink(path):
            os.symlink(os.readlink(path), os.path.join(rootfs, name))
        elif os.path.isdir(path):
            out.append(path)
    return out


def settings_text(settings):
    return "".join(f"{k}={v}\n" for k, v in settings.items())


class Machine:
    """The private machine described above, made once per test run:

    - /usr: an overlay holding the doubles as LIBDIR/libcuda.so.1 and
      libnvidia-ml.so.1 (found by the dynamic loader without
      LD_LIBRARY_PATH), the plugin in /usr/lib/criu, CRIU as /usr/sbin/criu
      and /usr/local/sbin/criu, the fake application as APP, and where they
      are built, the CUDA application as CUAPP and the parking interposer as
      PARK_LIB;
    - /etc: an overlay, for /etc/fakecuda.conf and /etc/cudasnap/cudasnap.conf,
      and what Podman writes there (/etc/cni/net.d/cni.lock);
    - /var: an overlay, for what Podman writes below /var/lib/containers and
      /var/tmp (/var/run is the link to /run);
    - /run: a tmpfs, for CRIU's /run/criu.kdat, cudasnap's /run/cudasnap (the
      claims that the plugin and the command line share), Podman's files and
      containerd's shim sockets and ctr's FIFOs (/run/containerd/s and
      /run/containerd/fifo, whatever containerd's --state says).

    The overlays' upper and work directories lie on a tmpfs of their own
    in the test's directory (an overlay cannot take its upper directory on
    another overlay, which /tmp may be)."""

    def __init__(self, tmp, *, libcuda, libnvml, app, plugin, criu, cuapp=None, park_lib=None):
        self.tmp = tmp
        self.files = {f"{LIBDIR}/libcuda.so.1": libcuda, f"{LIBDIR}/libnvidia-ml.so.1": libnvml,
                      APP: app, f"{CRIU_PLUGIN_DIR}/cudasnap_plugin.so": plugin,
                      # runc looks criu up on the PATH it gets from Podman
                      # (or conmon, or the shell): both lists hold these
                      "/usr/sbin/criu": criu, "/usr/local/sbin/criu": criu}
        # the interposer is built for x86-64 only
        if cuapp and park_lib:
            self.files.update({CUAPP: cuapp, PARK_LIB: park_lib})
        self.mounts = []
        self.cgroup = f"csnap-it-{int(time.time() * 1000) % 10**9}"
        # the machine's device files, for the doubles in CRIU and cudasnap
        self.hostdev = os.path.join(tmp, "hostdev")

    def mount(self, *args):
        run(["mount", *args])
        self.mounts.append(args[-1])

    def setup(self):
        # isolate.sh's unshare already made the mounts private; say it again,
        # so that nothing below can ever propagate to the machine
        run(["mount", "--make-rprivate", "/"])
        loopback_up()
        layers = os.path.join(self.tmp, "layers")
        os.makedirs(layers)
        self.mount("-t", "tmpfs", "-o", "mode=0700", "cudasnap-it-layers", layers)
        for d in ("/usr", "/etc", "/var"):
            up, work = os.path.join(layers, d[1:]), os.path.join(layers, d[1:] + ".work")
            os.makedirs(up)
            os.makedirs(work)
            self.mount("-t", "overlay", "-o", f"lowerdir={d},upperdir={up},workdir={work}", "cudasnap-it", d)
        self.mount("-t", "tmpfs", "-o", "mode=0755", "cudasnap-it-run", "/run")
        os.makedirs("/run/lock", mode=0o1777)
        for dest, src in self.files.items():
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy(src, dest)
        os.makedirs(self.hostdev)
        self.fakecuda({})
        self.cudasnap({})

    def fakecuda(self, settings):
        """/etc/fakecuda.conf: what the doubles in CRIU and cudasnap read (the
        engines pass them no environment). Its CUDASNAP_DEV_DIR gives them
        device files: without one the double finds none in /dev and takes
        the machine for one without a GPU."""
        write(FAKECUDA_CONF, settings_text(dict({"CUDASNAP_DEV_DIR": self.hostdev}, **settings)))

    def cudasnap(self, settings):
        """/etc/cudasnap/cudasnap.conf, the settings of the plugin. The node's
        book of GPU restores is the one in this machine's own /run."""
        write(CUDASNAP_CONF, settings_text(dict({"CUDASNAP_GPU_BOOK": "/run/cudasnap-gpu-book"}, **settings)))

    def check(self):
        """Why the machine is not what the tests need, or None."""
        probe = ("import ctypes\n"
                 "for name in ('libcuda.so.1', 'libnvidia-ml.so.1'):\n"
                 "    ctypes.CDLL(name)\n"
                 "with open('/proc/self/maps') as f:\n"
                 "    print(' '.join(sorted({l.split()[-1] for l in f if 'libcuda' in l or 'nvidia-ml' in l})))\n")
        p = run(["python3", "-c", probe], check=False, env=machine_env())
        want = f"{LIBDIR}/libcuda.so.1 {LIBDIR}/libnvidia-ml.so.1"
        if p.returncode != 0 or p.stdout.strip() != want:
            return f"the dynamic loader does not find the doubles in {LIBDIR}: {p.stdout} {p.stderr}"
        for name in ("criu", "iptables-restore"):
            if not shutil.which(name, path=PATH):
                return f"no {name} on {PATH}"
        return None

    def cgroup_paths(self):
        """The cgroup directories of this run, deepest first."""
        out = []
        for ctrl in sorted(os.listdir(CGROUP_ROOT)):
            top = os.path.join(CGROUP_ROOT, ctrl, self.cgroup)
            for root, _, _ in os.walk(top, topdown=False):
                out.append(root)
        return out

    def teardown(self):
        # conmon leaves its cgroup a moment after its container is gone
        deadline = time.monotonic() + 5
        while self.cgroup_paths() and time.monotonic() < deadline:
            for path in self.cgroup_paths():
                try:
                    os.rmdir(path)
                except OSError:
                    pass
            reap()
            time.sleep(0.05)
        for d in reversed(self.mounts):
            run(["umount", "-l", d], check=False)
        self.mounts = []


def find_criu():
    """(path, None) for a usable CRIU, or (None, why not)."""
    path = os.environ.get("CUDASNAP_TEST_CRIU") or shutil.which("criu")
    if not path:
        return None, "no CRIU found: set CUDASNAP_TEST_CRIU to a criu (>= 4.1) binary"
    if not os.access(path, os.X_OK):
        return None, f"CRIU {path} is not an executable file"
    try:
        p = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        return None, f"{path} --version: {e}"
    m = re.search(r"Version:\s*(\d+)\.(\d+)", p.stdout)
    if not m:
        return None, f"{path} --version printed no version: {(p.stdout + p.stderr).strip()[:200]!r}"
    if (int(m.group(1)), int(m.group(2))) < (4, 1):
        return None, (f"{path} is CRIU {m.group(1)}.{m.group(2)}; these tests need 4.1 or newer "
                      "(older ones cannot dump on kernels >= 6.13: 'vdso: Unexpected rt vDSO area bounds')")
    return path, None


# Popen children of ours that reap() must leave to their Popen object.
ACTIVE = set()


def reap():
    """Reaps the dead processes that ended up here: engines daemonize (runc
    run -d, conmon), so container inits, conmons and restored trees are
    reparented to this process, PID 1 of the test's namespace."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in ACTIVE:
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == me:
            try:
                os.waitpid(int(name), os.WNOHANG)
            except ChildProcessError:
                pass


def pids_of(comm):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and read(f"/proc/{name}/comm").strip() == comm:
            out.append(int(name))
    return out


def nspid(pid):
    """The pid chain of a process, outermost first (NSpid of /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(x) for x in line.split()[1:]]
    except OSError:
        pass
    return []


def pidns(pid):
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def members(init):
    """{pid in the container: pid here} of every process in the PID namespace
    of the container whose init is the given pid."""
    ns = pidns(init)
    out = {}
    if ns is None:
        return out
    for name in os.listdir("/proc"):
        if name.isdigit() and pidns(int(name)) == ns:
            chain = nspid(int(name))
            if chain:
                out[chain[-1]] = int(name)
    return out


# A cgroup's freezer: cgroup v1's freezer.state, v2's cgroup.freeze
FROZEN = {"FROZEN": "FROZEN", "FREEZING": "FREEZING", "THAWED": "THAWED", "1": "FROZEN", "0": "THAWED"}


def freezer_state_file(pid):
    """The file that says whether pid's cgroup is frozen (cgroup v1's
    freezer.state where the freezer controller is mounted, else v2's
    cgroup.freeze), or None."""
    v2 = None
    for line in read(f"/proc/{pid}/cgroup").splitlines():
        hid, ctrls, path = line.split(":", 2)
        if "freezer" in ctrls.split(","):
            f = os.path.join(CGROUP_ROOT, "freezer" + path, "freezer.state")
            return f if os.path.exists(f) else None
        if hid == "0":
            v2 = os.path.join(CGROUP_ROOT + path, "cgroup.freeze")
    return v2 if v2 and os.path.exists(v2) else None


def criu_lines(log, *words):
    """The lines of a CRIU log that matter for a failure: cudasnap's and errors."""
    keep = ("cudasnap:", "Error", *words)
    return [line for line in log.splitlines() if any(w in line for w in keep)]


def drain(fd, log):
    """Copies a pipe into a file until every writer is gone."""
    with log:
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            log.write(data)
            log.flush()
    os.close(fd)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


class Container:
    """A container of any engine: its name, host-side init, and the
    directory its application writes ready and verify files to."""

    def __init__(self, engine, name, share, expect):
        self.engine = engine
        self.name = name
        self.share = share
        # no share: a container found by its name alone, to be removed
        self.ready = share and os.path.join(share, "ready")
        self.faults = share and os.path.join(share, "faults")
        self.expect = expect

    def init(self):
        return self.engine.init_pid(self)

    def pids(self):
        """{container pid: host pid} of its processes."""
        init = self.init()
        return members(init) if init else {}

    def ready_pids(self):
        return sorted(int(f.split(".")[0]) for f in os.listdir(self.ready) if f.endswith(".ready"))

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = self.ready_pids()
            if len(ready) >= self.expect:
                pids = self.pids()
                if all(p in pids for p in ready):
                    return ready
            time.sleep(0.05)
        raise AssertionError(f"container {self.name}: {self.ready_pids()} ready of {self.expect}; "
                             f"processes {self.pids()}\n{self.engine.diagnose(self)}")

    def role(self, cpid):
        with open(os.path.join(self.ready, f"{cpid}.ready")) as f:
            return dict(kv.split("=", 1) for kv in f.read().split())["role"]

    def fault(self, *lines):
        write(self.faults, "".join(line + "\n" for line in lines))

    def clear_faults(self):
        write(self.faults, "")

    def verify(self, timeout=15):
        """SIGUSR1 to each process (by its host pid); {container pid: verify line}."""
        pids = self.pids()
        cpids = self.ready_pids()
        for cpid in cpids:
            path = os.path.join(self.ready, f"{cpid}.verify")
            if os.path.exists(path):
                os.unlink(path)
            if cpid in pids:
                os.kill(pids[cpid], signal.SIGUSR1)
        out, deadline = {}, time.monotonic() + timeout
        while len(out) < len(cpids) and time.monotonic() < deadline:
            for cpid in cpids:
                path = os.path.join(self.ready, f"{cpid}.verify")
                if cpid not in out and os.path.exists(path):
                    out[cpid] = read(path).strip()
            time.sleep(0.05)
        return out


class Outcome:
    """What an engine's checkpoint or restore gave: exit status, output, wall
    time and CRIU's log; gone says why there is no CRIU log to read (the
    engine deleted it), where that is so."""

    def __init__(self, rc, out, wall, log, gone=None):
        self.rc = rc
        self.out = out
        self.wall = wall
        self.log = log
        self.gone = gone

    def cudasnap_lines(self):
        return [line for line in self.log.splitlines() if "cudasnap:" in line]

    def __repr__(self):
        return (f"rc={self.rc} wall={self.wall:.2f}s\noutput: {self.out[-3000:]}\n" +
                (f"CRIU log: none, {self.gone}" if self.gone else
                 "CRIU log (cudasnap and error lines):\n" + "\n".join(criu_lines(self.log)[-80:])))


class Pending:
    """An engine's command started in the background; log() reads CRIU's
    log once it is done."""

    def __init__(self, args, log, env):
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.log = log
        ACTIVE.add(self.p.pid)

    def wait(self, timeout=120):
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
        finally:
            ACTIVE.discard(self.p.pid)
        return Outcome(self.p.returncode, out + err, time.monotonic() - self.t0, self.log())


class Engine:
    name = ""
    needs = ()

    def missing(self):
        """Why this engine cannot run here, or None."""
        gone = [p for p in self.needs if not shutil.which(p, path=PATH)]
        return f"{' and '.join(gone)} not installed (tests/deps.sh installs it where no other engine is)" if gone else None

    def checkpoint(self, c, *extra):
        """The engine's checkpoint of c; an Outcome with CRIU's dump.log."""
        return self.checkpoint_async(c, *extra).wait()

    # --- a checkpoint that moves to another node, and what it carries ---

    def checkpoint_to_move(self, c):
        """The checkpoint of c in the form that moves to another node; an
        Outcome."""
        return self.checkpoint(c)

    def carried(self, c):
        """{name: size} of the files of CRIU's images directory that the
        last checkpoint_to_move of c carries, as the engine keeps them."""
        raise NotImplementedError

    def carried_file(self, c, name):
        """The bytes of one of them."""
        raise NotImplementedError

    def restore_moved(self, c, timeout=120):
        """The restore of that checkpoint (what the engine keeps of it, no
        more); (Outcome, the restored Container)."""
        return self.restore(c, timeout=timeout)


class Runc(Engine):
    """runc with its state, bundles, images and logs in the test's directory.
    A restore makes a new container (runc restore ID) from the old one's
    bundle and images."""

    name = "runc"
    needs = ("runc",)

    def __init__(self, machine, tmp):
        self.machine = machine
        self.tmp = os.path.join(tmp, "runc")
        self.root = os.path.join(self.tmp, "state")
        self.bin = shutil.which("runc", path=PATH)
        self.stdio = []
        self.serial = 0

    def cmd(self, *args):
        return [self.bin, "--root", self.root, *args]

    def bundle(self, name, share, args, env):
        """config.json as `runc spec` writes it, minus the terminal and the
        cgroup mount: /usr of the machine read-only (the driver libraries and
        the application come from there, as the NVIDIA container toolkit
        brings the driver's), the share directory read-write at its own path."""
        bundle = os.path.join(self.tmp, "bundles", name)
        rootfs = os.path.join(bundle, "rootfs")
        for d in ("usr", "proc", "dev", "sys", "tmp", "etc"):
            os.makedirs(os.path.join(rootfs, d), exist_ok=True)
        binds = [(d, "ro") for d in system_dirs(rootfs)] + [(share, "rw")]
        caps = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
        config = {
            "ociVersion": "1.0.2-dev",
            "root": {"path": rootfs, "readonly": False},
            "hostname": name,
            "process": {
                "terminal": False, "user": {"uid": 0, "gid": 0}, "cwd": "/",
                "args": args, "env": [f"{k}={v}" for k, v in env.items()],
                "capabilities": {k: caps for k in ("bounding", "effective", "permitted", "ambient")},
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
                "noNewPrivileges": True,
            },
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                 "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
                {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
                 "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
                {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
                 "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
                {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
                 "options": ["nosuid", "noexec", "nodev"]},
                {"destination": "/sys", "type": "sysfs", "source": "sysfs",
                 "options": ["nosuid", "noexec", "nodev", "ro"]},
            ] + [{"destination": path, "type": "bind", "source": path, "options": ["rbind", mode]}
                 for path, mode in binds],
            "linux": {
                "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
                "cgroupsPath": f"/{self.machine.cgroup}/{name}",
                "resources": {"devices": [{"allow": False, "access": "rwm"}]},
                "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
                "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
            },
        }
        write(os.path.join(bundle, "config.json"), json.dumps(config, indent=1))
        return bundle

    def _detached(self, args, name, timeout=60):
        """runc run -d / restore -d with pipes for the container's stdio, as
        containerd's shim and conmon give (CRIU dumps pipes, and runc hands
        the new ones in at restore); what the application says is copied to
        NAME.stdio. Returns (exit status, wall time)."""
        rin, win = os.pipe()
        rout, wout = os.pipe()
        log = open(os.path.join(self.tmp, f"{name}.stdio"), "ab")
        threading.Thread(target=drain, args=(rout, log), daemon=True).start()
        self.stdio.append(win)
        t0 = time.monotonic()
        try:
            p = subprocess.run(args, stdin=rin, stdout=wout, stderr=wout, env=machine_env(), timeout=timeout)
        finally:
            os.close(rin)
            os.close(wout)
        return p.returncode, time.monotonic() - t0

    def start(self, name, share, args, env, expect):
        c = Container(self, name, share, expect)
        c.bundle = self.bundle(name, share, args, env)
        rc, _ = self._detached(self.cmd("run", "-d", "-b", c.bundle, name), name)
        if rc != 0:
            raise AssertionError(f"runc run {name}: exit {rc}\n{self.diagnose(c)}")
        return c

    def init_pid(self, c):
        p = run(self.cmd("state", c.name), check=False, env=machine_env())
        if p.returncode != 0:
            return None
        st = json.loads(p.stdout)
        return st["pid"] if st.get("status") in ("running", "paused", "created") else None

    def checkpoint_async(self, c, *extra):
        self.serial += 1
        c.images = os.path.join(self.tmp, f"images{self.serial}")
        work = os.path.join(self.tmp, f"work{self.serial}")
        os.makedirs(c.images)
        os.makedirs(work)
        return Pending(self.cmd("checkpoint", "--image-path", c.images, "--work-path", work, *extra, c.name),
                       lambda: read(os.path.join(work, "dump.log")), machine_env())

    def restore(self, c, timeout=120):
        """runc restore -d of c's last images as a new container."""
        self.serial += 1
        name = re.sub(r"(-r\d+)?$", f"-r{self.serial}", c.name, count=1)
        work = os.path.join(self.tmp, f"work{self.serial}")
        os.makedirs(work)
        rc, wall = self._detached(self.cmd("restore", "-d", "--image-path", c.images, "--work-path", work,
                                           "-b", c.bundle, name), name, timeout=timeout)
        n = Container(self, name, c.share, c.expect)
        n.bundle = c.bundle
        return Outcome(rc, read(os.path.join(self.tmp, f"{name}.stdio")), wall,
                       read(os.path.join(work, "restore.log"))), n

    def carried(self, c):
        """The images directory itself (runc restore reads it)."""
        return {e.name: e.stat().st_size for e in os.scandir(c.images) if e.is_file(follow_symlinks=False)}

    def carried_file(self, c, name):
        with open(os.path.join(c.images, name), "rb") as f:
            return f.read()

    def stop(self, c):
        self.remove(c)

    def remove(self, c):
        run(self.cmd("kill", c.name, "KILL"), check=False, env=machine_env())
        deadline = time.monotonic() + 10
        while self.init_pid(c) and time.monotonic() < deadline:
            reap()
            time.sleep(0.05)
        run(self.cmd("delete", "-f", c.name), check=False, env=machine_env())

    def cleanup(self):
        if os.path.isdir(self.root):
            for name in os.listdir(self.root):
                self.remove(Container(self, name, None, 0))
        for fd in self.stdio:
            os.close(fd)
        self.stdio = []

    def diagnose(self, c):
        return f"stdio of {c.name}:\n{read(os.path.join(self.tmp, f'{c.name}.stdio'))[-3000:]}"


class Podman(Engine):
    """Podman with its storage, run root and temporary files in the test's
    directory, vfs storage (no fuse-overlayfs, no kernel overlay on top of
    the test's overlays), cgroupfs, events in a file, runc as the runtime,
    and an image imported from a tarball: no registry, no network. CRIU's
    logs stay in the container's directory (--keep)."""

    name = "podman"
    needs = ("podman", "conmon", "runc")
    image = "localhost/cudasnap-it:latest"

    def __init__(self, machine, tmp):
        self.machine = machine
        self.tmp = os.path.join(tmp, "podman")
        self.env = machine_env(TMPDIR=os.path.join(self.tmp, "tmp"))
        self.base = [shutil.which("podman", path=PATH) or "podman",
                     "--root", os.path.join(self.tmp, "storage"), "--runroot", os.path.join(self.tmp, "run"),
                     "--tmpdir", os.path.join(self.tmp, "libpod"), "--storage-driver", "vfs",
                     "--cgroup-manager", "cgroupfs", "--events-backend", "file",
                     "--runtime", shutil.which("runc", path=PATH) or "runc"]
        self.have_image = False

    def cmd(self, *args):
        return [*self.base, *args]

    def run(self, *args, check=True, timeout=120):
        return run(self.cmd(*args), check=check, timeout=timeout, env=self.env)

    def build_image(self):
        """A tarball of empty mount points and the merged-/usr links; /usr
        itself comes from the machine, bound read-only (system_dirs)."""
        if self.have_image:
            return
        rootfs = os.path.join(self.tmp, "rootfs")
        for d in ("usr", "proc", "dev", "sys", "tmp", "etc", "run", "var/tmp"):
            os.makedirs(os.path.join(rootfs, d), exist_ok=True)
        self.binds = system_dirs(rootfs)
        os.makedirs(os.path.join(self.tmp, "tmp"), exist_ok=True)
        tar = os.path.join(self.tmp, "rootfs.tar")
        run(["tar", "-C", rootfs, "-cf", tar, "."])
        self.run("import", "--quiet", tar, self.image)
        self.have_image = True

    def start(self, name, share, args, env, expect):
        self.build_image()
        flags = ["--name", name, "--network", "none", "--cgroup-parent", f"/{self.machine.cgroup}/podman",
                 "-v", f"{share}:{share}"]
        for d in self.binds:
            flags += ["-v", f"{d}:{d}:ro"]
        for k, v in env.items():
            flags += ["-e", f"{k}={v}"]
        p = self.run("run", "-d", *flags, self.image, *args, check=False)
        if p.returncode != 0:
            raise AssertionError(f"podman run {name}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        return Container(self, name, share, expect)

    def inspect(self, c, fmt):
        p = self.run("inspect", "--format", fmt, c.name, check=False)
        return p.stdout.strip() if p.returncode == 0 else None

    def init_pid(self, c):
        pid = self.inspect(c, "{{.State.Pid}}")
        return int(pid) if pid and pid.isdigit() and int(pid) > 0 else None

    def userdata(self, c):
        """The container's own directory (storage/vfs-containers/ID/userdata),
        where Podman has CRIU write dump.log and restore.log."""
        return self.inspect(c, "{{.StaticDir}}") or "/nonexistent"

    def checkpoint_async(self, c, *extra):
        d = self.userdata(c)
        return Pending(self.cmd("container", "checkpoint", "--keep", *extra, c.name),
                       lambda: read(os.path.join(d, "dump.log")), self.env)

    def _restore(self, c, name, *args, timeout=120):
        t0 = time.monotonic()
        p = self.run("container", "restore", "--keep", *args, check=False, timeout=timeout)
        n = Container(self, name, c.share, c.expect)
        log = read(os.path.join(self.userdata(n), "restore.log"))
        return Outcome(p.returncode, p.stdout + p.stderr, time.monotonic() - t0, log), n

    def restore(self, c, timeout=120):
        return self._restore(c, c.name, c.name, timeout=timeout)

    def restore_import(self, c, tarball, name, timeout=120):
        return self._restore(c, name, f"--import={tarball}", "--name", name, timeout=timeout)

    def checkpoint_to_move(self, c):
        """`podman container checkpoint --export`: one archive (compressed
        as Podman chooses), CRIU's images in its checkpoint/."""
        c.tarball = os.path.join(self.tmp, f"{c.name}-export.tar")
        c.unpacked = None
        return self.checkpoint(c, f"--export={c.tarball}")

    def carried(self, c):
        """checkpoint/ of the exported archive, unpacked by tar (which
        recognizes the compression)."""
        if not c.unpacked:
            c.unpacked = c.tarball + ".d"
            os.makedirs(c.unpacked)
            run(["tar", "-C", c.unpacked, "-xf", c.tarball])
        d = os.path.join(c.unpacked, "checkpoint")
        return {e.name: e.stat().st_size for e in os.scandir(d) if e.is_file(follow_symlinks=False)}

    def carried_file(self, c, name):
        self.carried(c)
        with open(os.path.join(c.unpacked, "checkpoint", name), "rb") as f:
            return f.read()

    def restore_moved(self, c, timeout=120):
        """The original removed, `podman container restore --import` of the
        archive under another name."""
        self.remove(c)
        return self.restore_import(c, c.tarball, "moved-" + c.name, timeout=timeout)

    def stop(self, c):
        self.run("stop", "-t", "0", c.name, check=False)

    def remove(self, c):
        self.run("rm", "-f", "-t", "0", c.name, check=False)

    def cleanup(self):
        if os.path.isdir(os.path.join(self.tmp, "storage")):
            self.run("rm", "-a", "-f", "-t", "0", check=False)

    def diagnose(self, c):
        p = self.run("logs", c.name, check=False)
        return f"podman logs {c.name}:\n{(p.stdout + p.stderr)[-3000:]}"


class ContainerdPending(Pending):
    """A `ctr` checkpoint in the background. containerd deletes CRIU's work
    directory, dump.log with it, once the checkpoint has succeeded; after a
    failure its shim has copied dump.log to the bundle (criu-dump.log)."""

    def __init__(self, engine, c, args, leave_running):
        self.engine = engine
        self.c = c
        self.leave_running = leave_running
        live = os.path.join(engine.workdir(c), "criu-work", "dump.log")
        self.failed = os.path.join(engine.bundle(c), "criu-dump.log")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.failed)  # an earlier failure's
        # while the dump runs, its log is in the work directory
        super().__init__(args, lambda: read(live) or read(self.failed), engine.env)

    def wait(self, timeout=120):
        r = super().wait(timeout)
        if r.rc != 0:
            r.log = read(self.failed)
            if not r.log:
                r.gone = f"no {self.failed} after the failed checkpoint"
            return r
        r.log = ""
        r.gone = ("containerd deleted CRIU's work directory, dump.log with it, after the successful "
                  "checkpoint")
        if not self.leave_running:
            # `ctr c checkpoint --task` leaves the task running (containerd
            # 1.6's ctr has no checkpoint that stops the task and that
            # `ctr c restore` can restore): the container is stopped and
            # removed after it, as a node does to move it
            self.engine.remove(self.c)
        return r


class Containerd(Engine):
    """containerd with runc (its io.containerd.runc.v2 shim) as the runtime,
    driven with `ctr` as a user does: a daemon of the test's own (its own
    root, state, sockets and configuration, no CRI plugin, the native
    snapshotter: no kernel overlay on top of the machine's), started at the
    first container and killed at the end; an image imported from a
    tarball (no registry, no network).

    A checkpoint is `ctr c checkpoint --task NAME REF`: containerd pauses
    the container (cgroup freezer), runc runs CRIU with --leave-running, and
    the checkpoint becomes an image REF in containerd's content store; a
    restore is `ctr c restore --live NEW REF`, a new container from it.
    CRIU's logs: restore.log stays in the shim's work directory while the
    container exists; dump.log only after a failure (ContainerdPending).

    The shims' sockets are in /run/containerd/s whatever --state says (a
    constant of containerd 1.6): /run of the private machine, a tmpfs."""

    name = "containerd"
    needs = ("containerd", "ctr", "containerd-shim-runc-v2", "runc")
    image = "localhost/cudasnap-it:latest"
    namespace = "cudasnap-it"
    snapshotter = "native"

    def __init__(self, machine, tmp):
        self.machine = machine
        self.tmp = os.path.join(tmp, "containerd")
        self.root = os.path.join(self.tmp, "root")
        self.state = os.path.join(self.tmp, "state")
        self.runc_root = os.path.join(self.tmp, "runc")
        self.address = os.path.join(self.tmp, "containerd.sock")
        # containerd unpacks a checkpoint below $TMPDIR (and leaves it there)
        self.env = machine_env(TMPDIR=os.path.join(self.tmp, "tmp"))
        self.daemon = None
        self.serial = 0

    def start_daemon(self):
        if self.daemon:
            return
        for d in (self.root, self.state, self.runc_root, os.path.join(self.tmp, "tmp")):
            os.makedirs(d, exist_ok=True)
        config = os.path.join(self.tmp, "config.toml")
        # the CRI plugin (Kubernetes' API) is not needed; `opt` would make
        # /opt/containerd on the machine
        write(config, f"""version = 2
root = "{self.root}"
state = "{self.state}"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt"]

[grpc]
  address = "{self.address}"

[ttrpc]
  address = "{self.address}.ttrpc"

[debug]
  address = "{self.tmp}/debug.sock"
""")
        log = open(os.path.join(self.tmp, "containerd.log"), "ab")
        self.daemon = subprocess.Popen([shutil.which("containerd", path=PATH), "--config", config],
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env)
        log.close()
        ACTIVE.add(self.daemon.pid)
        deadline = time.monotonic() + 30
        while self.ctr("version", check=False).returncode != 0:
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"containerd did not start:\n{read(os.path.join(self.tmp, 'containerd.log'))[-3000:]}")
            time.sleep(0.1)
        self.import_image()

    def cmd(self, *args):
        return [shutil.which("ctr", path=PATH) or "ctr", "--address", self.address, "--namespace", self.namespace, *args]

    def ctr(self, *args, check=False, timeout=120):
        return run(self.cmd(*args), check=check, timeout=timeout, env=self.env, stdin=subprocess.DEVNULL)

    def import_image(self):
        """An OCI image layout of one layer, the empty mount points and the
        merged-/usr links; /usr itself comes from the machine, bound
        read-only (system_dirs)."""
        rootfs = os.path.join(self.tmp, "rootfs")
        for d in ("usr", "proc", "dev", "sys", "tmp", "etc", "run", "var/tmp"):
            os.makedirs(os.path.join(rootfs, d), exist_ok=True)
        self.binds = system_dirs(rootfs)
        layout = os.path.join(self.tmp, "oci")
        blobs = os.path.join(layout, "blobs", "sha256")
        os.makedirs(blobs)

        def blob(data, media_type, **extra):
            digest = hashlib.sha256(data).hexdigest()
            with open(os.path.join(blobs, digest), "wb") as f:
                f.write(data)
            return dict({"mediaType": media_type, "digest": "sha256:" + digest, "size": len(data)}, **extra)

        layer_tar = os.path.join(self.tmp, "layer.tar")
        run(["tar", "-C", rootfs, "--numeric-owner", "-cf", layer_tar, "."])
        with open(layer_tar, "rb") as f:
            layer = blob(f.read(), "application/vnd.oci.image.layer.v1.tar")
        platform = {"architecture": GOARCH.get(os.uname().machine, os.uname().machine), "os": "linux"}
        config = blob(json.dumps(dict(platform, config={"Env": ["PATH=" + PATH]},
                                      rootfs={"type": "layers", "diff_ids": [layer["digest"]]})).encode(),
                      "application/vnd.oci.image.config.v1+json")
        manifest = blob(json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                    "config": config, "layers": [layer]}).encode(),
                        "application/vnd.oci.image.manifest.v1+json", platform=platform,
                        annotations={"io.containerd.image.name": self.image})
        write(os.path.join(layout, "index.json"), json.dumps({"schemaVersion": 2, "manifests": [manifest]}))
        write(os.path.join(layout, "oci-layout"), json.dumps({"imageLayoutVersion": "1.0.0"}))
        tarball = os.path.join(self.tmp, "image.tar")
        run(["tar", "-C", layout, "-cf", tarball, "."])
        self.ctr("images", "import", "--snapshotter", self.snapshotter, tarball, check=True)

    def bundle(self, c):
        """The shim's bundle: config.json, the rootfs, criu-dump.log."""
        return os.path.join(self.state, "io.containerd.runtime.v2.task", self.namespace, c.name)

    def workdir(self, c):
        """The shim's work directory: criu-work/dump.log while a checkpoint
        runs, restore.log of the restore that made the container."""
        return os.path.join(self.root, "io.containerd.runtime.v2.task", self.namespace, c.name)

    def start(self, name, share, args, env, expect):
        self.start_daemon()
        flags = ["--snapshotter", self.snapshotter, "--cgroup", f"/{self.machine.cgroup}/{name}",
                 "--runc-root", self.runc_root, "--log-uri", f"file://{self.tmp}/{name}.stdio",
                 "--mount", f"type=bind,src={share},dst={share},options=rbind:rw"]
        for d in self.binds:
            flags += ["--mount", f"type=bind,src={d},dst={d},options=rbind:ro"]
        for k, v in env.items():
            flags += ["--env", f"{k}={v}"]
        p = self.ctr("run", "-d", *flags, self.image, name, *args)
        c = Container(self, name, share, expect)
        if p.returncode != 0:
            raise AssertionError(f"ctr run {name}: exit {p.returncode}\n{p.stdout}{p.stderr}\n{self.diagnose(c)}")
        return c

    def task(self, c):
        """(pid, status) of c's task, or None."""
        p = self.ctr("tasks", "ls")
        for line in p.stdout.splitlines()[1:]:
            f = line.split()
            if len(f) == 3 and f[0] == c.name:
                return int(f[1]), f[2]
        return None

    def init_pid(self, c):
        t = self.task(c)
        return t[0] if t and t[1] in ("RUNNING", "PAUSED", "CREATED") and t[0] > 0 else None

    def checkpoint_async(self, c, *extra):
        """`ctr c checkpoint --task` (--leave-running: the same, with the
        container left as it is; other flags, --rw or --image, passed on)."""
        leave = "--leave-running" in extra
        flags = [x for x in extra if x != "--leave-running"]
        if getattr(c, "ref", None):
            # containerd before 2.0 stores a checkpoint's runtime spec as a
            # blob of its content store and takes the blob that is there
            # already (the same spec: an earlier checkpoint of this container
            # or of the one it was restored from) for an error, which it then
            # ignores: the image it makes lacks the CRIU images and the spec,
            # and `ctr c restore` says 'media type not found' (containerd
            # pull request 8401). The earlier checkpoint goes first.
            self.ctr("images", "rm", "--sync", c.ref, check=True)
            c.ref = None
        self.serial += 1
        c.ref = f"localhost/checkpoint/{c.name}:{self.serial}"
        return ContainerdPending(self, c, self.cmd("containers", "checkpoint", "--task", *flags, c.name, c.ref),
                                 leave)

    def restore(self, c, timeout=120, flags=()):
        """`ctr c restore --live` of c's last checkpoint as a new container."""
        self.serial += 1
        name = re.sub(r"(-r\d+)?$", f"-r{self.serial}", c.name, count=1)
        n = Container(self, name, c.share, c.expect)
        n.ref = c.ref
        t0 = time.monotonic()
        p = self.ctr("containers", "restore", "--live", *flags, name, c.ref, timeout=timeout)
        wall = time.monotonic() - t0
        log = read(os.path.join(self.workdir(n), "restore.log"))
        r = Outcome(p.returncode, p.stdout + p.stderr, wall, log)
        if not log:
            r.gone = f"no {self.workdir(n)}/restore.log"
        return r, n

    # the media type of the blob that holds CRIU's images (containerd 1.6)
    CRIU_TAR = "application/vnd.containerd.container.criu.checkpoint.criu.tar"

    def blob(self, digest):
        algo, hexa = digest.split(":", 1)
        return os.path.join(self.root, "io.containerd.content.v1.content", "blobs", algo, hexa)

    def criu_blob(self, c):
        """The blob of the checkpoint image c.ref that holds CRIU's images:
        the image is an index whose entries are the checkpoint's blobs."""
        p = self.ctr("images", "ls", check=True)
        digest = next((f[2] for f in (line.split() for line in p.stdout.splitlines()[1:])
                       if len(f) > 2 and f[0] == c.ref), None)
        if digest is None:
            raise AssertionError(f"no image {c.ref}:\n{p.stdout}")
        with open(self.blob(digest)) as f:
            index = json.load(f)
        blobs = [m for m in index.get("manifests", []) if m.get("mediaType") == self.CRIU_TAR]
        if len(blobs) != 1:
            raise AssertionError(f"the checkpoint {c.ref} has {len(blobs)} blobs of {self.CRIU_TAR}: {index}")
        return self.blob(blobs[0]["digest"])

    def carried(self, c):
        """The members of that blob, a tar of the images directory: the
        regular files of its top level (containerd keeps no others)."""
        with tarfile.open(self.criu_blob(c)) as t:
            return {os.path.normpath(m.name): m.size for m in t.getmembers()
                    if m.isfile() and "/" not in os.path.normpath(m.name)}

    def carried_file(self, c, name):
        with tarfile.open(self.criu_blob(c)) as t:
            for m in t.getmembers():
                if m.isfile() and os.path.normpath(m.name) == name:
                    return t.extractfile(m).read()
        raise AssertionError(f"no {name} in the checkpoint {c.ref}")

    def stop(self, c):
        self.remove(c)

    def remove(self, c):
        self.ctr("tasks", "kill", "--signal", "SIGKILL", c.name)
        deadline = time.monotonic() + 10
        while self.init_pid(c) and time.monotonic() < deadline:
            reap()
            time.sleep(0.05)
        # without --force: ctr 1.6 waits for ever to force the deletion of a
        # task whose restore failed (CREATED, pid 0), which needs none
        if self.ctr("tasks", "delete", c.name).returncode != 0 and self.task(c):
            self.ctr("tasks", "delete", "--force", c.name, timeout=30)
        self.ctr("containers", "delete", c.name)

    def cleanup(self):
        if not self.daemon:
            return
        try:
            for line in self.ctr("containers", "ls", "--quiet").stdout.split():
                self.remove(Container(self, line, None, 0))
        finally:
            self.daemon.terminate()
            try:
                self.daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
            ACTIVE.discard(self.daemon.pid)
            self.daemon = None
            # a shim outlives the daemon until its task is deleted
            for pid in pids_of("containerd-shim"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            reap()

    def diagnose(self, c):
        return (f"stdio of {c.name}:\n{read(os.path.join(self.tmp, f'{c.name}.stdio'))[-3000:]}\n"
                f"containerd's log:\n{read(os.path.join(self.tmp, 'containerd.log'))[-3000:]}")
