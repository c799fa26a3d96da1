//! `fstat(2)`: what kind of file a descriptor is (whether stdout is a pipe, a socket, a file or a
//! terminal).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::cvt;

/// `fd`'s `st_mode`: its file type in the `S_IFMT` bits, its permissions below.
pub fn file_mode(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SAFETY: `stat` is plain data; an all-zero one is valid and fstat overwrites it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is live for the call (borrowed); `st` is a writable `stat` the kernel fills.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_mode)
}
