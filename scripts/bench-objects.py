#!/usr/bin/env python3
"""Allocation to armed: how long after the kernel allocates an object `--on` has a breakpoint on it.

A Python helper makes N pipes, one every INTERVAL ms (each a `struct pipe_inode_info` from
`alloc_pipe_info`), writes one byte into each and closes it. The tracer watches
`(struct pipe_inode_info)$obj.head` from `kmalloc:alloc_pipe_info`; each `object_armed` record's
`gap_ns` is the time from the allocation (the kmalloc tracepoint's CLOCK_MONOTONIC stamp) to the
moment the breakpoints were moved and enabled on every CPU. Reports min, p50, p90, p99 and max of the
helper's objects, how many of its pipes were armed, and how many of their writes were seen.

    sudo scripts/bench-objects.py [-n 200] [--interval-ms 20] [path/to/ksymwatch]

Needs root. Takes /tmp/ksymwatch-live-tests.lock around the run.
"""
import json
import os
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Locked, paced_bench_args  # noqa: E402

HELPER = """
import os, sys, time
n, interval = int(sys.argv[1]), float(sys.argv[2])
print('ready', flush=True)
sys.stdin.readline()
for i in range(n):
    r, w = os.pipe()
    time.sleep(interval)
    os.write(w, b'x'); os.read(r, 1)
    os.close(w); os.close(r)
"""


def pct(sorted_values, q):
    rank = max(1, -(-len(sorted_values) * q // 1))
    return sorted_values[int(rank) - 1]


def main():
    a, tracer = paced_bench_args(__doc__, 20)
    helper = subprocess.Popen([sys.executable, "-c", HELPER, str(a.n), str(a.interval_ms / 1000)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    helper.stdout.readline()
    with Locked():
        t = subprocess.Popen([tracer, "write", "--on", "kmalloc:alloc_pipe_info",
                              "(struct pipe_inode_info)$obj.head", "--json", "--no-status"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        records = []
        while True:
            line = t.stdout.readline()
            if not line:
                sys.exit("the tracer ended before it was armed")
            records.append(json.loads(line))
            if records[-1]["type"] == "armed":
                break
        # Read while the helper runs: a tracer whose stdout pipe is full stops handing out objects.
        rest = []
        reader = threading.Thread(target=lambda: rest.extend(json.loads(line) for line in t.stdout))
        reader.start()
        helper.stdin.write("go\n")
        helper.stdin.flush()
        helper.wait()
        t.send_signal(2)
        reader.join()
        t.wait()
        records += rest
    pid = helper.pid
    summary = records[-1].get("objects", {})
    summary.pop("by_object", None)
    print(f"# tracer's books: {summary}", file=sys.stderr)
    armed = {r["index"]: r for r in records if r["type"] == "object_armed" and r["pid"] == pid}
    gaps = sorted(r["gap_ns"] / 1000 for r in armed.values())
    labels = {f"#{i}" for i in armed}
    seen = sum(1 for r in records if r["type"] == "hit" and r["pid"] == pid
               and any(r["target"].endswith(label) for label in labels))
    load = os.getloadavg()[0]
    print(f"| pipes | armed | writes seen | gap min | p50 | p90 | p99 | max | load |")
    print(f"| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    if not gaps:
        sys.exit("no object of the helper was armed")
    print(f"| {a.n} | {len(armed)} | {seen} | {gaps[0]:.0f} us | {pct(gaps, 0.5):.0f} us | "
          f"{pct(gaps, 0.9):.0f} us | {pct(gaps, 0.99):.0f} us | {gaps[-1]:.0f} us | {load:.2f} |")


if __name__ == "__main__":
    main()
