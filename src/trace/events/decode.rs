//! What the two ring decoders ([`super::hits`], [`super::samples`]) share: the
//! [`Out`] they hand decoded items to, and the [`Tally`] of what a ring gave, which the audit at the end
//! holds against the kernel's counters. A decoder is pure: bytes in, items out through [`Out`], so each is
//! tested on constructed bytes with [`testing::Collect`] standing in for the rings' merge.

use crate::perf::hit_record::ChainKey;
use crate::perf::record::Frame;
use crate::report::Value;
use crate::trace::events::Item;

/// Where a decoder's items go, and what it asks of the ring's surroundings while decoding.
pub trait Out {
    /// Hands on an item decoded from the ring, dated `time` (the ring is in time order by itself).
    fn push(&mut self, time: u64, item: Item);

    /// A call-chain vector to decode a sample's chain into: a printed hit's, handed back, so a steady
    /// stream allocates nothing per sample.
    fn frames(&mut self) -> Vec<Frame>;

    /// Takes back the call chain of a sample that was decoded and dropped.
    fn recycle(&mut self, frames: Vec<Frame>);

    /// The length of the ring's watch a hit at data address `addr` was on: the current watch, or one a
    /// `--control` move left whose hits were still in the ring.
    fn watch_len(&self, addr: u64) -> u8;

    /// What process `pid` holds at `addr` now (the hit watch's length of it), for a process watch's hit
    /// whose value was not read at the trap.
    fn read_value(&mut self, pid: u32, addr: u64) -> Value;

    /// The call chain (kernel, then user return addresses) the ring's hit program stored under `key`, for
    /// a hit record that names its chain by id: read from the kernel's map the first time, then kept.
    /// `None` when the map does not give it.
    fn chain(&mut self, key: ChainKey) -> Option<&(Vec<u64>, Vec<u64>)>;
}

/// What one ring gave so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Hits decoded from the ring (second reports of one store included: the kernel counted them too).
    pub samples: u64,
    /// Losses the ring itself reported (LOST records, or the hit program's running count).
    pub lost_records: u64,
    /// Records that could not be decoded (reported as lost one each).
    pub undecodable: u64,
    /// The per-thread hit path: perf samples of inherited copies of a thread's event that have no
    /// program, dropped (the thread's own event's program reported the same store; see
    /// [`super::samples::SampleDecoder::of_copies`]).
    pub copies: u64,
    /// The newest time read from the ring; dates records that carry none.
    pub last_time: u64,
}

impl Tally {
    /// A ring set up at `now`: nothing in it is older.
    pub fn new(now: u64) -> Tally {
        Tally {
            samples: 0,
            lost_records: 0,
            undecodable: 0,
            copies: 0,
            last_time: now,
        }
    }

    /// The counts of two rings read as one (the hit path's perf ring and ring buffer).
    pub fn and(self, other: Tally) -> Tally {
        Tally {
            samples: self.samples + other.samples,
            lost_records: self.lost_records + other.lost_records,
            undecodable: self.undecodable + other.undecodable,
            copies: self.copies + other.copies,
            last_time: self.last_time.max(other.last_time),
        }
    }
}

/// An [`Out`] that keeps what it is given, for the decoders' tests.
#[cfg(test)]
pub mod testing {
    use super::*;

    /// Collects the items pushed; the watch is `len` bytes long, and a process's range reads as `value`.
    pub struct Collect {
        pub items: Vec<(u64, Item)>,
        pub len: u8,
        pub value: Value,
        /// The (pid, addr) of each read of a process's range.
        pub reads: Vec<(u32, u64)>,
        /// Call chains handed back.
        pub recycled: usize,
        /// The chains the kernel's map holds, by key, and the keys asked for.
        pub chains: std::collections::HashMap<ChainKey, (Vec<u64>, Vec<u64>)>,
        pub chains_asked: Vec<ChainKey>,
    }

    impl Collect {
        pub fn new(len: u8) -> Collect {
            Collect {
                items: Vec::new(),
                len,
                value: Value::Read(0x77),
                reads: Vec::new(),
                recycled: 0,
                chains: std::collections::HashMap::new(),
                chains_asked: Vec::new(),
            }
        }

        /// The items pushed so far, taken.
        pub fn take(&mut self) -> Vec<(u64, Item)> {
            std::mem::take(&mut self.items)
        }
    }

    impl Out for Collect {
        fn push(&mut self, time: u64, item: Item) {
            self.items.push((time, item));
        }

        fn frames(&mut self) -> Vec<Frame> {
            Vec::new()
        }

        fn recycle(&mut self, _frames: Vec<Frame>) {
            self.recycled += 1;
        }

        fn watch_len(&self, _addr: u64) -> u8 {
            self.len
        }

        fn read_value(&mut self, pid: u32, addr: u64) -> Value {
            self.reads.push((pid, addr));
            self.value
        }

        fn chain(&mut self, key: ChainKey) -> Option<&(Vec<u64>, Vec<u64>)> {
            self.chains_asked.push(key);
            self.chains.get(&key)
        }
    }
}

/// Whatever bytes a ring holds (here: records of every kind the rings carry, a byte changed and cut
/// anywhere), no decoder panics, and a record it cannot decode is one loss, handed on as such.
#[cfg(test)]
mod prop {
    use crate::perf::bpf::kernel::pt_regs;
    use crate::perf::hit_record::{self, HitRecord};
    use crate::perf::record::{encode, SAMPLE_TYPE_TASK};
    use crate::trace::events::decode::testing::Collect;
    use crate::trace::events::hits::{HitDecoder, HitValue};
    use crate::trace::events::samples::SampleDecoder;
    use crate::trace::events::Item;
    use proptest::prelude::*;

    fn records() -> Vec<Vec<u8>> {
        let hit = HitRecord {
            flags: hit_record::USER_MODE,
            pid: 7,
            tid: 8,
            time: 10,
            addr: 0x60_1000,
            value: Some(1),
            old: Some(0),
            cgroup: None,
            comm: Some("writer".into()),
            ip: Some(0x40_1005),
            lost: 1,
            regs: Some([3; pt_regs::WORDS]),
            insn: Some([0x90; hit_record::INSN_BYTES]),
            chain: None,
            kernel_stack: vec![0xffff_ffff_8100_0077],
            user_stack: vec![0x40_1005, 0],
        };
        let sample = encode::sample(0x40_1005, 7, 8, 10, 0x60_1000, 0, &[encode::USER, 1]);
        vec![
            encode::with_id(5, &sample),
            encode::with_trailer(encode::comm(7, 8, "writer", false), 7, 8, 9, 0),
            encode::with_trailer(encode::lost(1, 2), 0, 0, 9, 0),
            encode::mmap2(7, 8, 0x40_0000, 0x1000, 0, (8, 1), 99, "/bin/w"),
            hit_record::encode(&hit),
        ]
    }

    /// The record at `which`, its byte at `at` set to `byte`, cut to `cut` bytes (its header's size
    /// set to the cut where the header is whole).
    fn broken(which: usize, at: usize, byte: u8, cut: usize) -> Vec<u8> {
        let all = records();
        let mut r = all[which % all.len()].clone();
        let at = at % r.len();
        r[at] = byte;
        let cut = cut % (r.len() + 1);
        r.truncate(cut);
        if cut >= 8 && at >= 8 {
            r[6..8].copy_from_slice(&(cut as u16).to_ne_bytes());
        }
        r
    }

    proptest! {
        #[test]
        fn no_record_panics_a_decoder_and_an_undecodable_one_is_a_loss(
            edits in proptest::collection::vec(
                (0..5usize, any::<usize>(), any::<u8>(), any::<usize>()),
                1..12,
            )
        ) {
            let mut samples = SampleDecoder::new(0, 0, SAMPLE_TYPE_TASK, true, 0);
            let mut hits = HitDecoder::new(0, 0, HitValue::Written, 0, 0);
            let mut out = Collect::new(8);
            for (which, at, byte, cut) in edits {
                let bytes = broken(which, at, byte, cut);
                let before = [samples.tally(), hits.tally()];
                samples.record(&bytes, &mut out);
                hits.record(&bytes, &mut out);
                let after = [samples.tally(), hits.tally()];
                let new: Vec<u64> = after
                    .iter()
                    .zip(&before)
                    .map(|(a, b)| a.undecodable - b.undecodable)
                    .collect();
                prop_assert!(new.iter().all(|&n| n <= 1), "{:?}", new);
                let undecodable: u64 = new.iter().sum();
                let losses_of_one = out
                    .take()
                    .iter()
                    .filter(|(_, i)| {
                        // The hit path's: a kept hit the program counted, not printed.
                        *i == Item::Lost { cpu: 0, count: 1 }
                            || *i == Item::Unprinted { cpu: 0, count: 1 }
                    })
                    .count() as u64;
                prop_assert!(losses_of_one >= undecodable);
            }
        }
    }
}
