//! Probe breakpoints: disabled, pinned breakpoints opened only to ask the kernel a question and closed at
//! once, never enabled. Whether it would arm a breakpoint at an address on a CPU, and how many debug
//! registers a CPU (or every CPU, for breakpoints like a given watch) has free now. `check` asks them, and
//! arming asks them through its kernel ([`crate::perf::arm::Kernel`]): how many of `--on`'s slots fit, and
//! after a refusal the facts its wording needs ([`free_after`], [`crate::perf::refusal`]).

use std::collections::BTreeSet;

use crate::model::watch::{Access, Watch};
use crate::perf::event::{attr, Bind, Delivery, EventConfig, OpenError, Stage};
use crate::perf::sys;

/// An address in our own data for the probe breakpoints; they are never enabled.
static PROBE: [u64; 8] = [0; 8];

/// The most breakpoints probed per CPU; x86 has four debug registers.
const PROBE_MAX: u32 = 8;

/// A probe's watch: 8 bytes at `addr`, written.
fn probe_watch(addr: u64) -> Watch {
    Watch {
        label: "probe".into(),
        addr,
        len: 8,
        access: Access::Write,
        module: None,
        per_cpu: None,
    }
}

/// An address in this process's own memory (user space) that a probe may name.
pub fn probe_user_address() -> u64 {
    &PROBE[0] as *const u64 as u64
}

/// Whether the kernel would arm a breakpoint at `addr` on `cpu`: one disabled pinned write breakpoint of
/// 8 bytes (naturally aligned `addr`) is opened and closed at once, never enabled, so it holds a debug
/// register only for that moment. The kernel's refusal, if any, is returned as an arming failure's
/// would be, for [`crate::perf::refusal::explain`] to word.
pub fn probe(addr: u64, cpu: u32) -> Result<(), OpenError> {
    let w = probe_watch(addr);
    sys::perf_event_open(&attr(&w, &EventConfig::bare(1), Bind::Cpu), -1, cpu as i32)
        .map(drop)
        .map_err(|err| OpenError::new(cpu, Bind::Cpu, Stage::Open, err).at(addr, w.len))
}

/// Opens disabled pinned breakpoints on `cpu` until the kernel says no; all are closed on return. ENOSPC
/// at the first open is `Ok(0)`; any other refusal of the first open is returned as is, so the caller can
/// word it as an arming failure would be ([`crate::perf::refusal::explain`]).
pub fn free_slots(cpu: u32) -> Result<u32, OpenError> {
    count_slots(-1, cpu)
}

/// How many breakpoints a thread that holds none could take on `cpu` now, counted as [`free_slots`]
/// counts with probes bound to the calling thread on `cpu`. The kernel counts a thread's breakpoint on a
/// CPU against that CPU's CPU-wide breakpoints and that thread's own only, so this is what the CPU-wide
/// ones leave to every thread there: fewer than a per-thread watch needs, and the CPU is what is full,
/// not the thread.
pub fn free_thread_slots(cpu: u32) -> Result<u32, OpenError> {
    count_slots(0, cpu)
}

/// After refusal `e`, what its wording counts: the debug registers free now on its CPU (for a thread's
/// event, what the CPU leaves to a thread there, [`free_thread_slots`]) where it was refused for want of
/// one; `None` otherwise, or where they could not be counted.
pub fn free_after(e: &OpenError) -> Option<u32> {
    let full =
        !matches!(e.stage, Stage::Bpf | Stage::Mmap) && e.err.raw_os_error() == Some(libc::ENOSPC);
    match (full, e.tid) {
        (false, _) => None,
        (true, None) => free_slots(e.cpu).ok(),
        (true, Some(_)) => free_thread_slots(e.cpu).ok(),
    }
}

/// Probes bound to `pid` (-1: the CPU; 0: the calling thread) on `cpu`, opened until the kernel says no.
fn count_slots(pid: i32, cpu: u32) -> Result<u32, OpenError> {
    let cfg = EventConfig::bare(1);
    let mut held = Vec::new();
    for i in 0..PROBE_MAX {
        let w = probe_watch(&PROBE[i as usize] as *const u64 as u64);
        match sys::perf_event_open(&attr(&w, &cfg, Bind::Cpu), pid, cpu as i32) {
            Ok(fd) => held.push(fd),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(err) if held.is_empty() => {
                return Err(OpenError::new(cpu, Bind::Cpu, Stage::Open, err).at(w.addr, w.len))
            }
            Err(_) => break,
        }
    }
    Ok(held.len() as u32)
}

/// How many breakpoints like `watch` every one of `cpus` can take now, up to `most`: each is opened
/// (pinned, disabled, which reserves its debug register) until one CPU refuses, then all are closed. A
/// refusal of the very first open other than ENOSPC (no register free) is returned: the kernel will not
/// take such a breakpoint at all (a kernel address where kernel breakpoints are refused), and the caller
/// words it as an arming failure ([`crate::perf::refusal::explain`]).
pub fn slots_for(
    watch: &Watch,
    cpus: &BTreeSet<u32>,
    most: usize,
    cfg: &EventConfig,
) -> Result<usize, OpenError> {
    let cfg = EventConfig {
        track_tasks: false,
        delivery: Delivery::Samples,
        ..cfg.clone()
    };
    let attr = attr(watch, &cfg, Bind::Cpu);
    let mut held = Vec::new();
    for n in 0..most {
        for &cpu in cpus {
            match sys::perf_event_open(&attr, -1, cpu as i32) {
                Ok(fd) => held.push(fd),
                Err(err) if held.is_empty() && err.raw_os_error() != Some(libc::ENOSPC) => {
                    return Err(OpenError {
                        cpu,
                        tid: None,
                        stage: Stage::Open,
                        err,
                        bp: Some((watch.addr, watch.len)),
                    })
                }
                Err(_) => return Ok(n),
            }
        }
    }
    Ok(most)
}
