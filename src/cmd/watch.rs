//! `ksymwatch write|rw`: resolve the targets, arm every CPU as one transaction, stream hits until stopped.

use std::collections::BTreeSet;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use ksymwatch_symbols::{kallsyms, Source, SymbolTable};

use crate::arm;
use crate::breakpoint::EventConfig;
use crate::cli::{SymbolArgs, WatchArgs};
use crate::cpulist;
use crate::error::{Error, Result};
use crate::hotplug::Hotplug;
use crate::output::ftrace::Ftrace;
use crate::output::{Header, Output};
use crate::session::{Limits, Plan, Session};
use crate::symsource::{self, FileSymbols};
use crate::sys::{self, SignalFd};
use crate::target;
use crate::watch::{self, Access, Watch};

/// x86 has four debug registers per CPU; more watches than that can never be armed together.
pub const MAX_WATCHES: usize = 4;

fn load_symbols(args: &SymbolArgs) -> Result<(SymbolTable, Source)> {
    let table = kallsyms::load(&args.kallsyms).map_err(|e| Error::usage(e.to_string()))?;
    Ok((table, Source::Kallsyms(args.kallsyms.clone())))
}

/// The CPUs to arm now and the set to follow through hotplug (`None`: every CPU that comes online).
fn select_cpus(list: Option<&str>) -> Result<(BTreeSet<u32>, Option<BTreeSet<u32>>)> {
    let online = cpulist::read(Path::new(cpulist::ONLINE))
        .map_err(|e| Error::runtime(format!("cannot read the online CPU list: {e}")))?;
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

pub fn run(args: WatchArgs, access: Access) -> Result<()> {
    if !args.buffer_pages.is_power_of_two() || args.buffer_pages > 1 << 16 {
        return Err(Error::usage(format!(
            "--buffer-pages {} must be a power of two up to 65536 (e.g. 64, 128, 256)",
            args.buffer_pages
        )));
    }
    let targets = args
        .targets
        .iter()
        .map(|t| target::parse(t).map_err(|e| Error::usage(e.to_string())))
        .collect::<Result<Vec<_>>>()?;
    if targets.len() > MAX_WATCHES {
        return Err(Error::usage(format!(
            "{} targets given, but a CPU has only {MAX_WATCHES} debug registers; watch at most {MAX_WATCHES} at once",
            targets.len()
        )));
    }
    crate::privilege::Privilege::current()
        .system_wide()
        .map_err(Error::not_permitted)?;
    let search = symsource::search(symsource::Files::of_watch(&args.symbols));
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
    if line_source.is_some() {
        // The line table is built and checked before arming so a bad vmlinux fails now, not at the first hit.
        eprintln!(
            "ksymwatch: warning: --lines: file:line frames are resolved but this printer does not show them yet"
        );
    }
    let mut watches: Vec<Watch> = Vec::new();
    for r in resolved {
        for w in &r.warnings {
            eprintln!("ksymwatch: warning: {w}");
        }
        watches.push(r.watch);
    }
    let (cpus, follow) = select_cpus(args.cpus.as_deref())?;
    let cfg = EventConfig {
        ring_pages: args.buffer_pages,
        track_tasks: true,
    };
    // Block the stop signals before arming: a Ctrl-C from here on is read by the loop, which releases the
    // breakpoints, instead of killing us with events half-set-up.
    let signals = SignalFd::stop_signals().map_err(|e| Error::runtime(format!("signalfd: {e}")))?;
    let (hotplug, warning) = Hotplug::new(follow, args.strict_hotplug);
    if let Some(w) = warning {
        eprintln!("ksymwatch: warning: {w}");
    }
    let armed = arm::arm(&watches, &cpus, &cfg)?;
    let armed_cpus: BTreeSet<u32> = armed.events.iter().map(|e| e.cpu).collect();
    let n_events = armed.events.len();
    let stdout = io::stdout();
    let mut out = Ftrace::new(
        BufWriter::with_capacity(1 << 16, stdout.lock()),
        io::stderr(),
    );
    let header = Header {
        watches: &watches,
        cpus: &cpus,
        source: &source_text,
    };
    let limits = Limits {
        duration: args.duration,
        count: args.count,
    };
    match out
        .header(&header)
        .and_then(|_| out.armed(n_events, &armed_cpus, sys::monotonic_ns()))
    {
        Ok(()) => {}
        // stdout is already closed: a normal, quiet end. Returning drops `armed`, releasing every breakpoint.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(Error::runtime(format!("writing output: {e}"))),
    }
    let plan = Plan {
        watches: &watches,
        symbols,
        cfg,
        limits,
    };
    let session = Session::new(plan, out, armed, signals, Some(hotplug))?;
    session.run()?;
    let _ = io::stdout().flush();
    Ok(())
}
