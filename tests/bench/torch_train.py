"""torch_train.py: the PyTorch reference for bench_train.sh and the GPU report: the same
model as tfm (tests/ref/torch_ref.py), trained with Adam on the same batch shape.
    torch_train.py CONFIG B S T STEPS THREADS   -> prints tokens_per_s=X step_s=X
On the CPU (the default) in float32.  TORCH_DEVICE=cuda trains on GPU 0 as people train
there: bf16 autocast, attention through F.scaled_dot_product_attention (its fused
kernels), fused Adam; TORCH_MODE=compile adds torch.compile of the loss (its warm-up
steps, compilation included, are not timed).
"""
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ref"))
import torch_ref  # noqa: E402


def shapes(c):
    D, Fd, V, N, L = (int(c[k]) for k in ("d_model", "d_ff", "vocab", "layers", "max_len"))
    s = {}
    if c["tie"] == "1":
        s["emb"] = (V, D)
    else:
        s.update({"src_emb": (V, D), "tgt_emb": (V, D), "out": (V, D)})
    if c["pos"] == "learned":
        s.update({"enc.pos": (L, D), "dec.pos": (L, D)})
    def attn(p, cross):
        if cross:
            s.update({p + ".wq": (D, D), p + ".bq": (D,), p + ".wkv": (D, 2 * D), p + ".bkv": (2 * D,)})
        else:
            s.update({p + ".wqkv": (D, 3 * D), p + ".bqkv": (3 * D,)})
        s.update({p + ".wo": (D, D), p + ".bo": (D,)})
    def ln(p):
        s.update({p + ".g": (D,), p + ".b": (D,)})
    def ffn(p):
        s.update({p + ".w1": (D, Fd), p + ".b1": (Fd,), p + ".w2": (Fd, D), p + ".b2": (D,)})
    for l in range(N):
        attn(f"enc.{l}.self", 0); ln(f"enc.{l}.ln1"); ffn(f"enc.{l}.ffn"); ln(f"enc.{l}.ln2")
    for l in range(N):
        attn(f"dec.{l}.self", 0); ln(f"dec.{l}.ln1"); attn(f"dec.{l}.cross", 1)
        ln(f"dec.{l}.ln2"); ffn(f"dec.{l}.ffn"); ln(f"dec.{l}.ln3")
    if c["norm"] == "pre":
        ln("enc.ln"); ln("dec.ln")
    return s


def sdpa_attention(self, q, k, v, mask):
    """torch_ref.Ref.attention through the fused kernels: mask (B,Tq,Tk) True where allowed."""
    B, Tq, D = q.shape
    o = torch.nn.functional.scaled_dot_product_attention(self.heads(q), self.heads(k),
                                                         self.heads(v), attn_mask=mask[:, None])
    return o.transpose(1, 2).reshape(B, Tq, D)


def main():
    path, B, S, T, steps, threads = sys.argv[1], *map(int, sys.argv[2:7])
    torch.set_num_threads(threads)
    dev = os.environ.get("TORCH_DEVICE", "cpu")
    mode = os.environ.get("TORCH_MODE", "eager")
    gpu = dev.startswith("cuda")
    if gpu:
        torch.set_default_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch_ref.Ref.attention = sdpa_attention
    c = {"norm": "post", "pos": "sinusoid", "tie": "1", "ln_eps": "1e-5", "label_smoothing": "0.1",
         "vocab": "8000", "max_len": "256"}
    for line in open(path):
        line = line.split("#")[0]
        if "=" in line:
            k, _, v = line.partition("=")
            c[k.strip()] = v.strip()
    if c["vocab"] == "0":
        c["vocab"] = "8000"
    torch.manual_seed(1)
    params = {}
    for n, sh in shapes(c).items():
        t = torch.randn(sh) * (1 / math.sqrt(int(c["d_model"]))) if len(sh) == 2 else \
            (torch.ones(sh) if n.endswith(".g") else torch.zeros(sh))
        params[n] = t.requires_grad_()
    model = torch_ref.Ref(c, params)
    # float32 positions as tfm
    V = int(c["vocab"])
    src = torch.randint(4, V, (B, S)); src[:, -1] = 3
    tgt = torch.randint(4, V, (B, T)); tgt[:, -1] = 3
    opt = torch.optim.Adam(params.values(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9,
                           **({"fused": True} if gpu else {}))
    orig = model.positions
    model.positions = lambda n, st: orig(n, st).float()
    loss_fn = model.loss
    if mode == "compile":
        loss_fn = torch.compile(model.loss)
    warm = 3 if mode == "compile" else 1

    def step():
        opt.zero_grad(set_to_none=True)
        if gpu:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss, _, ntok = loss_fn(src, tgt)
        else:
            loss, _, ntok = loss_fn(src, tgt)
        (loss / ntok).backward()
        opt.step()

    for _ in range(warm):
        step()
    if gpu:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if gpu:
        torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / steps
    print(f"tokens_per_s={B * T / dt:.1f} step_s={dt:.4f}")


if __name__ == "__main__":
    main()
