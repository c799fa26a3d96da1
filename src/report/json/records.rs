//! The JSON record types: one variant per line `type`, with the header's targets and the frames of a
//! chain, as serde writes them. The schema the docs describe is these types.

use std::collections::BTreeSet;

use serde::Serialize;

use super::frame::{Frame, Hex};
use super::summary::SummaryRecord;
use super::SCHEMA_VERSION;
use crate::model::watch::Watch;
use crate::report::{DumpTrigger, Header, StreamEvent};
#[cfg(test)]
use crate::report::{Hit, Value, ValueFrom};

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
        /// `--cgroup`: the chosen cgroups' paths; only their writers' hits are kept. Absent otherwise.
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        cgroups: &'a [String],
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
        /// The writer's cgroup (v2) id, where the hit program read it (`--cgroup`).
        #[serde(skip_serializing_if = "Option::is_none")]
        cgroup_id: Option<u64>,
        /// Its path in the hierarchy, `null` when the cgroup was removed before it could be named. Absent
        /// with `cgroup_id`.
        #[serde(skip_serializing_if = "Option::is_none")]
        cgroup: Option<Option<&'a str>>,
        /// The container that path belongs to (its 64 hex digits) and the runtime that named it
        /// (`docker`, `containerd`, `cri-o`, `podman`), where the path holds one.
        #[serde(skip_serializing_if = "Option::is_none")]
        container_id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        container_runtime: Option<&'static str>,
    },
    /// Records a full ring had no room for, not printed. The type stays `lost` (scripts that add up
    /// what the stream is missing keep working); `counted` says whether they are hits the kernel's
    /// totals hold (the hit path: the summary counts them as `unprinted`) or lost (in no count but the
    /// summary's `lost`).
    Lost {
        time_ns: u64,
        cpu: u32,
        count: u64,
        counted: bool,
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
        /// False while the watch is off (`--control off`): armed disabled until `on`.
        enabled: bool,
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
        /// No hit had come before the trigger fired (only then, `true`).
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        no_hit_yet: bool,
    },
    Summary(SummaryRecord<'a>),
}

impl<'a> Record<'a> {
    #[cfg(test)]
    pub fn hit(h: &'a Hit<'a>) -> Record<'a> {
        let s = h.sample;
        // A known value's source; an unknown value has none.
        let known_from = match h.value {
            Value::Written {
                value: Some(_),
                from,
                ..
            } => Some(from),
            _ => None,
        };
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
            value_from: known_from.map(ValueFrom::source),
            insn_start: known_from.filter(|f| f.start_unknown()).map(|_| "unknown"),
            raced: known_from.and_then(ValueFrom::raced).map(Hex),
            cgroup_id: h.cgroup.map(|c| c.id),
            cgroup: h.cgroup.map(|c| c.path.as_deref()),
            container_id: h.cgroup.and_then(|c| c.container_id()),
            container_runtime: h.cgroup.and_then(|c| c.container_runtime()),
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
            cgroups: h.cgroups,
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
            StreamEvent::Lost {
                cpu,
                count,
                counted,
            } => Record::Lost {
                time_ns,
                cpu: *cpu,
                count: *count,
                counted: *counted,
            },
            StreamEvent::CpuOffline { cpu } => Record::CpuOffline { time_ns, cpu: *cpu },
            StreamEvent::CpuOnline {
                cpu,
                after_uevent_ns,
                open_ns,
                enabled,
            } => Record::CpuOnline {
                time_ns,
                cpu: *cpu,
                after_uevent_ns: *after_uevent_ns,
                open_ns: *open_ns,
                enabled: *enabled,
            },
            StreamEvent::CpuArmFailed { cpu, reason, kind } => Record::CpuArmFailed {
                time_ns,
                cpu: *cpu,
                reason,
                kind,
            },
            StreamEvent::Retargeted(r) => Record::Watch {
                time_ns,
                target: Target::of(&r.watch),
                target_index: r.index,
                threads: r.covered.threads(),
                cpus: r.covered.cpus(),
                took_ns: r.took_ns,
                enabled: r.enabled,
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
            StreamEvent::ObjectArmed(o) => Record::ObjectArmed {
                time_ns,
                index: o.index,
                addr: Hex(o.addr),
                slot: o.slot,
                gap_ns: o.gap_ns,
                pid: o.pid,
                comm: &o.comm,
                evicted: o.evicted,
            },
            StreamEvent::ObjectFreed { index, addr, hits } => Record::ObjectFreed {
                time_ns,
                index: *index,
                addr: Hex(*addr),
                hits: *hits,
            },
            StreamEvent::Dump {
                trigger,
                hits,
                no_hit_yet,
            } => Record::dump(time_ns, trigger, *hits, *no_hit_yet),
        }
    }

    /// A `dump` record: what fired it (a hit's condition, or a tracepoint and its CPU) and the hits that
    /// follow.
    fn dump(time_ns: u64, trigger: &'a DumpTrigger, hits: usize, no_hit_yet: bool) -> Record<'a> {
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
            no_hit_yet,
        }
    }
}
