//! Objects as the kernel creates them (`--on`): a raw-tracepoint program on the allocation site's
//! tracepoint hands each new object that matches (its call site, its size) to the tracer, and programs on
//! `kfree` and `kmem_cache_free` tell it when an armed object is freed.
//! Objects a program allocates come the same way from programs on its uprobes (the `user` submodule).
//!
//! Raw tracepoints see the tracepoint's own arguments (`TP_PROTO`), each a u64 at `ctx + 8 * i`:
//! `kmalloc(call_site, ptr, bytes_req, bytes_alloc, gfp, node)`, `kmem_cache_alloc(call_site, ptr,
//! struct kmem_cache *s, gfp, node)`, `kfree(call_site, ptr)`, `kmem_cache_free(call_site, ptr, s)`.
//! A field of a tracepoint event's record (its format file) is read by a classic tracepoint program
//! instead, attached through a tracepoint perf event.
//!
//! A record goes out through a `BPF_OUTPUT` event per CPU with its own small ring that wakes the reader on
//! every record: arming is behind the allocation, and every microsecond of that gap is writes missed.
//!
//! Which objects are followed is the `armed` map (pointer to 1), kept by the programs alone: the
//! allocation program enters each object it hands over (before the tracer can arm it, so a free that comes
//! first is still reported), and a free program takes the object out as it reports its free. The
//! `kfree`/`kmem_cache_free` tracepoints fire before the memory is released, so no new object can take
//! the address in between. A free of any other object costs a hash lookup and nothing else. The tracer
//! never writes the map: an entry it deleted could already be the next object's at the same address.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use perf_event_open_sys::bindings as pb;

use super::frame::Slot;
use super::insn::{Asm, AsmError, Cond, Insn, Kept, Label, DW, FP, R0, R1, R2, R3, W};
use super::kernel::{Helper, MapType, ProgType};
use super::seq;
use super::{create_map, load_program, log_line, possible_cpus};
use crate::error::Error;
use crate::perf::ring::Ring;
use crate::perf::sys;
pub use crate::perf::uprobe::Probe;

mod user;
pub use user::{generate_stash, regs, StashSize, UserAlloc, UserProbes};

/// The programs' bindings: the context (the tracepoint's arguments or its record), the object's pointer
/// and its allocation's call site.
const CTX: Kept = Kept::R6;
const PTR: Kept = Kept::R7;
const CALL_SITE: Kept = Kept::R8;
/// Objects handed over and not freed yet that the free programs recognise; past this many live ones the
/// least recently entered are forgotten (a forgotten object's free is not reported).
const ARMED_MAX: u32 = 16384;
/// Data pages of each CPU's object ring: a record is 72 bytes, and the reader is woken on every one.
const RING_PAGES: usize = 8;

/// Record kinds.
pub const ALLOCATED: u64 = 1;
pub const FREED: u64 = 2;
/// The record: kind, time, pointer, call site, pid_tgid, size, `comm[16]`, native-endian.
pub const RECORD_LEN: usize = 64;

/// Which objects the allocation program takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Select {
    /// Where the new object's pointer is.
    pub ptr: PtrAt,
    /// Call sites in `[lo, hi)` (argument 0); `None`: any.
    pub call_site: Option<(u64, u64)>,
    /// Requests of exactly this many bytes (`kmalloc`'s `bytes_req`, argument 2), or for
    /// `kmem_cache_alloc` caches whose `object_size` (read at this offset in `struct kmem_cache`) holds at
    /// least this many: a cache's objects can be larger than their type (`task_struct`'s carries the FPU
    /// state after it).
    pub size: Option<(SizeFrom, u64)>,
}

/// Where the program finds the object's pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtrAt {
    /// A raw tracepoint's argument N.
    Arg(u8),
    /// A classic tracepoint event's record field, at this byte offset (its format file).
    Field(i16),
    /// A uprobe's register, at this offset of `struct pt_regs` ([`regs`]).
    Reg(i16),
    /// Stored through the out-pointer argument the entry program stashed ([`StashSize::WithOut`]:
    /// `posix_memalign`'s `memptr`), read at the return when the register at this `pt_regs` offset (the
    /// return value) is 0: the function returns an error code, not its object.
    Out(i16),
}

impl PtrAt {
    fn offset(self) -> i16 {
        match self {
            PtrAt::Arg(n) => 8 * i16::from(n),
            PtrAt::Field(o) | PtrAt::Reg(o) | PtrAt::Out(o) => o,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeFrom {
    /// Argument 2 (`kmalloc`'s `bytes_req`).
    Requested,
    /// `*(u32 *)(arg2 + offset)`: `kmem_cache_alloc`'s `s->object_size`.
    Cache(i16),
    /// What the entry program ([`generate_stash`]) left for this thread's call: a user-space allocator's
    /// request, seen at its return.
    AtEntry,
}

/// The programs' stack slots: the record, and a word for the size (the allocation's) or the key (the
/// free's).
struct Slots {
    out: Slot,
    scratch: i16,
}

impl Slots {
    fn new(a: &mut Asm) -> Slots {
        Slots {
            out: a.slot(RECORD_LEN as u16),
            scratch: a.slot(8).off(),
        }
    }
}

/// The record's words: kind, time, pointer, call site, pid_tgid, size, then the name.
mod word {
    pub const KIND: i16 = 0;
    pub const TIME: i16 = 1;
    pub const PTR: i16 = 2;
    pub const CALL_SITE: i16 = 3;
    pub const PID_TGID: i16 = 4;
    pub const SIZE: i16 = 5;
    pub const COMM: i16 = 6;
}

/// The allocation program: a matching new object is entered in `armed` and goes out as an [`ALLOCATED`]
/// record.
/// `stash` is the entry program's map (for [`SizeFrom::AtEntry`]; else unused).
pub fn generate_alloc(
    outputs: i32,
    armed: i32,
    stash: i32,
    select: Select,
) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let Slots { out: rec, scratch } = Slots::new(&mut a);
    let out = a.label();
    a.mov(CTX, R1);
    if let PtrAt::Out(ret) = select.ptr {
        out_pointer(&mut a, (stash, ret), (rec, scratch), out);
    } else {
        a.load(DW, PTR, CTX, select.ptr.offset());
    }
    a.jump_imm(Cond::Eq, PTR, 0, out);
    // A raw allocation tracepoint's call site; a record field's source has none.
    match select.ptr {
        PtrAt::Arg(_) => a.load(DW, CALL_SITE, CTX, 0),
        PtrAt::Field(_) | PtrAt::Reg(_) | PtrAt::Out(_) => a.mov_imm(CALL_SITE, 0),
    };
    if let Some((lo, hi)) = select.call_site {
        a.ld_imm64(R1, lo)
            .jump(Cond::Lt, CALL_SITE, R1, out)
            .ld_imm64(R1, hi)
            .jump(Cond::Ge, CALL_SITE, R1, out);
    }
    match select.size {
        // The out-pointer's request size is in `scratch` already (its entry stashed both).
        None if matches!(select.ptr, PtrAt::Out(_)) => {}
        Some((SizeFrom::AtEntry, size)) if matches!(select.ptr, PtrAt::Out(_)) => {
            a.load(DW, R1, FP, scratch)
                .ld_imm64(R2, size)
                .jump(Cond::Ne, R1, R2, out);
        }
        None => {
            a.mov_imm(R1, 0).store(DW, FP, scratch, R1);
        }
        Some((SizeFrom::Requested, size)) => {
            a.load(DW, R1, CTX, 16)
                .store(DW, FP, scratch, R1)
                .ld_imm64(R2, size)
                .jump(Cond::Ne, R1, R2, out);
        }
        Some((SizeFrom::Cache(offset), size)) => {
            a.store_imm(DW, FP, scratch, 0).load(DW, R3, CTX, 16);
            seq::read_kernel(&mut a, scratch, 4, (R3, i32::from(offset)), out);
            a.load(W, R1, FP, scratch)
                .ld_imm64(R2, size)
                .jump(Cond::Lt, R1, R2, out);
        }
        Some((SizeFrom::AtEntry, size)) => {
            // This thread's call's request, taken out so a later call that the entry did not see (a
            // longjmp out of an earlier one) cannot reuse it.
            a.call(Helper::GetCurrentPidTgid).store(DW, FP, scratch, R0);
            seq::lookup_key(&mut a, stash, scratch, out);
            a.load(DW, R1, R0, 0)
                .store(DW, FP, rec.word(word::SIZE), R1);
            seq::delete(&mut a, stash, scratch);
            a.load(DW, R1, FP, rec.word(word::SIZE))
                .store(DW, FP, scratch, R1)
                .ld_imm64(R2, size)
                .jump(Cond::Ne, R1, R2, out);
        }
    }
    // `armed[ptr] = 1`, the record's words lending the key and the value.
    a.store(DW, FP, rec.word(word::PTR), PTR)
        .store_imm(W, FP, rec.word(word::KIND), 1);
    seq::update(
        &mut a,
        armed,
        (rec.word(word::PTR), rec.word(word::KIND)),
        0,
    );
    a.mov_imm(R1, ALLOCATED as i32)
        .store(DW, FP, rec.word(word::KIND), R1)
        .store(DW, FP, rec.word(word::PTR), PTR)
        .store(DW, FP, rec.word(word::CALL_SITE), CALL_SITE)
        .load(DW, R1, FP, scratch)
        .store(DW, FP, rec.word(word::SIZE), R1);
    emit(&mut a, outputs, rec);
    a.bind(out);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// [`PtrAt::Out`]'s prologue: this thread's call's stash entry (request size, out-pointer) is taken out
/// (whatever the call returned, so a later call cannot reuse it); on a return of 0 (register `ret`) the
/// object pointer is read through the out-pointer into [`PTR`] and the request size left in `scratch`.
/// On to `out` when there is no entry, the call failed or the read did.
fn out_pointer(a: &mut Asm, (stash, ret): (i32, i16), (rec, scratch): (Slot, i16), out: Label) {
    a.call(Helper::GetCurrentPidTgid).store(DW, FP, scratch, R0);
    seq::lookup_key(a, stash, scratch, out);
    // The record's size and pointer words hold the entry's two words until the record is built.
    a.load(DW, R1, R0, 0)
        .store(DW, FP, rec.word(word::SIZE), R1)
        .load(DW, R1, R0, 8)
        .store(DW, FP, rec.word(word::PTR), R1);
    seq::delete(a, stash, scratch);
    a.load(DW, R1, CTX, ret).jump_imm(Cond::Ne, R1, 0, out);
    a.stack_addr(R1, scratch)
        .mov_imm(R2, 8)
        .load(DW, R3, FP, rec.word(word::PTR))
        .call(Helper::ProbeReadUser)
        .jump_imm(Cond::Ne, R0, 0, out);
    a.load(DW, PTR, FP, scratch)
        .load(DW, R1, FP, rec.word(word::SIZE))
        .store(DW, FP, scratch, R1);
}

/// The free program: a freed object the allocation program handed over (in `armed`) is taken out of it and
/// goes out as a [`FREED`] record. The pointer is `ptr`'s: `kfree`'s argument 1 (its call site argument
/// 0), or a user-space free function's argument register (no call site).
pub fn generate_free(outputs: i32, armed: i32, ptr: PtrAt) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let Slots { out: rec, scratch } = Slots::new(&mut a);
    let out = a.label();
    a.mov(CTX, R1);
    a.load(DW, PTR, CTX, ptr.offset())
        .store(DW, FP, scratch, PTR);
    seq::lookup_key(&mut a, armed, scratch, out);
    seq::delete(&mut a, armed, scratch);
    a.mov_imm(R1, FREED as i32)
        .store(DW, FP, rec.word(word::KIND), R1)
        .store(DW, FP, rec.word(word::PTR), PTR);
    match ptr {
        PtrAt::Arg(_) => a.load(DW, R1, CTX, 0),
        PtrAt::Field(_) | PtrAt::Reg(_) | PtrAt::Out(_) => a.mov_imm(R1, 0),
    };
    a.store(DW, FP, rec.word(word::CALL_SITE), R1)
        .store_imm(DW, FP, rec.word(word::SIZE), 0);
    emit(&mut a, outputs, rec);
    a.bind(out);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// Fills the time, task and name of the record at `rec` (kind, pointer, call site and size are set)
/// and writes it to this CPU's output.
fn emit(a: &mut Asm, outputs: i32, rec: Slot) {
    a.call(Helper::KtimeGetNs)
        .store(DW, FP, rec.word(word::TIME), R0);
    a.call(Helper::GetCurrentPidTgid)
        .store(DW, FP, rec.word(word::PID_TGID), R0);
    a.stack_addr(R1, rec.word(word::COMM))
        .mov_imm(R2, 16)
        .call(Helper::GetCurrentComm);
    seq::perf_output(a, CTX.into(), outputs, (rec.off(), RECORD_LEN as i32));
}

/// One record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRecord {
    pub kind: u64,
    pub time: u64,
    pub ptr: u64,
    pub call_site: u64,
    pub pid: u32,
    pub tid: u32,
    pub size: u64,
    pub comm: String,
}

/// What one ring record is: an object record, records the kernel dropped, or something else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Object(ObjectRecord),
    Lost(u64),
    Other,
}

const RECORD_SAMPLE: u32 = 9;
const RECORD_LOST: u32 = 2;

/// Decodes one ring record (`PERF_SAMPLE_RAW` only): `None` when it is malformed.
pub fn decode(bytes: &[u8]) -> Option<Read> {
    let u32_at = |o: usize| Some(u32::from_ne_bytes(bytes.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_ne_bytes(bytes.get(o..o + 8)?.try_into().ok()?));
    match u32_at(0)? {
        RECORD_SAMPLE => {
            let raw = u32_at(8)? as usize;
            if raw < RECORD_LEN {
                return None;
            }
            let r = 12;
            let pid_tgid = u64_at(r + 32)?;
            let comm = bytes.get(r + 48..r + 64)?;
            let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
            Some(Read::Object(ObjectRecord {
                kind: u64_at(r)?,
                time: u64_at(r + 8)?,
                ptr: u64_at(r + 16)?,
                call_site: u64_at(r + 24)?,
                pid: (pid_tgid >> 32) as u32,
                tid: pid_tgid as u32,
                size: u64_at(r + 40)?,
                comm: String::from_utf8_lossy(&comm[..end]).into_owned(),
            }))
        }
        // id, then the count.
        RECORD_LOST => Some(Read::Lost(u64_at(16)?)),
        _ => Some(Read::Other),
    }
}

/// How the allocation program is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attach {
    /// To the raw tracepoint of this name (everywhere at once).
    Raw(String),
    /// To the tracepoint event with this id (its `id` file), through a perf event of it.
    Event(u64),
    /// To uprobes in one process's files.
    User(UserProbes),
}

/// The loaded programs, their maps and each CPU's output ring; detached when dropped.
pub struct ObjectSource {
    outputs: OwnedFd,
    armed: OwnedFd,
    rings: Vec<(u32, OwnedFd, Ring)>,
    _links: Vec<(OwnedFd, OwnedFd)>,
    /// [`Attach::Event`]: the event id and the program, and the one perf event carrying it once opened.
    event: Option<(u64, OwnedFd)>,
    carrier: Option<OwnedFd>,
    /// [`Attach::User`]: the uprobes and their programs (and the entry stash), closed when dropped.
    _uprobes: Vec<(crate::perf::uprobe::Uprobe, OwnedFd)>,
    _stash: Vec<OwnedFd>,
}

impl ObjectSource {
    /// Whether its objects come from a process's uprobes (they are in that process's memory).
    pub fn in_process(&self) -> bool {
        !self._uprobes.is_empty()
    }
}

impl std::fmt::Debug for ObjectSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectSource")
    }
}

impl ObjectSource {
    /// Loads the allocation program on raw tracepoint `tracepoint` and the free programs, with an output
    /// ring on each of `cpus`. The output map has an index for every possible CPU (CPUs that come online
    /// later).
    pub fn load(
        attach_to: &Attach,
        select: Select,
        cpus: &BTreeSet<u32>,
    ) -> Result<ObjectSource, Error> {
        let tracepoint = match attach_to {
            Attach::Raw(name) => name.clone(),
            Attach::Event(id) => format!("event {id}"),
            Attach::User(p) => p
                .allocs
                .first()
                .map_or_else(String::new, |a| a.file.display().to_string()),
        };
        let unavailable = |what: &str, e: std::io::Error| {
            Error::not_permitted(format!(
                "objects from `{tracepoint}`: {what}: {}",
                super::why_unavailable(&e)
            ))
        };
        let outputs = create_map(
            MapType::PerfEventArray,
            (4, 4),
            possible_cpus(),
            "ksw_objout",
        )
        .map_err(|e| unavailable("the output map", e))?;
        // LRU: a flood of objects the tracer has not taken out yet pushes out the oldest instead of
        // failing.
        let armed = create_map(MapType::LruHash, (8, 4), ARMED_MAX, "ksw_armed")
            .map_err(|e| unavailable("the armed map", e))?;
        let mut source = ObjectSource {
            outputs,
            armed,
            rings: Vec::new(),
            _links: Vec::new(),
            event: None,
            carrier: None,
            _uprobes: Vec::new(),
            _stash: Vec::new(),
        };
        let build = |r: Result<Vec<Insn>, AsmError>| {
            r.map_err(|e| Error::runtime("building the object programs").caused_by(e))
        };
        if let Attach::User(probes) = attach_to {
            source.attach_user(probes, select)?;
            for &cpu in cpus {
                source
                    .open_cpu(cpu)
                    .map_err(|e| Error::runtime(format!("objects on cpu {cpu}")).caused_by(e))?;
            }
            return Ok(source);
        }
        let alloc = build(generate_alloc(
            source.outputs.as_raw_fd(),
            source.armed.as_raw_fd(),
            -1,
            select,
        ))?;
        let free = build(generate_free(
            source.outputs.as_raw_fd(),
            source.armed.as_raw_fd(),
            PtrAt::Arg(1),
        ))?;
        let load = |insns: &[Insn], prog_type: ProgType, tp: &str| -> Result<OwnedFd, Error> {
            let mut log = Vec::new();
            load_program(prog_type, insns, "ksw_objects", &mut log).map_err(|e| {
                if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
                    return unavailable("loading its program", e);
                }
                Error::runtime(format!(
                    "the kernel refused the program for `{tp}`: {}",
                    log_line(&log)
                ))
                .caused_by(e)
            })
        };
        let attach = |insns: &[Insn], tp: &str| -> Result<(OwnedFd, OwnedFd), Error> {
            let prog = load(insns, ProgType::RawTracepoint, tp)?;
            let link = sys::bpf_raw_tracepoint_open(tp, prog.as_fd()).map_err(|e| {
                Error::usage(format!(
                    "no raw tracepoint `{tp}` to attach to ({e}); the kernel's BTF names each one it has \
                     (btf_trace_NAME)"
                ))
            })?;
            Ok((link, prog))
        };
        match attach_to {
            Attach::Raw(name) => source._links.push(attach(&alloc, name)?),
            Attach::Event(id) => {
                source.event = Some((*id, load(&alloc, ProgType::Tracepoint, &tracepoint)?));
            }
            Attach::User(_) => {}
        }
        for tp in ["kfree", "kmem_cache_free"] {
            source._links.push(attach(&free, tp)?);
        }
        for &cpu in cpus {
            source
                .open_cpu(cpu)
                .map_err(|e| Error::runtime(format!("objects on cpu {cpu}")).caused_by(e))?;
        }
        Ok(source)
    }

    /// Opens `cpu`'s output event and ring (a CPU that came online: the event it had before it went
    /// offline is dead, and is replaced once [`ObjectSource::drain`] has read it empty: allocations made
    /// there before it went offline are still in it). The new ring is the last of [`ObjectSource::fds`].
    pub fn open_cpu(&mut self, cpu: u32) -> std::io::Result<()> {
        let mut a = pb::perf_event_attr {
            type_: pb::PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<pb::perf_event_attr>() as u32,
            config: u64::from(pb::PERF_COUNT_SW_BPF_OUTPUT),
            sample_type: u64::from(pb::PERF_SAMPLE_RAW),
            ..Default::default()
        };
        a.sample_period = 1;
        a.wakeup_events = 1;
        let fd = sys::perf_event_open(&a, -1, cpu as i32)?;
        let ring = Ring::map(fd.as_fd(), RING_PAGES)?;
        sys::bpf_map_update(
            self.outputs.as_fd(),
            &cpu.to_ne_bytes(),
            &(fd.as_raw_fd() as u32).to_ne_bytes(),
        )?;
        self.rings.push((cpu, fd, ring));
        // The program runs on every CPU the tracepoint fires on once any one event of it carries the program
        // (the kernel keeps the programs with the tracepoint, and refuses the same one twice): one event,
        // on the first CPU armed. It stays attached if that CPU goes offline, until it is closed.
        if let (Some((id, prog)), None) = (&self.event, &self.carrier) {
            let mut a = pb::perf_event_attr {
                type_: pb::PERF_TYPE_TRACEPOINT,
                size: std::mem::size_of::<pb::perf_event_attr>() as u32,
                config: *id,
                ..Default::default()
            };
            a.sample_period = 1;
            let ev = sys::perf_event_open(&a, -1, cpu as i32)?;
            sys::perf_set_bpf(ev.as_fd(), prog.as_fd())?;
            sys::perf_enable(ev.as_fd())?;
            self.carrier = Some(ev);
        }
        Ok(())
    }

    /// Each ring's descriptor, for the event loop to poll.
    pub fn fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.rings.iter().map(|(_, fd, _)| fd.as_fd())
    }

    /// Every record now in the rings, decoded (malformed ones left out). A CPU's ring replaced when it
    /// came back online is closed once read.
    pub fn drain(&mut self, out: &mut Vec<Read>) {
        for (_, _, ring) in &mut self.rings {
            ring.drain(|bytes| {
                if let Some(r) = decode(bytes) {
                    out.push(r);
                }
                true
            });
        }
        newest_per_cpu(&mut self.rings, |(cpu, _, _)| *cpu);
    }
}

/// Keeps the last of each CPU's entries in `rings` (the newest: a CPU that came back online pushed its
/// new ring after the old one).
fn newest_per_cpu<T>(rings: &mut Vec<T>, cpu_of: impl Fn(&T) -> u32) {
    let mut seen = BTreeSet::new();
    let mut keep: Vec<bool> = rings.iter().rev().map(|r| seen.insert(cpu_of(r))).collect();
    keep.reverse();
    let mut keep = keep.into_iter();
    rings.retain(|_| keep.next().unwrap_or(true));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU that went offline and came back has two rings until the old one is read: the drain then
    /// keeps the new one only (the allocations in the old one were read first, not dropped with it).
    #[test]
    fn a_replaced_ring_is_kept_until_drained_then_closed() {
        let mut rings = vec![(0, "cpu0"), (1, "cpu1 old"), (1, "cpu1 new"), (2, "cpu2")];
        newest_per_cpu(&mut rings, |(cpu, _)| *cpu);
        assert_eq!(rings, [(0, "cpu0"), (1, "cpu1 new"), (2, "cpu2")]);
        newest_per_cpu(&mut rings, |(cpu, _)| *cpu);
        assert_eq!(rings.len(), 3);
    }

    #[test]
    fn programs_assemble() {
        let select = Select {
            ptr: PtrAt::Arg(1),
            call_site: Some((0xffffffff81000000, 0xffffffff81000100)),
            size: Some((SizeFrom::Requested, 320)),
        };
        assert!(generate_alloc(3, 4, -1, select).expect("alloc").len() > 20);
        let cache = Select {
            size: Some((SizeFrom::Cache(24), 320)),
            ..select
        };
        assert!(generate_alloc(3, 4, -1, cache).expect("cache alloc").len() > 20);
        assert!(generate_free(3, 4, PtrAt::Arg(1)).expect("free").len() > 10);
        let field = Select {
            ptr: PtrAt::Field(8),
            call_site: None,
            size: None,
        };
        assert!(generate_alloc(3, 4, -1, field).expect("field alloc").len() > 10);
    }

    /// Every shape of the allocation program, and the free program, passes the verifier as the kind of
    /// program it is loaded as (nothing is attached).
    #[test]
    #[ignore = "live: loads BPF programs (run by scripts/test as root)"]
    fn the_programs_pass_the_verifier() {
        if !super::super::root_or_skip("objects::tests", "to load BPF programs") {
            return;
        }
        let outputs = create_map(MapType::PerfEventArray, (4, 4), 64, "t_objout").expect("map");
        let armed = create_map(MapType::LruHash, (8, 4), 16, "t_armed").expect("map");
        let stash = create_map(MapType::LruHash, (8, 8), 16, "t_stash").expect("map");
        let stash16 = create_map(MapType::LruHash, (8, 16), 16, "t_stash16").expect("map");
        let (outputs, armed, stash) = (outputs.as_raw_fd(), armed.as_raw_fd(), stash.as_raw_fd());
        let stash16 = stash16.as_raw_fd();
        let user = Select {
            ptr: PtrAt::Reg(regs::RET),
            call_site: None,
            size: Some((SizeFrom::AtEntry, 64)),
        };
        let raw = Select {
            ptr: PtrAt::Arg(1),
            call_site: Some((0xffffffff81000000, 0xffffffff81000100)),
            size: Some((SizeFrom::Requested, 320)),
        };
        let cache = Select {
            size: Some((SizeFrom::Cache(24), 320)),
            ..raw
        };
        let field = Select {
            ptr: PtrAt::Field(8),
            call_site: None,
            size: None,
        };
        // posix_memalign's object, stored through its argument 0: with a size, and without.
        let out = Select {
            ptr: PtrAt::Out(regs::RET),
            ..user
        };
        let programs = [
            (
                generate_alloc(outputs, armed, -1, raw),
                ProgType::RawTracepoint,
            ),
            (
                generate_alloc(outputs, armed, -1, cache),
                ProgType::RawTracepoint,
            ),
            (
                generate_alloc(outputs, armed, -1, field),
                ProgType::Tracepoint,
            ),
            (
                generate_free(outputs, armed, PtrAt::Arg(1)),
                ProgType::RawTracepoint,
            ),
            (
                generate_stash(stash, StashSize::Product(regs::ARGS[0], regs::ARGS[1])),
                ProgType::Kprobe,
            ),
            (
                generate_alloc(outputs, armed, stash, user),
                ProgType::Kprobe,
            ),
            (
                generate_free(outputs, armed, PtrAt::Reg(regs::ARGS[0])),
                ProgType::Kprobe,
            ),
            (
                generate_stash(stash16, StashSize::WithOut(regs::ARGS[2], regs::ARGS[0])),
                ProgType::Kprobe,
            ),
            (
                generate_alloc(outputs, armed, stash16, out),
                ProgType::Kprobe,
            ),
            (
                generate_alloc(outputs, armed, stash16, Select { size: None, ..out }),
                ProgType::Kprobe,
            ),
        ];
        for (i, (insns, kind)) in programs.into_iter().enumerate() {
            let mut log = Vec::new();
            let insns = insns.expect("assembles");
            if let Err(e) = load_program(kind, &insns, "t_objects", &mut log) {
                panic!("program {i} ({kind:?}): {e}: {}", log_line(&log));
            }
        }
    }

    /// A sample carrying the program's record decodes to its fields; a LOST record to its count; short
    /// or truncated bytes to nothing.
    #[test]
    fn records_decode() {
        let mut raw = Vec::new();
        for w in [ALLOCATED, 5_000, 0xffff888104f2a000, 0xffffffff81234567] {
            raw.extend_from_slice(&w.to_ne_bytes());
        }
        raw.extend_from_slice(&((42u64 << 32) | 43).to_ne_bytes());
        raw.extend_from_slice(&320u64.to_ne_bytes());
        raw.extend_from_slice(b"pipes\0\0\0\0\0\0\0\0\0\0\0");
        let mut rec = Vec::new();
        rec.extend_from_slice(&RECORD_SAMPLE.to_ne_bytes());
        rec.extend_from_slice(&0u16.to_ne_bytes());
        rec.extend_from_slice(&((8 + 4 + raw.len() + 4) as u16).to_ne_bytes());
        rec.extend_from_slice(&(raw.len() as u32 + 4).to_ne_bytes());
        rec.extend_from_slice(&raw);
        rec.extend_from_slice(&[0; 4]);
        assert_eq!(
            decode(&rec),
            Some(Read::Object(ObjectRecord {
                kind: ALLOCATED,
                time: 5_000,
                ptr: 0xffff888104f2a000,
                call_site: 0xffffffff81234567,
                pid: 42,
                tid: 43,
                size: 320,
                comm: "pipes".into(),
            }))
        );
        assert_eq!(decode(&rec[..40]), None);
        let mut lost = Vec::new();
        lost.extend_from_slice(&RECORD_LOST.to_ne_bytes());
        lost.extend_from_slice(&[0; 4]);
        lost.extend_from_slice(&7u64.to_ne_bytes());
        lost.extend_from_slice(&3u64.to_ne_bytes());
        assert_eq!(decode(&lost), Some(Read::Lost(3)));
    }
}
