"""What every benchmark script shares: the repository root and the machine-wide live-test lock, which any
run that arms breakpoints must hold (debug registers are shared with the test suite and other benchmarks)."""
import fcntl
import os

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
