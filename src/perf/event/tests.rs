//! How a prepared set lays out its events: one ring per CPU and watch with the first tracking
//! tasks, inheritance only for task targets, one guard per thread, and a per-CPU variable's copy
//! placed per CPU.

use super::*;
use crate::model::watch::PerCpu;
use std::collections::{BTreeMap, BTreeSet};

fn watch(addr: u64) -> Watch {
    Watch {
        label: format!("0x{addr:x}"),
        addr,
        len: 8,
        access: Access::Write,
        module: None,
        per_cpu: None,
    }
}

fn tracking() -> EventConfig {
    EventConfig {
        track_tasks: true,
        count_lost: true,
        ..EventConfig::bare(4)
    }
}

/// Every CPU gets one ring per watch, in order; only the first watch's asks for the task records.
#[test]
fn a_set_is_one_ring_per_cpu_and_watch_and_the_first_tracks_tasks() {
    let cpus = BTreeSet::from([0, 3]);
    let set = Prepared::new(
        &[watch(0x1000), watch(0x2000)],
        &cpus,
        Targets::Cpus,
        &tracking(),
    );
    let placed: Vec<(u32, usize, u64, u64)> = set
        .cpus
        .iter()
        .flat_map(|(_, rings)| rings)
        .map(|r| {
            let a = r.attr.expect("attributes");
            (r.cpu, r.watch, a.bp_addr, a.comm())
        })
        .collect();
    assert_eq!(
        placed,
        [
            (0, 0, 0x1000, 1),
            (0, 1, 0x2000, 0),
            (3, 0, 0x1000, 1),
            (3, 1, 0x2000, 0)
        ]
    );
}

/// Events bound to a task inherit into the threads it creates; CPU-wide ones do not.
#[test]
fn task_targets_inherit_and_cpu_targets_do_not() {
    let cpus = BTreeSet::from([0]);
    let of = |targets| {
        let set = Prepared::new(&[watch(0x1000)], &cpus, targets, &tracking());
        let a = set.cpus[0].1[0].attr.expect("attributes");
        (
            a.inherit(),
            a.inherit_thread(),
            set.cpus[0].1[0].sample_type,
        )
    };
    let cfg = tracking();
    assert_eq!(of(Targets::Cpus), (0, 0, cfg.sample_type(Bind::Cpu)));
    assert_eq!(of(Targets::Task(5)), (1, 1, cfg.sample_type(Bind::Task(5))));
    assert_eq!(
        of(Targets::Threads(vec![5])),
        (1, 1, cfg.sample_type(Bind::Task(5)))
    );
}

/// Only the first ring of events bound to tasks opens each thread's guard; CPU-wide events, which
/// are not inherited, need none.
#[test]
fn each_thread_gets_one_guard_on_the_first_ring_of_task_events() {
    let cpus = BTreeSet::from([0, 1]);
    let guards = |targets| {
        let set = Prepared::new(&[watch(0x1000), watch(0x2000)], &cpus, targets, &tracking());
        set.cpus
            .iter()
            .flat_map(|(_, rings)| rings)
            .map(|r| r.guard)
            .collect::<Vec<_>>()
    };
    let first = vec![true, false, false, false];
    assert_eq!(guards(Targets::Threads(vec![5])), first);
    assert_eq!(guards(Targets::Task(5)), first);
    assert_eq!(guards(Targets::Cpus), [false; 4]);
    let a = guard_attr();
    assert_eq!((a.inherit(), a.disabled(), a.sample_period), (0, 1, 0));
}

/// A per-CPU variable's breakpoint on each CPU is at that CPU's copy; a CPU whose base is unknown
/// fails as it is opened, naming the CPU, and the lost counter can be dropped for an older kernel.
#[test]
fn a_per_cpu_copy_is_placed_per_cpu_and_an_unknown_base_fails_its_open() {
    let mut w = watch(0x10);
    w.per_cpu = Some(PerCpu {
        offset: 0x10,
        bases: BTreeMap::from([(0, 0x7000)]),
        copy: None,
    });
    let set = Prepared::new(&[w], &BTreeSet::from([0, 1]), Targets::Cpus, &tracking());
    let (on0, on1) = (&set.cpus[0].1[0], &set.cpus[1].1[0]);
    let a = on0.attr(Bind::Cpu, true).expect("cpu 0's base is known");
    assert_eq!(
        (a.bp_addr, a.read_format),
        (0x7010, u64::from(pb::PERF_FORMAT_LOST))
    );
    assert_eq!(on0.attr(Bind::Cpu, false).expect("known").read_format, 0);
    let e = on1
        .attr(Bind::Cpu, true)
        .expect_err("cpu 1's base is unknown");
    assert_eq!((e.cpu, e.stage, e.tid), (1, Stage::Open, None));
    assert!(e.err.to_string().contains("cpu1's per-CPU base is unknown"));
}

/// Perf samples alone load nothing: the configuration says what the events were decided with, and
/// no warning is given.
#[test]
fn samples_load_no_program_and_keep_the_decided_settings() {
    let filter = crate::model::filter::Filter::default();
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
