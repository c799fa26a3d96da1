//! The emitter: one small program per CPU and watch that writes the record the hit program
//! ([`super::hit`]) left in its scratch entry into that CPU's BPF ring buffer ([`crate::perf::bpf_ring`]).
//! The hit program reaches it by a tail call through a `BPF_MAP_TYPE_PROG_ARRAY` indexed by CPU number:
//! entering a program there is immediate, where entering a ring buffer in a map of maps waits for an RCU
//! grace period (13-16 ms here, at every start and every CPU that comes online), and the ring is then a
//! constant of the emitter, not a lookup per hit.
//!
//! What the hit program leaves past the record in the scratch entry: the wake-up it asks for
//! ([`OFF_WAKE`]), and with stamps the time it handed over at ([`OFF_STAMP`]). The emitter sizes the
//! record from its stack lengths, wakes the reader as asked, and counts a record the ring has no room for
//! as lost: in the record's running `lost` (the next one carries it) and in `stats`.
//!
//! Within a burst it also wakes the reader once `wake_bytes` were written since the last time it did
//! (a running count in the scratch entry, [`OFF_SINCE`]), as a perf ring's watermark would: a reader
//! asleep since it read everything is woken by then at the latest. Asking the ring how much is unread
//! (`bpf_ringbuf_query`) answers the same with ~25-30 ns more of every kept hit (stamps), and once the
//! ring is that full it wakes on every record, an interrupt each time on the writer's CPU.

use crate::perf::bpf::insn::{Alu, Asm, AsmError, Cond, Insn, Reg, DW, R0, R1, R2, R3, R4};
use crate::perf::bpf::insn::{R7, R8, R9};
use crate::perf::bpf::program::{self, helper};
use crate::perf::hit_record as rec;

/// The scratch entry's bytes past the record: the wake-up asked for, the hand-over's stamp, and the bytes
/// written to the ring since its reader was last woken.
pub const OFF_WAKE: i16 = rec::MAX_LEN as i16;
pub const OFF_STAMP: i16 = OFF_WAKE + 8;
pub const OFF_SINCE: i16 = OFF_STAMP + 8;
/// The scratch entry: the largest record and those three words.
pub const SCRATCH_LEN: u32 = rec::MAX_LEN as u32 + 24;

/// [`OFF_WAKE`]'s value for a hit within a burst: no wake-up unless `wake_bytes` were written since the
/// last one. (0: the kernel's rule, which wakes a reader that had read everything.)
pub const BURST: i32 = 1;

/// `BPF_RB_NO_WAKEUP`, `BPF_RB_FORCE_WAKEUP`.
const NO_WAKEUP: i32 = 1;
const FORCE_WAKEUP: i32 = 2;

// Stack slots: the scratch key, the stats or stamps key.
const SCRATCH_KEY: i16 = -4;
const STAT_KEY: i16 = -8;

/// The maps one emitter uses, by descriptor.
#[derive(Debug, Clone, Copy)]
pub struct EmitMaps {
    /// The hit program's scratch entry (`BPF_MAP_TYPE_PERCPU_ARRAY`, [`SCRATCH_LEN`] bytes).
    pub scratch: i32,
    /// The hit program's `stats` (`BPF_MAP_TYPE_PERCPU_ARRAY` of u64), and its slot for records lost.
    pub lost: (i32, u32),
    /// This CPU's `BPF_MAP_TYPE_RINGBUF`.
    pub ring: i32,
    /// The writer-cost benchmark's stamps map and the slot of the part the emitter times, the output (see
    /// `hit::Parts::stamps`).
    pub stamps: Option<(i32, u32)>,
}

/// The emitter for one CPU's ring; `wake_bytes`: bytes written since the reader was last woken at which a
/// hit within a burst wakes it.
pub fn generate(maps: &EmitMaps, wake_bytes: u32) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let out = a.label();
    program::lookup(&mut a, (maps.scratch, 0, SCRATCH_KEY), out);
    a.mov(R7, R0);
    record_size(&mut a);
    wake_flags(&mut a, wake_bytes);
    let written = a.label();
    a.ld_map_fd(R1, maps.ring)
        .mov(R2, R7)
        .mov(R3, R8)
        .mov(R4, R9)
        .call(helper::RINGBUF_OUTPUT)
        .jump_imm(Cond::Eq, R0, 0, written);
    count_lost(&mut a, R7, maps.lost, STAT_KEY);
    a.bind(written);
    if let Some(stamps) = maps.stamps {
        stamp_output(&mut a, stamps);
    }
    a.bind(out);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// The flags in r9 (the record's size in r8, the scratch entry in r7): as the hit program asked, or a
/// forced wake-up once `wake_bytes` were written since the last one, which restarts the count.
fn wake_flags(a: &mut Asm, wake_bytes: u32) {
    let wake_bytes = i32::try_from(wake_bytes).unwrap_or(i32::MAX);
    let (asked, counted) = (a.label(), a.label());
    a.load(DW, R1, R7, OFF_SINCE)
        .alu(Alu::Add, R1, R8)
        .load(DW, R9, R7, OFF_WAKE)
        .jump_imm(Cond::Lt, R1, wake_bytes, asked)
        .mov_imm(R1, 0)
        .mov_imm(R9, FORCE_WAKEUP)
        .goto(counted);
    a.bind(asked);
    a.jump_imm(Cond::Eq, R9, 0, counted).mov_imm(R9, NO_WAKEUP);
    a.bind(counted);
    a.store(DW, R7, OFF_SINCE, R1);
}

/// The record's size into r8 (the record in r7): its fixed part, with or without the registers, and its
/// two stacks, each bounded so that the verifier knows the whole fits the scratch entry.
fn record_size(a: &mut Asm) {
    let max = (8 * rec::MAX_FRAMES) as i32;
    a.load(DW, R8, R7, rec::OFF_KSTACK_BYTES);
    at_most(a, R8, max);
    a.load(DW, R1, R7, rec::OFF_USTACK_BYTES);
    at_most(a, R1, max);
    a.alu(Alu::Add, R8, R1);
    let plain = a.label();
    a.load(DW, R1, R7, rec::OFF_FLAGS)
        .alu_imm(Alu::And, R1, rec::REGS_KNOWN as i32)
        .jump_imm(Cond::Eq, R1, 0, plain)
        .alu_imm(
            Alu::Add,
            R8,
            i32::from(rec::OFF_STACKS_REGS - rec::OFF_STACKS),
        );
    a.bind(plain);
    a.alu_imm(Alu::Add, R8, i32::from(rec::OFF_STACKS));
}

/// `reg` = min(`reg`, `max`), unsigned.
fn at_most(a: &mut Asm, reg: Reg, max: i32) {
    let ok = a.label();
    a.jump_imm(Cond::Le, reg, max, ok).mov_imm(reg, max);
    a.bind(ok);
}

/// A record the ring had no room for (the record in `record`): one more in its running `lost` and in
/// the `(stats, slot)` counter (r0-r5 clobbered; `key`: a free 4-byte stack slot).
pub fn count_lost(a: &mut Asm, record: Reg, (stats, slot): (i32, u32), key: i16) {
    a.load(DW, R1, record, rec::OFF_LOST)
        .alu_imm(Alu::Add, R1, 1)
        .store(DW, record, rec::OFF_LOST, R1);
    add_one(a, stats, slot, key);
}

/// Adds one to `stats[slot]` of this CPU (r0-r5 clobbered; `key`: a free 4-byte stack slot).
pub fn add_one(a: &mut Asm, stats: i32, slot: u32, key: i16) {
    program::add_to(a, (stats, slot, key), None);
}

/// With stamps: the time since the hit program handed over, added to the stamps map's last part.
fn stamp_output(a: &mut Asm, (stamps, slot): (i32, u32)) {
    a.call(helper::KTIME_GET_NS)
        .load(DW, R1, R7, OFF_STAMP)
        .alu(Alu::Sub, R0, R1)
        .mov(R9, R0);
    program::add_to(a, (stamps, slot, STAT_KEY), Some(R9));
}
