"""A PyTorch process holding GIB GiB of device memory in 1 GiB tensors (as a
model's weights are), each filled from a seeded generator, doing small GPU
work all the time. On SIGUSR1 it regenerates every tensor and compares it
with what it holds, and writes DIR/<pid>.verify ("ok ..." or "fail ...").
DIR/<pid>.ready is written once it is filled. SIGTERM ends it.

--bench: time allocation-heavy work instead (cudaMalloc/cudaFree through
the caching allocator emptied each round, and matmuls) and print one JSON
line; run it with and without the interposer to see what it costs.
"""
import argparse
import json
import os
import signal
import threading
import time


def write(d, ext, text):
    path = os.path.join(d, f"{os.getpid()}.{ext}")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def fill(torch, t, i):
    g = torch.Generator(device="cuda")
    g.manual_seed(1000 + i)
    t.random_(generator=g)


def bench(torch):
    torch.cuda.synchronize()
    t0 = time.time()
    for _ in range(200):
        xs = [torch.empty((8 << 20) * (k + 1), dtype=torch.uint8, device="cuda") for k in range(8)]
        del xs
        torch.cuda.empty_cache()
    torch.cuda.synchronize()
    t1 = time.time()
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(300):
        a = (a @ a).tanh_()
    torch.cuda.synchronize()
    t2 = time.time()
    print(json.dumps({"alloc_free_s": round(t1 - t0, 4), "matmul_s": round(t2 - t1, 4),
                      "preloaded": "libcudasnap-park" in os.environ.get("LD_PRELOAD", "")}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--gib", type=int, default=4)
    ap.add_argument("--bench", action="store_true")
    args = ap.parse_args()
    import torch
    if args.bench:
        bench(torch)
        return
    ts = [torch.empty(1 << 28, dtype=torch.int32, device="cuda") for _ in range(args.gib)]
    for i, t in enumerate(ts):
        fill(torch, t, i)
    torch.cuda.synchronize()
    stop = threading.Event()

    def busy():  # the program keeps the GPU busy, as a server does
        a = torch.randn(1024, 1024, device="cuda")
        while not stop.is_set():
            a = (a @ a).tanh_()
            torch.cuda.synchronize()
            time.sleep(0.01)

    threading.Thread(target=busy, daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})
    write(args.dir, "ready", f"{args.gib}\n")
    while True:
        sig = signal.sigwait({signal.SIGUSR1, signal.SIGTERM})
        if sig != signal.SIGUSR1:
            stop.set()
            return
        bad = []
        ref = torch.empty(1 << 28, dtype=torch.int32, device="cuda")
        for i, t in enumerate(ts):
            fill(torch, ref, i)
            if not torch.equal(ref, t):
                bad.append(i)
        del ref
        torch.cuda.synchronize()
        write(args.dir, "verify", ("ok" if not bad else "fail") + f" tensors={len(ts)} bad={bad}\n")


if __name__ == "__main__":
    main()
