//! Arming every requested CPU (and, for a process watch, every thread) as one transaction, so a failure
//! on one CPU never leaves a partial watch printing hits: every event is opened and mapped disabled first; only when all succeeded
//! are they enabled. If any step fails on any CPU or thread, every event already opened is closed and
//! nothing has produced a single hit.
//!
//! A process watch ([`Scope::Processes`]) opens, per CPU and watch, one event per thread, each `inherit` +
//! `inherit_thread` so the threads a thread creates later are covered by the kernel, all redirected into one
//! ring per CPU and watch; the thread list is read again until a reading finds no thread left to arm. Only
//! the threads of a pid that still names the process planned are read ([`Planned`]): a process that
//! exited before or while being armed has none, whatever process has its pid by then. A
//! launched command ([`Scope::Launched`]) is armed while it is stopped at its exec, before any thread
//! exists: one inherited event per CPU and watch, no thread list at all.
//!
//! Arming is one call ([`arm_in`]): `--on`'s watches kept to the debug registers free on every CPU, the
//! events prepared once ([`Prepared`]: every attribute built, per CPU and watch), then the transaction,
//! which only opens, enables and rolls back that set. Everything it asks of the machine goes through a
//! [`Kernel`] ([`Perf`] is the real one; a test drives the whole arming with a fake). A failure
//! ([`Failure`], whose wording is [`crate::perf::refusal`]'s) is explained once, at the end, with the
//! facts its wording needs read after the rollback ([`Kernel::facts`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io;
use std::time::Duration;

use crate::model::scope::{Named, Scope};
use crate::model::watch::Watch;
use crate::perf::denial::AddressKind;
use crate::perf::event::{
    self, Bind, Binding, CpuEvent, EventConfig, OpenError, Prepared, RingSpec, Stage, Targets,
};
use crate::perf::probe;
use crate::perf::refusal::{Facts, Failure, Refusal};

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
    /// Whether `pid` still names the `-p` process planned under it ([`Planned::names`]): not once that
    /// process has exited, whatever process has the pid now.
    fn names_planned(&mut self, pid: u32) -> bool;
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

/// The kernel's perf events, opened as `cfg` says (its ring size and the programs its delivery attaches),
/// for the threads of the processes `planned`.
pub struct Perf<'a> {
    pub cfg: &'a EventConfig,
    pub planned: Planned<'a>,
}

/// Which process each `-p` pid named when the watch was planned, and how to tell whether it still does.
/// A pid alone does not say it: once its process has exited the kernel gives the number to the next
/// process that needs one, whose threads arming must not take for the planned one's (their stores would
/// be counted by the hit program, `--count` among them, before the tracer drops them as not the
/// process's).
#[derive(Clone, Copy)]
pub struct Planned<'a> {
    /// Each `-p` process's pid and start time (clock ticks after boot) as planned (the plan's
    /// `Started`).
    pub starts: &'a [(u32, u64)],
    /// A pid's start time now (`/proc/PID/stat`: `ENOENT` or `ESRCH` once no process has it; the
    /// plan's `read_start_time`, whose /proc reading is the plan's machine's).
    pub start_time: fn(u32) -> io::Result<u64>,
}

impl Planned<'_> {
    /// No process planned (a dry run opens and closes at once; nothing it opens can take a hit).
    pub const NONE: Planned<'static> = Planned {
        starts: &[],
        start_time: |_| Ok(0),
    };

    /// Whether `pid` names the process planned: its start time now is the planned one (any process given
    /// the pid after that one exited started later). A pid with no start planned, or whose start time
    /// cannot be read for another reason than the process being gone, is taken as planned ([`Named`], as
    /// the session's check takes it, `crate::trace::watched`).
    pub fn names(&self, pid: u32) -> bool {
        let Some(&(_, ticks)) = self.starts.iter().find(|(p, _)| *p == pid) else {
            return true;
        };
        Named::by(ticks, (self.start_time)(pid)) == Named::Planned
    }
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

    fn names_planned(&mut self, pid: u32) -> bool {
        self.planned.names(pid)
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
        Facts::read(e)
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

/// Which of the watches are armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Every one, or nothing.
    All,
    /// `--on`'s slots: as many as every CPU has a debug register free for (at least one).
    FreeRegisters,
}

/// Arms `watches` on every one of `cpus` for `scope`, or nothing, on the kernel's perf events
/// ([`arm_with`]), a process watch on the threads of the processes `planned`; `fit` says whether
/// `watches` are first kept to the debug registers free.
pub fn arm_in(
    watches: &mut Vec<Watch>,
    cpus: &BTreeSet<u32>,
    scope: &Scope,
    planned: Planned,
    cfg: &EventConfig,
    fit: Fit,
) -> Result<Armed, Refusal> {
    let targets = targets(scope, cfg.binding);
    arm_with(&mut Perf { cfg, planned }, watches, cpus, targets, cfg, fit)
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
        Err(f) => Err(Failure::explain(&f, watches, |e| kernel.facts(e))),
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
    // Nothing opened (every process gone): nothing to enable, no pause for copies.
    let threads = matches!(set.targets, Targets::Threads(_)) && !events.is_empty();
    let enabled = event::passes(threads).try_for_each(|pause| {
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
            // No event at all is no failure: every process exited (or its pid is another's) before a
            // thread of it was armed, and nothing is held. The session finds them gone and the run ends
            // as it begins, as with one breakpoint per CPU (`crate::trace::watched`).
            let (events, settled) = open_threads(set, pids, kernel).map_err(Failure::Open)?;
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
    let mut kernel = Perf {
        cfg: &cfg,
        planned: Planned::NONE,
    };
    dry_run_with(&mut kernel, watches, cpus, targets, &cfg)
}

/// The dry run on `kernel`: the kernel addresses' events prepared and opened as arming opens them
/// (disabled), then closed at once, never enabled, so nothing is armed. A refusal is explained as
/// arming's (`watches` being every watch of the plan), exit code and all, when it says what the run
/// would be told whenever it ran ([`Failure::lasting`]).
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
    if !failure.lasting() {
        return None;
    }
    Some(failure.explain(watches, |e| kernel.facts(e)))
}

/// Opens `set`'s rings on one CPU, disabled: all or none. Threads that exit meanwhile are skipped. What
/// a CPU that comes online is armed with (the caller enables them). Also returns whether a process's
/// thread list settled (`open_threads`; always for the other targets).
pub fn open_cpu<K: Kernel>(
    set: &Prepared,
    cpu: u32,
    kernel: &mut K,
) -> Result<(Vec<K::Ring>, bool), OpenError> {
    let bind = match &set.targets {
        Targets::Threads(pids) => return open_threads(set, pids, kernel),
        Targets::Cpus => Bind::Cpu,
        Targets::Task(pid) => Bind::Task(*pid),
    };
    let rings = set.cpus.iter().filter(|(c, _)| *c == cpu);
    rings
        .flat_map(|(_, specs)| specs)
        .map(|spec| kernel.open_ring(spec, bind))
        .collect::<Result<_, _>>()
        .map(|rings| (rings, true))
}

/// [`open_cpu`] for `watches` on `cpu` for `scope`, through the kernel's perf events, a process watch on
/// the threads of the processes `planned` only: a `-p` process that exited during the run may have left
/// its pid to another, whose threads would take its events (their stores counted by the hit program,
/// `--count` among them).
pub fn open_cpu_in(
    watches: &[Watch],
    cpu: u32,
    scope: &Scope,
    planned: Planned,
    cfg: &EventConfig,
) -> Result<(Vec<CpuEvent>, bool), OpenError> {
    let set = Prepared::new(
        watches,
        &BTreeSet::from([cpu]),
        targets(scope, cfg.binding),
        cfg,
    );
    open_cpu(&set, cpu, &mut Perf { cfg, planned })
}

/// What the run says at its end of a CPU that came online and was armed unsettled ([`open_cpu_in`]
/// under a process watch whose process was still creating threads at the last reading).
pub fn unsettled_on(cpu: u32) -> String {
    format!(
        "cpu{cpu} came online while the process was still creating threads (the last of \
         {MAX_THREAD_READINGS} readings of its thread list found new ones): a thread created then by one \
         not yet armed on cpu{cpu} is not watched there, and its stores there are in no count"
    )
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
        // A CPU-wide or launched set: no thread list to settle.
        match open_cpu(set, cpu, kernel) {
            Ok((evs, _)) => events.extend(evs),
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
/// ([`Armed::unsettled`]). A reading that lists no thread at all ends it at once, settled, with no pause:
/// every process of `pids` is gone, so no thread of theirs is left being created.
///
/// Only the threads of the planned processes are read (`planned_threads`): a pid whose process has
/// exited, whatever process has the number by then, is read as gone from then on, and if every one is,
/// nothing is opened (no failure: see `open_set`). What is left: a process that exits
/// after a reading, between the check and the opens of its threads' events, and whose pid (or a thread's
/// tid) is given to another task before those opens, has that task's event opened in its place. Pids
/// are handed out in turn, so that takes every other number being used first, or a program asking for
/// that number (as checkpoint-restore tools do), while the reading's events are opened (milliseconds;
/// longer for thousands of threads); the session's own check of the start time
/// (`crate::trace::watched`) then keeps that task's stores from the hits, not from `--count`.
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
    // The pids still naming their planned process.
    let mut planned = pids.to_vec();
    for reading in 0..MAX_THREAD_READINGS {
        let now = planned_threads(kernel, &mut planned);
        if now.is_empty() {
            settled = true;
            break;
        }
        let fresh: Vec<u32> = now.into_iter().filter(|t| !done.contains(t)).collect();
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

/// The threads of those of `pids` that name their planned process ([`Kernel::names_planned`]), now;
/// those that no longer do are taken out of `pids` (a process once gone is gone for good). Each pid is
/// checked before its list is read, so a newcomer's is not, and again after: the process may exit, and
/// another take its pid, between the check and the reading. A pid that names the planned process after
/// the reading named it all along (a process given the pid after it exited would have started later), so
/// the list read was that process's.
fn planned_threads<K: Kernel>(kernel: &mut K, pids: &mut Vec<u32>) -> Vec<u32> {
    let mut tids = Vec::new();
    pids.retain(|&pid| {
        if !kernel.names_planned(pid) {
            return false;
        }
        let listed = kernel.threads(&[pid]);
        let still = kernel.names_planned(pid);
        if still {
            tids.extend(listed);
        }
        still
    });
    tids.sort_unstable();
    tids
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
mod tests;
