//! Who a watch covers ([`Scope`]): every task on each CPU, some running processes, or a command started
//! for the watch. The plan chooses it once; the arming opens its events for it and the session reads it.
//! `L` is a launched command as its layer holds it: the plan holds the stopped process itself, the
//! breakpoints need only its pid ([`Scope::arming`]).

/// Who a watch covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope<L = u32> {
    /// Every task on each CPU.
    System,
    /// Every thread of these processes, and the threads they create later.
    Processes(Vec<u32>),
    /// A command stopped at its exec: its events are inherited by every thread it starts.
    Launched(L),
}

/// What a pid's start time read now says of the process that had the pid when the watch was planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// Still that process, or the reading failed for another reason than the process being gone (it
    /// says nothing: the process is taken as still there).
    Planned,
    /// Another process: one given the pid after the planned one exited started later.
    Replaced,
    /// No process has the pid (`ENOENT`, `ESRCH`).
    Gone,
}

impl Named {
    /// The pid's start time `now` against the planned process's, `planned` (clock ticks after boot).
    pub fn by(planned: u64, now: std::io::Result<u64>) -> Named {
        match now {
            Ok(ticks) if ticks != planned => Named::Replaced,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => Named::Gone,
            _ => Named::Planned,
        }
    }
}

/// A launched command's process id, however the command is held.
pub trait Pid {
    fn pid(&self) -> u32;
}

impl Pid for u32 {
    fn pid(&self) -> u32 {
        *self
    }
}

impl<L: Pid> Scope<L> {
    /// The one answer to "is this watch system-wide?".
    pub fn system_wide(&self) -> bool {
        matches!(self, Scope::System)
    }

    /// The watched processes: none for a system-wide watch.
    pub fn pids(&self) -> Vec<u32> {
        match self {
            Scope::System => Vec::new(),
            Scope::Processes(pids) => pids.clone(),
            Scope::Launched(c) => vec![c.pid()],
        }
    }

    /// Who the breakpoints are opened for: the launched command by its pid.
    pub fn arming(&self) -> Scope {
        match self {
            Scope::System => Scope::System,
            Scope::Processes(pids) => Scope::Processes(pids.clone()),
            Scope::Launched(c) => Scope::Launched(c.pid()),
        }
    }
}
