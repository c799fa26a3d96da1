//! A `--value` hit's value, decided once the writer's function is known: where the store's instruction
//! starts, found by walking that function from its first byte ([`InsnStarts`]), then what that instruction
//! wrote ([`crate::x86_store`]), else memory as the program read it at the trap, marked.
//!
//! The bytes before the trap ip cannot say where the instruction that ends there starts, so the start is
//! taken only from a known boundary: the first byte of the function that holds the instruction's last byte
//! (ip - 1), named from the writer binary's ELF symbols. The function's bytes come from the file mapped
//! there (readable after the writer exited), else from the process; the walk must end exactly at ip, and
//! the instruction it ends on must be the bytes the trap ran (the record's). An ip in the kernel has no
//! such walk: the tracer cannot read kernel text (no `/proc/kcore` on the machines this runs on), so a
//! kernel writer's value is memory's, marked as one with no known start ([`ValueFrom::NoStart`]).

use crate::perf::record::Sample;
use crate::perf::sys;
use crate::report::{Value, ValueFrom};
use crate::trace::events::Trap;
use crate::trace::symbolize::{InsnStarts, Symbolizer};
use crate::x86_store::{self, Stored};

/// Kernel addresses start here.
const KERNEL_HALF: u64 = 1 << 63;

/// The longest walk: a function's start further than this before ip is not walked (its bytes are read
/// once per store site, and a store site this deep into one function is rare).
const WALK_MAX: u64 = 1 << 20;

/// The bytes that tell where a user-space instruction ending at `ip` starts: the function that holds
/// `ip - 1`, from its first byte to `ip`, and whether that answer may be remembered (a mapping named it).
pub struct FunctionBytes {
    pub start: u64,
    pub code: Option<Vec<u8>>,
    pub mapped: bool,
}

/// The length of the instruction that ends at user address `ip` in process `pid`, walked from its
/// function's start; `insn` holds the 16 bytes the trap ran before ip. `bytes` finds the function's bytes
/// (the session's symbols); the answer for a site is remembered in `starts` once a mapping named it.
pub fn insn_len(
    starts: &mut InsnStarts,
    pid: u32,
    ip: u64,
    insn: &[u8; 16],
    bytes: impl FnOnce() -> Option<FunctionBytes>,
) -> Option<usize> {
    if ip >= KERNEL_HALF || ip == 0 {
        return None;
    }
    if let Some(n) = starts.get(pid, ip) {
        return n.map(usize::from).filter(|&n| same_tail(insn, n, None));
    }
    let f = bytes()?;
    let n = f
        .code
        .as_deref()
        .and_then(|code| {
            let n = x86_store::last_insn_len(code, f.start)?;
            same_tail(insn, n, Some(code)).then_some(n)
        })
        .and_then(|n| u8::try_from(n).ok());
    if f.mapped {
        starts.remember(pid, ip, n);
    }
    n.map(usize::from)
}

/// [`insn_len`] over the session's symbols: the function's bytes from the mapping or the process that
/// `symbolizer` knows, the answer remembered in its [`InsnStarts`] (dropped with the process's other
/// caches when it execs or exits).
pub fn insn_len_of(
    symbolizer: &mut Symbolizer,
    pid: u32,
    ip: u64,
    insn: &[u8; 16],
) -> Option<usize> {
    let mut starts = std::mem::take(symbolizer.insn_starts());
    let n = insn_len(&mut starts, pid, ip, insn, || {
        function_bytes(symbolizer, pid, ip)
    });
    *symbolizer.insn_starts() = starts;
    n
}

/// Whether the instruction of the last `n` bytes fits in the record's 16 and, given the function's `code`,
/// is what the trap ran (text patched since, or a breakpoint's int3 in it, is not walked on).
fn same_tail(insn: &[u8; 16], n: usize, code: Option<&[u8]>) -> bool {
    if n == 0 || n > insn.len() {
        return false;
    }
    code.is_none_or(|c| c.len() >= n && c[c.len() - n..] == insn[insn.len() - n..])
}

/// The function around user address `ip - 1` of process `pid` and its bytes up to `ip`, from the
/// symbols the session has loaded: `None` when no symbol with a start holds it.
pub fn function_bytes(symbolizer: &mut Symbolizer, pid: u32, ip: u64) -> Option<FunctionBytes> {
    let last = ip.checked_sub(1)?;
    let f = symbolizer.frame(pid, last, false);
    let mapped = f.binary.is_some();
    f.sym.as_ref()?;
    // The symbol covers the byte when it has a size: beyond it lie padding and other functions.
    if f.size.is_some_and(|s| s > 0 && f.off >= s) {
        return Some(FunctionBytes {
            start: last,
            code: None,
            mapped,
        });
    }
    let start = last - f.off;
    let len = ip - start;
    if len > WALK_MAX {
        return Some(FunctionBytes {
            start,
            code: None,
            mapped,
        });
    }
    let len = usize::try_from(len).ok()?;
    let code = symbolizer
        .user_mut()
        .and_then(|u| u.read_mapped(pid, start, len))
        .or_else(|| {
            let mut buf = vec![0; len];
            matches!(sys::process_vm_read(pid, start, &mut buf), Ok(n) if n == len).then_some(buf)
        });
    Some(FunctionBytes {
        start,
        code,
        mapped,
    })
}

/// Bytes of the watched range a store set, for the session to lay over the range's previous value where
/// memory was not read at the trap (a read-write watch of a user address): `bits` where `mask` is set
/// (none for a load: the range holds the previous value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub bits: u64,
    pub mask: u64,
}

/// A `--value` hit's value from its trap: `value` is [`Value::Written`] with the memory read at the trap;
/// `len` is the watch's length; `insn_len` the length of the instruction that ends at the trap ip, when
/// its start is known. Also the bytes a store narrower than the watch wrote, when memory was not read.
pub fn decide(
    value: Value,
    sample: &Sample,
    len: u8,
    trap: &Trap,
    insn_len: Option<usize>,
) -> (Value, Option<Part>) {
    let Value::Written {
        value: memory, old, ..
    } = value
    else {
        return (value, None);
    };
    let written = |value, from| Value::Written { value, old, from };
    let Some(n) = insn_len else {
        return (written(memory, ValueFrom::NoStart), None);
    };
    match x86_store::stored(&trap.insn, n, &trap.regs, sample.addr, len) {
        Stored::Whole(v) => match memory {
            Some(m) if m != v => (written(Some(v), ValueFrom::Raced { memory: m }), None),
            _ => (written(Some(v), ValueFrom::Insn), None),
        },
        Stored::Part { bits, mask } if memory.is_none() => {
            (written(None, ValueFrom::Memory), Some(Part { bits, mask }))
        }
        // A load on a read-write watch: the bytes are the previous value's, none laid over it.
        Stored::Read if memory.is_none() => (
            written(None, ValueFrom::Memory),
            Some(Part { bits: 0, mask: 0 }),
        ),
        Stored::Part { .. } | Stored::Read | Stored::Undecided | Stored::Nothing => {
            (written(memory, ValueFrom::Memory), None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: u64 = 0x40_1005;

    fn sample(addr: u64) -> Sample {
        Sample {
            ip: IP,
            pid: 7,
            tid: 7,
            time: 0,
            addr,
            cpu: 0,
            id: 0,
            cgroup: None,
            frames: Vec::new(),
        }
    }

    /// A trap after `code` (ending at `IP`), rsi = 0x7000 and rax = 0x2a.
    fn trap(code: &[u8]) -> Trap {
        let mut insn = [0x90u8; 16];
        insn[16 - code.len()..].copy_from_slice(code);
        let mut regs = [0u64; 21];
        regs[16] = IP;
        regs[13] = 0x7000;
        regs[10] = 0x2a;
        Trap { regs, insn }
    }

    fn memory(m: Option<u64>) -> Value {
        Value::Written {
            value: m,
            old: None,
            from: ValueFrom::Memory,
        }
    }

    fn function(code: &[u8]) -> Option<FunctionBytes> {
        Some(FunctionBytes {
            start: IP - code.len() as u64,
            code: Some(code.to_vec()),
            mapped: true,
        })
    }

    /// The form: `mov 0x48(%rdi),%eax; mov %eax,(%rsi)`. Walked from the function's start, the
    /// store is the 2-byte one: on a 4-byte watch its value, on an 8-byte one memory's (it wrote half).
    #[test]
    fn a_store_after_a_byte_0x48_is_decoded_from_its_function_start() {
        let code = [0x55, 0x8b, 0x47, 0x48, 0x89, 0x06];
        let t = trap(&code);
        let mut starts = InsnStarts::default();
        let n = insn_len(&mut starts, 7, IP, &t.insn, || function(&code));
        assert_eq!(n, Some(2));
        let (v, part) = decide(memory(Some(0x2a)), &sample(0x7000), 4, &t, n);
        assert_eq!(
            v,
            Value::Written {
                value: Some(0x2a),
                old: None,
                from: ValueFrom::Insn
            }
        );
        assert_eq!(part, None);
        // An 8-byte watch whose upper half holds 0x5a5a5a5a: memory, not a claim of the instruction's.
        let m = 0x5a5a_5a5a_0000_002a;
        let (v, _) = decide(memory(Some(m)), &sample(0x7000), 8, &t, n);
        assert_eq!(
            v,
            Value::Written {
                value: Some(m),
                old: None,
                from: ValueFrom::Memory
            }
        );
        // Memory not read (a read-write watch): the bytes the store wrote, for the session to lay over.
        let (v, part) = decide(memory(None), &sample(0x7000), 8, &t, n);
        assert_eq!(
            (v, part),
            (
                memory(None),
                Some(Part {
                    bits: 0x2a,
                    mask: 0xffff_ffff
                })
            )
        );
        // The site is remembered: no second walk.
        let again = insn_len(&mut starts, 7, IP, &t.insn, || panic!("walked twice"));
        assert_eq!(again, Some(2));
        starts.forget(7);
        assert_eq!(insn_len(&mut starts, 7, IP, &t.insn, || None), None);
    }

    /// No boundary: memory, marked; never a value from bytes whose start was a guess.
    #[test]
    fn without_a_known_start_the_value_is_memory_marked() {
        let code = [0x55, 0x8b, 0x47, 0x48, 0x89, 0x06];
        let t = trap(&code);
        let mut starts = InsnStarts::default();
        // No symbol, a kernel ip, a walk that does not land on ip, text that is not what the trap ran.
        assert_eq!(insn_len(&mut starts, 7, IP, &t.insn, || None), None);
        let kernel = 0xffff_ffff_8100_0000;
        assert_eq!(
            insn_len(&mut starts, 7, kernel, &t.insn, || function(&code)),
            None
        );
        assert_eq!(
            insn_len(&mut starts, 8, IP, &t.insn, || function(&[
                0x0f, 0x47, 0x48, 0x89, 0x06
            ])),
            None
        );
        let patched = [0x55, 0x8b, 0x47, 0x48, 0xcc, 0x90];
        assert_eq!(
            insn_len(&mut starts, 9, IP, &t.insn, || function(&patched)),
            None
        );
        let (v, part) = decide(memory(Some(0x77)), &sample(0x7000), 8, &t, None);
        assert_eq!(
            v,
            Value::Written {
                value: Some(0x77),
                old: None,
                from: ValueFrom::NoStart
            }
        );
        assert_eq!(part, None);
    }

    /// A whole store that memory contradicts raced; a read-modify-write is memory's.
    #[test]
    fn races_and_read_modify_writes() {
        let t = trap(&[0x48, 0x89, 0x06]);
        let (v, _) = decide(memory(Some(5)), &sample(0x7000), 8, &t, Some(3));
        assert_eq!(
            v,
            Value::Written {
                value: Some(0x2a),
                old: None,
                from: ValueFrom::Raced { memory: 5 }
            }
        );
        let t = trap(&[0x48, 0x01, 0x06]); // add %rax,(%rsi)
        let (v, _) = decide(memory(Some(5)), &sample(0x7000), 8, &t, Some(3));
        assert_eq!(v, memory(Some(5)));
        // A load of the range on a read-write watch (memory not read): the previous value, unchanged.
        let t = trap(&[0x48, 0x8b, 0x0e]); // mov (%rsi),%rcx
        let (v, part) = decide(memory(None), &sample(0x7000), 8, &t, Some(3));
        assert_eq!((v, part), (memory(None), Some(Part { bits: 0, mask: 0 })));
    }
}
