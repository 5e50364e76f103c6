#!/usr/bin/env python3
"""End-to-end tests of `cudasnap doctor`.

Paths come from the environment (tests/integration/meson.build sets them):
  CUDASNAP_EXE      the cudasnap binary (required)
  CUDASNAP_LIBCUDA  the fake libcuda.so.1 (optional: those tests are skipped)
  CUDASNAP_LIBNVML  the fake libnvidia-ml.so.1
  FAKECUDA_APP      the fake CUDA application

The sandbox detector reads files under $CUDASNAP_ROOT instead of /, so the
gVisor, container, PID namespace, privilege and host memory checks are tested
over fake roots laid out in temporary directories.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from harness import trusted_tmpdir

EXE = os.environ.get("CUDASNAP_EXE", "")
LIBCUDA = os.environ.get("CUDASNAP_LIBCUDA", "")
LIBNVML = os.environ.get("CUDASNAP_LIBNVML", "")
APP = os.environ.get("FAKECUDA_APP", "")
HAVE_FAKE = all(p and os.path.exists(p) for p in (LIBCUDA, LIBNVML, APP))

GPUS = ["GPU-1a4ec0da-0000-4000-8000-000000000001",
        "GPU-2b4ec0da-0000-4000-8000-000000000002",
        "GPU-3c4ec0da-0000-4000-8000-000000000003"]
GVISOR_VERSION = "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016\n"
LINUX_VERSION = "Linux version 6.8.0-45-generic (buildd@host) (gcc 13) #45-Ubuntu SMP\n"
INIT_PIDNS = "pid:[4026531836]"


def clean_env(**extra):
    """The test's environment without any cudasnap or fake driver knobs.
    LD_LIBRARY_PATH goes too: meson points it at the build's driver doubles,
    which cudasnap would then load by their default names and take for the
    machine's driver."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDASNAP_", "FAKECUDA_", "CUDA_")) and k != "LD_LIBRARY_PATH"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def doctor(*args, **env):
    p = subprocess.run([EXE, "doctor", *args], env=clean_env(**env),
                       capture_output=True, text=True, timeout=60)
    if "runtime error" in p.stderr or "Sanitizer" in p.stderr:
        raise AssertionError("sanitizer report:\n" + p.stderr)
    return p


def doctor_json(**env):
    p = doctor("--json", **env)
    return p.returncode, json.loads(p.stdout)


def check(report, name, pid=None):
    """The one check called name (about pid when given)."""
    found = [c for c in report["checks"]
             if c["name"] == name and (pid is None or c["pid"] == pid)]
    if len(found) != 1:
        raise AssertionError("%d checks named %s (pid %s) in %s" % (
            len(found), name, pid, [c["name"] for c in report["checks"]]))
    return found[0]


def names(report):
    return [c["name"] for c in report["checks"]]


class FakeRoot:
    """A directory laid out like / for CUDASNAP_ROOT."""

    def __init__(self, test):
        self.path = tempfile.mkdtemp(prefix="cudasnap-root-")
        test.addCleanup(shutil.rmtree, self.path, ignore_errors=True)

    def write(self, rel, text):
        full = os.path.join(self.path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
        return self

    def link(self, rel, target):
        full = os.path.join(self.path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        os.symlink(target, full)
        return self

    def status(self, uid=0, capeff="000001ffffffffff", nspid="4242"):
        return self.write("proc/self/status",
                          "Name:\tcudasnap\nUmask:\t0022\nState:\tR (running)\n"
                          "Tgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t1\n"
                          "Uid:\t{0}\t{0}\t{0}\t{0}\nGid:\t0\t0\t0\t0\n"
                          "NSpid:\t{1}\nCapInh:\t0000000000000000\n"
                          "CapPrm:\t{2}\nCapEff:\t{2}\n".format(uid, nspid, capeff))

    def linux_host(self):
        """A plain Linux host: no container signal, the initial PID namespace."""
        self.write("proc/version", LINUX_VERSION)
        self.write("proc/sys/kernel/osrelease", "6.8.0-45-generic\n")
        self.write("proc/self/cgroup", "0::/user.slice/user-1000.slice/session-1.scope\n")
        self.write("proc/self/environ", "PATH=/usr/bin\0HOME=/root\0")
        self.write("proc/meminfo", "MemTotal:       65536000 kB\n"
                                   "MemFree:        30000000 kB\n"
                                   "MemAvailable:   60000000 kB\n")
        self.link("proc/self/ns/pid", INIT_PIDNS)
        return self.status()


@unittest.skipUnless(EXE, "CUDASNAP_EXE is not set")
class Usage(unittest.TestCase):
    def test_help(self):
        p = doctor("--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("Usage:", p.stdout)

    def test_bad_option(self):
        self.assertEqual(doctor("--bogus").returncode, 2)

    def test_extra_argument(self):
        p = doctor("now")
        self.assertEqual(p.returncode, 2)
        self.assertIn("no arguments", p.stderr)


@unittest.skipUnless(EXE, "CUDASNAP_EXE is not set")
class NoDriver(unittest.TestCase):
    ENV = {"CUDASNAP_LIBCUDA": "/nonexistent/libcuda.so.1",
           "CUDASNAP_LIBNVML": "/nonexistent/libnvidia-ml.so.1"}

    def test_human(self):
        p = doctor(**self.ENV)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        lines = p.stdout.splitlines()
        fail = [i for i, l in enumerate(lines) if l.startswith("FAIL  driver-library:")]
        self.assertEqual(len(fail), 1, p.stdout)
        self.assertIn("/nonexistent/libcuda.so.1", lines[fail[0]])
        self.assertTrue(lines[fail[0] + 1].startswith("      fix: "), p.stdout)
        self.assertIn("CUDASNAP_LIBCUDA", lines[fail[0] + 1])
        self.assertTrue(any(l.startswith("WARN  nvml: NVML not found") for l in lines), p.stdout)
        self.assertRegex(lines[-1], r"^\d+ passed, \d+ warnings?, \d+ failed$")

    def test_json(self):
        rc, r = doctor_json(**self.ENV)
        self.assertEqual(rc, 1)
        for key in ("checks", "summary", "environment", "gpus"):
            self.assertIn(key, r)
        drv = check(r, "driver-library")
        self.assertEqual(drv["status"], "fail")
        self.assertTrue(drv["fix"])
        self.assertEqual(check(r, "nvml")["status"], "warn")
        self.assertEqual(r["gpus"], [])
        self.assertNotIn("checkpoint-api", names(r))
        counts = {s: sum(c["status"] == s for c in r["checks"]) for s in ("pass", "warn", "fail")}
        self.assertEqual(r["summary"], counts)
        for c in r["checks"]:
            self.assertIn(c["status"], ("pass", "warn", "fail"))
            self.assertIsInstance(c["message"], str)
            self.assertTrue(c["fix"] is None or isinstance(c["fix"], str))
            if c["status"] != "pass":
                self.assertTrue(c["fix"], c)
        env = r["environment"]
        self.assertIsInstance(env["gvisor"], bool)
        self.assertIsInstance(env["container"], bool)
        self.assertIn(env["pid_namespace"], ("host", "child", "unknown"))
        self.assertEqual(env["euid"], os.geteuid())
        self.assertIsInstance(env["cap_sys_ptrace"], bool)


@unittest.skipUnless(EXE, "CUDASNAP_EXE is not set")
class Sandbox(unittest.TestCase):
    """The detectors over fake roots (no driver needed)."""

    def env(self, root, **extra):
        return dict(CUDASNAP_ROOT=root.path, CUDASNAP_LIBCUDA="/nonexistent",
                    CUDASNAP_LIBNVML="/nonexistent", **extra)

    def detect(self, root):
        _, r = doctor_json(**self.env(root))
        return r

    def test_linux_host(self):
        r = self.detect(FakeRoot(self).linux_host())
        e = r["environment"]
        self.assertEqual((e["gvisor"], e["container"], e["pid_namespace"]), (False, False, "host"))
        self.assertEqual(check(r, "pid-namespace")["status"], "pass")
        self.assertIn("6.8.0-45-generic", check(r, "gvisor")["message"])

    def test_gvisor_version_stamp(self):
        root = FakeRoot(self).linux_host()
        root.write("proc/version", GVISOR_VERSION)
        root.write("proc/sys/kernel/osrelease", "4.4.0\n")
        e = self.detect(root)["environment"]
        self.assertTrue(e["gvisor"])
        self.assertIn("build stamp", e["gvisor_signal"])
        self.assertTrue(e["container"])
        self.assertEqual(e["pid_namespace"], "child")

    def test_gvisor_sentry_meminfo(self):
        root = FakeRoot(self).linux_host().write("proc/sentry-meminfo", "")
        r = self.detect(root)
        self.assertTrue(r["environment"]["gvisor"])
        self.assertIn("sentry-meminfo", check(r, "gvisor")["message"])

    def test_gvisor_release(self):
        root = FakeRoot(self).linux_host()
        root.write("proc/version", "Linux version 4.19.0-gvisor #2 SMP\n")
        root.write("proc/sys/kernel/osrelease", "4.19.0-gvisor\n")
        self.assertTrue(self.detect(root)["environment"]["gvisor"])

    def test_real_kernel_4_4_is_not_gvisor(self):
        root = FakeRoot(self).linux_host()
        root.write("proc/version", "Linux version 4.4.0-210-generic (buildd@lgw01) #242-Ubuntu SMP\n")
        root.write("proc/sys/kernel/osrelease", "4.4.0-210-generic\n")
        self.assertFalse(self.detect(root)["environment"]["gvisor"])

    def container_signal(self, root):
        e = self.detect(root)["environment"]
        self.assertTrue(e["container"], e)
        return e["container_signal"]

    def test_dockerenv(self):
        root = FakeRoot(self).linux_host().write(".dockerenv", "")
        self.assertIn("Docker", self.container_signal(root))

    def test_containerenv(self):
        root = FakeRoot(self).linux_host().write("run/.containerenv", "engine=\"podman\"\n")
        self.assertIn("Podman", self.container_signal(root))

    def test_systemd_container_file(self):
        root = FakeRoot(self).linux_host().write("run/systemd/container", "systemd-nspawn\n")
        self.assertIn("systemd-nspawn", self.container_signal(root))

    def test_container_env(self):
        root = FakeRoot(self).linux_host().write("proc/self/environ", "A=1\0container=lxc\0")
        self.assertIn("container=lxc", self.container_signal(root))

    def test_container_env_of_pid1(self):
        root = FakeRoot(self).linux_host().write("proc/1/environ", "container=podman\0")
        self.assertIn("container=podman", self.container_signal(root))

    def test_kubernetes_env(self):
        root = FakeRoot(self).linux_host().write(
            "proc/self/environ", "KUBERNETES_SERVICE_HOST=10.0.0.1\0")
        self.assertIn("Kubernetes", self.container_signal(root))

    def test_cgroup_path(self):
        root = FakeRoot(self).linux_host().write(
            "proc/self/cgroup",
            "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope\n")
        self.assertIn("kubepods", self.container_signal(root))

    def test_runtime_daemon_cgroup_is_not_a_container(self):
        root = FakeRoot(self).linux_host().write(
            "proc/self/cgroup", "0::/system.slice/containerd.service\n")
        self.assertFalse(self.detect(root)["environment"]["container"])

    def test_overlay_root_from_docker(self):
        root = FakeRoot(self).linux_host().write(
            "proc/self/mountinfo",
            "20 1 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A,"
            "upperdir=/var/lib/docker/overlay2/x/diff,workdir=/var/lib/docker/overlay2/x/work\n"
            "21 20 0:51 / /proc rw - proc proc rw\n")
        self.assertIn("/var/lib/docker/", self.container_signal(root))

    def test_child_pid_namespace(self):
        root = FakeRoot(self).linux_host()
        os.unlink(os.path.join(root.path, "proc/self/ns/pid"))
        root.link("proc/self/ns/pid", "pid:[4026532413]")
        r = self.detect(root)
        self.assertEqual(r["environment"]["pid_namespace"], "child")
        self.assertIn("host PIDs", check(r, "pid-namespace")["message"])

    def test_outer_procfs(self):
        root = FakeRoot(self).linux_host().status(nspid="4242\t17")
        os.unlink(os.path.join(root.path, "proc/self/ns/pid"))
        r = self.detect(root)
        self.assertEqual(r["environment"]["pid_namespace"], "child")
        c = check(r, "pid-namespace")
        self.assertEqual(c["status"], "warn")
        self.assertIn("outer PID namespace", c["message"])

    def test_kthreadd_means_host(self):
        root = FakeRoot(self).linux_host()
        os.unlink(os.path.join(root.path, "proc/self/ns/pid"))
        root.write("proc/2/stat", "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 "
                                  "3 0 0 18446744073709551615\n")
        self.assertEqual(self.detect(root)["environment"]["pid_namespace"], "host")

    def test_nothing_readable(self):
        root = FakeRoot(self)
        p = doctor("--json", **self.env(root))
        r = json.loads(p.stdout)
        self.assertEqual(r["environment"]["pid_namespace"], "unknown")
        self.assertEqual(check(r, "pid-namespace")["status"], "warn")
        self.assertEqual(r["environment"]["euid"], os.geteuid())
        self.assertEqual(check(r, "privileges")["status"], "warn")

    def test_mps_control_pipe(self):
        root = FakeRoot(self).linux_host().write("tmp/nvidia-mps/control", "")
        c = check(self.detect(root), "mps")
        self.assertEqual(c["status"], "warn")
        self.assertIn("nvidia-cuda-mps-control", c["fix"])

    def test_unprivileged(self):
        root = FakeRoot(self).linux_host().status(uid=1000, capeff="0000000000000000")
        r = self.detect(root)
        e = r["environment"]
        self.assertEqual((e["euid"], e["cap_sys_ptrace"]), (1000, False))
        c = check(r, "privileges")
        self.assertEqual(c["status"], "warn")
        self.assertIn("uid 1000", c["message"])

    def test_root_without_ptrace(self):
        # every capability but bit 19
        root = FakeRoot(self).linux_host().status(uid=0, capeff="000001fffff7ffff")
        r = self.detect(root)
        self.assertFalse(r["environment"]["cap_sys_ptrace"])
        self.assertIn("even as root", check(r, "privileges")["message"])

    def test_user_with_ptrace(self):
        root = FakeRoot(self).linux_host().status(uid=1000, capeff="0000000000080000")
        r = self.detect(root)
        self.assertTrue(r["environment"]["cap_sys_ptrace"])
        self.assertEqual(check(r, "privileges")["status"], "pass")


@unittest.skipUnless(EXE, "CUDASNAP_EXE is not set")
class Environment(unittest.TestCase):
    """The overrides an ordinary caller set are honoured and named. With
    elevated privileges (AT_SECURE) they are ignored: test_secure_env.py."""

    def test_overrides_in_effect(self):
        p = doctor(CUDASNAP_LIBCUDA="/nonexistent/libcuda.so.1", CUDASNAP_STATE_DIR="",
                   GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE="save", CUDASNAP_LIBNVML="/nonexistent/nvml.so")
        want = ("PASS  environment: overrides in effect: CUDASNAP_LIBCUDA, CUDASNAP_LIBNVML, "
                "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE")
        self.assertIn(want, p.stdout.splitlines(), p.stdout)
        # The override was honoured: the doctor tried the path it names.
        self.assertIn("/nonexistent/libcuda.so.1", check(doctor_json(
            CUDASNAP_LIBCUDA="/nonexistent/libcuda.so.1")[1], "driver-library")["message"])

    def test_json(self):
        _, r = doctor_json(CUDASNAP_LIBCUDA="/nonexistent", CUDASNAP_ROOT="/")
        e = r["environment"]
        self.assertIs(e["at_secure"], False)
        self.assertEqual(e["overrides"], ["CUDASNAP_LIBCUDA", "CUDASNAP_ROOT"])
        self.assertEqual(e["overrides_ignored"], [])
        c = check(r, "environment")
        self.assertEqual((c["status"], c["fix"], c["pid"]), ("pass", None, None))

    def test_no_override(self):
        env = {k: v for k, v in clean_env().items() if not k.startswith("GVISOR_")}
        p = subprocess.run([EXE, "doctor", "--json"], env=env, capture_output=True, text=True, timeout=60)
        r = json.loads(p.stdout)
        self.assertEqual(check(r, "environment")["message"], "no override is set")
        self.assertEqual(r["environment"]["overrides"], [])


NO_DRIVER = {"CUDASNAP_LIBCUDA": "/nonexistent/libcuda.so.1", "CUDASNAP_LIBNVML": "/nonexistent/nvml.so"}


@unittest.skipUnless(EXE, "CUDASNAP_EXE is not set")
class Settings(unittest.TestCase):
    """The settings check lists what the file sets, each line it skipped and
    why it was ignored. The files live below the build directory (meson's
    CS_TEST_TRUSTED_DIR): below /tmp, which anyone can write, every one
    would be refused."""

    def setUp(self):
        self.dir = trusted_tmpdir(self, "settings-")

    def conf(self, text, rel="cudasnap.conf", mode=0o644):
        path = os.path.join(self.dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def human(self, path, **env):
        """The settings check's lines: the check, then what is indented below it."""
        p = doctor(CUDASNAP_CONFIG=path, **dict(NO_DRIVER, **env))
        lines = p.stdout.splitlines()
        at = [i for i, l in enumerate(lines) if l[6:].startswith("settings: ")]
        self.assertEqual(len(at), 1, p.stdout)
        out = [lines[at[0]]]
        for line in lines[at[0] + 1:]:
            if not line.startswith("      "):
                break
            out.append(line)
        return out

    def json(self, path, **env):
        _, r = doctor_json(CUDASNAP_CONFIG=path, **dict(NO_DRIVER, **env))
        return check(r, "settings"), r["settings"], r["environment"]

    def test_settings_and_skipped_lines_listed(self):
        path = self.conf("# node settings\n"
                         "just words\n"
                         "CUDASNAP_LIBCUDA=/nonexistent/from-file.so\n"
                         "CUDASNAP_STATE_DIR=/var/lib/state\x1b[2J\x07\n"
                         "PATH=/usr/bin\n"
                         "CUDASNAP_CONFIG=/elsewhere\n"
                         "CUDASNAP_DEVICE_MAP = GPU-a=GPU-b\n")
        lines = self.human(path)
        self.assertEqual(lines, [
            f"WARN  settings: {path}: 3 lines skipped; it sets CUDASNAP_LIBCUDA (the environment "
            "overrides it), CUDASNAP_STATE_DIR, CUDASNAP_DEVICE_MAP",
            "      CUDASNAP_LIBCUDA=/nonexistent/from-file.so (the environment overrides it)",
            "      CUDASNAP_STATE_DIR=/var/lib/state?[2J?",
            "      CUDASNAP_DEVICE_MAP=GPU-a=GPU-b",
            "      line 2 skipped: not NAME=VALUE",
            "      line 5 skipped: PATH is not a setting of the file",
            "      line 6 skipped: CUDASNAP_CONFIG is not a setting of the file",
            lines[-1],
        ])
        self.assertTrue(lines[-1].startswith("      fix: "), lines)
        c, s, e = self.json(path)
        self.assertEqual(c["status"], "warn")
        self.assertEqual(s, {
            "path": path, "read": True, "ignored": None,
            "settings": [
                {"name": "CUDASNAP_LIBCUDA", "value": "/nonexistent/from-file.so", "overridden": True},
                {"name": "CUDASNAP_STATE_DIR", "value": "/var/lib/state?[2J?", "overridden": False},
                {"name": "CUDASNAP_DEVICE_MAP", "value": "GPU-a=GPU-b", "overridden": False},
            ],
            "skipped": [{"line": 2, "reason": "not NAME=VALUE"},
                        {"line": 5, "reason": "PATH is not a setting of the file"},
                        {"line": 6, "reason": "CUDASNAP_CONFIG is not a setting of the file"}],
            "skipped_total": 3,
        })
        self.assertEqual(e["settings_file"], path)
        self.assertEqual(e["settings"], ["CUDASNAP_LIBCUDA", "CUDASNAP_STATE_DIR", "CUDASNAP_DEVICE_MAP"])

    def test_clean_file_passes(self):
        path = self.conf("CUDASNAP_DEVICE_MAP=GPU-a=GPU-b\n\n# done\n")
        self.assertEqual(self.human(path), [f"PASS  settings: {path} sets CUDASNAP_DEVICE_MAP",
                                            "      CUDASNAP_DEVICE_MAP=GPU-a=GPU-b"])
        c, s, _ = self.json(path)
        self.assertEqual((c["status"], c["fix"]), ("pass", None))
        self.assertEqual((s["read"], s["ignored"], s["skipped"], s["skipped_total"]), (True, None, [], 0))

    def test_empty_and_absent(self):
        path = self.conf("# nothing yet\n")
        self.assertEqual(self.human(path), [f"PASS  settings: {path} sets nothing"])
        absent = os.path.join(self.dir, "absent.conf")
        self.assertEqual(self.human(absent), [f"PASS  settings: {absent} does not exist: nothing is set"])
        c, s, _ = self.json(absent)
        self.assertEqual((c["status"], s["read"], s["ignored"], s["settings"]), ("pass", False, None, []))

    def test_many_bad_lines_are_counted(self):
        path = self.conf("CUDASNAP_DEVICE_MAP=GPU-a=GPU-b\n" + "bad line\n" * 40)
        lines = self.human(path)
        self.assertEqual(lines[0], f"WARN  settings: {path}: 40 lines skipped; it sets CUDASNAP_DEVICE_MAP")
        self.assertEqual(lines[2:18], [f"      line {n} skipped: not NAME=VALUE" for n in range(2, 18)])
        self.assertEqual(lines[18], "      and 24 more lines skipped")
        _, s, _ = self.json(path)
        self.assertEqual([k["line"] for k in s["skipped"]], list(range(2, 18)))
        self.assertEqual(s["skipped_total"], 40)

    def assertIgnored(self, path, why):
        lines = self.human(path)
        self.assertEqual(lines[0], f"WARN  settings: {path} is ignored: {why}")
        self.assertTrue(lines[1].startswith("      fix: "), lines)
        self.assertEqual(len(lines), 2, lines)
        c, s, e = self.json(path)
        self.assertEqual((c["status"], s["read"], s["ignored"], s["settings"]), ("warn", False, why, []))
        self.assertEqual(e["settings"], [])

    def test_sticky_world_writable_directory(self):
        path = self.conf("CUDASNAP_DEVICE_MAP=GPU-a=GPU-b\n", rel="shared/cudasnap.conf")
        os.chmod(os.path.dirname(path), 0o1777)
        self.assertIgnored(path, f"{self.dir}/shared is writable by others (the sticky bit does not stop "
                                 "anyone from creating the next name in it)")

    def test_symbolic_link(self):
        real = self.conf("CUDASNAP_DEVICE_MAP=GPU-a=GPU-b\n")
        link = os.path.join(self.dir, "link.conf")
        os.symlink(real, link)
        self.assertIgnored(link, f"{link} is a symbolic link")

    def test_below_tmp(self):
        """Where tests used to put it: /tmp is world-writable, sticky or not."""
        if os.stat("/tmp").st_mode & 0o1777 != 0o1777:
            self.skipTest("/tmp is not world-writable with the sticky bit here")
        tmp = tempfile.mkdtemp(prefix="cudasnap-settings-", dir="/tmp")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        path = os.path.join(tmp, "cudasnap.conf")
        with open(path, "w") as f:
            f.write("CUDASNAP_DEVICE_MAP=GPU-a=GPU-b\n")
        self.assertIgnored(path, "/tmp is writable by others (the sticky bit does not stop anyone from "
                                 "creating the next name in it)")


def wait_for(path, timeout=20.0, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError("the fake application exited (%s): %s" % (
                proc.returncode, proc.stderr.read().decode(errors="replace")))
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return text
        time.sleep(0.02)
    raise AssertionError("%s did not appear" % path)


def loaded_library(prefixes):
    """Path of a shared library this interpreter maps, for a harmless preload."""
    with open("/proc/self/maps") as f:
        paths = {l.split()[-1] for l in f if "/" in l and ".so" in l}
    for prefix in prefixes:
        for p in sorted(paths):
            if os.path.basename(p).startswith(prefix):
                return p
    return None


@unittest.skipUnless(EXE and HAVE_FAKE, "the fake driver is not built")
class MemoryCgroup:
    """A memory cgroup of this test, v2 or (on a v1 or hybrid host) v1, with
    a 64 MiB limit; removed at cleanup."""

    def __init__(self, test):
        name = f"cudasnap-doctor-{os.getpid()}"
        v1 = "/sys/fs/cgroup/memory"
        if os.path.isdir(v1):
            self.dir, self.limit_file, self.path = os.path.join(v1, name), "memory.limit_in_bytes", "/" + name
        elif os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            base = open("/proc/self/cgroup").read().split("::", 1)[1].strip()
            parent = "/sys/fs/cgroup" + (base if base != "/" else "")
            if "memory" not in open(os.path.join(parent, "cgroup.subtree_control")).read().split():
                test.skipTest(f"the memory controller is not enabled below {parent}")
            self.dir, self.limit_file = os.path.join(parent, name), "memory.max"
            self.path = (base.rstrip("/") + "/" + name)
        else:
            test.skipTest("no memory cgroup hierarchy")
        try:
            os.mkdir(self.dir)
            with open(os.path.join(self.dir, self.limit_file), "w") as f:
                f.write(str(64 << 20))
        except OSError as e:
            test.skipTest(f"cannot make a memory cgroup ({e}): needs root")
        self.procs = os.path.join(self.dir, "cgroup.procs")
        test.addCleanup(self.remove)

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)


def memory_cgroup(test):
    return MemoryCgroup(test)


class FakeDriver(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cudasnap-doctor-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.devdir = os.path.join(self.tmp, "dev")
        self.ready = os.path.join(self.tmp, "ready")
        os.mkdir(self.devdir)
        os.mkdir(self.ready)
        self.fake = {"CUDASNAP_LIBCUDA": LIBCUDA, "CUDASNAP_LIBNVML": LIBNVML,
                     "CUDASNAP_DEV_DIR": self.devdir, "FAKECUDA_GPUS": ",".join(GPUS)}

    def start_app(self, *args, **env):
        env.setdefault("FAKECUDA_GPUS", ",".join(GPUS))
        procs = env.pop("CS_TEST_CGROUP", None)
        e = clean_env(CUDASNAP_DEV_DIR=self.devdir, **env)
        argv = [APP, "--ready-dir", self.ready, *args]
        if procs:  # into the cgroup before it allocates anything
            argv = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *argv]
        p = subprocess.Popen(argv, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def stop():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            p.stderr.close()
        self.addCleanup(stop)
        wait_for(os.path.join(self.ready, "%d.ready" % p.pid), proc=p)
        return p.pid

    def test_driver_checks_pass(self):
        p = doctor(**self.fake)
        for name in ("driver-library", "driver-version", "checkpoint-api", "device-map",
                     "nvml", "gpus", "persistence"):
            self.assertRegex(p.stdout, r"(?m)^PASS  %s: " % name)
        rc, r = doctor_json(**self.fake)
        self.assertIn(LIBCUDA, check(r, "driver-library")["message"])
        self.assertIn("580.159.04", check(r, "driver-version")["message"])
        self.assertEqual([g["uuid"] for g in r["gpus"]], GPUS)
        for i, g in enumerate(r["gpus"]):
            self.assertEqual(g["index"], i)
            self.assertEqual(g["name"], "NVIDIA H200")
            self.assertIs(g["persistence_mode"], True)
            self.assertGreater(g["memory_total"], 0)
            self.assertIsInstance(g["memory_used"], int)

    def test_persistence_off(self):
        rc, r = doctor_json(FAKECUDA_PERSISTENCE=0, **self.fake)
        c = check(r, "persistence")
        self.assertEqual(c["status"], "warn")
        self.assertIn(GPUS[0], c["message"])
        self.assertIn("nvidia-smi -pm 1", c["fix"])
        self.assertIs(r["gpus"][0]["persistence_mode"], False)

    def test_old_driver_cannot_remap(self):
        rc, r = doctor_json(FAKECUDA_DRIVER_VERSION=12080, **self.fake)
        self.assertEqual(check(r, "checkpoint-api")["status"], "pass")
        self.assertEqual(check(r, "device-map")["status"], "warn")

    def test_driver_without_checkpoint_api(self):
        rc, r = doctor_json(FAKECUDA_DRIVER_VERSION=12040, **self.fake)
        self.assertEqual(rc, 1)
        self.assertEqual(check(r, "driver-library")["status"], "pass")
        c = check(r, "checkpoint-api")
        self.assertEqual(c["status"], "fail")
        self.assertIn("R570", c["fix"])

    def memory(self, used_mib, app_env=None):
        """doctor's host-memory checks with one fake CUDA process: in this
        test's own PID namespace NVML's per-process figures name no process
        here, so the process's need is bounded by its GPU's use."""
        root = FakeRoot(self).linux_host()
        root.write("proc/meminfo", "MemTotal: 2048000 kB\nMemAvailable: 1024000 kB\n")
        pid = self.start_app("--mem", "8", **(app_env or {}))
        env = dict(self.fake, CUDASNAP_ROOT=root.path, FAKECUDA_GPUS=GPUS[0], FAKECUDA_GPU_USED_MIB=used_mib)
        rc, r = doctor_json(**env)
        total = [c for c in r["checks"] if c["name"] == "host-memory" and c["pid"] is None]
        self.assertEqual(len(total), 1, r["checks"])
        return rc, check(r, "host-memory", pid), total[0]

    def test_host_memory(self):
        rc, mine, total = self.memory(100, {"FAKECUDA_GPUS": GPUS[0]})
        self.assertEqual((mine["status"], total["status"]), ("pass", "pass"), (mine, total))
        self.assertIn("up to 0.11 GiB of host memory (0.10 GiB of GPU memory)", mine["message"])
        rc, mine, total = self.memory(1200, {"FAKECUDA_GPUS": GPUS[0]})
        self.assertEqual((rc, mine["status"], total["status"]), (1, "fail", "fail"), (mine, total))
        self.assertIn("MemAvailable", mine["message"])
        self.assertIn("Free at least", mine["fix"])

    def test_host_memory_own_cgroup(self):
        """Each process is judged against its own memory cgroup, not the
        doctor's: one in a cgroup whose limit its copy would pass fails."""
        cg = memory_cgroup(self)
        rc, mine, _ = self.memory(300, {"FAKECUDA_GPUS": GPUS[0], "CS_TEST_CGROUP": cg.procs})
        self.assertEqual(mine["status"], "fail", mine)
        self.assertIn(cg.path, mine["message"])
        self.assertIn(cg.limit_file, mine["message"])
        self.assertIn("Raise " + cg.limit_file, mine["fix"])

    def test_no_cuda_process_is_fine(self):
        rc, r = doctor_json(**self.fake)
        self.assertEqual(check(r, "processes")["status"], "pass")

    def test_visible_gpus(self):
        pid = self.start_app(CUDA_VISIBLE_DEVICES="2,0")
        rc, r = doctor_json(**self.fake)
        self.assertIn("%d (" % pid, check(r, "processes")["message"])
        c = check(r, "visible-gpus", pid)
        self.assertEqual(c["status"], "pass")
        self.assertIn("2 " + GPUS[2], c["message"])
        self.assertIn("0 " + GPUS[0], c["message"])
        self.assertNotIn(GPUS[1], c["message"])
        proc = [p for p in r["processes"] if p["pid"] == pid][0]
        self.assertEqual(proc["cuda_visible_devices"], "2,0")
        self.assertEqual([v["id"] for v in proc["visible_gpus"]], [GPUS[2], GPUS[0]])
        human = doctor(**self.fake).stdout
        self.assertRegex(human, r"(?m)^PASS  visible-gpus: pid %d \(.*2 %s" % (pid, GPUS[2]))

    def test_visible_gpus_unset_means_all(self):
        pid = self.start_app()
        rc, r = doctor_json(**self.fake)
        proc = [p for p in r["processes"] if p["pid"] == pid][0]
        self.assertIsNone(proc["cuda_visible_devices"])
        self.assertEqual([v["index"] for v in proc["visible_gpus"]], [0, 1, 2])

    def test_visible_gpus_uuid_prefix_and_bad_entry(self):
        pid = self.start_app(CUDA_VISIBLE_DEVICES=GPUS[1][:8] + ",7,0")
        dup = self.start_app(CUDA_VISIBLE_DEVICES="0,0,1")
        rc, r = doctor_json(**self.fake)
        c = check(r, "visible-gpus", pid)
        self.assertEqual(c["status"], "warn")
        self.assertIn("1 " + GPUS[1], c["message"])
        self.assertIn("ignores the entries from 7,0", c["message"])
        c = check(r, "visible-gpus", dup)
        self.assertEqual(c["status"], "warn")
        self.assertIn("ignores the entries from 0,1", c["message"])

    def test_visible_gpus_long_list(self):
        many = ["GPU-%d%d4ec0da-0000-4000-8000-00000000000%d" % (i, i, i) for i in range(1, 9)]
        self.fake["FAKECUDA_GPUS"] = ",".join(many)
        pid = self.start_app(CUDA_VISIBLE_DEVICES=",".join(reversed(many)),
                             FAKECUDA_GPUS=",".join(many))
        rc, r = doctor_json(**self.fake)
        self.assertEqual(check(r, "visible-gpus", pid)["status"], "pass")
        proc = [p for p in r["processes"] if p["pid"] == pid][0]
        self.assertEqual([v["index"] for v in proc["visible_gpus"]], list(range(7, -1, -1)))

    def test_clean_process(self):
        pid = self.start_app()
        rc, r = doctor_json(**self.fake)
        self.assertEqual(check(r, "communication", pid)["status"], "pass")
        self.assertEqual(check(r, "sharing", pid)["status"], "pass")

    def test_mps_environment(self):
        pid = self.start_app(CUDA_MPS_PIPE_DIRECTORY="/tmp/mps-pipes")
        rc, r = doctor_json(**self.fake)
        c = check(r, "sharing", pid)
        self.assertEqual(c["status"], "warn")
        self.assertIn("CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipes", c["message"])
        self.assertTrue(c["fix"])

    def test_mig_instance_visible(self):
        mig = "MIG-5c4f6f5e-5c4e-5b8a-9e3d-0123456789ab"
        # the fake driver stops at the MIG entry; 0 keeps it running
        pid = self.start_app(CUDA_VISIBLE_DEVICES="0," + mig)
        rc, r = doctor_json(**self.fake)
        c = check(r, "sharing", pid)
        self.assertEqual(c["status"], "warn")
        self.assertIn("MIG", c["message"])
        self.assertIn(mig, check(r, "visible-gpus", pid)["message"])

    def test_communication_library(self):
        lib = loaded_library(("libutil.so", "libdl.so", "libm.so", "libz.so"))
        if not lib:
            self.skipTest("no harmless library to preload")
        nccl = os.path.join(self.tmp, "libnccl.so.2")
        shutil.copy(lib, nccl)
        # An ASan build wants its runtime first; the preloaded copy is not instrumented.
        asan = os.environ.get("ASAN_OPTIONS", "")
        asan = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        pid = self.start_app(LD_PRELOAD=nccl, ASAN_OPTIONS=asan)
        rc, r = doctor_json(**self.fake)
        c = check(r, "communication", pid)
        self.assertEqual(c["status"], "warn")
        self.assertIn("libnccl.so.2", c["message"])
        self.assertIn("NCCL", c["message"])
        self.assertTrue(c["fix"])

    def test_forked_child_holds_devices(self):
        pid = self.start_app("--fork-after-init", "1")
        deadline = time.monotonic() + 20
        kids = []
        while not kids and time.monotonic() < deadline:
            kids = [int(n.split(".")[0]) for n in os.listdir(self.ready)
                    if n.endswith(".ready") and int(n.split(".")[0]) != pid]
            time.sleep(0.02)
        self.assertTrue(kids)
        wait_for(os.path.join(self.ready, "%d.ready" % kids[0]))
        rc, r = doctor_json(**self.fake)
        c = check(r, "device-holders")
        self.assertEqual(c["status"], "warn")
        self.assertIn("%d (" % kids[0], c["message"])
        self.assertIn('multiprocessing_context="spawn" or "forkserver"', c["fix"])

    def test_a_process_of_unknown_class_without_device_files_is_no_holder(self):
        # without a driver to ask, a process that maps libcuda and holds no
        # device file is "unknown" to ps, which shows no device file of it:
        # doctor does not say it holds any
        pid = self.start_app("--no-init")
        nodriver = dict(self.fake, CUDASNAP_LIBCUDA="/nonexistent/libcuda.so.1")
        r = subprocess.run([EXE, "ps", "--json"], capture_output=True, text=True, env=clean_env(**nodriver))
        got = [p for p in json.loads(r.stdout)["processes"] if p["pid"] == pid]
        self.assertEqual([(p["class"], p.get("device_refs", [])) for p in got], [("unknown", [])], r.stdout)
        _, rep = doctor_json(**nodriver)
        holders = [c for c in rep["checks"] if c["name"] == "device-holders"]
        self.assertFalse([c for c in holders if "%d (" % pid in c["message"]], holders)


if __name__ == "__main__":
    unittest.main(verbosity=2)
