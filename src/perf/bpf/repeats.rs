//! The per-thread path's check that each store is reported once. There, every thread's breakpoint event
//! runs the hit program, and a thread created while the watch is being armed is covered twice: by its
//! own event and by the copy it inherited from its creator (and the threads it creates later inherit
//! both). Both handlers of one trap run back to back on the CPU that took it, with interrupts off, so
//! nothing runs between them there.
//!
//! The check runs first in the per-thread hit program, before the value code swaps the old value, the
//! totals count or `--count` claims: it keeps in the CPU's scratch entry the last store (writer and
//! ip, [`layout::OFF_REPORTED_WRITER`], [`layout::OFF_REPORTED_IP`]) and the events that reported it (up to
//! [`EVENTS`], [`layout::OFF_REPORTED_BY`]), and drops a report of that store by an event not yet seen for
//! it, counted in `stats` ([`layout::STAT_REPEATED`]). The same event again is the loop's next store, at the
//! same ip. The perf-sample path's decoder does the same with the samples' event ids
//! (`trace::events::samples::Stores`).
//!
//! Which event fired is the kernel context's `event` (`struct bpf_perf_event_data_kern`), reached through
//! the kfunc `bpf_cast_to_kern_ctx` (Linux 6.2; the verifier turns the call into a move): both are found
//! in the kernel's BTF ([`find`]). Storing that pointer in the scratch entry needs the loader's privilege
//! to handle kernel pointers (root, CAP_PERFMON). A per-CPU breakpoint cannot cover a thread twice, so
//! its program has no check.

use std::sync::OnceLock;

use ksymwatch_symbols::Btf;

use super::emit;
use super::insn::{Asm, Cond, DW, FP, R0, R1, R2, R3};
use super::kernel::{ctx, Helper};
use super::layout::{self, EVENTS};
use super::program::CTX;
use super::seq;

/// Where the running kernel lets a perf-event program see which event fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeats {
    /// `bpf_cast_to_kern_ctx`'s BTF id.
    pub kern_ctx: i32,
    /// `event`'s offset in `struct bpf_perf_event_data_kern`.
    pub event: i16,
}

/// What the kernel's BTF lacks for the check, as the refusal names it.
pub const NEEDS: &str = "the kfunc bpf_cast_to_kern_ctx (Linux 6.2) and struct \
                         bpf_perf_event_data_kern in the kernel's BTF (/sys/kernel/btf/vmlinux)";

/// The running kernel's [`Repeats`], or `None` where its BTF cannot be read or lacks them. Read once
/// per process.
pub fn find() -> Option<Repeats> {
    static FOUND: OnceLock<Option<Repeats>> = OnceLock::new();
    *FOUND.get_or_init(|| from_btf(&*Btf::running().ok()?))
}

/// [`Repeats`] as `btf` describes the kernel.
fn from_btf(btf: &Btf) -> Option<Repeats> {
    let kern_ctx = i32::try_from(btf.func_id("bpf_cast_to_kern_ctx")?).ok()?;
    let event = btf.struct_field_offset("bpf_perf_event_data_kern", "event")?;
    Some(Repeats {
        kern_ctx,
        event: i16::try_from(event).ok()?,
    })
}

/// The check's stack slots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slots {
    /// The event that fired (a kernel pointer, spilled across the calls).
    event: i16,
    /// The writer (pid_tgid).
    writer: i16,
    /// The scratch entry's key, then the `stats` key.
    key: i16,
}

impl Slots {
    pub(crate) fn new(a: &mut Asm) -> Slots {
        Slots {
            event: a.slot(8).off(),
            writer: a.slot(8).off(),
            key: a.slot(4).off(),
        }
    }
}

/// The check, with the context in [`CTX`]: a repeat is counted in `stats` and the program returns 0;
/// a first report goes on past the check's code (r0-r5 clobbered, r6-r9 untouched).
pub(crate) fn check(a: &mut Asm, r: &Repeats, (scratch, stats): (i32, i32), slots: &Slots) {
    let (next_store, repeat, go_on) = (a.label(), a.label(), a.label());
    a.mov(R1, CTX)
        .call_kfunc(r.kern_ctx)
        .load(DW, R1, R0, r.event)
        .store(DW, FP, slots.event, R1)
        .call(Helper::GetCurrentPidTgid)
        .store(DW, FP, slots.writer, R0);
    seq::lookup(a, (scratch, 0, slots.key), go_on);
    // The event's address as a number: the pointer goes through the entry (the verifier then knows it
    // as a scalar, which it lets the program compare).
    a.load(DW, R1, FP, slots.event)
        .store(DW, R0, layout::OFF_REPORTING, R1)
        .load(DW, R1, R0, layout::OFF_REPORTING);
    a.load(DW, R2, FP, slots.writer)
        .load(DW, R3, R0, layout::OFF_REPORTED_WRITER)
        .jump(Cond::Ne, R2, R3, next_store)
        .load(DW, R2, CTX, ctx::IP)
        .load(DW, R3, R0, layout::OFF_REPORTED_IP)
        .jump(Cond::Ne, R2, R3, next_store);
    // The store the CPU reported last: by this event already (the loop's next store), or a repeat.
    for i in 0..EVENTS as i16 {
        a.load(DW, R2, R0, layout::OFF_REPORTED_BY + 8 * i)
            .jump(Cond::Eq, R1, R2, next_store);
    }
    // Slot 0 holds the event of the first report; the repeat's event goes into the first free one.
    for i in 1..EVENTS as i16 {
        let taken = a.label();
        a.load(DW, R2, R0, layout::OFF_REPORTED_BY + 8 * i)
            .jump_imm(Cond::Ne, R2, 0, taken)
            .store(DW, R0, layout::OFF_REPORTED_BY + 8 * i, R1)
            .goto(repeat);
        a.bind(taken);
    }
    a.goto(repeat);
    // A store not reported yet: it is the CPU's last, this event the first to report it.
    a.bind(next_store);
    a.load(DW, R2, FP, slots.writer)
        .store(DW, R0, layout::OFF_REPORTED_WRITER, R2)
        .load(DW, R2, CTX, ctx::IP)
        .store(DW, R0, layout::OFF_REPORTED_IP, R2)
        .store(DW, R0, layout::OFF_REPORTED_BY, R1);
    for i in 1..EVENTS as i16 {
        a.store_imm(DW, R0, layout::OFF_REPORTED_BY + 8 * i, 0);
    }
    a.goto(go_on);
    a.bind(repeat);
    emit::add_one(a, stats, layout::STAT_REPEATED, slots.key);
    a.mov_imm(R0, 0).exit();
    a.bind(go_on);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ExitCode;
    use crate::perf::bpf::ProgramError;

    /// A kernel that cannot tell the program which event fired is not permitted the per-thread path's
    /// values (4), and the refusal says what the kernel lacks.
    #[test]
    fn a_kernel_without_the_check_is_refused_naming_what_it_lacks() {
        let e = ProgramError::NoFiringEvent;
        assert_eq!(e.code(), ExitCode::NotPermitted);
        let text = e.to_string();
        assert!(
            text.contains("bpf_cast_to_kern_ctx") && text.contains("Linux 6.2"),
            "{text}"
        );
    }

    /// The running kernel's BTF gives the kfunc's id and the event's place after the registers and the
    /// sample data (two pointers), where it has BTF.
    #[test]
    fn the_running_kernels_check_is_found_where_it_has_btf() {
        let Ok(btf) = Btf::running() else {
            println!("SKIP: repeats: no readable {}", Btf::VMLINUX);
            return;
        };
        match from_btf(&btf) {
            Some(r) => {
                assert_eq!(r.event, 16);
                assert!(r.kern_ctx > 0);
                assert_eq!(find(), Some(r));
            }
            None => println!("SKIP: repeats: this kernel's BTF has no bpf_cast_to_kern_ctx"),
        }
    }
}
