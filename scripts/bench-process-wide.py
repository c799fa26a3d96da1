#!/usr/bin/env python3
"""Process-wide watches at any thread count (issue #25): one run, 1 / 1,000 / 10,000 / 100,000 threads
side by side (median of K runs; one helper process per thread count, reused by every run and tool).

The helper is scripts/bench-threads.c (built here with gcc -O1 -pthread -no-pie): N threads on 16 KiB stacks
carved out of one mapping (so 100,000 threads need neither `ulimit -s` nor a higher vm.max_map_count), of
which one, not the main thread, stores into a global on `store` and into a second one on `store2`.
For each thread count and tool:

  - ksymwatch write -p PID ADDR/8 --control FIFO:
      arm:      start to its `# armed` line;
      hit:      `store` written to the helper to the hit line at ADDR on ksymwatch's stdout;
      retarget: `watch ADDR2/8` written into the FIFO to the `# watch` ack, and to the first hit at ADDR2
                (`store2` written to the helper as soon as the ack arrives);
      fds / RSS: entries of /proc/PID/fd while armed, and VmHWM just before SIGINT;
  - perf record -p PID -e mem:ADDR/8:w -o /dev/null -D -1 --control fifo:CTL,ACK (perf 6.1 spells the
    length `/8`, not `:8`): arm is start to the ack of `enable`, written as soon as perf says
    "Events disabled" (every event opened). perf record prints no samples, so the hit is taken from
    perf trace -e mem:ADDR/8:w -p PID, which does (on stderr): `store` written every 10 ms from its start until its
    first line arrives, then one more `store` to its line. Neither can move a watch: a retarget is a restart;
  - bpftrace -p PID -e 'watchpoint:ADDR:8:w { printf("hit\\n"); } BEGIN { printf("ready\\n"); }': start to
    `ready`, then `store` to `hit` (2 s timeout: bpftrace 0.17 opens one breakpoint on the PID task only, so a
    store by another thread of the process is never seen).

    sudo scripts/bench-process-wide.py [-k K] [--threads 1,1000,10000,100000] [path/to/ksymwatch]
        (default binary: target/release/ksymwatch, built with cargo --release; K defaults to 3)

Needs root and gcc; perf (linux-perf) and bpftrace are optional (their rows say "not installed"). For
100,000 threads kernel.pid_max (32,768 by default) is raised to fit for the run and restored after it.
Every run that opens breakpoints holds /tmp/ksymwatch-live-tests.lock (flock, as the live tests do); the
script takes it itself around each measurement, so the time spent waiting for it is not measured: do not
start the script itself under flock.
"""
import datetime
import os
import queue
import resource
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
from benchlib import ROOT, Locked, thread_bench_args  # noqa: E402

PID_MAX = "/proc/sys/kernel/pid_max"


class Lines:
    """A process whose stdout (and optionally stderr) lines are read by threads, each kept with the time it
    arrived; every started one is recorded in `started` so that main() can stop it on any path."""

    started = []

    def __init__(self, argv, stdin=subprocess.DEVNULL, stderr_lines=False):
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE if stderr_lines else subprocess.DEVNULL,
                                  text=True, bufsize=1)
        Lines.started.append(self)
        self.q = queue.Queue()
        self.err = queue.Queue()
        threading.Thread(target=self._read, args=(self.p.stdout, self.q), daemon=True).start()
        if stderr_lines:
            threading.Thread(target=self._read, args=(self.p.stderr, self.err), daemon=True).start()

    @staticmethod
    def _read(f, q):
        for line in f:
            q.put((time.monotonic(), line.rstrip("\n")))
        q.put((time.monotonic(), None))

    def wait_for(self, pred, timeout=60, stderr=False, on_idle=None):
        """(monotonic time, line) of the next line matching pred; None at EOF or after timeout. on_idle, if
        given, is called every 10 ms while no line arrives."""
        q = self.err if stderr else self.q
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                t, line = q.get(timeout=min(left, 0.01) if on_idle else left)
            except queue.Empty:
                if on_idle:
                    on_idle()
                continue
            if line is None:
                q.put((t, None))
                return None
            if pred(line):
                return t, line

    def fds(self):
        try:
            return len(os.listdir(f"/proc/{self.p.pid}/fd"))
        except OSError:
            return None

    def hwm_kib(self):
        try:
            with open(f"/proc/{self.p.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return None

    def stop(self, sig=signal.SIGINT, timeout=30):
        benchlib.stop(self.p, sig, timeout)
        if self.p.stdin:
            try:
                self.p.stdin.close()
            except OSError:
                pass
        return self.p.returncode


def ms(t0, t1):
    return None if t0 is None or t1 is None else (t1 - t0) * 1e3


class Helper:
    """bench-threads N, started and ready; send() writes a command line and returns when it was written."""

    def __init__(self, binary, n):
        self.l = Lines([binary, str(n)], stdin=subprocess.PIPE)
        first = self.l.wait_for(lambda s: s.startswith("addr="), timeout=300)
        if first is None or self.l.wait_for(lambda s: s == "ready", timeout=60) is None:
            self.l.stop(signal.SIGKILL)
            sys.exit(f"bench-threads {n} did not get ready (pid_max, threads-max, memory?)")
        f = dict(kv.split("=", 1) for kv in first[1].split())
        self.pid, self.addr, self.addr2 = int(f["pid"]), f["addr"], f["addr2"]

    def send(self, cmd):
        t = time.monotonic()
        self.l.p.stdin.write(cmd + "\n")
        self.l.p.stdin.flush()
        return t

    def end(self):
        try:
            self.l.p.stdin.close()  # EOF: returning from main ends every thread
        except OSError:
            pass
        self.l.stop(signal.SIGKILL, timeout=120)


def open_fifo_writer(path, proc, timeout=10):
    """The FIFO opened for writing once the reader has it open (O_NONBLOCK gives ENXIO until then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.002)
    return None


def run_ksymwatch(binary, work, h):
    """{arm, hit, retarget_ack, retarget_hit, fds, hwm} in ms / count / KiB; a string says what failed."""
    fifo = os.path.join(work, "control")
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo, 0o600)
    fd = None
    r = {}
    with Locked():
        k = Lines([binary, "write", "-p", str(h.pid), f"{h.addr}/8", "--control", fifo], stderr_lines=True)
        try:
            armed = k.wait_for(lambda s: s.startswith("# armed"), timeout=300)
            if armed is None:
                err = k.wait_for(lambda s: True, timeout=1, stderr=True)
                return f"no `# armed` (exit {k.stop()}: {err[1][:80] if err else 'no stderr'})"
            r["arm"] = ms(k.t0, armed[0])
            t = h.send("store")
            hit = k.wait_for(lambda s: f"{h.addr} W " in s, timeout=10)
            r["hit"] = ms(t, hit and hit[0])
            fd = open_fifo_writer(fifo, k.p)
            if fd is not None:
                t = time.monotonic()
                os.write(fd, f"watch {h.addr2}/8\n".encode())
                ack = k.wait_for(lambda s: s.startswith("# watch"), timeout=60)
                if ack:
                    h.send("store2")
                    hit2 = k.wait_for(lambda s: f"{h.addr2} W " in s, timeout=10)
                    r["retarget_ack"], r["retarget_hit"] = ms(t, ack[0]), ms(t, hit2 and hit2[0])
            r["fds"], r["hwm"] = k.fds(), k.hwm_kib()
        finally:
            if fd is not None:
                os.close(fd)
            k.stop()
            os.unlink(fifo)
    return r


def run_perf_record(work, h):
    """{arm, fds, hwm}, or a string saying what failed."""
    ctl, ack = os.path.join(work, "perf-ctl"), os.path.join(work, "perf-ack")
    for f in (ctl, ack):
        if os.path.exists(f):
            os.unlink(f)
        os.mkfifo(f, 0o600)
    r = {}
    ctl_fd = ack_fd = None
    with Locked():
        p = Lines(["perf", "record", "-p", str(h.pid), "-e", f"mem:{h.addr}/8:w", "-o", "/dev/null", "-D", "-1",
                   "--control", f"fifo:{ctl},{ack}"], stderr_lines=True)
        try:
            # perf opens both FIFOs O_RDWR, so ours never block; then opens every event, disabled.
            ctl_fd = os.open(ctl, os.O_RDWR)
            ack_fd = os.open(ack, os.O_RDWR | os.O_NONBLOCK)
            last = []
            dis = p.wait_for(lambda s: last.append(s) or s.startswith("Events disabled"), timeout=300, stderr=True)
            if dis is None:
                return f"failed (exit {p.stop()}: {' '.join(last)[-90:] or 'no stderr'})"
            os.write(ctl_fd, b"enable\n")
            got, deadline = b"", time.monotonic() + 60
            while b"ack" not in got and time.monotonic() < deadline and p.p.poll() is None:
                try:
                    got += os.read(ack_fd, 64)
                except BlockingIOError:
                    time.sleep(0.0005)
            if b"ack" in got:
                r["arm"] = ms(p.t0, time.monotonic())
                r["opened"] = ms(p.t0, dis[0])
            r["fds"], r["hwm"] = p.fds(), p.hwm_kib()
        finally:
            p.stop()
            for f in (ctl_fd, ack_fd):
                if f is not None:
                    os.close(f)
            for f in (ctl, ack):
                os.unlink(f)
    return r or "no ack to `enable`"


def run_perf_trace(h):
    """{first, hit}: start to first sample line with `store` every 10 ms, then one `store` to its line."""
    with Locked():
        p = Lines(["perf", "trace", "-e", f"mem:{h.addr}/8:w", "-p", str(h.pid)], stderr_lines=True)
        try:
            # perf trace prints its samples on stderr.
            first = p.wait_for(lambda s: "mem:" in s, timeout=60, stderr=True, on_idle=lambda: h.send("store"))
            if first is None:
                last = []
                p.wait_for(lambda s: last.append(s) and False, timeout=0.5, stderr=True)
                return f"no sample in 60 s (exit {p.stop()}: {' '.join(last)[-90:] or 'no stderr'})"
            time.sleep(0.2)  # the stores queued behind the first one arrive and are dropped
            while not p.err.empty():
                p.err.get()
            t = h.send("store")
            hit = p.wait_for(lambda s: "mem:" in s, timeout=10, stderr=True)
            return {"first": ms(p.t0, first[0]), "hit": ms(t, hit and hit[0])}
        finally:
            p.stop()


def run_bpftrace(h):
    """{ready, hit (None: no hit in 2 s), fds, hwm}, or a string saying what failed."""
    prog = f'watchpoint:{h.addr}:8:w {{ printf("hit\\n"); }} BEGIN {{ printf("ready\\n"); }}'
    with Locked():
        b = Lines(["bpftrace", "-p", str(h.pid), "-e", prog], stderr_lines=True)
        try:
            ready = b.wait_for(lambda s: s == "ready", timeout=120)
            if ready is None:
                last = []
                b.wait_for(lambda s: last.append(s) and False, timeout=0.5, stderr=True)
                return f"no `ready` (exit {b.stop()}: {' '.join(last)[-90:] or 'no stderr'})"
            t = h.send("store")
            hit = b.wait_for(lambda s: s == "hit", timeout=2)
            return {"ready": ms(b.t0, ready[0]), "hit": ms(t, hit and hit[0]), "fds": b.fds(), "hwm": b.hwm_kib()}
        finally:
            b.stop()


def med(runs, key):
    xs = [r[key] for r in runs if isinstance(r, dict) and r.get(key) is not None]
    return statistics.median(xs) if xs else None


def short(why):
    """A failure, short enough for a table cell."""
    if "ulimit -n" in why or "Too many open files" in why:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return f"failed: too many open files (RLIMIT_NOFILE {soft:,}, cannot be raised here)"
    return why.replace("|", "/")


def cell(runs, key, unit="ms", missing="?", first=True):
    """The median of `key` over runs; a failed run's reason where one failed (`first`: the row that says it
    for its tool; the tool's other rows say "-")."""
    bad = next((r for r in runs if not isinstance(r, dict)), None)
    if bad is not None:
        return short(bad) if first else "-"
    m = med(runs, key)
    if m is None:
        return missing
    if unit == "ms":
        return f"{m:.2f}" if m < 10 else f"{m:.1f}"
    if unit == "MiB":
        return f"{m / 1024:.1f} MiB"
    return f"{m:.0f}"


def main():
    args, counts, binary = thread_bench_args(
        __doc__, 3, "runs per measurement (median), default 3", "1,1000,10000,100000")
    have_perf, have_bpftrace = shutil.which("perf") is not None, shutil.which("bpftrace") is not None
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="ksymwatch-bench-process-wide-")
    with open(PID_MAX) as f:
        pid_max = f.read().strip()
    results = {}  # n -> {"ksw": [...], "perf": [...], "trace": [...], "bpf": [...]}
    helper = None
    try:
        helper_bin = os.path.join(work, "bench-threads")
        subprocess.run(["gcc", "-O1", "-pthread", "-no-pie", "-Wall", "-Wextra", "-o", helper_bin,
                        os.path.join(ROOT, "scripts/bench-threads.c")], check=True)
        need = max(counts) * 2 + 65536
        if int(pid_max) < need:
            with open(PID_MAX, "w") as f:
                f.write(str(need))
        for n in counts:
            helper = Helper(helper_bin, n)
            res = results[n] = {"ksw": [], "perf": [], "trace": [], "bpf": []}
            for i in range(args.k):
                res["ksw"].append(run_ksymwatch(binary, work, helper))
                if have_perf:
                    res["perf"].append(run_perf_record(work, helper))
                    res["trace"].append(run_perf_trace(helper))
                if have_bpftrace:
                    res["bpf"].append(run_bpftrace(helper))
                k = res["ksw"][-1]
                print(f"# {n} threads, run {i + 1}: ksymwatch "
                      + (f"arm {k['arm']:.1f} ms, hit {k['hit']}, retarget {k.get('retarget_ack')} / "
                         f"{k.get('retarget_hit')} ms" if isinstance(k, dict) else k), file=sys.stderr, flush=True)
            helper.end()
            helper = None
    finally:
        if helper is not None:
            helper.end()
        for p in Lines.started:
            if p.p.poll() is None:
                p.p.kill()
                p.p.wait()
        with open(PID_MAX, "w") as f:
            f.write(pid_max)
        shutil.rmtree(work, ignore_errors=True)

    ni = "not installed"
    rows = [
        ("ksymwatch: start to `# armed` (ms)", lambda r: cell(r["ksw"], "arm")),
        ("ksymwatch: `store` to hit line (ms)", lambda r: cell(r["ksw"], "hit", missing="no hit")),
        ("ksymwatch: `watch ADDR2/8` to `# watch` ack (ms)", lambda r: cell(r["ksw"], "retarget_ack")),
        ("ksymwatch: `watch ADDR2/8` to first hit at ADDR2 (ms)", lambda r: cell(r["ksw"], "retarget_hit",
                                                                                 missing="no hit")),
        ("ksymwatch: descriptors while armed", lambda r: cell(r["ksw"], "fds", unit="")),
        ("ksymwatch: peak RSS (VmHWM)", lambda r: cell(r["ksw"], "hwm", unit="MiB")),
        ("perf record -p: start to events enabled (ms)", lambda r: cell(r["perf"], "arm") if have_perf else ni),
        ("perf trace -p: start to first sample, `store` every 10 ms (ms)",
         lambda r: cell(r["trace"], "first") if have_perf else ni),
        ("perf trace -p: `store` to sample line (ms)",
         lambda r: cell(r["trace"], "hit", missing="no hit", first=False) if have_perf else ni),
        ("perf: retarget", lambda r: "cannot: restart" if have_perf else ni),
        ("perf record: descriptors while enabled", lambda r: cell(r["perf"], "fds", unit="", first=False) if have_perf else ni),
        ("perf record: peak RSS (VmHWM)", lambda r: cell(r["perf"], "hwm", unit="MiB", first=False) if have_perf else ni),
        ("bpftrace -p: start to `ready` (ms)", lambda r: cell(r["bpf"], "ready") if have_bpftrace else ni),
        ("bpftrace -p: `store` to `hit` (ms)",
         lambda r: cell(r["bpf"], "hit", missing="no hit in 2 s (main thread only)") if have_bpftrace else ni),
        ("bpftrace: retarget", lambda r: "cannot: restart" if have_bpftrace else ni),
        ("bpftrace: descriptors while attached", lambda r: cell(r["bpf"], "fds", unit="") if have_bpftrace else ni),
        ("bpftrace: peak RSS (VmHWM)", lambda r: cell(r["bpf"], "hwm", unit="MiB") if have_bpftrace else ni),
    ]
    print(f"ksymwatch {commit}, {datetime.date.today().isoformat()}, {os.uname().release}, {os.cpu_count()} CPUs, "
          f"median of {args.k} runs\n")
    print("| measurement | " + " | ".join(f"{n:,} thread{'s' if n != 1 else ''}" for n in counts) + " |")
    print("| --- |" + " ---: |" * len(counts))
    for label, f in rows:
        print(f"| {label} | " + " | ".join(f(results[n]) for n in counts) + " |")


if __name__ == "__main__":
    main()
