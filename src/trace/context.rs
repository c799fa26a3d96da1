//! What every part of the session asks of the running session: the clock and a mark in the stream
//! ([`Marks`]). Each part adds its own narrow trait on top (arming a CPU, moving the watch, closing a
//! module's watches, arming an object) next to its logic; the session implements them over its rings and
//! output, and a unit test over a fake that logs what was asked (`fake::Log`), so no part's logic needs
//! a kernel to be tested.

use crate::report::{StopReason, StreamEvent};

/// The clock and the stream's marks.
pub trait Marks {
    /// CLOCK_MONOTONIC now, in ns (the records' clock).
    fn now(&self) -> u64;
    /// Prints `event` at `time_ns` and flushes; the stop a failed write means (a closed pipe ends the run).
    fn emit(&mut self, event: &StreamEvent, time_ns: u64) -> Option<StopReason>;
}
