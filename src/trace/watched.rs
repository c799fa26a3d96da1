//! The processes a process watch covers, followed to their end: each one's pidfd (readable when it has
//! exited) in the session's epoll, and, on the hit path, the exec that ends a process's watch (the kernel
//! takes it out of the watched processes before the new program runs). The run ends when every watched
//! process has exited or exec'd.

use std::os::fd::{AsFd, OwnedFd};

use crate::error::{Context, ExitCode, Result};
use crate::perf::sys::{self, Epoll};

pub struct Watched {
    /// The watched processes' pids, and each one's pidfd until it exits or execs.
    pids: Vec<u32>,
    pidfds: Vec<Option<OwnedFd>>,
    /// An exec ends a process's watch (the hit path with its exec program attached).
    ends_on_exec: bool,
    /// Processes whose exec ended their watch: reported once, and their later traps (the ELF loader
    /// clearing the new program's memory, before the kernel took the process out) are not hits.
    exec_ended: Vec<u32>,
}

impl Watched {
    /// Follows `pids`, each pidfd in `epoll` under `token + i`. A process already gone is not waited for
    /// (its pidfd cannot be had).
    pub fn new(pids: Vec<u32>, ends_on_exec: bool, epoll: &Epoll, token: u64) -> Result<Watched> {
        let mut pidfds = Vec::with_capacity(pids.len());
        for (i, pid) in pids.iter().enumerate() {
            match sys::pidfd_open(*pid) {
                Ok(fd) => {
                    epoll
                        .add(fd.as_fd(), token + i as u64)
                        .or_exit(ExitCode::Runtime, "epoll")?;
                    pidfds.push(Some(fd));
                }
                Err(_) => pidfds.push(None),
            }
        }
        Ok(Watched {
            pids,
            pidfds,
            ends_on_exec,
            exec_ended: Vec::new(),
        })
    }

    /// The `i`-th process's pidfd was readable: it has exited. Whether none is left.
    pub fn exited(&mut self, i: usize, epoll: &Epoll) -> bool {
        if let Some(fd) = self.pidfds.get_mut(i).and_then(Option::take) {
            let _ = epoll.delete(fd.as_fd());
        }
        self.none_left()
    }

    /// Process `pid` exec'd: `Some(none left)` when that ended a watched process's watch (first time
    /// only), `None` when it means nothing here.
    pub fn exec(&mut self, pid: u32, epoll: &Epoll) -> Option<bool> {
        if !self.ends_on_exec || self.exec_ended.contains(&pid) {
            return None;
        }
        let i = self.pids.iter().position(|&p| p == pid)?;
        self.exec_ended.push(pid);
        // The pidfd may be gone already: a process that exits right after its exec is seen exiting
        // before its exec record is read.
        if let Some(fd) = self.pidfds.get_mut(i).and_then(Option::take) {
            let _ = epoll.delete(fd.as_fd());
        }
        Some(self.none_left())
    }

    /// Whether `pid`'s watch ended at its exec: its traps from then on are not hits.
    pub fn exec_ended(&self, pid: u32) -> bool {
        self.exec_ended.contains(&pid)
    }

    fn none_left(&self) -> bool {
        self.pidfds.iter().all(Option::is_none)
    }
}
