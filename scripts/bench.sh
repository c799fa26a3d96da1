#!/usr/bin/env bash
# ksymwatch against perf and bpftrace on this machine, in one run: start to first hit (cold and warm kallsyms
# cache), a flood of one writer per CPU (hits, lost, tracer CPU per hit, peak RSS), and the RSS of a long run
# over short-lived processes (scripts/bench-memory.py, when present); then trap-to-line latency
# (scripts/bench-latency.py), the writer's cost per store under each kind of watch (scripts/bench-writer.py)
# and split into the hit program's parts (scripts/bench-writer-parts.py),
# the tracer's CPU per hit in each output mode (scripts/bench-throughput.py --flood), the allocation-to-armed
# gap of `--on` (scripts/bench-objects.py) and the flight recorder's memory over ten million hits
# (scripts/bench-flight.py), each its own table (BENCH_SKIP_LATENCY=1, BENCH_SKIP_WRITER=1, BENCH_SKIP_WRITER_PARTS=1,
# BENCH_SKIP_OUTPUTS=1, BENCH_SKIP_OBJECTS=1, BENCH_SKIP_FLIGHT=1 leave one out). Prints markdown for BENCHMARKS.md with
# issue #12's targets next to the results. The measuring is scripts/bench-peers.py (see its doc); this wrapper
# builds the release binary, and on exit or Ctrl-C kills whatever child that script could not stop itself.
#
#   sudo scripts/bench.sh [--stores N] [--first-hit K] [--flood-runs K] [--memory N] [path/to/ksymwatch]
#   (defaults: 150000 stores per writer, 7 first-hit rounds, 1 flood per tracer, 10000 short-lived writers;
#   0 skips a part; the binary defaults to target/release/ksymwatch, built here)
#
# Needs root, cargo and gcc; perf and bpftrace are optional (their rows then say "not installed"). Progress
# goes to stderr, the tables to stdout: `sudo scripts/bench.sh > bench.md`.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
    echo "bench.sh: needs root (it arms hardware breakpoints): sudo scripts/bench.sh" >&2
    exit 1
fi
for tool in cargo gcc python3; do
    command -v "$tool" >/dev/null || { echo "bench.sh: $tool is missing" >&2; exit 1; }
done

cargo build --release --quiet

BENCH_WORKDIR=$(mktemp -d /tmp/ksymwatch-bench.XXXXXX)
BENCH_PIDFILE=$BENCH_WORKDIR/children
touch "$BENCH_PIDFILE"
export BENCH_WORKDIR BENCH_PIDFILE
driver=

# Each child of the driver leads its own session; the driver stops them itself. If it could not (it was
# killed), stop every session it recorded that still exists, checked by session id so a reused pid is left
# alone.
cleanup() {
    trap - EXIT INT TERM HUP
    if [ -n "$driver" ] && kill -0 "$driver" 2>/dev/null; then
        kill -TERM "$driver" 2>/dev/null || true
        wait "$driver" 2>/dev/null || true
    fi
    while read -r pid; do
        if [ "$(ps -o sid= -p "$pid" 2>/dev/null | tr -d ' ')" = "$pid" ]; then
            kill -INT -- "-$pid" 2>/dev/null || true
            sleep 0.5
            kill -KILL -- "-$pid" 2>/dev/null || true
        fi
    done <"$BENCH_PIDFILE"
    rm -rf "$BENCH_WORKDIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

python3 scripts/bench-peers.py "$@" &
driver=$!
status=0
wait "$driver" || status=$?
driver=
# One more table after the others, unless a part failed or $1 (a BENCH_SKIP_* variable's name) is set;
# the rest is the command. It runs as the driver, so cleanup stops it on Ctrl-C.
part() {
    local skip=$1
    shift
    if [ "$status" -eq 0 ] && [ -z "${!skip:-}" ]; then
        echo
        "$@" &
        driver=$!
        wait "$driver" || status=$?
        driver=
    fi
}
part BENCH_SKIP_LATENCY python3 scripts/bench-latency.py target/release/ksymwatch
part BENCH_SKIP_WRITER python3 scripts/bench-writer.py -k 11 --adjacent --binary target/release/ksymwatch
part BENCH_SKIP_WRITER_PARTS python3 scripts/bench-writer-parts.py --binary target/release/ksymwatch
part BENCH_SKIP_OUTPUTS python3 scripts/bench-throughput.py 300000 --flood \
    --modes none,bare,text,json,perfetto,otlp,flight,quiet --runs 3 --idle --binary target/release/ksymwatch
part BENCH_SKIP_OBJECTS python3 scripts/bench-objects.py -n 200 --interval-ms 20 target/release/ksymwatch
part BENCH_SKIP_FLIGHT python3 scripts/bench-flight.py --bin target/release/ksymwatch
exit "$status"
