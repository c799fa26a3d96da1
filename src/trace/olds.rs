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
//!
//! A user address's entries are a process's, not a pid's: a process made during the run
//! ([`Olds::new_process`], from the fork record that names it, or the exec record of a new program in
//! it) starts with no `old`, whatever an earlier process of its pid or its earlier image stored, as the
//! kernel's entries are its process's (tagged with its start time and exec count,
//! `perf::bpf::program`). A process gone ([`Olds::process_gone`]) leaves nothing behind.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::condition::Condition;
use crate::model::watch::Watch;
use crate::report::{Summary, Value, ValueFrom};
use crate::trace::context::Memory;
use crate::trace::store_value::Part;

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
    /// What a range held as the watch was armed, by the same key as `last`: the base a narrow store's
    /// bytes are laid over at the key's first hit, where memory is not read at the trap.
    seeds: FxHashMap<(usize, u64), u64>,
    /// Processes made since the run began (or since records were last lost): every hit of theirs is in
    /// the merged order, so one with no value in `last` has no `old`, whatever the kernel's says.
    fresh: FxHashSet<u32>,
}

impl Olds {
    /// `kernel_drops`: the kernel may drop traps (a condition or a filter), so the previous trap may
    /// not be printed.
    pub fn new(condition: Option<Condition>, kernel_drops: bool) -> Olds {
        Olds {
            last: FxHashMap::default(),
            condition,
            merged: !kernel_drops,
            seeds: FxHashMap::default(),
            fresh: FxHashSet::default(),
        }
    }

    /// Target `index` (at a user address) held `value` in process `pid` as it was armed.
    pub fn seed(&mut self, index: usize, pid: u32, value: u64) {
        self.seeds.insert((index, u64::from(pid)), value);
    }

    /// Seeds every target of `watches` in every process of `pids` with what `memory` holds there now
    /// (the events armed); a range that cannot be read is not seeded.
    pub fn seed_from(&mut self, watches: &[Watch], pids: &[u32], memory: &impl Memory) {
        for (index, w) in watches.iter().enumerate() {
            for &pid in pids {
                if let Value::Read(v) = memory.read(pid, w.addr, w.len) {
                    self.seed(index, pid, v);
                }
            }
        }
    }

    /// The value to print for a hit on target `index` at `addr` (a `len`-byte watch) by process `pid`:
    /// `old` from the merged order; races and `--if` verdicts the instruction's value contradicts are
    /// counted in `summary`. Values other than [`Value::Written`] pass through. `part`: the bytes a store
    /// narrower than the watch wrote where memory was not read at the trap (a read-write watch of a user
    /// address); the value is then the previous one with those bytes laid over it, when every trap is
    /// printed in the merged order, else what `now` reads the range holds now with them laid over it.
    pub fn settle(
        &mut self,
        index: usize,
        addr: u64,
        (len, pid): (u8, u32),
        (value, part): (Value, Option<Part>),
        now: impl FnOnce() -> Option<u64>,
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
        let made_here = addr < KERNEL_HALF && self.fresh.contains(&pid);
        let old = match self.last.get(&key) {
            Some(&v) if self.merged => Some(v),
            None if self.merged && made_here => None,
            _ => kernel_old,
        };
        let seed = self.seeds.remove(&key);
        let value = match (value, part) {
            (None, Some(p)) => {
                let before = match self.last.get(&key) {
                    Some(&v) if self.merged => Some(v),
                    None if self.merged => seed.or_else(now),
                    _ => now(),
                };
                before.map(|b| (b & !p.mask) | p.bits)
            }
            _ => value,
        };
        if let Some(v) = value {
            self.last.insert(key, v);
        } else {
            // An unknown value: what the range held after it is unknown too.
            self.last.remove(&key);
        }
        Value::Written { value, old, from }
    }

    /// `--if`'s condition, as the kernel decides it.
    pub fn condition(&self) -> Option<&Condition> {
        self.condition.as_ref()
    }

    /// Target `index` moved: its next hit has no `old` (the kernel's is emptied too).
    pub fn forget(&mut self, index: usize) {
        self.last.retain(|&(i, _), _| i != index);
        self.seeds.retain(|&(i, _), _| i != index);
    }

    /// Process `pid` was just made (a fork record of a new process) or runs a new program (an exec
    /// record): whatever an earlier process of that pid, or its earlier image, stored is not what the
    /// range holds now, so its first hit at each user address has no `old`.
    pub fn new_process(&mut self, pid: u32) {
        self.process_gone(pid);
        self.fresh.insert(pid);
    }

    /// Process `pid` ended (its leader's exit record): its values are dropped. Threads it leaves
    /// behind take the kernel's `old`, which is kept per process.
    pub fn process_gone(&mut self, pid: u32) {
        self.fresh.remove(&pid);
        let pid = u64::from(pid);
        self.last.retain(|&(_, key), _| key != pid);
        self.seeds.retain(|&(_, key), _| key != pid);
    }

    /// Records were lost: the previous printed hit may not be the previous trap, so `old` is the kernel's
    /// until each target's next hit is printed.
    pub fn lost(&mut self) {
        self.last.clear();
        self.seeds.clear();
        self.fresh.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Target `index`'s 8-byte store of `value` at `addr` by `pid`, with no clock at hand.
    fn store(
        o: &mut Olds,
        s: &mut Summary,
        (index, addr, pid): (usize, u64, u32),
        value: Value,
        part: Option<Part>,
    ) -> Value {
        o.settle(index, addr, (8, pid), (value, part), || None, s)
    }

    /// The old value shown with target `index`'s 8-byte store of `value` (the instruction's) at `addr`
    /// by `pid`.
    fn old_after(o: &mut Olds, s: &mut Summary, at: (usize, u64, u32), value: u64) -> Option<u64> {
        old(store(o, s, at, insn(value), None))
    }

    /// A value the instruction gave (no old from the kernel).
    fn insn(value: u64) -> Value {
        w(Some(value), ValueFrom::Insn)
    }

    /// A store whose value the trap could not tell (memory not read).
    fn unknown() -> Value {
        w(None, ValueFrom::Memory)
    }

    /// A store of `value` that memory, read at the trap, contradicts.
    fn raced(value: u64, memory: u64) -> Value {
        w(Some(value), ValueFrom::Raced { memory })
    }

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
        assert_eq!(old_after(&mut o, &mut s, (0, user, 10), 1), None);
        assert_eq!(old_after(&mut o, &mut s, (0, user, 10), 2), Some(1));
        // Another process at the same user address has its own.
        assert_eq!(old_after(&mut o, &mut s, (0, user, 11), 5), None);
        // A kernel address is one variable whoever writes it.
        let k = 0xffff_ffff_8300_3e00;
        store(&mut o, &mut s, (1, k, 10), insn(7), None);
        assert_eq!(old_after(&mut o, &mut s, (1, k, 11), 8), Some(7));
        // Another CPU's copy of a per-CPU variable (same target, another address) has its own.
        assert_eq!(old_after(&mut o, &mut s, (1, k + 0x10_0000, 11), 6), None);
        // An unknown value leaves the next old unknown; a move forgets the target.
        store(&mut o, &mut s, (0, user, 10), unknown(), None);
        assert_eq!(old_after(&mut o, &mut s, (0, user, 10), 3), None);
        o.forget(0);
        assert_eq!(old_after(&mut o, &mut s, (0, user, 10), 4), None);
        assert_eq!(old_after(&mut o, &mut s, (1, k, 10), 9), Some(8));
        assert_eq!(s.raced, 0);
        assert_eq!(
            store(&mut o, &mut s, (0, user, 10), Value::Read(4), None),
            Value::Read(4)
        );
    }

    /// A pid taken again by a new process: its first hit has no `old`, at every target, while a kernel
    /// address (one history whoever writes it) and other processes keep theirs.
    #[test]
    fn a_new_process_of_a_reused_pid_starts_with_no_old() {
        let mut o = Olds::new(None, false);
        let mut s = Summary::default();
        let (user, k) = (0x40_51c0, 0xffff_ffff_8300_3e00);
        store(&mut o, &mut s, (0, user, 10), insn(7), None);
        store(&mut o, &mut s, (1, user + 8, 10), insn(8), None);
        store(&mut o, &mut s, (0, user, 11), insn(5), None);
        store(&mut o, &mut s, (2, k, 10), insn(3), None);
        o.seed(0, 10, 0x55);
        o.new_process(10);
        // Even where the kernel still names the earlier process's value (a kernel without BTF).
        assert_eq!(
            old(store(&mut o, &mut s, (0, user, 10), kernel(9, 7), None)),
            None
        );
        assert_eq!(old_after(&mut o, &mut s, (1, user + 8, 10), 9), None);
        assert!(
            o.seeds.is_empty(),
            "the earlier process's seed is not this one's"
        );
        assert_eq!(old_after(&mut o, &mut s, (0, user, 11), 6), Some(5));
        assert_eq!(old_after(&mut o, &mut s, (2, k, 10), 4), Some(3));
        assert_eq!(old_after(&mut o, &mut s, (0, user, 10), 10), Some(9));
        // Gone: nothing kept; a loss hands `old` back to the kernel, which tags its entries itself.
        o.process_gone(11);
        assert!(o.last.keys().all(|&(_, key)| key != 11));
        o.lost();
        assert_eq!(
            old(store(&mut o, &mut s, (0, user, 10), kernel(11, 10), None)),
            Some(10)
        );
    }

    #[test]
    fn the_kernel_old_stands_in_where_the_previous_trap_may_not_be_printed() {
        let k = 0xffff_ffff_8300_3e00;
        let mut s = Summary::default();
        // Merged order: the printed previous value wins over the kernel's racy read.
        let mut o = Olds::new(None, false);
        store(&mut o, &mut s, (0, k, 1), kernel(5, 4), None);
        assert_eq!(
            old(store(&mut o, &mut s, (0, k, 2), kernel(6, 77), None)),
            Some(5)
        );
        // After a loss, the kernel's until the next printed hit.
        o.lost();
        assert_eq!(
            old(store(&mut o, &mut s, (0, k, 2), kernel(7, 66), None)),
            Some(66)
        );
        assert_eq!(
            old(store(&mut o, &mut s, (0, k, 2), kernel(8, 55), None)),
            Some(7)
        );
        // With drops in the kernel, always the kernel's.
        let mut o = Olds::new(None, true);
        store(&mut o, &mut s, (0, k, 1), kernel(5, 4), None);
        assert_eq!(
            old(store(&mut o, &mut s, (0, k, 2), kernel(6, 77), None)),
            Some(77)
        );
    }

    /// A store narrower than a read-write watch (memory not read at the trap): its bytes over the previous
    /// value, while every trap is printed; unknown for a first hit and where the kernel drops traps.
    #[test]
    fn a_narrow_store_without_memory_is_laid_over_the_previous_value() {
        let mut s = Summary::default();
        let user = 0x60_1000;
        let half = Some(Part {
            bits: 0x2a,
            mask: 0xffff_ffff,
        });
        let value = |v: Value| match v {
            Value::Written { value, .. } => value,
            _ => panic!("not a written value"),
        };
        let mut o = Olds::new(None, false);
        let first = store(&mut o, &mut s, (0, user, 10), unknown(), half);
        assert_eq!(value(first), None);
        store(
            &mut o,
            &mut s,
            (0, user, 10),
            insn(0x5a5a_5a5a_0000_0001),
            None,
        );
        let v = store(&mut o, &mut s, (0, user, 10), unknown(), half);
        assert_eq!(value(v), Some(0x5a5a_5a5a_0000_002a));
        assert_eq!(old(v), Some(0x5a5a_5a5a_0000_0001));
        let mut o = Olds::new(None, true);
        store(&mut o, &mut s, (0, user, 10), insn(1), None);
        let v = store(&mut o, &mut s, (0, user, 10), unknown(), half);
        assert_eq!(value(v), None);
    }

    #[test]
    fn races_and_contradicted_verdicts_are_counted() {
        let cond = crate::model::condition::parse("value > 10").unwrap();
        let mut o = Olds::new(Some(cond), true);
        let mut s = Summary::default();
        // Memory (kernel's verdict) said 20; the store wrote 5: raced, and the verdict is contradicted.
        store(&mut o, &mut s, (0, 0x1000, 1), raced(5, 20), None);
        // The store wrote 15: raced, but it passes too.
        store(&mut o, &mut s, (0, 0x1000, 1), raced(15, 30), None);
        store(&mut o, &mut s, (0, 0x1000, 1), insn(15), None);
        assert_eq!((s.raced, s.condition_disagreed), (2, 1));
    }

    /// The start's seeds are what memory holds in each watched process, per target; an unreadable range
    /// is not seeded, and a seed is the base a narrow store is laid over at its key's first hit.
    #[test]
    fn seeds_are_read_per_target_and_process() {
        use crate::model::watch::Access;
        use crate::report::testutil::watch;
        use crate::trace::context::fake::Memories;
        let watches = [
            watch("a", 0x1000, Access::Write),
            watch("b", 0x2000, Access::Write),
        ];
        let memory = Memories(
            [
                ((7, 0x1000), 0x11),
                ((8, 0x1000), 0x22),
                ((7, 0x2000), 0x33),
            ]
            .into_iter()
            .collect(),
        );
        let mut o = Olds::new(None, false);
        o.seed_from(&watches, &[7, 8], &memory);
        let seeds: std::collections::BTreeMap<_, _> =
            o.seeds.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(
            seeds.into_iter().collect::<Vec<_>>(),
            [((0, 7), 0x11), ((0, 8), 0x22), ((1, 7), 0x33)]
        );
    }
}
