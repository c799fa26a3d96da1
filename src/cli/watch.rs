//! `ksymwatch write|rw`: resolve the targets, arm every CPU as one transaction, stream hits until stopped.

use std::collections::BTreeSet;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ksymwatch_symbols::{LineSource, UserSymbols, VmlinuxLines};

use crate::cli::advice;
use crate::cli::args::WatchArgs;
use crate::cli::launch;
use crate::cli::otlp;
use crate::cli::output_file::{self, Named};
use crate::cli::request;
use crate::cli::ring_size::{self, Coverage};
use crate::config::flight::Flight;
use crate::config::plan::options::Decided;
use crate::config::plan::{
    self, Delivery, FoldedTo, Launch, ObjectPlan, Outputs, RealHost, Scope, WatchPlan, Writers,
};
use crate::config::request::Format;
use crate::config::symbols::FileSymbols;
use crate::cpulist;
use crate::error::{Context, Error, ExitCode, Result};
use crate::model::watch::{Access, Watch};
use crate::perf::arm;
use crate::perf::bpf::hit_set::{HitKind, HitPrograms};
use crate::perf::bpf::objects::ObjectSource;
use crate::perf::bpf::trigger::Tracepoint;
use crate::perf::bpf::ValuePrograms;
use crate::perf::event::{self, EventConfig};
use crate::perf::refusal::{self, Refusal};
use crate::perf::sys::{self, SignalFd};
use crate::perf::warmup::Warmup;
use crate::report::folded::{Folded, Sink};
use crate::report::ftrace::Ftrace;
use crate::report::json::Json;
use crate::report::otlp::Otlp;
use crate::report::perfetto::{Clocks, Perfetto};
use crate::report::status::Status;
use crate::report::{Header, Output, Quiet, StreamEvent, Tee};
use crate::stderr::{self, Stderr};
use crate::trace::comm::Comms;
use crate::trace::control::Control;
use crate::trace::flight::Recorder;
use crate::trace::hotplug::Hotplug;
use crate::trace::moves::Controller;
use crate::trace::objects::ObjectWatch;
use crate::trace::objects::Slots;
use crate::trace::session::{Session, Setup};

/// The output file `path` of option `flag`, buffered; its write errors name `flag` and `path`.
fn create(path: &Path, flag: &str) -> Result<Box<dyn Write>> {
    let file = BufWriter::new(output_file::create(path, flag)?);
    Ok(Box::new(Named::file(file, flag, path)))
}

/// The printers `args` ask for, in the order they run. Files are created now, before anything is armed and
/// before the stop signals are blocked, so a bad path fails at once instead of after a long session (and
/// an open that did block could still be interrupted; see `output_file` for why none does).
fn outputs(args: &Outputs, title: &str) -> Result<Tee> {
    let stdout = || {
        let out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
        Named::new(out, "stdout".to_string())
    };
    let stream_sink = || -> Result<Box<dyn Write>> {
        match &args.stream_file {
            Some(path) => {
                let file =
                    BufWriter::with_capacity(1 << 16, output_file::create(path, "--output")?);
                Ok(Box::new(Named::file(file, "--output", path)))
            }
            None => Ok(Box::new(stdout())),
        }
    };
    // stderr carries messages, never the product: its failure must not end the session (crate::stderr).
    let quiet = args.quiet;
    let stream: Box<dyn Output> = match (args.format, quiet) {
        (Format::Json, false) => Box::new(Json::new(stream_sink()?, Stderr)),
        (Format::Json, true) => Box::new(Quiet::new(Json::new(stream_sink()?, Stderr), Stderr)),
        (Format::OtlpJson, quiet) => {
            let o = Otlp::new(stream_sink()?, Stderr, &otlp::resource(), otlp::clock());
            if quiet {
                Box::new(Quiet::new(o, Stderr))
            } else {
                Box::new(o)
            }
        }
        (Format::Text, false) => Box::new(Ftrace::new(stream_sink()?, Stderr).with_top(args.top)),
        (Format::Text, true) => Box::new(Quiet::new(
            Ftrace::new(stream_sink()?, Stderr).with_top(args.top),
            Stderr,
        )),
    };
    // The status line shares the terminal with a stream on stdout only if stdout is elsewhere; first in the
    // tee so it is cleared before any end-of-session report.
    let status = args.status
        && io::stderr().is_terminal()
        && (quiet || args.stream_file.is_some() || !io::stdout().is_terminal());
    let mut outs: Vec<Box<dyn Output>> = Vec::new();
    if status {
        outs.push(Box::new(Status::new()));
    }
    outs.push(stream);
    if let Some(folded) = &args.folded {
        let sink = match folded {
            FoldedTo::Stdout => Box::new(stdout()),
            FoldedTo::File(path) => create(path, "--folded")?,
        };
        outs.push(Box::new(Folded::new(Sink::Lines(sink))));
    }
    if let Some(path) = &args.flamegraph {
        let sink = create(path, "--flamegraph")?;
        outs.push(Box::new(Folded::new(Sink::Svg(sink, title.to_string()))));
    }
    if let Some(path) = &args.perfetto {
        let clocks = Clocks {
            monotonic_ns: sys::monotonic_ns(),
            boottime_ns: sys::boottime_ns(),
        };
        outs.push(Box::new(Perfetto::new(
            create(path, "--perfetto")?,
            Some(clocks),
        )));
    }
    Ok(Tee(outs))
}

/// Exit status of the run: 0, or with `-- CMD` the command's own.
pub fn run(args: WatchArgs, access: Access) -> Result<i32> {
    let dry_run = args.dry_run;
    // clap gives an empty command for a bare trailing `--`, which is a missing command.
    let dashes = std::env::args_os().skip(1).any(|a| a == "--");
    let request = request::watch(args, access, dashes);
    let mut machine = RealHost::new(launch::start);
    let decided = plan::options::decide(request, &mut machine)?;
    // Started before the targets are resolved, to overlap with the symbol loading: every live task's
    // name and process's maps (a writer already running that exits right after its hits must have had
    // them read, and a read after `armed` would race with a script that starts it on that line), and the
    // first CPU-bound breakpoint open, which waits out an RCU grace period. A dry run arms nothing.
    let prefetch = (!dry_run).then(|| Prefetch::start(&decided));
    let plan = plan::resolve(decided, &mut machine)?;
    match prefetch {
        Some(prefetch) => execute(plan, prefetch, &machine),
        None => {
            print!("{}", plan.describe());
            Ok(0)
        }
    }
}

/// How long after `armed` the symbol cache starts being written (at exit at the latest).
const CACHE_WRITE_DELAY: Duration = Duration::from_millis(100);

/// Work started before the plan so that it overlaps the symbol loading.
struct Prefetch {
    task_scan: Option<std::thread::JoinHandle<(Comms, UserSymbols)>>,
    warmup: Option<Warmup>,
}

impl Prefetch {
    fn start(decided: &Decided) -> Prefetch {
        // On the hit path every hit record carries its writer's name: reading every task's name (a second
        // for a process of 100,000 threads) is for perf samples only.
        let names = decided.delivery() != Delivery::HitProgram;
        // Whose names and maps the hits can need: any process's for a system-wide watch; a process
        // watch's hits come from its own processes (and the children they fork, which the kernel's
        // records bring), so reading every other process (a few ms per hundred) only delays the first
        // hit; a launched command does not exist yet (it is read at its exec stop).
        let writers = match decided.scope() {
            Scope::System => None,
            Scope::Processes(pids) => Some(pids.clone()),
            Scope::Launched(_) => Some(Vec::new()),
        };
        let task_scan = std::thread::Builder::new()
            .name("ksymwatch-tasks".into())
            .spawn(move || {
                if !names {
                    // The hit program's load asks where the kernel keeps a task's name (its BTF,
                    // 1-2 ms to open): answered here, it is not on the way to arming.
                    let _ = crate::perf::bpf::task::comm_offset();
                }
                let (mut comms, mut user) = (Comms::default(), UserSymbols::default());
                match &writers {
                    None => {
                        if names {
                            comms.scan_all();
                        }
                        user.scan_all();
                    }
                    Some(pids) => {
                        for &pid in pids {
                            if names {
                                comms.scan_process(pid);
                            }
                            user.read_process(pid);
                        }
                    }
                }
                (comms, user)
            })
            .ok();
        // A system-wide watch was decided only where this process may open system-wide events.
        let warmup = decided
            .scope()
            .system_wide()
            .then(|| cpulist::read(Path::new(cpulist::ONLINE)).ok())
            .flatten()
            .and_then(|cpus| cpus.first().copied())
            .map(Warmup::start);
        Prefetch { task_scan, warmup }
    }
}

/// What the `# armed` line and the marks right after it say, taken from the armed set before the session
/// owns it.
struct ArmedLine {
    /// Every breakpoint event, per-thread ones included: a ring of the per-thread path holds one per thread.
    events: usize,
    cpus: BTreeSet<u32>,
    /// CPUs that went offline while arming: not a failure, but not covered until they return.
    went_offline: Vec<u32>,
}

impl ArmedLine {
    fn of(armed: &arm::Armed) -> ArmedLine {
        ArmedLine {
            events: armed.events.iter().map(|e| e.breakpoints()).sum(),
            cpus: armed.events.iter().map(|e| e.cpu).collect(),
            went_offline: armed.went_offline.clone(),
        }
    }

    /// The header, `# armed` (the moment every breakpoint is enabled), and a mark for each CPU that went
    /// offline while arming (the loop arms it when it returns).
    fn announce(&self, out: &mut dyn Output, header: &Header<'_>) -> io::Result<()> {
        out.header(header)?;
        out.armed(self.events, &self.cpus, sys::monotonic_ns())?;
        self.went_offline
            .iter()
            .try_for_each(|&cpu| out.event(&StreamEvent::CpuOffline { cpu }, sys::monotonic_ns()))
    }
}

/// The processes a watch covers at the start, (pid, comm), and their threads, for the header. The threads:
/// on the hit path the kernel's own count (one read per process; listing 100,000 threads would take longer
/// than arming them), on the per-thread path the threads armed.
fn covered_at_start(
    delivery: Delivery,
    scope: &arm::Scope,
    armed: &arm::Armed,
) -> (Vec<(u32, String)>, usize) {
    let pids = scope.pids();
    let threads = if delivery == Delivery::HitProgram {
        arm::thread_count(&pids)
    } else {
        armed
            .events
            .iter()
            .flat_map(|e| e.tids())
            .collect::<BTreeSet<u32>>()
            .len()
    };
    let processes = pids
        .into_iter()
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_else(|_| "?".into());
            (pid, comm)
        })
        .collect();
    (processes, threads)
}

/// The plan's delivery as the events take it, with the BPF programs it attaches: the hit programs on the
/// hit path (following the launched command's children, ending a process's watch at its exec, with the
/// watched processes entered), or `--value`'s value programs on the per-thread path. `ring_pages`: each
/// hit ring buffer's data pages.
fn delivery(plan: &WatchPlan, ring_pages: usize) -> Result<event::Delivery> {
    let scope = plan.scope();
    let system = scope.system_wide();
    let values = plan.values();
    match plan.delivery() {
        Delivery::HitProgram => {}
        Delivery::PerThread { remove_on_exec } if values.read() => {
            let v = ValuePrograms::load(plan.watches(), values.condition(), plan.filter())
                .map_err(advice::program)?;
            return Ok(event::Delivery::Paired {
                values: Arc::new(v),
                remove_on_exec,
            });
        }
        Delivery::PerThread { remove_on_exec } => {
            return Ok(event::Delivery::Samples { remove_on_exec })
        }
        Delivery::Samples => {
            return Ok(event::Delivery::Samples {
                remove_on_exec: false,
            })
        }
    }
    let mut hits = HitPrograms::load_counting(
        plan.watches(),
        values.condition(),
        plan.filter(),
        HitKind {
            processes: !system,
            written: values.read(),
        },
        ring_pages,
        plan.running().limits.count,
    )
    .map_err(advice::program)?;
    // A launched command's children are watched too, as `perf record -- CMD` follows them.
    if matches!(scope, Scope::Launched(_)) {
        if let Err(e) = hits.follow_children() {
            stderr::line(format_args!(
                "ksymwatch: warning: {e}; the command's own threads are watched, processes it forks are not"
            ));
        }
    }
    // The watched address means something else in another program: an exec ends that process's
    // watch, in the kernel before the new program runs, and the session reports it.
    // A process that exits leaves the watched set as it ends: a process given its pid later is not it.
    if !system {
        if let Err(e) = hits.end_on_exec() {
            stderr::line(format_args!("ksymwatch: warning: {e}"));
        }
        if let Err(e) = hits.end_on_exit() {
            stderr::line(format_args!("ksymwatch: warning: {e}"));
        }
    }
    for pid in scope.pids() {
        hits.watch_process(pid).or_exit(
            ExitCode::Runtime,
            "adding a process to the watched-process map",
        )?;
    }
    Ok(event::Delivery::Hits(Arc::new(hits)))
}

/// Arms `plan` and runs the session until it stops; the exit status as [`run`]'s. `machine` resolves
/// `--control`'s targets in a process.
fn execute(mut plan: WatchPlan, prefetch: Prefetch, machine: &RealHost) -> Result<i32> {
    let launched = plan.take_command();
    let cfg = event_config(&plan)?;
    let Prefetch {
        task_scan,
        mut warmup,
    } = prefetch;
    let (kernel, running, values) = (plan.kernel(), plan.running(), plan.values());
    let condition_text = values.condition().map(|c| c.to_string());
    let symbols = kernel.symbols.chains()?;
    let file_symbols = kernel.symbols.files();
    // Built (and checked) before arming, so a vmlinux without usable line tables fails before any hit.
    let line_source = line_source(file_symbols, running.lines)?;
    let mut watches = plan.watches().to_vec();
    let mut out = outputs(plan.outputs(), &title(plan.access(), &watches))?;
    let control_source = running.control.as_deref().map(Control::open).transpose()?;
    let recorder = plan.flight().map(recorder).transpose()?;
    let signals = block_stop_signals(plan.flight())?;
    let cpus = &plan.cpus().now;
    let hotplug = hotplug(plan.cpus().follow.clone(), running.strict_hotplug);
    if let Some(w) = warmup.take() {
        w.finish();
    }
    let objects = plan.objects();
    let objects_line = objects.map(ObjectPlan::describe);
    let scope = plan.scope().arming();
    let armed = match keep_free_slots(&mut watches, cpus, &cfg, objects.is_some())
        .and_then(|()| arm::arm_in(&watches, cpus, &scope, &cfg))
    {
        Ok(armed) => armed,
        Err(r) => {
            // A JSON stream says why it is empty; the error line itself is main's.
            let _ = out.refused(r.kind.as_str(), &advice::refusal(&r), r.code as i32);
            return Err(advice::arming(r));
        }
    };
    let armed_line = ArmedLine::of(&armed);
    let (processes, threads) = covered_at_start(plan.delivery(), &scope, &armed);
    let header = Header {
        watches: &watches,
        cpus,
        source: &kernel.source_text,
        processes: &processes,
        threads,
        values: values.read(),
        condition: condition_text.as_deref(),
        objects: objects_line.as_deref(),
    };
    let (comms, user) = scanned_tasks(task_scan, launched.as_deref());
    let setup = Setup {
        watches: &watches,
        symbols,
        cfg,
        limits: running.limits,
        filter: plan.filter().clone(),
        tally: plan.outputs().tally,
        lines: line_source.as_ref().map(|l| l as &dyn LineSource),
        control: control_source.map(|source| Controller {
            source,
            resolve: Box::new(plan.resolver(machine)),
            access: plan.access(),
        }),
        scope,
        comms,
        user,
        symbols_origin: kernel.origin,
        condition: values.condition().cloned(),
        flight: recorder,
        advise: advice::refusal,
    };
    // `armed` goes out the moment every breakpoint is enabled; the session learns every live task's name
    // right after (a script starts its workload on that line: a task the scan misses is one that started
    // after arming, and the FORK/COMM records name it). Those alive before were named, and their maps
    // read, while the symbols loaded (`task_scan`).
    let mut session = Session::new(setup, out, armed, signals, Some(hotplug))?;
    if let Some(o) = objects {
        session.watch_objects(object_watch(o.clone(), cpus, &watches)?)?;
    }
    announce_and_run(session, &armed_line, &header, launched, running.realtime)
}

/// Each hit ring buffer's data pages: `--buffer-pages`, or sized from the CPUs and what the watch covers
/// ([`ring_size`]).
fn hit_ring_pages(plan: &WatchPlan) -> usize {
    if let Some(pages) = plan.running().buffer_pages {
        return pages;
    }
    let coverage = match plan.scope() {
        Scope::System => Coverage::System,
        Scope::Processes(pids) => Coverage::Threads(arm::thread_count(pids) as u64),
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

/// How every breakpoint event of the watch is opened: its BPF programs loaded and attached
/// ([`delivery`], their hit rings sized by [`hit_ring_pages`]), `--buffer-pages` perf rings.
fn event_config(plan: &WatchPlan) -> Result<EventConfig> {
    let delivery = delivery(plan, hit_ring_pages(plan))?;
    Ok(EventConfig {
        ring_pages: plan
            .running()
            .buffer_pages
            .unwrap_or(ring_size::PERF_RING_PAGES),
        user_only: plan.writers() == Writers::UserSpaceOnly,
        track_tasks: true,
        count_lost: true,
        delivery,
        percpu: plan.kernel().percpu,
    })
}

/// The session's title (`--flamegraph`'s): the command and its targets.
fn title(access: Access, watches: &[Watch]) -> String {
    let labels: Vec<&str> = watches.iter().map(|w| w.label.as_str()).collect();
    format!("ksymwatch {} {}", access.word(), labels.join(" "))
}

/// Announces the armed watch, lets a launched command go on, and runs the session until it stops; the
/// launched command's exit status if it has ended by then, else 0.
fn announce_and_run(
    mut session: Session<'_, Tee>,
    armed_line: &ArmedLine,
    header: &Header<'_>,
    mut launched: Option<Box<dyn Launch>>,
    realtime: Option<u8>,
) -> Result<i32> {
    let announced = armed_line.announce(session.out(), header);
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
    if let Some(priority) = realtime {
        let _ = sys::set_fifo(priority);
    }
    session.run()?;
    let _ = io::stdout().flush();
    // The command's status if it has ended; a run stopped first (signal, --duration, --count) leaves it
    // running unwatched and ends as a watch of a running process does.
    Ok(launched.as_mut().and_then(|l| l.status()).unwrap_or(0))
}

/// The line table `--lines` asks for, from the vmlinux's own files; none without them.
fn line_source(files: Option<&FileSymbols>, lines: bool) -> Result<Option<VmlinuxLines<'_>>> {
    Ok(match files {
        Some(files) if lines => Some(files.line_source()?),
        _ => None,
    })
}

/// Blocks the stop signals (and `--flight`'s dump signal) before arming: a Ctrl-C from then on is read by
/// the loop, which releases the breakpoints, instead of killing us with events half-set-up. (A launched
/// command was started before: it must not inherit the blocked signals.)
fn block_stop_signals(flight: Option<&Flight>) -> Result<SignalFd> {
    let dump_signal: &[libc::c_int] = match flight {
        Some(f) if f.on_signal() => &[libc::SIGUSR1],
        _ => &[],
    };
    SignalFd::stop_signals_and(dump_signal).or_exit(ExitCode::Runtime, "signalfd")
}

/// The CPU hotplug follower, its warning (if it cannot follow) printed.
fn hotplug(follow: Option<BTreeSet<u32>>, strict: bool) -> Hotplug {
    let (hotplug, warning) = Hotplug::new(follow, strict);
    if let Some(w) = warning {
        stderr::line(format_args!("ksymwatch: warning: {w}"));
    }
    hotplug
}

/// Keeps `--on`'s watches (`objects`) to one slot per debug register still free on every CPU; refused if
/// none is. Other watches are left as they are.
fn keep_free_slots(
    watches: &mut Vec<Watch>,
    cpus: &BTreeSet<u32>,
    cfg: &EventConfig,
    objects: bool,
) -> std::result::Result<(), Refusal> {
    if !objects {
        return Ok(());
    }
    let free = match watches.first() {
        // A slot the kernel refuses outright (not for want of a register) is refused as arming would be.
        Some(w) => arm::free_slots(w, cpus, watches.len(), cfg)
            .map_err(|e| refusal::explain(&e, std::slice::from_ref(w)).nothing_armed())?,
        None => 0,
    };
    if free == 0 {
        return Err(Refusal::arm(
            refusal::Kind::NoFreeDebugRegister,
            "--on needs a free debug register on every CPU, and every one is in use (perf, gdb, another \
             watch); stop one and run again",
        ));
    }
    watches.truncate(free);
    Ok(())
}

/// The task names and process maps the prefetch scan read, with a launched command's maps added.
fn scanned_tasks(
    task_scan: Option<std::thread::JoinHandle<(Comms, UserSymbols)>>,
    launched: Option<&dyn Launch>,
) -> (Comms, UserSymbols) {
    // Joined before `armed`: the scan is long over by now (a few ms, against the symbol load's tens).
    let (comms, mut user) = task_scan.and_then(|t| t.join().ok()).unwrap_or_default();
    // A launched command started after the scan, and the kernel mapped its executable at its exec, before
    // any event existed to report it: read it while the command is stopped there, or a command that exits
    // right after its hits leaves them unnamed.
    if let Some(l) = launched {
        user.read_process(l.pid());
    }
    (comms, user)
}

/// `--on`'s source loaded and attached, with an output ring on each of `cpus`; `slots` are the armed
/// slots, parked.
fn object_watch(plan: ObjectPlan, cpus: &BTreeSet<u32>, slots: &[Watch]) -> Result<ObjectWatch> {
    let online: Vec<u32> = cpus.iter().copied().collect();
    let possible = cpulist::read(Path::new(cpulist::POSSIBLE))
        .ok()
        .and_then(|p| p.last().copied())
        .or_else(|| online.last().copied())
        .map_or(1, |last| last + 1);
    let source = ObjectSource::load(&plan.attach, plan.select, &online, possible)?;
    Ok(ObjectWatch {
        source,
        parked: (0..slots.len()).map(|i| plan.parked(i)).collect(),
        allocators: plan.allocators,
        slots: Slots::new(slots.len(), plan.rotate),
        target: plan.target,
        records: Vec::new(),
    })
}

/// `--last`'s recorder, its tracepoints attached (before arming: one the kernel refuses fails the run
/// before any breakpoint is set).
fn recorder(flight: &Flight) -> Result<Recorder> {
    let tracepoints = flight
        .tracepoints()
        .map(|(group, name)| Tracepoint::attach(group, name).map_err(advice::tracepoint))
        .collect::<Result<Vec<_>>>()?;
    Ok(Recorder::new(flight, tracepoints))
}
