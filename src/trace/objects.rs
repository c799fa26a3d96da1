//! `--on`: objects armed as the kernel allocates them. Each breakpoint slot (one watch index, one debug
//! register on every CPU) holds at most one object; a free slot waits on kernel text, which nothing writes.
//! A new object takes a free slot, or with `--rotate` the oldest armed object's; otherwise it is skipped
//! and counted. A freed object's slot goes back to waiting.
//!
//! Which slot an object gets, and what is counted, is decided here ([`Slots`], pure and tested offline),
//! and so is the order a drained batch of allocations and frees is carried out in ([`batch`]), and what
//! each step does ([`Objects`]); moving the breakpoints is the session's, through [`Placing`].

use crate::config::objects::{Allocators, ObjectTarget};
use crate::model::watch::Watch;
use crate::perf::bpf::objects::{self as bpf, ObjectRecord, ObjectSource, Read};
use crate::report::{ObjectTally, StopReason, StreamEvent};
use crate::trace::context::Rings;

/// `--on`'s running state: where objects come from, what each slot holds, and where a free slot waits.
pub struct ObjectWatch {
    pub source: ObjectSource,
    /// Whose objects are taken (`-p`, `--comm`); others' are not seen at all.
    pub allocators: Allocators,
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
            target,
            parked,
            records,
        };
        (source, slots, objects)
    }

    /// Carries out what `drain` reads: arms each new object, disarms each freed one, in the order
    /// [`batch`] puts them.
    pub fn apply(
        &mut self,
        drain: impl FnOnce(&mut Vec<Read>),
        ctx: &mut impl Placing,
    ) -> Option<StopReason> {
        let mut records = std::mem::take(&mut self.records);
        drain(&mut records);
        let stop = self.apply_batch(&mut records, ctx);
        records.clear();
        self.records = records;
        stop
    }

    fn apply_batch(&mut self, records: &mut [Read], ctx: &mut impl Placing) -> Option<StopReason> {
        let batch = batch(records, &self.allocators);
        ctx.slots().tally.lost += batch.lost;
        // An allocation that finds every slot busy waits for the batch's frees.
        let mut stop = None;
        let mut waiting = Vec::new();
        for a in batch.allocated {
            let rec = a.rec;
            if a.freed {
                ctx.slots().gone();
            } else if !a.after_free && ctx.slots().slot_of(rec.ptr, rec.time).is_some() {
                // A tracepoint reporting an object it reported before (a socket changing state
                // again): it is armed already. (A new object at a freed one's address is not: that free
                // is in the batch, before it.)
            } else if ctx.slots().has_free() {
                stop = stop.or_else(|| self.allocated(rec, ctx));
            } else {
                waiting.push(rec);
            }
        }
        for (ptr, time) in batch.freed {
            stop = stop.or_else(|| self.freed(ptr, time, ctx));
        }
        for rec in waiting {
            stop = stop.or_else(|| self.allocated(rec, ctx));
        }
        stop
    }

    fn allocated(&mut self, rec: &ObjectRecord, ctx: &mut impl Placing) -> Option<StopReason> {
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
    /// it) show as later than it.
    fn freed(&mut self, ptr: u64, time: u64, ctx: &mut impl Placing) -> Option<StopReason> {
        let slot = ctx.slots().slot_of(ptr, time)?;
        let parked = self.parked.get(slot)?.clone();
        // Its last hits are printed before the line that says it is gone.
        ctx.park(slot, parked);
        ctx.slots().retire(slot, time);
        ctx.slots().closing(Some((slot, time)));
        let flushed = ctx.flush_until(time);
        ctx.slots().closing(None);
        if let Some(stop) = flushed {
            return Some(stop);
        }
        let held = ctx.slots().freed(slot)?;
        let event = StreamEvent::ObjectFreed {
            index: held.index,
            addr: held.addr,
            hits: held.hits,
        };
        ctx.emit(&event, time)
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
    /// Its object's free is in the batch too: it is not armed at all.
    pub freed: bool,
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
        let after_free =
            paired.is_none() && frees.iter().any(|&(p, t)| p == rec.ptr && t <= rec.time);
        if let Some(at) = paired {
            consumed.push(frees.remove(at));
        }
        out.allocated.push(Allocation {
            rec,
            freed: paired.is_some(),
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
mod tests {
    use super::*;
    use crate::trace::context::fake::{marks_through_log, Log};

    /// A hit on a freed object's slot after its free is a write after the free whenever it is released
    /// (after the free's line too), until the slot's breakpoint moves to the next object.
    #[test]
    fn a_hit_after_a_free_released_late_is_not_the_objects() {
        let mut s = Slots::new(1, false);
        s.place();
        s.armed(0, 0, 0xa000, 10, 20);
        assert!(!s.after_free(0, 30));
        s.retire(0, 100);
        s.freed(0);
        assert!(!s.after_free(0, 90), "before the free: its own");
        assert!(s.after_free(0, 150), "parked since: after the free");
        s.place();
        s.next_object(0, 200);
        s.armed(0, 1, 0xb000, 180, 210);
        assert!(s.after_free(0, 199));
        assert!(!s.after_free(0, 205), "the next object's");
        assert_eq!(s.tally.after_free, 2);
    }

    /// A user-space source's object is its process's: another process's hit at its address (a forked
    /// child's copy) is foreign; a kernel object's hits are anyone's.
    #[test]
    fn a_user_space_object_is_its_allocating_processs_only() {
        let mut s = Slots::new(2, false);
        s.per_process = true;
        s.place();
        s.armed(0, 0, 0xa000, 0, 1);
        s.owned_by(0, 42);
        assert!(!s.foreign(0, 42));
        assert!(s.foreign(0, 43));
        assert!(!s.foreign(1, 43), "an empty slot is nobody's");
        let mut k = Slots::new(1, false);
        k.place();
        k.armed(0, 0, 0xa000, 0, 1);
        k.owned_by(0, 42);
        assert!(!k.foreign(0, 43));
    }

    #[test]
    fn free_slots_first_then_skip_or_evict_the_oldest() {
        let mut s = Slots::new(2, false);
        assert_eq!(s.place(), (0, Placement::Free(0)));
        s.armed(0, 0, 0xa000, 0, 50_000);
        assert_eq!(s.place(), (1, Placement::Free(1)));
        s.armed(1, 1, 0xb000, 10, 70_010);
        assert_eq!(s.place(), (2, Placement::Skip));
        assert_eq!(s.slot_of(0xb000, 100), Some(1));
        assert_eq!(
            s.slot_of(0xb000, 5),
            None,
            "a free before its allocation is another object's"
        );
        s.hit(1);
        s.hit(1);
        assert_eq!(s.freed(1).map(|h| h.hits), Some(2));
        assert_eq!(s.freed(1), None, "freed once");
        assert_eq!(s.place(), (3, Placement::Free(1)));
        let t = s.finish();
        assert_eq!((t.seen, t.armed, t.skipped, t.freed), (4, 2, 1, 1));
        assert_eq!(t.objects, vec![(0, 0xa000, 0), (1, 0xb000, 2)]);
        assert_eq!(t.gap(0.5), Some(50_000));

        let mut r = Slots::new(1, true);
        r.place();
        r.armed(0, 0, 0xa000, 10, 1);
        let (i, p) = r.place();
        let Placement::Evict(0, old) = p else {
            panic!("{p:?}")
        };
        assert_eq!((i, old.index), (1, 0));
        r.armed(0, 1, 0xc000, 30, 1);
        let t = r.finish();
        assert_eq!((t.evicted, t.skipped, t.armed), (1, 0, 2));
        assert_eq!(t.objects, vec![(0, 0xa000, 0), (1, 0xc000, 0)]);
    }

    fn target() -> ObjectTarget {
        ObjectTarget {
            text: "(struct pipe_inode_info)$obj.head".into(),
            cast: Some(ksymwatch_symbols::CastType {
                kind: None,
                name: "pipe_inode_info".into(),
            }),
            offset: 0x50,
            len: 4,
            access: crate::model::watch::Access::Write,
            object_size: Some(192),
        }
    }

    #[test]
    fn an_object_watch_is_at_its_field() {
        let t = target();
        let w = object_watch(&t, 7, 0xffff888104f2a000);
        assert_eq!((w.addr, w.len), (0xffff888104f2a050, 4));
        assert_eq!(w.label, "(struct pipe_inode_info)0xffff888104f2a000.head#7");
    }

    fn record(kind: u64, ptr: u64, time: u64, pid: u32) -> Read {
        Read::Object(ObjectRecord {
            kind,
            time,
            ptr,
            call_site: 0,
            pid,
            tid: pid,
            size: 64,
            comm: format!("task{pid}"),
        })
    }

    #[test]
    fn a_batch_pairs_frees_with_their_allocations_in_time_order() {
        let mut records = vec![
            record(bpf::FREED, 0xa0, 30, 1),
            record(bpf::ALLOCATED, 0xb0, 20, 1),
            Read::Lost(3),
            record(bpf::ALLOCATED, 0xa0, 10, 1),
            // Freed here, allocated before the batch.
            record(bpf::FREED, 0xc0, 5, 1),
            // Another process's: not taken, and its free is an ordinary one.
            record(bpf::ALLOCATED, 0xd0, 40, 2),
            record(bpf::FREED, 0xd0, 50, 2),
            // Freed before this allocation: not its free.
            record(bpf::FREED, 0xe0, 60, 1),
            record(bpf::ALLOCATED, 0xe0, 70, 1),
            Read::Other,
            Read::Lost(1),
        ];
        let only_1 = Allocators {
            pids: vec![1],
            comms: Vec::new(),
        };
        let b = batch(&mut records, &only_1);
        let allocated: Vec<(u64, u64, bool, bool)> = b
            .allocated
            .iter()
            .map(|a| (a.rec.ptr, a.rec.time, a.freed, a.after_free))
            .collect();
        assert_eq!(
            allocated,
            [
                (0xa0, 10, true, false),
                (0xb0, 20, false, false),
                (0xe0, 70, false, true)
            ]
        );
        assert_eq!(b.freed, [(0xc0, 5), (0xd0, 50), (0xe0, 60)]);
        assert_eq!(b.lost, 4);
    }
    /// A session of breakpoint slots for [`Objects`]: the slots' books, whether arming is refused, and a
    /// log. A flush says whether a hit a moment after the free being drained would still count.
    struct Session {
        log: Log,
        slots: Slots,
        refuse_arm: bool,
    }

    marks_through_log!(Session);

    impl Placing for Session {
        fn arm(&mut self, slot: usize, watch: Watch) -> std::io::Result<()> {
            self.log.call(format!("arm {slot} {:#x}", watch.addr));
            if self.refuse_arm {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            Ok(())
        }

        fn park(&mut self, slot: usize, parked: Watch) {
            self.log.call(format!("park {slot} {}", parked.label));
        }

        /// As a flush: the fake's rings hold nothing past the free being drained.
        fn flush_until(&mut self, _time: u64) -> Option<StopReason> {
            self.flush()
        }

        fn slots(&mut self) -> &mut Slots {
            &mut self.slots
        }
    }

    impl Rings for Session {
        fn watches(&self) -> &[Watch] {
            unreachable!("objects name their own watches");
        }

        fn drain(&mut self) {
            unreachable!("a free flushes");
        }

        fn release_ready(&mut self) -> Option<StopReason> {
            unreachable!("a free flushes");
        }

        fn explain(&self, _: &crate::perf::event::OpenError) -> (String, &'static str) {
            unreachable!("objects open nothing");
        }

        fn flush(&mut self) -> Option<StopReason> {
            let late = self
                .slots
                .closing
                .is_some_and(|(slot, time)| self.slots.after_free(slot, time + 1));
            self.log.call(format!("flush, late hits dropped: {late}"));
            None
        }
    }

    fn session(slots: usize, rotate: bool) -> (Objects, Session) {
        let objects = Objects {
            allocators: Allocators {
                pids: Vec::new(),
                comms: Vec::new(),
            },
            target: target(),
            parked: vec![
                crate::report::testutil::watch(
                    "parked",
                    0xffffffff81000000,
                    crate::model::watch::Access::Write
                );
                slots
            ],
            records: Vec::new(),
        };
        let ctx = Session {
            log: Log::default(),
            slots: Slots::new(slots, rotate),
            refuse_arm: false,
        };
        (objects, ctx)
    }

    /// Carries out `records` as one drained batch.
    fn apply(objects: &mut Objects, ctx: &mut Session, records: Vec<Read>) -> Option<StopReason> {
        objects.apply(|out| out.extend(records), ctx)
    }

    /// Carries out a batch of one record of process 1.
    fn apply_one(
        objects: &mut Objects,
        ctx: &mut Session,
        kind: u64,
        ptr: u64,
        time: u64,
    ) -> Option<StopReason> {
        apply(objects, ctx, vec![record(kind, ptr, time, 1)])
    }

    /// An object is armed in the free slot at its field, a second one (`--rotate`) evicts it, and its
    /// free prints its last hits, drops later ones and parks the slot before the mark, at the free's time.
    #[test]
    fn an_object_is_armed_rotated_and_freed() {
        let (mut objects, mut ctx) = session(1, true);
        ctx.log.now = 1_000;
        assert_eq!(
            apply_one(&mut objects, &mut ctx, bpf::ALLOCATED, 0xa000, 10),
            None
        );
        assert_eq!(ctx.log.calls(), ["arm 0 0xa050", "emit ObjectArmed"]);
        let armed = StreamEvent::ObjectArmed(crate::report::ArmedObject {
            index: 0,
            addr: 0xa000,
            slot: 0,
            gap_ns: 990,
            pid: 1,
            comm: "task1".into(),
            evicted: None,
        });
        assert_eq!(ctx.log.events, [(armed, 1_000)]);
        ctx.log.calls.clear();
        assert_eq!(
            apply_one(&mut objects, &mut ctx, bpf::ALLOCATED, 0xb000, 20),
            None
        );
        assert_eq!(ctx.log.calls(), ["arm 0 0xb050", "emit ObjectArmed"]);
        assert!(
            matches!(
                &ctx.log.events[1].0,
                StreamEvent::ObjectArmed(crate::report::ArmedObject {
                    index: 1,
                    evicted: Some(0),
                    ..
                })
            ),
            "{:?}",
            ctx.log.events[1]
        );
        ctx.log.calls.clear();
        assert_eq!(
            apply_one(&mut objects, &mut ctx, bpf::FREED, 0xb000, 30),
            None
        );
        assert_eq!(
            ctx.log.calls(),
            [
                "park 0 parked",
                "flush, late hits dropped: true",
                "emit ObjectFreed"
            ]
        );
        let freed = StreamEvent::ObjectFreed {
            index: 1,
            addr: 0xb000,
            hits: 0,
        };
        assert_eq!(ctx.log.events[2], (freed, 30));
        let t = ctx.slots.finish();
        assert_eq!(
            (t.seen, t.armed, t.evicted, t.freed, t.after_free),
            (2, 2, 1, 1, 1)
        );
    }

    /// Without `--rotate` an allocation that finds every slot busy waits for the batch's frees; one freed
    /// in its own batch is never armed; a refused arming is counted as skipped.
    #[test]
    fn a_busy_slot_waits_for_the_batchs_frees_and_a_refusal_is_skipped() {
        let (mut objects, mut ctx) = session(1, false);
        apply_one(&mut objects, &mut ctx, bpf::ALLOCATED, 0xa000, 10);
        ctx.log.calls.clear();
        let batch = vec![
            record(bpf::ALLOCATED, 0xc000, 40, 1),
            record(bpf::FREED, 0xa000, 50, 1),
            record(bpf::ALLOCATED, 0xd000, 60, 1),
            record(bpf::FREED, 0xd000, 70, 1),
        ];
        assert_eq!(apply(&mut objects, &mut ctx, batch), None);
        assert_eq!(
            ctx.log.calls(),
            [
                "park 0 parked",
                "flush, late hits dropped: true",
                "emit ObjectFreed",
                "arm 0 0xc050",
                "emit ObjectArmed"
            ]
        );
        ctx.refuse_arm = true;
        ctx.log.calls.clear();
        apply_one(&mut objects, &mut ctx, bpf::FREED, 0xc000, 80);
        apply(
            &mut objects,
            &mut ctx,
            vec![record(bpf::ALLOCATED, 0xe000, 90, 1), Read::Lost(2)],
        );
        assert_eq!(ctx.log.calls().last(), Some(&"arm 0 0xe050"), "no mark");
        let t = ctx.slots.finish();
        assert_eq!(
            (t.seen, t.armed, t.freed_unarmed, t.skipped, t.lost),
            (4, 2, 1, 1, 2)
        );
    }
}
