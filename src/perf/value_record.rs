//! `--value`'s value record on the per-thread path: what the value program ([`crate::perf::bpf::program`])
//! writes through a `BPF_OUTPUT` event into the breakpoint's own perf ring, right before the kernel writes
//! the hit's sample there. Its layout, how a ring's reader tells it from a sample (its leading event id),
//! its pure decoding, and the check that a sample is the one of the same trap; the pairing itself is the
//! tracer's (`crate::trace::events::paired`). Tested on synthesised bytes, fuzzed with the perf records.

#[cfg(any(test, feature = "testing"))]
use crate::perf::record::encode::header;
use crate::perf::record::{
    record_cursor, DecodeError, Sample, RECORD_SAMPLE, SAMPLE_CPU, SAMPLE_IDENTIFIER, SAMPLE_IP,
    SAMPLE_RAW, SAMPLE_TID, SAMPLE_TIME,
};
#[cfg(any(test, feature = "testing"))]
use perf_event_open_sys::bindings as pb;

/// `--value`'s value events (`BPF_OUTPUT`, see [`crate::perf::bpf`]): the program's record as raw data.
/// Their `sample_id_all` trailer fields (TID, TIME, CPU, IDENTIFIER) are those of [`SAMPLE_TYPE_TASK`],
/// which the breakpoints sharing their ring use with `--value`: a LOST record either writes reads alike,
/// and the leading identifier tells a value record from a sample.
///
/// [`SAMPLE_TYPE_TASK`]: crate::perf::record::SAMPLE_TYPE_TASK
pub const VALUE_SAMPLE_TYPE: u64 =
    SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_RAW;

/// The value program's record: value, old value, breakpoint address, flags; native-endian u64s.
pub const VALUE_RAW_LEN: usize = 32;
/// Flag: the value was read (else the read failed and `value` is unknown).
pub const VALUE_KNOWN: u64 = 1;
/// Flag: there was an old value (else this is the first hit the program saw here).
pub const OLD_KNOWN: u64 = 2;

/// One value record: what a hit stored, read in the kernel at the trap, and what it replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueRecord {
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
    /// The breakpoint's address.
    pub addr: u64,
    pub value: Option<u64>,
    pub old: Option<u64>,
}

impl ValueRecord {
    /// Whether `s` is the sample of the hit this value was read at: the kernel writes both from the same
    /// trap, so they share the thread, the ip (the same registers), the CPU and the breakpoint address.
    pub fn matches(&self, s: &Sample) -> bool {
        (self.tid, self.pid, self.ip, self.cpu, self.addr) == (s.tid, s.pid, s.ip, s.cpu, s.addr)
    }
}

/// The leading identifier of a sample written with `PERF_SAMPLE_IDENTIFIER` (which event wrote it);
/// `None` for any other record, or one too short.
pub fn sample_identifier(bytes: &[u8]) -> Option<u64> {
    let kind = u32::from_ne_bytes(bytes.get(0..4)?.try_into().ok()?);
    let size = u16::from_ne_bytes(bytes.get(6..8)?.try_into().ok()?) as usize;
    if kind != RECORD_SAMPLE || size < 16 {
        return None;
    }
    Some(u64::from_ne_bytes(bytes.get(8..16)?.try_into().ok()?))
}

/// Decodes a value event's sample ([`VALUE_SAMPLE_TYPE`]).
pub fn decode_value(bytes: &[u8]) -> Result<ValueRecord, DecodeError> {
    let (_, mut c) = record_cursor(bytes)?;
    let _id = c.u64()?;
    let ip = c.u64()?;
    let (pid, tid) = (c.u32()?, c.u32()?);
    let time = c.u64()?;
    let cpu = c.u32()?;
    c.u32()?;
    let raw_len = c.u32()? as usize;
    if raw_len < VALUE_RAW_LEN {
        return Err(DecodeError::Truncated {
            kind: RECORD_SAMPLE,
            need: c.pos + VALUE_RAW_LEN,
            have: c.pos + raw_len,
        });
    }
    let (value, old, addr, flags) = (c.u64()?, c.u64()?, c.u64()?, c.u64()?);
    Ok(ValueRecord {
        ip,
        pid,
        tid,
        time,
        cpu,
        addr,
        value: (flags & VALUE_KNOWN != 0).then_some(value),
        old: (flags & OLD_KNOWN != 0).then_some(old),
    })
}

/// Builds a value event's sample as the kernel writes it; for tests only (feature `testing`).
#[cfg(any(test, feature = "testing"))]
/// A value event's sample as the kernel writes it: the raw data's size is padded so the record stays
/// 8-byte aligned (4 bytes of size, 32 of data, 4 of padding).
pub fn encode(id: u64, v: &ValueRecord) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&id.to_ne_bytes());
    b.extend_from_slice(&v.ip.to_ne_bytes());
    b.extend_from_slice(&v.pid.to_ne_bytes());
    b.extend_from_slice(&v.tid.to_ne_bytes());
    b.extend_from_slice(&v.time.to_ne_bytes());
    b.extend_from_slice(&v.cpu.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&36u32.to_ne_bytes());
    let flags =
        (u64::from(v.value.is_some()) * VALUE_KNOWN) | (u64::from(v.old.is_some()) * OLD_KNOWN);
    for w in [v.value.unwrap_or(0), v.old.unwrap_or(0), v.addr, flags] {
        b.extend_from_slice(&w.to_ne_bytes());
    }
    b.extend_from_slice(&[0; 4]);
    header(RECORD_SAMPLE, pb::PERF_RECORD_MISC_KERNEL as u16, &b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::record::encode::{self as record_encode, USER};
    use crate::perf::record::{decode, Record, SAMPLE_TYPE_TASK};

    /// A value record decodes to what the program wrote, tells itself from a sample by its leading id, and
    /// pairs only with the sample of the same trap.
    #[test]
    fn decodes_value_records_and_pairs_them() {
        let v = ValueRecord {
            ip: 0x40_1234,
            pid: 7,
            tid: 8,
            time: 99,
            cpu: 1,
            addr: 0x60_1000,
            value: Some(0x1f4),
            old: None,
        };
        let bytes = encode(42, &v);
        assert_eq!(bytes.len() % 8, 0);
        assert_eq!(sample_identifier(&bytes), Some(42));
        assert_eq!(decode_value(&bytes), Ok(v));
        let unknown = ValueRecord {
            value: None,
            old: Some(3),
            ..v
        };
        assert_eq!(decode_value(&encode(42, &unknown)), Ok(unknown));
        for cut in 0..bytes.len() - 4 {
            let mut short = bytes[..cut].to_vec();
            if cut >= 8 {
                short[6..8].copy_from_slice(&(cut as u16).to_ne_bytes());
            }
            assert!(decode_value(&short).is_err(), "cut at {cut}");
        }
        let s = record_encode::with_id(
            5,
            &record_encode::sample(0x40_1234, 7, 8, 100, 0x60_1000, 1, &[USER, 0x40_1234]),
        );
        assert_eq!(sample_identifier(&s), Some(5));
        let Record::Sample(sample) = decode(&s, SAMPLE_TYPE_TASK).unwrap() else {
            panic!("not a sample")
        };
        assert!(v.matches(&sample));
        for other in [
            ValueRecord { tid: 9, ..v },
            ValueRecord { ip: 0x40_1238, ..v },
            ValueRecord { cpu: 0, ..v },
            ValueRecord {
                addr: 0x60_1008,
                ..v
            },
        ] {
            assert!(!other.matches(&sample), "{other:?}");
        }
        assert_eq!(sample_identifier(&record_encode::lost(1, 1)), None);
    }
}
