#!/usr/bin/env python3
"""The writer's cost per store: what a watch costs the traced program, each mode in one run (issues #26, #27).

    sudo scripts/bench-writer.py [-n N] [-k K] [--cpu C] [--modes LIST] [--binary PATH] [--jsonl]

One writer (tests/helpers/writer.c built -O1 -no-pie, `writer write N C`) pinned to cpu C (default 1)
stores N times (default 100,000) into its global `target_var`; its wall time from "go" to "done" (taken
here, around the pipe round trip: tens of us against the N stores) over N is its cost per store, trap and
everything the kernel does at the trap included. Each of K runs (default 5) measures every mode once, in
an order rotated by one each run (so no mode always follows another), with a fresh writer each time; the
table gives the median and the K values, and the difference to `bare`.

Modes (`--modes`, comma-separated; default all, bpftrace only if installed):
    none     no watch at all
    bare     scripts/bench-bare-count.c: one pinned write breakpoint per online CPU (pid=-1), counting only
             (sample_period 1<<62: every store traps, none samples; no ring, no BPF program): the floor
             any system-wide write watch pays per store
    plain    ksymwatch write ADDR/8 --quiet           (every hit kept by the BPF program, stack and sample)
    plain-normal  ksymwatch write ADDR/8 --quiet --realtime off   (as plain, the reader at normal priority as
             before issue #40: its SCHED_FIFO reader preempts a writer on its CPU)
    value    ksymwatch write ADDR/8 --value --quiet   (registers and instruction bytes captured as well)
    if       ksymwatch write ADDR/8 --if 'value == 12345678' --quiet   (no store matches: every hit is
             dropped in the kernel)
    other    ksymwatch write -p OTHER ADDR/8 --quiet, OTHER a second writer process of the same binary
             (same address) that never stores: every trap of the measured writer is dropped in the kernel
             as another process's
    bpftrace bpftrace -e 'watchpoint:ADDR:8:w { @ = count(); }'

Each tracer's armed mark is awaited before "go" (ksymwatch --quiet: `armed` on stderr; bare: `# armed` on
stdout; bpftrace: a BEGIN probe's `armed`, printed once every probe is attached), and each is stopped with
SIGINT afterwards; what it counted is checked against N (bare: its count; ksymwatch: hits or filtered from
its summary; bpftrace: its map) and shown in the table's last column. Every measurement (tracer start to
stop, `none` included) holds /tmp/ksymwatch-live-tests.lock; the writers start and end outside it.
`--jsonl` prints one JSON object per measurement and per mode instead of the progress lines.

Beside the wall time, each measurement reads the writer's /proc/PID/schedstat before "go" and after
"done": its time on a CPU (the stores, the traps and everything the kernel and the BPF programs do at
them; not the time other tasks ran instead) and its time waiting runnable for a CPU (what other tasks,
the tracer's reader among them, took from it). On a loaded machine the wall time carries other jobs'
preemptions; the on-CPU time does not, so its `paired` column is the steadier measure of the traps'
own cost, and the waiting column shows what the tracer's reader (or anyone else) took from the writer.

On a VM whose speed drifts (another guest on the host), the medians of separate runs can differ by more
than a watch costs. The table's `paired` column is therefore the median over runs of each mode minus that
run's `bare`; with `--adjacent` every mode's measurement is preceded by a `bare` one of its own, and the
pair's difference is used instead (twice the time, drift between the two a second or so).

Needs root, gcc and a release build (built here unless --binary is given).
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Locked  # noqa: E402

ALL_MODES = ("none", "bare", "plain", "plain-normal", "value", "if", "other", "bpftrace")
NO_MATCH = 12345678  # the writer stores 0..N-1; keep N below this so `--if` never matches
LABELS = {
    "none": "none (no watch)",
    "bare": "bare: counting breakpoint per CPU (`bench-bare-count`)",
    "plain": "`ksymwatch write ADDR/8 --quiet`",
    "plain-normal": "`ksymwatch write ADDR/8 --quiet --realtime off`",
    "value": "`ksymwatch write ADDR/8 --value --quiet`",
    "if": f"`ksymwatch write ADDR/8 --if 'value == {NO_MATCH}' --quiet` (all dropped)",
    "other": "`ksymwatch write -p OTHER ADDR/8 --quiet` (all dropped: other process)",
    "bpftrace": "`bpftrace -e 'watchpoint:ADDR:8:w { @ = count(); }'`",
}


class Writer:
    """One `writer write N CPU` process: banner read, waiting for "go"."""

    def __init__(self, binary, n, cpu):
        self.p = subprocess.Popen([binary, "write", str(n), str(cpu)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        banner = self.p.stdout.readline()
        try:
            fields = dict(kv.split("=", 1) for kv in banner.split())
            self.addr, self.pid = fields["addr"], int(fields["pid"])
        except (ValueError, KeyError):
            self.close()
            raise SystemExit(f"writer: unexpected banner {banner!r}")

    def schedstat(self):
        """The writer's (on-CPU ns, waiting-runnable ns) so far, from /proc/PID/schedstat."""
        with open(f"/proc/{self.p.pid}/schedstat") as f:
            on_cpu, waited, _ = (int(x) for x in f.read().split())
        return on_cpu, waited

    def run(self):
        """Sends "go" and waits for "done": the wall time of the N stores (pinning and the pipe included).
        Leaves the writer's on-CPU and waiting time over the same span in `self.sched` (seconds each)."""
        s0 = self.schedstat()
        t0 = time.perf_counter()
        self.p.stdin.write("go\n")
        self.p.stdin.flush()
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise SystemExit("writer exited before 'done'")
            if line.strip() == "done":
                secs = time.perf_counter() - t0
                s1 = self.schedstat()
                self.sched = ((s1[0] - s0[0]) / 1e9, (s1[1] - s0[1]) / 1e9)
                return secs

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def wait_marker(p, path, marker, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            if marker in f.read(1 << 16):
                return True
        if p.poll() is not None:
            return False
        time.sleep(0.005)
    return False


def stop(p, timeout=30.0):
    """SIGINT, then SIGKILL if it does not exit in time; returns the exit status."""
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return p.returncode


def tracer_argv(mode, addr, other_pid, ksym, bare):
    if mode == "bare":
        return [bare, addr, "8"], "out", "# armed"
    if mode == "bpftrace":
        prog = f'watchpoint:{addr}:8:w {{ @ = count(); }} BEGIN {{ printf("armed\\n"); }}'
        return ["bpftrace", "-e", prog], "out", "armed\n"
    argv = [ksym, "write"]
    if mode == "other":
        argv += ["-p", str(other_pid)]
    argv += [f"{addr}/8", "--quiet", "--no-status"]
    argv += {"value": ["--value"], "if": ["--if", f"value == {NO_MATCH}"],
             "plain-normal": ["--realtime", "off"]}.get(mode, [])
    return argv, "err", "armed"


def check(mode, n, out, err):
    """What the tracer saw, as a short note, and whether it is what the mode should see."""
    if mode == "none":
        return "-", True
    if mode == "bare":
        m = re.search(r"count=(\d+)", out)
        c = int(m.group(1)) if m else None
        return f"count {c}", c is not None and c >= n
    if mode == "bpftrace":
        m = re.search(r"^@: (\d+)", out, re.M)
        c = int(m.group(1)) if m else None
        return f"@ {c}", c is not None and c >= n
    hits = re.search(r"ksymwatch: (\d+) hits", err)
    lost = re.search(r"(\d+) lost", err)
    filt = re.search(r"(\d+) filtered", err)
    hits, lost, filt = (int(x.group(1)) if x else 0 for x in (hits, lost, filt))
    note = f"{hits} hits, {lost} lost, {filt} filtered"
    if mode in ("plain", "plain-normal", "value"):
        return note, hits >= n and lost == 0
    return note, hits == 0 and filt >= n


# The last measurement's writer (on-CPU, waiting) seconds: `measure` keeps its three results for its callers.
last_sched = (0.0, 0.0)


def measure(mode, n, cpu, writer_bin, ksym, bare, work, label):
    """One measurement of one mode: returns (writer seconds, tracer note, tracer's count as expected); the
    writer's on-CPU and waiting seconds in `last_sched`."""
    global last_sched
    w = Writer(writer_bin, n, cpu)
    other = None
    tracer = None
    try:
        if mode == "other":
            other = Writer(writer_bin, 0, 0)  # never sent "go": it stores nothing, only holds the address
            if other.addr != w.addr:
                raise SystemExit(f"writers disagree on the global's address: {w.addr} {other.addr} (PIE?)")
        out_path, err_path = os.path.join(work, f"{label}.out"), os.path.join(work, f"{label}.err")
        with Locked():
            if mode == "none":
                secs = w.run()
            else:
                argv, where, marker = tracer_argv(mode, w.addr, other.pid if other else None, ksym, bare)
                with open(out_path, "w") as o, open(err_path, "w") as e:
                    tracer = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=o, stderr=e)
                    if not wait_marker(tracer, out_path if where == "out" else err_path, marker):
                        stop(tracer)
                        raise SystemExit(f"{label}: not armed: {open(err_path).read()[-600:]}")
                    secs = w.run()
                    status = stop(tracer)
                tracer = None
                if status != 0:
                    print(f"{label}: tracer exit status {status}: {open(err_path).read()[-400:]}",
                          file=sys.stderr)
        last_sched = w.sched
        if mode == "none":
            return secs, "-", True
        note, ok = check(mode, n, open(out_path, errors="replace").read(), open(err_path, errors="replace").read())
        return secs, note, ok
    finally:
        if tracer is not None:
            stop(tracer)
        w.close()
        if other:
            other.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100000, help="stores per measurement (default 100000)")
    ap.add_argument("-k", "--runs", type=int, default=5, help="runs, each measuring every mode (default 5)")
    ap.add_argument("--cpu", type=int, default=1, help="the writer's CPU (default 1)")
    ap.add_argument("--modes", help="comma-separated, of: " + ",".join(ALL_MODES))
    ap.add_argument("--binary", help="ksymwatch binary (default: this tree's release build, built first)")
    ap.add_argument("--jsonl", action="store_true", help="JSON lines instead of progress and table")
    ap.add_argument("--adjacent", action="store_true",
                    help="measure bare right before each other mode and pair the two (see the doc)")
    a = ap.parse_args()
    if a.n >= NO_MATCH:
        raise SystemExit(f"-n must stay below {NO_MATCH} (the `if` mode's value, which must never be stored)")
    modes = a.modes.split(",") if a.modes else [m for m in ALL_MODES if m != "bpftrace" or shutil.which("bpftrace")]
    for m in modes:
        if m not in ALL_MODES:
            raise SystemExit(f"unknown mode {m}; modes are {', '.join(ALL_MODES)}")
    ksym = a.binary or os.path.join(ROOT, "target/release/ksymwatch")
    work = tempfile.mkdtemp(prefix="ksymwatch-bench-writer-")
    try:
        if not a.binary:
            subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        writer_bin, bare = os.path.join(work, "writer"), os.path.join(work, "bench-bare-count")
        subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-no-pie", "-o", writer_bin,
                        os.path.join(ROOT, "tests/helpers/writer.c")], check=True)
        subprocess.run(["gcc", "-O2", "-Wall", "-o", bare, os.path.join(ROOT, "scripts/bench-bare-count.c")],
                       check=True)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        head = (f"writer cost per store: {a.n} stores on cpu {a.cpu}, {a.runs} runs, ksymwatch {commit}, "
                f"{os.uname().release}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
        if a.jsonl:
            print(json.dumps({"type": "header", "n": a.n, "runs": a.runs, "cpu": a.cpu, "commit": commit,
                              "kernel": os.uname().release, "load": os.getloadavg()[0]}), flush=True)
        else:
            print(head, flush=True)
        results = {m: [] for m in modes}
        notes = {m: [] for m in modes}
        # Per mode, its cost minus a bare measurement's: the same run's, or with --adjacent the one just before.
        pairs = {m: [] for m in modes}
        # The same for the writer's on-CPU time, and its time waiting for a CPU, in us per store.
        cpu_us = {m: [] for m in modes}
        cpu_pairs = {m: [] for m in modes}
        wait_us = {m: [] for m in modes}
        for run in range(a.runs):
            order = modes[run % len(modes):] + modes[:run % len(modes)]
            floor, cpu_floor = {}, {}
            for mode in order:
                if a.adjacent and mode != "bare" and "bare" in modes:
                    secs, _, _ = measure("bare", a.n, a.cpu, writer_bin, ksym, bare, work, f"bare-{mode}-{run}")
                    floor[mode] = secs * 1e6 / a.n
                    cpu_floor[mode] = last_sched[0] * 1e6 / a.n
                secs, note, ok = measure(mode, a.n, a.cpu, writer_bin, ksym, bare, work, f"{mode}-{run}")
                us = secs * 1e6 / a.n
                on_cpu, waited = (x * 1e6 / a.n for x in last_sched)
                results[mode].append(us)
                cpu_us[mode].append(on_cpu)
                wait_us[mode].append(waited)
                notes[mode].append((note, ok))
                if a.jsonl:
                    print(json.dumps({"type": "run", "run": run, "mode": mode, "writer_us_per_store": us,
                                      "on_cpu_us_per_store": on_cpu, "waited_us_per_store": waited,
                                      "tracer": note, "as_expected": ok}), flush=True)
                else:
                    print(f"  run {run} {mode:<8} {us:8.3f} us/store (on cpu {on_cpu:.3f}, waited {waited:.3f})  "
                          f"{note}{'' if ok else '  (UNEXPECTED)'}", flush=True)
            if "bare" in modes:
                for mode in modes:
                    if mode != "bare":
                        pairs[mode].append(results[mode][-1] - floor.get(mode, results["bare"][-1]))
                        cpu_pairs[mode].append(cpu_us[mode][-1] - cpu_floor.get(mode, cpu_us["bare"][-1]))
        med = {m: statistics.median(v) for m, v in results.items()}
        paired = {m: statistics.median(v) for m, v in pairs.items() if v}
        cpu_med = {m: statistics.median(v) for m, v in cpu_us.items()}
        cpu_paired = {m: statistics.median(v) for m, v in cpu_pairs.items() if v}
        wait_med = {m: statistics.median(v) for m, v in wait_us.items()}
        base = med.get("bare")
        if a.jsonl:
            for m in modes:
                print(json.dumps({"type": "median", "mode": m, "writer_us_per_store": med[m],
                                  "all": results[m], "minus_bare": None if base is None else med[m] - base,
                                  "paired": paired.get(m), "pairs": pairs[m],
                                  "on_cpu": cpu_med[m], "on_cpu_paired": cpu_paired.get(m),
                                  "on_cpu_pairs": cpu_pairs[m], "waited": wait_med[m],
                                  "as_expected": all(ok for _, ok in notes[m])}), flush=True)
            return
        print(f"\n{head}, load at the end {os.getloadavg()[0]:.2f}\n")
        how = "the bare just before it" if a.adjacent else "the same run's bare"
        print(f"| mode | writer us/store, median of {a.runs} | the {a.runs} runs | minus bare | "
              f"paired: median of (mode - {how}) | tracer saw (last run) |")
        print("| --- | --- | --- | --- | --- | --- |")
        for m in modes:
            diff = "-" if base is None or m == "bare" else f"{med[m] - base:+.3f}"
            pair = f"**{paired[m]:+.3f}**" if m in paired else "-"
            runs = " ".join(f"{x:.3f}" for x in results[m])
            note, _ = notes[m][-1]
            bad = sum(1 for _, ok in notes[m] if not ok)
            if bad:
                note += f" ({bad} of {a.runs} runs not as expected)"
            print(f"| {LABELS[m]} | **{med[m]:.3f}** | {runs} | {diff} | {pair} | {note} |")
        print(f"\nThe writer's time on a CPU and waiting for one (/proc/PID/schedstat), us per store, median of "
              f"{a.runs}; paired as above:\n")
        print("| mode | on a CPU | paired on a CPU | the runs on a CPU | waiting for a CPU | the runs waiting |")
        print("| --- | --- | --- | --- | --- | --- |")
        for m in modes:
            pair = f"**{cpu_paired[m]:+.3f}**" if m in cpu_paired else "-"
            print(f"| {LABELS[m]} | {cpu_med[m]:.3f} | {pair} | {' '.join(f'{x:.3f}' for x in cpu_us[m])} | "
                  f"{wait_med[m]:.3f} | {' '.join(f'{x:.3f}' for x in wait_us[m])} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
