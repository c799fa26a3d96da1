//! One CPU-bound hardware breakpoint event: its perf attributes, its descriptor and its ring buffer.
//! A thin typed wrapper; the all-or-nothing arming across CPUs is [`crate::perf::arm`]'s job.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use perf_event_open_sys::bindings as pb;

use crate::config::watch::{Access, Watch};
use crate::perf::record::SAMPLE_TYPE;
use crate::perf::ring::Ring;
use crate::perf::sys;

/// How an event is sampled and buffered.
#[derive(Debug, Clone, Copy)]
pub struct EventConfig {
    /// Data pages per ring (a power of two).
    pub ring_pages: usize,
    /// Also emit COMM and FORK records (one event per CPU needs them; more would duplicate).
    pub track_tasks: bool,
    /// Ask the kernel to count the samples it dropped (`PERF_FORMAT_LOST`, Linux 6.0+): the only way to
    /// see a loss at the end of a burst, which the kernel never writes a LOST record for.
    pub count_lost: bool,
}

/// The attributes of a pinned, disabled, every-hit breakpoint on `watch`.
pub fn attr(watch: &Watch, cfg: &EventConfig) -> pb::perf_event_attr {
    // SAFETY: perf_event_attr is plain data for which all-zero is the documented "nothing set" value.
    let mut a: pb::perf_event_attr = unsafe { std::mem::zeroed() };
    a.type_ = pb::PERF_TYPE_BREAKPOINT;
    a.size = std::mem::size_of::<pb::perf_event_attr>() as u32;
    a.bp_type = match watch.access {
        Access::Write => pb::HW_BREAKPOINT_W,
        Access::ReadWrite => pb::HW_BREAKPOINT_RW,
    };
    a.bp_addr = watch.addr;
    a.bp_len = u64::from(watch.len);
    a.sample_period = 1;
    a.sample_type = SAMPLE_TYPE;
    // Every record carries the TID/TIME/CPU trailer, so COMM, FORK and LOST records are merged in time
    // order with the samples: a hit is named as its task was named when it wrote.
    a.set_sample_id_all(1);
    if cfg.count_lost {
        a.read_format = u64::from(pb::PERF_FORMAT_LOST);
    }
    a.set_disabled(1);
    // Pinned: if the debug register cannot be had the open fails now, instead of the event silently never
    // being scheduled.
    a.set_pinned(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    // Wake the reader a quarter of the way into the ring; the event loop also drains on a 10 ms tick, so a
    // single hit is never held back for long.
    a.set_watermark(1);
    a.wakeup_watermark = (cfg.ring_pages * sys::page_size() / 4) as u32;
    if cfg.track_tasks {
        a.set_comm(1);
        a.set_comm_exec(1);
        a.set_task(1);
    }
    a
}

/// An open breakpoint on one CPU.
pub struct CpuEvent {
    pub cpu: u32,
    /// Index of the watch in the session's list.
    pub watch: usize,
    /// The kernel counts this event's dropped samples (`PERF_FORMAT_LOST` was accepted).
    pub counts_lost: bool,
    pub ring: Ring,
    // Declared after `ring` so the mapping is gone before the descriptor closes.
    fd: OwnedFd,
}

/// Which step of opening failed; the message differs (an mmap failure is about memory, not registers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Open,
    Mmap,
    Enable,
}

#[derive(Debug)]
pub struct OpenError {
    pub cpu: u32,
    pub stage: Stage,
    pub err: io::Error,
}

impl CpuEvent {
    /// Opens (disabled) and maps the event for `watch` on `cpu`.
    pub fn open(
        watch: &Watch,
        index: usize,
        cpu: u32,
        cfg: &EventConfig,
    ) -> Result<CpuEvent, OpenError> {
        let mut counts_lost = cfg.count_lost;
        let opened = match sys::perf_event_open(&attr(watch, cfg), -1, cpu as i32) {
            // A kernel before 6.0 rejects the unknown read_format bit: arm without the lost counter.
            Err(e) if counts_lost && e.raw_os_error() == Some(libc::EINVAL) => {
                counts_lost = false;
                let cfg = EventConfig {
                    count_lost: false,
                    ..*cfg
                };
                sys::perf_event_open(&attr(watch, &cfg), -1, cpu as i32)
            }
            other => other,
        };
        let fd = opened.map_err(|err| OpenError {
            cpu,
            stage: Stage::Open,
            err,
        })?;
        let ring = Ring::map(fd.as_fd(), cfg.ring_pages).map_err(|err| OpenError {
            cpu,
            stage: Stage::Mmap,
            err,
        })?;
        Ok(CpuEvent {
            cpu,
            watch: index,
            counts_lost,
            ring,
            fd,
        })
    }

    pub fn enable(&self) -> Result<(), OpenError> {
        sys::perf_enable(self.fd.as_fd()).map_err(|err| OpenError {
            cpu: self.cpu,
            stage: Stage::Enable,
            err,
        })
    }

    pub fn disable(&self) -> io::Result<()> {
        sys::perf_disable(self.fd.as_fd())
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What the kernel counted for this event: every hit while enabled, and the samples it dropped (when
    /// [`CpuEvent::counts_lost`]). Readable after the event's CPU went offline (the values freeze there).
    pub fn counts(&self) -> io::Result<Counts> {
        let mut buf = [0u64; 2];
        let want = if self.counts_lost { 16 } else { 8 };
        let n = sys::perf_read(self.fd.as_fd(), &mut buf[..want / 8])?;
        if n != want {
            return Err(io::Error::other(format!(
                "perf counter read gave {n} bytes, expected {want}"
            )));
        }
        Ok(Counts {
            hits: buf[0],
            lost: self.counts_lost.then_some(buf[1]),
        })
    }
}

/// An event's kernel-side totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Every time the breakpoint fired while enabled.
    pub hits: u64,
    /// Samples the kernel could not write to the ring; `None` on kernels without `PERF_FORMAT_LOST`.
    pub lost: Option<u64>,
}

/// An address in our own data for the probe breakpoints; they are never enabled.
static PROBE: [u64; 8] = [0; 8];

/// The most breakpoints probed per CPU; x86 has four debug registers.
const PROBE_MAX: u32 = 8;

/// Opens disabled pinned breakpoints on `cpu` until the kernel says no; all are closed on return. ENOSPC
/// at the first open is `Ok(0)`; any other refusal of the first open is returned as is, so the caller can
/// word it as an arming failure would be ([`crate::perf::arm::explain`]).
pub fn free_slots(cpu: u32) -> Result<u32, OpenError> {
    let cfg = EventConfig {
        ring_pages: 1,
        track_tasks: false,
        count_lost: false,
    };
    let mut held = Vec::new();
    for i in 0..PROBE_MAX {
        let w = Watch {
            label: "probe".into(),
            addr: &PROBE[i as usize] as *const u64 as u64,
            len: 8,
            access: Access::Write,
        };
        match sys::perf_event_open(&attr(&w, &cfg), -1, cpu as i32) {
            Ok(fd) => held.push(fd),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(err) if held.is_empty() => {
                return Err(OpenError {
                    cpu,
                    stage: Stage::Open,
                    err,
                })
            }
            Err(_) => break,
        }
    }
    Ok(held.len() as u32)
}
