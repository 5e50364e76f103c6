"""A PyTorch parent that shares a CUDA tensor with a spawned child through
torch.multiprocessing (CUDA IPC), as inference servers share weights.

Both write DIR/<pid>.ready (role "exporter" or "importer"); on SIGUSR1 each
re-reads the shared tensor and writes DIR/<pid>.verify ("ok ..." or "fail
..."). SIGTERM ends a process.
"""
import argparse
import os
import signal


def write(d, ext, text):
    path = os.path.join(d, f"{os.getpid()}.{ext}")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def serve(d, x, ref, role):
    import torch
    torch.cuda.synchronize()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})
    write(d, "ready", role + "\n")
    while True:
        sig = signal.sigwait({signal.SIGUSR1, signal.SIGTERM})
        if sig != signal.SIGUSR1:
            return
        s = x.double().sum().item()
        write(d, "verify", ("ok" if s == ref else "fail") + f" sum={s} ref={ref}\n")


def child(d, q):
    import torch
    torch.zeros(1, device="cuda")
    x, ref = q.get()
    serve(d, x, ref, "importer")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--mib", type=int, default=1024)
    args = ap.parse_args()
    import torch
    import torch.multiprocessing as mp
    torch.manual_seed(os.getpid())
    x = torch.randn(args.mib * (1 << 20) // 4, device="cuda")
    ref = x.double().sum().item()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    kid = ctx.Process(target=child, args=(args.dir, q), daemon=True)
    kid.start()
    q.put((x, ref))
    serve(args.dir, x, ref, "exporter")
    kid.terminate()


if __name__ == "__main__":
    main()
