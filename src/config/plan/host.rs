//! The machine as planning sees it: the one door through which [`crate::config::plan`] reads anything
//! (BPF, privileges, CPUs, /proc, the kernel's symbol files and BTF, tracefs) or starts a command. The
//! command line gives the real machine (`cli`); the unit tests a made-up one, so every planning decision is
//! tested without a kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use ksymwatch_symbols::{Origin, Source, SymbolTable};

use crate::config::request::SymbolRequest;
use crate::config::symbols::FileSymbols;
use crate::config::watch::Resolved;
use crate::error::Result;
use crate::model::target::Target;
use crate::model::watch::Access;
use crate::perf::bpf::percpu::Offsets;
use crate::perf::privilege::Privilege;

/// A task as `/proc/PID/status` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// Its process (thread group) id.
    pub tgid: u32,
    pub name: String,
}

/// Why the running kernel's vmlinux is fetched from debuginfod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetch {
    /// A struct member, an array element or `--lines` needs DWARF.
    Dwarf,
    /// A kallsyms without data symbols lacks this symbol.
    Symbol(String),
}

/// A command started for a launch-mode watch, stopped before its first instruction.
pub trait Launch {
    fn pid(&self) -> u32;
    /// Runs it to its program's entry point (every library it links mapped); `Ok(false)` if it ended first.
    fn run_to_entry(&mut self) -> Result<bool>;
    /// Lets it go, watched.
    fn release(&mut self) -> Result<()>;
    /// Its exit status once it has ended (its code, or 128 plus the signal).
    fn status(&mut self) -> Option<i32>;
}

/// What planning reads of the machine, and the one thing it does to it (start a launched command).
pub trait Host {
    /// Whether a BPF program loads here (the hit path and `--value` need one).
    fn bpf(&self) -> io::Result<()>;
    /// This process's privileges for perf events.
    fn privilege(&self) -> Privilege;
    /// The online CPUs.
    fn online_cpus(&self) -> io::Result<BTreeSet<u32>>;
    /// The CPUs that can ever be online, if known.
    fn possible_cpus(&self) -> Option<BTreeSet<u32>>;
    /// The task `pid`, if it exists.
    fn task(&self, pid: u32) -> Option<Task>;
    /// Whether process `pid` still exists.
    fn process_exists(&self, pid: u32) -> bool;
    /// `target` resolved in process `pid`'s own address space.
    fn resolve_in_process(&self, pid: u32, target: &Target, access: Access) -> Result<Resolved>;
    /// The threads of `pids` now.
    fn threads(&self, pids: &[u32]) -> usize;
    /// The open-file limit, raised to its hard limit; `None` if it cannot be had.
    fn fd_limit(&self) -> Option<u64>;
    /// Starts `argv` stopped at its exec.
    fn launch(&mut self, argv: &[String]) -> Result<Box<dyn Launch>>;

    /// The kernel symbol source the search picks for `symbols` (its files, the distribution's, the
    /// debuginfod cache, kallsyms).
    fn pick_symbols(&mut self, symbols: &SymbolRequest) -> Source;
    /// The running kernel's vmlinux from debuginfod instead of `picked`, for `why`; `picked` when none can
    /// be had without an error.
    fn fetch_vmlinux(
        &mut self,
        picked: Source,
        why: Fetch,
        symbols: &SymbolRequest,
    ) -> Result<Source>;
    /// The vmlinux or System.map `picked`, opened.
    fn open_symbol_files(
        &mut self,
        picked: &Source,
        symbols: &SymbolRequest,
    ) -> Result<FileSymbols>;
    /// The running kernel's kallsyms (through the symbol cache when `cache`).
    fn kallsyms(
        &mut self,
        symbols: &SymbolRequest,
        cache: bool,
    ) -> std::result::Result<(SymbolTable, Origin), ksymwatch_symbols::Error>;
    /// `btf` is the running kernel's, or a live watch must not place breakpoints by its offsets.
    fn check_btf_for_live_watch(&self, btf: &Path) -> Result<()>;
    /// Every CPU of `cpus`' per-CPU base, and how they were found.
    fn percpu_bases(
        &self,
        cpus: &[u32],
    ) -> std::result::Result<(BTreeMap<u32, u64>, Offsets), String>;
    /// tracefs's `events` directory, where mounted.
    fn tracefs_events(&self) -> Option<PathBuf>;
    /// A file of tracefs.
    fn read_tracefs(&self, path: &Path) -> io::Result<String>;
}
