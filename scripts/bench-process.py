#!/usr/bin/env python3
"""Process-wide watches: what arming one address in every thread of a process costs, at 1,000 and 10,000
threads, side by side in one run (median of K runs, the tools interleaved within each run):

  - bare kernel cost (scripts/bench-arm-bare.c): one breakpoint per thread with a ring each (open, mmap,
    enable); one per thread per CPU with inherit/inherit_thread and SET_OUTPUT into a ring per CPU; and
    PERF_EVENT_IOC_MODIFY_ATTRIBUTES of every event of each design to a new address (a retarget). The
    per-CPU design needs threads x CPUs descriptors: where RLIMIT_NOFILE cannot be raised that far (hard
    limit 20,000 and no CAP_SYS_RESOURCE on the reference VM: 10,000 threads x 2 CPUs do not fit), its
    rows say EMFILE;
  - bpftrace -p PID -e 'watchpoint:ADDR:8:w { @ = count(); } BEGIN { printf("ready\\n") }': start to its
    "Attaching N probes..." line and to the BEGIN line (printed once the probes are attached). bpftrace
    0.17 opens one breakpoint, pid=PID cpu=-1, no inherit: only that task is watched (on the reference VM
    a 6-thread helper's stores from its other threads counted 0), so its time does not grow with threads;
  - ksymwatch write -p PID ADDR/8 --control FIFO: start to `# armed` (and the arming time the line reports,
    if it has one); then `watch ADDR2/8` into the FIFO to the `# watch ... armed on N threads in X ms` ack;
  - ksymwatch write ADDR/8 -- threads count N (launch mode, non-PIE helper so ADDR is known before exec):
    start to `# armed`, and start to the helper's `ready` (all N threads created under the watch), against
    the helper started alone.

A ksymwatch row whose build does not have the option yet (exit 2 before `# armed`) says
"ksymwatch: not supported by this build" and the run carries on (a build with -p but no --control is
measured without it); the first line of its stderr is printed under the table.

    sudo scripts/bench-process.py [-k K] [--threads 1000,10000] [path/to/ksymwatch]
        (default binary: target/release/ksymwatch, built with cargo; K defaults to 5)

Needs root and gcc; bpftrace is optional (apt-get install bpftrace). Every run that opens breakpoints holds
/tmp/ksymwatch-live-tests.lock (flock, as the live tests do); the script takes it itself around each run,
so the time spent waiting for it is not measured: do not start the script itself under flock.
"""
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from benchlib import LOCK, ROOT, Locked, thread_bench_args  # noqa: E402
UNSUPPORTED = "ksymwatch: not supported by this build"




class Lines:
    """A process whose stdout lines are read by a thread and kept with the time each arrived."""

    def __init__(self, argv, stdin=subprocess.DEVNULL, stderr=None):
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr or subprocess.DEVNULL,
                                  text=True, bufsize=1)
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.q.put((time.monotonic(), line.rstrip("\n")))
        self.q.put((time.monotonic(), None))

    def wait_for(self, pred, timeout=60):
        """(ms since start, line) of the first line matching pred; None at EOF or after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                t, line = self.q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                self.q.put((t, None))
                return None
            if pred(line):
                return (t - self.t0) * 1e3, line

    def stop(self, sig=signal.SIGINT, timeout=30):
        return benchlib.stop(self.p, sig, timeout)


def build(work):
    cc = ["gcc", "-O1", "-fno-omit-frame-pointer", "-pthread", "-Wall", "-Wextra"]
    src = os.path.join(ROOT, "tests/helpers/threads.c")
    subprocess.run([*cc, "-o", os.path.join(work, "threads"), src], check=True)
    subprocess.run([*cc, "-no-pie", "-o", os.path.join(work, "threads-nopie"), src], check=True)
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-o", os.path.join(work, "bench-arm-bare"),
                    os.path.join(ROOT, "scripts/bench-arm-bare.c")], check=True)


def banner(line):
    return dict(kv.split("=", 1) for kv in line.split())


def start_helper(binary, n):
    """`threads count n` started and ready: (Lines, banner fields, ms from start to ready)."""
    h = Lines([binary, "count", str(n)], stdin=subprocess.PIPE)
    _, first = h.wait_for(lambda l: l.startswith("addr="))
    ready = h.wait_for(lambda l: l == "ready", timeout=120)
    if ready is None:
        sys.exit(f"helper `threads count {n}` did not get ready")
    return h, banner(first), ready[0]


def end_helper(h):
    h.p.stdin.close()
    h.stop(signal.SIGTERM, timeout=10)


def kv_line(line):
    return {k: v for k, v in (w.split("=", 1) for w in line.split() if "=" in w)}


def bare(work, pid, addr, addr2):
    with Locked():
        out = subprocess.run([os.path.join(work, "bench-arm-bare"), str(pid), addr, addr2], capture_output=True,
                             text=True)
    if out.returncode != 0:
        sys.exit(f"bench-arm-bare failed: {out.stderr.strip()}")
    return {d["variant"]: d for d in map(kv_line, out.stdout.splitlines())}


def bpftrace(pid, addr):
    prog = f'watchpoint:{addr}:8:w {{ @ = count(); }} BEGIN {{ printf("ready\\n"); }}'
    with Locked():
        b = Lines(["bpftrace", "-p", str(pid), "-e", prog])
        attaching = b.wait_for(lambda l: l.startswith("Attaching"))
        ready = b.wait_for(lambda l: l == "ready")
        b.stop()
    return attaching and attaching[0], ready and ready[0]


def first_err(path):
    with open(path) as f:
        return (f.readline().strip() or "no stderr")[:160]


def ms_in(line, pattern=r"([\d.]+) ?ms\b"):
    m = re.search(pattern, line)
    return float(m.group(1)) if m else None


def wait_armed(k, err):
    """Waits for ksymwatch's `# armed` line: (its time and text, None), or (None, (why, stderr's first
    line)) when it exited first (UNSUPPORTED for exit 2: this machine cannot take the watch)."""
    armed = k.wait_for(lambda l: l.startswith("# armed"), timeout=120)
    if armed is not None:
        return armed, None
    rc = k.stop()
    return None, (UNSUPPORTED if rc == 2 else f"exit {rc} before # armed", first_err(err))


def ksw_attach(binary, work, pid, addr, addr2, control):
    """-p run: {armed, armed_reported, retarget, retarget_reported, threads}, or (UNSUPPORTED, why)."""
    fifo = os.path.join(work, "control")
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo, 0o600)
    err = os.path.join(work, "ksw-attach.err")
    argv = [binary, "write", "-p", str(pid), f"{addr}/8"] + (["--control", fifo] if control else [])
    with Locked(), open(err, "w") as e:
        k = Lines(argv, stderr=e)
        armed, failed = wait_armed(k, err)
        if failed:
            return failed
        r = {"armed": armed[0], "armed_reported": ms_in(armed[1])}
        if control:
            fd = None
            for _ in range(200):  # ksymwatch opens the FIFO for reading; until then O_NONBLOCK gives ENXIO
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                    break
                except OSError:
                    time.sleep(0.01)
            if fd is not None:
                t0 = time.monotonic()
                os.write(fd, f"watch {addr2}/8\n".encode())
                ack = k.wait_for(lambda l: l.startswith("# watch"), timeout=120)
                if ack:
                    r["retarget"] = (k.t0 + ack[0] / 1e3 - t0) * 1e3
                    r["retarget_reported"] = ms_in(ack[1])
                    m = re.search(r"armed on (\d+) threads", ack[1])
                    r["threads"] = m and int(m.group(1))
                os.close(fd)
        k.stop()
    return r


def ksw_launch(binary, work, addr, n):
    """Launch mode: {armed, ready} in ms from start, or (UNSUPPORTED, why)."""
    err = os.path.join(work, "ksw-launch.err")
    argv = [binary, "write", f"{addr}/8", "--", os.path.join(work, "threads-nopie"), "count", str(n)]
    with Locked(), open(err, "w") as e:
        k = Lines(argv, stdin=subprocess.PIPE, stderr=e)
        armed, failed = wait_armed(k, err)
        if failed:
            return failed
        ready = k.wait_for(lambda l: l == "ready", timeout=120)
        k.p.stdin.close()  # the helper inherited this stdin: EOF ends it, and ksymwatch with it
        try:
            k.p.wait(30)
        except subprocess.TimeoutExpired:
            k.stop()
    return {"armed": armed[0], "ready": ready and ready[0]}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, digits=1):
    return "?" if x is None else f"{x:.{digits}f}"


def main():
    args, counts, binary = thread_bench_args(__doc__, 5, "runs per measurement (median)", "1000,10000")
    have_bpftrace = shutil.which("bpftrace") is not None
    work = tempfile.mkdtemp(prefix="ksymwatch-bench-process-")
    rows = {}  # row label -> {threads: cell text}
    notes = []

    def cell(label, n, text):
        rows.setdefault(label, {})[n] = text

    try:
        build(work)
        print(f"process-wide arming, median of {args.k} runs ({os.uname().release}, {os.cpu_count()} CPUs)")
        for n in counts:
            h, fields, alone_ready = start_helper(os.path.join(work, "threads"), n)
            pid, addr, addr2 = fields["pid"], fields["addr"], fields["addr2"]
            runs = {"bare": [], "bpf": [], "attach": [], "launch": [], "alone": []}
            for i in range(args.k):
                runs["bare"].append(bare(work, pid, addr, addr2))
                if have_bpftrace:
                    runs["bpf"].append(bpftrace(pid, addr))
                a = ksw_attach(binary, work, pid, addr, addr2, control=True)
                if isinstance(a, tuple) and a[0] == UNSUPPORTED:
                    a2 = ksw_attach(binary, work, pid, addr, addr2, control=False)  # -p without --control?
                    if isinstance(a2, dict):
                        a2["control"] = a
                    a = a2
                runs["attach"].append(a)
                # The non-PIE helper alone: its fixed address for launch mode, and the baseline start-up.
                alone, alone_fields, t_ready = start_helper(os.path.join(work, "threads-nopie"), n)
                end_helper(alone)
                runs["alone"].append(t_ready)
                runs["launch"].append(ksw_launch(binary, work, alone_fields["addr"], n))
                b = runs["bare"][-1]
                print(f"  {n} threads, run {i + 1}: bare per-thread {b['per-thread'].get('total_ms', '-')} ms, per-cpu "
                      f"{b['per-cpu'].get('total_ms', '-')} ms, modify {b['modify-per-thread'].get('total_ms', '-')} ms"
                      + (f"; bpftrace ready {fmt(runs['bpf'][-1][1])} ms" if have_bpftrace else ""), flush=True)
            end_helper(h)

            for variant, label in [("per-thread", "bare: 1 event + ring per thread (variant 1)"),
                                   ("per-cpu", "bare: 1 event per thread per CPU, inherit, SET_OUTPUT to a ring per CPU (variant 2)")]:
                vs = [r[variant] for r in runs["bare"]]
                mod_label = (f"bare: MODIFY_ATTRIBUTES of every event of variant {1 if variant == 'per-thread' else 2} "
                             f"(variant 3)")
                if "error" in vs[0]:
                    why = (f"{vs[0]['error']}: needs {vs[0]['needed']} event fds, RLIMIT_NOFILE here is "
                           f"{vs[0]['nofile']} and cannot be raised")
                    cell(label, n, why)
                    cell(mod_label, n, why)
                    continue
                m = {k: med([float(v[k]) for v in vs]) for k in
                     ("open_ms", "mmap_ms", "set_output_ms", "enable_ms", "total_ms", "close_ms")}
                ring = f"mmap {fmt(m['mmap_ms'])}" + (f" + SET_OUTPUT {fmt(m['set_output_ms'])}" if variant == "per-cpu" else "")
                cell(label, n, f"**{fmt(m['total_ms'])}** (open {fmt(m['open_ms'])}, {ring}, enable "
                               f"{fmt(m['enable_ms'])}; close {fmt(m['close_ms'])}; {vs[0]['events']} events, "
                               f"{vs[0]['fds']} fds)")
                mod = med([float(r["modify-" + variant]["modify_ms"]) for r in runs["bare"]])
                cell(mod_label, n, f"**{fmt(mod)}** ({vs[0]['events']} ioctls)")
            if have_bpftrace:
                cell("bpftrace -p: start to `Attaching` / to BEGIN (main thread only)", n,
                     f"{fmt(med([r[0] for r in runs['bpf']]))} / **{fmt(med([r[1] for r in runs['bpf']]))}**")
            else:
                cell("bpftrace -p: start to `Attaching` / to BEGIN (main thread only)", n, "bpftrace not installed")

            a = runs["attach"]
            if all(isinstance(r, dict) for r in a):
                rep = med([r["armed_reported"] for r in a])
                cell("ksymwatch write -p: start to `# armed` (arming it reports)", n,
                     f"**{fmt(med([r['armed'] for r in a]))}**" + (f" ({fmt(rep)})" if rep is not None else ""))
                if any("control" in r for r in a):
                    cell("ksymwatch --control: `watch ADDR2/8` to `# watch` ack (reported)", n, UNSUPPORTED)
                    notes.append(f"--control: {a[0]['control'][1]}")
                else:
                    rep = med([r.get("retarget_reported") for r in a])
                    cell("ksymwatch --control: `watch ADDR2/8` to `# watch` ack (reported)", n,
                         f"**{fmt(med([r.get('retarget') for r in a]))}**" +
                         (f" ({fmt(rep)}, on {a[0].get('threads')} threads)" if rep is not None else ""))
            else:
                bad = next(r for r in a if not isinstance(r, dict))
                cell("ksymwatch write -p: start to `# armed` (arming it reports)", n, bad[0])
                cell("ksymwatch --control: `watch ADDR2/8` to `# watch` ack (reported)", n, bad[0])
                notes.append(f"-p: {bad[1]}")
            la = runs["launch"]
            alone = f"helper alone {fmt(med(runs['alone']))}"
            if all(isinstance(r, dict) for r in la):
                cell("ksymwatch launch: start to `# armed` / to helper `ready`", n,
                     f"**{fmt(med([r['armed'] for r in la]))}** / {fmt(med([r['ready'] for r in la]))} ({alone})")
            else:
                bad = next(r for r in la if not isinstance(r, dict))
                cell("ksymwatch launch: start to `# armed` / to helper `ready`", n, f"{bad[0]} ({alone})")
                notes.append(f"launch: {bad[1]}")

        print()
        print("| ms, median of %d | %s |" % (args.k, " | ".join(f"{n:,} threads" for n in counts)))
        print("| --- |" + " --- |" * len(counts))
        for label, cells in rows.items():
            print(f"| {label} | " + " | ".join(cells.get(n, "") for n in counts) + " |")
        for note in dict.fromkeys(notes):
            print(f"\n{note}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
