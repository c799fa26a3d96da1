//! The hit record: what the in-kernel hit program ([`crate::perf::bpf::hit`]) writes for each hit it keeps,
//! as one record of its CPU's BPF ring buffer ([`crate::perf::bpf_ring`]). Its layout (below, native-endian) and its pure decoding into the
//! [`Sample`] the rest of the tracer reads, so the decoder is tested on bytes without a kernel.
//!
//! ```text
//! off   size  field
//!   0      8  flags: VALUE_KNOWN, OLD_KNOWN, USER_MODE, INSN_KNOWN, REGS_KNOWN, CHAIN_ID
//!   8      8  pid_tgid (tgid << 32 | tid), from bpf_get_current_pid_tgid
//!  16      8  time: CLOCK_MONOTONIC ns at the trap (bpf_ktime_get_ns)
//!  24      8  addr: the breakpoint's address
//!  32      8  value: the watched bytes read at the trap
//!  40      8  old: the value before, for this target (and process, at a user address)
//!  48     16  comm: the writer's name as the kernel keeps it, NUL-padded
//!  64      8  ip: the trap ip (the instruction after the store)
//!  72      8  kstack_bytes: bytes of kernel stack in the record
//!  80      8  ustack_bytes: bytes of user stack after the kernel stack
//!             (with CHAIN_ID, 72..88 is the call chain's key instead, as the `chains` map holds it:
//!             its hash (8), then the kernel and user stacks' bytes (u32 each); see [`ChainKey`])
//!  88      8  lost: records the CPU's ring had no room for so far, before this one
//! with REGS_KNOWN (`--value`: the store's value is decoded from them):
//!  96    168  regs: the trap's `struct pt_regs` (21 words, x86-64 order)
//! 264     16  insn: the 16 bytes that end at the trap ip (the store's instruction ends there)
//! then (at 96, or 280 with REGS_KNOWN), without CHAIN_ID (the chain inline):
//!          -  kernel return addresses (kstack_bytes / 8), then user ones (ustack_bytes / 8)
//! ```
//!
//! The chain by id: the program stores each distinct call chain once in the watch's `chains` map
//! ([`crate::perf::bpf::totals`], where the in-kernel totals name chains by the same key) and the record
//! carries the key where the stacks' lengths were: 96 bytes whatever the chain (280 with registers), where
//! the chain inline made it 96 + 8 a frame (a kernel writer's `read()` of six frames: 144). The tracer reads each distinct chain once from the
//! map, on the first record that names it. A chain the map has no room for (or whose insert failed)
//! comes inline, as does every record of a program built without totals: the flag says which, and no
//! record is ever without its chain.
//!
//! `lost` is a running count the program keeps in its per-CPU scratch entry, where the record is built:
//! a kept hit pays nothing for it, a hit the ring had no room for adds one, and the reader learns of a
//! loss in order, from the next record that fits (and at the end, from the program's `stats`).
//!
//! Registers and instruction bytes are 184 bytes of a record that is otherwise 96 (its chain by id): they
//! are carried only where a value is decoded, so a plain watch's ring holds three times the hits.

use crate::perf::record::{Context, DecodeError, Frame, Sample, RECORD_SAMPLE};

/// Flag: `value` was read.
pub const VALUE_KNOWN: u64 = 1;
/// Flag: `old` is the value before (else this is the first hit of its key).
pub const OLD_KNOWN: u64 = 2;
/// Flag: the writer was in user space at the trap.
pub const USER_MODE: u64 = 4;
/// Flag: `insn` holds the bytes before the trap ip.
pub const INSN_KNOWN: u64 = 8;
/// Flag: the record carries `regs` and `insn`.
pub const REGS_KNOWN: u64 = 16;
/// Flag: the record carries its call chain's key (in place of the stacks' lengths), not the chain's words.
pub const CHAIN_ID: u64 = 32;

pub const OFF_FLAGS: i16 = 0;
pub const OFF_PID_TGID: i16 = 8;
pub const OFF_TIME: i16 = 16;
pub const OFF_ADDR: i16 = 24;
pub const OFF_VALUE: i16 = 32;
pub const OFF_OLD: i16 = 40;
pub const OFF_COMM: i16 = 48;
pub const OFF_IP: i16 = 64;
pub const OFF_KSTACK_BYTES: i16 = 72;
pub const OFF_USTACK_BYTES: i16 = 80;
pub const OFF_LOST: i16 = 88;
/// With CHAIN_ID: the chain's key ([`ChainKey`], 16 bytes) over the two stack lengths.
pub const OFF_CHAIN_KEY: i16 = OFF_KSTACK_BYTES;
pub const OFF_REGS: i16 = 96;
pub const OFF_INSN: i16 = 264;
/// Where the stacks start without registers, and with them.
pub const OFF_STACKS: i16 = 96;
pub const OFF_STACKS_REGS: i16 = 280;

/// Words of `struct pt_regs` on x86-64.
pub const REGS: usize = 21;
/// Bytes of instruction kept before the trap ip: the longest x86 instruction is 15.
pub const INSN_BYTES: usize = 16;
/// Frames kept per stack (kernel, user): the kernel's default `perf_event_max_stack`.
pub const MAX_FRAMES: usize = 127;
/// The largest record: header, registers and both stacks full.
pub const MAX_LEN: usize = OFF_STACKS_REGS as usize + 2 * 8 * MAX_FRAMES;

/// `pt_regs` word indexes the decoder names.
pub mod reg {
    pub const IP: usize = 16;
    pub const CS: usize = 17;
    pub const SP: usize = 19;
}

/// A `chains` key: the hash, then the kernel and user stacks' lengths in bytes (u32 each).
pub const CHAIN_KEY: u32 = 16;

/// The id of a chain as the program keys it (the totals' `chains` map) and a record that names its chain
/// carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChainKey {
    pub hash: u64,
    /// Bytes of kernel stack, then of user stack, in the chain's words.
    pub kbytes: u32,
    pub ubytes: u32,
}

impl ChainKey {
    pub fn parse(b: &[u8]) -> Option<ChainKey> {
        Some(ChainKey {
            hash: u64::from_ne_bytes(b.get(0..8)?.try_into().ok()?),
            kbytes: u32::from_ne_bytes(b.get(8..12)?.try_into().ok()?),
            ubytes: u32::from_ne_bytes(b.get(12..16)?.try_into().ok()?),
        })
    }

    /// The key as the map holds it.
    pub fn bytes(&self) -> [u8; CHAIN_KEY as usize] {
        let mut b = [0u8; CHAIN_KEY as usize];
        b[..8].copy_from_slice(&self.hash.to_ne_bytes());
        b[8..12].copy_from_slice(&self.kbytes.to_ne_bytes());
        b[12..].copy_from_slice(&self.ubytes.to_ne_bytes());
        b
    }

    /// The kernel and user return addresses in a `chains` value, each innermost first; `None` when the
    /// lengths do not fit it.
    pub fn split(&self, value: &[u8]) -> Option<(Vec<u64>, Vec<u64>)> {
        let (k, u) = (self.kbytes as usize / 8, self.ubytes as usize / 8);
        let words: Vec<u64> = value
            .chunks_exact(8)
            .take(k + u)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        (words.len() == k + u).then(|| (words[..k].to_vec(), words[k..].to_vec()))
    }
}

/// A hit record as it lies in the ring: its fixed fields decoded, its name and stacks still the ring's
/// bytes, so the tracer turns a record into a [`Sample`] without allocating (a flood reads 100,000s a
/// second).
#[derive(Debug, Clone, Copy)]
pub struct HitView<'a> {
    pub flags: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub addr: u64,
    pub value: Option<u64>,
    pub old: Option<u64>,
    /// The writer's name as the kernel keeps it, without the NUL padding.
    pub comm: &'a [u8],
    /// The trap ip: the instruction after the store.
    pub ip: u64,
    /// Records the CPU's ring had no room for before this one, since the program was loaded.
    pub lost: u64,
    /// The trap's registers (a record with REGS_KNOWN).
    pub regs: Option<[u64; REGS]>,
    pub insn: Option<[u8; INSN_BYTES]>,
    /// A record with CHAIN_ID: the key its call chain is stored under in the kernel's `chains` map (its
    /// stacks here are then empty).
    pub chain: Option<ChainKey>,
    kernel_stack: &'a [u8],
    user_stack: &'a [u8],
}

/// The record is shorter than its fields (or its stack lengths) say.
fn short(need: usize, raw: &[u8]) -> DecodeError {
    DecodeError::Truncated {
        kind: RECORD_SAMPLE,
        need,
        have: raw.len(),
    }
}

fn bytes_at(raw: &[u8], off: usize, len: usize) -> Result<&[u8], DecodeError> {
    let end = off.checked_add(len).ok_or_else(|| short(usize::MAX, raw))?;
    raw.get(off..end).ok_or_else(|| short(end, raw))
}

fn word(raw: &[u8], off: i16) -> Result<u64, DecodeError> {
    let b = bytes_at(raw, off as usize, 8)?;
    Ok(u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
}

/// `bytes` (a multiple of 8 once rounded down) of stack at `off`.
fn stack_at(raw: &[u8], off: usize, bytes: u64) -> Result<&[u8], DecodeError> {
    let len = usize::try_from(bytes & !7).map_err(|_| short(usize::MAX, raw))?;
    bytes_at(raw, off, len)
}

fn addrs(stack: &[u8]) -> impl Iterator<Item = u64> + '_ {
    stack
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
}

impl<'a> HitView<'a> {
    /// Reads one hit record's raw data.
    pub fn parse(raw: &'a [u8]) -> Result<HitView<'a>, DecodeError> {
        let flags = word(raw, OFF_FLAGS)?;
        let pid_tgid = word(raw, OFF_PID_TGID)?;
        let with_regs = flags & REGS_KNOWN != 0;
        let regs = if with_regs {
            let mut regs = [0u64; REGS];
            for (i, r) in regs.iter_mut().enumerate() {
                *r = word(raw, OFF_REGS + 8 * i as i16)?;
            }
            Some(regs)
        } else {
            None
        };
        let comm = bytes_at(raw, OFF_COMM as usize, 16)?;
        let comm = &comm[..comm.iter().position(|&b| b == 0).unwrap_or(16)];
        let insn = if with_regs && flags & INSN_KNOWN != 0 {
            let b = bytes_at(raw, OFF_INSN as usize, INSN_BYTES)?;
            let mut a = [0u8; INSN_BYTES];
            a.copy_from_slice(b);
            Some(a)
        } else {
            None
        };
        let stacks = if with_regs {
            OFF_STACKS_REGS
        } else {
            OFF_STACKS
        } as usize;
        let (chain, kernel_stack, user_stack) = if flags & CHAIN_ID != 0 {
            let key = bytes_at(raw, OFF_CHAIN_KEY as usize, 16)?;
            let key = ChainKey::parse(key).ok_or_else(|| short(OFF_LOST as usize, raw))?;
            let max = 8 * MAX_FRAMES as u32;
            if key.kbytes > max || key.ubytes > max {
                return Err(short(usize::MAX, raw));
            }
            (Some(key), &raw[..0], &raw[..0])
        } else {
            let kernel_stack = stack_at(raw, stacks, word(raw, OFF_KSTACK_BYTES)?)?;
            let user_stack = stack_at(
                raw,
                stacks + kernel_stack.len(),
                word(raw, OFF_USTACK_BYTES)?,
            )?;
            (None, kernel_stack, user_stack)
        };
        Ok(HitView {
            flags,
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            time: word(raw, OFF_TIME)?,
            addr: word(raw, OFF_ADDR)?,
            value: (flags & VALUE_KNOWN != 0)
                .then(|| word(raw, OFF_VALUE))
                .transpose()?,
            old: (flags & OLD_KNOWN != 0)
                .then(|| word(raw, OFF_OLD))
                .transpose()?,
            comm,
            ip: word(raw, OFF_IP)?,
            lost: word(raw, OFF_LOST)?,
            regs,
            insn,
            chain,
            kernel_stack,
            user_stack,
        })
    }

    /// The kernel return addresses, innermost first.
    pub fn kernel_stack(&self) -> impl Iterator<Item = u64> + 'a {
        addrs(self.kernel_stack)
    }

    /// The user return addresses, innermost first.
    pub fn user_stack(&self) -> impl Iterator<Item = u64> + 'a {
        addrs(self.user_stack)
    }

    /// The hit as the tracer's [`Sample`], its call chain in `frames` (emptied first, its capacity reused):
    /// kernel frames, then user frames, as a perf call chain reads. A zero return address ends the user
    /// chain (the outermost frame's saved frame pointer). A record with [`HitView::chain`] has no frames
    /// of its own: see [`HitView::sample_along`].
    pub fn sample(&self, cpu: u32, id: u64, frames: Vec<Frame>) -> Sample {
        self.sample_along(cpu, id, frames, (self.kernel_stack(), self.user_stack()))
    }

    /// [`HitView::sample`] along a call chain given apart from the record (`kernel`, `user` return
    /// addresses, innermost first): the chain a CHAIN_ID record names, as read from the kernel's map.
    pub fn sample_along(
        &self,
        cpu: u32,
        id: u64,
        mut frames: Vec<Frame>,
        (kernel, user): (impl Iterator<Item = u64>, impl Iterator<Item = u64>),
    ) -> Sample {
        frames.clear();
        let kernel = kernel.map(|addr| Frame {
            addr,
            context: Context::Kernel,
        });
        let user = user.take_while(|&a| a != 0).map(|addr| Frame {
            addr,
            context: Context::User,
        });
        frames.extend(kernel.chain(user));
        Sample {
            ip: self.ip,
            pid: self.pid,
            tid: self.tid,
            time: self.time,
            addr: self.addr,
            cpu,
            id,
            frames,
        }
    }
}

/// One hit record, owned: what tests build records from and compare them with.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HitRecord {
    pub flags: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub addr: u64,
    pub value: Option<u64>,
    pub old: Option<u64>,
    pub comm: String,
    pub ip: u64,
    pub lost: u64,
    pub regs: Option<[u64; REGS]>,
    pub insn: Option<[u8; INSN_BYTES]>,
    /// CHAIN_ID: the key the chain is stored under (the stacks are then empty, and not encoded).
    pub chain: Option<ChainKey>,
    pub kernel_stack: Vec<u64>,
    pub user_stack: Vec<u64>,
}

/// Decodes the raw data of one hit record into an owned one.
#[cfg(any(test, feature = "testing"))]
pub fn decode(raw: &[u8]) -> Result<HitRecord, DecodeError> {
    let v = HitView::parse(raw)?;
    Ok(HitRecord {
        flags: v.flags,
        pid: v.pid,
        tid: v.tid,
        time: v.time,
        addr: v.addr,
        value: v.value,
        old: v.old,
        comm: String::from_utf8_lossy(v.comm).into_owned(),
        ip: v.ip,
        lost: v.lost,
        regs: v.regs,
        insn: v.insn,
        chain: v.chain,
        kernel_stack: v.kernel_stack().collect(),
        user_stack: v.user_stack().collect(),
    })
}

/// Builds a hit record's bytes the way the program lays them out; for tests.
#[cfg(any(test, feature = "testing"))]
pub fn encode(r: &HitRecord) -> Vec<u8> {
    let stacks = if r.regs.is_some() {
        OFF_STACKS_REGS
    } else {
        OFF_STACKS
    };
    let mut v = vec![0u8; stacks as usize];
    let mut put = |off: i16, x: u64| {
        v[off as usize..off as usize + 8].copy_from_slice(&x.to_ne_bytes());
    };
    let flags = r.flags
        | if r.value.is_some() { VALUE_KNOWN } else { 0 }
        | if r.old.is_some() { OLD_KNOWN } else { 0 }
        | if r.regs.is_some() { REGS_KNOWN } else { 0 }
        | if r.regs.is_some() && r.insn.is_some() {
            INSN_KNOWN
        } else {
            0
        }
        | if r.chain.is_some() { CHAIN_ID } else { 0 };
    put(OFF_FLAGS, flags);
    put(OFF_PID_TGID, (u64::from(r.pid) << 32) | u64::from(r.tid));
    put(OFF_TIME, r.time);
    put(OFF_ADDR, r.addr);
    put(OFF_VALUE, r.value.unwrap_or(0));
    put(OFF_OLD, r.old.unwrap_or(0));
    put(OFF_IP, r.ip);
    put(OFF_LOST, r.lost);
    if let Some(regs) = &r.regs {
        for (i, x) in regs.iter().enumerate() {
            put(OFF_REGS + 8 * i as i16, *x);
        }
    }
    match r.chain {
        Some(key) => {
            put(OFF_CHAIN_KEY, key.hash);
            put(
                OFF_CHAIN_KEY + 8,
                u64::from(key.kbytes) | (u64::from(key.ubytes) << 32),
            );
        }
        None => {
            put(OFF_KSTACK_BYTES, 8 * r.kernel_stack.len() as u64);
            put(OFF_USTACK_BYTES, 8 * r.user_stack.len() as u64);
        }
    }
    let comm = r.comm.as_bytes();
    let n = comm.len().min(15);
    v[OFF_COMM as usize..OFF_COMM as usize + n].copy_from_slice(&comm[..n]);
    if let (Some(insn), Some(_)) = (r.insn, r.regs) {
        v[OFF_INSN as usize..OFF_INSN as usize + INSN_BYTES].copy_from_slice(&insn);
    }
    if r.chain.is_none() {
        for x in r.kernel_stack.iter().chain(&r.user_stack) {
            v.extend_from_slice(&x.to_ne_bytes());
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> HitRecord {
        let mut regs = [0u64; REGS];
        regs[reg::IP] = 0x401136;
        regs[reg::CS] = 0x33;
        HitRecord {
            flags: USER_MODE,
            pid: 4321,
            tid: 4322,
            time: 5_000_000_000,
            addr: 0x404028,
            value: Some(0x1f4),
            old: None,
            comm: "writer".into(),
            ip: 0x401136,
            lost: 3,
            regs: Some(regs),
            insn: Some([0x90; INSN_BYTES]),
            chain: None,
            kernel_stack: vec![],
            user_stack: vec![0x401136, 0x401200, 0],
        }
    }

    #[test]
    fn round_trips_every_field() {
        let r = record();
        let mut want = r.clone();
        want.flags |= VALUE_KNOWN | INSN_KNOWN | REGS_KNOWN;
        assert_eq!(decode(&encode(&r)).unwrap(), want);
        // Without registers (no `--value`) the stacks follow the ip words: 184 bytes shorter.
        let short = HitRecord {
            regs: None,
            insn: None,
            ..r.clone()
        };
        let bytes = encode(&short);
        assert_eq!(bytes.len() + 184, encode(&r).len());
        let mut want = short.clone();
        want.flags |= VALUE_KNOWN;
        assert_eq!(decode(&bytes).unwrap(), want);
    }

    #[test]
    fn becomes_a_sample_with_kernel_then_user_frames_and_no_zero_frame() {
        let mut r = record();
        r.kernel_stack = vec![0xffff_ffff_8100_0077, 0xffff_ffff_8100_0100];
        let bytes = encode(&r);
        let s = HitView::parse(&bytes).unwrap().sample(1, 9, Vec::new());
        assert_eq!(
            (s.ip, s.pid, s.tid, s.cpu, s.id),
            (0x401136, 4321, 4322, 1, 9)
        );
        let ctx: Vec<_> = s.frames.iter().map(|f| (f.addr, f.context)).collect();
        assert_eq!(
            ctx,
            [
                (0xffff_ffff_8100_0077, Context::Kernel),
                (0xffff_ffff_8100_0100, Context::Kernel),
                (0x401136, Context::User),
                (0x401200, Context::User),
            ]
        );
        assert!(s.in_kernel());
    }

    #[test]
    fn a_short_or_lying_record_is_an_error_not_a_panic() {
        let bytes = encode(&record());
        for cut in [0, 7, 63, 200, OFF_STACKS_REGS as usize, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut lying = bytes.clone();
        lying[OFF_USTACK_BYTES as usize..OFF_USTACK_BYTES as usize + 8]
            .copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(decode(&lying).is_err());
        let unknown = {
            let mut b = bytes;
            b[0] = 0;
            decode(&b).unwrap()
        };
        assert_eq!(
            (unknown.value, unknown.old, unknown.insn),
            (None, None, None)
        );
    }

    /// A record with CHAIN_ID carries the chain's key in its header, whatever the chain's length: 96 bytes
    /// without registers, where the same chain inline is 96 + 8 a frame; the view has no frames of its
    /// own, and its sample takes them from the chain as the map holds it.
    #[test]
    fn a_chain_by_id_is_one_word_and_its_sample_takes_the_chain_given() {
        let key = ChainKey {
            hash: 0x1234_5678_9abc_def0,
            kbytes: 16,
            ubytes: 24,
        };
        let by_id = HitRecord {
            regs: None,
            insn: None,
            chain: Some(key),
            kernel_stack: vec![],
            user_stack: vec![],
            ..record()
        };
        let bytes = encode(&by_id);
        assert_eq!(bytes.len(), OFF_STACKS as usize);
        assert_eq!(
            &bytes[72..88],
            &key.bytes()[..],
            "the key as the map holds it"
        );
        let got = decode(&bytes).unwrap();
        assert_eq!(got.chain, Some(key));
        assert_eq!(got.flags & CHAIN_ID, CHAIN_ID);
        assert!(got.kernel_stack.is_empty() && got.user_stack.is_empty());
        let view = HitView::parse(&bytes).unwrap();
        assert!(view.sample(0, 0, Vec::new()).frames.is_empty());
        let (k, u) = (
            [0xffff_ffff_8100_0077u64, 0xffff_ffff_8100_0100],
            [0x401136u64, 0x401200, 0],
        );
        let s = view.sample_along(1, 0, Vec::new(), (k.into_iter(), u.into_iter()));
        let ctx: Vec<_> = s.frames.iter().map(|f| (f.addr, f.context)).collect();
        assert_eq!(
            ctx,
            [
                (k[0], Context::Kernel),
                (k[1], Context::Kernel),
                (u[0], Context::User),
                (u[1], Context::User),
            ]
        );
        // With registers the key follows them.
        let with_regs = HitRecord {
            chain: Some(key),
            kernel_stack: vec![],
            user_stack: vec![],
            ..record()
        };
        let bytes = encode(&with_regs);
        assert_eq!(bytes.len(), OFF_STACKS_REGS as usize);
        assert_eq!(decode(&bytes).unwrap().chain, Some(key));
        // Inline, the same record is longer by the frames.
        let inline = HitRecord {
            regs: None,
            insn: None,
            ..record()
        };
        assert_eq!(encode(&inline).len(), OFF_STACKS as usize + 8 * 3);
    }

    /// A CHAIN_ID record cut in its key, or whose lengths are more than a chain holds, is an error.
    #[test]
    fn a_short_or_lying_chain_id_is_an_error() {
        let key = ChainKey {
            hash: 7,
            kbytes: 0,
            ubytes: 8,
        };
        let bytes = encode(&HitRecord {
            regs: None,
            insn: None,
            chain: Some(key),
            ..record()
        });
        assert!(decode(&bytes[..80]).is_err());
        let mut lying = bytes.clone();
        let at = OFF_CHAIN_KEY as usize + 8;
        lying[at..at + 4].copy_from_slice(&(8 * MAX_FRAMES as u32 + 8).to_ne_bytes());
        assert!(decode(&lying).is_err());
    }
}
