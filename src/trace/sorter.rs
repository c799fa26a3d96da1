//! Merging records from many rings into one stream in timestamp order, the way ftrace merges its per-CPU
//! buffers and perf's ordered events do.
//!
//! Each ring is in time order by itself, but the rings are read one after another: a record that lands in
//! ring B just after B was read belongs before a later one already read from ring A. So a record is only
//! released once every other ring has been *read past its time*: either a later record came out of that ring,
//! or that ring was read empty at a moment after the record's time (less [`Sorter::new`]'s `slack`, the time
//! a record may take from its timestamp to being visible in the ring). A ring that is never read again
//! (its CPU went away) stops holding others back once it is removed. At the end, [`Sorter::pop_any`] empties
//! everything in order.

use std::collections::VecDeque;

struct Queue<T> {
    /// Records read from the ring and not yet released, oldest first (a ring is in time order by itself).
    held: VecDeque<(u64, T)>,
    /// Every record the ring holds with a time below this has been read.
    read_past: u64,
    /// The ring is still read; a removed ring's held records still come out, but it holds nothing back.
    live: bool,
}

/// A k-way merge of the rings' queues, each ring named by a `K`: each release takes the oldest front among them, so a record is
/// moved once in and once out (a heap over all held records cost a tenth of the tracer's CPU at 140k
/// hits/s).
pub struct Sorter<T, K> {
    /// By key. A vector, not a map: there are a few rings (CPUs times targets), every push finds its
    /// ring and every release walks them all, and rings come and go only with hotplug.
    rings: Vec<(K, Queue<T>)>,
    slack: u64,
}

impl<T, K: Ord + Copy> Sorter<T, K> {
    /// `slack_ns`: how long after its timestamp a record may still become visible in its ring.
    pub fn new(slack_ns: u64) -> Sorter<T, K> {
        Sorter {
            rings: Vec::new(),
            slack: slack_ns,
        }
    }

    fn position(&self, ring: K) -> Result<usize, usize> {
        self.rings.binary_search_by_key(&ring, |(k, _)| *k)
    }

    fn queue(&mut self, ring: K, read_past: u64) -> &mut Queue<T> {
        let i = match self.position(ring) {
            Ok(i) => i,
            Err(i) => {
                let q = Queue {
                    held: VecDeque::new(),
                    read_past,
                    live: true,
                };
                self.rings.insert(i, (ring, q));
                i
            }
        };
        let q = &mut self.rings[i].1;
        q.live = true;
        q
    }

    /// A ring starts being read at `now`: nothing in it is older.
    pub fn add_ring(&mut self, ring: K, now: u64) {
        self.queue(ring, now);
    }

    /// The ring will not be read again (its events are closed); it no longer holds others back.
    pub fn remove_ring(&mut self, ring: K) {
        if let Ok(i) = self.position(ring) {
            let q = &mut self.rings[i].1;
            q.live = false;
            if q.held.is_empty() {
                self.rings.remove(i);
            }
        }
    }

    /// A record read from `ring`, which is in time order by itself.
    pub fn push(&mut self, ring: K, time: u64, item: T) {
        let q = self.queue(ring, 0);
        q.read_past = q.read_past.max(time);
        q.held.push_back((time, item));
    }

    /// `ring` was read empty by a read that started at `started`.
    pub fn read_empty(&mut self, ring: K, started: u64) {
        let t = started.saturating_sub(self.slack);
        let q = self.queue(ring, 0);
        q.read_past = q.read_past.max(t);
    }

    /// Below this time, every ring still read has been read.
    fn watermark(&self) -> u64 {
        self.rings
            .iter()
            .filter(|(_, q)| q.live)
            .map(|(_, q)| q.read_past)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The ring whose oldest held record is the oldest of all; ties go to the ring first in key order.
    fn oldest(&self) -> Option<(usize, u64)> {
        self.rings
            .iter()
            .enumerate()
            .filter_map(|(i, (_, q))| q.held.front().map(|(t, _)| (i, *t)))
            .min_by_key(|&(_, t)| t)
    }

    /// The oldest record of the ring at `i`.
    fn take(&mut self, i: usize) -> Option<(u64, T)> {
        let q = &mut self.rings.get_mut(i)?.1;
        let out = q.held.pop_front();
        if !q.live && q.held.is_empty() {
            self.rings.remove(i);
        }
        out
    }

    /// The oldest held record, if every ring has been read past its time.
    pub fn pop_ready(&mut self) -> Option<(u64, T)> {
        let (i, time) = self.oldest()?;
        if time < self.watermark() {
            return self.take(i);
        }
        None
    }

    /// When the oldest held record can be released: once every ring is read again this long after it
    /// (its time plus the slack); `None` when nothing is held.
    pub fn due(&self) -> Option<u64> {
        self.oldest().map(|(_, t)| t.saturating_add(self.slack))
    }

    /// The oldest held record if it is from `time` or before, ready or not (a `--dump-on` tracepoint that
    /// fired at `time`: what came before it is printed with it).
    pub fn pop_until(&mut self, time: u64) -> Option<(u64, T)> {
        let (i, t) = self.oldest()?;
        if t <= time {
            return self.take(i);
        }
        None
    }

    /// The oldest held record, ready or not (the session is ending).
    pub fn pop_any(&mut self) -> Option<(u64, T)> {
        let (i, _) = self.oldest()?;
        self.take(i)
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.rings.iter().all(|(_, q)| q.held.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(s: &mut Sorter<&'static str, (u32, usize)>) -> Vec<(u64, &'static str)> {
        std::iter::from_fn(|| s.pop_ready()).collect()
    }

    /// Ring B's record at t=15 is only read in the second pass, after ring A's t=20 was read in the first:
    /// it must still come out first.
    #[test]
    fn two_rings_read_out_of_order_come_out_in_time_order() {
        let (a, b) = ((0, 0), (1, 0));
        let mut s = Sorter::new(0);
        s.add_ring(a, 0);
        s.add_ring(b, 0);
        // Pass 1 starts at 12: B is empty, then A has 10 and 20.
        s.read_empty(b, 12);
        s.push(a, 10, "a10");
        s.push(a, 20, "a20");
        s.read_empty(a, 12);
        assert_eq!(
            ready(&mut s),
            vec![(10, "a10")],
            "a20 waits: B was read at 12"
        );
        // Pass 2 starts at 30: B has 15 and 25, A is empty.
        s.push(b, 15, "b15");
        s.push(b, 25, "b25");
        s.read_empty(b, 30);
        s.read_empty(a, 30);
        assert_eq!(
            ready(&mut s),
            vec![(15, "b15"), (20, "a20"), (25, "b25")],
            "merged across passes"
        );
        assert!(s.is_empty());
    }

    #[test]
    fn slack_holds_records_a_ring_may_not_show_yet() {
        let (a, b) = ((0, 0), (1, 0));
        let mut s = Sorter::new(5);
        s.push(a, 98, "a98");
        s.read_empty(a, 100);
        s.read_empty(b, 100);
        assert!(
            ready(&mut s).is_empty(),
            "98 is within the slack of a read at 100"
        );
        s.read_empty(a, 104);
        s.read_empty(b, 104);
        assert_eq!(ready(&mut s), vec![(98, "a98")]);
    }

    #[test]
    fn a_removed_ring_holds_nothing_back_and_the_end_flushes_all() {
        let (a, b) = ((0, 0), (1, 0));
        let mut s = Sorter::new(0);
        s.add_ring(b, 0);
        s.push(a, 40, "a40");
        s.push(a, 50, "a50");
        s.read_empty(a, 60);
        assert!(ready(&mut s).is_empty(), "b was never read past 0");
        s.remove_ring(b);
        assert_eq!(ready(&mut s), vec![(40, "a40"), (50, "a50")]);
        // A ring removed with records still held gives them up, in order, and holds nothing back.
        s.push(b, 65, "b65");
        s.remove_ring(b);
        s.push(a, 70, "a70");
        s.push(a, 70, "a70-second");
        assert_eq!(s.pop_any(), Some((65, "b65")));
        assert_eq!(s.pop_any(), Some((70, "a70")));
        assert_eq!(
            s.pop_any(),
            Some((70, "a70-second")),
            "ties keep read order"
        );
        assert_eq!(s.pop_any(), None);
    }
}
