//! `ksymwatch write|rw`: resolve the targets into a plan, with the work that overlaps the symbol loading
//! started first, and hand the plan to [`execute`] (arm every CPU as one transaction, stream hits until
//! stopped), or with `--dry-run` describe it.

use std::path::Path;

use ksymwatch_symbols::UserSymbols;

use crate::cli::args::WatchArgs;
use crate::cli::execute::{execute, TaskScan};
use crate::cli::launch;
use crate::cli::request;
use crate::config::plan::options::Decided;
use crate::config::plan::{self, Delivery, RealHost, Scope};
use crate::cpulist;
use crate::error::Result;
use crate::model::watch::Access;
use crate::perf::warmup::Warmup;
use crate::trace::comm::Comms;

/// Exit status of the run: 0, or with `-- CMD` the command's own.
pub fn run(args: WatchArgs, access: Access) -> Result<i32> {
    let dry_run = args.dry_run;
    // clap gives an empty command for a bare trailing `--`, which is a missing command.
    let dashes = std::env::args_os().skip(1).any(|a| a == "--");
    let request = request::watch(args, access, dashes);
    let mut machine = RealHost::new(launch::start);
    let decided = plan::options::decide(request, &mut machine)?;
    // Started before the targets are resolved, to overlap with the symbol loading: every live task's
    // name and process's maps (a writer already running that exits right after its hits must have had
    // them read, and a read after `armed` would race with a script that starts it on that line), and the
    // first CPU-bound breakpoint open, which waits out an RCU grace period. A dry run arms nothing.
    let prefetch = (!dry_run).then(|| Prefetch::start(&decided));
    let plan = plan::resolve(decided, &mut machine)?;
    match prefetch {
        Some(Prefetch { task_scan, warmup }) => execute(plan, (task_scan, warmup), &machine),
        None => {
            print!("{}", plan.describe());
            Ok(0)
        }
    }
}

/// Work started before the plan so that it overlaps the symbol loading.
struct Prefetch {
    task_scan: Option<TaskScan>,
    warmup: Option<Warmup>,
}

impl Prefetch {
    fn start(decided: &Decided) -> Prefetch {
        // On the hit path every hit record carries its writer's name: reading every task's name (a second
        // for a process of 100,000 threads) is for perf samples only.
        let names = decided.delivery() != Delivery::HitProgram;
        // Whose names and maps the hits can need: any process's for a system-wide watch; a process
        // watch's hits come from its own processes (and the children they fork, which the kernel's
        // records bring), so reading every other process (a few ms per hundred) only delays the first
        // hit; a launched command does not exist yet (it is read at its exec stop).
        let writers = match decided.scope() {
            Scope::System => None,
            Scope::Processes(pids) => Some(pids.clone()),
            Scope::Launched(_) => Some(Vec::new()),
        };
        let task_scan = std::thread::Builder::new()
            .name("ksymwatch-tasks".into())
            .spawn(move || {
                if !names {
                    // The hit program's load asks where the kernel keeps a task's name (its BTF,
                    // 1-2 ms to open): answered here, it is not on the way to arming.
                    let _ = crate::perf::bpf::task::comm_offset();
                }
                let (mut comms, mut user) = (Comms::default(), UserSymbols::default());
                match &writers {
                    None => {
                        if names {
                            comms.scan_all();
                        }
                        user.scan_all();
                    }
                    Some(pids) => {
                        for &pid in pids {
                            if names {
                                comms.scan_process(pid);
                            }
                            user.read_process(pid);
                        }
                    }
                }
                (comms, user)
            })
            .ok();
        // A system-wide watch was decided only where this process may open system-wide events.
        let warmup = decided
            .scope()
            .system_wide()
            .then(|| cpulist::read(Path::new(cpulist::ONLINE)).ok())
            .flatten()
            .and_then(|cpus| cpus.first().copied())
            .map(Warmup::start);
        Prefetch { task_scan, warmup }
    }
}
