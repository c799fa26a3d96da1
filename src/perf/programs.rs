//! A watch's events as decided before anything is opened ([`Events`]), and the loading of the BPF
//! programs their delivery attaches ([`Events::load_programs`]) into the [`EventConfig`] they are opened
//! with: the hit programs wherever BPF is used (on one event per CPU, following a launched command's
//! children and ending a process's watch at its exec and exit, with the watched processes entered; or
//! on the per-thread path's events, whose threads the kernel chooses), none for perf samples.

use std::io;
use std::sync::Arc;

use crate::model::condition::Condition;
use crate::model::filter::Filter;
use crate::model::watch::Watch;
use crate::perf::bpf::hit_set::{HitKind, HitPrograms};
use crate::perf::bpf::percpu::Offsets;
use crate::perf::bpf::ProgramError;
use crate::perf::event::{Binding, Delivery, EventConfig};

/// Every breakpoint event of a watch, as [`EventConfig`] will say once its programs are loaded.
pub struct Events<'a> {
    /// Data pages per perf ring.
    pub ring_pages: usize,
    /// As [`EventConfig::user_only`].
    pub user_only: bool,
    /// As [`EventConfig::percpu`].
    pub percpu: Option<Offsets>,
    /// What the programs check, if any are loaded.
    pub checks: Checks<'a>,
    /// Whom the events are opened for.
    pub binding: Binding,
    /// The hit programs every event attaches ([`Delivery::Hits`]); `None`: the breakpoints write perf
    /// samples ([`Delivery::Samples`]).
    pub programs: Option<HitSet>,
}

/// What every watch's program checks: the watches (a program each), `--if` and the filters.
#[derive(Debug, Clone, Copy)]
pub struct Checks<'a> {
    pub watches: &'a [Watch],
    pub condition: Option<&'a Condition>,
    pub filter: &'a Filter,
}

/// How the hit programs are loaded and whom they watch.
#[derive(Debug, Clone)]
pub struct HitSet {
    pub kind: HitKind,
    /// Data pages of each CPU's ring buffer (a power of two).
    pub ring_pages: usize,
    /// `--count N`: the programs keep N hits and none after them.
    pub count: Option<u64>,
    /// A launched command: the processes it forks are watched too, as `perf record -- CMD` follows them.
    pub follow_children: bool,
    /// The processes watched from the start (none for a watch of every task).
    pub pids: Vec<u32>,
}

/// Why a delivery's programs could not be had.
#[derive(Debug)]
pub enum LoadError {
    /// A program or one of its maps ([`ProgramError`]).
    Program(ProgramError),
    /// A watched process could not be entered in the programs' watched-process map.
    WatchProcess(io::Error),
}

impl Events<'_> {
    /// Loads and attaches the programs; task records and loss counts asked of every event. What the
    /// programs could not set up is handed to `warn` as it happens, one line each: the watch goes on
    /// without it (the perf layer prints nothing itself).
    pub fn load_programs(self, warn: &mut dyn FnMut(&str)) -> Result<EventConfig, LoadError> {
        let delivery = match self.programs {
            Some(set) => Delivery::Hits(Arc::new(load_hits(self.checks, set, warn)?)),
            None => Delivery::Samples,
        };
        Ok(EventConfig {
            ring_pages: self.ring_pages,
            user_only: self.user_only,
            track_tasks: true,
            count_lost: true,
            delivery,
            binding: self.binding,
            percpu: self.percpu,
        })
    }
}

/// The hit programs of `set`, following and ending processes as it says (what cannot be is handed to
/// `warn`), with its processes entered.
fn load_hits(
    checks: Checks<'_>,
    set: HitSet,
    warn: &mut dyn FnMut(&str),
) -> Result<HitPrograms, LoadError> {
    let mut hits = HitPrograms::load_counting(
        checks.watches,
        checks.condition,
        checks.filter,
        set.kind,
        set.ring_pages,
        set.count,
    )
    .map_err(LoadError::Program)?;
    if set.follow_children {
        if let Err(e) = hits.follow_children() {
            warn(&format!(
                "{e}; the command's own threads are watched, processes it forks are not"
            ));
        }
    }
    // The watched address means something else in another program: an exec ends that process's
    // watch, in the kernel before the new program runs, and the session reports it.
    // A process that exits leaves the watched set as it ends: a process given its pid later is not it.
    if set.kind.processes {
        if let Err(e) = hits.end_on_exec() {
            warn(&e.to_string());
        }
        if let Err(e) = hits.end_on_exit() {
            warn(&e.to_string());
        }
    }
    for pid in set.pids {
        hits.watch_process(pid).map_err(LoadError::WatchProcess)?;
    }
    Ok(hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Perf samples alone load nothing: the configuration says what the events were decided with, and
    /// no warning is given.
    #[test]
    fn samples_load_no_program_and_keep_the_decided_settings() {
        let filter = Filter::default();
        for remove_on_exec in [false, true] {
            let events = Events {
                ring_pages: 64,
                user_only: true,
                percpu: None,
                checks: Checks {
                    watches: &[],
                    condition: None,
                    filter: &filter,
                },
                binding: Binding::Scope { remove_on_exec },
                programs: None,
            };
            let mut warned = Vec::new();
            let cfg = events
                .load_programs(&mut |w| warned.push(w.to_string()))
                .unwrap();
            assert!(matches!(cfg.delivery, Delivery::Samples));
            assert_eq!(cfg.binding, Binding::Scope { remove_on_exec });
            assert_eq!(cfg.ring_pages, 64);
            assert!(cfg.user_only && cfg.track_tasks && cfg.count_lost);
            assert!(cfg.percpu.is_none());
            assert!(warned.is_empty(), "{warned:?}");
        }
    }
}
