//! `clock_gettime(2)` of the three clocks the outputs stamp with.

/// CLOCK_MONOTONIC in nanoseconds: the clock the breakpoint events stamp their samples with.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_BOOTTIME in nanoseconds: CLOCK_MONOTONIC plus the time spent suspended (Perfetto's trace clock).
pub fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let (sec, nsec) = clock_gettime(clock);
    sec as u64 * 1_000_000_000 + nsec
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch (0 for a clock set before 1970).
pub fn realtime_ns() -> u64 {
    let (sec, nsec) = clock_gettime(libc::CLOCK_REALTIME);
    u64::try_from(sec).unwrap_or(0) * 1_000_000_000 + nsec
}

/// Seconds and nanoseconds of `clock`, one the kernel always has (all three asked for exist since Linux
/// 2.6.39).
fn clock_gettime(clock: libc::clockid_t) -> (i64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into; the clock asked for always exists.
    unsafe {
        libc::clock_gettime(clock, &mut ts);
    }
    (ts.tv_sec, ts.tv_nsec as u64)
}
