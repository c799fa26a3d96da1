//! The arming transaction driven directly, with a CPU made to fail or to vanish (ENODEV) at a chosen point:
//! a vanished CPU is not a failure (it is covered when it returns), a failure closes everything opened.

use crate::util;

use ksymwatch::model::watch::{Access, Watch};
use ksymwatch::perf::arm::{arm_set, Armed, Kernel, Perf, Planned};
use ksymwatch::perf::event::{
    Bind, CpuEvent, EventConfig, OpenError, Prepared, RingSpec, Stage, Targets,
};
use ksymwatch::perf::refusal::{Facts, Refusal};
use std::collections::BTreeSet;
use std::io;

fn watch() -> Watch {
    Watch {
        label: "0x10000".into(),
        addr: 0x10000,
        len: 8,
        access: Access::Write,
        module: None,
        per_cpu: None,
    }
}

const CFG: EventConfig = EventConfig::bare(8);

fn fail(cpu: u32, errno: i32) -> OpenError {
    OpenError {
        cpu,
        tid: None,
        stage: Stage::Open,
        err: io::Error::from_raw_os_error(errno),
        bp: None,
    }
}

/// The kernel's perf events for no process planned (these tests arm CPUs).
fn perf(cfg: &EventConfig) -> Perf<'_> {
    Perf {
        cfg,
        planned: Planned::NONE,
    }
}

/// The kernel's perf events, except that `fail` may answer for a CPU's rings instead (`None`: opened).
struct FailOn<F> {
    fail: F,
}

impl<F: FnMut(u32) -> Option<OpenError>> Kernel for FailOn<F> {
    type Ring = CpuEvent;

    fn open_ring(&mut self, spec: &RingSpec, bind: Bind) -> Result<CpuEvent, OpenError> {
        match (self.fail)(spec.cpu) {
            Some(e) => Err(e),
            None => perf(&CFG).open_ring(spec, bind),
        }
    }

    fn add_thread(
        &mut self,
        ring: &mut CpuEvent,
        spec: &RingSpec,
        tid: u32,
    ) -> Result<(), OpenError> {
        perf(&CFG).add_thread(ring, spec, tid)
    }

    fn enable_ring(&mut self, ring: &CpuEvent) -> Result<(), OpenError> {
        perf(&CFG).enable_ring(ring)
    }

    fn disable_ring(&mut self, ring: &CpuEvent) {
        perf(&CFG).disable_ring(ring)
    }

    fn threads(&mut self, pids: &[u32]) -> Vec<u32> {
        perf(&CFG).threads(pids)
    }

    fn names_planned(&mut self, pid: u32) -> bool {
        perf(&CFG).names_planned(pid)
    }

    fn free_slots(
        &mut self,
        watch: &Watch,
        cpus: &BTreeSet<u32>,
        most: usize,
    ) -> Result<usize, OpenError> {
        perf(&CFG).free_slots(watch, cpus, most)
    }

    fn facts(&mut self, e: &OpenError) -> Facts {
        perf(&CFG).facts(e)
    }
}

/// Arms `watches` on every one of `cpus` as the tracer does, `fail` answering for the CPUs it chooses.
fn arm_with(
    watches: &[Watch],
    cpus: &BTreeSet<u32>,
    fail: impl FnMut(u32) -> Option<OpenError>,
) -> Result<Armed, Refusal> {
    let set = Prepared::new(watches, cpus, Targets::Cpus, &CFG);
    let mut kernel = FailOn { fail };
    arm_set(&set, &mut kernel).map_err(|f| f.explain(watches, |e| kernel.facts(e)))
}

fn perf_fds() -> usize {
    util::fd_count(std::process::id()).1
}

/// The online CPUs, the last of them (the one a test makes fail) and this process's perf descriptors
/// before arming.
fn cpus_before_arming() -> (BTreeSet<u32>, u32, usize) {
    let cpus: BTreeSet<u32> = util::online_cpus().into_iter().collect();
    let last = *cpus.iter().last().expect("an online cpu");
    (cpus, last, perf_fds())
}

live_test!(a_cpu_that_vanishes_while_arming_is_not_a_failure, {
    let (cpus, last, before) = cpus_before_arming();
    let armed = arm_with(&[watch()], &cpus, |cpu| {
        (cpu == last && cpus.len() > 1).then(|| fail(cpu, libc::ENODEV))
    })
    .expect("ENODEV on one CPU must not fail the arm");
    if cpus.len() > 1 {
        assert_eq!(armed.went_offline, vec![last]);
        assert_eq!(armed.events.len(), cpus.len() - 1);
    }
    assert!(armed
        .events
        .iter()
        .all(|e| e.cpu != last || cpus.len() == 1));
    drop(armed);
    assert_eq!(perf_fds(), before, "every event closed on drop");
});

live_test!(a_failure_after_other_cpus_opened_closes_them_all, {
    let (cpus, last, before) = cpus_before_arming();
    let mut opened_before_failure = 0;
    let err = arm_with(&[watch(), watch()], &cpus, |cpu| {
        (cpu == last).then(|| {
            // Both watches of every earlier CPU are open at this point.
            opened_before_failure = perf_fds() - before;
            fail(cpu, libc::ENOSPC)
        })
    })
    .err()
    .expect("ENOSPC must fail the arm");
    assert_eq!(opened_before_failure, 2 * (cpus.len() - 1));
    assert_eq!(err.code, ksymwatch::error::ExitCode::Arm);
    assert!(
        err.to_string()
            // The refusal was made up: the CPU has its registers free again when counted.
            .contains(&format!(
                "cpu {last} had fewer than the 2 free debug registers needed"
            )),
        "{}",
        err.to_string()
    );
    assert_eq!(
        perf_fds(),
        before,
        "the transaction closed what it had opened"
    );
});

live_test!(every_cpu_vanishing_is_an_arm_failure, {
    let cpus: BTreeSet<u32> = util::online_cpus().into_iter().collect();
    let err = arm_with(&[watch()], &cpus, |cpu| Some(fail(cpu, libc::ENODEV)))
        .err()
        .expect("nothing armed is a failure");
    assert_eq!(err.code, ksymwatch::error::ExitCode::Arm);
    assert!(
        err.to_string().contains("went offline"),
        "{}",
        err.to_string()
    );
});
