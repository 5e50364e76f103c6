"""Memory cgroups that a test owns: cgroup v2 (memory.max) or v1's memory
controller (memory.limit_in_bytes, as on a hybrid host), created below a
parent of the test's own and removed at the end, with every process in them
killed first."""
import os
import signal
import time
import uuid

INITIAL_PIDNS = 0xEFFFFFFC


def initial_pidns():
    return os.stat("/proc/self/ns/pid").st_ino == INITIAL_PIDNS


def _mounts():
    """{"v1": (mount point, root), "v2": (...)} of the memory hierarchies."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            root, point = fields[3], fields[4].replace("\\040", " ")
            if tail[0] == "cgroup" and "memory" in tail[2].split(","):
                found.setdefault("v1", (point, root))
            elif tail[0] == "cgroup2":
                found.setdefault("v2", (point, root))
    return found


def _own_paths(pid="self"):
    """The cgroup of a process (this one) in v1's memory hierarchy and in
    v2, as /proc/PID/cgroup names them (None where it has none)."""
    v1 = v2 = None
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f.read().splitlines():
            hid, ctl, path = line.split(":", 2)
            if hid == "0" and ctl == "":
                v2 = path
            elif "memory" in ctl.split(","):
                v1 = path
    return v1, v2


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _read(path):
    with open(path) as f:
        return f.read()


def _key(path, key):
    for line in _read(path).splitlines():
        k, _, v = line.partition(" ")
        if k == key:
            return int(v)
    return None


class Cgroup:
    """One cgroup: path is how /proc/PID/cgroup names it, dir where it is."""

    def __init__(self, tree, path, directory):
        self.tree, self.path, self.dir = tree, path, directory

    def file(self, name):
        return os.path.join(self.dir, name)

    @property
    def version(self):
        return self.tree.version

    def procs(self):
        return [int(p) for p in _read(self.file("cgroup.procs")).split()]

    def usage(self):
        return int(_read(self.file("memory.current" if self.version == 2 else "memory.usage_in_bytes")))

    def limit(self):
        text = _read(self.file("memory.max" if self.version == 2 else "memory.limit_in_bytes")).strip()
        return None if text == "max" else int(text)

    def oom_kills(self):
        if self.version == 2:
            return _key(self.file("memory.events"), "oom_kill")
        return _key(self.file("memory.oom_control"), "oom_kill")

    def set_limit(self, limit):
        """A hard limit, with no swap to escape to: memory over it is
        reclaimed or ends with the OOM killer."""
        if self.version == 2:
            _write(self.file("memory.max"), str(limit))
            if os.path.exists(self.file("memory.swap.max")):
                _write(self.file("memory.swap.max"), "0")
            return
        memsw = self.file("memory.memsw.limit_in_bytes")
        if os.path.exists(memsw):
            _write(memsw, "-1")          # memsw may never be below the limit
        _write(self.file("memory.limit_in_bytes"), str(limit))
        if os.path.exists(memsw):
            _write(memsw, str(limit))

    def set_room(self, room):
        """The limit at what the cgroup uses now plus room; returns it as
        the kernel keeps it (rounded to pages)."""
        self.set_limit(self.usage() + room)
        return self.limit()

    def limit_files(self):
        """The names cudasnap may give the limit that decides."""
        if self.version == 2:
            return {"memory.max"}
        return {"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"}

    def enter_argv(self):
        """A command that moves itself into this cgroup and execs its
        arguments: the process is charged here from its first page."""
        return ["sh", "-c", f'echo $$ > "{self.file("cgroup.procs")}" && exec "$@"', "sh"]


def _directory(mount, path):
    """Where the cgroup that /proc/PID/cgroup names path lies under mount
    (its point and root), or None when the mount does not show it."""
    point, root = mount
    if root != "/" and not (path == root or path.startswith(root + "/")):
        return None
    rel = path[len(root):] if root != "/" else path
    return os.path.normpath(point + "/" + rel.lstrip("/"))


class _Version:
    def __init__(self, version):
        self.version = version


def cgroup_of(pid):
    """The memory cgroup that pid is in (v1's memory controller first, as on
    a hybrid host), as a Cgroup that the caller does not own: one a
    container engine made. None where this process cannot see it."""
    mounts = _mounts()
    v1, v2 = _own_paths(pid)
    for version, key, path in ((1, "v1", v1), (2, "v2", v2)):
        if path is None or key not in mounts:
            continue
        d = _directory(mounts[key], path)
        if d and os.path.isdir(d):
            return Cgroup(_Version(version), path, d)
    return None


class Cgroups:
    """A parent cgroup of the test's own, with children made on demand."""

    def __init__(self):
        self.children = []
        self.parent = None
        self.version = None
        if os.geteuid() != 0:
            self.why = "needs root to create memory cgroups"
            return
        mounts = _mounts()
        v1, v2 = _own_paths()
        self.why = "no memory cgroup hierarchy that can be written here"
        # On a hybrid host the v1 memory controller is the one that counts.
        if v1 is not None and "v1" in mounts:
            self._make_parent(1, mounts["v1"], [v1, "/"])
        elif v2 is not None and "v2" in mounts:
            self._make_parent(2, mounts["v2"], [v2, "/"])

    def _make_parent(self, version, mount, bases):
        name = f"cudasnap-it-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        for base in bases:
            base_dir = _directory(mount, base)
            if base_dir is None:
                continue
            try:
                # v2: a cgroup that holds processes cannot give its children
                # controllers (but the root can): then the root is tried.
                if version == 2 and not self._enable_memory(base_dir):
                    continue
                directory = os.path.join(base_dir, name)
                os.mkdir(directory)
            except OSError as e:
                self.why = f"cannot create a memory cgroup below {base_dir}: {e}"
                continue
            self.version = version
            self.parent = Cgroup(self, os.path.join(base, name) if base != "/" else "/" + name, directory)
            if version == 2 and not self._enable_memory(directory):
                self.remove()
                continue
            return

    @staticmethod
    def _enable_memory(directory):
        ctl = os.path.join(directory, "cgroup.subtree_control")
        try:
            if "memory" in _read(ctl).split():
                return True
            _write(ctl, "+memory")
            return True
        except OSError:
            return False

    def make(self, name, under=None):
        """A child of the parent, or of under (a Cgroup of this tree)."""
        top = under or self.parent
        if self.version == 2 and under is not None and not self._enable_memory(under.dir):
            raise OSError(f"cannot enable the memory controller below {under.dir}")
        path = f"{top.path}/{name}"
        directory = os.path.join(top.dir, name)
        os.mkdir(directory)
        cg = Cgroup(self, path, directory)
        self.children.append(cg)
        return cg

    def mount(self):
        """(mount point, filesystem type, options) of this tree's hierarchy:
        what `mount -t TYPE -o OPTIONS none POINT` mounts again."""
        point, _ = _mounts()["v1" if self.version == 1 else "v2"]
        return (point, "cgroup", "memory") if self.version == 1 else (point, "cgroup2", "rw")

    def remove(self):
        """Kills what is left in the children, then removes them (the
        deepest first) and the parent."""
        for cg in self.children[::-1] + ([self.parent] if self.parent else []):
            deadline = time.monotonic() + 10
            while True:
                try:
                    for pid in cg.procs():
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    os.rmdir(cg.dir)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        self.children, self.parent = [], None


def for_test(case):
    """Cgroups for a unittest case, removed at its end; the case is skipped,
    saying why, where none can be made."""
    cgroups = Cgroups()
    case.addCleanup(cgroups.remove)
    if not cgroups.parent:
        case.skipTest(cgroups.why)
    return cgroups
