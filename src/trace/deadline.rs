//! `--duration`'s deadline, where a write waiting for a stalled reader can see it. The loop checks the
//! deadline before each wait, but a write to a pipe whose reader reads nothing blocks inside a turn
//! (`ksymwatch write ... --duration 2 | (sleep 30; cat)`): the run went on until the reader read, holding
//! every breakpoint past its deadline. Such a write already waits for room in slices, looking for a
//! stop signal between them (`cli::gives_way`); it looks here too, and a deadline passed ends it as a
//! stop signal does: the output ends as a reader that went away ends it, and the run ends as its
//! duration ends it, with nothing more written ([`crate::trace::wakes::end`]).
//!
//! One run per process, so the deadline is the process's: set when the run starts, on the records'
//! clock (CLOCK_MONOTONIC).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::perf::sys;

/// The run's deadline in CLOCK_MONOTONIC ns; 0 for none.
static DEADLINE_NS: AtomicU64 = AtomicU64::new(0);

/// The run ends at `deadline` (ns), or at no set time.
pub fn set(deadline: Option<u64>) {
    DEADLINE_NS.store(deadline.unwrap_or(0), Ordering::Relaxed);
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
