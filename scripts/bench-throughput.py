#!/usr/bin/env python3
"""Throughput: N stores by one writer pinned to cpu 0, watched system-wide. Reports, for ksymwatch and, in
the same run, `perf record -e mem:ADDR/8:w -a -g` followed by `perf script`: hits captured, records lost,
the tracer's CPU time per hit end to end, and its peak RSS.

    sudo scripts/bench-throughput.py [N] [--quiet]     (default N = 500000; perf is optional)

--quiet also measures `ksymwatch --quiet` (summary only, no per-hit text).
"""
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_writer(work, n):
    w = subprocess.Popen([os.path.join(work, "writer"), "write", str(n), "0"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    banner = w.stdout.readline()
    fields = dict(kv.split("=", 1) for kv in banner.split())
    return w, fields["addr"], int(fields["tid"])


def run_writer(w):
    t0 = time.monotonic()
    w.stdin.write("go\n")
    w.stdin.flush()
    while w.stdout.readline().strip() != "done":
        pass
    elapsed = time.monotonic() - t0
    w.stdin.close()
    w.wait()
    return elapsed


def cpu_of(ru):
    return ru.ru_utime + ru.ru_stime


def measure(label, argv, work, n, tid, w, addr, armed_marker):
    out_path = os.path.join(work, f"{label}.out")
    with open(out_path, "w") as out, open(os.path.join(work, f"{label}.err"), "w") as err:
        p = subprocess.Popen(argv, stdout=out, stderr=err)
        deadline = time.monotonic() + 30
        while armed_marker and time.monotonic() < deadline:
            with open(out_path) as f:
                if armed_marker in f.read(4096):
                    break
            time.sleep(0.02)
        if not armed_marker:
            time.sleep(2)  # perf has no armed mark; its start-up is ~1.3 s here
        writer_s = run_writer(w)
        time.sleep(0.3)
        p.send_signal(2)
        _, status, ru = os.wait4(p.pid, 0)
    return writer_s, cpu_of(ru), ru.ru_maxrss // 1024, out_path


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 500000
    work = tempfile.mkdtemp(prefix="ksymwatch-bench-")
    try:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-o", os.path.join(work, "writer"),
                        os.path.join(ROOT, "tests/helpers/writer.c")], check=True)
        binary = os.path.join(ROOT, "target/release/ksymwatch")
        print(f"throughput: {n} stores by one writer on cpu 0, watched on all CPUs ({os.uname().release})")
        runs = [("ksymwatch", [])]
        if "--quiet" in sys.argv:
            runs.append(("ksymwatch --quiet", ["--quiet"]))
        for label, extra in runs:
            w, addr, tid = start_writer(work, n)
            marker = "# armed" if not extra else ""
            writer_s, cpu, rss, out = measure(label.replace(" ", "_"), [binary, "write", f"{addr}/8", *extra], work, n,
                                             tid, w, addr, marker)
            err = open(out.replace(".out", ".err")).read()
            lost = re.search(r"(\d+) lost", err)
            if extra:
                hits = re.search(r"(\d+) hits", err)
                hits = hits.group(1) if hits else "?"
            else:
                hits = sum(1 for line in open(out) if re.match(rf"\s*writer-{tid}\s", line))
            print(f"  {label:<18} writer {writer_s:6.2f}s  hits {hits}/{n}  lost {lost.group(1) if lost else '?'}  "
                  f"tracer CPU {cpu:6.2f}s ({cpu * 1e6 / n:.2f} us/hit)  peak RSS {rss} MB")
        if shutil.which("perf"):
            w, addr, tid = start_writer(work, n)
            data = os.path.join(work, "perf.data")
            writer_s, cpu, rss, _ = measure("perf", ["perf", "record", "-q", "-e", f"mem:{addr}/8:w", "-a", "-g",
                                                     "-o", data], work, n, tid, w, addr, "")
            t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            script = subprocess.run(["perf", "script", "-i", data, "-F", "tid,ip,sym"], capture_output=True, text=True)
            t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            script_cpu = cpu_of(t1) - cpu_of(t0)
            hits = sum(1 for line in script.stdout.splitlines() if line.strip().split(" ")[0] == str(tid))
            stats = subprocess.run(["perf", "report", "-i", data, "--stats"], capture_output=True, text=True).stdout
            lost = re.search(r"LOST events:\s+(\d+)", stats)
            total = cpu + script_cpu
            print(f"  {'perf record+script':<18} writer {writer_s:6.2f}s  hits {hits}/{n}  "
                  f"lost {lost.group(1) if lost else 0}  tracer CPU {total:6.2f}s ({total * 1e6 / n:.2f} us/hit: "
                  f"record {cpu:.2f}s, script {script_cpu:.2f}s)  peak RSS {rss} MB (record)")
        else:
            print("  perf not installed: no comparison (apt-get install linux-perf)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
