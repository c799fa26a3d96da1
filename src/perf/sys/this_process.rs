//! What the tracer sets on itself and its files: its threads' scheduling and CPU, its effective uid and
//! open-file limit, an output's blocking mode, the `--control` FIFO and the live tests' `flock`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::cvt;

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

/// Whether the calling thread runs under a real-time policy (SCHED_FIFO or SCHED_RR).
pub fn is_realtime() -> bool {
    // SAFETY: no arguments but the calling thread's id 0.
    let policy = unsafe { libc::sched_getscheduler(0) };
    // The policy may carry SCHED_RESET_ON_FORK.
    matches!(
        policy & !libc::SCHED_RESET_ON_FORK,
        libc::SCHED_FIFO | libc::SCHED_RR
    )
}

/// Lets the calling thread run only on `cpus` (CPU numbers below `CPU_SETSIZE`, 1024; larger ones are
/// left out). EINVAL when none of them is online.
pub fn set_affinity(cpus: impl IntoIterator<Item = u32>) -> io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array, valid all zero.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in cpus {
        if (cpu as usize) < libc::CPU_SETSIZE as usize {
            // SAFETY: the index is below CPU_SETSIZE, the set's size in bits.
            unsafe { libc::CPU_SET(cpu as usize, &mut set) };
        }
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed, read during the call; pid 0 is the calling
    // thread.
    cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })
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

/// Takes an exclusive `flock` on `file`, waiting for it: the lock live tests share with every other run
/// that arms breakpoints on this machine.
#[cfg(test)]
pub fn lock_exclusive(file: &std::fs::File) -> io::Result<()> {
    // SAFETY: flock on a descriptor `file` owns for the call.
    cvt(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) })
}
