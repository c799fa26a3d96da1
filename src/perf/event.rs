//! One hardware breakpoint ring on one CPU: its perf attributes, its descriptor and its ring buffer, and for
//! a process watch the other threads' events whose records go to the same ring (`SET_OUTPUT`). A thin typed
//! wrapper. A watch's events are decided before anything is opened ([`Events`]: their settings and the hit
//! programs their delivery loads, into the [`EventConfig`] they are opened with), then described once
//! ([`Prepared`]: per CPU, each watch's [`RingSpec`] with its attributes built, and who they are opened
//! for); the all-or-nothing arming of that set across CPUs and threads is [`crate::perf::arm`]'s job.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use perf_event_open_sys::bindings as pb;

use crate::model::watch::{Access, Watch};
use crate::perf::attr::ring_attr;
use crate::perf::bpf::hit_set::{Checks, Following, HitPrograms, HitSet, LoadError};
use crate::perf::bpf_ring::BpfRing;
use crate::perf::record::{SAMPLE_CALLCHAIN, SAMPLE_TYPE, SAMPLE_TYPE_TASK};
use crate::perf::ring::Ring;
use crate::perf::sys;

/// Every breakpoint event of a watch as decided before anything is opened: the [`EventConfig`] they are
/// opened with once their programs are loaded ([`Events::load_programs`]).
pub struct Events<'a> {
    /// Data pages per perf ring.
    pub ring_pages: usize,
    /// As [`EventConfig::user_only`].
    pub user_only: bool,
    /// As [`EventConfig::percpu`].
    pub percpu: Option<crate::perf::bpf::percpu::Offsets>,
    /// What the programs check, if any are loaded.
    pub checks: Checks<'a>,
    /// Whom the events are opened for.
    pub binding: Binding,
    /// The hit programs every event attaches ([`Delivery::Hits`]); `None`: the breakpoints write perf
    /// samples ([`Delivery::Samples`]).
    pub programs: Option<HitSet>,
}

impl Events<'_> {
    /// Loads and attaches the programs ([`HitPrograms::start`], which hands `warn` what they could not
    /// set up); task records and loss counts asked of every event.
    pub fn load_programs(self, warn: &mut dyn FnMut(&str)) -> Result<EventConfig, LoadError> {
        let delivery = match self.programs {
            Some(set) => Delivery::Hits(Arc::new(HitPrograms::start(self.checks, set, warn)?)),
            None => Delivery::Samples,
        };
        Ok(EventConfig {
            ring_pages: self.ring_pages,
            user_only: self.user_only,
            track_tasks: true,
            count_lost: true,
            delivery,
            binding: self.binding,
            percpu: self.percpu,
        })
    }
}

/// How an event is sampled and buffered.
#[derive(Debug, Clone)]
pub struct EventConfig {
    /// Data pages per ring (a power of two).
    pub ring_pages: usize,
    /// Also emit COMM, FORK, EXIT and executable-mapping (MMAP2) records (one event per CPU needs them;
    /// more would duplicate).
    pub track_tasks: bool,
    /// Ask the kernel to count the samples it dropped (`PERF_FORMAT_LOST`, Linux 6.0+): the only way to
    /// see a loss at the end of a burst, which the kernel never writes a LOST record for.
    pub count_lost: bool,
    /// How hits reach the tracer, with the programs that path attaches.
    pub delivery: Delivery,
    /// Whom the events are opened for.
    pub binding: Binding,
    /// Watch user-space writers only (`exclude_kernel`): an unprivileged user's own process, where
    /// perf_event_paranoid forbids kernel-mode events.
    pub user_only: bool,
    /// A per-CPU variable is watched: where a CPU that comes online later finds its per-CPU base.
    pub percpu: Option<crate::perf::bpf::percpu::Offsets>,
}

impl EventConfig {
    /// A bare breakpoint: `ring_pages` per ring and nothing else (no task records, no loss count, no
    /// program, kernel writers included). What probes, the warm-up and tests open.
    pub const fn bare(ring_pages: usize) -> EventConfig {
        EventConfig {
            ring_pages,
            user_only: false,
            track_tasks: false,
            count_lost: false,
            delivery: Delivery::Samples,
            binding: Binding::Scope {
                remove_on_exec: false,
            },
            percpu: None,
        }
    }

    /// The configuration of watch `index`'s events: only the first watch's report task names and forks
    /// (more would repeat them).
    pub fn for_watch(&self, index: usize) -> EventConfig {
        EventConfig {
            track_tasks: self.track_tasks && index == 0,
            ..self.clone()
        }
    }

    /// The sample layout of a ring's breakpoint events: a process watch's leads with the identifier of
    /// the event that wrote each record. On the hit path no record carries a call chain (the program
    /// takes the stacks itself), and the layout is only the task records' trailer.
    pub fn sample_type(&self, bind: Bind) -> u64 {
        match (&self.delivery, bind) {
            (Delivery::Hits(_), _) => SAMPLE_TYPE_TASK & !SAMPLE_CALLCHAIN,
            (Delivery::Samples, Bind::Cpu) => SAMPLE_TYPE,
            (Delivery::Samples, Bind::Task(_)) => SAMPLE_TYPE_TASK,
        }
    }
}

/// How a breakpoint's hits reach the tracer, as loaded: the BPF programs attached to every event, or
/// none. One choice, so a configuration cannot name two paths at once.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// The hit path: each watch's hit program ([`crate::perf::bpf::hit`]), attached to every event,
    /// emits every kept hit into a BPF ring buffer per CPU ([`CpuEvent::hits`]) and reads the value
    /// itself; the breakpoint writes no sample of its own.
    Hits(Arc<HitPrograms>),
    /// Perf samples alone.
    Samples,
}

impl Delivery {
    /// The hit path's programs (none for perf samples).
    pub fn hit_programs(&self) -> Option<&Arc<HitPrograms>> {
        match self {
            Delivery::Hits(h) => Some(h),
            Delivery::Samples => None,
        }
    }

    /// What the kernel does to a process watch's processes as they live (nothing for perf samples).
    pub fn following(&self) -> Following {
        self.hit_programs()
            .map_or(Following::default(), |h| h.following())
    }
}

/// Whom a watch's events are opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// One event per CPU whatever the scope: the hit program chooses the processes in the kernel.
    Cpus,
    /// As the scope says: one event per CPU for a system-wide watch; for a process watch one per thread
    /// (a launched command's one, inherited), which the kernel applies to that task only.
    Scope {
        /// A thread that execs another program drops its events (`remove_on_exec`, Linux 5.13+), since
        /// the watched address means something else there.
        remove_on_exec: bool,
    },
}

impl Binding {
    /// Whether a thread that execs another program drops its event.
    pub fn remove_on_exec(&self) -> bool {
        match self {
            Binding::Cpus => false,
            Binding::Scope { remove_on_exec } => *remove_on_exec,
        }
    }
}

/// What an event watches on its CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// Every task (`pid = -1`).
    Cpu,
    /// One thread, and the threads it creates later (`inherit` + `inherit_thread`: their copies of the event
    /// write into this event's ring, and fork children, other programs, are not followed).
    Task(u32),
}

/// The pauses before each repeat of an enable (or disable) of events that threads inherit. The kernel
/// gives a created thread a copy of each inherited event in the state of its creator's copy, read before
/// the new copy joins the original's list of copies (`inherit_event`, kernel/events/core.c), while an
/// enable walks that list under its lock: a thread created as the walk passes its creator's copy reads
/// it still off and joins the list after the walk, so its copy stays off, and so does every copy made
/// from it. A chain of short-lived threads then goes unwatched on that CPU from the arming on, with
/// nothing lost or refused anywhere (measured under load: about one arming in 100 missed every store
/// of one chain on one CPU, 1,500 to 4,800 of ~10,000; `scripts/inherit-race.c` measures the race
/// alone: 24 of 3,000 trials left a copy off with one enable, none with one or two repeats). Enabling
/// again once such a copy has joined the list enables it and the copies made from it since; a new miss
/// then needs the same race again, from a copy the first one left off, during the repeat. The walk does
/// nothing to a copy already in the state asked for, so a repeat costs a lock per copy and no interrupt.
/// A move (MODIFY_ATTRIBUTES) walks the same list, and a copy made meanwhile keeps the old address: a
/// move that leaves the events off is repeated too; one that enables them in the same call is not (the
/// kernel turns each event off and on again to move it, so a repeat would open a gap of its own).
/// The same pauses give a thread being created time to show in its process's thread list before
/// arming takes the list as settled (`perf::arm`).
pub const REPEAT_PAUSES: [Duration; 2] = [Duration::from_millis(1), Duration::from_millis(5)];

/// The passes of an enable (or a disable, a move) of events: one now, then, when `repeat`, one after
/// each of [`REPEAT_PAUSES`]. Each is the pause to wait out before it (none the first time), for the
/// caller to wait the way its kernel does.
pub fn passes(repeat: bool) -> impl Iterator<Item = Option<Duration>> {
    let pauses: &[Duration] = if repeat { &REPEAT_PAUSES } else { &[] };
    std::iter::once(None).chain(pauses.iter().copied().map(Some))
}

/// `set` (an enable, a disable, a move) on every one of `events`, then again after each of
/// [`REPEAT_PAUSES`] when threads inherit any of them ([`passes`]); the first error ends it.
pub fn repeated_for_copies<'a, E>(
    events: impl Iterator<Item = &'a CpuEvent> + Clone,
    set: impl Fn(&CpuEvent) -> Result<(), E>,
) -> Result<(), E> {
    let inherited = events.clone().any(CpuEvent::inherited);
    passes(inherited).try_for_each(|pause| {
        if let Some(how_long) = pause {
            std::thread::sleep(how_long);
        }
        events.clone().try_for_each(&set)
    })
}

/// The attributes of a pinned, disabled, every-hit breakpoint on `watch`.
pub fn attr(watch: &Watch, cfg: &EventConfig, bind: Bind) -> pb::perf_event_attr {
    let mut a = ring_attr(pb::PERF_TYPE_BREAKPOINT);
    a.bp_type = match watch.access {
        Access::Write => pb::HW_BREAKPOINT_W,
        Access::ReadWrite => pb::HW_BREAKPOINT_RW,
    };
    a.bp_addr = watch.addr;
    a.bp_len = u64::from(watch.len);
    // On the hit path the breakpoint writes nothing itself: the program emits every hit. A CPU's
    // breakpoint asks nothing of its sample, which spares every trap the kernel's preparing of fields
    // no one reads (0.155 us a trap here: hit_bench's ret0-nosample), and its task records come from a
    // dummy event ([`tasks_attr`]). A thread's breakpoint asks for its task records itself, inherited
    // with it into the threads it creates, with their trailer's layout (no call chain).
    let cpu_hits = dummy_tasks(cfg, bind);
    a.sample_type = if cpu_hits { 0 } else { cfg.sample_type(bind) };
    if let Bind::Task(_) = bind {
        a.set_inherit(1);
        a.set_inherit_thread(1);
        if cfg.binding.remove_on_exec() {
            a.set_remove_on_exec(1);
        }
    }
    if cfg.count_lost {
        a.read_format = u64::from(pb::PERF_FORMAT_LOST);
    }
    if cfg.user_only {
        a.set_exclude_kernel(1);
        a.set_exclude_callchain_kernel(1);
    }
    a.set_disabled(1);
    // Pinned: if the debug register cannot be had the open fails now, instead of the event silently never
    // being scheduled.
    a.set_pinned(1);
    // Wake the reader a quarter of the way into the ring; the event loop also drains on a 10 ms tick, so a
    // single hit is never held back for long.
    a.set_watermark(1);
    a.wakeup_watermark = (cfg.ring_pages * sys::page_size() / 4) as u32;
    if cfg.track_tasks && !cpu_hits {
        track_tasks(&mut a);
    }
    a
}

/// Whether a breakpoint bound as `bind` takes its task records from a dummy event ([`tasks_attr`]): a
/// CPU's breakpoint on the hit path.
fn dummy_tasks(cfg: &EventConfig, bind: Bind) -> bool {
    matches!((&cfg.delivery, bind), (Delivery::Hits(_), Bind::Cpu))
}

/// Asks `a`'s event for the task records: names, forks and exits, executable mappings.
fn track_tasks(a: &mut pb::perf_event_attr) {
    a.set_comm(1);
    a.set_comm_exec(1);
    a.set_task(1);
    // Executable mappings only (no `mmap_data`): they are what names user frames, and a process that
    // starts after arming and exits right after its hit is gone from /proc before its hit is named.
    a.set_mmap(1);
    a.set_mmap2(1);
}

/// The hit path's task records: a dummy software event (it counts nothing and samples nothing) whose
/// records, with the trailer `cfg`'s sample type gives them, go into the breakpoint's ring. Enabled from
/// the start: a task record before the breakpoint is enabled does no harm.
fn tasks_attr(cfg: &EventConfig, bind: Bind) -> pb::perf_event_attr {
    let mut a = ring_attr(pb::PERF_TYPE_SOFTWARE);
    a.config = u64::from(pb::PERF_COUNT_SW_DUMMY);
    a.sample_type = cfg.sample_type(bind);
    track_tasks(&mut a);
    a
}

/// [`attr`] for the breakpoint on `cpu`: a per-CPU variable's is at the copy that CPU watches, which needs
/// that CPU's per-CPU base.
fn attr_on(
    watch: &Watch,
    cpu: u32,
    cfg: &EventConfig,
    bind: Bind,
) -> io::Result<pb::perf_event_attr> {
    let mut a = attr(watch, cfg, bind);
    a.bp_addr = watch.addr_on(cpu).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("cpu{cpu}'s per-CPU base is unknown"),
        )
    })?;
    Ok(a)
}

/// Who the events of a [`Prepared`] set are opened for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// Every task on each CPU: one event per CPU and watch (a system-wide watch, and a watch bound to
    /// [`Binding::Cpus`], whose program chooses the processes in the kernel).
    Cpus,
    /// A command stopped at its exec, and every thread it starts: one inherited event per CPU and watch.
    Task(u32),
    /// Every thread of these processes (and the threads they create later): per CPU and watch, one ring
    /// that every thread's event writes into.
    Threads(Vec<u32>),
}

impl Targets {
    /// The binding the attributes are built for: they differ between CPU-wide and task-bound events only,
    /// not from one thread to another.
    fn bind(&self) -> Bind {
        match self {
            Targets::Cpus => Bind::Cpu,
            Targets::Task(pid) => Bind::Task(*pid),
            Targets::Threads(_) => Bind::Task(0),
        }
    }
}

/// One ring of a [`Prepared`] set: watch `watch`'s breakpoint on `cpu`, its attributes built.
#[derive(Debug, Clone)]
pub struct RingSpec {
    pub cpu: u32,
    /// Index of the watch in the session's list.
    pub watch: usize,
    /// The breakpoint at the address this CPU watches; `None` where that is a per-CPU variable's copy
    /// whose base this CPU has not given (opening it then fails, as a refusal would).
    attr: Option<pb::perf_event_attr>,
    /// The watched address and length, named by a refusal.
    bp: (u64, u8),
    /// The hit path's task-record event into this ring ([`tasks_attr`]), for the first watch only.
    tasks: Option<pb::perf_event_attr>,
    /// How the ring's breakpoint samples are laid out.
    sample_type: u64,
    /// Each thread this ring's events are opened for gets its [`guard`] here (the first CPU's first
    /// watch's ring of events bound to tasks: one guard per thread).
    guard: bool,
}

impl RingSpec {
    /// `watch`'s ring on `cpu` for events bound as `bind`.
    fn new(watch: &Watch, index: usize, cpu: u32, bind: Bind, cfg: &EventConfig) -> RingSpec {
        let cfg = cfg.for_watch(index);
        let addr = watch.addr_on(cpu);
        let attr = addr.map(|addr| {
            let mut a = attr(watch, &cfg, bind);
            a.bp_addr = addr;
            a
        });
        let tasks = dummy_tasks(&cfg, bind) && cfg.track_tasks;
        RingSpec {
            cpu,
            watch: index,
            attr,
            bp: (addr.unwrap_or(watch.addr), watch.len),
            tasks: tasks.then(|| tasks_attr(&cfg, bind)),
            sample_type: cfg.sample_type(bind),
            guard: false,
        }
    }

    /// The breakpoint's attributes, with the kernel's lost counter or without it.
    fn attr(&self, bind: Bind, counts_lost: bool) -> Result<pb::perf_event_attr, OpenError> {
        let mut a = self.attr.ok_or_else(|| {
            OpenError::new(
                self.cpu,
                bind,
                Stage::Open,
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("cpu{}'s per-CPU base is unknown", self.cpu),
                ),
            )
        })?;
        if !counts_lost {
            a.read_format &= !u64::from(pb::PERF_FORMAT_LOST);
        }
        Ok(a)
    }
}

/// Every event a watch arms, prepared once from its watches and [`EventConfig`] before anything is
/// opened: per CPU, one [`RingSpec`] per watch, and who the events are opened for. [`crate::perf::arm`]
/// opens, enables and rolls back exactly this set.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub cfg: EventConfig,
    pub targets: Targets,
    /// In CPU order, each CPU's rings in watch order: one CPU is armed all or none.
    pub cpus: Vec<(u32, Vec<RingSpec>)>,
}

impl Prepared {
    /// The events of `watches` on each of `cpus` for `targets`.
    pub fn new(
        watches: &[Watch],
        cpus: &std::collections::BTreeSet<u32>,
        targets: Targets,
        cfg: &EventConfig,
    ) -> Prepared {
        let bind = targets.bind();
        let mut cpus: Vec<(u32, Vec<RingSpec>)> = cpus
            .iter()
            .map(|&cpu| {
                let rings = watches
                    .iter()
                    .enumerate()
                    .map(|(i, w)| RingSpec::new(w, i, cpu, bind, cfg))
                    .collect();
                (cpu, rings)
            })
            .collect();
        if let (Bind::Task(_), Some(first)) =
            (bind, cpus.first_mut().and_then(|(_, r)| r.first_mut()))
        {
            first.guard = true;
        }
        Prepared {
            cfg: cfg.clone(),
            targets,
            cpus,
        }
    }
}

/// An open breakpoint ring on one CPU: its own event and, for a process watch, other threads' events whose
/// records it receives.
pub struct CpuEvent {
    pub cpu: u32,
    /// Index of the watch in the session's list.
    pub watch: usize,
    pub bind: Bind,
    /// The kernel counts this event's dropped samples (`PERF_FORMAT_LOST` was accepted).
    pub counts_lost: bool,
    pub ring: Ring,
    /// How this ring's breakpoint samples are laid out.
    pub sample_type: u64,
    /// The hit path: the ring buffer the hit program writes this CPU's records into.
    pub hits: Option<BpfRing>,
    /// Other threads' events redirected into `ring`, with their tids.
    members: Vec<(u32, OwnedFd)>,
    /// The [`guard`]s of the threads whose events were opened here.
    #[allow(dead_code)] // Held open for the ring's lifetime; nothing reads them.
    guards: Vec<OwnedFd>,
    /// The hit path: the dummy event whose task records go into `ring` ([`tasks_attr`]).
    #[allow(dead_code)] // Held open for the ring's lifetime; nothing reads it.
    tasks: Option<OwnedFd>,
    // Declared after `ring` so the mapping is gone before the descriptor closes.
    fd: OwnedFd,
}

/// An event over a test ring ([`crate::perf::ring::testing::FileRing`]) for tests without a kernel.
#[cfg(test)]
impl CpuEvent {
    /// A CPU-bound ring of a system-wide watch with no hit ring buffer; `fd` stands in for the
    /// event's descriptor (the ring's reader registers it with epoll and reads its counters: a
    /// non-blocking socket gives no counts).
    pub fn over(cpu: u32, watch: usize, ring: Ring, fd: OwnedFd) -> CpuEvent {
        CpuEvent {
            cpu,
            watch,
            bind: Bind::Cpu,
            counts_lost: false,
            ring,
            sample_type: SAMPLE_TYPE,
            hits: None,
            members: Vec::new(),
            guards: Vec::new(),
            tasks: None,
            fd,
        }
    }

    /// The same on the hit path: the hit program's records come through `hits`.
    pub fn with_hits(self, hits: BpfRing) -> CpuEvent {
        CpuEvent {
            hits: Some(hits),
            ..self
        }
    }
}

/// Which step of opening failed; the message differs (an mmap failure is about memory, not registers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Open,
    Mmap,
    /// Attaching the hit program, with its ring buffer and emitter.
    Bpf,
    Enable,
}

#[derive(Debug)]
pub struct OpenError {
    pub cpu: u32,
    /// The thread whose event failed, for a process watch.
    pub tid: Option<u32>,
    pub stage: Stage,
    pub err: io::Error,
    /// The breakpoint asked for (address, length), when the failure was its own: a refusal of permission
    /// depends on which half of the address space it is in.
    pub bp: Option<(u64, u8)>,
}

impl OpenError {
    pub(crate) fn new(cpu: u32, bind: Bind, stage: Stage, err: io::Error) -> OpenError {
        let tid = match bind {
            Bind::Cpu => None,
            Bind::Task(t) => Some(t),
        };
        OpenError {
            cpu,
            tid,
            stage,
            err,
            bp: None,
        }
    }

    /// The failure was the breakpoint's at `addr`, `len` bytes long.
    pub(crate) fn at(mut self, addr: u64, len: u8) -> OpenError {
        self.bp = Some((addr, len));
        self
    }

    /// A thread's event found every debug register its CPU gives the thread in use.
    pub fn out_of_registers(&self) -> bool {
        self.tid.is_some()
            && self.stage == Stage::Open
            && self.err.raw_os_error() == Some(libc::ENOSPC)
    }

    /// The thread went away while being armed: not an error for a process watch.
    pub fn thread_gone(&self) -> bool {
        self.tid.is_some()
            && self.stage == Stage::Open
            && self.err.raw_os_error() == Some(libc::ESRCH)
    }
}

/// The pid argument of perf_event_open for `bind`.
fn pid_of(bind: Bind) -> i32 {
    match bind {
        Bind::Cpu => -1,
        Bind::Task(t) => t as i32,
    }
}

/// The attributes of a [`guard`]: a software event that counts nothing and samples nothing, disabled,
/// and not inherited.
fn guard_attr() -> pb::perf_event_attr {
    let mut a = ring_attr(pb::PERF_TYPE_SOFTWARE);
    a.config = u64::from(pb::PERF_COUNT_SW_DUMMY);
    a.sample_period = 0;
    a.set_disabled(1);
    a
}

/// Keeps a thread's own breakpoints with that thread, opened before them where `spec` asks for it (the
/// first ring of events bound to tasks). A thread whose events are all inherited by the threads it
/// creates gives them a clone of its events' context, and the kernel then swaps the two contexts
/// between those threads at a context switch instead of switching events out and in (the
/// context-switch optimization of kernel/events/core.c): the thread's own events, the originals that
/// every copy is made from, can end up in a thread it created, and when that thread exits they are
/// detached (state EXIT) and every thread created from then on inherits them turned off, so its stores
/// are never seen (measured: 2,000 threads made while and after the arming, 1 round in 5 missed 400 to
/// 2,500 stores; with the guard none in 38). One event that is not inherited makes a created thread's
/// context no clone. Best effort: where it cannot be opened (a thread that is gone, no descriptor left),
/// the breakpoints' own open says what is wrong.
fn guard(spec: &RingSpec, bind: Bind) -> Option<OwnedFd> {
    match (spec.guard, bind) {
        (true, Bind::Task(tid)) => sys::perf_event_open(&guard_attr(), tid as i32, -1).ok(),
        _ => None,
    }
}

/// Opens the hit path's task-record event `tasks` on `cpu` into `bp`'s ring.
fn open_tasks(
    tasks: &pb::perf_event_attr,
    bp: BorrowedFd<'_>,
    cpu: u32,
    bind: Bind,
) -> Result<OwnedFd, OpenError> {
    let err = |err| OpenError::new(cpu, bind, Stage::Open, err);
    let fd = sys::perf_event_open(tasks, pid_of(bind), cpu as i32).map_err(err)?;
    sys::perf_set_output(fd.as_fd(), bp).map_err(err)?;
    Ok(fd)
}

/// Opens `spec`'s breakpoint for `bind`, disabled, falling back to no lost counter on a kernel before 6.0
/// (it rejects the unknown read_format bit). Returns the descriptor and whether the counter is on.
fn open_fd(spec: &RingSpec, bind: Bind, count_lost: bool) -> Result<(OwnedFd, bool), OpenError> {
    let (pid, cpu) = (pid_of(bind), spec.cpu as i32);
    let mut counts_lost = count_lost;
    let opened = match sys::perf_event_open(&spec.attr(bind, counts_lost)?, pid, cpu) {
        Err(e) if counts_lost && e.raw_os_error() == Some(libc::EINVAL) => {
            counts_lost = false;
            sys::perf_event_open(&spec.attr(bind, false)?, pid, cpu)
        }
        other => other,
    };
    let (addr, len) = spec.bp;
    opened
        .map(|fd| (fd, counts_lost))
        .map_err(|err| OpenError::new(spec.cpu, bind, Stage::Open, err).at(addr, len))
}

impl CpuEvent {
    /// Opens (disabled) and maps `spec`'s ring for `bind`, with its task-record event and its programs
    /// attached as `cfg`'s delivery asks.
    pub fn open(spec: &RingSpec, bind: Bind, cfg: &EventConfig) -> Result<CpuEvent, OpenError> {
        let cpu = spec.cpu;
        let guard = guard(spec, bind);
        let (fd, counts_lost) = open_fd(spec, bind, cfg.count_lost)?;
        let ring = Ring::map(fd.as_fd(), cfg.ring_pages)
            .map_err(|err| OpenError::new(cpu, bind, Stage::Mmap, err))?;
        let bpf_err = |err| OpenError::new(cpu, bind, Stage::Bpf, err);
        let tasks = match &spec.tasks {
            Some(tasks) => Some(open_tasks(tasks, fd.as_fd(), cpu, bind)?),
            None => None,
        };
        let hits = match &cfg.delivery {
            Delivery::Hits(h) => Some(h.attach(spec.watch, cpu, fd.as_fd()).map_err(bpf_err)?),
            Delivery::Samples => None,
        };
        Ok(CpuEvent {
            cpu,
            watch: spec.watch,
            bind,
            counts_lost,
            ring,
            sample_type: spec.sample_type,
            hits,
            members: Vec::new(),
            guards: guard.into_iter().collect(),
            tasks,
            fd,
        })
    }

    /// Adds thread `tid`'s event of `spec` (this ring's own), disabled, writing into this ring. The kernel's
    /// lost counter is asked for only if this ring's own event has it, so all members add up the same way.
    pub fn add_thread(
        &mut self,
        spec: &RingSpec,
        tid: u32,
        cfg: &EventConfig,
    ) -> Result<(), OpenError> {
        let bind = Bind::Task(tid);
        let guard = guard(spec, bind);
        let (fd, counts_lost) = open_fd(spec, bind, self.counts_lost)?;
        if counts_lost != self.counts_lost {
            return Err(OpenError::new(
                self.cpu,
                bind,
                Stage::Open,
                io::Error::other(
                    "the kernel took the lost-sample counter for one thread but not another",
                ),
            ));
        }
        sys::perf_set_output(fd.as_fd(), self.fd.as_fd())
            .map_err(|err| OpenError::new(self.cpu, bind, Stage::Mmap, err))?;
        // The thread's hits go through the hit program into the ring buffer of this ring's CPU.
        if let Delivery::Hits(h) = &cfg.delivery {
            h.attach_member(self.watch, fd.as_fd())
                .map_err(|err| OpenError::new(self.cpu, bind, Stage::Bpf, err))?;
        }
        self.members.push((tid, fd));
        self.guards.extend(guard);
        Ok(())
    }

    /// Whether the threads its events are bound to pass them on to the threads they create.
    pub fn inherited(&self) -> bool {
        self.bind != Bind::Cpu
    }

    /// Breakpoint events in this ring: its own and every thread's that writes into it.
    pub fn breakpoints(&self) -> usize {
        1 + self.members.len()
    }

    /// Threads whose events write into this ring, its own first.
    pub fn tids(&self) -> impl Iterator<Item = u32> + '_ {
        let own = match self.bind {
            Bind::Cpu => None,
            Bind::Task(t) => Some(t),
        };
        own.into_iter().chain(self.members.iter().map(|(t, _)| *t))
    }

    fn fds(&self) -> impl Iterator<Item = (Bind, BorrowedFd<'_>)> {
        std::iter::once((self.bind, self.fd.as_fd())).chain(
            self.members
                .iter()
                .map(|(t, fd)| (Bind::Task(*t), fd.as_fd())),
        )
    }

    /// Enables this ring's events. A thread that has exited since it was armed is skipped: its event can
    /// no longer fire.
    pub fn enable(&self) -> Result<(), OpenError> {
        for (bind, fd) in self.fds() {
            match sys::perf_enable(fd) {
                Ok(()) => {}
                Err(e) if bind != Bind::Cpu && e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(err) => return Err(OpenError::new(self.cpu, bind, Stage::Enable, err)),
            }
        }
        Ok(())
    }

    pub fn disable(&self) -> io::Result<()> {
        let mut result = Ok(());
        for (_, fd) in self.fds() {
            if let Err(e) = sys::perf_disable(fd) {
                result = Err(e);
            }
        }
        result
    }

    /// Moves every event of this ring to `watch` in place (address, length, access), keeping their debug
    /// registers, inherited children included. The attributes must equal those the events were opened with
    /// in everything else (the kernel refuses any other change), so `cfg` is the one they were opened with.
    /// `disabled` is applied too: the kernel re-enables a modified breakpoint unless it is set, so a
    /// retarget that must not report hits before it is acknowledged leaves them disabled and enables later.
    pub fn modify(&self, watch: &Watch, cfg: &EventConfig, disabled: bool) -> io::Result<()> {
        let cfg = EventConfig {
            count_lost: self.counts_lost,
            ..cfg.clone()
        };
        for (bind, fd) in self.fds() {
            let mut a = attr_on(watch, self.cpu, &cfg, bind)?;
            a.set_disabled(u64::from(disabled));
            match sys::perf_modify_attributes(fd, &a) {
                Ok(()) => {}
                Err(e) if bind != Bind::Cpu && e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What epoll watches for this CPU's records: the breakpoint's descriptor (its perf ring), and on the
    /// hit path the ring buffer's.
    pub fn readable(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        std::iter::once(self.fd.as_fd()).chain(self.hits.as_ref().map(|r| r.fd()))
    }

    /// What the kernel counted for this ring's events together: every hit while enabled (inherited
    /// children's included), and the samples it dropped (when [`CpuEvent::counts_lost`]). Readable after
    /// the event's CPU went offline (the values freeze there).
    pub fn counts(&self) -> io::Result<Counts> {
        let mut total = Counts {
            hits: 0,
            lost: self.counts_lost.then_some(0),
        };
        for (_, fd) in self.fds() {
            let c = read_counts(fd, self.counts_lost)?;
            total.hits += c.hits;
            total.lost = total.lost.zip(c.lost).map(|(a, b)| a + b);
        }
        Ok(total)
    }
}

fn read_counts(fd: BorrowedFd<'_>, counts_lost: bool) -> io::Result<Counts> {
    let mut buf = [0u64; 2];
    let want = if counts_lost { 16 } else { 8 };
    let n = sys::perf_read(fd, &mut buf[..want / 8])?;
    if n != want {
        return Err(io::Error::other(format!(
            "perf counter read gave {n} bytes, expected {want}"
        )));
    }
    Ok(Counts {
        hits: buf[0],
        lost: counts_lost.then_some(buf[1]),
    })
}

/// An event's kernel-side totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Every time the breakpoint fired while enabled.
    pub hits: u64,
    /// Samples the kernel could not write to the ring; `None` on kernels without `PERF_FORMAT_LOST`.
    pub lost: Option<u64>,
}

#[cfg(test)]
mod tests;
