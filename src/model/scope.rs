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
