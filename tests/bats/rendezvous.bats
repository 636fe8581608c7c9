#!/usr/bin/env bats
# The rendezvous of tfm-train's processes against a stranger on 127.0.0.1 (tests/bats/stranger):
# where the processes listen, the run's secret proven in every hello (a hello without it,
# a replayed one, a wrong TFM_RUN_TOKEN), the rendezvous file (mode 0600, a secret, no
# planted symbolic link followed, a planted file ignored), the time limits on joining and
# on the sums, and SIGTERM while a process waits.  Every run is 2 or 3 processes of a
# 1-layer model for 2 or 3 updates, compared bit for bit with one process of as many ranks.

setup_file() {
    M="$BATS_FILE_TMPDIR"
    D="$TFM_ROOT/data/multi30k-ende"
    zcat "$D/train.en.gz" | head -n 1000 > "$M/en.txt"
    zcat "$D/train.de.gz" | head -n 1000 > "$M/de.txt"
    tfm-tokenize train -q -m "$M/spm.model" --vocab 500 "$M/en.txt" "$M/de.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/en.tfm" "$M/en.txt"
    tfm-tokenize encode -q -m "$M/spm.model" --eos -o "$M/de.tfm" "$M/de.txt"
    tfm-batch -q --tokens 1024 "$M/en.tfm" "$M/de.tfm" > "$M/b.tfm"
    args
    # what W processes of one rank must end with: one process of W ranks
    tfm-train "${ARGS[@]}" -q --ranks 2 -o "$M/r2" "$M/b.tfm"
    tfm-train "${ARGS[@]}" -q --ranks 3 -o "$M/r3" "$M/b.tfm"
}

args() {
    ARGS=(-c "$TFM_ROOT/configs/tiny.conf" --set layers=1 --set d_model=32 --set d_ff=64
          --set heads=2 -j 1 --max-steps 3 --save-every 0)
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    load checkpoints
    M="$BATS_FILE_TMPDIR"
    T="$BATS_TEST_TMPDIR"
    S="$TFM_ROOT/tests/bats/stranger"
    args
    PORT=$("$S" port)
    export TFM_MASTER_ADDR=127.0.0.1 TFM_MASTER_PORT=$PORT
    export TFM_RUN_TOKEN=9f1c33e0b2a74d5e8c6a01f4b7d2e915
    export TFM_RENDEZVOUS_TIMEOUT=30
    unset TFM_RENDEZVOUS TFM_JOIN_TIMEOUT TFM_COLLECTIVE_TIMEOUT
    PIDS=()
}

teardown() {
    local p
    for p in "${PIDS[@]}"; do
        kill -CONT "$p" 2> /dev/null || true
        kill -KILL "$p" 2> /dev/null || true
        wait "$p" 2> /dev/null || true
    done
}

# start R W ARGS...: tfm-train as process R of W in the background, its standard error in
# $T/eR, its pid in $PR (and in PIDS, for teardown).
start() {
    local r=$1 w=$2
    shift 2
    TFM_RANK=$r TFM_WORLD_SIZE=$w tfm-train "$@" 2> "$T/e$r" &
    eval "P$r=$!"
    PIDS+=($!)
}

alive() {
    local s
    s=$(ps -o stat= -p "$1" 2> /dev/null) && [[ $s != Z* ]]
}

# ends PID SECS: wait at most SECS seconds for PID to exit; its status (124 and the
# process killed when it did not).
ends() {
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        alive "$1" || break
        sleep 0.1
    done
    if alive "$1"; then
        echo "# process $1 still running after $2 s" >&3
        kill -CONT "$1" 2> /dev/null
        kill -KILL "$1"
        wait "$1" 2> /dev/null
        return 124
    fi
    wait "$1"
}

# appears FILE REGEX SECS: wait at most SECS seconds for a line of FILE to match REGEX.
appears() {
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        grep -Eq "$2" "$1" 2> /dev/null && return 0
        sleep 0.1
    done
    echo "# no line matching '$2' in $1 after $3 s:" >&3
    sed 's/^/#   /' "$1" >&3 2> /dev/null
    return 1
}

# all of processes 0..W-1 end with status 0 within 60 s, and their checkpoint is that of
# one process of W ranks
run_ok() {
    local w=$1 r
    for ((r = 0; r < w; r++)); do
        local p="P$r" rc=0
        ends "${!p}" 60 || rc=$?
        if [ "$rc" != 0 ]; then
            echo "# process $r of $w: exit $rc" >&3
            sed 's/^/#   /' "$T/e$r" >&3
            return 1
        fi
    done
    diff <(params "$T/c/step-000003.tfm") <(params "$M/r$w/step-000003.tfm")
}

@test "process 0 listens on TFM_MASTER_ADDR only; process 2 on the address it reaches process 0 from" {
    start 0 3 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    start 2 3 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    run "$S" listening "$P0" "$PORT"
    assert_success
    assert_output "127.0.0.1:$PORT"
    # process 2 listens for process 1, its predecessor in the chain, until all have joined
    run "$S" listening "$P2"
    assert_success
    assert_output --regexp '^127\.0\.0\.1:[0-9]+$'
    start 1 3 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    run_ok 3
}

@test "an empty TFM_MASTER_ADDR or TFM_MASTER_PORT is unset for every process, one of another machine is named: errors, not every interface" {
    # process 0 had listened on every interface, process 1 looked for a host named ""
    run env TFM_MASTER_ADDR= TFM_RANK=0 TFM_WORLD_SIZE=2 tfm-train "${ARGS[@]}" -o "$T/x" "$M/b.tfm"
    assert_failure 1
    assert_line "tfm-train: environment: TFM_MASTER_PORT is set but TFM_MASTER_ADDR is not (or is empty): process 0 listens at an address and a port"
    run env TFM_MASTER_ADDR= TFM_RANK=1 TFM_WORLD_SIZE=2 tfm-train "${ARGS[@]}" -o "$T/x" "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: process 1 of 2: environment: TFM_MASTER_PORT is set but TFM_MASTER_ADDR is not (or is empty): process 0 listens at an address and a port"
    run env -u TFM_MASTER_PORT TFM_RANK=1 TFM_WORLD_SIZE=2 tfm-train "${ARGS[@]}" -o "$T/x" "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: process 1 of 2: environment: TFM_MASTER_ADDR is set but TFM_MASTER_PORT is not (or is empty): process 0 listens at an address and a port"
    # with a rendezvous file an empty port is no port: process 0 listens on the address
    # and a free port, which it writes there
    # an address of another machine (TEST-NET-1): process 0 cannot listen there
    run env TFM_MASTER_ADDR=192.0.2.1 TFM_RANK=0 TFM_WORLD_SIZE=2 tfm-train "${ARGS[@]}" -q \
        -o "$T/x" "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: TFM_MASTER_ADDR=192.0.2.1 is no address of this machine, where process 0 runs: listening on 192.0.2.1:$PORT: Cannot assign requested address"
    TFM_MASTER_PORT= TFM_RENDEZVOUS="$T/rv" start 0 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    TFM_MASTER_PORT= TFM_RENDEZVOUS="$T/rv" start 1 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    run_ok 2
    [ ! -e "$T/x" ]
}

@test "a connection that says nothing is dropped after TFM_JOIN_TIMEOUT, logged, and the run goes on" {
    export TFM_JOIN_TIMEOUT=1
    start 0 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    "$S" listening "$P0" "$PORT" > /dev/null
    "$S" silent "$PORT" 60 > "$T/s" &
    PIDS+=($!)
    appears "$T/s" "^dropped after [12] s$" 10
    run grep -E "^tfm-train: dropped a connection from 127\.0\.0\.1:[0-9]+: it sent no hello within 1 s \(TFM_JOIN_TIMEOUT\)$" "$T/e0"
    assert_success
    # and one that stays silent while process 1 joins does not hold the run
    "$S" silent "$PORT" 60 > /dev/null &
    PIDS+=($!)
    start 1 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    run_ok 2
}

@test "a hello without the run's secret, claiming a rank, is dropped and logged and cannot abort the run" {
    start 0 3 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    start 2 3 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    "$S" listening "$P0" "$PORT" > /dev/null
    run "$S" listening "$P2"
    assert_success
    L2=${output##*:}
    # 16 bytes to process 0: process 2 (who has joined or is joining)
    "$S" hello "$PORT" 2 3 30 > "$T/s0" &
    PIDS+=($!)
    # and to process 2's own port, as process 1, its predecessor
    "$S" hello "$L2" 1 3 30 > "$T/s2" &
    PIDS+=($!)
    appears "$T/s0" "^dropped after 0 s$" 10
    alive "$P0"                 # dropped, not ended: process 0 waits for process 1 still
    run grep -E "^tfm-train: dropped a connection from 127\.0\.0\.1:[0-9]+: not a tfm-train hello$" "$T/e0"
    assert_success
    # the false predecessor's hello is on its way before the real one starts: on a busy
    # machine the stranger could otherwise come after the whole run, to a closed port
    appears "$T/s2" "^sent$" 10
    start 1 3 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    run_ok 3
    appears "$T/s2" "^dropped after [0-9]+ s$" 10
}

@test "a stranger cannot join in a process's place and replace the sums" {
    start 0 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    "$S" listening "$P0" "$PORT" > /dev/null
    run "$S" join "$PORT"
    assert_success
    assert_output "refused"
    start 1 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    run_ok 2
    run grep -c "^tfm-train: dropped a connection from 127\.0\.0\.1:" "$T/e0"
    assert_output 1
}

@test "a hello recorded and replayed is refused: the secret is proven against fresh challenges" {
    PROXY=$("$S" port)
    "$S" replay "$PROXY" "$PORT" "$T/replay" &
    PIDS+=($!)
    start 0 3 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    # process 2 meets process 0 through the recording proxy
    TFM_MASTER_PORT=$PROXY start 2 3 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    appears "$T/replay" "^replay (accepted|refused)$" 20
    run cat "$T/replay"
    assert_output "replay refused"
    run grep -E "^tfm-train: dropped a connection from 127\.0\.0\.1:[0-9]+: it did not prove the run's secret$" "$T/e0"
    assert_success
    start 1 3 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    run_ok 3
}

@test "TFM_RUN_TOKEN: required with TFM_MASTER_PORT, 16 characters or more, the same for all" {
    run env -u TFM_RUN_TOKEN TFM_RANK=0 TFM_WORLD_SIZE=2 tfm-train "${ARGS[@]}" -o "$T/x" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "tfm-train: TFM_MASTER_ADDR and TFM_MASTER_PORT: set TFM_RUN_TOKEN too"
    run env TFM_RUN_TOKEN=short TFM_RANK=1 TFM_WORLD_SIZE=2 tfm-train "${ARGS[@]}" -o "$T/x" "$M/b.tfm"
    assert_failure 1
    assert_output --partial "tfm-train: process 1 of 2: TFM_RUN_TOKEN: 5 characters, 16 at least"
    # another token: process 1 is dropped, and both give up after the rendezvous timeout
    export TFM_RENDEZVOUS_TIMEOUT=3
    start 0 2 "${ARGS[@]}" -o "$T/x" "$M/b.tfm"
    TFM_RUN_TOKEN=another-token-of-some-length start 1 2 "${ARGS[@]}" -o "$T/x" "$M/b.tfm"
    rc=0
    ends "$P0" 20 || rc=$?
    [ "$rc" = 1 ]
    rc=0
    ends "$P1" 20 || rc=$?
    [ "$rc" = 1 ]
    run cat "$T/e0"
    assert_line --regexp "^tfm-train: dropped a connection from 127\.0\.0\.1:[0-9]+: it did not prove the run's secret$"
    assert_line "tfm-train: 1 of 2 processes joined within 3 s (TFM_RENDEZVOUS_TIMEOUT): not process 1"
    run cat "$T/e1"
    assert_output "tfm-train: process 1 of 2: no process 0 at 127.0.0.1:$PORT within 3 s (TFM_RENDEZVOUS_TIMEOUT): it refused this process's proof of the run's secret (is TFM_RUN_TOKEN the same for every process?)"
    [ ! -e "$T/x/last.tfm" ]
}

@test "the rendezvous file: mode 0600 with a secret, no planted link followed, a planted file ignored" {
    unset TFM_MASTER_PORT TFM_RUN_TOKEN
    export TFM_RENDEZVOUS="$T/rv"
    echo precious > "$T/target"
    echo precious > "$T/target2"
    ln -s "$T/target2" "$T/rv"
    # a link where process 0 would have written its temporary file: the name
    # RENDEZVOUS.PID.tmp, with the pid known before it starts (exec keeps the subshell's)
    (ln -s "$T/target" "$T/rv.$BASHPID.tmp"; TFM_RANK=0 TFM_WORLD_SIZE=2 exec tfm-train "${ARGS[@]}" -o "$T/c" "$M/b.tfm" 2> "$T/e0") &
    P0=$!
    PIDS+=($P0)
    for i in $(seq 100); do [ -f "$T/rv" ] && [ ! -L "$T/rv" ] && break; sleep 0.1; done
    run stat -c %a "$T/rv"
    assert_output 600
    run cat "$T/rv"
    assert_output --regexp "^127\.0\.0\.1 [0-9]+ [0-9a-f]{64}$"
    "$S" listening "$P0" "$(cut -d ' ' -f 2 "$T/rv")" > /dev/null
    start 1 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    run_ok 2
    [ "$(cat "$T/target")" = precious ]
    [ "$(cat "$T/target2")" = precious ]
    [ ! -e "$T/rv" ]
    # a file that others may write (mode 0644) sends no process anywhere: not to the
    # stranger listening on the port it names
    SP=$("$S" port)
    "$S" listen "$SP" 4 "$T/count" &
    PIDS+=($!)
    SPID=$!
    printf '127.0.0.1 %s %064d\n' "$SP" 0 > "$T/planted"
    chmod 644 "$T/planted"
    run env TFM_RENDEZVOUS="$T/planted" TFM_RENDEZVOUS_TIMEOUT=2 TFM_RANK=1 TFM_WORLD_SIZE=2 \
        tfm-train "${ARGS[@]}" -o "$T/c2" "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: process 1 of 2: no process 0 at $T/planted within 2 s (TFM_RENDEZVOUS_TIMEOUT): mode 644, not 600: ignored (process 0 makes it for its user alone)"
    wait "$SPID"
    run cat "$T/count"
    assert_output "0 connections"
}

@test "a stopped process ends the others within TFM_COLLECTIVE_TIMEOUT, naming it" {
    export TFM_COLLECTIVE_TIMEOUT=2
    start 0 2 "${ARGS[@]}" -q --max-steps 1000000 --report-every 1 --log "$T/log" -o "$T/c" "$M/b.tfm"
    start 1 2 "${ARGS[@]}" --max-steps 1000000 -o "$T/c" "$M/b.tfm"
    appears "$T/log" "^train" 30
    kill -STOP "$P1"
    SECONDS=0
    rc=0
    ends "$P0" 30 || rc=$?
    [ "$rc" = 1 ]
    echo "process 0 ended $SECONDS s after process 1 stopped"
    [ "$SECONDS" -le 8 ]
    run cat "$T/e0"
    # in an update's sums, or between updates, when process 0 keeps the updates done
    # (the token and loss sums of an update name no update, and save nothing)
    x="process 1 of 2 (sent|took) nothing for 2 s \(TFM_COLLECTIVE_TIMEOUT\): it stopped, hangs, or waits for one that does"
    assert_output --regexp "^tfm-train: (update [0-9]+: [a-z -]+: )?$x(; stopped at update [0-9]+, its checkpoint saved)?$"
    kill -CONT "$P1"
    rc=0
    ends "$P1" 30 || rc=$?
    [ "$rc" = 1 ]
}

@test "SIGTERM ends a wait: for the others to join, for process 0, on a stopped process in a sum" {
    start 0 2 "${ARGS[@]}" -q -o "$T/c" "$M/b.tfm"
    "$S" listening "$P0" "$PORT" > /dev/null
    kill -TERM "$P0"
    rc=0
    ends "$P0" 5 || rc=$?
    [ "$rc" = 143 ]     # 128 + SIGTERM
    run cat "$T/e0"
    assert_output "tfm-train: stopped by a signal while 1 of 2 processes had joined"
    # process 1, and process 0 nowhere
    start 1 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    sleep 0.5
    kill -TERM "$P1"
    rc=0
    ends "$P1" 5 || rc=$?
    [ "$rc" = 143 ]     # 128 + SIGTERM
    run cat "$T/e1"
    assert_output "tfm-train: process 1 of 2: stopped by a signal while waiting for process 0 at 127.0.0.1:$PORT"
    # in a sum on a stopped process: TFM_STOP_TIMEOUT without a byte from it after the
    # signal, not TFM_COLLECTIVE_TIMEOUT
    export TFM_COLLECTIVE_TIMEOUT=300 TFM_STOP_TIMEOUT=3
    start 0 2 "${ARGS[@]}" -q --max-steps 1000000 --report-every 1 --log "$T/log" -o "$T/d" "$M/b.tfm"
    start 1 2 "${ARGS[@]}" --max-steps 1000000 -o "$T/d" "$M/b.tfm"
    appears "$T/log" "^train" 30
    kill -STOP "$P1"
    sleep 0.5
    kill -TERM "$P0"
    SECONDS=0
    rc=0
    ends "$P0" 40 || rc=$?
    [ "$rc" = 143 ]     # 128 + SIGTERM
    echo "process 0 ended $SECONDS s after SIGTERM"
    [ "$SECONDS" -le 8 ]
    run cat "$T/e0"
    x="stopped by a signal: process 1 of 2 (sent|took) nothing in the 3 s that followed \(TFM_STOP_TIMEOUT\)"
    assert_output --regexp "^tfm-train: (update [0-9]+: [a-z -]+: )?$x(; stopped at update [0-9]+, its checkpoint saved)?$"
}

@test "a neighbour silent between updates after SIGTERM: process 0 saves the updates done" {
    # each process reads its own pipe, which sends the batches and then nothing: both wait
    # for a batch, the processes' state that of the same update
    export TFM_COLLECTIVE_TIMEOUT=300 TFM_STOP_TIMEOUT=2
    mkfifo "$T/f0" "$T/f1"
    start 0 2 "${ARGS[@]}" -q --max-steps 1000000 --report-every 1 --log "$T/log" -o "$T/c" "$T/f0"
    start 1 2 "${ARGS[@]}" --max-steps 1000000 -o "$T/c" "$T/f1"
    exec 7> "$T/f0" 8> "$T/f1"
    # both at once: a process reads its header before it joins, and the other then waits
    cat "$M/b.tfm" >&7 &
    cat "$M/b.tfm" >&8 &
    # every batch trained on: the log stops growing
    appears "$T/log" "^train" 30
    local n=0 was=-1
    while [ "$n" != "$was" ]; do was=$n; sleep 1; n=$(wc -l < "$T/log"); done
    kill -TERM "$P0"
    rc=0
    ends "$P0" 20 || rc=$?
    exec 7>&- 8>&-
    [ "$rc" = 143 ]     # 128 + SIGTERM
    run cat "$T/e0"
    assert_output --regexp "^tfm-train: stopped by a signal: process 1 of 2 (sent|took) nothing in the 2 s that followed \(TFM_STOP_TIMEOUT\); stopped at update ([0-9]+), its checkpoint saved$"
    step=$(sed -E 's/.*stopped at update ([0-9]+),.*/\1/' "$T/e0")
    [ "$step" -gt 3 ]
    # the checkpoint of that update is one process of 2 ranks's after as many
    tfm-train "${ARGS[@]}" -q --ranks 2 --max-steps "$step" -o "$T/r2" "$M/b.tfm"
    f=$(printf 'step-%06d.tfm' "$step")
    diff <(params "$T/c/$f") <(params "$T/r2/$f")
    # process 1, its pipe ended, ends too: stopping at process 0's update with the vote
    # process 0 sent before it left (exit 0), or finding it gone (exit 1)
    rc=0
    ends "$P1" 20 || rc=$?
    [ "$rc" = 0 ] || [ "$rc" = 1 ]
}

# waits until the rendezvous file $T/rv is process 0's (a regular file)
rv_written() {
    local i
    for i in $(seq 100); do [ -f "$T/rv" ] && [ ! -L "$T/rv" ] && return 0; sleep 0.1; done
    return 1
}

@test "two runs given one TFM_RENDEZVOUS: the second process 0 leaves the first's file alone; a file written over or removed while process 0 waits" {
    unset TFM_MASTER_PORT TFM_RUN_TOKEN
    export TFM_RENDEZVOUS="$T/rv"
    # removed while process 0 waits: it writes the file again, and the run goes on
    start 0 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    rv_written
    line=$(cat "$T/rv")
    rm "$T/rv"
    rv_written
    [ "$(cat "$T/rv")" = "$line" ]
    start 1 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    run_ok 2
    [ ! -e "$T/rv" ]
    # a second run's process 0, while the first waits on the file: it refuses the file at
    # once, and leaves it to the first run, whose process 1 then finds its process 0 (the
    # second had written its own over it, and the first's processes had gone to it)
    start 0 2 "${ARGS[@]}" -o "$T/a" "$M/b.tfm"
    rv_written
    line=$(cat "$T/rv")
    SECONDS=0
    run env TFM_RANK=0 TFM_WORLD_SIZE=2 tfm-train "${ARGS[@]}" -q -o "$T/b" "$M/b.tfm"
    assert_failure 1
    assert_output --regexp "^tfm-train: TFM_RENDEZVOUS $T/rv: another process 0 waits on this file for its 2 processes, at [^ ]+:[0-9]+: give every run a file of its own \(or end that run first\), and only one process TFM_RANK 0$"
    [ "$SECONDS" -le 10 ]
    [ "$(cat "$T/rv")" = "$line" ]
    [ ! -e "$T/b" ]
    start 1 2 "${ARGS[@]}" -o "$T/a" "$M/b.tfm"
    ends "$P0" 60
    ends "$P1" 60
    diff <(params "$T/a/step-000003.tfm") <(params "$M/r2/step-000003.tfm")
    run cat "$T/e0"
    assert_line --regexp "^tfm-train: dropped a connection from 127\.0\.0\.1:[0-9]+: another process 0 \(another run's, or one given this run's TFM_RANK 0 too\), which found this run's rendezvous file in use and left it alone$"
    # a file of a run that has ended (its process 0 killed before it could remove it)
    # names a port where no one answers: it is replaced
    start 0 2 "${ARGS[@]}" -o "$T/k" "$M/b.tfm"
    rv_written
    kill -KILL "$P0"
    wait "$P0" || true
    [ -e "$T/rv" ]
    line=$(cat "$T/rv")
    start 0 2 "${ARGS[@]}" -o "$T/c2" "$M/b.tfm"
    for i in $(seq 100); do
        new=$(cat "$T/rv" 2> /dev/null) && [ -n "$new" ] && [ "$new" != "$line" ] && break
        sleep 0.1
    done
    [ "$new" != "$line" ]
    start 1 2 "${ARGS[@]}" -o "$T/c2" "$M/b.tfm"
    ends "$P0" 60
    ends "$P1" 60
    # written over by another run's process 0 (the two started at once): the first says so
    # at once, instead of waiting the rendezvous time for processes that went to the other
    start 0 2 "${ARGS[@]}" -o "$T/o" "$M/b.tfm"
    rv_written
    (umask 077 && printf 'otherhost 4242 %064d\n' 7 > "$T/rv.new" && mv "$T/rv.new" "$T/rv")
    rc=0
    ends "$P0" 5 || rc=$?
    [ "$rc" = 1 ]
    run cat "$T/e0"
    assert_line "tfm-train: TFM_RENDEZVOUS $T/rv: another run's process 0 (at otherhost:4242) wrote its own rendezvous file over this run's while 1 of 2 processes had joined: give every run a file of its own"
    [ -e "$T/rv" ]              # the other's, left in place
    # its directory removed: the file cannot be written again, and process 0 says why
    mkdir "$T/d"
    TFM_RENDEZVOUS="$T/d/rv" start 0 2 "${ARGS[@]}" -o "$T/o2" "$M/b.tfm"
    for i in $(seq 100); do [ -f "$T/d/rv" ] && break; sleep 0.1; done
    rm -r "$T/d"
    rc=0
    ends "$P0" 5 || rc=$?
    [ "$rc" = 1 ]
    run cat "$T/e0"
    assert_line --regexp "^tfm-train: TFM_RENDEZVOUS $T/d/rv: removed while 1 of 2 processes had joined, and it cannot be written again \(cannot create $T/d/rv\.[0-9a-f]{16}\.tmp: No such file or directory\), so the others cannot find process 0$"
}

@test "a process left out of its run's meeting says so once the rendezvous file is gone; one whose directory is not there names it" {
    unset TFM_MASTER_PORT TFM_RUN_TOKEN
    export TFM_RENDEZVOUS="$T/rv"
    start 0 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    rv_written
    # a process 1 that cannot join (another secret: a run of its own), then the real one
    TFM_RUN_TOKEN=another-token-of-some-length TFM_RENDEZVOUS_TIMEOUT=4 TFM_RANK=1 \
        TFM_WORLD_SIZE=2 tfm-train "${ARGS[@]}" -o "$T/x" "$M/b.tfm" 2> "$T/ex" &
    PX=$!
    PIDS+=($PX)
    appears "$T/e0" "did not prove the run's secret" 10
    start 1 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    run_ok 2
    rc=0
    ends "$PX" 20 || rc=$?
    [ "$rc" = 1 ]
    run cat "$T/ex"
    assert_output --regexp "^tfm-train: process 1 of 2: no process 0 at $T/rv within 4 s \(TFM_RENDEZVOUS_TIMEOUT\): the file named one at [^ ]+:[0-9]+ \(it refused this process's proof of the run's secret \(is TFM_RUN_TOKEN the same for every process\?\)\), then was removed, as process 0 does once all its processes have joined, this one not among them \(two runs given one TFM_RENDEZVOUS, or two processes one TFM_RANK\?\)$"
    run env TFM_RENDEZVOUS="$T/none/rv" TFM_RENDEZVOUS_TIMEOUT=1 TFM_RANK=1 TFM_WORLD_SIZE=2 \
        tfm-train "${ARGS[@]}" -o "$T/y" "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: process 1 of 2: no process 0 at $T/none/rv within 1 s (TFM_RENDEZVOUS_TIMEOUT): no directory $T/none here"
}

@test "a TFM_MASTER_PORT that something else holds is named as taken" {
    "$S" listen "$PORT" 10 "$T/count" &
    PIDS+=($!)
    "$S" listening $! "$PORT" > /dev/null
    run env TFM_RANK=0 TFM_WORLD_SIZE=2 tfm-train "${ARGS[@]}" -q -o "$T/x" "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: TFM_MASTER_PORT=$PORT is taken on this machine (by another run, another program, or another process given TFM_RANK 0): give the run a free port: listening on 127.0.0.1:$PORT: Address already in use"
    [ ! -e "$T/x" ]
}

@test "a killed process: the others' errors, merged as a launcher merges them, say which process each is" {
    start 0 3 "${ARGS[@]}" -q --max-steps 1000000 --report-every 1 --log "$T/log" -o "$T/c" "$M/b.tfm"
    start 1 3 "${ARGS[@]}" --max-steps 1000000 -o "$T/c" "$M/b.tfm"
    start 2 3 "${ARGS[@]}" --max-steps 1000000 -o "$T/c" "$M/b.tfm"
    appears "$T/log" "^train" 30
    kill -KILL "$P0"
    rc=0
    ends "$P1" 30 || rc=$?
    [ "$rc" = 1 ]
    rc=0
    ends "$P2" 30 || rc=$?
    [ "$rc" = 1 ]
    run cat "$T/e1"
    assert_output --regexp "^tfm-train: process 1 of 3: (update [0-9]+: [a-z -]+: )?process 0 of 3 left the run \(see its messages\)$"
    run cat "$T/e2"
    assert_output --regexp "^tfm-train: process 2 of 3: (update [0-9]+: [a-z -]+: )?process 1 of 3 left the run \(see its messages\)$"
}

@test "a process of another run with another config, given this run's rendezvous file, joins it: the error says the file may be shared" {
    unset TFM_MASTER_PORT TFM_RUN_TOKEN
    export TFM_RENDEZVOUS="$T/rv"
    start 0 2 "${ARGS[@]}" -o "$T/a" "$M/b.tfm"
    rv_written
    # the other run's process 1, of another dropout, comes first
    start 1 2 "${ARGS[@]}" --set dropout=0.2 -o "$T/b" "$M/b.tfm"
    rc=0
    ends "$P0" 30 || rc=$?
    [ "$rc" = 1 ]
    run cat "$T/e0"
    assert_line "tfm-train: process 1 does not start where process 0 does: its config differs: give every process the same tfm-train, options and files, and a checkpoint directory they all see (or, if it is a process of another run, that run a TFM_RENDEZVOUS file of its own)"
    # through an address and a port, whose TFM_RUN_TOKEN keeps other runs out: no such words
    unset TFM_RENDEZVOUS
    export TFM_MASTER_PORT=$PORT TFM_RUN_TOKEN=9f1c33e0b2a74d5e8c6a01f4b7d2e915
    start 0 2 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    start 1 2 "${ARGS[@]}" --set dropout=0.2 -o "$T/c" "$M/b.tfm"
    rc=0
    ends "$P0" 30 || rc=$?
    [ "$rc" = 1 ]
    run cat "$T/e0"
    assert_line "tfm-train: process 1 does not start where process 0 does: its config differs: give every process the same tfm-train, options and files, and a checkpoint directory they all see"
}

@test "process 0 that gives up waiting names the processes that did not join" {
    export TFM_RENDEZVOUS_TIMEOUT=3
    start 0 4 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    start 2 4 "${ARGS[@]}" -o "$T/c" "$M/b.tfm"
    rc=0
    ends "$P0" 20 || rc=$?
    [ "$rc" = 1 ]
    run cat "$T/e0"
    assert_line "tfm-train: 2 of 4 processes joined within 3 s (TFM_RENDEZVOUS_TIMEOUT): not processes 1, 3"
    ends "$P2" 20 || true
    run env TFM_RANK=0 TFM_WORLD_SIZE=12 TFM_RENDEZVOUS_TIMEOUT=1 tfm-train "${ARGS[@]}" -q -o "$T/d" "$M/b.tfm"
    assert_failure 1
    assert_output "tfm-train: 1 of 12 processes joined within 1 s (TFM_RENDEZVOUS_TIMEOUT): not processes 1, 2, 3, 4, 5, 6, 7, 8 and 3 more"
}
