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
use crate::host::cgroup::{Cgroup, CgroupError};
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
    /// Exited and not reaped by its parent (state `Z` with no thread left running): nothing to watch.
    pub zombie: bool,
}

/// The kernel's symbols as [`Host::kernel_symbols`] loaded them.
pub enum KernelFiles {
    /// A vmlinux or System.map, opened.
    Files(Box<FileSymbols>),
    /// The running kernel's kallsyms, and whether it came from the cache.
    Kallsyms(SymbolTable, Origin),
}

/// What a watch needs of the kernel's symbol source ([`Host::symbol_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceNeeds {
    /// A struct member, an array element or `--lines` needs DWARF.
    pub dwarf: bool,
    /// A live watch placed by BTF offsets (a cast, a member path, `--control`) needs the running
    /// kernel's BTF: another kernel's offsets would put it on the wrong bytes.
    pub live_offsets: bool,
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
    /// Each of `targets` resolved in process `pid`'s own address space (an address as it is).
    fn resolve_in_process(
        &self,
        pid: u32,
        targets: &[Target],
        access: Access,
    ) -> Result<Vec<Resolved>>;
    /// The threads of `pids` now.
    fn threads(&self, pids: &[u32]) -> usize;
    /// The open-file limit, raised to its hard limit; `None` if it cannot be had.
    fn fd_limit(&self) -> Option<u64>;
    /// Starts `argv` stopped at its exec.
    fn launch(&mut self, argv: &[String]) -> Result<Box<dyn Launch>>;

    /// The kernel symbol source the search picks for `symbols` (its files, the distribution's, the
    /// debuginfod cache, kallsyms), checked for what `needs` says the watch needs of it: with `dwarf`, the
    /// running kernel's vmlinux from debuginfod instead where the pick is no vmlinux and one can be had;
    /// with `live_offsets`, `--btf` must be the running kernel's.
    fn symbol_source(&mut self, symbols: &SymbolRequest, needs: SourceNeeds) -> Result<Source>;
    /// The kernel's symbols from `picked`, loaded: its vmlinux or System.map opened, or the running
    /// kernel's kallsyms read (through the symbol cache where `symbols` allows it; with `user_only`, a
    /// table whose addresses this user may not see is an empty one, since no kernel frame is recorded).
    /// A kallsyms that lacks one of `data_symbols` (a system-wide watch's bases) is replaced by the
    /// running kernel's vmlinux from debuginfod where one can be had.
    fn kernel_symbols(
        &mut self,
        picked: Source,
        symbols: &SymbolRequest,
        data_symbols: Option<&[Target]>,
        user_only: bool,
    ) -> Result<KernelFiles>;
    /// Every CPU of `cpus`' per-CPU base, and how they were found.
    fn percpu_bases(
        &self,
        cpus: &[u32],
    ) -> std::result::Result<(BTreeMap<u32, u64>, Offsets), String>;
    /// tracefs's `events` directory, where mounted.
    fn tracefs_events(&self) -> Option<PathBuf>;
    /// A file of tracefs.
    fn read_tracefs(&self, path: &Path) -> io::Result<String>;
    /// The cgroup v2 cgroup `--cgroup ARG` names.
    fn cgroup(&self, arg: &str) -> std::result::Result<Cgroup, CgroupError>;
}
