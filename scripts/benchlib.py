"""What every benchmark script shares: the repository root, the machine-wide live-test lock, which any
run that arms breakpoints must hold (debug registers are shared with the test suite and other benchmarks),
and the few /proc and /sys readings several of them take."""
import argparse
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = "/tmp/ksymwatch-live-tests.lock"


class Locked:
    """Holds the live-test lock for one run (a flock on a descriptor children do not inherit)."""

    def __enter__(self):
        self.f = open(LOCK, "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def online_cpus():
    """The online CPUs, from /sys/devices/system/cpu/online (`0-1`, `0,2-3`)."""
    cpus = []
    with open("/sys/devices/system/cpu/online") as f:
        for part in f.read().strip().split(","):
            a, _, b = part.partition("-")
            cpus.extend(range(int(a), int(b or a) + 1))
    return cpus


def vm_rss_kb(pid):
    """The process's resident set, in KiB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def proc_cpu_s(pid):
    """CPU seconds (user+sys, all threads) the process has used so far, from /proc (clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def release_binary(given):
    """The ksymwatch binary to measure: `given`, or this tree's release build, built first."""
    if given:
        return given
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target/release/ksymwatch")


def build_writer(workdir):
    """tests/helpers/writer.c built non-PIE into `workdir`: every run of it has its global at one address.
    Returns the binary and that address (`0x...`, from its banner)."""
    writer = os.path.join(workdir, "writer")
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-no-pie", "-o", writer,
                    os.path.join(ROOT, "tests/helpers/writer.c")], check=True)
    banner = subprocess.run([writer, "now", "0", "0"], capture_output=True, text=True, check=True).stdout
    return writer, re.search(r"addr=(0x[0-9a-f]+)", banner).group(1)


def stop(p, sig=signal.SIGINT, timeout=30):
    """Sends `sig` to the process `p` if it still runs and waits for it, killing it after `timeout` s;
    returns its exit code."""
    if p.poll() is None:
        p.send_signal(sig)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    return p.returncode


def wait_armed_file(tracer, out_path, who, limit=60):
    """Waits until ksymwatch's `-o` file `out_path` holds its `# armed` line; exits the script naming `who`
    when the tracer (a Popen with a stderr pipe) ends first or `limit` seconds pass."""
    deadline = time.time() + limit
    while True:
        if tracer.poll() is not None:
            sys.exit(f"{who}: ksymwatch exited before `# armed`: {tracer.stderr.read()}")
        if os.path.exists(out_path) and "# armed" in open(out_path).read():
            return
        if time.time() > deadline:
            sys.exit(f"{who}: no `# armed` within {limit} s")
        time.sleep(0.05)


def require_root_binary_and_gcc(who, binary):
    """Exits the script `who` unless it runs as root, `binary` is an executable ksymwatch and gcc is
    there to build the writer helper."""
    if os.geteuid() != 0:
        sys.exit(f"{who}: needs root (sudo scripts/{who}.py)")
    if not os.access(binary, os.X_OK):
        sys.exit(f"{who}: no ksymwatch at {binary}: run `cargo build --release` first")
    if shutil.which("gcc") is None:
        sys.exit(f"{who}: needs gcc to build the writer helper")


def thread_bench_args(doc, k, k_help, threads):
    """The process benchmarks' command line (`-k RUNS`, `--threads N,N,...`, an optional binary): the
    parsed arguments, the thread counts, and the binary to measure ([`release_binary`])."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("-k", type=int, default=k, help=k_help)
    ap.add_argument("--threads", default=threads, help="thread counts, comma-separated")
    ap.add_argument("binary", nargs="?", help="ksymwatch binary (default: target/release/ksymwatch, built)")
    args = ap.parse_args()
    return args, [int(x) for x in args.threads.split(",")], release_binary(args.binary)


def paced_bench_args(doc, interval_ms):
    """The latency benchmarks' command line (`-n COUNT`, `--interval-ms MS`, an optional binary): the
    parsed arguments and the binary to measure ([`release_binary`])."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--interval-ms", type=float, default=interval_ms)
    ap.add_argument("binary", nargs="?", help="ksymwatch binary (default: target/release/ksymwatch, built)")
    args = ap.parse_args()
    return args, release_binary(args.binary)


def interrupt(tracer, timeout):
    """Ends ksymwatch the way a user does (SIGINT), killing it after `timeout` s; its stderr (the
    summary)."""
    tracer.send_signal(signal.SIGINT)
    try:
        return tracer.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        tracer.kill()
        return tracer.communicate()[1]
