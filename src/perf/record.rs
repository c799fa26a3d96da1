//! Decoding perf records from bytes. Pure: no kernel, no I/O, so it is tested (and fuzzed) on captured or
//! synthesised bytes. The layout of a sample depends on the `sample_type` bits the event was opened with,
//! which the caller passes in. The record the hit programs write into their ring buffers is decoded
//! beside it ([`crate::perf::hit_record`]).

use perf_event_open_sys::bindings as pb;

pub const SAMPLE_IP: u64 = pb::PERF_SAMPLE_IP as u64;
pub const SAMPLE_TID: u64 = pb::PERF_SAMPLE_TID as u64;
pub const SAMPLE_TIME: u64 = pb::PERF_SAMPLE_TIME as u64;
pub const SAMPLE_ADDR: u64 = pb::PERF_SAMPLE_ADDR as u64;
pub const SAMPLE_ID: u64 = pb::PERF_SAMPLE_ID as u64;
pub const SAMPLE_STREAM_ID: u64 = pb::PERF_SAMPLE_STREAM_ID as u64;
pub const SAMPLE_CPU: u64 = pb::PERF_SAMPLE_CPU as u64;
pub const SAMPLE_PERIOD: u64 = pb::PERF_SAMPLE_PERIOD as u64;
pub const SAMPLE_CALLCHAIN: u64 = pb::PERF_SAMPLE_CALLCHAIN as u64;
pub const SAMPLE_IDENTIFIER: u64 = pb::PERF_SAMPLE_IDENTIFIER as u64;

/// The fields ksymwatch asks for on every breakpoint event.
pub const SAMPLE_TYPE: u64 =
    SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR | SAMPLE_CPU | SAMPLE_CALLCHAIN;

/// Task-bound events (a process watch) also carry the id of the event that wrote each record: a thread
/// can be covered by two events (its own, and one inherited from the thread that created it while the
/// watch was being armed), and the id tells the two copies of one store apart.
pub const SAMPLE_TYPE_TASK: u64 = SAMPLE_TYPE | SAMPLE_IDENTIFIER;

/// The bits this decoder understands; anything else changes the layout in ways it cannot follow.
const SUPPORTED: u64 = SAMPLE_IDENTIFIER
    | SAMPLE_IP
    | SAMPLE_TID
    | SAMPLE_TIME
    | SAMPLE_ADDR
    | SAMPLE_ID
    | SAMPLE_STREAM_ID
    | SAMPLE_CPU
    | SAMPLE_PERIOD
    | SAMPLE_CALLCHAIN;

pub const RECORD_LOST: u32 = pb::PERF_RECORD_LOST;
pub const RECORD_COMM: u32 = pb::PERF_RECORD_COMM;
pub const RECORD_EXIT: u32 = pb::PERF_RECORD_EXIT;
pub const RECORD_FORK: u32 = pb::PERF_RECORD_FORK;
pub const RECORD_SAMPLE: u32 = pb::PERF_RECORD_SAMPLE;
pub const RECORD_MMAP2: u32 = pb::PERF_RECORD_MMAP2;

const CONTEXT_HV: u64 = pb::PERF_CONTEXT_HV;
const CONTEXT_KERNEL: u64 = pb::PERF_CONTEXT_KERNEL;
const CONTEXT_USER: u64 = pb::PERF_CONTEXT_USER;
const CONTEXT_GUEST: u64 = pb::PERF_CONTEXT_GUEST;
const CONTEXT_GUEST_KERNEL: u64 = pb::PERF_CONTEXT_GUEST_KERNEL;
const CONTEXT_GUEST_USER: u64 = pb::PERF_CONTEXT_GUEST_USER;
const CONTEXT_MAX: u64 = pb::PERF_CONTEXT_MAX;

/// Where a call-chain frame ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Context {
    Kernel,
    User,
    Hypervisor,
    Guest,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame {
    pub addr: u64,
    pub context: Context,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub addr: u64,
    pub cpu: u32,
    /// The id of the event that wrote the sample (its parent's for an inherited event); 0 when the sample
    /// type has no identifier.
    pub id: u64,
    /// The writer's cgroup id, where the hit program read it ([`crate::perf::hit_record::CGROUP_KNOWN`]);
    /// no report shows it yet.
    pub cgroup: Option<u64>,
    pub frames: Vec<Frame>,
}

impl Sample {
    /// Whether the writer was in the kernel: the first frame's context, or the ip's half of the address space
    /// when there is no chain.
    pub fn in_kernel(&self) -> bool {
        match self.frames.first() {
            Some(f) => f.context == Context::Kernel,
            None => self.ip >= 0xffff_8000_0000_0000,
        }
    }
}

/// One perf record as the kernel wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Sample(Sample),
    /// The kernel dropped `lost` records because the ring was full.
    Lost {
        id: u64,
        lost: u64,
    },
    Task(Task),
    /// A record type we do not use.
    Other {
        kind: u32,
    },
}

/// What a task record tells of tasks: the tracer hands it on as it is (`crate::trace::events::Item`),
/// and the task tracker applies it to names and user-space maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    /// A task changed its name: a rename (prctl), or exec (`exec`).
    Comm {
        pid: u32,
        tid: u32,
        comm: String,
        exec: bool,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
    },
    Exit {
        pid: u32,
        tid: u32,
    },
    /// A process mapped a file (or the kernel mapped one for it at exec) executable.
    Mmap(Mmap),
}

/// A PERF_RECORD_MMAP2: one executable mapping (`attr.mmap` without `mmap_data` reports no others).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmap {
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    /// File offset of `addr`, in bytes (the kernel's `pgoff` field holds bytes, despite its name).
    pub pgoff: u64,
    /// The file's device (major, minor) and inode; `None` when the record carries a build id instead
    /// (`PERF_RECORD_MISC_MMAP_BUILD_ID`, only when the event asked for build ids).
    pub file: Option<((u32, u32), u64)>,
    pub prot: u32,
    /// The kernel's path of the file (` (deleted)` appended when it was removed), or a name of its own for
    /// memory with no file: `[vdso]`, `//anon`.
    pub filename: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the header or the fields need.
    Truncated { kind: u32, need: usize, have: usize },
    /// The header's size disagrees with the buffer.
    BadSize { size: usize, have: usize },
    /// `sample_type` has bits this decoder does not handle.
    UnsupportedSampleType(u64),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated { kind, need, have } => {
                write!(
                    f,
                    "perf record type {kind} truncated: need {need} bytes, have {have}"
                )
            }
            DecodeError::BadSize { size, have } => {
                write!(f, "perf record says {size} bytes but {have} are there")
            }
            DecodeError::UnsupportedSampleType(bits) => {
                write!(f, "unsupported sample_type bits 0x{bits:x}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// A bounds-checked little cursor over native-endian fields.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    /// Bytes of the record read so far, header included.
    pub(crate) pos: usize,
    kind: u32,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(DecodeError::Truncated {
                kind: self.kind,
                need: self.pos.saturating_add(n),
                have: self.buf.len(),
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        Ok(u64::from_ne_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// The header's `misc`, and a cursor over the record's body (its `kind` the record type): the record's own
/// size checked against the bytes there.
fn record_cursor(bytes: &[u8]) -> Result<(u16, Cursor<'_>), DecodeError> {
    if bytes.len() < 8 {
        return Err(DecodeError::Truncated {
            kind: 0,
            need: 8,
            have: bytes.len(),
        });
    }
    let kind = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let misc = u16::from_ne_bytes([bytes[4], bytes[5]]);
    let size = u16::from_ne_bytes([bytes[6], bytes[7]]) as usize;
    if size < 8 || size > bytes.len() {
        return Err(DecodeError::BadSize {
            size,
            have: bytes.len(),
        });
    }
    let cursor = Cursor {
        buf: &bytes[..size],
        pos: 8,
        kind,
    };
    Ok((misc, cursor))
}

/// Decodes one record, header included, as `crate::perf::ring::Ring::drain` hands it out.
pub fn decode(bytes: &[u8], sample_type: u64) -> Result<Record, DecodeError> {
    decode_reusing(bytes, sample_type, Vec::new())
}

/// [`decode`], with a sample's call chain stored in `frames` (cleared first) instead of a new vector: the
/// tracer hands back the chains of printed hits, so a steady stream allocates nothing per sample.
pub fn decode_reusing(
    bytes: &[u8],
    sample_type: u64,
    frames: Vec<Frame>,
) -> Result<Record, DecodeError> {
    let (misc, mut c) = record_cursor(bytes)?;
    let kind = c.kind;
    match kind {
        RECORD_SAMPLE => decode_sample(&mut c, sample_type, frames).map(Record::Sample),
        RECORD_LOST => Ok(Record::Lost {
            id: c.u64()?,
            lost: c.u64()?,
        }),
        RECORD_COMM => {
            let pid = c.u32()?;
            let tid = c.u32()?;
            let rest = &c.buf[c.pos..];
            let name = rest.split(|&b| b == 0).next().unwrap_or_default();
            Ok(Record::Task(Task::Comm {
                pid,
                tid,
                comm: String::from_utf8_lossy(name).into_owned(),
                exec: misc & pb::PERF_RECORD_MISC_COMM_EXEC as u16 != 0,
            }))
        }
        RECORD_FORK => Ok(Record::Task(Task::Fork {
            pid: c.u32()?,
            ppid: c.u32()?,
            tid: c.u32()?,
            ptid: c.u32()?,
        })),
        RECORD_EXIT => Ok(Record::Task(Task::Exit {
            pid: c.u32()?,
            tid: {
                c.u32()?;
                c.u32()?
            },
        })),
        RECORD_MMAP2 => decode_mmap2(&mut c, misc).map(|m| Record::Task(Task::Mmap(m))),
        other => Ok(Record::Other { kind: other }),
    }
}

fn decode_mmap2(c: &mut Cursor<'_>, misc: u16) -> Result<Mmap, DecodeError> {
    let (pid, tid) = (c.u32()?, c.u32()?);
    let (addr, len, pgoff) = (c.u64()?, c.u64()?, c.u64()?);
    // 24 bytes: maj, min, ino, ino_generation; or a build id's size, two reserved fields and 20 bytes.
    let (maj, min, ino) = (c.u32()?, c.u32()?, c.u64()?);
    c.u64()?;
    let file = (misc & pb::PERF_RECORD_MISC_MMAP_BUILD_ID as u16 == 0).then_some(((maj, min), ino));
    let prot = c.u32()?;
    c.u32()?;
    // The name is NUL-padded to 8 bytes; the `sample_id` trailer follows it.
    let rest = &c.buf[c.pos..];
    let name = rest.split(|&b| b == 0).next().unwrap_or_default();
    Ok(Mmap {
        pid,
        tid,
        addr,
        len,
        pgoff,
        file,
        prot,
        filename: String::from_utf8_lossy(name).into_owned(),
    })
}

/// The timestamp in the `sample_id` trailer that every non-sample record carries when the event was opened
/// with `sample_id_all` (its fields follow `sample_type`'s order: TID, TIME, ID, STREAM_ID, CPU,
/// IDENTIFIER). `None` for a sample, a record too short to hold the trailer, or no TIME bit.
pub fn trailer_time(bytes: &[u8], sample_type: u64) -> Option<u64> {
    if bytes.len() < 8 || sample_type & SAMPLE_TIME == 0 || sample_type & !SUPPORTED != 0 {
        return None;
    }
    let kind = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let size = u16::from_ne_bytes([bytes[6], bytes[7]]) as usize;
    if kind == RECORD_SAMPLE || size > bytes.len() {
        return None;
    }
    // Bytes between TIME and the end of the record.
    let after: usize = [
        (SAMPLE_ID, 8),
        (SAMPLE_STREAM_ID, 8),
        (SAMPLE_CPU, 8),
        (SAMPLE_IDENTIFIER, 8),
    ]
    .iter()
    .filter(|(bit, _)| sample_type & bit != 0)
    .map(|(_, n)| n)
    .sum();
    let end = size.checked_sub(after)?;
    let start = end.checked_sub(8)?;
    // The trailer sits after the record's own body, never inside the 8-byte header.
    if start < 8 {
        return None;
    }
    let b: [u8; 8] = bytes[start..end].try_into().ok()?;
    Some(u64::from_ne_bytes(b))
}

fn decode_sample(
    c: &mut Cursor<'_>,
    st: u64,
    mut frames: Vec<Frame>,
) -> Result<Sample, DecodeError> {
    if st & !SUPPORTED != 0 {
        return Err(DecodeError::UnsupportedSampleType(st & !SUPPORTED));
    }
    let mut s = Sample {
        ip: 0,
        pid: 0,
        tid: 0,
        time: 0,
        addr: 0,
        cpu: 0,
        id: 0,
        cgroup: None,
        frames: {
            frames.clear();
            frames
        },
    };
    if st & SAMPLE_IDENTIFIER != 0 {
        s.id = c.u64()?;
    }
    if st & SAMPLE_IP != 0 {
        s.ip = c.u64()?;
    }
    if st & SAMPLE_TID != 0 {
        s.pid = c.u32()?;
        s.tid = c.u32()?;
    }
    if st & SAMPLE_TIME != 0 {
        s.time = c.u64()?;
    }
    if st & SAMPLE_ADDR != 0 {
        s.addr = c.u64()?;
    }
    if st & SAMPLE_ID != 0 {
        c.u64()?;
    }
    if st & SAMPLE_STREAM_ID != 0 {
        c.u64()?;
    }
    if st & SAMPLE_CPU != 0 {
        s.cpu = c.u32()?;
        c.u32()?;
    }
    if st & SAMPLE_PERIOD != 0 {
        c.u64()?;
    }
    if st & SAMPLE_CALLCHAIN != 0 {
        let nr = c.u64()?;
        // Bound by what the record can hold so a corrupt count cannot make us allocate wildly.
        let room = (c.buf.len() - c.pos) / 8;
        if nr > room as u64 {
            return Err(DecodeError::Truncated {
                kind: c.kind,
                need: c
                    .pos
                    .saturating_add(nr.saturating_mul(8).min(usize::MAX as u64) as usize),
                have: c.buf.len(),
            });
        }
        // One allocation per sample, not one per doubling; `nr` fits in the record (checked above).
        s.frames.reserve_exact(nr as usize);
        let mut ctx = if s.ip >= 0xffff_8000_0000_0000 {
            Context::Kernel
        } else {
            Context::User
        };
        for _ in 0..nr {
            let v = c.u64()?;
            if v >= CONTEXT_MAX {
                ctx = match v {
                    CONTEXT_KERNEL => Context::Kernel,
                    CONTEXT_USER => Context::User,
                    CONTEXT_HV => Context::Hypervisor,
                    CONTEXT_GUEST | CONTEXT_GUEST_KERNEL | CONTEXT_GUEST_USER => Context::Guest,
                    _ => ctx,
                };
                continue;
            }
            s.frames.push(Frame {
                addr: v,
                context: ctx,
            });
        }
    }
    Ok(s)
}

/// Builds record bytes the way the kernel lays them out; for tests only (feature `testing`).
#[cfg(any(test, feature = "testing"))]
pub mod encode {
    use super::*;

    /// A record of type `kind` with `body` after its header.
    pub fn header(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + body.len());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(&misc.to_ne_bytes());
        v.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        v.extend_from_slice(body);
        v
    }

    /// A sample in [`SAMPLE_TYPE`] layout; `chain` is the raw callchain including context markers.
    pub fn sample(
        ip: u64,
        pid: u32,
        tid: u32,
        time: u64,
        addr: u64,
        cpu: u32,
        chain: &[u64],
    ) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&ip.to_ne_bytes());
        b.extend_from_slice(&pid.to_ne_bytes());
        b.extend_from_slice(&tid.to_ne_bytes());
        b.extend_from_slice(&time.to_ne_bytes());
        b.extend_from_slice(&addr.to_ne_bytes());
        b.extend_from_slice(&cpu.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&(chain.len() as u64).to_ne_bytes());
        for v in chain {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        header(RECORD_SAMPLE, pb::PERF_RECORD_MISC_KERNEL as u16, &b)
    }

    /// A bare 8-byte header of an unused record type.
    pub fn header_only() -> Vec<u8> {
        header(pb::PERF_RECORD_THROTTLE, 0, &[])
    }

    pub fn lost(id: u64, lost: u64) -> Vec<u8> {
        let mut b = id.to_ne_bytes().to_vec();
        b.extend_from_slice(&lost.to_ne_bytes());
        header(RECORD_LOST, 0, &b)
    }

    pub fn comm(pid: u32, tid: u32, name: &str, exec: bool) -> Vec<u8> {
        let mut b = pid.to_ne_bytes().to_vec();
        b.extend_from_slice(&tid.to_ne_bytes());
        b.extend_from_slice(name.as_bytes());
        let padded = (name.len() + 1).div_ceil(8) * 8;
        b.resize(8 + padded, 0);
        let misc = if exec {
            pb::PERF_RECORD_MISC_COMM_EXEC as u16
        } else {
            0
        };
        header(RECORD_COMM, misc, &b)
    }

    pub fn fork(pid: u32, ppid: u32, tid: u32, ptid: u32, time: u64) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [pid, ppid, tid, ptid] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&time.to_ne_bytes());
        header(RECORD_FORK, 0, &b)
    }

    pub fn exit(pid: u32, ppid: u32, tid: u32, ptid: u32, time: u64) -> Vec<u8> {
        let mut rec = fork(pid, ppid, tid, ptid, time);
        rec[0..4].copy_from_slice(&RECORD_EXIT.to_ne_bytes());
        rec
    }

    /// A PERF_RECORD_MMAP2 with a device and inode (no build id); `prot` 5 is `PROT_READ | PROT_EXEC`.
    #[allow(clippy::too_many_arguments)]
    pub fn mmap2(
        pid: u32,
        tid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        dev: (u32, u32),
        ino: u64,
        filename: &str,
    ) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [pid, tid] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [addr, len, pgoff] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&dev.0.to_ne_bytes());
        b.extend_from_slice(&dev.1.to_ne_bytes());
        b.extend_from_slice(&ino.to_ne_bytes());
        b.extend_from_slice(&0u64.to_ne_bytes());
        b.extend_from_slice(&5u32.to_ne_bytes());
        b.extend_from_slice(&2u32.to_ne_bytes());
        let padded = (filename.len() + 1).div_ceil(8) * 8;
        let at = b.len();
        b.extend_from_slice(filename.as_bytes());
        b.resize(at + padded, 0);
        header(RECORD_MMAP2, pb::PERF_RECORD_MISC_USER as u16, &b)
    }

    /// Appends the `sample_id_all` trailer in [`SAMPLE_TYPE`] layout (TID, TIME, CPU) to a non-sample
    /// record and fixes its size.
    pub fn with_trailer(mut rec: Vec<u8>, pid: u32, tid: u32, time: u64, cpu: u32) -> Vec<u8> {
        rec.extend_from_slice(&pid.to_ne_bytes());
        rec.extend_from_slice(&tid.to_ne_bytes());
        rec.extend_from_slice(&time.to_ne_bytes());
        rec.extend_from_slice(&cpu.to_ne_bytes());
        rec.extend_from_slice(&0u32.to_ne_bytes());
        let size = (rec.len() as u16).to_ne_bytes();
        rec[6..8].copy_from_slice(&size);
        rec
    }

    /// `sample` (from [`sample`]) in [`SAMPLE_TYPE_TASK`] layout: the writing event's id first.
    pub fn with_id(id: u64, sample: &[u8]) -> Vec<u8> {
        let mut b = id.to_ne_bytes().to_vec();
        b.extend_from_slice(&sample[8..]);
        header(RECORD_SAMPLE, pb::PERF_RECORD_MISC_KERNEL as u16, &b)
    }

    pub const KERNEL: u64 = CONTEXT_KERNEL;
    pub const USER: u64 = CONTEXT_USER;
}

#[cfg(test)]
mod tests {
    use super::encode::{self, KERNEL, USER};
    use super::*;

    #[test]
    fn non_sample_records_carry_their_time_in_the_trailer() {
        let comm = encode::with_trailer(encode::comm(7, 8, "writer", true), 7, 8, 12_345, 1);
        assert_eq!(trailer_time(&comm, SAMPLE_TYPE), Some(12_345));
        match decode(&comm, SAMPLE_TYPE).unwrap() {
            Record::Task(Task::Comm { tid, comm, .. }) => {
                assert_eq!((tid, comm.as_str()), (8, "writer"))
            }
            other => panic!("{other:?}"),
        }
        let lost = encode::with_trailer(encode::lost(1, 9), 0, 0, 777, 0);
        assert_eq!(trailer_time(&lost, SAMPLE_TYPE), Some(777));
        assert_eq!(
            decode(&lost, SAMPLE_TYPE).unwrap(),
            Record::Lost { id: 1, lost: 9 }
        );
        let fork = encode::with_trailer(encode::fork(3, 2, 3, 2, 55), 3, 3, 56, 0);
        assert_eq!(trailer_time(&fork, SAMPLE_TYPE), Some(56));
        // A sample has its time in its body; a record without a trailer has no room for one.
        let sample = encode::sample(0x1000, 1, 1, 99, 0x2000, 0, &[]);
        assert_eq!(trailer_time(&sample, SAMPLE_TYPE), None);
        assert_eq!(trailer_time(&encode::header_only(), SAMPLE_TYPE), None);
        assert_eq!(trailer_time(&comm[..4], SAMPLE_TYPE), None);
    }

    /// An MMAP2 as the kernel writes it for a process watch's event (trailer with the IDENTIFIER last), and
    /// as a system-wide event's; the name stops at its NUL padding, not at the trailer.
    #[test]
    fn decodes_mmap2_and_exit_with_their_trailers() {
        let rec = encode::mmap2(
            40,
            41,
            0x40_1000,
            0x2000,
            0x1000,
            (0xfd, 1),
            1234,
            "/usr/bin/writer",
        );
        let plain = encode::with_trailer(rec.clone(), 40, 41, 999, 1);
        let want = Mmap {
            pid: 40,
            tid: 41,
            addr: 0x40_1000,
            len: 0x2000,
            pgoff: 0x1000,
            file: Some(((0xfd, 1), 1234)),
            prot: 5,
            filename: "/usr/bin/writer".into(),
        };
        assert_eq!(
            decode(&plain, SAMPLE_TYPE).unwrap(),
            Record::Task(Task::Mmap(want.clone()))
        );
        assert_eq!(trailer_time(&plain, SAMPLE_TYPE), Some(999));
        let mut task = encode::with_trailer(rec.clone(), 40, 41, 1_001, 0);
        task.extend_from_slice(&77u64.to_ne_bytes());
        let size = (task.len() as u16).to_ne_bytes();
        task[6..8].copy_from_slice(&size);
        assert_eq!(
            decode(&task, SAMPLE_TYPE_TASK).unwrap(),
            Record::Task(Task::Mmap(want.clone()))
        );
        assert_eq!(trailer_time(&task, SAMPLE_TYPE_TASK), Some(1_001));
        // A name of 8 bytes gets a whole 8-byte slot of NULs after it (ALIGN(strlen + 1, 8)).
        let exact = encode::with_trailer(
            encode::mmap2(1, 1, 0, 1, 0, (0, 0), 0, "/bin/ab1"),
            1,
            1,
            2,
            0,
        );
        assert_eq!(exact.len(), 8 + 64 + 16 + 24);
        match decode(&exact, SAMPLE_TYPE).unwrap() {
            Record::Task(Task::Mmap(m)) => assert_eq!(m.filename, "/bin/ab1"),
            other => panic!("{other:?}"),
        }
        // With a build id in place of the device and inode, there is no inode to check a file against.
        let mut with_id = rec.clone();
        let misc = (pb::PERF_RECORD_MISC_USER | pb::PERF_RECORD_MISC_MMAP_BUILD_ID) as u16;
        with_id[4..6].copy_from_slice(&misc.to_ne_bytes());
        match decode(&with_id, SAMPLE_TYPE).unwrap() {
            Record::Task(Task::Mmap(m)) => {
                assert_eq!((m.file, m.filename.as_str()), (None, "/usr/bin/writer"))
            }
            other => panic!("{other:?}"),
        }
        // A record whose size stops inside the fixed fields (72 bytes with the header) is an error.
        for cut in 8..72 {
            let mut short = rec[..cut].to_vec();
            let size = (cut as u16).to_ne_bytes();
            short[6..8].copy_from_slice(&size);
            assert!(decode(&short, SAMPLE_TYPE).is_err(), "cut at {cut}");
        }
        let exit = encode::with_trailer(encode::exit(40, 1, 41, 1, 5), 40, 41, 6, 0);
        assert_eq!(
            decode(&exit, SAMPLE_TYPE).unwrap(),
            Record::Task(Task::Exit { pid: 40, tid: 41 })
        );
        assert_eq!(trailer_time(&exit, SAMPLE_TYPE), Some(6));
    }

    #[test]
    fn decodes_a_sample_with_kernel_and_user_frames() {
        let chain = [
            KERNEL,
            0xffffffff81234567,
            0xffffffff81000100,
            USER,
            0x401000,
            0x402000,
        ];
        let bytes = encode::sample(
            0xffffffff81234567,
            42,
            43,
            1_234_567_890,
            0x7fff0000,
            1,
            &chain,
        );
        let Record::Sample(s) = decode(&bytes, SAMPLE_TYPE).unwrap() else {
            panic!("not a sample")
        };
        assert_eq!(
            (s.ip, s.pid, s.tid, s.time, s.addr, s.cpu),
            (0xffffffff81234567, 42, 43, 1_234_567_890, 0x7fff0000, 1)
        );
        assert_eq!(s.frames.len(), 4);
        assert_eq!(
            s.frames[0],
            Frame {
                addr: 0xffffffff81234567,
                context: Context::Kernel
            }
        );
        assert_eq!(
            s.frames[2],
            Frame {
                addr: 0x401000,
                context: Context::User
            }
        );
        assert!(s.in_kernel());
    }

    #[test]
    fn user_only_chain() {
        let bytes = encode::sample(0x401234, 7, 7, 5, 0x601000, 0, &[USER, 0x401234, 0x401100]);
        let Record::Sample(s) = decode(&bytes, SAMPLE_TYPE).unwrap() else {
            panic!("not a sample")
        };
        assert!(!s.in_kernel());
        assert!(s.frames.iter().all(|f| f.context == Context::User));
    }

    #[test]
    fn decodes_lost_and_comm() {
        assert_eq!(
            decode(&encode::lost(9, 77), SAMPLE_TYPE).unwrap(),
            Record::Lost { id: 9, lost: 77 }
        );
        assert_eq!(
            decode(&encode::comm(5, 6, "writer", true), SAMPLE_TYPE).unwrap(),
            Record::Task(Task::Comm {
                pid: 5,
                tid: 6,
                comm: "writer".into(),
                exec: true
            })
        );
    }

    #[test]
    fn truncation_and_bad_sizes_are_errors() {
        let bytes = encode::sample(1, 2, 3, 4, 5, 6, &[USER, 1, 2]);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut], SAMPLE_TYPE).is_err(), "cut at {cut}");
        }
        // A callchain count larger than the record must not be trusted.
        let mut evil = encode::sample(1, 2, 3, 4, 5, 6, &[]);
        let nr_at = evil.len() - 8;
        evil[nr_at..].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(matches!(
            decode(&evil, SAMPLE_TYPE),
            Err(DecodeError::Truncated { .. })
        ));
        assert!(matches!(
            decode(&bytes, SAMPLE_TYPE | pb::PERF_SAMPLE_READ as u64),
            Err(DecodeError::UnsupportedSampleType(_))
        ));
    }

    #[test]
    fn unknown_record_types_pass_through() {
        let mut b = encode::lost(1, 1);
        b[0..4].copy_from_slice(&99u32.to_ne_bytes());
        assert_eq!(decode(&b, SAMPLE_TYPE).unwrap(), Record::Other { kind: 99 });
    }
}
