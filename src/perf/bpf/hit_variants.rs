//! The writer-cost benchmark's variants of the hit program (`hit_bench`), test-only: a [`Variant`] ends
//! kept hits early ([`Stage`]), times the program's parts with `bpf_ktime_get_ns` stamps into a per-CPU
//! map, or builds the program without a part (the old values, the by-tgid array, the totals, its own user
//! stack walk), each part's cost to the writer being the difference between two variants.
//!
//! A variant is a [`Build`] of the hit programs (`HitPrograms::load_built` takes one): it builds the
//! tool's generators with its code at their named [`Point`]s ([`super::hit::additions`]).

use crate::perf::bpf::layout;

use super::emit::{self, EmitMaps};
use super::hit::additions::{Additions, Point};
use super::hit::{self, HitMaps, HitSpec};
use super::hit_set::Build;
use super::insn::{Alu, Asm, AsmError, Insn, Kept, Label, DW, FP, R0, R1, R2};
use super::kernel::Helper;
use super::seq;

/// How far a kept hit's work has gone, where a variant may end it (counted as filtered; from
/// [`Stage::Header`] on, the scratch entry is taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stage {
    /// Nothing done: the program is `return 0`.
    Entry,
    /// The value, the filters and the condition.
    Decided,
    /// The record's fixed fields (scratch entry, time, comm, ip, flags).
    Header,
    /// And the kernel stack.
    KernelStack,
    /// And the user stack (the hit not counted in the totals).
    UserStack,
}

impl Stage {
    /// The point a kept hit past this stage reaches.
    fn point(self) -> Option<Point> {
        match self {
            Stage::Entry => None,
            Stage::Decided => Some(Point::Decided),
            Stage::Header => Some(Point::Header),
            Stage::KernelStack => Some(Point::KernelStack),
            Stage::UserStack => Some(Point::UserStack),
        }
    }
}

/// The parts a stamped program times, in order: from the program's start to the hit being kept (the value,
/// the old value, the filters, the condition), the record's fixed fields, the kernel stack, the user
/// stack, and the output.
pub(crate) const STAMP_PARTS: [&str; 5] = ["decided", "header", "kstack", "ustack", "output"];
/// Slots of the stamps map's results: the count of kept hits, then one per part.
pub(crate) const STAMP_SLOTS: u32 = 1 + STAMP_PARTS.len() as u32;
/// The stamps map's slot after the results: the time the hit program handed the kept hit over at, where
/// the emitter's output part starts (the CPU's emitter runs right after, by tail call).
const HANDED_OVER: u32 = STAMP_SLOTS;
/// Slots in a kept hits' stamps map: the results and [`HANDED_OVER`].
pub(crate) const STAMP_MAP_SLOTS: u32 = STAMP_SLOTS + 1;

/// The parts a drop-stamped program times, in order: one stamp right after another (what a stamp itself
/// costs, included in every part), the task and the olds key, the value read, the old value's swap, the
/// filters and the condition, and the count of the dropped hit.
pub(crate) const DROP_STAMP_PARTS: [&str; 6] =
    ["stamp", "task", "value", "old", "condition", "count"];
/// Slots in the drop stamps map: the count of dropped hits, then one per part.
pub(crate) const DROP_STAMP_SLOTS: u32 = 1 + DROP_STAMP_PARTS.len() as u32;

/// Which hits a variant times, into which `BPF_MAP_TYPE_PERCPU_ARRAY` of u64s: each timed hit adds 1 to
/// slot 0 and, to slot 1 + i, the nanoseconds its part i took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stamps {
    /// Kept hits, [`STAMP_MAP_SLOTS`] slots ([`STAMP_PARTS`]); the emitter adds the output's part.
    Kept(i32),
    /// Dropped hits, [`DROP_STAMP_SLOTS`] slots ([`DROP_STAMP_PARTS`]).
    Dropped(i32),
}

/// One variant of the hit program.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Variant {
    /// Where a kept hit ends (counted as filtered); `None`: the whole program.
    pub until: Option<Stage>,
    pub stamps: Option<Stamps>,
    /// Take a user-mode trap's user stack with `bpf_get_stack`, as before the program walked it itself.
    pub kernel_user_walk: bool,
    /// Leave out the old values (what the olds map costs).
    pub no_olds: bool,
    /// Keep a user address's old values in the hash only (the by-tgid array's before).
    pub no_olds_by_tgid: bool,
    /// Leave out the in-kernel totals.
    pub no_totals: bool,
}

impl Build for Variant {
    /// The tool's hit program for `spec`, less the parts the variant leaves out, with its code.
    fn hit(&self, spec: &HitSpec<'_>, maps: &HitMaps) -> Result<Vec<Insn>, AsmError> {
        if self.until == Some(Stage::Entry) {
            let mut a = Asm::new();
            a.mov_imm(R0, 0).exit();
            return a.finish();
        }
        let (mut spec, mut maps) = (*spec, *maps);
        if self.no_olds {
            spec.old = false;
        }
        if self.no_olds_by_tgid {
            maps.olds_by_tgid = None;
        }
        if self.no_totals {
            maps.totals = None;
        }
        hit::generate_adding(&spec, &maps, &mut self.adding())
    }

    fn emitter(&self, maps: &EmitMaps, wake_bytes: u32) -> Result<Vec<Insn>, AsmError> {
        emit::generate_adding(maps, wake_bytes, &mut self.adding())
    }
}

impl Variant {
    /// Its code for one program being built.
    fn adding(&self) -> Adding {
        Adding {
            variant: *self,
            slots: None,
            drop: None,
        }
    }
}

/// A variant's code in one program being built.
#[derive(Debug)]
struct Adding {
    variant: Variant,
    /// The stamps' stack slots: the previous stamp, the map key, the deltas.
    slots: Option<(i16, i16, i16)>,
    /// Where the program counts a dropped hit as filtered ([`Point::Start`]).
    drop: Option<Label>,
}

impl Additions for Adding {
    fn at(&mut self, a: &mut Asm, point: Point) -> bool {
        if let Point::Start { drop } = point {
            self.drop = Some(drop);
            match self.variant.stamps {
                Some(Stamps::Kept(_)) => self.start(a, STAMP_SLOTS),
                Some(Stamps::Dropped(_)) => self.start(a, DROP_STAMP_SLOTS),
                None => {}
            }
        }
        match (self.variant.stamps, point) {
            (Some(Stamps::Kept(map)), Point::HandOver) => {
                self.flush(a, map, STAMP_SLOTS);
                self.handed_over(a, map);
            }
            (Some(Stamps::Kept(map)), Point::Emitted) => emitted(a, map),
            _ => {}
        }
        if let Some((map, slots, part)) = self.part(point) {
            self.stamp(a, part);
            if matches!(point, Point::Dropped(_)) {
                self.flush(a, map, slots);
            }
        }
        // A kept hit ending here is counted as filtered.
        match (
            self.variant.until.and_then(Stage::point) == Some(point),
            self.drop,
        ) {
            (true, Some(drop)) => {
                a.goto(drop);
                true
            }
            _ => false,
        }
    }

    fn own_user_walk(&self) -> bool {
        !self.variant.kernel_user_walk
    }
}

impl Adding {
    /// The map, its slot count and, for `point`, the part whose delta it ends (`None`: not one).
    fn part(&self, point: Point) -> Option<(i32, u32, i16)> {
        match (self.variant.stamps?, point) {
            (Stamps::Kept(m), p) => {
                let part = match p {
                    Point::Decided => 0,
                    Point::Header => 1,
                    Point::KernelStack => 2,
                    Point::Counted => 3,
                    _ => return None,
                };
                Some((m, STAMP_SLOTS, part))
            }
            (Stamps::Dropped(m), p) => {
                let part = match p {
                    Point::Start { .. } => 0,
                    Point::Task => 1,
                    Point::Value => 2,
                    Point::Old => 3,
                    Point::Dropping(layout::STAT_FILTERED) => 4,
                    Point::Dropped(layout::STAT_FILTERED) => 5,
                    _ => return None,
                };
                Some((m, DROP_STAMP_SLOTS, part))
            }
        }
    }

    /// The first stamp, and every part's delta zeroed.
    fn start(&mut self, a: &mut Asm, slots: u32) {
        let parts = slots - 1;
        let (prev, key, deltas) = (a.slot(8).off(), a.slot(4).off(), a.slot(8 * parts as u16));
        self.slots = Some((prev, key, deltas.off()));
        a.call(Helper::KtimeGetNs)
            .store(DW, FP, prev, R0)
            .mov_imm(R1, 0);
        for i in 0..parts as i16 {
            a.store(DW, FP, deltas.word(i), R1);
        }
    }

    /// Adds the time since the previous stamp to part `part`'s delta (calls a helper: r0-r5 clobbered).
    fn stamp(&self, a: &mut Asm, part: i16) {
        let Some((prev, _, deltas)) = self.slots else {
            return;
        };
        let delta = deltas + 8 * part;
        a.call(Helper::KtimeGetNs)
            .load(DW, R1, FP, prev)
            .store(DW, FP, prev, R0)
            .alu(Alu::Sub, R0, R1)
            .load(DW, R1, FP, delta)
            .alu(Alu::Add, R1, R0)
            .store(DW, FP, delta, R1);
    }

    /// The time now into `map`'s [`HANDED_OVER`] slot, where the emitter times the output from. The
    /// entry is looked up first (its pointer kept in the previous stamp's slot, no longer needed), so
    /// the part does not include the lookup.
    fn handed_over(&self, a: &mut Asm, map: i32) {
        let Some((prev, key, _)) = self.slots else {
            return;
        };
        let skip = a.label();
        seq::lookup(a, (map, HANDED_OVER, key), skip);
        a.store(DW, FP, prev, R0)
            .call(Helper::KtimeGetNs)
            .load(DW, R1, FP, prev)
            .store(DW, R1, 0, R0);
        a.bind(skip);
    }

    /// Adds one hit to slot 0 of this CPU's entry of `map` and each part's delta to the slot after it.
    fn flush(&self, a: &mut Asm, map: i32, slots: u32) {
        let Some((_, key, deltas)) = self.slots else {
            return;
        };
        for slot in 0..slots as i16 {
            let skip = a.label();
            seq::lookup(a, (map, slot as u32, key), skip);
            a.load(DW, R1, R0, 0);
            if slot == 0 {
                a.alu_imm(Alu::Add, R1, 1);
            } else {
                a.load(DW, R2, FP, deltas + 8 * (slot - 1))
                    .alu(Alu::Add, R1, R2);
            }
            a.store(DW, R0, 0, R1);
            a.bind(skip);
        }
    }
}

/// The time since the hit program handed over ([`HANDED_OVER`]), added to the output's part of `map`
/// (the emitter's code).
fn emitted(a: &mut Asm, map: i32) {
    let (key, now) = (a.slot(4).off(), a.slot(8).off());
    let skip = a.label();
    a.call(Helper::KtimeGetNs).store(DW, FP, now, R0);
    seq::lookup(a, (map, HANDED_OVER, key), skip);
    // r9, the emitter's flags, is free once the record is out.
    a.load(DW, R1, R0, 0)
        .load(DW, Kept::R9, FP, now)
        .alu(Alu::Sub, Kept::R9, R1);
    let output = STAMP_PARTS.len() as u32;
    seq::add_to(a, (map, output, key), Some(Kept::R9.into()));
    a.bind(skip);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::condition;
    use crate::model::filter::Filter;
    use crate::perf::bpf::interp::{FakeKernel, COMM_OFFSET, PROCESS_START};
    use crate::perf::bpf::kernel::MapType;
    use crate::perf::bpf::layout::STAT_FILTERED;

    const MAPS: HitMaps = HitMaps::SYSTEM_FOR_TESTS;
    const RING: i32 = 30;
    const STAMPS: i32 = 40;

    /// Runs `variant` once on a kept hit and once on a dropped one (a condition no value meets): the
    /// records its ring took, the hits it counted as filtered, and the stamps map's slot 0.
    fn run(variant: Variant, slots: u32) -> (usize, u64, u64) {
        let f = Filter::default();
        let never = condition::parse("value == 12345").expect("parses");
        let mut m = FakeKernel::for_hit(&MAPS, 0x60_1000, RING, 1 << 14);
        m.declare(STAMPS, MapType::PercpuArray, (4, 8), slots as usize);
        for cond in [None, Some(&never)] {
            let spec = HitSpec {
                len: 8,
                read_value: true,
                old: true,
                regs: false,
                cgroup_ids: false,
                condition: cond,
                filter: &f,
                comm_offset: Some(COMM_OFFSET),
                process_start: Some(PROCESS_START),
                repeats: None,
            };
            let prog = variant.hit(&spec, &MAPS).expect("assembles");
            assert_eq!(m.run(&prog), 0);
        }
        let timed = m.word(STAMPS, 0).unwrap_or(0);
        (m.ring(RING).len(), m.stat(STAT_FILTERED), timed)
    }

    /// Each variant the benchmark builds runs offline: one ending early writes no record and counts its
    /// kept hit as filtered; a stamped one times the hits it is for, once each.
    #[test]
    fn every_variant_runs_and_times_what_it_says() {
        let whole = Variant::default();
        assert_eq!(run(whole, 1), (1, 1, 0));
        let entry = Variant {
            until: Some(Stage::Entry),
            ..Variant::default()
        };
        assert_eq!(run(entry, 1), (0, 0, 0), "return 0 and nothing else");
        for stage in [
            Stage::Decided,
            Stage::Header,
            Stage::KernelStack,
            Stage::UserStack,
        ] {
            let early = Variant {
                until: Some(stage),
                ..Variant::default()
            };
            assert_eq!(run(early, 1), (0, 2, 0), "{stage:?}");
        }
        let kept = Variant {
            stamps: Some(Stamps::Kept(STAMPS)),
            ..Variant::default()
        };
        assert_eq!(run(kept, STAMP_MAP_SLOTS), (1, 1, 1));
        let dropped = Variant {
            stamps: Some(Stamps::Dropped(STAMPS)),
            ..Variant::default()
        };
        assert_eq!(run(dropped, DROP_STAMP_SLOTS), (1, 1, 1));
        let walk = Variant {
            kernel_user_walk: true,
            no_olds: true,
            no_totals: true,
            ..Variant::default()
        };
        assert_eq!(run(walk, 1), (1, 1, 0));
    }
}
