//! The session's armed events: one ring per CPU and target (for a process watch fed by every thread's
//! event on that CPU). The set owns every descriptor and ring, drains them into a [`Sorter`], opens and
//! closes a CPU's events as hotplug asks, moves or pauses the watch in place for `--control`, and at the end
//! audits each event against the kernel's own counters, so a loss the ring never reported is found. A
//! process watch's hits also get the watched value, read from the writer's process as each is drained.
//!
//! Each event's rings are decoded into [`Item`]s by the decoder of its delivery path, chosen once when the
//! event is taken ([`Decoder`]): the hit program's ring buffer on the hit path ([`hits`]), and a
//! breakpoint's perf ring ([`samples`]). The decoders are pure; what they share, and write to, is
//! [`decode`]'s; [`drain`] reads an event's rings through them into the merge, and
//! [`audit`](mod@audit) holds what they gave against the kernel's counters.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::plan::read_start_time;
use crate::model::scope::Scope;
use crate::model::watch::Watch;
use crate::perf::arm;
use crate::perf::bpf;
use crate::perf::bpf::hit_set::HitPrograms;
use crate::perf::bpf::kernel::pt_regs;
use crate::perf::event::{self, Binding, CpuEvent, Delivery, EventConfig, OpenError};
use crate::perf::hit_record;
use crate::perf::record::{Frame, Sample, Task};
use crate::perf::sys::{self, Epoll};
use crate::report::{Covered, Value};
use crate::trace::sorter;

mod audit;
mod decode;
mod drain;
mod hits;
mod placement;
mod samples;

pub use audit::Audit;
use audit::{audit, on_cpu, Bases};
pub(crate) use drain::read_value;
use drain::{drain_one, Chains, Decoder, Names, Reuse};

/// A ring as the merge names it: the CPU and watch it serves, and which of their rings it is. On the hit
/// path a CPU and watch have two, each in time order by itself: the breakpoint's perf ring (task records,
/// and a trap the kernel did not hand to the program) and the hit program's ring buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RingKey {
    pub cpu: u32,
    pub watch: usize,
    /// The hit program's ring buffer, not the breakpoint's perf ring.
    pub hits: bool,
}

impl RingKey {
    /// A ring read outside the merge that holds its release back ([`super::pipeline::Pipeline::read_elsewhere`]).
    pub const ELSEWHERE: RingKey = RingKey {
        cpu: u32::MAX,
        watch: usize::MAX,
        hits: false,
    };

    fn perf(cpu: u32, watch: usize) -> RingKey {
        RingKey {
            cpu,
            watch,
            hits: false,
        }
    }

    /// The keys of `ev`'s rings.
    fn of(ev: &CpuEvent) -> impl Iterator<Item = RingKey> {
        let perf = RingKey::perf(ev.cpu, ev.watch);
        let hits = ev.hits.is_some().then_some(RingKey { hits: true, ..perf });
        std::iter::once(perf).chain(hits)
    }
}

/// The merge of every ring's records.
pub type Sorter = sorter::Sorter<Item, RingKey>;

/// What a ring gave, in the order the sorter releases it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A hit: the kernel's sample of the writer, on one of the session's watches.
    Sample {
        sample: Sample,
        /// The index of the hit's watch among the session's watches.
        watch: usize,
        /// What the watched range held when it was drained (process watches; [`Value::NotRead`] for a
        /// system-wide one). A `--value` hit's [`Value::Written`] holds the memory read at the trap until
        /// the session decodes the store from its `trap`.
        value: Value,
        /// A `--value` hit's registers and instruction bytes at the trap. (Boxed: 184 bytes that only
        /// `--value` hits carry.)
        trap: Option<Box<Trap>>,
    },
    /// A task record, as the kernel wrote it (or, on the hit path, the writer's name from a hit record).
    Task(Task),
    /// Records the kernel dropped, or one we could not decode: never silent.
    Lost { cpu: u32, count: u64 },
    /// The hit path: hits the program kept, and counted in the kernel's totals before it tried its ring
    /// buffer, whose records the ring had no room for (or that could not be decoded). Not printed, but
    /// not lost to the totals.
    Unprinted { cpu: u32, count: u64 },
}

/// A `--value` hit's registers at the trap and the 16 bytes that end at its ip: the store's value is
/// decoded from them once the session knows where the instruction starts (see `Session::hit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trap {
    pub regs: [u64; pt_regs::WORDS],
    pub insn: [u8; hit_record::INSN_BYTES],
}

struct Tracked {
    ev: CpuEvent,
    decoder: Decoder,
    /// The programs' counters of this ring's CPU and watch before the event was enabled.
    bases: Bases,
}

impl Tracked {
    fn new(ev: CpuEvent, now: u64, cfg: &EventConfig, bases: Bases) -> Tracked {
        let decoder = Decoder::of(&ev, cfg, bases.lost, now);
        Tracked { ev, decoder, bases }
    }
}

/// The time the watch has spent switched off (`--control off`). Time the user chose not to watch is not
/// time a CPU went unwatched against their wish: hotplug's unwatched spans are measured on
/// [`OffClock::watched`], which stands still while the watch is off.
#[derive(Debug, Default, Clone, Copy)]
pub struct OffClock {
    /// Off since then.
    since: Option<u64>,
    /// The off spans that ended.
    total: u64,
}

impl OffClock {
    /// The watch goes off at `now` (no change if it is off).
    pub fn off(&mut self, now: u64) {
        self.since.get_or_insert(now);
    }

    /// The watch goes on at `now` (no change if it is on).
    pub fn on(&mut self, now: u64) {
        if let Some(since) = self.since.take() {
            self.total += now.saturating_sub(since);
        }
    }

    /// `t` less the time spent off before it: exact for a `t` after the last switch (the spans are not
    /// kept), as a hotplug change's times are, a few milliseconds old at most.
    pub fn watched(&self, t: u64) -> u64 {
        let current = self.since.map_or(0, |s| t.saturating_sub(s));
        t.saturating_sub(self.total + current)
    }
}

pub struct EventSet {
    /// What each target index watches now (`--control` moves them).
    watches: Vec<Watch>,
    /// Watches moved away from, newest last: a hit recorded before a move names the watch it hit.
    retired: Vec<Watch>,
    /// Per target, the watch a `--control` move left, naming the target's hits until the events are
    /// enabled again ([`EventSet::steer`]).
    steered: Vec<Option<Watch>>,
    /// `--control off` disabled every event; CPUs that come online meanwhile are armed disabled too.
    enabled: bool,
    /// How long the watch has been off, for time that counts as unwatched ([`EventSet::watched_time`]).
    off: OffClock,
    /// Targets whose events were closed for good ([`EventSet::close_watch`]), by index.
    closed: Vec<bool>,
    /// CPUs that came online and were armed while the watched process was still creating threads
    /// (`arm::open_cpu_in`): said at the end of the run.
    unsettled_cpus: BTreeSet<u32>,
    cfg: EventConfig,
    /// Who a CPU that comes online is armed for.
    scope: Scope,
    /// Each `-p` process's pid and start time as planned: a CPU that comes online is armed on the
    /// threads of a pid only while it names that process ([`arm::Planned`]).
    starts: Vec<(u32, u64)>,
    by_cpu: BTreeMap<u32, Vec<Tracked>>,
    /// Call-chain vectors of handled samples, reused by the next ones decoded.
    spare: Vec<Vec<Frame>>,
    /// The call chains hit records named by id, read once each from their watch's map.
    chains: Chains,
    /// Which CPUs the reader (the thread that drains) keeps to while writers flood others.
    placement: placement::Placement,
}

/// Retired watches remembered by [`EventSet::watch_of`].
const RETIRED_MAX: usize = 8;

/// Spare vectors kept: enough for the records a drain holds in the sorter, not more.
const SPARE_MAX: usize = 4096;

impl EventSet {
    /// Takes the armed events; each is registered with `epoll` under `token`, and its ring with `sorter`.
    pub fn new(
        watches: &[Watch],
        cfg: EventConfig,
        scope: Scope,
        armed: Vec<CpuEvent>,
        epoll: &Epoll,
        token: u64,
        sorter: &mut Sorter,
    ) -> std::io::Result<EventSet> {
        let mut set = EventSet {
            watches: watches.to_vec(),
            retired: Vec::new(),
            steered: vec![None; watches.len()],
            enabled: true,
            off: OffClock::default(),
            closed: vec![false; watches.len()],
            unsettled_cpus: BTreeSet::new(),
            cfg,
            scope,
            starts: Vec::new(),
            by_cpu: BTreeMap::new(),
            spare: Vec::new(),
            chains: Chains::new(),
            placement: placement::Placement::new(sys::monotonic_ns()),
        };
        let now = sys::monotonic_ns();
        for ev in armed {
            for fd in ev.readable() {
                epoll.add(fd, token)?;
            }
            for key in RingKey::of(&ev) {
                sorter.add_ring(key, now);
            }
            // The programs were loaded for this run, and their counters were zero while the events were
            // still disabled; read now, they would hold the traps since the events were enabled.
            let t = Tracked::new(ev, now, &set.cfg, Bases::default());
            set.by_cpu.entry(t.ev.cpu).or_default().push(t);
        }
        Ok(set)
    }

    /// Takes each `-p` process's pid and start time as planned (the plan's `Started`): a CPU that comes
    /// online is then armed on the threads of a pid only while it names that process.
    pub fn planned(mut self, starts: Vec<(u32, u64)>) -> EventSet {
        self.starts = starts;
        self
    }

    pub fn cpus(&self) -> BTreeSet<u32> {
        self.by_cpu.keys().copied().collect()
    }

    pub fn watches(&self) -> &[Watch] {
        &self.watches
    }

    /// The watch a hit of target `index` at data address `addr` was recorded on: the current one, or one
    /// `--control` moved away from whose hits were still in a ring (the kernel reports the breakpoint's
    /// address with each hit).
    pub fn watch_of(&self, index: usize, addr: u64) -> &Watch {
        Names {
            now: &self.watches,
            steered: &self.steered,
            retired: &self.retired,
        }
        .watch_of(index, addr)
    }

    /// How many threads a process watch covers now, or CPUs for a system-wide one (for acknowledgements).
    /// What a moved watch covers: its CPUs where there is one breakpoint per CPU (system-wide, and a
    /// process watch whose program chooses the processes, whose cost does not grow with threads:
    /// counting them would read /proc for each), else the watched processes' threads.
    pub fn coverage(&self) -> Covered {
        match &self.scope {
            _ if self.cfg.binding == Binding::Cpus => Covered::Cpus(self.by_cpu.len()),
            Scope::Processes(_) | Scope::Launched(_) => {
                Covered::Threads(arm::threads(&self.scope.pids()).len())
            }
            Scope::System => Covered::Cpus(self.by_cpu.len()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// `t` on a clock that stands still while the watch is switched off ([`OffClock`]).
    pub fn watched_time(&self, t: u64) -> u64 {
        self.off.watched(t)
    }

    /// The hit programs emit every hit (with its writer's name): the hit path.
    pub fn hit_path(&self) -> bool {
        matches!(self.cfg.delivery, Delivery::Hits(_))
    }

    /// The hit path's programs, whose maps hold the kernel's totals of every kept hit.
    pub fn hit_programs(&self) -> Option<&crate::perf::bpf::hit_set::HitPrograms> {
        self.cfg.delivery.hit_programs().map(|h| &**h)
    }

    /// Moves target `index` to `new` in place with MODIFY_ATTRIBUTES, inherited children included: no
    /// event is closed, so no thread loses its debug register. Every event of the target is left disabled
    /// (the caller drains what the old watch recorded, then calls [`EventSet::enable`]). On a refusal every
    /// event goes back to the old watch and the error is returned.
    pub fn retarget(&mut self, index: usize, new: Watch) -> std::io::Result<()> {
        self.move_target(index, new, false)
    }

    /// `--control`'s move: [`EventSet::retarget`], the old watch still naming the target's hits until the
    /// events are enabled again. Every hit drained by then was recorded before the move, also one at an
    /// address the new watch covers too (the same variable at another length or access).
    pub fn steer(&mut self, index: usize, new: Watch) -> std::io::Result<()> {
        // Moved twice before the events are enabled again: the hits still to drain are the first one's.
        let left = self.steered[index]
            .clone()
            .unwrap_or_else(|| self.watches[index].clone());
        self.retarget(index, new)?;
        self.steered[index] = Some(left);
        Ok(())
    }

    /// [`EventSet::retarget`], with the events enabled by the same MODIFY_ATTRIBUTES when `enable` and
    /// the watch is on: one call per CPU instead of two, for an object armed as it is allocated.
    pub fn move_target(&mut self, index: usize, new: Watch, enable: bool) -> std::io::Result<()> {
        let cfg = self.cfg.for_watch(index);
        let old = self.watches[index].clone();
        let disabled = !(enable && self.enabled);
        if let Delivery::Hits(h) = &self.cfg.delivery {
            h.moving(index, &old, &new, false)?;
        }
        // Left off, a process watch's events are moved again after each pause: a copy made as a move
        // walked its original's copies keeps the old address (and state). Moved and enabled in one call,
        // they are not: the kernel turns each event off and on to move it, a gap of its own.
        let result = if disabled {
            event::repeated_for_copies(self.target_events(index), |ev| ev.modify(&new, &cfg, true))
        } else {
            self.target_events(index)
                .try_for_each(|ev| ev.modify(&new, &cfg, false))
        };
        // The programs' side of the move, and the kernel's `old` (what `--if` reads) afresh at the new
        // target as the printed one is: failing once the events moved, they are put back as well, so the
        // books never name one watch while the events watch another.
        let result = result.and_then(|()| match &self.cfg.delivery {
            Delivery::Hits(h) => h
                .moving(index, &old, &new, true)
                .and_then(|()| h.forget_olds(index)),
            _ => Ok(()),
        });
        if let Err(e) = result {
            for ev in self.target_events(index) {
                let _ = ev.modify(&old, &cfg, true);
            }
            if let Delivery::Hits(h) = &self.cfg.delivery {
                let _ = h.moving(index, &new, &old, true);
            }
            if self.enabled {
                let _ = self.enable();
            }
            return Err(e);
        }
        // Each retarget drains the old watch's hits before enabling the new one, so only the newest few
        // can ever be asked for.
        self.retired.retain(|w| *w != old);
        if self.retired.len() == RETIRED_MAX {
            self.retired.remove(0);
        }
        self.retired.push(old);
        self.watches[index] = new;
        Ok(())
    }

    /// Why target `index` cannot move to `new` in place: `--value`'s program reads the length it was
    /// built for (and `--if` was checked against it).
    pub fn cannot_move(&self, index: usize, new: &Watch) -> Option<String> {
        let now = &self.watches[index];
        let written = match &self.cfg.delivery {
            Delivery::Hits(h) => h.written,
            Delivery::Samples => false,
        };
        (written && new.len != now.len).then(|| {
            format!(
                "--value/--if reads {} bytes at each hit and cannot change that while running; move to a target of {} bytes (TARGET/{}), or start a new run",
                now.len, now.len, now.len
            )
        })
    }

    fn target_events(&self, index: usize) -> impl Iterator<Item = &CpuEvent> + Clone {
        self.all_events().filter(move |ev| ev.watch == index)
    }

    /// Every event, of every CPU and target.
    fn all_events(&self) -> impl Iterator<Item = &CpuEvent> + Clone {
        self.by_cpu.values().flatten().map(|t| &t.ev)
    }

    /// Whether target `index` still has events (it was not closed by [`EventSet::close_watch`]).
    pub fn watch_armed(&self, index: usize) -> bool {
        !self.closed.get(index).copied().unwrap_or(true)
    }

    /// Drains, audits and closes every event of target `index`, for good: its kernel module was unloaded,
    /// and the memory is freed for reuse. The target keeps its index (the others' hits and audits name
    /// them as before), and a CPU that comes online later is not armed for it.
    ///
    /// Task records (COMM, FORK, EXIT) come from target 0's events: after target 0 is closed, a task born
    /// later is named from /proc at its first hit, and one that exited before it as `<...>`.
    pub fn close_watch(&mut self, index: usize, epoll: &Epoll, sorter: &mut Sorter) -> Vec<Audit> {
        if let Some(c) = self.closed.get_mut(index) {
            *c = true;
        }
        let started = sys::monotonic_ns();
        let names = Names {
            now: &self.watches,
            steered: &self.steered,
            retired: &self.retired,
        };
        let mut audits = Vec::new();
        for evs in self.by_cpu.values_mut() {
            let Some(at) = evs.iter().position(|t| t.ev.watch == index) else {
                continue;
            };
            // Dropped at the end of this block: its descriptors close, freeing the debug register.
            let mut t = evs.remove(at);
            drain_one(
                &mut t,
                sorter,
                started,
                Reuse::of(&mut self.spare, &mut self.chains, &self.cfg),
                names,
            );
            forget(&t.ev, epoll, sorter);
            audits.push(audit(&t, &self.cfg));
        }
        audits
    }

    /// Enables every event (`--control on`, or after a retarget when the watch is on); a process watch's
    /// again after each of [`event::REPEAT_PAUSES`], since its threads may be creating threads meanwhile.
    pub fn enable(&mut self) -> Result<(), OpenError> {
        self.enabled = true;
        self.off.on(sys::monotonic_ns());
        self.steered.iter_mut().for_each(|s| *s = None);
        event::repeated_for_copies(self.all_events(), CpuEvent::enable)
    }

    /// `--control off`: every event disabled, each keeping its debug register (a process watch's again
    /// after each pause, as [`Events::enable`] does: a copy made as the disable passed stays on).
    pub fn pause(&mut self) {
        self.enabled = false;
        self.off.off(sys::monotonic_ns());
        // Best effort, as at the end: an event that cannot be disabled is closed with the run.
        let _ = event::repeated_for_copies(self.all_events(), |ev| {
            let _ = ev.disable();
            Ok::<(), ()>(())
        });
    }

    /// Reads every ring empty into `sorter`.
    pub fn drain(&mut self, sorter: &mut Sorter) {
        let started = sys::monotonic_ns();
        let names = Names {
            now: &self.watches,
            steered: &self.steered,
            retired: &self.retired,
        };
        for t in self.by_cpu.values_mut().flatten() {
            drain_one(
                t,
                sorter,
                started,
                Reuse::of(&mut self.spare, &mut self.chains, &self.cfg),
                names,
            );
        }
        self.place(started);
    }

    /// On the hit path, after every ring was read: the records each program counted lost that no record
    /// has carried yet (its ring stayed full) are put in the merge now, as the next record would have put
    /// them, so a mark made now (a `--control` move, `off`) comes after them, not before.
    pub fn lost_now(&mut self, sorter: &mut Sorter) {
        for t in self.by_cpu.values_mut().flatten() {
            if let Decoder::Hits { hits, .. } = &mut t.decoder {
                let lost = on_cpu(&self.cfg, &t.ev, HitPrograms::lost_by_cpu);
                if let Some((time, item)) = hits.lost_now(lost) {
                    let key = RingKey {
                        hits: true,
                        ..RingKey::perf(t.ev.cpu, t.ev.watch)
                    };
                    sorter.push(key, time, item);
                }
            }
        }
    }

    /// Keeps a real-time reader off the CPUs whose writers flood it, once a window has passed
    /// ([`placement`]). A refused affinity leaves it where it was.
    fn place(&mut self, now: u64) {
        if !self.placement.due(now) {
            return;
        }
        let mut counts = BTreeMap::new();
        for (&cpu, events) in &self.by_cpu {
            counts.insert(cpu, events.iter().map(|t| t.decoder.tally().samples).sum());
        }
        if let Some(held) = self.placement.update(now, &counts, sys::is_realtime()) {
            let _ = match held {
                Some(cpus) => sys::set_affinity(cpus),
                None => sys::set_affinity(0..libc::CPU_SETSIZE as u32),
            };
        }
    }

    /// Takes back a handled sample's call-chain vector for the next decoded sample.
    pub fn recycle(&mut self, mut frames: Vec<Frame>) {
        if self.spare.len() < SPARE_MAX {
            frames.clear();
            self.spare.push(frames);
        }
    }

    pub fn disable_all(&self) {
        for ev in self.all_events() {
            let _ = ev.disable();
        }
    }

    /// A CPU that comes online after arming needs its per-CPU base for each per-CPU watch's copy there.
    /// Bases do not change while the kernel runs, so one reading per CPU is enough; without one, opening
    /// that CPU's breakpoint fails and the CPU is reported unarmed.
    fn learn_percpu_base(&mut self, cpu: u32) {
        let Some(at) = self.cfg.percpu else {
            return;
        };
        let unknown = |w: &Watch| {
            w.per_cpu
                .as_ref()
                .is_some_and(|p| p.copy.is_none() && !p.bases.contains_key(&cpu))
        };
        if !self.watches.iter().any(unknown) {
            return;
        }
        let Some(base) = bpf::percpu::bases(&[cpu], at)
            .ok()
            .and_then(|found| found.get(&cpu).copied())
        else {
            return;
        };
        for p in self.watches.iter_mut().filter_map(|w| w.per_cpu.as_mut()) {
            p.bases.insert(cpu, base);
        }
    }

    /// Opens and enables `cpu`'s events (all or none), registered with `epoll` and `sorter`.
    pub fn open_cpu(
        &mut self,
        cpu: u32,
        epoll: &Epoll,
        token: u64,
        sorter: &mut Sorter,
    ) -> Result<(), OpenError> {
        // A process scope is armed thread by thread on the new CPU: events inherited from before only
        // exist on the CPUs armed then.
        let scope = match &self.scope {
            Scope::Launched(pid) => Scope::Processes(vec![*pid]),
            other => other.clone(),
        };
        self.learn_percpu_base(cpu);
        let planned = arm::Planned {
            starts: &self.starts,
            start_time: read_start_time,
        };
        let (mut evs, settled) = arm::open_cpu_in(&self.watches, cpu, &scope, planned, &self.cfg)?;
        if !settled {
            self.unsettled_cpus.insert(cpu);
        }
        // Opened disabled, so a closed target's event never fires before it is dropped here.
        evs.retain(|e| !self.closed.get(e.watch).copied().unwrap_or(false));
        // A CPU that was armed before keeps its counters from then: they are the starting point.
        let bases = evs.iter().map(|e| Bases::read(&self.cfg, e)).collect();
        if self.enabled {
            event::repeated_for_copies(evs.iter(), CpuEvent::enable)?;
        }
        self.adopt_counted(cpu, evs, bases, epoll, token, sorter)
    }

    /// Takes `cpu`'s opened events: registered with `epoll` under `token`, and their rings with `sorter`;
    /// their counters start from what they are now (a test's events, which no kernel counts for).
    #[cfg(test)]
    pub fn adopt_cpu(
        &mut self,
        cpu: u32,
        evs: Vec<CpuEvent>,
        epoll: &Epoll,
        token: u64,
        sorter: &mut Sorter,
    ) -> Result<(), OpenError> {
        let bases = evs.iter().map(|e| Bases::read(&self.cfg, e)).collect();
        self.adopt_counted(cpu, evs, bases, epoll, token, sorter)
    }

    /// Takes `cpu`'s opened events: registered with `epoll` under `token`, and their rings with `sorter`;
    /// `bases`: each event's counters as read before it was enabled.
    fn adopt_counted(
        &mut self,
        cpu: u32,
        evs: Vec<CpuEvent>,
        bases: Vec<Bases>,
        epoll: &Epoll,
        token: u64,
        sorter: &mut Sorter,
    ) -> Result<(), OpenError> {
        // Every descriptor is registered before any ring joins the sorter: a ring registered there but
        // never read would hold every other ring's records back for good.
        for ev in &evs {
            for fd in ev.readable() {
                epoll.add(fd, token).map_err(|err| OpenError {
                    cpu,
                    tid: None,
                    stage: crate::perf::event::Stage::Enable,
                    err,
                    bp: None,
                })?;
            }
        }
        let now = sys::monotonic_ns();
        let mut tracked = Vec::with_capacity(evs.len());
        for (ev, bases) in evs.into_iter().zip(bases) {
            for key in RingKey::of(&ev) {
                sorter.add_ring(key, now);
            }
            tracked.push(Tracked::new(ev, now, &self.cfg, bases));
        }
        self.by_cpu.insert(cpu, tracked);
        Ok(())
    }

    /// Drains `cpu`'s rings into `sorter`, audits and closes its events (a CPU-bound event whose CPU went
    /// offline is dead for good). `None` when the CPU was not armed.
    pub fn close_cpu(
        &mut self,
        cpu: u32,
        epoll: &Epoll,
        sorter: &mut Sorter,
    ) -> Option<Vec<Audit>> {
        let mut evs = self.by_cpu.remove(&cpu)?;
        let started = sys::monotonic_ns();
        let mut audits = Vec::with_capacity(evs.len());
        let names = Names {
            now: &self.watches,
            steered: &self.steered,
            retired: &self.retired,
        };
        for t in evs.iter_mut() {
            drain_one(
                t,
                sorter,
                started,
                Reuse::of(&mut self.spare, &mut self.chains, &self.cfg),
                names,
            );
            forget(&t.ev, epoll, sorter);
            audits.push(audit(t, &self.cfg));
        }
        Some(audits)
    }

    /// The CPUs that came online and were armed unsettled ([`arm::unsettled_on`]).
    pub fn unsettled_cpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.unsettled_cpus.iter().copied()
    }

    /// Audits every event still open (after the final drain) and closes them all.
    pub fn close_all(&mut self) -> Vec<Audit> {
        let audits = self
            .by_cpu
            .values()
            .flatten()
            .map(|t| audit(t, &self.cfg))
            .collect();
        self.by_cpu.clear();
        audits
    }
}

/// Takes a closing event's rings out of `epoll` and the merge: they hold nothing back any more.
fn forget(ev: &CpuEvent, epoll: &Epoll, sorter: &mut Sorter) {
    for fd in ev.readable() {
        let _ = epoll.delete(fd);
    }
    for key in RingKey::of(ev) {
        sorter.remove_ring(key);
    }
}

#[cfg(test)]
mod tests;
