//! The arming transaction driven directly, with a CPU made to fail or to vanish (ENODEV) at a chosen point:
//! a vanished CPU is not a failure (it is covered when it returns), a failure closes everything opened.

use crate::util;

use ksymwatch::model::watch::{Access, Watch};
use ksymwatch::perf::arm::{arm_with, open_cpu};
use ksymwatch::perf::event::{EventConfig, OpenError, Stage};
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
    let armed = arm_with(&[watch()], &cpus, &CFG, |w, cpu, cfg| {
        if cpu == last && cpus.len() > 1 {
            Err(fail(cpu, libc::ENODEV))
        } else {
            open_cpu(w, cpu, cfg)
        }
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
    let err = arm_with(&[watch(), watch()], &cpus, &CFG, |w, cpu, cfg| {
        if cpu == last {
            // Both watches of every earlier CPU are open at this point.
            opened_before_failure = perf_fds() - before;
            Err(fail(cpu, libc::ENOSPC))
        } else {
            open_cpu(w, cpu, cfg)
        }
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
    let err = arm_with(&[watch()], &cpus, &CFG, |_, cpu, _| {
        Err(fail(cpu, libc::ENODEV))
    })
    .err()
    .expect("nothing armed is a failure");
    assert_eq!(err.code, ksymwatch::error::ExitCode::Arm);
    assert!(
        err.to_string().contains("went offline"),
        "{}",
        err.to_string()
    );
});
