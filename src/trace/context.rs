//! What every part of the session asks of the running session: the clock and a mark in the stream
//! ([`Marks`]), and the rings as every part sees them ([`Rings`]: the watches, draining, printing what is
//! held, a refusal in the user's words). Each part adds its own narrow trait on top (arming a CPU, moving
//! the watch, closing a module's watches, arming an object, the flight recorder's turn) next to its logic;
//! the session implements them over its rings and output, and a unit test over a fake that logs what was
//! asked (`fake::Log`), so no part's logic needs a kernel to be tested.
//!
//! Two narrower views stand apart, for the parts that keep descriptors or read a process: [`Poll`] (the
//! epoll set a part adds its descriptors to) and [`Memory`] (what a watched range holds now).

use std::io;
use std::os::fd::BorrowedFd;

use crate::model::watch::Watch;
use crate::perf::event::OpenError;
use crate::perf::sys::Epoll;
use crate::report::{StopReason, StreamEvent, Value};

/// The clock and the stream's marks.
pub trait Marks {
    /// CLOCK_MONOTONIC now, in ns (the records' clock).
    fn now(&self) -> u64;
    /// Prints `event` at `time_ns` and flushes; the stop a failed write means (a closed pipe ends the run).
    fn emit(&mut self, event: &StreamEvent, time_ns: u64) -> Option<StopReason>;
}

/// The rings and what is printed from them, as the parts ask: one set of methods, shared by every part's
/// own trait.
pub trait Rings: Marks {
    /// The watches, as armed now (index = target index).
    fn watches(&self) -> &[Watch];
    /// Reads every ring empty into the merge.
    fn drain(&mut self);
    /// Applies and prints what the merge releases now (what the sort slack no longer holds back).
    fn release_ready(&mut self) -> Option<StopReason>;
    /// Drains every ring and prints every record held (the events are disabled: nothing older can come).
    fn flush(&mut self) -> Option<StopReason>;
    /// An open or enable refusal while running, in the user's words, and its kind.
    fn explain(&self, e: &OpenError) -> (String, &'static str);
}

/// The loop's epoll set as a part sees it: descriptors added under a token, and taken out.
pub trait Poll {
    /// Wakes the loop with `token` when `fd` is readable.
    fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()>;
    /// Wakes the loop with `token` only when `fd` fails or hangs up (a pipe's reader gone), never for its
    /// input.
    fn add_hangup(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()>;
    /// Takes `fd` out of the set.
    fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()>;
}

impl Poll for Epoll {
    fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        Epoll::add(self, fd, token)
    }

    fn add_hangup(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        Epoll::add_hangup(self, fd, token)
    }

    fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        Epoll::delete(self, fd)
    }
}

/// A process's memory, as the session reads it (the watched ranges' values at the start).
pub trait Memory {
    /// What `len` bytes at `addr` in process `pid` hold now ([`Value::Read`]), or why not.
    fn read(&self, pid: u32, addr: u64, len: u8) -> Value;
}

/// The processes' own memory, read with `process_vm_readv`.
pub struct ProcessMemory;

impl Memory for ProcessMemory {
    fn read(&self, pid: u32, addr: u64, len: u8) -> Value {
        crate::trace::events::read_value(pid, addr, len)
    }
}

/// A fake session for the parts' unit tests: a clock that moves only when told and a log of everything
/// asked, marks and the parts' own calls alike, in order.
#[cfg(test)]
pub mod fake {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::os::fd::AsRawFd;

    use super::*;

    /// An epoll set that only records: each descriptor added (with its token; `hangup FD TOKEN` for one
    /// followed only for its hang-up) and taken out, in order;
    /// with `refuse`, every add is refused with that errno (epoll refuses a regular file with EPERM).
    #[derive(Debug, Default)]
    pub struct Polled {
        pub calls: RefCell<Vec<String>>,
        pub refuse: Option<i32>,
    }

    impl Polled {
        /// The calls, each `add FD TOKEN` or `delete FD`.
        pub fn calls(&self) -> Vec<String> {
            self.calls.borrow().clone()
        }
    }

    impl Poll for Polled {
        fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
            let raw = fd.as_raw_fd();
            if let Some(errno) = self.refuse {
                return Err(io::Error::from_raw_os_error(errno));
            }
            self.calls.borrow_mut().push(format!("add {raw} {token}"));
            Ok(())
        }

        fn add_hangup(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
            let raw = fd.as_raw_fd();
            if let Some(errno) = self.refuse {
                return Err(io::Error::from_raw_os_error(errno));
            }
            self.calls
                .borrow_mut()
                .push(format!("hangup {raw} {token}"));
            Ok(())
        }

        fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
            self.calls
                .borrow_mut()
                .push(format!("delete {}", fd.as_raw_fd()));
            Ok(())
        }
    }

    /// Processes' memory as a test sets it: `(pid, addr)` → value; anything else is unreadable.
    #[derive(Debug, Default)]
    pub struct Memories(pub HashMap<(u32, u64), u64>);

    impl Memory for Memories {
        fn read(&self, pid: u32, addr: u64, _len: u8) -> Value {
            match self.0.get(&(pid, addr)) {
                Some(&v) => Value::Read(v),
                None => Value::Unreadable,
            }
        }
    }

    /// Words for a refusal, and its kind.
    pub type Explain = fn(&OpenError) -> (String, &'static str);

    #[derive(Debug, Default)]
    pub struct Log {
        pub now: u64,
        /// What was asked, in order: `emit` lines are the marks' `Debug` spellings' first word; the
        /// rings' `drain`, `release` and `flush`.
        pub calls: Vec<String>,
        /// Every mark printed, with its time.
        pub events: Vec<(StreamEvent, u64)>,
        /// The output is closed: every mark fails.
        pub closed: bool,
        /// The watches the rings hold.
        pub watches: Vec<Watch>,
        /// How a refusal is worded (a test that meets none leaves it out).
        pub explain: Option<Explain>,
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

    /// Implements [`Marks`] and [`Rings`] for a test's fake session by handing every call to its `log`
    /// field, so each part's fake adds only its own narrow trait.
    macro_rules! through_log {
        ($fake:ty) => {
            $crate::trace::context::fake::marks_through_log!($fake);

            impl $crate::trace::context::Rings for $fake {
                fn watches(&self) -> &[$crate::model::watch::Watch] {
                    self.log.watches()
                }

                fn drain(&mut self) {
                    self.log.drain()
                }

                fn release_ready(&mut self) -> Option<$crate::report::StopReason> {
                    self.log.release_ready()
                }

                fn flush(&mut self) -> Option<$crate::report::StopReason> {
                    self.log.flush()
                }

                fn explain(&self, e: &$crate::perf::event::OpenError) -> (String, &'static str) {
                    self.log.explain(e)
                }
            }
        };
    }
    pub(crate) use through_log;

    /// Implements [`Marks`] for a test's fake session by handing both calls to its `log` field.
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

    impl Rings for Log {
        fn watches(&self) -> &[Watch] {
            &self.watches
        }

        fn drain(&mut self) {
            self.call("drain");
        }

        fn release_ready(&mut self) -> Option<StopReason> {
            self.call("release");
            None
        }

        fn flush(&mut self) -> Option<StopReason> {
            self.call("flush");
            None
        }

        fn explain(&self, e: &OpenError) -> (String, &'static str) {
            match self.explain {
                Some(explain) => explain(e),
                None => panic!("no refusal expected: {e:?}"),
            }
        }
    }

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
