"""Load and faults: 200 fake CUDA processes, 20 checkpoint/restore rounds in
a row, each command with faults injected on random processes and calls
(every kind the driver double has: error=CODE, delay=MS, exit, leak-fd,
leak-map, on get_state, get_restore_tid, lock, checkpoint, restore, unlock).

After every command, every surviving process is where the transaction
promises: a failed checkpoint leaves it running, a failed restore leaves it
checkpointed (and a clean restore then brings it back), a done command
leaves it at the goal. At the end every survivor's device memory verifies.
The seed is printed; CUDASNAP_LOAD_SEED=N repeats a run, and
CUDASNAP_LOAD_PROCS / CUDASNAP_LOAD_ROUNDS change its size."""
import collections
import os
import random
import subprocess
import sys
import time
import unittest

from harness import APP, Case

PROCS = int(os.environ.get("CUDASNAP_LOAD_PROCS", "200"))
ROUNDS = int(os.environ.get("CUDASNAP_LOAD_ROUNDS", "20"))
ERRORS = ["CUDA_ERROR_UNKNOWN", "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_INVALID_VALUE", "999", "2", "801"]


class Load(Case):
    def start_many(self, n):
        """n fake CUDA processes started at once; returns their pids."""
        # Apps told to exit do it at once, without a LeakSanitizer scan in
        # the sanitizer build (cudasnap keeps its own checks). Each app's
        # restore thread reads /proc at every restore it admits (as the
        # driver judges room then): a small quarantine keeps 200 of them
        # from holding gigabytes of freed memory.
        env = dict(self.env, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:quarantine_size_mb=4")
        procs = [subprocess.Popen([APP, "--ready-dir", self.ready, "--mem", "1"], env=env,
                                  start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(n)]
        self.apps.extend(procs)
        deadline = time.monotonic() + 120
        while sum(f.endswith(".ready") for f in os.listdir(self.ready)) < n:
            dead = [p.pid for p in procs if p.poll() is not None]
            self.assertFalse(dead, f"fake apps exited at start: {dead}")
            self.assertLess(time.monotonic(), deadline, "fake apps not ready")
            time.sleep(0.05)
        self.by_pid = {p.pid: p for p in procs}
        return sorted(self.by_pid)

    def reap(self, alive):
        """Drops (and reaps) the processes that exited."""
        return [pid for pid in alive if self.by_pid[pid].poll() is None]

    def faults_for(self, rng, alive, ops, exits_left):
        """Fault lines for one command: 1 to 4 on random processes and the
        given calls, plus sometimes a small delay on every process."""
        lines, kinds = [], collections.Counter()
        for _ in range(rng.randint(1, 4)):
            pid, op = rng.choice(alive), rng.choice(ops)
            kind = rng.choice(["error", "error", "delay", "exit", "leak"])
            if kind == "exit" and (exits_left <= 0 or op in ("get_state", "get_restore_tid")):
                kind = "error"
            if kind == "leak" and op != "checkpoint":
                kind = "delay"
            if kind == "error":
                lines.append(f"{pid} {op} error={rng.choice(ERRORS)} 1")
            elif kind == "delay":
                lines.append(f"{pid} {op} delay={rng.randint(1, 40)} 1")
            elif kind == "exit":
                lines.append(f"{pid} {op} exit")
                exits_left -= 1
            else:
                kind = rng.choice(["leak-fd", "leak-map"])
                lines.append(f"{pid} checkpoint {kind} 1")
            kinds[kind if kind in ("exit", "leak-fd", "leak-map") else f"{kind}:{op}"] += 1
        if rng.random() < 0.3:
            lines.append(f"* {rng.choice(ops[-2:])} delay={rng.randint(1, 5)} 1")
            kinds["delay:all"] += 1
        return lines, kinds, exits_left

    def expect(self, want, r, what, either=None):
        """Every pid in its wanted state (want: pid -> state); a pid in
        either (pid -> state) may also be in that other state."""
        got = self.states(list(want))
        either = either or {}
        wrong = {p: (got[p], w) for p, w in want.items() if got[p] != w and got[p] != either.get(p)}
        self.assertFalse(wrong, f"{what}: (state, wanted): {wrong}\n{r}")
        return got

    def command(self, name, stats):
        """Exit 0 or 1; or 3 when a process is reported lost (an 'exit'
        fault killed it while its memory moved, or its restore was answered
        CUDA_ERROR_OUT_OF_MEMORY, which destroys the state on a real driver),
        and nothing else is left behind."""
        r = self.cs(name, "--json", timeout=120)
        stats[f"{name} rc={r.rc}"] += 1
        self.assertIsNotNone(r.obj, r)
        if r.rc == 3:
            procs = r.obj["processes"]
            self.assertGreater(r.obj["lost"], 0, r)
            self.assertFalse([p for p in procs if p["rollback_failed"] and not p["lost"]], r)
            self.assertTrue(all(p["final_state"] == "exited" or "GPU memory" in (p["lost_why"] or "")
                                for p in procs if p["lost"]), r)
        else:
            self.assertIn(r.rc, (0, 1), f"{name}: {r}")
        return r

    def test_rounds_with_random_faults(self):
        seed = int(os.environ.get("CUDASNAP_LOAD_SEED", str(int(time.time()))))
        print(f"seed {seed} (CUDASNAP_LOAD_SEED={seed} repeats this run)", file=sys.stderr)
        rng = random.Random(seed)
        t0 = time.monotonic()
        alive = self.start_many(PROCS)
        started = time.monotonic() - t0
        injected, stats, exits_left = collections.Counter(), collections.Counter(), 4
        for rnd in range(ROUNDS):
            # Checkpoint: faults on its own calls only, so that a rollback
            # (restore, unlock) runs clean and must leave everything running.
            lines, kinds, exits_left = self.faults_for(rng, alive, ["get_state", "get_restore_tid", "lock",
                                                                    "checkpoint"], exits_left)
            self.fault(*lines)
            injected += kinds
            r = self.command("checkpoint", stats)
            # A process whose GetState failed is not seen as CUDA: left as it was.
            hidden = {int(l.split()[0]): "running" for l in lines if " get_state " in l}
            alive = self.reap(alive)
            if r.rc == 0:
                before = self.expect({p: "checkpointed" for p in alive}, r, f"round {rnd} checkpoint done", hidden)
            else:
                self.expect({p: "running" for p in alive}, r, f"round {rnd} checkpoint failed")
                os.unlink(self.faults)
                r = self.command("checkpoint", stats)
                self.assertEqual(r.rc, 0, r)
                alive = self.reap(alive)
                before = self.expect({p: "checkpointed" for p in alive}, r, f"round {rnd} clean checkpoint")
            # Restore: faults on its calls; a failed one leaves every process
            # as it was, and a clean restore then brings them all back.
            lines, kinds, exits_left = self.faults_for(rng, alive, ["get_state", "restore", "unlock"], exits_left)
            self.fault(*lines)
            injected += kinds
            r = self.command("restore", stats)
            hidden = {int(l.split()[0]) for l in lines if " get_state " in l}
            alive = self.reap(alive)
            if r.rc == 0:
                after = self.expect({p: "running" for p in alive}, r, f"round {rnd} restore done",
                                    {p: before[p] for p in hidden})
            else:
                after = self.expect({p: before[p] for p in alive}, r, f"round {rnd} restore failed")
            os.unlink(self.faults)
            if "checkpointed" in after.values():
                r = self.command("restore", stats)
                self.assertEqual(r.rc, 0, r)
                alive = self.reap(alive)
                self.expect({p: "running" for p in alive}, r, f"round {rnd} clean restore")
        self.assertGreaterEqual(len(alive), PROCS - 4)
        self.assertDataOk(alive)
        wall = time.monotonic() - t0
        print(f"{PROCS} processes (started in {started:.1f} s), {ROUNDS} rounds, {len(alive)} survivors, "
              f"{wall:.1f} s", file=sys.stderr)
        print(f"faults injected ({sum(injected.values())}): {dict(sorted(injected.items()))}", file=sys.stderr)
        print(f"commands: {dict(sorted(stats.items()))}", file=sys.stderr)


if __name__ == "__main__":
    assert APP, "FAKE_APP is not set"
    unittest.main(verbosity=2)
