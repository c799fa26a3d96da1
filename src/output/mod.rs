//! What a session reports, independent of how it is printed: the header, the `# armed` mark, each hit,
//! stream events (lost records, CPUs going away and coming back) and the final summary. Printers implement
//! [`Output`]; they format from parsed records only, so they are tested offline.

pub mod ftrace;

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::time::Duration;

use ksymwatch_symbols::SymbolTable;

use crate::record::Sample;
use crate::watch::Watch;

/// What the header says about the session.
pub struct Header<'a> {
    pub watches: &'a [Watch],
    pub cpus: &'a BTreeSet<u32>,
    /// Which symbol source answered (`kallsyms /proc/kallsyms`).
    pub source: &'a str,
}

/// One hit, ready to print.
pub struct Hit<'a> {
    pub sample: &'a Sample,
    pub watch: &'a Watch,
    pub comm: &'a str,
    pub symbols: &'a SymbolTable,
}

/// Things that happen to the stream itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// The kernel dropped records on this CPU's ring.
    Lost {
        cpu: u32,
        count: u64,
    },
    CpuOffline {
        cpu: u32,
    },
    /// Armed a fresh event on a CPU that came online; `after_uevent_ns` is how long after its uevent, `open_ns`
    /// how much of that the kernel spent in perf_event_open (a CPU-bound breakpoint open after a quiet spell
    /// waits out an RCU grace period there, ~8-15 ms on the reference VM).
    CpuOnline {
        cpu: u32,
        after_uevent_ns: Option<u64>,
        open_ns: u64,
    },
    /// A CPU came online but could not be armed; retried on the next reconcile.
    CpuArmFailed {
        cpu: u32,
        reason: String,
    },
}

/// Why the session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    Count,
    Signal(u32),
    BrokenPipe,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Duration => f.write_str("duration reached"),
            StopReason::Count => f.write_str("count reached"),
            StopReason::Signal(n) => write!(f, "signal {}", signal_name(*n)),
            StopReason::BrokenPipe => f.write_str("output closed"),
        }
    }
}

fn signal_name(n: u32) -> &'static str {
    match n as i32 {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "other",
    }
}

/// Totals at the end of a session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub hits_by_cpu: BTreeMap<u32, u64>,
    pub lost_by_cpu: BTreeMap<u32, u64>,
    pub elapsed: Duration,
    pub stop: Option<StopReason>,
}

impl Summary {
    pub fn hits(&self) -> u64 {
        self.hits_by_cpu.values().sum()
    }

    pub fn lost(&self) -> u64 {
        self.lost_by_cpu.values().sum()
    }
}

pub trait Output {
    fn header(&mut self, header: &Header<'_>) -> io::Result<()>;
    /// Every breakpoint is enabled; printers flush this at once, since scripts wait for it.
    fn armed(&mut self, events: usize, cpus: &BTreeSet<u32>, time_ns: u64) -> io::Result<()>;
    fn hit(&mut self, hit: &Hit<'_>) -> io::Result<()>;
    fn event(&mut self, event: &StreamEvent, time_ns: u64) -> io::Result<()>;
    fn flush(&mut self) -> io::Result<()>;
    fn finish(&mut self, summary: &Summary) -> io::Result<()>;
}

/// `secs.usecs`, ftrace's timestamp form.
pub fn format_time(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1000)
}
