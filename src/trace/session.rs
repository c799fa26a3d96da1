//! The wiring of the session's parts: one epoll set holding every armed event's ring, the stop signals,
//! the uevent socket (when following hotplug), the `--control` source, `--on`'s object rings, the
//! watched processes' pidfds and stdout when the stream goes to a pipe or socket (its hang-up only,
//! [`reader`]). The loop itself, which wake goes to which part and when the run stops, is [`wakes`],
//! driven through [`Looping`] and [`Ending`], implemented here over those descriptors. Each wake reaches
//! the part it concerns: the rings the [`Stream`] through the [`Pipeline`] (records in timestamp order
//! across rings; with `--last`, the flight recorder's triggers, [`flight::turn`]), control lines
//! [`Moves`], uevents and the reconcile [`Follow`] (CPUs) and [`Modules`] (module unloads), object
//! records [`Objects`], a pidfd [`Watched`]. Each part acts on the session through its own narrow trait
//! over the shared [`Rings`] (the watches, draining, printing, a refusal's words), implemented here by
//! [`Turn`] over the rings, the stream and the epoll set.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use ksymwatch_symbols::{LineSource, Origin, UserSymbols};

use crate::config::plan::{read_start_time, OldValues, Started};
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
use crate::trace::deadline;
use crate::trace::events;
use crate::trace::flight::{self, Recorder, Turning};
use crate::trace::hotplug::{Arming, Changes, Follow, Hotplug};
use crate::trace::moves::{Controller, Moves, Steering};
use crate::trace::objects::{ObjectWatch, Objects, Placing, Slots};
use crate::trace::olds::Olds;
use crate::trace::pipeline::{Pipeline, Release};
use crate::trace::reader;
use crate::trace::stream::Stream;
use crate::trace::symbolize::Symbolizer;
use crate::trace::tasks::Tasks;
use crate::trace::unload::{self, Modules, Unloading};
use crate::trace::wakes::{self, Ending, Looping, Wake};
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
    /// When each `-p` process started, as planned: a pid that names another process once its pidfd is
    /// open is not followed ([`Watched`]).
    pub started: &'a [Started],
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
    /// Every watched process was gone before the run began ([`Watched::gone_before`]).
    gone_before: bool,
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
            started,
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
        // The loaded modules are looked up now, armed: the scope moves into the rings below.
        let modules = Modules::new(watches, &scope, Path::new(unload::SYS_MODULE));
        // After arming: a process that exited since it was planned is not waited for, even where its
        // pid is another process's by now.
        let watched = Watched::new(
            scope.pids(),
            started,
            following,
            &epoll,
            Wake::Process(0).token(),
            sys::pidfd_open,
            read_start_time,
        )?;
        let gone_before = watched.gone_before();
        if let Some(h) = cfg.delivery.hit_programs() {
            for &pid in watched.gone() {
                // Best effort: a pid the exit program already took out is not in the map.
                let _ = h.unwatch_process(pid);
            }
        }
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
            // A CPU that comes online arms no process given a watched one's pid during the run.
            .map(|set| set.planned(started.iter().map(|s| (s.pid, s.ticks)).collect()))
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
            modules,
            objects: None,
            limits,
            advise,
            gone_before,
        })
    }

    /// The output, for what is printed before the run (the `armed` line).
    pub fn out(&mut self) -> &mut O {
        self.stream.out()
    }

    /// A warning the summary ends with (what arming knew of the watch's limits).
    pub fn note(&mut self, warning: &str) {
        self.stream.note(warning);
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

    /// Runs until a limit, a signal or a closed stdout ([`wakes::run`]); returns the summary. Every event is
    /// disabled and closed before this returns, on every path ([`wakes::end`]). A `--strict-hotplug`
    /// failure ends the session like a signal (the rings drained, the summary printed) and is then
    /// returned as the error.
    pub fn run(mut self) -> Result<Summary> {
        let start = Instant::now();
        let deadline = self
            .limits
            .duration
            .map(|d| sys::monotonic_ns().saturating_add(d.as_nanos() as u64));
        // A write waiting for a stalled reader looks at the deadline too.
        deadline::set(deadline);
        let ran = wakes::run(&mut self, deadline);
        let stop = wakes::end(&mut self, ran, deadline)?;
        let summary = self.stream.finish(stop, start.elapsed())?;
        if let Some(e) = self.cpus.take_fatal() {
            return Err(e);
        }
        Ok(summary)
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

/// The loop's view of the session: its epoll set and signals, each source handed to its part.
impl<O: Output> Looping for Session<'_, O> {
    fn now(&self) -> u64 {
        sys::monotonic_ns()
    }

    fn counted(&self) -> u64 {
        self.stream.counted()
    }

    fn due(&self) -> Option<u64> {
        self.rings.due()
    }

    fn wait(&mut self, tokens: &mut Vec<u64>, timeout: Duration) -> Result<()> {
        self.epoll
            .wait(tokens, timeout)
            .or_exit(ExitCode::Runtime, "epoll_wait")
    }

    fn signal(&mut self) -> Option<u32> {
        self.signals.read().ok().flatten()
    }

    fn control_unpolled(&self) -> bool {
        self.control.as_ref().is_some_and(Moves::unpolled)
    }

    fn control_mid_line(&self) -> bool {
        self.control.as_ref().is_some_and(Moves::mid_line)
    }

    fn on_control(&mut self) -> Result<Option<StopReason>> {
        let (mut turn, control, ..) = self.turn();
        let epoll = turn.epoll;
        match control {
            Some(c) => c.on_readable(epoll, &mut turn),
            None => Ok(None),
        }
    }

    fn on_uevent(&mut self) -> Option<StopReason> {
        let armed = self.armed_cpus();
        let changes = self.hotplug.as_mut()?.on_readable(&armed);
        self.follow(&changes)
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

    fn exited(&mut self, i: usize) -> bool {
        self.stream.note_exit(i, &self.epoll)
    }

    fn gone_before(&self) -> bool {
        self.gone_before
    }

    fn read_rings(&mut self, signalled: Option<u64>) -> Result<Option<StopReason>> {
        let (mut turn, ..) = self.turn();
        flight::turn(&mut turn, signalled)
    }

    fn reconcile(&mut self) -> Option<StopReason> {
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
}

/// The end's view of the session: the rings, the stream and the CPUs followed.
impl<O: Output> Ending for Session<'_, O> {
    fn now(&self) -> u64 {
        sys::monotonic_ns()
    }

    fn disable(&mut self) {
        self.rings.events().disable_all();
    }

    fn close(&mut self) {
        self.rings.close_all();
    }

    fn pending_signal(&mut self) -> Option<u32> {
        self.signals.read().ok().flatten()
    }

    fn print_rest(&mut self, stop: StopReason) -> StopReason {
        self.stream.end(&mut self.rings, &self.epoll, stop)
    }

    fn output_not_read(&mut self) {
        self.stream.output_not_read();
    }

    fn stop_heard(&mut self) {
        deadline::now();
    }

    fn gave_way(&self) -> bool {
        deadline::gave_way()
    }

    fn note_unwatched(&mut self) {
        let end = self.rings.events().watched_time(sys::monotonic_ns());
        for (cpu, ns) in self.cpus.end(end) {
            self.stream.note_unwatched(cpu, ns);
        }
    }

    fn take_error(&mut self) -> Result<()> {
        self.stream.take_error()
    }

    fn settle_counts(&mut self) {
        self.stream.settle_counts(self.rings.events());
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
        // What the old watch lost is marked before the mark that follows (a move, `off`): the next record
        // to carry the count would be after it.
        self.rings.drain_to_now();
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
        // `--on`: allocations on the new CPU reach the tracer. The ring the CPU had before it went away
        // stays until it is read empty (allocations made there just before are in it).
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
        self.rings.events_mut().steer(index, watch)
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
