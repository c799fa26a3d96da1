//! The event loop, and the wiring of the session's parts: one epoll set holding every armed event's
//! ring, the stop signals, the uevent socket (when following hotplug), the `--control` source, `--on`'s
//! object rings, the watched processes' pidfds and stdout when the stream goes to a pipe or socket (its
//! hang-up only, [`reader`]). Each wake is dispatched to the part it concerns:
//! the rings to the [`Stream`] through the [`Pipeline`] (records in timestamp order across rings; with
//! `--last`, the flight recorder's triggers, [`flight::turn`]), control lines to [`Moves`], uevents and
//! the reconcile to [`Follow`] (CPUs) and [`Modules`] (module unloads), object records to [`Objects`],
//! a pidfd to [`Watched`]; stdout's hang-up ends the run as a closed output. Each part acts on the session through its own narrow trait over the shared
//! [`Rings`] (the watches, draining, printing, a refusal's words), implemented here by [`Turn`] over the
//! rings, the stream and the epoll set; what woke the loop is a [`Wake`].

use std::collections::BTreeSet;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Instant;

use ksymwatch_symbols::{LineSource, Origin, UserSymbols};

use crate::config::plan::OldValues;
use crate::config::symbols::KernelTable;
use crate::error::{Context, ExitCode, Result};
use crate::model::filter::Filter;
use crate::model::scope::Scope;
use crate::model::watch::Watch;
use crate::model::Limits;
use crate::perf::arm::Armed;
use crate::perf::bpf::hit_set::Following;
use crate::perf::bpf::objects::ObjectSource;
use crate::perf::denial;
use crate::perf::event::{EventConfig, OpenError};
use crate::perf::refusal::{explain, explain_move, Refusal};
use crate::perf::sys::{self, Epoll, SignalFd};
use crate::report::cgroup::CgroupNames;
use crate::report::{Covered, DumpTrigger, Output, StopReason, StreamEvent, Summary};
use crate::trace::comm::Comms;
use crate::trace::context::{Marks, ProcessMemory, Rings};
use crate::trace::events;
use crate::trace::flight::{self, Recorder, Turning};
use crate::trace::hotplug::{Arming, Changes, Follow, Hotplug};
use crate::trace::moves::{Controller, Moves, Steering};
use crate::trace::objects::{ObjectWatch, Objects, Placing, Slots};
use crate::trace::olds::Olds;
use crate::trace::pace::Pace;
use crate::trace::pipeline::{Pipeline, Release};
use crate::trace::reader;
use crate::trace::stream::Stream;
use crate::trace::symbolize::Symbolizer;
use crate::trace::tasks::Tasks;
use crate::trace::unload::{self, Modules, Unloading};
use crate::trace::watched::Watched;

/// What a session watches and how: fixed for its lifetime.
pub struct Setup<'a> {
    pub watches: &'a [Watch],
    pub symbols: KernelTable<'a>,
    pub cfg: EventConfig,
    /// What the loaded programs do to the watched processes as they live (nothing on the sample paths).
    pub following: Following,
    /// How long a record waits for older ones from the other rings before it is released in time order:
    /// the hit rings' slack or the perf rings' ([`crate::trace::pace`]).
    pub sort_slack_ns: u64,
    pub limits: Limits,
    pub filter: Filter,
    /// `--cgroup`: the hits name their writers' cgroups, from the v2 hierarchy (none without the option or
    /// the hierarchy).
    pub cgroups: Option<CgroupNames>,
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
    /// How `--value`'s `old` is kept, as the plan decided (`--if` checked again on a hit that raced; the
    /// kernel's `old` where it may drop traps), and whether it is seeded with what each watched range
    /// holds once the events are armed.
    pub old_values: OldValues,
    /// `--last N --dump-on ...`: hits are kept, and printed when a trigger fires (SIGUSR1 is then among
    /// the signals read).
    pub flight: Option<Recorder>,
    /// Words a refusal to arm or enable while running (a CPU that came online, `--control on`) as the
    /// user reads it: the command line's layer names the option behind each remedy.
    pub advise: fn(&Refusal) -> String,
    /// stdout carries a product (the stream, with no `-o FILE`; or `--folded`'s stacks): its reader going
    /// away ends the run ([`reader`]).
    pub stream_on_stdout: bool,
}

/// What woke the loop: each source's epoll token names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Signal,
    Ring,
    Uevent,
    Control,
    Objects,
    /// stdout failed or hung up: its reader is gone.
    Output,
    /// The i-th watched process's pidfd.
    Process(usize),
}

/// The first watched process's token; the others follow it.
const PROCESS_TOKENS: u64 = 16;

impl Wake {
    const SOURCES: [Wake; 6] = [
        Wake::Signal,
        Wake::Ring,
        Wake::Uevent,
        Wake::Control,
        Wake::Objects,
        Wake::Output,
    ];

    fn token(self) -> u64 {
        match self {
            Wake::Process(i) => PROCESS_TOKENS + i as u64,
            source => Wake::SOURCES.iter().position(|&s| s == source).unwrap_or(0) as u64,
        }
    }

    fn of(token: u64) -> Option<Wake> {
        match token.checked_sub(PROCESS_TOKENS) {
            Some(i) => Some(Wake::Process(i as usize)),
            None => Wake::SOURCES.get(token as usize).copied(),
        }
    }
}
/// The target `--control watch` moves: the planning takes one target with `--control`.
const STEERED: usize = 0;

pub struct Session<'a, O: Output> {
    /// The armed events' rings, drained into time order.
    rings: Pipeline,
    /// What the released records are applied to, and the output.
    stream: Stream<'a, O>,
    epoll: Epoll,
    signals: SignalFd,
    control: Option<Moves<'a>>,
    hotplug: Option<Hotplug>,
    /// CPUs armed and not, as hotplug reports them.
    cpus: Follow,
    /// Loadable modules holding targets.
    modules: Modules,
    /// `--on`: the objects' source and decisions.
    objects: Option<(ObjectSource, Objects)>,
    limits: Limits,
    advise: fn(&Refusal) -> String,
}

impl<'a, O: Output> Session<'a, O> {
    /// Takes ownership of the armed events. `signals` must have been created before arming so a Ctrl-C during
    /// arming is not lost; `hotplug` is the uevent listener when CPUs are followed.
    pub fn new(
        setup: Setup<'a>,
        out: O,
        armed: Armed,
        signals: SignalFd,
        hotplug: Option<Hotplug>,
    ) -> Result<Self> {
        let Setup {
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
            old_values,
            following,
            sort_slack_ns,
            cgroups,
            flight,
            advise,
            stream_on_stdout,
        } = setup;
        let epoll = Epoll::new().or_exit(ExitCode::Runtime, "epoll_create")?;
        epoll
            .add(signals.fd(), Wake::Signal.token())
            .or_exit(ExitCode::Runtime, "epoll")?;
        // Only a kernel watch can hold a module's memory.
        let scope_is_system = matches!(scope, Scope::System);
        let watched = Watched::new(
            scope.pids(),
            following,
            &epoll,
            Wake::Process(0).token(),
            sys::pidfd_open,
        )?;
        let mut olds = Olds::new(old_values.condition, old_values.kernel_drops);
        if old_values.seeded {
            // The events are armed: a launched command is still stopped at its exec, its range as the
            // program starts.
            olds.seed_from(watches, &scope.pids(), &ProcessMemory);
        }
        let rings = Pipeline::new(sort_slack_ns, |sorter| {
            events::EventSet::new(
                watches,
                cfg,
                scope,
                armed.events,
                &epoll,
                Wake::Ring.token(),
                sorter,
            )
        })
        .or_exit(ExitCode::Runtime, "epoll")?;
        if let Some(fd) = hotplug.as_ref().and_then(Hotplug::fd) {
            epoll
                .add(fd, Wake::Uevent.token())
                .or_exit(ExitCode::Runtime, "epoll")?;
        }
        // Registered once, for the whole run: stdout stays open to the end.
        reader::follow(
            stream_on_stdout,
            io::stdout().as_fd(),
            sys::file_mode,
            &epoll,
            Wake::Output.token(),
        );
        let control = match control {
            Some(c) => Some(Moves::new(c, &epoll, Wake::Control.token(), STEERED)?),
            None => None,
        };
        let strict = hotplug.as_ref().is_some_and(|h| h.strict);
        // No process is scanned here: `armed` goes out first (see `learn_tasks` and `Setup::user`).
        Ok(Session {
            rings,
            stream: Stream::new(
                out,
                Symbolizer::with_user(symbols, user)
                    .with_lines(lines)
                    .with_origin(symbols_origin),
                Tasks::new(comms),
                watched,
                olds,
            )
            .with_limits(limits, filter)
            .with_tally(tally)
            .with_flight(flight)
            .with_cgroups(cgroups),
            epoll,
            signals,
            control,
            hotplug,
            cpus: Follow::new(strict),
            modules: Modules::new(watches, scope_is_system, Path::new(unload::SYS_MODULE)),
            objects: None,
            limits,
            advise,
        })
    }

    /// The output, for what is printed before the run (the `armed` line).
    pub fn out(&mut self) -> &mut O {
        self.stream.out()
    }

    /// `--on`: from now on each new object the source reports is armed in a free slot.
    pub fn watch_objects(&mut self, objects: ObjectWatch) -> Result<()> {
        let (source, slots, objects) = Objects::new(objects);
        for fd in source.fds() {
            self.epoll
                .add(fd, Wake::Objects.token())
                .or_exit(ExitCode::Runtime, "epoll")?;
        }
        self.stream.start_objects(slots, objects.target.name());
        self.objects = Some((source, objects));
        // From now on no hit is released before the object records of its time are carried out.
        self.rings.read_elsewhere(sys::monotonic_ns());
        Ok(())
    }

    /// Learns the name of every task alive now. Called right after `armed` is printed (a listing of every
    /// task, a few milliseconds, is not worth delaying that line for), for the tasks born since the
    /// caller's own scan ([`Setup::comms`]): with the FORK and COMM records that follow, every task that
    /// can hit has a name even if it exits before its hit is printed.
    /// Reads every live task's name (a task the start-up scan missed started after arming, and its
    /// FORK/COMM records name it). Not on the hit path: each hit record carries its writer's name, and a
    /// process of 100,000 threads would cost a second of /proc reads.
    pub fn learn_tasks(&mut self) {
        if self.rings.events().hit_path() {
            return;
        }
        self.stream.scan_tasks();
    }

    pub fn armed_cpus(&self) -> BTreeSet<u32> {
        self.rings.events().cpus()
    }

    /// The parts' view of the session: the rings, the stream and the epoll set (and `--on`'s source,
    /// which a CPU coming online gets a ring of).
    fn turn(
        &mut self,
    ) -> (
        Turn<'_, 'a, O>,
        &mut Option<Moves<'a>>,
        &mut Follow,
        &mut Modules,
    ) {
        let (source, _) = match &mut self.objects {
            Some((s, o)) => (Some(s), Some(o)),
            None => (None, None),
        };
        let turn = Turn {
            rings: &mut self.rings,
            stream: &mut self.stream,
            epoll: &self.epoll,
            objects: source,
            advise: self.advise,
        };
        (turn, &mut self.control, &mut self.cpus, &mut self.modules)
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
        // An output whose reader read nothing gave way to a stop signal (`cli::gives_way`): the run ends
        // as a closed output ends it, nothing more written, and the signal is why.
        let gave_way = match stop {
            StopReason::BrokenPipe => self.stop_signal(),
            _ => None,
        };
        let stop = self.stream.end(&mut self.rings, &self.epoll, stop);
        let stop = match gave_way {
            Some(sig) => {
                self.stream.output_not_read();
                StopReason::Signal(sig)
            }
            None => stop,
        };
        self.rings.close_all();
        // A CPU never armed since it came online was unwatched to the end.
        let end = self.rings.events().watched_time(sys::monotonic_ns());
        for (cpu, ns) in self.cpus.end(end) {
            self.stream.note_unwatched(cpu, ns);
        }
        self.stream.take_error()?;
        self.stream.use_totals(self.rings.events());
        let summary = self.stream.finish(stop, start.elapsed())?;
        if let Some(e) = self.cpus.take_fatal() {
            return Err(e);
        }
        Ok(summary)
    }

    /// A stop signal not read yet, read now.
    fn stop_signal(&self) -> Option<u32> {
        match self.signals.read() {
            Ok(Some(sig)) if sig != libc::SIGUSR1 as u32 => Some(sig),
            _ => None,
        }
    }

    fn run_loop(&mut self, deadline: Option<Instant>, tokens: &mut Vec<u64>) -> Result<StopReason> {
        while self.control.as_ref().is_some_and(Moves::unpolled) {
            if let Some(stop) = self.on_control()? {
                return Ok(stop);
            }
        }
        let mut pace = Pace::new(sys::monotonic_ns(), self.stream.counted());
        let mut signalled = None;
        loop {
            let due = self.rings.due();
            let mut timeout = pace.timeout(sys::monotonic_ns(), self.stream.counted(), due);
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
                let Some(wake) = Wake::of(t) else {
                    continue;
                };
                let stop = match wake {
                    Wake::Signal => match self.signals.read() {
                        // Only `--dump-on signal` reads SIGUSR1: the dump follows this turn's drain.
                        Ok(Some(sig)) if sig == libc::SIGUSR1 as u32 => {
                            signalled = Some(sys::monotonic_ns());
                            None
                        }
                        Ok(Some(sig)) => Some(StopReason::Signal(sig)),
                        _ => None,
                    },
                    Wake::Uevent => self.on_uevent(),
                    Wake::Control => self.on_control()?,
                    Wake::Objects => self.on_objects(),
                    Wake::Output => Some(reader::gone()),
                    Wake::Process(i) => {
                        let none_left = self.stream.note_exit(i, &self.epoll);
                        none_left.then_some(StopReason::Exited)
                    }
                    // The rings are read on every turn, whatever woke the loop.
                    Wake::Ring => None,
                };
                if let Some(stop) = stop {
                    return Ok(stop);
                }
            }
            // A control line left unended by a writer whose close raised no event is read again each
            // turn (a tick at most), until its end-of-file ends it.
            if self.control.as_ref().is_some_and(Moves::mid_line) {
                if let Some(stop) = self.on_control()? {
                    return Ok(stop);
                }
            }
            // `--on`: the frees written before the hits about to be released are carried out first, so
            // a store after its object's free is never reported as the object's.
            if let Some(stop) = self.on_objects() {
                return Ok(stop);
            }
            let (mut turn, ..) = self.turn();
            if let Some(stop) = flight::turn(&mut turn, signalled.take())? {
                return Ok(stop);
            }
            if let Some(stop) = self.reconcile_if_due() {
                return Ok(stop);
            }
        }
    }

    /// Reads the control source and applies each complete line in order.
    fn on_control(&mut self) -> Result<Option<StopReason>> {
        let (mut turn, control, ..) = self.turn();
        let epoll = turn.epoll;
        match control {
            Some(c) => c.on_readable(epoll, &mut turn),
            None => Ok(None),
        }
    }

    /// `--on`: arms each new object, disarms each freed one.
    /// The hits released after this wait for it ([`Pipeline::read_elsewhere`]).
    fn on_objects(&mut self) -> Option<StopReason> {
        let (source, objects) = self.objects.as_mut()?;
        let started = sys::monotonic_ns();
        let mut turn = Turn {
            rings: &mut self.rings,
            stream: &mut self.stream,
            epoll: &self.epoll,
            objects: None,
            advise: self.advise,
        };
        let stop = objects.apply(|records| source.drain(records), &mut turn);
        self.rings.read_elsewhere(started);
        stop
    }

    fn on_uevent(&mut self) -> Option<StopReason> {
        let armed = self.armed_cpus();
        let changes = self.hotplug.as_mut()?.on_readable(&armed);
        self.follow(&changes)
    }

    fn reconcile_if_due(&mut self) -> Option<StopReason> {
        // Asked after every drain: the armed set is only built (allocated) when a reconcile is due.
        if !self.hotplug.as_ref().is_some_and(Hotplug::reconcile_due) {
            return None;
        }
        let armed = self.armed_cpus();
        let mut changes = self.hotplug.as_mut()?.reconcile(&armed);
        // A module whose removal uevent was dropped: gone from sysfs all the same.
        changes.modules_removed.extend(self.modules.gone());
        self.follow(&changes)
    }

    /// Brings the watches in line with what the uevents and the reconcile report: modules removed first,
    /// then CPUs.
    fn follow(&mut self, changes: &Changes) -> Option<StopReason> {
        let (mut turn, _, cpus, modules) = self.turn();
        for m in &changes.modules_removed {
            if let Some(stop) = modules.removed(m, &mut turn) {
                return Some(stop);
            }
        }
        cpus.apply(changes, &mut turn)
    }
}

/// The session as its parts see it during one step: the rings, the stream and the epoll set.
struct Turn<'t, 'a, O: Output> {
    rings: &'t mut Pipeline,
    stream: &'t mut Stream<'a, O>,
    epoll: &'t Epoll,
    /// `--on`'s source: a CPU that comes online gets its object ring.
    objects: Option<&'t mut ObjectSource>,
    advise: fn(&Refusal) -> String,
}

impl<O: Output> Marks for Turn<'_, '_, O> {
    fn now(&self) -> u64 {
        sys::monotonic_ns()
    }

    fn emit(&mut self, event: &StreamEvent, time_ns: u64) -> Option<StopReason> {
        self.stream.emit(event, time_ns)
    }
}

impl<O: Output> Rings for Turn<'_, '_, O> {
    fn watches(&self) -> &[Watch] {
        self.rings.events().watches()
    }

    fn drain(&mut self) {
        self.rings.drain();
    }

    fn release_ready(&mut self) -> Option<StopReason> {
        self.stream.release(self.rings, self.epoll, Release::Ready)
    }

    /// In time order: the events are disabled, so nothing older can still arrive.
    fn flush(&mut self) -> Option<StopReason> {
        self.rings.drain();
        self.stream.release(self.rings, self.epoll, Release::All)
    }

    /// In the user's words ([`Setup::advise`]).
    fn explain(&self, e: &OpenError) -> (String, &'static str) {
        let r = explain(e, self.rings.events().watches());
        ((self.advise)(&r), r.kind.as_str())
    }
}

impl<O: Output> Arming for Turn<'_, '_, O> {
    fn watching(&self) -> bool {
        self.rings.events().enabled()
    }

    fn watched_time(&self, t: u64) -> u64 {
        self.rings.events().watched_time(t)
    }

    fn cpu_armed(&self, cpu: u32) -> bool {
        self.rings.events().cpus().contains(&cpu)
    }

    fn close_cpu(&mut self, cpu: u32) -> bool {
        let Some(audits) = self.rings.close_cpu(cpu, self.epoll) else {
            return false;
        };
        self.stream.audit_closed(audits);
        true
    }

    fn open_cpu(&mut self, cpu: u32) -> std::result::Result<(), OpenError> {
        self.rings.open_cpu(cpu, self.epoll, Wake::Ring.token())?;
        // `--on`: allocations on the new CPU reach the tracer. The ring of a CPU that went away stays,
        // emptied as any other.
        if let Some(source) = self.objects.as_deref_mut() {
            if source.open_cpu(cpu).is_ok() {
                if let Some(fd) = source.fds().last() {
                    let _ = self.epoll.add(fd, Wake::Objects.token());
                }
            }
        }
        Ok(())
    }
}

impl<O: Output> Unloading for Turn<'_, '_, O> {
    fn watch_armed(&self, index: usize) -> bool {
        self.rings.events().watch_armed(index)
    }

    fn close_watch(&mut self, index: usize) {
        let audits = self.rings.close_watch(index, self.epoll);
        self.stream.audit_closed(audits);
    }
}

impl<O: Output> Steering for Turn<'_, '_, O> {
    fn coverage(&self) -> Covered {
        self.rings.events().coverage()
    }

    fn enabled(&self) -> bool {
        self.rings.events().enabled()
    }

    fn pause(&mut self) {
        self.rings.events_mut().pause();
    }

    fn enable(&mut self) -> std::result::Result<(), OpenError> {
        self.rings.events_mut().enable()
    }

    fn cannot_move(&self, index: usize, watch: &Watch) -> Option<String> {
        self.rings.events().cannot_move(index, watch).or_else(|| {
            // The command line's rule (`Watch::if_undecidable`); the remedy here is the move's.
            let cond = self.stream.condition()?;
            let why = watch.if_undecidable()?;
            Some(format!("--if '{cond}': {why}; move with `w`"))
        })
    }

    fn retarget(&mut self, index: usize, watch: Watch) -> io::Result<()> {
        self.rings.events_mut().retarget(index, watch)
    }

    fn forget_olds(&mut self, index: usize) {
        self.stream.forget_olds(index);
    }

    fn explain_move(&self, e: &io::Error, watch: &Watch) -> (String, &'static str) {
        let scope = match self.rings.events().coverage() {
            Covered::Threads(_) => denial::Scope::Thread,
            Covered::Cpus(_) => denial::Scope::Cpu,
        };
        let r = explain_move(e, watch, scope);
        ((self.advise)(&r), r.kind.as_str())
    }
}

impl<O: Output> Placing for Turn<'_, '_, O> {
    fn arm(&mut self, slot: usize, watch: Watch) -> io::Result<()> {
        self.rings.events_mut().move_target(slot, watch, true)
    }

    fn park(&mut self, slot: usize, parked: Watch) {
        let _ = self.rings.events_mut().retarget(slot, parked);
    }

    fn flush_until(&mut self, time: u64) -> Option<StopReason> {
        self.rings.drain();
        self.stream
            .release(self.rings, self.epoll, Release::Until(time))
    }

    fn slots(&mut self) -> &mut Slots {
        self.stream.slots()
    }
}

impl<O: Output> Turning for Turn<'_, '_, O> {
    fn fired(&mut self) -> Result<Option<(DumpTrigger, u64)>> {
        self.stream.tracepoint_fired()
    }

    fn dump_at(&mut self, trigger: DumpTrigger, time: u64) -> Option<StopReason> {
        self.stream.dump_at(self.rings, self.epoll, trigger, time)
    }

    fn dump(&mut self, trigger: DumpTrigger, time: u64) -> Option<StopReason> {
        self.stream.dump(trigger, time, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each source has its own token, and a token names its source back; the watched processes' follow
    /// the sources', one each.
    #[test]
    fn a_token_names_what_woke_the_loop() {
        let wakes = Wake::SOURCES
            .into_iter()
            .chain([Wake::Process(0), Wake::Process(3)]);
        let tokens: Vec<u64> = wakes.clone().map(Wake::token).collect();
        assert_eq!(tokens, [0, 1, 2, 3, 4, 5, 16, 19]);
        for w in wakes {
            assert_eq!(Wake::of(w.token()), Some(w));
        }
        assert_eq!(Wake::of(6), None);
    }
}
