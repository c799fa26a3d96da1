//! The NETLINK_KOBJECT_UEVENT socket the hotplug watcher reads CPU online/offline uevents from.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::{cvt, cvt_nonblocking};

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
    cvt_nonblocking(n)
}
