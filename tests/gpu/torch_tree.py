"""A PyTorch parent that spawns two CUDA children (the SGLang / vLLM shape).

Every process keeps a tensor and the result of a matmul; on SIGUSR1 it
recomputes both and writes DIR/<pid>.verify ("ok ..." or "fail ...").
With --fork-worker the parent also forks a child after CUDA init without
exec (the DataLoader worker shape), which only sleeps.
"""
import argparse
import multiprocessing as mp
import os
import signal
import sys
import time


def write(d, ext, text):
    path = os.path.join(d, f"{os.getpid()}.{ext}")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def serve(d, mib, role):
    import torch
    torch.manual_seed(os.getpid())
    n = mib * (1 << 20) // 4
    x = torch.randn(n, device="cuda")
    a = torch.randn(1024, 1024, device="cuda")
    ref_sum = x.double().sum().item()
    ref_mm = (a @ a).double().sum().item()
    cpu_x = x.cpu()
    torch.cuda.synchronize()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})
    write(d, "ready", role + "\n")
    while True:
        sig = signal.sigwait({signal.SIGUSR1, signal.SIGTERM})
        if sig != signal.SIGUSR1:
            return
        same = torch.equal(x.cpu(), cpu_x)
        s = x.double().sum().item()
        mm = (a @ a).double().sum().item()
        ok = same and s == ref_sum and abs(mm - ref_mm) <= 1e-6 * max(1.0, abs(ref_mm))
        write(d, "verify", ("ok" if ok else "fail") + f" sum={s} ref={ref_sum} mm={mm} ref_mm={ref_mm}\n")


def child(d, mib):
    serve(d, mib, "spawned")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--fork-worker", action="store_true")
    args = ap.parse_args()
    import torch
    torch.zeros(1, device="cuda")
    ctx = mp.get_context("spawn")
    kids = [ctx.Process(target=child, args=(args.dir, args.mib), daemon=True) for _ in range(2)]
    for k in kids:
        k.start()
    if args.fork_worker:
        if os.fork() == 0:
            write(args.dir, "ready", "forked\n")
            while True:
                time.sleep(3600)
    serve(args.dir, args.mib, "parent")
    for k in kids:
        k.terminate()


if __name__ == "__main__":
    sys.exit(main())
