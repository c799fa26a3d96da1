//! Every raw system call ksymwatch makes, and nothing else: perf_event_open, its ioctls, mmap, epoll,
//! signalfd, bpf (programs and maps for `--value`), the uevent netlink socket, fcntl for an output file's O_NONBLOCK, and for a process watch pidfds,
//! ptrace (a launched command stops at its exec), waitpid and process_vm_readv (a hit's value). Each returns
//! owned file descriptors and `io::Error`s so callers never touch a raw fd or errno, and everything they
//! open is closed on drop.
//!
//! Why `libc` and not `rustix`: the calls whose safety is the hard part (perf_event_open, bpf, ptrace,
//! process_vm_readv) are not in rustix, and the ones that are stay `unsafe` there (mmap of a ring, the
//! perf ioctls through rustix's `Ioctl` trait). What rustix would make safe is a dozen one-line calls
//! (geteuid, clock_gettime, fcntl, flock, setrlimit, waitpid, sched_setaffinity, the netlink socket),
//! each already a checked wrapper here; a second system-call layer for those would leave this file's
//! unsafe where it is and split the calls over two styles.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use perf_event_open_sys as perf;

pub use perf::bindings::perf_event_attr;

/// `perf_event_open(2)` with close-on-exec.
pub fn perf_event_open(attr: &perf_event_attr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let mut attr = *attr;
    // SAFETY: `attr` is a fully initialised perf_event_attr whose `size` field matches the struct; the kernel
    // only reads it (and may write back `size` on E2BIG into our local copy).
    let fd = unsafe {
        perf::perf_event_open(
            &mut attr,
            pid,
            cpu,
            -1,
            perf::bindings::PERF_FLAG_FD_CLOEXEC as _,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// PERF_EVENT_IOC_ENABLE.
pub fn perf_enable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `fd` is a live perf event descriptor; ENABLE takes no pointer argument.
    cvt(unsafe { perf::ioctls::ENABLE(fd.as_raw_fd(), 0) })
}

/// PERF_EVENT_IOC_DISABLE.
pub fn perf_disable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: as for `perf_enable`.
    cvt(unsafe { perf::ioctls::DISABLE(fd.as_raw_fd(), 0) })
}

/// `read(2)` of a perf event's counter into `buf` (its layout is the event's `read_format`); returns how
/// many bytes the kernel wrote.
pub fn perf_read(fd: BorrowedFd<'_>, buf: &mut [u64]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable buffer of exactly `size_of_val(buf)` bytes for the duration of the
    // call; the kernel writes at most that many.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            std::mem::size_of_val(buf),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

fn cvt(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A shared read-write mapping of a perf event's ring buffer, unmapped on drop.
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; the ring reader synchronises with the kernel
// through atomic head/tail accesses, not through Rust references shared across threads.
unsafe impl Send for Mmap {}

impl Mmap {
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mmap> {
        // SAFETY: a fresh shared mapping of `len` bytes of a perf fd at offset 0; the kernel validates the size.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mmap { ptr, len })
    }

    /// A shared mapping of `len` bytes of `fd` from byte `offset`, read-only unless `writable`: a BPF ring
    /// buffer is mapped in two parts, its consumer page writable and the rest read-only (the kernel
    /// refuses to map what it writes writable).
    pub fn map_part(
        fd: BorrowedFd<'_>,
        len: usize,
        offset: usize,
        writable: bool,
    ) -> io::Result<Mmap> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a fresh shared mapping of `len` bytes of `fd` at `offset`; the kernel validates size,
        // offset and protection.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mmap { ptr, len })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn size(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned, and no reference into the mapping outlives self.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// Puts the calling thread (only it: Linux schedules threads) under SCHED_FIFO at `priority`, with
/// SCHED_RESET_ON_FORK so that no thread or process it starts afterwards inherits the real-time policy.
/// EPERM without CAP_SYS_NICE (or an RLIMIT_RTPRIO of at least `priority`).
pub fn set_fifo(priority: u8) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: libc::c_int::from(priority),
    };
    // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is the calling thread.
    cvt(unsafe {
        libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param)
    })
}

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
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
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
        if n < 0 {
            let err = io::Error::last_os_error();
            return if err.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(err)
            };
        }
        Ok((n as usize == size).then_some(info.ssi_signo))
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.0.as_fd()
    }
}

/// A NETLINK_KOBJECT_UEVENT socket subscribed to the kernel's uevent group, non-blocking.
pub fn uevent_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; result checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::NETLINK_KOBJECT_UEVENT,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // Bigger than the default so a burst of hotplug uevents is less likely to hit ENOBUFS; the periodic
    // reconcile covers the rest.
    let rcvbuf: libc::c_int = 1 << 20;
    // SAFETY: valid fd, option pointer and length describe a c_int.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&rcvbuf as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        );
    }
    // SAFETY: sockaddr_nl is plain data.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr.nl_pid = 0;
    addr.nl_groups = 1;
    // SAFETY: `addr` is a valid sockaddr_nl and the length matches it.
    let ret = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    cvt(ret)?;
    Ok(fd)
}

/// One datagram from a non-blocking socket; `Ok(None)` when nothing is queued.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        let err = io::Error::last_os_error();
        return if err.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(err)
        };
    }
    Ok(Some(n as usize))
}

/// CLOCK_MONOTONIC in nanoseconds: the clock the breakpoint events stamp their samples with.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_BOOTTIME in nanoseconds: CLOCK_MONOTONIC plus the time spent suspended (Perfetto's trace clock).
pub fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into; both clocks asked for always exist (Linux 2.6.39+).
    unsafe {
        libc::clock_gettime(clock, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch (0 for a clock set before 1970).
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into; CLOCK_REALTIME always exists.
    unsafe {
        libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts);
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Clears `O_NONBLOCK` on an open file: outputs are opened non-blocking so a FIFO with no reader fails at
/// once (ENXIO) instead of hanging, then written blocking so a slow reader is waited for, not an EAGAIN.
pub fn set_blocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: F_GETFL on a live descriptor borrowed for the call; no pointer arguments.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; F_SETFL takes the flag word by value.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) })
}

/// The effective user id.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// PERF_EVENT_IOC_SET_OUTPUT: `fd`'s records go to `target`'s ring (both bound to the same CPU).
pub fn perf_set_output(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both are live perf event descriptors; SET_OUTPUT takes the target descriptor by value.
    cvt(unsafe { perf::ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) })
}

/// PERF_EVENT_IOC_MODIFY_ATTRIBUTES: a breakpoint's address, length and type, changed in place (and in
/// every inherited child), keeping its debug register.
pub fn perf_modify_attributes(fd: BorrowedFd<'_>, attr: &perf_event_attr) -> io::Result<()> {
    let mut attr = *attr;
    // SAFETY: `attr` is a fully initialised perf_event_attr with a matching `size`, live for the call; the
    // kernel copies it in.
    cvt(unsafe { perf::ioctls::MODIFY_ATTRIBUTES(fd.as_raw_fd(), &mut attr) })
}

/// `pidfd_open(2)`: a descriptor that polls readable when the process exits.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `PTRACE_TRACEME`, for a child between fork and exec: it then stops (SIGTRAP) right after its exec, before
/// the new program's first instruction. Only async-signal-safe work: a raw syscall.
pub fn ptrace_traceme() -> io::Result<()> {
    // SAFETY: PTRACE_TRACEME takes no pointers.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_TRACEME,
            0,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Resumes a stopped tracee up to its next system call entry or exit (`PTRACE_SYSCALL`), or for good
/// (`PTRACE_DETACH`), delivering no signal.
pub fn ptrace_resume(pid: u32, detach: bool) -> io::Result<()> {
    let req = if detach {
        libc::PTRACE_DETACH
    } else {
        libc::PTRACE_SYSCALL
    };
    // SAFETY: no pointers; the data argument 0 means "no signal".
    let r = unsafe {
        libc::ptrace(
            req,
            pid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Resumes a stopped tracee until its next signal or exit (`PTRACE_CONT`), delivering no signal.
pub fn ptrace_cont(pid: u32) -> io::Result<()> {
    // SAFETY: no pointers; the data argument 0 means "no signal".
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_CONT,
            pid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The word of a stopped tracee's memory at `addr` (`PTRACE_PEEKDATA`).
pub fn ptrace_peek(pid: u32, addr: u64) -> io::Result<u64> {
    // SAFETY: errno is this thread's; clearing it tells a word of -1 from a failure.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: PEEKDATA reads the tracee's memory, not ours; no pointer of ours is passed.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_PEEKDATA,
            pid as libc::pid_t,
            addr as *mut libc::c_void,
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    let e = io::Error::last_os_error();
    if r == -1 && e.raw_os_error() != Some(0) {
        return Err(e);
    }
    Ok(r as u64)
}

/// Writes one word of a stopped tracee's memory at `addr` (`PTRACE_POKEDATA`; text pages too).
pub fn ptrace_poke(pid: u32, addr: u64, word: u64) -> io::Result<()> {
    // SAFETY: POKEDATA writes the tracee's memory, not ours; the data argument is the word itself.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_POKEDATA,
            pid as libc::pid_t,
            addr as *mut libc::c_void,
            word as *mut libc::c_void,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A stopped tracee's instruction pointer, or with `set` moves it there (`PTRACE_GETREGS`/`SETREGS`).
#[cfg(target_arch = "x86_64")]
pub fn ptrace_ip(pid: u32, set: Option<u64>) -> io::Result<u64> {
    // SAFETY: user_regs_struct is plain integers; all zero is a valid value to be overwritten.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: GETREGS writes one user_regs_struct into `regs`, which lives for the call.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGS,
            pid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            &mut regs as *mut libc::user_regs_struct as *mut libc::c_void,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(ip) = set {
        regs.rip = ip;
        // SAFETY: SETREGS reads one user_regs_struct from `regs`, which lives for the call.
        let r = unsafe {
            libc::ptrace(
                libc::PTRACE_SETREGS,
                pid as libc::pid_t,
                std::ptr::null_mut::<libc::c_void>(),
                &mut regs as *mut libc::user_regs_struct as *mut libc::c_void,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(regs.rip)
}

/// How a child changed state, from `waitpid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    Stopped(i32),
    Exited(i32),
    Signaled(i32),
}

/// `waitpid(pid, 0)` for one child (blocking).
pub fn wait_child(pid: u32) -> io::Result<ChildState> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int to write into.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        break;
    }
    Ok(if libc::WIFSTOPPED(status) {
        ChildState::Stopped(libc::WSTOPSIG(status))
    } else if libc::WIFSIGNALED(status) {
        ChildState::Signaled(libc::WTERMSIG(status))
    } else {
        ChildState::Exited(libc::WEXITSTATUS(status))
    })
}

/// Raises the soft open-file limit to the hard one: a process watch holds one descriptor per thread, CPU
/// and target. Returns the new soft limit.
pub fn raise_fd_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to write into.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) })?;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid rlimit to read from.
        cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    }
    Ok(lim.rlim_cur)
}

/// `mkfifo(3)`: a named pipe at `path`, for `--control`.
pub fn mkfifo(path: &std::path::Path, mode: u32) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `c` is a NUL-terminated path live for the call.
    cvt(unsafe { libc::mkfifo(c.as_ptr(), mode as libc::mode_t) })
}

/// `process_vm_readv(2)` of `buf.len()` bytes at `addr` in process `pid` into `buf`: one iovec each side,
/// no page pinning of our own. Returns how many bytes were read (fewer than asked when the range crosses
/// into an unmapped page); ESRCH when the process is gone, EFAULT when `addr` is not mapped there.
pub fn process_vm_read(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // The remote address is only a number to us; the kernel checks it against the other process's mappings.
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, writable for its whole length and live for the call; the kernel
    // writes at most that many bytes there. `remote` is never dereferenced by us, only by the kernel in the
    // other address space, where a bad address is an EFAULT, not undefined behaviour.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// PERF_EVENT_IOC_ID: the id the kernel writes into this event's records (`PERF_SAMPLE_IDENTIFIER`).
pub fn perf_event_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: `fd` is a live perf event descriptor; ID writes one u64 through the pointer, which is valid
    // for the call.
    cvt(unsafe { perf::ioctls::ID(fd.as_raw_fd(), &mut id) })?;
    Ok(id)
}

/// PERF_EVENT_IOC_SET_BPF: runs the `BPF_PROG_TYPE_PERF_EVENT` program `prog` at every overflow of `fd`
/// (every hit of a breakpoint); a return of 0 drops the sample. Copied into inherited children.
pub fn perf_set_bpf(fd: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both are live descriptors; SET_BPF takes the program descriptor by value.
    cvt(unsafe { perf::ioctls::SET_BPF(fd.as_raw_fd(), prog.as_raw_fd() as u32) })
}

/// `bpf(2)` commands used.
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_int = 4;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_int = 17;

/// `union bpf_attr` for BPF_PROG_LOAD, up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for BPF_MAP_CREATE, up to `map_name`.
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for the BPF_MAP_*_ELEM commands.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `bpf(cmd, attr, sizeof attr)`; a descriptor-returning command's result is the descriptor.
///
/// # Safety
/// Every pointer inside `attr` must be valid for what `cmd` does with it for the duration of the call.
unsafe fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialised `union bpf_attr` prefix of exactly `size_of::<T>()` bytes; the
    // pointers it holds are the caller's to vouch for.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

fn object_name(name: &str) -> [u8; 16] {
    // The kernel allows [A-Za-z0-9_.] and a NUL within 16 bytes.
    let mut out = [0u8; 16];
    for (o, c) in out.iter_mut().zip(name.bytes().take(15)) {
        *o = if c.is_ascii_alphanumeric() || c == b'.' {
            c
        } else {
            b'_'
        };
    }
    out
}

/// BPF_PROG_LOAD of `insns` (raw `struct bpf_insn`s) as a program of `prog_type`, licensed GPL (the probe
/// read helpers require it), with close-on-exec (the kernel always sets it). The verifier's log is written
/// into `log` (cleared first) on failure: what it refused, and where.
pub fn bpf_prog_load(
    prog_type: u32,
    insns: &[u64],
    name: &str,
    log: &mut Vec<u8>,
) -> io::Result<OwnedFd> {
    // Without a log first: with one, a log buffer the verifier overflows fails a valid program with
    // ENOSPC (a large --if does). Only a refusal is loaded again, with a log big enough to say why.
    log.clear();
    match prog_load(prog_type, insns, name, 0, log) {
        Err(e)
            if !matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EACCES | libc::ENOSYS)
            ) =>
        {
            log.resize(16 << 20, 0);
            let again = prog_load(prog_type, insns, name, 1, log);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            log.truncate(end);
            // The first refusal's reason stands; the log explains it.
            again.and(Err(e))
        }
        other => other,
    }
}

fn prog_load(
    prog_type: u32,
    insns: &[u64],
    name: &str,
    log_level: u32,
    log: &mut [u8],
) -> io::Result<OwnedFd> {
    const LICENSE: &[u8] = b"GPL\0";
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        log_level,
        log_size: if log_level == 0 { 0 } else { log.len() as u32 },
        log_buf: if log_level == 0 {
            0
        } else {
            log.as_mut_ptr() as u64
        },
        prog_name: object_name(name),
        ..ProgLoadAttr::default()
    };
    // SAFETY: `insns`, the license and `log` outlive the call; the kernel reads `insn_cnt` instructions
    // and the NUL-terminated license, and writes at most `log_size` bytes of log.
    let fd = unsafe { bpf(BPF_PROG_LOAD, &mut attr) }?;
    // SAFETY: BPF_PROG_LOAD returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// BPF_MAP_CREATE.
pub fn bpf_map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    bpf_map_create_flags(map_type, (key_size, value_size, max_entries), 0, name)
}

/// BPF_MAP_CREATE with `map_flags` (`BPF_F_NO_PREALLOC`: a hash map's elements allocated as they are
/// inserted); `sizes`: key, value, max entries.
pub fn bpf_map_create_flags(
    map_type: u32,
    (key_size, value_size, max_entries): (u32, u32, u32),
    map_flags: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_flags,
        map_name: object_name(name),
        ..MapCreateAttr::default()
    };
    // SAFETY: the attribute holds no pointers.
    let fd = unsafe { bpf(BPF_MAP_CREATE, &mut attr) }?;
    // SAFETY: BPF_MAP_CREATE returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// BPF_MAP_UPDATE_ELEM (`BPF_ANY`): `key` and `value` must be the map's key and value sizes.
pub fn bpf_map_update(map: BorrowedFd<'_>, key: &[u8], value: &[u8]) -> io::Result<()> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: `key` and `value` are live for the call and as long as the map's sizes (the caller's
    // contract); the kernel only reads them.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(|_| ())
}

/// `union bpf_attr` for BPF_RAW_TRACEPOINT_OPEN.
#[repr(C)]
#[derive(Default)]
struct RawTracepointAttr {
    name: u64,
    prog_fd: u32,
    _pad: u32,
}

/// BPF_RAW_TRACEPOINT_OPEN: attaches `prog` (a raw-tracepoint program) to the kernel tracepoint `name`
/// (`sched_process_fork`) until the returned descriptor is closed.
pub fn bpf_raw_tracepoint_open(name: &str, prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let name =
        std::ffi::CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut attr = RawTracepointAttr {
        name: name.as_ptr() as u64,
        prog_fd: prog.as_raw_fd() as u32,
        ..RawTracepointAttr::default()
    };
    // SAFETY: the NUL-terminated name outlives the call; the kernel only reads it.
    let fd = unsafe { bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr) }?;
    // SAFETY: BPF_RAW_TRACEPOINT_OPEN returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// BPF_MAP_DELETE_ELEM: `key` must be the map's key size. A key that is not there is ENOENT.
pub fn bpf_map_delete(map: BorrowedFd<'_>, key: &[u8]) -> io::Result<()> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: `key` is live for the call and as long as the map's key (the caller's contract); the kernel
    // only reads it.
    unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut attr) }.map(|_| ())
}

/// Pins the calling thread to `cpu` (sched_setaffinity of thread 0: the caller).
pub fn pin_current_thread(cpu: u32) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; all zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let cpu = cpu as usize;
    if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: `cpu` is within the set's bits (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed, live for the call.
    cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })
}

/// BPF_MAP_GET_NEXT_KEY: the key after `key` (the first with `None`) into `next`, whose length must be
/// the map's key size; `false` when there is none.
pub fn bpf_map_next_key(
    map: BorrowedFd<'_>,
    key: Option<&[u8]>,
    next: &mut [u8],
) -> io::Result<bool> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.map_or(0, |k| k.as_ptr() as u64),
        value: next.as_mut_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: `key` (when given) and `next` are live for the call and as long as the map's key (the
    // caller's contract); the kernel reads `key` and writes `next`.
    match unsafe { bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) } {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// BPF_MAP_LOOKUP_ELEM of a map that is not per-CPU: `key`'s value into `value` (the map's key and value
/// sizes); `false` when the key is not there.
pub fn bpf_map_lookup(map: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: `key` and `value` are live for the call and as long as the map's sizes (the caller's
    // contract); the kernel reads `key` and writes `value`.
    match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) } {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Takes an exclusive `flock` on `file`, waiting for it: the lock live tests share with every other run
/// that arms breakpoints on this machine.
#[cfg(test)]
pub fn lock_exclusive(file: &std::fs::File) -> io::Result<()> {
    // SAFETY: flock on a descriptor `file` owns for the call.
    cvt(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) })
}

/// The most CPUs a kernel can be built for (`NR_CPUS` tops out at 8192): a per-CPU lookup's buffer this
/// large always holds every possible CPU's slot.
const NR_CPUS_MAX: usize = 8192;

/// The u32 value at u32 `key` of a map that is not per-CPU (tests read a program's flags back).
#[cfg(test)]
pub fn bpf_map_lookup_u32(map: BorrowedFd<'_>, key: u32) -> io::Result<u32> {
    let key = key.to_ne_bytes();
    let mut value = [0u8; 4];
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: the key is the u32 the map was created with; the kernel writes the 4-byte value into
    // `value`, live for the call.
    unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) }?;
    Ok(u32::from_ne_bytes(value))
}

/// BPF_MAP_LOOKUP_ELEM of a `BPF_MAP_TYPE_PERCPU_ARRAY` of u64 values with a u32 key: each possible CPU's
/// value, by CPU number.
pub fn bpf_map_lookup_percpu_u64(map: BorrowedFd<'_>, key: u32) -> io::Result<Vec<u64>> {
    let key = key.to_ne_bytes();
    let mut values = vec![0u64; NR_CPUS_MAX];
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: values.as_mut_ptr() as u64,
        ..MapElemAttr::default()
    };
    // SAFETY: the key is the u32 the map was created with; the kernel writes 8 bytes per possible CPU
    // (a u64 value needs no rounding), at most NR_CPUS_MAX of them, into `values`, live for the call.
    unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) }?;
    Ok(values)
}
