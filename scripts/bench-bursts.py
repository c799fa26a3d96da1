#!/usr/bin/env python3
"""Bursts at default options (issue #40, item 3): many threads storing at once into one watched global, the
writers outnumbering the CPUs, and how many hits the stream loses. One binary, four settings side by side
in the same run, interleaved run by run:

  before:    --buffer-pages 128 --realtime off  (the fixed 128-page rings and normal priority of before)
  rings:     --realtime off                     (the default ring size only)
  priority:  --buffer-pages 128                 (the reader's SCHED_FIFO only)
  after:     (defaults)
  smallest:  --buffer-pages 1 --realtime off --folded=FILE   (issue #40's exactness check: the smallest
             rings and a reader at normal priority, so the stream drops hits, and the summary's hits and the
             folded stacks' counts must still equal the stores; not in the default list)

Workloads (tests/helpers/threads.c `tagged N COUNT 0`: N threads released together, COUNT plain stores
each into target_var):

  p64:      64 threads x 1,000 stores, `ksymwatch write -p PID target_var`
  launch96: 96 threads x 700 stores, `ksymwatch write target_var -- threads tagged 96 700 0`
  value5:   5 threads x 3,000 stores, `-p PID --value`
  p512:     512 threads x 200 stores, `-p PID` (not in the default list)
  p10k:     10,000 threads x 1 store, `-p PID` (not in the default list)
  launch10k: 10,000 threads x 1 store, `-- CMD` (not in the default list)
  churn8:   `threads churn 8`: 8 chains of short-lived threads (each stores once, starts the next and
            exits; ~15,000 threads a second here), watched with `-p P -p P` (the one process named twice),
            the stores counted for 1.5 s after "go" (not in the default list)

`--load L` runs L busy loops (`sh -c 'while :; do :; done'`, normal priority) through every run, as the
other builds a shared machine runs: with none, the 2-CPU VM here rarely loses a hit either way.

Each run prints stores, the hit lines printed (ip at ksw_thread_store), the summary's hits and lost, and with
`smallest` the folded stacks' total (stacks through ksw_thread_store); the table is the median and the
range of lost over K runs, and for `smallest` whether the summary and the folded totals equalled the stores
in every run. Output goes to a file (text, the default format).

    sudo scripts/bench-bursts.py [-k K] [--load L] [--workloads p64,launch96,value5] [path/to/ksymwatch]
        (default binary: target/release/ksymwatch)

Needs root and gcc. Each run holds /tmp/ksymwatch-live-tests.lock (flock, as the live tests do): do not
start the script itself under flock.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Locked  # noqa: E402

SETTINGS = {
    "before": ["--buffer-pages", "128", "--realtime", "off"],
    "rings": ["--realtime", "off"],
    "priority": ["--buffer-pages", "128"],
    "after": [],
    "smallest": ["--buffer-pages", "1", "--realtime", "off"],
}
WORKLOADS = {
    "p64": (64, 1000, False, []),
    "launch96": (96, 700, True, []),
    "value5": (5, 3000, False, ["--value"]),
    "p512": (512, 200, False, []),
    "p10k": (10000, 1, False, []),
    "launch10k": (10000, 1, True, []),
    "churn8": (8, None, False, []),
}
CHURN_S = 1.5
SUMMARY = re.compile(r"ksymwatch: (\d+) hits .*?, (\d+) lost")


def wait_for(f, pred, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        line = f.readline()
        if line:
            if pred(line):
                return line
        else:
            time.sleep(0.005)
    raise RuntimeError("timed out")


def run(binary, helper, workload, setting, tmp):
    n, count, launch, extra = WORKLOADS[workload]
    out_path = os.path.join(tmp, "out.txt")
    err_path = os.path.join(tmp, "err.txt")
    folded_path = os.path.join(tmp, "folded.txt")
    argv = [binary, "write"] + SETTINGS[setting] + extra
    if setting == "smallest":
        argv.append(f"--folded={folded_path}")
    churn = count is None
    mode = ["churn", str(n)] if churn else ["tagged", str(n), str(count), "0"]
    with Locked(), open(out_path, "w") as out, open(err_path, "w") as err:
        if launch:
            argv += ["target_var", "--", helper] + mode
            t = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, text=True)
            with open(out_path) as r:
                wait_for(r, lambda l: l.startswith("# armed"))
            # The helper prints `ready` and reads `go` from the stdin it shares with the tracer.
            t.stdin.write("go\n")
            t.stdin.close()
            t.wait(timeout=120)
            stores = n * count
        else:
            h = subprocess.Popen([helper] + mode, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            wait_for(h.stdout, lambda l: l.strip() == "ready")
            pids = ["-p", str(h.pid)] * (2 if churn else 1)
            argv += pids + ["target_var"]
            t = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, text=True)
            with open(out_path) as r:
                wait_for(r, lambda l: l.startswith("# armed"))
            h.stdin.write("go\n")
            h.stdin.flush()
            if churn:
                time.sleep(CHURN_S)
                h.stdin.write("stop\n")
                h.stdin.flush()
                line = wait_for(h.stdout, lambda l: l.startswith("stores="))
                stores = int(line.strip().split("=")[1])
            else:
                stores = n * count
            wait_for(h.stdout, lambda l: l.strip() == "done")
            h.stdin.close()
            h.wait(timeout=60)
            t.wait(timeout=120)
    with open(out_path) as f:
        printed = sum(1 for line in f if " ip=ksw_thread_store" in line)
    with open(err_path) as f:
        text = f.read()
    m = SUMMARY.search(text)
    if not m:
        raise RuntimeError(f"no summary: {text[-500:]}")
    folded = None
    if setting == "smallest":
        with open(folded_path) as f:
            folded = sum(int(line.rsplit(" ", 1)[1]) for line in f if "ksw_thread_store" in line)
    return stores, printed, int(m.group(1)), int(m.group(2)), folded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-k", type=int, default=5)
    ap.add_argument("--load", type=int, default=0)
    ap.add_argument("--workloads", default="p64,launch96,value5")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("binary", nargs="?", default=os.path.join(ROOT, "target/release/ksymwatch"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ksw-bursts-")
    helper = os.path.join(tmp, "threads")
    subprocess.run(["gcc", "-O1", "-pthread", "-no-pie", "-o", helper,
                    os.path.join(ROOT, "tests/helpers/threads.c")], check=True)
    settings = a.settings.split(",")
    rows = []
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(a.load)]
    try:
        measure(a, helper, settings, rows, tmp)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    print("| workload | setting | lost, median | range | stores | summary and folded = stores |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


def measure(a, helper, settings, rows, tmp):
    for w in a.workloads.split(","):
        lost = {s: [] for s in settings}
        stores_seen = {s: [] for s in settings}
        exact = {s: True for s in settings}
        for k in range(a.k):
            for s in settings:
                stores, printed, hits, lst, folded = run(a.binary, helper, w, s, tmp)
                print(f"{w} {s} run {k + 1}: stores {stores} printed {printed} hits {hits} lost {lst}"
                      + (f" folded {folded}" if folded is not None else "") + f" load {os.getloadavg()[0]:.2f}",
                      flush=True)
                lost[s].append(lst)
                stores_seen[s].append(stores)
                if folded is not None:
                    # A launched command is armed after its exec (whose .bss zeroing is then done), so
                    # every hit is a store here.
                    exact[s] &= hits == stores and folded == stores and lst == 0
        for s in settings:
            v = lost[s]
            st = stores_seen[s]
            note = "" if s != "smallest" else (" exact" if exact[s] else " **NOT exact**")
            rows.append(f"| {w} | {s} | {statistics.median(v):,.0f} | {min(v):,}-{max(v):,} | "
                        f"{min(st):,}" + (f"-{max(st):,}" if max(st) != min(st) else "") + f" |{note} |")


if __name__ == "__main__":
    main()
