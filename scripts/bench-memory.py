#!/usr/bin/env python3
"""Memory of a long run: the tracer's resident set (VmRSS) while short-lived processes come and go.

ksymwatch watches a writer helper's global system-wide (`write ADDR/8 -o FILE`, ftrace text to a file).
The helper (tests/helpers/writer.c, built non-PIE so every run has its global at the same address) is run
N times, each run storing once into the global and exiting at once (`writer now 1 CPU`, alternating CPUs):
every run is a new process that starts after arming, hits, and is gone. The tracer's VmRSS is read after
the first 100 runs, after N/2 (printed, to show the slope) and after all N (each time once the tracer has
printed what was pending),
and the hits in the file are counted: those whose ip is named (`ip=main+0x..`) and those printed as a bare
address (`ip=0x...`, a process whose maps were gone before its hit was named).

    sudo scripts/bench-memory.py [N] [--bin path/to/ksymwatch]
        (N defaults to 10000; the binary to target/release/ksymwatch: `cargo build --release` first)

The last line is the result:
    rss_after_100_kb=... rss_after_N_kb=... growth_pct=... hits=... named=... unnamed=...
Target (issue 12): growth_pct within 10.

Needs root and gcc. Holds /tmp/ksymwatch-live-tests.lock (flock, as the live tests do) for the whole run:
do not start the script itself under flock.
"""
import argparse
import fcntl
import os
import shutil
import subprocess
import tempfile
import time

from benchlib import LOCK, ROOT, build_writer, interrupt, online_cpus, require_root_binary_and_gcc, vm_rss_kb, wait_armed_file

FIRST = 100


def settle(out_path, tracer_pid):
    """Waits until the output file stops growing (the tracer printed what was pending)."""
    last = -1
    for _ in range(100):
        time.sleep(0.2)
        size = os.path.getsize(out_path)
        if size == last:
            return
        last = size
        os.kill(tracer_pid, 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=10_000, help="short-lived writers to run")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/ksymwatch"))
    args = ap.parse_args()
    require_root_binary_and_gcc("bench-memory", args.bin)
    n = max(args.n, FIRST)
    work = tempfile.mkdtemp(prefix="ksymwatch-bench-memory-")
    writer, addr = build_writer(work)
    cpus = online_cpus()
    out_path = os.path.join(work, "out.txt")
    lock = open(LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    tracer = subprocess.Popen(
        [args.bin, "write", f"{addr}/8", "-o", out_path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_armed_file(tracer, out_path, "bench-memory", limit=30)
        rss = {}
        started = time.time()
        for i in range(n):
            cpu = str(cpus[i % len(cpus)])
            subprocess.run([writer, "now", "1", cpu], stdout=subprocess.DEVNULL, check=True)
            if i + 1 in (FIRST, n // 2) and i + 1 not in rss:
                settle(out_path, tracer.pid)
                rss[i + 1] = vm_rss_kb(tracer.pid)
                print(f"after {i + 1:>6} writers: VmRSS {rss[i + 1]} kB", flush=True)
        settle(out_path, tracer.pid)
        rss[n] = vm_rss_kb(tracer.pid)
        took = time.time() - started
        print(f"after {n:>6} writers: VmRSS {rss[n]} kB ({took:.1f} s of writers)", flush=True)
    finally:
        err = interrupt(tracer, 60)
        lock.close()
    # The writers' own store, from user space: named through their ELF symbols, or a bare address.
    named = unnamed = 0
    with open(out_path) as f:
        for line in f:
            if "writer-" not in line or " ip=" not in line:
                continue
            ip = line.split(" ip=", 1)[1].split()[0]
            if ip.startswith("main+"):
                named += 1
            elif ip.startswith("0x"):
                unnamed += 1
    shutil.rmtree(work, ignore_errors=True)
    tail = err.strip().splitlines()[-1] if err.strip() else ""
    if tail:
        print(f"ksymwatch: {tail.removeprefix('ksymwatch: ')}")
    growth = 100.0 * (rss[n] - rss[FIRST]) / rss[FIRST]
    print(
        f"rss_after_{FIRST}_kb={rss[FIRST]} rss_after_{n}_kb={rss[n]} growth_pct={growth:.1f} "
        f"hits={named + unnamed} named={named} unnamed={unnamed}"
    )


if __name__ == "__main__":
    main()
