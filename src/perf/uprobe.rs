//! The kernel's `uprobe` PMU as a typed event: a probe at a file offset (a function's entry, or its return
//! with the retprobe bit), for one process or for every process on each CPU.
//!
//! The PMU is described in sysfs: its perf type in `/sys/bus/event_source/devices/uprobe/type`, and the bit
//! of `config` that makes a probe a return probe in `format/retprobe` (`config:0`). The file goes in
//! `config1` as a pointer to its NUL-terminated path, which the kernel copies and resolves to an inode while
//! the event is opened; the offset in the file (from [`ksymwatch_symbols::uprobe`]) goes in `config2`. The
//! probe is on the inode, so it fires in whichever process runs that code, now or later; the events' tasks
//! and CPUs decide whose hits they see (one process: an event on each of its threads).
//!
//! Events open disabled and count; a caller that wants each hit attaches a BPF program to the descriptors
//! (`PERF_EVENT_IOC_SET_BPF`, as for a tracepoint event) before enabling them. Everything is returned as
//! owned descriptors and `io::Error`s; the system calls are `perf::sys`'s.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use perf_event_open_sys::bindings as pb;

use crate::perf::sys;

/// Where the kernel describes the PMU.
pub const SYSFS: &str = "/sys/bus/event_source/devices/uprobe";

/// The `uprobe` PMU of the running kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pmu {
    /// `perf_event_attr.type` of its events.
    pub type_: u32,
    /// The `config` bit that makes a probe a return probe.
    pub retprobe_bit: u32,
}

impl Pmu {
    /// Reads the PMU from sysfs; an error that says the kernel has no uprobes where the directory is
    /// missing (CONFIG_UPROBE_EVENTS off).
    pub fn read() -> io::Result<Pmu> {
        Pmu::read_from(Path::new(SYSFS))
    }

    /// [`Pmu::read`] from another directory (tests).
    pub fn read_from(dir: &Path) -> io::Result<Pmu> {
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name)).map_err(|e| {
                let why = if e.kind() == io::ErrorKind::NotFound {
                    "this kernel has no uprobe PMU (CONFIG_UPROBE_EVENTS)"
                } else {
                    "cannot read the uprobe PMU's description"
                };
                io::Error::new(
                    e.kind(),
                    format!("{why}: {}: {e}", dir.join(name).display()),
                )
            })
        };
        let bad = |what: &str, text: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the uprobe PMU's {what} is `{}`", text.trim()),
            )
        };
        let type_text = read("type")?;
        let type_ = type_text
            .trim()
            .parse()
            .map_err(|_| bad("type", &type_text))?;
        let format = read("format/retprobe")?;
        let retprobe_bit = config_bit(&format).ok_or_else(|| bad("format/retprobe", &format))?;
        Ok(Pmu {
            type_,
            retprobe_bit,
        })
    }

    /// The attributes of a counting probe at `offset` of the file whose path `path` points to (kept alive
    /// by the caller until the event is open), disabled.
    fn attr(&self, path: &CString, offset: u64, probe: Probe) -> pb::perf_event_attr {
        let mut a = pb::perf_event_attr {
            type_: self.type_,
            size: std::mem::size_of::<pb::perf_event_attr>() as u32,
            ..Default::default()
        };
        if probe == Probe::Return {
            a.config = 1 << self.retprobe_bit;
        }
        a.uprobe_path = path.as_ptr() as u64;
        a.probe_offset = offset;
        a.set_disabled(1);
        // Threads and children the process starts later are probed too (a task-bound event otherwise
        // follows only the task it was opened on).
        a.set_inherit(1);
        a
    }
}

/// The threads of process `pid` now, from `/proc/PID/task` under `proc_root`: just `pid` when that cannot
/// be listed (the open then says why, if the process is gone).
fn threads(proc_root: &Path, pid: u32) -> io::Result<Vec<i32>> {
    let as_i32 = |id: u32| {
        i32::try_from(id)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("pid {id}")))
    };
    let Ok(dir) = std::fs::read_dir(proc_root.join(format!("{pid}/task"))) else {
        return Ok(vec![as_i32(pid)?]);
    };
    let mut tids: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .map(as_i32)
        .collect::<io::Result<_>>()?;
    tids.sort_unstable();
    if tids.is_empty() {
        tids.push(as_i32(pid)?);
    }
    Ok(tids)
}

/// `config:N`, a one-bit field of a PMU format file: N.
fn config_bit(text: &str) -> Option<u32> {
    let bit = text.trim().strip_prefix("config:")?;
    bit.parse().ok().filter(|&b| b < 64)
}

/// A probe's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// At the function's entry: the arguments are in their registers.
    Entry,
    /// At its return: the return value is in its register.
    Return,
}

/// Whose hits an event sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One process: an event on each of its threads, each inherited by the threads and children that
    /// thread starts later. (A task-bound event counts only while its own task runs: the probe fires in
    /// every thread of the process, but a sibling thread's hits would go to no event.)
    Process(u32),
    /// Every process, one event on each of these CPUs.
    Cpus(Vec<u32>),
    /// One event on this task, not inherited. The kernel places the probe in the task's memory and an
    /// attached program runs at every hit of any thread sharing it (the probe's filter is the memory,
    /// not the task), exactly once: one event, one program. (Its count is the task's own hits.)
    Task(u32),
}

/// One uprobe, as one event per CPU or one for a process; closed when dropped.
#[derive(Debug)]
pub struct Uprobe {
    fds: Vec<OwnedFd>,
}

impl Uprobe {
    /// Opens a probe of kind `probe` at `offset` in the file at `path`, seen as `scope` says, disabled.
    /// All or nothing: a refusal on one CPU closes those already open.
    pub fn open(
        pmu: &Pmu,
        path: &Path,
        offset: u64,
        probe: Probe,
        scope: &Scope,
    ) -> io::Result<Uprobe> {
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: a path with a NUL byte", path.display()),
            )
        })?;
        // `c_path` outlives every open below: the kernel copies the string during the call.
        let mut attr = pmu.attr(&c_path, offset, probe);
        if let Scope::Task(_) = scope {
            attr.set_inherit(0);
        }
        let targets: Vec<(i32, i32)> = match scope {
            Scope::Process(pid) => threads(Path::new("/proc"), *pid)?
                .into_iter()
                .map(|tid| (tid, -1))
                .collect(),
            Scope::Cpus(cpus) => cpus.iter().map(|&c| (-1, c as i32)).collect(),
            Scope::Task(tid) => vec![(
                i32::try_from(*tid).map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("pid {tid}"))
                })?,
                -1,
            )],
        };
        let fds = targets
            .into_iter()
            .map(|(pid, cpu)| sys::perf_event_open(&attr, pid, cpu))
            .collect::<io::Result<Vec<OwnedFd>>>()?;
        Ok(Uprobe { fds })
    }

    /// Starts counting (and running any attached program) on every descriptor.
    pub fn enable(&self) -> io::Result<()> {
        self.fds
            .iter()
            .try_for_each(|fd| sys::perf_enable(fd.as_fd()))
    }

    /// Stops it on every descriptor.
    pub fn disable(&self) -> io::Result<()> {
        self.fds
            .iter()
            .try_for_each(|fd| sys::perf_disable(fd.as_fd()))
    }

    /// The hits counted so far, summed over the descriptors (a process's count includes its exited
    /// children's and threads').
    pub fn count(&self) -> io::Result<u64> {
        let mut total = 0u64;
        for fd in &self.fds {
            let mut buf = [0u64; 1];
            let n = sys::perf_read(fd.as_fd(), &mut buf)?;
            if n != std::mem::size_of_val(&buf) {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("a uprobe event's count read {n} bytes"),
                ));
            }
            total = total.saturating_add(buf[0]);
        }
        Ok(total)
    }

    /// The descriptors, for attaching a program or polling.
    pub fn fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.fds.iter().map(|fd| fd.as_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_bits_parse() {
        assert_eq!(config_bit("config:0\n"), Some(0));
        assert_eq!(config_bit("config:5"), Some(5));
        assert_eq!(config_bit("config:32-63\n"), None);
        assert_eq!(config_bit("config1:0"), None);
        assert_eq!(config_bit("config:64"), None);
    }

    /// A PMU directory laid out as sysfs has it; a missing one says the kernel has no uprobes, a
    /// malformed one quotes what it holds.
    #[test]
    fn the_pmu_is_read_from_its_sysfs_directory() {
        let dir = std::env::temp_dir().join(format!("ksymwatch-uprobe-pmu-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("format")).unwrap();
        std::fs::write(dir.join("type"), "8\n").unwrap();
        std::fs::write(dir.join("format/retprobe"), "config:0\n").unwrap();
        assert_eq!(
            Pmu::read_from(&dir).unwrap(),
            Pmu {
                type_: 8,
                retprobe_bit: 0
            }
        );
        std::fs::write(dir.join("type"), "eight\n").unwrap();
        let e = Pmu::read_from(&dir).unwrap_err().to_string();
        assert!(e.contains("`eight`"), "{e}");
        let e = Pmu::read_from(&dir.join("nope")).unwrap_err().to_string();
        assert!(e.contains("no uprobe PMU"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A process's threads come from its task directory; without one, the pid alone.
    #[test]
    fn a_process_scope_is_each_of_its_threads() {
        let root =
            std::env::temp_dir().join(format!("ksymwatch-uprobe-tasks-{}", std::process::id()));
        for tid in [42, 44, 43] {
            std::fs::create_dir_all(root.join(format!("42/task/{tid}"))).unwrap();
        }
        assert_eq!(threads(&root, 42).unwrap(), [42, 43, 44]);
        assert_eq!(threads(&root, 7).unwrap(), [7]);
        assert!(threads(&root, u32::MAX).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn return_probes_set_the_retprobe_bit_and_the_file_and_offset() {
        let pmu = Pmu {
            type_: 8,
            retprobe_bit: 3,
        };
        let path = CString::new("/usr/bin/app").unwrap();
        let entry = pmu.attr(&path, 0x1040, Probe::Entry);
        let ret = pmu.attr(&path, 0x1040, Probe::Return);
        assert_eq!((entry.type_, entry.config, ret.config), (8, 0, 1 << 3));
        assert_eq!(ret.uprobe_path, path.as_ptr() as u64);
        assert_eq!(ret.probe_offset, 0x1040);
        assert_eq!((ret.disabled(), ret.inherit()), (1, 1));
    }
}
