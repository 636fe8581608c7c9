"""torch_decode.py: the PyTorch reference for bench_decode.sh: beam search with the same
model as tfm (tests/ref/torch_ref.py, in float32 here) on the same checkpoint and input.

    torch_decode.py CHECKPOINT TOKENS THREADS [BEAM [ALPHA [MAX_LEN_B]]]
        -> prints sentences=N tokens=N seconds=X

The same search rules as src/beam.h: bos first, 2K best extensions per step, those ending
in eos finish with score log P / ((5 + |Y|) / 6)^alpha, the K best others stay live, eos
forced after source length (with eos) - 1 + MAX_LEN_B tokens (capped by the model's
max_len), pad and bos never generated, a sentence stops once its best finished score beats
what its best live hypothesis could still reach.  The same batching as tfm-decode: sources
made eos-terminated, sorted by length (longest first) and cut under a budget of 16384
token positions (max(source length, beam * steps) per sentence).

Implementation: batched over sentences and beams; encoder once per batch; cross-attention
K/V computed once per sentence and shared by its beams (no copy per beam); self-attention
K/V cached per layer, reordered with index_select and appended each step; finished
sentences leave the batch.  tokens counts the best hypotheses' tokens, eos excluded.
Timing covers checkpoint load, input read and decoding (not Python/torch start-up).
TORCH_DEVICE=cuda decodes on GPU 0 (float32, TF32 products allowed); TORCH_DECODE_BUDGET
sets the batch budget in token positions (tfm-decode --tokens).
"""
import math
import os
import struct
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn.functional as F

PAD, BOS, EOS = 0, 2, 3
BUDGET = int(os.environ.get("TORCH_DECODE_BUDGET", "16384"))
DEVICE = os.environ.get("TORCH_DEVICE", "cpu")
MAGIC = b"\x89TFM\r\n\x1a\n"
DTYPES = {1: np.uint8, 2: np.uint16, 3: np.int32, 4: np.int64, 5: np.float16, 7: np.float32}


def records(path):
    """Every (name, array) of a tfm stream, in order (chunks repeat names), as
    tests/ref/tfmstream.py reads them (CRCs checked there; not needed for a bench)."""
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != MAGIC:
        raise ValueError(f"{path}: bad magic")
    pos = 16
    while True:
        if buf[pos:pos + 4] != b"TREC":
            raise ValueError(f"{path}: bad record magic at byte {pos}")
        dtype, rank, codec, _, nlen, _, _, size, _, _ = struct.unpack_from("<BBBBHHIQII", buf, pos + 4)
        dims = struct.unpack_from(f"<{rank}Q", buf, pos + 32)
        npos = pos + 32 + 8 * rank
        name = buf[npos:npos + nlen].decode("ascii")
        start = npos + nlen
        start += (-start) % 64
        payload = buf[start:start + size]
        if codec == 1:
            payload = zlib.decompress(payload)
        pos = start + size
        if name == "tfm.end":
            return
        yield name, np.frombuffer(payload, dtype=DTYPES[dtype]).reshape(dims)


def read_sources(path):
    sents = []
    offs = None
    for name, a in records(path):
        if name == "tokens.offsets":
            offs = a
        elif name == "tokens.ids":
            for i in range(len(offs) - 1):
                s = a[offs[i]:offs[i + 1]].astype(np.int64)
                if len(s) == 0 or s[-1] != EOS:
                    s = np.append(s, EOS)
                sents.append(s)
    return sents


class Model:
    def __init__(self, path):
        cfg, p = {}, {}
        for name, a in records(path):
            if name == "config":
                for line in bytes(a).decode().splitlines():
                    k, _, v = line.partition("=")
                    cfg[k.strip()] = v.strip()
            elif name.startswith("param."):
                p[name[6:]] = torch.from_numpy(a.astype(np.float32)).to(DEVICE)
        self.c = cfg
        self.D, self.H, self.N = int(cfg["d_model"]), int(cfg["heads"]), int(cfg["layers"])
        self.dk = self.D // self.H
        self.pre = cfg["norm"] == "pre"
        self.eps = float(cfg["ln_eps"])
        self.max_len = int(cfg["max_len"])
        self.max_len_b = int(cfg.get("max_len_b", "50"))
        tied = cfg["tie"] == "1"
        self.E_src = p["emb"] if tied else p["src_emb"]
        self.E_tgt = p["emb"] if tied else p["tgt_emb"]
        self.E_out_t = (p["emb"] if tied else p["out"]).t().contiguous()    # (D,V)
        self.V = self.E_out_t.shape[1]
        self.p = p
        P = 1024 if self.max_len < 1024 else self.max_len
        self.pos = {s: self.positions(P, s) for s in ("enc", "dec")}

    def positions(self, T, stack):
        if self.c["pos"] == "learned":
            return self.p[stack + ".pos"][:T]
        pos = torch.arange(T, dtype=torch.float64)[:, None]
        i = torch.arange(self.D)
        freq = torch.pow(torch.tensor(10000.0, dtype=torch.float64), -(i - i % 2) / self.D)
        ang = pos * freq[None, :]
        return torch.where(i % 2 == 0, torch.sin(ang), torch.cos(ang)).float()

    def lin(self, x, pfx, w, b):
        # x (..., in) @ (in, out) + b
        sh = x.shape
        y = torch.addmm(self.p[pfx + b], x.reshape(-1, sh[-1]), self.p[pfx + w])
        return y.view(*sh[:-1], y.shape[-1])

    def ln(self, x, pfx):
        return F.layer_norm(x, (self.D,), self.p[pfx + ".g"], self.p[pfx + ".b"], self.eps)

    def block(self, x, f, ln):
        if self.pre:
            return x + f(self.ln(x, ln))
        return self.ln(x + f(x), ln)

    def ffn(self, x, pfx):
        return self.lin(torch.relu(self.lin(x, pfx, ".w1", ".b1")), pfx, ".w2", ".b2")

    def heads(self, x):                     # (B,T,D) -> (B,H,T,dk)
        B, T, _ = x.shape
        return x.view(B, T, self.H, self.dk).transpose(1, 2)

    def encode(self, src):
        """src (B,S) -> per-layer cross K, V (B,H,S,dk) each, key bias (B,1,1,S)."""
        B, S = src.shape
        bias = torch.zeros(B, 1, 1, S).masked_fill_((src == PAD)[:, None, None, :], float("-inf"))
        x = self.E_src[src] * math.sqrt(self.D) + self.pos["enc"][:S][None]
        scale = 1 / math.sqrt(self.dk)

        def self_attn(u, pfx):
            q, k, v = self.lin(u, pfx, ".wqkv", ".bqkv").split(self.D, dim=-1)
            s = torch.matmul(self.heads(q), self.heads(k).transpose(-1, -2)) * scale + bias
            a = torch.matmul(torch.softmax(s, -1), self.heads(v))
            return self.lin(a.transpose(1, 2).reshape(B, S, self.D), pfx, ".wo", ".bo")

        for l in range(self.N):
            pf = f"enc.{l}"
            x = self.block(x, lambda u: self_attn(u, pf + ".self"), pf + ".ln1")
            x = self.block(x, lambda u: self.ffn(u, pf + ".ffn"), pf + ".ln2")
        if self.pre:
            x = self.ln(x, "enc.ln")
        cross = []
        for l in range(self.N):
            k, v = self.lin(x, f"dec.{l}.cross", ".wkv", ".bkv").split(self.D, dim=-1)
            cross.append((self.heads(k).contiguous(), self.heads(v).contiguous()))
        return cross, bias

    def step(self, tok, t, cache, cross, bias, K):
        """One decoder step for R = B*K rows.  tok (R,) the input token at position t;
        cache: per layer (R,2,H,t,dk) or None, updated; cross per layer (B,H,S,dk).
        Returns log-probs (R,V)."""
        R = tok.shape[0]
        B = R // K
        H, dk, D = self.H, self.dk, self.D
        scale = 1 / math.sqrt(dk)
        y = self.E_tgt[tok] * math.sqrt(D) + self.pos["dec"][t][None]        # (R,D)
        for l in range(self.N):
            pf = f"dec.{l}"

            def self_attn(u):
                qkv = self.lin(u, pf + ".self", ".wqkv", ".bqkv").view(R, 3, H, 1, dk)
                new = qkv[:, 1:]                                               # (R,2,H,1,dk)
                kv = new.contiguous() if cache[l] is None else torch.cat([cache[l], new], dim=3)
                cache[l] = kv
                s = torch.matmul(qkv[:, 0], kv[:, 0].transpose(-1, -2)) * scale  # (R,H,1,t+1)
                a = torch.matmul(torch.softmax(s, -1), kv[:, 1])                # (R,H,1,dk)
                return self.lin(a.reshape(R, D), pf + ".self", ".wo", ".bo")

            def cross_attn(u):
                q = self.lin(u, pf + ".cross", ".wq", ".bq").view(B, K, H, dk).transpose(1, 2)
                ck, cv = cross[l]
                s = torch.matmul(q, ck.transpose(-1, -2)) * scale + bias         # (B,H,K,S)
                a = torch.matmul(torch.softmax(s, -1), cv)                      # (B,H,K,dk)
                return self.lin(a.transpose(1, 2).reshape(R, D), pf + ".cross", ".wo", ".bo")

            y = self.block(y, self_attn, pf + ".ln1")
            y = self.block(y, cross_attn, pf + ".ln2")
            y = self.block(y, lambda u: self.ffn(u, pf + ".ffn"), pf + ".ln3")
        if self.pre:
            y = self.ln(y, "dec.ln")
        return torch.log_softmax(y @ self.E_out_t, dim=-1)


def lp(n, alpha):
    return ((5.0 + n) / 6.0) ** alpha


def beam_search(m, srcs, K, alpha, max_len_b):
    """srcs: list of eos-terminated id arrays.  Returns the best hypotheses (lists of ids,
    eos excluded), in the order of srcs."""
    B = len(srcs)
    S = max(len(s) for s in srcs)
    src = torch.zeros(B, S, dtype=torch.long)
    for i, s in enumerate(srcs):
        src[i, :len(s)] = torch.from_numpy(s)
    # tokens before eos at most; eos forced after L tokens, so at most L + 1 steps
    L = torch.tensor([min(len(s) - 1 + max_len_b, m.max_len - 1) for s in srcs])
    Tmax = int(L.max()) + 1
    cross, bias = m.encode(src)
    V = m.V
    sent = torch.arange(B)                              # original position of each live sentence
    alive_seq = torch.zeros(B, K, 0, dtype=torch.long)
    alive_logp = torch.full((B, K), float("-inf"))
    alive_logp[:, 0] = 0.0                              # one live row per sentence at first
    fin_score = torch.full((B,), float("-inf"))
    fin_seq = torch.zeros(B, Tmax, dtype=torch.long)    # best finished, indexed by original
    fin_len = torch.zeros(B, dtype=torch.long)
    best_score = torch.full((B,), float("-inf"))
    cache = [None] * m.N
    tok = torch.full((B * K,), BOS, dtype=torch.long)
    lp_max = torch.tensor([lp(int(n) + 1, alpha) for n in L])
    ar = torch.arange(B)
    for t in range(Tmax):
        nb = sent.shape[0]
        logp = m.step(tok, t, cache, cross, bias, K).view(nb, K, V)
        logp[:, :, PAD] = float("-inf")
        logp[:, :, BOS] = float("-inf")
        forced = L[sent] == t                           # must end now
        if bool(forced.any()):
            eos_col = logp[:, :, EOS].clone()
            logp[forced] = float("-inf")
            logp[:, :, EOS] = eos_col
        cand = (alive_logp[:, :, None] + logp).view(nb, K * V)
        top, idx = cand.topk(2 * K, dim=1)              # (nb,2K), best first
        beam = torch.div(idx, V, rounding_mode="floor")
        word = idx % V
        is_eos = word == EOS
        # finished: the best eos candidate, scored with |Y| = t + 1
        fs = torch.where(is_eos, top, torch.full_like(top, float("-inf"))) / lp(t + 1, alpha)
        fbest, fpos = fs.max(dim=1)
        better = fbest > best_score[sent]
        if bool(better.any()):
            bi = better.nonzero()[:, 0]
            ob = sent[bi]
            best_score[ob] = fbest[bi]
            fb = beam[bi, fpos[bi]]
            fin_seq[ob, :t] = alive_seq[bi, fb]
            fin_len[ob] = t
        # live: the K best candidates not ending in eos
        live = torch.where(is_eos, torch.full_like(top, float("-inf")), top)
        lt, lpos = live.topk(K, dim=1)
        lbeam = beam.gather(1, lpos)
        lword = word.gather(1, lpos)
        alive_seq = torch.cat([alive_seq.gather(1, lbeam[:, :, None].expand(-1, -1, t)),
                               lword[:, :, None]], dim=2)
        alive_logp = lt
        # done: forced, or nothing live can beat the best finished score
        bound = lt[:, 0] / (lp_max[sent] if alpha >= 0 else lp(t + 2, alpha))
        done = forced | (best_score[sent] >= bound) | torch.isinf(lt[:, 0])
        rows = (ar[:nb, None] * K + lbeam).view(-1)     # source row of each new row
        if bool(done.any()):
            keep = (~done).nonzero()[:, 0]
            if keep.numel() == 0:
                break
            rows = rows.view(nb, K)[keep].view(-1)
            sent = sent[keep]
            alive_seq, alive_logp = alive_seq[keep], alive_logp[keep]
            cross = [(k.index_select(0, keep), v.index_select(0, keep)) for k, v in cross]
            bias = bias.index_select(0, keep)
            tok = lword[keep].view(-1)
        else:
            tok = lword.view(-1)
        cache = [c.index_select(0, rows) for c in cache]
    return [fin_seq[i, :int(fin_len[i])].tolist() for i in range(B)]


def main():
    ckpt, path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    K = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    alpha = float(sys.argv[5]) if len(sys.argv) > 5 else 0.6
    torch.set_num_threads(threads)
    if DEVICE.startswith("cuda"):
        torch.set_default_device(DEVICE)
        torch.backends.cuda.matmul.allow_tf32 = True
    t0 = time.perf_counter()
    with torch.inference_mode():
        m = Model(ckpt)
        max_len_b = int(sys.argv[6]) if len(sys.argv) > 6 else m.max_len_b
        srcs = read_sources(path)
        n = len(srcs)
        # tfm-decode's plan: longest first, cut under the budget
        order = sorted(range(n), key=lambda i: (-len(srcs[i]), i))
        out = [None] * n
        i = 0
        while i < n:
            Lb = Tb = k = 0
            j = i
            while j < n:
                s = srcs[order[j]]
                l = max(len(s), Lb)
                tt = max(min(len(s) - 1 + max_len_b, m.max_len - 1) + 1, Tb)
                if k > 0 and (k + 1) * max(l, K * tt) > BUDGET:
                    break
                Lb, Tb, k, j = l, tt, k + 1, j + 1
            idx = order[i:j]
            for o, h in zip(idx, beam_search(m, [srcs[x] for x in idx], K, alpha, max_len_b)):
                out[o] = h
            i = j
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    toks = sum(len(h) for h in out)
    if os.environ.get("TORCH_DECODE_PRINT"):
        for h in out:
            print(" ".join(map(str, h)), file=sys.stderr)
    print(f"sentences={n} tokens={toks} seconds={secs:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
