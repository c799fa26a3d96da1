//! In-kernel totals: every hit the hit program ([`super::hit`]) keeps is counted in the kernel, before its
//! record is handed to the ring, so the reports that aggregate (the summary, `--folded`, `--flamegraph`,
//! the per-thread and per-chain tallies) stay exact when a full ring drops records.
//!
//! Per watch, four maps:
//! - `chains` (`BPF_MAP_TYPE_HASH`, [`CHAINS_MAX`] entries): a call chain by its id, stored once, the
//!   first time the id is seen: the two stacks' lengths, then the chain's words ([`CHAIN_VALUE`] bytes:
//!   kernel return addresses, then user ones), as the inline record has them. The id ([`ChainKey`]) is
//!   a 64-bit hash of the lengths and the words ([`chain_hash`], computed by the program over the
//!   lengths and stacks it already wrote into the record). A kernel
//!   stack map (`bpf_get_stackid`) was not taken: its id is a bucket of a table of a few thousand, two
//!   chains meeting in one bucket either lose the second (`-EEXIST`) or overwrite the first
//!   (`BPF_F_REUSE_STACKID`, which makes every count under the old id name the new chain), and its user
//!   stack walk takes the page fault at the null frame pointer that the program's own walk avoids (~1 us
//!   a hit here). Two different chains with one 64-bit hash are not told apart:
//!   at the map's [`CHAINS_MAX`] chains, about one run in 10^13 (n^2 / 2^65). The hit record names its
//!   chain by this same key once the map holds it ([`crate::perf::hit_record`]), so the tracer reads each
//!   distinct chain once ([`Totals::chain`]), and a chain the map has no room for goes inline.
//! - `counts` (`BPF_MAP_TYPE_HASH`, [`COUNTS_MAX`] entries): [`CountKey`] (thread, process, chain id,
//!   the writer's name, and with `--cgroup` the writer's cgroup id) to the number of hits, added to
//!   atomically (`BPF_ATOMIC` add: two CPUs may count the same key at once). The cgroup is in the key,
//!   not in a map of its own, so the by-cgroup counts cost a hit two instructions (the id the record
//!   already carries, copied into the key) and no map operation; a thread that moves between cgroups
//!   has one count in each.
//! - `values` (`--value` only, [`VALUES_MAX`] entries): the value the program read at the trap to its
//!   count; a watch written more distinct values than the summary lists (32) fills it, and a value it
//!   has no room for is counted in [`STAT_VALUES_OVER`].
//! - `stats` (`BPF_MAP_TYPE_PERCPU_ARRAY`): [`STAT_KEPT`] every kept hit, by CPU; [`STAT_UNCOUNTED`] those
//!   `counts` had no room for (in no total: the only hits the summary then reports as lost);
//!   [`STAT_NO_CHAIN`] those whose chain `chains` had no room for (counted, their chain unknown).
//!
//! Sizes: `counts` takes ~100 bytes an entry (key, value and the kernel's element), 3.2 MiB at
//! [`COUNTS_MAX`]; `chains` ~2.1 KiB an entry, 2.1 MiB at [`CHAINS_MAX`]; both allocated as keys come
//! where the kernel lets a perf-event program use such maps (Linux 6.1), preallocated before.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use crate::perf::bpf::insn::{Alu, Asm, Cond, Reg, DW, FP, R0, R1, R2, R3, R4, W};
use crate::perf::bpf::kernel::{Helper, MapType, EEXIST, NOEXIST};
use crate::perf::bpf::layout;
use crate::perf::bpf::{create_map, seq};
use crate::perf::hit_record::{self as rec, ChainKey, Layout, CHAIN_KEY};
use crate::perf::sys;

/// `BPF_F_NO_PREALLOC`.
const NO_PREALLOC: u32 = 1;

/// Words a chain holds at most: both stacks full.
pub const CHAIN_WORDS: usize = 2 * rec::MAX_FRAMES;
/// A `chains` value: the two stacks' lengths in bytes (u32 each), then the words of both stacks (only the
/// first `kbytes + ubytes` of them are the chain's).
pub const CHAIN_VALUE: u32 = 8 + 8 * CHAIN_WORDS as u32;
/// A `counts` key ([`rec::COUNT_KEY`]: the record's fields it is made of are laid out there).
pub use rec::COUNT_KEY;
/// Where a `counts` key holds the cgroup id.
const KEY_CGROUP: i16 = 8 + CHAIN_KEY as i16 + rec::COMM_BYTES as i16;
/// Distinct chains kept per watch.
pub const CHAINS_MAX: u32 = 1024;
/// Distinct (thread, chain, name) counted per watch: a process of 25,000 threads that each write along
/// one chain fits.
pub const COUNTS_MAX: u32 = 32768;
/// Distinct values counted per watch: more than the summary lists, so a full map means "too many".
pub const VALUES_MAX: u32 = 64;

/// `stats` slots.
pub const STAT_KEPT: u32 = 0;
pub const STAT_UNCOUNTED: u32 = 1;
pub const STAT_NO_CHAIN: u32 = 2;
pub const STAT_VALUES_OVER: u32 = 3;
/// Traps after `--count`'s N-th hit: not kept, but the breakpoint counted them, so the audit must too.
pub const STAT_BEYOND_COUNT: u32 = 4;
pub const STATS: u32 = 5;

/// The hash's multiplier (2^64 over the golden ratio) and starting value.
const MUL: u64 = 0x9e37_79b9_7f4a_7c15;
const SEED: u64 = 0x6b73_7977_6174_6368;

/// The counting code's stack slots, in the frame of the program that counts.
#[derive(Debug, Clone, Copy)]
pub struct TotalsSlots {
    /// A `counts` key ([`COUNT_KEY`] bytes), its chain key from its byte 8.
    key: i16,
    /// The 1 a new count starts at.
    one: i16,
    /// A `values` key.
    value_key: i16,
    /// A `stats` or `limit` index.
    stat_key: i16,
}

impl TotalsSlots {
    pub fn new(a: &mut Asm) -> TotalsSlots {
        TotalsSlots {
            key: a.slot(COUNT_KEY as u16).off(),
            one: a.slot(8).off(),
            value_key: a.slot(8).off(),
            stat_key: a.slot(4).off(),
        }
    }
}

/// The maps the program counts into, by descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TotalsMaps {
    pub chains: i32,
    pub counts: i32,
    /// `--value`: counts by value read.
    pub values: Option<i32>,
    pub stats: i32,
    /// `--count N`: a `BPF_MAP_TYPE_ARRAY` of one u64 every watch's program claims a hit from, and N; a
    /// hit past the N-th is not kept ([`claim`]).
    pub limit: Option<(i32, u64)>,
}

/// One watch's totals maps, owned.
pub struct Totals {
    chains: OwnedFd,
    counts: OwnedFd,
    values: Option<OwnedFd>,
    stats: OwnedFd,
}

/// What the kernel counted for one watch, read at the end.
#[derive(Debug, Default)]
pub struct Counted {
    /// Hits by (thread, chain, name).
    pub counts: Vec<(CountKey, u64)>,
    /// The chains `counts` names, kernel and user return addresses (innermost first); a chain the map
    /// had no room for is missing.
    pub chains: HashMap<ChainKey, (Vec<u64>, Vec<u64>)>,
    /// `--value`: (value, hits), and whether a value found no room (more distinct values than the map holds).
    pub values: Option<(Vec<(u64, u64)>, bool)>,
    /// Every kept hit, by CPU number.
    pub kept_by_cpu: Vec<u64>,
    /// Kept hits in no count (`counts` was full), by CPU number.
    pub uncounted_by_cpu: Vec<u64>,
    /// Hits counted whose chain `chains` had no room for.
    pub no_chain: u64,
}

impl Totals {
    /// Creates one watch's maps; `values`: `--value`, counts by value too. The chains and counts are
    /// allocated as keys come (`BPF_F_NO_PREALLOC`): a watch that counts a few chains does not pay for
    /// 33,000 at its start (~1 ms here).
    pub fn create(values: bool) -> io::Result<Totals> {
        Totals::create_with(values, NO_PREALLOC)
    }

    /// [`Totals::create`] with every element allocated up front: before Linux 6.1 a perf-event program
    /// may use only preallocated hash maps.
    pub fn create_preallocated(values: bool) -> io::Result<Totals> {
        Totals::create_with(values, 0)
    }

    fn create_with(values: bool, flags: u32) -> io::Result<Totals> {
        let hash = |key, value, max, name| {
            sys::bpf_map_create_flags(MapType::Hash as u32, (key, value, max), flags, name)
        };
        Ok(Totals {
            chains: hash(CHAIN_KEY, CHAIN_VALUE, CHAINS_MAX, "ksw_chains")?,
            counts: hash(COUNT_KEY, 8, COUNTS_MAX, "ksw_counts")?,
            values: match values {
                true => Some(create_map(MapType::Hash, (8, 8), VALUES_MAX, "ksw_values")?),
                false => None,
            },
            stats: create_map(MapType::PercpuArray, (4, 8), STATS, "ksw_tstats")?,
        })
    }

    /// The descriptors the hit program is built with.
    pub fn fds(&self) -> TotalsMaps {
        TotalsMaps {
            chains: self.chains.as_raw_fd(),
            counts: self.counts.as_raw_fd(),
            values: self.values.as_ref().map(|v| v.as_raw_fd()),
            stats: self.stats.as_raw_fd(),
            limit: None,
        }
    }

    /// Traps after `--count`'s N-th hit, by CPU number: the breakpoints counted them, the program kept none.
    pub fn beyond_count_by_cpu(&self) -> io::Result<Vec<u64>> {
        sys::bpf_map_lookup_percpu_u64(self.stats.as_fd(), STAT_BEYOND_COUNT)
    }

    /// Every kept hit so far, all CPUs together (what `--count` compares with while running).
    pub fn kept(&self) -> io::Result<u64> {
        Ok(
            sys::bpf_map_lookup_percpu_u64(self.stats.as_fd(), STAT_KEPT)?
                .iter()
                .sum(),
        )
    }

    /// The call chain stored under `key` (kernel, then user return addresses, innermost first): what a
    /// hit record with [`rec::CHAIN_ID`] names. `None` when the map does not hold it.
    pub fn chain(&self, key: ChainKey) -> io::Result<Option<(Vec<u64>, Vec<u64>)>> {
        let mut value = vec![0u8; CHAIN_VALUE as usize];
        if !sys::bpf_map_lookup(self.chains.as_fd(), &key.bytes(), &mut value)? {
            return Ok(None);
        }
        Ok(rec::split_chain(&value))
    }

    /// Reads everything counted (the events disabled: nothing is added meanwhile).
    pub fn read(&self) -> io::Result<Counted> {
        let stats = |slot| sys::bpf_map_lookup_percpu_u64(self.stats.as_fd(), slot);
        let mut counts = Vec::new();
        for (k, v) in entries(&self.counts, COUNT_KEY as usize, 8)? {
            if let (Some(k), Some(n)) = (CountKey::parse(&k), u64_at(&v)) {
                counts.push((k, n));
            }
        }
        let mut chains = HashMap::new();
        for (k, v) in entries(&self.chains, CHAIN_KEY as usize, CHAIN_VALUE as usize)? {
            if let Some(key) = ChainKey::parse(&k) {
                if let Some(words) = rec::split_chain(&v) {
                    chains.insert(key, words);
                }
            }
        }
        let values = match &self.values {
            Some(map) => {
                let v: Vec<(u64, u64)> = entries(map, 8, 8)?
                    .iter()
                    .filter_map(|(k, v)| Some((u64_at(k)?, u64_at(v)?)))
                    .collect();
                let over = stats(STAT_VALUES_OVER)?.iter().sum::<u64>() > 0;
                Some((v, over))
            }
            None => None,
        };
        Ok(Counted {
            counts,
            chains,
            values,
            kept_by_cpu: stats(STAT_KEPT)?,
            uncounted_by_cpu: stats(STAT_UNCOUNTED)?,
            no_chain: stats(STAT_NO_CHAIN)?.iter().sum(),
        })
    }
}

impl Counted {
    /// Adds a CPU's pending hits ([`pending`]) to the count of their key: what the program had not yet
    /// added to `counts` when the events were disabled.
    pub fn add_pending(&mut self, key: CountKey, n: u64) {
        match self.counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, total)) => *total += n,
            None => self.counts.push((key, n)),
        }
    }
}

/// The pending count in one CPU's scratch entry (its bytes, as the tracer reads them): the `counts` key
/// and the hits under it the program has not yet added to the map; `None` when there are none.
pub fn pending(scratch: &[u8]) -> Option<(CountKey, u64)> {
    let at = |off: i16, len: usize| scratch.get(off as usize..)?.get(..len);
    let n = u64_at(at(layout::OFF_PENDING_N, 8)?)?;
    if n == 0 {
        return None;
    }
    Some((
        CountKey::parse(at(layout::OFF_PENDING_KEY, COUNT_KEY as usize)?)?,
        n,
    ))
}

fn u64_at(b: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(0..8)?.try_into().ok()?))
}

/// Every (key, value) of a hash map.
fn entries(map: &OwnedFd, key_len: usize, value_len: usize) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut key: Option<Vec<u8>> = None;
    let mut next = vec![0u8; key_len];
    // Bounded: a key deleted under the walk would restart it; nothing deletes here.
    for _ in 0..=(COUNTS_MAX as usize + CHAINS_MAX as usize) {
        if !sys::bpf_map_next_key(map.as_fd(), key.as_deref(), &mut next)? {
            break;
        }
        let mut value = vec![0u8; value_len];
        if sys::bpf_map_lookup(map.as_fd(), &next, &mut value)? {
            out.push((next.clone(), value));
        }
        key = Some(next.clone());
    }
    Ok(out)
}

/// One `counts` key: who wrote along which chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CountKey {
    pub pid: u32,
    pub tid: u32,
    pub chain: ChainKey,
    /// The writer's name as the kernel keeps it, NUL-padded.
    pub comm: [u8; 16],
    /// The writer's cgroup id, where the program read it (`--cgroup`).
    pub cgroup: Option<u64>,
}

impl CountKey {
    pub fn parse(b: &[u8]) -> Option<CountKey> {
        let pid_tgid = u64::from_ne_bytes(b.get(0..8)?.try_into().ok()?);
        Some(CountKey {
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            chain: ChainKey::parse(b.get(8..16)?)?,
            comm: b.get(16..32)?.try_into().ok()?,
            cgroup: Some(u64_at(b.get(32..40)?)?).filter(|&id| id != 0),
        })
    }

    /// The name without its NUL padding.
    pub fn comm(&self) -> &[u8] {
        let end = self.comm.iter().position(|&b| b == 0).unwrap_or(16);
        &self.comm[..end]
    }
}

/// The chain hash the program computes over a chain: the word of its two lengths in bytes (kernel's in
/// the low half), then its words (kernel then user), as an inline record has them.
///
/// FNV-1a over 64-bit words (one xor and one multiply a word: four instructions of the program's unrolled
/// loop, which the verifier walks at every start), then a final mix so that every bit of every word
/// reaches the low bits too.
pub fn chain_hash(kernel: &[u64], user: &[u64]) -> u64 {
    let lengths = (8 * kernel.len() as u64) | ((8 * user.len() as u64) << 32);
    let mut h = SEED;
    for &w in std::iter::once(&lengths).chain(kernel).chain(user) {
        h = (h ^ w).wrapping_mul(MUL);
    }
    h ^= h >> 32;
    h = h.wrapping_mul(MUL);
    h ^ (h >> 29)
}

/// `--count N`: the shared claims counter, one u64 in a `BPF_MAP_TYPE_ARRAY` all watches' programs add to.
pub struct Limit {
    map: OwnedFd,
    pub count: u64,
}

impl Limit {
    pub fn create(count: u64) -> io::Result<Limit> {
        Ok(Limit {
            map: create_map(MapType::Array, (4, 8), 1, "ksw_limit")?,
            count,
        })
    }

    /// What the programs are built with.
    pub fn fds(&self) -> (i32, u64) {
        (self.map.as_raw_fd(), self.count)
    }

    /// Whether the programs kept their N-th hit: none after it is kept.
    pub fn reached(&self) -> io::Result<bool> {
        let mut v = [0u8; 8];
        sys::bpf_map_lookup(self.map.as_fd(), &0u32.to_ne_bytes(), &mut v)?;
        Ok(u64::from_ne_bytes(v) >= self.count)
    }
}

/// `--count N` (with `maps.limit`): claims this hit, one added atomically to the shared counter; a hit
/// whose claim comes after the N-th returns 0 here, not kept, counted only in [`STAT_BEYOND_COUNT`] (the run ends at the N-th,
/// as the tracer learns from [`Limit::reached`]). So the totals hold exactly N hits however many CPUs
/// stored at once. r0-r5 clobbered.
pub fn claim(a: &mut Asm, maps: &TotalsMaps, slots: &TotalsSlots) {
    let Some((map, n)) = maps.limit else {
        return;
    };
    let keep = a.label();
    seq::lookup(a, (map, 0, slots.stat_key), keep);
    a.mov_imm(R1, 1).atomic_fetch_add(R0, 0, R1);
    match i32::try_from(n) {
        Ok(n) => a.jump_imm(Cond::Lt, R1, n, keep),
        Err(_) => a.ld_imm64(R2, n).jump(Cond::Lt, R1, R2, keep),
    };
    seq::add_to(a, (maps.stats, STAT_BEYOND_COUNT, slots.stat_key), None);
    a.mov_imm(R0, 0).exit();
    a.bind(keep);
}

/// Counts the hit whose record is in `record` (a kept register; its fields where `layout` puts them, its
/// chain inline): its chain stored once (and the record then naming it by id, [`rec::CHAIN_ID`]), its
/// (thread, chain, name, cgroup) count and with `maps.values` its value's count added to, and `STAT_KEPT`. r6-r9
/// are kept; r0-r5 clobbered.
pub fn count(a: &mut Asm, maps: &TotalsMaps, slots: &TotalsSlots, (record, layout): (Reg, Layout)) {
    let key = slots.key;
    hash_chain(a, record, layout.lengths());
    a.store(DW, FP, key + 8, R1)
        .load(DW, R1, record, rec::OFF_PID_TGID)
        .store(DW, FP, key, R1)
        .load(DW, R1, record, layout.comm())
        .store(DW, FP, key + 16, R1)
        .load(DW, R1, record, layout.comm() + 8)
        .store(DW, FP, key + 24, R1);
    if layout.cgroup {
        a.load(DW, R1, record, layout.cgroup())
            .store(DW, FP, key + KEY_CGROUP, R1);
    } else {
        a.store_imm(DW, FP, key + KEY_CGROUP, 0);
    }
    store_chain(a, maps, slots, (record, layout));
    add_pending(a, maps, slots, record);
    if let (Some(values), true) = (maps.values, layout.values) {
        let unknown = a.label();
        // The flags from the record: the user stack's walk took their register.
        a.load(W, R1, record, rec::OFF_FLAGS)
            .alu_imm(Alu::And, R1, rec::VALUE_KNOWN as i32)
            .jump_imm(Cond::Eq, R1, 0, unknown)
            .load(DW, R1, record, layout.value())
            .store(DW, FP, slots.value_key, R1);
        let over = (maps.stats, STAT_VALUES_OVER);
        let value = Addend::One {
            key: slots.value_key,
        };
        add_count(a, values, slots, (value, over));
        a.bind(unknown);
    }
    seq::add_to(a, (maps.stats, STAT_KEPT, slots.stat_key), None);
}

/// r1 = [`chain_hash`] of the chain in the record at `record` (its lengths word at `lengths`, its words
/// right after); r2-r4 clobbered, no call.
///
/// Unrolled, one exit per word count: the count is read from the record, not kept in a register past the
/// exits, so the verifier finds every exit's state the same and prunes them where they join.
pub fn hash_chain(a: &mut Asm, record: Reg, lengths: i16) {
    let done = a.label();
    let words = lengths + 8;
    a.load(W, R4, record, lengths)
        .load(W, R2, record, lengths + 4)
        .alu(Alu::Add, R4, R2)
        .ld_imm64(R1, SEED)
        .ld_imm64(R3, MUL)
        .load(DW, R2, record, lengths)
        .alu(Alu::Xor, R1, R2)
        .alu(Alu::Mul, R1, R3);
    for i in 0..CHAIN_WORDS as i32 {
        a.jump_imm(Cond::Le, R4, 8 * i, done)
            .load(DW, R2, record, words + 8 * i as i16)
            .alu(Alu::Xor, R1, R2)
            .alu(Alu::Mul, R1, R3);
    }
    a.bind(done);
    a.mov(R2, R1)
        .alu_imm(Alu::Rsh, R2, 32)
        .alu(Alu::Xor, R1, R2)
        .alu(Alu::Mul, R1, R3)
        .mov(R2, R1)
        .alu_imm(Alu::Rsh, R2, 29)
        .alu(Alu::Xor, R1, R2);
}

/// The chain (the record's lengths word and stack words) into `chains` under the chain key (the `counts`
/// key's from its byte 8), unless it is there. Once the map holds it, the record names it by its key
/// instead of carrying it ([`rec::CHAIN_ID`]): the key in the header and the flag set, so the record ends
/// before its chain. A chain the map has no room for stays in the record.
///
/// The CPU's last chain found in the map is kept in the scratch entry ([`layout::OFF_LAST_CHAIN`]): a
/// writer that stores along one chain again and again (the common case, a loop) pays no lookup after its
/// first hit (nothing removes a chain from the map). A chain whose hash is 0 is looked up every time, so
/// the entry's first 0 names no chain.
fn store_chain(
    a: &mut Asm,
    maps: &TotalsMaps,
    slots: &TotalsSlots,
    (record, layout): (Reg, Layout),
) {
    let (known, done, look) = (a.label(), a.label(), a.label());
    let chain_key = slots.key + 8;
    a.load(DW, R1, FP, chain_key)
        .jump_imm(Cond::Eq, R1, 0, look)
        .load(DW, R2, record, layout::OFF_LAST_CHAIN)
        .jump(Cond::Eq, R1, R2, known);
    a.bind(look);
    a.ld_map_fd(R1, maps.chains)
        .stack_addr(R2, chain_key)
        .call(Helper::MapLookupElem)
        .jump_imm(Cond::Ne, R0, 0, known);
    a.ld_map_fd(R1, maps.chains)
        .stack_addr(R2, chain_key)
        .mov(R3, record)
        .alu_imm(Alu::Add, R3, i32::from(layout.lengths()))
        .mov_imm(R4, NOEXIST)
        .call(Helper::MapUpdateElem)
        // Another CPU stored it first: as good.
        .jump_imm(Cond::Eq, R0, 0, known)
        .jump_imm(Cond::Eq, R0, EEXIST, known);
    seq::add_to(a, (maps.stats, STAT_NO_CHAIN, slots.stat_key), None);
    a.goto(done);
    a.bind(known);
    a.load(DW, R1, FP, chain_key)
        .store(DW, record, layout::OFF_LAST_CHAIN, R1)
        .store(DW, record, rec::OFF_CHAIN, R1)
        .load(W, R1, record, rec::OFF_FLAGS)
        .alu_imm(Alu::Or, R1, rec::CHAIN_ID as i32)
        .store(W, record, rec::OFF_FLAGS, R1);
    a.bind(done);
}

/// Counts the hit under the `counts` key at `slots.key` through the CPU's pending count in the scratch
/// entry at `record` ([`layout::OFF_PENDING_KEY`], [`layout::OFF_PENDING_N`]): the same key as the CPU's
/// last hit adds one there, with no map operation; another key first adds the pending hits to `counts`
/// ([`add_count`]) and then becomes the pending key, at one. A writer that stores along one chain
/// again and again (the common case, a loop) so pays five compares a hit instead of a hash lookup and an
/// atomic add (~60 ns a kept hit here: BENCHMARKS.md, #40). The tracer adds each CPU's pending hits to
/// what it reads from `counts` ([`Counted::add_pending`]); it reads them once the events are disabled, so
/// every kept hit is in exactly one of `counts`, a pending count or [`STAT_UNCOUNTED`]. Programs do not
/// nest on a CPU, so the pending count needs no atomic operation.
fn add_pending(a: &mut Asm, maps: &TotalsMaps, slots: &TotalsSlots, record: Reg) {
    let (other, start, done) = (a.label(), a.label(), a.label());
    for word in (0..COUNT_KEY as i16).step_by(8) {
        a.load(DW, R1, FP, slots.key + word)
            .load(DW, R2, record, layout::OFF_PENDING_KEY + word)
            .jump(Cond::Ne, R1, R2, other);
    }
    a.load(DW, R1, record, layout::OFF_PENDING_N)
        .alu_imm(Alu::Add, R1, 1)
        .store(DW, record, layout::OFF_PENDING_N, R1)
        .goto(done);
    a.bind(other);
    a.load(DW, R1, record, layout::OFF_PENDING_N)
        .jump_imm(Cond::Eq, R1, 0, start);
    let pending = (maps.stats, STAT_UNCOUNTED);
    add_count(a, maps.counts, slots, (Addend::Pending { record }, pending));
    a.bind(start);
    for word in (0..COUNT_KEY as i16).step_by(8) {
        a.load(DW, R1, FP, slots.key + word)
            .store(DW, record, layout::OFF_PENDING_KEY + word, R1);
    }
    a.store_imm(DW, record, layout::OFF_PENDING_N, 1);
    a.bind(done);
}

/// What [`add_count`] adds, and under which key: one under the key at a stack offset (a value's count),
/// or a CPU's pending hits under the pending key, both in the scratch entry at `record`.
#[derive(Clone, Copy)]
enum Addend {
    One { key: i16 },
    Pending { record: Reg },
}

impl Addend {
    /// r2 = the key's address.
    fn key(self, a: &mut Asm) {
        match self {
            Addend::One { key } => a.stack_addr(R2, key),
            Addend::Pending { record } => {
                a.mov(R2, record)
                    .alu_imm(Alu::Add, R2, i32::from(layout::OFF_PENDING_KEY))
            }
        };
    }

    /// r3 = the address of the amount as a new entry's value (`one`: a free 8-byte stack slot).
    fn value(self, a: &mut Asm, one: i16) {
        match self {
            Addend::One { .. } => a.store_imm(DW, FP, one, 1).stack_addr(R3, one),
            Addend::Pending { record } => {
                a.mov(R3, record)
                    .alu_imm(Alu::Add, R3, i32::from(layout::OFF_PENDING_N))
            }
        };
    }

    /// `reg` = the amount.
    fn amount(self, a: &mut Asm, reg: Reg) {
        match self {
            Addend::One { .. } => a.mov_imm(reg, 1),
            Addend::Pending { record } => a.load(DW, reg, record, layout::OFF_PENDING_N),
        };
    }
}

/// Adds `addend` to `map`'s u64 under its key, inserting the key when absent; what the map has no room
/// for is added to this CPU's `stats[index]` instead. r0-r5 clobbered.
fn add_count(
    a: &mut Asm,
    map: i32,
    slots: &TotalsSlots,
    (addend, (stats, index)): (Addend, (i32, u32)),
) {
    let (insert, done, failed) = (a.label(), a.label(), a.label());
    let lookup = |a: &mut Asm, missing| {
        a.ld_map_fd(R1, map);
        addend.key(a);
        a.call(Helper::MapLookupElem)
            .jump_imm(Cond::Eq, R0, 0, missing);
    };
    let add = |a: &mut Asm| {
        addend.amount(a, R1);
        a.atomic_add(R0, 0, R1).goto(done);
    };
    lookup(a, insert);
    add(a);
    a.bind(insert);
    a.ld_map_fd(R1, map);
    addend.key(a);
    addend.value(a, slots.one);
    a.mov_imm(R4, NOEXIST)
        .call(Helper::MapUpdateElem)
        .jump_imm(Cond::Eq, R0, 0, done)
        .jump_imm(Cond::Ne, R0, EEXIST, failed);
    // Another CPU inserted it between the lookup and the update: add to theirs.
    lookup(a, failed);
    add(a);
    a.bind(failed);
    seq::lookup(a, (stats, index, slots.stat_key), done);
    a.load(DW, R1, R0, 0);
    addend.amount(a, R2);
    a.alu(Alu::Add, R1, R2).store(DW, R0, 0, R1);
    a.bind(done);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::bpf::insn::Kept;
    use crate::perf::bpf::interp::FakeKernel;

    /// The program's hash, run offline over chains of every length from none to full, is the tracer's.
    #[test]
    fn the_programs_chain_hash_is_the_tracers() {
        for (k, u) in [
            (0usize, 0usize),
            (0, 1),
            (3, 2),
            (0, 5),
            (127, 127),
            (10, 0),
        ] {
            let words: Vec<u64> = (0..(k + u) as u64)
                .map(|i| 0xffff_ffff_8100_0000u64.wrapping_add(i.wrapping_mul(0x1234_5677)))
                .collect();
            let mut m = FakeKernel::with_outputs(1, 0x1000);
            let lengths = rec::Layout::ALL.lengths();
            let record = m.scratch(lengths as usize + 8 + 8 * words.len());
            let at = record + lengths as u64;
            m.write(at, &(8 * k as u32).to_ne_bytes());
            m.write(at + 4, &(8 * u as u32).to_ne_bytes());
            for (i, w) in words.iter().enumerate() {
                m.write(at + 8 + 8 * i as u64, &w.to_ne_bytes());
            }
            let mut a = Asm::new();
            a.ld_imm64(Kept::R7, record);
            hash_chain(&mut a, Kept::R7.into(), lengths);
            a.mov(R0, R1).exit();
            let prog = a.finish().unwrap();
            assert_eq!(
                m.run(&prog),
                chain_hash(&words[..k], &words[k..]),
                "{k} kernel and {u} user words"
            );
        }
        // The lengths are in the hash: the same words split otherwise are another chain.
        assert_ne!(chain_hash(&[1], &[2]), chain_hash(&[1, 2], &[]));
    }

    #[test]
    fn keys_parse_as_the_program_lays_them_out() {
        let mut b = Vec::new();
        b.extend_from_slice(&((7u64 << 32) | 9).to_ne_bytes());
        b.extend_from_slice(&0xabcdu64.to_ne_bytes());
        b.extend_from_slice(b"writer\0\0\0\0\0\0\0\0\0\0");
        b.extend_from_slice(&0x1au64.to_ne_bytes());
        assert_eq!(b.len(), COUNT_KEY as usize);
        let k = CountKey::parse(&b).unwrap();
        assert_eq!((k.pid, k.tid, k.comm()), (7, 9, &b"writer"[..]));
        assert_eq!((k.chain, k.cgroup), (ChainKey { hash: 0xabcd }, Some(0x1a)));
        b[32..].fill(0);
        assert_eq!(
            CountKey::parse(&b).unwrap().cgroup,
            None,
            "0 names no cgroup"
        );
        assert!(CountKey::parse(&b[..39]).is_none());
    }
}
