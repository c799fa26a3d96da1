//! Which hits' text reached the stream's destination. A printer writes into a buffer, and the buffer goes
//! out in slices (`cli::gives_way`); when the destination fails (its reader closed it, or read nothing when
//! the run was to stop) what the buffer still held never goes out. The stream counts a hit as printed
//! when it hands it to the printer, so without these books the hits whose lines sat in that buffer were
//! counted as printed, in no "not printed" count, and in no stream either.
//!
//! A hit is sent when every byte of its text went out. Its text ends with the first whole write
//! (`write_all`) or flush the printer makes after taking it: the line and its chain for the text and JSON
//! printers, the batch holding its record for OTLP's. [`Ledger::taking`] wraps what the printer writes into (counting what it took),
//! [`Ledger::sending`] what the buffer writes into (counting what the destination took); [`Sent`] wraps
//! the printer and notes each hit it takes. Only hits whose text has not all gone out are kept, so the
//! books hold at most a buffer's worth of hits.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{self, Write};
use std::rc::Rc;

use crate::report::{Header, Hit, Output, StreamEvent, Summary};

/// The books of one stream: shared by its printer's [`Sent`] and its two writers.
#[derive(Clone, Default)]
pub struct Ledger(Rc<RefCell<Books>>);

#[derive(Default)]
struct Books {
    /// Bytes the printer wrote.
    taken: u64,
    /// Bytes the destination took.
    sent: u64,
    /// CPUs of hits taken whose text the printer has not written yet.
    unwritten: Vec<u32>,
    /// Hits written but not yet sent: where each one's text ends in the stream, and its CPU.
    unsent: VecDeque<(u64, u32)>,
}

impl Books {
    fn forget_sent(&mut self) {
        while self
            .unsent
            .front()
            .is_some_and(|&(end, _)| end <= self.sent)
        {
            self.unsent.pop_front();
        }
    }
}

impl Ledger {
    /// `w`, as the printer's writer: what it takes is counted, and ends the text of the hits taken before.
    pub fn taking<W: Write>(&self, w: W) -> Taking<W> {
        Taking {
            inner: w,
            books: self.clone(),
        }
    }

    /// `w`, as the writer to the destination: what it takes is counted as sent.
    pub fn sending<W: Write>(&self, w: W) -> Sending<W> {
        Sending {
            inner: w,
            books: self.clone(),
        }
    }

    /// A hit on `cpu` is handed to the printer.
    fn took(&self, cpu: u32) {
        self.0.borrow_mut().unwritten.push(cpu);
    }

    /// The hits taken whose text did not all go out, by CPU.
    pub fn unsent(&self) -> BTreeMap<u32, u64> {
        let books = self.0.borrow();
        let mut by_cpu = BTreeMap::new();
        let cpus = books.unwritten.iter().copied();
        for cpu in cpus.chain(books.unsent.iter().map(|&(_, cpu)| cpu)) {
            *by_cpu.entry(cpu).or_default() += 1;
        }
        by_cpu
    }
}

/// The printer's writer (see [`Ledger::taking`]).
pub struct Taking<W> {
    inner: W,
    books: Ledger,
}

impl<W: Write> Taking<W> {
    /// Every hit taken so far has its text written: it ends where the printer's writes end now.
    fn written(&self) {
        let books = &mut *self.books.0.borrow_mut();
        let end = books.taken;
        // Drained in place: the list keeps its room, so a hit allocates nothing here.
        books
            .unsent
            .extend(books.unwritten.drain(..).map(|cpu| (end, cpu)));
        books.forget_sent();
    }
}

impl<W: Write> Write for Taking<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.books.0.borrow_mut().taken += n as u64;
        Ok(n)
    }

    /// A printer writes a hit's text (a line and its chain, or a batch of records) with one `write_all`:
    /// the hits taken before it end with it, however many writes it took.
    fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.written();
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.written();
        self.inner.flush()
    }
}

/// The writer to the destination (see [`Ledger::sending`]).
pub struct Sending<W> {
    inner: W,
    books: Ledger,
}

impl<W: Write> Write for Sending<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        let mut books = self.books.0.borrow_mut();
        books.sent += n as u64;
        books.forget_sent();
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The stream's printer `O`, noting each hit it takes in the [`Ledger`] its writers count for
/// ([`Output::unsent`]).
pub struct Sent<O: Output> {
    inner: O,
    ledger: Ledger,
}

impl<O: Output> Sent<O> {
    pub fn new(inner: O, ledger: Ledger) -> Sent<O> {
        Sent { inner, ledger }
    }
}

impl<O: Output> Output for Sent<O> {
    fn header(&mut self, header: &Header<'_>) -> io::Result<()> {
        self.inner.header(header)
    }
    fn armed(&mut self, events: usize, cpus: &BTreeSet<u32>, time_ns: u64) -> io::Result<()> {
        self.inner.armed(events, cpus, time_ns)
    }
    fn hit(&mut self, hit: &Hit<'_>) -> io::Result<()> {
        self.ledger.took(hit.sample.cpu);
        self.inner.hit(hit)
    }
    fn event(&mut self, event: &StreamEvent, time_ns: u64) -> io::Result<()> {
        self.inner.event(event, time_ns)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
    fn finish(&mut self, summary: &Summary) -> io::Result<()> {
        self.inner.finish(summary)
    }
    fn refused(&mut self, kind: &str, reason: &str, code: i32) -> io::Result<()> {
        self.inner.refused(kind, reason, code)
    }
    fn recount(&mut self) {
        self.inner.recount()
    }
    fn counted(&mut self, hit: &Hit<'_>, count: u64) {
        self.inner.counted(hit, count)
    }
    fn unsent(&self) -> BTreeMap<u32, u64> {
        self.ledger.unsent()
    }
}

#[cfg(test)]
mod tests {
    use std::io::BufWriter;

    use super::*;
    use crate::report::testutil::Room;

    /// A ledger and the printer's writer through a `buffer`-byte buffer (none: straight) into a
    /// destination that takes `room` bytes, 7 at a time.
    fn stream(room: usize, buffer: Option<usize>) -> (Ledger, Box<dyn Write>) {
        let ledger = Ledger::default();
        let dest = ledger.sending(Room { room, slice: 7 });
        let w: Box<dyn Write> = match buffer {
            Some(n) => Box::new(ledger.taking(BufWriter::with_capacity(n, dest))),
            None => Box::new(ledger.taking(dest)),
        };
        (ledger, w)
    }

    /// Lines of 10 bytes through a 32-byte buffer into a destination that takes 45 bytes (in slices of
    /// 7): four whole lines and half of the fifth went out; the fifth and every later one are unsent, by
    /// their CPUs, whichever write or flush failed.
    #[test]
    fn a_hit_is_sent_when_its_whole_line_went_out() {
        let (ledger, mut w) = stream(45, Some(32));
        let mut failed = false;
        for i in 0..8u32 {
            ledger.took(i % 2);
            failed |= w.write_all(format!("hit {i:04}.\n").as_bytes()).is_err();
        }
        failed |= w.flush().is_err();
        assert!(failed);
        assert_eq!(ledger.unsent(), BTreeMap::from([(0, 2), (1, 2)]));
    }

    /// A destination that takes everything leaves nothing unsent once flushed; before the flush the
    /// buffered lines are unsent.
    #[test]
    fn a_flushed_stream_has_nothing_unsent() {
        let (ledger, mut w) = stream(usize::MAX, Some(64));
        for i in 0..3u32 {
            ledger.took(5);
            w.write_all(format!("hit {i}\n").as_bytes()).unwrap();
        }
        assert_eq!(ledger.unsent(), BTreeMap::from([(5, 3)]));
        w.flush().unwrap();
        assert!(ledger.unsent().is_empty());
    }

    /// A printer that batches (OTLP): the hits taken before a write end with it (however many slices it
    /// went out in), and those taken after the last write are unsent until a write carries them.
    #[test]
    fn a_batched_hit_ends_with_the_write_that_carries_it() {
        let (ledger, mut w) = stream(20, None);
        ledger.took(0);
        ledger.took(1);
        w.write_all(b"batch of two\n").unwrap();
        assert!(ledger.unsent().is_empty());
        ledger.took(1);
        assert_eq!(ledger.unsent(), BTreeMap::from([(1, 1)]));
        assert!(w.write_all(b"batch of one\n").is_err());
        assert_eq!(ledger.unsent(), BTreeMap::from([(1, 1)]));
    }
}
