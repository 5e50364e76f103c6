"""Greedy decoding with a transformers model, before and after a checkpoint:
the tokens must be the same. No model can be downloaded on the GPU machine,
so the model is a GPT-2 architecture (0.9 billion parameters, float16) with
seeded random weights.

DIR/<pid>.ready once the first decoding is done; on SIGUSR1 it decodes
again and writes DIR/<pid>.verify ("ok ..." when the tokens are the same).
"""
import argparse
import os
import signal


def write(d, ext, text):
    path = os.path.join(d, f"{os.getpid()}.{ext}")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(1234)
    cfg = GPT2Config(n_layer=16, n_embd=2048, n_head=16, vocab_size=50257, n_positions=1024)
    with torch.device("cuda"):  # initialized on the GPU: seconds, not minutes
        model = GPT2LMHeadModel(cfg).half().eval()
    prompt = torch.arange(1, 33, device="cuda").unsqueeze(0)

    def decode():
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=args.tokens, do_sample=False, pad_token_id=0)
        return out[0].tolist()

    first = decode()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})
    params = sum(p.numel() for p in model.parameters())
    write(args.dir, "ready", f"params={params}\n")
    while True:
        sig = signal.sigwait({signal.SIGUSR1, signal.SIGTERM})
        if sig != signal.SIGUSR1:
            return
        again = decode()
        same = again == first
        write(args.dir, "verify", ("ok" if same else "fail") + f" tokens={len(again)} same={same} "
              f"head={again[32:40]}\n")


if __name__ == "__main__":
    main()
