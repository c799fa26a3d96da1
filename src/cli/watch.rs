//! `ksymwatch write|rw`: the arguments made a request, the work that overlaps the planning started from it
//! (`prefetch`), the request planned (`config::plan`), and the plan handed to [`execute`] (arm every CPU as one transaction, stream
//! hits until stopped), or with `--dry-run` describe it and ask the kernel whether it would take the
//! plan's kernel addresses ([`kernel_refusal`]).

use std::io;

use crate::cli::advice;
use crate::cli::args::WatchArgs;
use crate::cli::execute::execute;
use crate::cli::launch;
use crate::cli::prefetch::Prefetch;
use crate::cli::request;
use crate::config::plan::{RealHost, Scope, WatchPlan};
use crate::config::{self};
use crate::error::Result;
use crate::model::watch::{Access, Watch};
use crate::perf::denial::AddressKind;
use crate::perf::event::OpenError;
use crate::perf::{probe, refusal};
use crate::stderr;

/// Exit status of the run: 0, or with `-- CMD` the command's own.
pub fn run(args: WatchArgs, access: Access) -> Result<i32> {
    let dry_run = args.dry_run;
    // clap gives an empty command for a bare trailing `--`, which is a missing command.
    let dashes = std::env::args_os().skip(1).any(|a| a == "--");
    let request = request::watch(args, access, dashes);
    // Started from the request, to overlap with the planning and its symbol loading (see `prefetch`). A
    // dry run arms nothing.
    let prefetch = (!dry_run).then(|| Prefetch::start(&request));
    let plan = config::plan(request, &mut RealHost::new(launch::start))?;
    if let Some(line) = unmatched_filter(&plan) {
        stderr::line(format_args!("ksymwatch: note: {line}"));
    }
    match prefetch {
        Some(prefetch) => execute(plan, prefetch),
        None => {
            print!("{}", plan.describe());
            match kernel_refusal(&plan) {
                Some(refused) => Err(advice::arming(refused)),
                None => Ok(0),
            }
        }
    }
}

/// The line that says the `--tid`/`--comm` conditions match no thread of the watched processes now
/// ([`crate::model::filter::Filter::admits_no_thread`]); `None` when one does, or the watch is not of
/// running processes: system-wide, tasks come and go by the thousand and a `--comm` usually names one to
/// come; a launched command has run nothing yet, so its threads and their names are all to come.
fn unmatched_filter(plan: &WatchPlan) -> Option<String> {
    let Scope::Processes(pids) = plan.scope() else {
        return None;
    };
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    let noun = if pids.len() == 1 {
        "process"
    } else {
        "processes"
    };
    let whose = format!("{noun} {}", list.join(", "));
    let threads: Vec<(u32, String)> = pids.iter().flat_map(|&pid| threads_of(pid)).collect();
    plan.filter().admits_no_thread(&threads, &whose)
}

/// Every thread of process `pid` now, with its name, from /proc (none when it is gone).
fn threads_of(pid: u32) -> Vec<(u32, String)> {
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

/// What the run would be told at arming about the plan's kernel addresses, asked of the kernel as the run
/// would meet it: a refusal of a kernel-space breakpoint is a kernel's policy as much as a privilege
/// (some refuse every one even to root with CAP_SYS_ADMIN), which nothing but an open can tell. One probe
/// per kernel address ([`probe::probe`]: a disabled breakpoint on the plan's first CPU, closed at once,
/// never enabled, so nothing is armed), worded as the run's refusal is ([`refusal::explain`]), exit code
/// and all. User addresses are not probed: whether this process may watch them is the plan's to say from
/// its privileges (a probe's CPU-wide event would not be a process watch's), and it has said it.
fn kernel_refusal(plan: &WatchPlan) -> Option<refusal::Refusal> {
    let cpu = *plan.cpus().now.first()?;
    let mut asked = Vec::new();
    for w in plan.watches() {
        if AddressKind::of(w.addr, w.len) != AddressKind::Kernel || asked.contains(&w.addr) {
            continue;
        }
        asked.push(w.addr);
        if let Err(e) = probe::probe(probe_address(w), cpu) {
            if let Some(e) = persistent(e, w) {
                return Some(refusal::explain(&e, plan.watches()).nothing_armed());
            }
        }
    }
    None
}

/// The probe's address for `w`: its 8-byte word (a probe is 8 bytes, naturally aligned). A kernel address
/// stays one: the kernel half starts at a page boundary.
fn probe_address(w: &Watch) -> u64 {
    w.addr & !7
}

/// A probe's refusal `e` of watch `w`'s address, as the run would meet it, when it says what the run would
/// be told whenever it ran: a refusal of permission, or of the breakpoint itself. What only says how the
/// machine is now (every debug register taken, a CPU going offline, the PMU busy, no descriptor left) is
/// `None`: it is not the plan's, and the run may well not meet it.
fn persistent(e: OpenError, w: &Watch) -> Option<OpenError> {
    let errno = e.err.raw_os_error().unwrap_or(0);
    let passing = [
        libc::ENOSPC,
        libc::ENODEV,
        libc::EBUSY,
        libc::EMFILE,
        libc::ENFILE,
        libc::EINTR,
    ];
    (!passing.contains(&errno)).then(|| OpenError {
        // The refusal names the watch's own address, as the run's does.
        bp: Some((w.addr, w.len)),
        err: io::Error::from_raw_os_error(errno),
        ..e
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ExitCode;
    use crate::perf::event::{Bind, Stage};
    use crate::perf::privilege::Privilege;
    use crate::perf::refusal::{explain_as, Facts};

    fn watch(addr: u64, len: u8) -> Watch {
        Watch {
            label: "__start_init_stack+0x3e01".into(),
            addr,
            len,
            access: Access::Write,
            module: None,
            per_cpu: None,
        }
    }

    fn probed(errno: i32, addr: u64) -> OpenError {
        OpenError::new(
            0,
            Bind::Cpu,
            Stage::Open,
            io::Error::from_raw_os_error(errno),
        )
        .at(addr, 8)
    }

    /// A probe of a 1-byte watch asks for its aligned word; the refusal names the watch's own address,
    /// and is worded, coded and kinded as the run's refusal of that watch.
    #[test]
    fn a_refused_probe_reads_as_the_runs_refusal() {
        let w = watch(0xffff_ffff_82e0_3e01, 1);
        assert_eq!(probe_address(&w), 0xffff_ffff_82e0_3e00);
        assert_eq!(AddressKind::of(probe_address(&w), 8), AddressKind::Kernel);
        let e = persistent(probed(libc::EPERM, probe_address(&w)), &w).expect("a refusal");
        let facts = Facts {
            creds: Privilege::ROOT,
            free_registers: None,
        };
        let run = OpenError::new(
            0,
            Bind::Cpu,
            Stage::Open,
            io::Error::from_raw_os_error(libc::EPERM),
        )
        .at(w.addr, w.len);
        let dry = explain_as(&e, std::slice::from_ref(&w), facts).nothing_armed();
        let real = explain_as(&run, std::slice::from_ref(&w), facts).nothing_armed();
        assert_eq!(dry, real);
        assert_eq!(dry.code, ExitCode::NotPermitted);
        assert_eq!(dry.kind.as_str(), "kernel_breakpoints_refused");
        assert!(dry.what.contains("0xffffffff82e03e01 got"), "{}", dry.what);
    }

    /// Only what the run would be told whenever it ran ends a dry run: the debug registers in use now, a
    /// CPU going offline, a busy PMU or the descriptors do not.
    #[test]
    fn only_a_lasting_refusal_ends_a_dry_run() {
        let w = watch(0xffff_ffff_82e0_3e00, 8);
        for errno in [libc::EPERM, libc::EACCES, libc::EINVAL, libc::ENOENT] {
            assert!(persistent(probed(errno, w.addr), &w).is_some(), "{errno}");
        }
        for errno in [libc::ENOSPC, libc::ENODEV, libc::EBUSY, libc::EMFILE] {
            assert!(persistent(probed(errno, w.addr), &w).is_none(), "{errno}");
        }
    }
}
