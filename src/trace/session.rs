//! The event loop: one epoll set holding every armed event's ring, the stop signals and (when following
//! hotplug) the uevent socket. Each wake drains the rings through the [`Pipeline`], which releases records
//! in timestamp order across rings (a record waits until every other ring has been read past its time);
//! task names and processes' executable mappings are updated from COMM/FORK/MMAP2 records in that same
//! order, so a hit is named as its task was named, and mapped, when it wrote; EXIT records let go of what an
//! exited task left behind (see [`crate::trace::exited`]); hits are filtered, symbolized and handed to the
//! [`Output`], or with `--last` kept by the flight recorder ([`crate::trace::flight`]) until a trigger
//! (a hit, SIGUSR1 on the signal descriptor, a tracepoint read every turn) prints them.

use std::collections::BTreeSet;
use std::io;
use std::time::Instant;

use ksymwatch_symbols::{LineSource, Origin, SymbolTable, UserSymbols};

use crate::error::{Context, Error, ExitCode, Result};
use crate::model::condition::Condition;
use crate::model::filter::Filter;
use crate::model::watch::Watch;
use crate::model::Limits;
use crate::perf::arm::{Armed, Scope};
use crate::perf::bpf::objects as objects_bpf;
use crate::perf::denial;
use crate::perf::event::{EventConfig, OpenError};
use crate::perf::record::{Sample, Task};
use crate::perf::refusal::{explain, explain_move, Refusal};
use crate::perf::sys::{self, Epoll, SignalFd};
use crate::report::{Covered, DumpTrigger, Hit, Output, StopReason, StreamEvent, Summary, Value};
use crate::trace::comm::Comms;
use crate::trace::events::{self, Audit, Item, Trap};
use crate::trace::flight::Recorder;
use crate::trace::hotplug::{Changes, Hotplug, Unwatched};
use crate::trace::moves::{self, Controller, Moves, Step};
use crate::trace::objects::{self, ObjectWatch, Placement};
use crate::trace::olds::Olds;
use crate::trace::pace::{Pace, HIT_SORT_SLACK_NS, SORT_SLACK_NS};
use crate::trace::pipeline::{Pipeline, Release};
use crate::trace::store_value;
use crate::trace::symbolize::{NamedChain, Symbolizer};
use crate::trace::tasks::Tasks;
use crate::trace::totals;
use crate::trace::unload;
use crate::trace::watched::Watched;

/// What a session watches and how: fixed for its lifetime.
pub struct Plan<'a> {
    pub watches: &'a [Watch],
    pub symbols: &'a SymbolTable,
    pub cfg: EventConfig,
    pub limits: Limits,
    pub filter: Filter,
    /// Keep the `--summary` counts (by chain, ip, comm).
    pub tally: bool,
    /// `--lines`: file:line (and inlined frames) for kernel frames.
    pub lines: Option<&'a dyn LineSource>,
    /// Who the events cover; CPUs that come online are armed for the same.
    pub scope: Scope,
    /// `--control`: where commands come from and how their targets are resolved.
    pub control: Option<Controller<'a>>,
    /// Task names and user-space symbols, with the names and maps of the processes alive at the start
    /// already read: a writer that exits right after its hits is gone before they are printed, so they
    /// must be read before. The caller reads them while it loads kernel symbols, not after arming (see
    /// `cli::watch`); [`Session::learn_tasks`] adds the tasks born meanwhile.
    pub comms: Comms,
    pub user: UserSymbols,
    /// Whether `symbols` came from the kallsyms cache (unnamed kernel frames then get a hint).
    pub symbols_origin: Origin,
    /// `--if`: checked again on the instruction's value of a hit that raced.
    pub condition: Option<Condition>,
    /// `--last N --dump-on ...`: hits are kept, and printed when a trigger fires (SIGUSR1 is then among
    /// the signals read).
    pub flight: Option<Recorder>,
    /// Words a refusal to arm or enable while running (a CPU that came online, `--control on`) as the
    /// user reads it: the command line's layer names the option behind each remedy.
    pub advise: fn(&Refusal) -> String,
}

const TOKEN_SIGNAL: u64 = 0;
const TOKEN_RING: u64 = 1;
const TOKEN_UEVENT: u64 = 2;
const TOKEN_CONTROL: u64 = 3;
const TOKEN_OBJECTS: u64 = 4;
/// A watched process's pidfd: `TOKEN_PROCESS + i` for the i-th.
const TOKEN_PROCESS: u64 = 16;

pub struct Session<'a, O: Output> {
    symbolizer: Symbolizer<'a>,
    pub out: O,
    /// The armed events' rings, drained into time order.
    rings: Pipeline,
    control: Option<Moves<'a>>,
    epoll: Epoll,
    signals: SignalFd,
    hotplug: Option<Hotplug>,
    tasks: Tasks,
    summary: Summary,
    /// `--value`'s `old` in merged time order.
    olds: Olds,
    limits: Limits,
    filter: Filter,
    /// CPUs that came online and are not armed.
    unwatched: Unwatched,
    /// Every event closed so far, audited against the kernel's counters.
    audits: Vec<Audit>,
    /// The first output error that was not a closed pipe.
    output_error: Option<io::Error>,
    /// `--strict-hotplug` failed: returned once the summary is out, so the exit code is 3.
    fatal: Option<Error>,
    /// A process watch's processes, followed to their exit or exec.
    watched: Watched,
    /// Loadable modules holding targets, loaded when the session started: the reconcile checks sysfs for
    /// them in case their removal uevent was dropped ([`unload`]).
    modules: Vec<std::sync::Arc<str>>,
    /// `--on`: the objects' source and slots.
    objects: Option<ObjectWatch>,
    flight: Option<Recorder>,
    advise: fn(&Refusal) -> String,
}

impl<'a, O: Output> Session<'a, O> {
    /// Takes ownership of the armed events. `signals` must have been created before arming so a Ctrl-C during
    /// arming is not lost; `hotplug` is the uevent listener when CPUs are followed.
    pub fn new(
        plan: Plan<'a>,
        out: O,
        armed: Armed,
        signals: SignalFd,
        hotplug: Option<Hotplug>,
    ) -> Result<Self> {
        let Plan {
            watches,
            symbols,
            cfg,
            limits,
            filter,
            tally,
            lines,
            scope,
            control,
            comms,
            user,
            symbols_origin,
            condition,
            flight,
            advise,
        } = plan;
        // The program drops traps in the kernel only for a condition or a filter.
        let kernel_drops = condition.is_some() || filter != Filter::default();
        let epoll = Epoll::new().or_exit(ExitCode::Runtime, "epoll_create")?;
        epoll
            .add(signals.fd(), TOKEN_SIGNAL)
            .or_exit(ExitCode::Runtime, "epoll")?;
        // Only a kernel watch can hold a module's memory.
        let scope_is_system = matches!(scope, Scope::System);
        let kernel_follows = cfg
            .hits
            .as_ref()
            .map_or((false, false), |h| (h.ends_on_exec(), h.follows_children()));
        let watched = Watched::new(scope.pids(), kernel_follows, &epoll, TOKEN_PROCESS)?;
        let mut olds = Olds::new(condition, kernel_drops);
        if matches!(scope, Scope::Processes(_)) && cfg.hits.as_ref().is_some_and(|h| h.written) {
            // What each watched range holds now, the events armed: a store narrower than the watch is laid
            // over it where the program does not read the range at the trap (a read-write watch).
            for (index, w) in watches.iter().enumerate() {
                for pid in scope.pids() {
                    if let Value::Read(v) = events::read_value(pid, w.addr, w.len) {
                        olds.seed(index, pid, v);
                    }
                }
            }
        }
        let slack = if cfg.hits.is_some() {
            HIT_SORT_SLACK_NS
        } else {
            SORT_SLACK_NS
        };
        let rings = Pipeline::new(watches, cfg, scope, armed.events, &epoll, TOKEN_RING, slack)
            .or_exit(ExitCode::Runtime, "epoll")?;
        if let Some(fd) = hotplug.as_ref().and_then(Hotplug::fd) {
            epoll
                .add(fd, TOKEN_UEVENT)
                .or_exit(ExitCode::Runtime, "epoll")?;
        }
        let control = match control {
            Some(c) => Some(Moves::new(c, &epoll, TOKEN_CONTROL)?),
            None => None,
        };
        // No process is scanned here: `armed` goes out first (see `learn_tasks` and `Plan::user`).
        Ok(Session {
            symbolizer: Symbolizer::with_user(symbols, user)
                .with_lines(lines)
                .with_origin(symbols_origin),
            out,
            rings,
            control,
            epoll,
            signals,
            hotplug,
            tasks: Tasks::new(comms),
            summary: Summary {
                tally: tally.then(Default::default),
                ..Summary::default()
            },
            olds,
            limits,
            filter,
            unwatched: Unwatched::default(),
            audits: Vec::new(),
            output_error: None,
            fatal: None,
            watched,
            modules: if scope_is_system {
                unload::loaded(watches, std::path::Path::new(unload::SYS_MODULE))
            } else {
                Vec::new()
            },
            objects: None,
            flight,
            advise,
        })
    }

    /// `--on`: from now on each new object the source reports is armed in a free slot.
    pub fn watch_objects(&mut self, objects: ObjectWatch) -> Result<()> {
        for fd in objects.source.fds() {
            self.epoll
                .add(fd, TOKEN_OBJECTS)
                .or_exit(ExitCode::Runtime, "epoll")?;
        }
        self.objects = Some(objects);
        Ok(())
    }

    /// `--on`: a CPU that came online gets its object ring, so allocations there reach the tracer. The
    /// ring of a CPU that went away stays, emptied as any other.
    fn objects_cpu_online(&mut self, cpu: u32) {
        let Some(o) = &mut self.objects else {
            return;
        };
        if o.source.open_cpu(cpu).is_ok() {
            if let Some(fd) = o.source.fds().last() {
                let _ = self.epoll.add(fd, TOKEN_OBJECTS);
            }
        }
    }

    /// Arms each new object, disarms each freed one, in the order [`objects::batch`] puts them.
    fn on_objects(&mut self) -> Option<StopReason> {
        let o = self.objects.as_mut()?;
        let mut records = std::mem::take(&mut o.records);
        o.source.drain(&mut records);
        let batch = objects::batch(&mut records, &o.allocators);
        o.slots.tally.lost += batch.lost;
        // An allocation that finds every slot busy waits for the batch's frees.
        let mut stop = None;
        let mut waiting = Vec::new();
        for a in batch.allocated {
            let rec = a.rec;
            if a.freed {
                if let Some(o) = &mut self.objects {
                    o.slots.gone();
                }
            } else if !a.after_free
                && self
                    .objects
                    .as_ref()
                    .is_some_and(|o| o.slots.slot_of(rec.ptr, rec.time).is_some())
            {
                // A tracepoint reporting an object it reported before (a socket changing state
                // again): it is armed already. (A new object at a freed one's address is not: that free
                // is in the batch, before it.)
            } else if self.objects.as_ref().is_some_and(|o| o.slots.has_free()) {
                stop = stop.or_else(|| self.object_allocated(rec));
            } else {
                waiting.push(rec);
            }
        }
        for (ptr, time) in batch.freed {
            stop = stop.or_else(|| self.object_freed(ptr, time));
        }
        for rec in waiting {
            stop = stop.or_else(|| self.object_allocated(rec));
        }
        records.clear();
        if let Some(o) = &mut self.objects {
            o.records = records;
        }
        stop
    }

    fn object_allocated(&mut self, rec: &objects_bpf::ObjectRecord) -> Option<StopReason> {
        let o = self.objects.as_mut()?;
        let (index, placement) = o.slots.place();
        let (slot, evicted) = match placement {
            Placement::Skip => return None,
            Placement::Free(slot) => (slot, None),
            Placement::Evict(slot, old) => (slot, Some(old.index)),
        };
        let watch = objects::object_watch(&o.target, index, rec.ptr);
        if self
            .rings
            .events_mut()
            .move_target(slot, watch, true)
            .is_err()
        {
            if let Some(o) = &mut self.objects {
                o.slots.not_armed();
            }
            return None;
        }
        let now = sys::monotonic_ns();
        let gap_ns = now.saturating_sub(rec.time);
        let o = self.objects.as_mut()?;
        o.slots.armed(slot, index, rec.ptr, rec.time, now);
        let event = StreamEvent::ObjectArmed {
            index,
            addr: rec.ptr,
            slot,
            gap_ns,
            pid: rec.pid,
            comm: rec.comm.clone(),
            evicted,
        };
        self.emit_event(&event, now)
    }

    /// The object at `ptr` was freed at `time`: its slot goes back to waiting. The line carries the
    /// free's own time, so hits between the free and this (the memory reused before the tracer heard of
    /// it) show as later than it.
    fn object_freed(&mut self, ptr: u64, time: u64) -> Option<StopReason> {
        let o = self.objects.as_mut()?;
        let slot = o.slots.slot_of(ptr, time)?;
        let parked = o.parked.get(slot)?.clone();
        // Its last hits are printed before the line that says it is gone.
        let _ = self.rings.events_mut().retarget(slot, parked);
        o.slots.closing(Some((slot, time)));
        let flushed = self.flush_rings();
        let o = self.objects.as_mut()?;
        o.slots.closing(None);
        if let Some(stop) = flushed {
            return Some(stop);
        }
        let o = self.objects.as_mut()?;
        let held = o.slots.freed(slot)?;
        let event = StreamEvent::ObjectFreed {
            index: held.index,
            addr: held.addr,
            hits: held.hits,
        };
        self.emit_event(&event, time)
    }

    /// Learns the name of every task alive now. Called right after `armed` is printed (a listing of every
    /// task, a few milliseconds, is not worth delaying that line for), for the tasks born since the
    /// caller's own scan ([`Plan::comms`]): with the FORK and COMM records that follow, every task that
    /// can hit has a name even if it exits before its hit is printed.
    /// Reads every live task's name (a task the start-up scan missed started after arming, and its
    /// FORK/COMM records name it). Not on the hit path: each hit record carries its writer's name, and a
    /// process of 100,000 threads would cost a second of /proc reads.
    pub fn learn_tasks(&mut self) {
        if self.rings.events().hit_path() {
            return;
        }
        self.tasks.scan_all();
    }

    pub fn armed_cpus(&self) -> BTreeSet<u32> {
        self.rings.events().cpus()
    }

    /// Runs until a limit, a signal or a closed stdout; returns the summary. Every event is disabled and
    /// closed before this returns, on every path. A `--strict-hotplug` failure ends the session like a
    /// signal (the rings drained, the summary printed) and is then returned as the error.
    pub fn run(mut self) -> Result<Summary> {
        let start = Instant::now();
        let deadline = self.limits.duration.map(|d| start + d);
        let mut tokens = Vec::new();
        let result = self.run_loop(deadline, &mut tokens);
        self.rings.events().disable_all();
        let stop = match result {
            Ok(stop) => stop,
            Err(e) => {
                self.rings.close_all();
                return Err(e);
            }
        };
        // Records written before the disable are still in the rings: print them, unless the reader is gone or
        // the count is already met. Only then do the kernel's counters tell the whole story.
        // On the hit path the programs themselves stop keeping hits at `--count`: what they kept is still
        // in the rings, and printed, as after a duration.
        let count_in_kernel = stop == StopReason::Count
            && self
                .rings
                .events()
                .hit_programs()
                .is_some_and(|h| h.limit_reached());
        let stop = match stop {
            StopReason::Count if count_in_kernel => {
                self.rings.drain();
                self.release(Release::All);
                self.audits.extend(self.rings.close_all());
                self.settle_audits();
                stop
            }
            StopReason::Duration
            | StopReason::Signal(_)
            | StopReason::StrictHotplug(_)
            | StopReason::Exited
            | StopReason::ModuleUnloaded => {
                self.rings.drain();
                let ended = self.release(Release::All);
                self.audits.extend(self.rings.close_all());
                let ended = ended.or_else(|| self.settle_audits());
                match stop {
                    // What --strict-hotplug ended stays the reason, whatever printing the rest met.
                    StopReason::StrictHotplug(_) => stop,
                    _ => ended.unwrap_or(stop),
                }
            }
            // --count met, or stdout closed: nothing more is printed, but what the kernel dropped in the
            // program (filters, --if, other processes) still belongs in the summary.
            other => {
                let audits = self.rings.close_all();
                self.audits.extend(audits);
                for a in std::mem::take(&mut self.audits) {
                    self.summary.filtered += a.filtered;
                    self.summary.filtered_other_process += a.other_process;
                }
                other
            }
        };
        self.rings.close_all();
        // A CPU never armed since it came online was unwatched to the end.
        let end = sys::monotonic_ns();
        for (cpu, ns) in self.unwatched.end(end) {
            *self.summary.unwatched_ns_by_cpu.entry(cpu).or_default() += ns;
        }
        if let Some(e) = self.output_error.take() {
            return Err(Error::runtime("writing output").caused_by(e));
        }
        self.use_totals();
        self.summary.elapsed = start.elapsed();
        self.summary.stop = Some(stop);
        self.summary.objects = self.objects.as_mut().map(|o| o.slots.finish());
        self.summary.warnings.extend(self.symbolizer.take_notes());
        match self.out.finish(&self.summary) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
            Err(e) => return Err(Error::runtime("writing output").caused_by(e)),
        }
        if let Some(e) = self.fatal.take() {
            return Err(e);
        }
        Ok(self.summary)
    }

    /// `--count` on the hit path: the programs kept the N-th hit.
    fn kernel_count_reached(&self) -> bool {
        self.rings
            .events()
            .hit_programs()
            .is_some_and(|h| h.limit_reached())
    }

    /// On the hit path, when the stream dropped hits: the counts become the kernel's totals of every kept
    /// hit ([`crate::trace::totals`]); a failure to read them is a warning, the stream's counts kept.
    /// Not with `--on`: its slots hold one object after another, and writes after an object's free are
    /// not hits, which the kernel cannot tell.
    fn use_totals(&mut self) {
        if self.objects.is_some() {
            return;
        }
        let events = self.rings.events();
        let Some(hits) = events.hit_programs() else {
            return;
        };
        if let Err(e) = totals::apply(
            hits,
            events.watches(),
            &mut self.symbolizer,
            &mut self.summary,
            &mut self.out,
        ) {
            self.summary.warnings.push(format!(
                "the kernel's totals could not be read ({e}): the counts are of the printed hits only"
            ));
        }
    }

    fn run_loop(&mut self, deadline: Option<Instant>, tokens: &mut Vec<u64>) -> Result<StopReason> {
        while self.control.as_ref().is_some_and(Moves::unpolled) {
            if let Some(stop) = self.on_control()? {
                return Ok(stop);
            }
        }
        let mut pace = Pace::new(
            sys::monotonic_ns(),
            self.summary.hits() + self.summary.filtered,
        );
        let mut signalled = None;
        loop {
            let counted = self.summary.hits() + self.summary.filtered;
            let mut timeout = pace.timeout(sys::monotonic_ns(), counted, self.rings.due());
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(StopReason::Duration);
                }
                timeout = timeout.min(left);
            }
            self.epoll
                .wait(tokens, timeout)
                .or_exit(ExitCode::Runtime, "epoll_wait")?;
            for &t in tokens.iter() {
                match t {
                    TOKEN_SIGNAL => {
                        if let Ok(Some(sig)) = self.signals.read() {
                            // Only `--dump-on signal` reads SIGUSR1: the dump follows this turn's drain.
                            if sig != libc::SIGUSR1 as u32 {
                                return Ok(StopReason::Signal(sig));
                            }
                            signalled = Some(sys::monotonic_ns());
                        }
                    }
                    TOKEN_UEVENT => {
                        if let Some(stop) = self.on_uevent()? {
                            return Ok(stop);
                        }
                    }
                    TOKEN_CONTROL => {
                        if let Some(stop) = self.on_control()? {
                            return Ok(stop);
                        }
                    }
                    TOKEN_OBJECTS => {
                        if let Some(stop) = self.on_objects() {
                            return Ok(stop);
                        }
                    }
                    t if t >= TOKEN_PROCESS => {
                        let none_left = self
                            .watched
                            .exited((t - TOKEN_PROCESS) as usize, &self.epoll);
                        if none_left {
                            return Ok(StopReason::Exited);
                        }
                    }
                    _ => {}
                }
            }
            // A control line left unended by a writer whose close raised no event is read again each
            // turn (a tick at most), until its end-of-file ends it.
            if self.control.as_ref().is_some_and(Moves::mid_line) {
                if let Some(stop) = self.on_control()? {
                    return Ok(stop);
                }
            }
            if let Some(stop) = self.read_rings(signalled.take())? {
                return Ok(stop);
            }
            if let Some(stop) = self.reconcile_if_due()? {
                return Ok(stop);
            }
        }
    }

    /// Hands every record `which` releases to the output, in time order, and flushes. Returns a stop reason
    /// when the count is met or stdout closed.
    fn release(&mut self, which: Release) -> Option<StopReason> {
        let mut stop = None;
        while let Some((time, item)) = self.rings.next(which) {
            stop = self.apply(time, item);
            if stop.is_some() {
                break;
            }
        }
        if stop.is_none() && self.limits.count.is_some_and(|n| self.summary.hits() >= n) {
            stop = Some(StopReason::Count);
        }
        // Hits the rings dropped never reach the count above; the programs' own count of kept hits does.
        if stop.is_none() && self.limits.count.is_some() && self.kernel_count_reached() {
            stop = Some(StopReason::Count);
        }
        if let Err(e) = self.out.flush() {
            return Some(self.write_failed(e));
        }
        stop
    }

    /// One released record: task names change, losses are marked, hits are printed.
    fn apply(&mut self, time: u64, item: Item) -> Option<StopReason> {
        match item {
            Item::Sample(sample, watch, value, trap) => {
                let stop = self.hit(&sample, watch, value, trap.as_deref());
                self.rings.recycle(sample.frames);
                stop
            }
            Item::Task(Task::Comm {
                pid,
                tid,
                comm,
                exec,
            }) => {
                self.tasks.renamed(tid, &comm);
                if exec {
                    if let Some(stop) = self.process_exec(pid, &comm, time) {
                        return Some(stop);
                    }
                    self.tasks.exec(pid, &mut self.symbolizer);
                }
                None
            }
            Item::Task(Task::Fork {
                pid,
                ppid,
                tid,
                ptid,
            }) => {
                self.tasks.fork(pid, ppid, tid, ptid, &mut self.symbolizer);
                self.watched.fork(pid, ppid);
                None
            }
            Item::Task(Task::Exit { pid, tid }) => {
                self.tasks.exit(pid, tid, &mut self.symbolizer);
                None
            }
            Item::Task(Task::Mmap(m)) => {
                self.tasks.mmap(&m, &mut self.symbolizer);
                None
            }
            Item::Lost { cpu, count } => {
                self.olds.lost();
                self.lost(cpu, count, time)
            }
        }
    }

    /// Counts lost records in the summary and marks each in the stream: a loss is never silent, also not
    /// when it is found in the ring of a CPU that just went offline.
    fn lost(&mut self, cpu: u32, count: u64, time_ns: u64) -> Option<StopReason> {
        *self.summary.lost_by_cpu.entry(cpu).or_default() += count;
        self.emit_event(&StreamEvent::Lost { cpu, count }, time_ns)
    }

    /// Turns the audits of closed events into the losses the rings never reported, and warnings for hits
    /// that neither arrived nor were reported lost.
    fn settle_audits(&mut self) -> Option<StopReason> {
        let now = sys::monotonic_ns();
        let audits = std::mem::take(&mut self.audits);
        let mut stop = None;
        let unpaired: u64 = audits.iter().map(|a| a.unpaired).sum();
        if unpaired > 0 {
            self.summary.warnings.push(format!(
                "{unpaired} value records arrived without their hit's sample (lost with a full ring): those \
                 hits are in the lost count; use a larger --buffer-pages"
            ));
        }
        for a in &audits {
            self.summary.filtered += a.filtered;
            self.summary.filtered_other_process += a.other_process;
            let tail = a.unreported_lost();
            let tail_counted = tail > 0 && stop.is_none();
            if tail_counted {
                stop = self.lost(a.cpu, tail, now);
            }
            // The stream's marks say what records the kernel dropped; the summary counts hits, and the
            // lost records that were not hits (thread exits sharing the ring) come out of it here.
            let counted = a.counted_lost() - if tail_counted { 0 } else { tail };
            let not_hits = counted.saturating_sub(a.lost_hits());
            if let Some(n) = self.summary.lost_by_cpu.get_mut(&a.cpu) {
                *n = n.saturating_sub(not_hits);
                if *n == 0 {
                    self.summary.lost_by_cpu.remove(&a.cpu);
                }
            }
            if let Some(n) = a.unaccounted().filter(|&n| n > 0) {
                self.summary.warnings.push(format!(
                    "cpu {} target {}: the kernel counted {} hits, {} arrived and {} were reported lost; {n} \
                     unaccounted for (throttled by kernel.perf_event_max_sample_rate?)",
                    a.cpu,
                    a.watch,
                    a.kernel_hits.unwrap_or(0),
                    a.samples,
                    a.lost_records.max(a.kernel_lost.unwrap_or(0)),
                ));
            }
        }
        if audits.iter().any(|a| a.kernel_lost.is_none()) {
            self.summary.warnings.push(
                "this kernel cannot count dropped samples (PERF_FORMAT_LOST needs Linux 6.0): records lost \
                 at the very end of a burst cannot be ruled out"
                    .to_string(),
            );
        }
        if let Err(e) = self.out.flush() {
            return Some(self.write_failed(e));
        }
        stop
    }

    fn emit_event(&mut self, event: &StreamEvent, time_ns: u64) -> Option<StopReason> {
        match self
            .out
            .event(event, time_ns)
            .and_then(|_| self.out.flush())
        {
            Ok(()) => None,
            Err(e) => Some(self.write_failed(e)),
        }
    }

    /// Reads the control source and applies each complete line in order.
    fn on_control(&mut self) -> Result<Option<StopReason>> {
        let Some(c) = self.control.as_mut() else {
            return Ok(None);
        };
        let (mut lines, read) = c.read(&self.epoll);
        let mut stop = None;
        for line in lines.drain(..) {
            stop = self.apply_control(&line);
            if stop.is_some() {
                break;
            }
        }
        if let Some(c) = self.control.as_mut() {
            c.recycle(lines);
        }
        if let Err(e) = read {
            return Err(Error::runtime("reading --control").caused_by(e));
        }
        Ok(stop)
    }

    /// One control line. A move or an `off` disables the events first, then drains and prints everything
    /// they recorded, and only then acknowledges: every hit printed before the mark is of the old state,
    /// every hit after it of the new one.
    fn apply_control(&mut self, line: &str) -> Option<StopReason> {
        match self.control.as_mut()?.step(line)? {
            Step::Refuse(reason, kind) => self.refuse(line, reason, kind),
            Step::Off => {
                self.rings.events_mut().pause();
                if let Some(stop) = self.flush_rings() {
                    return Some(stop);
                }
                self.emit_event(&StreamEvent::Switched { on: false }, sys::monotonic_ns())
            }
            Step::On => {
                let now = sys::monotonic_ns();
                if let Err(e) = self.rings.events_mut().enable() {
                    self.rings.events_mut().pause();
                    let (reason, kind) = self.explain(&e);
                    return self.refuse(line, format!("{reason}; the watch stays off"), kind);
                }
                self.emit_event(&StreamEvent::Switched { on: true }, now)
            }
            Step::Move(watch) => self.move_watch(line, watch),
        }
    }

    /// `--control watch`: the watch moves to `watch`, its old target's hits printed before the mark.
    fn move_watch(&mut self, line: &str, watch: Watch) -> Option<StopReason> {
        if let Some(reason) = self.rings.events().cannot_move(0, &watch) {
            return self.refuse(line, reason, moves::BAD_TARGET);
        }
        let started = sys::monotonic_ns();
        // Hits of the old target still in the rings are printed below, with their own olds: the new
        // target's first hit then starts afresh.
        if let Err(e) = self.rings.events_mut().retarget(0, watch.clone()) {
            // The kernel checks a moved breakpoint as it checks a new one: a kernel address where kernel
            // breakpoints are refused is said as at arming.
            let scope = match self.rings.events().coverage() {
                Covered::Threads(_) => denial::Scope::Thread,
                Covered::Cpus(_) => denial::Scope::Cpu,
            };
            let r = explain_move(&e, &watch, scope);
            return self.refuse(line, (self.advise)(&r), r.kind.as_str());
        }
        if let Some(stop) = self.flush_rings() {
            return Some(stop);
        }
        self.olds.forget(0);
        let acked = sys::monotonic_ns();
        if self.rings.events().enabled() {
            if let Err(e) = self.rings.events_mut().enable() {
                // Everything is already moved; what cannot be enabled is off, and the reader must know.
                self.rings.events_mut().pause();
                let (reason, kind) = self.explain(&e);
                return self.refuse(line, format!("{reason}; the watch is now off"), kind);
            }
        }
        let event = StreamEvent::Retargeted {
            index: 0,
            watch,
            covered: self.rings.events().coverage(),
            took_ns: sys::monotonic_ns().saturating_sub(started),
            enabled: self.rings.events().enabled(),
        };
        self.emit_event(&event, acked)
    }

    /// Drains every ring and prints every record held, in time order (the events are disabled, so nothing
    /// older can still arrive).
    fn flush_rings(&mut self) -> Option<StopReason> {
        self.rings.drain();
        self.release(Release::All)
    }

    fn refuse(&mut self, line: &str, reason: String, kind: &'static str) -> Option<StopReason> {
        let event = moves::refusal(line, reason, kind, self.rings.events().watches());
        self.emit_event(&event, sys::monotonic_ns())
    }

    fn on_uevent(&mut self) -> Result<Option<StopReason>> {
        let armed = self.armed_cpus();
        let changes = match &mut self.hotplug {
            Some(h) => h.on_readable(&armed),
            None => return Ok(None),
        };
        self.follow(changes)
    }

    fn reconcile_if_due(&mut self) -> Result<Option<StopReason>> {
        // Asked after every drain: the armed set is only built (allocated) when a reconcile is due.
        if !self.hotplug.as_ref().is_some_and(Hotplug::reconcile_due) {
            return Ok(None);
        }
        let armed = self.armed_cpus();
        let mut changes = match &mut self.hotplug {
            Some(h) => h.reconcile(&armed),
            None => return Ok(None),
        };
        // A module whose removal uevent was dropped: gone from sysfs all the same.
        let sys_module = std::path::Path::new(unload::SYS_MODULE);
        changes.modules_removed.extend(
            self.modules
                .iter()
                .filter(|m| unload::gone(m, sys_module))
                .map(|m| m.to_string()),
        );
        self.follow(changes)
    }

    /// Watched process `pid` exec'd `comm`: the kernel took it out of the watched processes before the
    /// new program ran; the reader is told, and the run ends when that let go of the last watched process
    /// (see [`Watched::exec`]).
    fn process_exec(&mut self, pid: u32, comm: &str, time: u64) -> Option<StopReason> {
        let ends = self.watched.exec(pid, &self.epoll)?;
        let event = StreamEvent::ProcessExec {
            pid,
            comm: comm.to_string(),
        };
        if let Some(stop) = self.emit_event(&event, time) {
            return Some(stop);
        }
        ends.then_some(StopReason::Exited)
    }

    /// A kernel module was removed: every watch on its memory is drained, closed and marked, before any
    /// hit of the other watches recorded after this moment; when no watch is left the run ends (exit 0).
    fn module_removed(&mut self, module: &str) -> Option<StopReason> {
        self.modules.retain(|m| &**m != module);
        let events = self.rings.events();
        let plan = unload::plan(events.watches(), |i| events.is_armed(i), module)?;
        for &i in &plan.targets {
            let audits = self.rings.close_watch(i, &self.epoll);
            self.audits.extend(audits);
        }
        // Everything the module's watches recorded is printed before the mark. The other rings are read
        // and released with them: a record of theirs still on its way (within the sort slack) prints after
        // the mark, as after a `--control` move.
        if let Some(stop) = self.flush_rings() {
            return Some(stop);
        }
        let event = StreamEvent::ModuleUnloaded {
            module: module.to_string(),
            targets: plan
                .targets
                .iter()
                .map(|&i| self.rings.events().watches()[i].label.clone())
                .collect(),
        };
        if let Some(stop) = self.emit_event(&event, sys::monotonic_ns()) {
            return Some(stop);
        }
        plan.last.then_some(StopReason::ModuleUnloaded)
    }

    /// Brings the armed set in line with what hotplug reports: drains and closes the events of CPUs that went
    /// away, opens fresh ones on CPUs that came (a dead CPU-bound event never revives, see kernel-facts).
    fn follow(&mut self, changes: Changes) -> Result<Option<StopReason>> {
        for m in &changes.modules_removed {
            if let Some(stop) = self.module_removed(m) {
                return Ok(Some(stop));
            }
        }
        for &cpu in &changes.offline {
            if let Some(stop) = self.cpu_offline(cpu) {
                return Ok(Some(stop));
            }
        }
        for &cpu in &changes.online {
            if let Some(stop) = self.cpu_online(cpu, changes.uevent_ns) {
                return Ok(Some(stop));
            }
        }
        Ok(None)
    }

    /// `cpu` went offline: whatever it wrote before it left is still in its ring, printed before the mark;
    /// its counters freeze where they were.
    fn cpu_offline(&mut self, cpu: u32) -> Option<StopReason> {
        if let Some(ns) = self.unwatched.offline(cpu, sys::monotonic_ns()) {
            *self.summary.unwatched_ns_by_cpu.entry(cpu).or_default() += ns;
        }
        let audits = self.rings.close_cpu(cpu, &self.epoll)?;
        self.audits.extend(audits);
        if let Some(stop) = self.release(Release::Ready) {
            return Some(stop);
        }
        self.emit_event(&StreamEvent::CpuOffline { cpu }, sys::monotonic_ns())
    }

    /// `cpu` came online (its uevent at `uevent_ns`, if one told): armed, or marked as not armed.
    fn cpu_online(&mut self, cpu: u32, uevent_ns: Option<u64>) -> Option<StopReason> {
        if self.rings.events().cpus().contains(&cpu) {
            return None;
        }
        let open_start = sys::monotonic_ns();
        let seen = uevent_ns.unwrap_or(open_start);
        let opened = self.rings.open_cpu(cpu, &self.epoll, TOKEN_RING);
        let event = match opened {
            Ok(()) => {
                self.objects_cpu_online(cpu);
                let now = sys::monotonic_ns();
                *self.summary.unwatched_ns_by_cpu.entry(cpu).or_default() +=
                    self.unwatched.armed(cpu, seen, now);
                StreamEvent::CpuOnline {
                    cpu,
                    after_uevent_ns: uevent_ns.map(|t| now.saturating_sub(t)),
                    open_ns: now.saturating_sub(open_start),
                }
            }
            // ENODEV: it went away again before we got to it; the next uevent or reconcile sorts it out.
            Err(e)
                if e.stage == crate::perf::event::Stage::Open
                    && e.err.raw_os_error() == Some(libc::ENODEV) =>
            {
                return None
            }
            Err(e) => self.arm_failed(cpu, seen, &e)?,
        };
        if let Some(stop) = self.emit_event(&event, sys::monotonic_ns()) {
            return Some(stop);
        }
        // The `NOT armed` mark is out; the session ends like a signal ends it (summary, then exit 3).
        self.fatal.as_ref().map(|_| StopReason::StrictHotplug(cpu))
    }

    /// A CPU came online (first seen at `seen`) and could not be armed: unwatched from then on, marked once
    /// in the stream (and on stderr) and retried on every reconcile; `None` when it was already marked.
    /// With --strict-hotplug the mark is also the end: the failure is kept for [`Session::run`] to return
    /// after the summary.
    fn arm_failed(&mut self, cpu: u32, seen: u64, e: &OpenError) -> Option<StreamEvent> {
        let strict = self.hotplug.as_ref().is_some_and(|h| h.strict);
        if !self.unwatched.failed(cpu, seen, strict) {
            return None;
        }
        let (reason, kind) = self.explain(e);
        if strict {
            self.fatal = Some(Error::arm(format!("--strict-hotplug: {reason}")));
        }
        Some(StreamEvent::CpuArmFailed { cpu, reason, kind })
    }

    /// An open or enable refusal while running, in the user's words ([`Plan::advise`]), with its kind.
    fn explain(&self, e: &OpenError) -> (String, &'static str) {
        let r = explain(e, self.rings.events().watches());
        ((self.advise)(&r), r.kind.as_str())
    }

    /// A write error on the output ends the session. A closed pipe (`| head`) is a normal end; anything else
    /// (a full disk) is kept and reported as a run-time error once every breakpoint is released.
    fn write_failed(&mut self, e: io::Error) -> StopReason {
        if e.kind() != io::ErrorKind::BrokenPipe {
            self.output_error.get_or_insert(e);
        }
        StopReason::BrokenPipe
    }

    /// Filters, names and prints one hit (with the value read when it was drained, or for `--value` the
    /// store's, decoded from its `trap`), honouring --count.
    fn hit(
        &mut self,
        sample: &Sample,
        watch: usize,
        value: Value,
        trap: Option<&Trap>,
    ) -> Option<StopReason> {
        if self.limits.count.is_some_and(|n| self.summary.hits() >= n) {
            return Some(StopReason::Count);
        }
        let comm = self.tasks.name(sample.pid, sample.tid);
        if !self.filter.admits(sample.tid, sample.in_kernel(), comm)
            || self.watched.exec_ended(sample.pid)
        {
            self.summary.filtered += 1;
            return None;
        }
        if let Some(o) = &mut self.objects {
            if o.slots.after_free(watch, sample.time) {
                return None;
            }
            o.slots.hit(watch);
        }
        *self.summary.hits_by_cpu.entry(sample.cpu).or_default() += 1;
        // Where the store's instruction starts, from its function's symbol: before the chain is named
        // (that borrows the symbols until the hit is printed).
        let insn_len = trap.and_then(|t| self.symbolizer.insn_len(sample.pid, sample.ip, &t.insn));
        // A kept hit holds its chain: the symbolizer's cached one, shared.
        let shared = self
            .flight
            .is_some()
            .then(|| self.symbolizer.shared(sample));
        let named: &NamedChain = match &shared {
            Some(c) => c,
            None => self.symbolizer.named(sample),
        };
        let hit_watch = self.rings.events().watch_of(watch, sample.addr);
        let (value, part) = match trap {
            Some(t) => store_value::decide(value, sample, hit_watch.len, t, insn_len),
            None => (value, None),
        };
        let value = self.olds.settle(
            watch,
            sample.addr,
            (hit_watch.len, sample.pid),
            (value, part),
            || match events::read_value(sample.pid, sample.addr, hit_watch.len) {
                Value::Read(v) => Some(v),
                _ => None,
            },
            &mut self.summary,
        );
        let hit = Hit {
            sample,
            watch: hit_watch,
            watch_index: watch,
            comm,
            ip: &named.ip,
            chain: &named.frames,
            value,
            rendered: named.rendered(),
        };
        if let Some(t) = &mut self.summary.tally {
            t.add(&hit);
        }
        let printed = match (self.flight.as_mut(), &shared) {
            (Some(rec), Some(chain)) => rec.offer(&hit, std::rc::Rc::clone(chain), &mut self.out),
            _ => self.out.hit(&hit),
        };
        if let Err(e) = printed {
            return Some(self.write_failed(e));
        }
        None
    }

    /// One turn's read of the rings: drained, and what the pipeline releases applied. With `--last`, a
    /// `--dump-on` tracepoint is asked first (every hit from before its firing is then in the rings, and
    /// goes into the recorder ahead of the dump whatever the sort slack holds back), and a SIGUSR1 read
    /// this turn (at `signalled`) dumps after the release.
    fn read_rings(&mut self, signalled: Option<u64>) -> Result<Option<StopReason>> {
        let fired = self.tracepoint_fired()?;
        self.rings.drain();
        if let Some((trigger, time)) = fired {
            if let Some(stop) = self.dump_at_tracepoint(trigger, time) {
                return Ok(Some(stop));
            }
        }
        if let Some(stop) = self.release(Release::Ready) {
            return Ok(Some(stop));
        }
        Ok(signalled.and_then(|time| self.dump(DumpTrigger::Signal, time, None)))
    }

    /// `--last`: the latest firing of a `--dump-on` tracepoint since the last turn, and its time.
    fn tracepoint_fired(&mut self) -> Result<Option<(DumpTrigger, u64)>> {
        match self.flight.as_mut() {
            Some(rec) => rec
                .tracepoint_fired()
                .or_exit(ExitCode::Runtime, "reading the --dump-on tracepoint counts"),
            None => Ok(None),
        }
    }

    /// A tracepoint fired at `time`: every record from before it is applied (hits recorded), then the hits
    /// recorded up to `time` are printed.
    fn dump_at_tracepoint(&mut self, trigger: DumpTrigger, time: u64) -> Option<StopReason> {
        while let Some((t, item)) = self.rings.next(Release::Until(time)) {
            if let Some(stop) = self.apply(t, item) {
                return Some(stop);
            }
        }
        self.dump(trigger, time, Some(time))
    }

    /// `--last`: prints the kept hits (up to `until`) under a heading for `trigger` at `time`.
    fn dump(&mut self, trigger: DumpTrigger, time: u64, until: Option<u64>) -> Option<StopReason> {
        let rec = self.flight.as_mut()?;
        match rec
            .dump(&mut self.out, trigger, time, until)
            .and_then(|()| self.out.flush())
        {
            Ok(()) => None,
            Err(e) => Some(self.write_failed(e)),
        }
    }
}
