//! Where the hit program ([`super`]) and its emitter ([`crate::perf::bpf::emit`]) may be given more code:
//! named [`Point`]s of them, at which an [`Additions`] adds its own. The tool adds none ([`Nothing`]); the
//! writer-cost benchmark (test builds, `hit_variants`) times the parts between points with
//! `bpf_ktime_get_ns` or ends kept hits early, each part's cost to the writer being the difference
//! between two of its variants.

use crate::perf::bpf::insn::{Asm, Label};

/// A point of the programs being built where code may be added: r0-r5 are free there, r6-r9 the
/// program's (the context in `program::CTX`; from [`Point::Header`] on, the record in `hit::RECORD`; in
/// the emitter, its own record register, `emit::RECORD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The hit program's start; `drop` is where a hit is counted as filtered.
    Start {
        drop: Label,
    },
    /// The value code's steps: the task's pid/tgid and the olds key, the watched bytes read, the old value
    /// swapped (only with an `olds` map).
    Task,
    Value,
    Old,
    /// A kept hit past its decision (the value, the filters, the condition, the `--count` claim).
    Decided,
    /// And past the record's fixed fields (the scratch entry, time, name, ip, flags).
    Header,
    /// And past the kernel stack.
    KernelStack,
    /// And past the user stack, before the totals count it.
    UserStack,
    /// And counted in the totals (when there are).
    Counted,
    /// The record about to go to the emitter.
    HandOver,
    /// The emitter's end, the record in the ring.
    Emitted,
    /// A dropped hit, before and after it is counted in `stats[index]`; the program returns right after.
    Dropping(u32),
    Dropped(u32),
}

/// Code added to one program being built, at its [`Point`]s.
pub trait Additions {
    /// The code at `point`. `true`, at a kept hit's [`Point::Decided`], [`Point::Header`],
    /// [`Point::KernelStack`] or [`Point::UserStack`], ends the hit there: the code added jumped away (to
    /// [`Point::Start`]'s `drop`), and the generator builds no more of it.
    fn at(&mut self, a: &mut Asm, point: Point) -> bool;

    /// Whether the program walks a user-mode trap's user stack itself (else `bpf_get_stack` does).
    fn own_user_walk(&self) -> bool {
        true
    }
}

/// The tool's programs: nothing added.
#[derive(Debug, Clone, Copy, Default)]
pub struct Nothing;

impl Additions for Nothing {
    fn at(&mut self, _: &mut Asm, _: Point) -> bool {
        false
    }
}
