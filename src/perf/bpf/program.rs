//! What the hit program ([`super::hit`]) does at a trap before it builds its record, generated from the
//! watch's length, the `--if` condition and the `--tid`/`--comm`/`--exclude-idle`/`--kernel-only`/
//! `--user-only` filters; pure, and run offline in `super::interp` through the hit program (its tests are
//! `super::tests`). Beside it, [`probe`]: the smallest program, whether BPF loads here at all.
//!
//! At the trap (x86 data breakpoints trap after the store) the hit program:
//! 1. reads the watched `len` bytes at the breakpoint's address (`bpf_probe_read_user`, or `_kernel` for a
//!    kernel address): exactly what this store wrote (`value_and_old_steps`);
//! 2. swaps it with the last value kept in the `olds` map (one entry per watched address, per process for a
//!    user address, since each process has its own memory there): `old`, unknown for the first hit. With
//!    an [`Olds::by_tgid`] array, a user address's entry for a tgid the array covers is kept there instead,
//!    at the tgid's index: an array lookup is a few inlined instructions where the hash's is a call. A
//!    user address's entry is tagged with its process's start time and exec count ([`Olds::start`]): a
//!    process that took an earlier one's pid, or a program run by exec, finds another's tag, and its
//!    first hit has no `old`, as any first hit;
//! 3. applies the filters (`filter`), then the condition (`condition`): a hit that fails either is
//!    counted in the per-CPU `stats` map instead of written (the tracer reports it as filtered).
//!
//! A value that cannot be read (the page is gone) is reported as unknown, never filtered: a write is not
//! hidden because its value could not be seen. The old value is updated before the filters, so `old` is the
//! value before this store even when the previous store was filtered out.

use crate::model::condition::{Compare, Condition, Op, Rhs, Side};
use crate::model::filter::{Filter, Place, IDLE_COMM};
use crate::perf::bpf::insn::{
    Alu, Asm, Cond, Insn, Kept, Label, Reg, B, DW, FP, H, R0, R1, R2, R3, R4, W,
};
use crate::perf::bpf::kernel::{ctx, Helper};
use crate::perf::bpf::seq::{self, lookup, lookup_key};
use crate::perf::bpf::task::ProcessStart;
use crate::perf::hit_record::{OLD_KNOWN, VALUE_KNOWN};

use super::hit::additions::{Additions, Point};

/// The registers the value code binds across its helper calls, which the hit program keeps until it
/// builds its record: the program's context; the value read ([`VALUE_KNOWN`] in the flags), the old
/// value ([`OLD_KNOWN`]) and the flags. Before the value is read, [`ADDR`] holds the breakpoint's
/// address in the old value's register.
pub(crate) const CTX: Kept = Kept::R6;
pub(crate) const VALUE: Kept = Kept::R7;
pub(crate) const OLD: Kept = Kept::R8;
pub(crate) const ADDR: Kept = Kept::R8;
pub(crate) const FLAGS: Kept = Kept::R9;

/// The value code's stack slots ([`value_and_old_steps`], [`filter`]), allocated first by each program that
/// runs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValueSlots {
    /// The current task's pid/tgid, from `bpf_get_current_pid_tgid`.
    pub pid_tgid: i16,
    /// The olds key (u64).
    key: i16,
    /// The watched bytes as read.
    buf: i16,
    /// The by-tgid array's generation while it is looked up.
    scratch: i16,
    /// The writer's name, for `--comm` (16 bytes).
    comm: i16,
    /// The by-tgid array's key 0.
    zero_key: i16,
}

impl ValueSlots {
    pub(crate) fn new(a: &mut Asm) -> ValueSlots {
        ValueSlots {
            pid_tgid: a.slot(8).off(),
            key: a.slot(8).off(),
            buf: a.slot(8).off(),
            scratch: a.slot(8).off(),
            comm: a.slot(16).off(),
            zero_key: a.slot(4).off(),
        }
    }
}

/// Where the last values are kept, and whose they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Olds {
    /// `BPF_MAP_TYPE_LRU_HASH`, u64 key (the address for a kernel address, the tgid for a user one) to
    /// [`OLD_ENTRY`] bytes, `{old, owner}`: every key the array does not cover.
    pub hash: i32,
    /// `BPF_MAP_TYPE_ARRAY` of [`OLD_SLOT`]-byte values, indexed by tgid (u32): a user address's last value
    /// in each process, `{old, generation, owner}`. An entry is known when its generation is the current
    /// one, which entry 0 holds in its second word (tgid 0, the idle task, goes to the hash): forgetting
    /// every old value is one update of entry 0. Tgids past the array's end go to the hash.
    pub by_tgid: Option<i32>,
    /// A stack slot of [`OLD_ENTRY`] bytes: a hash entry as inserted, its owner in the second word.
    pub entry: i16,
    /// Where the writer's process start time and exec count are: an entry's owner, for a user address (a
    /// kernel address's is 0, one variable whoever writes it). An entry of another owner is no `old` (a
    /// pid reused, or a new program run). `None`: every owner is 0, and a reused pid's first hit has the
    /// earlier process's `old`.
    pub start: Option<ProcessStart>,
}

/// The size of an [`Olds::hash`] value: the old value, then its owner.
pub const OLD_ENTRY: u32 = 16;
/// The size of an [`Olds::by_tgid`] value: the old value, its generation, then its owner.
pub const OLD_SLOT: u32 = 24;

/// A task name as the kernel keeps it (`TASK_COMM_LEN`, NUL-padded), in the two words the program
/// compares; `None` for a name the kernel cannot have (16 bytes or more, or a NUL in it).
fn comm_words(name: &str) -> Option<(u64, u64)> {
    let b = name.as_bytes();
    if b.len() >= 16 || b.contains(&0) {
        return None;
    }
    let mut buf = [0u8; 16];
    buf[..b.len()].copy_from_slice(b);
    let word = |s: &[u8]| u64::from_ne_bytes(s.try_into().unwrap_or([0; 8]));
    Some((word(&buf[..8]), word(&buf[8..])))
}

/// Whether `--comm` is checked in the kernel: whenever it is given, so that the program keeps (and
/// counts, and takes `--count`'s hits for) only what the tracer's own check admits. A hit's name there is
/// the one the program reads at the trap, and `<idle>` for the idle task (tid 0): a name in other angle
/// brackets is a task's own (`<...>` is what the tracer says of a task it never saw named, which a hit
/// never is), and one the kernel cannot hold (16 bytes or more, a NUL) names no task on either side.
fn comms_in_kernel(filter: &Filter) -> bool {
    !filter.comms.is_empty()
}

/// Reads the watched bytes at the trap into [`VALUE`], swaps them with the `olds` map's last value into
/// [`OLD`] (none without one: 0) and sets [`FLAGS`]' `VALUE_KNOWN`/`OLD_KNOWN`, then jumps to `done`; the
/// current task's pid/tgid is left in the `pid_tgid` slot. Expects the context in [`CTX`]. A benchmark
/// variant (test builds) times the steps of a readable value, with code that may use r0-r5 (and so call
/// helpers): r6-r9 are what this code keeps. With `reads`, a one-entry array of one u32, the
/// bytes of a trap taken in user space are read only while that is not 0, else left unknown as an
/// unreadable value is: a read-write breakpoint on a user address traps on the program's own read, byte by
/// byte (the kernel counts those traps and runs no program for them), and `--control` can move a watch
/// between write and read-write.
pub(crate) fn value_and_old_steps(
    a: &mut Asm,
    slots: &ValueSlots,
    len: u8,
    (olds, reads): (Option<Olds>, Option<i32>),
    done: Label,
    add: &mut dyn Additions,
) {
    let unreadable = a.label();
    a.call(Helper::GetCurrentPidTgid);
    a.store(DW, FP, slots.pid_tgid, R0);
    // The olds key: the address itself for a kernel address (each CPU's copy of a per-CPU variable has its
    // own previous value; an address is in the upper half, so it is never a tgid), the tgid for a user one.
    a.load(DW, ADDR, CTX, ctx::ADDR);
    a.mov(R1, R0).alu_imm(Alu::Rsh, R1, 32);
    let user = a.label();
    a.jump_imm(Cond::Sge, ADDR, 0, user).mov(R1, ADDR);
    a.bind(user);
    a.store(DW, FP, slots.key, R1);
    add.at(a, Point::Task);
    // Code added there may have used r1-r5; the address is still in its kept register.
    if let Some(reads) = reads {
        // A trap taken in the kernel runs with the debug registers cleared (the kernel's #DB handler
        // saves and clears DR7 for it): the read cannot trap there, and a kernel writer's bytes are read.
        let read = a.label();
        a.ld_map_value(R1, reads, 0)
            .load(W, R1, R1, 0)
            .jump_imm(Cond::Ne, R1, 0, read)
            .load(DW, R1, CTX, ctx::CS)
            .alu_imm(Alu::And, R1, 3)
            .jump_imm(Cond::Ne, R1, 0, unreadable);
        a.bind(read);
    }

    // The value: the watched bytes, read where they live.
    a.store_imm(DW, FP, slots.buf, 0);
    a.stack_addr(R1, slots.buf)
        .mov_imm(R2, i32::from(len))
        .mov(R3, ADDR);
    seq::probe_read(a);
    a.jump_imm(Cond::Ne, R0, 0, unreadable);
    let size = match len {
        1 => B,
        2 => H,
        4 => W,
        _ => DW,
    };
    a.load(size, VALUE, FP, slots.buf)
        .mov_imm(FLAGS, VALUE_KNOWN as i32);
    add.at(a, Point::Value);
    match olds {
        Some(olds) => {
            swap_old(a, slots, olds);
            add.at(a, Point::Old);
        }
        None => {
            a.mov_imm(OLD, 0);
        }
    }
    a.goto(done);
    a.bind(unreadable);
    a.mov_imm(VALUE, 0).mov_imm(OLD, 0).mov_imm(FLAGS, 0);
    a.goto(done);
}

/// Swaps the value in [`VALUE`] with the last one kept in `olds` into [`OLD`] (0 when there is none, or
/// when another process kept it), with [`FLAGS`]' `OLD_KNOWN` when there was; the key is in the `key`
/// slot.
fn swap_old(a: &mut Asm, slots: &ValueSlots, olds: Olds) {
    let swapped = a.label();
    let owner = olds.entry + 8;
    owner_of(a, slots, olds);
    if let Some(array) = olds.by_tgid {
        swap_by_tgid(a, (slots, owner), array, swapped);
    }
    // The old value: swapped in place when there is one (known when its owner is the writer's),
    // inserted otherwise.
    let insert = a.label();
    a.mov_imm(OLD, 0);
    lookup_key(a, olds.hash, slots.key, insert);
    a.load(DW, R1, R0, 0)
        .load(DW, R2, R0, 8)
        .load(DW, R3, FP, owner)
        .store(DW, R0, 0, VALUE)
        .store(DW, R0, 8, R3)
        .jump(Cond::Ne, R2, R3, swapped)
        .mov(OLD, R1)
        .alu_imm(Alu::Or, FLAGS, OLD_KNOWN as i32)
        .goto(swapped);
    a.bind(insert);
    a.store(DW, FP, olds.entry, VALUE);
    seq::update(a, olds.hash, (slots.key, olds.entry), 0);
    a.bind(swapped);
}

/// The writer's owner of the entry into the `entry` slot's second word: its process's start time plus
/// its exec count for a user address (the key a tgid, not negative), 0 for a kernel address or without
/// [`Olds::start`]. Two owners of one pid cannot sum alike: the later process started more nanoseconds
/// after the earlier than there are execs in any task's ancestry.
fn owner_of(a: &mut Asm, slots: &ValueSlots, olds: Olds) {
    let owner = olds.entry + 8;
    a.store_imm(DW, FP, owner, 0);
    if let Some(start) = olds.start {
        let kernel = a.label();
        a.load(DW, R1, FP, slots.key)
            .jump_imm(Cond::Slt, R1, 0, kernel)
            .call(Helper::GetCurrentTaskBtf)
            .load(DW, R1, R0, start.leader)
            .load(DW, R1, R1, start.start_time)
            .load(DW, R2, R0, start.exec_id)
            .alu(Alu::Add, R1, R2)
            .store(DW, FP, owner, R1);
        a.bind(kernel);
    }
}

/// The old value from the by-tgid array (see [`Olds::by_tgid`]) into [`OLD`] and the value in [`VALUE`]
/// put in its place with the current generation and the owner at stack offset `owner`, on to `swapped`,
/// for a user address's tgid the array covers; falls through, with nothing changed, for any other key
/// (in the `key` slot).
fn swap_by_tgid(a: &mut Asm, (slots, owner): (&ValueSlots, i16), array: i32, swapped: Label) {
    let hash = a.label();
    a.load(DW, R1, FP, slots.key)
        .jump_imm(Cond::Slt, R1, 0, hash)
        .jump_imm(Cond::Eq, R1, 0, hash);
    // The current generation, from entry 0, kept on the stack across the next lookup.
    lookup(a, (array, 0, slots.zero_key), hash);
    a.load(DW, R1, R0, 8).store(DW, FP, slots.scratch, R1);
    // The tgid, the key's low half (little-endian), indexes the array; past its end the lookup finds none.
    lookup_key(a, array, slots.key, hash);
    a.load(DW, OLD, R0, 0)
        .load(DW, R1, R0, 8)
        .load(DW, R2, FP, slots.scratch)
        .load(DW, R3, R0, 16)
        .load(DW, R4, FP, owner)
        .store(DW, R0, 0, VALUE)
        .store(DW, R0, 8, R2)
        .store(DW, R0, 16, R4);
    let unknown = a.label();
    a.jump(Cond::Ne, R1, R2, unknown)
        .jump(Cond::Ne, R3, R4, unknown)
        .alu_imm(Alu::Or, FLAGS, OLD_KNOWN as i32)
        .goto(swapped);
    a.bind(unknown);
    a.mov_imm(OLD, 0).goto(swapped);
    a.bind(hash);
}

/// The filters, each jumping to `drop` when the hit fails it.
pub(crate) fn filter(a: &mut Asm, slots: &ValueSlots, f: &Filter, drop: Label) {
    match f.place {
        Place::Anywhere => {}
        Place::Kernel | Place::User => {
            a.load(DW, R2, CTX, ctx::CS).alu_imm(Alu::And, R2, 3);
            let cond = if f.place == Place::Kernel {
                Cond::Ne
            } else {
                Cond::Eq
            };
            a.jump_imm(cond, R2, 0, drop);
        }
    }
    if f.exclude_idle {
        a.load(DW, R2, FP, slots.pid_tgid)
            .alu_imm(Alu::Lsh, R2, 32)
            .jump_imm(Cond::Eq, R2, 0, drop);
    }
    if !f.tids.is_empty() {
        let ok = a.label();
        a.load(DW, R2, FP, slots.pid_tgid)
            .alu_imm(Alu::Lsh, R2, 32)
            .alu_imm(Alu::Rsh, R2, 32);
        for &tid in &f.tids {
            match i32::try_from(tid) {
                Ok(t) => a.jump_imm(Cond::Eq, R2, t, ok),
                Err(_) => a.ld_imm64(R3, u64::from(tid)).jump(Cond::Eq, R2, R3, ok),
            };
        }
        a.goto(drop);
        a.bind(ok);
    }
    if comms_in_kernel(f) {
        let ok = a.label();
        // The idle task is `<idle>` to the tracer, whatever the kernel calls it (`swapper/N`).
        let idle = match f.comms.iter().any(|c| c == IDLE_COMM) {
            true => ok,
            false => drop,
        };
        a.load(DW, R2, FP, slots.pid_tgid)
            .alu_imm(Alu::Lsh, R2, 32)
            .jump_imm(Cond::Eq, R2, 0, idle);
        a.stack_addr(R1, slots.comm)
            .mov_imm(R2, 16)
            .call(Helper::GetCurrentComm)
            .load(DW, R1, FP, slots.comm)
            .load(DW, R2, FP, slots.comm + 8);
        for (lo, hi) in f.comms.iter().filter_map(|c| comm_words(c)) {
            let next = a.label();
            a.ld_imm64(R3, lo)
                .jump(Cond::Ne, R1, R3, next)
                .ld_imm64(R3, hi)
                .jump(Cond::Eq, R2, R3, ok);
            a.bind(next);
        }
        a.goto(drop);
        a.bind(ok);
    }
}

/// Loads `side` into `dst`, sign-extended from the watch length when `signed`.
fn operand(a: &mut Asm, dst: Reg, side: Side, len: u8, signed: bool) {
    let src = match side {
        Side::Value => VALUE,
        Side::Old => OLD,
    };
    a.mov(dst, src);
    if signed && len < 8 {
        let shift = 64 - 8 * i32::from(len);
        a.alu_imm(Alu::Lsh, dst, shift)
            .alu_imm(Alu::Arsh, dst, shift);
    }
}

fn reads_old(c: &Compare) -> bool {
    c.left == Side::Old || c.right == Rhs::Side(Side::Old)
}

/// Jumps to `yes` when `cond` holds for the value in [`VALUE`], the old value in [`OLD`] and the flags in
/// [`FLAGS`], to `no` otherwise. Uses r1-r3 only (no calls).
pub(crate) fn condition(a: &mut Asm, cond: &Condition, len: u8, yes: Label, no: Label) {
    match cond {
        Condition::Or(l, r) => {
            let next = a.label();
            condition(a, l, len, yes, next);
            a.bind(next);
            condition(a, r, len, yes, no);
        }
        Condition::And(l, r) => {
            let next = a.label();
            condition(a, l, len, next, no);
            a.bind(next);
            condition(a, r, len, yes, no);
        }
        Condition::Changed => {
            // True when there is no old value to compare with: the first store is a change.
            a.mov(R1, FLAGS)
                .alu_imm(Alu::And, R1, OLD_KNOWN as i32)
                .jump_imm(Cond::Eq, R1, 0, yes)
                .jump(Cond::Ne, VALUE, OLD, yes)
                .goto(no);
        }
        Condition::Compare(c) => {
            if reads_old(c) {
                a.mov(R1, FLAGS)
                    .alu_imm(Alu::And, R1, OLD_KNOWN as i32)
                    .jump_imm(Cond::Eq, R1, 0, no);
            }
            operand(a, R1, c.left, len, c.signed);
            match c.right {
                Rhs::Const { value, .. } => {
                    a.ld_imm64(R2, Condition::constant_bits(value, len, c.signed));
                }
                Rhs::Side(side) => operand(a, R2, side, len, c.signed),
            }
            let jump = match (c.op, c.signed) {
                (Op::Eq, _) => Cond::Eq,
                (Op::Ne, _) => Cond::Ne,
                (Op::BitAnd, _) => Cond::Set,
                (Op::Lt, false) => Cond::Lt,
                (Op::Le, false) => Cond::Le,
                (Op::Gt, false) => Cond::Gt,
                (Op::Ge, false) => Cond::Ge,
                (Op::Lt, true) => Cond::Slt,
                (Op::Le, true) => Cond::Sle,
                (Op::Gt, true) => Cond::Sgt,
                (Op::Ge, true) => Cond::Sge,
            };
            a.jump(jump, R1, R2, yes).goto(no);
        }
    }
}

/// The smallest program `check` loads to see whether BPF works here: `return 1`.
pub fn probe() -> Vec<Insn> {
    let mut a = Asm::new();
    a.mov_imm(R0, 1).exit();
    a.finish().unwrap_or_default()
}
