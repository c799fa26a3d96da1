#!/usr/bin/env python3
"""User-space objects (`--on uretprobe:`): allocation to armed, and the uprobes' cost per allocation (issue #41).

    sudo scripts/bench-uprobe-objects.py [-n 1000] [--pause-us 2000] [--bench-n 200000] [-k 5] [ksymwatch]

The program is tests/helpers/widgets.c (built -O2 -g), its own allocator `widget_new`/`widget_free` (a
64-byte `struct widget` from malloc). Two sources, each in one run of the same script:

- `own`: `--on uretprobe:W:widget_new --free uprobe:W:widget_free:arg0` (a return probe and a free probe);
- `malloc`: `--on uretprobe:libc:malloc` with `(struct widget)`'s size (an entry probe stashing the request,
  the return probe, and the default frees `free` and `realloc`, and `realloc`'s return).

Gap: `widgets go N PAUSE_US` (N widgets, each armed, its `count` stored 3 times after PAUSE_US, freed),
launched under the tracer; each `object_armed` record's `gap_ns` (from the allocation's BPF stamp to the
slot's breakpoints moved and enabled); median and p99 over the N objects.

Cost: `widgets bench M` times M widgets made and freed back to back (one store each), alone (`none`),
under `probes-only` (`uretprobe:libc:malloc` with `(struct spare)`, 40 bytes: every malloc, free and
realloc probed, its programs run, nothing taken: the uprobes' own cost per allocation), and under each
source's tracer (objects armed as fast as the tracer can: each arming moves a breakpoint on the
program's CPU); K runs, the modes' order rotated each run; the median ns per widget of each mode, and
its difference to `none`.

Takes /tmp/ksymwatch-live-tests.lock around each run. Needs root and gcc.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Locked, release_binary  # noqa: E402

TARGET = "(struct widget)$obj.count"


def pct(sorted_values, q):
    rank = max(1, -(-len(sorted_values) * q // 1))
    return sorted_values[int(rank) - 1]


def sources(widgets):
    return {
        "own": ["--on", f"uretprobe:{widgets}:widget_new", "--free", f"uprobe:{widgets}:widget_free:arg0"],
        "malloc": ["--on", "uretprobe:libc:malloc"],
    }


# Every malloc probed (entry, return, free, realloc), none taken: `struct spare` is 40 bytes.
PROBES_ONLY = ["--on", "uretprobe:libc:malloc", "(struct spare)$obj.words"]


def traced(tracer, source_args, command, target=TARGET):
    """Runs `command` under `write --json` with `source_args` and `target`; its stdout lines (the
    tracer's and the command's)."""
    with Locked():
        p = subprocess.run([tracer, "write", "--json", "--no-status", *source_args, target, "--", *command],
                           capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"ksymwatch {' '.join(source_args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout.splitlines()


def gap(tracer, widgets, source_args, n, pause_us):
    lines = traced(tracer, source_args, [widgets, "go", str(n), str(pause_us)])
    records = [json.loads(l) for l in lines if l.startswith("{")]
    gaps = sorted(r["gap_ns"] for r in records if r["type"] == "object_armed")
    objects = records[-1].get("objects", {})
    hits = sum(1 for r in records if r["type"] == "hit" and r["ip"].get("sym") == "go")
    return gaps, objects, hits


def per_widget(lines):
    for l in lines:
        if l.startswith("ns_per_widget "):
            return int(l.split()[1])
    sys.exit(f"no ns_per_widget line in {lines[-3:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="objects for the gap")
    ap.add_argument("--pause-us", type=int, default=2000)
    ap.add_argument("--bench-n", type=int, default=200000, help="widgets per cost measurement")
    ap.add_argument("-k", type=int, default=5, help="cost runs")
    ap.add_argument("binary", nargs="?", help="ksymwatch binary (default: target/release/ksymwatch, built)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench-uprobe-objects: needs root")
    tracer = release_binary(a.binary)
    work = tempfile.mkdtemp(prefix="ksw-uobj-")
    widgets = os.path.join(work, "widgets")
    subprocess.run(["gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", widgets,
                    os.path.join(ROOT, "tests/helpers/widgets.c"), "-ldl"], check=True)
    src = sources(widgets)
    print(f"# ksymwatch {tracer}; widgets -O2; gap: {a.n} objects, {a.pause_us} us apart; "
          f"cost: {a.bench_n} widgets x {a.k} runs")
    print("| source | objects | armed | stores seen | gap p50 | p99 | max |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, args in src.items():
        gaps, objects, hits = gap(tracer, widgets, args, a.n, a.pause_us)
        if not gaps:
            sys.exit(f"{name}: no object armed: {objects}")
        print(f"| {name} | {objects.get('seen')} | {objects.get('armed')} | {hits} of {3 * a.n} | "
              f"{statistics.median(gaps) / 1000:.0f} us | {pct(gaps, 0.99) / 1000:.0f} us | "
              f"{gaps[-1] / 1000:.0f} us |")
    modes = ["none", "probes-only", *src]
    costs = {m: [] for m in modes}
    for run in range(a.k):
        order = modes[run % len(modes):] + modes[:run % len(modes)]
        for m in order:
            command = [widgets, "bench", str(a.bench_n)]
            if m == "none":
                with Locked():
                    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                costs[m].append(per_widget(out.splitlines()))
            elif m == "probes-only":
                costs[m].append(per_widget(traced(tracer, PROBES_ONLY[:2], command, PROBES_ONLY[2])))
            else:
                costs[m].append(per_widget(traced(tracer, src[m], command)))
    base = statistics.median(costs["none"])
    print()
    print("| mode | ns per widget (median) | runs | over none |")
    print("| --- | --- | --- | --- |")
    for m in modes:
        med = statistics.median(costs[m])
        print(f"| {m} | {med:.0f} | {', '.join(map(str, costs[m]))} | {med - base:+.0f} ns |")


if __name__ == "__main__":
    main()
