//! The perf-sample path's decoder: a breakpoint's perf ring, as the kernel writes it (samples of the
//! breakpoint, LOST records, and the task records one event per CPU asks for). The hit path reads its
//! breakpoint's perf ring with it too (task records only there: the hit program emits the hits).
//!
//! A process watch's ring (one event per thread, writing into one ring per CPU) gets two things more:
//! the second report of one store is dropped ([`Stores`]), and each hit's value is what the writer's
//! process holds as the hit leaves the ring (read through [`Out::read_value`]). Such a ring is only had
//! where the hit program is not: without BPF, or on a per-thread watch reading no value where the
//! program cannot tell which event fired (`config::plan::decide`). Where it is, the program reads the
//! value at the trap and drops the second report itself.
//!
//! On the hit path a breakpoint writes no sample of its own (its program emits the hits), so a sample in
//! its ring is an inherited copy's without the program: [`SampleDecoder::of_copies`] counts and drops it.

use crate::perf::record::{self, Record, Sample};
use crate::report::Value;
use crate::trace::events::decode::{Out, Tally};
use crate::trace::events::Item;

/// One perf ring's decoder.
pub struct SampleDecoder {
    cpu: u32,
    watch: usize,
    /// The layout the ring's events were opened with.
    sample_type: u64,
    /// A process watch's ring: the store the last sample reported (see [`Stores`]).
    stores: Option<Stores>,
    /// The hit path: every sample is a copy's second report ([`SampleDecoder::of_copies`]).
    copies: bool,
    tally: Tally,
}

impl SampleDecoder {
    /// The decoder of the perf ring of `watch` on `cpu`, whose events write `sample_type`; `process`: one
    /// event per thread (a process watch off the hit path: without BPF, as the module says). Set up at
    /// `now`.
    pub fn new(cpu: u32, watch: usize, sample_type: u64, process: bool, now: u64) -> SampleDecoder {
        SampleDecoder {
            cpu,
            watch,
            sample_type,
            stores: process.then(Stores::default),
            copies: false,
            tally: Tally::new(now),
        }
    }

    /// The decoder of a hit-path breakpoint's perf ring (task records only, for the hits come from the
    /// program), set up at `now`. A sample there can only come from a copy of a thread's event that the
    /// thread inherited while its creator's event was being armed, between the event's open and its
    /// program's attach (`PERF_EVENT_IOC_SET_BPF` reaches the event itself, not the copies it has, and a
    /// copy writes into its parent's ring). The arming reads the threads again until a reading finds
    /// none new, after every attach, and gives each thread it finds its own event with the program
    /// (`perf::arm`), whose program reports the same store: the sample is a second report, counted
    /// ([`Tally::copies`]) and neither printed nor counted as a hit. (A process that makes threads
    /// without pause through the arming's 100 readings leaves threads made after the last one by a
    /// thread not yet armed uncovered, copies or not.)
    pub fn of_copies(cpu: u32, watch: usize, sample_type: u64, now: u64) -> SampleDecoder {
        SampleDecoder {
            copies: true,
            ..SampleDecoder::new(cpu, watch, sample_type, false, now)
        }
    }

    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// One record read from the ring: a sample becomes a hit, anything else is handed on as it is.
    pub fn record(&mut self, bytes: &[u8], out: &mut impl Out) {
        let Some(s) = self.decode(bytes, out) else {
            return;
        };
        let Some(s) = self.keep(s, out) else {
            return;
        };
        let value = if self.stores.is_some() {
            out.read_value(s.pid, s.addr)
        } else {
            Value::NotRead
        };
        self.push(s, value, out);
    }

    /// A record: a loss or a task record is handed on (one that cannot be decoded as a loss of one), a
    /// sample returned, counted and dated.
    fn decode(&mut self, bytes: &[u8], out: &mut impl Out) -> Option<Sample> {
        let item = match record::decode_reusing(bytes, self.sample_type, out.frames()) {
            Ok(Record::Sample(s)) if self.copies => {
                self.tally.copies += 1;
                self.tally.last_time = self.tally.last_time.max(s.time);
                out.recycle(s.frames);
                return None;
            }
            Ok(Record::Sample(s)) => {
                self.tally.samples += 1;
                self.tally.last_time = s.time;
                return Some(s);
            }
            Ok(Record::Lost { lost, .. }) => {
                // A damaged record can claim any count: never an overflow.
                self.tally.lost_records = self.tally.lost_records.saturating_add(lost);
                Item::Lost {
                    cpu: self.cpu,
                    count: lost,
                }
            }
            Ok(Record::Task(t)) => Item::Task(t),
            Ok(Record::Other { .. }) => return None,
            // A record we cannot decode is counted as lost: a loss is never silent.
            Err(_) => {
                self.tally.undecodable += 1;
                Item::Lost {
                    cpu: self.cpu,
                    count: 1,
                }
            }
        };
        // Only non-sample records get here; a sample's time is in its body.
        let time = record::trailer_time(bytes, self.sample_type).unwrap_or(self.tally.last_time);
        self.tally.last_time = self.tally.last_time.max(time);
        out.push(time, item);
        None
    }

    /// `s`, unless it is a second event's report of the store the sample before reported (a process
    /// watch): then its chain goes back to `out`, and it stays counted, since the kernel counted it as a
    /// hit too.
    fn keep(&mut self, s: Sample, out: &mut impl Out) -> Option<Sample> {
        if self
            .stores
            .as_mut()
            .is_some_and(|stores| stores.repeats(&s))
        {
            out.recycle(s.frames);
            return None;
        }
        Some(s)
    }

    /// Hands on a kept sample as a hit on this ring's watch, with `value`.
    fn push(&self, s: Sample, value: Value, out: &mut impl Out) {
        out.push(
            s.time,
            Item::Sample {
                sample: s,
                watch: self.watch,
                value,
                trap: None,
            },
        );
    }
}

/// The store the last sample of a process ring reported: (tid, ip, ids of the events that reported it).
/// A thread created while the watch was being armed can be covered twice (by its own event and by one
/// inherited from its creator); both report the same store, from different event ids.
#[derive(Debug, Default)]
pub(super) struct Stores {
    last: Option<(u32, u64, Vec<u64>)>,
}

impl Stores {
    /// Whether `s` is a second event's report of the last store; otherwise `s` becomes the last store.
    fn repeats(&mut self, s: &Sample) -> bool {
        match &mut self.last {
            Some((tid, ip, ids)) => {
                if *tid == s.tid && *ip == s.ip && !ids.contains(&s.id) {
                    ids.push(s.id);
                    return true;
                }
                // The ids' vector is kept: a steady stream of stores allocates nothing.
                (*tid, *ip) = (s.tid, s.ip);
                ids.clear();
                ids.push(s.id);
            }
            None => self.last = Some((s.tid, s.ip, vec![s.id])),
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::record::encode::{self, KERNEL, USER};
    use crate::perf::record::{Task, SAMPLE_TYPE, SAMPLE_TYPE_TASK};
    use crate::trace::events::decode::testing::Collect;

    fn sample(tid: u32, ip: u64, id: u64) -> Sample {
        Sample {
            ip,
            pid: tid,
            tid,
            time: 0,
            addr: 0,
            cpu: 0,
            id,
            cgroup: None,
            frames: Vec::new(),
        }
    }

    /// A thread covered by its own event (id 7) and one inherited from its creator (id 3): each store is
    /// reported once per event, back to back. One report per store is kept, and a loop's next store (the
    /// same ip, an id seen again) is a new store.
    #[test]
    fn second_reports_of_one_store_are_dropped() {
        let mut stores = Stores::default();
        let reports = [
            (10, 0x40, 7),
            (10, 0x40, 3),
            (10, 0x40, 7),
            (10, 0x40, 3),
            (11, 0x40, 3),
            (10, 0x44, 7),
            (10, 0x44, 7),
        ];
        let kept: Vec<bool> = reports
            .iter()
            .map(|&(tid, ip, id)| !stores.repeats(&sample(tid, ip, id)))
            .collect();
        assert_eq!(kept, [true, false, true, false, true, true, true]);
    }

    /// A system-wide ring: samples become hits on the ring's watch with no value; task records pass as
    /// they are, dated by their trailer; a LOST record is a loss on the ring's CPU; an unused record type
    /// is skipped; a record that cannot be decoded is a loss of one, dated by the newest time read.
    #[test]
    fn a_system_wide_ring_gives_hits_tasks_and_losses_in_order() {
        let mut d = SampleDecoder::new(1, 2, SAMPLE_TYPE, false, 5);
        let mut out = Collect::new(8);
        let hit = encode::sample(0xffff_ffff_8100_0077, 40, 41, 100, 0x7000, 1, &[KERNEL, 1]);
        let comm = encode::with_trailer(encode::comm(40, 41, "writer", true), 40, 41, 90, 1);
        let lost = encode::with_trailer(encode::lost(9, 3), 0, 0, 110, 1);
        for r in [&comm, &hit, &lost, &encode::header_only(), &hit[..20]] {
            d.record(r, &mut out);
        }
        let items = out.take();
        assert_eq!(items.len(), 4, "{items:?}");
        assert_eq!(
            items[0],
            (
                90,
                Item::Task(Task::Comm {
                    pid: 40,
                    tid: 41,
                    comm: "writer".into(),
                    exec: true
                })
            )
        );
        let (
            time,
            Item::Sample {
                sample: s,
                watch,
                value,
                trap,
            },
        ) = &items[1]
        else {
            panic!("{items:?}")
        };
        assert_eq!((*time, s.tid, *watch, *value), (100, 41, 2, Value::NotRead));
        assert!(trap.is_none());
        assert_eq!(items[2], (110, Item::Lost { cpu: 1, count: 3 }));
        assert_eq!(items[3], (110, Item::Lost { cpu: 1, count: 1 }));
        assert!(out.reads.is_empty());
        let t = d.tally();
        assert_eq!(
            (t.samples, t.lost_records, t.undecodable, t.last_time),
            (1, 3, 1, 110)
        );
    }

    /// A hit-path perf ring: a sample there is an inherited copy's without the program (the program
    /// reported the store): dropped, its chain handed back, counted as a copy and not as a hit; task
    /// records pass as they are.
    #[test]
    fn a_hit_path_ring_drops_a_copys_samples_and_counts_them() {
        let mut d = SampleDecoder::of_copies(0, 0, SAMPLE_TYPE_TASK, 0);
        let mut out = Collect::new(8);
        let store = encode::with_id(
            3,
            &encode::sample(0x40_1005, 7, 8, 10, 0x60_1000, 0, &[USER, 0x40_1005]),
        );
        let comm = encode::with_trailer(encode::comm(7, 9, "writer", false), 7, 9, 12, 0);
        for r in [&store, &comm, &store] {
            d.record(r, &mut out);
        }
        let items = out.take();
        assert_eq!(items.len(), 1, "{items:?}");
        assert!(
            matches!(items[0], (_, Item::Task(Task::Comm { tid: 9, .. }))),
            "{items:?}"
        );
        assert!(out.reads.is_empty());
        assert_eq!(out.recycled, 2);
        let t = d.tally();
        assert_eq!((t.samples, t.copies), (0, 2));
    }

    /// A process ring: each hit gets what the writer's process holds at the hit's address, and the second
    /// event's report of one store is dropped (its chain handed back) but counted as a sample.
    #[test]
    fn a_process_ring_reads_values_and_drops_second_reports() {
        let mut d = SampleDecoder::new(0, 0, SAMPLE_TYPE_TASK, true, 0);
        let mut out = Collect::new(8);
        let store = |id, time| {
            encode::with_id(
                id,
                &encode::sample(0x40_1005, 7, 8, time, 0x60_1000, 0, &[USER, 0x40_1005]),
            )
        };
        for r in [store(7, 10), store(3, 11), store(7, 12)] {
            d.record(&r, &mut out);
        }
        let items = out.take();
        let times: Vec<u64> = items.iter().map(|(t, _)| *t).collect();
        assert_eq!(times, [10, 12]);
        assert!(items.iter().all(|(_, i)| matches!(
            i,
            Item::Sample {
                watch: 0,
                value: Value::Read(0x77),
                trap: None,
                ..
            }
        )));
        assert_eq!(out.reads, [(7, 0x60_1000), (7, 0x60_1000)]);
        assert_eq!(out.recycled, 1);
        assert_eq!(d.tally().samples, 3);
    }
}
