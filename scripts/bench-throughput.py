#!/usr/bin/env python3
"""Throughput: tracer CPU per hit under a flood of stores into one watched global.

    sudo scripts/bench-throughput.py [N] [--quiet]                  one writer on cpu 0, text (+ --quiet), perf
    sudo scripts/bench-throughput.py N --flood [--modes LIST] [--runs K] [--idle] [--jsonl] [--no-perf]
                                     [--profile DIR] [--binary PATH]

N is the number of stores per writer (default 500000). `--flood` starts one writer process per online CPU,
each pinned to its CPU and storing N times into its `target_var`; the writer is built `-no-pie`, so that
global has the same address in every writer and one system-wide watch (or `-p A -p B`) sees all of them.
The writers start storing together, after the tracer printed its armed mark. Without `--flood`, one writer
on cpu 0 (the original single-CPU measurement).

Modes (`--modes`, comma-separated, in this order each run; default `text,quiet` without --flood and
`text,json,quiet` with it):
    text      ksymwatch write ADDR/8              (ftrace text, stdout redirected to a file)
    json      ksymwatch write ADDR/8 --json       (NDJSON to a file)
    quiet     ksymwatch write ADDR/8 --quiet      (summary only)
    process   ksymwatch write -p PID... ADDR/8    (text, task-bound events, `value=` read per hit)
    value     ksymwatch write ADDR/8 --quiet --value   (every hit sampled, the BPF program attached)
    if        ksymwatch write ADDR/8 --quiet --if 'value < K', K = N // 1000: the writers store 0..N-1, so
              one store in 1000 matches (K hits per writer); the rest are dropped in the kernel
    perfetto  ksymwatch write ADDR/8 --quiet --perfetto FILE   (the Perfetto trace only, besides the summary)
    otlp      ksymwatch write ADDR/8 --format otlp-json        (OTLP/JSON logs to a file)
    flight    ksymwatch write ADDR/8 --last 100000 --dump-on signal   (the flight recorder keeps every hit's
              fields and prints none: never signalled, it prints only its header and the summary)
    bare      scripts/bench-bare-count.c: one write breakpoint per online CPU, counting only (no ring, no BPF
              program, no sample): the trap itself, the floor of any system-wide watch (bench-writer.py's
              `bare`); its hits are its count
    none      no tracer at all: the writers' own cost per store, the baseline for writer_s
    perf      perf record -e mem:ADDR/8:w -a -g + perf script (also added by default unless --no-perf)

For each run and mode: hits captured (counted in the output by the writers' tids, or from the summary line
when no hit is printed: quiet, value, if, perfetto, flight) out of the stores, records lost, tracer CPU user+sys (perf script included for perf), CPU per
hit, peak RSS, voluntary context switches (wake-ups) and write(2) calls of the tracer (/proc/PID/io, read
just before it is stopped). `--idle` also runs each ksymwatch mode once with writers that store nothing,
for as long as the flood took, and reports the marginal CPU per hit (flood CPU minus idle CPU, over hits):
the start-up (kallsyms, process scans) and the idle loop taken out. `--runs K` repeats every mode K times,
alternating, and prints the median. `--jsonl` prints one JSON object per measurement on stdout instead of
the table (fields: mode, run, stores, hits, lost, cpu_s, user_s, sys_s, us_per_hit, rss_mb, nvcsw,
syscw, wchar, writer_s, filtered; idle runs have mode "idle-MODE"; a final object has type "median").
The medians end with a per-store table (mode, stores, hits, lost, filtered, tracer CPU us per store, with
--idle also at the margin, and the writer's wall time per store, writer_s / N: the writers run in
parallel, so that is what one store cost its writer, trap and BPF program included).
`--allocs` counts the tracer's malloc, calloc and realloc calls over its whole run with an LD_PRELOAD
shim (field allocs; the idle run's count is the start-up's, and the summary line gives the difference
per hit). `--profile DIR` records `perf record -e cpu-clock -g` of the tracer for each ksymwatch run into
DIR/MODE-RUN.data. `--binary` runs another ksymwatch build (default: this tree's release build).

Every run holds /tmp/ksymwatch-live-tests.lock (the debug registers are shared with the live tests).
Needs root and gcc; perf is optional.
"""
import argparse
import fcntl
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import LOCK, ROOT, online_cpus

KSYM_MODES = ("text", "json", "quiet", "process", "value", "if", "perfetto", "otlp", "flight")
TRACER_MODES = KSYM_MODES + ("bare",)  # run as a process over the flood by ksymwatch() below
SUMMARY_MODES = ("quiet", "value", "if", "perfetto")  # print only the summary: armed mark on stderr
UNPRINTED_MODES = SUMMARY_MODES + ("flight",)  # print no hit: hits counted from the summary line
FLAGS = {"json": ["--json"], "quiet": ["--quiet"], "value": ["--quiet", "--value"], "otlp": ["--format", "otlp-json"],
         "flight": ["--last", "100000", "--dump-on", "signal"]}


class Writers:
    """One writer process per CPU, each waiting for "go"."""

    def __init__(self, binary, n, cpus):
        self.procs = []
        self.tids = set()
        self.pids = []
        addrs = set()
        for cpu in cpus:
            w = subprocess.Popen([binary, "write", str(n), str(cpu)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
            fields = dict(kv.split("=", 1) for kv in w.stdout.readline().split())
            addrs.add(fields["addr"])
            self.tids.add(int(fields["tid"]))
            self.pids.append(int(fields["pid"]))
            self.procs.append(w)
        if len(addrs) != 1:
            raise SystemExit(f"writers disagree on the global's address: {addrs} (built without -no-pie?)")
        self.addr = addrs.pop()

    def run(self):
        """Starts every writer at once and waits for all; returns the wall time."""
        t0 = time.monotonic()
        for w in self.procs:
            w.stdin.write("go\n")
            w.stdin.flush()
        for w in self.procs:
            while w.stdout.readline().strip() != "done":
                pass
        return time.monotonic() - t0

    def close(self):
        for w in self.procs:
            w.stdin.close()
            w.wait()


def io_counts(pid):
    try:
        text = open(f"/proc/{pid}/io").read()
    except OSError:
        return {}
    return {k: int(v) for k, v in (line.split(": ") for line in text.splitlines())}


def wait_for(path, marker, deadline):
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            if marker in f.read(1 << 16):
                return True
        time.sleep(0.01)
    return False


def count_hits(mode, out, err, tids):
    if mode == "bare":
        m = re.search(r"count=(\d+)", open(out).read())
        return int(m.group(1)) if m else None
    if mode in UNPRINTED_MODES:
        m = re.search(r"(\d+) hits", open(err).read())
        return int(m.group(1)) if m else None
    n = 0
    if mode == "json":
        for line in open(out, errors="replace"):
            if line.startswith('{"type":"hit"'):
                m = re.search(r'"tid":(\d+)', line)
                n += bool(m and int(m.group(1)) in tids)
        return n
    if mode == "otlp":
        # A line is a batch of records; a hit's is the one with a thread.id.
        pat = re.compile(r'"key":"thread\.id","value":\{"intValue":"(\d+)"')
        for line in open(out, errors="replace"):
            n += sum(int(t) in tids for t in pat.findall(line))
        return n
    pat = re.compile(r"\s*\S+-(\d+)\s+\[")
    for line in open(out, errors="replace"):
        m = pat.match(line)
        n += bool(m and int(m.group(1)) in tids)
    return n


# LD_PRELOAD shim for --allocs: counts malloc/calloc/realloc calls, printed on stderr at exit (uprobes need
# tracefs, which is not mounted here).
ALLOC_SHIM = r"""
#include <stddef.h>
#include <unistd.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static unsigned long n;
void *malloc(size_t s) { __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED); return __libc_malloc(s); }
void *calloc(size_t a, size_t b) { __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED); return __libc_calloc(a, b); }
void *realloc(void *p, size_t s) { __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED); return __libc_realloc(p, s); }
__attribute__((destructor)) static void report(void) {
    char buf[48] = "ksw-allocs ";
    char digits[24];
    int i = 0, k = 11;
    unsigned long v = n;
    do { digits[i++] = '0' + v % 10; v /= 10; } while (v);
    while (i) buf[k++] = digits[--i];
    buf[k++] = '\n';
    (void)!write(2, buf, k);
}
"""


def tracer_argv(binary, mode, writers, work, label, cond):
    if mode == "bare":
        return [os.path.join(work, "bench-bare-count"), writers.addr, "8"]
    argv = [binary, "write"]
    if mode == "process":
        for pid in writers.pids:
            argv += ["-p", str(pid)]
    argv.append(f"{writers.addr}/8")
    argv += FLAGS.get(mode, [])
    if mode == "if":
        argv += ["--quiet", "--if", cond]
    if mode == "perfetto":
        argv += ["--quiet", "--perfetto", os.path.join(work, f"{label}.pftrace")]
    return argv


def ksymwatch(binary, mode, writers, work, label, hold_s=None, profile=None, allocs=False, cond=None):
    """One tracer run (ksymwatch, or bare's counter) over one flood (or, with `hold_s`, that many idle seconds)."""
    argv = tracer_argv(binary, mode, writers, work, label, cond)
    out, err = os.path.join(work, f"{label}.out"), os.path.join(work, f"{label}.err")
    env = dict(os.environ, LD_PRELOAD=os.path.join(work, "alloc-count.so")) if allocs else None
    with open(out, "w") as o, open(err, "w") as e:
        p = subprocess.Popen(argv, stdout=o, stderr=e, env=env)
        marker_file, marker = (err, "armed") if mode in SUMMARY_MODES else (out, "armed")
        if not wait_for(marker_file, marker, time.monotonic() + 30):
            p.kill()
            raise SystemExit(f"{label}: no armed mark in 30 s: {open(err).read()}")
        prof = None
        if profile:
            prof = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-g", "-p", str(p.pid), "-o",
                                     os.path.join(profile, f"{label}.data")], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(0.3)
        if hold_s is None:
            writer_s = writers.run()
        else:
            time.sleep(hold_s)
            writer_s = hold_s
        time.sleep(0.3)
        io = io_counts(p.pid)
        if prof:
            prof.send_signal(2)
            prof.wait()
        p.send_signal(2)
        _, status, ru = os.wait4(p.pid, 0)
    lost = re.search(r"(\d+) lost", open(err).read())
    filtered = re.search(r"(\d+) filtered", open(err).read())
    if status != 0:
        print(f"{label}: tracer exit status {status}: {open(err).read()[-500:]}", file=sys.stderr)
    n_allocs = re.search(r"ksw-allocs (\d+)", open(err).read())
    n_allocs = int(n_allocs.group(1)) if n_allocs else None
    hits = None if hold_s is not None else count_hits(mode, out, err, writers.tids)
    return {"writer_s": writer_s, "user_s": ru.ru_utime, "sys_s": ru.ru_stime, "cpu_s": ru.ru_utime + ru.ru_stime,
            "rss_mb": ru.ru_maxrss // 1024, "nvcsw": ru.ru_nvcsw, "syscw": io.get("syscw"), "wchar": io.get("wchar"),
            "hits": hits, "lost": int(lost.group(1)) if lost else None, "status": status, "allocs": n_allocs,
            "filtered": int(filtered.group(1)) if filtered else 0}


def bare_run(writers):
    """The writers alone, no tracer: their own cost per store."""
    return {"writer_s": writers.run(), "user_s": 0.0, "sys_s": 0.0, "cpu_s": 0.0, "rss_mb": 0, "nvcsw": 0,
            "syscw": None, "wchar": None, "hits": 0, "lost": 0, "filtered": 0}


def perf_run(writers, work):
    data = os.path.join(work, "perf.data")
    p = subprocess.Popen(["perf", "record", "-q", "-e", f"mem:{writers.addr}/8:w", "-a", "-g", "-o", data],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)  # perf prints no armed mark; its start-up is ~1.3 s here
    writer_s = writers.run()
    time.sleep(0.3)
    p.send_signal(2)
    _, _, ru = os.wait4(p.pid, 0)
    t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    script = subprocess.run(["perf", "script", "-i", data, "-F", "tid,ip,sym"], capture_output=True, text=True)
    t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    hits = sum(1 for line in script.stdout.splitlines() if line.strip().split(" ")[0].isdigit()
               and int(line.strip().split(" ")[0]) in writers.tids)
    stats = subprocess.run(["perf", "report", "-i", data, "--stats"], capture_output=True, text=True).stdout
    lost = re.search(r"LOST events:\s+(\d+)", stats)
    user = ru.ru_utime + t1.ru_utime - t0.ru_utime
    sys_ = ru.ru_stime + t1.ru_stime - t0.ru_stime
    return {"writer_s": writer_s, "user_s": user, "sys_s": sys_, "cpu_s": user + sys_, "rss_mb": ru.ru_maxrss // 1024,
            "nvcsw": ru.ru_nvcsw, "syscw": None, "wchar": None, "hits": hits, "lost": int(lost.group(1)) if lost else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=500000, help="stores per writer")
    ap.add_argument("--quiet", action="store_true", help="also measure --quiet (single-CPU form)")
    ap.add_argument("--flood", action="store_true", help="one writer per online CPU, all at once")
    ap.add_argument("--modes", help="comma-separated: " + ",".join(TRACER_MODES + ("none", "perf")))
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--idle", action="store_true", help="also measure idle runs; report marginal CPU per hit")
    ap.add_argument("--jsonl", action="store_true", help="one JSON object per measurement on stdout")
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--profile", metavar="DIR", help="cpu-clock profile of each ksymwatch run into DIR")
    ap.add_argument("--allocs", action="store_true",
                    help="count the tracer's malloc/calloc/realloc calls (LD_PRELOAD shim)")
    ap.add_argument("--binary", help="ksymwatch binary (default: this tree's release build)")
    a = ap.parse_args()
    if a.modes:
        modes = a.modes.split(",")
    else:
        modes = ["text", "json", "quiet"] if a.flood else ["text"] + (["quiet"] if a.quiet else [])
        if not a.no_perf and shutil.which("perf"):
            modes.append("perf")
    for m in modes:
        if m not in TRACER_MODES + ("perf", "none"):
            raise SystemExit(f"unknown mode {m}; modes are {', '.join(TRACER_MODES)}, none, perf")
    cond = f"value < {a.n // 1000}"
    cpus = online_cpus() if a.flood else [0]
    work = tempfile.mkdtemp(prefix="ksymwatch-bench-")
    if a.profile:
        os.makedirs(a.profile, exist_ok=True)
    binary = a.binary or os.path.join(ROOT, "target/release/ksymwatch")
    try:
        if not a.binary:
            subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        writer = os.path.join(work, "writer")
        subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-no-pie", "-o", writer,
                        os.path.join(ROOT, "tests/helpers/writer.c")], check=True)
        if "bare" in modes:
            subprocess.run(["gcc", "-O2", "-Wall", "-o", os.path.join(work, "bench-bare-count"),
                            os.path.join(ROOT, "scripts/bench-bare-count.c")], check=True)
        if a.allocs:
            shim = os.path.join(work, "alloc-count.c")
            open(shim, "w").write(ALLOC_SHIM)
            subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", os.path.join(work, "alloc-count.so"), shim],
                           check=True)
        total = a.n * len(cpus)
        if not a.jsonl:
            print(f"throughput: {a.n} stores by each of {len(cpus)} writer(s) on cpus {','.join(map(str, cpus))}, "
                  f"watched on all CPUs ({os.uname().release}, load {os.getloadavg()[0]:.2f})")
        results = {m: [] for m in modes}
        idle = {}
        lock = open(LOCK, "a")
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            for run in range(a.runs):
                for mode in modes:
                    w = Writers(writer, a.n, cpus)
                    try:
                        if mode == "perf":
                            r = perf_run(w, work)
                        elif mode == "none":
                            r = bare_run(w)
                        else:
                            r = ksymwatch(binary, mode, w, work, f"{mode}-{run}", profile=a.profile,
                                          allocs=a.allocs, cond=cond)
                    finally:
                        w.close()
                    r.update(mode=mode, run=run, stores=total,
                             us_per_hit=r["cpu_s"] * 1e6 / r["hits"] if r["hits"] else None)
                    results[mode].append(r)
                    report(a.jsonl, r)
                if a.idle and run == 0:
                    for mode in modes:
                        if mode in ("perf", "none", "bare"):
                            continue
                        w = Writers(writer, 0, cpus)
                        try:
                            hold = statistics.median(x["writer_s"] for x in results[mode])
                            r = ksymwatch(binary, mode, w, work, f"idle-{mode}", hold_s=hold, allocs=a.allocs,
                                          cond=cond)
                        finally:
                            w.close()
                        r.update(mode=f"idle-{mode}", run=0, stores=0, us_per_hit=None)
                        idle[mode] = r
                        report(a.jsonl, r)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
        table = []
        for mode in modes:
            rs = results[mode]
            med = {k: statistics.median(r[k] for r in rs) for k in ("cpu_s", "user_s", "sys_s", "writer_s")}
            per = sorted(r["us_per_hit"] for r in rs if r["us_per_hit"])
            m = {"type": "median", "mode": mode, "runs": len(rs), "us_per_hit": statistics.median(per) if per else None,
                 "us_per_hit_all": per, "lost": [r["lost"] for r in rs], "hits": [r["hits"] for r in rs],
                 "stores": total, **med}
            if mode in idle and idle[mode].get("allocs") is not None:
                extra_allocs = [(r["allocs"] - idle[mode]["allocs"]) / r["hits"] for r in rs
                                if r["hits"] and r["allocs"] is not None]
                m["allocs_per_hit"] = statistics.median(extra_allocs) if extra_allocs else None
            if mode in idle:
                marg = sorted((r["cpu_s"] - idle[mode]["cpu_s"]) * 1e6 / r["hits"] for r in rs if r["hits"])
                m["idle_cpu_s"] = idle[mode]["cpu_s"]
                m["marginal_us_per_hit"] = statistics.median(marg) if marg else None
            if a.jsonl:
                print(json.dumps(m), flush=True)
            else:
                extra = (f", marginal {m['marginal_us_per_hit']:.2f} us/hit (idle run {m['idle_cpu_s']:.2f} s)"
                         if m.get("marginal_us_per_hit") is not None else "")
                if m.get("allocs_per_hit") is not None:
                    extra += f", {m['allocs_per_hit']:.4f} mallocs/hit over the idle run's"
                print(f"  median {mode:<8} {m['us_per_hit'] or 0:.2f} us/hit over {len(rs)} run(s) "
                      f"[{' '.join(f'{x:.2f}' for x in per)}]{extra}")
            # Per store: the tracer's CPU over every store of every writer; the writer's wall time over its
            # own N stores (the writers run side by side, one per CPU).
            tracer = sorted(r["cpu_s"] * 1e6 / total for r in rs)
            writer_us = sorted(r["writer_s"] * 1e6 / a.n for r in rs)
            row = {"type": "per_store", "mode": mode, "runs": len(rs), "stores": total,
                   "hits": statistics.median(r["hits"] or 0 for r in rs),
                   "lost": max((r["lost"] or 0) for r in rs),
                   "filtered": statistics.median(r.get("filtered") or 0 for r in rs),
                   "tracer_us_per_store": statistics.median(tracer), "tracer_us_per_store_all": tracer,
                   "writer_us_per_store": statistics.median(writer_us), "writer_us_per_store_all": writer_us}
            if mode in idle:
                marg = sorted((r["cpu_s"] - idle[mode]["cpu_s"]) * 1e6 / total for r in rs)
                row["tracer_us_per_store_marginal"] = statistics.median(marg)
            table.append(row)
        if a.jsonl:
            for row in table:
                print(json.dumps(row), flush=True)
        else:
            print("\n  mode      stores     hits  lost  filtered  tracer us/store (margin)  writer us/store")
            for row in table:
                marg = row.get("tracer_us_per_store_marginal")
                marg = f"({marg:.3f})" if marg is not None else ""
                print(f"  {row['mode']:<8} {row['stores']:>7} {row['hits']:>8.0f} {row['lost']:>5} "
                      f"{row['filtered']:>9.0f}  {row['tracer_us_per_store']:>8.3f} {marg:<15}  "
                      f"{row['writer_us_per_store']:>8.3f}  [{' '.join(f'{x:.3f}' for x in row['writer_us_per_store_all'])}]")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(jsonl, r):
    if jsonl:
        print(json.dumps(r), flush=True)
        return
    per = f"{r['us_per_hit']:.2f} us/hit" if r["us_per_hit"] else "-"
    hits = "-" if r["hits"] is None else f"{r['hits']}/{r['stores']}"
    print(f"  {r['mode']:<13} writers {r['writer_s']:6.2f}s  hits {hits}  lost {r['lost']}  tracer CPU "
          f"{r['cpu_s']:6.2f}s (user {r['user_s']:.2f} sys {r['sys_s']:.2f}; {per})  peak RSS {r['rss_mb']} MB  "
          f"wakeups {r['nvcsw']}  writes {r['syscw']}"
          + (f"  mallocs {r['allocs']}" if r.get("allocs") is not None else ""), flush=True)


if __name__ == "__main__":
    main()
