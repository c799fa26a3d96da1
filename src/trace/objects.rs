//! `--on`: objects armed as the kernel allocates them. Each breakpoint slot (one watch index, one debug
//! register on every CPU) holds at most one object; a free slot waits on kernel text, which nothing writes.
//! A new object takes a free slot, or with `--rotate` the oldest armed object's; otherwise it is skipped
//! and counted. A freed object's slot goes back to waiting.
//!
//! An allocator reports each object once ([`Reports::Once`]): an allocation at the address of an object
//! still armed means that object was freed first, its free not read yet (the rings are drained one CPU
//! after another, or its record was lost). The allocation waits for that free through one more drain of
//! every ring, where the free is if it was not lost (it was written before the allocation was made), and
//! is placed as if both had been drained together; if the free is not there, the old object ends at the
//! new one's allocation first. A tracepoint may report an object again ([`Reports::Again`]): a report at
//! an armed object's address waits the same way, and is a new object if that object's free comes, older
//! than it (carried out first, as for an allocator); if none comes, it is that object reported again.
//!
//! A stop partway through a batch (the output closed, `--count` reached by the hits a free prints) ends
//! the run, whose summary is printed whatever the stop: the rest of what was drained is counted in the
//! books (a new object as skipped, a free as freed), not carried out, so every object handed over is
//! counted.
//!
//! Which slot an object gets, and what is counted, is decided here ([`Slots`], pure and tested offline),
//! and so is the order a drained batch of allocations and frees is carried out in ([`batch`]), and what
//! each step does ([`Objects`]); moving the breakpoints is the session's, through [`Placing`].

use crate::config::objects::{Allocators, ObjectTarget, Reports};
use crate::model::watch::Watch;
use crate::perf::bpf::objects::{self as bpf, ObjectRecord, ObjectSource, Read};
use crate::report::{ObjectTally, StopReason, StreamEvent};
use crate::trace::context::Rings;

/// `--on`'s running state: where objects come from, what each slot holds, and where a free slot waits.
pub struct ObjectWatch {
    pub source: ObjectSource,
    /// Whose objects are taken (`-p`, `--comm`); others' are not seen at all.
    pub allocators: Allocators,
    /// Whether the source reports an object once (an allocator) or may again (a tracepoint).
    pub reports: Reports,
    pub target: ObjectTarget,
    /// Each slot's waiting watch.
    pub parked: Vec<Watch>,
    pub slots: Slots,
    /// Records drained, reused.
    pub records: Vec<Read>,
}

/// What arming objects asks of the session: moving a slot's breakpoint, the slots' books (the hit side
/// keeps them too: a hit after its object's free is not a hit), and printing what the rings hold.
pub trait Placing: Rings {
    /// Moves `slot`'s breakpoint onto `watch`, enabled when the watch is on.
    fn arm(&mut self, slot: usize, watch: Watch) -> std::io::Result<()>;
    /// Moves `slot`'s breakpoint back to where a free slot waits (`parked`), disabled.
    fn park(&mut self, slot: usize, parked: Watch);
    /// Drains the rings and prints, in order, every hit up to `time` (a free's): its object's last ones.
    /// Later hits stay held for their turn: a free the tracer has not read yet may come before them.
    fn flush_until(&mut self, time: u64) -> Option<StopReason>;
    fn slots(&mut self) -> &mut Slots;
}

/// `--on`'s decisions, apart from where the records come from: whose objects are taken, what each
/// object's watch is, and where each slot waits.
pub struct Objects {
    pub allocators: Allocators,
    pub reports: Reports,
    pub target: ObjectTarget,
    /// Each slot's waiting watch.
    pub parked: Vec<Watch>,
    /// Records drained, reused.
    records: Vec<Read>,
}

impl Objects {
    /// Splits `watch` into its source, its slots (for the hit side) and the rest.
    pub fn new(watch: ObjectWatch) -> (ObjectSource, Slots, Objects) {
        let ObjectWatch {
            source,
            allocators,
            reports,
            target,
            parked,
            mut slots,
            records,
        } = watch;
        // A program's objects are in its own memory: the same address in a child it forked is another
        // object (the child's copy), written by the child.
        slots.per_process = source.in_process();
        let objects = Objects {
            allocators,
            reports,
            target,
            parked,
            records,
        };
        (source, slots, objects)
    }

    /// Carries out what `drain` reads (each call a pass over every CPU's ring): arms each new object,
    /// disarms each freed one, in the order [`batch`] puts them. A report held for its predecessor's
    /// free is carried out with the next pass (at most [`PASSES`]); none is held after this. A stop
    /// (the output closed, `--count` reached) ends the run, whose summary is still printed: what the
    /// passes drained after it, held reports too, is counted in the books, not carried out.
    pub fn apply(
        &mut self,
        mut drain: impl FnMut(&mut Vec<Read>),
        ctx: &mut impl Placing,
    ) -> Option<StopReason> {
        let mut records = std::mem::take(&mut self.records);
        let mut waits = Waits::default();
        let mut stop = None;
        for pass in 1..=PASSES {
            records.append(&mut waits.held);
            // Stopped, nothing more is read: the allocations held before the stop are counted.
            if stop.is_none() {
                drain(&mut records);
            }
            waits.last = pass == PASSES;
            stop = self.apply_batch(&mut records, &mut waits, stop, ctx);
            records.clear();
            if waits.held.is_empty() {
                break;
            }
        }
        self.records = records;
        stop
    }

    /// Carries out one batch, or after `stop` (from this batch on) counts it only; the stop, if any.
    fn apply_batch(
        &mut self,
        records: &mut [Read],
        waits: &mut Waits,
        mut stop: Option<StopReason>,
        ctx: &mut impl Placing,
    ) -> Option<StopReason> {
        let batch = batch(records, &self.allocators);
        ctx.slots().tally.lost += batch.lost;
        // An allocation that finds every slot busy waits for the batch's frees.
        let mut waiting = Vec::new();
        for a in batch.allocated {
            let rec = a.rec;
            // A slot holds an object at its address whose free is not in the batch before it.
            let armed_there = !a.after_free && ctx.slots().slot_of(rec.ptr, rec.time).is_some();
            if armed_there {
                // That object's free may be in a ring not drained yet (freed on a CPU read before this
                // was reported): held for it. (Stopped, no free is waited for: nothing more is read.)
                if stop.is_none() && waits.hold(&a) {
                    continue;
                }
                // Its free was not in a full pass after it (lost, or forgotten by the programs' map).
                match self.reports {
                    // The allocator reused the address: that object ends here, at the latest it can
                    // have, and this is a new one.
                    Reports::Once => stop = self.freed(rec.ptr, rec.time, stop, ctx),
                    // A tracepoint reporting an object it reported before (a socket changing state
                    // again): it is armed already, and the free paired with the report is its own.
                    Reports::Again => {
                        if let Some(time) = a.freed {
                            stop = self.freed(rec.ptr, time, stop, ctx);
                        }
                        continue;
                    }
                }
            }
            if a.freed.is_some() {
                ctx.slots().gone();
            } else if ctx.slots().has_free() {
                stop = self.allocated(rec, stop, ctx);
            } else {
                waiting.push(rec);
            }
        }
        for (ptr, time) in batch.freed {
            stop = self.freed(ptr, time, stop, ctx);
        }
        for rec in waiting {
            stop = self.allocated(rec, stop, ctx);
        }
        stop
    }

    /// A new object: armed in a slot, or after `stop` counted as skipped (the run ended before it could
    /// be armed). The stop, if any.
    fn allocated(
        &mut self,
        rec: &ObjectRecord,
        stop: Option<StopReason>,
        ctx: &mut impl Placing,
    ) -> Option<StopReason> {
        if stop.is_some() {
            ctx.slots().stopped();
            return stop;
        }
        let (index, placement) = ctx.slots().place();
        let (slot, evicted) = match placement {
            Placement::Skip => return None,
            Placement::Free(slot) => (slot, None),
            Placement::Evict(slot, old) => (slot, Some(old.index)),
        };
        let watch = object_watch(&self.target, index, rec.ptr);
        // Hits on the slot from before its breakpoint moves are not this object's.
        let moving = ctx.now();
        ctx.slots().next_object(slot, moving);
        if ctx.arm(slot, watch).is_err() {
            ctx.slots().not_armed();
            return None;
        }
        let now = ctx.now();
        let gap_ns = now.saturating_sub(rec.time);
        ctx.slots().armed(slot, index, rec.ptr, rec.time, now);
        ctx.slots().owned_by(slot, rec.pid);
        let event = StreamEvent::ObjectArmed(crate::report::ArmedObject {
            index,
            addr: rec.ptr,
            slot,
            gap_ns,
            pid: rec.pid,
            comm: rec.comm.clone(),
            evicted,
        });
        ctx.emit(&event, now)
    }

    /// The object at `ptr` was freed at `time`: its slot goes back to waiting. The line carries the
    /// free's own time, so hits between the free and this (the memory reused before the tracer heard of
    /// it) show as later than it. After `stop` it is counted freed, nothing printed or moved. The stop,
    /// if any.
    fn freed(
        &mut self,
        ptr: u64,
        time: u64,
        stop: Option<StopReason>,
        ctx: &mut impl Placing,
    ) -> Option<StopReason> {
        let Some(slot) = ctx.slots().slot_of(ptr, time) else {
            return stop;
        };
        if stop.is_some() {
            ctx.slots().freed(slot);
            return stop;
        }
        let parked = self.parked.get(slot)?.clone();
        // Its last hits are printed before the line that says it is gone.
        ctx.park(slot, parked);
        ctx.slots().retire(slot, time);
        ctx.slots().closing(Some((slot, time)));
        let flushed = ctx.flush_until(time);
        ctx.slots().closing(None);
        // Freed, whether or not its line is printed: the summary counts it.
        let held = ctx.slots().freed(slot);
        if flushed.is_some() {
            return flushed;
        }
        let held = held?;
        let event = StreamEvent::ObjectFreed {
            index: held.index,
            addr: held.addr,
            hits: held.hits,
        };
        ctx.emit(&event, time)
    }
}

/// Drain passes one [`Objects::apply`] makes at most: while reports wait for their predecessors'
/// frees, one more (each waits one pass; one held on the last pass waits none).
pub const PASSES: usize = 3;

/// Reports at an armed object's address, no free of it before them, held for that object's free.
#[derive(Default)]
struct Waits {
    /// Held records (a report and its free when the batch had it), fed again with the next pass.
    held: Vec<Read>,
    /// Every report held so far, `(ptr, time)`: none waits twice.
    waited: Vec<(u64, u64)>,
    /// This is the last pass: nothing is held.
    last: bool,
}

impl Waits {
    /// Holds `a` for the next pass, unless it waited once already or this is the last pass.
    fn hold(&mut self, a: &Allocation) -> bool {
        let rec = a.rec;
        if self.last || self.waited.contains(&(rec.ptr, rec.time)) {
            return false;
        }
        self.waited.push((rec.ptr, rec.time));
        self.held.push(Read::Object(rec.clone()));
        if let Some(time) = a.freed {
            self.held.push(Read::Object(ObjectRecord {
                kind: bpf::FREED,
                time,
                ..rec.clone()
            }));
        }
        true
    }
}

/// A drained batch of object records, in the order the session carries it out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Batch<'r> {
    /// The allocations taken, in time order. They go first: arming is what the gap is made of, and the
    /// frees (printing their objects' last hits) can wait.
    pub allocated: Vec<Allocation<'r>>,
    /// The other frees, `(ptr, time)` in time order: after the allocations.
    pub freed: Vec<(u64, u64)>,
    /// Records the kernel dropped.
    pub lost: u64,
}

/// An allocation record of a [`Batch`], with what the batch says of its address.
#[derive(Debug, PartialEq, Eq)]
pub struct Allocation<'r> {
    pub rec: &'r ObjectRecord,
    /// Its object's free is in the batch too, at this time: it is not armed at all.
    pub freed: Option<u64>,
    /// An object at its address was freed in the batch before it (and that free is not an earlier
    /// allocation's): it is a new object even if a slot holds that address.
    pub after_free: bool,
}

/// Sorts drained `records` by time (losses first), then splits them into a [`Batch`], taking only the
/// allocations of `allocators`.
pub fn batch<'r>(records: &'r mut [Read], allocators: &Allocators) -> Batch<'r> {
    records.sort_by_key(|r| match r {
        Read::Object(o) => o.time,
        _ => 0,
    });
    let records = &*records;
    let mut frees: Vec<(u64, u64)> = records
        .iter()
        .filter_map(|r| match r {
            Read::Object(o) if o.kind == bpf::FREED => Some((o.ptr, o.time)),
            _ => None,
        })
        .collect();
    let mut out = Batch::default();
    let mut consumed = Vec::new();
    for r in records {
        let Read::Object(rec) = r else {
            continue;
        };
        if rec.kind != bpf::ALLOCATED || !allocators.take(rec.pid, &rec.comm) {
            continue;
        }
        let paired = frees
            .iter()
            .position(|&(p, t)| p == rec.ptr && t >= rec.time);
        // Also of one freed in the batch: a held allocation's predecessor may be freed before it.
        let after_free = frees
            .iter()
            .enumerate()
            .any(|(i, &(p, t))| Some(i) != paired && p == rec.ptr && t <= rec.time);
        let freed = paired.map(|at| frees.remove(at));
        consumed.extend(freed);
        out.allocated.push(Allocation {
            rec,
            freed: freed.map(|(_, t)| t),
            after_free,
        });
    }
    for r in records {
        match r {
            Read::Lost(n) => out.lost += n,
            Read::Object(rec)
                if rec.kind == bpf::FREED && !consumed.contains(&(rec.ptr, rec.time)) =>
            {
                out.freed.push((rec.ptr, rec.time));
            }
            _ => {}
        }
    }
    out
}

/// An object in a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub index: u64,
    pub addr: u64,
    /// When the kernel allocated it (its record's time).
    pub allocated: u64,
    pub hits: u64,
    /// The allocating process, where the object is in its memory (a user-space source's).
    pub pid: Option<u32>,
}

/// What to do with a new object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Arm it in this free slot.
    Free(usize),
    /// Arm it in this slot, whose object is evicted first.
    Evict(usize, Held),
    /// Every slot is busy: skip it.
    Skip,
}

/// The slots and the books.
#[derive(Debug)]
pub struct Slots {
    held: Vec<Option<Held>>,
    rotate: bool,
    next_index: u64,
    /// A slot whose object was freed at this time, while its last hits are drained: hits later than
    /// that are writes to memory that is no longer the object's.
    closing: Option<(usize, u64)>,
    /// Each slot's last free and when the slot took its next object (`u64::MAX`: not yet): a hit on the
    /// slot between the two, released after the free's line, is a write after that free.
    retired: Vec<Option<(u64, u64)>>,
    /// The objects are in their allocating process's memory (a user-space source): a store by another
    /// process (a forked child, whose copy of the memory is not the object) is not the object's.
    pub per_process: bool,
    pub tally: ObjectTally,
}

impl Slots {
    pub fn new(slots: usize, rotate: bool) -> Slots {
        Slots {
            held: vec![None; slots],
            rotate,
            next_index: 0,
            closing: None,
            retired: vec![None; slots],
            per_process: false,
            tally: ObjectTally::default(),
        }
    }

    /// A new object was allocated: its number, and where it goes.
    pub fn place(&mut self) -> (u64, Placement) {
        self.tally.seen += 1;
        let index = self.next_index;
        self.next_index += 1;
        if let Some(free) = self.held.iter().position(Option::is_none) {
            return (index, Placement::Free(free));
        }
        let oldest = self
            .held
            .iter()
            .enumerate()
            .filter_map(|(i, h)| Some((i, (*h)?)))
            // Numbers are handed out as objects are armed: the smallest held is the oldest armed.
            .min_by_key(|(_, h)| h.index);
        match oldest {
            Some((slot, held)) if self.rotate => (index, Placement::Evict(slot, held)),
            _ => {
                self.tally.skipped += 1;
                (index, Placement::Skip)
            }
        }
    }

    /// The object allocated at `allocated` is armed in `slot` at `now`.
    pub fn armed(&mut self, slot: usize, index: u64, addr: u64, allocated: u64, now: u64) {
        if let Some(Some(old)) = self.held.get(slot) {
            self.tally.evicted += 1;
            self.close(*old);
        }
        if let Some(s) = self.held.get_mut(slot) {
            *s = Some(Held {
                index,
                addr,
                allocated,
                hits: 0,
                pid: None,
            });
        }
        self.tally.armed += 1;
        self.tally.gaps_ns.push(now.saturating_sub(allocated));
    }

    /// The object was freed before it could be armed (its free came in the same batch).
    pub fn gone(&mut self) {
        self.tally.seen += 1;
        self.next_index += 1;
        self.tally.freed_unarmed += 1;
    }

    /// Arming it failed: counted as skipped.
    pub fn not_armed(&mut self) {
        self.tally.skipped += 1;
    }

    /// A new object drained after the run stopped: seen, and skipped (never armed).
    pub fn stopped(&mut self) {
        self.tally.seen += 1;
        self.next_index += 1;
        self.tally.skipped += 1;
    }

    /// Whether a slot is free.
    pub fn has_free(&self) -> bool {
        self.held.iter().any(Option::is_none)
    }

    /// The slot holding an object at `addr` allocated by `time` (a free at `time` is of such an
    /// object, not of a newer one at the same address armed before the free was read); the oldest.
    pub fn slot_of(&self, addr: u64, time: u64) -> Option<usize> {
        self.held
            .iter()
            .enumerate()
            .filter_map(|(i, h)| Some((i, (*h)?)))
            .filter(|(_, h)| h.addr == addr && h.allocated <= time)
            .min_by_key(|(_, h)| h.index)
            .map(|(i, _)| i)
    }

    /// The object in `slot` was freed: the slot is free again.
    pub fn freed(&mut self, slot: usize) -> Option<Held> {
        let held = self.held.get_mut(slot)?.take()?;
        self.tally.freed += 1;
        self.close(held);
        Some(held)
    }

    /// `slot`'s object was freed at `time`: its hits after that, whenever they are released, are writes
    /// after a free, until the slot takes another object.
    pub fn retire(&mut self, slot: usize, time: u64) {
        if let Some(r) = self.retired.get_mut(slot) {
            *r = Some((time, u64::MAX));
        }
    }

    /// `slot`'s breakpoint moves to a new object at `time`: hits from then on are that object's.
    pub fn next_object(&mut self, slot: usize, time: u64) {
        if let Some(Some((_, next))) = self.retired.get_mut(slot) {
            *next = (*next).min(time);
        }
    }

    /// `slot`'s object was freed at `time`; its breakpoint's hits are being drained (`None`: done).
    pub fn closing(&mut self, closing: Option<(usize, u64)>) {
        self.closing = closing;
    }

    /// Whether a hit at `time` on `slot` came after its object was freed (counted, not reported).
    pub fn after_free(&mut self, slot: usize, time: u64) -> bool {
        let retired = self
            .retired
            .get(slot)
            .copied()
            .flatten()
            .is_some_and(|(freed, next)| time > freed && time < next);
        let late = retired || self.closing.is_some_and(|(s, t)| s == slot && time > t);
        self.tally.after_free += u64::from(late);
        late
    }

    /// `slot`'s object was allocated by process `pid` (its memory, where the objects are per process).
    pub fn owned_by(&mut self, slot: usize, pid: u32) {
        if let Some(Some(h)) = self.held.get_mut(slot) {
            h.pid = self.per_process.then_some(pid);
        }
    }

    /// Whether a hit by process `pid` on `slot` is a store into another process's memory at the
    /// object's address (a child forked from the allocator): not the object's, counted as filtered.
    pub fn foreign(&self, slot: usize, pid: u32) -> bool {
        matches!(self.held.get(slot), Some(Some(Held { pid: Some(p), .. })) if *p != pid)
    }

    /// A hit on `slot`'s breakpoint.
    pub fn hit(&mut self, slot: usize) {
        if let Some(Some(h)) = self.held.get_mut(slot) {
            h.hits += 1;
        }
    }

    /// The books at the end: objects still armed are listed too.
    pub fn finish(&mut self) -> ObjectTally {
        let held: Vec<Held> = self.held.iter().flatten().copied().collect();
        for h in held {
            self.close(h);
        }
        self.tally.objects.sort_unstable();
        std::mem::take(&mut self.tally)
    }

    fn close(&mut self, h: Held) {
        self.tally.objects.push((h.index, h.addr, h.hits));
    }
}

/// The watch of object `index` at `addr` in a slot.
pub fn object_watch(target: &ObjectTarget, index: u64, addr: u64) -> Watch {
    Watch {
        label: target.label(index, addr),
        addr: addr.wrapping_add(target.offset),
        len: target.len,
        access: target.access,
        module: None,
        per_cpu: None,
    }
}

#[cfg(test)]
mod tests;
