//! The machine planning reads ([`Host`]), as this process sees it: BPF, privileges, CPUs, /proc, the
//! kernel's symbol files and BTF, tracefs. Launch mode's command is started by the function the command
//! line gives (the tracer's, under ptrace).
//!
//! One of its /proc readers serves beyond planning: a process's start time ([`read_start_time`]: with
//! its pid, which process it is; planned for each `-p` process, [`super::Started`], and read again by the
//! session once the watch is armed, `crate::trace::watched`).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use super::host::Task;
use super::{Host, Launch};
use crate::config::kernel_source::{self, KernelLoad, KernelQuery};
use crate::config::process::{self, InProcess};
use crate::config::tracepoints;
use crate::config::typed::Types;
use crate::cpulist;
use crate::error::Result;
use crate::host::cgroup::{Cgroup, CgroupError, Hierarchy};
use crate::model::target::Target;
use crate::perf::bpf::percpu::{self, Offsets};
use crate::perf::privilege::Privilege;
use crate::perf::{arm, bpf, sys};

/// Starts launch mode's command, stopped before its first instruction.
pub type Launcher = fn(&[OsString]) -> Result<Box<dyn Launch>>;

/// This machine.
pub struct RealHost {
    launcher: Launcher,
}

impl RealHost {
    pub fn new(launcher: Launcher) -> RealHost {
        RealHost { launcher }
    }
}

/// The task `pid` as `/proc/PID/status` names it, if it exists.
fn read_task(pid: u32) -> Option<Task> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_string())
    };
    Some(Task {
        tgid: field("Tgid:")
            .and_then(|t| t.parse::<u32>().ok())
            .unwrap_or(pid),
        name: field("Name:").unwrap_or_else(|| "?".into()),
        // A leader that exited while its other threads run is `Z` too, with `Threads` above 1.
        zombie: field("State:").is_some_and(|s| s.starts_with('Z'))
            && field("Threads:").is_none_or(|t| t == "1"),
    })
}

/// When process `pid` started, from `/proc/PID/stat`: `ENOENT` (or `ESRCH`) when it is gone,
/// `InvalidData` when the file does not read as a stat line.
pub fn read_start_time(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat: no start time in it"),
        )
    })
}

/// The start time (field 22, `starttime`, clock ticks after boot) of a `/proc/PID/stat` line. The name
/// (field 2) is in parentheses and may hold spaces and parentheses of its own: the fields after it are
/// counted from the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    // Field 3 (the state) is the first after the name.
    after_name.split_whitespace().nth(22 - 3)?.parse().ok()
}

impl Host for RealHost {
    fn bpf(&self) -> io::Result<()> {
        bpf::probe()
    }

    fn firing_event(&self) -> bool {
        bpf::repeats::find().is_some()
    }

    fn privilege(&self) -> Privilege {
        Privilege::current()
    }

    fn online_cpus(&self) -> io::Result<BTreeSet<u32>> {
        cpulist::read(Path::new(cpulist::ONLINE))
    }

    fn possible_cpus(&self) -> Option<BTreeSet<u32>> {
        cpulist::read(Path::new(cpulist::POSSIBLE)).ok()
    }

    fn task(&self, pid: u32) -> Option<Task> {
        read_task(pid)
    }

    fn process_exists(&self, pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
    }

    fn start_time(&self, pid: u32) -> Option<u64> {
        read_start_time(pid).ok()
    }

    fn process_symbol(&self, pid: u32, target: &Target) -> Result<InProcess> {
        process::resolve(Path::new(process::PROC), pid, target)
    }

    fn threads(&self, pids: &[u32]) -> usize {
        arm::threads(pids).len()
    }

    fn named_threads(&self, pids: &[u32]) -> Vec<(u32, String)> {
        pids.iter().flat_map(|&pid| named_threads(pid)).collect()
    }

    fn fd_limit(&self) -> Option<u64> {
        sys::raise_fd_limit().ok()
    }

    fn launch(&mut self, argv: &[OsString]) -> Result<Box<dyn Launch>> {
        (self.launcher)(argv)
    }

    fn kernel_symbols(&mut self, query: &KernelQuery<'_>) -> Result<KernelLoad> {
        kernel_source::load(query)
    }

    fn percpu_bases(
        &self,
        cpus: &[u32],
    ) -> std::result::Result<(BTreeMap<u32, u64>, Offsets), String> {
        let btf = ksymwatch_symbols::btf::Btf::running()
            .map_err(|e| format!("the running kernel's BTF: {e}"))?;
        let at = Offsets::from_btf(&btf)?;
        Ok((percpu::bases(cpus, at).map_err(|e| e.to_string())?, at))
    }

    fn tracefs_events(&self) -> Option<PathBuf> {
        tracepoints::tracefs_events()
    }

    fn read_tracefs(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn cgroup(&self, arg: &str) -> std::result::Result<Cgroup, CgroupError> {
        Hierarchy::find()?.resolve(arg)
    }

    fn types(&self, btf: &Path) -> Types {
        Types::new(btf)
    }
}

/// Every thread of process `pid` now, with its name, in tid order, from /proc (none when it is gone).
fn named_threads(pid: u32) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut threads: Vec<(u32, String)> = dir
        .flatten()
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse::<u32>().ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            Some((tid, comm.trim_end_matches('\n').to_string()))
        })
        .collect();
    threads.sort();
    threads
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line whose name is `comm`, started at `start`.
    fn stat(comm: &str, start: u64) -> String {
        format!(
            "4242 ({comm}) S 1 4242 4242 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 {start} 2461696 234 \
             18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
        )
    }

    #[test]
    fn the_start_time_is_field_22() {
        assert_eq!(parse_start_time(&stat("app", 98765)), Some(98765));
    }

    /// A name may hold spaces and parentheses, a `)` followed by what looks like fields among them.
    #[test]
    fn the_fields_are_counted_from_the_names_last_parenthesis() {
        let fields = ") 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21";
        for comm in ["a b", "x) S 1 2 3", "(", ")", fields] {
            assert_eq!(parse_start_time(&stat(comm, 7)), Some(7), "name {comm:?}");
        }
    }

    #[test]
    fn a_line_without_its_fields_has_no_start_time() {
        assert_eq!(parse_start_time(""), None);
        assert_eq!(parse_start_time("4242 (app S 1 2"), None);
        assert_eq!(parse_start_time("4242 (app) S 1 2 3"), None);
        let unreadable = stat("app", 0).replace(" 0 2461696", " x 2461696");
        assert_eq!(parse_start_time(&unreadable), None);
    }

    /// This process's own start time reads, and a pid that names no process is `ENOENT`.
    #[test]
    fn a_running_process_has_a_start_time_and_a_gone_one_none() {
        assert!(read_start_time(std::process::id()).is_ok());
        let gone = read_start_time(u32::MAX).expect_err("no such pid");
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
    }
}
