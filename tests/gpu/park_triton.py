"""torch.compile and a raw Triton kernel, for parked checkpoints on a GPU
(tests/gpu/park_triton.sh). Triton's launchers are built with -lcuda and
call the driver by name (cuLaunchKernel, cuPointerGetAttribute...): under
'cudasnap run' those calls must be held at the interposer's gate during a
park like the CUDA runtime's, or a launch during the park fails or its
write is lost.

  --dir DIR [--mib N]  the workload: a worker thread runs, over and over, a
                       torch.compile'd model on a fixed input (its output
                       must equal the first one, bit for bit) and a Triton
                       kernel that steps an int64 state of N MiB in place
                       (s = s * MUL + ADD, wrapping: after k steps the state
                       is known in closed form). DIR/<pid>.ready once set
                       up (with the objects that bind the driver by name);
                       SIGUSR1 writes DIR/<pid>.verify ("ok steps=<k> ..." or
                       "fail ..."); SIGTERM ends it.
  --reference          the compiled model's output and the state after 100
                       steps, as sha256 digests (one JSON line): the same
                       with and without the interposer.
  --bench              launches per second of a tiny Triton kernel and of the
                       compiled model (one JSON line).
"""
import argparse
import hashlib
import json
import os
import signal
import threading
import time

MUL = 6364136223846793005
ADD = 1442695040888963407
MASK = (1 << 64) - 1


def signed(v):
    v &= MASK
    return v - (1 << 64) if v >> 63 else v


def setup(torch, triton, tl):
    @triton.jit
    def step(state, n, mul, add, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        s = tl.load(state + offs, mask=m)
        tl.store(state + offs, s * mul + add, mask=m)

    @triton.jit
    def tiny(x):
        tl.store(x, tl.load(x) + 1)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024),
                                torch.nn.LayerNorm(1024)).cuda().eval()
    x = torch.randn(64, 1024, device="cuda")
    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(x)  # compiles
        out = compiled(x)
        eager = model(x)
    torch.cuda.synchronize()
    return step, tiny, model, compiled, x, out, eager


def run_step(torch, step, state, n):
    grid = (triton_cdiv(n, 1024),)
    step[grid](state, n, signed(MUL), signed(ADD), BLOCK=1024)


def triton_cdiv(a, b):
    return (a + b - 1) // b


def steps(k):
    """(a, b) with s -> s * a + b the same as k steps (mod 2^64)."""
    a, b = 1, 0  # the identity
    pa, pb = MUL, ADD  # 2^i steps
    while k:
        if k & 1:
            a, b = (a * pa) & MASK, (b * pa + pb) & MASK
        pa, pb = (pa * pa) & MASK, (pb * pa + pb) & MASK
        k >>= 1
    return a, b


def expected_state(torch, n, k):
    """The state after k steps from arange(n)."""
    a, b = steps(k)
    s0 = torch.arange(n, dtype=torch.int64, device="cuda")
    return s0 * signed(a) + signed(b)


def digest(t):
    return hashlib.sha256(t.detach().cpu().contiguous().view(-1).numpy().tobytes()).hexdigest()


def driver_bound_objects():
    """Triton's objects loaded here that import cuLaunchKernel by name (its
    launchers, built with -lcuda)."""
    names = set()
    with open("/proc/self/maps") as f:
        for ln in f:
            parts = ln.split()
            if len(parts) >= 6 and parts[5].endswith(".so") and "triton" in parts[5]:
                names.add(parts[5])
    found = []
    for path in sorted(names):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if b"cuLaunchKernel" in data and b"libcuda.so" in data:
            found.append(os.path.basename(path))
    return found


def workload(args):
    import torch
    import triton
    import triton.language as tl
    step, _, _, compiled, x, out, eager = setup(torch, triton, tl)
    n = (args.mib << 20) // 8
    state = torch.arange(n, dtype=torch.int64, device="cuda")
    lock = threading.Lock()
    stop = threading.Event()
    progress = {"steps": 0, "runs": 0, "error": None}

    def worker():
        while not stop.is_set():
            with lock:
                try:
                    with torch.no_grad():
                        y = compiled(x)
                    run_step(torch, step, state, n)
                    progress["steps"] += 1
                    if not torch.equal(y, out):  # synchronizes
                        progress["error"] = progress["error"] or f"compiled output differs at run {progress['runs']}"
                    progress["runs"] += 1
                except Exception as e:  # noqa: BLE001 - kept for the verify answer
                    progress["error"] = progress["error"] or f"{type(e).__name__}: {e}"
            time.sleep(args.interval)

    threading.Thread(target=worker, daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})
    close = torch.allclose(out, eager, atol=1e-3, rtol=1e-3)
    write(args.dir, "ready", json.dumps({"eager_close": bool(close), "output": digest(out),
                                         "bind_by_name": driver_bound_objects()}) + "\n")
    while True:
        sig = signal.sigwait({signal.SIGUSR1, signal.SIGTERM})
        if sig != signal.SIGUSR1:
            stop.set()
            return
        with lock:
            try:
                torch.cuda.synchronize()
                k = progress["steps"]
                state_ok = torch.equal(state, expected_state(torch, n, k))
                with torch.no_grad():
                    out_ok = torch.equal(compiled(x), out)
                err = progress["error"]
                ok = state_ok and out_ok and err is None
                text = (f"{'ok' if ok else 'fail'} steps={k} runs={progress['runs']} state_ok={state_ok} "
                        f"output_ok={out_ok} error={err}")
            except Exception as e:  # noqa: BLE001
                text = f"fail verify raised {type(e).__name__}: {e}"
        write(args.dir, "verify", text + "\n")


def reference():
    import torch
    import triton
    import triton.language as tl
    step, _, _, _, _, out, _ = setup(torch, triton, tl)
    n = (64 << 20) // 8
    state = torch.arange(n, dtype=torch.int64, device="cuda")
    for _ in range(100):
        run_step(torch, step, state, n)
    torch.cuda.synchronize()
    print(json.dumps({"output": digest(out), "state": digest(state),
                      "state_ok": bool(torch.equal(state, expected_state(torch, n, 100))),
                      "preloaded": "libcudasnap-park" in os.environ.get("LD_PRELOAD", "")}), flush=True)


def bench():
    import torch
    import triton
    import triton.language as tl
    _, tiny, _, compiled, x, _, _ = setup(torch, triton, tl)
    t = torch.zeros(1, dtype=torch.int32, device="cuda")
    for _ in range(100):
        tiny[(1,)](t)
    torch.cuda.synchronize()
    launches = 20000
    t0 = time.perf_counter()
    for _ in range(launches):
        tiny[(1,)](t)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    runs = 2000
    with torch.no_grad():
        for _ in range(runs):
            compiled(x)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(json.dumps({"triton_launch_us": round((t1 - t0) / launches * 1e6, 3),
                      "compiled_forward_us": round((t2 - t1) / runs * 1e6, 3),
                      "preloaded": "libcudasnap-park" in os.environ.get("LD_PRELOAD", "")}), flush=True)


def write(d, ext, text):
    path = os.path.join(d, f"{os.getpid()}.{ext}")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--interval", type=float, default=0.0005)
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--bench", action="store_true")
    args = ap.parse_args()
    if args.reference:
        reference()
    elif args.bench:
        bench()
    else:
        workload(args)


if __name__ == "__main__":
    main()
