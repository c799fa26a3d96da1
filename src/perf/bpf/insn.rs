//! A small eBPF instruction builder: the few instructions the programs here need, encoded as the kernel's
//! `struct bpf_insn` (8 bytes: opcode, dst/src registers in one byte, a signed 16-bit offset and a signed
//! 32-bit immediate, in the machine's byte order), with forward labels so the code generator never counts
//! jump offsets by hand, and a [`Frame`] that hands out the program's stack slots. Pure: the encodings are
//! checked against the kernel's documented bytes in the tests, and `super::interp` runs the result
//! offline.
//!
//! No clang, no bpf-linker, no assembler crate: the program is a few dozen instructions, and every one of
//! them is built here.

use super::frame::{Frame, Slot, STACK_MAX};
use super::kernel::Helper;

/// A register: r0 return value, r1-r5 arguments (clobbered by calls), r6-r9 kept across calls (named
/// only as [`Kept`]), r10 the read-only frame pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reg(pub u8);

pub const R0: Reg = Reg(0);
pub const R1: Reg = Reg(1);
pub const R2: Reg = Reg(2);
pub const R3: Reg = Reg(3);
pub const R4: Reg = Reg(4);
pub const R5: Reg = Reg(5);
const R6: Reg = Reg(6);
const R7: Reg = Reg(7);
const R8: Reg = Reg(8);
const R9: Reg = Reg(9);
pub const FP: Reg = Reg(10);

/// A register helper calls keep (r6-r9), the only kind a value may be bound to across a call: each
/// program names its bindings as constants of this type (the context, the value, the record...), so a
/// role can never be given a register a call clobbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept(Reg);

impl Kept {
    pub const R6: Kept = Kept(R6);
    pub const R7: Kept = Kept(R7);
    pub const R8: Kept = Kept(R8);
    pub const R9: Kept = Kept(R9);
}

impl From<Kept> for Reg {
    fn from(k: Kept) -> Reg {
        k.0
    }
}

/// A kept register bound to one role of a program (the value read, the record, the stack's bytes...) from
/// where the generator binds it to where it hands the register to the next role. Neither `Copy` nor
/// `Clone`: handing the register on ([`Bound::becomes`]) moves the binding, so generator code that still
/// uses a role after its register went to another does not compile. A binding is passed by reference to
/// the code that uses the role, by value to the code that ends it.
#[derive(Debug, PartialEq, Eq)]
pub struct Bound(Kept);

impl Bound {
    /// The first role of `reg` in the generator that takes the bindings over (the registers a shared
    /// part of the program, such as the value code, leaves its results in).
    pub(crate) fn first(reg: Kept) -> Bound {
        Bound(reg)
    }

    /// The register's next role: this one ends here.
    pub fn becomes(self) -> Bound {
        self
    }

    pub fn kept(&self) -> Kept {
        self.0
    }
}

impl From<&Bound> for Reg {
    fn from(b: &Bound) -> Reg {
        b.0.into()
    }
}

// Instruction classes.
pub const LD: u8 = 0x00;
pub const LDX: u8 = 0x01;
pub const ST: u8 = 0x02;
pub const STX: u8 = 0x03;
pub const JMP: u8 = 0x05;
pub const ALU64: u8 = 0x07;

// Sizes (loads and stores).
pub const W: u8 = 0x00;
pub const H: u8 = 0x08;
pub const B: u8 = 0x10;
pub const DW: u8 = 0x18;
const MEM: u8 = 0x60;
/// The mode of an atomic read-modify-write store (`BPF_ATOMIC`, Linux 5.12; `BPF_XADD` before, same code).
pub const ATOMIC: u8 = 0xc0;
const IMM: u8 = 0x00;

// Source operand: the immediate (K) or the source register (X).
const K: u8 = 0x00;
const X: u8 = 0x08;

/// ALU operations (64-bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alu {
    Add = 0x00,
    Sub = 0x10,
    Mul = 0x20,
    Or = 0x40,
    And = 0x50,
    Lsh = 0x60,
    Rsh = 0x70,
    Xor = 0xa0,
    Mov = 0xb0,
    Arsh = 0xc0,
}

/// Conditional jumps; the `S` ones compare as signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    Eq = 0x10,
    Gt = 0x20,
    Ge = 0x30,
    Set = 0x40,
    Ne = 0x50,
    Sgt = 0x60,
    Sge = 0x70,
    Lt = 0xa0,
    Le = 0xb0,
    Slt = 0xc0,
    Sle = 0xd0,
}

const JA: u8 = 0x00;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;

/// `src_reg` of a 64-bit immediate load that the kernel replaces with the map whose descriptor is `imm`.
pub const PSEUDO_MAP_FD: u8 = 1;
/// `src_reg` of a 64-bit immediate load that the kernel replaces with the address of the value of the
/// one-entry array whose descriptor is `imm`, plus the second slot's offset (no helper call to reach it).
pub const PSEUDO_MAP_VALUE: u8 = 2;

/// `src_reg` of a call to a kernel function (kfunc) by its BTF id in `imm` (`off` 0: the kernel's own BTF).
pub const PSEUDO_KFUNC_CALL: u8 = 2;

/// One `struct bpf_insn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    fn new(code: u8, dst: impl Into<Reg>, src: impl Into<Reg>, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst: dst.into().0,
            src: src.into().0,
            off,
            imm,
        }
    }

    /// The kernel's bytes: the register byte holds dst in its low nibble (on a little-endian machine).
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = if cfg!(target_endian = "little") {
            (self.src << 4) | (self.dst & 0xf)
        } else {
            (self.dst << 4) | (self.src & 0xf)
        };
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }

    /// The kernel's `bpf_insn` as one u64 in memory order, what `BPF_PROG_LOAD` reads.
    pub fn raw(&self) -> u64 {
        u64::from_ne_bytes(self.encode())
    }
}

/// A place in the program a jump can go to, bound later with [`Asm::bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

/// Builds a program: instructions in order, jumps to labels resolved by [`Asm::finish`], stack slots
/// handed out by its [`Frame`].
#[derive(Debug, Default)]
pub struct Asm {
    /// The program's stack slots.
    frame: Frame,
    insns: Vec<Insn>,
    /// Where each label was bound (instruction slot).
    labels: Vec<Option<usize>>,
    /// Jumps waiting for their label: (slot of the jump, label).
    fixups: Vec<(usize, Label)>,
}

/// Why a program could not be assembled: a label never bound (a generator bug), or a jump too far (a `--if` too long).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsmError {
    Unbound(usize),
    TooFar(usize),
    /// The frame's slots take more than the kernel's 512 bytes of stack (a generator bug).
    Stack(u32),
}

impl std::fmt::Display for AsmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AsmError::Unbound(l) => write!(f, "BPF label {l} jumped to but never placed"),
            AsmError::TooFar(at) => write!(f, "BPF jump at {at} is out of the 16-bit range"),
            AsmError::Stack(used) => write!(
                f,
                "the program's stack slots take {used} bytes, more than BPF's {STACK_MAX}"
            ),
        }
    }
}

impl std::error::Error for AsmError {}

impl Asm {
    pub fn new() -> Asm {
        Asm::default()
    }

    /// A stack slot of `len` bytes of its own, below r10 ([`Frame::slot`]).
    pub fn slot(&mut self, len: u16) -> Slot {
        self.frame.slot(len)
    }

    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Whether any jump goes to `label` (the verifier refuses code no path reaches).
    pub fn used(&self, label: Label) -> bool {
        self.fixups.iter().any(|&(_, l)| l == label)
    }

    /// The next instruction is where `label` jumps to.
    pub fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.insns.len());
    }

    fn push(&mut self, insn: Insn) -> &mut Asm {
        self.insns.push(insn);
        self
    }

    /// Pushes jump `insn`, its offset to be pointed at `label` by [`Asm::finish`].
    fn push_jump(&mut self, insn: Insn, label: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), label));
        self.push(insn)
    }

    /// `dst = imm` (sign-extended to 64 bits).
    pub fn mov_imm(&mut self, dst: impl Into<Reg>, imm: i32) -> &mut Asm {
        self.alu_imm(Alu::Mov, dst, imm)
    }

    /// `dst = src`.
    pub fn mov(&mut self, dst: impl Into<Reg>, src: impl Into<Reg>) -> &mut Asm {
        self.alu(Alu::Mov, dst, src)
    }

    /// `dst OP= imm` (64-bit; the immediate is sign-extended).
    pub fn alu_imm(&mut self, op: Alu, dst: impl Into<Reg>, imm: i32) -> &mut Asm {
        self.push(Insn::new(ALU64 | op as u8 | K, dst, R0, 0, imm))
    }

    /// `dst OP= src` (64-bit).
    pub fn alu(&mut self, op: Alu, dst: impl Into<Reg>, src: impl Into<Reg>) -> &mut Asm {
        self.push(Insn::new(ALU64 | op as u8 | X, dst, src, 0, 0))
    }

    /// `dst = imm64`: two slots.
    pub fn ld_imm64(&mut self, dst: impl Into<Reg>, imm: u64) -> &mut Asm {
        self.ld_imm64_src(dst, R0, imm)
    }

    /// `dst = map` for the map with descriptor `fd`: two slots, rewritten by the kernel at load.
    pub fn ld_map_fd(&mut self, dst: impl Into<Reg>, fd: i32) -> &mut Asm {
        self.ld_imm64_src(dst, Reg(PSEUDO_MAP_FD), fd as u32 as u64)
    }

    /// `dst = &value + off` for the (first) value of the array map with descriptor `fd`: two slots,
    /// rewritten by the kernel at load.
    pub fn ld_map_value(&mut self, dst: impl Into<Reg>, fd: i32, off: u32) -> &mut Asm {
        self.ld_imm64_src(
            dst,
            Reg(PSEUDO_MAP_VALUE),
            (u64::from(off) << 32) | u64::from(fd as u32),
        )
    }

    fn ld_imm64_src(&mut self, dst: impl Into<Reg>, src: Reg, imm: u64) -> &mut Asm {
        self.push(Insn::new(LD | DW | IMM, dst, src, 0, imm as u32 as i32));
        self.push(Insn::new(0, R0, R0, 0, (imm >> 32) as u32 as i32))
    }

    /// `dst = *(size *)(src + off)`, zero-extended.
    pub fn load(
        &mut self,
        size: u8,
        dst: impl Into<Reg>,
        src: impl Into<Reg>,
        off: i16,
    ) -> &mut Asm {
        self.push(Insn::new(LDX | size | MEM, dst, src, off, 0))
    }

    /// `*(size *)(dst + off) = src`.
    pub fn store(
        &mut self,
        size: u8,
        dst: impl Into<Reg>,
        off: i16,
        src: impl Into<Reg>,
    ) -> &mut Asm {
        self.push(Insn::new(STX | size | MEM, dst, src, off, 0))
    }

    /// `*(size *)(dst + off) = imm`.
    pub fn store_imm(&mut self, size: u8, dst: impl Into<Reg>, off: i16, imm: i32) -> &mut Asm {
        self.push(Insn::new(ST | size | MEM, dst, R0, off, imm))
    }

    /// `lock *(u64 *)(dst + off) += src` (`BPF_ATOMIC` `BPF_ADD`, what `__sync_fetch_and_add` compiles to
    /// when its result is unused): a count several CPUs add to at once.
    pub fn atomic_add(&mut self, dst: impl Into<Reg>, off: i16, src: impl Into<Reg>) -> &mut Asm {
        self.push(Insn::new(STX | DW | ATOMIC, dst, src, off, 0))
    }

    /// `src = atomic_fetch_add((u64 *)(dst + off), src)` (`BPF_ATOMIC` `BPF_ADD | BPF_FETCH`, Linux 5.12):
    /// the value before the add comes back in `src`.
    pub fn atomic_fetch_add(
        &mut self,
        dst: impl Into<Reg>,
        off: i16,
        src: impl Into<Reg>,
    ) -> &mut Asm {
        self.push(Insn::new(STX | DW | ATOMIC, dst, src, off, 0x01))
    }

    /// `if dst COND imm goto label` (the immediate is sign-extended to 64 bits).
    pub fn jump_imm(
        &mut self,
        cond: Cond,
        dst: impl Into<Reg>,
        imm: i32,
        label: Label,
    ) -> &mut Asm {
        self.push_jump(Insn::new(JMP | cond as u8 | K, dst, R0, 0, imm), label)
    }

    /// `if dst COND src goto label`.
    pub fn jump(
        &mut self,
        cond: Cond,
        dst: impl Into<Reg>,
        src: impl Into<Reg>,
        label: Label,
    ) -> &mut Asm {
        self.push_jump(Insn::new(JMP | cond as u8 | X, dst, src, 0, 0), label)
    }

    /// `goto label`.
    pub fn goto(&mut self, label: Label) -> &mut Asm {
        self.push_jump(Insn::new(JMP | JA, R0, R0, 0, 0), label)
    }

    /// Calls kernel helper `helper`: arguments in r1-r5, result in r0, r1-r5 clobbered.
    pub fn call(&mut self, helper: Helper) -> &mut Asm {
        self.push(Insn::new(JMP | CALL, R0, R0, 0, helper as i32))
    }

    /// Calls the kernel function (kfunc) whose id in the kernel's own BTF is `btf_id`: arguments in
    /// r1-r5, result in r0, r1-r5 clobbered.
    pub fn call_kfunc(&mut self, btf_id: i32) -> &mut Asm {
        self.push(Insn::new(JMP | CALL, R0, Reg(PSEUDO_KFUNC_CALL), 0, btf_id))
    }

    /// `dst = r10 + off`: the address of a stack slot's byte, what a helper takes a pointer to.
    pub fn stack_addr(&mut self, dst: impl Into<Reg> + Copy, off: i16) -> &mut Asm {
        self.mov(dst, FP).alu_imm(Alu::Add, dst, i32::from(off))
    }

    /// Returns r0.
    pub fn exit(&mut self) -> &mut Asm {
        self.push(Insn::new(JMP | EXIT, R0, R0, 0, 0))
    }

    /// The program, every jump pointed at its label (offsets count from the next instruction).
    pub fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        if self.frame.used() > u32::from(STACK_MAX) {
            return Err(AsmError::Stack(self.frame.used()));
        }
        for &(at, label) in &self.fixups {
            let to = self.labels[label.0].ok_or(AsmError::Unbound(label.0))?;
            let off = to as i64 - at as i64 - 1;
            self.insns[at].off = i16::try_from(off).map_err(|_| AsmError::TooFar(at))?;
        }
        Ok(self.insns)
    }
}

/// The helpers `insns` call, in order (a test checks what a program asks of the kernel).
#[cfg(test)]
pub fn calls(insns: &[Insn]) -> Vec<Helper> {
    insns
        .iter()
        .filter(|i| i.code == JMP | CALL && i.src == 0)
        .filter_map(|i| Helper::from_id(i.imm))
        .collect()
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    fn bytes(f: impl FnOnce(&mut Asm)) -> Vec<[u8; 8]> {
        let mut a = Asm::new();
        f(&mut a);
        a.finish().unwrap().iter().map(Insn::encode).collect()
    }

    /// Encodings as `bpftool prog dump xlated opcodes` and the kernel's instruction-set document give them.
    #[test]
    fn encodes_as_the_kernel_documents() {
        assert_eq!(
            bytes(|a| {
                a.mov_imm(R0, 1).exit();
            }),
            [[0xb7, 0x00, 0, 0, 1, 0, 0, 0], [0x95, 0, 0, 0, 0, 0, 0, 0]]
        );
        // r6 = r1; r1 = *(u64 *)(r6 + 176); *(u64 *)(r10 - 8) = r1
        assert_eq!(
            bytes(|a| {
                a.mov(R6, R1).load(DW, R1, R6, 176).store(DW, FP, -8, R1);
            }),
            [
                [0xbf, 0x16, 0, 0, 0, 0, 0, 0],
                [0x79, 0x61, 0xb0, 0x00, 0, 0, 0, 0],
                [0x7b, 0x1a, 0xf8, 0xff, 0, 0, 0, 0],
            ]
        );
        // *(u32 *)(r10 - 4) = 0; r1 = *(u8 *)(r10 - 8); r1 <<= 56; r1 s>>= 56
        assert_eq!(
            bytes(|a| {
                a.store_imm(W, FP, -4, 0)
                    .load(B, R1, FP, -8)
                    .alu_imm(Alu::Lsh, R1, 56)
                    .alu_imm(Alu::Arsh, R1, 56);
            }),
            [
                [0x62, 0x0a, 0xfc, 0xff, 0, 0, 0, 0],
                [0x71, 0xa1, 0xf8, 0xff, 0, 0, 0, 0],
                [0x67, 0x01, 0, 0, 56, 0, 0, 0],
                [0xc7, 0x01, 0, 0, 56, 0, 0, 0],
            ]
        );
        // call bpf_get_current_pid_tgid (14)
        assert_eq!(
            bytes(|a| {
                a.call(Helper::GetCurrentPidTgid);
            }),
            [[0x85, 0, 0, 0, 14, 0, 0, 0]]
        );
        // call kfunc 0x1234: src_reg 2 (BPF_PSEUDO_KFUNC_CALL), the BTF id in the immediate.
        assert_eq!(
            bytes(|a| {
                a.call_kfunc(0x1234);
            }),
            [[0x85, 0x20, 0, 0, 0x34, 0x12, 0, 0]]
        );
        // r1 = map[fd 5] takes two slots: src_reg 1, the fd in the first immediate.
        assert_eq!(
            bytes(|a| {
                a.ld_map_fd(R1, 5);
            }),
            [[0x18, 0x11, 0, 0, 5, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]]
        );
        assert_eq!(
            bytes(|a| {
                a.ld_imm64(R3, 0x1122_3344_5566_7788);
            }),
            [
                [0x18, 0x03, 0, 0, 0x88, 0x77, 0x66, 0x55],
                [0, 0, 0, 0, 0x44, 0x33, 0x22, 0x11]
            ]
        );
    }

    /// Offsets count from the instruction after the jump, forward and backward, and a 64-bit load counts as
    /// two instructions.
    #[test]
    fn jumps_resolve_to_their_labels() {
        let got = bytes(|a| {
            let done = a.label();
            let top = a.label();
            a.bind(top);
            a.jump_imm(Cond::Eq, R1, 0, done) // 0 -> 4: off 3
                .ld_imm64(R2, 1) // 1, 2
                .jump(Cond::Sgt, R1, R2, top); // 3 -> 0: off -4
            a.bind(done);
            a.goto(top); // 4 -> 0: off -5
        });
        assert_eq!(got[0], [0x15, 0x01, 3, 0, 0, 0, 0, 0]);
        assert_eq!(got[3], [0x6d, 0x21, 0xfc, 0xff, 0, 0, 0, 0]);
        assert_eq!(got[4], [0x05, 0, 0xfb, 0xff, 0, 0, 0, 0]);
    }

    #[test]
    fn an_unbound_label_is_an_error() {
        let mut a = Asm::new();
        let l = a.label();
        a.goto(l);
        assert_eq!(a.finish(), Err(AsmError::Unbound(0)));
    }
}
