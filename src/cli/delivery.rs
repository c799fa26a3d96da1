//! How a watch's events are to be opened, decided from the plan before anything is opened ([`events`]):
//! the plan's delivery as the events take it, the BPF programs it attaches (loaded after the session's
//! other parts are open, [`crate::perf::programs`]), and the sizes of the rings; and what a refusal to
//! load them says ([`refused`]).

use crate::cli::advice;
use crate::cli::ring_size;
use crate::config::plan::{Delivery, Scope, WatchPlan, Writers};
use crate::error::{Error, ExitCode};
use crate::perf::bpf::hit_set::HitKind;
use crate::perf::programs::{Checks, Events, HitSet, LoadError, Programs};

/// Every breakpoint event of the watch: its BPF programs ([`programs`]), each hit ring buffer of
/// `hit_ring_pages` data pages, `--buffer-pages` perf rings.
pub fn events(plan: &WatchPlan, hit_ring_pages: usize) -> Events<'_> {
    Events {
        ring_pages: plan
            .running()
            .buffer_pages()
            .unwrap_or(ring_size::PERF_RING_PAGES),
        user_only: plan.writers() == Writers::UserSpaceOnly,
        percpu: plan.kernel().percpu(),
        checks: Checks {
            watches: plan.watches(),
            condition: plan.values().condition(),
            filter: plan.filter(),
        },
        programs: programs(plan, hit_ring_pages),
    }
}

/// The programs the plan's delivery attaches: the hit programs on the hit path (following the launched
/// command's children, ending a process's watch at its exec, with the watched processes entered), or
/// `--value`'s value programs on the per-thread path. `ring_pages`: each hit ring buffer's data pages.
fn programs(plan: &WatchPlan, ring_pages: usize) -> Programs {
    let scope = plan.scope();
    let values = plan.values();
    match plan.delivery() {
        Delivery::HitProgram => Programs::Hits(HitSet {
            kind: HitKind {
                processes: !scope.system_wide(),
                written: values.read(),
            },
            ring_pages,
            count: plan.running().limits().count,
            follow_children: matches!(scope, Scope::Launched(_)),
            pids: scope.pids(),
        }),
        Delivery::PerThread { remove_on_exec } if values.read() => {
            Programs::Values { remove_on_exec }
        }
        Delivery::PerThread { remove_on_exec } => Programs::None { remove_on_exec },
        Delivery::Samples => Programs::None {
            remove_on_exec: false,
        },
    }
}

/// A refusal to load the events' programs, as the command line reports it.
pub fn refused(e: LoadError) -> Error {
    match e {
        LoadError::Program(e) => advice::program(e),
        LoadError::WatchProcess(e) => Error::new(
            ExitCode::Runtime,
            "adding a process to the watched-process map",
        )
        .caused_by(e),
    }
}
