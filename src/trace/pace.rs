//! How long the loop may sleep before it reads the rings again: the wake-up policy, kept pure (times in,
//! a timeout out) so it is tested without a kernel. The loop reads every [`TICK`] at least; after a hit,
//! every [`BUSY_TICK`] for a while, so a hit that did not wake the reader waits about a millisecond; a
//! record the sorter holds back is read as soon as it is due; in a flood the loop falls back to the tick.

use std::time::Duration;

/// The loop drains at least this often even without a wake-up, bounding how long a lone hit waits.
pub const TICK: Duration = Duration::from_millis(10);

/// How long after its timestamp a record may still be on its way into a ring (the writer is inside the
/// debug exception between the two, which takes 10-20 us here with the stacks walked); records this close
/// to a read are held for the next one, which the loop schedules for when they are due.
pub const SORT_SLACK_NS: u64 = 200_000;

/// [`SORT_SLACK_NS`] on the hit path, where no ring carries a kernel-walked call chain: a hit record's
/// time is taken in the hit program, which then walks the stacks and writes the record with interrupts
/// off (0.8 us in all for a user-mode trap here, a few more for a deep kernel stack), and the task records
/// of the breakpoint's perf ring are written as they are stamped. A lone hit is printed this long after its
/// time instead of 0.2 ms.
pub const HIT_SORT_SLACK_NS: u64 = 50_000;

/// After a hit, the loop reads the rings every [`BUSY_TICK`] for this long, then every [`TICK`] again.
const BUSY_NS: u64 = 20_000_000;
const BUSY_TICK: Duration = Duration::from_millis(1);

/// More hits than this in a [`FLOOD_WINDOW_NS`] window is a flood: the loop reads on the tick.
const FLOOD_HITS: u64 = 100;
const FLOOD_WINDOW_NS: u64 = 50_000_000;

/// Wake this long after a held record is due, so the read that releases it is surely past it.
const DUE_MARGIN_NS: u64 = 20_000;

/// The loop's wake-up state: whether hits came lately, and whether they come as a flood.
///
/// While hits come now and then, the rings are read every millisecond and a held record as soon as it is
/// due: a hit that does not wake the reader (one that comes within a millisecond of its CPU's previous
/// hit, [`crate::perf::bpf::hit::WAKE_GAP_NS`]) waits about a millisecond, not a whole tick. In a flood the
/// reader goes back to the tick (and, without BPF, the quarter-ring wake-ups): latency matters less there than the tracer's own wake-ups, which on an idle CPU
/// are writes to what a watch of the kernel may be watching.
pub struct Pace {
    busy_until: u64,
    /// The hits (printed or filtered) counted at the last turn.
    seen: u64,
    /// The current flood window: when it started, and the count then.
    window: (u64, u64),
    flood: bool,
}

impl Pace {
    /// At `now`, with `counted` hits printed or filtered so far.
    pub fn new(now: u64, counted: u64) -> Pace {
        Pace {
            busy_until: 0,
            seen: counted,
            window: (now, counted),
            flood: false,
        }
    }

    /// The longest the loop may wait at `now`, with `counted` hits printed or filtered so far and the
    /// sorter's held record `due` at that time.
    pub fn timeout(&mut self, now: u64, counted: u64, due: Option<u64>) -> Duration {
        if counted != self.seen || due.is_some() {
            self.seen = counted;
            self.busy_until = now + BUSY_NS;
        }
        if now.saturating_sub(self.window.0) >= FLOOD_WINDOW_NS {
            // Into a flood above FLOOD_HITS a window, out of it only below a tenth of that: a window
            // between two tick reads of a flood can see nothing drained.
            let hits = counted - self.window.1;
            self.flood = if self.flood {
                hits > FLOOD_HITS / 10
            } else {
                hits > FLOOD_HITS
            };
            self.window = (now, counted);
        }
        let quick = !self.flood && now < self.busy_until;
        let timeout = if quick { BUSY_TICK } else { TICK };
        // A record held back for ordering is printed as soon as it is due, not at the next tick: a lone
        // hit reaches the reader within the slack of its wake-up.
        match due.filter(|_| !self.flood) {
            Some(due) => timeout.min(Duration::from_nanos(
                due.saturating_sub(now) + DUE_MARGIN_NS,
            )),
            None => timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn idle_waits_a_tick_and_a_hit_makes_it_quick_for_a_while() {
        let mut p = Pace::new(0, 0);
        assert_eq!(p.timeout(MS, 0, None), TICK);
        assert_eq!(p.timeout(2 * MS, 1, None), BUSY_TICK, "a hit was printed");
        assert_eq!(p.timeout(3 * MS, 1, None), BUSY_TICK, "still busy");
        assert_eq!(
            p.timeout(2 * MS + BUSY_NS, 1, None),
            TICK,
            "quiet since {BUSY_NS} ns"
        );
    }

    #[test]
    fn a_held_record_is_read_just_after_it_is_due() {
        let mut p = Pace::new(0, 0);
        let wait = p.timeout(MS, 0, Some(MS + 100_000));
        assert_eq!(wait, Duration::from_nanos(100_000 + DUE_MARGIN_NS));
        // One already overdue: only the margin.
        let wait = p.timeout(2 * MS, 0, Some(MS));
        assert_eq!(wait, Duration::from_nanos(DUE_MARGIN_NS));
        // One due later than a busy tick: the busy tick.
        assert_eq!(p.timeout(3 * MS, 0, Some(10 * MS)), BUSY_TICK);
    }

    #[test]
    fn a_flood_reads_on_the_tick_until_it_drops_below_a_tenth() {
        let mut p = Pace::new(0, 0);
        let mut now = 0;
        let mut counted = 0;
        // FLOOD_HITS + 1 in one window: a flood, which reads on the tick and ignores what is due.
        counted += FLOOD_HITS + 1;
        now += FLOOD_WINDOW_NS;
        assert_eq!(p.timeout(now, counted, Some(now)), TICK);
        // A window of a tenth of that still floods.
        counted += FLOOD_HITS / 10 + 1;
        now += FLOOD_WINDOW_NS;
        assert_eq!(p.timeout(now, counted, None), TICK);
        // Within the window nothing changes.
        assert_eq!(p.timeout(now + MS, counted + 1, None), TICK);
        // A window of a tenth or fewer: over, and quick again since hits came.
        now += FLOOD_WINDOW_NS;
        counted += FLOOD_HITS / 10 - 1;
        assert_eq!(p.timeout(now, counted, None), BUSY_TICK);
    }

    #[test]
    fn below_the_flood_threshold_stays_quick() {
        let mut p = Pace::new(0, 0);
        assert_eq!(p.timeout(FLOOD_WINDOW_NS, FLOOD_HITS, None), BUSY_TICK);
    }
}
