//! The processes a process watch covers, followed to their end: each one's pidfd (readable when it has
//! exited) in the session's epoll, and, on the hit path, the exec that ends a process's watch (the kernel
//! takes it out of the watched processes before the new program runs). The run ends when every watched
//! process given on the command line (or launched) has exited or exec'd.
//!
//! Which pid is a watched process is followed through the kernel's FORK records, in time order, as the
//! kernel's own programs follow it (`crate::perf::bpf::follow`): a launched command's children join as
//! they are forked; a new process under the pid of one that has exited is another process, whose exec
//! means nothing here.
//!
//! A `-p` process is the one planning found ([`Started`]: its pid and start time). One that exited
//! before the watch was set up may have left its pid to another process by the time its pidfd is asked
//! for, and `pidfd_open` then gives the other's: the start time is read again once the pidfd is open,
//! and a pid that started at another time (or whose process is gone by then) names another process,
//! which is not followed: the planned process counts as gone before the run, and the other's traps are
//! not hits. (Read after the pidfd, a start time that matches can only be the planned process's: any
//! process given its pid after it exited started later.)

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustc_hash::FxHashSet;

use crate::config::plan::Started;
use crate::error::{Context, ExitCode, Result};
use crate::model::scope::Named;
use crate::perf::bpf::hit_set::Following;
use crate::report::{StopReason, StreamEvent};
use crate::trace::context::{Marks, Poll};

pub struct Watched {
    /// The watched processes' pids, and each one's pidfd until it exits or execs.
    pids: Vec<u32>,
    pidfds: Vec<Option<OwnedFd>>,
    /// An exec ends a process's watch (the hit path with its exec program attached).
    ends_on_exec: bool,
    /// The kernel adds the children of watched processes to the watched processes as they are forked.
    follows_children: bool,
    /// The processes watched now, by pid, as the records up to the one applied last tell it.
    live: FxHashSet<u32>,
    /// Processes whose watch ended, whose traps are not hits: by their exec (reported once; their later
    /// traps are the ELF loader clearing the new program's memory, before the kernel took the process
    /// out), or before it began (the pid named another process by the time its pidfd was open).
    ended: FxHashSet<u32>,
    /// Every process given was gone (ESRCH, or its pid another's) when its pidfd was asked for.
    gone_before: bool,
    /// The processes given that were gone when their pidfd was asked for, by pid.
    gone: Vec<u32>,
}

/// What asking for a watched process's pidfd came to.
enum Pidfd {
    /// The process planned, followed by its pidfd.
    Open(OwnedFd),
    /// Gone before the run: no process had its pid (ESRCH), or another process has it (`replaced`).
    Gone { replaced: bool },
    /// Not to be had here (no pidfd_open, a sandbox's refusal): nothing is said of the process.
    Refused,
}

impl Pidfd {
    /// Process `pid`'s pidfd from `open`, checked to be the process planned where `planned` says when it
    /// started: `start_time` reads the pid's start once the pidfd is open (see the module). A start time
    /// that cannot be read for another reason than the process being gone says nothing: it is followed.
    fn of(
        pid: u32,
        planned: Option<u64>,
        open: impl FnOnce(u32) -> io::Result<OwnedFd>,
        start_time: impl FnOnce(u32) -> io::Result<u64>,
    ) -> Pidfd {
        let fd = match open(pid) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                return Pidfd::Gone { replaced: false }
            }
            Err(_) => return Pidfd::Refused,
        };
        let Some(planned) = planned else {
            return Pidfd::Open(fd);
        };
        match Named::by(planned, start_time(pid)) {
            Named::Replaced => Pidfd::Gone { replaced: true },
            Named::Gone => Pidfd::Gone { replaced: false },
            Named::Planned => Pidfd::Open(fd),
        }
    }
}

impl Watched {
    /// Follows `pids`, each pidfd (`pidfd_open`'s) in `poll` under `token + i`, a pid in `started` only
    /// while it names the process planned (its start time now, `start_time`'s, the same). A process
    /// already gone is not waited for (its pidfd cannot be had, or names another process).
    /// `following`: what the kernel's programs do (see the fields).
    pub fn new(
        pids: Vec<u32>,
        started: &[Started],
        Following {
            ends_on_exec,
            follows_children,
        }: Following,
        poll: &impl Poll,
        token: u64,
        mut pidfd_open: impl FnMut(u32) -> io::Result<OwnedFd>,
        mut start_time: impl FnMut(u32) -> io::Result<u64>,
    ) -> Result<Watched> {
        let mut pidfds = Vec::with_capacity(pids.len());
        let mut gone = Vec::new();
        let mut replaced = FxHashSet::default();
        for (i, &pid) in pids.iter().enumerate() {
            let planned = started.iter().find(|s| s.pid == pid).map(|s| s.ticks);
            match Pidfd::of(pid, planned, &mut pidfd_open, &mut start_time) {
                Pidfd::Open(fd) => {
                    poll.add(fd.as_fd(), token + i as u64)
                        .or_exit(ExitCode::Runtime, "epoll")?;
                    pidfds.push(Some(fd));
                    continue;
                }
                // Not waited for, but only a process gone says it has exited.
                Pidfd::Gone { replaced: other } => {
                    gone.push(pid);
                    if other {
                        replaced.insert(pid);
                    }
                }
                Pidfd::Refused => {}
            }
            pidfds.push(None);
        }
        let gone_before = !pids.is_empty() && gone.len() == pids.len();
        Ok(Watched {
            live: pids
                .iter()
                .filter(|p| !replaced.contains(p))
                .copied()
                .collect(),
            pids,
            pidfds,
            gone_before,
            gone,
            ends_on_exec,
            follows_children,
            ended: replaced,
        })
    }

    /// The `i`-th process's pidfd was readable: it has exited. Whether none is left.
    pub fn exited(&mut self, i: usize, poll: &impl Poll) -> bool {
        if let Some(fd) = self.pidfds.get_mut(i).and_then(Option::take) {
            let _ = poll.delete(fd.as_fd());
        }
        self.none_left()
    }

    /// A FORK record: process `pid` was forked by process `ppid` (a new thread, `pid == ppid`, changes
    /// nothing). A watched parent's child is watched when the kernel follows children; any other new
    /// process is not watched, whatever process had its pid before.
    pub fn fork(&mut self, pid: u32, ppid: u32) {
        if pid == ppid {
            return;
        }
        self.ended.remove(&pid);
        if self.follows_children && self.live.contains(&ppid) {
            self.live.insert(pid);
        } else {
            self.live.remove(&pid);
        }
    }

    /// Process `pid` exec'd: `Some(ends the run)` when that ended a watched process's watch (first time
    /// only), `None` when it means nothing here (it was not watched). The run ends here only when this
    /// exec let go of the last process that holds it: a followed child holds none, and a process seen
    /// exiting before its exec record was read (one that exits right after its exec) already ended the
    /// run by its exit, whose last records are still being printed.
    pub fn exec(&mut self, pid: u32, poll: &impl Poll) -> Option<bool> {
        if !self.ends_on_exec || !self.live.remove(&pid) {
            return None;
        }
        self.ended.insert(pid);
        let pidfd = self
            .pids
            .iter()
            .position(|&p| p == pid)
            .and_then(|i| self.pidfds.get_mut(i)?.take());
        let Some(fd) = pidfd else {
            return Some(false);
        };
        let _ = poll.delete(fd.as_fd());
        Some(self.none_left())
    }

    /// Watched process `pid` exec'd `comm` (its record at `time`): the kernel took it out of the watched
    /// processes before the new program ran; the reader is told, and the run ends when that let go of the
    /// last watched process (see [`Watched::exec`]).
    pub fn exec_seen(
        &mut self,
        pid: u32,
        comm: &str,
        time: u64,
        poll: &impl Poll,
        marks: &mut impl Marks,
    ) -> Option<StopReason> {
        let ends = self.exec(pid, poll)?;
        let event = StreamEvent::ProcessExec {
            pid,
            comm: comm.to_string(),
        };
        if let Some(stop) = marks.emit(&event, time) {
            return Some(stop);
        }
        ends.then_some(StopReason::Exited)
    }

    /// Whether `pid`'s watch ended, at its exec or before the run (another process had its pid): its
    /// traps are not hits.
    pub fn ended(&self, pid: u32) -> bool {
        self.ended.contains(&pid)
    }

    /// Whether every process given was gone before its pidfd could be had (one that exited while the
    /// watch was being armed: ESRCH, or its pid another process's by then): no exit will be heard from
    /// any, so the run has nothing to wait for.
    /// A pidfd refused for another reason (an old kernel, a sandbox) says nothing of the process. Asked
    /// once, as the run begins.
    pub fn gone_before(&self) -> bool {
        self.gone_before
    }

    /// The processes given that were gone before the run (exited, their pid perhaps another's by now):
    /// the kernel's programs must let go of their pids, entered before that was known. Their exit may
    /// have come before the program that takes an exiting process out was there to see it, and a
    /// process given the pid then (or later) would be watched in the kernel as theirs: its traps kept,
    /// counted in the kernel's totals and taking `--count`'s hits, and reported as hits of the pid.
    pub fn gone(&self) -> &[u32] {
        &self.gone
    }

    fn none_left(&self) -> bool {
        self.pidfds.iter().all(Option::is_none)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::context::fake::{Log, Polled};

    const OTHER: u32 = 1;

    fn following(ends_on_exec: bool, follows_children: bool) -> Following {
        Following {
            ends_on_exec,
            follows_children,
        }
    }

    /// A stand-in for a process's pidfd: any descriptor polls the same for these tests; pid 0 is gone.
    fn pidfd(pid: u32) -> io::Result<OwnedFd> {
        if pid == 0 {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(std::fs::File::open("/dev/null")?.into())
    }

    /// A stand-in for a process's start time, read from its stat: ten times its pid; pid 0 is gone.
    fn start_time(pid: u32) -> io::Result<u64> {
        match pid {
            0 => Err(io::Error::from_raw_os_error(libc::ENOENT)),
            _ => Ok(u64::from(pid) * 10),
        }
    }

    /// Watched processes whose start was not planned (a launched command), each pidfd from `open`,
    /// polled under token 16 on.
    fn unplanned(
        pids: Vec<u32>,
        following: Following,
        epoll: &Polled,
        open: impl FnMut(u32) -> io::Result<OwnedFd>,
    ) -> Result<Watched> {
        Watched::new(pids, &[], following, epoll, 16, open, start_time)
    }

    fn watched(follows_children: bool) -> (Watched, Polled, u32) {
        let epoll = Polled::default();
        let me = std::process::id();
        let w = Watched::new(
            vec![me],
            &[],
            following(true, follows_children),
            &epoll,
            100,
            pidfd,
            start_time,
        )
        .expect("watched");
        (w, epoll, me)
    }

    /// [`watched`], and a child the watched process forked.
    fn with_child(follows_children: bool) -> (Watched, Polled, u32, u32) {
        let (mut w, epoll, me) = watched(follows_children);
        let child = me + 1_000_000;
        w.fork(child, me);
        (w, epoll, me, child)
    }

    /// A followed child's exec is reported like the watched process's own, once, and ends its watch;
    /// the process given its pid later is not watched for having it.
    #[test]
    fn a_followed_childs_exec_is_reported_and_a_reused_pid_is_not_watched() {
        let (mut w, epoll, me) = watched(true);
        let child = me + 1_000_000;
        w.fork(me, me);
        w.fork(child, me);
        assert_eq!(
            w.exec(child, &epoll),
            Some(false),
            "a child does not hold the run"
        );
        assert!(w.ended(child));
        assert_eq!(w.exec(child, &epoll), None, "reported once");
        // The child's pid, reused by a process forked elsewhere: not watched, its traps not filtered here.
        w.fork(child, OTHER);
        assert!(!w.ended(child));
        assert_eq!(w.exec(child, &epoll), None);
        // The same for the watched process's own pid once another process has it.
        w.fork(me, OTHER);
        assert_eq!(w.exec(me, &epoll), None);
    }

    /// Without the kernel following children, a child is not watched and its exec means nothing.
    #[test]
    fn children_are_not_watched_unless_the_kernel_follows_them() {
        let (mut w, epoll, me, child) = with_child(false);
        assert_eq!(w.exec(child, &epoll), None);
        assert_eq!(
            w.exec(me, &epoll),
            Some(true),
            "the only watched process exec'd"
        );
    }

    /// A followed child's exec read after the run's last process exited (the run's final drain) does not
    /// end the run again, so the records after it are still printed.
    #[test]
    fn an_exec_after_the_last_exit_does_not_end_the_run_again() {
        let (mut w, epoll, me, child) = with_child(true);
        assert!(w.exited(0, &epoll), "no watched process left");
        assert_eq!(w.exec(child, &epoll), Some(false));
        assert_eq!(
            w.exec(me, &epoll),
            Some(false),
            "its exit ended the run already"
        );
    }
    /// The watched process's exec ends its watch: marked at its record's time, once, and the run ends
    /// with it; a followed child's exec is marked and holds nothing.
    #[test]
    fn an_exec_ends_the_watch_with_its_mark() {
        let (mut w, epoll, me, child) = with_child(true);
        let mut log = Log::default();
        assert_eq!(w.exec_seen(child, "sh", 5, &epoll, &mut log), None);
        assert_eq!(
            w.exec_seen(me, "true", 9, &epoll, &mut log),
            Some(StopReason::Exited)
        );
        let exec = |pid, comm: &str, at| {
            let comm = comm.to_string();
            (StreamEvent::ProcessExec { pid, comm }, at)
        };
        assert_eq!(log.events, [exec(child, "sh", 5), exec(me, "true", 9)]);
        assert_eq!(w.exec_seen(me, "true", 10, &epoll, &mut log), None, "once");
        assert_eq!(log.events.len(), 2);
        // A closed output ends the run at the mark.
        let (mut w, epoll, me) = watched(false);
        log.closed = true;
        let stop = w.exec_seen(me, "sh", 11, &epoll, &mut log);
        assert_eq!(stop, Some(StopReason::BrokenPipe));
    }

    /// Without the exec program an exec ends nothing; the watched process's exit (its pidfd readable)
    /// ends the run.
    #[test]
    fn an_exit_ends_the_run_and_an_exec_without_the_program_does_not() {
        let epoll = Polled::default();
        let me = std::process::id();
        let mut w = unplanned(vec![me], Following::default(), &epoll, pidfd).expect("watched");
        let mut log = Log::default();
        assert_eq!(w.exec_seen(me, "sh", 5, &epoll, &mut log), None);
        assert!(log.events.is_empty());
        assert!(!w.ended(me));
        assert!(w.exited(0, &epoll), "no watched process left");
    }

    /// Processes gone before the run (no pidfd: pid 0 here) leave nothing to wait for only when every one
    /// of them is; a system-wide watch (no process) waits for none.
    #[test]
    fn processes_gone_before_the_run_leave_nothing_to_wait_for() {
        let epoll = Polled::default();
        let gone = |pids: Vec<u32>| {
            unplanned(pids, Following::default(), &epoll, pidfd)
                .expect("watched")
                .gone_before()
        };
        assert!(gone(vec![0]));
        assert!(gone(vec![0, 0]));
        assert!(!gone(vec![0, 7]));
        assert!(!gone(vec![7]));
        assert!(!gone(Vec::new()));
        // A pidfd refused for another reason than the process being gone (no pidfd_open here) is not an
        // exit.
        let refused = |_| Err(io::Error::from_raw_os_error(libc::ENOSYS));
        let w = unplanned(vec![5], Following::default(), &epoll, refused).expect("watched");
        assert!(!w.gone_before());
    }

    /// Each process's pidfd goes into the epoll set under its own token; a process already gone is not
    /// waited for; an exit and an exec each take the pidfd out, once.
    #[test]
    fn pidfds_are_polled_under_their_tokens_and_taken_out_once() {
        let epoll = Polled::default();
        let mut w =
            unplanned(vec![7, 0, 9], following(true, false), &epoll, pidfd).expect("watched");
        let calls = epoll.calls();
        let fds: Vec<&str> = calls.iter().map(|c| c.split(' ').nth(1).unwrap()).collect();
        assert_eq!(
            calls,
            [format!("add {} 16", fds[0]), format!("add {} 18", fds[1])],
            "pid 0 is gone: no pidfd, and its token is skipped"
        );
        let (seven, nine) = (fds[0].to_string(), fds[1].to_string());
        assert!(!w.exited(0, &epoll), "pid 9 is left");
        assert!(!w.exited(0, &epoll), "the same exit again");
        assert_eq!(
            w.exec(9, &epoll),
            Some(true),
            "pid 9's exec lets go of the last"
        );
        assert_eq!(
            &epoll.calls()[2..],
            [format!("delete {seven}"), format!("delete {nine}")]
        );
        assert!(w.exited(2, &epoll), "its pidfd already gone");
        assert_eq!(epoll.calls().len(), 4);
    }

    /// `pids` watched as `-p` processes planned (pid 7 started at 70, `start_time`'s, pid 9 at `nine`),
    /// each pidfd from `open` and start time read again by `start`.
    fn checked(
        pids: Vec<u32>,
        nine: u64,
        epoll: &Polled,
        open: impl FnMut(u32) -> io::Result<OwnedFd>,
        start: impl FnMut(u32) -> io::Result<u64>,
    ) -> Watched {
        let planned = [(7, 70), (9, nine)].map(|(pid, ticks)| Started { pid, ticks });
        Watched::new(
            pids,
            &planned,
            following(true, false),
            epoll,
            16,
            open,
            start,
        )
        .expect("watched")
    }

    /// A pid whose start time, read once its pidfd is open, is the one planned names the process
    /// planned: followed, as a pid never checked is.
    #[test]
    fn a_pid_that_started_when_planned_is_followed() {
        let epoll = Polled::default();
        let mut w = checked(vec![7], 90, &epoll, pidfd, start_time);
        assert!(!w.gone_before());
        assert_eq!(epoll.calls().len(), 1, "its pidfd polled");
        assert!(!w.ended(7));
        assert_eq!(
            w.exec(7, &epoll),
            Some(true),
            "its exec is the watched one's"
        );
    }

    /// A pid that started at another time than planned names another process (the planned one exited
    /// and left it its pid before the pidfd was open): not followed, its pidfd not polled, its traps
    /// and exec not the watched process's; the planned process is gone before the run, as one whose
    /// pidfd could not be had.
    #[test]
    fn a_pid_now_anothers_is_gone_before_the_run() {
        let epoll = Polled::default();
        let mut w = checked(vec![9], 91, &epoll, pidfd, start_time);
        assert!(w.gone_before());
        assert!(epoll.calls().is_empty(), "no pidfd polled");
        assert!(w.ended(9), "its traps are not hits");
        assert_eq!(w.exec(9, &epoll), None, "its exec means nothing here");
        // With another process still there, the run goes on for that one alone.
        let mut w = checked(vec![9, 7], 91, &epoll, pidfd, start_time);
        assert!(!w.gone_before());
        assert!(w.ended(9) && !w.ended(7));
        assert_eq!(w.gone(), [9], "the kernel lets go of pid 9 only");
        let calls = epoll.calls();
        assert_eq!(calls.len(), 1);
        assert!(
            calls[0].ends_with(" 17"),
            "pid 7 under its own token: {calls:?}"
        );
        assert!(w.exited(1, &epoll), "pid 7 was the last one followed");
        // A later process given the pid by a FORK is watched no more than any other.
        w.fork(9, OTHER);
        assert!(!w.ended(9));
    }

    /// A start time that cannot be read because the process is gone (exited once its pidfd was open,
    /// or before) is the process gone before the run; one that cannot be read for another reason says
    /// nothing of the process, which is followed; a pidfd refused (no pidfd_open) is not checked.
    #[test]
    fn an_unreadable_start_time_is_gone_only_when_the_process_is() {
        let epoll = Polled::default();
        let read_fails = |errno| {
            let fails = |_| Err(io::Error::from_raw_os_error(errno));
            let w = checked(vec![7], 90, &epoll, pidfd, fails);
            (w.gone_before(), w.ended(7))
        };
        let gone = checked(vec![7, 0, 9], 90, &epoll, pidfd, start_time);
        assert_eq!(gone.gone(), [0], "exited, its pid no one's: let go of too");
        assert_eq!(read_fails(libc::ENOENT), (true, false));
        assert_eq!(read_fails(libc::ESRCH), (true, false));
        assert_eq!(read_fails(libc::EACCES), (false, false));
        let refused = |_| Err(io::Error::from_raw_os_error(libc::ENOSYS));
        let unread = |_| -> io::Result<u64> { panic!("no pidfd: nothing to check") };
        assert!(!checked(vec![7], 90, &epoll, refused, unread).gone_before());
    }

    /// A refusal to poll a pidfd is the run's error.
    #[test]
    fn a_pidfd_epoll_refuses_is_an_error() {
        let epoll = Polled {
            refuse: Some(libc::ENOMEM),
            ..Polled::default()
        };
        assert!(unplanned(vec![7], following(true, false), &epoll, pidfd).is_err());
    }
}
