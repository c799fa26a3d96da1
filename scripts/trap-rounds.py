#!/usr/bin/env python3
"""Rounds of a test helper watched by ksymwatch, counting the rounds whose helper died by a signal (the
SIGTRAP seen in live_thread_values' sprout rounds and live_exact's lossy ring; docs/machine.md, "A watched
process killed by SIGTRAP").

Each round takes the live tests' lock, starts the helper, arms `ksymwatch write --json --no-status ... -p PID
target_var` against it as the test does, says "go" and waits for both; one line per round is appended to the
log, marked DEATH when the helper ended by a signal or (with --catch) received a SIGTRAP.

  gcc -O1 -fno-omit-frame-pointer -pthread -Itests/helpers tests/helpers/threads.c -o /tmp/trap/threads
  gcc -O1 -fno-omit-frame-pointer -Itests/helpers tests/helpers/writer.c -o /tmp/trap/writer
  gcc -O1 -shared -fPIC scripts/trap-catch.c -o /tmp/trap/trap-catch.so     # for --catch
  scripts/trap-rounds.py --mode sprout --rounds 100 --log /tmp/trap/sprout.log [--catch]

Modes: sprout (`threads sprout 4000 200`, --per-thread: perf samples per thread), sprout-value (the same with
--value), sprout-hit (no --per-thread: one event per CPU and the hit program), sites (`writer sites 100000
0`, --value --buffer-pages 1, as live_exact's lossy-ring test).

Measured here (2 vCPUs, Firecracker, Linux 6.18, Intel, beside other helpers' builds and tests): sprout, 1
death in 358 rounds; sprout-hit, none in 100; sites with --catch, 1 round in 60 with 2 SIGTRAPs (TRAP_BRKPT,
at the instruction after the store; the summary's hits 99,998 of 100,000).
"""
import argparse
import fcntl
import os
import subprocess
import time

LOCK = "/tmp/ksymwatch-live-tests.lock"
MODES = {
    "sprout": (["threads", "sprout", "4000", "200"], ["--per-thread", "--buffer-pages", "4096"]),
    "sprout-value": (["threads", "sprout", "4000", "200"], ["--per-thread", "--value", "--buffer-pages", "4096"]),
    "sprout-hit": (["threads", "sprout", "4000", "200"], ["--buffer-pages", "4096"]),
    "sites": (["writer", "sites", "100000", "0"], ["--value", "--buffer-pages", "1"]),
}


def read_until(stream, want):
    """Lines up to and including the first containing `want`, and whether it came before EOF."""
    lines = []
    for line in stream:
        lines.append(line)
        if want in line:
            return lines, True
    return lines, False


def size(path):
    return os.path.getsize(path) if os.path.exists(path) else 0


def round_once(args, helper, tracer_args, catch_log):
    env = dict(os.environ)
    if args.catch:
        env["LD_PRELOAD"] = args.catch_lib
        env["TRAP_CATCH_LOG"] = catch_log
    caught_before = size(catch_log)
    started = time.time()
    h = subprocess.Popen([os.path.join(args.helpers, helper[0])] + helper[1:], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    h.stdout.readline()  # the banner
    if helper[0] == "threads":
        read_until(h.stdout, "ready")
    cmd = [args.ksymwatch, "write", "--json", "--no-status"] + tracer_args + ["-p", str(h.pid), "target_var"]
    t = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    _, armed = read_until(t.stdout, '"type":"armed"')
    try:
        h.stdin.write("go\n")
        h.stdin.flush()
    except BrokenPipeError:
        pass
    _, done = read_until(h.stdout, "done")
    try:
        h.stdin.close()
    except BrokenPipeError:
        pass
    helper_status = h.wait()
    rest = t.stdout.read()
    tracer_status = t.wait()
    summary = next((l for l in reversed(rest.splitlines()) if '"type":"summary"' in l), "-")
    caught = size(catch_log) > caught_before
    return {
        "helper": helper_status, "tracer": tracer_status, "armed": armed, "done": done,
        "secs": time.time() - started, "caught": caught, "summary": summary,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=sorted(MODES), default="sprout")
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--log", required=True)
    p.add_argument("--catch", action="store_true", help="preload trap-catch.so into the helper")
    p.add_argument("--catch-lib", default="/tmp/trap/trap-catch.so")
    p.add_argument("--helpers", default="/tmp/trap")
    p.add_argument("--ksymwatch", default=os.path.join(os.path.dirname(__file__), "..", "target", "debug",
                                                       "ksymwatch"))
    args = p.parse_args()
    helper, tracer_args = MODES[args.mode]
    catch_log = args.log + ".caught"
    deaths = 0
    with open(args.log, "a") as log:
        for n in range(args.rounds):
            with open(LOCK, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                r = round_once(args, helper, tracer_args, catch_log)
            dead = r["helper"] < 0 or r["caught"]
            deaths += dead
            line = (f"{time.strftime('%H:%M:%S')} {args.mode} round {n} helper={r['helper']} tracer={r['tracer']}"
                    f" armed={r['armed']} done={r['done']} {r['secs']:.1f}s")
            if dead:
                line += f" DEATH signal={-r['helper'] if r['helper'] < 0 else 0} caught={r['caught']}"
                line += " " + r["summary"][:300]
            print(line, file=log, flush=True)
        print(f"{time.strftime('%H:%M:%S')} {args.mode} TOTAL rounds={args.rounds} deaths={deaths}"
              f" catch={args.catch}", file=log, flush=True)


if __name__ == "__main__":
    main()
