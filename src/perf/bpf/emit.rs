//! The emitter: one small program per CPU and watch that writes the record the hit program
//! ([`super::hit`]) left in its scratch entry into that CPU's BPF ring buffer ([`crate::perf::bpf_ring`]).
//! The hit program reaches it by a tail call through a `BPF_MAP_TYPE_PROG_ARRAY` indexed by CPU number:
//! entering a program there is immediate, where entering a ring buffer in a map of maps waits for an RCU
//! grace period (13-16 ms here, at every start and every CPU that comes online), and the ring is then a
//! constant of the emitter, not a lookup per hit.
//!
//! What the hit program leaves past the record in the scratch entry: the wake-up it asks for
//! ([`OFF_WAKE`]) and the record's size ([`OFF_SIZE`]). The emitter writes the record at that size, wakes
//! the reader as asked, and counts a record the ring has no room for as lost: in the record's running
//! `lost` (the next one carries it) and in `stats`.
//!
//! Within a burst it also wakes the reader once `wake_bytes` were written since the last time it did
//! (a running count in the scratch entry, [`OFF_SINCE`]), as a perf ring's watermark would: a reader
//! asleep since it read everything is woken by then at the latest. Asking the ring how much is unread
//! (`bpf_ringbuf_query`) answers the same with ~25-30 ns more of every kept hit (stamps), and once the
//! ring is that full it wakes on every record, an interrupt each time on the writer's CPU.

use crate::perf::bpf::insn::{
    Alu, Asm, AsmError, Cond, Insn, Kept, Reg, DW, R0, R1, R2, R3, R4, W,
};
use crate::perf::bpf::kernel::{Helper, RB_FORCE_WAKEUP, RB_NO_WAKEUP};
use crate::perf::bpf::layout::{OFF_LAST_WRITER, OFF_SINCE, OFF_SIZE, OFF_WAKE};
use crate::perf::bpf::seq;
use crate::perf::hit_record as rec;

use super::hit::additions::{Additions, Nothing, Point};

/// [`OFF_WAKE`]'s value for a hit within a burst: no wake-up unless `wake_bytes` were written since the
/// last one. (0: the kernel's rule, which wakes a reader that had read everything.)
pub const BURST: i32 = 1;

/// The registers the emitter binds: the scratch entry (the record), the record's size, and the
/// `bpf_ringbuf_output` flags.
pub(crate) const RECORD: Kept = Kept::R7;
const SIZE: Kept = Kept::R8;
const WAKE: Kept = Kept::R9;

/// The maps one emitter uses, by descriptor.
#[derive(Debug, Clone, Copy)]
pub struct EmitMaps {
    /// The hit program's scratch entry (`BPF_MAP_TYPE_PERCPU_ARRAY`, [`layout::SCRATCH_LEN`](crate::perf::bpf::layout::SCRATCH_LEN) bytes).
    pub scratch: i32,
    /// The hit program's `stats` (`BPF_MAP_TYPE_PERCPU_ARRAY` of u64), and its slot for records lost.
    pub lost: (i32, u32),
    /// This CPU's `BPF_MAP_TYPE_RINGBUF`.
    pub ring: i32,
}

/// The emitter for one CPU's ring; `wake_bytes`: bytes written since the reader was last woken at which a
/// hit within a burst wakes it.
pub fn generate(maps: &EmitMaps, wake_bytes: u32) -> Result<Vec<Insn>, AsmError> {
    generate_adding(maps, wake_bytes, &mut Nothing)
}

/// The emitter ([`generate`]), with `add`'s code at [`Point::Emitted`].
pub fn generate_adding(
    maps: &EmitMaps,
    wake_bytes: u32,
    add: &mut dyn Additions,
) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let (scratch_key, stat_key) = (a.slot(4).off(), a.slot(4).off());
    let out = a.label();
    seq::lookup(&mut a, (maps.scratch, 0, scratch_key), out);
    a.mov(RECORD, R0);
    record_size(&mut a);
    wake_flags(&mut a, wake_bytes);
    let written = a.label();
    a.ld_map_fd(R1, maps.ring)
        .mov(R2, RECORD)
        .mov(R3, SIZE)
        .mov(R4, WAKE)
        .call(Helper::RingbufOutput)
        .jump_imm(Cond::Eq, R0, 0, written);
    count_lost(&mut a, RECORD.into(), maps.lost, stat_key);
    a.bind(written);
    add.at(&mut a, Point::Emitted);
    a.bind(out);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// The flags into [`WAKE`]: as the hit program asked, or a forced wake-up once `wake_bytes` were written
/// since the last one, which restarts the count.
fn wake_flags(a: &mut Asm, wake_bytes: u32) {
    let wake_bytes = i32::try_from(wake_bytes).unwrap_or(i32::MAX);
    let (asked, counted) = (a.label(), a.label());
    a.load(DW, R1, RECORD, OFF_SINCE)
        .alu(Alu::Add, R1, SIZE)
        .load(DW, WAKE, RECORD, OFF_WAKE)
        .jump_imm(Cond::Lt, R1, wake_bytes, asked)
        .mov_imm(R1, 0)
        .mov_imm(WAKE, RB_FORCE_WAKEUP)
        .goto(counted);
    a.bind(asked);
    a.jump_imm(Cond::Eq, WAKE, 0, counted)
        .mov_imm(WAKE, RB_NO_WAKEUP);
    a.bind(counted);
    a.store(DW, RECORD, OFF_SINCE, R1);
}

/// The record's size into [`SIZE`]: as the hit program reckoned it ([`OFF_SIZE`]), bounded so that the
/// verifier knows the record fits the scratch entry.
fn record_size(a: &mut Asm) {
    a.load(DW, SIZE, RECORD, OFF_SIZE);
    at_most(a, SIZE.into(), rec::MAX_LEN as i32);
}

/// `reg` = min(`reg`, `max`), unsigned.
fn at_most(a: &mut Asm, reg: Reg, max: i32) {
    let ok = a.label();
    a.jump_imm(Cond::Le, reg, max, ok).mov_imm(reg, max);
    a.bind(ok);
}

/// A record the ring had no room for (the record in `record`): one more in its running `lost` and in
/// the `(stats, slot)` counter, and the CPU's last writer forgotten, so the next record carries its name
/// (r0-r5 clobbered; `key`: a free 4-byte stack slot).
pub fn count_lost(a: &mut Asm, record: Reg, (stats, slot): (i32, u32), key: i16) {
    a.load(W, R1, record, rec::OFF_LOST)
        .alu_imm(Alu::Add, R1, 1)
        .store(W, record, rec::OFF_LOST, R1)
        .store_imm(DW, record, OFF_LAST_WRITER, -1);
    add_one(a, stats, slot, key);
}

/// Adds one to `stats[slot]` of this CPU (r0-r5 clobbered; `key`: a free 4-byte stack slot).
pub fn add_one(a: &mut Asm, stats: i32, slot: u32, key: i16) {
    seq::add_to(a, (stats, slot, key), None);
}
