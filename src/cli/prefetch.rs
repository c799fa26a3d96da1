//! Work a watch starts before it is planned, so that it overlaps the planning and its symbol loading:
//! every live task's name and process's maps that the hits can need (a writer already running that exits
//! right after its hits must have had them read, and a read after `armed` would race with a script that
//! starts it on that line), and the first CPU-bound breakpoint open, which waits out an RCU grace period.
//! `execute` takes its results when it arms.
//!
//! `watch` starts it from the plan's first phase ([`crate::config::plan::decide`]): who the watch covers
//! (`-p`'s processes, a thread standing for its process) and which path its hits take, decided once,
//! before the plan has checked the rest, and taken here as decided. A request the plan then refuses leaves this work to end with the process (it reads, and holds
//! no breakpoint).

use std::path::Path;

use ksymwatch_symbols::UserSymbols;

use crate::config::plan::{Decided, Hits, Scope};
use crate::cpulist;
use crate::perf::bpf;
use crate::perf::event::Binding;
use crate::perf::warmup::Warmup;
use crate::trace::comm::Comms;

/// Work started before the plan so that it overlaps the symbol loading.
pub(super) struct Prefetch {
    pub(super) task_scan: Option<std::thread::JoinHandle<(Comms, UserSymbols)>>,
    pub(super) warmup: Option<Warmup>,
}

impl Prefetch {
    pub(super) fn start(decided: &Decided) -> Prefetch {
        // Whose names and maps the hits can need: any process's for a system-wide watch; a process
        // watch's hits come from its own processes (and the children they fork, which the kernel's
        // records bring), so reading every other process (a few ms per hundred) only delays the first
        // hit; a launched command does not exist yet (it is read at its exec stop).
        let writers = match decided.scope() {
            Scope::System => None,
            Scope::Processes(pids) => Some(pids.clone()),
            Scope::Launched(_) => Some(Vec::new()),
        };
        // CPU-bound breakpoints are opened for a system-wide watch and for any watch whose hit program
        // chooses the processes in the kernel (a process watch where BPF loads): `Binding::Cpus`; where
        // this process may not open them, the probe is refused and its thread ends.
        let cpu_bound = matches!(decided.delivery().events, Binding::Cpus);
        let warmup = cpu_bound
            .then(|| cpulist::read(Path::new(cpulist::ONLINE)).ok())
            .flatten()
            .and_then(|cpus| cpus.first().copied())
            .map(Warmup::start);
        // On the hit path every hit record carries its writer's name: reading every task's name (a
        // second for a process of 100,000 threads) is for perf samples only.
        let names = decided.delivery().hits == Hits::Samples;
        let task_scan = std::thread::Builder::new()
            .name("ksymwatch-tasks".into())
            .spawn(move || {
                if !names {
                    // The hit program's load asks where the kernel keeps a task's name (its BTF,
                    // a few ms to parse, once per run): answered here, it is not on the way to
                    // arming, and the plan's BTF types take the same parse.
                    let _ = bpf::task::comm_offset();
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
        Prefetch { task_scan, warmup }
    }
}
