//! `ksymwatch write|rw`: the arguments made a request; its scope and delivery decided
//! (`config::plan::decide`) and the work that overlaps the planning started from them (`prefetch`); the
//! request planned (`config::plan`), and the plan handed to [`execute`] (arm every CPU as one
//! transaction, stream hits until stopped), or with `--dry-run` describe it and ask the kernel whether
//! it would take the plan's kernel addresses ([`arm::dry_run`]).

use crate::cli::advice;
use crate::cli::args::WatchArgs;
use crate::cli::execute::execute;
use crate::cli::launch;
use crate::cli::prefetch::Prefetch;
use crate::cli::request;
use crate::config::plan::{decide, RealHost};
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
    // Who the watch covers and how its hits come, decided once: the prefetch starts from them, to
    // overlap with the planning and its symbol loading (see `prefetch`), and the plan takes them. A dry
    // run arms nothing.
    let mut host = RealHost::new(launch::start);
    let decided = decide(&request, &host)?;
    let prefetch = (!dry_run).then(|| Prefetch::start(&decided));
    let planned = config::plan(request, decided, &mut host);
    // What planning had to say, in its order, also before the error of a plan refused.
    for line in &planned.notes {
        stderr::line(format_args!("{line}"));
    }
    let plan = planned.plan?;
    match prefetch {
        Some(prefetch) => execute(plan, prefetch),
        None => {
            print!("{}", plan.describe());
            // Asked of the kernel with the events bound as arming would bind them.
            let binding = plan.delivery().events;
            let scope = plan.scope().arming();
            match arm::dry_run(plan.watches(), &plan.cpus().now, &scope, binding) {
                Some(refused) => Err(advice::arming(refused)),
                None => Ok(0),
            }
        }
    }
}
