//! `ksymwatch write|rw`: resolve the targets into a plan, with the work that overlaps the symbol loading
//! started first (`prefetch`), and hand the plan to [`execute`] (arm every CPU as one transaction, stream
//! hits until stopped), or with `--dry-run` describe it.

use crate::cli::args::WatchArgs;
use crate::cli::execute::execute;
use crate::cli::launch;
use crate::cli::prefetch::Prefetch;
use crate::cli::request;
use crate::config::plan::{self, RealHost};
use crate::error::Result;
use crate::model::watch::Access;

/// Exit status of the run: 0, or with `-- CMD` the command's own.
pub fn run(args: WatchArgs, access: Access) -> Result<i32> {
    let dry_run = args.dry_run;
    // clap gives an empty command for a bare trailing `--`, which is a missing command.
    let dashes = std::env::args_os().skip(1).any(|a| a == "--");
    let request = request::watch(args, access, dashes);
    let mut machine = RealHost::new(launch::start);
    let decided = plan::options::decide(request, &mut machine)?;
    // Started before the targets are resolved, to overlap with the symbol loading (see `prefetch`). A
    // dry run arms nothing.
    let prefetch = (!dry_run).then(|| Prefetch::start(&decided));
    let plan = plan::resolve(decided, &mut machine)?;
    match prefetch {
        Some(prefetch) => execute(plan, prefetch, &machine),
        None => {
            print!("{}", plan.describe());
            Ok(0)
        }
    }
}
