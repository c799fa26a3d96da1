//! How a watch's events are opened ([`EventConfig`]): the plan's delivery as the events take it, with the
//! BPF programs it loads and attaches, and the sizes of the rings.

use std::sync::Arc;

use crate::cli::advice;
use crate::cli::ring_size;
use crate::config::plan::{Delivery, Scope, WatchPlan, Writers};
use crate::error::{Context, ExitCode, Result};
use crate::perf::bpf::hit_set::{HitKind, HitPrograms};
use crate::perf::bpf::value_set::ValuePrograms;
use crate::perf::event::{self, EventConfig};
use crate::stderr;

/// How every breakpoint event of the watch is opened: its BPF programs loaded and attached
/// ([`delivery`]), each hit ring buffer of `hit_ring_pages` data pages, `--buffer-pages` perf rings.
pub fn event_config(plan: &WatchPlan, hit_ring_pages: usize) -> Result<EventConfig> {
    let delivery = delivery(plan, hit_ring_pages)?;
    Ok(EventConfig {
        ring_pages: plan
            .running()
            .buffer_pages
            .unwrap_or(ring_size::PERF_RING_PAGES),
        user_only: plan.writers() == Writers::UserSpaceOnly,
        track_tasks: true,
        count_lost: true,
        delivery,
        percpu: plan.kernel().percpu,
    })
}

/// The plan's delivery as the events take it, with the BPF programs it attaches: the hit programs on the
/// hit path (following the launched command's children, ending a process's watch at its exec, with the
/// watched processes entered), or `--value`'s value programs on the per-thread path. `ring_pages`: each
/// hit ring buffer's data pages.
fn delivery(plan: &WatchPlan, ring_pages: usize) -> Result<event::Delivery> {
    let scope = plan.scope();
    let system = scope.system_wide();
    let values = plan.values();
    match plan.delivery() {
        Delivery::HitProgram => {}
        Delivery::PerThread { remove_on_exec } if values.read() => {
            let v = ValuePrograms::load(plan.watches(), values.condition(), plan.filter())
                .map_err(advice::program)?;
            return Ok(event::Delivery::Paired {
                values: Arc::new(v),
                remove_on_exec,
            });
        }
        Delivery::PerThread { remove_on_exec } => {
            return Ok(event::Delivery::Samples { remove_on_exec })
        }
        Delivery::Samples => {
            return Ok(event::Delivery::Samples {
                remove_on_exec: false,
            })
        }
    }
    let mut hits = HitPrograms::load_counting(
        plan.watches(),
        values.condition(),
        plan.filter(),
        HitKind {
            processes: !system,
            written: values.read(),
        },
        ring_pages,
        plan.running().limits.count,
    )
    .map_err(advice::program)?;
    // A launched command's children are watched too, as `perf record -- CMD` follows them.
    if matches!(scope, Scope::Launched(_)) {
        if let Err(e) = hits.follow_children() {
            stderr::line(format_args!(
                "ksymwatch: warning: {e}; the command's own threads are watched, processes it forks are not"
            ));
        }
    }
    // The watched address means something else in another program: an exec ends that process's
    // watch, in the kernel before the new program runs, and the session reports it.
    // A process that exits leaves the watched set as it ends: a process given its pid later is not it.
    if !system {
        if let Err(e) = hits.end_on_exec() {
            stderr::line(format_args!("ksymwatch: warning: {e}"));
        }
        if let Err(e) = hits.end_on_exit() {
            stderr::line(format_args!("ksymwatch: warning: {e}"));
        }
    }
    for pid in scope.pids() {
        hits.watch_process(pid).or_exit(
            ExitCode::Runtime,
            "adding a process to the watched-process map",
        )?;
    }
    Ok(event::Delivery::Hits(Arc::new(hits)))
}
