//! Command-line interface: argument definitions and the glue from arguments to a session. Every error ends
//! here as one line on stderr and a documented exit code.

use std::collections::BTreeSet;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use ksymwatch_symbols::{kallsyms, Source, SymbolTable};

use crate::arm;
use crate::breakpoint::EventConfig;
use crate::cpulist;
use crate::error::{Error, Result};
use crate::hotplug::Hotplug;
use crate::output::ftrace::Ftrace;
use crate::output::{Header, Output};
use crate::session::{Limits, Session};
use crate::sys::{self, SignalFd};
use crate::target;
use crate::watch::{self, Access, Watch};

/// x86 has four debug registers per CPU; more watches than that can never be armed together.
pub const MAX_WATCHES: usize = 4;

#[derive(Parser, Debug)]
#[command(
    name = "ksymwatch",
    version,
    about = "Who wrote this variable? Arms a hardware watchpoint on every CPU and streams each writer's call chain.",
    after_help = "TARGET: SYMBOL[+OFF][/LEN], SYMBOL@N (Nth of same-named symbols) or 0xADDR[/LEN]; LEN is 1, 2, 4 or 8.\n\
                  Exit codes: 0 ok, 1 runtime error, 2 bad input, 3 could not arm, 4 not permitted or not supported."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Report every write to TARGET, with the writer's call chain.
    Write(WatchArgs),
    /// Report every read or write of TARGET (x86 has no read-only watchpoints).
    Rw(WatchArgs),
}

#[derive(Args, Debug)]
pub struct SymbolArgs {
    /// kallsyms-format file to resolve symbols and call chains with.
    #[arg(long, value_name = "FILE", default_value = "/proc/kallsyms")]
    pub kallsyms: PathBuf,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// What to watch: SYMBOL, SYMBOL+OFF, 0xADDR, each with an optional /LEN. Up to four.
    #[arg(required = true, value_name = "TARGET")]
    pub targets: Vec<String>,
    /// Stop after this long (500ms, 3s, 2m).
    #[arg(long, value_name = "DUR", value_parser = crate::duration::parse)]
    pub duration: Option<std::time::Duration>,
    /// Stop after exactly N hits.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// CPUs to watch and follow through hotplug (0-3,6); default: all.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Ring-buffer data pages per CPU and target (a power of two).
    #[arg(long, value_name = "PAGES", default_value_t = 128)]
    pub buffer_pages: usize,
    /// A CPU that comes online and cannot be armed is fatal (exit 3) instead of reported and retried.
    #[arg(long)]
    pub strict_hotplug: bool,
    #[command(flatten)]
    pub symbols: SymbolArgs,
}

/// Parses arguments, runs, and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { crate::error::ExitCode::Usage as i32 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ksymwatch: error: {e}");
            e.code as i32
        }
    }
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Write(args) => watch_command(args, Access::Write),
        Command::Rw(args) => watch_command(args, Access::ReadWrite),
    }
}

fn load_symbols(args: &SymbolArgs) -> Result<(SymbolTable, Source)> {
    let table = kallsyms::load(&args.kallsyms).map_err(|e| Error::usage(e.to_string()))?;
    Ok((table, Source::Kallsyms(args.kallsyms.clone())))
}

/// The CPUs to arm now and the set to follow through hotplug (`None`: every CPU that comes online).
fn select_cpus(list: Option<&str>) -> Result<(BTreeSet<u32>, Option<BTreeSet<u32>>)> {
    let online = cpulist::read(Path::new(cpulist::ONLINE))
        .map_err(|e| Error::runtime(format!("cannot read the online CPU list: {e}")))?;
    let Some(list) = list else { return Ok((online, None)) };
    let wanted = cpulist::parse(list)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::usage(format!("--cpus `{list}` is not a CPU list; use e.g. 0-3,6")))?;
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

fn watch_command(args: WatchArgs, access: Access) -> Result<()> {
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
    let (symbols, source) = load_symbols(&args.symbols)?;
    let mut watches: Vec<Watch> = Vec::new();
    for t in &targets {
        let r = watch::resolve(t, access, &symbols)?;
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
    let mut out = Ftrace::new(BufWriter::with_capacity(1 << 16, stdout.lock()), io::stderr());
    let source_text = source.to_string();
    let header = Header {
        watches: &watches,
        cpus: &cpus,
        source: &source_text,
    };
    let limits = Limits {
        duration: args.duration,
        count: args.count,
    };
    if out
        .header(&header)
        .and_then(|_| out.armed(n_events, &armed_cpus, sys::monotonic_ns()))
        .is_err()
    {
        // stdout is already closed: a normal, quiet end. Dropping `armed` releases every breakpoint.
        return Ok(());
    }
    let session = Session::new(&watches, &symbols, out, cfg, armed, signals, Some(hotplug), limits)?;
    session.run()?;
    let _ = io::stdout().flush();
    Ok(())
}
