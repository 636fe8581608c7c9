"""torch_ref.py: an independent PyTorch implementation of tfm's Transformer (the
architecture of model.h and man/tfm-config.5), in float64.

    torch_ref.py DUMP.tfm     (written by dump_grads)

Reads the config, parameters and batch from the stream, computes the label-smoothed
loss and its gradient for every parameter with autograd, and compares them with tfm's:
per tensor, max |tfm - torch| / max |torch| must be <= 1e-4 (and the same for the loss).
Prints TAP lines for the caller (check_torch) and exits non-zero on any failure.
"""
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

import tfmstream

TOL = 1e-4


def config(text):
    c = {}
    for line in text.splitlines():
        k, _, v = line.partition("=")
        c[k.strip()] = v.strip()
    return c


class Ref:
    def __init__(self, cfg, params):
        self.c = cfg
        self.D = int(cfg["d_model"])
        self.H = int(cfg["heads"])
        self.N = int(cfg["layers"])
        self.V = int(cfg["vocab"])
        self.pre = cfg["norm"] == "pre"
        self.eps = float(cfg["ln_eps"])
        self.p = params

    def w(self, name):
        return self.p[name]

    def ln(self, x, pfx):
        return F.layer_norm(x, (self.D,), self.w(pfx + ".g"), self.w(pfx + ".b"), self.eps)

    def positions(self, T, stack):
        if self.c["pos"] == "learned":
            return self.w(stack + ".pos")[:T]
        pos = torch.arange(T, dtype=torch.float64)[:, None]
        i = torch.arange(self.D)
        freq = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -(i - i % 2) / self.D)
        ang = pos * freq[None, :]
        return torch.where(i % 2 == 0, torch.sin(ang), torch.cos(ang))

    def embed(self, ids, table, stack):
        T = ids.shape[1]
        return table[ids] * math.sqrt(self.D) + self.positions(T, stack)[None]

    def heads(self, x):
        # (B,T,D) -> (B,H,T,dk)
        B, T, D = x.shape
        return x.view(B, T, self.H, D // self.H).transpose(1, 2)

    def attention(self, q, k, v, mask):
        # q (B,Tq,D), k v (B,Tk,D); mask (B,Tq,Tk) True where allowed
        B, Tq, D = q.shape
        dk = D // self.H
        qh, kh, vh = self.heads(q), self.heads(k), self.heads(v)
        s = qh @ kh.transpose(-1, -2) / math.sqrt(dk)
        s = s.masked_fill(~mask[:, None], float("-inf"))
        a = torch.softmax(s, dim=-1)
        return (a @ vh).transpose(1, 2).reshape(B, Tq, D)

    def self_attn(self, x, pfx, mask):
        qkv = x @ self.w(pfx + ".wqkv") + self.w(pfx + ".bqkv")
        q, k, v = qkv.split(self.D, dim=-1)
        return self.attention(q, k, v, mask) @ self.w(pfx + ".wo") + self.w(pfx + ".bo")

    def cross_attn(self, x, mem, pfx, mask):
        q = x @ self.w(pfx + ".wq") + self.w(pfx + ".bq")
        kv = mem @ self.w(pfx + ".wkv") + self.w(pfx + ".bkv")
        k, v = kv.split(self.D, dim=-1)
        return self.attention(q, k, v, mask) @ self.w(pfx + ".wo") + self.w(pfx + ".bo")

    def ffn(self, x, pfx):
        h = torch.relu(x @ self.w(pfx + ".w1") + self.w(pfx + ".b1"))
        return h @ self.w(pfx + ".w2") + self.w(pfx + ".b2")

    def block(self, x, f, ln):
        if self.pre:
            return x + f(self.ln(x, ln))
        return self.ln(x + f(x), ln)

    def loss(self, src, tgt):
        B, S = src.shape
        T = tgt.shape[1]
        tied = self.c["tie"] == "1"
        E_src = self.w("emb") if tied else self.w("src_emb")
        E_tgt = self.w("emb") if tied else self.w("tgt_emb")
        E_out = self.w("emb") if tied else self.w("out")
        src_len = (src != 0).sum(1)
        key_ok = torch.arange(S)[None, :] < src_len[:, None]          # (B,S)
        enc_mask = key_ok[:, None, :].expand(B, S, S)
        x = self.embed(src, E_src, "enc")
        for l in range(self.N):
            p = f"enc.{l}"
            x = self.block(x, lambda u: self.self_attn(u, p + ".self", enc_mask), p + ".ln1")
            x = self.block(x, lambda u: self.ffn(u, p + ".ffn"), p + ".ln2")
        if self.pre:
            x = self.ln(x, "enc.ln")
        mem = x
        dec_in = torch.cat([torch.full((B, 1), 2, dtype=tgt.dtype), tgt[:, :-1]], dim=1)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))[None].expand(B, T, T)
        cross_mask = key_ok[:, None, :].expand(B, T, S)
        y = self.embed(dec_in, E_tgt, "dec")
        for l in range(self.N):
            p = f"dec.{l}"
            y = self.block(y, lambda u: self.self_attn(u, p + ".self", causal), p + ".ln1")
            y = self.block(y, lambda u: self.cross_attn(u, mem, p + ".cross", cross_mask),
                           p + ".ln2")
            y = self.block(y, lambda u: self.ffn(u, p + ".ffn"), p + ".ln3")
        if self.pre:
            y = self.ln(y, "dec.ln")
        logp = torch.log_softmax(y @ E_out.t(), dim=-1)                # (B,T,V)
        eps = float(self.c["label_smoothing"])
        nll = -logp.gather(-1, tgt[..., None])[..., 0]
        smooth = -logp.sum(-1) / self.V
        per_tok = (1 - eps) * nll + eps * smooth
        keep = tgt != 0
        return (per_tok * keep).sum(), (nll * keep).sum(), keep.sum()


def main():
    path = sys.argv[1]
    _, rec = tfmstream.read(path)
    cfg = config(bytes(rec["config"]).decode())
    params = {k[6:]: torch.tensor(v.astype(np.float64), requires_grad=True)
              for k, v in rec.items() if k.startswith("param.")}
    src = torch.tensor(rec["batch.src"].astype(np.int64))
    tgt = torch.tensor(rec["batch.tgt"].astype(np.int64))
    model = Ref(cfg, params)
    loss, nll, ntok = model.loss(src, tgt)
    loss.backward()
    tfm_loss = rec["loss"]
    label = f"norm={cfg['norm']} tie={cfg['tie']} pos={cfg['pos']}"
    failed = 0
    rel = abs(float(tfm_loss[0]) - loss.item()) / abs(loss.item())
    reln = abs(float(tfm_loss[1]) - nll.item()) / abs(nll.item())
    ok = rel <= TOL and reln <= TOL and int(tfm_loss[2]) == int(ntok)
    print(f"# {label}: loss tfm {float(tfm_loss[0]):.7g} torch {loss.item():.7g} "
          f"(rel {rel:.2g}), nll rel {reln:.2g}, tokens {int(tfm_loss[2])}")
    worst, worst_name = 0.0, ""
    for name, p in params.items():
        g_ref = p.grad.numpy()
        g_tfm = rec["grad." + name].astype(np.float64)
        scale = np.abs(g_ref).max()
        err = np.abs(g_tfm - g_ref).max() / (scale if scale > 0 else 1.0)
        if err > worst:
            worst, worst_name = err, name
        if not err <= TOL:
            print(f"#   grad {name}: max |tfm - torch| / max |torch| = {err:.3g}")
            ok = False
    print(f"# {label}: {len(params)} gradients, worst relative error {worst:.2g} ({worst_name})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
