//! `--value`'s `old` in the merged time order of all CPUs, and the books on values that raced.
//!
//! The kernel's program knows only the value it read at the trap on its own CPU: under contention two
//! CPUs' traps can see each other's stores, in either order. Here, after the rings are merged in time
//! order, a hit's `old` is the value of the previous hit printed for the same target (and process, at a
//! user address; and copy, for a per-CPU variable): what the reader sees on the line before, exact when that hit's value was.
//!
//! That needs every trap in between to have been printed. Where the kernel may drop traps (`--if`, the
//! filters) and after records were lost, the previous trap is not on screen, and `old` is the kernel's:
//! what the previous trap on this target read at its trap (the `old` that `--if` compared). A `--control`
//! move starts both afresh.

use rustc_hash::FxHashMap;

use crate::model::condition::Condition;
use crate::report::{Summary, Value, ValueFrom};

/// Kernel addresses start here; below is a process's own.
const KERNEL_HALF: u64 = 1 << 63;

#[derive(Debug, Default)]
pub struct Olds {
    /// (target index, process at a user address or the address itself in the kernel, where each CPU's
    /// copy of a per-CPU variable is a different one) → the last value printed.
    last: FxHashMap<(usize, u64), u64>,
    condition: Option<Condition>,
    /// Every trap reaches the tracer (no condition, no filter): `old` can come from the merged order.
    merged: bool,
}

impl Olds {
    /// `kernel_drops`: the kernel may drop traps (a condition or a filter), so the previous trap may
    /// not be printed.
    pub fn new(condition: Option<Condition>, kernel_drops: bool) -> Olds {
        Olds {
            last: FxHashMap::default(),
            condition,
            merged: !kernel_drops,
        }
    }

    /// The value to print for a hit on target `index` at `addr` (a `len`-byte watch) by process `pid`:
    /// `old` from the merged order; races and `--if` verdicts the instruction's value contradicts are
    /// counted in `summary`. Values other than [`Value::Written`] pass through.
    pub fn settle(
        &mut self,
        index: usize,
        addr: u64,
        len: u8,
        pid: u32,
        value: Value,
        summary: &mut Summary,
    ) -> Value {
        let Value::Written {
            value,
            old: kernel_old,
            from,
        } = value
        else {
            return value;
        };
        if let (ValueFrom::Raced { .. }, Some(v)) = (from, value) {
            summary.raced += 1;
            // The kernel kept the hit on what memory held; the store itself may not pass.
            if self
                .condition
                .as_ref()
                .is_some_and(|c| !c.holds(v, kernel_old, len))
            {
                summary.condition_disagreed += 1;
            }
        }
        let key = (
            index,
            if addr >= KERNEL_HALF {
                addr
            } else {
                u64::from(pid)
            },
        );
        let old = match self.last.get(&key) {
            Some(&v) if self.merged => Some(v),
            _ => kernel_old,
        };
        if let Some(v) = value {
            self.last.insert(key, v);
        } else {
            // An unknown value: what the range held after it is unknown too.
            self.last.remove(&key);
        }
        Value::Written { value, old, from }
    }

    /// Target `index` moved: its next hit has no `old` (the kernel's is emptied too).
    pub fn forget(&mut self, index: usize) {
        self.last.retain(|&(i, _), _| i != index);
    }

    /// Records were lost: the previous printed hit may not be the previous trap, so `old` is the kernel's
    /// until each target's next hit is printed.
    pub fn lost(&mut self) {
        self.last.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(value: Option<u64>, from: ValueFrom) -> Value {
        Value::Written {
            value,
            old: None,
            from,
        }
    }

    fn kernel(value: u64, old: u64) -> Value {
        Value::Written {
            value: Some(value),
            old: Some(old),
            from: ValueFrom::Insn,
        }
    }

    fn old(v: Value) -> Option<u64> {
        match v {
            Value::Written { old, .. } => old,
            _ => panic!("not a written value"),
        }
    }

    #[test]
    fn old_is_the_previous_printed_value_of_the_target_and_process() {
        let mut o = Olds::new(None, false);
        let mut s = Summary::default();
        let user = 0x60_1000;
        assert_eq!(
            old(o.settle(0, user, 8, 10, w(Some(1), ValueFrom::Insn), &mut s)),
            None
        );
        assert_eq!(
            old(o.settle(0, user, 8, 10, w(Some(2), ValueFrom::Insn), &mut s)),
            Some(1)
        );
        // Another process at the same user address has its own.
        assert_eq!(
            old(o.settle(0, user, 8, 11, w(Some(5), ValueFrom::Insn), &mut s)),
            None
        );
        // A kernel address is one variable whoever writes it.
        let k = 0xffff_ffff_8300_3e00;
        o.settle(1, k, 8, 10, w(Some(7), ValueFrom::Insn), &mut s);
        assert_eq!(
            old(o.settle(1, k, 8, 11, w(Some(8), ValueFrom::Insn), &mut s)),
            Some(7)
        );
        // Another CPU's copy of a per-CPU variable (same target, another address) has its own.
        assert_eq!(
            old(o.settle(1, k + 0x10_0000, 8, 11, w(Some(6), ValueFrom::Insn), &mut s)),
            None
        );
        // An unknown value leaves the next old unknown; a move forgets the target.
        o.settle(0, user, 8, 10, w(None, ValueFrom::Memory), &mut s);
        assert_eq!(
            old(o.settle(0, user, 8, 10, w(Some(3), ValueFrom::Insn), &mut s)),
            None
        );
        o.forget(0);
        assert_eq!(
            old(o.settle(0, user, 8, 10, w(Some(4), ValueFrom::Insn), &mut s)),
            None
        );
        assert_eq!(
            old(o.settle(1, k, 8, 10, w(Some(9), ValueFrom::Insn), &mut s)),
            Some(8)
        );
        assert_eq!(s.raced, 0);
        assert_eq!(
            o.settle(0, user, 8, 10, Value::Read(4), &mut s),
            Value::Read(4)
        );
    }

    #[test]
    fn the_kernel_old_stands_in_where_the_previous_trap_may_not_be_printed() {
        let k = 0xffff_ffff_8300_3e00;
        let mut s = Summary::default();
        // Merged order: the printed previous value wins over the kernel's racy read.
        let mut o = Olds::new(None, false);
        o.settle(0, k, 8, 1, kernel(5, 4), &mut s);
        assert_eq!(old(o.settle(0, k, 8, 2, kernel(6, 77), &mut s)), Some(5));
        // After a loss, the kernel's until the next printed hit.
        o.lost();
        assert_eq!(old(o.settle(0, k, 8, 2, kernel(7, 66), &mut s)), Some(66));
        assert_eq!(old(o.settle(0, k, 8, 2, kernel(8, 55), &mut s)), Some(7));
        // With drops in the kernel, always the kernel's.
        let mut o = Olds::new(None, true);
        o.settle(0, k, 8, 1, kernel(5, 4), &mut s);
        assert_eq!(old(o.settle(0, k, 8, 2, kernel(6, 77), &mut s)), Some(77));
    }

    #[test]
    fn races_and_contradicted_verdicts_are_counted() {
        let cond = crate::model::condition::parse("value > 10").unwrap();
        let mut o = Olds::new(Some(cond), true);
        let mut s = Summary::default();
        // Memory (kernel's verdict) said 20; the store wrote 5: raced, and the verdict is contradicted.
        o.settle(
            0,
            0x1000,
            8,
            1,
            w(Some(5), ValueFrom::Raced { memory: 20 }),
            &mut s,
        );
        // The store wrote 15: raced, but it passes too.
        o.settle(
            0,
            0x1000,
            8,
            1,
            w(Some(15), ValueFrom::Raced { memory: 30 }),
            &mut s,
        );
        o.settle(0, 0x1000, 8, 1, w(Some(15), ValueFrom::Insn), &mut s);
        assert_eq!((s.raced, s.condition_disagreed), (2, 1));
    }
}
