//! The instruction sequences several programs share: a map lookup, update and count, a read into a stack
//! slot, a record out through a perf event. Each takes its stack slots from the caller (out of its
//! [`super::frame::Frame`]) and clobbers r0-r5 as the helper calls in it do; none writes r6-r9.

use super::insn::{Alu, Asm, Cond, Label, Reg, DW, FP, R0, R1, R2, R3, R4, R5, W};
use super::kernel::{Helper, CURRENT_CPU};

/// r0 = this CPU's entry `index` of the array `map`, its key written at stack offset `key`; on to
/// `missing` when there is none.
pub fn lookup(a: &mut Asm, (map, index, key): (i32, u32, i16), missing: Label) {
    a.store_imm(W, FP, key, index as i32);
    lookup_key(a, map, key, missing);
}

/// r0 = `map`'s entry for the key already at stack offset `key`; on to `missing` when there is none.
pub fn lookup_key(a: &mut Asm, map: i32, key: i16, missing: Label) {
    a.ld_map_fd(R1, map)
        .stack_addr(R2, key)
        .call(Helper::MapLookupElem)
        .jump_imm(Cond::Eq, R0, 0, missing);
}

/// `map[key] = value` for the key and value at stack offsets `key` and `value`, with the update's
/// `flags`; r0 is the helper's result.
pub fn update(a: &mut Asm, map: i32, (key, value): (i16, i16), flags: i32) {
    a.ld_map_fd(R1, map)
        .stack_addr(R2, key)
        .stack_addr(R3, value)
        .mov_imm(R4, flags)
        .call(Helper::MapUpdateElem);
}

/// Deletes `map`'s entry for the key at stack offset `key`; r0 is the helper's result.
pub fn delete(a: &mut Asm, map: i32, key: i16) {
    a.ld_map_fd(R1, map)
        .stack_addr(R2, key)
        .call(Helper::MapDeleteElem);
}

/// Adds `value` (a register calls keep: r6-r9), or one, to this CPU's u64 at `index` of the (per-CPU)
/// array `map`, its key at stack offset `key`.
pub fn add_to(a: &mut Asm, at: (i32, u32, i16), value: Option<Reg>) {
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

/// Copies r2 bytes from r3 to r1 where they live: with `bpf_probe_read_user` for a user address (the
/// lower half), `bpf_probe_read_kernel` for a kernel one; r0 is the helper's result.
pub fn probe_read(a: &mut Asm) {
    let kernel = a.label();
    let read = a.label();
    a.jump_imm(Cond::Slt, R3, 0, kernel)
        .call(Helper::ProbeReadUser)
        .goto(read);
    a.bind(kernel);
    a.call(Helper::ProbeReadKernel);
    a.bind(read);
}

/// Reads `len` bytes of kernel memory at `from + plus` into the stack at offset `into`; on to `failed`
/// when the read fails. `from` may be r3 (the read's own source register) or a kept one.
pub fn read_kernel(a: &mut Asm, into: i16, len: i32, (from, plus): (Reg, i32), failed: Label) {
    a.stack_addr(R1, into).mov_imm(R2, len);
    if from != R3 {
        a.mov(R3, from);
    }
    if plus != 0 {
        a.alu_imm(Alu::Add, R3, plus);
    }
    a.call(Helper::ProbeReadKernel)
        .jump_imm(Cond::Ne, R0, 0, failed);
}

/// Writes the `len` bytes at stack offset `record` through the `PERF_EVENT_ARRAY` `outputs` to this
/// CPU's event (`ctx`: the program's context); r0 is the helper's result.
pub fn perf_output(a: &mut Asm, ctx: Reg, outputs: i32, (record, len): (i16, i32)) {
    a.mov(R1, ctx)
        .ld_map_fd(R2, outputs)
        .ld_imm64(R3, CURRENT_CPU)
        .stack_addr(R4, record)
        .mov_imm(R5, len)
        .call(Helper::PerfEventOutput);
}

/// Stores the current task's tgid (u32) at stack offset `key` and calls `op` (`MapLookupElem`,
/// `MapDeleteElem`) on `map` with it as the key: the watched-process map's one key. r0 is `op`'s result.
pub fn current_tgid_map_op(a: &mut Asm, map: i32, key: i16, op: Helper) {
    a.call(Helper::GetCurrentPidTgid)
        .alu_imm(Alu::Rsh, R0, 32)
        .store(W, FP, key, R0)
        .ld_map_fd(R1, map)
        .stack_addr(R2, key)
        .call(op);
}
