"""The interposer's gate (park/): every way a program reaches the driver is
held during a park, or the process is not parked and says why; the park's
waits are bounded; what the program observes of its memory is the driver's
answer; programs that do not use CUDA the expected way are left as they
are. The programs are fakecuda-named (its memory from cuGetProcAddress,
its work through driver functions reached by name, dlsym, cuGetProcAddress
at some version, or a library it loads) and fakecuda-nodriver (no driver
until it loads one)."""
import os
import shutil
import signal
import subprocess
import threading
import time
import unittest

from harness import BIN, GPU0, GPU1, LIBCUDA
from test_park import CUAPP, PARK_LIB, App, Lines, ParkCase, control, status

NAMED = os.environ.get("FAKE_NAMED", "")
NODRIVER = os.environ.get("FAKE_NODRIVER", "")
SHIM = os.environ.get("FAKE_SHIM", "")
ASANPROBE = os.environ.get("FAKE_ASANPROBE", "")
# AddressSanitizer refuses RTLD_DEEPBIND (google/sanitizers#611), and its
# runtime's RTLD_NEXT lookups go wrong through a dlsym wrapper preloaded
# ahead of it (the shim), with or without the interposer
ASAN = "address" in os.environ.get("CUDASNAP_SANITIZE", "")


class Named(Lines):
    """A fakecuda-named process and its output lines."""

    def __init__(self, case, args, env=None, park=True, asan_order=True):
        argv = [BIN, "run", "--", NAMED, *args] if park else [NAMED, *args]
        env = dict(case.env, CUDASNAP_PARK_LIB=PARK_LIB, CUDASNAP_PARK_DIR=case.tmp, **(env or {}))
        if asan_order:
            asan = env.get("ASAN_OPTIONS", "")
            env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        case.apps.append(self.p)
        self.pid = self.p.pid
        self.buf = b""
        self.case = case

    def ready(self):
        ln = self.line("ready")
        if ln is None:
            err = self.p.stderr.read1(4096) if self.p.poll() is not None else b""
            self.case.fail(f"fakecuda-named not ready (exit {self.p.poll()}): {err}")
        return self

    def verify(self):
        os.kill(self.pid, signal.SIGUSR1)
        return self.line("verify")

    def finish(self):
        """Its exit status (0: every round of its worker passed) and stderr."""
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(20)
        return rc, self.p.stderr.read().decode()


@unittest.skipUnless(PARK_LIB and NAMED, "the interposer is built for x86-64 only")
class EntryPoints(ParkCase):
    """Every way to reach the driver that the interposer stands in front of."""

    def named(self, *args, **kw):
        return Named(self, list(args), **kw).ready()

    def assertCycles(self, a, n=2):
        for _ in range(n):
            r = self.cs("checkpoint", "--pid", a.pid, "--json")
            self.assertEqual(r.rc, 0, r)
            t = r.obj["processes"][0]
            self.assertIn("park", t["seconds"], t)
            self.assertEqual(self.states([a.pid]), {a.pid: "checkpointed"})
            r = self.cs("restore", "--pid", a.pid, "--json")
            self.assertEqual(r.rc, 0, r)
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")
        rc, err = a.finish()
        self.assertEqual(rc, 0, err)
        self.assertNotIn("FAILED", err)

    def test_calls_by_name_are_held_and_no_write_is_lost(self):
        # as code linked with -lcuda calls the driver (Triton's launchers):
        # the worker writes, launches, synchronizes and reads back every
        # millisecond, through every park
        a = self.named("--via", "name")
        self.assertEqual(status(a.pid)["parkable"], "1")
        self.assertCycles(a, 3)

    def test_every_other_way_to_the_driver_is_held(self):
        for via in ("dlsym", "default", "next", "procaddr:3020", "procaddr:12080", "procaddr1:10020", "lib",
                    "lib-lazy", "lib-default"):
            with self.subTest(via=via):
                a = self.named("--via", via)
                self.assertEqual(status(a.pid)["parkable"], "1")
                self.assertCycles(a)

    def test_the_c_librarys_own_dlsym_answers_gated_functions_too(self):
        # dlsym reached past the interposer's export of it: by dlvsym with
        # the C library's version, by a handle of the C library, by a
        # library's dlsym(RTLD_NEXT): what it looks up is held as well
        for via in ("realdlsym", "libcdlsym", "lib-nextdlsym"):
            with self.subTest(via=via):
                a = self.named("--via", via)
                self.assertEqual(status(a.pid)["parkable"], "1")
                self.assertCycles(a, 3)

    def test_what_the_gate_cannot_hold_is_left_to_the_driver(self):
        # a driver function the interposer does not know, a library that
        # binds the driver's own functions (RTLD_DEEPBIND), one that looks
        # them up past the interposer (RTLD_NEXT): never parked, and said
        cases = {
            "lib-unlisted": "libfakecuda-probe-new.so binds cuMemcpyHtoD_v9 to the driver directly",
            "lib-deepbind": "libfakecuda-probe.so binds",
            "lib-lazy-deepbind": "libfakecuda-probe.so binds",
            "lib-next": "dlsym(RTLD_NEXT)",
        }
        for via, why in cases.items():
            if "deepbind" in via and ASAN:
                continue
            with self.subTest(via=via):
                self.assertLeftToDriver(self.named("--via", via), why)

    def assertLeftToDriver(self, a, why):
        """a is not parkable, for why, as its status, ps and the plan say,
        and its checkpoint and restore are the driver's, its data kept."""
        st = status(a.pid)
        self.assertEqual(st["parkable"], "0", st)
        procs, _ = self.ps()
        self.assertIn(why, procs[a.pid]["park"]["why_not"])
        self.assertIn(f"parking: {a.pid} (fakecuda-named) runs the interposer but its checkpoint is the "
                      "driver's: ", self.cs("ps").out)
        r = self.cs("checkpoint", "--pid", a.pid, "--dry-run")
        self.assertIn("driver-path", r.err)
        self.assertIn(why, r.err)
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("park", r.obj["processes"][0]["seconds"])
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")
        rc, err = a.finish()
        self.assertEqual(rc, 0, err)

    def test_a_seccomp_filter_installed_after_the_first_allocation_is_said_before_the_park(self):
        # the gate could not make sure no call is under way (its counts need
        # membarrier, which the filter may forbid): status, ps and the plan
        # say so, and the checkpoint is the driver's, not a refused park
        self.assertLeftToDriver(self.named("--late-filter"), "installed a seccomp filter since it started")

    @unittest.skipIf(ASAN, "AddressSanitizer refuses dlmopen namespaces")
    def test_a_second_driver_in_a_dlmopen_namespace_is_not_parked(self):
        # dl_iterate_phdr lists the caller's namespace alone: the copy is
        # found in the process's mappings, and its calls would go on while
        # parked, so the process is the driver's to checkpoint
        self.assertLeftToDriver(self.named("--dlmopen-driver"), "a copy of the driver is loaded in another namespace")

    def test_gated_calls_from_a_signal_handler_return_where_they_were_made(self):
        # a signal every few microseconds, whose handler makes a gated call,
        # lands at every point of the main thread's gated calls
        a = Named(self, ["--storm", "3"])
        ln = a.line("storm", timeout=60)
        self.assertIsNotNone(ln, f"exit {a.p.wait(20)}: {a.p.stderr.read()}")
        self.assertTrue(ln.startswith("storm ok"), ln)
        self.assertEqual(a.p.wait(20), 0)

    def test_calls_from_the_first_frame_of_a_makecontext_stack_get_their_arguments_and_nothing_above(self):
        # a fibre's stack ends at a guard page: the trampoline copies the
        # stack arguments a function takes (cuLaunchKernel's last five),
        # not a fixed block that would run into the guard page
        for park in (True, False):
            a = Named(self, ["--fiber"], park=park)
            ln = a.line("fiber", timeout=30)
            self.assertIsNotNone(ln, f"exit {a.p.wait(20)}: {a.p.stderr.read()}")
            self.assertEqual(ln, "fiber ok")
            self.assertEqual(a.p.wait(20), 0)

    def test_a_thread_that_ended_inside_a_call_does_not_hold_back_a_park_once_its_id_is_reused(self):
        # its count stays in its record; the thread given its id later
        # (which never calls the driver) is another thread: the record's
        # start time says so, and the park does not wait for it
        self.fault("* sync delay=20000 1")
        a = Named(self, ["--reuse-tid"]).ready()
        os.kill(a.pid, signal.SIGUSR2)
        ln = a.line("reuse", timeout=10)
        self.assertIsNotNone(ln, a.p.stderr.read1(4096) if a.p.poll() is not None else "")
        if "again=1" not in ln:
            self.skipTest(f"the thread id could not be given again ({ln})")
        self.fault()  # the park's own waits are not to be held
        r = self.cs("checkpoint", "--pid", a.pid, "--timeout", "3000", "--json", timeout=30)
        self.assertEqual(r.rc, 0, r)
        self.assertIn("park", r.obj["processes"][0]["seconds"], r.obj)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")

    def test_the_drivers_calls_to_its_own_names_pass_a_closed_gate(self):
        # a thread of the driver's own calls one of its exported functions
        # through the lookup, where the interposer's name stands first:
        # part of the driver's work, it must not wait for the park
        a = Named(self, ["--self-call"]).ready()
        held = []
        answer, _ = control(a.pid, "park 5000", keep=held, key=True)
        self.assertTrue(answer.startswith("ok parked=1"), answer)
        self.assertEqual(status(a.pid)["gate"], "closed")
        os.kill(a.pid, signal.SIGUSR2)
        self.assertRegex(a.line("selfcall") or "", r"^selfcall rc=0 ms=\d+$")
        held[0].close()  # undone by the process itself
        deadline = time.monotonic() + 10
        while status(a.pid)["parked"] != "0" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")

    def test_a_child_forked_during_a_park_is_not_held(self):
        # the child has no control socket and no park of its own
        a = Named(self, ["--fork-call"]).ready()
        held = []
        answer, _ = control(a.pid, "park 5000", keep=held, key=True)
        self.assertTrue(answer.startswith("ok parked=1"), answer)
        os.kill(a.pid, signal.SIGUSR2)
        self.assertEqual(a.line("forkcall"), "forkcall rc=0")
        held[0].close()
        deadline = time.monotonic() + 10
        while status(a.pid)["parked"] != "0" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")

    def test_a_library_loaded_where_a_clean_one_was_is_looked_at_again(self):
        # libfakecuda-swapa.so binds nothing of the driver and is looked at;
        # it is unloaded, and libfakecuda-swapb.so, which binds a driver
        # function the interposer does not know, is loaded at its address
        go = os.path.join(self.tmp, "go")
        a = Named(self, ["--via", f"swap:{go}"])
        first = a.line("swap a=")
        self.assertIsNotNone(first)
        self.assertEqual(status(a.pid)["parkable"], "1")
        open(go, "w").close()
        second = a.line("swap b=")
        self.assertEqual(second.split("=")[1], first.split("=")[1], "not loaded at the same address")
        a.ready()
        st = status(a.pid)
        self.assertEqual(st["parkable"], "0", st)
        self.assertRegex(self.cs("ps").out, r"libfakecuda-swapb\.so (binds|calls) cuMemcpyHtoD_v9")
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("park", r.obj["processes"][0]["seconds"])
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")

    def test_a_backtrace_taken_inside_the_driver_reaches_the_program(self):
        # the gated frame is an ordinary one, described for the unwinder
        self.fault("* sync delay=400 1")
        a = Named(self, ["--unwind"])
        ln = a.line("unwind")
        self.assertIsNotNone(ln, a.p.stderr.read1(4096) if a.p.poll() is not None else "")
        self.assertIn("unwind main=yes", ln)
        self.assertIn("rc=0", ln)


@unittest.skipUnless(PARK_LIB and NAMED, "the interposer is built for x86-64 only")
class Waits(ParkCase):
    """The park waits with a bound, for the right contexts; cuMemFree too."""

    gpus = f"{GPU0},{GPU1}"

    def test_gpu_work_that_waits_on_a_held_thread_does_not_freeze_the_process(self):
        # GPU work waits on a word of host memory that one of the program's
        # threads sets after a driver call: held at the gate, it never
        # would; the park gives up at its deadline and lets the program go
        a = Named(self, ["--hold"]).ready()
        r = self.cs("checkpoint", "--pid", a.pid, "--timeout", "1000", "--json", timeout=30)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("did not finish within 1.0 s", r.err)
        self.assertEqual(status(a.pid)["gate"], "open")
        self.assertEqual(self.states([a.pid]), {a.pid: "running"})
        os.kill(a.pid, signal.SIGUSR2)
        self.assertEqual(a.line("released"), "released")
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")

    def test_a_park_waits_for_the_work_of_every_context(self):
        # backed memory on device 0, a kernel of 1.5 s queued on device 1's
        # context (which copies or peers could aim at it)
        a = Named(self, ["--other-ms", "1500"]).ready()
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertGreater(r.obj["processes"][0]["seconds"]["park"], 1.0, r)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)

    def test_a_park_waits_for_the_work_of_a_context_the_program_made(self):
        # cuCtxCreate on device 1, whose primary context it never used
        a = Named(self, ["--created-ms", "1500"]).ready()
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertGreater(r.obj["processes"][0]["seconds"]["park"], 1.0, r)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)

    def test_a_child_forked_while_a_park_waits_asks_the_driver(self):
        # the park waits for the work of the context the program made,
        # holding the interposer's locks; a child forked meanwhile owns
        # none of its parent's memory: its question about it goes to the
        # driver, which answers a child forked after CUDA's init
        # CUDA_ERROR_NOT_INITIALIZED, and it waits for nothing of its parent's
        a = Named(self, ["--fork-call=range", "--created-ms", "4000"]).ready()
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("park", control(a.pid, "park 10000", keep=[], key=True)[0]))
        t.start()
        time.sleep(0.5)  # the park waits for the 4 s kernel
        os.kill(a.pid, signal.SIGUSR2)
        t0 = time.monotonic()
        ln = a.line("forkcall", timeout=30)
        took = time.monotonic() - t0
        t.join()
        self.assertEqual(ln, "forkcall rc=3")
        self.assertLess(took, 2.5)
        self.assertTrue(out["park"].startswith("ok parked=1"), out)

    def test_cumemfree_waits_for_the_allocations_context(self):
        # freed from device 1's context while device 0 runs a 300 ms kernel
        a = Named(self, ["--free-test"])
        ln = a.line("free")
        self.assertIsNotNone(ln, a.p.stderr.read() if a.p.wait(20) is not None else "")
        ms, rc = (int(kv.split("=")[1]) for kv in ln.split()[1:])
        self.assertEqual(rc, 0, ln)
        self.assertGreaterEqual(ms, 250, ln)
        self.assertEqual(a.line("range"), "range rc=500")  # gone, CUDA_ERROR_NOT_FOUND

    def test_cumemfree_answers_the_drivers_error_and_keeps_the_memory(self):
        # the context met an error (CUDA_ERROR_ILLEGAL_ADDRESS): its work
        # may still use the memory, which stays, and the error is the answer
        self.fault("* sync error=700 1")
        a = Named(self, ["--free-test"])
        self.assertRegex(a.line("free") or "", r"^free ms=\d+ rc=700$")
        self.assertEqual(a.line("range"), "range rc=0")


@unittest.skipUnless(PARK_LIB and NAMED, "the interposer is built for x86-64 only")
class LoaderLock(ParkCase):
    """A thread that loads a library holds the dynamic linker's lock while
    the library's constructor runs, and the constructor may call the
    driver: the interposer never waits for that lock while it holds the
    gate closed or a lock of its own, and answers within a bound."""

    def loading(self, lib):
        path = os.path.join(os.path.dirname(NAMED), lib)
        a = Named(self, ["--idle", "--load", path]).ready()
        os.kill(a.pid, signal.SIGUSR2)
        self.assertEqual(a.line("load started"), "load started")
        time.sleep(0.2)  # the constructor runs for 0.8 s before its call
        return a

    def ask(self, a, request, keep=None, key=False):
        out = []
        th = threading.Thread(target=lambda: out.append(control(a.pid, request, keep=keep, key=key)[0]),
                              daemon=True)
        th.start()
        th.join(15)
        self.assertTrue(out, f"no answer to {request.split()[0]} within 15 s")
        return out[0]

    def test_a_park_while_a_constructor_calls_the_driver(self):
        a = self.loading("libfakecuda-ctor.so")
        held = []
        answer = self.ask(a, "park 3000", keep=held, key=True)
        self.assertTrue(answer.startswith("ok parked=1"), answer)
        time.sleep(1)  # the constructor's call waits at the closed gate
        self.assertIsNone(a.line("load done", timeout=0.2))
        held[0].close()  # undone by the process itself: the call goes on
        self.assertEqual(a.line("load done", timeout=10), "load done ok")
        self.assertEqual(status(a.pid)["gate"], "open")
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")

    def test_a_status_while_a_constructor_asks_about_a_pointer(self):
        a = self.loading("libfakecuda-ctor-pointer.so")
        answer = self.ask(a, "status", key=True)
        self.assertTrue(answer.startswith("ok "), answer)
        self.assertIn("parkable=1", answer)
        self.assertEqual(a.line("load done", timeout=10), "load done ok")
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")

    # The program's own dl_iterate_phdr: its callback runs while the thread
    # holds the lock of the loader's list of objects, which the interposer
    # reads to tell which driver functions the loaded objects bind.
    HELD = "holds the loader's list of objects"

    def phdr_caller(self):
        return Named(self, ["--idle", "--phdr-call"]).ready()

    def timed(self, a, request, keep=None, key=False):
        t0 = time.monotonic()
        answer = self.ask(a, request, keep=keep, key=key)
        return answer, time.monotonic() - t0

    def phdr_done(self, a):
        os.kill(a.pid, signal.SIGUSR2)
        self.assertRegex(a.line("phdr done", timeout=10) or "", r"^phdr done calls=[1-9]\d* failed=0$")

    def test_a_park_while_a_callback_of_dl_iterate_phdr_calls_the_driver(self):
        # a callback that calls the driver round after round: once the gate
        # closes, its call waits there with the list held; the park is
        # refused within a bound and the program goes on
        a = self.phdr_caller()
        os.kill(a.pid, signal.SIGUSR2)
        self.assertEqual(a.line("phdr started"), "phdr started")
        time.sleep(0.2)
        answer, took = self.timed(a, "park 3000", key=True)
        self.assertLess(took, 8, answer)
        self.assertTrue(answer.startswith("error "), answer)
        self.assertIn("stage=check", answer)
        self.assertIn(self.HELD, answer)
        st = status(a.pid)
        self.assertEqual((st["gate"], st["parked"]), ("open", "0"), st)
        self.phdr_done(a)
        # the check left waiting ended by itself: nothing stops a park now
        self.assertEqual(status(a.pid)["parkable"], "1")
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertIn("park", r.obj["processes"][0]["seconds"])
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")
        rc, err = a.finish()
        self.assertEqual(rc, 0, err)

    def test_a_status_while_parked_and_a_callback_of_dl_iterate_phdr_waits_at_the_gate(self):
        # parked: the callback's first call waits at the closed gate with
        # the list held; a status answers within a bound, and so does the
        # unpark after it
        a = self.phdr_caller()
        held = []
        answer = self.ask(a, "park 3000", keep=held, key=True)
        self.assertTrue(answer.startswith("ok parked=1"), answer)
        os.kill(a.pid, signal.SIGUSR2)
        self.assertEqual(a.line("phdr started"), "phdr started")
        time.sleep(0.3)
        answer, took = self.timed(a, "status", key=True)
        self.assertLess(took, 5, answer)
        self.assertIn(" parked=1 ", answer)
        self.assertIn(" parkable=0 ", answer)
        self.assertIn(self.HELD, answer)
        held[0].close()  # undone by the process itself: the call goes on
        deadline = time.monotonic() + 10
        while status(a.pid)["parked"] != "0" and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(status(a.pid)["gate"], "open")
        self.phdr_done(a)
        self.assertEqual(status(a.pid)["parkable"], "1")
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")
        rc, err = a.finish()
        self.assertEqual(rc, 0, err)


@unittest.skipUnless(PARK_LIB and NAMED, "the interposer is built for x86-64 only")
class Observed(ParkCase):
    """What the program sees of its memory is what the driver would say."""

    def test_the_range_of_an_allocation_is_the_size_asked_for(self):
        size = (65 << 20) + 4096  # backed, rounded up to 66 MiB
        a = Named(self, ["--alloc-bytes", str(size), "--attrs", "--idle"])
        ln = a.line("attrs")
        self.assertIsNotNone(ln)
        got = dict(kv.split("=") for kv in ln.split()[1:])
        self.assertEqual(got["range_size"], str(size), ln)
        self.assertEqual(got["addr_range"], str(size), ln)
        self.assertEqual(got["range_start"], got["addr_base"], ln)
        self.assertEqual(got["rdma"], "1", ln)  # GPUDirect RDMA, as cuMemAlloc memory
        a.ready()
        self.assertEqual(status(a.pid)["bytes"], str(66 << 20))

    def test_memory_a_nic_could_not_register_as_vmm_memory_is_left_to_the_driver(self):
        # the GPU registers cuMemAlloc memory with a NIC but not VMM memory
        a = Named(self, ["--attrs", "--idle"], env={"FAKECUDA_GDR": "legacy"})
        ln = a.line("attrs")
        self.assertIn("rdma=1", ln or "")
        a.ready()
        procs, _ = self.ps()
        self.assertIsNone(procs[a.pid]["park"])  # nothing backed: no control socket

    def test_an_imported_memory_pool_is_refused_before_anything_changes(self):
        share = os.path.join(self.tmp, "pool")
        e = Named(self, ["--pool-share", share, "--idle"], park=False).ready()
        i = Named(self, ["--pool-import", share]).ready()
        st = status(i.pid)
        self.assertEqual((st["pool_imports"], st["parkable"]), ("1", "0"), st)
        r = self.cs("checkpoint", "--pid", i.pid)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("(CUDA IPC, 1 memory pool imported from another process)", r.err)
        self.assertEqual(self.states([i.pid, e.pid]), {i.pid: "running", e.pid: "running"})
        self.assertEqual(i.verify(), f"verify ok bytes={8 << 20}")


@unittest.skipUnless(PARK_LIB and NODRIVER, "the interposer is built for x86-64 only")
class Unexpected(ParkCase):
    """Programs that do not use CUDA, or not the way the interposer expects."""

    def nodriver(self, env=None, preload=None):
        env = dict(self.env, CUDASNAP_PARK_LIB=PARK_LIB, **(env or {}))
        asan = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        if preload:
            argv = ["env", f"LD_PRELOAD={preload}", NODRIVER, LIBCUDA]
        else:
            argv = [BIN, "run", "--", NODRIVER, LIBCUDA]
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p)
        return dict(kv.split("=") for kv in p.stdout.split())

    def test_a_program_without_a_driver_finds_none(self):
        got = self.nodriver()
        self.assertEqual(got["before"], "none")
        self.assertEqual(got["after"], "found")
        # once it loads one, what it finds is the gate's
        self.assertEqual(got["handle_owner"], "libcudasnap-park.so")
        self.assertEqual(got["default_owner"], "libcudasnap-park.so")

    def test_park_0_leaves_the_program_to_the_driver_alone(self):
        for how in ("run", "preload"):
            with self.subTest(how=how):
                got = self.nodriver(env={"CUDASNAP_PARK": "0"}, preload=PARK_LIB if how == "preload" else None)
                self.assertEqual((got["before"], got["after"]), ("none", "found"))
                self.assertEqual(got["handle_owner"], "libcuda.so.1")
                self.assertEqual(got["default_owner"], "libcuda.so.1")

    @unittest.skipUnless(SHIM and CUAPP and not ASAN, "needs the shim and fakecuda-cuapp, and no AddressSanitizer")
    def test_a_dlsym_wrapper_after_the_interposer_sees_the_lookups(self):
        a = App(self, ["--alloc-mib", "8", "--interval-ms", "20"], park=True, env={"LD_PRELOAD": SHIM})
        r = self.cs("checkpoint", "--pid", a.pid)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={a.bytes}")
        os.kill(a.pid, signal.SIGTERM)
        a.p.wait(20)
        self.assertIn("shim: dlsym cuGetProcAddress_v2", a.p.stderr.read().decode())

    @unittest.skipUnless(ASANPROBE, "the compiler cannot build with AddressSanitizer")
    def test_an_addresssanitizer_program_starts(self):
        env = dict(self.env, CUDASNAP_PARK_LIB=PARK_LIB)
        env.pop("ASAN_OPTIONS", None)
        p = subprocess.run([BIN, "run", "--", ASANPROBE], env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual((p.returncode, p.stdout), (0, "asan ok\n"), p)
        # the program's own choice stands
        env["ASAN_OPTIONS"] = "verify_asan_link_order=1"
        p = subprocess.run([BIN, "run", "--", ASANPROBE], env=env, capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0, p)

    @unittest.skipUnless(NAMED, "needs fakecuda-named")
    def test_a_program_that_forbids_itself_sockets_keeps_running(self):
        # its filter kills it for socket(2): the interposer opens none, and
        # the process is the driver's to checkpoint
        a = Named(self, ["--no-socket"]).ready()
        time.sleep(0.3)
        self.assertIsNone(a.p.poll())
        procs, _ = self.ps()
        self.assertIsNone(procs[a.pid]["park"])
        r = self.cs("checkpoint", "--pid", a.pid, "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.cs("restore", "--pid", a.pid).rc, 0)
        self.assertEqual(a.verify(), f"verify ok bytes={8 << 20}")
        rc, err = a.finish()
        self.assertEqual(rc, 0, err)


@unittest.skipUnless(PARK_LIB and shutil.which("readelf"), "needs the interposer and readelf")
class Cet(unittest.TestCase):
    def test_the_interposer_keeps_the_shadow_stack_property(self):
        # every call it makes returns where it was made (no return address
        # is replaced), so the process keeps its shadow stack (CET)
        out = subprocess.run(["readelf", "-n", PARK_LIB], capture_output=True, text=True).stdout
        self.assertRegex(out, r"x86 feature: .*SHSTK")


NEWER = os.environ.get("NEWER_DRIVER", "")
NEWER_LIB = os.environ.get("NEWER_DRIVER_LIB", "")


@unittest.skipUnless(PARK_LIB and NEWER and NEWER_LIB, "the interposer is built for x86-64 only")
class NewerDriver(ParkCase):
    """A library built against a newer driver, which needs a function the
    installed one (the double) lacks: without the interposer, dlopen with
    RTLD_NOW fails, and with lazy binding the call ends the program with
    the dynamic linker's "symbol lookup error" (exit 127). Under the
    interposer, with or without CUDASNAP_PARK=0, it fails that way too,
    never a jump to address 0 (SIGSEGV); dlsym finds nothing either way."""

    def newer(self, mode, **env):
        e = dict(self.env, LD_LIBRARY_PATH=os.path.dirname(LIBCUDA), **env)
        asan = e.get("ASAN_OPTIONS", "")
        e["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
        return subprocess.run([NEWER, NEWER_LIB, mode], env=e, capture_output=True, text=True, timeout=30)

    def test_a_function_the_driver_lacks_fails_as_the_dynamic_linker_fails_it(self):
        r = self.newer("now")
        self.assertEqual((r.returncode, r.stdout.strip()),
                         (3, f"dlopen: {NEWER_LIB}: undefined symbol: cuArrayCreate_v2"), r)
        r = self.newer("lazy")
        self.assertEqual(r.returncode, 127, r)
        self.assertIn("symbol lookup error", r.stderr)
        self.assertEqual(self.newer("sym").stdout.strip(), "dlsym: null")
        for env in ({"LD_PRELOAD": PARK_LIB}, {"LD_PRELOAD": PARK_LIB, "CUDASNAP_PARK": "0"}):
            # probe: a library looks the name up with dlsym(RTLD_NEXT)
            # first, which never reaches the interposer's definition
            for mode in ("now", "lazy", "probe"):
                with self.subTest(env=env, mode=mode):
                    r = self.newer(mode, **env)
                    self.assertEqual(r.returncode, 127, r)  # not -11: SIGSEGV
                    self.assertIn("symbol lookup error: undefined symbol: cuArrayCreate_v2", r.stderr)
                    self.assertNotIn("returned", r.stdout)
            with self.subTest(env=env, mode="sym"):
                self.assertEqual(self.newer("sym", **env).stdout.strip(), "dlsym: null")


if __name__ == "__main__":
    unittest.main(verbosity=2)
