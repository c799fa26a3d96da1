//! `ksymwatch write|rw`: the arguments made a request, the work that overlaps the planning started from it
//! (`prefetch`), the request planned (`config::plan`), and the plan handed to [`execute`] (arm every CPU as one transaction, stream
//! hits until stopped), or with `--dry-run` describe it and ask the kernel whether it would take the
//! plan's kernel addresses ([`arm::dry_run`]).

use crate::cli::advice;
use crate::cli::args::WatchArgs;
use crate::cli::execute::execute;
use crate::cli::launch;
use crate::cli::prefetch::Prefetch;
use crate::cli::request;
use crate::config::plan::{Delivery, RealHost, Scope, WatchPlan};
use crate::config::{self};
use crate::error::Result;
use crate::model::watch::Access;
use crate::perf::arm;
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
            // Asked of the kernel as arming would open the events: one per CPU on the hit program's path.
            let hits = plan.delivery() == Delivery::HitProgram;
            let targets = arm::targets_of(&plan.scope().arming(), hits);
            match arm::dry_run(plan.watches(), &plan.cpus().now, targets) {
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
