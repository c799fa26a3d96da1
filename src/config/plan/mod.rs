//! Planning a watch: a [`WatchRequest`] (the command line, plain) checked against itself and the machine
//! ([`Host`]) and turned into a [`WatchPlan`], everything a watch needs, resolved, with each choice made
//! once as a sum type: who it covers ([`Scope`]), how hits reach the tracer ([`Delivery`]), which writers
//! it sees ([`Writers`]), whether values are read ([`Values`]), where kernel frames are named from
//! ([`KernelSymbols`]). Opens no perf event and loads no BPF program; the command line arms the plan.
//!
//! The stages, in the order a request goes through them, each entered once and taking the one before's
//! result (the host is asked only where a stage needs the machine, and each stage asks it in one block):
//!
//! 0. [`decide()`]: who the watch covers ([`Scope`], `-p`'s processes read from the host) and how its
//!    hits come ([`Delivery`]), decided once from the request and whether BPF loads (asked of the host
//!    there, the one time a plan asks it), as a [`Decided`] the command line starts its prefetch from
//!    before handing it to [`plan()`].
//! 1. `options`: the request checked against itself (`--last` with `--dump-on`), then against the
//!    machine (the privileges, the `-p` processes as decided, what BPF and the decided delivery cannot do,
//!    `--cgroup`, `cpus`).
//! 2. `kernel` (the kernel's symbol source, types, asked once: casts, `--dump-on`'s tracepoints, and
//!    with `percpu` the per-CPU copies; kernel symbols loaded, or left to first use for a process
//!    watch), `process` (the processes a watch covers and its
//!    targets there; a launched command started; with `-p` on the per-thread path, the descriptor
//!    budget; a kernel address refused where the options stage decided user-space writers only),
//!    `objects` (`--on`: a kernel source in `kernel_objects`, a user-space one in `user_objects`),
//!    and last `conditions` (`--if` and `--dump-on` against every watch's length). [`plan`] runs them
//!    all, in this order, and last makes `--control`'s resolver (`control`) from what they found, so the
//!    session is handed it ready.
//!
//! Planning prints nothing: what the stages have to say (notes, warnings) comes back as lines with the
//! plan or its error ([`Planned`]), for the command line to print.
//!
//! The one side effect a plan can have is launch mode's: the command is started, stopped at its exec, so
//! its own symbols can be resolved; dropping the plan kills it before it ran any code of its own.
//!
//! Other parts: `outputs` (the stream and reports, checked with the options), `cgroup` (`--cgroup`, found
//! on the host with the options), `describe` (`--dry-run`),
//! `host` (what planning reads of the machine: it reads, the stages decide) and `machine` (the real
//! [`Host`]).

mod cgroup;
mod conditions;
mod control;
mod cpus;
mod describe;
pub mod host;
mod kernel;
mod kernel_objects;
mod machine;
mod objects;
mod options;
mod outputs;
mod percpu;
mod process;
#[cfg(test)]
mod tests;
mod user_objects;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use ksymwatch_symbols::{Origin, SymbolTable};

use crate::config::flight::Flight;
use crate::config::objects::{Allocators, ObjectTarget, Reports, Source};
use crate::config::request::WatchRequest;
use crate::config::symbols::{FileSymbols, KernelTable, LazyKallsyms};
use crate::config::watch::{self, OnMember, Resolved};
use crate::error::{Error, Result};
use crate::model::condition::Condition;
use crate::model::filter::Filter;
use crate::model::scope;
use crate::model::target::Target;
use crate::model::watch::{Access, Watch};
use crate::model::Limits;
use crate::perf::bpf;
use crate::perf::bpf::percpu::Offsets;
use crate::perf::event::Binding;

pub use control::{Control, Resolver};
pub use cpus::Cpus;
pub use host::{Host, Launch};
pub use machine::{read_start_time, Launcher, RealHost};
#[cfg(test)]
use options::delivery;
pub use options::{decide, Decided};
pub use outputs::{Destination, Outputs, Stream};

/// x86 has four debug registers per CPU; more watches than that can never be armed together.
pub const MAX_WATCHES: usize = 4;

/// Who a watch covers ([`scope::Scope`]'s choices), a launched command held as the started process.
pub type Scope = scope::Scope<Command>;

/// Launch mode's command: its words, and once started, the process, stopped before its first instruction.
pub struct Command {
    argv: Vec<OsString>,
    child: Option<Box<dyn Launch>>,
    pid: u32,
}

impl Command {
    /// The command's words, as given after `--`.
    pub fn argv(&self) -> &[OsString] {
        &self.argv
    }
}

impl scope::Pid for Command {
    fn pid(&self) -> u32 {
        self.pid
    }
}

/// A `-p` process as planned: its pid, and when it started (`starttime` in `/proc/PID/stat`, clock
/// ticks after boot, [`read_start_time`]). A pid alone does not say which process it is once its process
/// has exited, since the kernel gives the number to the next process that needs one; with the start, it
/// does: another given the same pid later started later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub pid: u32,
    pub ticks: u64,
}

/// How hits reach the tracer: decided once, by the options stage, from the scope, the options, the
/// values read and whether BPF loads, as two choices: how the hits come ([`Hits`]) and which events
/// carry them ([`Binding`], as arming takes it). The layers below take only the part they need: whom the
/// events are bound to, the hit programs they attach, if any (`cli::execute`), how long a record waits
/// for older ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// How the hits come: whether hit programs load, how long a record waits, whether `--value`'s olds
    /// are seeded.
    pub hits: Hits,
    /// Which events carry them: whom they are bound to, the header's thread count, a process watch's
    /// descriptor budget.
    pub events: Binding,
}

/// How the hits come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hits {
    /// Each event's BPF program keeps the hits (per CPU, a process watch's program chooses its
    /// processes in the kernel; per thread, the events choose the threads) and emits them into its
    /// CPU's BPF ring buffer, with a process's value read at the trap: every watch where BPF loads.
    Program,
    /// As perf samples: a watch without BPF, or a `--per-thread` or `--remove-on-exec` watch reading no
    /// value where the program cannot tell which of a thread's events fired (before Linux 6.2).
    Samples,
}

/// Which writers the events see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writers {
    /// Kernel and user space.
    All,
    /// User space only (`exclude_kernel`): an unprivileged user's own process.
    UserSpaceOnly,
}

/// Whether hits carry the value they stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Values {
    /// Not read.
    Unread,
    /// Read at each hit (`--value`, or a `--dump-on` condition).
    Read,
    /// Read, and only hits it matches kept (`--if`).
    If(Condition),
}

impl Values {
    pub fn read(&self) -> bool {
        !matches!(self, Values::Unread)
    }

    pub fn condition(&self) -> Option<&Condition> {
        match self {
            Values::If(c) => Some(c),
            _ => None,
        }
    }
}

/// How `--value`'s `old` is kept (`crate::trace::olds`), decided once from the plan
/// ([`WatchPlan::old_values`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OldValues {
    /// `--if`: checked again on the instruction's value of a hit that raced.
    pub condition: Option<Condition>,
    /// The kernel may drop traps (a condition or a filter): the trap before a hit may not be printed, so
    /// its `old` is the kernel's rather than the merged order's.
    pub kernel_drops: bool,
    /// What each watched range holds is read once the events are armed, and a store narrower than the
    /// watch is laid over it where the program does not read the range at the trap (a read-write watch):
    /// a process watch whose hit programs read values. A launched command is still stopped at its exec
    /// then: its range as the program starts.
    pub seeded: bool,
}

/// The kernel's symbols a watch names frames (and a system-wide watch resolves its targets) with.
pub enum KernelSymbols {
    /// A vmlinux or System.map, which also resolves `--control` targets and gives source lines.
    Files(Box<FileSymbols>),
    /// The running kernel's kallsyms (possibly empty: a user who cannot see it, watching user space only).
    Kallsyms(SymbolTable),
    /// The running kernel's kallsyms, read when a kernel frame is first named: a watch of a process's
    /// memory, which may never see one.
    Lazy(LazyKallsyms),
}

impl KernelSymbols {
    /// The table call chains are named from (read on first use for [`KernelSymbols::Lazy`]).
    pub fn chains(&self) -> Result<KernelTable<'_>> {
        match self {
            KernelSymbols::Files(f) => f.chains().map(KernelTable::Loaded),
            KernelSymbols::Kallsyms(t) => Ok(KernelTable::Loaded(t)),
            KernelSymbols::Lazy(l) => Ok(KernelTable::Lazy(l)),
        }
    }

    /// `targets` resolved in these symbols: a system-wide watch's, or a `--control` target's.
    pub fn resolve(&self, targets: &[Target], access: Access) -> Result<Vec<Resolved>> {
        match self {
            KernelSymbols::Files(f) => f.watches(targets, access),
            KernelSymbols::Kallsyms(_) | KernelSymbols::Lazy(_) => {
                let table = self.chains()?.table();
                targets
                    .iter()
                    .map(|t| watch::resolve(t, access, table))
                    .collect()
            }
        }
    }

    pub fn files(&self) -> Option<&FileSymbols> {
        match self {
            KernelSymbols::Files(f) => Some(f),
            KernelSymbols::Kallsyms(_) | KernelSymbols::Lazy(_) => None,
        }
    }
}

/// The kernel side of a plan: its symbols and where they came from.
pub struct Kernel {
    /// Shared with `--control`'s resolver.
    symbols: Rc<KernelSymbols>,
    /// Whether the kallsyms came from the cache (unnamed kernel frames then get a hint).
    origin: Origin,
    /// The kallsyms named (`--kallsyms`), which the header names where the symbols are its.
    kallsyms: PathBuf,
    /// A per-CPU variable is watched: how a CPU that comes online later finds its per-CPU base.
    percpu: Option<Offsets>,
}

impl Kernel {
    pub fn symbols(&self) -> &KernelSymbols {
        &self.symbols
    }

    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The header's `# symbols:` text: the file the symbols came from, described, or the kallsyms.
    pub fn source_text(&self) -> String {
        match &*self.symbols {
            KernelSymbols::Files(f) => f.header(),
            KernelSymbols::Kallsyms(_) | KernelSymbols::Lazy(_) => {
                ksymwatch_symbols::Source::Kallsyms(self.kallsyms.clone()).to_string()
            }
        }
    }

    pub fn percpu(&self) -> Option<Offsets> {
        self.percpu
    }
}

/// How the session runs, besides what it watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    limits: Limits,
    /// The reader's SCHED_FIFO priority, if any.
    realtime: Option<u8>,
    /// A CPU that comes online and cannot be armed ends the run.
    strict_hotplug: bool,
    /// `--buffer-pages`: every ring's size, instead of the defaults.
    buffer_pages: Option<usize>,
    /// `--lines`: file:line for kernel frames.
    lines: bool,
}

impl Running {
    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn realtime(&self) -> Option<u8> {
        self.realtime
    }

    pub fn strict_hotplug(&self) -> bool {
        self.strict_hotplug
    }

    pub fn buffer_pages(&self) -> Option<usize> {
        self.buffer_pages
    }

    pub fn lines(&self) -> bool {
        self.lines
    }
}

/// `--on SOURCE '(TYPE)$obj.FIELD'`: objects armed as they are allocated, one debug register each.
#[derive(Debug, Clone)]
pub struct ObjectPlan {
    pub source: Source,
    /// Whether the source reports each object once (an allocator, or a function whose free `--free`
    /// names) or may report one again.
    pub reports: Reports,
    pub target: ObjectTarget,
    pub select: bpf::objects::Select,
    /// Where the allocation program is attached.
    pub attach: bpf::objects::Attach,
    /// A tracepoint source: which argument or field is the object, and what was not checked (the header's
    /// parenthesis after the source).
    pub detail: Option<String>,
    /// Where a free slot's breakpoint waits: kernel text, or a process's first page, which nothing writes.
    pub park: u64,
    pub rotate: bool,
    /// `-p` and `--comm`: only objects these processes or tasks allocate.
    pub allocators: Allocators,
}

impl ObjectPlan {
    /// A free slot's watch.
    pub fn parked(&self, slot: usize) -> Watch {
        Watch {
            label: format!("$obj slot {slot} (free)"),
            addr: self.park & !(u64::from(self.target.len) - 1),
            len: self.target.len,
            access: self.target.access,
            module: None,
            per_cpu: None,
        }
    }

    /// Every slot, one per debug register, parked (the execution keeps as many as the debug registers
    /// free allow).
    pub fn slots(&self) -> Vec<Watch> {
        (0..MAX_WATCHES).map(|i| self.parked(i)).collect()
    }

    /// The header's line: what is watched, from where, which requests are taken.
    pub fn describe(&self) -> String {
        let size = match self.select.size {
            Some((bpf::objects::SizeFrom::Requested | bpf::objects::SizeFrom::AtEntry, n)) => {
                format!(", {n}-byte requests")
            }
            Some((bpf::objects::SizeFrom::Cache(_), n)) => {
                format!(", caches of {n}-byte objects or more")
            }
            None => String::new(),
        };
        let mut by = Vec::new();
        if !self.allocators.pids.is_empty() {
            let pids: Vec<String> = self.allocators.pids.iter().map(u32::to_string).collect();
            by.push(format!("process {}", pids.join(", ")));
        }
        if !self.allocators.comms.is_empty() {
            by.push(format!("tasks named {}", self.allocators.comms.join(", ")));
        }
        let by = if by.is_empty() {
            String::new()
        } else {
            format!(" allocated by {}", by.join(" and "))
        };
        let detail = self
            .detail
            .as_ref()
            .map_or(String::new(), |d| format!(" ({d})"));
        format!(
            "# objects: {} from {}{detail}{size}{by}, len={} access={}{}",
            self.target.text,
            self.source,
            self.target.len,
            self.target.access.letters(),
            if self.rotate {
                ", the oldest evicted when every register is busy"
            } else {
                ""
            }
        )
    }
}

/// An `--on` source planned where it is (`kernel_objects`, `user_objects`), its `$obj` member placed but
/// not yet sized: the parts of an [`ObjectPlan`] that depend on the source's kind. The objects stage sizes
/// the member and makes the plan.
struct Placed {
    member: OnMember,
    /// The stand-in object's address the member was placed on, which its offset is taken from.
    stand_in: u64,
    select: bpf::objects::Select,
    attach: bpf::objects::Attach,
    detail: Option<String>,
    park: u64,
    allocators: Allocators,
    /// How often the source reports one object, as its planner decides (a user-space one with `--free`).
    reports: Reports,
    /// A line to say once the watch is sized (a tracepoint argument of another type than the target's).
    note: Option<String>,
}

/// Everything a watch needs, resolved and checked, before anything is armed.
pub struct WatchPlan {
    access: Access,
    /// One per target, in the command line's order (with `--on`, its slots).
    watches: Vec<Watch>,
    cpus: Cpus,
    scope: Scope,
    /// When each `-p` process started: which process its pid names, checked again once the watch is
    /// armed (`crate::trace::watched`).
    started: Vec<Started>,
    delivery: Delivery,
    writers: Writers,
    filter: Filter,
    values: Values,
    flight: Option<Flight>,
    kernel: Kernel,
    objects: Option<ObjectPlan>,
    outputs: Outputs,
    running: Running,
    control: Option<Control>,
}

/// What planning ends with: the plan, or why there is none, and the notes and warnings the stages had
/// for stderr, one line each (`ksymwatch: ...`), in the order they found them. Planning prints nothing:
/// the command line says the notes, then goes on with the plan or reports the error, so a warning found
/// before a refusal is still said, before it.
pub struct Planned {
    pub notes: Vec<String>,
    pub plan: Result<WatchPlan>,
}

/// The plan for `request` on `host` (a launched command is started for it), its scope and delivery as
/// [`decide()`] decided them on that host: the stages in order, each entered once and taking the result
/// of the one before (the options, the kernel's symbols and per-CPU copies, the processes, `--on`'s
/// objects, then the conditions against the watches), with what they had to say ([`Planned`]).
pub fn plan(request: WatchRequest, decided: Decided, host: &mut dyn Host) -> Planned {
    let mut notes = Vec::new();
    let plan = stages(request, decided, host, &mut notes);
    Planned { notes, plan }
}

/// [`plan`]'s stages, each adding its notes to `notes` as it finds them (last, the start's note that
/// the `--tid`/`--comm` conditions match no thread of the watched processes now).
fn stages(
    request: WatchRequest,
    decided: Decided,
    host: &mut dyn Host,
    notes: &mut Vec<String>,
) -> Result<WatchPlan> {
    let o = options::check(request, decided, host, notes)?;
    let mut kernel = kernel::KernelSide::load(&o, host, notes)?;
    let mut scope = o.scope;
    let watches = process::resolve_watches(
        &mut scope,
        o.delivery,
        o.writers,
        &o.cpus,
        &mut kernel,
        o.access,
        host,
        notes,
    )?;
    let objects = objects::plan(o.on.as_ref(), &scope, &kernel, o.access, host, notes)?;
    // `--on` watches its objects' slots (it has no target of its own to resolve).
    let watches = objects.as_ref().map_or(watches, ObjectPlan::slots);
    conditions::fit(&o.values, o.condition_text.as_deref(), &o.dump_on, &watches)?;
    // Every hit is filtered out until a thread matches.
    let unmatched = match &o.watched {
        Some(watched) => o.filter.unmatched(watched),
        None => None,
    };
    if let Some(line) = unmatched {
        notes.push(format!("ksymwatch: note: {line}"));
    }
    let (kernel, types) = kernel.into_kernel();
    // `--control` resolves as the command line did: in the kernel's symbols for a system-wide watch, else
    // in the processes, as they are once a launched command has started.
    let control = o.control.map(|path| {
        let system = scope.system_wide().then(|| Rc::clone(&kernel.symbols));
        Control::new(path, system, scope.pids(), types)
    });
    Ok(WatchPlan {
        access: o.access,
        watches,
        cpus: o.cpus,
        scope,
        started: o.started,
        delivery: o.delivery,
        writers: o.writers,
        filter: o.filter,
        values: o.values,
        flight: o.flight,
        kernel,
        objects,
        outputs: o.outputs,
        running: o.running,
        control,
    })
}

impl WatchPlan {
    pub fn access(&self) -> Access {
        self.access
    }

    pub fn watches(&self) -> &[Watch] {
        &self.watches
    }

    pub fn cpus(&self) -> &Cpus {
        &self.cpus
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// When each `-p` process started, as planned (none for a launched command: this process's child,
    /// whose pid stays its own until it is reaped here).
    pub fn started(&self) -> &[Started] {
        &self.started
    }

    pub fn delivery(&self) -> Delivery {
        self.delivery
    }

    pub fn writers(&self) -> Writers {
        self.writers
    }

    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    pub fn values(&self) -> &Values {
        &self.values
    }

    pub fn flight(&self) -> Option<&Flight> {
        self.flight.as_ref()
    }

    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    pub fn objects(&self) -> Option<&ObjectPlan> {
        self.objects.as_ref()
    }

    pub fn outputs(&self) -> &Outputs {
        &self.outputs
    }

    pub fn running(&self) -> &Running {
        &self.running
    }

    /// `--count N` as the hit programs keep it (no hit kept past the N-th, all CPUs together): only where
    /// the kernel keeps no hit the tracer then drops, which would take one of the N and stop the run
    /// with fewer printed. With `--on` the tracer decides what is a hit (a store by another process into
    /// its copy of an object, a write after the object's free): the count is the stream's, of the hits
    /// that arrived.
    pub fn kernel_count(&self) -> Option<u64> {
        match self.objects {
            Some(_) => None,
            None => self.running.limits.count,
        }
    }

    /// The launched command, taken over by whoever runs the watch (dropping it unreleased kills it).
    pub fn take_command(&mut self) -> Option<Box<dyn Launch>> {
        match &mut self.scope {
            Scope::Launched(c) => c.child.take(),
            _ => None,
        }
    }

    /// `--control`: where its commands come from, and how their targets are resolved.
    pub fn control(&self) -> Option<&Control> {
        self.control.as_ref()
    }

    /// How `--value`'s `old` is kept: from the kernel where it may drop traps, seeded at arming where
    /// the hit programs read a process's values.
    pub fn old_values(&self) -> OldValues {
        OldValues {
            condition: self.values.condition().cloned(),
            kernel_drops: self.values.condition().is_some() || self.filter != Filter::default(),
            seeded: !self.scope.system_wide()
                && self.delivery.hits == Hits::Program
                && self.values.read(),
        }
    }

    /// `--dry-run`: what would be armed, one `#` line each, as the header says it.
    pub fn describe(&self) -> String {
        describe::describe(self)
    }
}

/// BPF cannot be had here: `--value` and `--if` need it (exit 4, not permitted or not supported, since a
/// plain watch still works).
pub fn no_bpf(err: &std::io::Error) -> Error {
    Error::not_permitted(format!(
        "--value and --if read the value in the kernel with BPF, but {}; a watch without them works",
        crate::perf::bpf::why_unavailable(err)
    ))
}

/// BPF cannot be had here and a `--dump-on` trigger (`trigger`, as given) needs it: a hit condition is
/// decided on the value the kernel reads, a tracepoint's firings are counted in the kernel (exit 4, as
/// [`no_bpf`]; `--dump-on signal` still works).
pub fn no_bpf_for_dump_on(trigger: &str, err: &std::io::Error) -> Error {
    let what = match trigger.starts_with("tracepoint:") {
        true => format!("{trigger} counts the tracepoint's firings in the kernel"),
        false => format!("'{trigger}' is decided on the value the kernel reads at each hit"),
    };
    Error::not_permitted(format!(
        "--dump-on {what} with BPF, but {}; `--dump-on signal` works without it",
        crate::perf::bpf::why_unavailable(err)
    ))
}

/// A per-thread watch (`--per-thread`, `--remove-on-exec`) reading values where its hit program cannot tell
/// which of a thread's events fired, so a store would be reported once per event (exit 4, as [`no_bpf`]:
/// one breakpoint per CPU still reads them). The plan's refusal, and the program load's where it is
/// asked anyway.
pub fn no_firing_event() -> Error {
    Error::not_permitted(format!(
        "--value and --if with --per-thread or --remove-on-exec report each store once only where the \
         kernel has {}; without those two options (one breakpoint per CPU) they work",
        crate::perf::bpf::repeats::NEEDS
    ))
}

/// `--control -`: stdin.
fn is_stdin(path: Option<&Path>) -> bool {
    path == Some(Path::new("-"))
}
