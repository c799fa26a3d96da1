//! `write|rw`, first step: [`WatchPlan::from_args`] turns the command line into everything a watch needs,
//! resolved and checked (options, symbols, types, the processes, the CPUs, the condition, which path the
//! hits take), and opens no perf event and loads no BPF program. The second step, `cli::watch::execute`,
//! arms the plan and runs the session; `--dry-run` prints the plan instead.
//!
//! The one side effect a plan can have is launch mode's: the command is started, stopped at its exec, so
//! its own symbols can be resolved; dropping the plan kills it before it ran any code of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use ksymwatch_symbols::{Origin, Source, SymbolTable};

use crate::cli::args::{Format, OutputArgs};
use crate::cli::args::{SymbolArgs, WatchArgs};
use crate::config::advice::SymbolsContext;
use crate::config::debuginfod;
use crate::config::flight::{self, Flight, Trigger};
use crate::config::objects::{self, Allocators};
use crate::config::symbols::{self, FileSymbols};
use crate::config::tracepoints::{self, PointerAt};
use crate::config::typed;
use crate::config::watch::{self, Resolved};
use crate::cpulist;
use crate::error::{Context, Error, ExitCode, Result};
use crate::model::condition::{self, Condition};
use crate::model::filter::{Filter, Place};
use crate::model::target::{self, Base, Target};
use crate::model::watch::{Access, PerCpu, Watch};
use crate::perf::arm::{self, Scope};
use crate::perf::bpf;
use crate::perf::sys;
use crate::stderr;
use crate::trace::launch::Launched;

/// x86 has four debug registers per CPU; more watches than that can never be armed together.
pub const MAX_WATCHES: usize = 4;

/// The kernel's symbols a watch names frames (and a system-wide watch resolves its targets) with.
pub enum KernelSymbols {
    /// A vmlinux or System.map, which also resolves `--control` targets and gives source lines.
    Files(Box<FileSymbols>),
    /// The running kernel's kallsyms (possibly empty: a user who cannot see it, watching user space only).
    Kallsyms(SymbolTable),
}

impl KernelSymbols {
    /// The table call chains are named from.
    pub fn chains(&self) -> Result<&SymbolTable> {
        match self {
            KernelSymbols::Files(f) => f.chains(),
            KernelSymbols::Kallsyms(t) => Ok(t),
        }
    }

    pub fn files(&self) -> Option<&FileSymbols> {
        match self {
            KernelSymbols::Files(f) => Some(f),
            KernelSymbols::Kallsyms(_) => None,
        }
    }
}

/// Everything a watch needs, resolved and checked, before anything is armed.
pub struct WatchPlan {
    pub mode: Mode,
    pub access: Access,
    /// One per target, in the command line's order.
    pub watches: Vec<Watch>,
    /// The CPUs to arm now, and the ones to follow through hotplug (`None`: every CPU that comes online).
    pub cpus: BTreeSet<u32>,
    pub follow: Option<BTreeSet<u32>>,
    pub scope: Scope,
    pub filter: Filter,
    pub condition: Option<Condition>,
    /// `--value`, `--if` or a `--dump-on` condition: hits carry the stored value.
    pub values: bool,
    /// `--last N --dump-on ...`.
    pub flight: Option<Flight>,
    /// One breakpoint per CPU whose BPF program keeps and emits the hits; otherwise perf samples, and for
    /// a process watch one breakpoint per thread.
    pub hit_path: bool,
    /// User-space writers only (`exclude_kernel`): an unprivileged user's own process.
    pub user_only: bool,
    pub kernel: KernelSymbols,
    pub symbols_origin: Origin,
    /// The header's `# symbols:` text.
    pub source_text: String,
    pub types: typed::Types,
    /// Launch mode: the command, stopped at its exec (or its program's entry point).
    pub launched: Option<Launched>,
    /// A per-CPU variable is watched: how a CPU that comes online later finds its per-CPU base.
    pub percpu_offsets: Option<bpf::percpu::Offsets>,
    /// `--on`: where objects come from and which of their bytes to watch; `watches` are then its slots.
    pub objects: Option<ObjectPlan>,
}

/// `--on SOURCE '(TYPE)$obj.FIELD'`: objects armed as the kernel allocates them, one debug register each.
#[derive(Debug, Clone)]
pub struct ObjectPlan {
    pub source: objects::Source,
    pub target: objects::ObjectTarget,
    pub select: bpf::objects::Select,
    /// Where the allocation program is attached.
    pub attach: bpf::objects::Attach,
    /// A tracepoint source: which argument or field is the object, and what was not checked (the header's
    /// parenthesis after the source).
    pub detail: Option<String>,
    /// Where a free slot's breakpoint waits: kernel text, which nothing writes.
    pub park: u64,
    pub rotate: bool,
    /// `-p` and `--comm`: only objects these processes or tasks allocate.
    pub allocators: Allocators,
}

/// Debug registers a CPU has: the most objects armed at once.
const OBJECT_SLOTS: usize = 4;

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

    /// Every slot, parked (the execution keeps as many as the debug registers free allow).
    fn slots(&self) -> Vec<Watch> {
        (0..OBJECT_SLOTS).map(|i| self.parked(i)).collect()
    }

    /// The header's line: what is watched, from where, which requests are taken.
    pub fn describe(&self) -> String {
        let size = match self.select.size {
            Some((bpf::objects::SizeFrom::Requested, n)) => format!(", {n}-byte requests"),
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

/// `--on` and `--rotate` against the rest of the command line.
fn check_objects(args: &WatchArgs, mode: &Mode) -> Result<()> {
    let Some(on) = &args.on else {
        if args.rotate {
            return Err(Error::usage(
                "--rotate chooses what happens to objects armed from --on when every register is busy; \
                 add --on SOURCE, or drop --rotate",
            ));
        }
        return Ok(());
    };
    objects::parse_source(on)?;
    if !matches!(mode, Mode::System) {
        return Err(Error::usage(
            "--on watches kernel objects system-wide and `-- CMD` starts a process to watch; to take only \
             the objects a process allocates, start it first and give -p PID",
        ));
    }
    if args.targets.len() != 1 {
        return Err(Error::usage(format!(
            "--on takes one TARGET, a field of each object ('(struct TYPE)$obj.FIELD'); {} were given",
            args.targets.len()
        )));
    }
    if args.control.is_some() {
        return Err(Error::usage(
            "--on moves its breakpoints to each new object itself; drop --control",
        ));
    }
    Ok(())
}

/// The tracepoint objects come from must exist, or nothing would ever be armed: exit 2 before arming.
/// Found in the kernel's BTF (its group in tracefs, where mounted); a built-in source's tracepoint must
/// pass what its program reads where it reads it, and so must the free tracepoints.
fn check_tracepoint(source: &objects::Source, types: &typed::Types) -> Result<tracepoints::Event> {
    let events = tracepoints::tracefs_events();
    let find = |group: &str, name: &str| -> Result<tracepoints::Event> {
        let btf = types.tracepoint(name)?;
        tracepoints::find(group, name, btf, events.as_deref())
            .map_err(|e| Error::usage(format!("--on {source}: {e}")))
    };
    let unsupported = |e: String| {
        Error::not_permitted(format!("--on {source}: {e}; this source cannot work here"))
    };
    let event = match source {
        objects::Source::Tracepoint { group, name, .. } => return find(group, name),
        objects::Source::Kmalloc(_) => {
            let e = find("kmem", "kmalloc")?;
            tracepoints::expect_args(&e, &["call_site", "ptr", "bytes_req"])
                .map_err(unsupported)?;
            e
        }
        objects::Source::KmemCacheAlloc(_) => {
            let e = find("kmem", "kmem_cache_alloc")?;
            tracepoints::expect_args(&e, &["call_site", "ptr", "s"]).map_err(unsupported)?;
            e
        }
    };
    for free in ["kfree", "kmem_cache_free"] {
        tracepoints::expect_args(&find("kmem", free)?, &["call_site", "ptr"])
            .map_err(unsupported)?;
    }
    Ok(event)
}

/// Resolves `--on`'s source (the call site in the kernel's symbols) and its `$obj` target (in BTF).
fn object_plan(
    args: &WatchArgs,
    on: &str,
    kernel: &KernelSide,
    access: Access,
) -> Result<ObjectPlan> {
    let source = objects::parse_source(on)?;
    let event = check_tracepoint(&source, &kernel.types)?;
    let (ptr, attach, detail) = pointer_and_attach(&source, &event)?;
    let text = args.targets.first().map(String::as_str).unwrap_or_default();
    let target = objects::resolve_target(&kernel.types, text, access)?;
    if let (objects::Source::Tracepoint { .. }, bpf::objects::PtrAt::Arg(i)) = (&source, ptr) {
        if let Some(note) = tracepoints::cast_note(&event, i, &target.cast.to_string()) {
            stderr::line(format_args!("ksymwatch: note: --on {source}: {note}"));
        }
    }
    let table = kernel.symbols.chains()?;
    let park = park_address(table)?;
    let call_site = call_site(table, &source)?;
    let size = size_select(&kernel.types, &source, target.object_size)?;
    Ok(ObjectPlan {
        attach,
        detail,
        allocators: Allocators {
            pids: if args.pids.is_empty() {
                Vec::new()
            } else {
                processes_of(&args.pids)?
            },
            comms: args.output.comms.iter().map(|c| kernel_comm(c)).collect(),
        },
        select: bpf::objects::Select {
            ptr,
            call_site,
            size,
        },
        source,
        target,
        park,
        rotate: args.rotate,
    })
}

/// Where `--on`'s program finds the new object's pointer, what it attaches to, and for a tracepoint source
/// the header's words on both. An argument (by number, or by a name BTF gives it) is read at the raw
/// tracepoint; a record field that is no argument needs the event's format file and id from tracefs
/// (`event.events`); kmalloc's and kmem_cache_alloc's pointer is their argument 1.
fn pointer_and_attach(
    source: &objects::Source,
    event: &tracepoints::Event,
) -> Result<(bpf::objects::PtrAt, bpf::objects::Attach, Option<String>)> {
    let objects::Source::Tracepoint {
        group, name, arg, ..
    } = source
    else {
        return Ok((
            bpf::objects::PtrAt::Arg(1),
            bpf::objects::Attach::Raw(source.tracepoint().to_string()),
            None,
        ));
    };
    let with_note = |how: String| match event.group_note() {
        Some(note) => format!("{how}; {note}"),
        None => how,
    };
    let field = match tracepoints::pointer(event, arg)
        .map_err(|e| Error::usage(format!("--on {source}: {e}")))?
    {
        PointerAt::Arg { index, how } => {
            return Ok((
                bpf::objects::PtrAt::Arg(index),
                bpf::objects::Attach::Raw(name.clone()),
                Some(with_note(how)),
            ))
        }
        PointerAt::Record { field } => field,
    };
    let Some(dir) = &event.events else {
        return Err(Error::runtime(format!(
            "--on {source}: a record field without tracefs (a bug: it was checked)"
        )));
    };
    let event_dir = dir.join(group).join(name);
    let read = |f: &str| {
        std::fs::read_to_string(event_dir.join(f)).map_err(|e| {
            Error::not_permitted(format!(
                "--on {source}: reading {}: {e}",
                event_dir.join(f).display()
            ))
        })
    };
    let offset = objects::format_field(&read("format")?, &format!("{group}:{name}"), &field)?;
    let id = read("id")?.trim().parse::<u64>().map_err(|_| {
        Error::runtime(format!(
            "--on {source}: {} is not a number",
            event_dir.join("id").display()
        ))
    })?;
    Ok((
        bpf::objects::PtrAt::Field(offset),
        bpf::objects::Attach::Event(id),
        Some(with_note(format!(
            "field `{field}` of the event's record, from tracefs"
        ))),
    ))
}

/// A kernel text symbol of `table` named `name`.
fn text_symbol<'t>(table: &'t SymbolTable, name: &str) -> Option<ksymwatch_symbols::SymbolRef<'t>> {
    table
        .lookup(name, None)
        .ok()
        .filter(|s| s.kind() == ksymwatch_symbols::SymbolKind::Text)
}

/// Where a free `--on` slot's breakpoint waits: the kernel's `_text` (or `_stext`).
fn park_address(table: &SymbolTable) -> Result<u64> {
    text_symbol(table, "_text")
        .or_else(|| text_symbol(table, "_stext"))
        .map(|s| s.addr)
        .ok_or_else(|| {
            Error::runtime(
                "the kernel's symbols have no `_text`, where a free slot's breakpoint waits",
            )
        })
}

/// The call sites `[lo, hi)` `--on`'s source allows: the instruction at `FUNC+OFF`, or all of `FUNC`;
/// none for a source that names no function.
fn call_site(table: &SymbolTable, source: &objects::Source) -> Result<Option<(u64, u64)>> {
    let Some(site) = source.site() else {
        return Ok(None);
    };
    let f = text_symbol(table, &site.func).ok_or_else(|| {
        Error::usage(format!(
            "--on {source}: `{}` is not a function of the running kernel (its text symbols); \
             give the function that calls {}",
            site.func,
            source.tracepoint()
        ))
    })?;
    Ok(Some(match site.offset {
        Some(off) => (f.addr + off, f.addr + off + 1),
        None => (f.addr, f.addr + f.size.unwrap_or(1)),
    }))
}

/// The size `--on`'s allocations must have to be watched (`object_size`, the `$obj` type's): a kmalloc
/// request's bytes, or a `kmem_cache`'s `object_size` (read at its BTF offset); none for a tracepoint.
fn size_select(
    types: &typed::Types,
    source: &objects::Source,
    object_size: Option<u64>,
) -> Result<Option<(bpf::objects::SizeFrom, u64)>> {
    Ok(match (source, object_size) {
        (objects::Source::Kmalloc(_), Some(n)) => Some((bpf::objects::SizeFrom::Requested, n)),
        (objects::Source::KmemCacheAlloc(_), Some(n)) => {
            let cast = ksymwatch_symbols::CastType {
                kind: Some(ksymwatch_symbols::CastKind::Struct),
                name: "kmem_cache".into(),
            };
            let path = [ksymwatch_symbols::PathElem::Field("object_size".into())];
            let m = match types.member(&cast, &path)? {
                Ok((m, _)) => m,
                Err(e) => {
                    return Err(Error::not_permitted(format!(
                        "--on {source}: kmem_cache.object_size in the kernel's BTF: {e}"
                    )))
                }
            };
            let offset = i16::try_from(m.offset)
                .map_err(|_| Error::runtime("kmem_cache.object_size is too far in"))?;
            Some((bpf::objects::SizeFrom::Cache(offset), n))
        }
        _ => None,
    })
}

impl WatchPlan {
    /// Checks every option and resolves every target of `args`; opens no perf event.
    pub fn from_args(args: &WatchArgs, access: Access) -> Result<WatchPlan> {
        let Options {
            mode,
            filter,
            condition,
            values,
            flight,
            targets,
        } = Options::check(args)?;
        let (user_only, hit_path) = paths(args, &mode, values)?;
        let mut kernel = KernelSide::load(args, &mode, targets, access, user_only)?;
        let (cpus, follow) = select_cpus(args.cpus.as_deref())?;
        if let (Mode::Attach(pids), false) = (&mode, hit_path) {
            check_fd_budget(pids, cpus.len(), kernel.targets.len())?;
        }
        let (scope, launched, mut watches) = resolve_watches(&mode, &mut kernel, access)?;
        let objects = match &args.on {
            Some(on) => {
                let plan = object_plan(args, on, &kernel, access)?;
                watches = plan.slots();
                Some(plan)
            }
            None => None,
        };
        if let (Some(cond), Some(text)) = (&condition, &args.condition) {
            check_condition_widths("--if", text, cond, &watches)?;
        }
        for (text, trigger) in args
            .dump_on
            .iter()
            .zip(flight.iter().flat_map(|f| &f.triggers))
        {
            if let Trigger::Hit(cond) = trigger {
                check_condition_widths("--dump-on", text, cond, &watches)?;
            }
        }
        Ok(WatchPlan {
            mode,
            access,
            watches,
            cpus,
            follow,
            scope,
            filter,
            condition,
            values,
            flight,
            hit_path,
            user_only,
            kernel: kernel.symbols,
            symbols_origin: kernel.origin,
            source_text: kernel.source_text,
            types: kernel.types,
            launched,
            percpu_offsets: kernel.percpu_offsets,
            objects,
        })
    }

    pub fn system(&self) -> bool {
        matches!(self.mode, Mode::System)
    }

    /// `--dry-run`: what would be armed, one `#` line each, as the header says it.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        match &self.objects {
            Some(o) => {
                let _ = writeln!(s, "{}", o.describe());
            }
            None => {
                for w in &self.watches {
                    let _ = writeln!(s, "{}", crate::report::ftrace::target_line(w));
                }
            }
        }
        let _ = writeln!(s, "# symbols: {}", self.source_text);
        let _ = writeln!(s, "# cpus: {}", cpulist::format(&self.cpus));
        let who = match &self.mode {
            Mode::System => "every task (system-wide)".to_string(),
            Mode::Attach(pids) => format!(
                "process{} {}",
                if pids.len() == 1 { "" } else { "es" },
                pids.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Mode::Launch(argv) => format!(
                "the command `{}` (started, then killed unrun)",
                argv.join(" ")
            ),
        };
        let _ = writeln!(s, "# covers: {who}");
        let path = match (self.hit_path, self.system()) {
            (true, _) => {
                "one breakpoint per CPU and target, hits chosen and emitted by a BPF program"
            }
            (false, true) => "one breakpoint per CPU and target, hits as perf samples",
            (false, false) => "one breakpoint per thread, CPU and target, hits as perf samples",
        };
        let _ = writeln!(s, "# path: {path}");
        if self.user_only {
            let _ = writeln!(s, "# user-space writers only (not privileged)");
        }
        if let Some(c) = &self.condition {
            let _ = writeln!(s, "# if: {c}");
        } else if self.values {
            let _ = writeln!(s, "# value: read at each hit");
        }
        if let Some(f) = &self.flight {
            let on: Vec<String> = f.triggers.iter().map(|t| t.to_string()).collect();
            let _ = writeln!(
                s,
                "# last: {} hits kept, printed on --dump-on {}",
                f.last,
                on.join(", ")
            );
        }
        let _ = writeln!(s, "# dry run: nothing armed");
        s
    }
}

/// The options alone, checked against each other: nothing read but the command line (and whether BPF
/// loads, for `--value`).
struct Options {
    mode: Mode,
    filter: Filter,
    condition: Option<Condition>,
    values: bool,
    flight: Option<Flight>,
    targets: Vec<Target>,
}

impl Options {
    fn check(args: &WatchArgs) -> Result<Options> {
        let mode = Mode::of(args)?;
        if let Some(pages) = args.buffer_pages {
            if !pages.is_power_of_two() || pages > 1 << 16 {
                return Err(Error::usage(format!(
                    "--buffer-pages {pages} must be a power of two up to 65536 (e.g. 64, 128, 256)"
                )));
            }
        }
        realtime(&args.realtime)?;
        let mut filter = filter(&args.output)?;
        // With --on, --comm chooses the allocating tasks (`object_plan`), not the hits.
        if args.on.is_some() {
            filter.comms.clear();
        }
        check_outputs(&args.output)?;
        let condition = parse_condition(args.condition.as_deref())?;
        let flight = parse_flight(args)?;
        // A hit trigger is evaluated on the value the kernel read at the trap.
        let values = args.value
            || condition.is_some()
            || flight
                .as_ref()
                .is_some_and(|f| f.conditions().next().is_some());
        check_objects(args, &mode)?;
        // A `$obj` target is resolved per object (`object_plan`), not as a target of its own.
        let targets = match args.on {
            Some(_) => Vec::new(),
            None => args
                .targets
                .iter()
                .map(|t| target::parse(t).bad_input())
                .collect::<Result<Vec<_>>>()?,
        };
        if args.remove_on_exec && matches!(mode, Mode::System) {
            return Err(Error::usage(
            "--remove-on-exec is for a process watch (-p PID or -- CMD): a system-wide watch is not tied to a program",
        ));
        }
        if let (Some(cpu), false) = (args.percpu_cpu, matches!(mode, Mode::System)) {
            return Err(Error::usage(format!(
                "--percpu-cpu {cpu} chooses the copy of a kernel per-CPU variable a system-wide watch \
                 watches, and -p/-- watch a process's own memory; drop --percpu-cpu or -p/--"
            )));
        }
        if args.control.is_some() && targets.len() > 1 {
            return Err(Error::usage(format!(
                "--control moves one watch, but {} targets were given; give one TARGET",
                targets.len()
            )));
        }
        if args.control.as_deref() == Some(Path::new("-")) && matches!(mode, Mode::Launch(_)) {
            return Err(Error::usage(
            "--control - reads stdin, which `-- CMD` leaves to the command; give a FIFO path instead",
        ));
        }
        if targets.len() > MAX_WATCHES {
            return Err(Error::usage(format!(
            "{} targets given, but a CPU has only {MAX_WATCHES} debug registers; watch at most {MAX_WATCHES} at once",
            targets.len()
        )));
        }
        // Before any symbol is loaded or anything armed: without BPF, --value cannot work at all.
        let tracepoints = flight
            .as_ref()
            .is_some_and(|f| f.tracepoints().next().is_some());
        if values || tracepoints {
            bpf::probe().map_err(|e| super::advice::no_bpf(&e))?;
        }
        if args.per_thread && matches!(mode, Mode::System) {
            return Err(Error::usage(
            "--per-thread is for a process watch (-p PID or -- CMD): a system-wide watch has no threads to arm",
        ));
        }
        Ok(Options {
            mode,
            filter,
            condition,
            values,
            flight,
            targets,
        })
    }
}

/// Which path the hits take: (user-space writers only, the hit path). Says so on stderr when this user
/// may not see the kernel.
fn paths(args: &WatchArgs, mode: &Mode, values: bool) -> Result<(bool, bool)> {
    // Where BPF can be used, every watch is one breakpoint per CPU whose program keeps the hits and emits
    // them (the hit path): a dropped trap costs the writer little, and a process watch chooses its process
    // in the kernel, so its cost depends on CPUs and targets, never on threads. Without BPF (or with
    // --per-thread, or --remove-on-exec, which the kernel applies per event) hits are perf samples and a
    // process watch gives each thread its own events.
    // Without root or CAP_PERFMON, perf_event_paranoid 2 (the default) still lets a user watch their own
    // process, from user space only: its events exclude the kernel, and the kernel's symbols (hidden from
    // this user) are not needed.
    let privilege = crate::perf::privilege::Privilege::current();
    let user_only = !matches!(mode, Mode::System) && !privilege.kernel_allowed();
    if user_only {
        stderr::line(format_args!(
        "ksymwatch: note: not privileged (uid {}, kernel.perf_event_paranoid is {}): watching user-space \
         writers only; a kernel write into the process (read() into the variable) is not seen. Run as \
         root or with CAP_PERFMON to see those",
        privilege.euid,
        privilege
            .paranoid
            .map_or("unreadable".to_string(), |p| p.to_string())
    ));
    }
    let hit_path = !args.per_thread && !args.remove_on_exec && (values || bpf::probe().is_ok());
    if let Mode::System = mode {
        privilege.system_wide().map_err(Error::not_permitted)?;
    }
    Ok((user_only, hit_path))
}

/// The kernel's side of a plan: the symbol source (a vmlinux or System.map found or fetched, else
/// kallsyms), BTF types, and for a system-wide watch the targets resolved there.
struct KernelSide {
    /// The targets, with `SYMBOL.FIELD` turned into a typed target where BTF knows the variable.
    targets: Vec<Target>,
    /// Each target's base (the address a `(TYPE)` cast starts from; the target itself otherwise).
    bases: Vec<Target>,
    types: typed::Types,
    symbols: KernelSymbols,
    origin: Origin,
    source_text: String,
    /// A system-wide watch's bases resolved in the kernel's symbols (empty for a process watch).
    resolved: Vec<Resolved>,
    /// For each target on a per-CPU variable, where its copies are.
    percpu: Vec<Option<PerCpuTarget>>,
    /// How the per-CPU bases were found, when a target is on a per-CPU variable.
    percpu_offsets: Option<bpf::percpu::Offsets>,
}

/// A target on a per-CPU variable: the base of the CPU whose copy stood in for it while resolving, and the
/// copies (their `offset` is filled in once the member is resolved).
#[derive(Debug, Clone)]
struct PerCpuTarget {
    base: u64,
    copies: PerCpu,
}

impl KernelSide {
    fn load(
        args: &WatchArgs,
        mode: &Mode,
        targets: Vec<Target>,
        access: Access,
        user_only: bool,
    ) -> Result<KernelSide> {
        let mut search = symbols::search(args.symbols.files());
        let picked = search.pick();
        // Member paths of a process's own variables come from its binary; only a kernel target needs vmlinux.
        let needs_dwarf = args.symbols.lines
            || (matches!(mode, Mode::System) && targets.iter().any(debuginfod::needs_dwarf));
        let picked = debuginfod::fetch_if_needed(
            &mut search,
            picked,
            needs_dwarf,
            args.symbols.debuginfod(),
        )?;
        let types = typed::Types::new(&args.symbols.btf);
        // Member offsets from another kernel's BTF would put a live watch on the wrong bytes.
        if uses_member_offsets(&targets, args) {
            typed::check_btf_for_live_watch(&args.symbols.btf)?;
        }
        // A per-CPU variable has one copy per CPU, none at its symbol's address: each CPU's breakpoint goes
        // on a copy, resolved here as a cast on one CPU's.
        let (targets, mut percpu, mut percpu_offsets) = match mode {
            Mode::System => percpu_targets(&types, targets, args.percpu_cpu, None)?,
            _ => {
                let none = vec![None; targets.len()];
                (targets, none, None)
            }
        };
        // Without DWARF, BTF may still know a kernel variable's type: `SYMBOL.FIELD` becomes a typed target.
        let mut targets: Vec<Target> =
            if matches!(mode, Mode::System) && !matches!(picked, Source::Vmlinux(_)) {
                btf_typed(&types, targets)?
            } else {
                targets
            };
        // A `(TYPE)` target resolves its base like any other target, then moves onto the member (`typed`).
        let mut bases: Vec<Target> = targets.iter().map(typed::base_target).collect();
        lines_need_vmlinux(args.symbols.lines, &picked)?;
        let (picked, loaded) = fetch_for_data_symbols(args, mode, &mut search, picked, &bases)?;
        let file_symbols = open_files(&picked, &search, &args.symbols)?;
        let system = matches!(mode, Mode::System);
        let (kernel, symbols_origin, source_text, kernel_resolved) = match file_symbols {
            Some(files) => from_files(
                files,
                system.then_some(&bases[..]),
                access,
                args.symbols.lines,
            )?,
            None => {
                let (table, origin, source) = match loaded {
                    Some(l) => l,
                    None if user_only => load_symbols_or_none(&args.symbols)?,
                    None => load_symbols(&args.symbols)?,
                };
                // A per-CPU variable named bare (`cpu_number`) is not in a kallsyms without data symbols.
                if system {
                    targets = percpu_by_name(
                        &types,
                        targets,
                        args.percpu_cpu,
                        &table,
                        &mut percpu,
                        &mut percpu_offsets,
                    )?;
                    bases = targets.iter().map(typed::base_target).collect();
                }
                let resolved = if system {
                    bases
                        .iter()
                        .map(|t| watch::resolve(t, access, &table))
                        .collect::<Result<Vec<_>>>()?
                } else {
                    Vec::new()
                };
                (
                    KernelSymbols::Kallsyms(table),
                    origin,
                    source.to_string(),
                    resolved,
                )
            }
        };
        percpu_cpu_needs_percpu(args.percpu_cpu, &percpu)?;
        Ok(KernelSide {
            targets,
            bases,
            types,
            symbols: kernel,
            origin: symbols_origin,
            source_text,
            resolved: kernel_resolved,
            percpu,
            percpu_offsets,
        })
    }
}

/// Whether the watch places breakpoints by member offsets from BTF: a cast, a member path, or `--control`
/// (which moves the watch by member paths).
fn uses_member_offsets(targets: &[Target], args: &WatchArgs) -> bool {
    targets
        .iter()
        .any(|t| t.cast.is_some() || !t.path.is_empty())
        || args.control.is_some()
}

/// `--lines` reads vmlinux DWARF: an error naming the fix when the symbols come from elsewhere.
fn lines_need_vmlinux(lines: bool, picked: &Source) -> Result<()> {
    if lines && !matches!(picked, Source::Vmlinux(_)) {
        return Err(Error::usage(format!(
            "--lines reads file:line from vmlinux DWARF, but the symbols come from {picked}; pass --vmlinux FILE \
             (an unstripped vmlinux with debug info)"
        )));
    }
    Ok(())
}

/// `--percpu-cpu` chooses a per-CPU variable's copy: an error naming the fix when no target is one.
fn percpu_cpu_needs_percpu(copy: Option<u32>, percpu: &[Option<PerCpuTarget>]) -> Result<()> {
    if let (Some(cpu), true) = (copy, percpu.iter().all(Option::is_none)) {
        return Err(Error::usage(format!(
            "--percpu-cpu {cpu} chooses which CPU's copy of a per-CPU variable to watch, and no target \
             is one; drop --percpu-cpu"
        )));
    }
    Ok(())
}

/// `targets` with each `SYMBOL.FIELD` whose variable's type BTF knows made a typed target.
fn btf_typed(types: &typed::Types, targets: Vec<Target>) -> Result<Vec<Target>> {
    targets
        .into_iter()
        .map(|t| Ok(typed::btf_variable(types, &t)?.unwrap_or(t)))
        .collect()
}

/// The vmlinux or System.map `picked` names, opened; none for kallsyms.
fn open_files(
    picked: &Source,
    search: &ksymwatch_symbols::SourceSearch,
    args: &SymbolArgs,
) -> Result<Option<FileSymbols>> {
    Ok(match picked {
        Source::Kallsyms(_) => None,
        _ => Some(FileSymbols::open(
            picked.clone(),
            search,
            args.force,
            !args.no_symbol_cache,
        )?),
    })
}

/// The kernel symbols from a vmlinux or System.map, with `bases` (a system watch's) resolved; the chains
/// and (with `lines`) the line tables loaded now, so a file that cannot give them fails before anything
/// is armed.
fn from_files(
    files: FileSymbols,
    bases: Option<&[Target]>,
    access: Access,
    lines: bool,
) -> Result<(KernelSymbols, Origin, String, Vec<Resolved>)> {
    let resolved = match bases {
        Some(bases) => files.watches(bases, access)?,
        None => Vec::new(),
    };
    // Chains named from a vmlinux or System.map never come from the kallsyms cache. Loaded now, so
    // a file that cannot name them fails before anything is armed.
    files.chains()?;
    // A vmlinux without usable line tables fails here, before any warning about the targets.
    if lines {
        files.check_lines()?;
    }
    let header = files.header();
    Ok((
        KernelSymbols::Files(Box::new(files)),
        Origin::Parsed,
        header,
        resolved,
    ))
}

/// [`percpu_targets`] again once the kallsyms `table` is loaded, for per-CPU variables named bare: the
/// targets it moves, and the copies and bases it finds added to `percpu` and `offsets`.
fn percpu_by_name(
    types: &typed::Types,
    targets: Vec<Target>,
    copy: Option<u32>,
    table: &SymbolTable,
    percpu: &mut [Option<PerCpuTarget>],
    offsets: &mut Option<bpf::percpu::Offsets>,
) -> Result<Vec<Target>> {
    let (moved, plain, at) = percpu_targets(types, targets, copy, Some(table))?;
    for (p, found) in percpu.iter_mut().zip(plain) {
        if found.is_some() {
            *p = found;
        }
    }
    *offsets = offsets.take().or(at);
    Ok(moved)
}

/// The targets with each one on a per-CPU variable moved onto one CPU's copy (`--percpu-cpu N`'s, else the
/// lowest online CPU's), so that it resolves like a cast on an address; and, for those, where every online
/// CPU's copy is. The per-CPU bases come from the kernel ([`bpf::percpu`]); a kernel that cannot give them
/// is exit 4 with the way to watch one copy by hand.
///
/// Named with a member path (`runqueues.nr_running`), a per-CPU variable is recognized from BTF before any
/// symbol is loaded. A bare name (`cpu_number`) is looked up in BTF only once `table` (the kallsyms
/// table) has no such symbol: loading the kernel's BTF for every plain `jiffies` would cost every start-up
/// milliseconds.
fn percpu_targets(
    types: &typed::Types,
    targets: Vec<Target>,
    copy: Option<u32>,
    table: Option<&SymbolTable>,
) -> Result<PerCpuTargets> {
    let mut found: Option<(BTreeMap<u32, u64>, bpf::percpu::Offsets)> = None;
    let mut moved = Vec::with_capacity(targets.len());
    let mut percpu = Vec::with_capacity(targets.len());
    for t in targets {
        let plain_unknown = |name: &str| table.is_some_and(|tb| tb.by_name(name).next().is_none());
        let candidate = match (&t.base, table) {
            (_, None) => !t.path.is_empty(),
            (Base::Symbol { name, .. }, Some(_)) => t.path.is_empty() && plain_unknown(name),
            _ => false,
        };
        let Some(v) = candidate
            .then(|| typed::percpu_variable(types, &t))
            .flatten()
        else {
            moved.push(t);
            percpu.push(None);
            continue;
        };
        let (bases, _) = match &mut found {
            Some(f) => f,
            None => found.insert(percpu_bases(&t, &v)?),
        };
        let cpu = copy.unwrap_or_else(|| bases.keys().next().copied().unwrap_or(0));
        let Some(&base) = bases.get(&cpu) else {
            return Err(Error::usage(format!(
                "--percpu-cpu {cpu}: cpu{cpu} is not online, so its copy of `{}` cannot be placed; online: {}",
                v.name,
                cpulist::format(&bases.keys().copied().collect())
            )));
        };
        moved.push(v.copy_target(&t, base.wrapping_add(v.offset_in_section)));
        percpu.push(Some(PerCpuTarget {
            base,
            copies: PerCpu {
                offset: 0,
                bases: bases.clone(),
                copy,
            },
        }));
    }
    Ok((moved, percpu, found.map(|(_, at)| at)))
}

/// [`percpu_targets`]' answer: the targets, the per-CPU copies of each, and how the bases were found.
type PerCpuTargets = (
    Vec<Target>,
    Vec<Option<PerCpuTarget>>,
    Option<bpf::percpu::Offsets>,
);

/// Every online CPU's per-CPU base, asked of the kernel; exit 4 with the reason and the way to watch one
/// copy by hand when it cannot answer for all of them.
fn percpu_bases(
    target: &Target,
    v: &typed::PerCpuVariable,
) -> Result<(BTreeMap<u32, u64>, bpf::percpu::Offsets)> {
    let cpus: Vec<u32> = cpulist::read(Path::new(cpulist::ONLINE))
        .map(|c| c.into_iter().collect())
        .unwrap_or_default();
    let found = ksymwatch_symbols::btf::Btf::open(Path::new(ksymwatch_symbols::btf::Btf::VMLINUX))
        .map_err(|e| format!("the running kernel's BTF: {e}"))
        .and_then(|btf| bpf::percpu::Offsets::from_btf(&btf))
        .and_then(|at| {
            Ok((
                bpf::percpu::bases(&cpus, at).map_err(|e| e.to_string())?,
                at,
            ))
        });
    let missing = |b: &BTreeMap<u32, u64>| cpus.iter().copied().find(|c| !b.contains_key(c));
    let reason = match found {
        Ok((b, at)) => match missing(&b) {
            None => return Ok((b, at)),
            Some(cpu) => format!("cpu{cpu}'s per-CPU base could not be read"),
        },
        Err(e) => e,
    };
    Err(Error::not_permitted(format!(
        "`{}`: `{}` is a per-CPU variable, and the per-CPU bases cannot be had here ({reason}); watch one \
         CPU's copy by its address: '({})0xADDR{}' (that CPU's per-CPU base plus 0x{:x})",
        target.text,
        v.name,
        v.cast,
        v.path_text(),
        v.offset_in_section
    )))
}

/// A kallsyms table as loaded: the table, where it came from (cache or parse), and its source.
type Loaded = (SymbolTable, Origin, Source);

/// A kallsyms without data symbols cannot place `jiffies`: the running kernel's vmlinux can, fetched from
/// debuginfod where configured. Returns the source to use, and the kallsyms table loaded to find out when
/// it is still the source (so it is not loaded twice).
fn fetch_for_data_symbols(
    args: &WatchArgs,
    mode: &Mode,
    search: &mut ksymwatch_symbols::SourceSearch,
    picked: Source,
    bases: &[Target],
) -> Result<(Source, Option<Loaded>)> {
    if !matches!(mode, Mode::System) || !matches!(picked, Source::Kallsyms(_)) {
        return Ok((picked, None));
    }
    let l = load_symbols(&args.symbols)?;
    let Some(name) = debuginfod::missing_data_symbol(&l.0, bases) else {
        return Ok((picked, Some(l)));
    };
    let picked = debuginfod::fetch_for_symbol(search, picked, &name, args.symbols.debuginfod())?;
    let keep = matches!(picked, Source::Kallsyms(_)).then_some(l);
    Ok((picked, keep))
}

/// Who the watch covers, and each target resolved there (a launched command is started for it), moved
/// onto its member by its type.
fn resolve_watches(
    mode: &Mode,
    kernel: &mut KernelSide,
    access: Access,
) -> Result<(Scope, Option<Launched>, Vec<Watch>)> {
    // Launch mode: the command starts now, stopped at its exec, so its own symbols can be resolved.
    let mut launched = match &mode {
        Mode::Launch(argv) => Some(Launched::start(argv)?),
        _ => None,
    };
    let (scope, resolved) = match &mode {
        Mode::System => (Scope::System, std::mem::take(&mut kernel.resolved)),
        Mode::Attach(pids) => (
            Scope::Processes(pids.clone()),
            processes_watches(pids, &kernel.bases, access)?,
        ),
        Mode::Launch(_) => {
            let child = launched.as_mut().map_or(0, |l| l.pid);
            (
                Scope::Launched(child),
                launch_watches(&mut launched, &kernel.bases, access)?,
            )
        }
    };
    let resolved = kernel
        .targets
        .iter()
        .zip(resolved)
        .map(|(t, r)| typed::apply(&kernel.types, t, r, access))
        .collect::<Result<Vec<_>>>()?;
    let mut watches: Vec<Watch> = Vec::new();
    for ((r, t), p) in resolved
        .into_iter()
        .zip(&kernel.targets)
        .zip(&kernel.percpu)
    {
        for w in &r.warnings {
            stderr::line(format_args!("ksymwatch: warning: {w}"));
        }
        let mut watch = r.watch;
        if let Some(p) = p {
            // Hits are named after the variable, not the stand-in copy's address.
            watch.label = t.text.split('/').next().unwrap_or(&t.text).to_string();
            watch.per_cpu = Some(PerCpu {
                offset: watch.addr.wrapping_sub(p.base),
                ..p.copies.clone()
            });
        }
        watches.push(watch);
    }
    Ok((scope, launched, watches))
}

fn load_symbols(args: &SymbolArgs) -> Result<Loaded> {
    let (table, origin) =
        symbols::running_kallsyms(&args.kallsyms, &args.kernel_notes, !args.no_symbol_cache)
            .bad_symbols()?;
    Ok((table, origin, Source::Kallsyms(args.kallsyms.clone())))
}

/// [`load_symbols`] for a watch that cannot see the kernel (user-space writers only): kernel pointers
/// hidden from this user (kptr_restrict) leave an empty table instead of an error, since no kernel frame
/// is ever recorded.
fn load_symbols_or_none(args: &SymbolArgs) -> Result<Loaded> {
    match symbols::running_kallsyms(&args.kallsyms, &args.kernel_notes, false) {
        Err(ksymwatch_symbols::Error::ZeroedAddresses { .. }) => Ok((
            SymbolTable::new(Vec::new(), false),
            Origin::Parsed,
            Source::Kallsyms(args.kallsyms.clone()),
        )),
        _ => load_symbols(args),
    }
}

/// The CPUs to arm now and the set to follow through hotplug (`None`: every CPU that comes online).
fn select_cpus(list: Option<&str>) -> Result<(BTreeSet<u32>, Option<BTreeSet<u32>>)> {
    let online = cpulist::read(Path::new(cpulist::ONLINE))
        .or_exit(ExitCode::Runtime, "cannot read the online CPU list")?;
    let Some(list) = list else {
        return Ok((online, None));
    };
    let wanted = cpulist::parse(list)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            Error::usage(format!("--cpus `{list}` is not a CPU list; use e.g. 0-3,6"))
        })?;
    let possible = cpulist::read(Path::new(cpulist::POSSIBLE)).unwrap_or_else(|_| online.clone());
    let absent: BTreeSet<u32> = wanted.difference(&possible).copied().collect();
    if !absent.is_empty() {
        return Err(Error::usage(format!(
            "--cpus: cpu {} does not exist on this machine (possible CPUs: {})",
            cpulist::format(&absent),
            cpulist::format(&possible)
        )));
    }
    let offline: BTreeSet<u32> = wanted.difference(&online).copied().collect();
    if !offline.is_empty() {
        return Err(Error::usage(format!(
            "--cpus: cpu {} is offline (online: {}); bring it online with `echo 1 > /sys/devices/system/cpu/cpuN/online` \
             or leave it out",
            cpulist::format(&offline),
            cpulist::format(&online)
        )));
    }
    Ok((wanted.clone(), Some(wanted)))
}

/// The hits `args` keep; a contradiction is a usage error.
fn filter(args: &OutputArgs) -> Result<Filter> {
    let place = match (args.kernel_only, args.user_only) {
        (true, true) => {
            return Err(Error::usage(
                "--kernel-only and --user-only exclude each other; give one",
            ))
        }
        (true, false) => Place::Kernel,
        (false, true) => Place::User,
        (false, false) => Place::Anywhere,
    };
    Ok(Filter {
        comms: args.comms.iter().map(|c| kernel_comm(c)).collect(),
        tids: args.tids.clone(),
        exclude_idle: args.exclude_idle,
        place,
    })
}

/// The kernel keeps the first 15 bytes of a task's name (TASK_COMM_LEN 16 with its NUL): a longer `--comm`
/// could never match, so it is matched on those 15 (cut at a character boundary), and a note says so.
fn kernel_comm(name: &str) -> String {
    const KEPT: usize = 15;
    if name.len() <= KEPT || name.starts_with('<') {
        return name.to_string();
    }
    let cut = (0..=KEPT)
        .rev()
        .find(|&i| name.is_char_boundary(i))
        .unwrap_or(0);
    let kept = &name[..cut];
    stderr::line(format_args!(
        "ksymwatch: note: --comm {name}: the kernel keeps only the first 15 bytes of a task's name; matching `{kept}`"
    ));
    kept.to_string()
}

/// The `--if` condition, parsed; a bad one is a usage error that points at the column.
fn parse_condition(text: Option<&str>) -> Result<Option<Condition>> {
    text.map(|t| condition::parse(t).map_err(|e| Error::usage(format!("--if '{t}': {e}"))))
        .transpose()
}

/// `--realtime PRIO|off`: the reader's SCHED_FIFO priority, or none.
pub(crate) fn realtime(text: &str) -> Result<Option<u8>> {
    if text == "off" {
        return Ok(None);
    }
    match text.parse::<u8>() {
        Ok(p @ 1..=99) => Ok(Some(p)),
        _ => Err(Error::usage(format!(
            "--realtime {text} must be a priority from 1 to 99 or `off` (e.g. --realtime 1)"
        ))),
    }
}

/// `--last N` and its `--dump-on` triggers, checked against each other and the outputs.
fn parse_flight(args: &WatchArgs) -> Result<Option<Flight>> {
    let last = match (args.last, args.dump_on.is_empty()) {
        (None, true) => return Ok(None),
        (None, false) => {
            return Err(Error::usage(
                "--dump-on prints the hits --last N keeps; add --last N (e.g. --last 100)",
            ))
        }
        (Some(_), true) => {
            return Err(Error::usage(
                "--last N prints only when a trigger fires; add --dump-on TRIGGER (a condition, `signal` or \
                 tracepoint:GROUP:NAME)",
            ))
        }
        (Some(0), false) => {
            return Err(Error::usage(
                "--last 0 keeps no hit to print; give N of 1 or more",
            ))
        }
        (Some(n), false) => n,
    };
    if args.output.quiet || folded_to_stdout(&args.output) {
        let flag = if args.output.quiet {
            "--quiet"
        } else {
            "--folded"
        };
        return Err(Error::usage(format!(
            "--last prints its hits in the stream, which {flag} turns off; drop {flag} (or use --folded=FILE)"
        )));
    }
    // A tracepoint is found in the kernel's BTF (opened only when one is named), its group in tracefs
    // where that is mounted.
    let types = typed::Types::new(&args.symbols.btf);
    let events = tracepoints::tracefs_events();
    let check = |group: &str, name: &str| -> std::result::Result<Option<String>, String> {
        let btf = types.tracepoint(name).map_err(|e| e.to_string())?;
        tracepoints::find(group, name, btf, events.as_deref()).map(|e| e.group_note())
    };
    let mut triggers = Vec::new();
    for t in &args.dump_on {
        let (trigger, note) = flight::parse_trigger(t, &check)
            .map_err(|e| Error::usage(format!("--dump-on '{t}': {e}")))?;
        if let Some(note) = note {
            stderr::line(format_args!("ksymwatch: note: --dump-on {trigger}: {note}"));
        }
        triggers.push(trigger);
    }
    Ok(Some(Flight { last, triggers }))
}

/// Every watch's length can hold the condition's constants.
fn check_condition_widths(
    flag: &str,
    text: &str,
    cond: &Condition,
    watches: &[Watch],
) -> Result<()> {
    for w in watches {
        cond.check_width(w.len).map_err(|e| {
            Error::usage(format!(
                "{flag} '{text}': {e} (`{}` is watched {} byte{} wide; give TARGET/LEN to watch more)",
                w.label,
                w.len,
                if w.len == 1 { "" } else { "s" }
            ))
        })?;
    }
    Ok(())
}

/// `--folded` without a file: the stacks are stdout's only content.
pub(crate) fn folded_to_stdout(args: &OutputArgs) -> bool {
    args.folded.as_deref() == Some(Path::new("-"))
}

/// The stream's format: `--format`, or `--json` (which is `--format json`); the two disagreeing is a usage
/// error.
pub(crate) fn stream_format(args: &OutputArgs) -> Result<Format> {
    match (args.json, args.format) {
        (true, Some(f)) if f != Format::Json => Err(Error::usage(format!(
            "--json is --format json, and --format {} was given too; give one of them",
            format_name(f)
        ))),
        (true, _) => Ok(Format::Json),
        (false, f) => Ok(f.unwrap_or(Format::Text)),
    }
}

fn format_name(f: Format) -> &'static str {
    match f {
        Format::Text => "text",
        Format::Json => "json",
        Format::OtlpJson => "otlp-json",
    }
}

/// Everything stdout can carry is one product; two of them would interleave.
pub(crate) fn check_outputs(args: &OutputArgs) -> Result<()> {
    let format = stream_format(args)?;
    if folded_to_stdout(args) {
        let flag = match (args.json, format) {
            (true, _) => "--json".to_string(),
            (false, f) => format!("--format {}", format_name(f)),
        };
        for (set, flag) in [
            (format != Format::Text, flag.as_str()),
            (args.summary, "--summary"),
            (args.quiet, "--quiet"),
        ] {
            if set {
                return Err(Error::usage(format!(
                    "--folded writes stdout, and so does {flag}; use --folded=FILE"
                )));
            }
        }
    }
    Ok(())
}

/// Who the watch covers, from `-p` and `-- CMD`.
pub enum Mode {
    System,
    Attach(Vec<u32>),
    Launch(Vec<String>),
}

impl Mode {
    fn of(args: &WatchArgs) -> Result<Mode> {
        // With --on, -p chooses the allocating processes of a system-wide watch (`object_plan`).
        let pids = if args.on.is_some() {
            &[][..]
        } else {
            &args.pids[..]
        };
        match (pids.is_empty(), args.command.is_empty()) {
            (true, true) => {
                // clap gives an empty command for a bare trailing `--`: that is a missing command, not a
                // system-wide watch.
                if std::env::args_os().skip(1).any(|a| a == "--") {
                    return Err(Error::usage(
                        "`--` must be followed by a command to run (`-- CMD ARGS`); leave `--` out for a \
                         system-wide watch",
                    ));
                }
                Ok(Mode::System)
            }
            (false, true) => Ok(Mode::Attach(processes_of(pids)?)),
            (true, false) => Ok(Mode::Launch(args.command.clone())),
            (false, false) => Err(Error::usage(
                "-p watches a running process and `-- CMD` starts one: give one of them",
            )),
        }
    }
}

/// The processes `-p` names, each once: a thread id that is not its process's leader stands for its
/// process (said on stderr), since a watch covers every thread of a process.
fn processes_of(pids: &[u32]) -> Result<Vec<u32>> {
    let mut out: Vec<u32> = Vec::new();
    for &pid in pids {
        let status = (pid != 0)
            .then(|| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .flatten()
            .ok_or_else(|| {
                Error::usage(format!(
                    "-p {pid}: no such process; give the pid of a running process (pgrep NAME)"
                ))
            })?;
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
        };
        let tgid = field("Tgid:")
            .and_then(|t| t.parse::<u32>().ok())
            .unwrap_or(pid);
        if tgid != pid {
            stderr::line(format_args!(
                "ksymwatch: -p {pid} is a thread of process {tgid} ({}): watching every thread of process {tgid}",
                field("Name:").unwrap_or_else(|| "?".into())
            ));
        }
        if !out.contains(&tgid) {
            out.push(tgid);
        }
    }
    Ok(out)
}

/// Resolves `targets` in process `pid`'s own address space.
fn process_watches(pid: u32, targets: &[Target], access: Access) -> Result<Vec<Resolved>> {
    let empty = SymbolTable::default();
    targets
        .iter()
        .map(|t| match t.base {
            Base::Address(_) => watch::resolve(t, access, &empty),
            Base::Symbol { .. } => watch::resolve_in_process(pid, t, access),
        })
        .collect()
}

/// Resolves `targets` in every process of a `-p` watch. A watch has one address in every process it
/// covers, so each symbol must resolve to the same address in all of them: two runs of a PIE, or a library
/// under ASLR, usually do not, and arming the first process's address in the others would silently watch
/// some other byte there. A process that has exited meanwhile (a `--control` move late in a run) is skipped.
pub(crate) fn processes_watches(
    pids: &[u32],
    targets: &[Target],
    access: Access,
) -> Result<Vec<Resolved>> {
    let mut first: Option<(u32, Vec<Resolved>)> = None;
    let mut gone = None;
    for &pid in pids {
        let resolved = match process_watches(pid, targets, access) {
            Ok(r) => r,
            Err(e) if !Path::new(&format!("/proc/{pid}")).exists() => {
                gone.get_or_insert(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some((p0, r0)) = &first else {
            first = Some((pid, resolved));
            continue;
        };
        for (t, (a, b)) in targets.iter().zip(r0.iter().zip(&resolved)) {
            if (a.watch.addr, a.watch.len) != (b.watch.addr, b.watch.len) {
                return Err(Error::usage(format!(
                    "`{}` is at 0x{:x}/{} in pid {p0} but at 0x{:x}/{} in pid {pid} (each loaded at its own \
                     address); one watch has one address in every process: watch them in separate runs, or \
                     start them with address randomization off (setarch -R)",
                    t.text, a.watch.addr, a.watch.len, b.watch.addr, b.watch.len
                )));
            }
        }
    }
    match (first, gone) {
        (Some((_, r)), _) => Ok(r),
        (None, Some(e)) => Err(e),
        (None, None) => Err(Error::usage("no process to resolve the target in")),
    }
}

/// Descriptors kept free for everything else a session opens (epoll, signalfd, files, /proc reads).
const FD_RESERVE: u64 = 64;

/// A watch of running processes takes one descriptor per thread, CPU and target (an inherited event cannot
/// be mapped per thread, so each thread's event is bound to each CPU and joins that CPU's ring). Checked
/// before anything is opened, so a process too big for this limit fails with a way out instead of EMFILE
/// half-way through its threads.
fn check_fd_budget(pids: &[u32], cpus: usize, targets: usize) -> Result<()> {
    let Ok(limit) = sys::raise_fd_limit() else {
        return Ok(());
    };
    let threads = arm::threads(pids).len();
    let need = (threads * cpus * targets) as u64;
    if need + FD_RESERVE <= limit {
        return Ok(());
    }
    Err(Error::arm(format!(
        "watching {threads} threads on {cpus} CPUs one breakpoint per thread takes {need} file descriptors (one \
         per thread, CPU and target), over this process's limit of {limit}; raise the hard limit (ulimit -Hn), \
         watch without --per-thread/--remove-on-exec where BPF can be loaded (one breakpoint per CPU), or start \
         the program under ksymwatch (`ksymwatch write TARGET -- CMD`), where every thread inherits {} events",
        cpus * targets
    )))
}

/// Resolves `targets` in a launched command stopped at its exec. A library's symbol (`LIB:SYM`) is resolved
/// once ld.so has mapped the library: the command is run to its program's entry point (one stop, before
/// any code of the program's own). A library still not mapped there is loaded later (dlopen) or never,
/// and is refused (exit 2) with the command killed before its code ran.
fn launch_watches(
    launched: &mut Option<Launched>,
    targets: &[Target],
    access: Access,
) -> Result<Vec<Resolved>> {
    let Some(l) = launched.as_mut() else {
        return Ok(Vec::new());
    };
    match process_watches(l.pid, targets, access) {
        Err(e) if watch::is_not_mapped_yet(&e) => {}
        other => return other,
    }
    if !l.run_to_entry()? {
        return Err(Error::usage(
            "the command ended before its program started, so the library holding the target was never mapped",
        ));
    }
    process_watches(l.pid, targets, access).map_err(|e| {
        if watch::is_not_mapped_yet(&e) {
            Error::usage(format!(
                "{e}; that library is not loaded when the command starts (loaded later with dlopen, or not at \
                 all): start the command, then watch it with -p PID once the library is loaded; nothing ran"
            ))
        } else {
            e
        }
    })
}
