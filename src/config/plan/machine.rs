//! The machine planning reads ([`Host`]), as this process sees it: BPF, privileges, CPUs, /proc, the
//! kernel's symbol files and BTF, tracefs. Launch mode's command is started by the function the command
//! line gives (the tracer's, under ptrace).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use ksymwatch_symbols::{Source, SourceSearch};

use super::host::{KernelFiles, KernelQuery, Task};
use super::{Host, Launch};
use crate::config::debuginfod;
use crate::config::process::{self, InProcess};
use crate::config::request::SymbolRequest;
use crate::config::symbols::{self, FileSymbols};
use crate::config::tracepoints;
use crate::cpulist;
use crate::error::Result;
use crate::host::cgroup::{Cgroup, CgroupError, Hierarchy};
use crate::model::target::Target;
use crate::perf::bpf::percpu::{self, Offsets};
use crate::perf::privilege::Privilege;
use crate::perf::{arm, bpf, sys};

/// Starts launch mode's command, stopped before its first instruction.
pub type Launcher = fn(&[String]) -> Result<Box<dyn Launch>>;

/// This machine. Keeps the symbol search made for the request, which a debuginfod fetch updates.
pub struct RealHost {
    search: Option<SourceSearch>,
    launcher: Launcher,
}

impl RealHost {
    pub fn new(launcher: Launcher) -> RealHost {
        RealHost {
            search: None,
            launcher,
        }
    }

    fn search(&mut self, symbols: &SymbolRequest) -> &mut SourceSearch {
        self.search
            .get_or_insert_with(|| symbols::search(symbols.files()))
    }
}

/// The task `pid` as `/proc/PID/status` names it, if it exists.
pub fn read_task(pid: u32) -> Option<Task> {
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

impl Host for RealHost {
    fn bpf(&self) -> io::Result<()> {
        bpf::probe()
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

    fn process_symbol(&self, pid: u32, target: &Target) -> Result<InProcess> {
        process::resolve(Path::new(process::PROC), pid, target)
    }

    fn threads(&self, pids: &[u32]) -> usize {
        arm::threads(pids).len()
    }

    fn fd_limit(&self) -> Option<u64> {
        sys::raise_fd_limit().ok()
    }

    fn launch(&mut self, argv: &[String]) -> Result<Box<dyn Launch>> {
        (self.launcher)(argv)
    }

    fn kernel_symbols(&mut self, query: &KernelQuery<'_>) -> Result<(Source, Result<KernelFiles>)> {
        let symbols = query.symbols;
        let search = self.search(symbols);
        let picked = search.pick();
        let picked = debuginfod::fetch_if_needed(search, picked, query.dwarf, symbols.debuginfod)?;
        // The file to open: the pick, or where kallsyms cannot place a data symbol (`jiffies`), the
        // running kernel's vmlinux from debuginfod where one can be had.
        let file = match &picked {
            Source::Kallsyms(_) if query.kallsyms_later => {
                return Ok((picked, Ok(KernelFiles::KallsymsLater)))
            }
            Source::Kallsyms(_) => {
                let read = symbols::watch_kallsyms(search, symbols.symbol_cache, query.user_only);
                let (table, origin) = match read {
                    Ok(read) => read,
                    Err(e) => return Ok((picked, Err(e))),
                };
                let missing = query
                    .data_symbols
                    .and_then(|b| debuginfod::missing_data_symbol(&table, b));
                let fetched = match missing {
                    None => None,
                    Some(name) => {
                        let opts = symbols.debuginfod;
                        match debuginfod::fetch_for_symbol(search, picked.clone(), &name, opts) {
                            Ok(Source::Kallsyms(_)) => None,
                            Ok(fetched) => Some(fetched),
                            Err(e) => return Ok((picked, Err(e))),
                        }
                    }
                };
                match fetched {
                    Some(vmlinux) => vmlinux,
                    None => return Ok((picked, Ok(KernelFiles::Kallsyms(table, origin)))),
                }
            }
            file => file.clone(),
        };
        let loaded = FileSymbols::open(file, search, symbols.force, symbols.symbol_cache)
            .map(|f| KernelFiles::Files(Box::new(f)));
        Ok((picked, loaded))
    }

    fn percpu_bases(
        &self,
        cpus: &[u32],
    ) -> std::result::Result<(BTreeMap<u32, u64>, Offsets), String> {
        let btf =
            ksymwatch_symbols::btf::Btf::open(Path::new(ksymwatch_symbols::btf::Btf::VMLINUX))
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
}
