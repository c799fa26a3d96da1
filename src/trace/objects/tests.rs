//! Offline tests of `--on`'s slots, batches and steps, through a fake session.

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
        .map(|a| (a.rec.ptr, a.rec.time, a.freed.is_some(), a.after_free))
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
/// log. A flush says whether a hit a moment after the free being drained would still count, and
/// returns `flush_stop` (a hit it printed reached `--count`).
struct Session {
    log: Log,
    slots: Slots,
    refuse_arm: bool,
    flush_stop: Option<StopReason>,
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
        self.flush_stop
    }
}

fn session(slots: usize, rotate: bool) -> (Objects, Session) {
    let objects = Objects {
        allocators: Allocators {
            pids: Vec::new(),
            comms: Vec::new(),
        },
        reports: Reports::Once,
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
        flush_stop: None,
    };
    (objects, ctx)
}

/// Carries out `records` as one drained batch (the passes after it find the rings empty).
fn apply(objects: &mut Objects, ctx: &mut Session, records: Vec<Read>) -> Option<StopReason> {
    apply_passes(objects, ctx, vec![records]).0
}

/// Carries out `passes`, each what one pass over the rings drains (the later ones find them empty),
/// and how many passes were made.
fn apply_passes(
    objects: &mut Objects,
    ctx: &mut Session,
    passes: Vec<Vec<Read>>,
) -> (Option<StopReason>, usize) {
    let mut passes = passes.into_iter();
    let mut made = 0;
    let stop = objects.apply(
        |out| {
            made += 1;
            out.extend(passes.next().unwrap_or_default());
        },
        ctx,
    );
    (stop, made)
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

/// The `ObjectFreed` and `ObjectArmed` events logged, with the free's time and the object's address.
fn ends_and_arms(ctx: &Session) -> Vec<String> {
    ctx.log
        .events
        .iter()
        .filter_map(|(e, time)| match e {
            StreamEvent::ObjectFreed { index, .. } => Some(format!("freed #{index} at {time}")),
            StreamEvent::ObjectArmed(a) => Some(format!("armed #{} {:#x}", a.index, a.addr)),
            _ => None,
        })
        .collect()
}

/// A session of `slots` slots whose object #0 at 0xa000, allocated at 10, is armed (the calls since
/// forgotten).
fn one_armed(slots: usize) -> (Objects, Session) {
    let (mut objects, mut ctx) = session(slots, false);
    apply_one(&mut objects, &mut ctx, bpf::ALLOCATED, 0xa000, 10);
    ctx.log.calls.clear();
    (objects, ctx)
}

/// Records of process 1 at 0xa000, `(kind, time)` each: what one pass drains.
fn at_a000(records: &[(u64, u64)]) -> Vec<Read> {
    records
        .iter()
        .map(|&(kind, time)| record(kind, 0xa000, time, 1))
        .collect()
}

const A: u64 = bpf::ALLOCATED;
const F: u64 = bpf::FREED;

/// An allocator's new object at an armed object's address, its predecessor's free not drained yet
/// (freed on a CPU whose ring was read first): it waits one more pass for that free, which ends the
/// old object at its own time, then takes the slot. The repro: it was dropped as armed already. A
/// tracepoint's report there waits the same way, and that free makes it a new object too (the repro:
/// it was dropped as the armed object, and the late free left it neither armed nor counted).
#[test]
fn an_allocation_at_an_armed_address_waits_for_the_predecessors_free() {
    for reports in [Reports::Once, Reports::Again] {
        let (mut objects, mut ctx) = one_armed(1);
        objects.reports = reports;
        let passes = vec![at_a000(&[(A, 30)]), at_a000(&[(F, 20)])];
        assert_eq!(apply_passes(&mut objects, &mut ctx, passes), (None, 2));
        assert_eq!(
            ctx.log.calls(),
            [
                "park 0 parked",
                "flush, late hits dropped: true",
                "emit ObjectFreed",
                "arm 0 0xa050",
                "emit ObjectArmed"
            ]
        );
        apply_one(&mut objects, &mut ctx, F, 0xa000, 40);
        assert_eq!(
            ends_and_arms(&ctx),
            [
                "armed #0 0xa000",
                "freed #0 at 20",
                "armed #1 0xa000",
                "freed #1 at 40"
            ]
        );
        let t = ctx.slots.finish();
        assert_eq!(
            (t.seen, t.armed, t.skipped, t.freed, t.freed_unarmed),
            (2, 2, 0, 2, 0)
        );
        assert_eq!(t.objects, [(0, 0xa000, 0), (1, 0xa000, 0)]);
    }

    // Its own free drained with it: held with it, and the new object is freed before it was armed.
    let (mut objects, mut ctx) = one_armed(1);
    let passes = vec![at_a000(&[(A, 30), (F, 40)]), at_a000(&[(F, 20)])];
    assert_eq!(apply_passes(&mut objects, &mut ctx, passes), (None, 2));
    assert_eq!(ends_and_arms(&ctx), ["armed #0 0xa000", "freed #0 at 20"]);
    let t = ctx.slots.finish();
    assert_eq!((t.seen, t.armed, t.freed, t.freed_unarmed), (2, 1, 1, 1));

    // A free slot beside it: the new object is armed there, as if both records had been drained
    // together, and the old one ends at its free's time all the same.
    let (mut objects, mut ctx) = one_armed(2);
    let passes = vec![at_a000(&[(A, 30)]), at_a000(&[(F, 20)])];
    apply_passes(&mut objects, &mut ctx, passes);
    assert_eq!(
        ctx.log.calls(),
        [
            "arm 1 0xa050",
            "emit ObjectArmed",
            "park 0 parked",
            "flush, late hits dropped: true",
            "emit ObjectFreed"
        ]
    );
    assert_eq!(
        ends_and_arms(&ctx),
        ["armed #0 0xa000", "armed #1 0xa000", "freed #0 at 20"]
    );
}

/// The predecessor's free lost (ring full): not in the pass after, so the old object ends at the new
/// one's allocation and the new one is armed; the free's record, should it come later, is older than
/// the new object and ends nothing.
#[test]
fn an_allocation_whose_predecessors_free_is_lost_ends_it_at_its_own_time() {
    let (mut objects, mut ctx) = one_armed(1);
    let mut lossy = at_a000(&[(A, 30)]);
    lossy.push(Read::Lost(1));
    assert_eq!(apply_passes(&mut objects, &mut ctx, vec![lossy]), (None, 2));
    ctx.log.calls.clear();
    apply_one(&mut objects, &mut ctx, F, 0xa000, 20);
    assert_eq!(ctx.log.calls(), Vec::<&str>::new(), "the new object stays");
    apply_one(&mut objects, &mut ctx, F, 0xa000, 40);
    let t = ctx.slots.finish();
    assert_eq!(
        (t.seen, t.armed, t.skipped, t.freed, t.lost),
        (2, 2, 0, 2, 1)
    );
    assert_eq!(
        ends_and_arms(&ctx),
        [
            "armed #0 0xa000",
            "freed #0 at 30",
            "armed #1 0xa000",
            "freed #1 at 40"
        ]
    );
}

/// A tracepoint reporting an armed object again: it waits one pass for a free that would make it a
/// new object, none comes, and it is that object: nothing is moved, nothing is counted twice.
#[test]
fn a_tracepoints_report_at_an_armed_address_is_the_armed_object() {
    let (mut objects, mut ctx) = one_armed(1);
    objects.reports = Reports::Again;
    let passes = vec![at_a000(&[(A, 30)])];
    assert_eq!(apply_passes(&mut objects, &mut ctx, passes), (None, 2));
    assert_eq!(ctx.log.calls(), Vec::<&str>::new());
    apply_one(&mut objects, &mut ctx, F, 0xa000, 40);
    let t = ctx.slots.finish();
    assert_eq!((t.seen, t.armed, t.freed), (1, 1, 1));

    // A free newer than the report, in its pass or the next, is the armed object's, not a
    // predecessor's, and not a new object's freed before it was armed.
    for passes in [
        vec![at_a000(&[(A, 30), (F, 40)])],
        vec![at_a000(&[(A, 30)]), at_a000(&[(F, 40)])],
    ] {
        let (mut objects, mut ctx) = one_armed(1);
        objects.reports = Reports::Again;
        assert_eq!(apply_passes(&mut objects, &mut ctx, passes), (None, 2));
        assert_eq!(ends_and_arms(&ctx), ["armed #0 0xa000", "freed #0 at 40"]);
        assert_eq!(counted(&mut ctx), (1, 1, 0, 1, 0));
    }
}

/// A tracepoint's report first drained on the last pass waits for nothing: it is the armed object
/// again, and a free read after the passes ends that object, no new one.
#[test]
fn a_tracepoints_report_on_the_last_pass_is_the_armed_object() {
    let (mut objects, mut ctx) = one_armed(1);
    objects.reports = Reports::Again;
    let passes = [30, 50, 70].map(|t| at_a000(&[(A, t)])).to_vec();
    assert_eq!(apply_passes(&mut objects, &mut ctx, passes), (None, PASSES));
    assert_eq!(ctx.log.calls(), Vec::<&str>::new());
    apply_one(&mut objects, &mut ctx, F, 0xa000, 60);
    assert_eq!(ends_and_arms(&ctx), ["armed #0 0xa000", "freed #0 at 60"]);
    assert_eq!(counted(&mut ctx), (1, 1, 0, 1, 0));
}

/// The run can end after any drain: no allocation is held past it. Passes that keep bringing new
/// objects at an armed address stop at [`PASSES`], the last one's ending its predecessor at once, and
/// every allocation is in the books.
#[test]
fn no_allocation_is_held_past_a_drain() {
    let (mut objects, mut ctx) = one_armed(1);
    let passes = [30, 50, 70]
        .map(|t| at_a000(&[(A, t)]))
        .into_iter()
        .chain([at_a000(&[(F, 20)])])
        .collect();
    assert_eq!(apply_passes(&mut objects, &mut ctx, passes), (None, PASSES));
    assert_eq!(
        ends_and_arms(&ctx),
        [
            "armed #0 0xa000",
            "freed #0 at 30",
            "armed #1 0xa000",
            "freed #1 at 50",
            "armed #2 0xa000",
            "freed #2 at 70",
            "armed #3 0xa000"
        ]
    );
    let t = ctx.slots.finish();
    assert_eq!((t.seen, t.armed, t.skipped, t.freed), (4, 4, 0, 3));
    assert_eq!(t.objects.len(), 4, "the last one still armed at the end");
}

/// The books at the end, `(seen, armed, skipped, freed, freed_unarmed)`, every object seen counted
/// once: armed, skipped, or freed before it could be armed.
fn counted(ctx: &mut Session) -> (u64, u64, u64, u64, u64) {
    let t = ctx.slots.finish();
    assert_eq!(t.seen, t.armed + t.skipped + t.freed_unarmed, "{t:?}");
    (t.seen, t.armed, t.skipped, t.freed, t.freed_unarmed)
}

/// The output closes as the first object of a batch is armed: the run stops there, and the rest of
/// the batch is counted, not carried out (nothing more armed, parked or printed): a new object as
/// skipped, one freed in the batch as freed before it could be armed, an armed one's free as freed.
#[test]
fn a_stop_partway_through_a_batch_counts_the_rest() {
    let (mut objects, mut ctx) = one_armed(2);
    ctx.log.closed = true;
    let batch = vec![
        record(A, 0xb000, 20, 1),
        record(A, 0xc000, 30, 1),
        record(A, 0xd000, 40, 1),
        record(F, 0xd000, 50, 1),
        record(F, 0xa000, 60, 1),
    ];
    assert_eq!(
        apply(&mut objects, &mut ctx, batch),
        Some(StopReason::BrokenPipe)
    );
    assert_eq!(ctx.log.calls(), ["arm 1 0xb050", "emit ObjectArmed"]);
    assert_eq!(counted(&mut ctx), (4, 2, 1, 1, 1));
}

/// An allocation held for its predecessor's free when the run stops later in its batch is counted
/// all the same, with no more reading of the rings: its predecessor ends at its allocation (the
/// fallback), and it is skipped.
#[test]
fn a_stop_counts_the_allocations_held_before_it() {
    let (mut objects, mut ctx) = one_armed(2);
    ctx.log.closed = true;
    let batch = vec![record(A, 0xa000, 30, 1), record(A, 0xb000, 40, 1)];
    assert_eq!(
        apply_passes(&mut objects, &mut ctx, vec![batch]),
        (Some(StopReason::BrokenPipe), 1)
    );
    assert_eq!(ctx.log.calls(), ["arm 1 0xb050", "emit ObjectArmed"]);
    assert_eq!(counted(&mut ctx), (3, 2, 1, 1, 0));
}

/// The hits a free prints reach `--count`: that object is counted freed though its line is not
/// printed, and the batch's new object after it is counted skipped.
#[test]
fn a_stop_while_a_free_prints_still_counts_it_freed() {
    let (mut objects, mut ctx) = one_armed(1);
    ctx.flush_stop = Some(StopReason::Count);
    let batch = vec![record(F, 0xa000, 20, 1), record(A, 0xb000, 30, 1)];
    assert_eq!(
        apply(&mut objects, &mut ctx, batch),
        Some(StopReason::Count)
    );
    assert_eq!(
        ctx.log.calls(),
        ["park 0 parked", "flush, late hits dropped: true"]
    );
    assert_eq!(counted(&mut ctx), (2, 1, 1, 1, 0));
}
