//! How a watch's events are to be opened, decided from the plan before anything is opened ([`events`]):
//! the plan's delivery as the events take it (whom they are bound to, and the BPF programs they attach,
//! loaded after the session's other parts are open, [`crate::perf::programs`]), and the sizes of the
//! rings; and what a refusal to load them says ([`refused`]).

use crate::cli::advice;
use crate::cli::ring_size;
use crate::config::plan::{Delivery, Hits, Scope, WatchPlan, Writers};
use crate::error::{Error, ExitCode};
use crate::perf::bpf::hit_set::HitKind;
use crate::perf::event::Binding;
use crate::perf::programs::{Checks, Events, HitSet, LoadError};

/// Every breakpoint event of the watch: its BPF programs ([`programs`]), each hit ring buffer of
/// `hit_ring_pages` data pages, `--buffer-pages` perf rings.
pub fn events(plan: &WatchPlan, hit_ring_pages: usize) -> Events<'_> {
    let delivery = plan.delivery();
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
        binding: delivery.events,
        programs: programs(plan, delivery, hit_ring_pages),
    }
}

/// The hit programs the plan's delivery attaches, if any: on one event per CPU they choose the
/// processes (following the launched command's children, ending a process's watch at its exec, with the
/// watched processes entered); on the per-thread path the events choose the threads, and the kernel
/// keeps them across an exec unless `--remove-on-exec` drops them. `ring_pages`: each hit ring buffer's
/// data pages.
fn programs(plan: &WatchPlan, delivery: Delivery, ring_pages: usize) -> Option<HitSet> {
    if delivery.hits == Hits::Samples {
        return None;
    }
    let scope = plan.scope();
    let threads = matches!(delivery.events, Binding::Scope { .. });
    let processes = !threads && !scope.system_wide();
    Some(HitSet {
        kind: HitKind {
            processes,
            written: plan.values().read(),
            threads,
        },
        ring_pages,
        count: plan.running().limits().count,
        follow_children: processes && matches!(scope, Scope::Launched(_)),
        pids: match processes {
            true => scope.pids(),
            false => Vec::new(),
        },
    })
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
