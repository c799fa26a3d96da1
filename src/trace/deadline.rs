//! `--duration`'s deadline, where a write waiting for a stalled reader can see it. The loop checks the
//! deadline before each wait, but a write to a pipe whose reader reads nothing blocks inside a turn
//! (`ksymwatch write ... --duration 2 | (sleep 30; cat)`): the run went on until the reader read, holding
//! every breakpoint past its deadline. Such a write already waits for room in slices, looking for a
//! stop signal between them (`cli::gives_way`); it looks here too, and a deadline passed ends it as a
//! stop signal does: the output ends as a reader that went away ends it, and the run ends as its
//! duration ends it, with nothing more written ([`crate::trace::wakes::end`]).
//!
//! A stop signal the loop has already read ends the run the same way: the writes of what the rings still
//! hold then look for it here ([`now`]), since it is no longer pending. Whether a write gave way is kept
//! here too ([`gave_way`]): the end tells an output that gave way from one whose reader closed it by it.
//!
//! One run per process, so the deadline is the process's: set when the run starts, on the records'
//! clock (CLOCK_MONOTONIC).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::perf::sys;

/// The run's deadline in CLOCK_MONOTONIC ns; 0 for none.
static DEADLINE_NS: AtomicU64 = AtomicU64::new(0);

/// The run ends at `deadline` (ns), or at no set time.
pub fn set(deadline: Option<u64>) {
    DEADLINE_NS.store(deadline.unwrap_or(0), Ordering::Relaxed);
}

/// A write gave way to the deadline or a stop signal.
static GAVE_WAY: AtomicBool = AtomicBool::new(false);

/// The run is to stop now (a stop signal was read): the deadline has passed.
pub fn now() {
    DEADLINE_NS.store(1, Ordering::Relaxed);
}

/// A write waiting for a reader gave way to the deadline or a stop signal.
pub fn note_gave_way() {
    GAVE_WAY.store(true, Ordering::Relaxed);
}

/// Whether a write gave way ([`note_gave_way`]).
pub fn gave_way() -> bool {
    GAVE_WAY.load(Ordering::Relaxed)
}

/// Whether the run has a deadline, and it has passed.
pub fn passed() -> bool {
    passed_at(DEADLINE_NS.load(Ordering::Relaxed), sys::monotonic_ns())
}

/// Whether `deadline` (0 for none) has passed at `now`.
pub fn passed_at(deadline: u64, now: u64) -> bool {
    deadline != 0 && now >= deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_deadline_never_passes_and_one_passes_at_its_time() {
        assert!(!passed_at(0, u64::MAX));
        assert!(!passed_at(10, 9));
        assert!(passed_at(10, 10));
        assert!(passed_at(10, 11));
    }
}
