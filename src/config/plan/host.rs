//! The machine as planning sees it: what [`mod@crate::config::plan`] asks of it (BPF, privileges, CPUs,
//! /proc, the kernel's symbol files, per-CPU bases, tracefs, cgroups), and the one thing it does to it
//! (start a command). The command line gives the real machine (`cli`); the unit tests a made-up one, so
//! the planning decisions are tested without a kernel. (The BTF types are the host's, the real machine's
//! read on first use; `--on`'s user-space probes still read their files themselves.)

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use crate::config::kernel_source::{KernelLoad, KernelQuery};
use crate::config::process::InProcess;
use crate::config::typed::Types;
use crate::error::Result;
use crate::host::cgroup::{Cgroup, CgroupError};
use crate::model::target::Target;
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
    /// Whether a hit program can tell which of a thread's events fired (`perf::bpf::repeats`): the
    /// per-thread path's program needs it to report a store once.
    fn firing_event(&self) -> bool;
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
    /// When process `pid` started (clock ticks after boot: with the pid, which process it is), if it
    /// exists.
    fn start_time(&self, pid: u32) -> Option<u64>;
    /// Symbol `target` looked up in process `pid`'s own binaries (its maps, their symbol tables and
    /// DWARF).
    fn process_symbol(&self, pid: u32, target: &Target) -> Result<InProcess>;
    /// The threads of `pids` now.
    fn threads(&self, pids: &[u32]) -> usize;
    /// Every thread of `pids` now, with its name, process by process in tid order (none for a process
    /// that is gone).
    fn named_threads(&self, pids: &[u32]) -> Vec<(u32, String)>;
    /// The open-file limit, raised to its hard limit; `None` if it cannot be had.
    fn fd_limit(&self) -> Option<u64>;
    /// Starts `argv` stopped at its exec.
    fn launch(&mut self, argv: &[OsString]) -> Result<Box<dyn Launch>>;

    /// The kernel's symbols the query asks for, as the symbols crate chooses and loads them in one go
    /// (the real machine's are [`crate::config::kernel_source::load`]'s): the source the search picks
    /// for the request's files (its files, the distribution's, the debuginfod cache, kallsyms; the
    /// running kernel's vmlinux from debuginfod where the query's needs say), and that source loaded,
    /// the running kernel's kallsyms read at most once (through the symbol cache where the request
    /// allows it), unless it is left to first use; and what debuginfod delivered on the way. A vmlinux
    /// that DWARF needs and that cannot be had fails the call; a source that cannot be loaded is
    /// [`KernelLoad::loaded`]'s error.
    fn kernel_symbols(&mut self, query: &KernelQuery<'_>) -> Result<KernelLoad>;
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
    /// The kernel's BTF types at `btf` (`--btf`, the running kernel's by default), and what that file is;
    /// the real machine's are read on first use, so a run that names no type never reads them.
    fn types(&self, btf: &Path) -> Types;
}
