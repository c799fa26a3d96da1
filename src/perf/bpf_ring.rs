//! Reading a BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`): the hit programs write their records into one per
//! CPU and watch. This module hands out each record's bytes and frees their space; what they mean is
//! [`crate::perf::hit_record`]'s job, so the reader is tested on a file laid out as the kernel lays a ring
//! out, without a kernel.
//!
//! The kernel's layout, by mapping offset: the consumer position's page (the reader's to write), the
//! producer position's page, then the data area, mapped twice in a row so that a record that wraps around
//! its end reads as one slice. Each record is an 8-byte header (its length, with a busy bit while the
//! program still writes it and a discard bit, then a page offset the reader does not need) and the data,
//! the whole rounded up to 8 bytes.
//!
//! Why not the breakpoint's perf ring: a record written with `bpf_ringbuf_output` costs the writer less
//! than `bpf_perf_event_output`'s sample (measured: `hit_bench`), and the kernel wakes the reader only for
//! a record written when the reader had read everything before it, which is at once for a lone hit and
//! once per read in a flood.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::perf::sys::{self, Mmap};

/// The length word's bit while the record is reserved and not yet submitted.
const BUSY: u32 = 1 << 31;
/// The length word's bit of a record the program discarded.
const DISCARD: u32 = 1 << 30;
/// The record header: length word, page offset.
const HEADER: usize = 8;

/// The ring bytes a record of `len` data bytes takes: its header and its data, rounded up to 8 bytes (the
/// kernel's `BPF_RINGBUF_HDR_SZ` and alignment).
pub const fn record_space(len: usize) -> usize {
    (len + HEADER).next_multiple_of(8)
}

/// A mapped BPF ring buffer.
pub struct BpfRing {
    /// The consumer position's page, writable.
    consumer: Mmap,
    /// The producer position's page, then the data area twice.
    produced: Mmap,
    size: usize,
    // Declared after the mappings so they are gone before the descriptor closes.
    fd: OwnedFd,
}

impl BpfRing {
    /// Maps the ring buffer map `fd` of `size` data bytes (a power-of-two multiple of the page size, as it
    /// was created with).
    pub fn map(fd: OwnedFd, size: usize) -> io::Result<BpfRing> {
        let page = sys::page_size();
        if !size.is_power_of_two() || size < page {
            return Err(io::Error::other(format!(
                "BPF ring buffer of {size} bytes: not a power-of-two number of pages"
            )));
        }
        let consumer = Mmap::map_part(fd.as_fd(), page, 0, true)?;
        let produced = Mmap::map_part(fd.as_fd(), page + 2 * size, page, false)?;
        Ok(BpfRing {
            consumer,
            produced,
            size,
            fd,
        })
    }

    /// The map's descriptor: epoll reports it readable while records are waiting.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        // SAFETY: the first 8 bytes of the consumer page, mapped (page-aligned) for the lifetime of
        // `self.consumer`; only this reader writes it, the kernel reads it concurrently.
        unsafe { &*(self.consumer.as_ptr() as *const AtomicU64) }
    }

    fn producer_pos(&self) -> &AtomicU64 {
        // SAFETY: the first 8 bytes of the producer page, mapped (page-aligned) for the lifetime of
        // `self.produced`; the kernel updates it concurrently, hence the atomic view.
        unsafe { &*(self.produced.as_ptr() as *const AtomicU64) }
    }

    /// Bytes written and not yet read.
    pub fn pending(&self) -> u64 {
        let prod = self.producer_pos().load(Ordering::Acquire);
        prod.wrapping_sub(self.consumer_pos().load(Ordering::Relaxed))
    }

    /// Calls `each` with the data of every submitted record now in the ring, in order, then frees their
    /// space. A record still being written ends the read: it and those after it stay for the next one.
    /// `each` returns `false` to stop early.
    pub fn drain(&mut self, mut each: impl FnMut(&[u8]) -> bool) {
        // Acquire pairs with the kernel's release of the producer position after reserving.
        let prod = self.producer_pos().load(Ordering::Acquire);
        let mut cons = self.consumer_pos().load(Ordering::Relaxed);
        let mask = (self.size - 1) as u64;
        let page = sys::page_size();
        while cons < prod {
            let at = page + (cons & mask) as usize;
            // SAFETY: `at` is 8-byte aligned (positions advance by multiples of 8) and inside the first
            // copy of the data area; the kernel writes the length word concurrently, hence the atomic view.
            let word = unsafe { &*(self.produced.as_ptr().add(at) as *const AtomicU32) };
            // Acquire pairs with the kernel's release store of the length word at submit.
            let len_word = word.load(Ordering::Acquire);
            if len_word & BUSY != 0 {
                break;
            }
            let len = (len_word & !(BUSY | DISCARD)) as usize;
            let total = record_space(len) as u64;
            if total > prod - cons || len > self.size {
                // A header that lies would make us loop or read past the mapping: drop what is pending.
                cons = prod;
                break;
            }
            let keep_going = if len_word & DISCARD == 0 {
                // SAFETY: the record's data lies within the mapping (the data area is mapped twice, and
                // len <= size), and the kernel will not reuse its space until the consumer position passes
                // it.
                let data = unsafe {
                    std::slice::from_raw_parts(self.produced.as_ptr().add(at + HEADER), len)
                };
                each(data)
            } else {
                true
            };
            cons += total;
            if !keep_going {
                break;
            }
        }
        // Release: our reads of the records happen before the kernel may reuse their space.
        self.consumer_pos().store(cons, Ordering::Release);
    }
}

/// A ring buffer over a plain file, written the way the kernel writes one (data twice, header, then the
/// producer position), so what reads these rings is tested without a kernel.
#[cfg(test)]
pub mod testing {
    use std::fs::File;
    use std::io;
    use std::os::fd::OwnedFd;
    use std::os::unix::fs::FileExt;
    use std::os::unix::net::UnixStream;

    use super::{record_space, BpfRing, BUSY, DISCARD};
    use crate::perf::ring::testing::unlinked_file;
    use crate::perf::sys;

    /// The writing side of a [`BpfRing`] over a file.
    pub struct FileBpfRing {
        file: File,
        head: u64,
        size: u64,
    }

    impl FileBpfRing {
        /// A ring of `pages` data pages (a power of two), and its reader.
        pub fn new(pages: usize) -> io::Result<(FileBpfRing, BpfRing)> {
            let page = sys::page_size();
            let size = pages * page;
            let file = unlinked_file((2 * page + 2 * size) as u64)?;
            let ring = BpfRing::map(OwnedFd::from(file.try_clone()?), size)?;
            // epoll refuses a plain file: the reader's descriptor is a socket (the tests drain unasked).
            let (socket, _) = UnixStream::pair()?;
            let ring = BpfRing {
                fd: OwnedFd::from(socket),
                ..ring
            };
            let writer = FileBpfRing {
                file,
                head: 0,
                size: size as u64,
            };
            Ok((writer, ring))
        }

        fn put(&self, pos: u64, bytes: &[u8]) -> io::Result<()> {
            let page = sys::page_size() as u64;
            let at = 2 * page + pos % self.size;
            self.file.write_all_at(bytes, at)?;
            // The second copy of the data area, as the kernel's double mapping shows it.
            self.file.write_all_at(bytes, at + self.size)
        }

        /// Reserves a record of `data` (busy until [`FileBpfRing::submit`]); returns its position.
        pub fn reserve(&mut self, data: &[u8]) -> io::Result<u64> {
            let pos = self.head;
            let mut rec = ((data.len() as u32) | BUSY).to_ne_bytes().to_vec();
            rec.extend_from_slice(&[0; 4]);
            rec.extend_from_slice(data);
            rec.resize(record_space(data.len()), 0);
            self.put(pos, &rec)?;
            self.head += rec.len() as u64;
            self.file
                .write_all_at(&self.head.to_ne_bytes(), sys::page_size() as u64)?;
            Ok(pos)
        }

        /// Submits (or discards) the record reserved at `pos` with `len` bytes of data.
        pub fn submit(&mut self, pos: u64, len: usize, discard: bool) -> io::Result<()> {
            let word = len as u32 | if discard { DISCARD } else { 0 };
            self.put(pos, &word.to_ne_bytes())
        }

        /// Writes and submits one record.
        pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
            let pos = self.reserve(data)?;
            self.submit(pos, data.len(), false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::FileBpfRing;
    use super::*;

    fn drained(ring: &mut BpfRing) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        ring.drain(|d| {
            got.push(d.to_vec());
            true
        });
        got
    }

    #[test]
    fn records_come_out_in_order_and_free_their_space() {
        let (mut w, mut r) = FileBpfRing::new(1).unwrap();
        w.write(b"first").unwrap();
        w.write(&[7u8; 16]).unwrap();
        assert_eq!(r.pending(), 16 + 24);
        assert_eq!(drained(&mut r), [b"first".to_vec(), vec![7u8; 16]]);
        assert_eq!(r.pending(), 0);
        assert!(drained(&mut r).is_empty());
    }

    /// Records wrap around the end of the data area and still read as one slice (the second copy).
    #[test]
    fn a_record_across_the_end_reads_whole() {
        let page = sys::page_size();
        let (mut w, mut r) = FileBpfRing::new(1).unwrap();
        let big = vec![1u8; page - 64];
        w.write(&big).unwrap();
        assert_eq!(drained(&mut r), [big]);
        let across: Vec<u8> = (0..200u8).collect();
        w.write(&across).unwrap();
        assert_eq!(drained(&mut r), [across]);
    }

    /// A record still being written stops the read there, with everything after it; a discarded one is
    /// skipped.
    #[test]
    fn a_busy_record_waits_and_a_discarded_one_is_skipped() {
        let (mut w, mut r) = FileBpfRing::new(1).unwrap();
        w.write(b"a").unwrap();
        let busy = w.reserve(b"bb").unwrap();
        w.write(b"ccc").unwrap();
        assert_eq!(drained(&mut r), [b"a".to_vec()]);
        w.submit(busy, 2, true).unwrap();
        assert_eq!(drained(&mut r), [b"ccc".to_vec()]);
    }

    /// A length that cannot be drops what is pending instead of reading past the mapping.
    #[test]
    fn a_lying_header_drops_the_rest() {
        let (mut w, mut r) = FileBpfRing::new(1).unwrap();
        let pos = w.reserve(b"xxxxxxxx").unwrap();
        w.submit(pos, 1 << 20, false).unwrap();
        assert!(drained(&mut r).is_empty());
        assert_eq!(r.pending(), 0);
    }
}
