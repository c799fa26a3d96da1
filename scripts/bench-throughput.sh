#!/usr/bin/env bash
# Throughput: N hits from one writer pinned to cpu 0, watched system-wide; ksymwatch's CPU cost per hit and
# losses, side by side with `perf record -e mem:ADDR/8:w -a -g` + `perf script` in the same run.
#   sudo scripts/bench-throughput.sh [N]        (default 500000; needs gcc, and perf for the comparison)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-500000}
work=$(mktemp -d /tmp/ksymwatch-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
cargo build --release --quiet
gcc -O1 -fno-omit-frame-pointer -o "$work/writer" tests/helpers/writer.c
bin=target/release/ksymwatch

# Runs the writer once under a tracer command; $1 is a label, the rest the tracer argv with ADDR replaced.
measure() {
    local label=$1; shift
    coproc W { "$work/writer" write "$n" 0; }
    local banner; read -r -u "${W[0]}" banner
    local addr=${banner#addr=}; addr=${addr%% *}
    local argv=("${@//ADDR/$addr}")
    /usr/bin/time -f "%U %S %M" -o "$work/time" "${argv[@]}" > "$work/out" 2> "$work/err" &
    local tracer=$!
    # Wait until the tracer is armed: ksymwatch says so, perf needs its own start-up time.
    for _ in $(seq 100); do grep -q "^# armed" "$work/out" 2>/dev/null && break; sleep 0.05; done
    [ "$label" = perf ] && sleep 2
    local t0; t0=$(date +%s.%N)
    echo go >&"${W[1]}"; read -r -u "${W[0]}" _done
    local t1; t1=$(date +%s.%N)
    eval "exec ${W[1]}>&-"; wait "$W_PID" 2>/dev/null || true
    sleep 0.2
    kill -INT "$tracer"; wait "$tracer" || true
    read -r user sys rss < "$work/time"
    local hits lost
    if [ "$label" = perf ]; then
        local script_time
        script_time=$( { /usr/bin/time -f "%U %S" perf script -i "$work/perf.data" -F tid,ip,sym > "$work/script" 2>/dev/null; } 2>&1 | tail -1)
        hits=$(awk -v pid="$(echo "$banner" | sed 's/.*tid=//')" '$1==pid' "$work/script" | wc -l)
        lost=$(perf report -i "$work/perf.data" --stats 2>/dev/null | awk '/LOST/ {print $NF; f=1} END {if (!f) print 0}' | head -1)
        read -r su ss <<< "$script_time"
        user=$(echo "$user + $su" | bc); sys=$(echo "$sys + $ss" | bc)
    else
        hits=$(grep -c "^ *writer-" "$work/out" || true)
        lost=$(sed -n 's/.* \([0-9]*\) lost.*/\1/p' "$work/err" | head -1)
    fi
    local cpu; cpu=$(echo "$user + $sys" | bc)
    printf "%-10s writer %6.2fs  hits %8s/%s  lost %-6s  tracer CPU %6.2fs (%.2f us/hit)  peak RSS %s MB\n" \
        "$label" "$(echo "$t1 - $t0" | bc)" "$hits" "$n" "${lost:-0}" "$cpu" "$(echo "$cpu * 1000000 / $n" | bc -l)" "$((rss / 1024))"
}

echo "throughput: $n stores by one writer on cpu 0, watched on all CPUs ($(uname -r))"
measure ksymwatch "$bin" write ADDR/8
if command -v perf >/dev/null; then
    measure perf perf record -q -e "mem:ADDR/8:w" -a -g -o "$work/perf.data"
else
    echo "perf not installed: no comparison (apt-get install linux-perf)"
fi
