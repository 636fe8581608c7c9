"""ct2_convert.py: convert a tfm checkpoint into a CTranslate2 model directory, for the
benchmark against CTranslate2 (bench_ct2.sh).  A test tool, not part of tfm.

usage: python ct2_convert.py CHECKPOINT OUTDIR

Runs in a Python that has ctranslate2 and numpy; reads the checkpoint with
tests/ref/tfmstream.py.  The model is described with CTranslate2's spec API:

- Linear layers: tfm stores W as [in, out] (y = x W + b), CTranslate2 as [out, in]:
  every matrix is transposed.  tfm's fused self-attention wqkv [D, 3D] (columns q | k | v,
  head h in columns h*dk .. (h+1)*dk of each) is CTranslate2's fused linear[0] of a
  self-attention; the cross-attention's wq and wkv (k | v) are its linear[0] and linear[1].
- Layer norms: with norm = post, CTranslate2's pre_norm=False applies each sublayer's norm
  after the residual sum, as tfm's ln1/ln2(/ln3) do; with norm = pre, before, and the
  stacks' final norms are tfm's enc.ln and dec.ln.  Epsilon: the config's ln_eps.
- Embeddings: scaled by sqrt(d_model) in both (scale_embeddings); the output layer has no
  bias; with tie = 1 one table serves the source, the target and the output.
- Positions: tfm's interleaved sinusoid (even dimension i: sin, odd: cos, of
  p / 10000^((i - i % 2) / d_model)), or the learned tables, given as
  position_encodings/encodings [max_len, D].  CTranslate2 adds row p to the token at
  position p, counting from 0 in the encoder and from 0 at the decoder's first input (no
  padding offset), as tfm does.
- Vocabulary: synthetic token strings, id i is "<pad>", "<unk>", "<s>", "</s>" for
  0..3, then "t<i>"; the translate script (ct2_translate.py) feeds and reads ids through
  them.  bos (2) starts the decoder, eos (3) ends it; sources are given with their eos.
"""
import os
import shutil
import sys

sys.dont_write_bytecode = True     # no __pycache__ in the tree

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
import tfmstream  # noqa: E402

SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]


def vocabulary(n):
    """The token strings of ids 0..n-1."""
    return SPECIALS[:n] + ["t%d" % i for i in range(len(SPECIALS), n)]


def sinusoid(length, d_model):
    """tfm's position table (tfm_model_sinusoid in src/model.c), [length, d_model]."""
    p = np.arange(length, dtype=np.float64)[:, None]
    i = np.arange(d_model)
    ang = p / np.power(10000.0, (i - i % 2) / d_model)[None, :]
    return np.where(i % 2 == 0, np.sin(ang), np.cos(ang)).astype(np.float32)


def parse_config(raw):
    cfg = {}
    for line in bytes(raw).decode().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            k, _, v = line.partition("=")
            cfg[k.strip()] = v.strip()
    return cfg


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: ct2_convert.py CHECKPOINT OUTDIR\n")
        return 2
    ckpt, outdir = argv[1], argv[2]
    import ctranslate2
    from ctranslate2.specs import common_spec, transformer_spec

    _, rec = tfmstream.read(ckpt)
    if "config" not in rec:
        raise SystemExit(f"ct2_convert: {ckpt}: no config record (not a checkpoint?)")
    cfg = parse_config(rec["config"])
    N, D = int(cfg["layers"]), int(cfg["d_model"])
    H, V, L = int(cfg["heads"]), int(cfg["vocab"]), int(cfg["max_len"])
    pre = cfg.get("norm", "post") == "pre"
    tie = int(cfg.get("tie", "1"))
    eps = float(cfg.get("ln_eps", "1e-5"))
    pos = cfg.get("pos", "sinusoid")

    def P(name):
        key = "param." + name
        if key not in rec:
            raise SystemExit(f"ct2_convert: {ckpt}: no record '{key}'")
        a = rec[key]
        if a.dtype != np.float32:
            a = a.astype(np.float32)
        return a

    def linear(spec, w, b):
        spec.weight = np.ascontiguousarray(P(w).T)          # [in, out] -> [out, in]
        spec.bias = P(b).copy()

    def norm(spec, pfx):
        spec.gamma = P(pfx + ".g").copy()
        spec.beta = P(pfx + ".b").copy()

    def ffn(spec, pfx, ln):
        norm(spec.layer_norm, ln)
        linear(spec.linear_0, pfx + ".w1", pfx + ".b1")
        linear(spec.linear_1, pfx + ".w2", pfx + ".b2")

    enc = transformer_spec.TransformerEncoderSpec(N, H, pre_norm=pre)
    dec = transformer_spec.TransformerDecoderSpec(N, H, pre_norm=pre)
    if tie:
        src_emb = tgt_emb = out = P("emb")
    else:
        src_emb, tgt_emb, out = P("src_emb"), P("tgt_emb"), P("out")
    if src_emb.shape != (V, D):
        raise SystemExit(f"ct2_convert: {ckpt}: embedding shape {src_emb.shape}, "
                         f"expected {(V, D)}")
    enc.embeddings[0].weight = src_emb
    dec.embeddings.weight = tgt_emb
    dec.projection.weight = out                     # logits = y E^T, no bias
    if pos == "learned":
        enc.position_encodings.encodings = P("enc.pos")
        dec.position_encodings.encodings = P("dec.pos")
    else:
        table = sinusoid(L, D)
        enc.position_encodings.encodings = table
        dec.position_encodings.encodings = table.copy()

    for l in range(N):
        e, p = enc.layer[l], f"enc.{l}"
        norm(e.self_attention.layer_norm, p + ".ln1")
        linear(e.self_attention.linear[0], p + ".self.wqkv", p + ".self.bqkv")
        linear(e.self_attention.linear[1], p + ".self.wo", p + ".self.bo")
        ffn(e.ffn, p + ".ffn", p + ".ln2")
    for l in range(N):
        d, p = dec.layer[l], f"dec.{l}"
        norm(d.self_attention.layer_norm, p + ".ln1")
        linear(d.self_attention.linear[0], p + ".self.wqkv", p + ".self.bqkv")
        linear(d.self_attention.linear[1], p + ".self.wo", p + ".self.bo")
        norm(d.attention.layer_norm, p + ".ln2")
        linear(d.attention.linear[0], p + ".cross.wq", p + ".cross.bq")
        linear(d.attention.linear[1], p + ".cross.wkv", p + ".cross.bkv")
        linear(d.attention.linear[2], p + ".cross.wo", p + ".cross.bo")
        ffn(d.ffn, p + ".ffn", p + ".ln3")
    if pre:
        norm(enc.layer_norm, "enc.ln")
        norm(dec.layer_norm, "dec.ln")

    spec = transformer_spec.TransformerSpec(enc, dec)
    spec.config.layer_norm_epsilon = eps
    spec.config.unk_token = SPECIALS[1]
    spec.config.bos_token = SPECIALS[2]
    spec.config.eos_token = SPECIALS[3]
    spec.config.decoder_start_token = SPECIALS[2]
    spec.config.add_source_bos = False
    spec.config.add_source_eos = False
    vocab = vocabulary(V)
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.validate()
    spec.optimize(quantization=None)
    tmp = outdir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    spec.save(tmp)
    shutil.rmtree(outdir, ignore_errors=True)
    os.rename(tmp, outdir)
    sys.stderr.write(f"ct2_convert: {ckpt} -> {outdir}: {N}+{N} layers, d_model {D}, "
                     f"{H} heads, vocab {V}, {'pre' if pre else 'post'}-norm, {pos} "
                     f"positions ({L}), tie {tie}, ctranslate2 {ctranslate2.__version__}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
