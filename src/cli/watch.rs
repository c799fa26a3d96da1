//! `ksymwatch write|rw`: resolve the targets, arm every CPU as one transaction, stream hits until stopped.

use std::collections::BTreeSet;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::Path;

use ksymwatch_symbols::{LineSource, Origin, Source, SymbolTable, UserSymbols};

use crate::cli::args::OutputArgs;
use crate::cli::args::{SymbolArgs, WatchArgs};
use crate::cli::output_file;
use crate::config::advice::SymbolsContext;
use crate::config::condition::{self, Condition};
use crate::config::debuginfod;
use crate::config::filter::{Filter, Place};
use crate::config::symbols::{self, FileSymbols};
use crate::config::target::{self, Base, Target};
use crate::config::typed;
use crate::config::watch::{self, Access, Resolved, Watch};
use crate::config::Limits;
use crate::cpulist;
use crate::error::{Context, Error, ExitCode, Result};
use crate::perf::arm::{self, Scope};
use crate::perf::bpf::hit_set::HitPrograms;
use crate::perf::bpf::{self, Values};
use crate::perf::event::EventConfig;
use crate::perf::sys::{self, SignalFd};
use crate::perf::warmup::Warmup;
use crate::report::folded::{Folded, Sink};
use crate::report::ftrace::Ftrace;
use crate::report::json::Json;
use crate::report::status::Status;
use crate::report::{Header, Output, Quiet, StreamEvent, Tee};
use crate::stderr::{self, Stderr};
use crate::trace::comm::Comms;
use crate::trace::control::Control;
use crate::trace::hotplug::Hotplug;
use crate::trace::launch::Launched;
use crate::trace::session::{Controller, Plan, Resolve, Session};

/// x86 has four debug registers per CPU; more watches than that can never be armed together.
pub const MAX_WATCHES: usize = 4;

fn load_symbols(args: &SymbolArgs) -> Result<(SymbolTable, Origin, Source)> {
    let (table, origin) =
        symbols::running_kallsyms(&args.kallsyms, &args.kernel_notes, !args.no_symbol_cache)
            .bad_symbols()?;
    Ok((table, origin, Source::Kallsyms(args.kallsyms.clone())))
}

/// [`load_symbols`] for a watch that cannot see the kernel (user-space writers only): kernel pointers
/// hidden from this user (kptr_restrict) leave an empty table instead of an error, since no kernel frame
/// is ever recorded.
fn load_symbols_or_none(args: &SymbolArgs) -> Result<(SymbolTable, Origin, Source)> {
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

/// Every watch's length can hold the condition's constants.
fn check_condition_widths(text: &str, cond: &Condition, watches: &[Watch]) -> Result<()> {
    for w in watches {
        cond.check_width(w.len).map_err(|e| {
            Error::usage(format!(
                "--if '{text}': {e} (`{}` is watched {} byte{} wide; give TARGET/LEN to watch more)",
                w.label,
                w.len,
                if w.len == 1 { "" } else { "s" }
            ))
        })?;
    }
    Ok(())
}

/// `--folded` without a file: the stacks are stdout's only content.
fn folded_to_stdout(args: &OutputArgs) -> bool {
    args.folded.as_deref() == Some(Path::new("-"))
}

/// Everything stdout can carry is one product; two of them would interleave.
fn check_outputs(args: &OutputArgs) -> Result<()> {
    if folded_to_stdout(args) {
        for (set, flag) in [
            (args.json, "--json"),
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

fn create(path: &Path, flag: &str) -> Result<Box<dyn Write>> {
    Ok(Box::new(BufWriter::new(output_file::create(path, flag)?)))
}

/// The printers `args` ask for, in the order they run. Files are created now, before anything is armed and
/// before the stop signals are blocked, so a bad path fails at once instead of after a long session (and
/// an open that did block could still be interrupted; see `output_file` for why none does).
fn outputs(args: &OutputArgs, title: &str) -> Result<Tee> {
    let stdout = || BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let stream_sink = || -> Result<Box<dyn Write>> {
        match &args.stream_file {
            Some(path) => Ok(Box::new(BufWriter::with_capacity(
                1 << 16,
                output_file::create(path, "--output")?,
            ))),
            None => Ok(Box::new(stdout())),
        }
    };
    // stderr carries messages, never the product: its failure must not end the session (crate::stderr).
    let quiet = args.quiet || folded_to_stdout(args);
    let stream: Box<dyn Output> = match (args.json, quiet) {
        (true, false) => Box::new(Json::new(stream_sink()?, Stderr)),
        (true, true) => Box::new(Quiet::new(Json::new(stream_sink()?, Stderr), Stderr)),
        (false, false) => Box::new(Ftrace::new(stream_sink()?, Stderr).with_top(args.top)),
        (false, true) => Box::new(Quiet::new(
            Ftrace::new(stream_sink()?, Stderr).with_top(args.top),
            Stderr,
        )),
    };
    // The status line shares the terminal with a stream on stdout only if stdout is elsewhere; first in the
    // tee so it is cleared before any end-of-session report.
    let status = !args.no_status
        && io::stderr().is_terminal()
        && (quiet || args.stream_file.is_some() || !io::stdout().is_terminal());
    let mut outs: Vec<Box<dyn Output>> = Vec::new();
    if status {
        outs.push(Box::new(Status::new()));
    }
    outs.push(stream);
    if let Some(path) = &args.folded {
        let sink = if folded_to_stdout(args) {
            Box::new(stdout())
        } else {
            create(path, "--folded")?
        };
        outs.push(Box::new(Folded::new(Sink::Lines(sink))));
    }
    if let Some(path) = &args.flamegraph {
        let sink = create(path, "--flamegraph")?;
        outs.push(Box::new(Folded::new(Sink::Svg(sink, title.to_string()))));
    }
    Ok(Tee(outs))
}

/// Who the watch covers, from `-p` and `-- CMD`.
enum Mode {
    System,
    Attach(Vec<u32>),
    Launch(Vec<String>),
}

impl Mode {
    fn of(args: &WatchArgs) -> Result<Mode> {
        match (args.pids.is_empty(), args.command.is_empty()) {
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
            (false, true) => Ok(Mode::Attach(processes_of(&args.pids)?)),
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
fn processes_watches(pids: &[u32], targets: &[Target], access: Access) -> Result<Vec<Resolved>> {
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

/// Exit status of the run: 0, or with `-- CMD` the command's own.
pub fn run(args: WatchArgs, access: Access) -> Result<i32> {
    let mode = Mode::of(&args)?;
    if !args.buffer_pages.is_power_of_two() || args.buffer_pages > 1 << 16 {
        return Err(Error::usage(format!(
            "--buffer-pages {} must be a power of two up to 65536 (e.g. 64, 128, 256)",
            args.buffer_pages
        )));
    }
    let filter = filter(&args.output)?;
    check_outputs(&args.output)?;
    let condition = parse_condition(args.condition.as_deref())?;
    let values = args.value || condition.is_some();
    let condition_text = condition.as_ref().map(|c| c.to_string());
    let targets = args
        .targets
        .iter()
        .map(|t| target::parse(t).bad_input())
        .collect::<Result<Vec<_>>>()?;
    if args.remove_on_exec && matches!(mode, Mode::System) {
        return Err(Error::usage(
            "--remove-on-exec is for a process watch (-p PID or -- CMD): a system-wide watch is not tied to a program",
        ));
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
    // Every live task's name and process's maps, read on a thread while the symbols load: a writer
    // already running that exits right after its hits must have had them read, and a read after `armed`
    // would race with a script that starts it on that line.
    let task_scan = std::thread::Builder::new()
        .name("ksymwatch-tasks".into())
        .spawn(|| {
            let (mut comms, mut user) = (Comms::default(), UserSymbols::default());
            comms.scan_all();
            user.scan_all();
            (comms, user)
        })
        .ok();
    // Before any symbol is loaded or anything armed: without BPF, --value cannot work at all.
    if values {
        bpf::probe().map_err(|e| bpf::unavailable(&e))?;
    }
    if args.per_thread && matches!(mode, Mode::System) {
        return Err(Error::usage(
            "--per-thread is for a process watch (-p PID or -- CMD): a system-wide watch has no threads to arm",
        ));
    }
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
    let mut warmup = None;
    if let Mode::System = mode {
        crate::perf::privilege::Privilege::current()
            .system_wide()
            .map_err(Error::not_permitted)?;
        // The first CPU-bound breakpoint open waits out an RCU grace period: let it wait while the symbols
        // load, not after.
        warmup = cpulist::read(Path::new(cpulist::ONLINE))
            .ok()
            .and_then(|cpus| cpus.first().copied())
            .map(Warmup::start);
    }
    let mut search = symbols::search(args.symbols.files());
    let picked = search.pick();
    // Member paths of a process's own variables come from its binary; only a kernel target needs vmlinux.
    let needs_dwarf = args.symbols.lines
        || (matches!(mode, Mode::System) && targets.iter().any(debuginfod::needs_dwarf));
    let picked =
        debuginfod::fetch_if_needed(&mut search, picked, needs_dwarf, args.symbols.debuginfod())?;
    let types = typed::Types::new(&args.symbols.btf);
    // Member offsets from another kernel's BTF would put a live watch on the wrong bytes.
    if targets
        .iter()
        .any(|t| t.cast.is_some() || !t.path.is_empty())
        || args.control.is_some()
    {
        typed::check_btf_for_live_watch(&args.symbols.btf)?;
    }
    // Without DWARF, BTF may still know a kernel variable's type: `SYMBOL.FIELD` becomes a typed target.
    let targets: Vec<Target> =
        if matches!(mode, Mode::System) && !matches!(picked, Source::Vmlinux(_)) {
            targets
                .into_iter()
                .map(|t| Ok(typed::btf_variable(&types, &t)?.unwrap_or(t)))
                .collect::<Result<_>>()?
        } else {
            targets
        };
    // A `(TYPE)` target resolves its base like any other target, then moves onto the member (`typed`).
    let bases: Vec<Target> = targets.iter().map(typed::base_target).collect();
    if args.symbols.lines && !matches!(picked, Source::Vmlinux(_)) {
        return Err(Error::usage(format!(
            "--lines reads file:line from vmlinux DWARF, but the symbols come from {picked}; pass --vmlinux FILE \
             (an unstripped vmlinux with debug info)"
        )));
    }
    // A kallsyms without data symbols cannot place `jiffies`: the running kernel's vmlinux can. The table
    // loaded to find out is the one used below when nothing is fetched.
    let mut loaded = None;
    let mut picked = picked;
    if matches!(mode, Mode::System) && matches!(picked, Source::Kallsyms(_)) {
        let l = load_symbols(&args.symbols)?;
        match debuginfod::missing_data_symbol(&l.0, &bases) {
            Some(name) => {
                picked = debuginfod::fetch_for_symbol(
                    &mut search,
                    picked,
                    &name,
                    args.symbols.debuginfod(),
                )?;
                if let Source::Kallsyms(_) = picked {
                    loaded = Some(l);
                }
            }
            None => loaded = Some(l),
        }
    }
    let kallsyms_table;
    let file_symbols = match picked {
        Source::Kallsyms(_) => None,
        _ => Some(FileSymbols::open(
            picked.clone(),
            &search,
            args.symbols.force,
            !args.symbols.no_symbol_cache,
        )?),
    };
    let mut line_source = None;
    let system = matches!(mode, Mode::System);
    let (symbols, symbols_origin, source_text, kernel_resolved) = if let Some(files) = &file_symbols
    {
        let resolved = if system {
            files.watches(&bases, access)?
        } else {
            Vec::new()
        };
        if args.symbols.lines {
            line_source = Some(files.line_source()?);
        }
        // Chains named from a vmlinux or System.map never come from the kallsyms cache.
        (files.chains()?, Origin::Parsed, files.header(), resolved)
    } else {
        let (table, origin, source) = match loaded {
            Some(l) => l,
            None if user_only => load_symbols_or_none(&args.symbols)?,
            None => load_symbols(&args.symbols)?,
        };
        kallsyms_table = table;
        let resolved = if system {
            bases
                .iter()
                .map(|t| watch::resolve(t, access, &kallsyms_table))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        (&kallsyms_table, origin, source.to_string(), resolved)
    };
    let (cpus, follow) = select_cpus(args.cpus.as_deref())?;
    if let (Mode::Attach(pids), false) = (&mode, hit_path) {
        check_fd_budget(pids, cpus.len(), targets.len())?;
    }
    let mut cfg = EventConfig {
        ring_pages: args.buffer_pages,
        user_only,
        track_tasks: true,
        count_lost: true,
        remove_on_exec: args.remove_on_exec,
        values: None,
        hits: None,
    };
    // Launch mode: the command starts now, stopped at its exec, so its own symbols can be resolved.
    let mut launched = match &mode {
        Mode::Launch(argv) => Some(Launched::start(argv)?),
        _ => None,
    };
    let (scope, resolved) = match &mode {
        Mode::System => (Scope::System, kernel_resolved),
        Mode::Attach(pids) => (
            Scope::Processes(pids.clone()),
            processes_watches(pids, &bases, access)?,
        ),
        Mode::Launch(_) => {
            let child = launched.as_mut().map_or(0, |l| l.pid);
            (
                Scope::Launched(child),
                launch_watches(&mut launched, &bases, access)?,
            )
        }
    };
    let resolved = targets
        .iter()
        .zip(resolved)
        .map(|(t, r)| typed::apply(&types, t, r, access))
        .collect::<Result<Vec<_>>>()?;
    let mut watches: Vec<Watch> = Vec::new();
    for r in resolved {
        for w in &r.warnings {
            stderr::line(format_args!("ksymwatch: warning: {w}"));
        }
        watches.push(r.watch);
    }
    if let (Some(cond), Some(text)) = (&condition, &args.condition) {
        check_condition_widths(text, cond, &watches)?;
    }
    if hit_path {
        let mut hits = HitPrograms::load(&watches, condition.as_ref(), &filter, !system, values)?;
        // A launched command's children are watched too, as `perf record -- CMD` follows them.
        if matches!(mode, Mode::Launch(_)) {
            if let Err(e) = hits.follow_children() {
                stderr::line(format_args!(
                    "ksymwatch: warning: {e}; the command's own threads are watched, processes it forks are not"
                ));
            }
        }
        // The watched address means something else in another program: an exec ends that process's
        // watch, in the kernel before the new program runs, and the session reports it.
        if !system {
            if let Err(e) = hits.end_on_exec() {
                stderr::line(format_args!("ksymwatch: warning: {e}"));
            }
        }
        for pid in scope.pids() {
            hits.watch_process(pid).or_exit(
                ExitCode::Runtime,
                "adding a process to the watched-process map",
            )?;
        }
        cfg.hits = Some(std::sync::Arc::new(hits));
    } else if values {
        cfg.values = Some(std::sync::Arc::new(Values::load(
            &watches,
            condition.as_ref(),
            &filter,
        )?));
    }
    let labels: Vec<&str> = watches.iter().map(|w| w.label.as_str()).collect();
    let out = outputs(
        &args.output,
        &format!("ksymwatch {} {}", access.word(), labels.join(" ")),
    )?;
    let control_source = args.control.as_deref().map(Control::open).transpose()?;
    // Block the stop signals before arming: a Ctrl-C from here on is read by the loop, which releases the
    // breakpoints, instead of killing us with events half-set-up. (A launched command was started before:
    // it must not inherit the blocked signals.)
    let signals = SignalFd::stop_signals().or_exit(ExitCode::Runtime, "signalfd")?;
    let (hotplug, warning) = Hotplug::new(follow, args.strict_hotplug);
    if let Some(w) = warning {
        stderr::line(format_args!("ksymwatch: warning: {w}"));
    }
    if let Some(w) = warmup.take() {
        w.finish();
    }
    let armed = arm::arm_in(&watches, &cpus, &scope, &cfg)?;
    let armed_cpus: BTreeSet<u32> = armed.events.iter().map(|e| e.cpu).collect();
    // Every breakpoint event, per-thread ones included: a ring of the per-thread path holds one per thread.
    let n_events: usize = armed.events.iter().map(|e| e.breakpoints()).sum();
    let threads: BTreeSet<u32> = if hit_path {
        arm::threads(&scope.pids()).into_iter().collect()
    } else {
        armed.events.iter().flat_map(|e| e.tids()).collect()
    };
    let went_offline = armed.went_offline.clone();
    let processes = watched_processes(&scope);
    let header = Header {
        watches: &watches,
        cpus: &cpus,
        source: &source_text,
        processes: &processes,
        threads: threads.len(),
        values,
        condition: condition_text.as_deref(),
    };
    let limits = Limits {
        duration: args.duration,
        count: args.count,
    };
    // Joined before `armed`: the scan is long over by now (a few ms, against the symbol load's tens).
    let (comms, mut user) = task_scan.and_then(|t| t.join().ok()).unwrap_or_default();
    // A launched command started after the scan, and the kernel mapped its executable at its exec, before
    // any event existed to report it: read it while the command is stopped there, or a command that exits
    // right after its hits leaves them unnamed.
    if let Some(l) = &launched {
        user.read_process(l.pid);
    }
    let plan = Plan {
        watches: &watches,
        symbols,
        cfg,
        limits,
        filter,
        tally: args.output.summary || args.output.quiet,
        // Built (and checked) before arming, so a vmlinux without usable line tables fails before any hit.
        lines: line_source.as_ref().map(|l| l as &dyn LineSource),
        control: control_source.map(|source| Controller {
            source,
            resolve: resolver(&scope, symbols, file_symbols.as_ref(), &types),
            access,
        }),
        scope,
        comms,
        user,
        symbols_origin,
        condition: condition.clone(),
    };
    // `armed` goes out the moment every breakpoint is enabled; the session learns every live task's name
    // right after (a script starts its workload on that line: a task the scan misses is one that started
    // after arming, and the FORK/COMM records name it). Those alive before were named, and their maps
    // read, while the symbols loaded (`task_scan`).
    let mut session = Session::new(plan, out, armed, signals, Some(hotplug))?;
    let announced = session
        .out
        .header(&header)
        .and_then(|_| {
            session
                .out
                .armed(n_events, &armed_cpus, sys::monotonic_ns())
        })
        .and_then(|_| {
            // A CPU that went offline while arming is not a failure, but the reader must know it is not
            // covered until it returns (the loop arms it then).
            went_offline.iter().try_for_each(|&cpu| {
                session
                    .out
                    .event(&StreamEvent::CpuOffline { cpu }, sys::monotonic_ns())
            })
        });
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
    session.run()?;
    let _ = io::stdout().flush();
    // The command's status if it has ended; a run stopped first (signal, --duration, --count) leaves it
    // running unwatched and ends as a watch of a running process does.
    Ok(launched.as_mut().and_then(Launched::status).unwrap_or(0))
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

/// How a `--control watch` target is resolved: as the command line's were, in the same symbols or process,
/// a `(TYPE)` cast included.
fn resolver<'a>(
    scope: &Scope,
    kernel: &'a SymbolTable,
    files: Option<&'a FileSymbols>,
    types: &'a typed::Types,
) -> Resolve<'a> {
    let mut base = base_resolver(scope, kernel, files);
    Box::new(move |t: &Target, access| {
        let w = base(&typed::base_target(t), access)?;
        let resolved = Resolved {
            watch: w,
            warnings: Vec::new(),
        };
        Ok(typed::apply(types, t, resolved, access)?.watch)
    })
}

fn base_resolver<'a>(
    scope: &Scope,
    kernel: &'a SymbolTable,
    files: Option<&'a FileSymbols>,
) -> Resolve<'a> {
    let first = |r: Vec<Resolved>| {
        r.into_iter()
            .next()
            .map(|r| r.watch)
            .ok_or_else(|| Error::usage("the target resolved to nothing"))
    };
    match scope {
        Scope::System => Box::new(move |t: &Target, access| match files {
            Some(f) => first(f.watches(std::slice::from_ref(t), access)?),
            None => watch::resolve(t, access, kernel).map(|r| r.watch),
        }),
        Scope::Processes(_) | Scope::Launched(_) => {
            let pids = scope.pids();
            Box::new(move |t: &Target, access| {
                first(processes_watches(&pids, std::slice::from_ref(t), access)?)
            })
        }
    }
}

/// The header's processes: (pid, comm).
fn watched_processes(scope: &Scope) -> Vec<(u32, String)> {
    scope
        .pids()
        .into_iter()
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_else(|_| "?".into());
            (pid, comm)
        })
        .collect()
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
