//! `perf_event_open(2)` and the perf event ioctls (enable, disable, set-output, modify-attributes, id,
//! set-bpf), and `read(2)` of an event's counter.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::cvt;
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

/// PERF_EVENT_IOC_SET_BPF: runs the `BPF_PROG_TYPE_PERF_EVENT` program `prog` at every overflow of `fd`
/// (every hit of a breakpoint); a return of 0 drops the sample. Copied into inherited children.
pub fn perf_set_bpf(fd: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both are live descriptors; SET_BPF takes the program descriptor by value.
    cvt(unsafe { perf::ioctls::SET_BPF(fd.as_raw_fd(), prog.as_raw_fd() as u32) })
}
