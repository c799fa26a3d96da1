#!/usr/bin/env python3
"""Where a kept and a dropped hit's cost to the writer goes, part by part (issue #27).

    sudo scripts/bench-writer-parts.py [-n N] [-k K] [--cpu C] [--binary PATH]

The writer and its timing are bench-writer.py's (tests/helpers/writer.c, `writer write N C`, N stores
pinned to cpu C, wall time from "go" to "done" over N). Each mode arms one watch on it:

- the harness's variants (src/perf/bpf/hit_bench.rs, a live test of the library run with KSW_BENCH_N):
  `bare` (counting breakpoint, no program), `ret0` (the hit path's breakpoint, a program that returns 0),
  `ret0-callchain` (the same with PERF_SAMPLE_CALLCHAIN asked of the breakpoint), `ret0-nosample` (with
  nothing asked of the sample and no task records), `drop` (the real
  program, `--if` false), `drop-noold` (the same without the old values), `drop-hash` (the same with
  every old value in the LRU hash, as before the by-tgid array), `drop-stamped` and `drop-hash-stamped`
  (`drop` and `drop-hash` timing their own parts: task, value read, old value, condition, count), `decided`/`header`/`kstack`/`ustack` (the real program of `--quiet` stopped
  after the decision, the record's fields, the kernel stack, the user stack), `kept` (the whole program,
  records read by a minimal reader), `stamped` (`kept` timing its own parts with bpf_ktime_get_ns), and
  the `-getstack` forms of `ustack`/`kept`/`stamped`, which take the user stack with bpf_get_stack as
  before the program walked it itself, and the `-nototals` forms of `kept`/`stamped`, which count no
  hit in the kernel's totals (the cost of counting, issue #40);
- `ksymwatch` and `ksymwatch-if`: the real tracer, `write ADDR/8 --quiet` and `--if` false (bench-writer's
  `plain` and `if` modes), so the harness's `kept` and `drop` can be checked against the tool.

K runs (default 5), each measuring every mode once in an order rotated by one each run; medians. Each part is
given twice: from the writer's wall time, and from its time on a CPU (its /proc/PID/schedstat, as
bench-writer.py reads it), which other tasks' preemptions of the writer do not change: on a loaded machine
the second is the one to read, and the difference between the two is what the reader (or anyone else) took
from the writer. Each
measurement holds /tmp/ksymwatch-live-tests.lock. Prints the per-mode table, the split (differences of
medians) and the in-kernel stamps per part. Needs root, gcc, cargo.
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT  # noqa: E402

spec = importlib.util.spec_from_file_location("bench_writer", os.path.join(ROOT, "scripts/bench-writer.py"))
bw = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bw)

HARNESS = ("bare", "ret0", "ret0-callchain", "ret0-nosample", "drop", "drop-noold", "drop-hash", "drop-stamped",
           "drop-hash-stamped", "decided", "header", "kstack", "ustack", "kept", "stamped", "ustack-getstack",
           "kept-getstack", "stamped-getstack", "kept-nototals", "stamped-nototals")
# The stamped parts in program order (the harness's JSON has them sorted by name).
KEPT_PARTS = ("decided", "header", "kstack", "ustack", "output")
DROP_PARTS = ("stamp", "task", "value", "old", "condition", "count")
TOOL = {"ksymwatch": "plain", "ksymwatch-if": "if"}
MODES = HARNESS + tuple(TOOL)

# (part, minuend, subtrahend): each part's cost is the difference of two modes' medians.
SPLIT = (
    ("the trap itself (bare)", "bare", None),
    ("running any program: bpf_overflow_handler, the sample's fixed fields (ret0 - bare)", "ret0", "bare"),
    ("a call chain in the breakpoint's sample_type, not asked on the hit path (ret0-callchain - ret0)",
     "ret0-callchain", "ret0"),
    ("the sample's fields the kernel prepares before the program (ret0 - ret0-nosample)", "ret0",
     "ret0-nosample"),
    ("the decision: pid, value read, old value (decided - ret0)", "decided", "ret0"),
    ("a dropped hit, all told (drop - bare)", "drop", "bare"),
    ("the dropped hit's old value, by-tgid array (drop - drop-noold)", "drop", "drop-noold"),
    ("the dropped hit's old value, LRU hash as before (drop-hash - drop-noold)", "drop-hash", "drop-noold"),
    ("the dropped hit's value read and condition (drop-noold - decided)", "drop-noold", "decided"),
    ("the record's fields: scratch, time, comm (header - decided)", "header", "decided"),
    ("the kernel stack, none for a user-mode trap (kstack - header)", "kstack", "header"),
    ("the user stack, the program's own walk (ustack - kstack)", "ustack", "kstack"),
    ("the user stack, bpf_get_stack as before (ustack-getstack - kstack)", "ustack-getstack", "kstack"),
    ("the output: wake-up decision, tail call, emitter, bpf_ringbuf_output, reader (kept - ustack)", "kept", "ustack"),
    ("a kept hit, all told (kept - bare)", "kept", "bare"),
    ("counting the kept hit in the kernel's totals (kept - kept-nototals)", "kept", "kept-nototals"),
    ("a kept hit as before, all told (kept-getstack - bare)", "kept-getstack", "bare"),
    ("the tracer instead of the minimal reader (ksymwatch - kept)", "ksymwatch", "kept"),
    ("ksymwatch --quiet, all told (ksymwatch - bare)", "ksymwatch", "bare"),
    ("ksymwatch --if false, all told (ksymwatch-if - bare)", "ksymwatch-if", "bare"),
)


def harness_binary():
    out = subprocess.run(["cargo", "test", "--lib", "--no-run", "--message-format=json"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = json.loads(line)
        if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "ksymwatch" \
                and "lib" in m["target"]["kind"]:
            return m["executable"]
    raise SystemExit("no library test binary in cargo's output")


def run_harness(binary, variant, n, cpu, writer):
    env = dict(os.environ, KSW_BENCH_N=str(n), KSW_BENCH_RUNS="1", KSW_BENCH_PARTS=variant,
               KSW_BENCH_CPU=str(cpu), KSW_BENCH_WRITER=writer)
    p = subprocess.run([binary, "perf::bpf::hit_bench::", "--include-ignored", "--nocapture", "--test-threads=1"],
                       env=env, capture_output=True, text=True)
    # libtest prints the test's name on the line its first output continues.
    rows = [json.loads(x[x.index("{"):]) for x in p.stdout.splitlines() if "{\"" in x]
    if p.returncode != 0 or len(rows) != 1:
        raise SystemExit(f"{variant}: harness failed:\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    return rows[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100000)
    ap.add_argument("-k", "--runs", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--binary", help="ksymwatch binary (default: this tree's release build, built first)")
    ap.add_argument("--modes", help="comma-separated, of: " + ",".join(MODES))
    a = ap.parse_args()
    modes = a.modes.split(",") if a.modes else list(MODES)
    ksym = a.binary or os.path.join(ROOT, "target/release/ksymwatch")
    if not a.binary:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    harness = harness_binary()
    work = tempfile.mkdtemp(prefix="ksymwatch-bench-parts-")
    writer = os.path.join(work, "writer")
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-no-pie", "-o", writer,
                    os.path.join(ROOT, "tests/helpers/writer.c")], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    load0 = os.getloadavg()
    print(f"writer cost by part: {a.n} stores on cpu {a.cpu}, {a.runs} runs, {commit}, {os.uname().release}, "
          f"load {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", file=sys.stderr, flush=True)
    us = {m: [] for m in modes}
    on_cpu = {m: [] for m in modes}
    stamps = {}
    for run in range(a.runs):
        order = modes[run % len(modes):] + modes[:run % len(modes)]
        for m in order:
            if m in TOOL:
                secs, note, ok = bw.measure(TOOL[m], a.n, a.cpu, writer, ksym, None, work, f"{m}-{run}")
                v = secs * 1e6 / a.n
                c = bw.last_sched[0] * 1e6 / a.n
            else:
                r = run_harness(harness, m, a.n, a.cpu, writer)
                v, ok = r["writer_us_per_store"], r["as_expected"]
                c = r["on_cpu_us_per_store"]
                note = f"samples {r['samples']} filtered {r['filtered']}"
                if r["stamp_ns_per_hit"]:
                    for part, ns in r["stamp_ns_per_hit"].items():
                        stamps.setdefault(m, {}).setdefault(part, []).append(ns)
            us[m].append(v)
            on_cpu[m].append(c)
            print(f"  run {run} {m:<17} {v:8.3f} us/store (on cpu {c:.3f})  {note}{'' if ok else '  (UNEXPECTED)'}",
                  file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    med = {m: statistics.median(v) for m, v in us.items()}
    cmed = {m: statistics.median(v) for m, v in on_cpu.items()}
    print(f"writer cost by part: {a.n} stores on cpu {a.cpu}, median of {a.runs} runs, ksymwatch {commit}, "
          f"{os.uname().release}, load average {load0[0]:.2f} at the start, {load1[0]:.2f} at the end\n")
    print(f"| mode | writer us/store, median of {a.runs} | the {a.runs} runs | on a CPU, median | the runs on a CPU |")
    print("| --- | --- | --- | --- | --- |")
    for m in modes:
        print(f"| `{m}` | **{med[m]:.3f}** | {' '.join(f'{x:.2f}' for x in us[m])} | **{cmed[m]:.3f}** | "
              f"{' '.join(f'{x:.2f}' for x in on_cpu[m])} |")
    print("\n| part | us per store, wall (difference of medians) | on a CPU |")
    print("| --- | --- | --- |")
    for label, plus, minus in SPLIT:
        if plus in med and (minus is None or minus in med):
            v = med[plus] - (med[minus] if minus else 0)
            c = cmed[plus] - (cmed[minus] if minus else 0)
            print(f"| {label} | {v:+.3f} | {c:+.3f} |" if minus else f"| {label} | {v:.3f} | {c:.3f} |")
    # One table per set of parts: a kept hit's (stamped) and a dropped hit's (drop-stamped).
    for what, order in (("kept", KEPT_PARTS), ("dropped", DROP_PARTS)):
        mine = {m: by for m, by in stamps.items() if m.startswith("drop-") == (what == "dropped")}
        if not mine:
            continue
        parts = [p for p in order if p in next(iter(mine.values()))]
        print(f"\n| in-kernel stamps, ns per {what} hit (median of runs) | " + " | ".join(parts) + " | sum |")
        print("| --- |" + " --- |" * (len(parts) + 1))
        for m, by in mine.items():
            vals = [statistics.median(by[p]) for p in parts]
            print(f"| `{m}` | " + " | ".join(f"{v:.0f}" for v in vals) + f" | {sum(vals):.0f} |")


if __name__ == "__main__":
    main()
