#!/usr/bin/env python3
"""Trap-to-line latency: how long after a store its hit line reaches the reader.

A writer (tests/helpers/writer.c, `set` mode, pinned to cpu 1) stores once every INTERVAL ms; the tracer
streams to a pipe read here. For each hit, latency = arrival time of its line (CLOCK_MONOTONIC, read as the
line arrives) minus the time the tracer reports for the store (its `time_ns`/`nsecs`, CLOCK_MONOTONIC at
the trap). Reports p50, p99 and max over N stores for:

  - ksymwatch write ADDR/8 --json          (system-wide; the JSON `time_ns`)
  - ksymwatch write ADDR/8                 (text; the timestamp column, seconds with microseconds)
  - bpftrace watchpoint:ADDR:8:w { printf("%llu\\n", nsecs); }   (when installed)

    sudo scripts/bench-latency.py [-n 200] [--interval-ms 50] [path/to/ksymwatch]

Needs root and gcc. Takes /tmp/ksymwatch-live-tests.lock around each tracer's run.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Locked, build_writer, paced_bench_args  # noqa: E402


def measure(tracer_argv, writer, n, interval, parse, ready):
    """Runs the writer and the tracer; returns latencies in microseconds."""
    w = subprocess.Popen([writer, "set", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         bufsize=1)
    try:
        banner = w.stdout.readline()
        addr = next(f.split("=", 1)[1] for f in banner.split() if f.startswith("addr="))
        argv = [a.replace("ADDR", addr) for a in tracer_argv]
        t = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        try:
            while True:
                line = t.stdout.readline()
                if not line:
                    raise RuntimeError(f"{argv[0]} ended before it was ready")
                if ready(line):
                    break
            lat = []
            for i in range(n):
                w.stdin.write(f"set {i + 1}\n")
                w.stdin.flush()
                w.stdout.readline()  # "done"
                while True:
                    line = t.stdout.readline()
                    arrived = time.monotonic_ns()
                    if not line:
                        raise RuntimeError(f"{argv[0]} ended early")
                    at = parse(line)
                    if at is not None:
                        lat.append((arrived - at) / 1000)
                        break
                time.sleep(interval / 1000)
            return lat
        finally:
            t.send_signal(2)
            try:
                t.wait(10)
            except subprocess.TimeoutExpired:
                t.kill()
    finally:
        w.kill()
        w.wait()


def json_time(line):
    if '"type":"hit"' not in line:
        return None
    return json.loads(line)["time_ns"]


def text_time(line):
    if line.startswith("#") or ": " not in line or line.startswith(" =>"):
        return None
    # `comm-tid [cpu] secs.usecs: target ...`
    stamp = line.split(": ", 1)[0].split()[-1]
    secs, usecs = stamp.split(".")
    return int(secs) * 1_000_000_000 + int(usecs) * 1000


def bpf_time(line):
    line = line.strip()
    return int(line) if line.isdigit() else None


def row(name, lat):
    if not lat:
        return f"| {name} | - | - | - |"
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return f"| {name} | {statistics.median(lat):.0f} | {q[98]:.0f} | {max(lat):.0f} |"


def main():
    a, binary = paced_bench_args(__doc__, 50)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        writer, _ = build_writer(d)
        runs = [
            ("ksymwatch --json", [binary, "write", "ADDR/8", "--json", "--no-status"], json_time,
             lambda l: '"type":"armed"' in l),
            ("ksymwatch text", [binary, "write", "ADDR/8", "--no-status"], text_time,
             lambda l: l.startswith("#            TASK-PID")),
        ]
        if shutil.which("bpftrace"):
            runs.append(("bpftrace printf(nsecs)",
                         ["bpftrace", "-e", 'BEGIN { printf("ready\\n"); } watchpoint:ADDR:8:w { printf("%llu\\n", nsecs); }'],
                         bpf_time, lambda l: l.strip() == "ready"))
        for name, argv, parse, ready in runs:
            with Locked():
                lat = measure(argv, writer, a.n, a.interval_ms, parse, ready)
            print(f"{name}: {len(lat)} hits", file=sys.stderr)
            rows.append(row(name, lat))
    print(f"Trap-to-line latency, one store every {a.interval_ms:g} ms, {a.n} stores, microseconds:\n")
    print("| tracer | p50 | p99 | max |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
