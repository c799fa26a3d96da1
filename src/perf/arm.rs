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

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::model::watch::Watch;
use crate::perf::event::{Bind, CpuEvent, Delivery, EventConfig, OpenError, Stage};
use crate::perf::refusal::{explain, Kind, Refusal};

/// Who a watch covers. `L` is a launched command as its layer holds it: the breakpoints need only its pid;
/// the plan holds the stopped process itself and hands the breakpoints [`Scope::arming`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope<L = u32> {
    /// Every task on each CPU.
    System,
    /// Every thread of these processes, and the threads they create later.
    Processes(Vec<u32>),
    /// A command stopped at its exec: its events are inherited by every thread it starts.
    Launched(L),
}

/// A launched command's process id, however the command is held.
pub trait Pid {
    fn pid(&self) -> u32;
}

impl Pid for u32 {
    fn pid(&self) -> u32 {
        *self
    }
}

impl<L: Pid> Scope<L> {
    /// The one answer to "is this watch system-wide?".
    pub fn system_wide(&self) -> bool {
        matches!(self, Scope::System)
    }

    /// The watched processes: none for a system-wide watch.
    pub fn pids(&self) -> Vec<u32> {
        match self {
            Scope::System => Vec::new(),
            Scope::Processes(pids) => pids.clone(),
            Scope::Launched(c) => vec![c.pid()],
        }
    }

    /// Who the breakpoints are opened for: the launched command by its pid.
    pub fn arming(&self) -> Scope {
        match self {
            Scope::System => Scope::System,
            Scope::Processes(pids) => Scope::Processes(pids.clone()),
            Scope::Launched(c) => Scope::Launched(c.pid()),
        }
    }
}

/// Readings of a process's thread list before arming gives up waiting for it to stop growing (threads
/// created by an armed thread are covered anyway; only ones created by a not-yet-armed one need a reading).
const MAX_THREAD_READINGS: usize = 100;

/// Events armed and enabled, in CPU then watch order.
pub struct Armed {
    pub events: Vec<CpuEvent>,
    /// CPUs that went offline while arming (ENODEV): not a failure, they are covered when they return.
    pub went_offline: Vec<u32>,
}

/// How many breakpoints like `watch` every one of `cpus` can take now, up to `most`: each is opened
/// (pinned, disabled, which reserves its debug register) until one CPU refuses, then all are closed. A
/// refusal of the very first open other than ENOSPC (no register free) is returned: the kernel will not
/// take such a breakpoint at all (a kernel address where kernel breakpoints are refused), and the caller
/// words it as an arming failure ([`explain`]).
pub fn free_slots(
    watch: &Watch,
    cpus: &BTreeSet<u32>,
    most: usize,
    cfg: &EventConfig,
) -> Result<usize, OpenError> {
    let cfg = EventConfig {
        track_tasks: false,
        delivery: Delivery::Samples {
            remove_on_exec: cfg.delivery.remove_on_exec(),
        },
        ..cfg.clone()
    };
    let attr = crate::perf::event::attr(watch, &cfg, Bind::Cpu);
    let mut held = Vec::new();
    for n in 0..most {
        for &cpu in cpus {
            match crate::perf::sys::perf_event_open(&attr, -1, cpu as i32) {
                Ok(fd) => held.push(fd),
                Err(err) if held.is_empty() && err.raw_os_error() != Some(libc::ENOSPC) => {
                    return Err(OpenError {
                        cpu,
                        tid: None,
                        stage: Stage::Open,
                        err,
                        bp: Some((watch.addr, watch.len)),
                    })
                }
                Err(_) => return Ok(n),
            }
        }
    }
    Ok(most)
}

/// Opens `watches` on one CPU: all or none.
pub fn open_cpu(
    watches: &[Watch],
    cpu: u32,
    cfg: &EventConfig,
) -> Result<Vec<CpuEvent>, OpenError> {
    watches
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let cfg = EventConfig {
                track_tasks: cfg.track_tasks && i == 0,
                ..cfg.clone()
            };
            CpuEvent::open(w, i, cpu, &cfg)
        })
        .collect()
}

/// Opens `watches` on one CPU for `scope`: all or none. Threads that exit meanwhile are skipped.
pub fn open_cpu_in(
    watches: &[Watch],
    cpu: u32,
    scope: &Scope,
    cfg: &EventConfig,
) -> Result<Vec<CpuEvent>, OpenError> {
    match scope {
        // On the hit path the process is chosen in the kernel: one event per CPU, whatever the scope.
        _ if matches!(cfg.delivery, Delivery::Hits(_)) => open_cpu(watches, cpu, cfg),
        Scope::System => open_cpu(watches, cpu, cfg),
        Scope::Launched(pid) => watches
            .iter()
            .enumerate()
            .map(|(i, w)| CpuEvent::open_bound(w, i, cpu, Bind::Task(*pid), &task_cfg(cfg, i)))
            .collect(),
        Scope::Processes(pids) => open_threads(watches, &BTreeSet::from([cpu]), pids, cfg),
    }
}

/// Arms `watches` on every CPU in `cpus`, or on none.
pub fn arm(watches: &[Watch], cpus: &BTreeSet<u32>, cfg: &EventConfig) -> Result<Armed, Refusal> {
    arm_with(watches, cpus, cfg, open_cpu)
}

/// [`arm`] for any [`Scope`].
pub fn arm_in(
    watches: &[Watch],
    cpus: &BTreeSet<u32>,
    scope: &Scope,
    cfg: &EventConfig,
) -> Result<Armed, Refusal> {
    match scope {
        _ if matches!(cfg.delivery, Delivery::Hits(_)) => arm(watches, cpus, cfg),
        Scope::System => arm(watches, cpus, cfg),
        Scope::Launched(_) => arm_with(watches, cpus, cfg, |w, cpu, cfg| {
            open_cpu_in(w, cpu, scope, cfg)
        }),
        Scope::Processes(pids) => {
            let events = open_threads(watches, cpus, pids, cfg)
                .map_err(|e| explain(&e, watches).nothing_armed())?;
            enable_all(events, Vec::new(), watches)
        }
    }
}

/// Only the first watch's events report task names and forks: more would repeat them.
pub fn task_cfg(cfg: &EventConfig, watch: usize) -> EventConfig {
    EventConfig {
        track_tasks: cfg.track_tasks && watch == 0,
        ..cfg.clone()
    }
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

/// One ring per CPU and watch, fed by every thread of `pids` on that CPU; the thread list is read again
/// until a reading has no thread left to arm.
fn open_threads(
    watches: &[Watch],
    cpus: &BTreeSet<u32>,
    pids: &[u32],
    cfg: &EventConfig,
) -> Result<Vec<CpuEvent>, OpenError> {
    let mut rings: BTreeMap<(u32, usize), CpuEvent> = BTreeMap::new();
    let mut done = HashSet::new();
    for _ in 0..MAX_THREAD_READINGS {
        let fresh: Vec<u32> = threads(pids)
            .into_iter()
            .filter(|t| !done.contains(t))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for tid in fresh {
            done.insert(tid);
            'cpus: for &cpu in cpus {
                for (i, w) in watches.iter().enumerate() {
                    let cfg = task_cfg(cfg, i);
                    let opened = match rings.get_mut(&(cpu, i)) {
                        Some(ring) => ring.attach(w, tid, &cfg),
                        None => CpuEvent::open_bound(w, i, cpu, Bind::Task(tid), &cfg).map(|ev| {
                            rings.insert((cpu, i), ev);
                        }),
                    };
                    match opened {
                        Ok(()) => {}
                        // Exited while being armed: its events, if any, can never fire.
                        Err(e) if e.thread_gone() => break 'cpus,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    Ok(rings.into_values().collect())
}

/// [`arm`] with the per-CPU open step supplied, so tests can make a chosen CPU fail or vanish mid-transaction.
pub fn arm_with(
    watches: &[Watch],
    cpus: &BTreeSet<u32>,
    cfg: &EventConfig,
    mut open: impl FnMut(&[Watch], u32, &EventConfig) -> Result<Vec<CpuEvent>, OpenError>,
) -> Result<Armed, Refusal> {
    let mut events = Vec::with_capacity(cpus.len() * watches.len());
    let mut went_offline = Vec::new();
    for &cpu in cpus {
        match open(watches, cpu, cfg) {
            Ok(evs) => events.extend(evs),
            Err(e) if e.stage == Stage::Open && e.err.raw_os_error() == Some(libc::ENODEV) => {
                went_offline.push(cpu)
            }
            // Returning drops `events`: every descriptor opened so far is closed, freeing its debug register.
            Err(e) => return Err(explain(&e, watches).nothing_armed()),
        }
    }
    if events.is_empty() {
        return Err(Refusal::arm(
            Kind::CpuOffline,
            format!(
                "no CPU could be armed: every requested CPU ({}) went offline",
                crate::cpulist::format(cpus)
            ),
        ));
    }
    enable_all(events, went_offline, watches)
}

/// The second half of the transaction: enable everything opened, or disable it all again.
fn enable_all(
    events: Vec<CpuEvent>,
    went_offline: Vec<u32>,
    watches: &[Watch],
) -> Result<Armed, Refusal> {
    if events.is_empty() {
        return Err(Refusal::arm(
            Kind::ProcessesExited,
            "no thread could be armed: every watched process exited while arming",
        ));
    }
    for ev in &events {
        if let Err(e) = ev.enable() {
            for ev in &events {
                let _ = ev.disable();
            }
            return Err(explain(&e, watches).nothing_armed());
        }
    }
    Ok(Armed {
        events,
        went_offline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
