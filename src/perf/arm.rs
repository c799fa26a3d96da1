//! Arming every requested CPU as one transaction (the 2009 hw-breakpoint thread's point): every event is
//! opened and mapped disabled first; only when all succeeded are they enabled. If any step fails on any CPU,
//! every event already opened is closed and nothing has produced a single hit.

use std::collections::BTreeSet;
use std::io;

use crate::config::watch::Watch;
use crate::error::Error;
use crate::perf::event::{CpuEvent, EventConfig, OpenError, Stage};

/// Events armed and enabled, in CPU then watch order.
pub struct Armed {
    pub events: Vec<CpuEvent>,
    /// CPUs that went offline while arming (ENODEV): not a failure, they are covered when they return.
    pub went_offline: Vec<u32>,
}

/// Opens `watches` on one CPU: all or none.
pub fn open_cpu(
    watches: &[Watch],
    cpu: u32,
    cfg: &EventConfig,
) -> Result<Vec<CpuEvent>, OpenError> {
    watches
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let cfg = EventConfig {
                track_tasks: cfg.track_tasks && i == 0,
                ..*cfg
            };
            CpuEvent::open(w, i, cpu, &cfg)
        })
        .collect()
}

/// Arms `watches` on every CPU in `cpus`, or on none.
pub fn arm(watches: &[Watch], cpus: &BTreeSet<u32>, cfg: &EventConfig) -> Result<Armed, Error> {
    arm_with(watches, cpus, cfg, open_cpu)
}

/// [`arm`] with the per-CPU open step supplied, so tests can make a chosen CPU fail or vanish mid-transaction.
pub fn arm_with(
    watches: &[Watch],
    cpus: &BTreeSet<u32>,
    cfg: &EventConfig,
    mut open: impl FnMut(&[Watch], u32, &EventConfig) -> Result<Vec<CpuEvent>, OpenError>,
) -> Result<Armed, Error> {
    let mut events = Vec::with_capacity(cpus.len() * watches.len());
    let mut went_offline = Vec::new();
    for &cpu in cpus {
        match open(watches, cpu, cfg) {
            Ok(evs) => events.extend(evs),
            Err(e) if e.stage == Stage::Open && e.err.raw_os_error() == Some(libc::ENODEV) => {
                went_offline.push(cpu)
            }
            // Returning drops `events`: every descriptor opened so far is closed, freeing its debug register.
            Err(e) => return Err(explain(&e, watches).then(NOTHING_ARMED)),
        }
    }
    if events.is_empty() {
        return Err(Error::arm(format!(
            "no CPU could be armed: every requested CPU ({}) went offline",
            crate::cpulist::format(cpus)
        )));
    }
    for ev in &events {
        if let Err(e) = ev.enable() {
            for ev in &events {
                let _ = ev.disable();
            }
            return Err(explain(&e, watches).then(NOTHING_ARMED));
        }
    }
    Ok(Armed {
        events,
        went_offline,
    })
}

/// The system's perf_event_paranoid level, for messages.
pub fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// What an all-or-nothing arming failure adds: the explanation alone is also used for a CPU that came
/// online later and could not be armed while the others stay armed.
const NOTHING_ARMED: &str = "; nothing was armed";

/// Words an open failure the way a kernel developer needs it: which CPU, what the errno means here, and what
/// to do about it.
pub fn explain(e: &OpenError, watches: &[Watch]) -> Error {
    let cpu = e.cpu;
    let what = match watches {
        // `check`'s register probe, which arms no watch of the user's.
        [] => "a probe breakpoint".to_string(),
        [w] => format!("0x{:x}/{}", w.addr, w.len),
        _ => format!("{} watches", watches.len()),
    };
    let errno = e.err.raw_os_error().unwrap_or(0);
    match (e.stage, errno) {
        (Stage::Mmap, _) => Error::arm(format!(
            "cpu {cpu}: cannot map the perf ring buffer: {}; try a smaller --buffer-pages, or raise RLIMIT_MEMLOCK / perf_event_mlock_kb",
            e.err
        )),
        (_, libc::ENOSPC) => Error::arm(format!(
            "cpu {cpu}: all debug registers on cpu {cpu} are in use (by perf, a debugger, another ksymwatch, or a \
             task-bound watchpoint); free one and retry"
        )),
        (_, libc::EACCES | libc::EPERM) => Error::not_permitted(format!(
            "cpu {cpu}: not permitted to open a system-wide breakpoint ({}): run as root or grant CAP_PERFMON \
             (kernel.perf_event_paranoid is {}; system-wide events need -1 or CAP_PERFMON)",
            e.err,
            paranoid()
        )),
        (_, libc::ENODEV) => Error::arm(format!("cpu {cpu} went offline while arming")),
        (_, libc::ENOENT | libc::EOPNOTSUPP) => Error::not_permitted(format!(
            "cpu {cpu}: this kernel has no hardware breakpoint PMU ({}): it needs CONFIG_HAVE_HW_BREAKPOINT and \
             /sys/bus/event_source/devices/breakpoint",
            e.err
        )),
        (_, libc::EINVAL) => Error::arm(format!(
            "cpu {cpu}: the kernel refuses a breakpoint at {what} (EINVAL): the address, length or access type is \
             not watchable (kernel text cannot be watched for execution here; check alignment)"
        )),
        (_, libc::EBUSY) => Error::arm(format!("cpu {cpu}: breakpoint PMU busy ({}): retry", e.err)),
        _ => Error::arm(format!("cpu {cpu}: cannot arm {what}: {}", io::Error::from_raw_os_error(errno))),
    }
}
