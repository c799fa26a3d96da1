//! The stream's output and how it fails: every mark and hit goes out through one [`Sink`], which keeps
//! the first write error for the end (a closed pipe is a normal end, a full disk is not) and, once a write
//! failed, is `gone`: nothing more is written, so the stream only counts what is left. Kept apart from the
//! stream so that what a failed write means is decided in one place, and tested without a ring.

use std::io;

use crate::error::{Error, Result};
use crate::perf::sys;
use crate::report::{Output, StopReason, StreamEvent};
use crate::trace::context::Marks;

/// The output and its first failure.
pub struct Sink<O: Output> {
    pub out: O,
    /// The first output error that was not a closed pipe.
    error: Option<io::Error>,
    /// A write failed: nothing more is written; what is left is only counted.
    gone: bool,
}

impl<O: Output> Sink<O> {
    pub fn new(out: O) -> Sink<O> {
        Sink {
            out,
            error: None,
            gone: false,
        }
    }

    /// Whether a write failed: what is left is only counted.
    pub fn gone(&self) -> bool {
        self.gone
    }

    /// A write error on the output ends the session. A closed pipe (`| head`) is a normal end; anything
    /// else (a full disk) is kept and reported as a run-time error once every breakpoint is released.
    pub fn write_failed(&mut self, e: io::Error) -> StopReason {
        if e.kind() != io::ErrorKind::BrokenPipe {
            self.error.get_or_insert(e);
        }
        self.gone = true;
        StopReason::BrokenPipe
    }

    /// Flushes the output; the stop a failure means.
    pub fn flush(&mut self) -> Option<StopReason> {
        if self.gone {
            return Some(StopReason::BrokenPipe);
        }
        match self.out.flush() {
            Ok(()) => None,
            Err(e) => Some(self.write_failed(e)),
        }
    }

    /// The kept write error, as the run's.
    pub fn take_error(&mut self) -> Result<()> {
        match self.error.take() {
            Some(e) => Err(Error::runtime("writing output").caused_by(e)),
            None => Ok(()),
        }
    }
}

impl<O: Output> Marks for Sink<O> {
    fn now(&self) -> u64 {
        sys::monotonic_ns()
    }

    fn emit(&mut self, event: &StreamEvent, time_ns: u64) -> Option<StopReason> {
        if self.gone {
            return Some(StopReason::BrokenPipe);
        }
        match self
            .out
            .event(event, time_ns)
            .and_then(|_| self.out.flush())
        {
            Ok(()) => None,
            Err(e) => Some(self.write_failed(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::io::Write;
    use std::rc::Rc;

    use super::*;
    use crate::report::json::Json;

    /// A destination whose every write fails with `kind`, counting the writes tried.
    struct Failing {
        kind: io::ErrorKind,
        tries: Rc<Cell<usize>>,
    }

    impl Write for Failing {
        fn write(&mut self, _buf: &[u8]) -> io::Result<usize> {
            self.tries.set(self.tries.get() + 1);
            Err(self.kind.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A sink over a destination failing with `kind`, counting the writes tried in `tries`.
    fn failing(kind: io::ErrorKind, tries: &Rc<Cell<usize>>) -> Sink<Json<Failing, Vec<u8>>> {
        let out = Failing {
            kind,
            tries: Rc::clone(tries),
        };
        Sink::new(Json::new(out, Vec::new()))
    }

    const MARK: StreamEvent = StreamEvent::CpuOffline { cpu: 1 };

    /// A mark that went out leaves the sink as it was.
    #[test]
    fn a_mark_written_is_no_stop() {
        let mut sink = Sink::new(Json::new(Vec::new(), Vec::new()));
        assert_eq!(sink.emit(&MARK, 10), None);
        assert_eq!(sink.flush(), None);
        assert!(!sink.gone());
        sink.take_error().unwrap();
        assert!(!sink.out.into_inner().0.is_empty());
    }

    /// A closed pipe ends the run as a normal end: no error kept, and nothing more is tried.
    #[test]
    fn a_closed_pipe_is_gone_without_an_error() {
        let tries = Rc::default();
        let mut sink = failing(io::ErrorKind::BrokenPipe, &tries);
        assert_eq!(sink.emit(&MARK, 10), Some(StopReason::BrokenPipe));
        assert!(sink.gone());
        let tried = tries.get();
        assert_eq!(sink.emit(&MARK, 20), Some(StopReason::BrokenPipe));
        assert_eq!(sink.flush(), Some(StopReason::BrokenPipe));
        assert_eq!(tries.get(), tried, "nothing is written once gone");
        sink.take_error().unwrap();
    }

    /// Any other write error (a full disk) is kept, the first one only, and is the run's error once.
    #[test]
    fn another_write_error_is_kept_for_the_end() {
        let mut sink = failing(io::ErrorKind::StorageFull, &Rc::default());
        assert_eq!(sink.emit(&MARK, 10), Some(StopReason::BrokenPipe));
        assert_eq!(
            sink.write_failed(io::ErrorKind::Other.into()),
            StopReason::BrokenPipe
        );
        let err = sink.take_error().unwrap_err();
        let cause = std::error::Error::source(&err).map(ToString::to_string);
        let full = io::Error::from(io::ErrorKind::StorageFull).to_string();
        assert_eq!(cause, Some(full));
        sink.take_error().unwrap();
    }
}
