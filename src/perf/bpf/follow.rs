//! Following watched processes in the kernel, through the hit programs' `procs` map:
//! - children: a raw-tracepoint program on `sched_process_fork` adds a new process to `procs` when its
//!   parent's process is there, before the child runs its first instruction (the tracepoint fires in the
//!   parent, inside `fork`). A new thread (same tgid) is covered already and left alone. Launch mode uses
//!   it, as `perf record -- CMD` follows its command's children.
//! - execs: a program on `sched_prepare_exec` (Linux 6.10; `sched_process_exec` before it) takes the
//!   process out of `procs` at exec's point of no return, before the ELF loader writes into the new
//!   program's memory and before that program's first instruction: the watched address means something
//!   else there.
//! - exits: a program on `sched_process_exit` takes the process out of `procs` as its last thread exits
//!   (its `signal->live` count of running threads is then 0), before its pid can be given to another
//!   process: a pid is free again only once every thread of the process has exited and been reaped, so
//!   whatever process gets the pid next is never watched for having it.
//!
//! The child's `tgid` is read from its `task_struct` at the offset the running kernel's BTF gives: the
//! tracepoint's arguments are `(struct task_struct *parent, struct task_struct *child)`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::insn::{Asm, AsmError, Cond, Insn, Kept, DW, FP, R0, R1, R2, R3, W};
use super::kernel::{Helper, ProgType};
use super::seq;
use crate::error::Error;

/// The fork program's binding: the child's `task_struct`, the tracepoint's second argument.
const CHILD: Kept = Kept::R7;
/// The exit program's: the exiting task, the tracepoint's first argument.
const TASK: Kept = Kept::R6;

/// The program: `procs` is the watched-process map (u32 tgid -> u32), `tgid_offset` the byte offset of
/// `tgid` in `struct task_struct`.
pub fn generate(procs: i32, tgid_offset: i16) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let (parent_tgid, child_tgid, one) = (a.slot(4).off(), a.slot(4).off(), a.slot(4).off());
    let out = a.label();
    a.load(DW, CHILD, R1, 8);
    // The parent is the current task.
    seq::current_tgid_map_op(&mut a, procs, parent_tgid, Helper::MapLookupElem);
    a.jump_imm(Cond::Eq, R0, 0, out);
    let tgid = (CHILD.into(), i32::from(tgid_offset));
    seq::read_kernel(&mut a, child_tgid, 4, tgid, out);
    // A thread of the same process is covered already.
    a.load(W, R1, FP, child_tgid)
        .load(W, R2, FP, parent_tgid)
        .jump(Cond::Eq, R1, R2, out);
    a.store_imm(W, FP, one, 1);
    seq::update(&mut a, procs, (child_tgid, one), 0);
    a.bind(out);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// The exec program: deletes the current process (the one exec'ing) from `procs`.
pub fn generate_exec(procs: i32) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let tgid = a.slot(4).off();
    seq::current_tgid_map_op(&mut a, procs, tgid, Helper::MapDeleteElem);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// The exit program: deletes the current process from `procs` when the exiting task is its last live
/// thread. `signal_offset`: of `signal` in `struct task_struct`; `live_offset`: of `live` (an `atomic_t`,
/// its counter first) in `struct signal_struct`. `do_exit` counts the thread out of `live` before the
/// tracepoint fires, so the last one reads 0 (two threads exiting together may both read 0: the second
/// delete finds nothing).
pub fn generate_exit(
    procs: i32,
    signal_offset: i16,
    live_offset: i16,
) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    // The exiting task's `signal` pointer, its count of live threads, and the tgid key.
    let (signal, live, tgid) = (a.slot(8).off(), a.slot(4).off(), a.slot(4).off());
    let out = a.label();
    a.load(DW, TASK, R1, 0);
    seq::read_kernel(
        &mut a,
        signal,
        8,
        (TASK.into(), i32::from(signal_offset)),
        out,
    );
    a.load(DW, R3, FP, signal);
    seq::read_kernel(&mut a, live, 4, (R3, i32::from(live_offset)), out);
    a.load(W, R1, FP, live).jump_imm(Cond::Ne, R1, 0, out);
    seq::current_tgid_map_op(&mut a, procs, tgid, Helper::MapDeleteElem);
    a.bind(out);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// The loaded program, attached while this lives.
pub struct Follower {
    _link: OwnedFd,
    _prog: OwnedFd,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Follower")
    }
}

/// The running kernel's BTF; `what` says what needs it.
fn kernel_btf(what: &str) -> Result<std::sync::Arc<ksymwatch_symbols::btf::Btf>, Error> {
    ksymwatch_symbols::btf::Btf::running()
        .map_err(|e| Error::not_permitted(format!("{what} needs the kernel's BTF")).caused_by(e))
}

/// Where `strukt.field` is in the running kernel, from its BTF, as a BPF load offset.
fn field_offset(
    btf: &ksymwatch_symbols::btf::Btf,
    strukt: &str,
    field: &str,
) -> Result<i16, Error> {
    let off = btf
        .struct_field_offset(strukt, field)
        .ok_or_else(|| Error::not_permitted(format!("no {strukt}.{field} in the kernel's BTF")))?;
    i16::try_from(off)
        .map_err(|_| Error::not_permitted(format!("{strukt}.{field} is beyond a BPF load offset")))
}

/// Where `tgid` is in the running kernel's `struct task_struct`, from its BTF.
fn tgid_offset() -> Result<i16, Error> {
    use ksymwatch_symbols::btf::{CastKind, CastType};
    use ksymwatch_symbols::PathElem;
    let btf = kernel_btf("following a command's children")?;
    let cast = CastType {
        kind: Some(CastKind::Struct),
        name: "task_struct".into(),
    };
    let m = btf
        .member(&cast, &[PathElem::Field("tgid".into())])
        .map_err(|e| Error::not_permitted(format!("task_struct.tgid in the kernel's BTF: {e}")))?;
    i16::try_from(m.offset)
        .map_err(|_| Error::not_permitted("task_struct.tgid is beyond a BPF load offset"))
}

impl Follower {
    /// Loads and attaches the fork program for the watched-process map `procs`.
    pub fn attach(procs: BorrowedFd<'_>) -> Result<Follower, Error> {
        use std::os::fd::AsRawFd;
        let insns = generate(procs.as_raw_fd(), tgid_offset()?)
            .map_err(|e| Error::runtime("building the fork-following program").caused_by(e))?;
        Follower::load(&insns, "sched_process_fork", "ksw_follow").map_err(|e| {
            Error::not_permitted(format!(
                "cannot follow forks on the sched_process_fork tracepoint ({e}): children of the command \
                 would not be followed"
            ))
        })
    }

    /// Loads and attaches the exec program for the watched-process map `procs`: on `sched_prepare_exec`
    /// (Linux 6.10), at exec's point of no return, where a kernel without it has `sched_process_exec`.
    /// The tracer ends the process's watch at its exec COMM record (`crate::trace::watched`), written
    /// after the point of no return and before the ELF loader writes into the new program's memory: on
    /// `sched_process_exec`, after those writes, the programs would keep them (taking `--count`'s hits)
    /// and the tracer drop them. From `sched_prepare_exec` on, the exec'ing thread runs no more code of
    /// the old program, and what the kernel writes at the address is the new program's memory. Its other
    /// threads are killed right after (`de_thread`): a store one of them makes in those microseconds is
    /// dropped in the kernel as another process's (the tracer, ending the watch at the COMM record, would
    /// have shown it).
    pub fn attach_exec(procs: BorrowedFd<'_>) -> Result<Follower, Error> {
        use std::os::fd::AsRawFd;
        let insns = generate_exec(procs.as_raw_fd())
            .map_err(|e| Error::runtime("building the exec-following program").caused_by(e))?;
        let mut at = "sched_prepare_exec";
        let attached = match Follower::load(&insns, at, "ksw_exec") {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                at = "sched_process_exec";
                Follower::load(&insns, at, "ksw_exec")
            }
            attached => attached,
        };
        attached.map_err(|e| {
            Error::not_permitted(format!(
                "cannot follow execs on the {at} tracepoint ({e}): a watched process that execs another \
                 program would stay watched at the same address"
            ))
        })
    }

    /// Loads and attaches the exit program for the watched-process map `procs`.
    pub fn attach_exit(procs: BorrowedFd<'_>) -> Result<Follower, Error> {
        use std::os::fd::AsRawFd;
        let what = "ending a watched process's watch at its exit";
        let btf = kernel_btf(what)?;
        let signal = field_offset(&btf, "task_struct", "signal")?;
        let live = field_offset(&btf, "signal_struct", "live")?;
        let insns = generate_exit(procs.as_raw_fd(), signal, live)
            .map_err(|e| Error::runtime("building the exit-following program").caused_by(e))?;
        Follower::load(&insns, "sched_process_exit", "ksw_exit").map_err(|e| {
            Error::not_permitted(format!(
                "cannot follow exits on the sched_process_exit tracepoint ({e}): a process that gets the \
                 pid of a watched process that exited would be watched in its place"
            ))
        })
    }

    fn load(insns: &[Insn], tracepoint: &str, name: &str) -> std::io::Result<Follower> {
        let mut log = Vec::new();
        let prog =
            super::load_program(ProgType::RawTracepoint, insns, name, &mut log).map_err(|e| {
                std::io::Error::new(e.kind(), format!("{e}: {}", super::log_line(&log)))
            })?;
        let link = crate::perf::sys::bpf_raw_tracepoint_open(tracepoint, prog.as_fd())?;
        Ok(Follower {
            _link: link,
            _prog: prog,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::bpf::insn::calls;

    /// The exit program reads the task's `signal`, then its `live` count, and only then deletes the
    /// process: a thread that is not the last one leaves the process watched.
    #[test]
    fn the_exit_program_reads_the_live_count_before_it_deletes() {
        let insns = generate_exit(7, 2000, 16).expect("assembles");
        assert_eq!(
            calls(&insns),
            [
                Helper::ProbeReadKernel,
                Helper::ProbeReadKernel,
                Helper::GetCurrentPidTgid,
                Helper::MapDeleteElem
            ]
        );
        // The two offsets are added to the pointers the reads go through.
        let adds: Vec<i32> = insns
            .iter()
            .map(|i| i.raw())
            .filter(|raw| raw & 0xff == 0x07)
            .map(|raw| (raw >> 32) as i32)
            .collect();
        assert!(adds.contains(&2000) && adds.contains(&16), "{adds:?}");
    }
}
