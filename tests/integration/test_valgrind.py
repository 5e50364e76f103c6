"""cudasnap under valgrind: checkpoint and restore of 20 fake CUDA processes,
with injected faults so that the rollback paths run too. No memory error, no
definite leak, and no file descriptor left open at exit but the standard
three and those the driver library opened (the double, like the real
driver, keeps its device files and its restore-thread socket for the life of
the process once NVML or CUDA is initialized in it). No suppression is
needed: the double's thread leaves only a "possibly lost" block, which is
not an error kind here.

VALGRIND (the program) comes from meson; the test runs only where valgrind
is installed, in a build without sanitizers."""
import os
import re
import subprocess
import sys
import tarfile
import time
import unittest

from criu_case import RECORD
from harness import APP, BIN, GPU0, GPU1, Case
from test_inspect import NO_LIBARCHIVE, entry, inventory, record

VALGRIND = os.environ.get("VALGRIND", "valgrind")
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_DIR = os.path.join(os.path.dirname(HERE), "fake")
# Valgrind's own exit status for errors; 1 and 3 are cudasnap's (rolled back, incomplete).
VG_ERROR = 99


def in_fake(frame):
    """Whether a stack frame (printed with full source paths) is code of the
    driver double's libraries."""
    m = re.search(r"\((/[^():]+\.c):\d+\)", frame)
    return bool(m) and os.path.dirname(os.path.realpath(m.group(1))) == os.path.realpath(FAKE_DIR)


def open_fds(log):
    """(fd, description, stack lines, inherited) for every fd valgrind saw open at exit."""
    out, cur = [], None
    for line in log.splitlines():
        body = re.sub(r"^==\d+== ?", "", line)
        m = re.match(r"Open (?:file descriptor|AF_\w+ socket) (\d+): ?(.*)", body)
        if m:
            cur = [int(m.group(1)), m.group(2), [], False]
            out.append(cur)
        elif cur and body.strip().startswith(("at ", "by ")):
            cur[2].append(body.strip())
        elif cur and "<inherited from parent>" in body:
            cur[3] = True
        elif not body.strip():
            cur = None
    return out


class Valgrind(Case):
    def start_many(self, n):
        procs = [subprocess.Popen([APP, "--ready-dir", self.ready, "--mem", "1"], env=self.env,
                                  start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(n)]
        self.apps.extend(procs)
        deadline = time.monotonic() + 60
        while sum(f.endswith(".ready") for f in os.listdir(self.ready)) < n:
            self.assertLess(time.monotonic(), deadline, "fake apps not ready")
            time.sleep(0.05)
        return sorted(p.pid for p in procs)

    def vg(self, *args, rc):
        log = os.path.join(self.tmp, f"vg-{args[0]}-{len(os.listdir(self.tmp))}.log")
        cmd = [VALGRIND, "--leak-check=full", "--errors-for-leak-kinds=definite", f"--error-exitcode={VG_ERROR}",
               "--track-fds=yes", "--num-callers=40", "--fullpath-after=", f"--log-file={log}",
               BIN, *args]
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=600)
        with open(log) as f:
            text = f.read()
        self.assertEqual(p.returncode, rc, f"{args}: {p.stderr[-3000:]}\n{text[-6000:]}")
        self.assertRegex(text, r"ERROR SUMMARY: 0 errors", text[-6000:])
        self.assertNotRegex(text, r"definitely lost: [1-9]", text[-6000:])
        ours = []
        for fd, what, stack, inherited in open_fds(text):
            if inherited or fd <= 2 or any(in_fake(f) for f in stack):
                continue
            ours.append(f"fd {fd} {what}: " + " | ".join(stack[:6]))
        self.assertFalse(ours, f"{args}: cudasnap left fds open:\n" + "\n".join(ours))
        self.runs += 1

    def test_checkpoint_and_restore_under_valgrind(self):
        self.runs = 0
        pids = self.start_many(20)
        self.vg("ps", rc=0)
        self.fault(f"{pids[7]} checkpoint error=999 1", f"{pids[3]} lock delay=20 1")
        self.vg("checkpoint", rc=1)
        self.assertStates(pids, "running")
        self.fault(f"{pids[5]} checkpoint leak-fd 1")
        self.vg("checkpoint", rc=0)
        self.assertStates(pids, "checkpointed")
        self.vg("verify", rc=1)
        self.fault(f"{pids[11]} unlock error=999 1")
        self.vg("restore", rc=1)
        self.assertStates(pids, "checkpointed")
        os.unlink(self.faults)
        self.vg("restore", rc=0)
        self.assertStates(pids, "running")
        self.vg("lock", "--pid", str(pids[0]), rc=0)
        self.vg("unlock", rc=0)
        self.assertDataOk(pids)
        print(f"{self.runs} cudasnap runs under valgrind, 20 processes: clean", file=sys.stderr)

    def test_inspect_under_valgrind(self):
        """inspect of images and of an archive of them (libarchive loaded),
        and of what is not a checkpoint."""
        self.runs = 0
        # GPU1 of the record is not here: another GPU stands in for it
        self.env["FAKECUDA_GPUS"] = f"{GPU0},GPU-33333333-3333-4333-8333-333333333333"
        plugins = os.path.join(self.tmp, "criu-plugins")  # CRIU's plugin directory, the plugin in it
        os.makedirs(plugins)
        open(os.path.join(plugins, "cudasnap_plugin.so"), "wb").close()
        self.env["CUDASNAP_CRIU_PLUGIN_DIR"] = plugins
        d = os.path.join(self.tmp, "images")
        os.makedirs(d)
        for name, data in (("inventory.img", inventory()),
                           (RECORD, record([entry(1, "python3", [GPU0], 64), entry(7, "worker", [GPU1], 8)]))):
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        self.vg("inspect", d, rc=0)
        self.vg("inspect", d, "--json", rc=0)
        archive = os.path.join(self.tmp, "ckpt.tar.gz")
        with tarfile.open(archive, "w:gz") as t:
            t.add(d, arcname="checkpoint")
        if NO_LIBARCHIVE is None:
            self.vg("inspect", archive, "--json", rc=0)
        self.vg("inspect", BIN, rc=2)
        self.vg("inspect", self.tmp, rc=2)
        print(f"{self.runs} cudasnap inspect runs under valgrind: clean", file=sys.stderr)


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
