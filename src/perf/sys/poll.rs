//! `epoll(7)` and `signalfd(2)`: what the session's loop waits on, and the stop signals it turns into
//! readable descriptors.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::{cvt, cvt_nonblocking};

/// An epoll instance.
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall; the result is checked before being wrapped.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor owned by nobody else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for input, tagging its events with `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.add_with(fd, libc::EPOLLIN as u32, token)
    }

    /// Watches `fd` for nothing but its failure or hang-up (EPOLLERR, EPOLLHUP: epoll reports those
    /// whatever is asked), tagging them with `token`: the write end of a pipe whose reader has gone, a
    /// socket shut both ways. Input that arrives (a socket's peer that only stopped writing) wakes nobody.
    pub fn add_hangup(&self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        self.add_with(fd, 0, token)
    }

    /// Registers `fd` for the events in `mask`, tagging them with `token`.
    fn add_with(&self, fd: BorrowedFd<'_>, mask: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: mask,
            u64: token,
        };
        // SAFETY: both fds are live; `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                fd.as_raw_fd(),
                &mut ev,
            )
        })
    }

    pub fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: both fds are live; DEL ignores the event pointer.
        cvt(unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd.as_raw_fd(),
                std::ptr::null_mut(),
            )
        })
    }

    /// Waits up to `timeout` (to the microsecond: epoll_pwait2, Linux 5.11+; whole milliseconds, rounded
    /// up, before it) and returns the tokens that are ready; EINTR is an empty wake-up.
    pub fn wait(&self, tokens: &mut Vec<u64>, timeout: std::time::Duration) -> io::Result<()> {
        tokens.clear();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: `events` is a writable array of the length passed; `ts` lives for the call; no signal
        // mask is passed (null, size 0).
        let mut n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                &ts as *const libc::timespec,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
            // SAFETY: `events` is a writable array of the length passed.
            n = libc::c_long::from(unsafe {
                libc::epoll_wait(
                    self.0.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    ms,
                )
            });
        }
        if n < 0 {
            let err = io::Error::last_os_error();
            return if err.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(err)
            };
        }
        tokens.extend(events[..n as usize].iter().map(|e| e.u64));
        Ok(())
    }
}

/// A signalfd for SIGINT/SIGTERM/SIGHUP, with those signals blocked so they arrive only through the fd and
/// the event loop can stop cleanly (releasing every breakpoint) instead of dying mid-drain.
pub struct SignalFd(OwnedFd);

pub const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

impl SignalFd {
    /// The stop signals and `extra` (`--dump-on signal`'s SIGUSR1), all blocked and read from the descriptor.
    pub fn stop_signals_and(extra: &[libc::c_int]) -> io::Result<SignalFd> {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // A shell starts background jobs with SIGINT ignored, and an ignored signal is discarded even while
        // blocked, so `ksymwatch ... & kill -INT $!` would never stop. SIGINT and SIGTERM are asked for
        // explicitly; SIGHUP keeps an inherited SIG_IGN (nohup).
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: restoring the default disposition of a signal that is about to be blocked.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        // SAFETY: `set` is a valid sigset_t; these calls only write to it and to the thread's mask.
        unsafe {
            libc::sigemptyset(&mut set);
            for &sig in STOP_SIGNALS.iter().chain(extra) {
                libc::sigaddset(&mut set, sig);
            }
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: `set` is initialised; -1 asks for a new descriptor.
        let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor owned by nobody else.
        Ok(SignalFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// The next pending signal number, if any.
    pub fn read(&self) -> io::Result<Option<u32>> {
        // SAFETY: signalfd_siginfo is plain data.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: `info` is a writable buffer of `size` bytes.
        let n = unsafe {
            libc::read(
                self.0.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        };
        Ok(cvt_nonblocking(n)?.and_then(|n| (n == size).then_some(info.ssi_signo)))
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.0.as_fd()
    }
}

/// Waits up to `timeout_ms` for `fd` to take a write (POLLOUT) or to have failed (POLLERR, POLLHUP: the
/// write then says how); whether it did. A wait a signal interrupted (EINTR) did not.
pub fn writable_within(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the call; `fd` is live (borrowed).
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        let err = io::Error::last_os_error();
        return match err.kind() {
            io::ErrorKind::Interrupted => Ok(false),
            _ => Err(err),
        };
    }
    Ok(n > 0)
}

/// Whether a stop signal is pending: blocked for the [`SignalFd`] and not read from it yet.
pub fn stop_signal_pending() -> bool {
    // SAFETY: sigset_t is plain data; sigpending fills it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable sigset_t.
    if unsafe { libc::sigpending(&mut set) } != 0 {
        return false;
    }
    STOP_SIGNALS
        .iter()
        // SAFETY: `set` was filled by sigpending.
        .any(|&sig| unsafe { libc::sigismember(&set, sig) } == 1)
}
