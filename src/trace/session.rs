//! The event loop: one epoll set holding every CPU's ring, the stop signals and (when following hotplug) the
//! uevent socket. Each wake drains every ring, orders the batch by timestamp across CPUs the way ftrace merges
//! its per-CPU buffers, and hands records to the [`Output`].

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::time::{Duration, Instant};

use ksymwatch_symbols::{LineSource, SymbolTable, UserSymbols};

use crate::error::{Context, Error, ExitCode, Result};
use crate::perf::arm::Armed;
use crate::perf::event::{CpuEvent, EventConfig};
use crate::perf::record::{self, Record, Sample, SAMPLE_TYPE};
use crate::perf::sys::{self, Epoll, SignalFd};
use crate::report::{Hit, Output, ResolvedFrame, StopReason, StreamEvent, Summary};
use crate::target::watch::Watch;
use crate::trace::comm::Comms;
use crate::trace::filter::Filter;
use crate::trace::hotplug::Hotplug;
use crate::trace::symbolize::Symbolizer;

/// When to stop, besides a signal.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub duration: Option<Duration>,
    pub count: Option<u64>,
}

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
}

const TOKEN_SIGNAL: u64 = 0;
const TOKEN_RING: u64 = 1;
const TOKEN_UEVENT: u64 = 2;

/// The loop drains at least this often even without a wake-up, bounding how long a lone hit waits.
const TICK: Duration = Duration::from_millis(10);

pub struct Session<'a, O: Output> {
    watches: &'a [Watch],
    symbolizer: Symbolizer<'a>,
    /// The current hit's chain, reused across hits.
    chain: Vec<ResolvedFrame>,
    pub out: O,
    cfg: EventConfig,
    events: BTreeMap<u32, Vec<CpuEvent>>,
    epoll: Epoll,
    signals: SignalFd,
    hotplug: Option<Hotplug>,
    comms: Comms,
    summary: Summary,
    limits: Limits,
    filter: Filter,
    batch: Vec<(Sample, usize)>,
    /// CPUs online but not armable (debug registers taken); already reported, retried on reconcile.
    unarmable: BTreeSet<u32>,
    /// The first output error that was not a closed pipe.
    output_error: Option<io::Error>,
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
        } = plan;
        let epoll = Epoll::new().or_exit(ExitCode::Runtime, "epoll_create")?;
        epoll
            .add(signals.fd(), TOKEN_SIGNAL)
            .or_exit(ExitCode::Runtime, "epoll")?;
        let mut events: BTreeMap<u32, Vec<CpuEvent>> = BTreeMap::new();
        for ev in armed.events {
            epoll
                .add(ev.fd(), TOKEN_RING)
                .or_exit(ExitCode::Runtime, "epoll")?;
            events.entry(ev.cpu).or_default().push(ev);
        }
        if let Some(fd) = hotplug.as_ref().and_then(Hotplug::fd) {
            epoll
                .add(fd, TOKEN_UEVENT)
                .or_exit(ExitCode::Runtime, "epoll")?;
        }
        let mut comms = Comms::default();
        comms.scan_all();
        let mut user = UserSymbols::default();
        user.scan_all();
        Ok(Session {
            watches,
            symbolizer: Symbolizer::with_user(symbols, user).with_lines(lines),
            chain: Vec::new(),
            out,
            cfg,
            events,
            epoll,
            signals,
            hotplug,
            comms,
            summary: Summary {
                tally: tally.then(Default::default),
                ..Summary::default()
            },
            limits,
            filter,
            batch: Vec::new(),
            unarmable: BTreeSet::new(),
            output_error: None,
        })
    }

    pub fn armed_cpus(&self) -> BTreeSet<u32> {
        self.events.keys().copied().collect()
    }

    /// Runs until a limit, a signal or a closed stdout; returns the summary. Every event is disabled and
    /// closed before this returns, on every path.
    pub fn run(mut self) -> Result<Summary> {
        let start = Instant::now();
        let deadline = self.limits.duration.map(|d| start + d);
        let mut tokens = Vec::new();
        let result = self.run_loop(deadline, &mut tokens);
        for ev in self.events.values().flatten() {
            let _ = ev.disable();
        }
        let stop = match result {
            Ok(stop) => stop,
            Err(e) => {
                self.events.clear();
                return Err(e);
            }
        };
        // Records written before the disable are still in the rings: print them, unless the reader is gone or
        // the count is already met.
        let stop = match stop {
            StopReason::Duration | StopReason::Signal(_) => self.drain().unwrap_or(stop),
            other => other,
        };
        self.events.clear();
        if let Some(e) = self.output_error.take() {
            return Err(Error::runtime("writing output").caused_by(e));
        }
        self.summary.elapsed = start.elapsed();
        self.summary.stop = Some(stop);
        match self.out.finish(&self.summary) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
            Err(e) => return Err(Error::runtime("writing output").caused_by(e)),
        }
        Ok(self.summary)
    }

    fn run_loop(&mut self, deadline: Option<Instant>, tokens: &mut Vec<u64>) -> Result<StopReason> {
        loop {
            let mut timeout = TICK;
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(StopReason::Duration);
                }
                timeout = timeout.min(left);
            }
            let ms = timeout.as_millis().max(1) as i32;
            self.epoll
                .wait(tokens, ms)
                .or_exit(ExitCode::Runtime, "epoll_wait")?;
            for &t in tokens.iter() {
                match t {
                    TOKEN_SIGNAL => {
                        if let Ok(Some(sig)) = self.signals.read() {
                            return Ok(StopReason::Signal(sig));
                        }
                    }
                    TOKEN_UEVENT => {
                        if let Some(stop) = self.on_uevent()? {
                            return Ok(stop);
                        }
                    }
                    _ => {}
                }
            }
            if let Some(stop) = self.drain() {
                return Ok(stop);
            }
            if let Some(stop) = self.reconcile_if_due()? {
                return Ok(stop);
            }
        }
    }

    /// Empties every ring and prints what was in it, in time order. Returns a stop reason when the count is
    /// met or stdout closed.
    fn drain(&mut self) -> Option<StopReason> {
        let mut lost: Vec<(u32, u64)> = Vec::new();
        for (&cpu, evs) in self.events.iter_mut() {
            for ev in evs.iter_mut() {
                drain_event(ev, cpu, &mut self.batch, &mut lost, &mut self.comms);
            }
        }
        if let Some(stop) = self.report_lost(lost) {
            return Some(stop);
        }
        let mut stop = self.print_pending();
        if stop.is_none() && self.limits.count.is_some_and(|n| self.summary.hits() >= n) {
            stop = Some(StopReason::Count);
        }
        if let Err(e) = self.out.flush() {
            return Some(self.write_failed(e));
        }
        stop
    }

    /// Counts lost records in the summary and marks each in the stream: a loss is never silent, also not
    /// when it is found in the ring of a CPU that just went offline.
    fn report_lost(&mut self, lost: Vec<(u32, u64)>) -> Option<StopReason> {
        let now = sys::monotonic_ns();
        for (cpu, count) in lost {
            *self.summary.lost_by_cpu.entry(cpu).or_default() += count;
            if let Some(stop) = self.emit_event(&StreamEvent::Lost { cpu, count }, now) {
                return Some(stop);
            }
        }
        None
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

    fn on_uevent(&mut self) -> Result<Option<StopReason>> {
        let armed = self.armed_cpus();
        let changes = match &mut self.hotplug {
            Some(h) => h.on_readable(&armed),
            None => return Ok(None),
        };
        self.apply(changes)
    }

    fn reconcile_if_due(&mut self) -> Result<Option<StopReason>> {
        let armed = self.armed_cpus();
        let changes = match &mut self.hotplug {
            Some(h) if h.reconcile_due() => h.reconcile(&armed),
            _ => return Ok(None),
        };
        self.apply(changes)
    }

    /// Brings the armed set in line with what hotplug reports: drains and closes the events of CPUs that went
    /// away, opens fresh ones on CPUs that came (a dead CPU-bound event never revives, see kernel-facts).
    fn apply(&mut self, changes: crate::trace::hotplug::Changes) -> Result<Option<StopReason>> {
        for &cpu in &changes.offline {
            if let Some(mut evs) = self.events.remove(&cpu) {
                // Whatever the CPU wrote before it left is still in its ring.
                let mut lost = Vec::new();
                for ev in evs.iter_mut() {
                    drain_event(ev, cpu, &mut self.batch, &mut lost, &mut self.comms);
                    let _ = self.epoll.delete(ev.fd());
                }
                drop(evs);
                if let Some(stop) = self.report_lost(lost) {
                    return Ok(Some(stop));
                }
                let stop = self.print_pending();
                if stop.is_some() {
                    return Ok(stop);
                }
                if let Some(stop) =
                    self.emit_event(&StreamEvent::CpuOffline { cpu }, sys::monotonic_ns())
                {
                    return Ok(Some(stop));
                }
            }
        }
        for &cpu in &changes.online {
            if self.events.contains_key(&cpu) {
                continue;
            }
            let open_start = sys::monotonic_ns();
            let opened = crate::perf::arm::open_cpu(self.watches, cpu, &self.cfg);
            let open_ns = sys::monotonic_ns().saturating_sub(open_start);
            let event = match opened {
                Ok(evs) => match evs.iter().try_for_each(|e| e.enable()) {
                    Ok(()) => {
                        for ev in &evs {
                            self.epoll
                                .add(ev.fd(), TOKEN_RING)
                                .or_exit(ExitCode::Runtime, "epoll")?;
                        }
                        self.events.insert(cpu, evs);
                        self.unarmable.remove(&cpu);
                        StreamEvent::CpuOnline {
                            cpu,
                            after_uevent_ns: changes
                                .uevent_ns
                                .map(|t| sys::monotonic_ns().saturating_sub(t)),
                            open_ns,
                        }
                    }
                    Err(e) => match self.arm_failed(cpu, &e)? {
                        Some(ev) => ev,
                        None => continue,
                    },
                },
                Err(e) => {
                    // ENODEV: it went away again before we got to it; the next uevent or reconcile sorts it out.
                    if e.err.raw_os_error() == Some(libc::ENODEV) {
                        continue;
                    }
                    match self.arm_failed(cpu, &e)? {
                        Some(ev) => ev,
                        None => continue,
                    }
                }
            };
            if let Some(stop) = self.emit_event(&event, sys::monotonic_ns()) {
                return Ok(Some(stop));
            }
        }
        Ok(None)
    }

    /// A CPU came online and could not be armed: fatal with --strict-hotplug, otherwise marked once in the
    /// stream (and on stderr) and retried on every reconcile. `None` when it was already marked.
    fn arm_failed(
        &mut self,
        cpu: u32,
        e: &crate::perf::event::OpenError,
    ) -> Result<Option<StreamEvent>> {
        let reason = crate::perf::arm::explain(e, self.watches).to_string();
        if self.hotplug.as_ref().is_some_and(|h| h.strict) {
            return Err(Error::arm(format!("--strict-hotplug: {reason}")));
        }
        if !self.unarmable.insert(cpu) {
            return Ok(None);
        }
        Ok(Some(StreamEvent::CpuArmFailed { cpu, reason }))
    }

    /// A write error on the output ends the session. A closed pipe (`| head`) is a normal end; anything else
    /// (a full disk) is kept and reported as a run-time error once every breakpoint is released.
    fn write_failed(&mut self, e: io::Error) -> StopReason {
        if e.kind() != io::ErrorKind::BrokenPipe {
            self.output_error.get_or_insert(e);
        }
        StopReason::BrokenPipe
    }

    /// Prints the collected samples in time order, honouring --count.
    fn print_pending(&mut self) -> Option<StopReason> {
        self.batch.sort_by_key(|(s, _)| s.time);
        let batch = std::mem::take(&mut self.batch);
        let mut stop = None;
        for (sample, watch) in &batch {
            if self.limits.count.is_some_and(|n| self.summary.hits() >= n) {
                stop = Some(StopReason::Count);
                break;
            }
            let comm = self.comms.name(sample.pid, sample.tid);
            if !self.filter.admits(sample, comm) {
                self.summary.filtered += 1;
                continue;
            }
            *self.summary.hits_by_cpu.entry(sample.cpu).or_default() += 1;
            let ip = self.symbolizer.resolve(sample, &mut self.chain);
            let hit = Hit {
                sample,
                watch: &self.watches[*watch],
                watch_index: *watch,
                comm,
                ip: &ip,
                chain: &self.chain,
            };
            if let Some(t) = &mut self.summary.tally {
                t.add(&hit);
            }
            if let Err(e) = self.out.hit(&hit) {
                stop = Some(self.write_failed(e));
                break;
            }
        }
        // Keep the allocation for the next batch.
        self.batch = batch;
        self.batch.clear();
        stop
    }
}

fn drain_event(
    ev: &mut CpuEvent,
    cpu: u32,
    batch: &mut Vec<(Sample, usize)>,
    lost: &mut Vec<(u32, u64)>,
    comms: &mut Comms,
) {
    let watch = ev.watch;
    ev.ring.drain(|bytes| {
        match record::decode(bytes, SAMPLE_TYPE) {
            Ok(Record::Sample(s)) => batch.push((s, watch)),
            Ok(Record::Lost { lost: n, .. }) => lost.push((cpu, n)),
            Ok(Record::Comm { tid, comm, .. }) => comms.set(tid, &comm),
            Ok(Record::Fork {
                pid,
                ppid,
                tid,
                ptid,
            }) => {
                let _ = pid;
                comms.fork(ptid, ppid, tid)
            }
            Ok(_) => {}
            // A record we cannot decode is counted as lost: a loss is never silent.
            Err(_) => lost.push((cpu, 1)),
        }
        true
    });
}
