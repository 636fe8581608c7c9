"""tfmstream.py: a minimal reader of the tfm tensor stream (man/tfm.5), independent of
the C code, for the reference checks.  Needs only struct, zlib and numpy."""
import struct
import zlib

import numpy as np

MAGIC = b"\x89TFM\r\n\x1a\n"
DTYPES = {1: np.uint8, 2: np.uint16, 3: np.int32, 4: np.int64, 5: np.float16, 7: np.float32}


def read(path):
    """Return (header dict, {name: numpy array}) for every record but tfm.header/tfm.end."""
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:8] != MAGIC:
        raise ValueError(f"{path}: bad magic")
    version, flags = struct.unpack_from("<II", buf, 8)
    if version != 1 or flags != 0:
        raise ValueError(f"{path}: version {version} flags {flags}")
    pos, header, records, count = 16, {}, {}, 0
    while True:
        if buf[pos:pos + 4] != b"TREC":
            raise ValueError(f"{path}: record {count}: bad record magic at byte {pos}")
        dtype, rank, codec, _, nlen, _, crc, size, hcrc, _ = struct.unpack_from(
            "<BBBBHHIQII", buf, pos + 4)
        dims = struct.unpack_from(f"<{rank}Q", buf, pos + 32)
        npos = pos + 32 + 8 * rank
        name = buf[npos:npos + nlen].decode("ascii")
        if zlib.crc32(buf[pos:pos + 24] + buf[pos + 32:npos + nlen]) != hcrc:
            raise ValueError(f"{path}: record {count} '{name}': header crc mismatch")
        start = npos + nlen
        start += (-start) % 64
        payload = buf[start:start + size]
        if codec == 1:
            payload = zlib.decompress(payload)
        if zlib.crc32(payload) != crc:
            raise ValueError(f"{path}: record {count} '{name}': crc mismatch")
        pos = start + size
        arr = np.frombuffer(payload, dtype=DTYPES[dtype]).reshape(dims)
        if name == "tfm.header":
            for line in payload.decode().splitlines():
                k, _, v = line.partition("=")
                header[k] = v
        elif name == "tfm.end":
            if int(arr[0]) != count:
                raise ValueError(f"{path}: tfm.end count {int(arr[0])} != {count}")
            return header, records
        else:
            records[name] = arr
        count += 1
