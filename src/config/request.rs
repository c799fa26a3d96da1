//! What a `write`/`rw` command line asks for, as plain data: the command line's words, typed where their
//! syntax alone decides (numbers, paths, durations, `--dump-on`'s triggers, `--on`'s and `--free`'s
//! sources), checked against nothing. `cli` builds a [`WatchRequest`] from its clap types;
//! [`crate::config::plan()`] checks it against itself and the machine and decides how the watch is made.
//! Nothing here reads a file or knows clap.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::flight::{DumpOn, Trigger};
use crate::config::objects::{Source, UserProbe};
use crate::model::watch::Access;

/// A `write` or `rw` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRequest {
    pub access: Access,
    /// TARGET, in the command line's order.
    pub targets: Vec<String>,
    /// `-p PID`, as given (a thread id, a repeated pid: the plan sorts them out).
    pub pids: Vec<u32>,
    /// `-- CMD ARGS`: `Some` with an empty command for a bare trailing `--`. Any bytes but NUL, as the
    /// shell gave them: the command's words are passed to exec unchanged, never read as text.
    pub command: Option<Vec<std::ffi::OsString>>,
    /// `--cpus LIST`, unparsed.
    pub cpus: Option<String>,
    /// `--on SOURCE`, parsed as it entered.
    pub on: Option<Source>,
    pub rotate: bool,
    /// `--free SOURCE`, parsed as it entered.
    pub free: Vec<UserProbe>,
    pub percpu_cpu: Option<u32>,
    pub buffer_pages: Option<usize>,
    /// `--realtime PRIO|off`, unparsed.
    pub realtime: String,
    pub strict_hotplug: bool,
    pub control: Option<PathBuf>,
    pub remove_on_exec: bool,
    pub per_thread: bool,
    pub value: bool,
    /// `--if EXPR`, unparsed.
    pub condition: Option<String>,
    pub last: Option<usize>,
    /// `--dump-on TRIGGER`, in order, parsed as it entered (the text kept for messages).
    pub dump_on: Vec<DumpOn>,
    pub duration: Option<Duration>,
    pub count: Option<u64>,
    pub symbols: SymbolRequest,
    pub output: OutputRequest,
}

impl WatchRequest {
    /// `--on` names a kernel source: its objects are the kernel's, so the watch is system-wide and `-p`
    /// chooses the allocating processes instead of the watched ones.
    pub fn kernel_objects(&self) -> bool {
        self.on.as_ref().is_some_and(|on| on.user().is_none())
    }

    /// The processes whose memory is watched: `-p`'s, except with a kernel `--on` source, where `-p`
    /// chooses the allocating processes of a system-wide watch.
    pub fn watched_pids(&self) -> &[u32] {
        match self.kernel_objects() {
            true => &[],
            false => &self.pids,
        }
    }

    /// `--per-thread` or `--remove-on-exec`: the kernel applies them per event, so every thread has its
    /// own events (running the hit program where it loads).
    pub fn per_event(&self) -> bool {
        self.per_thread || self.remove_on_exec
    }

    /// The kernel reads the watched value at each trap: `--value`, `--if`, or a `--dump-on` condition.
    pub fn reads_values(&self) -> bool {
        self.value
            || self.condition.is_some()
            || self
                .dump_on
                .iter()
                .any(|d| matches!(d.trigger, Trigger::Hit(_)))
    }
}

/// The kernel's symbol files and how to use them (`write`'s and `resolve`'s options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolRequest {
    pub kallsyms: PathBuf,
    pub vmlinux: Option<PathBuf>,
    pub system_map: Option<PathBuf>,
    /// The running kernel's ELF notes (its build-id).
    pub notes: PathBuf,
    pub btf: PathBuf,
    pub debuginfod: DebuginfodRequest,
    /// `--force`: arm with a file proven not to be the running kernel.
    pub force: bool,
    /// `--lines`: file:line for kernel frames.
    pub lines: bool,
    /// The parsed kallsyms kept per boot may be used and written (`--no-symbol-cache` says no).
    pub symbol_cache: bool,
}

impl SymbolRequest {
    /// The files named, as the symbol search takes them.
    pub fn files(&self) -> Files<'_> {
        Files {
            kallsyms: &self.kallsyms,
            vmlinux: self.vmlinux.as_deref(),
            system_map: self.system_map.as_deref(),
            notes: &self.notes,
        }
    }
}

/// The debuginfod options of a command (`--offline`, `--debuginfod-max-size`, `--debuginfod-timeout`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DebuginfodRequest {
    pub offline: bool,
    pub max_size: Option<u64>,
    pub deadline: Option<Duration>,
}

/// The files named on the command line.
#[derive(Debug, Clone, Copy)]
pub struct Files<'a> {
    pub kallsyms: &'a Path,
    pub vmlinux: Option<&'a Path>,
    pub system_map: Option<&'a Path>,
    pub notes: &'a Path,
}

/// `--format`: how the stream is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    OtlpJson,
}

impl Format {
    /// As `--format` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Json => "json",
            Format::OtlpJson => "otlp-json",
        }
    }
}

/// How hits are reported: the stream, the end-of-session reports, the hit filters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutputRequest {
    /// `--json` (the same as `--format json`).
    pub json: bool,
    pub format: Option<Format>,
    /// `-o FILE`: the stream's file instead of stdout.
    pub stream_file: Option<PathBuf>,
    pub summary: bool,
    pub quiet: bool,
    /// How many chains the text summary lists.
    pub top: usize,
    /// `--folded[=FILE]`: `-` for stdout.
    pub folded: Option<PathBuf>,
    pub no_status: bool,
    pub flamegraph: Option<PathBuf>,
    pub perfetto: Option<PathBuf>,
    pub comms: Vec<String>,
    pub tids: Vec<u32>,
    /// `--cgroup PATH`, as given.
    pub cgroups: Vec<String>,
    pub exclude_idle: bool,
    pub kernel_only: bool,
    pub user_only: bool,
}

impl OutputRequest {
    /// `--folded` without a file: the stacks are stdout's only content.
    pub fn folded_to_stdout(&self) -> bool {
        self.folded.as_deref() == Some(Path::new("-"))
    }
}
