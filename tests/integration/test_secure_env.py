#!/usr/bin/env python3
"""cudasnap given file capabilities honours no environment override.

With 'setcap cap_sys_ptrace+ep' on the binary (what the privileges hint
suggests), any user who can run it gets a process that may trace every other
one, and the kernel sets AT_SECURE. If CUDASNAP_LIBCUDA were honoured there,
that user's library would run inside the capable process. These tests run a
capable copy of cudasnap as nobody with CUDASNAP_LIBCUDA and CUDASNAP_LIBNVML
naming a library whose constructor leaves a mark (envmark.c): no mark may
appear, and doctor must say the overrides were ignored. A byte-identical copy
without the capability, run the same way, must load the library: ordinary
callers keep their overrides.

Needs root (setcap and the switch to nobody) and a file system that keeps
security.capability; the test is skipped, with the reason, where the kernel
does not make a file-capability program AT_SECURE.

Paths come from the environment (tests/integration/meson.build sets them):
CUDASNAP_BIN, ENVMARK_LIB (envmark.so), ATSECURE_PROBE (atsecure).
"""
import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import unittest

BIN = os.environ.get("CUDASNAP_BIN", "")
EVIL = os.environ.get("ENVMARK_LIB", "")
PROBE = os.environ.get("ATSECURE_PROBE", "")
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def nobody():
    try:
        p = pwd.getpwnam("nobody")
        return p.pw_uid, p.pw_gid
    except KeyError:
        return 65534, 65534


def setcap(*args):
    tool = shutil.which("setcap", path=os.environ.get("PATH", "") + ":" + SBIN_PATH)
    if not tool:
        return None, "setcap not found (Debian: libcap2-bin, installed by tests/deps.sh)"
    p = subprocess.run([tool, *args], capture_output=True, text=True)
    return p.returncode, (p.stderr or p.stdout).strip()


def copy_to(src, dst, mode):
    shutil.copyfile(src, dst)
    os.chmod(dst, mode)
    return dst


class Fixture:
    """A directory the unprivileged user can read: two copies of cudasnap (one
    to be made capable), two copies of the marking library, the probe, and a
    directory that user can write, so that a library loaded into either copy
    could leave its mark (a capability does not bypass file permissions)."""

    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="cudasnap-secure-")
        os.chmod(self.path, 0o755)
        self.uid, self.gid = nobody()
        self.capable = copy_to(BIN, os.path.join(self.path, "cudasnap-capable"), 0o755)
        self.plain = copy_to(BIN, os.path.join(self.path, "cudasnap-plain"), 0o755)
        self.probe = copy_to(PROBE, os.path.join(self.path, "atsecure"), 0o755)
        self.libcuda = copy_to(EVIL, os.path.join(self.path, "evil-libcuda.so"), 0o644)
        self.libnvml = copy_to(EVIL, os.path.join(self.path, "evil-libnvml.so"), 0o644)
        self.marks = os.path.join(self.path, "marks")
        os.mkdir(self.marks)
        os.chmod(self.marks, 0o777)
        self.state = os.path.join(self.marks, "state")

    def grant(self):
        """Gives the capable copy and the probe CAP_SYS_PTRACE; the reason to
        skip when such a program would not run privileged here (AT_SECURE
        and the capability in its effective set), else None."""
        for f in (self.capable, self.probe):
            rc, msg = setcap("cap_sys_ptrace+ep", f)
            if rc != 0:
                return f"setcap cap_sys_ptrace+ep {f} failed: {msg}"
        p = self.run([self.probe])
        if p.returncode != 0 or p.stdout.strip() != "at_secure=1 cap_sys_ptrace=1":
            return (f"a file-capability program run as uid {self.uid} does not run privileged here "
                    f"(probe said {(p.stdout.strip() or p.stderr.strip())!r}, exit {p.returncode}): "
                    "no_new_privs, a nosuid mount, a user namespace or a bounding set without "
                    "CAP_SYS_PTRACE")
        return None

    def env(self, overrides, extra):
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "ENVMARK_FILE": os.path.join(self.marks, "mark")}
        if overrides:
            env.update(CUDASNAP_LIBCUDA=self.libcuda, CUDASNAP_LIBNVML=self.libnvml,
                       CUDASNAP_STATE_DIR=self.state)
        # The sanitizer build's settings, if any, still apply.
        env.update({k: v for k, v in os.environ.items() if k.endswith("SAN_OPTIONS")})
        env.update(extra)
        return env

    def run(self, argv, overrides=True, **extra):
        """argv as nobody, without supplementary groups, in this directory."""
        return subprocess.run(argv, env=self.env(overrides, extra), cwd=self.path, user=self.uid,
                              group=self.gid, extra_groups=[], capture_output=True, text=True, timeout=120)

    def mark(self):
        try:
            with open(os.path.join(self.marks, "mark")) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def clear(self):
        for name in os.listdir(self.marks):
            p = os.path.join(self.marks, name)
            if os.path.isdir(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)

    def remove(self):
        shutil.rmtree(self.path, ignore_errors=True)


def no_sanitizer_report(test, p):
    test.assertNotIn("runtime error", p.stderr)
    test.assertNotIn("Sanitizer", p.stderr)


@unittest.skipUnless(BIN and EVIL and PROBE, "CUDASNAP_BIN, ENVMARK_LIB or ATSECURE_PROBE is not set")
class SecureEnvironment(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root: setcap and running the copies as nobody")
        cls.fx = Fixture()
        reason = cls.fx.grant()
        if reason:
            cls.fx.remove()
            raise unittest.SkipTest(reason)

    @classmethod
    def tearDownClass(cls):
        cls.fx.remove()

    def setUp(self):
        self.fx.clear()

    def run_capable(self, *args, overrides=True, **extra):
        p = self.fx.run([self.fx.capable, *args], overrides=overrides, **extra)
        no_sanitizer_report(self, p)
        return p

    def run_plain(self, *args, **extra):
        p = self.fx.run([self.fx.plain, *args], **extra)
        no_sanitizer_report(self, p)
        return p

    def test_copies_differ_only_in_the_capability(self):
        with open(self.fx.capable, "rb") as a, open(self.fx.plain, "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertTrue(os.getxattr(self.fx.capable, "security.capability"))
        with self.assertRaises(OSError):
            os.getxattr(self.fx.plain, "security.capability")
        self.assertEqual(os.stat(self.fx.capable).st_mode & 0o7777, 0o755)
        self.assertFalse(os.stat(self.fx.capable).st_mode & (stat.S_ISUID | stat.S_ISGID))

    def test_capable_ps_does_not_load_the_library(self):
        p = self.run_capable("ps")
        self.assertIsNone(self.fx.mark(), p)
        self.assertNotIn("evil-", p.stdout + p.stderr)

    def test_capable_doctor_says_the_overrides_are_ignored(self):
        p = self.run_capable("doctor")
        self.assertIsNone(self.fx.mark(), p)
        lines = p.stdout.splitlines()
        want = ("WARN  environment: running with elevated privileges (AT_SECURE): "
                "CUDASNAP_LIBCUDA, CUDASNAP_LIBNVML, CUDASNAP_STATE_DIR ignored")
        self.assertIn(want, lines, p.stdout + p.stderr)
        fix = lines[lines.index(want) + 1]
        self.assertTrue(fix.startswith("      fix: "), p.stdout)
        self.assertIn("setcap", fix)
        self.assertNotIn("evil-", p.stdout + p.stderr)

    def test_capable_doctor_json(self):
        p = self.run_capable("doctor", "--json")
        self.assertIsNone(self.fx.mark(), p)
        r = json.loads(p.stdout)
        env = r["environment"]
        # The kernel did mark this very process: AT_SECURE from its own
        # auxiliary vector, and CAP_SYS_PTRACE in its CapEff though it runs as nobody.
        self.assertIs(env["at_secure"], True, env)
        self.assertIs(env["cap_sys_ptrace"], True, env)
        self.assertEqual(env["euid"], self.fx.uid)
        names = ["CUDASNAP_LIBCUDA", "CUDASNAP_LIBNVML", "CUDASNAP_STATE_DIR"]
        self.assertEqual(env["overrides"], names)
        self.assertEqual(env["overrides_ignored"], names)
        c = [c for c in r["checks"] if c["name"] == "environment"]
        self.assertEqual(len(c), 1, r["checks"])
        self.assertEqual(c[0]["status"], "warn")
        self.assertTrue(c[0]["fix"])
        driver = [c for c in r["checks"] if c["name"] == "driver-library"][0]
        self.assertNotIn("evil-", driver["message"])

    def test_capable_doctor_without_overrides_passes(self):
        p = self.run_capable("doctor", "--json", overrides=False)
        r = json.loads(p.stdout)
        c = [c for c in r["checks"] if c["name"] == "environment"][0]
        self.assertEqual(c["status"], "pass", c)
        self.assertIn("AT_SECURE", c["message"])
        self.assertEqual(r["environment"]["overrides_ignored"], [])

    def test_capable_doctor_reads_only_the_default_settings_file(self):
        """CUDASNAP_CONFIG is an override like the others: a capable copy
        reads /etc/cudasnap/cudasnap.conf whatever it says."""
        conf = os.path.join(self.fx.path, "cudasnap.conf")
        with open(conf, "w") as f:
            f.write(f"CUDASNAP_LIBCUDA={self.fx.libcuda}\n")
        self.addCleanup(os.unlink, conf)
        p = self.run_capable("doctor", "--json", overrides=False, CUDASNAP_CONFIG=conf)
        self.assertIsNone(self.fx.mark(), p)
        self.assertEqual(json.loads(p.stdout)["settings"]["path"], "/etc/cudasnap/cudasnap.conf")
        p = self.fx.run([self.fx.plain, "doctor", "--json"], overrides=False, CUDASNAP_CONFIG=conf)
        self.assertEqual(json.loads(p.stdout)["settings"]["path"], conf, p)

    def test_capable_hook_reads_no_mode(self):
        p = self.run_capable("hook", GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE="save", CUDASNAP_HOOK_STRICT="1")
        self.assertEqual(p.returncode, 2, p)
        self.assertIn("GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE is ignored", p.stderr)
        self.assertIn("nothing was done", p.stderr)
        self.assertIsNone(self.fx.mark(), p)
        self.assertFalse(os.path.exists(self.fx.state))

    def test_plain_copy_honours_the_overrides(self):
        p = self.run_plain("ps")
        mark = self.fx.mark()
        self.assertIsNotNone(mark, p)
        self.assertIn("loaded=%s uid=%d euid=%d at_secure=0\n" % (self.fx.libcuda, self.fx.uid, self.fx.uid),
                      mark)
        self.assertIn(self.fx.libcuda, p.stdout + p.stderr)

    def test_plain_doctor_loads_both_libraries(self):
        p = self.run_plain("doctor", "--json")
        mark = self.fx.mark() or ""
        for lib in (self.fx.libcuda, self.fx.libnvml):
            self.assertIn("loaded=%s uid=%d " % (lib, self.fx.uid), mark)
        r = json.loads(p.stdout)
        self.assertIs(r["environment"]["at_secure"], False)
        self.assertIs(r["environment"]["cap_sys_ptrace"], False)
        self.assertEqual(r["environment"]["overrides_ignored"], [])
        c = [c for c in r["checks"] if c["name"] == "environment"][0]
        self.assertEqual(c["status"], "pass", c)
        self.assertEqual(c["message"],
                         "overrides in effect: CUDASNAP_LIBCUDA, CUDASNAP_LIBNVML, CUDASNAP_STATE_DIR")


if __name__ == "__main__":
    unittest.main(verbosity=2)
