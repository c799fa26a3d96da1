//! The drain → order pipeline: the armed events' rings ([`EventSet`]) and the [`Sorter`] that merges what
//! they give into one stream in timestamp order, as one type. A drain reads every ring empty and decodes
//! each record into an [`Item`]; [`Pipeline::next`] releases the held items oldest first, those every ring
//! has been read past ([`Release::Ready`]), those up to a time ([`Release::Until`], a `--last` trigger),
//! or all of them ([`Release::All`], once nothing older can arrive). Closing a CPU's or a watch's events
//! reads their rings empty first and keeps what they gave in order with everything else; opening a CPU's
//! adds its rings to the merge from the moment they are read.

use std::io;

use crate::perf::event::OpenError;
use crate::perf::record::Frame;
use crate::perf::sys::Epoll;
use crate::trace::events::{Audit, EventSet, Item, RingKey, Sorter};

/// Which held items [`Pipeline::next`] gives out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Those every ring still read has been read past (less the slack): nothing older can still come.
    Ready,
    /// Those from this time or before, ready or not (a `--dump-on` tracepoint fired then).
    Until(u64),
    /// All of them, in order (the events are disabled or closed: nothing older can still come).
    All,
}

/// The rings and the merge of their records.
pub struct Pipeline {
    events: EventSet,
    sorter: Sorter,
}

impl Pipeline {
    /// The merge of the rings of the events `events` makes ([`EventSet::new`]: it registers their rings
    /// with the sorter it is given). `slack_ns`: how long after its timestamp a record may still become
    /// visible in its ring.
    pub fn new(
        slack_ns: u64,
        events: impl FnOnce(&mut Sorter) -> io::Result<EventSet>,
    ) -> io::Result<Pipeline> {
        let mut sorter = Sorter::new(slack_ns);
        let events = events(&mut sorter)?;
        Ok(Pipeline { events, sorter })
    }

    /// The armed events, for what does not touch the rings (watches, coverage).
    pub fn events(&self) -> &EventSet {
        &self.events
    }

    /// The armed events, for what changes them in place (enable, pause, retarget).
    pub fn events_mut(&mut self) -> &mut EventSet {
        &mut self.events
    }

    /// Reads every ring empty into the merge.
    pub fn drain(&mut self) {
        self.events.drain(&mut self.sorter);
    }

    /// [`Pipeline::drain`], and the losses the hit programs counted that no record carried yet, so that
    /// everything before now is in the merge ([`EventSet::lost_now`]).
    pub fn drain_to_now(&mut self) {
        self.events.drain(&mut self.sorter);
        self.events.lost_now(&mut self.sorter);
    }

    /// A ring outside the merge (`--on`'s object records) was read empty, and what it held carried out, by
    /// a read that started at `started`: from its first call, no item is ready before the last such read.
    /// A free must be carried out before the hits after it are released, or they count as its object's.
    pub fn read_elsewhere(&mut self, started: u64) {
        self.sorter.read_empty(RingKey::ELSEWHERE, started);
    }

    /// The oldest held item that `which` lets out, and its time.
    pub fn next(&mut self, which: Release) -> Option<(u64, Item)> {
        match which {
            Release::Ready => self.sorter.pop_ready(),
            Release::Until(time) => self.sorter.pop_until(time),
            Release::All => self.sorter.pop_any(),
        }
    }

    /// When the oldest held item will be ready if every ring is read again then; `None` when nothing is
    /// held.
    pub fn due(&self) -> Option<u64> {
        self.sorter.due()
    }

    /// Takes back a handled sample's call-chain vector for the next decoded sample.
    pub fn recycle(&mut self, frames: Vec<Frame>) {
        self.events.recycle(frames);
    }

    /// Reads target `index`'s rings empty and closes its events for good (see
    /// [`EventSet::close_watch`]); what they gave stays in the merge, and they hold nothing back any more.
    pub fn close_watch(&mut self, index: usize, epoll: &Epoll) -> Vec<Audit> {
        self.events.close_watch(index, epoll, &mut self.sorter)
    }

    /// Reads `cpu`'s rings empty and closes its events (its CPU went offline); what they gave stays in the
    /// merge, and they hold nothing back any more. `None` when the CPU was not armed.
    pub fn close_cpu(&mut self, cpu: u32, epoll: &Epoll) -> Option<Vec<Audit>> {
        self.events.close_cpu(cpu, epoll, &mut self.sorter)
    }

    /// Opens and enables `cpu`'s events (all or none), registered with `epoll` under `token`; their rings
    /// join the merge from now on.
    pub fn open_cpu(&mut self, cpu: u32, epoll: &Epoll, token: u64) -> Result<(), OpenError> {
        self.events.open_cpu(cpu, epoll, token, &mut self.sorter)
    }

    /// Audits every event still open and closes them all; what their rings gave stays held.
    pub fn close_all(&mut self) -> Vec<Audit> {
        self.events.close_all()
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;

    use super::*;
    use crate::model::scope::Scope;
    use crate::model::watch::{Access, Watch};
    use crate::perf::bpf_ring::testing::FileBpfRing;
    use crate::perf::event::{CpuEvent, EventConfig};
    use crate::perf::hit_record::{self, HitRecord};
    use crate::perf::record::{encode, Task};
    use crate::perf::ring::testing::FileRing;
    use crate::perf::sys;
    use crate::report::testutil::watch;

    const TOKEN: u64 = 1;

    fn cfg() -> EventConfig {
        EventConfig::bare(1)
    }

    fn watches() -> Vec<Watch> {
        vec![
            watch("a", 0x7ffd0000, Access::Write),
            watch("b", 0x7ffe0000, Access::Write),
        ]
    }

    /// A stand-in for an event's descriptor: epoll takes it, and its counters read as unknown.
    fn fd() -> OwnedFd {
        let (fd, _) = UnixStream::pair().unwrap();
        fd.set_nonblocking(true).unwrap();
        OwnedFd::from(fd)
    }

    /// An event of target `watch` on `cpu` over a file-backed ring, and the ring's writing side.
    fn event(cpu: u32, watch: usize) -> (CpuEvent, FileRing) {
        let (writer, ring) = FileRing::new(4).unwrap();
        (CpuEvent::over(cpu, watch, ring, fd()), writer)
    }

    /// A sample of target `watch`'s address written on `cpu` at `time` by task `tid`.
    fn hit(tid: u32, time: u64, cpu: u32, watch: usize) -> Vec<u8> {
        let addr = watches()[watch].addr;
        encode::sample(0xffffffff81000077, tid, tid, time, addr, cpu, &[])
    }

    /// A comm record of task `tid` named `name`, at `time`.
    fn comm(tid: u32, name: &str, time: u64) -> Vec<u8> {
        encode::with_trailer(encode::comm(tid, tid, name, false), tid, tid, time, 0)
    }

    /// What `which` releases now: (time, what) with what a hit's tid, or `lost N` / `unprinted N` /
    /// `comm NAME`.
    fn released(p: &mut Pipeline, which: Release) -> Vec<(u64, String)> {
        std::iter::from_fn(|| p.next(which))
            .map(|(t, item)| {
                let what = match item {
                    Item::Sample { sample, watch, .. } => format!("{}@{watch}", sample.tid),
                    Item::Lost { cpu, count } => format!("lost {count} on {cpu}"),
                    Item::Unprinted { cpu, count } => format!("unprinted {count} on {cpu}"),
                    Item::Task(Task::Comm { comm, .. }) => format!("comm {comm}"),
                    other => format!("{other:?}"),
                };
                (t, what)
            })
            .collect()
    }

    /// A pipeline over `evs` (their rings read past the moment it is made: nothing older can come).
    fn pipeline(evs: Vec<CpuEvent>, epoll: &Epoll, slack_ns: u64) -> Pipeline {
        Pipeline::new(slack_ns, |sorter| {
            EventSet::new(&watches(), cfg(), Scope::System, evs, epoll, TOKEN, sorter)
        })
        .unwrap()
    }

    /// Target 0's event on CPU 0 alone, released as soon as read: the pipeline, its epoll, and the writing
    /// side of its ring.
    fn one_cpu() -> (Pipeline, Epoll, FileRing) {
        let epoll = Epoll::new().unwrap();
        let (e0, w0) = event(0, 0);
        let p = pipeline(vec![e0], &epoll, 0);
        (p, epoll, w0)
    }

    /// Target 0's events on CPUs 0 and 1 merged with `slack_ns`: the pipeline, its epoll, and the writing
    /// sides of CPU 0's and CPU 1's rings.
    fn two_cpus(slack_ns: u64) -> (Pipeline, Epoll, FileRing, FileRing) {
        let epoll = Epoll::new().unwrap();
        let (e0, w0) = event(0, 0);
        let (e1, w1) = event(1, 0);
        let p = pipeline(vec![e0, e1], &epoll, slack_ns);
        (p, epoll, w0, w1)
    }

    fn want(items: &[(u64, &str)]) -> Vec<(u64, String)> {
        items.iter().map(|&(t, w)| (t, w.into())).collect()
    }

    /// An hour: a slack no test outlasts, or a time no drain reaches.
    const HOUR: u64 = 3_600_000_000_000;

    /// Two CPUs' rings are read one after the other; their records come out merged by time, and a record
    /// newer than a drain is held until every ring has been read past it.
    #[test]
    fn records_of_all_rings_come_out_in_time_order() {
        let now = sys::monotonic_ns();
        let (mut p, _epoll, mut w0, mut w1) = two_cpus(0);
        let (t1, t2, t3, t4) = (now + 1000, now + 2000, now + 3000, now + 4000);
        w0.write(&hit(10, t1, 0, 0)).unwrap();
        w0.write(&hit(11, t3, 0, 0)).unwrap();
        w1.write(&hit(20, t2, 1, 0)).unwrap();
        w1.write(&hit(21, t4, 1, 0)).unwrap();
        // Not yet: no drain is ever read past it.
        w1.write(&hit(22, now + HOUR, 1, 0)).unwrap();
        std::thread::sleep(std::time::Duration::from_micros(10));
        p.drain();
        let ready = want(&[(t1, "10@0"), (t2, "20@0"), (t3, "11@0"), (t4, "21@0")]);
        assert_eq!(released(&mut p, Release::Ready), ready);
        assert_eq!(released(&mut p, Release::Ready), []);
        assert_eq!(p.due(), Some(now + HOUR));
        assert_eq!(
            released(&mut p, Release::All),
            want(&[(now + HOUR, "22@0")])
        );
        assert_eq!(p.due(), None);
    }

    /// A record that may not be visible in its ring yet (within the slack of the last read) holds the
    /// others' later ones back; `Until` lets out what is from a time or before, ready or not.
    #[test]
    fn the_slack_holds_records_back_and_until_lets_them_out() {
        let (mut p, _epoll, mut w0, _w1) = two_cpus(HOUR);
        let now = sys::monotonic_ns();
        w0.write(&hit(10, now + 1000, 0, 0)).unwrap();
        w0.write(&hit(11, now + 2000, 0, 0)).unwrap();
        p.drain();
        assert_eq!(
            released(&mut p, Release::Ready),
            [],
            "cpu 1's ring may still show older records"
        );
        assert_eq!(p.due(), Some(now + 1000 + HOUR));
        assert_eq!(
            released(&mut p, Release::Until(now + 1500)),
            want(&[(now + 1000, "10@0")])
        );
        assert_eq!(
            released(&mut p, Release::All),
            want(&[(now + 2000, "11@0")])
        );
    }

    /// A CPU that goes offline: its ring is read empty as it is closed, its records come out in order
    /// with the others', and it holds nothing back any more.
    #[test]
    fn closing_a_cpu_keeps_what_its_ring_held_in_order() {
        let (mut p, epoll, mut w0, mut w1) = two_cpus(HOUR);
        let now = sys::monotonic_ns();
        w0.write(&hit(10, now + 1000, 0, 0)).unwrap();
        w0.write(&hit(11, now + 3000, 0, 0)).unwrap();
        p.drain();
        // Written after the drain, before the CPU went: only the close reads it.
        w1.write(&hit(20, now + 2000, 1, 0)).unwrap();
        assert_eq!(released(&mut p, Release::Ready), []);
        let audits = p.close_cpu(1, &epoll).unwrap();
        assert_eq!(audits.len(), 1);
        assert_eq!((audits[0].cpu, audits[0].samples), (1, 1));
        assert_eq!(
            audits[0].kernel_hits, None,
            "no counters behind a test ring"
        );
        assert!(p.close_cpu(1, &epoll).is_none(), "closed already");
        assert_eq!(p.events().cpus(), [0].into());
        // Cpu 1 holds nothing back now: cpu 0's ring was read past 3000.
        assert_eq!(
            released(&mut p, Release::Ready),
            want(&[(now + 1000, "10@0"), (now + 2000, "20@0")])
        );
        assert_eq!(
            released(&mut p, Release::All),
            want(&[(now + 3000, "11@0")])
        );
    }

    /// A watch closed for good (its module unloaded): every CPU's ring of it is read empty, the other
    /// watch's rings stay, and the merge keeps one time order.
    #[test]
    fn closing_a_watch_keeps_what_its_rings_held_in_order() {
        let epoll = Epoll::new().unwrap();
        let (a0, mut wa0) = event(0, 0);
        let (b0, mut wb0) = event(0, 1);
        let (b1, mut wb1) = event(1, 1);
        let mut p = pipeline(vec![a0, b0, b1], &epoll, HOUR);
        let now = sys::monotonic_ns();
        wb0.write(&hit(20, now + 1000, 0, 1)).unwrap();
        wa0.write(&hit(10, now + 2000, 0, 0)).unwrap();
        wb1.write(&hit(21, now + 3000, 1, 1)).unwrap();
        let audits = p.close_watch(1, &epoll);
        let closed: Vec<(u32, usize)> = audits.iter().map(|a| (a.cpu, a.watch)).collect();
        assert_eq!(closed, [(0, 1), (1, 1)]);
        assert!(!p.events().watch_armed(1));
        assert!(p.events().watch_armed(0));
        assert_eq!(
            released(&mut p, Release::Ready),
            [],
            "target 0's ring is not read yet"
        );
        p.drain();
        assert_eq!(
            released(&mut p, Release::Ready),
            want(&[(now + 1000, "20@1")]),
            "target 0's ring was read past 2000 (its record), not past 3000"
        );
        assert_eq!(
            released(&mut p, Release::All),
            want(&[(now + 2000, "10@0"), (now + 3000, "21@1")])
        );
    }

    /// A CPU that comes online joins the merge: what its ring gives is merged with the rest.
    #[test]
    fn an_opened_cpu_joins_the_merge() {
        let (mut p, epoll, mut w0) = one_cpu();
        let (e1, mut w1) = event(1, 0);
        // What `open_cpu` does once the kernel opened the events.
        p.events
            .adopt_cpu(1, vec![e1], &epoll, TOKEN, &mut p.sorter)
            .unwrap();
        assert_eq!(p.events().cpus(), [0, 1].into());
        let now = sys::monotonic_ns();
        w1.write(&hit(20, now + 1000, 1, 0)).unwrap();
        w0.write(&hit(10, now + 2000, 0, 0)).unwrap();
        p.drain();
        assert_eq!(
            released(&mut p, Release::All),
            want(&[(now + 1000, "20@0"), (now + 2000, "10@0")])
        );
    }

    /// On the hit path a CPU's records come from two rings, each in order by itself: the hit program's ring
    /// buffer and the breakpoint's perf ring. They come out merged, and the hits not printed that the hit
    /// records carry (a running count) are items just before the record that told of them.
    #[test]
    fn hit_records_merge_with_the_perf_ring_and_carry_their_losses() {
        let epoll = Epoll::new().unwrap();
        let (w_hits, hits) = FileBpfRing::new(1).unwrap();
        let (e0, mut w0) = event(0, 0);
        let mut w_hits = w_hits;
        let mut p = pipeline(vec![e0.with_hits(hits)], &epoll, 0);
        let now = sys::monotonic_ns();
        let hit = |tid: u32, time: u64, lost: u32| {
            hit_record::encode(&HitRecord {
                flags: hit_record::USER_MODE,
                pid: tid,
                tid,
                time,
                addr: watches()[0].addr,
                value: None,
                old: None,
                cgroup: None,
                comm: Some(format!("t{tid}")),
                ip: Some(0x401136),
                lost,
                regs: None,
                insn: None,
                chain: None,
                kernel_stack: vec![],
                user_stack: vec![0x401136],
            })
        };
        w_hits.write(&hit(10, now + 1000, 0)).unwrap();
        w_hits.write(&hit(10, now + 3000, 2)).unwrap();
        w_hits.write(&hit(10, now + 4000, 2)).unwrap();
        w0.write(&comm(11, "other", now + 2000)).unwrap();
        std::thread::sleep(std::time::Duration::from_micros(10));
        p.drain();
        let all = want(&[
            (now + 1000, "comm t10"),
            (now + 1000, "10@0"),
            (now + 2000, "comm other"),
            (now + 3000, "unprinted 2 on 0"),
            (now + 3000, "10@0"),
            (now + 4000, "10@0"),
        ]);
        assert_eq!(released(&mut p, Release::Ready), all);
        let audits = p.close_all();
        assert_eq!((audits[0].samples, audits[0].lost_records), (3, 2));
    }

    /// Losses are items in the stream at their place in time, counted in the ring's audit; a record that
    /// cannot be decoded is a loss of one, never silent.
    #[test]
    fn losses_and_undecodable_records_are_counted_and_released() {
        let (mut p, _epoll, mut w0) = one_cpu();
        let now = sys::monotonic_ns();
        w0.write(&hit(10, now + 1000, 0, 0)).unwrap();
        let lost = encode::with_trailer(encode::lost(1, 5), 0, 0, now + 2000, 0);
        w0.write(&lost).unwrap();
        let mut truncated = hit(11, now + 3000, 0, 0);
        truncated.truncate(24);
        truncated[6..8].copy_from_slice(&24u16.to_ne_bytes());
        w0.write(&truncated).unwrap();
        w0.write(&comm(12, "writer", now + 4000)).unwrap();
        p.drain();
        let all = want(&[
            (now + 1000, "10@0"),
            (now + 2000, "lost 5 on 0"),
            // Dated by the newest time read before it.
            (now + 2000, "lost 1 on 0"),
            (now + 4000, "comm writer"),
        ]);
        assert_eq!(released(&mut p, Release::All), all);
        let audits = p.close_all();
        assert_eq!(audits.len(), 1);
        let a = audits[0];
        assert_eq!((a.samples, a.lost_records, a.undecodable), (1, 5, 1));
    }
}
