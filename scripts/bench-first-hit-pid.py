#!/usr/bin/env python3
"""Issue #40's start-up number: start to the first printed hit of a `-p` watch on a process's global,
ksymwatch warm and cold (no symbol cache) against bpftrace in the same run, median of K rounds, the tools
interleaved.

The target is tests/helpers/writer.c `spin` (one thread storing into its global `target_var` every
~200 us, from before the first tool starts until the end), so every tool's first hit comes as soon as it
is armed. Each round runs, under the live-test lock:
  - cold: `ksymwatch write -p PID target_var --count 1 --no-status` with its symbol cache directory
    ($KSYMWATCH_CACHE_DIR, a private temporary one) removed first;
  - warm: the same right after, with the cache the cold run wrote;
  - `bpftrace -p PID -e 'watchpoint:ADDR:8:w { printf("hit\\n"); exit(); }'` (ADDR: the writer's
    target_var, from its banner).
Timed from spawning the tool to its first hit line on stdout (and, for ksymwatch, its `# armed` line),
through scripts/bench-peers.py's `time_to`. Targets (#40): warm <= 1/3 of bpftrace's, cold < bpftrace's.

    sudo scripts/bench-first-hit-pid.py [-k K] [path/to/ksymwatch ...]
        (default: target/release/ksymwatch; K = 3 rounds; several binaries are measured side by side)
"""
import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Locked  # noqa: E402

spec = importlib.util.spec_from_file_location("peers", os.path.join(ROOT, "scripts/bench-peers.py"))
peers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peers)


def ksymwatch(binary, pid, cache_dir, cold):
    return peers.ksymwatch_first_hit(binary, cache_dir, cold, target=("-p", str(pid), "target_var"))


def bpftrace(pid, addr):
    prog = f'watchpoint:{addr}:8:w {{ printf("hit\\n"); exit(); }}'
    with Locked():
        return peers.time_to(["bpftrace", "-p", str(pid), "-e", prog], peers.text_lines,
                             lambda l: "hit" if l.strip() == "hit" else None, exits=True)


def fmt(xs):
    got = [x for x in xs if x is not None]
    if not got:
        return "-"
    missed = len(xs) - len(got)
    return f"**{statistics.median(got):.1f} ms** ({', '.join(f'{x:.1f}' for x in got)})" + \
        (f", {missed} without a hit" if missed else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", type=int, default=3, help="rounds")
    ap.add_argument("binaries", nargs="*", default=[os.path.join(ROOT, "target/release/ksymwatch")])
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench-first-hit-pid: needs root (it arms hardware breakpoints)")
    have_bpftrace = shutil.which("bpftrace") is not None
    work = tempfile.mkdtemp(prefix="ksw-first-pid-")
    writer = os.path.join(work, "writer")
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-o", writer,
                    os.path.join(ROOT, "tests/helpers/writer.c")], check=True)
    w = subprocess.Popen([writer, "spin", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    banner = dict(kv.split("=", 1) for kv in w.stdout.readline().split())
    w.stdin.write("go\n")
    w.stdin.flush()
    pid, addr = int(banner["pid"]), banner["addr"]
    load0 = os.getloadavg()[0]
    rows = {}
    try:
        for k in range(a.k):
            for b in a.binaries:
                cache = os.path.join(work, f"cache-{a.binaries.index(b)}")
                for cold in (True, False):
                    m = ksymwatch(b, pid, cache, cold)
                    rows.setdefault((b, "cold" if cold else "warm"), []).append(m)
            if have_bpftrace:
                rows.setdefault(("bpftrace", ""), []).append(bpftrace(pid, addr))
            print(f"round {k + 1}: " + ", ".join(f"{os.path.basename(b)} {c} {r[-1].get('hit', float('nan')):.1f}"
                                                  for (b, c), r in rows.items()), file=sys.stderr, flush=True)
    finally:
        w.stdin.write("stop\n")
        w.stdin.close()
        w.wait(10)
        peers.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    bpf = [r.get("hit") for r in rows.get(("bpftrace", ""), [])]
    bpf_med = statistics.median([x for x in bpf if x is not None]) if any(x is not None for x in bpf) else None
    print(f"Start to first hit of a `-p` watch on a process's global (writer.c spin, pid {pid}, {addr}), "
          f"median of {a.k} rounds; load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    print()
    print("| tool | first hit (runs) | `# armed` | target |")
    print("| --- | --- | --- | --- |")
    for (b, cache), rs in rows.items():
        hits = [r.get("hit") for r in rs]
        armed = [r.get("armed") for r in rs]
        target = ""
        got = [x for x in hits if x is not None]
        if b != "bpftrace" and bpf_med is not None and got:
            med = statistics.median(got)
            limit, word = (bpf_med / 3, "<= 1/3 of bpftrace") if cache == "warm" else (bpf_med, "< bpftrace")
            target = f"{word} = {limit:.1f} ms: " + ("met" if med <= limit else "**missed**")
        label = (f"`ksymwatch write -p PID target_var --count 1` {cache} ({b})" if b != "bpftrace" else
                 "`bpftrace -p PID -e 'watchpoint:ADDR:8:w { printf(\"hit\\n\"); exit(); }'`")
        print(f"| {label} | {fmt(hits)} | {fmt(armed) if b != 'bpftrace' else '-'} | {target} |")


if __name__ == "__main__":
    main()
