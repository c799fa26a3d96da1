//! What an x86-64 store wrote, from its instruction and the registers at the trap.
//!
//! A data breakpoint traps after the store, so the program that reads the watched bytes at the trap can see
//! another CPU's later store instead of this one's. For stores whose value the instruction itself
//! determines, the value is exact whatever other CPUs do: the hit record carries the 16 bytes that end at the
//! trap ip and the trap's `pt_regs` ([`crate::perf::hit_record`]), and this module decodes the one
//! instruction that ends at the trap ip, checks that the bytes it writes hold the watched range, and takes
//! the value from its source:
//!
//! - `mov` (and `movbe`) to memory from a general register or an immediate;
//! - `stos`, `rep stos` included (one with more to do traps with ip still on itself, so the bytes before ip
//!   are another instruction's);
//! - `push` of a register or an immediate;
//! - `cmpxchg`, `cmpxchg8b`, `cmpxchg16b`: ZF says whether it stored the new value (the source register)
//!   or wrote back what memory held (then in rax/edx:eax);
//! - `setcc`: the condition on the flags at the trap (setcc leaves them as they were).
//!
//! Everything else that writes memory (`add`, `inc`, `or`, `xadd`, `xchg`, whose source register now
//! holds the old value, `movs`, vector stores, ...) is not decided here: the caller falls back to the memory
//! read at the trap. A `%fs`/`%gs` operand has a base the registers do not hold, so it is undecided too.
//!
//! Where the instruction starts: the bytes before ip cannot say (`8b 47 48 89 06` is `mov 0x48(%rdi),%eax;
//! mov %eax,(%rsi)`, but its last three bytes read as `mov %rax,(%rsi)`). The caller finds it by walking
//! the function's instructions from its first byte, a known boundary, with [`last_insn_len`], and
//! [`stored`] decodes only the instruction of that length.

use iced_x86::{
    ConditionCode, Decoder, DecoderOptions, Instruction, InstructionInfoFactory, Mnemonic,
    OpAccess, OpKind, Register,
};

// The trap's registers come as the kernel keeps them: `struct pt_regs`, by word.
use crate::perf::bpf::kernel::pt_regs;

const FLAG_CF: u64 = 1 << 0;
const FLAG_PF: u64 = 1 << 2;
const FLAG_ZF: u64 = 1 << 6;
const FLAG_SF: u64 = 1 << 7;
const FLAG_DF: u64 = 1 << 10;
const FLAG_OF: u64 = 1 << 11;

/// The length of the instruction that ends at `start + code.len()` (the trap ip), walking `code`, the
/// bytes from `start` (a function's first byte: an instruction boundary) to ip, one instruction at a
/// time. `None` when the walk does not land on ip (an instruction crosses it: `start` was no boundary of
/// this code, or the function holds data) or meets bytes that are no instruction.
pub fn last_insn_len(code: &[u8], start: u64) -> Option<usize> {
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut i = Instruction::default();
    let mut last = None;
    while decoder.can_decode() {
        decoder.decode_out(&mut i);
        // The decoder reads an instruction cut short by the end of `code` as invalid too.
        if i.is_invalid() {
            return None;
        }
        last = Some(i.len());
    }
    last
}

/// What the instruction of the last `n` bytes of `insn` (the 16 bytes that end at the trap ip) did to the
/// `len`-byte watched range at `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// It wrote every watched byte: their value, a little-endian integer.
    Whole(u64),
    /// It wrote the watched bytes set in `mask` (a byte of ones each), as `bits` holds them; the others
    /// kept what they held.
    Part { bits: u64, mask: u64 },
    /// It wrote some of them, with a value decided elsewhere (a read-modify-write: memory holds it), or at
    /// an address the registers cannot place (`%fs`/`%gs`).
    Undecided,
    /// It wrote none of them but read them: the trap of a read-write watch on a load (the bytes are as
    /// they were).
    Read,
    /// It wrote none of them and read none: a `rep` instruction that trapped with more to do (ip on
    /// itself, after another instruction), or an access the registers no longer place.
    Nothing,
}

/// What the instruction that ends at the trap ip (`regs`' ip) and is `n` bytes long stored into the
/// watched range: `insn` holds the 16 bytes that end at ip. `n` comes from [`last_insn_len`]: the bytes
/// alone do not say where the instruction starts.
pub fn stored(
    insn: &[u8; 16],
    n: usize,
    regs: &[u64; pt_regs::WORDS],
    addr: u64,
    len: u8,
) -> Stored {
    if n == 0 || n > insn.len() {
        return Stored::Undecided;
    }
    let ip = regs[pt_regs::IP];
    let start = ip.wrapping_sub(n as u64);
    let mut decoder = Decoder::with_ip(64, &insn[insn.len() - n..], start, DecoderOptions::NONE);
    let i = decoder.decode();
    if i.is_invalid() || i.len() != n {
        return Stored::Undecided;
    }
    match written(&i, regs) {
        Some(write) if write.overlaps(addr, len) => write.watched(addr, len),
        Some(_) => Stored::Nothing,
        None => {
            let mut info = InstructionInfoFactory::new();
            match other_write(&mut info, &i, regs, addr, len) {
                Some(true) | None => Stored::Undecided,
                Some(false) if reads(&mut info, &i, regs, addr, len) => Stored::Read,
                Some(false) => Stored::Nothing,
            }
        }
    }
}

/// Whether `i`, an instruction [`written`] does not decide, writes memory that overlaps the watched range
/// (`None`: it writes memory at an address the registers do not give).
fn other_write(
    info: &mut InstructionInfoFactory,
    i: &Instruction,
    regs: &[u64; pt_regs::WORDS],
    addr: u64,
    len: u8,
) -> Option<bool> {
    for m in info.info(i).used_memory() {
        if !matches!(
            m.access(),
            OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
        ) {
            continue;
        }
        let at = m.virtual_address(0, |r, _, _| register_or_segment(regs, r))?;
        let size = (m.memory_size().size() as u64).max(1);
        if (Write { at, size, value: 0 }).overlaps(addr, len) {
            return Some(true);
        }
    }
    Some(false)
}

/// Whether `i` reads memory that overlaps the watched range, at an address the registers at the trap give
/// (a load that overwrote its own base register gives another one: not a read of the range, then).
fn reads(
    info: &mut InstructionInfoFactory,
    i: &Instruction,
    regs: &[u64; pt_regs::WORDS],
    addr: u64,
    len: u8,
) -> bool {
    info.info(i).used_memory().iter().any(|m| {
        matches!(
            m.access(),
            OpAccess::Read | OpAccess::CondRead | OpAccess::ReadWrite | OpAccess::ReadCondWrite
        ) && m
            .virtual_address(0, |r, _, _| register_or_segment(regs, r))
            .is_some_and(|at| {
                let size = (m.memory_size().size() as u64).max(1);
                (Write { at, size, value: 0 }).overlaps(addr, len)
            })
    })
}

/// A store of `size` bytes of `value` (little-endian) at `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Write {
    at: u64,
    size: u64,
    value: u128,
}

impl Write {
    fn overlaps(&self, addr: u64, len: u8) -> bool {
        addr < self.at.wrapping_add(self.size) && self.at < addr.wrapping_add(u64::from(len))
    }

    /// The watched bytes this store wrote, and their value.
    fn watched(&self, addr: u64, len: u8) -> Stored {
        let (mut bits, mut mask) = (0u64, 0u64);
        for k in 0..u64::from(len) {
            let at = addr.wrapping_add(k).wrapping_sub(self.at);
            if at < self.size {
                let byte = (self.value >> (8 * at)) as u64 & 0xff;
                bits |= byte << (8 * k);
                mask |= 0xff << (8 * k);
            }
        }
        let all = if len >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * len)) - 1
        };
        if mask == all {
            Stored::Whole(bits)
        } else {
            Stored::Part { bits, mask }
        }
    }
}

/// The store `i` made, when its value is one this module decides.
fn written(i: &Instruction, regs: &[u64; pt_regs::WORDS]) -> Option<Write> {
    let size = i.memory_size().size() as u64;
    match i.mnemonic() {
        Mnemonic::Mov | Mnemonic::Movbe if is_memory(i.op0_kind()) => {
            let value = source(i, 1, regs)?;
            let value = if i.mnemonic() == Mnemonic::Movbe {
                swap(value, size)
            } else {
                value
            };
            Some(Write {
                at: address(i, 0, regs)?,
                size,
                value: u128::from(value),
            })
        }
        Mnemonic::Stosb | Mnemonic::Stosw | Mnemonic::Stosd | Mnemonic::Stosq => {
            // rdi has moved past (or, with DF, before) the store by now. A `rep stos` ends at ip only after
            // its last store (until then the trap ip is the instruction itself), and every store is rax.
            let rdi = reg(regs, Register::RDI)?;
            let at = if regs[pt_regs::FLAGS] & FLAG_DF == 0 {
                rdi.wrapping_sub(size)
            } else {
                rdi.wrapping_add(size)
            };
            Some(Write {
                at,
                size,
                value: u128::from(reg(regs, Register::RAX)?),
            })
        }
        Mnemonic::Push if i.op0_kind() != OpKind::Memory => {
            let value = match i.op0_kind() {
                OpKind::Register if i.op0_register().full_register() == Register::RSP => {
                    return None
                }
                OpKind::Register => reg(regs, i.op0_register())?,
                _ => i.immediate(0),
            };
            // The stack pointer after the push is where it wrote; push's memory size is its operand size.
            let size = if i.op0_kind() == OpKind::Register {
                i.op0_register().size() as u64
            } else {
                i.stack_pointer_increment().unsigned_abs() as u64
            };
            Some(Write {
                at: regs[pt_regs::SP],
                size,
                value: u128::from(value),
            })
        }
        Mnemonic::Cmpxchg => {
            let at = address_unless_written(i, 0, regs, &[Register::RAX])?;
            // ZF: stored the source; else memory is unchanged and rax now holds it.
            let value = if regs[pt_regs::FLAGS] & FLAG_ZF != 0 {
                source(i, 1, regs)?
            } else {
                reg(regs, Register::RAX)?
            };
            Some(Write {
                at,
                size,
                value: u128::from(value),
            })
        }
        Mnemonic::Cmpxchg8b | Mnemonic::Cmpxchg16b => {
            let at = address_unless_written(i, 0, regs, &[Register::RAX, Register::RDX])?;
            let half = size * 4;
            let (lo, hi) = if regs[pt_regs::FLAGS] & FLAG_ZF != 0 {
                (Register::RBX, Register::RCX)
            } else {
                (Register::RAX, Register::RDX)
            };
            let (lo, hi) = (
                trunc(reg(regs, lo)?, size / 2),
                trunc(reg(regs, hi)?, size / 2),
            );
            Some(Write {
                at,
                size,
                value: u128::from(lo) | (u128::from(hi) << half),
            })
        }
        _ if i.condition_code() != ConditionCode::None
            && is_setcc(i.mnemonic())
            && is_memory(i.op0_kind()) =>
        {
            Some(Write {
                at: address(i, 0, regs)?,
                size: 1,
                value: u128::from(condition(i.condition_code(), regs[pt_regs::FLAGS])),
            })
        }
        _ => None,
    }
}

fn is_memory(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::Memory | OpKind::MemoryESRDI | OpKind::MemoryESEDI | OpKind::MemoryESDI
    )
}

fn is_setcc(m: Mnemonic) -> bool {
    matches!(
        m,
        Mnemonic::Seto
            | Mnemonic::Setno
            | Mnemonic::Setb
            | Mnemonic::Setae
            | Mnemonic::Sete
            | Mnemonic::Setne
            | Mnemonic::Setbe
            | Mnemonic::Seta
            | Mnemonic::Sets
            | Mnemonic::Setns
            | Mnemonic::Setp
            | Mnemonic::Setnp
            | Mnemonic::Setl
            | Mnemonic::Setge
            | Mnemonic::Setle
            | Mnemonic::Setg
    )
}

/// Whether condition `cc` holds on `flags`.
fn condition(cc: ConditionCode, flags: u64) -> bool {
    let f = |bit| flags & bit != 0;
    match cc {
        ConditionCode::o => f(FLAG_OF),
        ConditionCode::no => !f(FLAG_OF),
        ConditionCode::b => f(FLAG_CF),
        ConditionCode::ae => !f(FLAG_CF),
        ConditionCode::e => f(FLAG_ZF),
        ConditionCode::ne => !f(FLAG_ZF),
        ConditionCode::be => f(FLAG_CF) || f(FLAG_ZF),
        ConditionCode::a => !f(FLAG_CF) && !f(FLAG_ZF),
        ConditionCode::s => f(FLAG_SF),
        ConditionCode::ns => !f(FLAG_SF),
        ConditionCode::p => f(FLAG_PF),
        ConditionCode::np => !f(FLAG_PF),
        ConditionCode::l => f(FLAG_SF) != f(FLAG_OF),
        ConditionCode::ge => f(FLAG_SF) == f(FLAG_OF),
        ConditionCode::le => f(FLAG_ZF) || f(FLAG_SF) != f(FLAG_OF),
        ConditionCode::g => !f(FLAG_ZF) && f(FLAG_SF) == f(FLAG_OF),
        ConditionCode::None => false,
    }
}

/// Operand `op`'s value when it is a general register or an immediate, at the operand's width.
fn source(i: &Instruction, op: u32, regs: &[u64; pt_regs::WORDS]) -> Option<u64> {
    match i.op_kind(op) {
        OpKind::Register => reg(regs, i.op_register(op)),
        OpKind::Immediate8
        | OpKind::Immediate16
        | OpKind::Immediate32
        | OpKind::Immediate64
        | OpKind::Immediate8to16
        | OpKind::Immediate8to32
        | OpKind::Immediate8to64
        | OpKind::Immediate32to64 => Some(i.immediate(op)),
        _ => None,
    }
}

/// Operand `op`'s address, when every register it uses is in `pt_regs` (not `%fs`/`%gs`-relative).
fn address(i: &Instruction, op: u32, regs: &[u64; pt_regs::WORDS]) -> Option<u64> {
    i.virtual_address(op, 0, |r, _, _| register_or_segment(regs, r))
}

/// A register's value for an address: the base of ES, CS, SS and DS is 0 in 64-bit mode; FS and GS bases
/// are not in `pt_regs`.
fn register_or_segment(regs: &[u64; pt_regs::WORDS], r: Register) -> Option<u64> {
    match r {
        Register::ES | Register::CS | Register::SS | Register::DS => Some(0),
        _ => reg(regs, r),
    }
}

/// [`address`], unknown when it is built on a register the instruction may have written (`written`).
fn address_unless_written(
    i: &Instruction,
    op: u32,
    regs: &[u64; pt_regs::WORDS],
    written: &[Register],
) -> Option<u64> {
    let uses = |r: Register| r != Register::None && written.contains(&r.full_register());
    if uses(i.memory_base()) || uses(i.memory_index()) {
        return None;
    }
    address(i, op, regs)
}

/// A general register's value at its own width (`al`, `ah`, `r9w`, `esi`, ...); `None` for any other.
fn reg(regs: &[u64; pt_regs::WORDS], r: Register) -> Option<u64> {
    if !r.is_gpr() {
        return None;
    }
    let full = regs[slot(r.full_register())?];
    Some(match r {
        Register::AH | Register::BH | Register::CH | Register::DH => (full >> 8) & 0xff,
        _ => trunc(full, r.size() as u64),
    })
}

/// The `pt_regs` word of a 64-bit general register.
fn slot(r: Register) -> Option<usize> {
    Some(match r {
        Register::R15 => pt_regs::R15,
        Register::R14 => pt_regs::R14,
        Register::R13 => pt_regs::R13,
        Register::R12 => pt_regs::R12,
        Register::RBP => pt_regs::BP,
        Register::RBX => pt_regs::BX,
        Register::R11 => pt_regs::R11,
        Register::R10 => pt_regs::R10,
        Register::R9 => pt_regs::R9,
        Register::R8 => pt_regs::R8,
        Register::RAX => pt_regs::AX,
        Register::RCX => pt_regs::CX,
        Register::RDX => pt_regs::DX,
        Register::RSI => pt_regs::SI,
        Register::RDI => pt_regs::DI,
        Register::RSP => pt_regs::SP,
        _ => return None,
    })
}

fn trunc(v: u64, bytes: u64) -> u64 {
    if bytes >= 8 {
        v
    } else {
        v & ((1u64 << (8 * bytes)) - 1)
    }
}

fn swap(v: u64, bytes: u64) -> u64 {
    match bytes {
        2 => u64::from((v as u16).swap_bytes()),
        4 => u64::from((v as u32).swap_bytes()),
        _ => v.swap_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registers with ip at `ip` and every general register set to a distinct pattern.
    fn regs(ip: u64) -> [u64; pt_regs::WORDS] {
        let mut r = [0u64; pt_regs::WORDS];
        for (i, w) in r.iter_mut().enumerate() {
            *w = 0x1111_1111_1111_1111u64.wrapping_mul(i as u64 + 1);
        }
        r[pt_regs::IP] = ip;
        r[pt_regs::FLAGS] = 0x202;
        r
    }

    /// `code` placed so that it ends at the trap ip, after filler bytes that decode to nothing that writes.
    fn bytes(code: &[u8]) -> [u8; 16] {
        let mut b = [0x90u8; 16];
        b[16 - code.len()..].copy_from_slice(code);
        b
    }

    /// A store that writes the `mask` bits of the watch, as `bits`.
    fn part(bits: u64, mask: u64) -> Stored {
        Stored::Part { bits, mask }
    }

    const IP: u64 = 0x40_1000;

    /// What `code`, one instruction ending at the trap ip (its start known), stored into the range.
    fn stored_value(
        code: &[u8; 16],
        regs: &[u64; pt_regs::WORDS],
        addr: u64,
        len: u8,
        _memory: Option<u64>,
    ) -> Option<u64> {
        // The filler before the instruction is 0x90 (nop): the instruction is what follows the last one.
        let n = 16 - code.iter().take_while(|&&b| b == 0x90).count();
        match stored(code, n, regs, addr, len) {
            Stored::Whole(v) => Some(v),
            _ => None,
        }
    }

    #[test]
    fn mov_from_a_register_is_the_register_at_the_watched_width() {
        let mut r = regs(IP);
        r[14] = 0x7000; // rdi
        r[10] = 0xdead_beef_cafe_f00d; // rax
                                       // mov %rax,(%rdi)
        assert_eq!(
            stored_value(&bytes(&[0x48, 0x89, 0x07]), &r, 0x7000, 8, None),
            Some(0xdead_beef_cafe_f00d)
        );
        // mov %eax,(%rdi) watched as 4 bytes, and the upper half of it as 2 bytes
        assert_eq!(
            stored_value(&bytes(&[0x89, 0x07]), &r, 0x7000, 4, None),
            Some(0xcafe_f00d)
        );
        assert_eq!(
            stored_value(&bytes(&[0x89, 0x07]), &r, 0x7002, 2, None),
            Some(0xcafe)
        );
        // mov %ah,(%rdi)
        assert_eq!(
            stored_value(&bytes(&[0x88, 0x27]), &r, 0x7000, 1, None),
            Some(0xf0)
        );
    }

    #[test]
    fn a_store_narrower_than_the_watch_or_elsewhere_is_not_decided() {
        let mut r = regs(IP);
        r[14] = 0x7000;
        // mov %ax,(%rdi) into an 8-byte watch: the other six bytes are memory's.
        assert_eq!(
            stored_value(&bytes(&[0x66, 0x89, 0x07]), &r, 0x7000, 8, None),
            None
        );
        // A store to another address: nothing ends at ip that wrote the range.
        assert_eq!(
            stored_value(&bytes(&[0x48, 0x89, 0x07]), &r, 0x9000, 8, None),
            None
        );
    }

    #[test]
    fn immediates_and_rip_relative_addresses() {
        let r = regs(IP);
        // movq $-2,0x1000(%rip): the address is relative to the trap ip.
        let code = [
            0x48, 0xc7, 0x05, 0x00, 0x10, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff,
        ];
        assert_eq!(
            stored_value(&bytes(&code), &r, IP + 0x1000, 8, None),
            Some(0xffff_ffff_ffff_fffe)
        );
        // movl $0x2a,0x8(%rbx,%rcx,4)
        let mut r = regs(IP);
        r[5] = 0x1_0000; // rbx
        r[11] = 3; // rcx
        let code = [0xc7, 0x44, 0x8b, 0x08, 0x2a, 0x00, 0x00, 0x00];
        assert_eq!(
            stored_value(&bytes(&code), &r, 0x1_0014, 4, None),
            Some(0x2a)
        );
    }

    #[test]
    fn the_instruction_is_the_one_the_walk_from_the_function_start_ends_on() {
        // mov 0x48(%rdi),%eax; mov %eax,(%rsi): the bytes before ip also read as `48 89 06`.
        let code = [0x8b, 0x47, 0x48, 0x89, 0x06];
        assert_eq!(last_insn_len(&code, IP - 5), Some(2));
        // With a REX.W of its own, the store is the three bytes.
        let code = [0x8b, 0x47, 0x08, 0x48, 0x89, 0x06];
        assert_eq!(last_insn_len(&code, IP - 6), Some(3));
        // Several prefixes: lock cmpxchg %ecx,%gs:(%rdi) after a push; data16 + rex mov $1,(%rax).
        let code = [0x55, 0x65, 0xf0, 0x0f, 0xb1, 0x0f];
        assert_eq!(last_insn_len(&code, IP - 6), Some(5));
        let code = [0x90, 0x66, 0x41, 0xc7, 0x00, 0x01, 0x00];
        assert_eq!(last_insn_len(&code, IP - 7), Some(6));
        // A walk that crosses ip (the start was inside an instruction), an instruction cut short, and
        // bytes that are no instruction: no boundary.
        assert_eq!(last_insn_len(&[0x8b, 0x47, 0x48, 0x89], IP - 4), None);
        assert_eq!(last_insn_len(&[0x8b, 0x47], IP - 2), None);
        assert_eq!(last_insn_len(&[0x90, 0x06], IP - 2), None);
        assert_eq!(last_insn_len(&[], IP), None);

        // What each reading stores into an 8-byte watch whose upper half memory holds: the 2-byte one
        // (the right one) writes the lower half only; the 3-byte one would claim all eight.
        let mut r = regs(IP);
        r[13] = 0x7000; // rsi
        r[10] = 0x2a; // rax, as the 4-byte load left it
        let insn = bytes(&[0x8b, 0x47, 0x48, 0x89, 0x06]);
        assert_eq!(stored(&insn, 2, &r, 0x7000, 8), part(0x2a, 0xffff_ffff));
        assert_eq!(stored(&insn, 3, &r, 0x7000, 8), Stored::Whole(0x2a));
        assert_eq!(stored(&insn, 2, &r, 0x7000, 4), Stored::Whole(0x2a));
        // The upper half alone is not written by it; a read of the range writes nothing.
        assert_eq!(stored(&insn, 2, &r, 0x7004, 4), Stored::Nothing);
        let load = bytes(&[0x48, 0x8b, 0x0e]); // mov (%rsi),%rcx
        assert_eq!(stored(&load, 3, &r, 0x7000, 8), Stored::Read);
        assert_eq!(stored(&load, 3, &r, 0x9000, 8), Stored::Nothing);
        // A length that is no instruction there.
        assert_eq!(stored(&insn, 1, &r, 0x7000, 8), Stored::Undecided);
    }

    #[test]
    fn movbe_is_decided_at_its_own_width() {
        // movbe %eax,(%rsi) (0f 38 f1 06) on a 1-byte watch of its first byte: the byte-swapped eax's low
        // byte, eax's top byte. The bytes before it end in 0x48 (`mov 0x48(%rdi),%ecx`): read as the
        // prefix, the 8-byte form would give rax's top byte.
        let mut r = regs(IP);
        r[13] = 0x7000;
        r[10] = 0x1122_3344_5566_7788;
        let code = [0x8b, 0x4f, 0x48, 0x0f, 0x38, 0xf1, 0x06];
        assert_eq!(last_insn_len(&code, IP - 7), Some(4));
        let insn = bytes(&code);
        assert_eq!(stored(&insn, 4, &r, 0x7000, 1), Stored::Whole(0x55));
        assert_eq!(stored(&insn, 4, &r, 0x7000, 4), Stored::Whole(0x8877_6655));
        assert_eq!(stored(&insn, 5, &r, 0x7000, 1), Stored::Whole(0x11));
        // movbe %ax,(%rsi) into a 4-byte watch: two of its bytes.
        let insn = bytes(&[0x66, 0x0f, 0x38, 0xf1, 0x06]);
        assert_eq!(stored(&insn, 5, &r, 0x7000, 4), part(0x8877, 0xffff));
    }

    #[test]
    fn read_modify_writes_fall_back_to_memory() {
        let mut r = regs(IP);
        r[14] = 0x7000;
        for code in [
            &[0x48, 0x01, 0x07][..],         // add %rax,(%rdi)
            &[0x48, 0xff, 0x07],             // incq (%rdi)
            &[0xf0, 0x48, 0x0f, 0xc1, 0x07], // lock xadd %rax,(%rdi)
            &[0x48, 0x87, 0x07],             // xchg %rax,(%rdi)
            &[0xf0, 0x48, 0x83, 0x0f, 0x01], // lock orq $1,(%rdi)
        ] {
            assert_eq!(
                stored_value(&bytes(code), &r, 0x7000, 8, None),
                None,
                "{code:x?}"
            );
        }
    }

    #[test]
    fn stos_push_and_cmpxchg() {
        let mut r = regs(IP);
        r[10] = 0x55; // rax
        r[14] = 0x7008; // rdi after stosq
        assert_eq!(
            stored_value(&bytes(&[0x48, 0xab]), &r, 0x7000, 8, None),
            Some(0x55)
        );
        // rep stos ends at ip after its last store, which is the one before rdi.
        assert_eq!(
            stored_value(&bytes(&[0xf3, 0x48, 0xab]), &r, 0x7000, 8, None),
            Some(0x55)
        );

        let mut r = regs(IP);
        r[pt_regs::SP] = 0x7ff0;
        r[5] = 0x1234; // rbx
        assert_eq!(
            stored_value(&bytes(&[0x53]), &r, 0x7ff0, 8, None),
            Some(0x1234)
        ); // push %rbx
        assert_eq!(
            stored_value(&bytes(&[0x6a, 0xff]), &r, 0x7ff0, 8, None), // push $-1
            Some(u64::MAX)
        );

        // lock cmpxchg %rcx,(%rdi): success stores rcx, failure leaves memory as rax now says.
        let mut r = regs(IP);
        r[14] = 0x7000;
        r[11] = 0x99; // rcx
        r[10] = 0x42; // rax
        let code = [0xf0, 0x48, 0x0f, 0xb1, 0x0f];
        r[pt_regs::FLAGS] = 0x202 | FLAG_ZF;
        assert_eq!(stored_value(&bytes(&code), &r, 0x7000, 8, None), Some(0x99));
        r[pt_regs::FLAGS] = 0x202;
        assert_eq!(stored_value(&bytes(&code), &r, 0x7000, 8, None), Some(0x42));
    }

    #[test]
    fn setcc_reads_the_flags() {
        let mut r = regs(IP);
        r[14] = 0x7000;
        r[pt_regs::FLAGS] = 0x202 | FLAG_ZF;
        assert_eq!(
            stored_value(&bytes(&[0x0f, 0x94, 0x07]), &r, 0x7000, 1, None),
            Some(1)
        ); // sete (%rdi)
        assert_eq!(
            stored_value(&bytes(&[0x0f, 0x95, 0x07]), &r, 0x7000, 1, None),
            Some(0)
        ); // setne
    }

    #[test]
    fn segment_relative_and_undecodable_bytes_are_unknown() {
        let mut r = regs(IP);
        r[14] = 0x7000;
        // mov %rax,%gs:(%rdi): the base is not in the registers.
        assert_eq!(
            stored_value(&bytes(&[0x65, 0x48, 0x89, 0x07]), &r, 0x7000, 8, None),
            None
        );
        assert_eq!(stored_value(&[0xff; 16], &r, 0x7000, 8, None), None);
        assert_eq!(stored_value(&[0x00; 16], &r, 0x7000, 8, None), None);
    }
}
