//! Every raw system call ksymwatch makes, and nothing else: perf_event_open, its ioctls, mmap, epoll,
//! signalfd, bpf (programs and maps for `--value`), the uevent netlink socket, fcntl for an output file's O_NONBLOCK, fstat
//! (whether stdout is a pipe or socket whose reader can go away), and for a process watch pidfds,
//! ptrace (a launched command stops at its exec), waitpid and process_vm_readv (a hit's value). Each returns
//! owned file descriptors and `io::Error`s so callers never touch a raw fd or errno, and everything they
//! open is closed on drop.
//!
//! Why `libc` and not `rustix`: the calls whose safety is the hard part (perf_event_open, bpf, ptrace,
//! process_vm_readv) are not in rustix, and the ones that are stay `unsafe` there (mmap of a ring, the
//! perf ioctls through rustix's `Ioctl` trait). What rustix would make safe is a dozen one-line calls
//! (geteuid, clock_gettime, fcntl, flock, setrlimit, waitpid, sched_setaffinity, the netlink socket),
//! each already a checked wrapper here; a second system-call layer for those would leave this module's
//! unsafe where it is and split the calls over two styles.
//!
//! One submodule per kernel interface; callers use the flat `sys::` names re-exported here.

mod bpf;
mod clock;
mod mmap;
mod netlink;
mod perf_event;
mod poll;
mod process;
mod stat;
mod this_process;

pub use bpf::*;
pub use clock::*;
pub use mmap::*;
pub use netlink::*;
pub use perf_event::*;
pub use poll::*;
pub use process::*;
pub use stat::*;
pub use this_process::*;

use std::io;

/// A byte count or `-1` from a non-blocking read as `Ok(Some(n))`, or `Ok(None)` for EAGAIN (nothing
/// there yet), or the error.
fn cvt_nonblocking(n: libc::ssize_t) -> io::Result<Option<usize>> {
    if n >= 0 {
        return Ok(Some(n as usize));
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::WouldBlock {
        Ok(None)
    } else {
        Err(err)
    }
}

/// A `-1`-on-error return as an `io::Result`, with errno.
fn cvt(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
