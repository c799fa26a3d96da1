//! `ksymwatch write|rw`: resolve the targets, arm every CPU as one transaction, stream hits until stopped.

use std::collections::BTreeSet;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::Path;

use ksymwatch_symbols::{kallsyms, LineSource, Source, SymbolTable};

use crate::cli::args::OutputArgs;
use crate::cli::args::{SymbolArgs, WatchArgs};
use crate::cli::output_file;
use crate::config::advice::SymbolsContext;
use crate::config::filter::{Filter, Place};
use crate::config::symbols::{self, FileSymbols};
use crate::config::target;
use crate::config::watch::{self, Access, Watch};
use crate::config::Limits;
use crate::cpulist;
use crate::error::{Context, Error, ExitCode, Result};
use crate::perf::arm;
use crate::perf::event::EventConfig;
use crate::perf::sys::{self, SignalFd};
use crate::report::folded::{Folded, Sink};
use crate::report::ftrace::Ftrace;
use crate::report::json::Json;
use crate::report::status::Status;
use crate::report::{Header, Output, Quiet, StreamEvent, Tee};
use crate::stderr::{self, Stderr};
use crate::trace::hotplug::Hotplug;
use crate::trace::session::{Plan, Session};

/// x86 has four debug registers per CPU; more watches than that can never be armed together.
pub const MAX_WATCHES: usize = 4;

fn load_symbols(args: &SymbolArgs) -> Result<(SymbolTable, Source)> {
    let table = kallsyms::load(&args.kallsyms).bad_symbols()?;
    Ok((table, Source::Kallsyms(args.kallsyms.clone())))
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
        comms: args.comms.clone(),
        tids: args.tids.clone(),
        exclude_idle: args.exclude_idle,
        place,
    })
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
    // stderr carries messages, never the product: its failure must not end the session (crate::stderr).
    let quiet = args.quiet || folded_to_stdout(args);
    let stream: Box<dyn Output> = match (args.json, quiet) {
        (true, false) => Box::new(Json::new(stdout(), Stderr)),
        (true, true) => Box::new(Quiet::new(Json::new(stdout(), Stderr), Stderr)),
        (false, false) => Box::new(Ftrace::new(stdout(), Stderr).with_top(args.top)),
        (false, true) => Box::new(Quiet::new(
            Ftrace::new(stdout(), Stderr).with_top(args.top),
            Stderr,
        )),
    };
    // The status line shares the terminal with a stream on stdout only if stdout is elsewhere; first in the
    // tee so it is cleared before any end-of-session report.
    let status =
        !args.no_status && io::stderr().is_terminal() && (quiet || !io::stdout().is_terminal());
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

pub fn run(args: WatchArgs, access: Access) -> Result<()> {
    if !args.buffer_pages.is_power_of_two() || args.buffer_pages > 1 << 16 {
        return Err(Error::usage(format!(
            "--buffer-pages {} must be a power of two up to 65536 (e.g. 64, 128, 256)",
            args.buffer_pages
        )));
    }
    let filter = filter(&args.output)?;
    check_outputs(&args.output)?;
    let targets = args
        .targets
        .iter()
        .map(|t| target::parse(t).bad_input())
        .collect::<Result<Vec<_>>>()?;
    if targets.len() > MAX_WATCHES {
        return Err(Error::usage(format!(
            "{} targets given, but a CPU has only {MAX_WATCHES} debug registers; watch at most {MAX_WATCHES} at once",
            targets.len()
        )));
    }
    crate::perf::privilege::Privilege::current()
        .system_wide()
        .map_err(Error::not_permitted)?;
    let search = symbols::search(args.symbols.files());
    let picked = search.pick();
    if args.symbols.lines && !matches!(picked, Source::Vmlinux(_)) {
        return Err(Error::usage(format!(
            "--lines reads file:line from vmlinux DWARF, but the symbols come from {picked}; pass --vmlinux FILE \
             (an unstripped vmlinux with debug info)"
        )));
    }
    let kallsyms_table;
    let file_symbols;
    let mut line_source = None;
    let (symbols, source_text, resolved) = if let Source::Kallsyms(_) = picked {
        let (table, source) = load_symbols(&args.symbols)?;
        kallsyms_table = table;
        let resolved = targets
            .iter()
            .map(|t| watch::resolve(t, access, &kallsyms_table))
            .collect::<Result<Vec<_>>>()?;
        (&kallsyms_table, source.to_string(), resolved)
    } else {
        file_symbols = FileSymbols::open(picked, &search, args.symbols.force)?;
        let resolved = file_symbols.watches(&targets, access)?;
        if args.symbols.lines {
            line_source = Some(file_symbols.line_source()?);
        }
        (file_symbols.chains()?, file_symbols.header(), resolved)
    };
    let mut watches: Vec<Watch> = Vec::new();
    for r in resolved {
        for w in &r.warnings {
            stderr::line(format_args!("ksymwatch: warning: {w}"));
        }
        watches.push(r.watch);
    }
    let (cpus, follow) = select_cpus(args.cpus.as_deref())?;
    let cfg = EventConfig {
        ring_pages: args.buffer_pages,
        track_tasks: true,
        count_lost: true,
    };
    let labels: Vec<&str> = watches.iter().map(|w| w.label.as_str()).collect();
    let out = outputs(
        &args.output,
        &format!("ksymwatch {} {}", access.word(), labels.join(" ")),
    )?;
    // Block the stop signals before arming: a Ctrl-C from here on is read by the loop, which releases the
    // breakpoints, instead of killing us with events half-set-up.
    let signals = SignalFd::stop_signals().or_exit(ExitCode::Runtime, "signalfd")?;
    let (hotplug, warning) = Hotplug::new(follow, args.strict_hotplug);
    if let Some(w) = warning {
        stderr::line(format_args!("ksymwatch: warning: {w}"));
    }
    let armed = arm::arm(&watches, &cpus, &cfg)?;
    let armed_cpus: BTreeSet<u32> = armed.events.iter().map(|e| e.cpu).collect();
    let n_events = armed.events.len();
    let went_offline = armed.went_offline.clone();
    let header = Header {
        watches: &watches,
        cpus: &cpus,
        source: &source_text,
    };
    let limits = Limits {
        duration: args.duration,
        count: args.count,
    };
    let plan = Plan {
        watches: &watches,
        symbols,
        cfg,
        limits,
        filter,
        tally: args.output.summary || args.output.quiet,
        // Built (and checked) before arming, so a vmlinux without usable line tables fails before any hit.
        lines: line_source.as_ref().map(|l| l as &dyn LineSource),
    };
    // The session learns every live task's name before `armed` goes out: a script starts its workload on that
    // line, and a task that exits before we looked would print as `<...>`.
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
    match announced {
        Ok(()) => {}
        // stdout is already closed: a normal, quiet end. Dropping the session releases every breakpoint.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(Error::runtime("writing output").caused_by(e)),
    }
    session.run()?;
    let _ = io::stdout().flush();
    Ok(())
}
