//! `--json`: one JSON object per line (NDJSON) on stdout for the header, the armed mark, every hit, every
//! stream event and the final summary, each tagged with `type`. The schema is this file's record types and is
//! documented in docs/outputs.md ("JSON output"); addresses are `"0x…"` strings because 64-bit kernel
//! addresses do not survive a trip through an IEEE double (jq, JavaScript). Times are `time_ns`,
//! CLOCK_MONOTONIC nanoseconds (time since boot, not counting suspend), the clock the kernel stamps samples
//! with. A process watch's hits carry `value` (the watched bytes when the hit was drained, `"0x2a"`, or `null`
//! when unreadable); a system-wide watch's hits have no such field. With `--value` every hit has `value` and
//! `old` (the store's own value and the one before it, `null` when unknown), and the `--summary` record
//! `by_value`.

use std::collections::BTreeSet;
use std::io::{self, Write};

use serde::{Serialize, Serializer};

use super::numbers::{push_dec, push_hex};
use crate::model::watch::Watch;

use super::{
    arm_failed_note, summary_line, DumpTrigger, Header, Hit, Output, ResolvedFrame, StopReason,
    StreamEvent, Summary, Value, ValueFrom,
};

/// Bumped when a field changes meaning or goes away; new fields do not bump it.
pub const SCHEMA_VERSION: u32 = 1;

/// An address as a `0x` hex string.
#[derive(Debug, Clone, Copy)]
pub struct Hex(pub u64);

impl Serialize for Hex {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("0x{:x}", self.0))
    }
}

#[derive(Serialize)]
pub struct Frame<'a> {
    pub addr: Hex,
    pub kernel: bool,
    pub sym: Option<&'a str>,
    pub off: u64,
    pub size: Option<u64>,
    pub module: Option<&'a str>,
    pub binary: Option<&'a str>,
    /// `--lines`: `file:line` of the frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<&'a str>,
    /// `--lines`: functions inlined at this frame, innermost first, as `func (file:line) [inlined]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inlined: Option<&'a [String]>,
    /// A user frame with no name and no binary: why (e.g. the process's maps could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unnamed: Option<&'a str>,
}

impl<'a> From<&'a ResolvedFrame> for Frame<'a> {
    fn from(f: &'a ResolvedFrame) -> Self {
        Frame {
            addr: Hex(f.addr),
            kernel: f.kernel,
            sym: f.sym.as_deref(),
            off: f.off,
            size: f.size,
            module: f.module.as_deref(),
            binary: f.binary.as_deref(),
            line: f.line.as_ref().map(|l| l.location.as_str()),
            inlined: f
                .line
                .as_ref()
                .map(|l| l.inlined.as_slice())
                .filter(|i| !i.is_empty()),
            unnamed: unnamed(f),
        }
    }
}

#[derive(Serialize)]
pub struct Target<'a> {
    pub name: &'a str,
    pub addr: Hex,
    pub len: u8,
    pub access: &'a str,
    /// A per-CPU variable: where its copies are and which one each CPU watches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percpu: Option<PerCpuCopies>,
}

impl<'a> Target<'a> {
    pub fn of(w: &'a Watch) -> Target<'a> {
        Target {
            name: &w.label,
            addr: Hex(w.addr),
            len: w.len,
            access: w.access.letters(),
            percpu: w.per_cpu.as_ref().map(|p| PerCpuCopies {
                offset: Hex(p.offset),
                copy: p.copy,
                copies: p
                    .bases
                    .iter()
                    .map(|(&cpu, &base)| CpuCopy {
                        cpu,
                        addr: Hex(base.wrapping_add(p.offset)),
                    })
                    .collect(),
            }),
        }
    }
}

/// A per-CPU target's copies (`Target::percpu`).
#[derive(Serialize)]
pub struct PerCpuCopies {
    /// The watched bytes' offset in the per-CPU area.
    pub offset: Hex,
    /// `--percpu-cpu N`: every CPU watches CPU N's copy; `null`: each CPU its own.
    pub copy: Option<u32>,
    pub copies: Vec<CpuCopy>,
}

#[derive(Serialize)]
pub struct CpuCopy {
    pub cpu: u32,
    pub addr: Hex,
}

#[derive(Serialize)]
pub struct CpuCount {
    pub cpu: u32,
    pub count: u64,
}

/// A stop reason as a word; `signal` names the signal separately.
fn stop_word(stop: Option<StopReason>) -> (&'static str, Option<&'static str>) {
    match stop {
        Some(StopReason::Duration) => ("duration", None),
        Some(StopReason::Count) => ("count", None),
        Some(StopReason::Signal(n)) => ("signal", Some(super::signal_name(n))),
        Some(StopReason::BrokenPipe) => ("output_closed", None),
        Some(StopReason::StrictHotplug(_)) => ("strict_hotplug", None),
        Some(StopReason::Exited) => ("exited", None),
        Some(StopReason::ModuleUnloaded) => ("module_unloaded", None),
        None => ("unknown", None),
    }
}

#[derive(Serialize)]
pub struct ChainRecord<'a> {
    pub count: u64,
    pub target: &'a str,
    pub target_index: usize,
    pub comms: Vec<CommCount<'a>>,
    pub chain: Vec<Frame<'a>>,
}

#[derive(Serialize)]
pub struct CommCount<'a> {
    pub comm: &'a str,
    pub count: u64,
}

#[derive(Serialize)]
pub struct IpRecord<'a> {
    pub count: u64,
    pub ip: Frame<'a>,
}

/// `--value`: one target's values written, most frequent first.
#[derive(Serialize)]
pub struct ValuesRecord<'a> {
    pub target: &'a str,
    pub target_index: usize,
    /// Empty when `overflowed`.
    pub values: Vec<ValueCount>,
    /// More than [`super::summary::VALUES_MAX`] distinct values were written: they were not counted.
    pub overflowed: bool,
}

#[derive(Serialize)]
pub struct ValueCount {
    pub value: Hex,
    pub count: u64,
}

#[derive(Serialize)]
pub struct SummaryRecord<'a> {
    pub hits: u64,
    pub lost: u64,
    pub filtered: u64,
    /// Of `filtered`: traps of other processes at a process watch's address.
    pub filtered_other_process: u64,
    /// `--value` hits whose memory at the trap differed from the instruction's value.
    pub raced: u64,
    /// `--if` hits kept on the memory read at the trap that the instruction's value would not pass.
    pub condition_disagreed: u64,
    pub elapsed_s: f64,
    pub stop: &'static str,
    pub signal: Option<&'static str>,
    pub hits_by_cpu: Vec<CpuCount>,
    pub lost_by_cpu: Vec<CpuCount>,
    /// Hits the stream could not print (a full ring), by CPU; with `from_totals` they are in every count.
    pub unprinted: u64,
    pub unprinted_by_cpu: Vec<CpuCount>,
    /// The counts are the kernel's totals of every kept hit, not the printed hits.
    pub from_totals: bool,
    /// Nanoseconds each CPU ran unwatched after coming online (`count`), before its breakpoint was armed.
    pub unwatched_ns_by_cpu: Vec<CpuCount>,
    /// `--summary` only: every unique chain, most frequent first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chains: Option<Vec<ChainRecord<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_ip: Option<Vec<IpRecord<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_comm: Option<Vec<CommCount<'a>>>,
    /// `--summary`: hits by writing thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_thread: Option<Vec<ThreadRecord<'a>>>,
    /// `--summary` with `--value`: the values written, per target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_value: Option<Vec<ValuesRecord<'a>>>,
    /// `--on`: what became of the objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<ObjectsRecord>,
}

/// One writing thread's hits in the summary record.
#[derive(Serialize)]
pub struct ThreadRecord<'a> {
    pub pid: u32,
    pub tid: u32,
    pub comm: &'a str,
    pub count: u64,
}

/// `--on`'s books in the summary record.
#[derive(Serialize)]
pub struct ObjectsRecord {
    pub seen: u64,
    pub armed: u64,
    pub skipped: u64,
    pub evicted: u64,
    pub freed: u64,
    /// Freed before they could be armed.
    pub freed_unarmed: u64,
    /// Writes after an armed object's free, before the tracer heard of it: not reported.
    pub after_free: u64,
    pub lost: u64,
    /// Allocation to armed, over the armed objects (`null` when none was).
    pub gap_median_ns: Option<u64>,
    pub gap_p99_ns: Option<u64>,
    /// Each armed object: its number, address and hits while armed.
    pub by_object: Vec<ObjectHits>,
}

#[derive(Serialize)]
pub struct ObjectHits {
    pub index: u64,
    pub addr: Hex,
    pub hits: u64,
}

impl ObjectsRecord {
    fn of(t: &crate::report::ObjectTally) -> ObjectsRecord {
        ObjectsRecord {
            seen: t.seen,
            armed: t.armed,
            skipped: t.skipped,
            evicted: t.evicted,
            freed: t.freed,
            freed_unarmed: t.freed_unarmed,
            after_free: t.after_free,
            lost: t.lost,
            gap_median_ns: t.gap(0.5),
            gap_p99_ns: t.gap(0.99),
            by_object: t
                .objects
                .iter()
                .map(|&(index, addr, hits)| ObjectHits {
                    index,
                    addr: Hex(addr),
                    hits,
                })
                .collect(),
        }
    }
}

impl<'a> SummaryRecord<'a> {
    pub fn new(s: &'a Summary) -> Self {
        let (stop, signal) = stop_word(s.stop);
        let counts = |m: &std::collections::BTreeMap<u32, u64>| {
            m.iter()
                .map(|(&cpu, &count)| CpuCount { cpu, count })
                .collect()
        };
        SummaryRecord {
            hits: s.hits(),
            lost: s.lost(),
            filtered: s.filtered,
            filtered_other_process: s.filtered_other_process,
            raced: s.raced,
            condition_disagreed: s.condition_disagreed,
            elapsed_s: s.elapsed.as_secs_f64(),
            stop,
            signal,
            hits_by_cpu: counts(&s.hits_by_cpu),
            lost_by_cpu: counts(&s.lost_by_cpu),
            unprinted: s.unprinted(),
            unprinted_by_cpu: counts(&s.unprinted_by_cpu),
            from_totals: s.from_totals,
            unwatched_ns_by_cpu: counts(&s.unwatched_ns_by_cpu),
            objects: s.objects.as_ref().map(ObjectsRecord::of),
            chains: s.tally.as_ref().map(|t| {
                t.chains()
                    .into_iter()
                    .map(|c| ChainRecord {
                        count: c.count,
                        target: &c.target_name,
                        target_index: c.target,
                        comms: c
                            .top_comms()
                            .into_iter()
                            .map(|(comm, count)| CommCount { comm, count })
                            .collect(),
                        chain: c.frames.iter().map(Frame::from).collect(),
                    })
                    .collect()
            }),
            by_ip: s.tally.as_ref().map(|t| {
                t.by_ip()
                    .into_iter()
                    .map(|(_, c)| IpRecord {
                        count: c.count,
                        ip: (&c.ip).into(),
                    })
                    .collect()
            }),
            by_thread: s.tally.as_ref().map(|t| {
                t.by_thread()
                    .into_iter()
                    .map(|t| ThreadRecord {
                        pid: t.pid,
                        tid: t.tid,
                        comm: t.comm,
                        count: t.count,
                    })
                    .collect()
            }),
            by_comm: s.tally.as_ref().map(|t| {
                t.by_comm()
                    .into_iter()
                    .map(|(comm, count)| CommCount { comm, count })
                    .collect()
            }),
            by_value: s
                .tally
                .as_ref()
                .map(|t| t.by_value())
                .filter(|v| !v.is_empty())
                .map(|tables| {
                    tables
                        .into_iter()
                        .map(|t| ValuesRecord {
                            target: &t.target_name,
                            target_index: t.target,
                            values: t
                                .values()
                                .into_iter()
                                .map(|(value, count)| ValueCount {
                                    value: Hex(value),
                                    count,
                                })
                                .collect(),
                            overflowed: t.overflowed(),
                        })
                        .collect()
                }),
        }
    }
}

/// Every line's shape, told apart by `type`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record<'a> {
    Header {
        version: u32,
        targets: Vec<Target<'a>>,
        cpus: Vec<u32>,
        symbols: &'a str,
        /// A process watch: the watched processes and the threads armed at the start.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pids: Vec<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        threads: Option<usize>,
        /// `--value`/`--if`: hits carry `value` and `old`, read in the kernel. Absent otherwise.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        value: bool,
        /// `--if`: the condition, as the parser spells it back. Absent otherwise.
        #[serde(rename = "if", skip_serializing_if = "Option::is_none")]
        condition: Option<&'a str>,
        /// `--on`: the objects line (`# objects: ...` without the `# `); `targets` are then its slots.
        #[serde(skip_serializing_if = "Option::is_none")]
        objects: Option<&'a str>,
    },
    Armed {
        time_ns: u64,
        events: usize,
        cpus: Vec<u32>,
        /// A process watch: how many processes, and their threads at the start.
        #[serde(skip_serializing_if = "Option::is_none")]
        processes: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        threads: Option<usize>,
    },
    /// The schema of a hit; the per-hit path writes it with [`push_hit`] instead, which the tests hold to
    /// exactly serde's bytes for this variant.
    #[cfg_attr(not(test), allow(dead_code))]
    Hit {
        time_ns: u64,
        cpu: u32,
        pid: u32,
        tid: u32,
        comm: &'a str,
        target: &'a str,
        target_index: usize,
        /// A per-CPU target: whose copy was hit.
        #[serde(skip_serializing_if = "Option::is_none")]
        copy: Option<u32>,
        /// The data address the kernel reported.
        addr: Hex,
        len: u8,
        access: &'a str,
        /// Where the writer ran when it touched the target.
        in_kernel: bool,
        ip: Frame<'a>,
        chain: Vec<Frame<'a>>,
        /// A process watch: the watched range as read when the hit was drained, the `len`-byte
        /// little-endian integer as a hex string (64-bit values do not survive a double either), `null`
        /// when the process could not be read. Absent for a system-wide watch.
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<Option<Hex>>,
        /// `--value`/`--if`: what the range held before this store (the previous hit's value), `null` when
        /// unknown (the first hit). Absent without `--value`.
        #[serde(skip_serializing_if = "Option::is_none")]
        old: Option<Option<Hex>>,
        /// `--value` with a known value: `insn` (from the store's instruction and registers, exact) or
        /// `memory` (read at the trap: a read-modify-write or an instruction not decoded).
        #[serde(skip_serializing_if = "Option::is_none")]
        value_from: Option<&'static str>,
        /// `unknown` with `"value_from": "memory"` when memory was used because where the store's
        /// instruction starts is not known (see [`ValueFrom::NoStart`]).
        #[serde(skip_serializing_if = "Option::is_none")]
        insn_start: Option<&'static str>,
        /// The value memory held at the trap when it differed from the instruction's: another CPU stored
        /// in between.
        #[serde(skip_serializing_if = "Option::is_none")]
        raced: Option<Hex>,
    },
    Lost {
        time_ns: u64,
        cpu: u32,
        count: u64,
    },
    CpuOffline {
        time_ns: u64,
        cpu: u32,
    },
    CpuOnline {
        time_ns: u64,
        cpu: u32,
        /// How long after the CPU's uevent the fresh event was enabled (absent for a timer reconcile).
        after_uevent_ns: Option<u64>,
        /// How much of that the kernel spent inside perf_event_open.
        open_ns: u64,
    },
    CpuArmFailed {
        time_ns: u64,
        cpu: u32,
        reason: &'a str,
        /// The refusal by name (`kernel_breakpoints_refused`, `no_free_debug_register`, ...).
        kind: &'a str,
    },
    /// `--control` moved a target: hits before this record are of the old watch, after it of `target`.
    Watch {
        time_ns: u64,
        target: Target<'a>,
        target_index: usize,
        /// Threads (a process watch) or CPUs (system-wide) the watch now covers.
        #[serde(skip_serializing_if = "Option::is_none")]
        threads: Option<usize>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cpus: Option<usize>,
        took_ns: u64,
        /// False when moved while off: the watch stays off until `on`.
        enabled: bool,
    },
    WatchOff {
        time_ns: u64,
    },
    WatchOn {
        time_ns: u64,
    },
    /// A `--control` line that was not applied; the watch is unchanged.
    ControlRefused {
        time_ns: u64,
        command: &'a str,
        reason: &'a str,
        watching: &'a str,
        /// Why by name: `bad_command`, `bad_target`, or the kernel's refusal's kind.
        kind: &'a str,
    },
    /// Arming was refused: the only record of a run that armed nothing (the same line is on stderr).
    Error {
        kind: &'a str,
        reason: &'a str,
        exit_code: i32,
    },
    /// A kernel module was unloaded; `targets` (labels) were in it and are no longer watched.
    ModuleUnloaded {
        time_ns: u64,
        module: &'a str,
        targets: &'a [String],
    },
    /// A watched process exec'd `comm`: its watch ended there.
    ProcessExec {
        time_ns: u64,
        pid: u32,
        comm: &'a str,
    },
    /// `--on`: an object is watched from now on (see [`StreamEvent::ObjectArmed`]).
    ObjectArmed {
        time_ns: u64,
        index: u64,
        addr: Hex,
        slot: usize,
        gap_ns: u64,
        pid: u32,
        comm: &'a str,
        evicted: Option<u64>,
    },
    /// `--on`: an armed object was freed.
    ObjectFreed {
        time_ns: u64,
        index: u64,
        addr: Hex,
        hits: u64,
    },
    /// `--last`: a trigger fired; `hits` kept hits follow, then for a `hit` trigger the hit that fired it.
    Dump {
        time_ns: u64,
        /// `hit`, `signal` or `tracepoint`.
        trigger: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        condition: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tracepoint: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cpu: Option<u32>,
        hits: usize,
    },
    Summary(SummaryRecord<'a>),
}

impl<'a> Record<'a> {
    #[cfg(test)]
    pub fn hit(h: &'a Hit<'a>) -> Record<'a> {
        let s = h.sample;
        Record::Hit {
            time_ns: s.time,
            cpu: s.cpu,
            pid: s.pid,
            tid: s.tid,
            comm: h.comm,
            target: &h.watch.label,
            target_index: h.watch_index,
            copy: h.watch.copy_at(s.addr),
            addr: Hex(s.addr),
            len: h.watch.len,
            access: h.watch.access.letters(),
            in_kernel: s.in_kernel(),
            ip: h.ip.into(),
            chain: h.chain.iter().map(Frame::from).collect(),
            value: match h.value {
                Value::NotRead => None,
                Value::Unreadable => Some(None),
                Value::Read(v) => Some(Some(Hex(v))),
                Value::Written { value, .. } => Some(value.map(Hex)),
            },
            old: match h.value {
                Value::Written { old, .. } => Some(old.map(Hex)),
                _ => None,
            },
            value_from: match h.value {
                Value::Written {
                    value: Some(_),
                    from: ValueFrom::Memory | ValueFrom::NoStart,
                    ..
                } => Some("memory"),
                Value::Written { value: Some(_), .. } => Some("insn"),
                _ => None,
            },
            insn_start: match h.value {
                Value::Written {
                    value: Some(_),
                    from: ValueFrom::NoStart,
                    ..
                } => Some("unknown"),
                _ => None,
            },
            raced: match h.value {
                Value::Written {
                    value: Some(_),
                    from: ValueFrom::Raced { memory },
                    ..
                } => Some(Hex(memory)),
                _ => None,
            },
        }
    }

    pub fn header(h: &'a Header<'a>) -> Record<'a> {
        Record::Header {
            version: SCHEMA_VERSION,
            targets: h.watches.iter().map(Target::of).collect(),
            cpus: h.cpus.iter().copied().collect(),
            symbols: h.source,
            pids: h.processes.iter().map(|(pid, _)| *pid).collect(),
            threads: (!h.processes.is_empty()).then_some(h.threads),
            value: h.values,
            condition: h.condition,
            objects: h.objects.map(|l| l.trim_start_matches("# ")),
        }
    }

    /// `watched`: a process watch's processes and threads at the start, from [`watched`].
    pub fn armed(
        events: usize,
        cpus: &BTreeSet<u32>,
        time_ns: u64,
        watched: Option<(usize, usize)>,
    ) -> Record<'a> {
        Record::Armed {
            time_ns,
            events,
            cpus: cpus.iter().copied().collect(),
            processes: watched.map(|(p, _)| p),
            threads: watched.map(|(_, t)| t),
        }
    }

    pub fn event(e: &'a StreamEvent, time_ns: u64) -> Record<'a> {
        match e {
            StreamEvent::Lost { cpu, count } => Record::Lost {
                time_ns,
                cpu: *cpu,
                count: *count,
            },
            StreamEvent::CpuOffline { cpu } => Record::CpuOffline { time_ns, cpu: *cpu },
            StreamEvent::CpuOnline {
                cpu,
                after_uevent_ns,
                open_ns,
            } => Record::CpuOnline {
                time_ns,
                cpu: *cpu,
                after_uevent_ns: *after_uevent_ns,
                open_ns: *open_ns,
            },
            StreamEvent::CpuArmFailed { cpu, reason, kind } => Record::CpuArmFailed {
                time_ns,
                cpu: *cpu,
                reason,
                kind,
            },
            StreamEvent::Retargeted {
                index,
                watch,
                covered,
                took_ns,
                enabled,
            } => Record::Watch {
                time_ns,
                target: Target::of(watch),
                target_index: *index,
                threads: covered.threads(),
                cpus: covered.cpus(),
                took_ns: *took_ns,
                enabled: *enabled,
            },
            StreamEvent::Switched { on: true } => Record::WatchOn { time_ns },
            StreamEvent::Switched { on: false } => Record::WatchOff { time_ns },
            StreamEvent::ControlRefused {
                command,
                reason,
                watching,
                kind,
            } => Record::ControlRefused {
                time_ns,
                command,
                reason,
                watching,
                kind,
            },
            StreamEvent::ModuleUnloaded { module, targets } => Record::ModuleUnloaded {
                time_ns,
                module,
                targets,
            },
            StreamEvent::ProcessExec { pid, comm } => Record::ProcessExec {
                time_ns,
                pid: *pid,
                comm,
            },
            StreamEvent::ObjectArmed {
                index,
                addr,
                slot,
                gap_ns,
                pid,
                comm,
                evicted,
            } => Record::ObjectArmed {
                time_ns,
                index: *index,
                addr: Hex(*addr),
                slot: *slot,
                gap_ns: *gap_ns,
                pid: *pid,
                comm,
                evicted: *evicted,
            },
            StreamEvent::ObjectFreed { index, addr, hits } => Record::ObjectFreed {
                time_ns,
                index: *index,
                addr: Hex(*addr),
                hits: *hits,
            },
            StreamEvent::Dump { trigger, hits } => Record::dump(time_ns, trigger, *hits),
        }
    }

    /// A `dump` record: what fired it (a hit's condition, or a tracepoint and its CPU) and the hits that
    /// follow.
    fn dump(time_ns: u64, trigger: &'a DumpTrigger, hits: usize) -> Record<'a> {
        Record::Dump {
            time_ns,
            trigger: trigger.kind(),
            condition: match trigger {
                DumpTrigger::Hit { condition } => Some(condition),
                _ => None,
            },
            tracepoint: match trigger {
                DumpTrigger::Tracepoint { name, .. } => Some(name),
                _ => None,
            },
            cpu: match trigger {
                DumpTrigger::Tracepoint { cpu, .. } => Some(*cpu),
                _ => None,
            },
            hits,
        }
    }
}

/// A process watch's processes and threads at the start, which the `armed` record repeats; `None` for a
/// system-wide watch.
pub fn watched(h: &Header<'_>) -> Option<(usize, usize)> {
    (!h.processes.is_empty()).then_some((h.processes.len(), h.threads))
}

/// Writes one record and its newline.
pub fn write_record(w: &mut impl Write, r: &Record<'_>) -> io::Result<()> {
    serde_json::to_writer(&mut *w, r)?;
    w.write_all(b"\n")
}

/// Appends `s` as a JSON string, escaped byte for byte as serde_json escapes it (`"`, `\\` and the
/// control characters; everything else, non-ASCII included, as is).
pub(crate) fn push_string(out: &mut String, s: &str) {
    out.push('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let escaped = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        plain = i + 1;
        if escaped.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789abcdef"[usize::from(b & 0xf)]));
        } else {
            out.push_str(escaped);
        }
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

fn push_opt_string(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_string(out, s),
        None => out.push_str("null"),
    }
}

/// A [`Hex`] as JSON.
fn push_hex_string(out: &mut String, v: u64) {
    out.push_str("\"0x");
    push_hex(out, v);
    out.push('"');
}

/// Why `f` has no name, where it is a user frame that no mapping named.
fn unnamed(f: &ResolvedFrame) -> Option<&'static str> {
    f.unnamed
        .filter(|_| !f.kernel && f.sym.is_none() && f.binary.is_none())
}

/// A [`Frame`] as serde writes it.
fn push_frame(out: &mut String, f: &ResolvedFrame) {
    out.push_str("{\"addr\":");
    push_hex_string(out, f.addr);
    out.push_str(if f.kernel {
        ",\"kernel\":true,\"sym\":"
    } else {
        ",\"kernel\":false,\"sym\":"
    });
    push_opt_string(out, f.sym.as_deref());
    out.push_str(",\"off\":");
    push_dec(out, f.off);
    out.push_str(",\"size\":");
    match f.size {
        Some(n) => push_dec(out, n),
        None => out.push_str("null"),
    }
    out.push_str(",\"module\":");
    push_opt_string(out, f.module.as_deref());
    out.push_str(",\"binary\":");
    push_opt_string(out, f.binary.as_deref());
    if let Some(line) = &f.line {
        out.push_str(",\"line\":");
        push_string(out, &line.location);
        if !line.inlined.is_empty() {
            out.push_str(",\"inlined\":");
            push_array(out, &line.inlined, |out, s| push_string(out, s));
        }
    }
    if let Some(why) = unnamed(f) {
        out.push_str(",\"unnamed\":");
        push_string(out, why);
    }
    out.push('}');
}

/// `"ip":{...},"chain":[...]` of a hit.
fn push_ip_chain(out: &mut String, hit: &Hit<'_>) {
    out.push_str("\"ip\":");
    push_frame(out, hit.ip);
    out.push_str(",\"chain\":");
    push_array(out, hit.chain, push_frame);
}

/// `[a,b,...]`, each item written by `item`.
fn push_array<T>(out: &mut String, items: &[T], mut item: impl FnMut(&mut String, &T)) {
    out.push('[');
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        item(out, x);
    }
    out.push(']');
}

/// A hit record ([`Record::Hit`]) without its newline, the bytes serde_json gives for it, written without
/// serde or `core::fmt`: a hit is the one record written at flood rates. A chain seen before (`rendered`)
/// is copied as it was spelled the first time.
pub fn push_hit(out: &mut String, hit: &Hit<'_>) {
    let s = hit.sample;
    out.push_str("{\"type\":\"hit\",\"time_ns\":");
    push_dec(out, s.time);
    out.push_str(",\"cpu\":");
    push_dec(out, u64::from(s.cpu));
    out.push_str(",\"pid\":");
    push_dec(out, u64::from(s.pid));
    out.push_str(",\"tid\":");
    push_dec(out, u64::from(s.tid));
    out.push_str(",\"comm\":");
    push_string(out, hit.comm);
    out.push_str(",\"target\":");
    push_string(out, &hit.watch.label);
    out.push_str(",\"target_index\":");
    push_dec(out, hit.watch_index as u64);
    if let Some(cpu) = hit.watch.copy_at(s.addr) {
        out.push_str(",\"copy\":");
        push_dec(out, u64::from(cpu));
    }
    out.push_str(",\"addr\":");
    push_hex_string(out, s.addr);
    out.push_str(",\"len\":");
    push_dec(out, u64::from(hit.watch.len));
    out.push_str(",\"access\":");
    push_string(out, hit.watch.access.letters());
    out.push_str(if s.in_kernel() {
        ",\"in_kernel\":true,"
    } else {
        ",\"in_kernel\":false,"
    });
    match hit.rendered {
        Some(r) => out.push_str(r.json.get_or_init(|| {
            let mut text = String::new();
            push_ip_chain(&mut text, hit);
            text
        })),
        None => push_ip_chain(out, hit),
    }
    match hit.value {
        Value::NotRead => {}
        Value::Unreadable => out.push_str(",\"value\":null"),
        Value::Read(v) => {
            out.push_str(",\"value\":");
            push_hex_string(out, v);
        }
        Value::Written { value, old, from } => {
            for (key, v) in [(",\"value\":", value), (",\"old\":", old)] {
                out.push_str(key);
                match v {
                    Some(v) => push_hex_string(out, v),
                    None => out.push_str("null"),
                }
            }
            if value.is_some() {
                match from {
                    ValueFrom::Insn => out.push_str(",\"value_from\":\"insn\""),
                    ValueFrom::Raced { memory } => {
                        out.push_str(",\"value_from\":\"insn\",\"raced\":");
                        push_hex_string(out, memory);
                    }
                    ValueFrom::Memory => out.push_str(",\"value_from\":\"memory\""),
                    ValueFrom::NoStart => {
                        out.push_str(",\"value_from\":\"memory\",\"insn_start\":\"unknown\"")
                    }
                }
            }
        }
    }
    out.push('}');
}

pub struct Json<W: Write, E: Write> {
    out: W,
    err: E,
    /// One hit's line, built here and written at once; reused so a hit allocates nothing.
    line: String,
    /// A process watch's processes and threads at the start, from the header, for the `armed` record.
    watched: Option<(usize, usize)>,
}

impl<W: Write, E: Write> Json<W, E> {
    /// Records go to `out`. `err` gets what a person watching should see: a CPU that could not be armed,
    /// and the same one-line summary as in text mode, so stdout stays pure NDJSON.
    pub fn new(out: W, err: E) -> Self {
        Json {
            out,
            err,
            line: String::new(),
            watched: None,
        }
    }

    #[cfg(test)]
    pub fn into_inner(self) -> (W, E) {
        (self.out, self.err)
    }
}

impl<W: Write, E: Write> Output for Json<W, E> {
    fn header(&mut self, h: &Header<'_>) -> io::Result<()> {
        self.watched = watched(h);
        write_record(&mut self.out, &Record::header(h))
    }

    fn armed(&mut self, events: usize, cpus: &BTreeSet<u32>, time_ns: u64) -> io::Result<()> {
        write_record(
            &mut self.out,
            &Record::armed(events, cpus, time_ns, self.watched),
        )?;
        self.out.flush()
    }

    fn refused(&mut self, kind: &str, reason: &str, exit_code: i32) -> io::Result<()> {
        let r = Record::Error {
            kind,
            reason,
            exit_code,
        };
        write_record(&mut self.out, &r)?;
        self.out.flush()
    }

    fn hit(&mut self, hit: &Hit<'_>) -> io::Result<()> {
        self.line.clear();
        push_hit(&mut self.line, hit);
        self.line.push('\n');
        self.out.write_all(self.line.as_bytes())
    }

    fn event(&mut self, event: &StreamEvent, time_ns: u64) -> io::Result<()> {
        write_record(&mut self.out, &Record::event(event, time_ns))?;
        match event {
            StreamEvent::CpuArmFailed { cpu, reason, .. } => {
                arm_failed_note(&mut self.err, *cpu, reason)
            }
            StreamEvent::ControlRefused { .. } => {
                let text = event.control_text().unwrap_or_default();
                writeln!(self.err, "ksymwatch: {text}")
            }
            // A script waits for the acknowledgement before its next step.
            StreamEvent::Retargeted { .. } | StreamEvent::Switched { .. } => self.out.flush(),
            _ => Ok(()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn finish(&mut self, summary: &Summary) -> io::Result<()> {
        let written = write_record(&mut self.out, &Record::Summary(SummaryRecord::new(summary)))
            .and_then(|_| self.out.flush());
        summary_line(&mut self.err, summary)?;
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::watch::Access;
    use crate::perf::record::encode;
    use crate::report::testutil::{each_hit, each_value_of_a_user_store, sample, table, watch};
    use crate::report::Covered;
    use crate::report::Value as HitValue;
    use serde_json::Value;

    fn lines(bytes: Vec<u8>) -> Vec<Value> {
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn every_record_is_one_tagged_line() {
        let sample = sample(
            0xffffffff81000077,
            1234,
            1235,
            412_123_456_789,
            0x7ffd0000,
            1,
            &[
                encode::KERNEL,
                0xffffffff81000077,
                0xffffffff810001bb,
                encode::USER,
                0x401000,
            ],
        );
        let watches = [watch("target_var", 0x7ffd0000, Access::Write)];
        let cpus: BTreeSet<u32> = [0, 1].into();
        let mut p = Json::new(Vec::new(), Vec::new());
        p.header(&Header {
            watches: &watches,
            cpus: &cpus,
            source: "kallsyms fixture",
            processes: &[],
            threads: 0,
            values: false,
            condition: None,
            objects: None,
        })
        .unwrap();
        p.armed(2, &cpus, 5).unwrap();
        each_hit(&table(), &watches, &[(sample, "reader", 0)], |hit| {
            p.hit(hit).unwrap()
        });
        p.event(&StreamEvent::Lost { cpu: 1, count: 3 }, 6).unwrap();
        p.event(
            &StreamEvent::CpuArmFailed {
                cpu: 1,
                reason: "busy".into(),
                kind: "busy",
            },
            7,
        )
        .unwrap();
        let mut summary = Summary::default();
        summary.hits_by_cpu.insert(1, 1);
        summary.stop = Some(StopReason::Signal(libc::SIGINT as u32));
        p.finish(&summary).unwrap();
        let (out, err) = p.into_inner();
        let v = lines(out);
        let types: Vec<&str> = v.iter().map(|r| r["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "header",
                "armed",
                "hit",
                "lost",
                "cpu_arm_failed",
                "summary"
            ]
        );
        assert_eq!(v[0]["targets"][0]["addr"], "0x7ffd0000");
        let hit = &v[2];
        assert_eq!(hit["time_ns"], 412_123_456_789u64);
        assert_eq!(
            (hit["pid"].as_u64(), hit["tid"].as_u64()),
            (Some(1234), Some(1235))
        );
        assert_eq!(hit["target"], "target_var");
        assert_eq!(hit["ip"]["sym"], "read_zero");
        assert_eq!(hit["ip"]["addr"], "0xffffffff81000077");
        assert_eq!(hit["chain"][1]["sym"], "vfs_read");
        assert_eq!(hit["chain"][1]["off"], 0xbb);
        assert_eq!(hit["chain"][2]["kernel"], false);
        assert_eq!(hit["chain"][2]["sym"], Value::Null);
        assert_eq!(v[4]["kind"], "busy");
        assert_eq!(v[5]["stop"], "signal");
        assert_eq!(v[5]["signal"], "SIGINT");
        assert_eq!(v[5]["hits_by_cpu"][0]["count"], 1);
        let err = String::from_utf8(err).unwrap();
        assert!(err.contains("could not be armed: busy"), "{err}");
        assert!(err.contains("ksymwatch: 1 hits (cpu1 1)"), "{err}");
    }

    /// `value`: a hex string of the watched integer (64-bit values intact), `null` when the process could
    /// not be read, absent for a system-wide watch's hit.
    #[test]
    fn a_process_hit_carries_its_value() {
        let mut p = Json::new(Vec::new(), Vec::new());
        let values = [
            HitValue::Read(0x2a),
            HitValue::Read(0xfedc_ba98_7654_3210),
            HitValue::Unreadable,
            HitValue::NotRead,
        ];
        each_value_of_a_user_store(&values, |hit| p.hit(hit).unwrap());
        let (out, _) = p.into_inner();
        let v = lines(out);
        assert_eq!(v[0]["value"], "0x2a");
        assert_eq!(v[1]["value"], "0xfedcba9876543210");
        assert_eq!(v[2]["value"], Value::Null);
        assert!(v[2].as_object().unwrap().contains_key("value"), "{}", v[2]);
        assert!(!v[3].as_object().unwrap().contains_key("value"), "{}", v[3]);
        assert!(v.iter().all(|h| h["type"] == "hit" && h["len"] == 8));
    }

    /// `--value`: `value` and `old` as hex strings, each `null` when unknown and never left out.
    #[test]
    fn a_value_hit_carries_value_and_old() {
        let mut p = Json::new(Vec::new(), Vec::new());
        let values = [
            HitValue::Written {
                value: Some(0x1f4),
                old: Some(0x1f3),
                from: ValueFrom::Insn,
            },
            HitValue::Written {
                value: Some(0xfedc_ba98_7654_3210),
                old: None,
                from: ValueFrom::Insn,
            },
            HitValue::Written {
                value: None,
                old: Some(0),
                from: ValueFrom::Insn,
            },
            HitValue::Written {
                value: None,
                old: None,
                from: ValueFrom::Insn,
            },
        ];
        each_value_of_a_user_store(&values, |hit| p.hit(hit).unwrap());
        let (out, _) = p.into_inner();
        let v = lines(out);
        let pairs: Vec<(&Value, &Value)> = v.iter().map(|h| (&h["value"], &h["old"])).collect();
        assert_eq!(
            pairs,
            [
                (&"0x1f4".into(), &"0x1f3".into()),
                (&"0xfedcba9876543210".into(), &Value::Null),
                (&Value::Null, &"0x0".into()),
                (&Value::Null, &Value::Null),
            ]
        );
        for h in &v {
            let h = h.as_object().unwrap();
            assert!(h.contains_key("value") && h.contains_key("old"), "{h:?}");
        }
        assert_eq!(v[0]["value_from"], "insn");
        assert!(
            v[2].get("value_from").is_none(),
            "an unknown value comes from nowhere"
        );
    }

    /// `value_from` says whether the value is the instruction's (exact) or memory's at the trap; `raced`
    /// is what memory held when it differed.
    #[test]
    fn a_value_hit_says_where_its_value_came_from() {
        let mut p = Json::new(Vec::new(), Vec::new());
        let values = [
            HitValue::Written {
                value: Some(1),
                old: None,
                from: ValueFrom::Memory,
            },
            HitValue::Written {
                value: Some(1),
                old: None,
                from: ValueFrom::Raced { memory: 7 },
            },
        ];
        each_value_of_a_user_store(&values, |hit| p.hit(hit).unwrap());
        let v = lines(p.into_inner().0);
        assert_eq!(
            (&v[0]["value_from"], v[0].get("raced")),
            (&"memory".into(), None)
        );
        assert_eq!(
            (&v[1]["value_from"], &v[1]["raced"]),
            (&"insn".into(), &"0x7".into())
        );
    }

    /// A plain process watch's hit has no `old`: only `--value` knows it.
    #[test]
    fn only_a_value_hit_has_old() {
        let mut p = Json::new(Vec::new(), Vec::new());
        let values = [HitValue::Read(1), HitValue::Unreadable, HitValue::NotRead];
        each_value_of_a_user_store(&values, |hit| p.hit(hit).unwrap());
        let (out, _) = p.into_inner();
        assert!(lines(out)
            .iter()
            .all(|h| !h.as_object().unwrap().contains_key("old")));
    }

    /// `--summary` with `--value`: `by_value`, one entry per target, most frequent first; absent without
    /// `--value`.
    #[test]
    fn the_summary_counts_values_written() {
        let record = |values: &[HitValue]| {
            let mut tally = crate::report::summary::Tally::default();
            each_value_of_a_user_store(values, |hit| tally.add(hit));
            let summary = Summary {
                tally: Some(tally),
                ..Summary::default()
            };
            let mut p = Json::new(Vec::new(), Vec::new());
            p.finish(&summary).unwrap();
            lines(p.into_inner().0).remove(0)
        };
        let w = |v| HitValue::Written {
            value: Some(v),
            old: None,
            from: ValueFrom::Insn,
        };
        let v = record(&[w(0x1f3), w(0x1f4), w(0x1f4), HitValue::Read(9)]);
        assert_eq!(
            v["by_value"],
            serde_json::json!([{"target": "counter", "target_index": 0, "values": [
                {"value": "0x1f4", "count": 2}, {"value": "0x1f3", "count": 1}], "overflowed": false}])
        );
        let many: Vec<HitValue> = (0..=crate::report::summary::VALUES_MAX as u64)
            .map(w)
            .collect();
        let v = record(&many);
        assert_eq!(v["by_value"][0]["values"], serde_json::json!([]));
        assert_eq!(v["by_value"][0]["overflowed"], true);
        let v = record(&[HitValue::Read(9)]);
        assert!(v.get("by_value").is_none(), "{v}");
        assert!(v.get("by_comm").is_some(), "{v}");
    }

    #[test]
    fn a_strict_hotplug_stop_is_named_in_both_summaries() {
        let mut p = Json::new(Vec::new(), Vec::new());
        let summary = Summary {
            stop: Some(StopReason::StrictHotplug(1)),
            ..Summary::default()
        };
        p.finish(&summary).unwrap();
        let (out, err) = p.into_inner();
        let v = lines(out);
        assert_eq!(
            (&v[0]["stop"], &v[0]["signal"]),
            (&"strict_hotplug".into(), &Value::Null)
        );
        let err = String::from_utf8(err).unwrap();
        assert!(
            err.ends_with(", stopped: cpu 1 could not be armed (--strict-hotplug)\n"),
            "{err}"
        );
    }

    /// The hand-written strings escape exactly as serde_json does: every ASCII character, and non-ASCII
    /// text left as it is.
    #[test]
    fn strings_escape_like_serde() {
        let mut all: String = (0u8..0x80).map(char::from).collect();
        all.push_str("ümlaut-ß \u{2028} 日本");
        for text in [all.as_str(), "", "plain", "\"", "a\\b", "\u{7f}x\u{1f}"] {
            let mut s = String::new();
            push_string(&mut s, text);
            assert_eq!(s, serde_json::to_string(text).unwrap(), "{text:?}");
        }
    }

    /// A hit record written by hand is serde's [`Record::Hit`] byte for byte: kernel and user frames,
    /// unknown ones, `--lines` annotations, every kind of value, a comm that needs escaping; spelled afresh
    /// and from a chain's cached spelling, the first time and again.
    #[test]
    fn hits_are_serdes_bytes() {
        use crate::report::{Rendered, SourceLine};
        use std::sync::Arc;
        let s = sample(
            0xffffffff81000077,
            1234,
            1235,
            412_123_456_789,
            0x7ffd0000,
            1,
            &[encode::KERNEL, 0xffffffff81000077, encode::USER, 0x401000],
        );
        let named = ResolvedFrame {
            sym: Some("read_zero".into()),
            off: 0x77,
            size: Some(0x100),
            module: Some("mod\"x".into()),
            line: Some(Arc::new(SourceLine {
                location: "fs/read_write.c:30".into(),
                inlined: vec!["rw_verify_area (fs/read_write.c:450) [inlined]".into()],
            })),
            ..ResolvedFrame::unknown(0xffffffff81000077, true)
        };
        let no_inlined = ResolvedFrame {
            line: Some(Arc::new(SourceLine {
                location: "x.c:1".into(),
                inlined: vec![],
            })),
            ..ResolvedFrame::unknown(0xffffffff81000010, true)
        };
        let user = ResolvedFrame {
            sym: Some("main".into()),
            off: 0x1c,
            binary: Some("writer".into()),
            ..ResolvedFrame::unknown(0x401000, false)
        };
        let chain = [
            named.clone(),
            no_inlined,
            user,
            ResolvedFrame::unknown(0x7f00, false),
            ResolvedFrame {
                unnamed: Some("the process's memory maps could not be read"),
                ..ResolvedFrame::unknown(0x7f10, false)
            },
        ];
        let watches = [
            watch("target_var", 0x7ffd0000, Access::Write),
            watch("t\tab", 0x10, Access::ReadWrite),
            crate::report::testutil::percpu_watch("runqueues.nr_running", None),
        ];
        let rendered = Rendered::default();
        let known = [None, Some(0), Some(0x1f4), Some(u64::MAX)];
        let froms = [
            ValueFrom::Insn,
            ValueFrom::Memory,
            ValueFrom::NoStart,
            ValueFrom::Raced { memory: 0x2a },
        ];
        let mut written = Vec::new();
        for value in known {
            for old in known {
                for from in froms {
                    written.push(HitValue::Written { value, old, from });
                }
            }
        }
        for value in [
            HitValue::NotRead,
            HitValue::Unreadable,
            HitValue::Read(0),
            HitValue::Read(u64::MAX),
        ]
        .into_iter()
        .chain(written)
        {
            for (w, comm) in [(0, "writer"), (1, "we\"ird\n\u{1}ü"), (2, "percpu")] {
                for r in [None, Some(&rendered), Some(&rendered)] {
                    let hit = Hit {
                        sample: &s,
                        watch: &watches[w],
                        watch_index: w,
                        comm,
                        ip: &named,
                        chain: &chain,
                        value,
                        rendered: r,
                    };
                    let mut line = String::new();
                    push_hit(&mut line, &hit);
                    assert_eq!(line, serde_json::to_string(&Record::hit(&hit)).unwrap());
                }
            }
        }
    }

    /// A per-CPU target's hit names whose copy it hit; the header lists the copies and who watches which.
    #[test]
    fn a_per_cpu_hit_names_its_copy() {
        use crate::report::testutil::{each_hit, percpu_watch, table};
        let s = sample(0xffffffff81000077, 1, 1, 5, 0x7ffd0000, 1, &[]);
        let watches = [percpu_watch("runqueues.nr_running", None)];
        let mut p = Json::new(Vec::new(), Vec::new());
        let cpus = [0, 1].into();
        p.header(&Header {
            watches: &watches,
            cpus: &cpus,
            source: "kallsyms",
            processes: &[],
            threads: 0,
            values: false,
            condition: None,
            objects: None,
        })
        .unwrap();
        each_hit(&table(), &watches, &[(s, "a", 0)], |hit| {
            p.hit(hit).unwrap()
        });
        let out = String::from_utf8(p.into_inner().0).unwrap();
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines[0]["targets"][0]["percpu"],
            serde_json::json!({"offset": "0x10", "copy": null, "copies": [
                {"cpu": 0, "addr": "0x7ffc0010"}, {"cpu": 1, "addr": "0x7ffd0000"}]})
        );
        assert_eq!(lines[1]["copy"], 1, "{out}");
        assert_eq!(lines[1]["addr"], "0x7ffd0000", "{out}");
    }

    #[test]
    fn control_records() {
        let mut p = Json::new(Vec::new(), Vec::new());
        let events = [
            StreamEvent::Retargeted {
                index: 0,
                watch: watch("target_var2", 0x5555_0040, Access::ReadWrite),
                covered: Covered::Cpus(2),
                took_ns: 41_000,
                enabled: true,
            },
            StreamEvent::Switched { on: false },
            StreamEvent::Switched { on: true },
            StreamEvent::ControlRefused {
                command: "stop".into(),
                reason: "unknown command `stop`".into(),
                watching: "x".into(),
                kind: "bad_command",
            },
        ];
        for (i, e) in events.iter().enumerate() {
            p.event(e, 10 + i as u64).unwrap();
        }
        let (out, err) = p.into_inner();
        let v = lines(out);
        assert_eq!(v[0]["type"], "watch");
        assert_eq!(v[0]["time_ns"], 10);
        assert_eq!(v[0]["target"]["name"], "target_var2");
        assert_eq!(v[0]["target"]["addr"], "0x55550040");
        assert_eq!(v[0]["target"]["access"], "RW");
        assert_eq!(v[0]["cpus"], 2);
        assert!(v[0].get("threads").is_none());
        assert_eq!(v[0]["took_ns"], 41_000);
        assert_eq!(v[0]["enabled"], true);
        assert_eq!(v[1]["type"], "watch_off");
        assert_eq!(v[2]["type"], "watch_on");
        assert_eq!(v[3]["type"], "control_refused");
        assert_eq!(v[3]["command"], "stop");
        assert_eq!(v[3]["watching"], "x");
        assert_eq!(v[3]["kind"], "bad_command");
        assert!(String::from_utf8(err)
            .unwrap()
            .contains("control `stop` refused"));
    }

    /// A refused arming is one `error` record, with the refusal's kind and exit code.
    #[test]
    fn a_refused_arming_is_one_error_record() {
        let mut p = Json::new(Vec::new(), Vec::new());
        p.refused(
            "kernel_breakpoints_refused",
            "cpu 0: this kernel refuses",
            4,
        )
        .unwrap();
        let (out, err) = p.into_inner();
        let v = lines(out);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0],
            serde_json::json!({"type": "error", "kind": "kernel_breakpoints_refused",
                "reason": "cpu 0: this kernel refuses", "exit_code": 4})
        );
        assert!(err.is_empty(), "the error line is the caller's");
    }

    #[test]
    fn module_unloaded_record_and_stop() {
        let mut p = Json::new(Vec::new(), Vec::new());
        let e = StreamEvent::ModuleUnloaded {
            module: "nfs".into(),
            targets: vec!["nfs:nfs_counter".into()],
        };
        p.event(&e, 12).unwrap();
        let summary = Summary {
            stop: Some(StopReason::ModuleUnloaded),
            ..Summary::default()
        };
        p.finish(&summary).unwrap();
        let v = lines(p.into_inner().0);
        assert_eq!(v[0]["type"], "module_unloaded");
        assert_eq!(v[0]["time_ns"], 12);
        assert_eq!(v[0]["module"], "nfs");
        assert_eq!(v[0]["targets"], serde_json::json!(["nfs:nfs_counter"]));
        assert_eq!(v[1]["type"], "summary");
        assert_eq!(v[1]["stop"], "module_unloaded");
    }
}
