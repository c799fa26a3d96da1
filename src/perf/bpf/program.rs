//! The value program: what runs in the kernel at every hit of one watch when `--value` or `--if` is given.
//! Generated from the watch's length, the `--if` condition and the `--tid`/`--comm`/`--exclude-idle`/
//! `--kernel-only`/`--user-only` filters; pure, so it is checked offline by running it in
//! `super::interp`.
//!
//! At the trap (x86 data breakpoints trap after the store) it:
//! 1. reads the watched `len` bytes at the breakpoint's address (`bpf_probe_read_user`, or `_kernel` for a
//!    kernel address): exactly what this store wrote;
//! 2. swaps it with the last value kept in the `olds` map (one entry per watched address, per process for a
//!    user address, since each process has its own memory there): `old`, unknown for the first hit. With
//!    an [`Olds::by_tgid`] array, a user address's entry for a tgid the array covers is kept there instead,
//!    at the tgid's index: an array lookup is a few inlined instructions where the hash's is a call;
//! 3. applies the filters, then the condition: a hit that fails either returns 0, so the kernel writes no
//!    sample, and is counted in the per-CPU `stats` map instead (the tracer reports it as filtered);
//! 4. writes the value record ([`crate::perf::record::ValueRecord`]: value, old, address, flags) through the
//!    `outputs` map to this CPU's `BPF_OUTPUT` event, whose ring is the breakpoint's own, and returns 1: the
//!    kernel then writes the sample right after it.
//!
//! A value that cannot be read (the page is gone) is reported as unknown, never filtered: a write is not
//! hidden because its value could not be seen. The old value is updated before the filters, so `old` is the
//! value before this store even when the previous store was filtered out.

use crate::model::condition::{Compare, Condition, Op, Rhs, Side};
use crate::model::filter::{Filter, Place};
use crate::perf::bpf::insn::{
    Alu, Asm, AsmError, Cond, Insn, Label, Reg, B, DW, FP, H, R0, R1, R2, R3, R4, R5, R6, R7, R8,
    R9, W,
};
use crate::perf::record::{OLD_KNOWN, VALUE_KNOWN, VALUE_RAW_LEN};

/// Kernel helper numbers (`enum bpf_func_id`).
pub mod helper {
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    pub const MAP_UPDATE_ELEM: i32 = 2;
    pub const MAP_DELETE_ELEM: i32 = 3;
    pub const GET_CURRENT_PID_TGID: i32 = 14;
    pub const GET_CURRENT_COMM: i32 = 16;
    pub const GET_CURRENT_TASK_BTF: i32 = 158;
    pub const PERF_EVENT_OUTPUT: i32 = 25;
    pub const PROBE_READ_USER: i32 = 112;
    pub const PROBE_READ_KERNEL: i32 = 113;
    pub const KTIME_GET_NS: i32 = 5;
    pub const GET_SMP_PROCESSOR_ID: i32 = 8;
    pub const TAIL_CALL: i32 = 12;
    pub const GET_STACK: i32 = 67;
    pub const RINGBUF_OUTPUT: i32 = 130;
}

/// `struct bpf_perf_event_data` on x86-64: `pt_regs` (21 words), `sample_period`, then `addr`, which the
/// kernel fills with the breakpoint's address (also after `--control` moved it).
pub const CTX_ADDR: i16 = 176;
/// `pt_regs.cs`: its low two bits are the privilege level the writer ran at (3: user space).
pub const CTX_CS: i16 = 136;
/// `BPF_F_CURRENT_CPU`: the `outputs` entry of the CPU the program runs on.
const CURRENT_CPU: u64 = 0xffff_ffff;

// Stack slots, below the frame pointer.
pub(crate) const PID_TGID: i16 = -8;
const KEY: i16 = -16;
const BUF: i16 = -24;
const SCRATCH: i16 = -32;
const COMM: i16 = -48;
const OUT: i16 = -80;
const STAT_KEY: i16 = -84;
const ZERO_KEY: i16 = -88;

/// The maps the program uses, by descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maps {
    /// `BPF_MAP_TYPE_PERF_EVENT_ARRAY`, one `BPF_OUTPUT` event per CPU.
    pub outputs: i32,
    /// `BPF_MAP_TYPE_LRU_HASH`, u64 key (0, or the tgid for a user address) to the last value.
    pub olds: i32,
    /// The by-tgid array of [`Olds::by_tgid`], if any.
    pub olds_by_tgid: Option<i32>,
    /// `BPF_MAP_TYPE_PERCPU_ARRAY` of one u64: hits the filters or the condition dropped.
    pub stats: i32,
}

/// Where the last values are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Olds {
    /// `BPF_MAP_TYPE_LRU_HASH`, u64 key (the address for a kernel address, the tgid for a user one) to the
    /// last value: every key the array does not cover.
    pub hash: i32,
    /// `BPF_MAP_TYPE_ARRAY` of [`OLD_SLOT`]-byte values, indexed by tgid (u32): a user address's last value
    /// in each process, `{old, generation}`. An entry is known when its generation is the current one,
    /// which entry 0 holds in its second word (tgid 0, the idle task, goes to the hash): forgetting every
    /// old value is one update of entry 0. Tgids past the array's end go to the hash.
    pub by_tgid: Option<i32>,
}

/// The size of an [`Olds::by_tgid`] value: the old value, then its generation.
pub const OLD_SLOT: u32 = 16;

/// What one watch's program checks.
#[derive(Debug, Clone, Copy)]
pub struct Spec<'a> {
    /// The watch length: 1, 2, 4 or 8 bytes.
    pub len: u8,
    pub condition: Option<&'a Condition>,
    pub filter: &'a Filter,
}

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

/// The name the tracer prints for the idle task; the kernel's is `swapper/N`.
const IDLE: &str = "<idle>";

/// Whether `--comm` can be checked in the kernel: every name is either a real task name or `<idle>`. Other
/// names in angle brackets are the tracer's own (an unknown task) and are left to it.
fn comms_in_kernel(filter: &Filter) -> bool {
    !filter.comms.is_empty()
        && filter
            .comms
            .iter()
            .all(|c| c == IDLE || !c.starts_with('<'))
}

/// The program for `spec`.
pub fn generate(spec: &Spec<'_>, maps: &Maps) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let drop = a.label();
    let emit = a.label();
    let filters = a.label();

    a.mov(R6, R1);
    let olds = Olds {
        hash: maps.olds,
        by_tgid: maps.olds_by_tgid,
    };
    value_and_old(&mut a, spec.len, Some(olds), filters);

    a.bind(filters);
    filter(&mut a, spec.filter, drop);
    if let Some(cond) = spec.condition {
        // An unknown value is reported whatever the condition says.
        a.mov(R1, R9)
            .alu_imm(Alu::And, R1, VALUE_KNOWN as i32)
            .jump_imm(Cond::Eq, R1, 0, emit);
        condition(&mut a, cond, spec.len, emit, drop);
    }

    a.bind(emit);
    a.store(DW, FP, OUT, R7)
        .store(DW, FP, OUT + 8, R8)
        .load(DW, R1, R6, CTX_ADDR)
        .store(DW, FP, OUT + 16, R1)
        .store(DW, FP, OUT + 24, R9)
        .mov(R1, R6)
        .ld_map_fd(R2, maps.outputs)
        .ld_imm64(R3, CURRENT_CPU)
        .mov(R4, FP)
        .alu_imm(Alu::Add, R4, i32::from(OUT))
        .mov_imm(R5, VALUE_RAW_LEN as i32)
        .call(helper::PERF_EVENT_OUTPUT)
        .mov_imm(R0, 1)
        .exit();

    if !a.used(drop) {
        return a.finish();
    }
    a.bind(drop);
    add_to(&mut a, (maps.stats, 0, STAT_KEY), None);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// r0 = this CPU's entry `slot` of the per-CPU array `map`, its key written at stack slot `key`; on to
/// `missing` when there is none (r1-r5 clobbered).
pub(crate) fn lookup(a: &mut Asm, (map, slot, key): (i32, u32, i16), missing: Label) {
    a.store_imm(W, FP, key, slot as i32);
    lookup_key(a, map, key, missing);
}

/// r0 = `map`'s entry for the key already at stack slot `key`; on to `missing` when there is none (r1-r5
/// clobbered).
pub(crate) fn lookup_key(a: &mut Asm, map: i32, key: i16, missing: Label) {
    a.ld_map_fd(R1, map)
        .mov(R2, FP)
        .alu_imm(Alu::Add, R2, i32::from(key))
        .call(helper::MAP_LOOKUP_ELEM)
        .jump_imm(Cond::Eq, R0, 0, missing);
}

/// Adds `value` (a register calls keep: r6-r9), or one, to this CPU's u64 at `slot` of the per-CPU array
/// `map`, its key at stack slot `key` (r0-r5 clobbered).
pub(crate) fn add_to(a: &mut Asm, at: (i32, u32, i16), value: Option<Reg>) {
    let out = a.label();
    lookup(a, at, out);
    a.load(DW, R1, R0, 0);
    match value {
        Some(v) => a.alu(Alu::Add, R1, v),
        None => a.alu_imm(Alu::Add, R1, 1),
    };
    a.store(DW, R0, 0, R1);
    a.bind(out);
}

/// Reads the watched bytes at the trap into r7, swaps them with the `olds` map's last value into r8 (none
/// without one: r8 = 0) and sets r9's `VALUE_KNOWN`/`OLD_KNOWN` flags, then jumps to `done`; the current
/// task's pid/tgid is left in the `PID_TGID` stack slot. Expects the context in r6.
pub(crate) fn value_and_old(a: &mut Asm, len: u8, olds: Option<Olds>, done: Label) {
    value_and_old_steps(a, len, (olds, None), done, &mut |_, _| {});
}

/// The steps of [`value_and_old`] after which its `between` hook runs (a benchmark times them there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The task's pid/tgid and the olds key.
    Task,
    /// The watched bytes read (r7, r9).
    Value,
    /// The old value swapped (r8, r9); only with an `olds` map.
    Old,
}

/// [`value_and_old`], calling `between` after each [`Step`] of a readable value. The hook may use r0-r5
/// (and so call helpers): r6-r9 are what this code keeps. With `reads`, a one-entry array of one u32, the
/// bytes of a trap taken in user space are read only while that is not 0, else left unknown as an
/// unreadable value is: a read-write breakpoint on a user address traps on the program's own read, byte by
/// byte (the kernel counts those traps and runs no program for them), and `--control` can move a watch
/// between write and read-write.
pub(crate) fn value_and_old_steps(
    a: &mut Asm,
    len: u8,
    (olds, reads): (Option<Olds>, Option<i32>),
    done: Label,
    between: &mut dyn FnMut(&mut Asm, Step),
) {
    let unreadable = a.label();
    a.call(helper::GET_CURRENT_PID_TGID);
    a.store(DW, FP, PID_TGID, R0);
    // The olds key: the address itself for a kernel address (each CPU's copy of a per-CPU variable has its
    // own previous value; an address is in the upper half, so it is never a tgid), the tgid for a user one.
    a.load(DW, R8, R6, CTX_ADDR);
    a.mov(R1, R0).alu_imm(Alu::Rsh, R1, 32);
    let user = a.label();
    a.jump_imm(Cond::Sge, R8, 0, user).mov(R1, R8);
    a.bind(user);
    a.store(DW, FP, KEY, R1);
    between(a, Step::Task);
    // The hook may have used r1-r5; the address is still in r8.
    if let Some(reads) = reads {
        // A trap taken in the kernel runs with the debug registers cleared (the kernel's #DB handler
        // saves and clears DR7 for it): the read cannot trap there, and a kernel writer's bytes are read.
        let read = a.label();
        a.ld_map_value(R1, reads, 0)
            .load(W, R1, R1, 0)
            .jump_imm(Cond::Ne, R1, 0, read)
            .load(DW, R1, R6, CTX_CS)
            .alu_imm(Alu::And, R1, 3)
            .jump_imm(Cond::Ne, R1, 0, unreadable);
        a.bind(read);
    }

    // The value: the watched bytes, read where they live.
    a.store_imm(DW, FP, BUF, 0);
    a.mov(R1, FP)
        .alu_imm(Alu::Add, R1, i32::from(BUF))
        .mov_imm(R2, i32::from(len))
        .mov(R3, R8);
    probe_read(a);
    a.jump_imm(Cond::Ne, R0, 0, unreadable);
    let size = match len {
        1 => B,
        2 => H,
        4 => W,
        _ => DW,
    };
    a.load(size, R7, FP, BUF).mov_imm(R9, VALUE_KNOWN as i32);
    between(a, Step::Value);
    match olds {
        Some(olds) => {
            swap_old(a, olds);
            between(a, Step::Old);
        }
        None => {
            a.mov_imm(R8, 0);
        }
    }
    a.goto(done);
    a.bind(unreadable);
    a.mov_imm(R7, 0).mov_imm(R8, 0).mov_imm(R9, 0);
    a.goto(done);
}

/// Swaps the value in r7 with the last one kept in `olds` into r8 (0 when there is none), with r9's
/// `OLD_KNOWN` when there was; the key is in the `KEY` stack slot.
fn swap_old(a: &mut Asm, olds: Olds) {
    let swapped = a.label();
    if let Some(array) = olds.by_tgid {
        swap_by_tgid(a, array, swapped);
    }
    // The old value: swapped in place when there is one, inserted otherwise.
    let olds = olds.hash;
    let insert = a.label();
    a.mov_imm(R8, 0);
    lookup_key(a, olds, KEY, insert);
    a.load(DW, R8, R0, 0)
        .store(DW, R0, 0, R7)
        .alu_imm(Alu::Or, R9, OLD_KNOWN as i32)
        .goto(swapped);
    a.bind(insert);
    a.store(DW, FP, SCRATCH, R7)
        .ld_map_fd(R1, olds)
        .mov(R2, FP)
        .alu_imm(Alu::Add, R2, i32::from(KEY))
        .mov(R3, FP)
        .alu_imm(Alu::Add, R3, i32::from(SCRATCH))
        .mov_imm(R4, 0)
        .call(helper::MAP_UPDATE_ELEM);
    a.bind(swapped);
}

/// Copies r2 bytes from r3 to r1 where they live: with `bpf_probe_read_user` for a user address (the
/// lower half), `bpf_probe_read_kernel` for a kernel one; r0 is the helper's result.
pub(crate) fn probe_read(a: &mut Asm) {
    let kernel = a.label();
    let read = a.label();
    a.jump_imm(Cond::Slt, R3, 0, kernel)
        .call(helper::PROBE_READ_USER)
        .goto(read);
    a.bind(kernel);
    a.call(helper::PROBE_READ_KERNEL);
    a.bind(read);
}

/// The old value from the by-tgid array (see [`Olds::by_tgid`]) into r8 and the value in r7 put in its
/// place, on to `swapped`, for a user address's tgid the array covers; falls through, with nothing
/// changed, for any other key (in the `KEY` stack slot).
fn swap_by_tgid(a: &mut Asm, array: i32, swapped: Label) {
    let hash = a.label();
    a.load(DW, R1, FP, KEY)
        .jump_imm(Cond::Slt, R1, 0, hash)
        .jump_imm(Cond::Eq, R1, 0, hash);
    // The current generation, from entry 0, kept on the stack across the next lookup.
    lookup(a, (array, 0, ZERO_KEY), hash);
    a.load(DW, R1, R0, 8).store(DW, FP, SCRATCH, R1);
    // The tgid, the key's low half (little-endian), indexes the array; past its end the lookup finds none.
    lookup_key(a, array, KEY, hash);
    a.load(DW, R8, R0, 0)
        .load(DW, R1, R0, 8)
        .load(DW, R2, FP, SCRATCH)
        .store(DW, R0, 0, R7)
        .store(DW, R0, 8, R2);
    let unknown = a.label();
    a.jump(Cond::Ne, R1, R2, unknown)
        .alu_imm(Alu::Or, R9, OLD_KNOWN as i32)
        .goto(swapped);
    a.bind(unknown);
    a.mov_imm(R8, 0).goto(swapped);
    a.bind(hash);
}

/// The filters, each jumping to `drop` when the hit fails it.
pub(crate) fn filter(a: &mut Asm, f: &Filter, drop: Label) {
    match f.place {
        Place::Anywhere => {}
        Place::Kernel | Place::User => {
            a.load(DW, R2, R6, CTX_CS).alu_imm(Alu::And, R2, 3);
            let cond = if f.place == Place::Kernel {
                Cond::Ne
            } else {
                Cond::Eq
            };
            a.jump_imm(cond, R2, 0, drop);
        }
    }
    if f.exclude_idle {
        a.load(DW, R2, FP, PID_TGID)
            .alu_imm(Alu::Lsh, R2, 32)
            .jump_imm(Cond::Eq, R2, 0, drop);
    }
    if !f.tids.is_empty() {
        let ok = a.label();
        a.load(DW, R2, FP, PID_TGID)
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
        if f.comms.iter().any(|c| c == IDLE) {
            a.load(DW, R2, FP, PID_TGID)
                .alu_imm(Alu::Lsh, R2, 32)
                .jump_imm(Cond::Eq, R2, 0, ok);
        }
        a.mov(R1, FP)
            .alu_imm(Alu::Add, R1, i32::from(COMM))
            .mov_imm(R2, 16)
            .call(helper::GET_CURRENT_COMM)
            .load(DW, R1, FP, COMM)
            .load(DW, R2, FP, COMM + 8);
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
        Side::Value => R7,
        Side::Old => R8,
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

/// Jumps to `yes` when `cond` holds for the value in r7, the old value in r8 and the flags in r9, to `no`
/// otherwise. Uses r1-r3 only (no calls).
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
            a.mov(R1, R9)
                .alu_imm(Alu::And, R1, OLD_KNOWN as i32)
                .jump_imm(Cond::Eq, R1, 0, yes)
                .jump(Cond::Ne, R7, R8, yes)
                .goto(no);
        }
        Condition::Compare(c) => {
            if reads_old(c) {
                a.mov(R1, R9)
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

/// Stores the current task's tgid (u32) at `slot` on the stack and calls `op` (`MAP_LOOKUP_ELEM`,
/// `MAP_DELETE_ELEM`) on `map` with it as the key: the watched-process map's one key. r0 is `op`'s result.
pub fn current_tgid_map_op(a: &mut Asm, map: i32, slot: i16, op: i32) {
    a.call(helper::GET_CURRENT_PID_TGID)
        .alu_imm(Alu::Rsh, R0, 32)
        .store(W, FP, slot, R0)
        .ld_map_fd(R1, map)
        .mov(R2, FP)
        .alu_imm(Alu::Add, R2, i32::from(slot))
        .call(op);
}

/// The smallest program `check` loads to see whether BPF works here: `return 1`.
pub fn probe() -> Vec<Insn> {
    let mut a = Asm::new();
    a.mov_imm(R0, 1).exit();
    a.finish().unwrap_or_default()
}
