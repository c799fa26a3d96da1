//! User-space objects (`--on uretprobe:`/`uprobe:`): the programs on a process's uprobes, kprobe-type
//! programs whose context is the probed task's `struct pt_regs`, and their attaching. A general
//! allocator's entry program keeps the call's request size for its return
//! ([`super::SizeFrom::AtEntry`]); the return (or entry) program is [`generate_alloc`] reading the object
//! from a register, and each free function's is [`generate_free`]. They share the kernel sources'
//! `armed` map and output rings.

use std::os::fd::{AsFd, AsRawFd};

use super::super::insn::{Alu, Asm, AsmError, Insn, DW, FP, R0, R1, R2};
use super::super::kernel::{Helper, MapType, ProgType};
use super::super::seq;
use super::super::{create_map, load_program, log_line};
use super::{generate_alloc, generate_free, ObjectSource, PtrAt, Select, ARMED_MAX, CTX};
use crate::error::Error;
use crate::perf::sys;
use crate::perf::uprobe::{Pmu, Probe, Scope, Uprobe};

/// Where a uprobe program (its context the probed task's `struct pt_regs`, x86-64) finds a call's
/// arguments and its return value.
pub mod regs {
    use crate::perf::bpf::kernel::pt_regs::{self, offset};

    /// `rdi, rsi, rdx, rcx, r8, r9`: arguments 0 to 5 at the function's entry.
    pub const ARGS: [i16; 6] = [
        offset(pt_regs::DI),
        offset(pt_regs::SI),
        offset(pt_regs::DX),
        offset(pt_regs::CX),
        offset(pt_regs::R8),
        offset(pt_regs::R9),
    ];
    /// `rax`: the return value at the return.
    pub const RET: i16 = offset(pt_regs::AX);

    /// Argument `n`'s offset (`None` past the sixth: those are on the stack).
    pub fn arg(n: u8) -> Option<i16> {
        ARGS.get(usize::from(n)).copied()
    }
}

/// The request size an allocator's entry program stashes: one argument register's value, or the product of
/// two (`calloc`), as `pt_regs` offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StashSize {
    One(i16),
    Product(i16, i16),
    /// The size register's value and, after it, the out-pointer register's (`posix_memalign`: the object
    /// is stored through its argument 0, read at the return by [`PtrAt::Out`]).
    WithOut(i16, i16),
}

impl StashSize {
    /// The bytes of the stash map's value.
    pub fn value_len(self) -> u32 {
        match self {
            StashSize::One(_) | StashSize::Product(..) => 8,
            StashSize::WithOut(..) => 16,
        }
    }
}

/// A user-space allocator's entry program: the call's request size (`size`'s registers) is left in `stash`
/// under the calling thread's pid_tgid, for the return's program ([`super::SizeFrom::AtEntry`]).
pub fn generate_stash(stash: i32, size: StashSize) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let key = a.slot(8).off();
    let value = a.slot(16);
    a.mov(CTX, R1);
    a.call(Helper::GetCurrentPidTgid).store(DW, FP, key, R0);
    match size {
        StashSize::WithOut(r, out) => {
            a.load(DW, R1, CTX, out).store(DW, FP, value.word(1), R1);
            a.load(DW, R1, CTX, r);
        }
        StashSize::One(r) => {
            a.load(DW, R1, CTX, r);
        }
        StashSize::Product(r1, r2) => {
            a.load(DW, R1, CTX, r1)
                .load(DW, R2, CTX, r2)
                .alu(Alu::Mul, R1, R2);
        }
    }
    a.store(DW, FP, value.word(0), R1);
    seq::update(&mut a, stash, (key, value.off()), 0);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// One allocating function of a user-space source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserAlloc {
    pub file: std::path::PathBuf,
    /// The function's offset in the file.
    pub offset: u64,
    /// The object is its return value ([`Probe::Return`]) or an argument at its entry.
    pub probe: Probe,
    /// A general allocator's request size, read at its entry for its return.
    pub stash: Option<StashSize>,
}

/// A user-space source's probes, placed ([`ksymwatch_symbols::uprobe`]), in one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserProbes {
    /// The process (its memory: every thread of it) whose calls are seen.
    pub pid: u32,
    /// The allocations (a general allocator's family may have several: `malloc` and `realloc`).
    pub allocs: Vec<UserAlloc>,
    /// The calls that end an object: a file, the function's offset, the `pt_regs` offset of the pointer.
    pub frees: Vec<(std::path::PathBuf, u64, i16)>,
}

impl ObjectSource {
    /// Loads a user-space source's programs and opens its uprobes in the process, each carrying its
    /// program, enabled: the allocator's entry (stashing the request size) before its return, and the
    /// frees before either, so no object is handed over whose free would go unseen.
    pub(super) fn attach_user(&mut self, probes: &UserProbes, select: Select) -> Result<(), Error> {
        let pmu = Pmu::read().map_err(|e| Error::not_permitted(format!("uprobes: {e}")))?;
        let scope = Scope::Task(probes.pid);
        let (outputs, armed) = (self.outputs.as_raw_fd(), self.armed.as_raw_fd());
        let open = |path: &std::path::Path,
                    offset: u64,
                    probe: Probe,
                    insns: Result<Vec<Insn>, AsmError>| {
            let insns =
                insns.map_err(|e| Error::runtime("building the uprobe programs").caused_by(e))?;
            let shown = format!("{}+0x{offset:x}", path.display());
            let mut log = Vec::new();
            let prog =
                load_program(ProgType::Kprobe, &insns, "ksw_uobjects", &mut log).map_err(|e| {
                    if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
                        return Error::not_permitted(format!(
                            "objects from {shown}: loading the uprobe program: {}",
                            super::super::why_unavailable(&e)
                        ));
                    }
                    Error::runtime(format!(
                        "the kernel refused the uprobe program for {shown}: {}",
                        log_line(&log)
                    ))
                    .caused_by(e)
                })?;
            let uprobe = Uprobe::open(&pmu, path, offset, probe, &scope).map_err(|e| {
                Error::not_permitted(format!(
                    "a uprobe at {shown} in process {}: {e}{}",
                    probes.pid,
                    if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) {
                        "; uprobe events need CAP_SYS_ADMIN (or CAP_PERFMON with perf_event_paranoid <= 1)"
                    } else {
                        ""
                    }
                ))
            })?;
            for fd in uprobe.fds() {
                sys::perf_set_bpf(fd, prog.as_fd()).map_err(|e| {
                    Error::runtime(format!("attaching the program at {shown}")).caused_by(e)
                })?;
            }
            uprobe.enable().map_err(|e| {
                Error::runtime(format!("enabling the uprobe at {shown}")).caused_by(e)
            })?;
            Ok::<_, Error>((uprobe, prog))
        };
        for (path, offset, reg) in &probes.frees {
            let p = open(
                path,
                *offset,
                Probe::Entry,
                generate_free(outputs, armed, PtrAt::Reg(*reg)),
            )?;
            self._uprobes.push(p);
        }
        for alloc in &probes.allocs {
            let mut stash_fd = -1;
            if let Some(size) = alloc.stash {
                // One map per function: realloc's entry must not see malloc's request (it may call it).
                // LRU: a thread that never returns from a call (it exited inside it) leaves an entry.
                let stash = create_map(
                    MapType::LruHash,
                    (8, size.value_len()),
                    ARMED_MAX,
                    "ksw_ustash",
                )
                .map_err(|e| {
                    Error::not_permitted(format!(
                        "objects from {}: the request map: {}",
                        alloc.file.display(),
                        super::super::why_unavailable(&e)
                    ))
                })?;
                stash_fd = stash.as_raw_fd();
                let p = open(
                    &alloc.file,
                    alloc.offset,
                    Probe::Entry,
                    generate_stash(stash_fd, size),
                )?;
                self._uprobes.push(p);
                self._stash.push(stash);
            }
            let insns = generate_alloc(outputs, armed, stash_fd, select);
            let p = open(&alloc.file, alloc.offset, alloc.probe, insns)?;
            self._uprobes.push(p);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{SizeFrom, ALLOCATED, FREED};
    use super::*;
    use crate::perf::bpf::interp::FakeKernel;

    const OUT: i32 = 3;
    const ARMED: i32 = 4;
    const STASH: i32 = 5;

    /// A `pt_regs` offset as the interpreter's register index.
    fn reg(offset: i16) -> usize {
        (offset / 8) as usize
    }

    /// The interpreter with the user-space programs' maps: the output ring, `armed`, and a stash whose
    /// values are `stash_value` bytes (8: a request size; 16: a size and an out-pointer).
    fn fake(stash_value: usize) -> FakeKernel {
        let mut m = FakeKernel::with_outputs(OUT, 0);
        m.declare(ARMED, MapType::LruHash, (8, 4), 16);
        m.declare(STASH, MapType::LruHash, (8, stash_value), 16);
        m
    }

    /// The user-space programs on the offline interpreter, their context a `pt_regs`: an allocator's
    /// entry stashes its request (calloc's product too), its return takes the object only for a request of
    /// the type's size (and only after an entry it saw), and a free function's argument ends an armed
    /// object once.
    #[test]
    fn user_space_programs_take_objects_of_the_size_asked_and_free_them() {
        let mut m = fake(8);
        let entry = generate_stash(STASH, StashSize::One(regs::ARGS[0])).expect("stash");
        let select = Select {
            ptr: PtrAt::Reg(regs::RET),
            call_site: None,
            size: Some((SizeFrom::AtEntry, 64)),
        };
        let ret = generate_alloc(OUT, ARMED, STASH, select).expect("return");
        let free = generate_free(OUT, ARMED, PtrAt::Reg(regs::ARGS[0])).expect("free");
        let word =
            |rec: &[u8], i: usize| u64::from_ne_bytes(rec[8 * i..8 * i + 8].try_into().unwrap());
        let key = m.pid_tgid.to_ne_bytes();
        // malloc(64) returning 0xa000: stashed, taken, entered in `armed`, the stash emptied.
        m.regs[reg(regs::ARGS[0])] = 64;
        m.run(&entry);
        assert_eq!(m.get(STASH, &key), Some(64u64.to_ne_bytes().to_vec()));
        m.regs[reg(regs::RET)] = 0xa000;
        m.run(&ret);
        assert_eq!(m.output.len(), 1);
        let rec = m.output[0].clone();
        assert_eq!(
            (word(&rec, 0), word(&rec, 2), word(&rec, 3), word(&rec, 5)),
            (ALLOCATED, 0xa000, 0, 64)
        );
        assert_eq!(word(&rec, 4), m.pid_tgid);
        assert!(m.get(ARMED, &0xa000u64.to_ne_bytes()).is_some());
        assert_eq!(m.get(STASH, &key), None, "taken out");
        // malloc(24): not the type's size; a return without an entry seen: nothing either.
        m.regs[reg(regs::ARGS[0])] = 24;
        m.run(&entry);
        m.regs[reg(regs::RET)] = 0xb000;
        m.run(&ret);
        m.run(&ret);
        assert_eq!(m.output.len(), 1);
        assert_eq!(m.get(STASH, &key), None);
        // calloc(8, 8): the product is the request.
        let calloc = generate_stash(STASH, StashSize::Product(regs::ARGS[0], regs::ARGS[1]))
            .expect("calloc stash");
        m.regs[reg(regs::ARGS[0])] = 8;
        m.regs[reg(regs::ARGS[1])] = 8;
        m.run(&calloc);
        m.regs[reg(regs::RET)] = 0xc000;
        m.run(&ret);
        assert_eq!(m.output.len(), 2);
        // free(0xa000) ends it once; free of an object never taken says nothing.
        m.regs[reg(regs::ARGS[0])] = 0xa000;
        m.run(&free);
        m.run(&free);
        m.regs[reg(regs::ARGS[0])] = 0xb000;
        m.run(&free);
        assert_eq!(m.output.len(), 3);
        let rec = m.output[2].clone();
        assert_eq!(
            (word(&rec, 0), word(&rec, 2), word(&rec, 3)),
            (FREED, 0xa000, 0)
        );
        assert_eq!(m.get(ARMED, &0xa000u64.to_ne_bytes()), None);
        // An argument at a function's entry (`uprobe:...:arg1`), no size asked: every call's.
        let arg = Select {
            ptr: PtrAt::Reg(regs::ARGS[1]),
            call_site: None,
            size: None,
        };
        let init = generate_alloc(OUT, ARMED, -1, arg).expect("arg");
        m.regs[reg(regs::ARGS[1])] = 0xd000;
        m.run(&init);
        assert_eq!(word(&m.output[3], 2), 0xd000);
    }

    /// posix_memalign(&p, 16, 64): its entry keeps the size and `memptr`; its return, on 0, takes the
    /// object read through `memptr`; a return of ENOMEM, or a request of another size, takes nothing and
    /// still empties the stash; unsized, any request is taken with its size in the record.
    #[test]
    fn posix_memalign_objects_are_read_through_the_out_pointer() {
        const MEMPTR: u64 = 0x7ffd_0000_1000;
        let mut m = fake(16);
        let entry =
            generate_stash(STASH, StashSize::WithOut(regs::ARGS[2], regs::ARGS[0])).expect("stash");
        let sized = Select {
            ptr: PtrAt::Out(regs::RET),
            call_site: None,
            size: Some((SizeFrom::AtEntry, 64)),
        };
        let ret = generate_alloc(OUT, ARMED, STASH, sized).expect("return");
        let word =
            |rec: &[u8], i: usize| u64::from_ne_bytes(rec[8 * i..8 * i + 8].try_into().unwrap());
        let key = m.pid_tgid.to_ne_bytes();
        let call = |m: &mut FakeKernel, size: u64, obj: u64, returns: u64, ret: &[Insn]| {
            m.regs[reg(regs::ARGS[0])] = MEMPTR;
            m.regs[reg(regs::ARGS[1])] = 16;
            m.regs[reg(regs::ARGS[2])] = size;
            m.run(&entry);
            m.readable = vec![(MEMPTR, obj.to_ne_bytes().to_vec())];
            // The return's registers: rdi and the others are the callee's by now.
            m.regs[reg(regs::ARGS[0])] = 0x5555;
            m.regs[reg(regs::ARGS[2])] = 0;
            m.regs[reg(regs::RET)] = returns;
            m.run(ret);
        };
        // posix_memalign(&p, 16, 64) == 0, p = 0xa040: taken, through memptr.
        m.regs[reg(regs::ARGS[0])] = MEMPTR;
        m.regs[reg(regs::ARGS[2])] = 64;
        m.run(&entry);
        let mut stashed = 64u64.to_ne_bytes().to_vec();
        stashed.extend_from_slice(&MEMPTR.to_ne_bytes());
        assert_eq!(m.get(STASH, &key), Some(stashed));
        call(&mut m, 64, 0xa040, 0, &ret);
        assert_eq!(m.output.len(), 1);
        let rec = m.output[0].clone();
        assert_eq!(
            (word(&rec, 0), word(&rec, 2), word(&rec, 3), word(&rec, 5)),
            (ALLOCATED, 0xa040, 0, 64)
        );
        assert!(m.get(ARMED, &0xa040u64.to_ne_bytes()).is_some());
        assert_eq!(m.get(STASH, &key), None, "taken out");
        // ENOMEM (12): nothing, whatever memptr holds; the stash is emptied all the same.
        call(&mut m, 64, 0xb040, 12, &ret);
        assert_eq!(m.output.len(), 1);
        assert_eq!(m.get(ARMED, &0xb040u64.to_ne_bytes()), None);
        assert_eq!(m.get(STASH, &key), None);
        // A request of 24 bytes: not the type's size.
        call(&mut m, 24, 0xc040, 0, &ret);
        assert_eq!(m.output.len(), 1);
        // A return without an entry seen: nothing.
        m.regs[reg(regs::RET)] = 0;
        m.run(&ret);
        assert_eq!(m.output.len(), 1);
        // memptr unreadable: nothing.
        m.regs[reg(regs::ARGS[0])] = MEMPTR + 0x100;
        m.regs[reg(regs::ARGS[2])] = 64;
        m.run(&entry);
        m.regs[reg(regs::RET)] = 0;
        m.run(&ret);
        assert_eq!(m.output.len(), 1);
        // No type size asked: every successful call, its request in the record.
        let any = Select {
            size: None,
            ..sized
        };
        let any_size = generate_alloc(OUT, ARMED, STASH, any).expect("unsized");
        call(&mut m, 24, 0xd040, 0, &any_size);
        assert_eq!(m.output.len(), 2);
        assert_eq!((word(&m.output[1], 2), word(&m.output[1], 5)), (0xd040, 24));
    }
}
