//! The clap argument types. Nothing outside `cli/` sees them: each command turns them into the typed
//! configs of the layers below.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::cli::parsed::Parsed;
use crate::config::flight::{self, DumpOn};
use crate::config::objects::{self, Source, UserProbe};
pub use crate::config::request::Format;
use crate::config::request::SymbolRequest;

#[derive(Parser, Debug)]
#[command(
    name = "ksymwatch",
    version,
    about = "Who wrote this variable? Arms a hardware watchpoint on every CPU and streams each writer's call chain.",
    after_help = "TARGET: SYMBOL[+OFF][/LEN], SYMBOL@N (Nth of same-named symbols) or 0xADDR[/LEN]; LEN is 1, 2, 4 or 8.\n\
                  With a vmlinux: SYMBOL.FIELD[N].FIELD... (struct fields and array elements).\n\
                  Typed, from the kernel's BTF: '(struct TYPE)0xADDR.FIELD[N]...' or '(struct TYPE)SYMBOL.FIELD...' (quote it).\n\
                  In a process (-p PID, -- CMD, resolve --pid): [OBJECT:]SYMBOL..., OBJECT a mapped file (libc.so.6, libc, a path);\n\
                  fields need the binary built with -g.\n\
                  Symbols come from --vmlinux, --system-map, the distribution's files for the running kernel, then kallsyms;\n\
                  fields with none of these: the running kernel's vmlinux from the debuginfod servers in DEBUGINFOD_URLS.\n\
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
    /// Print where TARGET is (addresses, size, section, type, which file answered) without arming anything;
    /// with --pid, where it is in that process.
    Resolve(ResolveArgs),
    /// Show what this machine allows: breakpoint PMU, privileges, free debug registers, symbols, hotplug.
    /// Exit 0 when a watch on every online CPU can be armed, 3 when a CPU has no free debug register (as
    /// `write` would), 4 when not permitted or not supported.
    Check {
        /// One JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
}

/// The kernel's symbol files, named the same way for `write`, `rw` and `resolve`.
#[derive(Args, Debug)]
pub struct KernelFileArgs {
    /// kallsyms-format file to resolve symbols and call chains with (the last resort, and the running
    /// kernel to compare a file with).
    #[arg(long, value_name = "FILE", default_value = crate::config::kernel_source::DEFAULT_KALLSYMS)]
    pub kallsyms: PathBuf,
    /// vmlinux ELF to resolve symbols, struct fields and sizes with (tried first).
    #[arg(long, value_name = "FILE")]
    pub vmlinux: Option<PathBuf>,
    /// System.map to resolve symbols with (tried after --vmlinux).
    #[arg(long, value_name = "FILE")]
    pub system_map: Option<PathBuf>,
    /// BTF to take the types of '(TYPE)BASE.FIELD' targets from (modules' BTF is looked for next to it).
    #[arg(long, value_name = "FILE", default_value = crate::config::typed::DEFAULT_BTF)]
    pub btf: PathBuf,
    /// ELF notes of the running kernel, for its build-id (tests point this at a made-up kernel).
    #[arg(long, value_name = "FILE", default_value = crate::config::kernel_source::DEFAULT_NOTES, hide = true)]
    pub kernel_notes: PathBuf,
    /// Never fetch the running kernel's vmlinux from the debuginfod servers in DEBUGINFOD_URLS (one already
    /// in the debuginfod cache is still used).
    #[arg(long)]
    pub offline: bool,
    /// The most a debuginfod server may send (default 2G; K, M, G, T are powers of 1024).
    #[arg(long, value_name = "SIZE", value_parser = crate::config::kernel_source::parse_size)]
    pub debuginfod_max_size: Option<u64>,
    /// Give up fetching from debuginfod (connecting, waiting, downloading; every server) after this long
    /// (default 10m).
    #[arg(long, value_name = "DUR", value_parser = crate::cli::duration::parse)]
    pub debuginfod_timeout: Option<std::time::Duration>,
}

/// A watch's symbol options: the files, and how they are used.
#[derive(Args, Debug)]
pub struct SymbolArgs {
    #[command(flatten)]
    pub files: KernelFileArgs,
    /// Arm even if the vmlinux/System.map is proven not to be the running kernel (build-id mismatch).
    #[arg(long)]
    pub force: bool,
    /// Add (file:line) and inlined frames to kernel call-chain frames, from vmlinux DWARF (needs --vmlinux).
    #[arg(long)]
    pub lines: bool,
    /// Parse /proc/kallsyms afresh instead of using the parsed copy kept for this boot and module set in
    /// /var/cache/ksymwatch ($KSYMWATCH_CACHE_DIR), and do not write that copy.
    #[arg(long)]
    pub no_symbol_cache: bool,
}

#[derive(Args, Debug)]
pub struct ResolveArgs {
    /// What to look up: SYMBOL[.FIELD|[N]]...[@N][+OFF]; with --pid, [OBJECT:] first; '(TYPE)' first for a
    /// BTF-typed object.
    #[arg(value_name = "TARGET")]
    pub target: String,
    /// Print one JSON object instead of `key: value` lines.
    #[arg(long)]
    pub json: bool,
    /// Look TARGET up in this process's executable and libraries instead of the kernel: its object file,
    /// file address, load bias and runtime address.
    #[arg(long, value_name = "PID", conflicts_with_all = ["kallsyms", "vmlinux", "system_map"])]
    pub pid: Option<u32>,
    #[command(flatten)]
    pub files: KernelFileArgs,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// What to watch: SYMBOL, SYMBOL+OFF, 0xADDR, '(TYPE)0xADDR.FIELD', each with an optional /LEN. Up to four.
    #[arg(required = true, value_name = "TARGET")]
    pub targets: Vec<String>,
    /// Stop after this long (500ms, 3s, 2m).
    #[arg(long, value_name = "DUR", value_parser = crate::cli::duration::parse)]
    pub duration: Option<std::time::Duration>,
    /// Stop after exactly N hits.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// CPUs to watch and follow through hotplug (0-3,6); default: all.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Watch each object as it is allocated: kmalloc:FUNC[+OFF], kmem_cache_alloc:FUNC[+OFF],
    /// tracepoint:GROUP:NAME:argN, or in a process (-p/--) uretprobe:PATH:FUNC or uprobe:PATH:FUNC:argN;
    /// TARGET names its field with `$obj`: '(struct TYPE)$obj.FIELD' (or '$obj+OFF/LEN' in user space).
    #[arg(long, value_name = "SOURCE", value_parser = Parsed(objects::parse_source))]
    pub on: Option<Source>,
    /// With a user-space --on: the call that ends an object, uprobe:PATH:FUNC:argN (repeatable; default
    /// for the malloc family: free and realloc).
    #[arg(long = "free", value_name = "SOURCE", value_parser = Parsed(objects::parse_free))]
    pub free: Vec<UserProbe>,
    /// With --on: when every debug register is busy, a new object evicts the oldest armed one (default:
    /// the new one is skipped and counted).
    #[arg(long)]
    pub rotate: bool,
    /// A per-CPU variable: every CPU watches CPU N's copy (remote writers included), instead of each CPU
    /// its own copy.
    #[arg(long, value_name = "N")]
    pub percpu_cpu: Option<u32>,
    /// Ring-buffer data pages per CPU and target (a power of two). Default: the hit rings sized from the
    /// CPUs and what the watch covers (128-4096), the perf rings 128.
    #[arg(long, value_name = "PAGES")]
    pub buffer_pages: Option<usize>,
    /// The reader's scheduling: SCHED_FIFO at priority PRIO (1-99) where permitted, as `perf record
    /// --realtime`, so writers on its CPU cannot starve it; `off` keeps the normal priority.
    #[arg(long, value_name = "PRIO|off", default_value = "1")]
    pub realtime: String,
    /// A CPU that comes online and cannot be armed is fatal (exit 3) instead of reported and retried.
    #[arg(long)]
    pub strict_hotplug: bool,
    /// Watch only this process: every thread it has and creates (TARGET may name its own symbols, or
    /// `LIB:SYMBOL`). Repeatable; the run ends when every process has exited.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Run CMD ARGS with the watch armed before its first instruction, on every thread it starts; exit
    /// with its exit status.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
    /// Read commands that move or pause the watch while it runs, one a line, from FIFO (created if
    /// absent) or `-` (stdin): `watch TARGET[/LEN] [w|rw]`, `off`, `on`. Each is acknowledged in the stream.
    #[arg(long, value_name = "FIFO")]
    pub control: Option<PathBuf>,
    /// With -p or -- CMD: a thread that execs another program stops being watched (the address means
    /// something else there). Default: the watch stays, as the kernel keeps it.
    #[arg(long)]
    pub remove_on_exec: bool,
    /// With -p or -- CMD: one breakpoint per thread, CPU and target, as a user without BPF gets, instead
    /// of one per CPU with the process chosen in the kernel. Other processes that touch the same address
    /// then never trap; but children are not followed, and an exec keeps the watch. Where BPF loads (and
    /// the kernel tells the program which event fired, Linux 6.2) every thread's events run the hit
    /// program, which counts every hit; otherwise hits are counted as their records arrive (a full ring
    /// loses them).
    #[arg(long)]
    pub per_thread: bool,
    /// Resolve and check everything, print what would be armed, and arm nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Report the value each hit stored, exactly, and the one before it (`value=0x1f4 old=0x1f3`): read in
    /// the kernel at the trap by a BPF program on each breakpoint. Needs BPF (root, or CAP_BPF and
    /// CAP_PERFMON).
    #[arg(long)]
    pub value: bool,
    /// Report only hits whose stored value matches EXPR, evaluated in the kernel: the breakpoint's BPF
    /// program drops a hit that does not match there, so it costs the writer the trap and the program
    /// (about 15 us), the tracer nothing (no record, no ring space, no wake-up), and is counted as
    /// `filtered` in the summary; implies --value. EXPR compares `value` (this store) or `old`
    /// (the one before) with a number or each other: `== != < <= > >=`, `&` (any bit set), `changed`,
    /// joined with `&&`, `||` and parentheses; unsigned unless an operand is prefixed `(s)`, e.g.
    /// `value == 0`, `(s)value < 0 && changed`, `value & 0x4`.
    #[arg(long = "if", value_name = "EXPR")]
    pub condition: Option<String>,
    /// Flight recorder: keep the last N hits in memory and print nothing until a --dump-on trigger fires;
    /// then print them, oldest first (and the hit that fired it), and record afresh.
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
    /// What prints the --last hits (repeatable): a condition on a hit, in the --if language (implies
    /// --value; hits that do not match are still recorded); `signal` (SIGUSR1 to ksymwatch); or
    /// `tracepoint:GROUP:NAME`, a kernel tracepoint firing anywhere (error_report:error_report_end: a KASAN
    /// or KFENCE report).
    #[arg(long = "dump-on", value_name = "TRIGGER", value_parser = Parsed(flight::dump_on))]
    pub dump_on: Vec<DumpOn>,
    #[command(flatten)]
    pub symbols: SymbolArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// How hits are reported: formats, end-of-session reports, filters.
#[derive(Args, Debug, Default)]
pub struct OutputArgs {
    /// One JSON object per line (NDJSON) on stdout for every hit and stream event; schema in docs/outputs.md.
    /// The same as `--format json`.
    #[arg(long)]
    pub json: bool,
    /// The stream's format: `text` (ftrace-style, the default), `json` (NDJSON, as --json), `otlp-json`
    /// (OpenTelemetry logs: one OTLP/JSON ExportLogsServiceRequest per line, as the Collector's
    /// otlpjsonfile receiver reads).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// Write the stream (text, JSON or OTLP) to FILE instead of stdout (with `-- CMD`, stdout is the command's;
    /// `-o -` is stdout).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub stream_file: Option<PathBuf>,
    /// At exit (also on Ctrl-C), unique call chains with counts, most frequent first, and totals by writer
    /// ip, comm, thread and CPU; with --json or otlp-json, as the summary record's extra fields.
    #[arg(long)]
    pub summary: bool,
    /// No per-hit stream: only the end-of-session report (implies --summary).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// How many call chains, threads and --on objects the text summary lists, the most frequent (0: all).
    /// JSON lists all.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// At exit, collapsed stacks (`comm;outer;...;inner count`) for flamegraph.pl or inferno: to stdout
    /// instead of the stream (beside it with `-o FILE`), or `--folded=FILE`.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    pub folded: Option<PathBuf>,
    /// No live status line on stderr (shown only when stderr is a terminal and stdout is not, or carries no
    /// stream).
    #[arg(long)]
    pub no_status: bool,
    /// At exit, render the collapsed stacks as an SVG flame graph to FILE.
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
    /// Also write the session as a Perfetto trace to FILE, as it goes (open it at ui.perfetto.dev): a track
    /// per writing thread and per CPU with an instant per hit and its call chain, and the session's marks.
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<PathBuf>,
    /// Report only hits by tasks with this name (as printed, e.g. `bash`); repeatable.
    #[arg(long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,
    /// Report only hits by this thread id; repeatable.
    #[arg(long = "tid", value_name = "N")]
    pub tids: Vec<u32>,
    /// Report only hits whose writer is in this cgroup (v2) or below it, decided in the kernel: a
    /// directory under the cgroup2 mount, or a path in the hierarchy as /proc/PID/cgroup prints it;
    /// repeatable.
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,
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

/// `--format`'s values, as clap offers them.
impl clap::ValueEnum for Format {
    fn value_variants<'a>() -> &'a [Self] {
        &[Format::Text, Format::Json, Format::OtlpJson]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

impl KernelFileArgs {
    /// The files and debuginfod options as planning and `resolve` take them; `force`, `lines` and the
    /// cache as a watch gives them (`resolve` uses neither).
    pub fn request(self, force: bool, lines: bool, symbol_cache: bool) -> SymbolRequest {
        SymbolRequest {
            kallsyms: self.kallsyms,
            vmlinux: self.vmlinux,
            system_map: self.system_map,
            notes: self.kernel_notes,
            btf: self.btf,
            debuginfod: crate::config::request::DebuginfodRequest {
                offline: self.offline,
                max_size: self.debuginfod_max_size,
                deadline: self.debuginfod_timeout,
            },
            force,
            lines,
            symbol_cache,
        }
    }
}

impl SymbolArgs {
    /// The request's symbol part.
    pub fn request(self) -> SymbolRequest {
        self.files
            .request(self.force, self.lines, !self.no_symbol_cache)
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;
    use crate::cli::ring_size::{MAX_RING_PAGES, MIN_RING_PAGES, PERF_RING_PAGES};

    /// `write`'s help of option `long`, as `--help` prints it.
    fn help(long: &str) -> String {
        let cli = Cli::command();
        let write = cli.find_subcommand("write").expect("the write command");
        let arg = write
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .unwrap_or_else(|| panic!("--{long}"));
        arg.get_help().map(|h| h.to_string()).unwrap_or_default()
    }

    /// The help texts say what the options do now: the summary's lists `--top` cuts, the default ring
    /// sizes from the sizing's own constants, the per-thread path's counts.
    #[test]
    fn help_texts_say_what_the_options_do() {
        let sizes = format!("({MIN_RING_PAGES}-{MAX_RING_PAGES})");
        let perf_size = format!("the perf rings {PERF_RING_PAGES}");
        let says: [(&str, &[&str]); 6] = [
            (
                "top",
                &["call chains", "threads", "--on objects", "JSON lists all"],
            ),
            ("buffer-pages", &[&sizes, &perf_size]),
            ("per-thread", &["counted as their records arrive"]),
            // A hit `--if` drops is dropped by the hit program in the kernel: the writer still pays the
            // trap.
            (
                "if",
                &[
                    "the breakpoint's BPF program drops a hit that does not match there",
                    "costs the writer the trap and the program",
                    "`filtered`",
                ],
            ),
            // With `-o FILE` the stream goes there, and `--folded` to stdout beside it.
            ("folded", &["(beside it with `-o FILE`)"]),
            ("realtime", &["SCHED_FIFO", "`off`"]),
        ];
        for (option, phrases) in says {
            let text = help(option);
            for phrase in phrases {
                assert!(text.contains(phrase), "--{option}: {text}");
            }
        }
        // It said "costs no sample", as if nothing were paid.
        let cond = help("if");
        assert!(!cond.contains("costs no sample"), "{cond}");
    }

    /// The launched command's words are any bytes the shell gives (a Latin-1 file name, a raw byte for
    /// `printf`), kept as they are for exec: they used to be refused ("invalid UTF-8 was detected").
    #[test]
    fn a_launched_commands_words_need_not_be_utf8() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;

        use clap::Parser;

        let raw = OsString::from_vec(b"caf\xe9.txt".to_vec());
        let line: Vec<OsString> = ["ksymwatch", "write", "counter", "--", "cat"]
            .into_iter()
            .map(OsString::from)
            .chain([raw.clone()])
            .collect();
        let cli = Cli::try_parse_from(line).unwrap_or_else(|e| panic!("{e}"));
        let super::Command::Write(args) = cli.command else {
            panic!("not write");
        };
        let words: Vec<&std::ffi::OsStr> = args.command.iter().map(|w| w.as_ref()).collect();
        assert_eq!(words, [OsString::from("cat"), raw]);
    }
}
