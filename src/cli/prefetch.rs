//! Work a watch starts once its options are decided, before its targets are resolved, so that it overlaps
//! the symbol loading: every live task's name and process's maps that the hits can need (a writer already
//! running that exits right after its hits must have had them read, and a read after `armed` would race
//! with a script that starts it on that line), and the first CPU-bound breakpoint open, which waits out an
//! RCU grace period. `watch` starts it from the decided options; `execute` takes its results when it arms.

use std::path::Path;

use ksymwatch_symbols::UserSymbols;

use crate::config::plan::options::Decided;
use crate::config::plan::Scope;
use crate::cpulist;
use crate::perf::warmup::Warmup;
use crate::trace::comm::Comms;

/// Work started before the plan so that it overlaps the symbol loading.
pub(super) struct Prefetch {
    pub(super) task_scan: Option<std::thread::JoinHandle<(Comms, UserSymbols)>>,
    pub(super) warmup: Option<Warmup>,
}

impl Prefetch {
    pub(super) fn start(decided: &Decided) -> Prefetch {
        // On the hit path every hit record carries its writer's name: reading every task's name (a second
        // for a process of 100,000 threads) is for perf samples only.
        let names = !decided.delivery().hit_program();
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
