#!/usr/bin/env python3
"""edit-checkpoint.py: copy a tfm stream (man/tfm.5), changing records on the way, to make
the damaged checkpoints the Bats tests feed to tfm-decode, tfm-train --resume and tfm-avg.
A writer of its own (struct and zlib only), so a test does not trust the C writer to make
the file the C reader must refuse; every CRC and the end count are made right, so only
the change made is wrong.

usage: edit-checkpoint.py IN OUT [EDIT...]
  --config KEY=VALUE    the line "KEY = ..." of record "config" becomes "KEY = VALUE"
  --header KEY=VALUE    the header's line "KEY=..." becomes "KEY=VALUE" (added when absent);
                        any stream's header, not only a checkpoint's; "--header KEY" drops it
  --poison NAME VALUE   element 0 of f32 record NAME becomes VALUE (nan, inf, -1, ...)
  --drop NAME           record NAME is left out
  --copy NAME NEW       a copy of record NAME named NEW is added after the last record
  --reshape NAME DIMS   record NAME gets dimensions DIMS ("64x32": the same element count)
  --state I=V           element I of the i64 record "state" becomes V (layout: checkpoint.h)
  --spm FILE            the embedded SentencePiece model (record tfm.spm) becomes FILE's
                        bytes, the header's spm.size and spm.crc32 with it
"""
import struct
import sys
import zlib

MAGIC = b"\x89TFM\r\n\x1a\n"
ALIGN = 64
F32 = 7


def read(path):
    """[(name, dtype, dims, payload)] of every record but tfm.end."""
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != MAGIC or struct.unpack_from("<II", buf, 8) != (1, 0):
        sys.exit(f"edit-checkpoint: {path}: not a tfm stream of version 1")
    pos, records = 16, []
    while True:
        if buf[pos:pos + 4] != b"TREC":
            sys.exit(f"edit-checkpoint: {path}: no record at byte {pos}")
        dtype, rank, codec, _, nlen, _, crc, size, _, _ = struct.unpack_from(
            "<BBBBHHIQII", buf, pos + 4)
        dims = list(struct.unpack_from(f"<{rank}Q", buf, pos + 32))
        npos = pos + 32 + 8 * rank
        name = buf[npos:npos + nlen].decode("ascii")
        start = npos + nlen
        start += (-start) % ALIGN
        payload = buf[start:start + size]
        if codec == 1:
            payload = zlib.decompress(payload)
        if zlib.crc32(payload) != crc:
            sys.exit(f"edit-checkpoint: {path}: record '{name}': crc mismatch")
        pos = start + size
        if name == "tfm.end":
            return records
        records.append([name, dtype, dims, payload])


def write(path, records):
    out = bytearray(MAGIC + struct.pack("<II", 1, 0))

    def put(name, dtype, dims, payload):
        nm = name.encode("ascii")
        head = b"TREC" + struct.pack("<BBBBHHIQ", dtype, len(dims), 0, 0, len(nm), 0,
                                     zlib.crc32(payload), len(payload))
        var = b"".join(struct.pack("<Q", d) for d in dims) + nm
        out.extend(head + struct.pack("<II", zlib.crc32(head + var), 0) + var)
        out.extend(b"\0" * ((-len(out)) % ALIGN))
        out.extend(payload)

    for r in records:
        put(*r)
    put("tfm.end", 4, [1], struct.pack("<q", len(records)))
    with open(path, "wb") as f:
        f.write(out)


def find(records, name):
    for r in records:
        if r[0] == name:
            return r
    sys.exit(f"edit-checkpoint: no record '{name}'")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__.split("\n\n")[1])
    src, dst, args = argv[0], argv[1], argv[2:]
    records = read(src)
    while args:
        op = args.pop(0)
        if op == "--config":
            key, _, value = args.pop(0).partition("=")
            r = find(records, "config")
            lines = r[3].decode().splitlines()
            lines = [f"{key} = {value}" if l.split("=")[0].strip() == key else l for l in lines]
            r[3] = ("\n".join(lines) + "\n").encode()
            r[2] = [len(r[3])]
        elif op == "--header":
            key, eq, value = args.pop(0).partition("=")
            r = find(records, "tfm.header")
            lines = [l for l in r[3].decode().splitlines() if l.partition("=")[0] != key]
            lines += [f"{key}={value}"] if eq else []
            r[3] = ("\n".join(lines) + "\n").encode()
            r[2] = [len(r[3])]
        elif op == "--poison":
            r, value = find(records, args.pop(0)), float(args.pop(0))
            if r[1] != F32:
                sys.exit(f"edit-checkpoint: '{r[0]}' is not f32")
            r[3] = struct.pack("<f", value) + r[3][4:]
        elif op == "--drop":
            r = find(records, args.pop(0))
            records.remove(r)
        elif op == "--copy":
            r, new = find(records, args.pop(0)), args.pop(0)
            records.append([new, r[1], list(r[2]), r[3]])
        elif op == "--reshape":
            r, dims = find(records, args.pop(0)), [int(d) for d in args.pop(0).split("x")]
            old = 1
            for d in r[2]:
                old *= d
            new = 1
            for d in dims:
                new *= d
            if old != new:
                sys.exit(f"edit-checkpoint: {r[0]}: {old} elements, {'x'.join(map(str, dims))} "
                         f"holds {new}")
            r[2] = dims
        elif op == "--state":
            i, _, value = args.pop(0).partition("=")
            r, i = find(records, "state"), int(i)
            if not 0 <= i < len(r[3]) // 8:
                sys.exit(f"edit-checkpoint: state has no element {i}")
            r[3] = r[3][:8 * i] + struct.pack("<q", int(value)) + r[3][8 * i + 8:]
        elif op == "--spm":
            with open(args.pop(0), "rb") as f:
                spm = f.read()
            r = find(records, "tfm.spm")
            r[2], r[3] = [len(spm)], spm
            r = find(records, "tfm.header")
            meta = {"spm.size": str(len(spm)), "spm.crc32": f"{zlib.crc32(spm):08x}"}
            lines = [f"{l.partition('=')[0]}={meta[l.partition('=')[0]]}"
                     if l.partition("=")[0] in meta else l for l in r[3].decode().splitlines()]
            r[3] = ("\n".join(lines) + "\n").encode()
            r[2] = [len(r[3])]
        else:
            sys.exit(f"edit-checkpoint: unknown edit '{op}'")
    write(dst, records)


if __name__ == "__main__":
    main(sys.argv[1:])
