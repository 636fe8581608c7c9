"""ct2_translate.py: translate a tfm token stream with a CTranslate2 model made by
ct2_convert.py, time it, and compare the output with tfm-decode's.  A test tool for
bench_ct2.sh, not part of tfm.

usage: python ct2_translate.py [options] CT2_MODEL_DIR SOURCES.tfm

Prints one line on stdout:
  seconds=S cpu=C sentences=N tokens=T maxlen_hits=M [agree=A1,A2...]
seconds: from just before ctranslate2.Translator(...) to just after translate_batch
returns (model load + translation; the Python and ctranslate2 imports and the reading of
the input are outside); cpu: the processor time of every thread of the process over the
same span (user + system: what other load on the machine changes least); tokens: output tokens without eos; maxlen_hits: outputs that
reached the length limit instead of ending with eos; agree: for each --ref (a tfm-decode
output stream), how many outputs are identical, token for token, to the first hypothesis
of their sentence there.

Sources are the ids of a tfm token stream (tests/ref/tfmstream.py reads it), each made
eos-terminated and cut to --max-len tokens as tfm-decode does, then given as the token
strings of ct2_convert.py's vocabulary.
"""
import argparse
import os
import sys
import time

sys.dont_write_bytecode = True     # no __pycache__ in the tree

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
sys.path.insert(0, HERE)
import tfmstream  # noqa: E402
from ct2_convert import vocabulary  # noqa: E402

EOS = 3


def sentences(path, what):
    """The sentences of a tokens or hypotheses stream (one chunk: read() keeps the last
    record of each name), and the hyp.index when there is one."""
    _, rec = tfmstream.read(path)
    off, ids = rec.get("tokens.offsets"), rec.get("tokens.ids")
    if off is None or ids is None:
        raise SystemExit(f"ct2_translate: {path}: no tokens.offsets/tokens.ids ({what})")
    if int(off[-1]) != len(ids):
        raise SystemExit(f"ct2_translate: {path}: more than one chunk, not supported")
    sents = [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]
    return sents, rec.get("hyp.index")


def main():
    ap = argparse.ArgumentParser(prog="ct2_translate.py")
    ap.add_argument("model")
    ap.add_argument("source")
    ap.add_argument("--threads", type=int, default=2, help="intra_threads (inter_threads 1)")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--length-penalty", type=float, default=0.6,
                    help="CTranslate2's: score / |Y|^lp, |Y| without eos")
    ap.add_argument("--max-len", type=int, default=128,
                    help="the model's max_len: sources cut to it, outputs at most that "
                    "many decoder steps (max_decoding_length)")
    ap.add_argument("--max-decoding-length", type=int, default=0,
                    help="override max_decoding_length (default --max-len)")
    ap.add_argument("--max-batch-size", type=int, default=0)
    ap.add_argument("--batch-type", default="examples", choices=["examples", "tokens"])
    ap.add_argument("--ref", action="append", default=[],
                    help="tfm-decode output stream to compare with (repeatable)")
    ap.add_argument("--out", help="write the output ids here, one sentence a line")
    a = ap.parse_args()

    import ctranslate2

    src, _ = sentences(a.source, "source")
    batch = []
    for s in src:
        if s and s[-1] == EOS:
            s = s[:-1]
        s = s[:a.max_len - 1] + [EOS]
        batch.append(s)
    vmax = max(max(s) for s in batch) + 1 if batch else 4
    # token strings of the ids (the vocabulary is synthetic: only the used ids matter)
    tok = vocabulary(max(vmax, 4))
    batch = [[tok[i] for i in s] for s in batch]
    maxdec = a.max_decoding_length or a.max_len

    t0 = time.perf_counter()
    c0 = time.process_time()
    tr = ctranslate2.Translator(a.model, device="cpu", compute_type="float32",
                                inter_threads=1, intra_threads=a.threads)
    res = tr.translate_batch(batch, max_batch_size=a.max_batch_size,
                             batch_type=a.batch_type, beam_size=a.beam,
                             length_penalty=a.length_penalty, max_input_length=a.max_len,
                             max_decoding_length=maxdec, min_decoding_length=1)
    t1 = time.perf_counter()
    c1 = time.process_time()

    out = []
    for r in res:
        h = r.hypotheses[0]
        out.append([EOS if t == "</s>" else 0 if t == "<pad>" else 1 if t == "<unk>"
                    else 2 if t == "<s>" else int(t[1:]) for t in h])
    tokens = sum(len(h) for h in out)
    hits = sum(1 for h in out if len(h) >= maxdec)
    line = (f"seconds={t1 - t0:.4f} cpu={c1 - c0:.4f} sentences={len(out)} tokens={tokens} "
            f"maxlen_hits={hits}")
    agrees = []
    for path in a.ref:
        ref, index = sentences(path, "reference")
        first = {}
        for k, i in enumerate(index if index is not None else range(len(ref))):
            first.setdefault(int(i), ref[k])
        if sorted(first) != list(range(len(out))):
            raise SystemExit(f"ct2_translate: {path}: {len(first)} sentences, "
                             f"{len(out)} translated")
        agrees.append(sum(1 for i, h in enumerate(out) if first[i] == h))
    if agrees:
        line += " agree=" + ",".join(str(x) for x in agrees)
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            for h in out:
                f.write(" ".join(map(str, h)) + "\n")
        os.replace(a.out + ".tmp", a.out)
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
