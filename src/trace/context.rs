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

/// A fake session for the parts' unit tests: a clock that moves only when told and a log of everything
/// asked, marks and the parts' own calls alike, in order.
#[cfg(test)]
pub mod fake {
    use super::*;

    #[derive(Debug, Default)]
    pub struct Log {
        pub now: u64,
        /// What was asked, in order: `emit` lines are the marks' `Debug` spellings' first word.
        pub calls: Vec<String>,
        /// Every mark printed, with its time.
        pub events: Vec<(StreamEvent, u64)>,
        /// The output is closed: every mark fails.
        pub closed: bool,
    }

    impl Log {
        /// Records a part's call `what`.
        pub fn call(&mut self, what: impl Into<String>) {
            self.calls.push(what.into());
        }

        /// The calls, as `&str`s for comparing.
        pub fn calls(&self) -> Vec<&str> {
            self.calls.iter().map(String::as_str).collect()
        }
    }

    /// Implements [`Marks`] for a test's fake session by handing both calls to its `log` field, so each
    /// part's fake adds only its own narrow trait.
    macro_rules! marks_through_log {
        ($fake:ty) => {
            impl $crate::trace::context::Marks for $fake {
                fn now(&self) -> u64 {
                    self.log.now
                }

                fn emit(
                    &mut self,
                    event: &$crate::report::StreamEvent,
                    time_ns: u64,
                ) -> Option<$crate::report::StopReason> {
                    $crate::trace::context::Marks::emit(&mut self.log, event, time_ns)
                }
            }
        };
    }
    pub(crate) use marks_through_log;

    impl Marks for Log {
        fn now(&self) -> u64 {
            self.now
        }

        fn emit(&mut self, event: &StreamEvent, time_ns: u64) -> Option<StopReason> {
            let debug = format!("{event:?}");
            let name = debug.split([' ', '{', '(']).next().unwrap_or_default();
            self.calls.push(format!("emit {name}"));
            self.events.push((event.clone(), time_ns));
            self.closed.then_some(StopReason::BrokenPipe)
        }
    }
}
