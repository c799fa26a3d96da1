//! The reader of a stream on stdout, followed so that its going away ends the run when it goes. A write
//! to a pipe whose reader has gone fails with EPIPE and ends the run ("output closed"), but only when
//! there is something to write: `write ... | head -1` over a watch that gets no more hits would otherwise
//! run until killed, holding its breakpoints. So the loop also waits on stdout itself, for its hang-up
//! only: the write end of a pipe reports EPOLLERR once no reader is left, a socket EPOLLHUP once it is
//! shut both ways.
//!
//! Only a pipe or a socket has a reader that can go away; a regular file or a terminal is not followed
//! (and epoll refuses a regular file). Nor is an `-o FILE` stream (a FIFO given as `-o` included): a
//! write there still ends the run when its reader is gone, as before. `--folded` on stdout beside an
//! `-o FILE` stream is followed: its stacks are written at the end, but the pipe reports its reader gone
//! the moment it goes, and a report that can no longer be delivered is no reason to keep the breakpoints
//! (the run ends as without `-o`, and the file keeps the stream up to then).

use std::io;
use std::os::fd::BorrowedFd;

use crate::report::StopReason;
use crate::trace::context::Poll;

/// What stdout is, as far as a reader goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pipe,
    Socket,
    /// A regular file, a terminal, a device: nothing that loses a reader.
    Other,
}

impl Kind {
    /// The kind a file's `st_mode` names.
    pub fn of(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFIFO => Kind::Pipe,
            libc::S_IFSOCK => Kind::Socket,
            _ => Kind::Other,
        }
    }

    /// Whether a reader of this kind of file can go away while the tool runs.
    fn has_reader(self) -> bool {
        matches!(self, Kind::Pipe | Kind::Socket)
    }
}

/// Follows `out` (stdout) in `poll` under `token`, for its hang-up only, when the stream or `--folded`'s
/// stacks go there (`stream_here`) and `mode` (its `fstat`) says it is a pipe or a socket. Whether it is followed. Not
/// being able to follow it is no error: a write there still finds its reader gone.
pub fn follow(
    stream_here: bool,
    out: BorrowedFd<'_>,
    mode: impl FnOnce(BorrowedFd<'_>) -> io::Result<u32>,
    poll: &impl Poll,
    token: u64,
) -> bool {
    if !stream_here {
        return false;
    }
    match mode(out) {
        Ok(m) if Kind::of(m).has_reader() => poll.add_hangup(out, token).is_ok(),
        _ => false,
    }
}

/// A wake on the followed stdout: only its failure or hang-up wakes the loop there, so its reader is gone
/// and the run ends as a write that met EPIPE ends it ("output closed").
pub fn gone() -> StopReason {
    StopReason::BrokenPipe
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, AsRawFd};

    use super::*;
    use crate::trace::context::fake::Polled;

    const TOKEN: u64 = 5;

    /// What `follow` asks of the epoll set for stdout of mode `mode`, with the stream there or not.
    fn followed(stream_here: bool, mode: io::Result<u32>, poll: &Polled) -> bool {
        let out = io::stderr();
        follow(stream_here, out.as_fd(), |_| mode, poll, TOKEN)
    }

    #[test]
    fn a_pipe_or_socket_is_followed_for_its_hang_up() {
        let fd = io::stderr().as_fd().as_raw_fd();
        for mode in [libc::S_IFIFO | 0o600, libc::S_IFSOCK | 0o777] {
            let poll = Polled::default();
            assert!(followed(true, Ok(mode), &poll), "{mode:o}");
            assert_eq!(poll.calls(), [format!("hangup {fd} {TOKEN}")], "{mode:o}");
        }
    }

    /// A file, a terminal or /dev/null has no reader to lose; a regular file would be refused anyway.
    #[test]
    fn a_file_a_terminal_or_a_device_is_not_followed() {
        for mode in [
            libc::S_IFREG | 0o644,
            libc::S_IFCHR | 0o620,
            libc::S_IFBLK | 0o660,
            libc::S_IFDIR | 0o755,
        ] {
            let poll = Polled::default();
            assert!(!followed(true, Ok(mode), &poll), "{mode:o}");
            assert!(poll.calls().is_empty(), "{mode:o}");
        }
    }

    /// `-o FILE`: stdout is not where the stream goes, whatever it is; it is not even looked at.
    #[test]
    fn stdout_is_not_followed_when_the_stream_goes_elsewhere() {
        let poll = Polled::default();
        let out = io::stderr();
        let looked = std::cell::Cell::new(false);
        let mode = |_: BorrowedFd<'_>| {
            looked.set(true);
            Ok(libc::S_IFIFO)
        };
        assert!(!follow(false, out.as_fd(), mode, &poll, TOKEN));
        assert!(!looked.get());
        assert!(poll.calls().is_empty());
    }

    /// A closed stdout (EBADF) or an epoll that refuses it: not followed, and not an error.
    #[test]
    fn stdout_that_cannot_be_followed_is_left_to_the_writes() {
        let poll = Polled::default();
        let ebadf = io::Error::from_raw_os_error(libc::EBADF);
        assert!(!followed(true, Err(ebadf), &poll));
        assert!(poll.calls().is_empty());
        let refusing = Polled {
            refuse: Some(libc::EPERM),
            ..Polled::default()
        };
        assert!(!followed(true, Ok(libc::S_IFIFO), &refusing));
    }

    #[test]
    fn its_reader_gone_ends_the_run_as_a_closed_output() {
        assert_eq!(gone(), StopReason::BrokenPipe);
        assert_eq!(gone().to_string(), "output closed");
    }
}
