#!/usr/bin/env python3
"""Issue #40's flood ratio: the tracer's CPU per printed hit against `perf record -g` + `perf script` in
the same run (target: at most 0.25x). The flood and each tool's run are scripts/bench-peers.py's (one
non-PIE writer per CPU, pinned, released together, N stores each; ksymwatch writes ftrace text to a file);
this script only interleaves them run by run, with one or more ksymwatch builds (a before and an after,
paired), and prints each run's numbers, the medians and the ratios.

    sudo scripts/bench-flood-ratio.py [-k K] [--stores N] [BINARY ...]
        (default: target/release/ksymwatch; K = 5 runs, N = 150000 stores per writer)

CPU per hit is user+sys of the whole tracer run (start-up included, as bench-peers.py counts it) over the
hits printed for the writers' tids; "after armed" leaves out what the tracer used before its armed mark.
Load averages at the start and end are printed with the table (the VM is shared: compare within a run).
"""
import argparse
import importlib.util
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT  # noqa: E402

spec = importlib.util.spec_from_file_location("peers", os.path.join(ROOT, "scripts/bench-peers.py"))
peers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peers)

TARGET = 0.25


def per_hit(r):
    return r["cpu"] * 1e6 / r["captured"] if r.get("captured") else None


def after_armed(r):
    if not r.get("captured") or r.get("at_armed") is None:
        return None
    return (r["cpu"] - r["at_armed"]) * 1e6 / r["captured"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", type=int, default=5, help="runs (each: every binary, then perf)")
    ap.add_argument("--stores", type=int, default=150000, help="stores per writer (one writer per CPU)")
    ap.add_argument("binaries", nargs="*", default=[os.path.join(ROOT, "target/release/ksymwatch")])
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench-flood-ratio: needs root (it arms hardware breakpoints)")
    cpus = sorted(os.sched_getaffinity(0))
    work = tempfile.mkdtemp(prefix="ksw-ratio-")
    writer = os.path.join(work, "writer")
    peers.subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-no-pie", "-Wl,-Ttext-segment=0x7e00000",
                          "-o", writer, os.path.join(ROOT, "tests/helpers/writer.c")], check=True)
    load0 = os.getloadavg()
    names = [f"ksymwatch {b}" for b in a.binaries] + ["perf"]
    runs = {n: [] for n in names}
    try:
        for k in range(a.k):
            for b, n in zip(a.binaries + [None], names):
                r = peers.run_perf(work, writer, a.stores, cpus) if b is None else \
                    peers.run_ksymwatch(b, "text", work, writer, a.stores, cpus)
                if "error" in r:
                    sys.exit(f"{n}: {r['error']}")
                runs[n].append(r)
                print(f"run {k + 1} {n}: {r['captured']}/{r['stores']} hits, lost {r['lost']}, CPU "
                      f"{r['cpu']:.3f} s, {per_hit(r):.3f} us/hit ({after_armed(r) or 0:.3f} after armed), "
                      f"load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    finally:
        peers.cleanup()
    load1 = os.getloadavg()
    perf = [per_hit(r) for r in runs["perf"]]
    print(f"{a.k} runs, {len(cpus)} writers x {a.stores:,} stores, load average {load0[0]:.2f} -> {load1[0]:.2f}")
    print()
    print("| tracer | hits / stores (min) | lost (max) | us CPU per hit, median | runs | after armed, median "
          "| ratio to perf, median of runs | target <= 0.25x |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in names:
        rs = runs[n]
        ph = [per_hit(r) for r in rs]
        aa = [x for x in (after_armed(r) for r in rs) if x is not None]
        ratios = [p / q for p, q in zip(ph, perf)]
        ratio = "" if n == "perf" else f"{statistics.median(ratios):.3f} ({', '.join(f'{x:.2f}' for x in ratios)})"
        verdict = "" if n == "perf" else ("met" if statistics.median(ratios) <= TARGET else "**missed**")
        lost = max((r["lost"] or 0) for r in rs)
        print(f"| {n} | {min(r['captured'] for r in rs):,} / {rs[0]['stores']:,} | {lost:,} | "
              f"**{statistics.median(ph):.3f}** | {', '.join(f'{x:.2f}' for x in ph)} | "
              f"{statistics.median(aa) if aa else float('nan'):.3f} | {ratio} | {verdict} |")


if __name__ == "__main__":
    main()
