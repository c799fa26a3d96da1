#!/usr/bin/env python3
"""Flight recorder memory: the tracer's resident set (VmRSS) over a long flood with `--last N`.

ksymwatch watches the writer helper's global system-wide with `--last N --dump-on signal` (nothing is
printed until SIGUSR1). One writer per online CPU (tests/helpers/writer.c, built -no-pie so every writer
has its global at the same address) stores STORES/CPUs times in a tight loop, pinned to its CPU; they start
together after the tracer's armed mark. The tracer's VmRSS is sampled every 0.5 s while they run. When they
are done the script sends SIGUSR1 (a dump of the last N hits, into the -o file, timed), then SIGINT.

    sudo scripts/bench-flight.py [--last N] [--stores M] [--trigger TRIGGER] [--bin path/to/ksymwatch]
        (N defaults to 100000, M to 10000000; the binary to target/release/ksymwatch: `cargo build
        --release` first; --trigger adds a second --dump-on, e.g. 'value == 0xffffffffffffffff', a
        condition no store meets: every hit then carries its value and is tested)

Prints the samples (time since the writers started, VmRSS), then one result line:
    hits=... lost=... tracer_cpu_s=... us_per_hit=... rss_start_kb=... rss_peak_kb=... rss_end_kb=... rss_at_fill_kb=... growth_after_fill_kb=...
    dump_hits=... dump_s=...
`rss_start` is after arming, before any store; `rss_at_fill` the first sample after N hits can have been
kept (the hit rate from the summary); `growth_after_fill` is the end's VmRSS less that.

Needs root and gcc. Holds /tmp/ksymwatch-live-tests.lock (flock, as the live tests do) for the whole run:
do not start the script itself under flock.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from benchlib import (ROOT, Locked, build_writer, interrupt, online_cpus, proc_cpu_s, require_root_binary_and_gcc, vm_rss_kb,
                      wait_armed_file)


def wait_dump(out_path, limit=120):
    """Seconds until the dump's heading and its hits are all in the file (its size stops changing)."""
    started = time.time()
    size = -1
    while time.time() - started < limit:
        time.sleep(0.1)
        now = os.path.getsize(out_path)
        if now == size and "# dump" in open(out_path).read():
            return time.time() - started - 0.1
        size = now
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--last", type=int, default=100_000)
    ap.add_argument("--stores", type=int, default=10_000_000, help="stores in all, over every CPU")
    ap.add_argument("--trigger", help="a second --dump-on (a condition no store meets)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/ksymwatch"))
    args = ap.parse_args()
    require_root_binary_and_gcc("bench-flight", args.bin)
    work = tempfile.mkdtemp(prefix="ksymwatch-bench-flight-")
    writer, addr = build_writer(work)
    cpus = online_cpus()
    per_cpu = args.stores // len(cpus)
    out_path = os.path.join(work, "out.txt")
    cmd = [args.bin, "write", f"{addr}/8", "--no-status", "-o", out_path,
           "--last", str(args.last), "--dump-on", "signal"]
    if args.trigger:
        cmd += ["--dump-on", args.trigger]
    with Locked():
        tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_armed_file(tracer, out_path, "bench-flight")
            time.sleep(0.5)
            start_kb = vm_rss_kb(tracer.pid)
            start_cpu = proc_cpu_s(tracer.pid)
            writers = [
                subprocess.Popen([writer, "write", str(per_cpu), str(c)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
                for c in cpus
            ]
            for w in writers:
                w.stdout.readline()  # the banner
            started = time.time()
            for w in writers:
                # "go", then EOF: the helper stores, says "done" and exits.
                w.stdin.write("go\n")
                w.stdin.close()
            samples = []
            while any(w.poll() is None for w in writers):
                samples.append((time.time() - started, vm_rss_kb(tracer.pid)))
                print(f"{samples[-1][0]:6.1f} s  VmRSS {samples[-1][1]} kB", flush=True)
                time.sleep(0.5)
            took = time.time() - started
            time.sleep(1)
            end_kb = vm_rss_kb(tracer.pid)
            flood_cpu = proc_cpu_s(tracer.pid) - start_cpu
            samples.append((time.time() - started, end_kb))
            tracer.send_signal(signal.SIGUSR1)
            dump_s = wait_dump(out_path)
            after_dump_kb = vm_rss_kb(tracer.pid)
        finally:
            err = interrupt(tracer, 120)
    summary = next((l for l in err.splitlines() if " hits (" in l), "")
    print(summary)
    hits = int(re.search(r"(\d+) hits", summary).group(1)) if summary else 0
    lost = int(re.search(r"(\d+) lost", summary).group(1)) if summary else 0
    dump_hits = sum(1 for l in open(out_path) if " ip=" in l and not l.startswith("#"))
    rate = hits / took if took else 0
    fill_t = args.last / rate if rate else 0
    at_fill = next((kb for t, kb in samples if t >= fill_t), end_kb)
    peak = max(kb for _, kb in samples)
    print(
        f"stores={per_cpu * len(cpus)} hits={hits} lost={lost} writers_s={took:.1f} "
        f"rate_per_s={rate:.0f} rss_start_kb={start_kb} rss_peak_kb={peak} rss_end_kb={end_kb} "
        f"rss_at_fill_kb={at_fill} (t={fill_t:.1f} s) growth_after_fill_kb={end_kb - at_fill} "
        f"tracer_cpu_s={flood_cpu:.1f} us_per_hit={1e6 * flood_cpu / max(hits, 1):.2f} "
        f"dump_hits={dump_hits} dump_s={dump_s if dump_s is None else round(dump_s, 1)} "
        f"rss_after_dump_kb={after_dump_kb}"
    )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
