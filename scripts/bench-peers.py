#!/usr/bin/env python3
"""ksymwatch against perf and bpftrace, side by side in one run; the driver of scripts/bench.sh (which builds
the release binary, checks for root and kills anything left behind). Prints markdown tables for BENCHMARKS.md
with the targets of issue #12 next to the results.

1. Start to first hit on `__start_init_stack+0x3e00` (CPU0's idle stack, written hundreds of times a second
   while CPU0 idles; its address from `ksymwatch resolve`), median of K rounds, the tools interleaved:
   - `ksymwatch write __start_init_stack+0x3e00 --count 1`, cold (the kallsyms cache directory,
     $KSYMWATCH_CACHE_DIR or a private temporary one, removed first) and warm (right after the cold run). A
     build without the cache ignores the variable: then cold and warm are the same thing;
   - `bpftrace -e 'watchpoint:0xADDR:8:w { printf("hit\\n"); exit(); }'`: start to its `hit` line;
   - `perf record --no-buffering -e mem:0xADDR/8:w -a -g -o -`: start to the first sample record on its
     pipe (--no-buffering makes the kernel wake perf for every sample; without it the first sample can sit
     in the ring for minutes at this rate).
2. The flood: one non-PIE writer per CPU (tests/helpers/writer.c, so every writer's global is at the same
   address and one system-wide watch sees them all), pinned one per CPU and released together, each storing
   N times (default 150,000). For each tracer: hits it captured of the writers' stores (counted by the
   writers' tids in what it wrote, or the tool's own count where it writes no hits), what it says it lost,
   its CPU (user+sys from start to exit; for perf, `perf record` plus `perf script` into a file), its peak
   RSS, and how long the writers took. Tracers: ksymwatch text to a file (-o), `--json -o`, `--quiet`;
   `perf record -e mem:ADDR/8:w -a -g` (started with `-D -1 --control` so the flood starts once perf says its
   events are enabled) then `perf script`; `bpftrace -e 'watchpoint:ADDR:8:w { @[kstack, ustack] =
   count(); }'` plus `BEGIN { printf("armed\\n"); }` (bpftrace runs BEGIN once every probe is attached),
   which counts in a kernel map and prints the map at exit: it streams nothing per hit. bpftrace 0.17
   watches system-wide without -p (one event per CPU, pid -1), as ksymwatch and perf do; with -p it would
   open one event for that task only (no inherit), which is why the flood is separate processes at one
   non-PIE address rather than threads of one process.
3. The long run: scripts/bench-memory.py N (another script; it says how the tracer's RSS grows over N
   short-lived writers). Its last line `rss_after_100_kb=... rss_after_N_kb=... growth_pct=...` goes into
   the table; if the script is missing, the table says so.

    sudo scripts/bench.sh [--stores N] [--first-hit K] [--flood-runs K] [--memory N] [path/to/ksymwatch]

Every run that arms breakpoints holds /tmp/ksymwatch-live-tests.lock (as the live tests do), taken around
each run by this script, so waiting for it is not measured. Each child runs in its own session (Ctrl-C on
the terminal reaches only this script, which stops the tracers with SIGINT so they disarm, then SIGKILLs
whatever is left); their ids go to $BENCH_PIDFILE for bench.sh's trap in case this script itself is killed,
and its files to $BENCH_WORKDIR, which bench.sh removes (without it: a temporary directory of its own).
"""
import argparse
import datetime
import json
import os
import queue
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import LOCK, ROOT, Locked, proc_cpu_s  # noqa: E402
KERNEL_TARGET = "__start_init_stack+0x3e00"
FIRST_HIT_TIMEOUT = 30.0
NOT_INSTALLED = "not installed"

# Targets of issue #12.
CPU_PER_HIT_US = 0.5
WARM_FRACTION = 1 / 5
COLD_FRACTION = 1 / 2
GROWTH_PCT = 10.0

children = []  # every Popen this script started, each the leader of its own session


def spawn(argv, **kw):
    p = subprocess.Popen(argv, start_new_session=True, **kw)
    children.append(p)
    pidfile = os.environ.get("BENCH_PIDFILE")
    if pidfile:
        with open(pidfile, "a") as f:
            f.write(f"{p.pid}\n")
    return p


def reap(p):
    """Waits for p and returns its rusage (CPU, peak RSS of that process alone)."""
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru


def wait_exit(p, timeout):
    """p's rusage once it has exited, None if it is still running after timeout (or was reaped before)."""
    deadline = time.monotonic() + timeout
    while p.returncode is None:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return ru
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)
    return None


def stop(p, timeout=30):
    """SIGINT (a tracer's normal stop: it drains, reports and disarms), SIGKILL after timeout; rusage."""
    if p.returncode is not None:
        return None
    try:
        os.kill(p.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    ru = wait_exit(p, timeout)
    if ru is None and p.returncode is None:
        os.killpg(p.pid, signal.SIGKILL)
        ru = reap(p)
    return ru


def cleanup():
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C or bench.sh's TERM must not cut this short
    live = [p for p in children if p.returncode is None and p.poll() is None]
    for p in live:
        try:
            os.killpg(p.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 3
    for p in live:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in live:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.poll()




def cpu_s(ru):
    return ru.ru_utime + ru.ru_stime


def proc_cpu(pid):
    """CPU seconds (user+sys, all threads) p has used so far, from /proc (clock ticks: 10 ms here)."""
    try:
        return proc_cpu_s(pid)
    except (OSError, IndexError, ValueError):
        return None


def wait_idle(p, quiet_s=0.3, timeout=60):
    """Waits until p has used no CPU for quiet_s: it has drained what the flood left in its rings."""
    deadline = time.monotonic() + timeout
    last, since = proc_cpu(p.pid), time.monotonic()
    while time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
        now = proc_cpu(p.pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return


def wait_marker(p, path, marker, timeout=60):
    """True once file path contains marker; False if p exits first or after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, errors="replace") as f:
                if marker in f.read(1 << 16):
                    return True
        except FileNotFoundError:
            pass
        if p.poll() is not None:
            return False
        time.sleep(0.01)
    return False


def first_line(path):
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if line.strip():
                    return line.strip()[:200]
    except FileNotFoundError:
        pass
    return "no output"


# ---------------------------------------------------------------- start to first hit

class Reader:
    """Reads a child's stdout on a thread, handing results to the main thread with their arrival times."""

    def __init__(self, p, parse):
        self.q = queue.Queue()
        threading.Thread(target=self._run, args=(p.stdout, parse), daemon=True).start()

    def _run(self, stream, parse):
        try:
            for item in parse(stream):
                self.q.put((time.monotonic(), item))
        except (OSError, ValueError, struct.error):
            pass
        self.q.put((time.monotonic(), None))

    def get(self, deadline):
        try:
            return self.q.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None, None


def text_lines(stream):
    for raw in stream:
        yield raw.decode(errors="replace").rstrip("\n")


def perf_pipe_records(stream):
    """The record types of a `perf record -o -` stream, in order (pipe header, then perf_event_header +
    payload each). PERF_RECORD_SAMPLE is 9."""
    header = stream.read(16)
    if len(header) < 16 or header[:8] != b"PERFILE2":
        return
    while True:
        h = stream.read(8)
        if len(h) < 8:
            return
        typ, _misc, size = struct.unpack("<IHH", h)
        if size < 8:
            return
        stream.read(size - 8)
        yield typ


def time_to(argv, parse, want, env=None, exits=False):
    """{mark: ms from spawning argv} for each mark want(item) names on the child's stdout (its first time),
    up to the "hit" mark; a mark missing from the dict never came (exit, or FIRST_HIT_TIMEOUT). With exits
    (the tool ends by itself after its first hit), also "exit": when it had ended."""
    t0 = time.monotonic()
    p = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env)
    r = Reader(p, parse)
    deadline = t0 + FIRST_HIT_TIMEOUT
    marks = {}
    while True:
        t, item = r.get(deadline)
        if item is None:
            marks["end" if t is not None else "timeout"] = ((t or time.monotonic()) - t0) * 1e3
            break
        name = want(item)
        if name and name not in marks:
            marks[name] = (t - t0) * 1e3
            if name == "hit":
                if exits and wait_exit(p, 10) is not None:
                    marks["exit"] = (time.monotonic() - t0) * 1e3
                break
    stop(p, timeout=10)
    return marks


def ksymwatch_first_hit(binary, cache_dir, cold, target=(KERNEL_TARGET,)):
    """Milliseconds to `# armed` and to the first hit of `write TARGET --count 1` (`target`: the watch's
    arguments), its symbol cache emptied first when `cold`."""
    if cold:
        shutil.rmtree(cache_dir, ignore_errors=True)
    env = dict(os.environ, KSYMWATCH_CACHE_DIR=cache_dir)

    def want(line):
        if line.startswith("# armed"):
            return "armed"
        if line.strip() and not line.startswith("#"):
            return "hit"
        return None

    with Locked():
        return time_to([binary, "write", *target, "--count", "1", "--no-status"], text_lines, want, env,
                       exits=True)


def bpftrace_first_hit(addr):
    prog = f'watchpoint:{addr}:8:w {{ printf("hit\\n"); exit(); }}'
    with Locked():
        return time_to(["bpftrace", "-e", prog], text_lines, lambda l: "hit" if l.strip() == "hit" else None,
                       exits=True)


def perf_first_hit(addr):
    argv = ["perf", "record", "--no-buffering", "-q", "-e", f"mem:{addr}/8:w", "-a", "-g", "-o", "-"]
    with Locked():
        return time_to(argv, perf_pipe_records, lambda typ: "hit" if typ == 9 else None)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def first_hit_table(binary, k, have):
    kaddr = json.loads(subprocess.run([binary, "resolve", "--json", KERNEL_TARGET], capture_output=True,
                                      text=True, check=True).stdout)["runtime_addr"]
    # A private cache directory: the cold runs remove it, and the machine's own cache must survive that.
    cache_dir = os.environ.get("KSYMWATCH_CACHE_DIR") or tempfile.mkdtemp(prefix="ksymwatch-bench-cache-")
    runs = {"cold": [], "warm": [], "bpftrace": [], "perf": []}
    for i in range(k):
        runs["cold"].append(ksymwatch_first_hit(binary, cache_dir, cold=True))
        runs["warm"].append(ksymwatch_first_hit(binary, cache_dir, cold=False))
        if have["bpftrace"]:
            runs["bpftrace"].append(bpftrace_first_hit(kaddr))
        if have["perf"]:
            runs["perf"].append(perf_first_hit(kaddr))
        print(f"  first hit, round {i + 1}/{k}: " + ", ".join(
            f"{name} {fmt_ms(r[-1].get('hit'))}" for name, r in runs.items() if r), file=sys.stderr, flush=True)
    if "KSYMWATCH_CACHE_DIR" not in os.environ:
        shutil.rmtree(cache_dir, ignore_errors=True)

    def stats(rs, mark="hit"):
        xs = [r.get(mark) for r in rs]
        got = [x for x in xs if x is not None]
        return median(xs), (min(got) if got else None), (max(got) if got else None), len(xs) - len(got)

    bpf_med = stats(runs["bpftrace"])[0] if have["bpftrace"] else None
    rows = []

    def row(label, rs, target_fraction=None, installed=True):
        if not installed:
            rows.append(f"| {label} | {NOT_INSTALLED} | | | | |")
            return
        med, lo, hi, missed = stats(rs)
        cell = f"**{fmt_ms(med)}**" + (f" ({missed} of {len(rs)} without a hit in {FIRST_HIT_TIMEOUT:.0f} s)"
                                      if missed else "")
        armed = stats(rs, "armed")[0]
        if armed is not None:
            cell += f" (`# armed` at {fmt_ms(armed)})"
        target = ""
        if target_fraction is not None:
            frac = "1/5" if target_fraction == WARM_FRACTION else "1/2"
            if bpf_med is None or med is None:
                target = f"<= {frac} of bpftrace: not measurable"
            else:
                limit = bpf_med * target_fraction
                target = f"<= {frac} of bpftrace = {fmt_ms(limit)}: " + ("met" if med <= limit else "**missed**")
        rows.append(f"| {label} | {cell} | {fmt_ms(lo)} | {fmt_ms(hi)} | {fmt_ms(stats(rs, 'exit')[0])} | {target} |")

    row(f"`ksymwatch write {KERNEL_TARGET} --count 1`, cold (cache dir removed)", runs["cold"], COLD_FRACTION)
    row("same, warm (cache filled by the cold run)", runs["warm"], WARM_FRACTION)
    row(f"`bpftrace -e 'watchpoint:{kaddr}:8:w {{ printf(\"hit\\n\"); exit(); }}'`", runs["bpftrace"],
        installed=have["bpftrace"])
    row(f"`perf record --no-buffering -e mem:{kaddr}/8:w -a -g -o -`: first sample record on the pipe",
        runs["perf"], installed=have["perf"])
    head = [f"Start to first hit on `{KERNEL_TARGET}` ({kaddr}), ms, median of {k} rounds (tools interleaved; "
            f"KSYMWATCH_CACHE_DIR={cache_dir}):", "",
            "| tool | first hit, median | min | max | exited (median) | target |",
            "| --- | --- | --- | --- | --- | --- |"]
    return head + rows


def fmt_ms(x):
    return "-" if x is None else f"{x:.1f} ms"


# ---------------------------------------------------------------- the flood

class Writers:
    """One `writer write N CPU` per CPU, started before the tracer (so exec's own writes into the watched
    .bss are not part of the flood) and released together with "go"."""

    def __init__(self, writer, n, cpus):
        self.ws = []
        for cpu in cpus:
            w = spawn([writer, "write", str(n), str(cpu)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                      text=True)
            fields = dict(kv.split("=", 1) for kv in w.stdout.readline().split())
            self.ws.append((w, fields))
        addrs = {f["addr"] for _, f in self.ws}
        if len(addrs) != 1:
            sys.exit(f"bench: the writers' globals are at different addresses {sorted(addrs)}: the writer must "
                     f"be built -no-pie")
        self.addr = addrs.pop()
        self.tids = {int(f["tid"]) for _, f in self.ws}
        self.stores = n * len(cpus)

    def flood(self):
        t0 = time.monotonic()
        for w, _ in self.ws:
            w.stdin.write("go\n")
            w.stdin.flush()
        for w, _ in self.ws:
            while True:
                line = w.stdout.readline()
                if not line:
                    sys.exit("bench: a writer exited before saying done")
                if line.strip() == "done":
                    break
        return time.monotonic() - t0

    def end(self):
        for w, _ in self.ws:
            try:
                w.stdin.close()
            except OSError:
                pass
            try:
                w.wait(10)
            except subprocess.TimeoutExpired:
                stop(w)


TEXT_HIT = re.compile(r"^\s*.+-(\d+)\s+\[\d+\]\s+\d+\.\d+:")
PERF_HIT = re.compile(r"^\s*.+?\s+(\d+)\s+\[\d+\]\s+\d+\.\d+:")
JSON_TID = re.compile(r'"tid":(\d+)')


def count_tids(path, pattern, tids, prefix=None):
    n = 0
    with open(path, errors="replace") as f:
        for line in f:
            if prefix is not None and not line.startswith(prefix):
                continue
            m = pattern.match(line) if prefix is None else pattern.search(line)
            if m and int(m.group(1)) in tids:
                n += 1
    return n


def ksw_summary(err_path):
    """(hits, lost) from ksymwatch's last stderr line `ksymwatch: N hits (...), L lost, ...`."""
    hits = lost = None
    with open(err_path, errors="replace") as f:
        for line in f:
            m = re.search(r"(\d+) hits\b.*?(\d+) lost", line)
            if m:
                hits, lost = int(m.group(1)), int(m.group(2))
    return hits, lost


def result(label, **kw):
    return dict(label=label, **kw)


def under_flood(argv, ws, stdout, err, armed):
    """Runs tracer argv under the live-test lock (stdout to the file stdout, or nowhere; stderr to err): once
    armed(p) says it is armed, floods, waits until it has drained, and stops it. Returns (rusage, its CPU
    seconds at the armed mark, the writers' wall time), or None if it never said it was armed."""
    try:
        with Locked(), open(stdout or os.devnull, "w") as o, open(err, "w") as e:
            p = spawn(argv, stdout=o, stderr=e, stdin=subprocess.DEVNULL)
            if not armed(p):
                stop(p)
                return None
            at_armed = proc_cpu(p.pid)
            wall = ws.flood()
            wait_idle(p)
            return stop(p), at_armed, wall
    finally:
        ws.end()


def run_ksymwatch(binary, mode, work, writer, n, cpus):
    label = {"text": "`ksymwatch write ADDR/8 -o FILE` (ftrace text)",
             "json": "`ksymwatch write ADDR/8 --json -o FILE`",
             "quiet": "`ksymwatch write ADDR/8 --quiet` (summary only)"}[mode]
    out, err = os.path.join(work, f"ksw-{mode}.out"), os.path.join(work, f"ksw-{mode}.err")
    ws = Writers(writer, n, cpus)
    argv = [binary, "write", f"{ws.addr}/8", "--no-status"]
    argv += {"text": ["-o", out], "json": ["--json", "-o", out], "quiet": ["--quiet"]}[mode]
    marker, marker_file = {"text": ("\n# armed", out), "json": ('"type":"armed"', out), "quiet": ("armed", err)}[mode]
    ran = under_flood(argv, ws, out if mode == "quiet" else None, err,
                      lambda p: wait_marker(p, marker_file, marker))
    if ran is None:
        return result(label, error=f"not armed: {first_line(err)}")
    ru, at_armed, wall = ran
    hits, lost = ksw_summary(err)
    if mode == "text":
        written = count_tids(out, TEXT_HIT, ws.tids)
    elif mode == "json":
        written = count_tids(out, JSON_TID, ws.tids, prefix='{"type":"hit"')
    else:
        written = None
    if os.path.exists(out):
        os.unlink(out)
    captured = written if written is not None else hits
    return result(label, stores=ws.stores, captured=captured, reported=hits, lost=lost, cpu=cpu_s(ru),
                  at_armed=at_armed, rss_mb=ru.ru_maxrss / 1024, wall=wall,
                  captured_note="lines for the writers' tids" if written is not None else "its summary")


def run_perf(work, writer, n, cpus):
    label = "`perf record -e mem:ADDR/8:w -a -g` + `perf script` (to a file)"
    data, err = os.path.join(work, "perf.data"), os.path.join(work, "perf.err")
    ctl, ack = os.path.join(work, "perf.ctl"), os.path.join(work, "perf.ack")
    for fifo in (ctl, ack):
        if os.path.exists(fifo):
            os.unlink(fifo)
        os.mkfifo(fifo, 0o600)
    ws = Writers(writer, n, cpus)
    argv = ["perf", "record", "-q", "-D", "-1", "--control", f"fifo:{ctl},{ack}", "-e", f"mem:{ws.addr}/8:w",
            "-a", "-g", "-o", data]
    ran = under_flood(argv, ws, None, err, lambda p: perf_enable(p, ctl, ack))
    if ran is None:
        return result(label, error=f"events not enabled: {first_line(err)}")
    ru_rec, at_armed, wall = ran
    out = os.path.join(work, "perf.script")
    with open(out, "w") as o, open(os.path.join(work, "perf-script.err"), "w") as e:
        s = spawn(["perf", "script", "-i", data], stdout=o, stderr=e, stdin=subprocess.DEVNULL)
        ru_script = reap(s)
    captured = count_tids(out, PERF_HIT, ws.tids)
    stats = subprocess.run(["perf", "report", "-i", data, "--stats"], capture_output=True, text=True).stdout
    m = re.search(r"LOST events:\s+(\d+)", stats)
    for path in (out, data):
        os.unlink(path)
    return result(label, stores=ws.stores, captured=captured, reported=None, lost=int(m.group(1)) if m else 0,
                  cpu=cpu_s(ru_rec) + cpu_s(ru_script), at_armed=at_armed,
                  rss_mb=max(ru_rec.ru_maxrss, ru_script.ru_maxrss) / 1024, wall=wall,
                  captured_note="`perf script` samples for the writers' tids",
                  cpu_note=f"record {cpu_s(ru_rec):.2f} + script {cpu_s(ru_script):.2f}",
                  rss_note=f"record {ru_rec.ru_maxrss / 1024:.0f}, script {ru_script.ru_maxrss / 1024:.0f}")


def perf_enable(p, ctl, ack, timeout=60):
    """Sends `enable` on perf's control FIFO and waits for its `ack`: the events are enabled."""
    deadline = time.monotonic() + timeout
    fd = None
    while fd is None:
        try:
            fd = os.open(ctl, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO until perf has opened it
        except OSError:
            if p.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
    afd = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
    try:
        os.write(fd, b"enable\n")
        got = b""
        while time.monotonic() < deadline and p.poll() is None:
            r, _, _ = select.select([afd], [], [], 0.05)
            if r:
                chunk = os.read(afd, 64)
                if not chunk:
                    time.sleep(0.01)  # no writer on the ack FIFO yet
                got += chunk
                if b"ack" in got:
                    return True
        return False
    finally:
        os.close(fd)
        os.close(afd)


def run_bpftrace(work, writer, n, cpus):
    label = "`bpftrace -e 'watchpoint:ADDR:8:w { @[kstack, ustack] = count(); }'` (a kernel map, no stream)"
    out, err = os.path.join(work, "bpftrace.out"), os.path.join(work, "bpftrace.err")
    ws = Writers(writer, n, cpus)
    prog = f'watchpoint:{ws.addr}:8:w {{ @[kstack, ustack] = count(); }} BEGIN {{ printf("armed\\n"); }}'
    ran = under_flood(["bpftrace", "-e", prog], ws, out, err, lambda p: wait_marker(p, out, "armed\n"))
    if ran is None:
        return result(label, error=f"not attached: {first_line(err)}")
    ru, at_armed, wall = ran
    with open(out, errors="replace") as f:
        captured = sum(int(m.group(1)) for m in re.finditer(r"\]: (\d+)$", f.read(), re.M))
    return result(label, stores=ws.stores, captured=captured, reported=None, lost=None, cpu=cpu_s(ru),
                  at_armed=at_armed, rss_mb=ru.ru_maxrss / 1024, wall=wall,
                  captured_note="sum of the map's counts (every hit on ADDR)")


def flood_table(binary, work, writer, n, cpus, runs, have):
    kinds = ["text", "json", "quiet", "perf", "bpftrace"]
    results = {k: [] for k in kinds}
    for i in range(runs):
        for kind in kinds:
            if kind == "perf" and not have["perf"]:
                continue
            if kind == "bpftrace" and not have["bpftrace"]:
                continue
            if kind in ("text", "json", "quiet"):
                r = run_ksymwatch(binary, kind, work, writer, n, cpus)
            elif kind == "perf":
                r = run_perf(work, writer, n, cpus)
            else:
                r = run_bpftrace(work, writer, n, cpus)
            results[kind].append(r)
            print(f"  flood {i + 1}/{runs}: {kind}: " + (r["error"] if "error" in r else
                  f"{r['captured']}/{r['stores']} hits, lost {r['lost']}, CPU {r['cpu']:.2f} s, "
                  f"RSS {r['rss_mb']:.0f} MB, writers {r['wall']:.2f} s"), file=sys.stderr, flush=True)

    lines = [f"The flood: {len(cpus)} writers (one per CPU, pinned, released together) x {n:,} stores into one "
             f"watched 8-byte global, watched on all CPUs" + (f"; median run of {runs} by CPU per hit" if runs > 1
                                                                else "") + ". Tracer CPU is user+sys from start to "
             "exit (start-up included); \"after armed\" leaves out what it used before its armed mark.", "",
             "| tracer | hits captured / stores | lost | tracer CPU | per hit | per hit after armed | peak RSS "
             "| writers took | target: <= 0.5 us per streamed hit, 0 lost |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    labels = {"perf": "`perf record -e mem:ADDR/8:w -a -g` + `perf script` (to a file)",
              "bpftrace": "`bpftrace -e 'watchpoint:ADDR:8:w { @[kstack, ustack] = count(); }'`"}
    empty = " |" * 7
    for kind in kinds:
        rs = results[kind]
        if not rs:
            lines.append(f"| {labels[kind]} | {NOT_INSTALLED} |{empty}")
            continue
        ok = [r for r in rs if "error" not in r and r["captured"]]
        if not ok:
            lines.append(f"| {rs[0]['label']} | {rs[0].get('error', 'no hits captured')} |{empty}")
            continue

        def per_hit(r):
            return r["cpu"] * 1e6 / r["captured"]

        def after_armed(r):
            return None if r["at_armed"] is None else (r["cpu"] - r["at_armed"]) * 1e6 / r["captured"]

        ok.sort(key=per_hit)
        r = ok[len(ok) // 2]
        per = f"**{per_hit(r):.2f} us**"
        if len(ok) > 1:
            per += " (runs: " + ", ".join(f"{per_hit(x):.2f}" for x in ok) + ")"
        steady = after_armed(r)
        steady_cell = "-" if steady is None else f"{steady:.2f} us"
        lost = "-" if r["lost"] is None else f"{r['lost']:,}"
        cpu = f"{r['cpu']:.2f} s" + (f" ({r['cpu_note']})" if "cpu_note" in r else "")
        rss = f"{r['rss_mb']:.0f} MB" + (f" ({r['rss_note']})" if "rss_note" in r else "")
        captured = f"{r['captured']:,} / {r['stores']:,}"
        if r.get("reported") is not None and r["reported"] != r["captured"]:
            captured += f" (it reported {r['reported']:,})"
        target = ""
        if kind in ("text", "json"):
            complete = r["lost"] == 0 and r["captured"] == r["stores"]
            target = "met" if complete and per_hit(r) <= CPU_PER_HIT_US else "**missed**"
            if complete and per_hit(r) > CPU_PER_HIT_US and steady is not None and steady <= CPU_PER_HIT_US:
                target += " (after armed: met)"
            elif not complete:
                target += " (hits missing)"
        elif kind == "bpftrace":
            per = per.replace("**", "") + " (no per-hit output)"
        lines.append(f"| {r['label']} | {captured} | {lost} | {cpu} | {per} | {steady_cell} | {rss} | "
                     f"{r['wall']:.2f} s | {target} |")
    lines += ["", "Hits captured: " + "; ".join(f"{kind}: {rs[0]['captured_note']}" for kind, rs in results.items()
                                                 if rs and "captured_note" in rs[0]) + "."]
    return lines


# ---------------------------------------------------------------- the long run

def memory_table(n, binary):
    script = os.path.join(ROOT, "scripts/bench-memory.py")
    head = [f"The long run: tracer RSS over {n:,} short-lived writer processes (`scripts/bench-memory.py {n}`):",
            "", "| RSS after 100 | RSS after N | growth | hits (named / bare address) | target (<= 10%) |",
            "| --- | --- | --- | --- | --- |"]
    if not os.path.exists(script):
        return head + ["| scripts/bench-memory.py is missing in this tree: not measured | | | | |"]
    argv = [sys.executable, script, str(n)]
    with open(script) as f:
        if "--bin" in f.read():  # it takes the binary to measure; without it, it uses target/release
            argv += ["--bin", binary]
    p = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
              stdin=subprocess.DEVNULL, text=True)
    tail = []
    for line in p.stdout:
        sys.stderr.write("  memory: " + line)
        tail = (tail + [line.strip()])[-5:]
    reap(p)
    last = next((l for l in reversed(tail) if "growth_pct=" in l), None)
    if p.returncode != 0 or last is None:
        return head + [f"| bench-memory.py failed (exit {p.returncode}): {tail[-1] if tail else 'no output'} | | | | |"]
    kv = dict(w.split("=", 1) for w in last.split() if "=" in w)
    after_n = next((v for k, v in kv.items() if k.startswith("rss_after_") and k != "rss_after_100_kb"), "?")
    try:
        growth = float(kv.get("growth_pct", "nan"))
        verdict = "met" if growth <= GROWTH_PCT else "**missed**"
    except ValueError:
        growth, verdict = kv.get("growth_pct"), "?"
    hits = f"{kv.get('hits', '?')} ({kv.get('named', '?')} / {kv.get('unnamed', '?')})" if "hits" in kv else "-"
    return head + [f"| {kv.get('rss_after_100_kb', '?')} kB | {after_n} kB | {growth}% | {hits} | {verdict} |"]


# ---------------------------------------------------------------- main

def leftover_check(binary):
    """Free debug registers per CPU after everything ended, from `ksymwatch check --json`."""
    with Locked():
        out = subprocess.run([binary, "check", "--json"], capture_output=True, text=True)
    try:
        regs = json.loads(out.stdout)["debug_registers"]
    except (ValueError, KeyError):
        return "debug registers after the run: `ksymwatch check --json` gave no answer"
    line = "debug registers free after the run (under the lock): " + ", ".join(
        f"cpu{r['cpu']} {r['free']}" for r in regs)
    if any(r["free"] != 4 for r in regs):
        holders = perf_event_holders()
        line += "; processes holding perf events now (not started by this script, which has ended all of its " \
                "own): " + ("; ".join(holders) if holders else "none found")
    return line


def perf_event_holders():
    """`pid command` of every process with a perf_event descriptor open."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[perf_event]" for fd in fds):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                found.append(f"{pid} `{cmd[:100]}`")
        except OSError:
            continue
    return found


def version(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return NOT_INSTALLED


def on_signal(signum, _frame):
    print(f"bench: {signal.Signals(signum).name}; every child stopped", file=sys.stderr)
    sys.exit(128 + signum)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stores", type=int, default=150000, help="stores per writer (one writer per CPU)")
    ap.add_argument("--first-hit", type=int, default=7, metavar="K",
                    help="rounds of the first-hit timing (0: skip)")
    ap.add_argument("--flood-runs", type=int, default=1, metavar="K", help="floods per tracer (median; 0: skip)")
    ap.add_argument("--memory", type=int, default=10000, metavar="N",
                    help="short-lived writers for bench-memory.py (0: skip)")
    ap.add_argument("binary", nargs="?", default=os.path.join(ROOT, "target/release/ksymwatch"))
    args = ap.parse_args()
    # bench.sh starts this as a background job, which a shell starts with SIGINT ignored; an ignored signal
    # stays ignored across exec, and the tracers stop on SIGINT (ksymwatch reads it from a signalfd, which an
    # ignored signal never reaches). A handler here is reset to the default in every child.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    if os.geteuid() != 0:
        sys.exit("bench: needs root (it arms hardware breakpoints): run it with sudo")
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"bench: {args.binary} is missing: build it with `cargo build --release`")
    have = {t: shutil.which(t) is not None for t in ("perf", "bpftrace")}
    cpus = sorted(os.sched_getaffinity(0))
    work = os.environ.get("BENCH_WORKDIR") or tempfile.mkdtemp(prefix="ksymwatch-bench-")
    try:
        writer = os.path.join(work, "writer")
        # Non-PIE so every writer has its global at one address; loaded away from the default 0x400000 so
        # that address is not the one other non-PIE test helpers on the machine use (a tracer left running
        # on theirs would otherwise take hits from this flood, and its writers would land in our counts).
        subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-no-pie", "-Wl,-Ttext-segment=0x7e00000",
                        "-o", writer, os.path.join(ROOT, "tests/helpers/writer.c")], check=True)
        commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                                text=True).stdout.strip() or "?"
        if os.path.realpath(args.binary) != os.path.realpath(os.path.join(ROOT, "target/release/ksymwatch")):
            commit = f"`{args.binary}` (not this tree's build)"
        load0 = os.getloadavg()[0]
        print(f"# bench: ksymwatch {commit}", file=sys.stderr, flush=True)
        first = first_hit_table(args.binary, args.first_hit, have) if args.first_hit > 0 else []
        flood = flood_table(args.binary, work, writer, args.stores, cpus, args.flood_runs, have) \
            if args.flood_runs > 0 else []
        memory = memory_table(args.memory, args.binary) if args.memory > 0 else []
        left = leftover_check(args.binary)
        load1 = os.getloadavg()[0]
        uname = os.uname()
        print(f"### {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, `scripts/bench.sh`, "
              f"ksymwatch {commit}\n")
        print(f"Kernel {uname.release}, {len(cpus)} CPUs ({', '.join(map(str, cpus))}), "
              f"{version(['perf', '--version']) if have['perf'] else 'perf ' + NOT_INSTALLED}, "
              f"{version(['bpftrace', '--version']) if have['bpftrace'] else 'bpftrace ' + NOT_INSTALLED}; "
              f"load average {load0:.2f} at the start, {load1:.2f} at the end.\n")
        if first:
            print("\n".join(first) + "\n")
        if flood:
            print("\n".join(flood) + "\n")
        if memory:
            print("\n".join(memory) + "\n")
        print(left)
    finally:
        cleanup()
        if not os.environ.get("BENCH_WORKDIR"):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("bench: interrupted; every child stopped", file=sys.stderr)
        sys.exit(130)
