//! Where the reader runs while writers flood some CPUs: not on them, when it is real-time and another CPU
//! is quiet.
//!
//! A SCHED_FIFO reader (`--realtime`, the default where permitted) is woken on the CPU it last ran on
//! whenever the task running there is an ordinary one: the kernel moves a real-time task only away from
//! another real-time task. So once it has run on a writer's CPU it stays there for the whole run,
//! preempting that writer at every drain, and the writer pays the reader's time (~0.3 us a hit with
//! `--quiet`, measured: `scripts/bench-writer.py`'s waiting column) while another CPU may sit idle. At the
//! normal policy the scheduler's balancing would have moved it. So the reader counts the hits each CPU's
//! rings gave it in a window: when the window was busy (at least [`BUSY_HITS`]) and some CPUs gave at
//! most a quarter of the busiest one's hits, it runs only on those; otherwise (a burst on every CPU, a
//! quiet watch) anywhere, as started. A window ends once it is busy and [`MIN_WINDOW_NS`] old, or at
//! [`WINDOW_NS`] whatever it holds: a flood is seen within milliseconds of its start, where a fixed
//! 100 ms window left the reader on the writer's CPU for the flood's first 100 ms (~11,000 hits here,
//! 0.14 us of every store of a 100,000-store run: BENCHMARKS.md, #40). The decision is pure
//! ([`quiet_cpus`]); the affinity is set only when it changes.

use std::collections::{BTreeMap, BTreeSet};

/// The longest window: how often the reader looks at where the hits come from when they are few, seldom
/// enough that it costs nothing (one system call a window at most).
pub const WINDOW_NS: u64 = 100_000_000;

/// The shortest window: a busy one ends this soon, a few of the reader's millisecond drains, so that
/// one drain's hits do not decide alone.
pub const MIN_WINDOW_NS: u64 = 5_000_000;

/// Hits in a window below which the reader stays where it is: at fewer than 4,000 a second its time is
/// no writer's concern.
pub const BUSY_HITS: u64 = 400;

/// The CPUs the reader should run on, given the hits each CPU gave in a window: those that gave at most a
/// quarter of the busiest CPU's, when the window is busy and there are such CPUs; `None`: every CPU.
pub fn quiet_cpus(hits: &BTreeMap<u32, u64>) -> Option<BTreeSet<u32>> {
    let busiest = hits.values().copied().max()?;
    if hits.values().sum::<u64>() < BUSY_HITS {
        return None;
    }
    let quiet: BTreeSet<u32> = hits
        .iter()
        .filter(|&(_, &n)| n.saturating_mul(4) <= busiest)
        .map(|(&cpu, _)| cpu)
        .collect();
    (!quiet.is_empty()).then_some(quiet)
}

/// The running state: the window's start and each CPU's running hit count then, and the CPUs the reader
/// is held to (`None`: every CPU).
#[derive(Debug)]
pub struct Placement {
    since: u64,
    at_start: BTreeMap<u32, u64>,
    held: Option<BTreeSet<u32>>,
}

impl Placement {
    pub fn new(now: u64) -> Placement {
        Placement {
            since: now,
            at_start: BTreeMap::new(),
            held: None,
        }
    }

    /// Whether a window may have ended at `now`: [`Placement::update`] has something to look at.
    pub fn due(&self, now: u64) -> bool {
        now.saturating_sub(self.since) >= MIN_WINDOW_NS
    }

    /// At `now`, with each CPU's running count of hits read: once a window has passed, where the reader
    /// should run from now on when that changed (`Some(None)`: every CPU), else `None`. `realtime`:
    /// whether the reader runs under a real-time policy; at the normal one the scheduler places it, and
    /// it is never held.
    pub fn update(
        &mut self,
        now: u64,
        counts: &BTreeMap<u32, u64>,
        realtime: bool,
    ) -> Option<Option<BTreeSet<u32>>> {
        if !self.due(now) {
            return None;
        }
        let window: BTreeMap<u32, u64> = counts
            .iter()
            .map(|(&cpu, &n)| {
                let before = self.at_start.get(&cpu).copied().unwrap_or(0);
                (cpu, n.saturating_sub(before))
            })
            .collect();
        let busy = window.values().sum::<u64>() >= BUSY_HITS;
        if !busy && now.saturating_sub(self.since) < WINDOW_NS {
            return None;
        }
        self.since = now;
        self.at_start = counts.clone();
        let want = if realtime { quiet_cpus(&window) } else { None };
        (want != self.held).then(|| {
            self.held = want.clone();
            want
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(pairs: &[(u32, u64)]) -> BTreeMap<u32, u64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn a_busy_window_keeps_the_reader_on_the_quiet_cpus() {
        assert_eq!(quiet_cpus(&hits(&[(0, 0), (1, 30_000)])), Some([0].into()));
        assert_eq!(
            quiet_cpus(&hits(&[(0, 100), (1, 30_000), (2, 7_500), (3, 7_501)])),
            Some([0, 2].into())
        );
        // Every CPU as busy as the others (a burst everywhere), a quiet watch, no CPUs: anywhere.
        assert_eq!(quiet_cpus(&hits(&[(0, 20_000), (1, 30_000)])), None);
        assert_eq!(quiet_cpus(&hits(&[(0, 0), (1, BUSY_HITS - 1)])), None);
        assert_eq!(quiet_cpus(&hits(&[])), None);
    }

    /// A window's hits are the counts' growth since the last window; the affinity is asked for only when
    /// the decision changes, and never at the normal policy.
    #[test]
    fn the_affinity_changes_only_when_the_decision_does() {
        let mut p = Placement::new(0);
        let w = WINDOW_NS;
        assert_eq!(p.update(w / 2, &hits(&[(0, 0), (1, 100)]), true), None);
        assert_eq!(
            p.update(w, &hits(&[(0, 0), (1, 5_000)]), true),
            Some(Some([0].into()))
        );
        assert_eq!(p.update(2 * w, &hits(&[(0, 10), (1, 9_000)]), true), None);
        // The writer moved to cpu 0: cpu 1 is the quiet one now.
        assert_eq!(
            p.update(3 * w, &hits(&[(0, 8_000), (1, 9_000)]), true),
            Some(Some([1].into()))
        );
        // Quiet everywhere: anywhere again.
        assert_eq!(
            p.update(4 * w, &hits(&[(0, 8_000), (1, 9_000)]), true),
            Some(None)
        );
        // At the normal policy the reader is never held.
        let mut p = Placement::new(0);
        assert_eq!(p.update(w, &hits(&[(0, 0), (1, 5_000)]), false), None);
    }

    /// A flood is seen as soon as its window is busy and a few drains old; a quiet window runs its whole
    /// length, its hits adding up until then.
    #[test]
    fn a_busy_window_ends_early_a_quiet_one_at_its_length() {
        let mut p = Placement::new(0);
        assert!(!p.due(MIN_WINDOW_NS - 1));
        assert_eq!(
            p.update(MIN_WINDOW_NS, &hits(&[(0, 0), (1, BUSY_HITS)]), true),
            Some(Some([0].into())),
            "a busy window, 5 ms old"
        );
        let mut p = Placement::new(0);
        let few = BUSY_HITS / 4;
        for i in 1..4 {
            let at = MIN_WINDOW_NS * i;
            assert_eq!(p.update(at, &hits(&[(0, 0), (1, few * i)]), true), None);
        }
        // The window's hits are counted from its start, not from the last look.
        assert_eq!(
            p.update(WINDOW_NS / 2, &hits(&[(0, 0), (1, BUSY_HITS)]), true),
            Some(Some([0].into()))
        );
        // Quiet for a whole window: anywhere again.
        let at = WINDOW_NS / 2 + WINDOW_NS;
        assert_eq!(
            p.update(at, &hits(&[(0, 0), (1, BUSY_HITS + 1)]), true),
            Some(None)
        );
    }
}
