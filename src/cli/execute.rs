//! `execute(plan)`: arms a planned watch and runs its session until it stops. What each stage needs is
//! taken from the plan once ([`HandOff`]), how the events are opened among it (their binding, rings and
//! BPF programs, as [`Events`]); the session's other parts are opened ([`Parts`]), then the events'
//! programs loaded, every CPU armed as one transaction ([`arm::arm_in`]), the armed set announced and the
//! session run: a descent from the command line to the kernel, each stage handed what it needs.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::time::Duration;

use ksymwatch_symbols::{LineSource, UserSymbols};

use crate::cli::advice;
use crate::cli::parts::Parts;
use crate::cli::prefetch::Prefetch;
use crate::cli::ring_size::{self, Coverage};
use crate::config::plan::{
    read_start_time, Delivery, Hits, Launch, ObjectPlan, Scope, WatchPlan, Writers,
};
use crate::error::{Error, Result};
// The scope's choices for any launched command, so the mapping to `Watching` is tested without one.
use crate::model::scope::{Pid, Scope as ScopeOf};
use crate::perf::arm;
use crate::perf::bpf::hit_set::{Checks, HitKind, HitSet, Watching};
use crate::perf::bpf::objects::ObjectSource;
use crate::perf::event::{Binding, Events};
use crate::perf::sys;
use crate::report::{Header, Output, StreamEvent};
use crate::stderr;
use crate::trace::comm::Comms;
use crate::trace::objects::{ObjectWatch, Slots};
use crate::trace::pace::{HIT_SORT_SLACK_NS, SORT_SLACK_NS};
use crate::trace::session::{Session, Setup};

/// How long after `armed` the symbol cache starts being written (at exit at the latest).
const CACHE_WRITE_DELAY: Duration = Duration::from_millis(100);

/// What the `# armed` line and the marks right after it say, taken from the armed set before the session
/// owns it.
struct ArmedLine {
    /// Every breakpoint event, per-thread ones included: a ring of the per-thread path holds one per thread.
    events: usize,
    cpus: BTreeSet<u32>,
    /// CPUs that went offline while arming: not a failure, but not covered until they return.
    went_offline: Vec<u32>,
    /// The threads armed (per-thread events; none on the hit path, whose events are per CPU).
    threads: usize,
    /// The thread list still grew at its last reading ([`arm::Armed::unsettled`]).
    unsettled: bool,
}

impl ArmedLine {
    /// `requested`: the CPUs said when nothing was armed (every `-p` process gone before a thread of
    /// it was, on the per-thread path: the run then ends as it begins).
    fn of(armed: &arm::Armed, requested: &BTreeSet<u32>) -> ArmedLine {
        let cpus: BTreeSet<u32> = armed.events.iter().map(|e| e.cpu).collect();
        ArmedLine {
            events: armed.events.iter().map(|e| e.breakpoints()).sum(),
            cpus: match cpus.is_empty() {
                true => requested.clone(),
                false => cpus,
            },
            went_offline: armed.went_offline.clone(),
            threads: armed
                .events
                .iter()
                .flat_map(|e| e.tids())
                .collect::<BTreeSet<u32>>()
                .len(),
            unsettled: armed.unsettled,
        }
    }
}

/// The processes a watch covers at the start, read once before anything is opened: each (pid, comm) for
/// the header, and their threads by the kernel's own count (one read per process; listing 100,000 threads
/// would take longer than arming them), which sizes the hit rings and is the header's count on the hit
/// path. Empty for a system-wide watch.
struct Covered {
    processes: Vec<(u32, String)>,
    threads: usize,
}

impl Covered {
    fn read(scope: &Scope) -> Covered {
        let pids = scope.pids();
        let threads = arm::thread_count(&pids);
        let processes = pids
            .into_iter()
            .map(|pid| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .map(|s| s.trim_end().to_string())
                    .unwrap_or_else(|_| "?".into());
                (pid, comm)
            })
            .collect();
        Covered { processes, threads }
    }
}

/// What each stage of [`execute`] needs from the plan, taken once before anything is opened.
struct HandOff<'p> {
    /// The session's title (`--flamegraph`'s): the command and its targets.
    title: String,
    /// How every breakpoint event is opened: the plan's delivery as the events take it ([`events`]).
    events: Events<'p>,
    /// How long the session holds a record back for older ones from the other rings.
    sort_slack_ns: u64,
    /// Who the breakpoints are opened for (a launched command by its pid).
    scope: crate::model::scope::Scope,
    /// What the watch covers at the start, for the header.
    covered: Covered,
    /// The header counts the threads the kernel counts (the hit path: its programs cover every thread of
    /// the processes), or else the threads armed (one event each).
    threads_by_kernel: bool,
    /// The header's `--if`, `--on` and `--cgroup` lines.
    condition: Option<String>,
    objects: Option<String>,
    cgroups: Vec<String>,
    /// `--on` arms as many of its slots as debug registers are free; any other watch arms all or none.
    fit: arm::Fit,
    /// Whether the stream is stdout's (with `-o FILE`, `--folded`'s stacks are: their reader gone, they
    /// cannot be delivered).
    stream_on_stdout: bool,
}

impl<'p> HandOff<'p> {
    fn of(plan: &'p WatchPlan) -> HandOff<'p> {
        let labels: Vec<&str> = plan.watches().iter().map(|w| w.label.as_str()).collect();
        let covered = Covered::read(plan.scope());
        HandOff {
            title: format!("ksymwatch {} {}", plan.access().word(), labels.join(" ")),
            events: events(plan, hit_ring_pages(plan, covered.threads)),
            sort_slack_ns: sort_slack_ns(plan.delivery().hits),
            scope: plan.scope().arming(),
            covered,
            threads_by_kernel: plan.delivery().events == Binding::Cpus,
            condition: plan.values().condition().map(|c| c.to_string()),
            objects: plan.objects().map(ObjectPlan::describe),
            cgroups: plan
                .filter()
                .cgroups
                .iter()
                .map(|c| c.path.clone())
                .collect(),
            fit: match plan.objects() {
                Some(_) => arm::Fit::FreeRegisters,
                None => arm::Fit::All,
            },
            stream_on_stdout: plan.outputs().stdout_carries_a_product(),
        }
    }
}

/// Each hit ring buffer's data pages: `--buffer-pages`, or sized from the CPUs and what the watch covers
/// (`threads`: a process watch's, [`ring_size`]).
fn hit_ring_pages(plan: &WatchPlan, threads: usize) -> usize {
    if let Some(pages) = plan.running().buffer_pages() {
        return pages;
    }
    let coverage = match plan.scope() {
        Scope::System => Coverage::System,
        Scope::Processes(_) => Coverage::Threads(threads as u64),
        Scope::Launched(_) => Coverage::Launch,
    };
    ring_size::hit_ring_pages(
        plan.cpus().now.len(),
        plan.watches().len(),
        coverage,
        plan.values().read(),
        sys::page_size(),
    )
}

/// Every breakpoint event of the watch: its BPF programs ([`programs`]), each hit ring buffer of
/// `hit_ring_pages` data pages, `--buffer-pages` perf rings.
fn events(plan: &WatchPlan, hit_ring_pages: usize) -> Events<'_> {
    let delivery = plan.delivery();
    Events {
        ring_pages: plan
            .running()
            .buffer_pages()
            .unwrap_or(ring_size::PERF_RING_PAGES),
        user_only: plan.writers() == Writers::UserSpaceOnly,
        percpu: plan.kernel().percpu(),
        checks: Checks {
            watches: plan.watches(),
            condition: plan.values().condition(),
            filter: plan.filter(),
        },
        binding: delivery.events,
        programs: programs(plan, hit_ring_pages),
    }
}

/// The hit programs the plan's delivery attaches, if any ([`watching`]). `ring_pages`: each hit ring
/// buffer's data pages.
fn programs(plan: &WatchPlan, ring_pages: usize) -> Option<HitSet> {
    Some(HitSet {
        kind: HitKind {
            watching: watching(plan.delivery(), plan.scope())?,
            written: plan.values().read(),
        },
        ring_pages,
        // Not where the stream rejects hits the programs keep, which would use the count up: the plan's
        // decision ([`WatchPlan::kernel_count`]).
        count: plan.kernel_count(),
    })
}

/// Whom the hit programs `delivery` attaches watch, if it attaches any: on one event per CPU every task,
/// or the scope's processes (a launched command's children followed); on the per-thread path the threads
/// the events choose, which the kernel keeps across an exec unless `--remove-on-exec` drops them.
fn watching<L: Pid>(delivery: Delivery, scope: &ScopeOf<L>) -> Option<Watching> {
    let watching = match (delivery.hits, delivery.events, scope) {
        (Hits::Samples, _, _) => return None,
        (Hits::Program, Binding::Scope { .. }, _) => Watching::Threads,
        (Hits::Program, Binding::Cpus, ScopeOf::System) => Watching::Everyone,
        (Hits::Program, Binding::Cpus, ScopeOf::Processes(_)) => Watching::Processes {
            pids: scope.pids(),
            follow_children: false,
        },
        (Hits::Program, Binding::Cpus, ScopeOf::Launched(_)) => Watching::Processes {
            pids: scope.pids(),
            follow_children: true,
        },
    };
    Some(watching)
}

/// How long a record waits for older ones from the other rings as the `hits` come: a hit record is
/// written a microsecond or so after its time, a perf sample with its kernel-walked call chain tens later
/// ([`crate::trace::pace`]).
fn sort_slack_ns(hits: Hits) -> u64 {
    match hits {
        Hits::Program => HIT_SORT_SLACK_NS,
        Hits::Samples => SORT_SLACK_NS,
    }
}

/// Arms `plan` and runs the session until it stops; the exit status: 0, or with `-- CMD` the command's
/// own. `prefetch`: the work started before the plan. One pass down, in order: what each stage needs is
/// taken from the plan, with the processes it covers and how the events are opened ([`HandOff`]), and the
/// prefetch scan's result joined; the session's other parts are opened ([`Parts`]);
/// the events' programs are loaded ([`Events::load_programs`]); every CPU is armed as one transaction
/// ([`arm::arm_in`], `--on`'s slots kept to the free registers first); `--on`'s objects are loaded; the
/// session starts, the armed set is announced, a launched command goes on, and the session runs.
pub fn execute(mut plan: WatchPlan, prefetch: Prefetch) -> Result<i32> {
    let mut launched = plan.take_command();
    let hand = HandOff::of(&plan);
    let Prefetch { task_scan, warmup } = prefetch;
    let (comms, user) = scanned_tasks(task_scan, launched.as_deref());
    let mut parts = Parts::open(&plan, &hand.title)?;
    let mut warn = |w: &str| stderr::line(format_args!("ksymwatch: warning: {w}"));
    let cfg = hand
        .events
        .load_programs(&mut warn)
        .map_err(advice::loading)?;
    if let Some(w) = warmup {
        w.finish();
    }
    let cpus = &plan.cpus().now;
    let mut watches = plan.watches().to_vec();
    // Only the `-p` processes planned are armed, not whatever has their pids by now.
    let starts: Vec<(u32, u64)> = plan.started().iter().map(|s| (s.pid, s.ticks)).collect();
    let planned = arm::Planned {
        starts: &starts,
        start_time: read_start_time,
    };
    let armed = match arm::arm_in(&mut watches, cpus, &hand.scope, planned, &cfg, hand.fit) {
        Ok(armed) => armed,
        Err(r) => {
            // A JSON stream says why it is empty; the error line itself is main's.
            let _ = parts
                .out
                .refused(r.kind.as_str(), &advice::refusal(&r), r.code as i32);
            return Err(advice::arming(r));
        }
    };
    let armed_line = ArmedLine::of(&armed, cpus);
    // `--on`'s source, loaded once its slots are armed (a refusal to arm them is arming's), with an output
    // ring on each CPU; the armed slots wait, parked.
    let objects = match plan.objects() {
        Some(o) => Some(ObjectWatch {
            source: ObjectSource::load(&o.attach, o.select, cpus)?,
            parked: (0..watches.len()).map(|i| o.parked(i)).collect(),
            allocators: o.allocators.clone(),
            reports: o.reports,
            slots: Slots::new(watches.len(), o.rotate),
            target: o.target.clone(),
            records: Vec::new(),
        }),
        None => None,
    };
    let (kernel, running, values) = (plan.kernel(), plan.running(), plan.values());
    let header = Header {
        watches: &watches,
        cpus,
        source: &kernel.source_text(),
        processes: &hand.covered.processes,
        threads: match hand.threads_by_kernel {
            true => hand.covered.threads,
            false => armed_line.threads,
        },
        values: values.read(),
        condition: hand.condition.as_deref(),
        objects: hand.objects.as_deref(),
        cgroups: &hand.cgroups,
    };
    // What the programs loaded follow (one that could not be attached was warned of).
    let following = cfg.delivery.following();
    let setup = Setup {
        watches: &watches,
        symbols: parts.symbols,
        cfg,
        limits: running.limits(),
        filter: plan.filter().clone(),
        tally: plan.outputs().tally(),
        lines: parts.lines.as_ref().map(|l| l as &dyn LineSource),
        control: parts.control,
        scope: hand.scope,
        started: plan.started(),
        comms,
        user,
        symbols_origin: kernel.origin(),
        old_values: plan.old_values(),
        following,
        sort_slack_ns: hand.sort_slack_ns,
        cgroups: parts.cgroups,
        flight: parts.recorder,
        advise: advice::refusal,
        stream_on_stdout: hand.stream_on_stdout,
    };
    // `armed` goes out the moment every breakpoint is enabled; the session learns every live task's name
    // right after (a script starts its workload on that line: a task the scan misses is one that started
    // after arming, and the FORK/COMM records name it). Those alive before were named, and their maps
    // read, while the symbols loaded (`task_scan`).
    let mut session = Session::new(setup, parts.out, armed, parts.signals, Some(parts.hotplug))?;
    if armed_line.unsettled {
        let w = arm::UNSETTLED;
        warn(w);
        session.note(w);
    }
    if let Some(o) = objects {
        session.watch_objects(o)?;
    }
    // The header, `# armed`, and a mark for each CPU that went offline while arming (the loop arms it
    // when it returns).
    let out = session.out();
    let announced = out
        .header(&header)
        .and_then(|()| out.armed(armed_line.events, &armed_line.cpus, sys::monotonic_ns()))
        .and_then(|()| {
            armed_line.went_offline.iter().try_for_each(|&cpu| {
                out.event(&StreamEvent::CpuOffline { cpu }, sys::monotonic_ns())
            })
        });
    // The symbol cache is written a little after `armed`, off the path from start to the first hits: a
    // CPU busy writing it is a CPU that does not go idle (or run the writer) when the watch is new.
    ksymwatch_symbols::cache::start_writes_after(CACHE_WRITE_DELAY);
    session.learn_tasks();
    match announced {
        Ok(()) => {}
        // stdout is already closed: a normal, quiet end. Dropping the session releases every breakpoint.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(0),
        Err(e) => return Err(Error::runtime("writing output").caused_by(e)),
    }
    if let Some(l) = launched.as_mut() {
        l.release()?;
    }
    // The reader (this thread) runs before the writers on its CPU, however many are runnable: each wake-up
    // drains what the rings held when it began (bounded by their size) and it sleeps in epoll between, so
    // it cannot starve the CPU. Refused (no CAP_SYS_NICE): it reads at the normal priority, as before.
    if let Some(priority) = running.realtime() {
        let _ = sys::set_fifo(priority);
    }
    session.run()?;
    let _ = io::stdout().flush();
    // The command's status if it has ended; a run stopped first (signal, --duration, --count) leaves it
    // running unwatched and ends as a watch of a running process does.
    Ok(launched.as_mut().and_then(|l| l.status()).unwrap_or(0))
}

/// The task names and process maps the prefetch scan read, with a launched command's maps added.
fn scanned_tasks(
    task_scan: Option<std::thread::JoinHandle<(Comms, UserSymbols)>>,
    launched: Option<&dyn Launch>,
) -> (Comms, UserSymbols) {
    // Joined before anything is loaded or armed: the scan is long over by now (a few ms, against the
    // symbol load's tens).
    let (comms, mut user) = task_scan.and_then(|t| t.join().ok()).unwrap_or_default();
    // A launched command started after the scan, and the kernel mapped its executable at its exec, before
    // any event existed to report it: read it while the command is stopped there, or a command that exits
    // right after its hits leaves them unnamed.
    if let Some(l) = launched {
        user.read_process(l.pid());
    }
    (comms, user)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hit records wait for the hit rings' slack, perf samples for the perf rings', as the plan's delivery
    /// says.
    #[test]
    fn the_sort_slack_follows_the_delivery() {
        let slack = |hits, events| sort_slack_ns(Delivery { hits, events }.hits);
        assert_eq!(slack(Hits::Program, Binding::Cpus), HIT_SORT_SLACK_NS);
        assert_eq!(slack(Hits::Samples, Binding::Cpus), SORT_SLACK_NS);
        let per_thread = Binding::Scope {
            remove_on_exec: true,
        };
        assert_eq!(slack(Hits::Samples, per_thread), SORT_SLACK_NS);
        // Reading values, every thread's event runs the hit program: its records are hit records.
        assert_eq!(slack(Hits::Program, per_thread), HIT_SORT_SLACK_NS);
    }

    /// The hit programs watch every task or the scope's processes on one event per CPU (a launched
    /// command's children followed), the events' threads on the per-thread path, and nobody off the hit
    /// path.
    #[test]
    fn the_hit_programs_watch_whom_the_delivery_and_scope_say() {
        let cpus = Delivery {
            hits: Hits::Program,
            events: Binding::Cpus,
        };
        let per_thread = Delivery {
            hits: Hits::Program,
            events: Binding::Scope {
                remove_on_exec: true,
            },
        };
        let system = ScopeOf::<u32>::System;
        let processes = ScopeOf::<u32>::Processes(vec![5, 6]);
        let launched = ScopeOf::<u32>::Launched(7);
        assert_eq!(watching(cpus, &system), Some(Watching::Everyone));
        assert_eq!(
            watching(cpus, &processes),
            Some(Watching::Processes {
                pids: vec![5, 6],
                follow_children: false
            })
        );
        assert_eq!(
            watching(cpus, &launched),
            Some(Watching::Processes {
                pids: vec![7],
                follow_children: true
            })
        );
        assert_eq!(watching(per_thread, &processes), Some(Watching::Threads));
        assert_eq!(watching(per_thread, &launched), Some(Watching::Threads));
        for events in [cpus.events, per_thread.events] {
            let samples = Delivery {
                hits: Hits::Samples,
                events,
            };
            assert_eq!(watching(samples, &processes), None);
        }
    }

    /// A process watch's processes are read with their names and the kernel's count of their threads; a
    /// system-wide watch covers none.
    #[test]
    fn covered_reads_each_process_and_its_threads_once() {
        let me = std::process::id();
        let covered = Covered::read(&Scope::Processes(vec![me]));
        let comm = std::fs::read_to_string("/proc/self/comm").expect("comm");
        assert_eq!(covered.processes, [(me, comm.trim_end().to_string())]);
        assert!(covered.threads >= 1, "{}", covered.threads);
        let none = Covered::read(&Scope::System);
        assert!(none.processes.is_empty());
        assert_eq!(none.threads, 0);
    }
}
