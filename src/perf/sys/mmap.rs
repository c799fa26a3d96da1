//! `mmap(2)` of a perf event's ring buffer (whole or in parts), unmapped on drop, and the page size.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

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
