//! Command-line interface: argument definitions and dispatch to [`crate::cmd`]. Every error ends here as one
//! line on stderr and a documented exit code.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::cmd;
use crate::error::Result;
use crate::watch::Access;

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
    #[command(flatten)]
    pub output: OutputArgs,
}

/// How hits are reported: formats, end-of-session reports, filters.
#[derive(Args, Debug, Default)]
pub struct OutputArgs {
    /// One JSON object per line (NDJSON) on stdout for every hit and stream event; schema in the README.
    #[arg(long)]
    pub json: bool,
    /// At exit (also on Ctrl-C), unique call chains with counts, most frequent first, and totals by writer
    /// ip, comm and CPU; with --json, as the summary record's extra fields.
    #[arg(long)]
    pub summary: bool,
    /// No per-hit stream: only the end-of-session report (implies --summary).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// How many call chains the text summary lists (0: all). JSON lists all.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// At exit, collapsed stacks (`comm;outer;...;inner count`) for flamegraph.pl or inferno: to stdout
    /// instead of the stream, or `--folded=FILE`.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    pub folded: Option<PathBuf>,
    /// No live status line on stderr (shown only when stderr is a terminal and stdout is not, or carries no
    /// stream).
    #[arg(long)]
    pub no_status: bool,
    /// At exit, render the collapsed stacks as an SVG flame graph to FILE.
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
    /// Report only hits by tasks with this name (as printed, e.g. `bash`); repeatable.
    #[arg(long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,
    /// Report only hits by this thread id; repeatable.
    #[arg(long = "tid", value_name = "N")]
    pub tids: Vec<u32>,
    /// Drop hits by the idle task (`<idle>-0`).
    #[arg(long)]
    pub exclude_idle: bool,
    /// Report only hits where the writer ran in the kernel.
    #[arg(long)]
    pub kernel_only: bool,
    /// Report only hits where the writer ran in user space.
    #[arg(long)]
    pub user_only: bool,
}

/// Parses arguments, runs, and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                crate::error::ExitCode::Usage as i32
            } else {
                0
            };
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
        Command::Write(args) => cmd::watch::run(args, Access::Write),
        Command::Rw(args) => cmd::watch::run(args, Access::ReadWrite),
    }
}
