//! The hit path's decoder: the records the hit program ([`crate::perf::bpf::hit`]) writes into its CPU's
//! BPF ring buffer, one per kept hit ([`crate::perf::hit_record`]). Each carries the writer's name where
//! it is not the ring's previous record's writer and name, the value the program read at the trap, and
//! the program's running count of records the ring had no room for, so those hits are reported in order,
//! ahead of the first hit after them, as [`Item::Unprinted`]: the program counted them in the kernel's
//! totals before it tried the ring. (The breakpoint's own perf ring beside it holds task records only,
//! read by [`super::samples`].)

use crate::perf::hit_record::HitView;
use crate::perf::record::Task;
use crate::report::{Value, ValueFrom};
use crate::trace::events::decode::{Out, Tally};
use crate::trace::events::{Item, Trap};

/// What the hit program's value of a hit is to the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitValue {
    /// A system-wide watch without `--value`: not shown.
    NotRead,
    /// A process watch: the watched range at the trap, as the program read it: `len` bytes (the length
    /// the watch was built with; a `--control` move may have changed the watch's since). A trap the
    /// program reads nothing at (a read-write watch of a user address) comes without a value.
    Read { len: u8 },
    /// `--value`/`--if`: the value and the one before it.
    Written,
}

/// One hit ring buffer's decoder.
pub struct HitDecoder {
    cpu: u32,
    watch: usize,
    value: HitValue,
    /// The last (tid, comm) a record named, so a task's name goes to the tracker only when it changes.
    last_comm: Option<(u32, Vec<u8>)>,
    /// The program's count of records lost on this CPU as of the last record read (each carries it, in
    /// 32 bits that wrap).
    ring_lost: u32,
    tally: Tally,
}

impl HitDecoder {
    /// The decoder of `watch`'s ring buffer on `cpu`, whose program's values are `value`; `ring_lost`: the
    /// program's count of records lost there when the ring was set up, at `now`.
    pub fn new(cpu: u32, watch: usize, value: HitValue, ring_lost: u64, now: u64) -> HitDecoder {
        HitDecoder {
            cpu,
            watch,
            value,
            last_comm: None,
            // The low 32 bits: what the records carry.
            ring_lost: ring_lost as u32,
            tally: Tally::new(now),
        }
    }

    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// The records lost that the program's count `lost` (its 32 bits, which wrap) holds beyond the ones
    /// already reported: kept hits, counted in the kernel's totals before the ring was tried, not printed.
    ///
    /// A count behind the one reported is a record written before losses [`HitDecoder::lost_now`] read
    /// from the map (its events were still enabled: a `--control` move of another target, a module's
    /// unload): nothing new. Taken as ahead, it wrapped to some 4.29 billion hits not printed, and the
    /// next record carrying the map's count reported those losses a second time. (Behind means by less
    /// than half the 32 bits: no ring loses two billion records between two that it keeps.)
    fn lost_up_to(&mut self, lost: u32) -> Option<Item> {
        let ahead = lost.wrapping_sub(self.ring_lost);
        if ahead == 0 || ahead > u32::MAX / 2 {
            return None;
        }
        let count = u64::from(ahead);
        self.ring_lost = lost;
        self.tally.lost_records += count;
        Some(Item::Unprinted {
            cpu: self.cpu,
            count,
        })
    }

    /// The program's count of records lost on this CPU, read from its map now (`lost`): what no record has
    /// carried yet (the ring was full, and nothing has fit since), as of the last record read, to be
    /// reported now rather than with the next record, which may be of a moved watch. A record that
    /// later carries the same count, or an older one (written before these losses), reports nothing again.
    pub fn lost_now(&mut self, lost: u64) -> Option<(u64, Item)> {
        let item = self.lost_up_to(lost as u32)?;
        Some((self.tally.last_time, item))
    }

    /// One hit record: the records the ring had no room for since the one before (the record carries
    /// the count), the writer's name where it changed, then the hit.
    pub fn record(&mut self, bytes: &[u8], out: &mut impl Out) {
        let Ok(hit) = HitView::parse(bytes) else {
            // The program counted the hit before it wrote the record: not printed, still in the totals.
            self.tally.undecodable += 1;
            let count = 1;
            return out.push(
                self.tally.last_time,
                Item::Unprinted {
                    cpu: self.cpu,
                    count,
                },
            );
        };
        let cpu = self.cpu;
        self.tally.samples += 1;
        self.tally.last_time = self.tally.last_time.max(hit.time);
        if let Some(item) = self.lost_up_to(hit.lost) {
            out.push(hit.time, item);
        }
        // A record without a name is by the ring's previous record's writer, under the same name (the
        // program carries the name when either changes, and again after a record is lost).
        let renamed = hit.comm.filter(|&name| {
            self.last_comm
                .as_ref()
                .is_none_or(|(tid, comm)| *tid != hit.tid || comm.as_slice() != name)
        });
        if let Some(name) = renamed {
            // The writer's name as the kernel had it at the trap, ahead of its hit: a task is never
            // `<...>`, whatever records were lost or came late.
            self.last_comm = Some((hit.tid, name.to_vec()));
            let comm = Task::Comm {
                pid: hit.pid,
                tid: hit.tid,
                comm: String::from_utf8_lossy(name).into_owned(),
                exec: false,
            };
            out.push(hit.time, Item::Task(comm));
        }
        let mut trap = None;
        let value = match (self.value, hit.value) {
            (HitValue::Written, _) => {
                if let (Some(insn), Some(regs)) = (hit.insn, hit.regs) {
                    trap = Some(Box::new(Trap { regs, insn }));
                }
                Value::Written {
                    value: hit.value,
                    old: hit.old,
                    from: ValueFrom::Memory,
                }
            }
            (HitValue::Read { len }, v) => match (out.watch_len(hit.addr), v) {
                (now, Some(v)) if now == len => Value::Read(v),
                // Moved to a shorter watch: the program read more bytes than are watched.
                (now, Some(v)) if now < len => {
                    Value::Read(v & (u64::MAX >> (64 - 8 * u32::from(now))))
                }
                // Not read at the trap (a read-write watch of a user address, where the program's read
                // would trap again), unreadable there, or moved to a longer watch: what the range holds as
                // the hit is drained, as a process watch's value is without the hit path.
                _ => out.read_value(hit.pid, hit.addr),
            },
            (HitValue::NotRead, _) => Value::NotRead,
        };
        // Hit records carry no event id: only a per-thread ring's duplicate check reads one.
        let frames = out.frames();
        let sample = match hit.chain {
            None => hit.sample(cpu, 0, frames),
            Some(key) => match out.chain(key) {
                Some((kernel, user)) => hit.sample_along(
                    cpu,
                    0,
                    frames,
                    (kernel.iter().copied(), user.iter().copied()),
                ),
                // The map always holds a chain a record names (the program stored it first, and
                // nothing removes one): this is a map the tracer could not read. The hit is shown, its
                // chain unknown.
                None => hit.sample(cpu, 0, frames),
            },
        };
        out.push(
            hit.time,
            Item::Sample {
                sample,
                watch: self.watch,
                value,
                trap,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::bpf::kernel::pt_regs;
    use crate::perf::hit_record::ChainKey;
    use crate::perf::hit_record::{encode, HitRecord, INSN_BYTES, USER_MODE};
    use crate::perf::record::Context;
    use crate::trace::events::decode::testing::Collect;

    fn record(tid: u32, time: u64, lost: u32) -> HitRecord {
        HitRecord {
            flags: USER_MODE,
            pid: 40,
            tid,
            time,
            addr: 0x60_1000,
            value: Some(0x1122_3344_5566_7788),
            old: Some(1),
            cgroup: None,
            comm: Some("writer".into()),
            ip: Some(0x40_1005),
            lost,
            regs: None,
            insn: None,
            chain: None,
            kernel_stack: vec![],
            user_stack: vec![0x40_1005, 0],
        }
    }

    fn what(items: &[(u64, Item)]) -> Vec<String> {
        items
            .iter()
            .map(|(t, item)| match item {
                Item::Sample { sample, watch, .. } => format!("{t} hit {}@{watch}", sample.tid),
                Item::Unprinted { cpu, count } => format!("{t} unprinted {count} on {cpu}"),
                Item::Task(Task::Comm { tid, comm, .. }) => format!("{t} comm {tid} {comm}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    /// What `d` puts out for `records`, in order, as [`what`] describes it.
    fn decoded(
        d: &mut HitDecoder,
        out: &mut Collect,
        records: impl IntoIterator<Item = HitRecord>,
    ) -> Vec<String> {
        for r in records {
            d.record(&encode(&r), out);
        }
        what(&out.take())
    }

    /// The writer's name comes ahead of its first hit and again only when the task or its name changes;
    /// the records lost since the last one read come ahead of the next, once (the count is running, and
    /// starts from what the program had lost when the ring was set up).
    #[test]
    fn names_and_losses_come_ahead_of_the_hit_once() {
        let mut d = HitDecoder::new(1, 3, HitValue::NotRead, 2, 0);
        let mut out = Collect::new(8);
        let renamed = HitRecord {
            comm: Some("worker".into()),
            ..record(8, 40, 5)
        };
        let records = [
            record(8, 10, 2),
            record(8, 20, 2),
            record(9, 30, 2),
            renamed,
        ];
        assert_eq!(
            decoded(&mut d, &mut out, records),
            [
                "10 comm 8 writer",
                "10 hit 8@3",
                "20 hit 8@3",
                "30 comm 9 writer",
                "30 hit 9@3",
                "40 unprinted 3 on 1",
                "40 comm 8 worker",
                "40 hit 8@3",
            ]
        );
        let t = d.tally();
        assert_eq!((t.samples, t.lost_records, t.last_time), (4, 3, 40));
    }

    /// A process watch's value is the program's read, cut to a watch moved shorter since; unread at the
    /// trap, or under a watch moved longer, it is what the process holds as the hit is drained. A
    /// system-wide watch's is not shown.
    #[test]
    fn a_process_watch_takes_the_programs_read_or_reads_the_process() {
        let value = |value: HitValue, len: u8, r: HitRecord| {
            let mut d = HitDecoder::new(0, 0, value, 0, 0);
            let mut out = Collect::new(len);
            d.record(&encode(&r), &mut out);
            let Some((
                _,
                Item::Sample {
                    value: v,
                    trap: None,
                    ..
                },
            )) = out.items.pop()
            else {
                panic!("{:?}", out.items)
            };
            (v, out.reads.len())
        };
        let read8 = HitValue::Read { len: 8 };
        assert_eq!(
            value(read8, 8, record(8, 1, 0)),
            (Value::Read(0x1122_3344_5566_7788), 0)
        );
        assert_eq!(value(read8, 2, record(8, 1, 0)), (Value::Read(0x7788), 0));
        let unread = HitRecord {
            value: None,
            ..record(8, 1, 0)
        };
        assert_eq!(value(read8, 8, unread), (Value::Read(0x77), 1));
        assert_eq!(
            value(HitValue::Read { len: 4 }, 8, record(8, 1, 0)),
            (Value::Read(0x77), 1)
        );
        assert_eq!(
            value(HitValue::NotRead, 8, record(8, 1, 0)),
            (Value::NotRead, 0)
        );
    }

    /// `--value`: the value and the old one as the program read them, and the trap's registers and
    /// instruction bytes for the session to decode the store from.
    #[test]
    fn a_written_value_carries_its_trap() {
        let mut d = HitDecoder::new(0, 0, HitValue::Written, 0, 0);
        let mut out = Collect::new(8);
        let mut regs = [0u64; pt_regs::WORDS];
        regs[16] = 0x40_1005;
        let r = HitRecord {
            regs: Some(regs),
            insn: Some([0x90; INSN_BYTES]),
            ..record(8, 1, 0)
        };
        d.record(&encode(&r), &mut out);
        let Some((
            _,
            Item::Sample {
                sample: s,
                value: v,
                trap: Some(trap),
                ..
            },
        )) = out.items.pop()
        else {
            panic!("{:?}", out.items)
        };
        assert_eq!(
            v,
            Value::Written {
                value: Some(0x1122_3344_5566_7788),
                old: Some(1),
                from: ValueFrom::Memory
            }
        );
        assert_eq!((trap.regs, trap.insn), (regs, [0x90; INSN_BYTES]));
        assert_eq!((s.ip, s.pid, s.tid, s.cpu), (0x40_1005, 40, 8, 0));
    }

    /// Losses the program counted that no record has carried yet (the ring stayed full) are reported
    /// when asked, dated by the last record read, and not again when a later record carries that count:
    /// only what it holds beyond it.
    #[test]
    fn losses_read_from_the_map_are_reported_once() {
        let mut d = HitDecoder::new(1, 0, HitValue::NotRead, 2, 0);
        let mut out = Collect::new(8);
        d.record(&encode(&record(8, 10, 2)), &mut out);
        assert_eq!(d.lost_now(2), None);
        let Some((time, item)) = d.lost_now(6) else {
            panic!("no loss reported")
        };
        assert_eq!((time, item), (10, Item::Unprinted { cpu: 1, count: 4 }));
        assert_eq!(
            decoded(&mut d, &mut out, [record(8, 20, 6), record(8, 30, 7)]),
            [
                "10 comm 8 writer",
                "10 hit 8@0",
                "20 hit 8@0",
                "30 unprinted 1 on 1",
                "30 hit 8@0"
            ]
        );
        assert_eq!(d.tally().lost_records, 5);
    }

    /// Losses read from the map while the ring's events were still enabled (a `--control` move of another
    /// target, a module's unload): records the program wrote before those losses, read after, carry an
    /// older count. They report nothing; the first record carrying a newer count reports only what it
    /// holds beyond the map's. They were taken as some 4.29 billion hits not printed, then the map's
    /// losses again.
    #[test]
    fn a_record_older_than_the_losses_read_from_the_map_reports_none() {
        let mut d = HitDecoder::new(1, 0, HitValue::NotRead, 2, 0);
        let mut out = Collect::new(8);
        d.record(&encode(&record(8, 10, 2)), &mut out);
        assert!(d.lost_now(6).is_some());
        let records = [
            record(8, 20, 2),
            record(8, 30, 2),
            record(8, 40, 6),
            record(8, 50, 7),
        ];
        assert_eq!(
            decoded(&mut d, &mut out, records),
            [
                "10 comm 8 writer",
                "10 hit 8@0",
                "20 hit 8@0",
                "30 hit 8@0",
                "40 hit 8@0",
                "50 unprinted 1 on 1",
                "50 hit 8@0"
            ]
        );
        assert_eq!(d.tally().lost_records, 5, "4 from the map, 1 from a record");
    }

    /// A record cut short is a hit not printed (the program counted it), dated by the newest time read,
    /// not a hit and not a panic.
    #[test]
    fn a_short_record_is_a_hit_not_printed() {
        let mut d = HitDecoder::new(2, 0, HitValue::NotRead, 0, 7);
        let mut out = Collect::new(8);
        let bytes = encode(&record(8, 50, 0));
        d.record(&bytes, &mut out);
        d.record(&bytes[..60], &mut out);
        let items = out.take();
        assert_eq!(
            items.last(),
            Some(&(50, Item::Unprinted { cpu: 2, count: 1 }))
        );
        let t = d.tally();
        assert_eq!((t.samples, t.undecodable), (1, 1));
    }

    /// A record that names its chain by id gets the chain the kernel's map holds, asked of [`Out`] (which
    /// reads it once and keeps it); an inline one its own frames, nothing asked. A chain the map does not
    /// give leaves the hit without frames, shown, never dropped.
    #[test]
    fn a_chain_by_id_is_looked_up_and_an_inline_one_is_not() {
        let key = ChainKey { hash: 0xfeed };
        let by_id = HitRecord {
            chain: Some(key),
            user_stack: vec![],
            ..record(8, 10, 0)
        };
        let mut d = HitDecoder::new(0, 0, HitValue::NotRead, 0, 0);
        let mut out = Collect::new(8);
        out.chains.insert(
            key,
            (vec![0xffff_ffff_8100_0077], vec![0x40_1005, 0x40_2000]),
        );
        d.record(&encode(&by_id), &mut out);
        d.record(&encode(&record(8, 20, 0)), &mut out);
        let frames: Vec<Vec<(u64, Context)>> = out
            .take()
            .into_iter()
            .filter_map(|(_, item)| match item {
                Item::Sample { sample: s, .. } => {
                    Some(s.frames.iter().map(|f| (f.addr, f.context)).collect())
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            frames,
            [
                vec![
                    (0xffff_ffff_8100_0077, Context::Kernel),
                    (0x40_1005, Context::User),
                    (0x40_2000, Context::User),
                ],
                vec![(0x40_1005, Context::User)],
            ]
        );
        assert_eq!(out.chains_asked, [key], "only the record by id asks");

        let unknown = HitRecord {
            chain: Some(ChainKey { hash: 1 }),
            ..by_id
        };
        d.record(&encode(&unknown), &mut out);
        let Some((_, Item::Sample { sample: s, .. })) = out.items.pop() else {
            panic!("{:?}", out.items)
        };
        assert!(s.frames.is_empty());
        assert_eq!(d.tally().samples, 3);
    }

    /// A record without a name is its ring's previous writer's under the same name: no name goes to the
    /// tracker for it, and its sample is the hit all the same, its ip the chain's first frame where the
    /// record leaves it out. A running `lost` that wraps past 32 bits still counts what was lost.
    #[test]
    fn a_record_without_a_name_is_the_previous_writers_and_lost_wraps() {
        let mut d = HitDecoder::new(1, 0, HitValue::NotRead, u64::from(u32::MAX) - 1, 0);
        let mut out = Collect::new(8);
        let unnamed = HitRecord {
            comm: None,
            ip: None,
            ..record(8, 20, u32::MAX - 1)
        };
        let records = [
            record(8, 10, u32::MAX - 1),
            unnamed.clone(),
            HitRecord {
                lost: 1,
                ..unnamed.clone()
            },
        ];
        assert_eq!(
            decoded(&mut d, &mut out, records),
            [
                "10 comm 8 writer",
                "10 hit 8@0",
                "20 hit 8@0",
                "20 unprinted 3 on 1",
                "20 hit 8@0",
            ]
        );
        d.record(&encode(&unnamed), &mut out);
        let Some((_, Item::Sample { sample: s, .. })) = out.items.pop() else {
            panic!("{:?}", out.items)
        };
        assert_eq!(s.ip, 0x40_1005, "the chain's first frame");
    }
}
