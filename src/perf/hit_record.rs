//! The hit record: what the in-kernel hit program ([`crate::perf::bpf::hit`]) writes for each hit it keeps,
//! as one record of its CPU's BPF ring buffer ([`crate::perf::bpf_ring`]). Its layout (below, native-endian) and its pure decoding into the
//! [`Sample`] the rest of the tracer reads, so the decoder is tested on bytes without a kernel.
//!
//! ```text
//! off   size  field
//!   0      4  flags: VALUES, VALUE_KNOWN, OLDS, OLD_KNOWN, CGROUP_KNOWN, REGS_KNOWN, INSN_KNOWN,
//!             USER_MODE, CHAIN_ID, COMM_KNOWN, IP_IN_CHAIN
//!   4      4  lost: records the CPU's ring had no room for so far, before this one (wrapping)
//!   8      8  pid_tgid (tgid << 32 | tid), from bpf_get_current_pid_tgid
//!  16      8  time: CLOCK_MONOTONIC ns at the trap (bpf_ktime_get_ns)
//!  24      8  addr: the breakpoint's address
//!  32      8  chain: with CHAIN_ID, the hash the watch's `chains` map keys the call chain by
//!  40         then each field its flag names, in this order ([`Layout`]):
//!          8  VALUES: value (the watched bytes read at the trap; VALUE_KNOWN says it was)
//!          8  OLDS (`--value`, `--if`): old (the value before, for this target and process; OLD_KNOWN
//!             says there was one)
//!          8  CGROUP_KNOWN: the writer's cgroup id (bpf_get_current_cgroup_id)
//!        168  REGS_KNOWN (`--value`: the store's value is decoded from them): the trap's `struct pt_regs`
//!             (21 words, x86-64 order),
//!         16  then insn: the 16 bytes that end at the trap ip (INSN_KNOWN says they were read)
//!         16  COMM_KNOWN: the writer's name as the kernel keeps it, NUL-padded
//!          8  ip: the trap ip (the instruction after the store), unless IP_IN_CHAIN: the chain's first
//!             frame is the trap ip
//!             without CHAIN_ID (the chain inline):
//!          8  the kernel and user stacks' lengths in bytes (u32 each),
//!          -  then the kernel return addresses, then the user ones
//! ```
//!
//! A plain kept hit is 40 bytes: the header alone. The program leaves out what the tracer knows:
//! - the call chain: the program stores each distinct chain once in the watch's `chains` map
//!   ([`crate::perf::bpf::totals`], where the in-kernel totals name chains by the same hash) and the record
//!   carries the hash; the tracer reads each distinct chain once from the map, on the first record that
//!   names it. A chain the map has no room for (or whose insert failed) comes inline, with the name and
//!   the ip, as does every record of a program built without totals: the flag says which, and no record
//!   is ever without its chain;
//! - the ip, where the chain starts with it (a user-mode trap's walk and the kernel's stack both do);
//! - the name, unless it differs from the name of the last record the CPU's ring took from this watch
//!   (another thread, or the same one renamed): the program keeps that writer and name in its per-CPU
//!   scratch entry, and forgets them when a record is lost, so the next one carries its name again. The
//!   reader keeps the same per ring, so a record without a name is its ring's previous writer's;
//! - value, old, registers and cgroup where the program's spec does not read them.
//!
//! `lost` is a running count the program keeps in its per-CPU scratch entry, where the record is built:
//! a kept hit pays nothing for it, a hit the ring had no room for adds one, and the reader learns of a
//! loss in order, from the next record that fits (and at the end, from the program's `stats`). It is 32
//! bits and wraps: the reader takes the difference from the last count it read.

use crate::perf::bpf::kernel::pt_regs;
use crate::perf::record::{Context, DecodeError, Frame, Sample, RECORD_SAMPLE};

/// Flag: `value` was read. (The value code's bit, [`crate::perf::bpf::program`]'s: the hit program's
/// flags start as that code leaves them.)
pub const VALUE_KNOWN: u32 = 1;
/// Flag: `old` is the value before (else this is the first hit of its key).
pub const OLD_KNOWN: u32 = 2;
/// Flag: the record has the value word (the program reads the watched bytes).
pub const VALUES: u32 = 1 << 2;
/// Flag: the record has the old word (the program keeps each key's last value).
pub const OLDS: u32 = 1 << 10;
/// Flag: the record carries the writer's cgroup id.
pub const CGROUP_KNOWN: u32 = 1 << 3;
/// Flag: the record carries `regs` and `insn`.
pub const REGS_KNOWN: u32 = 1 << 4;
/// Flag: `insn` holds the bytes before the trap ip.
pub const INSN_KNOWN: u32 = 1 << 5;
/// Flag: the writer was in user space at the trap.
pub const USER_MODE: u32 = 1 << 6;
/// Flag: the record names its call chain by its hash (the `chains` map holds it), not its words.
pub const CHAIN_ID: u32 = 1 << 7;
/// Flag: the record carries the writer's name.
pub const COMM_KNOWN: u32 = 1 << 8;
/// Flag: the trap ip is the call chain's first frame, and the record does not carry it.
pub const IP_IN_CHAIN: u32 = 1 << 9;

pub const OFF_FLAGS: i16 = 0;
pub const OFF_LOST: i16 = 4;
pub const OFF_PID_TGID: i16 = 8;
pub const OFF_TIME: i16 = 16;
pub const OFF_ADDR: i16 = 24;
/// With CHAIN_ID: the chain's hash ([`ChainKey`]).
pub const OFF_CHAIN: i16 = 32;
/// The fixed header: every record has it.
pub const HEADER: i16 = 40;

/// Bytes of instruction kept before the trap ip: the longest x86 instruction is 15.
pub const INSN_BYTES: usize = 16;
/// Bytes of the writer's name.
pub const COMM_BYTES: usize = 16;
/// Frames kept per stack (kernel, user): the kernel's default `perf_event_max_stack`.
pub const MAX_FRAMES: usize = 127;
/// The largest record: every optional field and both stacks full.
pub const MAX_LEN: usize = Layout::ALL.stacks() as usize + 2 * 8 * MAX_FRAMES;

/// Where a record's optional fields lie: they follow the header in a fixed order, each present by its
/// flag. The first three are the program's spec's (every record of a program has them or none does);
/// the name, the ip and the inline chain vary from hit to hit, and the program writes them where an
/// inline record has them: name at [`Layout::comm`], ip at [`Layout::ip`], the lengths and the stacks
/// after (a record by id that carries no name moves its ip to [`Layout::comm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub values: bool,
    pub olds: bool,
    pub cgroup: bool,
    pub regs: bool,
}

impl Layout {
    /// Every field the spec may ask for.
    pub const ALL: Layout = Layout {
        values: true,
        olds: true,
        cgroup: true,
        regs: true,
    };

    /// The layout a record's flags describe.
    pub const fn of(flags: u32) -> Layout {
        Layout {
            values: flags & VALUES != 0,
            olds: flags & OLDS != 0,
            cgroup: flags & CGROUP_KNOWN != 0,
            regs: flags & REGS_KNOWN != 0,
        }
    }

    /// The flags that say these fields are there.
    pub const fn flags(&self) -> u32 {
        (if self.values { VALUES } else { 0 })
            | (if self.olds { OLDS } else { 0 })
            | (if self.cgroup { CGROUP_KNOWN } else { 0 })
            | (if self.regs { REGS_KNOWN } else { 0 })
    }

    pub const fn value(&self) -> i16 {
        HEADER
    }

    pub const fn old(&self) -> i16 {
        HEADER + if self.values { 8 } else { 0 }
    }

    pub const fn cgroup(&self) -> i16 {
        self.old() + if self.olds { 8 } else { 0 }
    }

    pub const fn regs(&self) -> i16 {
        self.cgroup() + if self.cgroup { 8 } else { 0 }
    }

    pub const fn insn(&self) -> i16 {
        self.regs() + 8 * pt_regs::WORDS as i16
    }

    /// The end of the spec's fields: where the name goes.
    pub const fn comm(&self) -> i16 {
        self.regs()
            + if self.regs {
                (8 * pt_regs::WORDS + INSN_BYTES) as i16
            } else {
                0
            }
    }

    /// The ip of a record that carries its name.
    pub const fn ip(&self) -> i16 {
        self.comm() + COMM_BYTES as i16
    }

    /// An inline chain's lengths, then its words.
    pub const fn lengths(&self) -> i16 {
        self.ip() + 8
    }

    pub const fn stacks(&self) -> i16 {
        self.lengths() + 8
    }
}

/// A `chains` key: the chain's hash. (Its value holds the stacks' lengths, then the words.)
pub const CHAIN_KEY: u32 = 8;

/// The in-kernel totals' `counts` key ([`crate::perf::bpf::totals`]), made of the record's fields:
/// pid_tgid (u64), the chain key, the writer's name (16 bytes), the writer's cgroup id (u64; 0, which
/// names no cgroup, where the record does not carry it). Here, beside the fields, because both the
/// counting code and the scratch entry that keeps a CPU's pending key ([`crate::perf::bpf::emit`]) lay
/// it out.
pub const COUNT_KEY: u32 = 8 + CHAIN_KEY + COMM_BYTES as u32 + 8;

/// The id of a chain as the program keys it (the totals' `chains` map) and a record that names its chain
/// carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChainKey {
    pub hash: u64,
}

impl ChainKey {
    pub fn parse(b: &[u8]) -> Option<ChainKey> {
        Some(ChainKey {
            hash: u64::from_ne_bytes(b.get(0..8)?.try_into().ok()?),
        })
    }

    /// The key as the map holds it.
    pub fn bytes(&self) -> [u8; CHAIN_KEY as usize] {
        self.hash.to_ne_bytes()
    }
}

/// The kernel and user return addresses in a `chains` value (the two lengths in bytes, u32 each, then
/// the words), each innermost first; `None` when the lengths do not fit it.
pub fn split_chain(value: &[u8]) -> Option<(Vec<u64>, Vec<u64>)> {
    let (k, u) = chain_lengths(value)?;
    let words: Vec<u64> = addrs(value.get(8..)?).take(k + u).collect();
    (words.len() == k + u).then(|| (words[..k].to_vec(), words[k..].to_vec()))
}

/// The kernel and user frame counts of a lengths word, each at most [`MAX_FRAMES`].
fn chain_lengths(b: &[u8]) -> Option<(usize, usize)> {
    let k = u32::from_ne_bytes(b.get(0..4)?.try_into().ok()?) as usize / 8;
    let u = u32::from_ne_bytes(b.get(4..8)?.try_into().ok()?) as usize / 8;
    (k <= MAX_FRAMES && u <= MAX_FRAMES).then_some((k, u))
}

/// A hit record's fields, its writer's name a `Name` and its stacks each a `Stack`: as the record lies in
/// the ring, a [`HitView`]; owned, for tests, a `HitRecord`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit<Name, Stack> {
    /// The record's flags (building one to encode: those the fields below do not imply; the encoder
    /// adds those).
    pub flags: u32,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub addr: u64,
    pub value: Option<u64>,
    pub old: Option<u64>,
    /// The writer's cgroup id (a program built to read it).
    pub cgroup: Option<u64>,
    /// The writer's name as the kernel keeps it, without the NUL padding; `None`: the record carries
    /// none (the writer is the previous record's of this ring, under the same name).
    pub comm: Option<Name>,
    /// The trap ip (the instruction after the store); `None` (IP_IN_CHAIN): the call chain's first frame.
    pub ip: Option<u64>,
    /// Records the CPU's ring had no room for before this one, since the program was loaded (wrapping).
    pub lost: u32,
    /// The trap's registers (a record with REGS_KNOWN).
    pub regs: Option<[u64; pt_regs::WORDS]>,
    pub insn: Option<[u8; INSN_BYTES]>,
    /// A record with CHAIN_ID: the key its call chain is stored under in the kernel's `chains` map (its
    /// stacks are then empty, and not encoded).
    pub chain: Option<ChainKey>,
    /// The kernel return addresses, innermost first.
    pub kernel_stack: Stack,
    /// The user return addresses, innermost first.
    pub user_stack: Stack,
}

/// A hit record as it lies in the ring: its fields decoded, its name and stacks still the ring's bytes
/// (native-endian words), so the tracer turns a record into a [`Sample`] without allocating (a flood
/// reads 100,000s a second).
pub type HitView<'a> = Hit<&'a [u8], &'a [u8]>;

/// The record is shorter than its fields (or its stack lengths) say.
fn short(need: usize, raw: &[u8]) -> DecodeError {
    DecodeError::Truncated {
        kind: RECORD_SAMPLE,
        need,
        have: raw.len(),
    }
}

fn addrs(stack: &[u8]) -> impl Iterator<Item = u64> + '_ {
    stack
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
}

/// Reads a record front to back: each field where the ones before it end.
struct Cursor<'a> {
    raw: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(len)
            .ok_or_else(|| short(usize::MAX, self.raw))?;
        let b = self
            .raw
            .get(self.at..end)
            .ok_or_else(|| short(end, self.raw))?;
        self.at = end;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_ne_bytes(
            self.bytes(4)?.try_into().unwrap_or([0; 4]),
        ))
    }

    fn word(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_ne_bytes(
            self.bytes(8)?.try_into().unwrap_or([0; 8]),
        ))
    }
}

impl<'a> HitView<'a> {
    /// Reads one hit record's raw data.
    pub fn parse(raw: &'a [u8]) -> Result<HitView<'a>, DecodeError> {
        let mut c = Cursor { raw, at: 0 };
        let flags = c.u32()?;
        let lost = c.u32()?;
        let pid_tgid = c.word()?;
        let time = c.word()?;
        let addr = c.word()?;
        let chain_hash = c.word()?;
        let has = |flag: u32| flags & flag != 0;
        let value = has(VALUES).then(|| c.word()).transpose()?;
        let value = value.filter(|_| has(VALUE_KNOWN));
        let old = has(OLDS).then(|| c.word()).transpose()?;
        let old = old.filter(|_| has(OLD_KNOWN));
        let cgroup = has(CGROUP_KNOWN).then(|| c.word()).transpose()?;
        let (mut regs, mut insn) = (None, None);
        if has(REGS_KNOWN) {
            let mut r = [0u64; pt_regs::WORDS];
            for w in r.iter_mut() {
                *w = c.word()?;
            }
            regs = Some(r);
            let b = c.bytes(INSN_BYTES)?;
            insn = has(INSN_KNOWN).then(|| b.try_into().unwrap_or([0; INSN_BYTES]));
        }
        let comm = match has(COMM_KNOWN) {
            true => {
                let b = c.bytes(COMM_BYTES)?;
                Some(&b[..b.iter().position(|&x| x == 0).unwrap_or(COMM_BYTES)])
            }
            false => None,
        };
        let ip = (!has(IP_IN_CHAIN)).then(|| c.word()).transpose()?;
        let (chain, kernel_stack, user_stack) = if has(CHAIN_ID) {
            (Some(ChainKey { hash: chain_hash }), &raw[..0], &raw[..0])
        } else {
            let (k, u) = chain_lengths(c.bytes(8)?).ok_or_else(|| short(usize::MAX, raw))?;
            (None, c.bytes(8 * k)?, c.bytes(8 * u)?)
        };
        Ok(HitView {
            flags,
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            time,
            addr,
            value,
            old,
            cgroup,
            comm,
            ip,
            lost,
            regs,
            insn,
            chain,
            kernel_stack,
            user_stack,
        })
    }

    /// The hit as the tracer's [`Sample`], its call chain in `frames` (emptied first, its capacity reused):
    /// kernel frames, then user frames, as a perf call chain reads. A zero return address ends the user
    /// chain (the outermost frame's saved frame pointer). A record with [`HitView::chain`] has no frames
    /// of its own: see [`HitView::sample_along`].
    pub fn sample(&self, cpu: u32, id: u64, frames: Vec<Frame>) -> Sample {
        let stacks = (addrs(self.kernel_stack), addrs(self.user_stack));
        self.sample_along(cpu, id, frames, stacks)
    }

    /// [`HitView::sample`] along a call chain given apart from the record (`kernel`, `user` return
    /// addresses, innermost first): the chain a CHAIN_ID record names, as read from the kernel's map.
    /// A record without its ip takes the chain's first frame (none: 0).
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
            ip: self
                .ip
                .or_else(|| frames.first().map(|f| f.addr))
                .unwrap_or(0),
            pid: self.pid,
            tid: self.tid,
            time: self.time,
            addr: self.addr,
            cpu,
            id,
            cgroup: self.cgroup,
            frames,
        }
    }
}

/// One hit record, owned: what tests build records from and compare them with.
#[cfg(any(test, feature = "testing"))]
pub type HitRecord = Hit<String, Vec<u64>>;

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
        cgroup: v.cgroup,
        comm: v.comm.map(|c| String::from_utf8_lossy(c).into_owned()),
        ip: v.ip,
        lost: v.lost,
        regs: v.regs,
        insn: v.insn,
        chain: v.chain,
        kernel_stack: addrs(v.kernel_stack).collect(),
        user_stack: addrs(v.user_stack).collect(),
    })
}

/// Builds a hit record's bytes the way the program lays them out; for tests. The value word is there
/// when it is known or the flags say VALUES, the old word likewise (OLDS).
#[cfg(any(test, feature = "testing"))]
pub fn encode(r: &HitRecord) -> Vec<u8> {
    let set = |b: bool, flag: u32| if b { flag } else { 0 };
    let flags = r.flags
        | set(r.value.is_some(), VALUES)
        | set(r.old.is_some(), OLDS)
        | set(r.value.is_some(), VALUE_KNOWN)
        | set(r.old.is_some(), OLD_KNOWN)
        | set(r.cgroup.is_some(), CGROUP_KNOWN)
        | set(r.regs.is_some(), REGS_KNOWN)
        | set(r.regs.is_some() && r.insn.is_some(), INSN_KNOWN)
        | set(r.chain.is_some(), CHAIN_ID)
        | set(r.comm.is_some(), COMM_KNOWN)
        | set(r.ip.is_none(), IP_IN_CHAIN);
    let mut v = Vec::new();
    let mut put = |x: u64| v.extend_from_slice(&x.to_ne_bytes());
    put(u64::from(flags) | (u64::from(r.lost) << 32));
    put((u64::from(r.pid) << 32) | u64::from(r.tid));
    put(r.time);
    put(r.addr);
    put(r.chain.map_or(0, |k| k.hash));
    if flags & VALUES != 0 {
        put(r.value.unwrap_or(0));
    }
    if flags & OLDS != 0 {
        put(r.old.unwrap_or(0));
    }
    if let Some(cgroup) = r.cgroup {
        put(cgroup);
    }
    if let Some(regs) = &r.regs {
        regs.iter().for_each(|&x| put(x));
    }
    if r.regs.is_some() {
        v.extend_from_slice(&r.insn.unwrap_or([0; INSN_BYTES]));
    }
    if let Some(comm) = &r.comm {
        let mut b = [0u8; COMM_BYTES];
        let n = comm.len().min(COMM_BYTES - 1);
        b[..n].copy_from_slice(&comm.as_bytes()[..n]);
        v.extend_from_slice(&b);
    }
    if let Some(ip) = r.ip {
        v.extend_from_slice(&ip.to_ne_bytes());
    }
    if r.chain.is_none() {
        let (k, u) = (r.kernel_stack.len() as u32, r.user_stack.len() as u32);
        v.extend_from_slice(&(8 * k).to_ne_bytes());
        v.extend_from_slice(&(8 * u).to_ne_bytes());
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
        let mut regs = [0u64; pt_regs::WORDS];
        regs[pt_regs::IP] = 0x401136;
        regs[pt_regs::CS] = 0x33;
        HitRecord {
            flags: USER_MODE,
            pid: 4321,
            tid: 4322,
            time: 5_000_000_000,
            addr: 0x404028,
            value: Some(0x1f4),
            old: None,
            cgroup: None,
            comm: Some("writer".into()),
            ip: Some(0x401136),
            lost: 3,
            regs: Some(regs),
            insn: Some([0x90; INSN_BYTES]),
            chain: None,
            kernel_stack: vec![],
            user_stack: vec![0x401136, 0x401200, 0],
        }
    }

    /// Every combination of the optional fields round-trips, each field where [`Layout`] puts it, and
    /// the record is as long as the fields it has.
    #[test]
    fn round_trips_every_combination_of_fields() {
        let key = ChainKey { hash: 0xfeed_f00d };
        for bits in 0..256u32 {
            let on = |i: u32| bits & (1 << i) != 0;
            let base = record();
            let r = HitRecord {
                flags: USER_MODE | if on(0) { VALUES } else { 0 } | if on(7) { OLDS } else { 0 },
                value: on(1).then_some(7),
                old: on(2).then_some(6),
                cgroup: on(3).then_some(0x1234),
                regs: if on(4) { base.regs } else { None },
                comm: if on(5) { base.comm.clone() } else { None },
                ip: if on(6) { base.ip } else { None },
                chain: (bits % 3 == 0).then_some(key),
                ..base
            };
            let bytes = encode(&r);
            let mut want = r.clone();
            want.flags = decode(&bytes).unwrap().flags;
            if r.chain.is_some() {
                (want.kernel_stack, want.user_stack) = (vec![], vec![]);
            }
            if r.regs.is_none() {
                want.insn = None;
            }
            assert_eq!(decode(&bytes).unwrap(), want, "fields {bits:#b}");
            let layout = Layout::of(want.flags);
            let mut len = layout.comm() as usize;
            len += if r.comm.is_some() { COMM_BYTES } else { 0 };
            len += if r.ip.is_some() { 8 } else { 0 };
            if r.chain.is_none() {
                len += 8 + 8 * (r.kernel_stack.len() + r.user_stack.len());
            }
            assert_eq!(bytes.len(), len, "fields {bits:#b}");
        }
    }

    /// The offsets the program writes at are where the decoder reads: a `--value` record's value at 40,
    /// its registers after the cgroup where there is one, and the name, ip and inline chain after them.
    #[test]
    fn the_layout_is_the_decoders() {
        let r = HitRecord {
            cgroup: Some(0xc9),
            old: Some(0x1f3),
            ..record()
        };
        let bytes = encode(&r);
        let l = Layout::of(decode(&bytes).unwrap().flags);
        let word = |off: i16| u64::from_ne_bytes(bytes[off as usize..][..8].try_into().unwrap());
        assert_eq!(
            (word(l.value()), word(l.old()), word(l.cgroup())),
            (0x1f4, 0x1f3, 0xc9)
        );
        assert_eq!(word(l.regs() + 8 * pt_regs::IP as i16), 0x401136);
        assert_eq!(
            &bytes[l.insn() as usize..][..INSN_BYTES],
            &[0x90; INSN_BYTES]
        );
        assert_eq!(&bytes[l.comm() as usize..][..7], b"writer\0");
        assert_eq!(word(l.ip()), 0x401136);
        assert_eq!(word(l.lengths()), 24 << 32, "no kernel bytes, 24 user ones");
        assert_eq!(word(l.stacks() + 8), 0x401200);
        assert_eq!(word(OFF_ADDR), 0x404028);
        assert_eq!(MAX_LEN, Layout::ALL.stacks() as usize + 16 * MAX_FRAMES);
    }

    #[test]
    fn becomes_a_sample_with_kernel_then_user_frames_and_no_zero_frame() {
        let mut r = record();
        r.kernel_stack = vec![0xffff_ffff_8100_0077, 0xffff_ffff_8100_0100];
        r.ip = None;
        let bytes = encode(&r);
        let s = HitView::parse(&bytes).unwrap().sample(1, 9, Vec::new());
        assert_eq!(
            (s.ip, s.pid, s.tid, s.cpu, s.id),
            (0xffff_ffff_8100_0077, 4321, 4322, 1, 9),
            "the ip is the chain's first frame"
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
        for cut in [0, 7, 39, 63, 200, bytes.len() - 25, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let lengths = Layout::of(decode(&bytes).unwrap().flags).lengths() as usize;
        for lie in [u32::MAX, 8 * MAX_FRAMES as u32 + 8] {
            let mut lying = bytes.clone();
            lying[lengths + 4..lengths + 8].copy_from_slice(&lie.to_ne_bytes());
            assert!(decode(&lying).is_err(), "{lie} user bytes");
        }
        // No flags: the fixed header, then an ip and an inline chain read from the value's words.
        let unknown = {
            let mut b = bytes;
            b[..4].copy_from_slice(&0u32.to_ne_bytes());
            decode(&b)
        };
        if let Ok(u) = unknown {
            assert_eq!((u.value, u.old, u.insn, u.comm), (None, None, None, None));
        }
    }

    /// A plain kept hit whose chain the map holds, whose ip is the chain's first frame, and whose writer
    /// is the ring's previous one is the 40-byte header alone; its sample takes its frames and ip from
    /// the chain given.
    #[test]
    fn a_plain_hit_by_id_is_the_header_alone() {
        let key = ChainKey {
            hash: 0x1234_5678_9abc_def0,
        };
        let plain = HitRecord {
            flags: USER_MODE,
            value: None,
            old: None,
            comm: None,
            ip: None,
            regs: None,
            insn: None,
            chain: Some(key),
            kernel_stack: vec![],
            user_stack: vec![],
            ..record()
        };
        let bytes = encode(&plain);
        assert_eq!(bytes.len(), HEADER as usize);
        assert_eq!(
            &bytes[32..40],
            &key.bytes()[..],
            "the key as the map holds it"
        );
        let got = decode(&bytes).unwrap();
        assert_eq!((got.chain, got.comm, got.ip), (Some(key), None, None));
        let view = HitView::parse(&bytes).unwrap();
        let none = view.sample(0, 0, Vec::new());
        assert!(none.frames.is_empty());
        assert_eq!(none.ip, 0, "no chain, no ip");
        let (k, u) = ([0xffff_ffff_8100_0077u64], [0x401136u64, 0x401200, 0]);
        let s = view.sample_along(1, 0, Vec::new(), (k.into_iter(), u.into_iter()));
        let ctx: Vec<_> = s.frames.iter().map(|f| (f.addr, f.context)).collect();
        assert_eq!(
            ctx,
            [
                (k[0], Context::Kernel),
                (u[0], Context::User),
                (u[1], Context::User),
            ]
        );
        assert_eq!((s.ip, s.cgroup), (k[0], None));
        // The name and an ip the chain does not start with: 24 more bytes; a cgroup id 8.
        let named = HitRecord {
            comm: Some("w".into()),
            ip: Some(0x401136),
            cgroup: Some(5),
            ..plain
        };
        assert_eq!(encode(&named).len(), HEADER as usize + 32);
        let s = HitView::parse(&encode(&named)).unwrap().sample_along(
            1,
            0,
            Vec::new(),
            (k.into_iter(), u.into_iter()),
        );
        assert_eq!(s.ip, 0x401136, "a carried ip is the ip");
        assert_eq!(s.cgroup, Some(5), "the cgroup id goes into the sample");
    }

    /// A `chains` value holds the two lengths, then the words; lengths past what it holds, or past
    /// [`MAX_FRAMES`], are no chain.
    #[test]
    fn a_chains_value_splits_by_its_lengths() {
        let mut value = Vec::new();
        value.extend_from_slice(&16u32.to_ne_bytes());
        value.extend_from_slice(&8u32.to_ne_bytes());
        for w in [1u64, 2, 3, 0, 0] {
            value.extend_from_slice(&w.to_ne_bytes());
        }
        assert_eq!(split_chain(&value), Some((vec![1, 2], vec![3])));
        let mut lying = value.clone();
        lying[..4].copy_from_slice(&80u32.to_ne_bytes());
        assert_eq!(split_chain(&lying), None);
        lying[..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(split_chain(&lying), None);
        assert_eq!(split_chain(&value[..6]), None);
    }
}
