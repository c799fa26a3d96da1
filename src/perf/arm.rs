//! Arming every requested CPU (and, for a process watch, every thread) as one transaction, so a failure
//! on one CPU never leaves a partial watch printing hits: every event is opened and mapped disabled first; only when all succeeded
//! are they enabled. If any step fails on any CPU or thread, every event already opened is closed and
//! nothing has produced a single hit.
//!
//! A process watch ([`Scope::Processes`]) opens, per CPU and watch, one event per thread, each `inherit` +
//! `inherit_thread` so the threads a thread creates later are covered by the kernel, all redirected into one
//! ring per CPU and watch; the thread list is read again until a reading finds no thread left to arm. A
//! launched command ([`Scope::Launched`]) is armed while it is stopped at its exec, before any thread
//! exists: one inherited event per CPU and watch, no thread list at all.
//!
//! Arming is one call ([`arm_in`]): `--on`'s watches kept to the debug registers free on every CPU, the
//! events prepared once ([`Prepared`]: every attribute built, per CPU and watch), then the transaction,
//! which only opens, enables and rolls back that set. Everything it asks of the machine goes through a
//! [`Kernel`] ([`Perf`] is the real one; a test drives the whole arming with a fake). A failure is
//! explained once, at the end ([`Failure::explain`]), with the facts its wording needs read after the
//! rollback ([`Kernel::facts`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use crate::model::scope::Scope;
use crate::model::watch::Watch;
use crate::perf::denial::AddressKind;
use crate::perf::event::{
    self, Bind, Binding, CpuEvent, EventConfig, OpenError, Prepared, RingSpec, Stage, Targets,
};
use crate::perf::privilege::Privilege;
use crate::perf::probe;
use crate::perf::refusal::{explain_as, Facts, Kind, Refusal};

/// Who the events are opened for, bound as `binding`: where the program chooses the processes in the
/// kernel, one event per CPU whatever the scope.
pub fn targets(scope: &Scope, binding: Binding) -> Targets {
    match scope {
        _ if binding == Binding::Cpus => Targets::Cpus,
        Scope::System => Targets::Cpus,
        Scope::Launched(pid) => Targets::Task(*pid),
        Scope::Processes(pids) => Targets::Threads(pids.clone()),
    }
}

/// Readings of a process's thread list before arming gives up waiting for it to stop growing (threads
/// created by an armed thread are covered anyway; only ones created by a not-yet-armed one need a reading).
const MAX_THREAD_READINGS: usize = 100;

/// What the run says of an [`Armed::unsettled`] watch, on stderr as it starts and in its summary.
pub const UNSETTLED: &str = "the process was still creating threads at the last of 100 readings of its \
                             thread list: a thread created then by one not yet armed is not watched, and \
                             its stores are in no count";

/// What the transaction asks of the kernel, one ring at a time. Closing is dropping a ring.
pub trait Kernel {
    /// An open ring and its events.
    type Ring;
    /// Opens `spec`'s ring, disabled, its events bound as `bind`.
    fn open_ring(&mut self, spec: &RingSpec, bind: Bind) -> Result<Self::Ring, OpenError>;
    /// Adds thread `tid`'s event of `spec`, disabled, to `ring` (a process watch's ring of that CPU and
    /// watch).
    fn add_thread(
        &mut self,
        ring: &mut Self::Ring,
        spec: &RingSpec,
        tid: u32,
    ) -> Result<(), OpenError>;
    fn enable_ring(&mut self, ring: &Self::Ring) -> Result<(), OpenError>;
    /// Disables a ring whose transaction failed (best effort: it is closed right after).
    fn disable_ring(&mut self, ring: &Self::Ring);
    /// The threads of `pids` now.
    fn threads(&mut self, pids: &[u32]) -> Vec<u32>;
    /// Waits `how_long` (between the readings of a process's thread list and the enables of its events,
    /// [`event::REPEAT_PAUSES`]).
    fn pause(&mut self, how_long: Duration) {
        std::thread::sleep(how_long);
    }
    /// How many breakpoints like `watch` every one of `cpus` can take now, up to `most`; a refusal other
    /// than for want of a debug register is returned (the kernel takes no such breakpoint at all).
    fn free_slots(
        &mut self,
        watch: &Watch,
        cpus: &BTreeSet<u32>,
        most: usize,
    ) -> Result<usize, OpenError>;
    /// What the wording of refusal `e` depends on ([`Facts`]), read once the transaction is rolled back.
    fn facts(&mut self, e: &OpenError) -> Facts;
}

/// The kernel's perf events, opened as `cfg` says (its ring size and the programs its delivery attaches).
pub struct Perf<'a> {
    pub cfg: &'a EventConfig,
}

impl Kernel for Perf<'_> {
    type Ring = CpuEvent;

    fn open_ring(&mut self, spec: &RingSpec, bind: Bind) -> Result<CpuEvent, OpenError> {
        CpuEvent::open(spec, bind, self.cfg)
    }

    fn add_thread(
        &mut self,
        ring: &mut CpuEvent,
        spec: &RingSpec,
        tid: u32,
    ) -> Result<(), OpenError> {
        ring.add_thread(spec, tid, self.cfg)
    }

    fn enable_ring(&mut self, ring: &CpuEvent) -> Result<(), OpenError> {
        ring.enable()
    }

    fn disable_ring(&mut self, ring: &CpuEvent) {
        let _ = ring.disable();
    }

    fn threads(&mut self, pids: &[u32]) -> Vec<u32> {
        threads(pids)
    }

    fn free_slots(
        &mut self,
        watch: &Watch,
        cpus: &BTreeSet<u32>,
        most: usize,
    ) -> Result<usize, OpenError> {
        probe::slots_for(watch, cpus, most, self.cfg)
    }

    fn facts(&mut self, e: &OpenError) -> Facts {
        Facts {
            creds: Privilege::current(),
            free_registers: probe::free_after(e),
        }
    }
}

/// Events armed and enabled, in CPU then watch order.
pub struct Armed<R = CpuEvent> {
    pub events: Vec<R>,
    /// CPUs that went offline while arming (ENODEV): not a failure, they are covered when they return.
    pub went_offline: Vec<u32>,
    /// A process watch whose thread list still had new threads at its last reading (of 100): a thread
    /// created while those were armed, by a thread not armed yet, has no event, and its stores are in no
    /// count.
    pub unsettled: bool,
}

/// Why a transaction armed nothing.
#[derive(Debug)]
pub enum Failure {
    /// The kernel refused an event (everything opened before was closed).
    Open(OpenError),
    /// Counting the debug registers free for `--on`'s watches, the kernel refused the first one outright
    /// (not for want of a register): refused as arming it would be.
    Probe(OpenError),
    /// `--on` found no debug register free on every CPU.
    NoFreeSlot,
    /// Every requested CPU went offline while arming.
    AllOffline(BTreeSet<u32>),
    /// Every watched process exited while arming.
    AllExited,
}

impl Failure {
    /// The refusal to report, `watches` being what was to be armed; what its wording depends on is asked
    /// of `kernel` now, after the rollback ([`Kernel::facts`]).
    pub fn explain<K: Kernel>(&self, watches: &[Watch], kernel: &mut K) -> Refusal {
        match self {
            Failure::Open(e) => explain_as(e, watches, kernel.facts(e)).nothing_armed(),
            Failure::Probe(e) => {
                explain_as(e, &watches[..watches.len().min(1)], kernel.facts(e)).nothing_armed()
            }
            Failure::NoFreeSlot => Refusal::arm(
                Kind::NoFreeDebugRegister,
                "--on needs a free debug register on every CPU, and every one is in use (perf, gdb, another \
                 watch); stop one and run again",
            ),
            Failure::AllOffline(cpus) => Refusal::arm(
                Kind::CpuOffline,
                format!(
                    "no CPU could be armed: every requested CPU ({}) went offline",
                    crate::cpulist::format(cpus)
                ),
            ),
            Failure::AllExited => Refusal::arm(
                Kind::ProcessesExited,
                "no thread could be armed: every watched process exited while arming",
            ),
        }
    }
}

/// Which of the watches are armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Every one, or nothing.
    All,
    /// `--on`'s slots: as many as every CPU has a debug register free for (at least one).
    FreeRegisters,
}

/// Arms `watches` on every one of `cpus` for `scope`, or nothing, on the kernel's perf events
/// ([`arm_with`]); `fit` says whether `watches` are first kept to the debug registers free.
pub fn arm_in(
    watches: &mut Vec<Watch>,
    cpus: &BTreeSet<u32>,
    scope: &Scope,
    cfg: &EventConfig,
    fit: Fit,
) -> Result<Armed, Refusal> {
    let targets = targets(scope, cfg.binding);
    arm_with(&mut Perf { cfg }, watches, cpus, targets, cfg, fit)
}

/// The whole arming on `kernel`: `--on`'s watches kept to the free slots (`keep_free_slots`), the events
/// prepared once, the transaction ([`arm_set`]); a failure explained once, at the end, with the facts the
/// kernel gives after everything opened was closed.
pub fn arm_with<K: Kernel>(
    kernel: &mut K,
    watches: &mut Vec<Watch>,
    cpus: &BTreeSet<u32>,
    targets: Targets,
    cfg: &EventConfig,
    fit: Fit,
) -> Result<Armed<K::Ring>, Refusal> {
    let armed = match keep_free_slots(watches, cpus, fit, kernel) {
        Ok(()) => arm_set(&Prepared::new(watches, cpus, targets, cfg), kernel),
        Err(f) => Err(f),
    };
    match armed {
        Ok(armed) => Ok(armed),
        Err(f) => Err(Failure::explain(&f, watches, kernel)),
    }
}

/// With [`Fit::FreeRegisters`] (`--on`), keeps `watches` to one slot per debug register still free on
/// every CPU; a failure if none is. With [`Fit::All`] they are left as they are.
fn keep_free_slots<K: Kernel>(
    watches: &mut Vec<Watch>,
    cpus: &BTreeSet<u32>,
    fit: Fit,
    kernel: &mut K,
) -> Result<(), Failure> {
    if fit == Fit::All {
        return Ok(());
    }
    let free = match watches.first() {
        // A slot the kernel refuses outright (not for want of a register) is refused as arming would be.
        Some(w) => kernel
            .free_slots(w, cpus, watches.len())
            .map_err(Failure::Probe)?,
        None => 0,
    };
    if free == 0 {
        return Err(Failure::NoFreeSlot);
    }
    watches.truncate(free);
    Ok(())
}

/// The transaction: opens every ring of `set` (disabled), then enables them all; on any failure every
/// ring opened so far is disabled and closed. A CPU that went offline meanwhile is left out, not a
/// failure, unless every one did. A process watch's events are enabled again after each of
/// [`event::REPEAT_PAUSES`]: its threads may be creating threads meanwhile, and a copy made as an enable
/// passed can stay off. (A launched command is armed while it is stopped at its exec: no thread creates
/// any.)
pub fn arm_set<K: Kernel>(set: &Prepared, kernel: &mut K) -> Result<Armed<K::Ring>, Failure> {
    let armed = open_set(set, kernel)?;
    let events = &armed.events;
    let threads = matches!(set.targets, Targets::Threads(_));
    let enabled = event::with_repeats(threads, |pause| {
        if let Some(how_long) = pause {
            kernel.pause(how_long);
        }
        events.iter().try_for_each(|ev| kernel.enable_ring(ev))
    });
    if let Err(e) = enabled {
        for ev in events {
            kernel.disable_ring(ev);
        }
        // Returning drops `armed`: every descriptor is closed, freeing its debug register.
        return Err(Failure::Open(e));
    }
    Ok(armed)
}

/// Opens every ring of `set`, disabled, with the CPUs that went offline meanwhile: the transaction's
/// first half, all or none (a failure drops, so closes, every ring opened before it).
fn open_set<K: Kernel>(set: &Prepared, kernel: &mut K) -> Result<Armed<K::Ring>, Failure> {
    Ok(match &set.targets {
        Targets::Threads(pids) => {
            let (events, settled) = open_threads(set, pids, kernel).map_err(Failure::Open)?;
            if events.is_empty() {
                return Err(Failure::AllExited);
            }
            Armed {
                events,
                went_offline: Vec::new(),
                unsettled: !settled,
            }
        }
        Targets::Cpus | Targets::Task(_) => {
            let (events, went_offline) = open_cpus(set, kernel)?;
            Armed {
                events,
                went_offline,
                unsettled: false,
            }
        }
    })
}

/// `--dry-run`'s question to the kernel: would it take the kernel addresses among `watches` on `cpus`
/// for `scope`, bound as `binding`? A refusal of a kernel-space breakpoint is a kernel's policy as much as a privilege (some
/// refuse every one even to root with CAP_SYS_ADMIN), which nothing but an open can tell, so it is asked
/// as arming asks it ([`dry_run_with`] on the kernel's perf events, opened for whom arming opens them, bare
/// otherwise: no program, a one-page ring).
/// User addresses are not opened: whether this process may watch them is the plan's to say from its
/// privileges, and it has said it.
pub fn dry_run(
    watches: &[Watch],
    cpus: &BTreeSet<u32>,
    scope: &Scope,
    binding: Binding,
) -> Option<Refusal> {
    let cfg = EventConfig {
        binding,
        ..EventConfig::bare(1)
    };
    let targets = targets(scope, binding);
    dry_run_with(&mut Perf { cfg: &cfg }, watches, cpus, targets, &cfg)
}

/// The dry run on `kernel`: the kernel addresses' events prepared and opened as arming opens them
/// (disabled), then closed at once, never enabled, so nothing is armed. A refusal is explained as
/// arming's (`watches` being every watch of the plan), exit code and all, when it says what the run
/// would be told whenever it ran (`lasting`).
pub fn dry_run_with<K: Kernel>(
    kernel: &mut K,
    watches: &[Watch],
    cpus: &BTreeSet<u32>,
    targets: Targets,
    cfg: &EventConfig,
) -> Option<Refusal> {
    let asked: Vec<Watch> = watches
        .iter()
        .filter(|w| AddressKind::of(w.addr, w.len) == AddressKind::Kernel)
        .cloned()
        .collect();
    if asked.is_empty() {
        return None;
    }
    // Dropping what was opened closes it: nothing is ever enabled.
    let failure = open_set(&Prepared::new(&asked, cpus, targets, cfg), kernel).err()?;
    if !lasting(&failure) {
        return None;
    }
    Some(failure.explain(watches, kernel))
}

/// Whether arming's failure `f` says what the run would be told whenever it ran: a refusal of permission,
/// or of the breakpoint itself. What only says how the machine is now (every debug register taken, a CPU
/// going offline, the PMU busy, no descriptor left, the processes gone) does not: the run may well not
/// meet it.
fn lasting(f: &Failure) -> bool {
    let passing = [
        libc::ENOSPC,
        libc::ENODEV,
        libc::EBUSY,
        libc::EMFILE,
        libc::ENFILE,
        libc::EINTR,
    ];
    match f {
        Failure::Open(e) | Failure::Probe(e) => {
            !passing.contains(&e.err.raw_os_error().unwrap_or(0))
        }
        Failure::NoFreeSlot | Failure::AllOffline(_) | Failure::AllExited => false,
    }
}

/// Opens `set`'s rings on one CPU, disabled: all or none. Threads that exit meanwhile are skipped. What
/// a CPU that comes online is armed with (the caller enables them).
pub fn open_cpu<K: Kernel>(
    set: &Prepared,
    cpu: u32,
    kernel: &mut K,
) -> Result<Vec<K::Ring>, OpenError> {
    let bind = match &set.targets {
        Targets::Threads(pids) => return open_threads(set, pids, kernel).map(|(rings, _)| rings),
        Targets::Cpus => Bind::Cpu,
        Targets::Task(pid) => Bind::Task(*pid),
    };
    let rings = set.cpus.iter().filter(|(c, _)| *c == cpu);
    rings
        .flat_map(|(_, specs)| specs)
        .map(|spec| kernel.open_ring(spec, bind))
        .collect()
}

/// Opens `watches` on `cpu` for `scope` (disabled): all or none. For a CPU that comes online.
pub fn open_cpu_in(
    watches: &[Watch],
    cpu: u32,
    scope: &Scope,
    cfg: &EventConfig,
) -> Result<Vec<CpuEvent>, OpenError> {
    let set = Prepared::new(
        watches,
        &BTreeSet::from([cpu]),
        targets(scope, cfg.binding),
        cfg,
    );
    open_cpu(&set, cpu, &mut Perf { cfg })
}

/// Every CPU's rings of a CPU-wide or launched set, with the CPUs that went offline (ENODEV) while
/// being opened.
fn open_cpus<K: Kernel>(
    set: &Prepared,
    kernel: &mut K,
) -> Result<(Vec<K::Ring>, Vec<u32>), Failure> {
    let mut events = Vec::with_capacity(set.cpus.iter().map(|(_, r)| r.len()).sum());
    let mut went_offline = Vec::new();
    for &(cpu, _) in &set.cpus {
        match open_cpu(set, cpu, kernel) {
            Ok(evs) => events.extend(evs),
            Err(e) if e.stage == Stage::Open && e.err.raw_os_error() == Some(libc::ENODEV) => {
                went_offline.push(cpu)
            }
            // Returning drops `events`: every descriptor opened so far is closed.
            Err(e) => return Err(Failure::Open(e)),
        }
    }
    if events.is_empty() {
        let cpus = set.cpus.iter().map(|&(cpu, _)| cpu).collect();
        return Err(Failure::AllOffline(cpus));
    }
    Ok((events, went_offline))
}

/// One ring per CPU and watch, fed by every thread of `pids` on that CPU; the thread list is read again
/// until it has no thread left to arm. Each event's program is attached as it is opened, so once the
/// list settles, every thread alive has an event of its own with the program (the hit path's decoder
/// relies on it to drop the samples of copies without one). A thread first seen after the first reading
/// that has no debug register left is armed by the copies it inherited (see the match below), not
/// refused.
///
/// A reading that finds no new thread is not yet the end: the kernel gives a thread being created its
/// copies of its creator's events early in `clone()`, but lists it in /proc only at the end. A thread
/// made by one not armed yet (or armed on some CPUs only) that is still being created at a reading has
/// none (or some) of the events and is not seen: it and every thread it makes would go unwatched, on
/// every CPU or on some (measured: a whole chain of a churning process uncounted, or counted on one CPU
/// only, about 1 round in 40 on an idle machine). So the list is read again after each of
/// [`event::REPEAT_PAUSES`], time for such a creation to end, and settles only when none of those
/// readings finds a new thread either. Also returns whether it settled: after [`MAX_THREAD_READINGS`]
/// readings, the threads created during the last one by threads not armed yet have no event
/// ([`Armed::unsettled`]).
fn open_threads<K: Kernel>(
    set: &Prepared,
    pids: &[u32],
    kernel: &mut K,
) -> Result<(Vec<K::Ring>, bool), OpenError> {
    let mut rings: BTreeMap<(u32, usize), K::Ring> = BTreeMap::new();
    let mut done = HashSet::new();
    let mut settled = false;
    // Readings in a row that found no new thread.
    let mut quiet = 0;
    for reading in 0..MAX_THREAD_READINGS {
        let fresh: Vec<u32> = kernel
            .threads(pids)
            .into_iter()
            .filter(|t| !done.contains(t))
            .collect();
        if fresh.is_empty() {
            match event::REPEAT_PAUSES.get(quiet) {
                Some(pause) => {
                    kernel.pause(*pause);
                    quiet += 1;
                    continue;
                }
                None => {
                    settled = true;
                    break;
                }
            }
        }
        quiet = 0;
        for tid in fresh {
            done.insert(tid);
            'cpus: for (cpu, specs) in &set.cpus {
                for spec in specs {
                    let opened = match rings.get_mut(&(*cpu, spec.watch)) {
                        Some(ring) => kernel.add_thread(ring, spec, tid),
                        None => kernel.open_ring(spec, Bind::Task(tid)).map(|ring| {
                            rings.insert((*cpu, spec.watch), ring);
                        }),
                    };
                    match opened {
                        Ok(()) => {}
                        // Exited while being armed: its events, if any, can never fire.
                        Err(e) if e.thread_gone() => break 'cpus,
                        // Made while the watch was being armed, by a thread whose events were open: it
                        // inherited copies of them, and one made by a thread that had both its own and
                        // copies inherits all of them, so a few generations on a thread holds every
                        // debug register its CPU gives it. Those copies cover it (with the program: at
                        // most one of them was made between its event's open and attach).
                        Err(e) if reading > 0 && e.out_of_registers() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    Ok((rings.into_values().collect(), settled))
}

/// The threads of `pids` now (a process that has gone has none).
pub fn threads(pids: &[u32]) -> Vec<u32> {
    let mut tids = Vec::new();
    for pid in pids {
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            tids.extend(
                dir.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()),
            );
        }
    }
    tids.sort_unstable();
    tids
}

/// How many threads `pids` have now, from each process's `Threads:` line in /proc/PID/status: one read
/// per process, where listing /proc/PID/task reads one entry per thread. A process that is gone counts 0.
pub fn thread_count(pids: &[u32]) -> usize {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse::<usize>().ok())
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::event::REPEAT_PAUSES;
    use std::cell::RefCell;
    use std::io;
    use std::rc::Rc;

    use crate::model::watch::Access;

    /// What the fake kernel did, shared with its rings (a ring that is dropped is closed).
    #[derive(Default)]
    struct Log {
        open: usize,
        enabled: usize,
        disabled: usize,
        /// The pauses taken, in order.
        paused: Vec<Duration>,
    }

    /// A ring of the fake kernel: its CPU, watch and threads; dropping it closes it.
    struct FakeRing {
        cpu: u32,
        watch: usize,
        tids: Vec<u32>,
        log: Rc<RefCell<Log>>,
    }

    impl Drop for FakeRing {
        fn drop(&mut self) {
            self.log.borrow_mut().open -= 1;
        }
    }

    /// A kernel that refuses what a test tells it to: an open on `fail_cpu` (with `errno`), an enable on
    /// `fail_enable`, a thread in `gone` (ESRCH); `readings` are the successive thread lists; `free` the
    /// slots every CPU has free (or the errno of the first probe), `free_registers` what it counts after
    /// a refusal (and `open_at_facts` how many rings were open then).
    struct Fake {
        log: Rc<RefCell<Log>>,
        fail_cpu: Option<(u32, i32)>,
        fail_enable: Option<u32>,
        /// Enables that succeed before `fail_enable` is refused (a repeat's refusal).
        enables_before_failing: usize,
        gone: Vec<u32>,
        full: Vec<u32>,
        readings: Vec<Vec<u32>>,
        free: Result<usize, i32>,
        free_registers: Option<u32>,
        open_at_facts: Option<usize>,
        creds: Privilege,
        /// The address a refused open names (the real one names its ring's breakpoint).
        bp: Option<(u64, u8)>,
    }

    impl Fake {
        fn new() -> Fake {
            Fake {
                log: Rc::default(),
                fail_cpu: None,
                fail_enable: None,
                enables_before_failing: 0,
                gone: Vec::new(),
                full: Vec::new(),
                readings: Vec::new(),
                free: Ok(4),
                free_registers: None,
                open_at_facts: None,
                creds: Privilege::current(),
                bp: None,
            }
        }

        fn open_now(&self) -> usize {
            self.log.borrow().open
        }
    }

    fn refused(cpu: u32, bind: Bind, stage: Stage, errno: i32) -> OpenError {
        OpenError {
            cpu,
            tid: match bind {
                Bind::Cpu => None,
                Bind::Task(t) => Some(t),
            },
            stage,
            err: io::Error::from_raw_os_error(errno),
            bp: None,
        }
    }

    impl Kernel for Fake {
        type Ring = FakeRing;

        fn open_ring(&mut self, spec: &RingSpec, bind: Bind) -> Result<FakeRing, OpenError> {
            match (self.fail_cpu, bind) {
                (Some((cpu, errno)), _) if cpu == spec.cpu => {
                    return Err(OpenError {
                        bp: self.bp,
                        ..refused(cpu, bind, Stage::Open, errno)
                    })
                }
                (_, Bind::Task(t)) if self.gone.contains(&t) => {
                    return Err(refused(spec.cpu, bind, Stage::Open, libc::ESRCH))
                }
                (_, Bind::Task(t)) if self.full.contains(&t) => {
                    return Err(refused(spec.cpu, bind, Stage::Open, libc::ENOSPC))
                }
                _ => {}
            }
            self.log.borrow_mut().open += 1;
            Ok(FakeRing {
                cpu: spec.cpu,
                watch: spec.watch,
                tids: match bind {
                    Bind::Cpu => Vec::new(),
                    Bind::Task(t) => vec![t],
                },
                log: self.log.clone(),
            })
        }

        fn add_thread(
            &mut self,
            ring: &mut FakeRing,
            spec: &RingSpec,
            tid: u32,
        ) -> Result<(), OpenError> {
            if self.gone.contains(&tid) {
                return Err(refused(spec.cpu, Bind::Task(tid), Stage::Open, libc::ESRCH));
            }
            if self.full.contains(&tid) {
                return Err(refused(
                    spec.cpu,
                    Bind::Task(tid),
                    Stage::Open,
                    libc::ENOSPC,
                ));
            }
            ring.tids.push(tid);
            Ok(())
        }

        fn enable_ring(&mut self, ring: &FakeRing) -> Result<(), OpenError> {
            let refusing = self.log.borrow().enabled >= self.enables_before_failing;
            if refusing && self.fail_enable == Some(ring.cpu) {
                return Err(refused(ring.cpu, Bind::Cpu, Stage::Enable, libc::EBUSY));
            }
            self.log.borrow_mut().enabled += 1;
            Ok(())
        }

        fn disable_ring(&mut self, _: &FakeRing) {
            self.log.borrow_mut().disabled += 1;
        }

        fn pause(&mut self, how_long: Duration) {
            self.log.borrow_mut().paused.push(how_long);
        }

        fn threads(&mut self, _: &[u32]) -> Vec<u32> {
            match self.readings.len() {
                0 => Vec::new(),
                1 => self.readings[0].clone(),
                _ => self.readings.remove(0),
            }
        }

        fn free_slots(
            &mut self,
            _: &Watch,
            cpus: &BTreeSet<u32>,
            most: usize,
        ) -> Result<usize, OpenError> {
            let first = cpus.first().copied().unwrap_or(0);
            self.free
                .map(|free| free.min(most))
                .map_err(|errno| refused(first, Bind::Cpu, Stage::Open, errno))
        }

        fn facts(&mut self, _: &OpenError) -> Facts {
            self.open_at_facts = Some(self.open_now());
            Facts {
                creds: self.creds,
                free_registers: self.free_registers,
            }
        }
    }

    fn watches(n: usize) -> Vec<Watch> {
        (0..n)
            .map(|i| Watch {
                label: format!("w{i}"),
                addr: 0x1000 + 8 * i as u64,
                len: 8,
                access: Access::Write,
                module: None,
                per_cpu: None,
            })
            .collect()
    }

    fn set(n: usize, cpus: &[u32], targets: Targets) -> Prepared {
        let cpus: BTreeSet<u32> = cpus.iter().copied().collect();
        Prepared::new(&watches(n), &cpus, targets, &EventConfig::bare(1))
    }

    #[test]
    fn every_cpu_and_watch_is_opened_then_enabled() {
        let mut k = Fake::new();
        let armed = arm_set(&set(2, &[0, 1, 2], Targets::Cpus), &mut k).expect("armed");
        let placed: Vec<(u32, usize)> = armed.events.iter().map(|r| (r.cpu, r.watch)).collect();
        assert_eq!(placed, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]);
        assert!(armed.went_offline.is_empty());
        assert_eq!((k.open_now(), k.log.borrow().enabled), (6, 6));
    }

    #[test]
    fn a_refused_cpu_closes_every_ring_opened_before_it() {
        let mut k = Fake {
            fail_cpu: Some((1, libc::EBUSY)),
            ..Fake::new()
        };
        let err = arm_set(&set(2, &[0, 1, 2], Targets::Cpus), &mut k).err();
        let Some(Failure::Open(e)) = err else {
            panic!("a refusal: {err:?}")
        };
        assert_eq!((e.cpu, e.stage), (1, Stage::Open));
        assert_eq!(k.open_now(), 0, "cpu 0's rings closed");
        assert_eq!(k.log.borrow().enabled, 0, "nothing was enabled");
        let text = Failure::Open(e).explain(&watches(2), &mut k).to_string();
        assert!(text.contains("cpu 1: breakpoint PMU busy"), "{text}");
        assert!(text.contains("nothing was armed"), "{text}");
    }

    #[test]
    fn a_cpu_gone_offline_is_left_out_unless_every_one_is() {
        let mut k = Fake {
            fail_cpu: Some((1, libc::ENODEV)),
            ..Fake::new()
        };
        let armed = arm_set(&set(1, &[0, 1], Targets::Cpus), &mut k).expect("armed");
        assert_eq!(armed.went_offline, [1]);
        assert_eq!(armed.events.len(), 1);
        drop(armed);
        let mut k = Fake {
            fail_cpu: Some((1, libc::ENODEV)),
            ..Fake::new()
        };
        let err = arm_set(&set(1, &[1], Targets::Cpus), &mut k).err();
        let Some(f @ Failure::AllOffline(_)) = err else {
            panic!("every CPU offline: {err:?}")
        };
        let refusal = f.explain(&watches(1), &mut k);
        assert_eq!(refusal.kind, Kind::CpuOffline);
        assert!(
            refusal
                .to_string()
                .contains("no CPU could be armed: every requested CPU (1) went offline"),
            "{refusal}"
        );
    }

    #[test]
    fn an_enable_that_fails_disables_and_closes_everything() {
        let mut k = Fake {
            fail_enable: Some(1),
            ..Fake::new()
        };
        let err = arm_set(&set(2, &[0, 1], Targets::Cpus), &mut k).err();
        assert!(
            matches!(&err, Some(Failure::Open(e)) if e.stage == Stage::Enable && e.cpu == 1),
            "{err:?}"
        );
        assert_eq!(k.log.borrow().enabled, 2, "cpu 0's two rings were enabled");
        assert_eq!(k.log.borrow().disabled, 4, "then every ring disabled");
        assert_eq!(k.open_now(), 0, "and closed");
    }

    #[test]
    fn a_launched_command_is_one_inherited_event_per_cpu_and_watch() {
        let mut k = Fake::new();
        let armed = arm_set(&set(2, &[0, 1], Targets::Task(42)), &mut k).expect("armed");
        assert_eq!(armed.events.len(), 4);
        assert!(armed.events.iter().all(|r| r.tids == [42]));
        // Stopped at its exec, it creates no thread while being enabled: one enable each.
        assert_eq!(k.log.borrow().enabled, 4);
        assert!(k.log.borrow().paused.is_empty());
    }

    /// A process watch's rings are enabled once, then again after each pause: a thread created as an
    /// enable passed its creator's copy can keep a copy that is off. CPU-wide rings are enabled once.
    #[test]
    fn a_process_watch_is_enabled_again_after_each_pause() {
        let mut k = Fake {
            readings: vec![vec![10, 11]],
            ..Fake::new()
        };
        let armed = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).expect("armed");
        assert_eq!(armed.events.len(), 2);
        let log = k.log.borrow();
        // The thread list's settling readings, then the enables' repeats.
        assert_eq!(log.paused, [REPEAT_PAUSES, REPEAT_PAUSES].concat());
        assert_eq!(log.enabled, 2 * (1 + REPEAT_PAUSES.len()));
        drop(log);
        let mut k = Fake::new();
        arm_set(&set(1, &[0, 1], Targets::Cpus), &mut k).expect("armed");
        assert_eq!(
            (k.log.borrow().enabled, k.log.borrow().paused.len()),
            (2, 0)
        );
    }

    /// A thread list that still grows at the last reading leaves the watch unsettled; one that stops
    /// growing does not.
    #[test]
    fn a_thread_list_that_never_stops_growing_is_unsettled() {
        let growing: Vec<Vec<u32>> = (0..=MAX_THREAD_READINGS as u32)
            .map(|n| (10..=10 + n).collect())
            .collect();
        let mut k = Fake {
            readings: growing,
            ..Fake::new()
        };
        let armed = arm_set(&set(1, &[0], Targets::Threads(vec![10])), &mut k).expect("armed");
        assert!(armed.unsettled);
        assert_eq!(armed.events[0].tids.len(), MAX_THREAD_READINGS);
        assert!(UNSETTLED.contains(&format!(" {MAX_THREAD_READINGS} readings")));
        let mut k = Fake {
            readings: vec![vec![10], vec![10, 11]],
            ..Fake::new()
        };
        let armed = arm_set(&set(1, &[0], Targets::Threads(vec![10])), &mut k).expect("armed");
        assert!(!armed.unsettled);
        let armed = arm_set(&set(1, &[0], Targets::Cpus), &mut Fake::new()).expect("armed");
        assert!(!armed.unsettled);
    }

    /// A repeat that is refused rolls the whole transaction back as a first enable's refusal does.
    #[test]
    fn a_refused_repeat_disables_and_closes_everything() {
        let mut k = Fake {
            readings: vec![vec![10]],
            fail_enable: Some(1),
            // The first pass (two rings) succeeds.
            enables_before_failing: 2,
            ..Fake::new()
        };
        let err = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).err();
        assert!(
            matches!(&err, Some(Failure::Open(e)) if e.stage == Stage::Enable && e.cpu == 1),
            "{err:?}"
        );
        assert_eq!(k.log.borrow().paused.len(), REPEAT_PAUSES.len() + 1);
        assert_eq!(k.log.borrow().disabled, 2, "every ring disabled");
        assert_eq!(k.open_now(), 0, "and closed");
    }

    /// The thread list is read until a reading brings no new thread; every thread joins the one ring of
    /// each CPU and watch, and a thread that exits while being armed is skipped.
    #[test]
    fn threads_join_one_ring_per_cpu_and_watch_until_none_is_new() {
        let mut k = Fake {
            readings: vec![vec![10, 11], vec![10, 11, 12, 13]],
            gone: vec![11],
            ..Fake::new()
        };
        let armed = arm_set(&set(2, &[0, 1], Targets::Threads(vec![10])), &mut k).expect("armed");
        let rings: Vec<(u32, usize, Vec<u32>)> = armed
            .events
            .iter()
            .map(|r| (r.cpu, r.watch, r.tids.clone()))
            .collect();
        let tids = vec![10, 12, 13];
        assert_eq!(
            rings,
            [
                (0, 0, tids.clone()),
                (0, 1, tids.clone()),
                (1, 0, tids.clone()),
                (1, 1, tids)
            ]
        );
        assert!(armed.went_offline.is_empty());
    }

    /// A reading that finds no new thread is read again after each pause: a thread still being created
    /// at it (listed only once created, with the copies its creator had then) is armed when it shows.
    #[test]
    fn a_thread_that_shows_after_a_quiet_reading_is_armed() {
        let mut k = Fake {
            readings: vec![
                vec![10],
                vec![10],
                vec![10, 11],
                vec![10, 11],
                vec![10, 11],
                vec![10, 11, 12],
            ],
            ..Fake::new()
        };
        let armed = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).expect("armed");
        assert!(!armed.unsettled);
        assert!(armed.events.iter().all(|r| r.tids == [10, 11, 12]));
        let settling = &k.log.borrow().paused[..5];
        let [p1, p5] = REPEAT_PAUSES;
        assert_eq!(settling, [p1, p1, p5, p1, p5]);
    }

    /// A thread first seen after the first reading with no debug register left holds copies of the
    /// armed threads' events: it is armed as it is. One of the first reading's is refused (its registers
    /// are someone else's).
    #[test]
    fn a_thread_made_while_arming_with_no_register_left_is_covered_by_its_copies() {
        let mut k = Fake {
            readings: vec![vec![10], vec![10, 12, 13]],
            full: vec![12],
            ..Fake::new()
        };
        let armed = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).expect("armed");
        assert!(armed.events.iter().all(|r| r.tids == [10, 13]));
        let mut k = Fake {
            readings: vec![vec![10, 12]],
            full: vec![12],
            ..Fake::new()
        };
        let err = arm_set(&set(1, &[0, 1], Targets::Threads(vec![10])), &mut k).err();
        let Some(Failure::Open(e)) = err else {
            panic!("refused: {err:?}")
        };
        assert_eq!(
            (e.tid, e.err.raw_os_error()),
            (Some(12), Some(libc::ENOSPC))
        );
        assert_eq!(k.open_now(), 0, "rolled back");
    }

    #[test]
    fn processes_that_all_exited_are_a_failure_of_their_own() {
        let mut k = Fake::new();
        let err = arm_set(&set(1, &[0], Targets::Threads(vec![10])), &mut k).err();
        let Some(f @ Failure::AllExited) = err else {
            panic!("every process exited: {err:?}")
        };
        assert_eq!(f.explain(&watches(1), &mut k).kind, Kind::ProcessesExited);
    }

    fn cpus(cpus: &[u32]) -> BTreeSet<u32> {
        cpus.iter().copied().collect()
    }

    /// `--on` keeps its watches to the slots free on every CPU, and arms those alone.
    #[test]
    fn on_keeps_its_watches_to_the_free_slots() {
        let mut k = Fake {
            free: Ok(2),
            ..Fake::new()
        };
        let mut ws = watches(3);
        let cfg = EventConfig::bare(1);
        let armed = arm_with(
            &mut k,
            &mut ws,
            &cpus(&[0, 1]),
            Targets::Cpus,
            &cfg,
            Fit::FreeRegisters,
        )
        .expect("armed");
        assert_eq!(ws.len(), 2);
        let placed: Vec<(u32, usize)> = armed.events.iter().map(|r| (r.cpu, r.watch)).collect();
        assert_eq!(placed, [(0, 0), (0, 1), (1, 0), (1, 1)]);
        // Without `--on` every watch is armed, however few slots are free.
        let mut ws = watches(3);
        let armed =
            arm_with(&mut k, &mut ws, &cpus(&[0]), Targets::Cpus, &cfg, Fit::All).expect("armed");
        assert_eq!((ws.len(), armed.events.len()), (3, 3));
    }

    /// `--on` with no slot free is refused, and a probe the kernel refuses outright is refused as arming
    /// its first watch would be; nothing is opened either way.
    #[test]
    fn on_without_a_free_slot_or_with_a_refused_probe_arms_nothing() {
        let cfg = EventConfig::bare(1);
        let mut k = Fake {
            free: Ok(0),
            ..Fake::new()
        };
        // Two watches with --on's fit on CPU 0: refused, nothing left open.
        let refused = |k: &mut Fake| {
            arm_with(
                k,
                &mut watches(2),
                &cpus(&[0]),
                Targets::Cpus,
                &cfg,
                Fit::FreeRegisters,
            )
            .err()
            .expect("refused")
        };
        let r = refused(&mut k);
        assert_eq!(r.kind, Kind::NoFreeDebugRegister);
        assert!(
            r.to_string()
                .contains("--on needs a free debug register on every CPU"),
            "{r}"
        );
        let mut k = Fake {
            free: Err(libc::EINVAL),
            ..Fake::new()
        };
        let r = refused(&mut k);
        assert_eq!(r.kind, Kind::InvalidBreakpoint);
        let text = r.to_string();
        assert!(text.contains("at 0x1000/8 (EINVAL)"), "{text}");
        assert!(text.contains("nothing was armed"), "{text}");
        assert_eq!(k.open_now(), 0);
    }

    /// The refusal of arming every one of `watches` CPU-wide on `on` (bare events).
    fn refused_on_cpus(k: &mut Fake, mut watches: Vec<Watch>, on: &[u32]) -> Refusal {
        let cfg = EventConfig::bare(1);
        arm_with(k, &mut watches, &cpus(on), Targets::Cpus, &cfg, Fit::All)
            .err()
            .expect("refused")
    }

    /// A refusal for want of a debug register is worded with the registers free once everything opened
    /// was closed again.
    #[test]
    fn a_full_cpu_is_counted_after_the_rollback() {
        let mut k = Fake {
            fail_cpu: Some((1, libc::ENOSPC)),
            free_registers: Some(1),
            ..Fake::new()
        };
        let r = refused_on_cpus(&mut k, watches(2), &[0, 1]);
        assert_eq!(
            k.open_at_facts,
            Some(0),
            "counted after cpu 0's rings were closed"
        );
        assert_eq!(r.kind, Kind::NoFreeDebugRegister);
        let text = r.to_string();
        assert!(
            text.contains("cpu 1 has 1 free debug register, 2 needed"),
            "{text}"
        );
        assert!(text.contains("nothing was armed"), "{text}");
    }

    /// A CPU that comes online is opened alone, disabled, with the same rings.
    #[test]
    fn one_cpu_is_opened_alone_and_left_disabled() {
        let mut k = Fake::new();
        let rings = open_cpu(&set(2, &[0, 1], Targets::Cpus), 1, &mut k).expect("opened");
        assert_eq!(
            rings.iter().map(|r| (r.cpu, r.watch)).collect::<Vec<_>>(),
            [(1, 0), (1, 1)]
        );
        assert_eq!(k.log.borrow().enabled, 0);
    }

    #[test]
    fn the_scope_decides_the_targets_off_the_hit_path() {
        let samples = Binding::Scope {
            remove_on_exec: false,
        };
        assert_eq!(targets(&Scope::System, samples), Targets::Cpus);
        assert_eq!(targets(&Scope::Launched(7), samples), Targets::Task(7));
        assert_eq!(
            targets(&Scope::Processes(vec![7, 8]), samples),
            Targets::Threads(vec![7, 8])
        );
    }

    /// A live process counts its threads (this one has the test's and the one spawned here at least; other
    /// tests' threads come and go, so no exact number), and a process that is gone counts nothing.
    #[test]
    fn thread_count_is_the_kernels_and_a_gone_process_counts_zero() {
        let me = std::process::id();
        let stop = std::sync::Arc::new(std::sync::Barrier::new(2));
        let other = std::thread::spawn({
            let stop = stop.clone();
            move || {
                stop.wait();
            }
        });
        assert!(thread_count(&[me]) >= 2);
        stop.wait();
        other.join().expect("thread");
        assert_eq!(thread_count(&[u32::MAX - 1]), 0);
    }

    fn kernel_watch(addr: u64, len: u8) -> Watch {
        Watch {
            label: "__start_init_stack+0x3e01".into(),
            addr,
            len,
            access: Access::Write,
            module: None,
            per_cpu: None,
        }
    }

    /// A kernel that refuses every open of `w` on CPU 0 with `errno`, as root.
    fn refusing(errno: i32, w: &Watch) -> Fake {
        Fake {
            fail_cpu: Some((0, errno)),
            creds: Privilege::ROOT,
            bp: Some((w.addr, w.len)),
            ..Fake::new()
        }
    }

    /// A dry run's refusal of a 1-byte kernel watch is the run's: the same events opened (disabled,
    /// closed, never enabled), worded, coded and kinded as arming's, naming the watch's own address.
    #[test]
    fn a_refused_dry_run_reads_as_the_runs_refusal() {
        let w = kernel_watch(0xffff_ffff_82e0_3e01, 1);
        assert_eq!(AddressKind::of(w.addr, w.len), AddressKind::Kernel);
        let cfg = EventConfig::bare(1);
        let mut k = refusing(libc::EPERM, &w);
        let dry = dry_run_with(
            &mut k,
            std::slice::from_ref(&w),
            &cpus(&[0, 1]),
            Targets::Cpus,
            &cfg,
        )
        .expect("a refusal");
        assert_eq!((k.open_now(), k.log.borrow().enabled), (0, 0));
        let real = refused_on_cpus(&mut refusing(libc::EPERM, &w), vec![w], &[0, 1]);
        assert_eq!(dry, real);
        assert_eq!(dry.code, crate::error::ExitCode::NotPermitted);
        assert_eq!(dry.kind.as_str(), "kernel_breakpoints_refused");
        assert!(dry.what.contains("0xffffffff82e03e01 got"), "{}", dry.what);
    }

    /// Only what the run would be told whenever it ran ends a dry run: the debug registers in use now, a
    /// CPU going offline, a busy PMU or the descriptors do not; user addresses are not asked at all.
    #[test]
    fn only_a_lasting_refusal_ends_a_dry_run() {
        let w = [kernel_watch(0xffff_ffff_82e0_3e00, 8)];
        let cfg = EventConfig::bare(1);
        let dry = |errno| {
            let mut k = refusing(errno, &w[0]);
            dry_run_with(&mut k, &w, &cpus(&[0]), Targets::Cpus, &cfg)
        };
        for errno in [libc::EPERM, libc::EACCES, libc::EINVAL, libc::ENOENT] {
            assert!(dry(errno).is_some(), "{errno}");
        }
        for errno in [libc::ENOSPC, libc::ENODEV, libc::EBUSY, libc::EMFILE] {
            assert!(dry(errno).is_none(), "{errno}");
        }
        let mut k = refusing(libc::EPERM, &w[0]);
        assert!(dry_run_with(&mut k, &watches(2), &cpus(&[0]), Targets::Cpus, &cfg).is_none());
    }

    /// A per-thread dry run is refused as the per-thread arming is: by the thread it opened for.
    #[test]
    fn a_per_thread_dry_run_is_refused_by_its_thread() {
        let w = [kernel_watch(0xffff_ffff_82e0_3e00, 8)];
        let cfg = EventConfig::bare(1);
        let me = std::process::id();
        let mut k = Fake {
            readings: vec![vec![me]],
            ..refusing(libc::EPERM, &w[0])
        };
        let dry = dry_run_with(&mut k, &w, &cpus(&[0]), Targets::Threads(vec![me]), &cfg)
            .expect("a refusal");
        assert!(dry.what.starts_with(&format!("tid {me} (")), "{}", dry.what);
    }
}
