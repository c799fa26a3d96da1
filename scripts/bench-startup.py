#!/usr/bin/env python3
"""Start-up benchmark: from exec to the first hit printed, ksymwatch (cold and warm symbol cache) against
bpftrace on the same watchpoint (issue #12, "armed before bpftrace has parsed its script").

Usage: sudo scripts/bench-startup.py [ROUNDS] [--ksymwatch BIN]... [--no-bpftrace]

Each round runs, in turn: every ksymwatch binary given (default target/release/ksymwatch) with its kallsyms
cache removed first (cold) and then again with the cache that run wrote (warm), and
`bpftrace -e 'watchpoint:ADDR:8:w { printf("hit\\n"); exit(); }'`. Every run is
`TOOL write __start_init_stack+0x3e00 --count 1` (the CPU0 idle stack, written whenever CPU0 idles) under
the live-test lock, 0.3 s apart, so each starts with the hw_breakpoint lock quiet as a user's first run does.
For ksymwatch, `armed` is the time of the `# armed` line and `hit` that of the first hit line; for both
tools `exit` is the wall time of the process. Medians over the rounds; the first hit also waits for CPU0
to go idle, so on a busy machine `hit` and `exit` carry that noise while `armed` does not.

The cache lives in a temporary directory (KSYMWATCH_CACHE_DIR), never the system one.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET = "__start_init_stack+0x3e00"
LOCK = "/tmp/ksymwatch-live-tests.lock"


def resolve_addr(ksw):
    out = subprocess.run([ksw, "resolve", TARGET, "--json"], capture_output=True, text=True, check=True)
    import json

    return json.loads(out.stdout)["runtime_addr"]


def run(argv, env, armed_marker, hit_test):
    """Runs argv under the live lock; returns (armed, hit, exit) seconds from exec (None if not seen)."""
    # Take the lock first, outside the timed region.
    lock = open(LOCK, "a")
    import fcntl

    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        armed = hit = None
        for line in p.stdout:
            now = time.monotonic() - t0
            if armed is None and armed_marker and line.startswith(armed_marker):
                armed = now
            if hit is None and hit_test(line):
                hit = now
        p.wait(timeout=120)
        end = time.monotonic() - t0
        return armed, hit, end
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def med(xs):
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs) * 1000:7.1f} ms" if xs else "      -"


def main():
    args = sys.argv[1:]
    rounds = 7
    bins = []
    bpf = True
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--ksymwatch":
            bins.append(args[i + 1])
            i += 2
            continue
        if a == "--no-bpftrace":
            bpf = False
        else:
            rounds = int(a)
        i += 1
    if not bins:
        bins = ["target/release/ksymwatch"]
    cache = tempfile.mkdtemp(prefix="ksw-startup-cache-")
    os.chmod(cache, 0o700)
    env = dict(os.environ, KSYMWATCH_CACHE_DIR=cache)
    addr = resolve_addr(bins[0])
    hit_line = lambda l: not l.startswith("#") and "W ip=" in l
    results = {}
    for r in range(rounds):
        for b in bins:
            for mode in ("cold", "warm"):
                if mode == "cold":
                    subprocess.run(["rm", "-f", os.path.join(cache, "kallsyms.bin")], check=True)
                time.sleep(0.3)
                res = run([b, "write", TARGET, "--count", "1"], env, "# armed", hit_line)
                results.setdefault(f"{b} ({mode} cache)", []).append(res)
        if bpf:
            time.sleep(0.3)
            prog = f'watchpoint:{addr}:8:w {{ printf("hit\\n"); exit(); }}'
            res = run(["bpftrace", "-e", prog], env, None, lambda l: l.strip() == "hit")
            results.setdefault("bpftrace", []).append(res)
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    print(f"{rounds} rounds, median; load average before/after: see uptime")
    print(f"{'tool':60} {'armed':>10} {'first hit':>10} {'exit':>10}")
    for name, rs in results.items():
        print(f"{name:60} {med([x[0] for x in rs]):>10} {med([x[1] for x in rs]):>10} {med([x[2] for x in rs]):>10}")
    subprocess.run(["rm", "-rf", cache])


if __name__ == "__main__":
    main()
