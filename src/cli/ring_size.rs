//! The default size of the hit path's per-CPU BPF ring buffers when `--buffer-pages` is not given: large
//! enough to hold what one CPU's writers can store while the reader is away, from the number of CPUs and
//! what the watch covers, and capped. Pure, so the policy is tested offline.
//!
//! A ring must hold the hits its CPU takes between two drains. The reader drains every [`TICK`] at least
//! (10 ms; in a flood exactly then), and a CPU takes a hit every ~7 us at most here (the debug exception and
//! the hit program; [`MIN_HIT_GAP`] allows for a faster machine), so one tick is 2,000 records. When the reader shares its CPU with `w`
//! runnable writers and runs at the normal priority (the raise refused or `--realtime off`), the scheduler
//! runs each of them for its slice first, and one slice of the reader's does not drain what `w` slices
//! wrote (a printed hit costs it more than a store costs a writer): the ring holds [`SLICE_ROUNDS`] rounds
//! of `w` slices, as measured (below). A process watch knows
//! its threads at start (`w` = threads per CPU); a launched command starts its threads later, so it gets
//! [`LAUNCH_WRITERS`]; a system-wide watch one writer a CPU.
//!
//! A record is as long as the hit program writes it ([`record_bytes`], from [`crate::perf::hit_record`]'s
//! layout and the ring's own header): 48 bytes in the ring for a system-wide watch, 56 for a process
//! watch (the watched bytes read at the trap), 248 with `--value` (the old value, the registers and the
//! instruction bytes). That is a CPU's steady writer's record, its chain named by id: the writer's name
//! (16 bytes) comes only when the CPU's writer changes, once a scheduler slice in a flood; a chain the
//! `chains` map has no room for comes inline (100 bytes and more), and `--cgroup`'s id is 8 bytes more,
//! neither counted here (the size is rounded up to a power of two anyway).
//!
//! The cap: a BPF ring buffer is kernel memory (vmalloc'd, never swapped) charged to the tracer's memory
//! cgroup, not to RLIMIT_MEMLOCK (since Linux 5.11), and a watch has one per CPU and target. So a ring is at
//! most [`MAX_RING_PAGES`], and all of a watch's rings together at most [`MAX_TOTAL_PAGES`] (64 MiB with
//! 4 KiB pages), whatever the machine; never below [`MIN_RING_PAGES`], the fixed default before.
//! `--buffer-pages` overrides all of this (and sizes the perf rings too, which stay at [`PERF_RING_PAGES`]
//! by default: they are charged to RLIMIT_MEMLOCK past `perf_event_mlock_kb`, and carry hits only off the
//! hit path).

use std::time::Duration;

use crate::perf::bpf_ring;
use crate::perf::hit_record::Layout;
use crate::trace::pace::TICK;

/// Each breakpoint event's perf ring, in pages, unless `--buffer-pages` says otherwise.
pub const PERF_RING_PAGES: usize = 128;

/// The smallest default hit ring (the fixed default before sizing): 512 KiB with 4 KiB pages.
pub const MIN_RING_PAGES: usize = 128;

/// The largest default hit ring: 16 MiB with 4 KiB pages.
pub const MAX_RING_PAGES: usize = 4096;

/// The most pages all the default hit rings of one watch take together: 64 MiB with 4 KiB pages.
pub const MAX_TOTAL_PAGES: usize = 16384;

/// The fastest a CPU takes hits, as the time between two: the trap costs the writer ~7 us here
/// (BENCHMARKS.md, throughput); a little faster, for a faster machine.
const MIN_HIT_GAP: Duration = Duration::from_micros(5);

/// Rounds of every writer's slice a ring holds beside the tick. Measured with `scripts/bench-bursts.py`
/// (p64: 64 threads x 1,000 stores under `-p`; launch96: 96 threads x 700 under `-- CMD`) at `--realtime
/// off` on 2 CPUs: one round (256 pages) printed 29,000-61,000 of 64,000 and 67,200 stores, two (512)
/// 57,500-64,000, four (1024) every store (the summary holds every store either way: it counts in the
/// kernel). At the default real-time priority the reader needs none of this.
const SLICE_ROUNDS: u64 = 4;

/// Writers per CPU assumed for a launched command, whose threads are not known when the rings are made.
pub const LAUNCH_WRITERS: u64 = 32;

/// Writers per CPU beyond which a ring does not grow (the cap takes over long before on most machines).
const MAX_WRITERS: u64 = 64;

/// What the watch covers, as far as the ring size goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Every task on each CPU.
    System,
    /// Processes with this many threads at start.
    Threads(u64),
    /// A command about to start: its threads are not known yet.
    Launch,
}

/// The default hit ring of one CPU and target, in pages (a power of two): `cpus` CPUs watched, `targets`
/// targets, `values` whether records carry `--value`'s registers, `page` the page size.
pub fn hit_ring_pages(
    cpus: usize,
    targets: usize,
    coverage: Coverage,
    values: bool,
    page: usize,
) -> usize {
    let cpus = cpus.max(1) as u64;
    let writers = match coverage {
        Coverage::System => 1,
        Coverage::Threads(n) => n.div_ceil(cpus).max(1),
        Coverage::Launch => LAUNCH_WRITERS,
    }
    .min(MAX_WRITERS);
    // Away a tick, plus rounds of a slice for each writer that runs before the reader at the normal
    // priority.
    let away = TICK.as_nanos() as u64 + SLICE_ROUNDS * writers * slice_ns(cpus);
    let hits = away.div_ceil(MIN_HIT_GAP.as_nanos() as u64);
    let want = (hits * record_bytes(coverage, values)).div_ceil(page.max(1) as u64) as usize;
    let budget = MAX_TOTAL_PAGES / (cpus as usize * targets.max(1));
    let cap = MAX_RING_PAGES
        .min(prev_power_of_two(budget))
        .max(MIN_RING_PAGES);
    want.next_power_of_two().clamp(MIN_RING_PAGES, cap)
}

/// The ring bytes of a kept hit's record under `coverage`, with `--value`'s fields where `values`: the
/// record's header and the fields the hit program's spec reads for such a watch
/// ([`crate::perf::bpf::hit_set`]: a process watch reads the watched bytes, `--value` and `--if` also keep
/// the old value and carry the registers and instruction bytes), in the ring with its header. Without the
/// name and the inline chain, which a steady writer's record does not carry (the module's docs).
fn record_bytes(coverage: Coverage, values: bool) -> u64 {
    let layout = Layout {
        values: values || coverage != Coverage::System,
        olds: values,
        cgroup: false,
        regs: values,
    };
    bpf_ring::record_space(layout.comm() as usize) as u64
}

/// The scheduler's base slice as the kernel scales it with the CPU count (EEVDF's 0.75 ms times
/// 1 + log2(CPUs), CPUs counted up to 8).
fn slice_ns(cpus: u64) -> u64 {
    750_000 * (1 + u64::from(cpus.clamp(1, 8).ilog2()))
}

/// The largest power of two at most `n` (1 for 0).
fn prev_power_of_two(n: usize) -> usize {
    if n <= 1 {
        1
    } else {
        1 << n.ilog2()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    /// One target's pages on 2 CPUs under `coverage`: without `--value`, and with it.
    fn without_and_with_values(coverage: Coverage) -> (usize, usize) {
        let pages = |values| hit_ring_pages(2, 1, coverage, values, PAGE);
        (pages(false), pages(true))
    }

    /// The records as the hit program writes them (BENCHMARKS.md, "Compact hit records": 40, 48 and 240
    /// bytes measured live) with the ring's 8-byte header.
    #[test]
    fn records_are_as_long_as_the_hit_program_writes_them() {
        assert_eq!(record_bytes(Coverage::System, false), 48);
        assert_eq!(record_bytes(Coverage::Threads(4), false), 56);
        assert_eq!(record_bytes(Coverage::Launch, false), 56);
        assert_eq!(record_bytes(Coverage::System, true), 248);
        assert_eq!(record_bytes(Coverage::Launch, true), 248);
    }

    #[test]
    fn a_system_watch_holds_a_tick_and_a_slice() {
        // 10 ms + 4 x 1.5 ms at a hit per 5 us: 3,200 records of 48 bytes, 38 pages: the floor, the old
        // default; with --value 248 bytes, 194 pages.
        assert_eq!(without_and_with_values(Coverage::System), (128, 256));
    }

    #[test]
    fn more_threads_per_cpu_make_bigger_rings() {
        // 64 threads on 2 CPUs: 10 + 4 x 32 x 1.5 ms = 202 ms, 40,400 records of 56 bytes, 553 pages ->
        // 1024.
        assert_eq!(
            hit_ring_pages(2, 1, Coverage::Threads(64), false, PAGE),
            1024
        );
        assert_eq!(hit_ring_pages(2, 1, Coverage::Threads(2), false, PAGE), 128);
        let mut last = 0;
        for n in [1, 8, 32, 128, 512] {
            let p = hit_ring_pages(2, 1, Coverage::Threads(n), false, PAGE);
            assert!(p >= last, "{n} threads: {p} pages after {last}");
            last = p;
        }
        // The same threads over more CPUs are fewer writers per CPU.
        assert!(
            hit_ring_pages(16, 1, Coverage::Threads(64), false, PAGE)
                < hit_ring_pages(2, 1, Coverage::Threads(64), false, PAGE)
        );
    }

    #[test]
    fn a_launch_assumes_many_writers() {
        // As 64 threads on 2 CPUs; with --value 40,400 records of 248 bytes, 2,447 pages -> 4096.
        assert_eq!(without_and_with_values(Coverage::Launch), (1024, 4096));
    }

    #[test]
    fn always_a_power_of_two_within_the_caps() {
        for cpus in [1, 2, 3, 8, 64, 256, 4096] {
            for targets in 1..=4 {
                for coverage in [
                    Coverage::System,
                    Coverage::Launch,
                    Coverage::Threads(100_000),
                ] {
                    for values in [false, true] {
                        let p = hit_ring_pages(cpus, targets, coverage, values, PAGE);
                        assert!(p.is_power_of_two(), "{p}");
                        assert!((MIN_RING_PAGES..=MAX_RING_PAGES).contains(&p), "{p}");
                        // The total budget holds wherever the floor does not take over.
                        if p > MIN_RING_PAGES {
                            assert!(
                                p * cpus * targets <= MAX_TOTAL_PAGES,
                                "{cpus} x {targets} x {p}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn many_cpus_share_the_budget() {
        // 256 CPUs, 1 target: 64 pages each would be the budget, the floor keeps the old default.
        assert_eq!(
            hit_ring_pages(256, 1, Coverage::Launch, true, PAGE),
            MIN_RING_PAGES
        );
        // 8 CPUs, 4 targets: 512 pages each at most.
        assert_eq!(
            hit_ring_pages(8, 4, Coverage::Threads(100_000), true, PAGE),
            512
        );
    }

    #[test]
    fn larger_pages_need_fewer() {
        // The 10 MB of 64 threads' --value records: 612 pages of 16 KiB -> 1024, against 4096 of 4 KiB.
        assert_eq!(
            hit_ring_pages(2, 1, Coverage::Threads(64), true, 16384),
            1024
        );
    }
}
