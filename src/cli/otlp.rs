//! What `--format otlp-json` needs from the machine: the resource (this host's name, kernel release and
//! architecture, from /proc, and the tracer's pid) and the clock that turns the kernel's CLOCK_MONOTONIC
//! stamps into wall-clock times.

use crate::perf::sys;
use crate::report::otlp::{Clock, Resource};

/// This host and tracer; a /proc file that cannot be read leaves its attribute out.
pub fn resource() -> Resource {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    // OpenTelemetry's `host.arch` values.
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "x86",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        other => other,
    };
    Resource {
        host_name: read("/proc/sys/kernel/hostname"),
        os_version: read("/proc/sys/kernel/osrelease"),
        host_arch: Some(arch.to_string()),
        pid: std::process::id(),
    }
}

/// The wall clock minus CLOCK_MONOTONIC, taken once: the realtime read sits between two monotonic reads
/// and is paired with their midpoint, so the offset is off by at most half the (sub-microsecond) gap.
pub fn clock() -> Clock {
    let before = sys::monotonic_ns();
    let wall = sys::realtime_ns();
    let after = sys::monotonic_ns();
    Clock {
        offset_ns: wall.saturating_sub(before + after.saturating_sub(before) / 2),
        now_ns: sys::realtime_ns,
    }
}
