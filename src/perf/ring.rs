//! Reading a perf ring buffer: the mmap'd control page plus a power-of-two data area that the kernel fills
//! and we consume. This module hands out raw record bytes and advances the tail; what the bytes mean is
//! [`crate::perf::record`]'s job, so decoding can be tested without a kernel.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use std::mem::offset_of;

use perf_event_open_sys::bindings::perf_event_mmap_page;

use crate::perf::sys::{self, Mmap};

/// The control page's fields this reader uses, where the kernel's `struct perf_event_mmap_page` puts them.
const DATA_HEAD: usize = offset_of!(perf_event_mmap_page, data_head);
const DATA_TAIL: usize = offset_of!(perf_event_mmap_page, data_tail);
const DATA_OFFSET: usize = offset_of!(perf_event_mmap_page, data_offset);
const DATA_SIZE: usize = offset_of!(perf_event_mmap_page, data_size);

// The ABI fixes these (include/uapi/linux/perf_event.h); a binding that disagreed would misread every ring.
const _: () =
    assert!(DATA_HEAD == 1024 && DATA_TAIL == 1032 && DATA_OFFSET == 1040 && DATA_SIZE == 1048);

/// A mapped ring buffer of one perf event.
pub struct Ring {
    map: Mmap,
    data_offset: usize,
    data_size: usize,
    /// Reassembly space for a record that wraps around the end of the data area.
    scratch: Vec<u8>,
}

impl Ring {
    /// Maps `data_pages` (a power of two) pages of data plus the control page.
    pub fn map(fd: BorrowedFd<'_>, data_pages: usize) -> io::Result<Ring> {
        let page = sys::page_size();
        let map = Mmap::map(fd, (data_pages + 1) * page)?;
        let (mut data_offset, mut data_size) = (
            read_u64(&map, DATA_OFFSET) as usize,
            read_u64(&map, DATA_SIZE) as usize,
        );
        if data_size == 0 {
            // Kernels before 4.1 leave these zero: the data area then starts at the second page.
            data_offset = page;
            data_size = data_pages * page;
        }
        if data_offset + data_size > map.size() || !data_size.is_power_of_two() {
            return Err(io::Error::other(
                "perf ring buffer has an unexpected layout",
            ));
        }
        Ok(Ring {
            map,
            data_offset,
            data_size,
            scratch: Vec::new(),
        })
    }

    fn head(&self) -> u64 {
        // Acquire pairs with the kernel's store of data_head after it wrote the records.
        self.control(DATA_HEAD).load(Ordering::Acquire)
    }

    fn tail(&self) -> u64 {
        self.control(DATA_TAIL).load(Ordering::Relaxed)
    }

    fn control(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is one of the 8-byte-aligned u64 fields of the control page, which is mapped for the
        // lifetime of `self.map`; the kernel updates it concurrently, hence the atomic view.
        unsafe { &*(self.map.as_ptr().add(offset) as *const AtomicU64) }
    }

    /// Calls `each` with every complete record (header included) now in the ring, in order, then frees their
    /// space. `each` returns `false` to stop early; the records not yet seen stay in the ring.
    pub fn drain(&mut self, mut each: impl FnMut(&[u8]) -> bool) {
        let head = self.head();
        let mut tail = self.tail();
        let mask = (self.data_size - 1) as u64;
        while head.wrapping_sub(tail) >= 8 {
            let start = (tail & mask) as usize;
            let mut header = [0u8; 8];
            self.copy_out(start, &mut header);
            let size = u16::from_ne_bytes([header[6], header[7]]) as usize;
            if size < 8 || size as u64 > head.wrapping_sub(tail) {
                // A corrupt header would make us loop or read garbage; drop everything pending instead.
                tail = head;
                break;
            }
            let keep_going = if start + size <= self.data_size {
                // SAFETY: [start, start+size) lies inside the data area, which the kernel will not overwrite
                // until we advance data_tail past it.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        self.map.as_ptr().add(self.data_offset + start),
                        size,
                    )
                };
                each(bytes)
            } else {
                let mut buf = std::mem::take(&mut self.scratch);
                buf.resize(size, 0);
                self.copy_out(start, &mut buf);
                let r = each(&buf);
                self.scratch = buf;
                r
            };
            tail = tail.wrapping_add(size as u64);
            if !keep_going {
                break;
            }
        }
        // Release: our reads of the records happen before the kernel may reuse the space.
        self.control(DATA_TAIL).store(tail, Ordering::Release);
    }

    /// Copies `out.len()` bytes starting at data offset `start`, wrapping at the end of the data area.
    fn copy_out(&self, start: usize, out: &mut [u8]) {
        let first = out.len().min(self.data_size - start);
        // SAFETY: both source ranges lie inside the mapped data area; `out` is a distinct Rust buffer.
        unsafe {
            let base = self.map.as_ptr().add(self.data_offset);
            std::ptr::copy_nonoverlapping(base.add(start), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(base, out.as_mut_ptr().add(first), out.len() - first);
        }
    }
}

fn read_u64(map: &Mmap, offset: usize) -> u64 {
    // SAFETY: the control page is mapped and `offset` is inside it, 8-byte aligned.
    unsafe { std::ptr::read_volatile(map.as_ptr().add(offset) as *const u64) }
}

/// A ring over a plain file instead of a perf event, written the way the kernel writes one (records in the
/// data area, then `data_head`), so what reads rings can be tested without a kernel.
#[cfg(test)]
pub mod testing {
    use std::fs::File;
    use std::io;
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::{Ring, DATA_HEAD};
    use crate::perf::sys;

    /// A new file of `len` zero bytes that no name points to (gone with its last descriptor): what the
    /// test rings are mapped from.
    pub fn unlinked_file(len: u64) -> io::Result<File> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "ksymwatch-ring-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        std::fs::remove_file(&path)?;
        file.set_len(len)?;
        Ok(file)
    }

    /// The writing side: the file a [`Ring`] is mapped from.
    pub struct FileRing {
        file: File,
        head: u64,
        data_size: u64,
    }

    impl FileRing {
        /// A ring of `data_pages` (a power of two) pages, and its reader. The control page's data offset and
        /// size stay zero, which the reader takes as the layout kernels before 4.1 use.
        pub fn new(data_pages: usize) -> io::Result<(FileRing, Ring)> {
            let page = sys::page_size();
            let file = unlinked_file(((data_pages + 1) * page) as u64)?;
            let ring = Ring::map(file.as_fd(), data_pages)?;
            let writer = FileRing {
                file,
                head: 0,
                data_size: (data_pages * page) as u64,
            };
            Ok((writer, ring))
        }

        /// Appends `record` (header included) and publishes it. The reader must keep up: nothing checks
        /// that the record fits before the reader's tail.
        pub fn write(&mut self, record: &[u8]) -> io::Result<()> {
            let page = sys::page_size() as u64;
            let start = self.head % self.data_size;
            let first = record.len().min((self.data_size - start) as usize);
            self.file.write_all_at(&record[..first], page + start)?;
            self.file.write_all_at(&record[first..], page)?;
            self.head += record.len() as u64;
            self.file
                .write_all_at(&self.head.to_ne_bytes(), DATA_HEAD as u64)
        }
    }
}
