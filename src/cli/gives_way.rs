//! An output whose reader stopped reading gives way to a stop signal. A write to a full pipe blocks until
//! its reader reads, and the stop signals are read by the session's loop between writes: `ksymwatch ...
//! | less` left at a page, or a log shipper that hung, kept the tracer, and every debug register it
//! holds, whatever SIGTERM or Ctrl-C said, until the reader read again or went away.
//!
//! So a write to anything but a regular file waits for room in slices, looking between them for a
//! pending stop signal or `--duration`'s deadline passed ([`deadline`]); either coming while no room
//! does ends the output as a reader that went away ends it (`BrokenPipe`: nothing more is written there,
//! the run ends, and the session names the signal or the duration as the reason, see
//! `trace::wakes::end`). With room, a pipe takes `PIPE_BUF` bytes without blocking, so no
//! write blocks longer than a reader that reads.

use std::io::{self, Write};
use std::os::fd::AsFd;

use crate::perf::sys;
use crate::trace::deadline;

/// How long one wait for room lasts before the stop signals are looked at again.
const SLICE_MS: i32 = 50;

/// What a pipe with room for a write takes at once (POSIX's atomic pipe write).
const PIPE_BUF: usize = 4096;

/// `W`, whose writes give way to a pending stop signal while it has no room (see the module).
pub struct GivesWay<W> {
    inner: W,
    /// Not a regular file: a write there can wait for a reader.
    waits: bool,
    /// A stop signal or the deadline came while it had no room: nothing more is written.
    gave_way: bool,
    /// Whether the run is to stop ([`stop_due`]; a test's stand-in).
    pending: fn() -> bool,
}

impl<W: Write + AsFd> GivesWay<W> {
    pub fn new(inner: W) -> GivesWay<W> {
        let waits =
            sys::file_mode(inner.as_fd()).is_ok_and(|mode| mode & libc::S_IFMT != libc::S_IFREG);
        GivesWay {
            inner,
            waits,
            gave_way: false,
            pending: stop_due,
        }
    }

    fn gone() -> io::Error {
        io::Error::new(
            io::ErrorKind::BrokenPipe,
            "a stop signal or the deadline came while the output's reader read nothing",
        )
    }
}

/// A stop signal is pending, or the run's deadline has passed.
fn stop_due() -> bool {
    sys::stop_signal_pending() || deadline::passed()
}

impl<W: Write + AsFd> Write for GivesWay<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.gave_way {
            return Err(Self::gone());
        }
        if !self.waits || buf.is_empty() {
            return self.inner.write(buf);
        }
        while !sys::writable_within(self.inner.as_fd(), SLICE_MS)? {
            if (self.pending)() {
                self.gave_way = true;
                deadline::note_gave_way();
                return Err(Self::gone());
            }
        }
        self.inner.write(&buf[..buf.len().min(PIPE_BUF)])
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.gave_way {
            return Err(Self::gone());
        }
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::OwnedFd;

    /// A pipe: its write end as a file, and its read end.
    fn pipe() -> (File, OwnedFd) {
        let (r, w) = std::io::pipe().expect("pipe");
        (File::from(OwnedFd::from(w)), OwnedFd::from(r))
    }

    /// A pipe nobody reads takes what fits; then a pending stop signal ends the writing, and every
    /// later write and flush fails at once instead of blocking.
    #[test]
    fn a_full_pipe_gives_way_to_a_pending_stop_signal() {
        let (w, _r) = pipe();
        let mut out = GivesWay::new(w);
        assert!(out.waits);
        out.pending = || true;
        let mut written = 0usize;
        let err = loop {
            match out.write(&[b'x'; 8192]) {
                Ok(n) => {
                    assert!(n <= PIPE_BUF);
                    written += n;
                }
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(written, 65536, "a pipe's default capacity, and no more");
        assert_eq!(
            out.write(b"x").unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
        assert_eq!(out.flush().unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }

    /// Without a signal a write with room is made; a regular file is written as it is.
    #[test]
    fn writes_with_room_and_to_files_are_made() {
        let (w, _r) = pipe();
        let mut out = GivesWay::new(w);
        out.pending = || false;
        assert_eq!(out.write(b"hello").unwrap(), 5);
        let path = std::env::temp_dir().join(format!("ksymwatch-gives-way-{}", std::process::id()));
        let mut file = GivesWay::new(File::create(&path).unwrap());
        assert!(!file.waits);
        file.pending = || true;
        file.write_all(&[b'y'; 100_000]).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}
