#!/usr/bin/env bats
# tfm-cat and the stream reader's handling of good and crafted bad streams.

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    FIX="$TFM_ROOT/tests/fixtures"
}

@test "tfm-cat prints header and records of a stream written by the independent Python writer" {
    run tfm-cat "$FIX/good.tfm"
    assert_success
    assert_line --index 1 "meta kind=tokens"
    assert_line --index 2 "meta producer=make_bad.py"
    assert_line --index 3 "record 1 tokens.offsets i64 [3] 24 bytes at 161"
    assert_line --index 4 "record 2 tokens.ids i32 [5] 20 bytes at 280"
    assert_line --index 5 "end 4 records"
}

@test "tfm-cat --values prints every element" {
    run tfm-cat --values "$FIX/good.tfm"
    assert_success
    assert_line --index 4 $'\t0 2 5'
    assert_line --index 6 $'\t5 6 7 8 9'
}

@test "tfm-cat --header prints the header only" {
    run tfm-cat --header "$FIX/good.tfm"
    assert_success
    assert_equal "${#lines[@]}" 3
}

@test "tfm-cat --header still checks the whole stream: a damaged one exits 1, as without it" {
    T="$BATS_TEST_TMPDIR"
    while IFS=$'\t' read -r file expect; do
        [[ $file == \#* ]] && continue
        run tfm-cat --header "$FIX/bad/$file"
        [ "$status" -eq 1 ] || { echo "$file: exit $status, expected 1"; return 1; }
        [[ $output == *"tfm-cat: $FIX/bad/$file: $expect"* ]] ||
            { echo "$file: got: $output"; echo "expected: $expect"; return 1; }
        run bash -c "cat '$FIX/bad/$file' | tfm-cat -H"
        [ "$status" -eq 1 ] || { echo "$file via pipe: exit $status"; return 1; }
    done < "$FIX/bad/EXPECTED"
    # a real stream cut inside its records: the header is printed, then the error
    seq 1 3000 | awk '{ print "the cat sat on mat number " $1 }' > "$T/text"
    tfm-tokenize train -q -m "$T/spm.model" --vocab 200 "$T/text"
    tfm-tokenize encode -q -m "$T/spm.model" -o "$T/full.tfm" "$T/text"
    cut=$(tfm-cat "$T/full.tfm" | awk '$3 == "tokens.ids" { print $NF + int($6 / 2); exit }')
    head -c "$cut" "$T/full.tfm" > "$T/cut.tfm"
    run tfm-cat -H "$T/cut.tfm"
    assert_failure 1
    assert_line --index 1 "meta kind=tokens"
    assert_line --regexp "^tfm-cat: $T/cut.tfm: record [0-9]+ 'tokens.ids': at byte [0-9]+: truncated payload"
    refute_line --regexp "^(record|end) "
    # junk after the end of a whole stream
    { cat "$FIX/good.tfm"; echo junk; } > "$T/junk.tfm"
    run tfm-cat -H "$T/junk.tfm"
    assert_failure 1
    assert_line "tfm-cat: $T/junk.tfm: at byte 520: input after the end record is not a tfm stream (bad magic)"
    # a sound concatenation: the first stream's header only, exit 0
    cat "$FIX/good.tfm" "$FIX/good.tfm" > "$T/two.tfm"
    run tfm-cat -H "$T/two.tfm"
    assert_success
    assert_equal "${#lines[@]}" 3
}

@test "tfm-cat reads stdin, from a pipe and from a redirect" {
    run bash -c "cat '$FIX/good.tfm' | tfm-cat --values"
    assert_success
    assert_line $'\t5 6 7 8 9'
    assert_line --index 0 "stream <stdin> version 1"
    run bash -c "tfm-cat - < '$FIX/good.tfm'"
    assert_success
    assert_line "end 4 records"
}

@test "tfm-cat goes on after a bad file and exits 1" {
    run tfm-cat "$FIX/bad/crc.tfm" "$FIX/good.tfm"
    assert_failure 1
    assert_line "end 4 records"
    assert_line --partial "tfm-cat: $FIX/bad/crc.tfm: record 2 'tokens.ids'"
}

@test "every crafted bad stream is rejected with exit 1 naming file, record and byte" {
    n=0
    while IFS=$'\t' read -r file expect; do
        [[ $file == \#* ]] && continue
        n=$((n + 1))
        run tfm-cat "$FIX/bad/$file"
        [ "$status" -eq 1 ] || { echo "$file: exit $status, expected 1"; return 1; }
        [[ $output == *"tfm-cat: $FIX/bad/$file: $expect"* ]] ||
            { echo "$file: got: $output"; echo "expected: $expect"; return 1; }
        # and the same through a pipe (no mmap, no seeking)
        run bash -c "cat '$FIX/bad/$file' | tfm-cat"
        [ "$status" -eq 1 ] || { echo "$file via pipe: exit $status"; return 1; }
        [[ $output == *"tfm-cat: <stdin>: ${expect}"* ]] ||
            { echo "$file via pipe: got: $output"; echo "expected: $expect"; return 1; }
    done < "$FIX/bad/EXPECTED"
    [ "$n" -ge 20 ]
}

@test "a vocabulary record larger than any model read is refused before it is inflated" {
    # tfm.spm u8 [2^30 + 64] of zeros deflated to about 1 MiB: refused from its record
    # header, in little memory, where it was inflated and copied (2 GiB) first
    python3 -c '
import struct, sys, zlib
sys.path.insert(0, sys.argv[1] + "/tests/fixtures")
import make_bad as mb
n = (1 << 30) + 64
s = mb.Stream(); s.header()
c = zlib.compressobj(9); z = b""; crc = 0; block = bytes(1 << 24); left = n
while left:
    k = min(left, len(block)); z += c.compress(block[:k]); crc = zlib.crc32(block[:k], crc); left -= k
z += c.flush()
name = b"tfm.spm"
head = b"TREC" + struct.pack("<BBBBHHIQ", 1, 1, 1, 0, len(name), 0, crc, len(z))
var = struct.pack("<Q", n) + name
s.b += head + struct.pack("<II", zlib.crc32(head + var), 0) + var
s.b += bytes((64 - len(s.b) % 64) % 64) + z
open(sys.argv[2], "wb").write(s.b)
' "$TFM_ROOT" "$BATS_TEST_TMPDIR/spm.tfm"
    # the message alone under a sanitizer, whose shadow memory needs more address space
    local limit="ulimit -v 400000;"
    [ -z "${TFM_SANITIZE:-}" ] || limit=
    run bash -c "$limit tfm-cat '$BATS_TEST_TMPDIR/spm.tfm'"
    assert_failure 1
    assert_output "tfm-cat: $BATS_TEST_TMPDIR/spm.tfm: record 1 'tfm.spm': at byte 161: vocabulary of 1073741888 bytes, more than a SentencePiece model is read (1073741824)"
}

@test "tfm-cat: missing file" {
    run tfm-cat "$BATS_TEST_TMPDIR/nope.tfm"
    assert_failure 1
    assert_output "tfm-cat: $BATS_TEST_TMPDIR/nope.tfm: No such file or directory"
}

@test "tfm-cat: --help, --version, bad option" {
    run tfm-cat --help
    assert_success
    assert_line --index 0 --partial "usage: tfm-cat"
    run tfm-cat --version
    assert_success
    assert_output "tfm-cat $(cat "$TFM_ROOT/VERSION")"
    run tfm-cat --bogus
    assert_failure 2
}

@test "tfm-cat: a write error on stdout is an error" {
    run bash -c "tfm-cat --values '$FIX/good.tfm' > /dev/full"
    assert_failure 1
    assert_output --partial "write error"
}

@test "outputs to a device or FIFO are written in place, never renamed over it" {
    mkfifo "$BATS_TEST_TMPDIR/fifo"
    tfm-cat < "$BATS_TEST_TMPDIR/fifo" > "$BATS_TEST_TMPDIR/got" &
    run tfm-batch -q -o "$BATS_TEST_TMPDIR/fifo" "$TFM_ROOT/tests/fixtures/good.tfm"
    assert_success
    wait
    [ -p "$BATS_TEST_TMPDIR/fifo" ]
    run cat "$BATS_TEST_TMPDIR/got"
    assert_line "meta kind=batches"
    run tfm-batch -q -o /dev/null "$TFM_ROOT/tests/fixtures/good.tfm"
    assert_success
    [ -c /dev/null ]
    run ls -a "$BATS_TEST_TMPDIR"
    refute_output --partial ".tmp."
}

@test "tfm-cat: concatenated streams are shown one after another, from a file or a pipe" {
    T="$BATS_TEST_TMPDIR"
    cat "$FIX/good.tfm" "$FIX/good.tfm" > "$T/two.tfm"
    run tfm-cat "$T/two.tfm"
    assert_success
    assert_equal "${#lines[@]}" 12
    assert_line --index 5 "end 4 records"
    assert_line --index 6 "stream $T/two.tfm version 1 at byte 520"
    assert_line --index 7 "meta kind=tokens"
    assert_line --index 9 "record 1 tokens.offsets i64 [3] 24 bytes at 681"
    assert_line --index 10 "record 2 tokens.ids i32 [5] 20 bytes at 800"
    assert_line --index 11 "end 4 records"
    run bash -c "cat '$FIX/good.tfm' '$FIX/good.tfm' '$FIX/good.tfm' | tfm-cat --values"
    assert_success
    assert_line --index 0 "stream <stdin> version 1"
    assert_line "stream <stdin> version 1 at byte 1040"
    assert_equal "$(echo "$output" | grep -c $'^\t5 6 7 8 9$')" 3
}

@test "tfm-cat: anything after an end record but another stream of its kind is an error" {
    T="$BATS_TEST_TMPDIR"
    { cat "$FIX/good.tfm"; echo junk; } > "$T/junk.tfm"
    run tfm-cat "$T/junk.tfm"
    assert_failure 1
    assert_line "tfm-cat: $T/junk.tfm: at byte 520: input after the end record is not a tfm stream (bad magic)"
    run bash -c "cat '$T/junk.tfm' | tfm-cat"
    assert_failure 1
    assert_line "tfm-cat: <stdin>: at byte 520: input after the end record is not a tfm stream (bad magic)"
    # a stream cut short after a whole one
    { cat "$FIX/good.tfm"; head -c 200 "$FIX/good.tfm"; } > "$T/cut.tfm"
    run tfm-cat "$T/cut.tfm"
    assert_failure 1
    assert_line --partial "tfm-cat: $T/cut.tfm: stream 2, record 1: at byte 681: truncated"
    # a batch stream after a token stream
    tfm-batch -q -o "$T/b.tfm" "$FIX/good.tfm"
    cat "$FIX/good.tfm" "$T/b.tfm" > "$T/mixed.tfm"
    run tfm-cat "$T/mixed.tfm"
    assert_failure 1
    assert_line "tfm-cat: $T/mixed.tfm: stream 2: at byte 520: a 'batches' stream after a 'tokens' stream: a concatenation must be of one kind"
}

@test "tfm-cat: a write error in the middle of the output is reported once" {
    T="$BATS_TEST_TMPDIR"
    seq 1 3000 | awk '{ print "the cat sat on mat number " $1 }' > "$T/text"
    tfm-tokenize train -q -m "$T/m.model" --vocab 60 -O hard_vocab_limit=false "$T/text"
    tfm-tokenize encode -m "$T/m.model" -o "$T/big.tfm" "$T/text"
    run bash -c "tfm-cat --values '$T/big.tfm' > /dev/full"
    assert_failure 1
    assert_output "tfm-cat: write error: No space left on device"
}

@test "tfm-cat --values: every dtype, its extremes, infinities, NaNs, subnormals, rank 0 and empty records" {
    T="$BATS_TEST_TMPDIR"
    python3 - "$FIX" "$T/all.tfm" <<'EOF2'
import struct, sys
sys.path.insert(0, sys.argv[1])
import make_bad as mb
s = mb.Stream(); s.header("kind=tokens\n")
s.record("u8", "u8", [3], bytes([0, 1, 255]))
s.record("u16", "u16", [2], struct.pack("<2H", 0, 65535))
s.record("i32", "i32", [2], struct.pack("<2i", -2**31, 2**31 - 1))
s.record("i64", "i64", [2], struct.pack("<2q", -2**63, 2**63 - 1))
# 0, -0, 1, inf, -inf, nan, -nan, smallest and largest subnormal, largest, smallest normal
s.record("f16", "f16", [11], struct.pack("<11H", 0x0000, 0x8000, 0x3c00, 0x7c00, 0xfc00,
                                         0x7e00, 0xfe00, 0x0001, 0x03ff, 0x7bff, 0x0400))
s.record("bf16", "bf16", [11], struct.pack("<11H", 0x0000, 0x8000, 0x3f80, 0x7f80, 0xff80,
                                           0x7fc0, 0xffc0, 0x0001, 0x007f, 0x7f7f, 0x0080))
s.record("f32", "f32", [8], struct.pack("<7fI", 0.0, -0.0, 0.1, float("inf"), float("-inf"),
                                        float("nan"), 1e-45, 0xffc00000))
s.record("scalar", "i32", [], struct.pack("<i", -7))
s.record("empty", "f32", [3, 0, 2], b"")
s.record("deflated", "i32", [2, 100], struct.pack("<200i", *range(200)), codec=1)
s.end()
open(sys.argv[2], "wb").write(s.b)
EOF2
    run tfm-cat --values "$T/all.tfm"
    assert_success
    assert_line --index 3 $'\t0 1 255'
    assert_line --index 5 $'\t0 65535'
    assert_line --index 7 $'\t-2147483648 2147483647'
    assert_line --index 9 $'\t-9223372036854775808 9223372036854775807'
    assert_line --index 11 $'\t0 -0 1 inf -inf nan -nan 5.96046448e-08 6.09755516e-05 65504 6.10351562e-05'
    assert_line --index 13 $'\t0 -0 1 inf -inf nan -nan 9.18354962e-41 1.1663108e-38 3.38953139e+38 1.17549435e-38'
    assert_line --index 15 $'\t0 -0 0.100000001 inf -inf nan 1.40129846e-45 -nan'
    assert_line --index 16 "record 8 scalar i32 [] 4 bytes at 736"
    assert_line --index 17 $'\t-7'
    assert_line --index 18 "record 9 empty f32 [3,0,2] 0 bytes at 836"
    assert_line --index 19 --regexp "^record 10 deflated i32 \[2,100\] 800 bytes at [0-9]+$"
    assert_line --index 20 $'\t'"$(seq -s ' ' 0 99)"
    assert_line --index 21 $'\t'"$(seq -s ' ' 100 199)"
    assert_line --index 22 "end 12 records"
    assert_equal "${#lines[@]}" 23
}

@test "a deflated payload longer than its data (a writer that flushes as it goes) is read" {
    # zlib with a sync flush after every KiB of data that does not compress: a valid zlib
    # stream, 1% longer than the data, which was refused as 'impossible'
    T="$BATS_TEST_TMPDIR"
    python3 - "$FIX" "$T/flushed.tfm" <<'EOF2'
import random, sys, zlib
sys.path.insert(0, sys.argv[1])
import make_bad as mb
rng = random.Random(1)
data = bytes(rng.getrandbits(8) for _ in range(1 << 18))
c = zlib.compressobj(6)
z = b"".join(c.compress(data[i:i + 1024]) + c.flush(zlib.Z_SYNC_FLUSH)
             for i in range(0, len(data), 1024)) + c.flush()
assert len(z) > len(data) * 1.005 and zlib.decompress(z) == data
s = mb.Stream(); s.header("kind=tokens\n")
s.record("x", "u8", [len(data)], data, codec=1, stored=len(z))
s.b = s.b[:s.payload_at] + z
s.end()
open(sys.argv[2], "wb").write(s.b)
EOF2
    run tfm-cat "$T/flushed.tfm"
    assert_success
    assert_line "record 1 x u8 [262144] 262144 bytes at 140"
    run bash -c "cat '$T/flushed.tfm' | tfm-cat -H"
    assert_success
}

@test "standard input from a file is consumed as from a pipe: a second - reads what is left" {
    run bash -c "tfm-cat - - < '$FIX/good.tfm'"
    assert_failure 1
    assert_equal "$(printf '%s\n' "$output" | grep -c '^stream ')" 1
    assert_line "tfm-cat: <stdin>: empty input (not a tfm stream)"
    run bash -c "cat '$FIX/good.tfm' | tfm-cat - -"
    assert_failure 1
    assert_line "tfm-cat: <stdin>: empty input (not a tfm stream)"
    # the next command of a group finds the input read
    run bash -c "{ tfm-cat -H > /dev/null; wc -c; } < '$FIX/good.tfm'"
    assert_success
    assert_output 0
}

@test "a deflated record of no elements (the zlib data of nothing) is read, from a file and a pipe" {
    T="$BATS_TEST_TMPDIR"
    python3 - "$FIX" "$T/empty.tfm" <<'EOF2'
import sys
sys.path.insert(0, sys.argv[1])
import make_bad as mb
s = mb.Stream(); s.header("kind=tokens\n")
s.record("none", "f32", [0, 4], b"", codec=1)
s.end()
open(sys.argv[2], "wb").write(s.b)
EOF2
    run tfm-cat --values "$T/empty.tfm"
    assert_success
    assert_line --regexp "^record 1 none f32 \[0,4\] 0 bytes at [0-9]+$"
    run bash -c "cat '$T/empty.tfm' | tfm-cat"
    assert_success
}

@test "tfm-cat: an input truncated while it is read ends it with a message and SIGBUS, 135" {
    [ -z "${TFM_SANITIZE:-}" ] || skip "the sanitizers take SIGBUS for themselves"
    ulimit -c 0                     # SIGBUS would dump core
    T="$BATS_TEST_TMPDIR"
    for i in $(seq 2000); do cat "$FIX/good.tfm"; done > "$T/many.tfm"     # 2000 streams
    mkfifo "$T/out"
    tfm-cat --values "$T/many.tfm" > "$T/out" 2> "$T/err" 3>&- &
    local pid=$! rc=0
    # its output (400 kB) cannot all fit in the pipe: it is still reading the input (a
    # regular file, mapped) when the file is cut, and reads past the cut once drained
    exec 4< "$T/out"
    head -c 100 <&4 > /dev/null
    truncate -s 4096 "$T/many.tfm"
    cat <&4 > /dev/null
    exec 4<&-
    wait $pid || rc=$?
    [ "$rc" -eq 135 ]
    run cat "$T/err"
    assert_output "tfm-cat: $T/many.tfm: bus error: the file was truncated while it was mapped into memory; replace a file in use by renaming a new one over it, as tfm-train and tfm-avg do"
}
