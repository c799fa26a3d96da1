//! The end-of-run audit of one CPU and watch's event: what the kernel and the programs counted against what
//! its rings delivered, each counter read from the base it had when the event was taken ([`Bases`]),
//! so a loss the rings never reported is found.

use std::io;

use crate::perf::bpf::hit_set::HitPrograms;
use crate::perf::event::{CpuEvent, EventConfig};

use super::Tracked;

/// `ev`'s CPU's count in one of its watch's program's per-CPU counters, which `read` reads by CPU number
/// (`HitPrograms::dropped_by_cpu`, ...): 0 off the hit path (no program), or if it cannot be read.
pub(super) fn on_cpu(
    cfg: &EventConfig,
    ev: &CpuEvent,
    read: fn(&HitPrograms, usize) -> io::Result<Vec<u64>>,
) -> u64 {
    let Some(h) = cfg.delivery.hit_programs() else {
        return 0;
    };
    read(h, ev.watch)
        .ok()
        .and_then(|by_cpu| by_cpu.get(ev.cpu as usize).copied())
        .unwrap_or(0)
}

/// The in-kernel counters of one CPU and watch: read when the event is taken, the base its audit counts
/// from, and again at the audit. The base must be read before the event is enabled: the kernel's own
/// count of the event's hits starts at its open, and a counter read later would leave the traps in
/// between in no count.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Bases {
    /// The hit path: the in-kernel drop counter (filters, condition, other processes).
    dropped: u64,
    /// The hit path: of those, traps of other processes.
    other: u64,
    /// The hit path: kept hits the CPU's ring buffer had no room for.
    pub(super) lost: u64,
    /// The hit path: traps after `--count`'s N-th hit.
    beyond: u64,
    /// The per-thread hit path: second reports of one store.
    repeated: u64,
}

impl Bases {
    /// The counters of `ev`'s CPU and watch now.
    pub(super) fn read(cfg: &EventConfig, ev: &CpuEvent) -> Bases {
        Bases {
            dropped: on_cpu(cfg, ev, HitPrograms::dropped_by_cpu),
            other: on_cpu(cfg, ev, HitPrograms::other_process_by_cpu),
            lost: on_cpu(cfg, ev, HitPrograms::lost_by_cpu),
            beyond: on_cpu(cfg, ev, HitPrograms::beyond_count_by_cpu),
            repeated: on_cpu(cfg, ev, HitPrograms::repeated_by_cpu),
        }
    }
}

/// One event's books at the end: what the kernel counted against what reached us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Audit {
    pub cpu: u32,
    pub watch: usize,
    /// Hits the kernel counted; `None` if the counter could not be read.
    pub kernel_hits: Option<u64>,
    /// Samples the kernel dropped, and on the hit path the records the program's ring buffer had no room
    /// for; `None` on kernels without `PERF_FORMAT_LOST` (off the hit path).
    pub kernel_lost: Option<u64>,
    pub samples: u64,
    pub lost_records: u64,
    pub undecodable: u64,
    /// The hit path: hits the program dropped in the kernel (filters, condition, other processes).
    pub filtered: u64,
    /// Of `filtered`: traps of other processes at the watched address (a process watch on the hit path).
    pub other_process: u64,
    /// `--count N` on the hit path: traps after the N-th hit, which the program kept none of (the run
    /// ends at the N-th, but the breakpoint counts until it is closed).
    pub beyond_count: u64,
    /// The per-thread hit path: second reports of one store by another event of its thread, which the
    /// program dropped, or which came as a perf sample of a copy without the program and the decoder
    /// dropped (each breakpoint counted the store; it is one hit, not filtered).
    pub repeated: u64,
    /// The hit path: of [`Audit::unreported_lost`], the kept hits the program's ring buffer had no room
    /// for after its last record read (the kernel's totals count them; the rest of the tail is the
    /// breakpoint's perf ring's).
    pub unprinted_tail: u64,
}

impl Audit {
    /// Losses the kernel counted but never wrote a LOST record for (the tail of a burst that ended with the
    /// ring full).
    pub fn unreported_lost(&self) -> u64 {
        self.kernel_lost
            .map_or(0, |k| k.saturating_sub(self.lost_records))
    }

    /// What the session counts as lost for this ring once its tail is added: every record the kernel
    /// said it dropped, and every record that could not be decoded.
    pub fn counted_lost(&self) -> u64 {
        self.lost_records + self.unreported_lost() + self.undecodable
    }

    /// Of [`Audit::counted_lost`], the hits. A full ring drops whatever record comes next, and the
    /// kernel's count of them takes in the task records that share the ring (a thread's exit, a rename,
    /// a mapping) as well as the breakpoint's samples; the breakpoint's own counter says how many hits
    /// never arrived (counted, and neither a sample nor dropped by a program), and no more of the lost
    /// records can have been hits. Without a counter, every lost record counts.
    pub fn lost_hits(&self) -> u64 {
        let counted = self.counted_lost();
        match self.kernel_hits {
            Some(hits) => {
                counted.min(hits.saturating_sub(
                    self.samples + self.filtered + self.beyond_count + self.repeated,
                ))
            }
            None => counted,
        }
    }

    /// Hits the kernel counted that neither arrived nor were reported lost (throttled samples, or a
    /// counter the kernel cannot give).
    pub fn unaccounted(&self) -> Option<u64> {
        let lost = self.lost_records.max(self.kernel_lost.unwrap_or(0));
        let hits = self.kernel_hits?;
        Some(hits.saturating_sub(
            self.samples
                + self.undecodable
                + lost
                + self.filtered
                + self.beyond_count
                + self.repeated,
        ))
    }
}

/// What the kernel dropped of one CPU and watch's records: the breakpoint's own lost samples (`perf`,
/// `PERF_FORMAT_LOST`), and on the hit path the records the program's ring buffer had no room for
/// (`hit_ring`) and the task records its perf ring reported lost (`perf_ring_reported`). Those are the
/// dummy event's, whose losses the breakpoint's counter does not hold; left out, they were taken for
/// reports of the hits' losses, and the hit ring's unreported tail came out short by as many (a busy
/// machine's task records lost while stdout was blocked: 19,155 hits marked `not printed` of 19,790).
fn kernel_lost(perf: Option<u64>, hit_ring: Option<u64>, perf_ring_reported: u64) -> Option<u64> {
    let hit_path = hit_ring.map(|ring| ring + perf_ring_reported);
    match (perf, hit_path) {
        (Some(perf), hit_path) => Some(perf + hit_path.unwrap_or(0)),
        (None, hit_path) => hit_path,
    }
}

pub(super) fn audit(t: &Tracked, cfg: &EventConfig) -> Audit {
    let counts = t.ev.counts().ok();
    let tally = t.decoder.tally();
    let now = Bases::read(cfg, &t.ev);
    let hits_lost =
        t.ev.hits
            .as_ref()
            .map(|_| now.lost.saturating_sub(t.bases.lost));
    Audit {
        unprinted_tail: hits_lost.map_or(0, |n| n.saturating_sub(t.decoder.hit_ring_lost())),
        filtered: now.dropped.saturating_sub(t.bases.dropped),
        other_process: now.other.saturating_sub(t.bases.other),
        beyond_count: now.beyond.saturating_sub(t.bases.beyond),
        repeated: now.repeated.saturating_sub(t.bases.repeated) + tally.copies,
        cpu: t.ev.cpu,
        watch: t.ev.watch,
        kernel_hits: counts.map(|c| c.hits),
        kernel_lost: kernel_lost(
            counts.and_then(|c| c.lost),
            hits_lost,
            tally.lost_records.saturating_sub(t.decoder.hit_ring_lost()),
        ),
        samples: tally.samples,
        lost_records: tally.lost_records,
        undecodable: tally.undecodable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hit path with stdout blocked on a busy machine (measured): the hit ring dropped 19,790 hits
    /// and reported 868 of them before the end, the perf ring reported 635 task records lost, and the
    /// breakpoint wrote nothing itself. The tail the stream must mark as hits not printed is the hit
    /// ring's 18,922, all of what no record reported.
    #[test]
    fn task_records_lost_on_the_hit_path_do_not_shorten_the_hits_tail() {
        let a = Audit {
            cpu: 0,
            watch: 0,
            kernel_hits: Some(20_000),
            kernel_lost: kernel_lost(Some(0), Some(19_790), 635),
            samples: 210,
            lost_records: 868 + 635,
            undecodable: 0,
            filtered: 0,
            other_process: 0,
            repeated: 0,
            beyond_count: 0,
            unprinted_tail: 19_790 - 868,
        };
        assert_eq!(a.unreported_lost(), a.unprinted_tail);
        assert_eq!(a.lost_hits(), 19_790);
        assert_eq!(a.unaccounted(), Some(0));
    }

    /// Off the hit path the perf ring's reports are the breakpoint's own samples', which its counter
    /// holds: nothing is added; without the counter (before Linux 6.0) nothing is known.
    #[test]
    fn off_the_hit_path_the_breakpoints_counter_is_the_count() {
        assert_eq!(kernel_lost(Some(12), None, 0), Some(12));
        assert_eq!(kernel_lost(None, None, 0), None);
        assert_eq!(kernel_lost(None, Some(5), 2), Some(7));
    }
}
