//! `--value`'s per-thread path (`--per-thread` or `--remove-on-exec`, where the hit path is not used): the
//! value program writes a value record ([`crate::perf::value_record`]) into the breakpoint's perf ring
//! right before the kernel writes the hit's sample there, and this decoder pairs the two. A value pairs
//! with the very next record only, and only if that is the sample of the same trap
//! ([`ValueRecord::matches`]): a full ring drops either, but then writes a LOST record before the next
//! record that fits, so a value is never shown on another hit. A value whose sample never came is counted
//! (`unpaired`), never shown; a sample whose value was lost has an unknown value.
//!
//! Everything else in the ring is the perf-sample path's ([`SampleDecoder`]), which this decoder wraps.

use crate::perf::value_record::{self, ValueRecord};
use crate::report::{Value, ValueFrom};
use crate::trace::events::decode::{Out, Tally};
use crate::trace::events::samples::SampleDecoder;

/// One perf ring's decoder on `--value`'s per-thread path.
pub struct PairedDecoder {
    perf: SampleDecoder,
    /// The id leading this ring's value records (the value event's).
    value_id: u64,
    /// A value record waiting for the record after it (its hit's sample, unless one of the two was
    /// lost); kept across drains, since the reader can see the ring between the two writes.
    pending: Option<ValueRecord>,
    /// Value records whose sample never came (it was lost): counted, never shown.
    unpaired: u64,
}

impl PairedDecoder {
    /// Pairs the value records led by `value_id` in the ring `perf` decodes.
    pub fn new(perf: SampleDecoder, value_id: u64) -> PairedDecoder {
        PairedDecoder {
            perf,
            value_id,
            pending: None,
            unpaired: 0,
        }
    }

    pub fn tally(&self) -> Tally {
        self.perf.tally()
    }

    /// Value records whose sample was lost, the one still waiting included (at the end nothing follows
    /// it).
    pub fn unpaired(&self) -> u64 {
        self.unpaired + u64::from(self.pending.is_some())
    }

    /// One record read from the ring: a value record waits for its sample, a sample takes the value
    /// before it.
    pub fn record(&mut self, bytes: &[u8], out: &mut impl Out) {
        if value_record::sample_identifier(bytes) == Some(self.value_id) {
            match value_record::decode_value(bytes) {
                Ok(v) => self.unpaired += u64::from(self.pending.replace(v).is_some()),
                Err(_) => self.perf.undecodable(out),
            }
            return;
        }
        let paired = self.pending.take();
        let Some(s) = self.perf.decode(bytes, out) else {
            self.unpaired += u64::from(paired.is_some());
            return;
        };
        let written = paired.filter(|v| v.matches(&s));
        self.unpaired += u64::from(paired.is_some() && written.is_none());
        let Some(s) = self.perf.keep(s, out) else {
            return;
        };
        let value = Value::Written {
            value: written.and_then(|v| v.value),
            old: written.and_then(|v| v.old),
            from: ValueFrom::Memory,
        };
        self.perf.push(s, value, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::record::encode::{self, USER};
    use crate::perf::record::SAMPLE_TYPE_TASK;
    use crate::trace::events::decode::testing::Collect;
    use crate::trace::events::Item;

    const VALUE_ID: u64 = 42;

    fn decoder() -> PairedDecoder {
        PairedDecoder::new(
            SampleDecoder::new(1, 0, SAMPLE_TYPE_TASK, true, 0),
            VALUE_ID,
        )
    }

    fn value(tid: u32, time: u64, v: u64) -> (ValueRecord, Vec<u8>) {
        let r = ValueRecord {
            ip: 0x40_1005,
            pid: 7,
            tid,
            time,
            cpu: 1,
            addr: 0x60_1000,
            value: Some(v),
            old: Some(v - 1),
        };
        (r, value_record::encode(VALUE_ID, &r))
    }

    /// The sample of the trap `value` read at (event id 5).
    fn sample_of(v: &ValueRecord) -> Vec<u8> {
        let s = encode::sample(v.ip, v.pid, v.tid, v.time, v.addr, v.cpu, &[USER, v.ip]);
        encode::with_id(5, &s)
    }

    /// The values of the hits pushed: `Some(value)` where one was paired.
    fn values(out: &mut Collect) -> Vec<Option<u64>> {
        out.take()
            .into_iter()
            .filter_map(|(_, item)| match item {
                Item::Sample(_, _, Value::Written { value, .. }, None) => Some(value),
                Item::Lost { .. } => None,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// A value and its sample make one hit with the value and the old one; the value may come in one
    /// drain and its sample in the next.
    #[test]
    fn a_value_pairs_with_the_sample_of_its_trap() {
        let mut d = decoder();
        let mut out = Collect::new(8);
        let (v, bytes) = value(8, 100, 0x1f4);
        d.record(&bytes, &mut out);
        assert!(out.items.is_empty());
        d.record(&sample_of(&v), &mut out);
        let items = out.take();
        let [(100, Item::Sample(s, 0, value, None))] = &items[..] else {
            panic!("{items:?}")
        };
        assert_eq!(s.tid, 8);
        assert_eq!(
            *value,
            Value::Written {
                value: Some(0x1f4),
                old: Some(0x1f3),
                from: ValueFrom::Memory
            }
        );
        assert_eq!((d.unpaired(), d.tally().samples), (0, 1));
        // The value is the program's: the process is never read.
        assert!(out.reads.is_empty());
    }

    /// A value followed by another trap's sample, by a second value, or by a LOST record is unpaired
    /// (counted), and the sample after it has no value; a value still waiting at the end counts too.
    #[test]
    fn a_value_without_its_sample_is_counted_never_shown() {
        let mut d = decoder();
        let mut out = Collect::new(8);
        let (a, a_bytes) = value(8, 100, 10);
        let (b, b_bytes) = value(9, 101, 20);
        // a's sample was lost: b's sample comes next.
        d.record(&a_bytes, &mut out);
        d.record(&sample_of(&b), &mut out);
        // Two values in a row: the first was unpaired.
        d.record(&a_bytes, &mut out);
        d.record(&b_bytes, &mut out);
        d.record(&sample_of(&b), &mut out);
        // A loss between a value and its sample.
        d.record(&a_bytes, &mut out);
        d.record(
            &encode::with_trailer(encode::lost(1, 2), 0, 0, 102, 1),
            &mut out,
        );
        d.record(&sample_of(&a), &mut out);
        d.record(&b_bytes, &mut out);
        assert_eq!(values(&mut out), [None, Some(20), None]);
        assert_eq!(d.unpaired(), 4);
        assert_eq!(d.tally().lost_records, 2);
    }

    /// A value record cut short is a loss of one, as any record that cannot be decoded; the sample after
    /// it has no value.
    #[test]
    fn a_broken_value_record_is_a_loss() {
        let mut d = decoder();
        let mut out = Collect::new(8);
        let (v, bytes) = value(8, 100, 10);
        let mut short = bytes[..48].to_vec();
        short[6..8].copy_from_slice(&48u16.to_ne_bytes());
        d.record(&short, &mut out);
        d.record(&sample_of(&v), &mut out);
        let items = out.take();
        assert_eq!(items[0], (0, Item::Lost { cpu: 1, count: 1 }));
        assert!(matches!(
            items[1],
            (
                100,
                Item::Sample(
                    _,
                    0,
                    Value::Written {
                        value: None,
                        old: None,
                        ..
                    },
                    None
                )
            )
        ));
        assert_eq!((d.tally().undecodable, d.unpaired()), (1, 0));
    }
}
