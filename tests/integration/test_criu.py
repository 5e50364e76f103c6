"""criu dump / criu restore of fake CUDA process trees through cudasnap_plugin.so,
with a real CRIU (4.1 or newer) and the driver test double: what the plugin
does with a tree, its failures and its neighbours. The environment and the
set-up are criu_case.py's; the refusals before anything changes are in
test_criu_refusals.py."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import criu_rpc
from criu_case import CRIU, CRIU_CUDA_PLUGIN, RECORD, CriuCase, main
from harness import APP, GPU0, GPU1, trusted_tmpdir


class Criu(CriuCase):
    # the plugin alone: the whole tree out and back, data intact
    def test_dump_and_restore_a_tree(self):
        pids = self.tree("--spawn", "3", "--mem", "32", expect=4)
        self.assertEqual(len(pids), 4)
        r = self.assertDumped(pids)
        print(f"dump of 4 x 32 MiB: {r.wall:.2f} s", file=sys.stderr)
        self.assertTrue(any("checkpointed 4 processes" in line for line in r.cudasnap_lines()), r)
        with open(os.path.join(self.images, RECORD)) as f:
            rec = json.load(f)
        self.assertEqual(sorted(e["pid"] for e in rec["processes"]), pids)
        self.assertIn(b"cudasnap", self.inventory_plugins())
        r = self.restore()
        print(f"restore: {r.wall:.2f} s", file=sys.stderr)
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(any("restored 4 processes" in line for line in r.cudasnap_lines()), r)
        self.assertRunningAndOk(pids)
        # The dump's manifest described the processes it ended; none is left
        # to be taken for the restored ones.
        self.assertFalse(os.path.exists(os.path.join(self.state, "manifest.json")))

    # a tree without CUDA: the plugin stays out of the images
    def test_tree_without_cuda_needs_no_plugin(self):
        pids = self.tree("--no-init", expect=1)
        self.assertDumped(pids)
        self.assertFalse(os.path.exists(os.path.join(self.images, RECORD)))
        self.assertNotIn(b"cudasnap", self.inventory_plugins())
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.cudasnap_lines(), [], r)
        self.assertTrue(os.path.exists(f"/proc/{pids[0]}"))

    # the images require the plugin
    def test_restore_without_the_plugin_is_refused(self):
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        self.assertDumped(pids)
        r = self.restore(plugins=self.empty, log="restore-without.log")
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(any("Missing required plugin" in line and "cudasnap" in line
                            for line in r.log.splitlines()), r)
        self.assertGone(pids)
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(pids)

    # a driver error at each step of each process
    def fault_matrix(self, op, side):
        for which in (0, 1, 2):
            with self.subTest(op=op, which=which):
                pids = self.tree("--spawn", "2", "--mem", "2", expect=3)
                self.assertEqual(pids[0], self.root)
                victim = pids[which]
                if side == "dump":
                    self.fault(f"{victim} {op} error=999 1")
                    r = self.dump()
                    self.assertNotEqual(r.rc, 0, r)
                    self.assertIn(f"{op} of process {victim}", r.log, r)
                    self.assertIn("CUDA_ERROR_UNKNOWN", r.log, r)
                    os.unlink(self.faults)
                    self.assertRunningAndOk(pids)
                else:
                    self.assertDumped(pids)
                    self.fault(f"{victim} {op} error=999 1")
                    keep = which == 1
                    r = self.restore(env={"CUDASNAP_KEEP_FAILED_RESTORE": "1"} if keep else None)
                    for pid in pids:
                        self.assertTrue(any(f"process {pid} (" in line and "NOT restored" in line
                                            for line in r.cudasnap_lines()), f"{pid} not named: {r}")
                    self.assertIn("GPU restore FAILED", r.log, r)
                    os.unlink(self.faults)
                    if not keep:
                        # CRIU ignores the result of RESUME_DEVICES_LATE: the
                        # plugin kills the restored processes, CRIU then
                        # fails the restore, and the images restore again.
                        self.assertNotEqual(r.rc, 0, r)
                        self.assertIn("restored processes are killed", r.log, r)
                        self.assertGone(pids)
                        r = self.restore(log="restore2.log")
                        self.assertEqual(r.rc, 0, r)
                        self.assertRunningAndOk(pids)
                    else:
                        # Kept as the settings ask: the tree runs, its GPU
                        # state stays checkpointed, and the log says how to
                        # restore each.
                        self.assertEqual(r.rc, 0, r)
                        self.assertIn("KEPT as CUDASNAP_KEEP_FAILED_RESTORE=1 asks", r.log, r)
                        self.assertStates(pids, "checkpointed")
                        advice = re.findall(r"run '(cudasnap restore [^']*)'", r.log)
                        self.assertEqual(len(advice), len(pids), r)
                        for line in advice:
                            c = self.cs(*line.split()[1:])
                            self.assertEqual(c.rc, 0, c)
                        self.assertRunningAndOk(pids)
                self.doCleanups()
                self.setUp()

    def test_error_at_lock_fails_the_dump(self):
        self.fault_matrix("lock", "dump")

    def test_error_at_checkpoint_fails_the_dump(self):
        self.fault_matrix("checkpoint", "dump")

    def test_error_at_restore_leaves_the_tree_checkpointed(self):
        self.fault_matrix("restore", "restore")

    def test_error_at_unlock_kills_the_tree_or_keeps_it_checkpointed(self):
        self.fault_matrix("unlock", "restore")

    # CRIU itself fails after the GPU checkpoint: the exit hook gives the
    # GPU state back before CRIU lets the tree go
    def test_criu_failure_after_the_checkpoint_gives_the_gpu_state_back(self):
        outside, inside = socket.socketpair()
        self.addCleanup(outside.close)
        with inside:
            # a unix socket connected outside the tree: CRIU refuses it
            # (without --ext-unix-sk) while it dumps the files
            pids = self.tree("--spawn", "2", "--mem", "8", expect=3, stdin=inside.fileno())
        r = self.dump()
        self.assertNotEqual(r.rc, 0, r)
        lines = r.cudasnap_lines()
        self.assertTrue(any("checkpointed 3 processes" in line for line in lines), r)
        self.assertTrue(any("3 processes back to running after the failed dump" in line for line in lines), r)
        self.assertRunningAndOk(pids)

    # The GPU filled up after the dump: refused at the restore's init,
    # before CRIU creates any process, and restorable once there is room;
    # CUDASNAP_WAIT_MEMORY waits for it there
    def test_restore_refused_at_init_while_the_gpu_is_full(self):
        self.env["FAKECUDA_GPU_TOTAL_MIB"] = "1024"
        pids = self.tree("--spawn", "1", "--mem", "64", expect=2)
        self.assertDumped(pids)
        filler, = self.start("--mem", "900")
        r = self.restore()
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn("REFUSED before CRIU created any process", r.log, r)
        self.assertTrue(any("cannot be restored here: its restore needs" in line for line in r.cudasnap_lines()), r)
        self.assertFalse([p for p in pids if os.path.exists(f"/proc/{p}")], "CRIU created processes")
        threading.Timer(2.0, os.kill, (filler, signal.SIGKILL)).start()
        r = self.restore(log="restore2.log", env={"CUDASNAP_WAIT_MEMORY": "30"})
        self.assertEqual(r.rc, 0, r)
        self.assertGreaterEqual(r.wall, 1.9, r)
        self.assertIn("waiting up to", r.log, r)
        self.assertRunningAndOk(pids)

    # --leave-running: the GPU state comes back at the end of the dump
    def test_leave_running(self):
        pids = self.tree("--spawn", "2", "--mem", "8", expect=3)
        r = self.dump("-R")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(any("3 processes back to running" in line for line in r.cudasnap_lines()), r)
        self.assertTrue(os.path.exists(os.path.join(self.images, RECORD)))
        self.assertRunningAndOk(pids)
        self.assertFalse(os.path.exists(os.path.join(self.state, "manifest.json")))

    # a child forked after CUDA init fails the dump at once, named
    def test_forked_device_holder_fails_at_once(self):
        pids = self.tree("--fork-after-init", "1", "--mem", "4", expect=2)
        holder = next(p for p in pids if self.role(p) == "forked")
        parent = self.root
        r = self.dump()
        print(f"dump refused in {r.wall:.2f} s", file=sys.stderr)
        self.assertNotEqual(r.rc, 0, r)
        self.assertLess(r.wall, 5, r)
        self.assertTrue(any(f"process {holder} " in line and "forked" in line for line in r.cudasnap_lines()), r)
        self.assertRunningAndOk([parent])
        self.assertTrue(os.path.exists(f"/proc/{holder}"))

    # the processes are checkpointed concurrently
    def test_checkpoints_run_concurrently(self):
        pids = self.tree("--spawn", "3", "--mem", "4", expect=4)
        self.fault("* checkpoint delay=1500")
        r = self.dump()
        print(f"dump of 4 processes with a 1.5 s checkpoint each: {r.wall:.2f} s", file=sys.stderr)
        self.assertEqual(r.rc, 0, r)
        self.assertLess(r.wall, 4.5, f"one after another would take > 6 s: {r}")
        self.assertGone(pids)

    # not beside CRIU's own CUDA plugin
    def test_refuses_criu_cuda_plugin_beside_it(self):
        if not CRIU_CUDA_PLUGIN:
            self.skipTest("CRIU's cuda_plugin.so is neither beside this criu (../plugins/) nor in /usr/lib/criu/")
        shutil.copy(CRIU_CUDA_PLUGIN, self.plugins)
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        r = self.dump()
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(any("CRIU's CUDA plugin" in line and "cuda_plugin.so" in line
                            for line in r.cudasnap_lines()), r)
        self.assertRunningAndOk(pids)

    # --- a node whose state directory cannot be used ---
    # CRIU loads the plugin for every dump of the node: one without CUDA must
    # never need the state directory or the driver.

    def plain_tree(self):
        """A shell and two sleeps, which never load the driver: what most
        trees of a GPU node are. Returns their pids."""
        with open(os.path.join(self.tmp, "plain.out"), "ab") as out:
            p = subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600 & wait"], start_new_session=True,
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        self.apps.append(p)
        self.root = p.pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            kids = self.children(p.pid)
            if len(kids) == 2 and all(self.comm(k) == "sleep" for k in kids):
                pids = [p.pid] + kids
                self.tree_pids += pids
                return pids
            time.sleep(0.02)
        self.fail(f"sh did not start its two sleeps: {self.children(p.pid)}")

    @staticmethod
    def children(pid):
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                return sorted(int(x) for x in f.read().split())
        except OSError:
            return []

    @staticmethod
    def comm(pid):
        try:
            with open(f"/proc/{pid}/comm") as f:
                return f.read().strip()
        except OSError:
            return None

    def unusable_state_dirs(self):
        """{what: path} of state directories the plugin cannot use: one that
        group members may write to (tmpfiles' 0775), one on a read-only
        filesystem, and one that cannot be created there."""
        loose = os.path.join(self.tmp, "state-0775")
        os.mkdir(loose)
        os.chmod(loose, 0o775)
        ro = os.path.join(self.tmp, "ro")
        os.mkdir(ro)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "cudasnap-test-ro", ro], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", ro], check=False)
        os.mkdir(os.path.join(ro, "cudasnap"), 0o700)
        subprocess.run(["mount", "-o", "remount,ro", ro], check=True)
        return {"mode 0775": loose, "read-only": os.path.join(ro, "cudasnap"),
                "not creatable": os.path.join(ro, "missing")}

    def driver_envs(self):
        """{what: variables for CRIU} for a machine whose driver can or
        cannot be loaded (this one has no libcuda.so.1 of its own)."""
        return {"the double": {},
                "a driver library that is not there": {"CUDASNAP_LIBCUDA": os.path.join(self.tmp, "nowhere",
                                                                                       "libcuda.so.1")},
                "no driver library": {"CUDASNAP_LIBCUDA": None, "LD_LIBRARY_PATH": None}}

    def dump_with(self, env, *extra):
        return self.criu("dump", "-t", str(self.root), "-D", self.images, "-L", self.plugins, *extra,
                         log="dump.log", env=env)

    def fresh_images(self):
        shutil.rmtree(self.images)
        os.makedirs(self.images)

    def test_tree_without_cuda_needs_no_state_directory(self):
        states = self.unusable_state_dirs()
        for driver, base in self.driver_envs().items():
            for what, state in states.items():
                for leave_running in (True, False):
                    with self.subTest(driver=driver, state=what, leave_running=leave_running):
                        self.dump_plain_tree(dict(base, CUDASNAP_STATE_DIR=state), leave_running)
        # nothing was written into any of them
        self.assertEqual({what: os.listdir(path) if os.path.exists(path) else None for what, path in states.items()},
                         {"mode 0775": [], "read-only": [], "not creatable": None})

    def dump_plain_tree(self, env, leave_running):
        self.fresh_images()
        pids = self.plain_tree()
        r = self.dump_with(env, *(["-R"] if leave_running else []))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.cudasnap_lines(), [], r)
        if not leave_running:
            self.assertGone(pids)
            self.assertNotIn(b"cudasnap", self.inventory_plugins())
            r = self.restore(env=env)
            self.assertEqual(r.rc, 0, r)
            self.assertEqual(r.cudasnap_lines(), [], r)
        self.assertEqual([self.comm(p) for p in pids], ["sh", "sleep", "sleep"])
        os.killpg(self.root, signal.SIGKILL)
        self.assertGone(pids)

    def test_cuda_tree_with_an_unusable_state_directory_fails_naming_the_fix(self):
        states = self.unusable_state_dirs()
        # a directory the claims cannot go into
        states["claims a file"] = os.path.join(self.tmp, "state-claims")
        os.mkdir(states["claims a file"], 0o700)
        with open(os.path.join(states["claims a file"], "claims"), "w"):
            pass
        for what, state in states.items():
            with self.subTest(state=what):
                pids = self.tree("--spawn", "2", "--mem", "4", expect=3)
                r = self.dump_with(dict(self.env, CUDASNAP_STATE_DIR=state))
                self.assertNotEqual(r.rc, 0, r)
                errors = [line for line in r.cudasnap_lines() if "state directory" in line]
                self.assertEqual(len(errors), 1, r)
                self.assertIn(f"process {self.root} (fakecuda-app)", errors[0], r)
                self.assertIn("CUDASNAP_STATE_DIR=", errors[0], r)
                self.assertIn("/etc/cudasnap/cudasnap.conf", errors[0], r)
                if what != "claims a file":  # the driver was asked before the claim
                    self.assertFalse([line for line in r.cudasnap_lines() if "enabled" in line], r)
                self.assertRunningAndOk(pids)
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                self.assertGone(pids)

    def test_cuda_tree_without_a_driver_is_refused_by_name(self):
        """No driver here can checkpoint: CRIU could not dump the device
        files, so the plugin refuses the process, and the state directory
        does not matter."""
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        state = self.unusable_state_dirs()["mode 0775"]
        for driver, env in self.driver_envs().items():
            if not env:
                continue
            with self.subTest(driver=driver):
                r = self.dump_with(dict(env, CUDASNAP_STATE_DIR=state))
                self.assertNotEqual(r.rc, 0, r)
                self.assertTrue(any(f"process {self.root} (fakecuda-app)" in line and "no driver" in line
                                    for line in r.cudasnap_lines()), r)
                self.assertRunningAndOk(pids)
                self.assertEqual(os.listdir(state), [])

    def test_state_directory_from_the_settings_file_with_run_read_only(self):
        """The fix the log gives, where the state directory cannot come from
        the environment (container engines pass none): /run read-only, the
        settings file names another directory. A restore of images without
        the plugin's record needs neither."""
        env = {"CUDASNAP_STATE_DIR": None}
        subprocess.run(["mount", "-o", "remount,ro", "/run"], check=True)
        self.addCleanup(subprocess.run, ["mount", "-o", "remount,rw", "/run"], check=True)
        self.dump_plain_tree(env, leave_running=False)
        self.fresh_images()
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        r = self.dump_with(env)
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(any(f"process {self.root} (fakecuda-app)" in line and "/run/cudasnap" in line
                            for line in r.cudasnap_lines()), r)
        self.assertRunningAndOk(pids)
        # The settings file is read only where nobody but root can have put it: not below /tmp.
        confdir = trusted_tmpdir(self, "criu-settings-")
        conf = os.path.join(confdir, "cudasnap.conf")
        with open(conf, "w") as f:
            f.write(f"CUDASNAP_STATE_DIR={self.state}\n")
        env["CUDASNAP_CONFIG"] = conf
        self.fresh_images()
        r = self.dump_with(env)
        self.assertEqual(r.rc, 0, r)
        self.assertGone(pids)
        self.assertTrue(os.path.isdir(os.path.join(self.state, "claims")))
        r = self.restore(env=env)
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(pids)


    # --- CRIU driven over RPC, as container engines drive it ---

    def rpc_log(self, name):
        with open(os.path.join(self.images, name), errors="replace") as f:
            return [line for line in f.read().splitlines() if "cudasnap: " in line or "Error" in line]

    def test_rpc_dump_with_leave_running(self):
        """criu swrk with a request that says leave_running and timeout, as
        runc sends it: CRIU's command line shows neither, and the tree must
        still be back on the GPU afterwards."""
        pids = self.tree("--spawn", "2", "--mem", "8", expect=3)
        env = dict(self.env, CRIU_LIBS_DIR=self.plugins)
        r = criu_rpc.dump(CRIU, self.root, self.images, leave_running=True, timeout=9, env=env)
        lines = self.rpc_log("dump.log")
        self.assertTrue(r.success, f"{r}\n" + "\n".join(lines))
        self.assertTrue(any("lock timeout 9 s, tree left running after a dump; from CRIU's options" in line
                            for line in lines), lines)
        self.assertTrue(any("3 processes back to running" in line for line in lines), lines)
        self.assertRunningAndOk(pids)

    def test_rpc_dump_then_restore(self):
        pids = self.tree("--spawn", "1", "--mem", "8", expect=2)
        env = dict(self.env, CRIU_LIBS_DIR=self.plugins)
        r = criu_rpc.dump(CRIU, self.root, self.images, env=env)
        self.assertTrue(r.success, f"{r}\n" + "\n".join(self.rpc_log("dump.log")))
        self.assertGone(pids)
        r = criu_rpc.restore(CRIU, self.images, env=env)
        lines = self.rpc_log("restore.log")
        self.assertTrue(r.success, f"{r}\n" + "\n".join(lines))
        self.assertTrue(any("restored 2 processes" in line for line in lines), lines)
        self.assertRunningAndOk(pids)

    # --- restoring onto other GPUs ---

    def gpu_of(self, pids):
        return {pid: dict(kv.split("=", 1) for kv in line.split()[1:])["gpu"]
                for pid, line in self.verify_data(pids).items()}

    def test_restore_onto_other_gpus_without_being_told(self):
        """The dump's machine has GPU0, the restore's only GPU1 (another node):
        the plugin maps one onto the other by itself, and says so."""
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2,
                         env={"FAKECUDA_GPUS": f"{GPU0},{GPU1}", "CUDA_VISIBLE_DEVICES": "0"})
        r = self.dump()
        self.assertEqual(r.rc, 0, r)
        with open(os.path.join(self.images, RECORD)) as f:
            self.assertEqual([e["gpus"] for e in json.load(f)["processes"]], [[GPU0]] * 2)
        self.assertGone(pids)
        r = self.restore(env={"FAKECUDA_GPUS": GPU1})
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(any(f"{GPU0}, which the dump's processes used, is not on this machine: restoring onto {GPU1}"
                            in line for line in r.cudasnap_lines()), r)
        self.assertStates(pids, "running")
        self.assertEqual(self.gpu_of(pids), {pid: GPU1 for pid in pids})

    def test_device_map_from_the_settings_file(self):
        pids = self.tree("--mem", "4", expect=1, env={"FAKECUDA_GPUS": f"{GPU0},{GPU1}"})
        self.assertDumped(pids)
        # Below /tmp, which anyone can write, the file would be refused.
        confdir = trusted_tmpdir(self, "criu-settings-")
        conf = os.path.join(confdir, "cudasnap.conf")
        with open(conf, "w") as f:
            f.write(f"# what a node without environment passing says\nCUDASNAP_DEVICE_MAP={GPU0}={GPU1},{GPU1}={GPU0}\n")
        r = self.restore(env={"CUDASNAP_CONFIG": conf, "FAKECUDA_GPUS": f"{GPU0},{GPU1}"})
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.gpu_of(pids), {pids[0]: GPU1})

    # --- CRIU's process, CRIU's options, other trees, other namespaces ---

    def threads_script(self):
        """An action script that writes how many threads CRIU's process (its
        parent) has at each action: CRIU enters a tree's mount namespace
        with setns(CLONE_NEWNS), which the kernel refuses to a process with
        more than one thread, so the plugin must leave none behind."""
        out = os.path.join(self.tmp, "criu-threads")
        script = os.path.join(self.tmp, "threads.sh")
        with open(script, "w") as f:
            f.write(f'#!/bin/sh\necho "$CRTOOLS_SCRIPT_ACTION $(ls /proc/$PPID/task | wc -l)" >> {out}\n')
        os.chmod(script, 0o755)
        return script, out

    def assertOneThread(self, out, actions):
        with open(out) as f:
            seen = dict(line.split() for line in f)
        for a in actions:
            self.assertEqual(seen.get(a), "1", f"CRIU's threads at {a}: {seen}")

    def test_criu_keeps_one_thread(self):
        pids = self.tree("--spawn", "2", "--mem", "8", expect=3)
        script, out = self.threads_script()
        r = self.dump("--action-script", script)
        self.assertEqual(r.rc, 0, r)
        self.assertGone(pids)
        r = self.criu("restore", "-D", self.images, "-L", self.plugins, "-d", "--action-script", script,
                      log="restore.log")
        self.assertEqual(r.rc, 0, r)
        # post-dump runs after CHECKPOINT_DEVICES, pre-resume after RESUME_DEVICES_LATE
        self.assertOneThread(out, ["post-dump", "pre-resume"])
        self.assertRunningAndOk(pids)

    def test_leave_stopped_says_what_was_left(self):
        pids = self.tree("--spawn", "1", "--mem", "8", expect=2)
        r = self.dump("--leave-stopped")
        self.assertEqual(r.rc, 0, r)
        for pid in pids:
            self.assertTrue(any(f"process {pid} (" in line and "left stopped" in line and f"kill -CONT {pid}" in line
                                and f"cudasnap restore --pid {pid}" in line for line in r.cudasnap_lines()),
                            f"{pid} not named: {r}")
            with open(f"/proc/{pid}/stat") as f:
                self.assertEqual(f.read().rsplit(")", 1)[1].split()[0], "T")
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        self.assertStates(pids, "checkpointed")
        for pid in pids:
            c = self.cs("restore", "--pid", str(pid))
            self.assertEqual(c.rc, 0, c)
        self.assertRunningAndOk(pids)

    def test_options_from_criu_configuration_file(self):
        """CRIU's own configuration file (--config here; /etc/criu/default.conf
        and runc.conf alike) sets --leave-running and --timeout: the plugin
        learns them from CRIU's options, not from a command line that does
        not show them."""
        pids = self.tree("--spawn", "1", "--mem", "8", expect=2)
        conf = os.path.join(self.tmp, "criu.conf")
        with open(conf, "w") as f:
            f.write("leave-running\ntimeout 7\n")
        r = self.dump("--config", conf)
        self.assertEqual(r.rc, 0, r)
        lines = r.cudasnap_lines()
        self.assertTrue(any("lock timeout 7 s, tree left running after a dump; from CRIU's options" in line
                            for line in lines), r)
        self.assertTrue(any("2 processes back to running" in line for line in lines), r)
        self.assertRunningAndOk(pids)

    def test_two_trees_at_once(self):
        """Two dumps of two trees at once (two pods of a node): each is a
        transaction of its own, neither waits for or breaks the other."""
        a = self.tree("--spawn", "1", "--mem", "4", expect=2)
        root_a = self.root
        b = self.tree("--spawn", "1", "--mem", "4", expect=2)
        root_b = self.root
        self.fault("* checkpoint delay=1500")
        other = os.path.join(self.tmp, "images-b")
        os.makedirs(other)
        t0 = time.monotonic()
        procs = [subprocess.Popen([CRIU, "dump", "-t", str(root), "-D", d, "-L", self.plugins, "-v4", "-o", "dump.log"],
                                  env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for root, d in ((root_a, self.images), (root_b, other))]
        outs = [p.communicate(timeout=60)[0] for p in procs]
        wall = time.monotonic() - t0
        for p, d, out in zip(procs, (self.images, other), outs):
            with open(os.path.join(d, "dump.log"), errors="replace") as f:
                log = f.read()
            self.assertEqual(p.returncode, 0, out + "\n".join(l for l in log.splitlines() if "cudasnap: " in l))
        self.assertLess(wall, 2.9, "one dump after the other would take more than 3 s")
        self.assertGone(a + b)
        os.unlink(self.faults)
        for d in (self.images, other):
            r = self.criu("restore", "-D", d, "-L", self.plugins, "-d", log="restore.log")
            self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(a + b)

    def test_criu_killed_in_the_middle_of_a_dump(self):
        """An engine kills CRIU on a timeout while the plugin's checkpoint is
        in flight: the checkpoint completes inside the processes, which go on
        running on the CPU but checkpointed on the GPU. ps names each, with
        who left it and the command that recovers it; the next dump names
        them in its log; cudasnap restore brings them back, data intact, and
        the records go."""
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        self.fault("* checkpoint delay=2000")
        log = os.path.join(self.images, "dump.log")
        p = subprocess.Popen([CRIU, "dump", "-t", str(self.root), "-D", self.images, "-L", self.plugins, "-v4", "-o",
                              "dump.log"], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20

        def logged():
            try:
                with open(log, errors="replace") as f:
                    return f.read()
            except FileNotFoundError:
                return ""
        # both locked at PAUSE_DEVICES, then into the checkpoint's 2 s
        while time.monotonic() < deadline and logged().count(" locked in ") < 2:
            time.sleep(0.02)
        time.sleep(0.7)
        p.kill()
        p.wait()
        self.reap()
        time.sleep(2.5)  # the driver's calls complete inside the processes
        os.unlink(self.faults)
        ps = self.cs("ps", "--json")
        left = {x["pid"]: x for x in ps.obj["left_behind"]}
        self.assertEqual(sorted(left), sorted(pids), ps)
        for pid in pids:
            self.assertIn("'criu", left[pid]["holder"])
            self.assertEqual(left[pid]["recovery"], f"cudasnap restore --pid {pid}")
        self.assertStates(pids, "checkpointed")
        human = self.cs("ps").out
        for pid in pids:
            self.assertIn(f"LEFT BEHIND: {pid} ", human)
        # The next dump of another tree names them in its log.
        other = self.tree("--mem", "4", expect=1)
        r = self.criu("dump", "-t", str(self.root), "-D", self.images, "-L", self.plugins, "-R", log="next.log")
        self.assertEqual(r.rc, 0, r)
        for pid in pids:
            self.assertTrue(any(f"process {pid} " in l and "may be left locked or checkpointed" in l
                                for l in r.cudasnap_lines()), r)
        r = self.cs("restore", *[x for pid in pids for x in ("--pid", str(pid))])
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(pids + other)
        self.assertEqual(self.cs("ps", "--json").obj["left_behind"], [])

    def test_a_process_in_use_fails_the_dump_and_leaves_the_rest_running(self):
        pids = self.tree("--spawn", "2", "--mem", "4", expect=3)
        busy = pids[2]
        with open(f"/proc/{busy}/status") as f:
            nspid = next(line.split()[-1] for line in f if line.startswith("NSpid:"))
        claim = os.path.join(self.state, "claims", f"{os.stat(f'/proc/{busy}/ns/pid').st_ino}-{nspid}")
        os.makedirs(os.path.dirname(claim), mode=0o700, exist_ok=True)
        with open(claim, "w") as f:
            f.write("pid 1, 'checkpoint'\n")
        holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys\n"
                                   "fd = os.open(sys.argv[1], os.O_RDWR)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
                                   "print('held', flush=True)\nsys.stdin.read()\n", claim],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.assertEqual(holder.stdout.readline(), "held\n")
        try:
            r = self.dump()
        finally:
            holder.kill()
            holder.communicate()
        self.assertNotEqual(r.rc, 0, r)
        self.assertTrue(any(f"another cudasnap is running on process {busy} (" in line and f"pid {holder.pid}" in line
                            for line in r.cudasnap_lines()), r)
        self.assertRunningAndOk(pids)

    def test_leftovers_of_other_trees_are_not_the_dumps_business(self):
        """A process outside the dumped tree that holds device files is no
        reason to fail the dump, and the dump's log does not speak of it."""
        outside = self.start("--open-device", expect=1)[0]
        pids = self.tree("--spawn", "1", "--mem", "4", expect=2)
        r = self.assertDumped(pids)
        self.assertFalse([line for line in r.cudasnap_lines() if f"process {outside}" in line or f" {outside} (" in line],
                         r)
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertRunningAndOk(pids)

    def ns_tree(self, *args, expect):
        """The fake app as init of a PID namespace of its own (what a
        container is to CRIU); returns {pid inside: host pid}."""
        before = set(os.listdir(self.ready))
        with open(os.path.join(self.tmp, "app.err"), "ab") as err:
            # setsid: CRIU wants the session leader inside the namespace too
            p = subprocess.Popen(["unshare", "--pid", "--fork", "setsid", APP, "--ready-dir", self.ready, *args],
                                 env=self.env,
                                 start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=err)
        self.apps.append(p)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = [f for f in set(os.listdir(self.ready)) - before if f.endswith(".ready")]
            if len(now) >= expect:
                break
            time.sleep(0.02)
        else:
            self.fail(f"fake app in a PID namespace not ready: {self.app_err()}")
        inner = sorted(int(f.split(".")[0]) for f in now)
        self.assertEqual(inner[0], 1)
        return self.host_pids(inner)

    def host_pids(self, inner):
        """{pid inside: host pid} of the processes of the one nested PID
        namespace the test has."""
        found = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/status") as f:
                    nspid = [int(x) for x in next(line for line in f if line.startswith("NSpid:")).split()[1:]]
            except (OSError, StopIteration):
                continue
            if len(nspid) > 1 and nspid[-1] in inner:
                found[nspid[-1]] = int(d)
        self.assertEqual(sorted(found), sorted(inner), found)
        return found

    def assertDataOkInside(self, pids):
        """SIGUSR1 to each host pid; the answer is named by its pid inside."""
        for inside, host in pids.items():
            path = os.path.join(self.ready, f"{inside}.verify")
            if os.path.exists(path):
                os.unlink(path)
            os.kill(host, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        for inside in pids:
            path = os.path.join(self.ready, f"{inside}.verify")
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.02)
            with open(path) as f:
                self.assertTrue(f.read().startswith("ok"), inside)

    def test_restore_into_a_new_pid_namespace(self):
        """The restored processes keep their pids inside their namespace but
        get other host pids: the plugin finds each by the pid inside."""
        before = self.ns_tree("--spawn", "2", "--mem", "8", expect=3)
        self.tree_pids += list(before.values())
        r = self.criu("dump", "-t", str(before[1]), "-D", self.images, "-L", self.plugins, log="dump.log")
        self.assertEqual(r.rc, 0, r)
        with open(os.path.join(self.images, RECORD)) as f:
            self.assertEqual(sorted(e["nspid"] for e in json.load(f)["processes"]), sorted(before))
        self.assertGone(list(before.values()))
        r = self.restore()
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(any("restored 3 processes" in line for line in r.cudasnap_lines()), r)
        after = self.host_pids(list(before))
        self.tree_pids += list(after.values())
        self.assertNotEqual(sorted(after.values()), sorted(before.values()))
        self.assertStates(list(after.values()), "running")
        self.assertDataOkInside(after)


if __name__ == "__main__":
    main()
