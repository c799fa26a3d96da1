//! The `summary` record: the run's counts, and with `--summary` the chains, IPs, threads, commands and
//! values written, from the [`Summary`] the run ends with.

use serde::Serialize;

use super::frame::{Frame, Hex};
use crate::report::summary::Tally;
use crate::report::{ObjectTally, StopReason, Summary};

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
        Some(StopReason::Signal(n)) => ("signal", Some(crate::report::signal_name(n))),
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
    /// More than [`crate::report::summary::VALUES_MAX`] distinct values were written: they were not counted.
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
    pub objects: Option<ObjectsRecord<'a>>,
    /// `--summary`, where hit records carried the writer's cgroup: hits by cgroup, most first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_cgroup: Option<Vec<CgroupRecord<'a>>>,
}

/// One cgroup's hits in the summary record: its id, path (`null`: removed before it was named) and,
/// where the path holds one, its container.
#[derive(Serialize)]
pub struct CgroupRecord<'a> {
    pub id: u64,
    pub path: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<&'static str>,
    pub count: u64,
}

/// One writing thread's hits in the summary record.
#[derive(Serialize)]
pub struct ThreadRecord<'a> {
    pub pid: u32,
    pub tid: u32,
    pub comm: &'a str,
    pub count: u64,
}

/// `--on`'s books in the summary record: the tally's counts, then the gap's quantiles and each object.
#[derive(Serialize)]
pub struct ObjectsRecord<'a> {
    #[serde(flatten)]
    pub counts: &'a ObjectTally,
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

impl<'a> ObjectsRecord<'a> {
    fn of(t: &'a ObjectTally) -> ObjectsRecord<'a> {
        ObjectsRecord {
            counts: t,
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

/// One of `--summary`'s tables: the tally's `rows`, each made a record by `record`; `None` without a tally.
fn table<'t, T, R>(
    tally: Option<&'t Tally>,
    rows: impl FnOnce(&'t Tally) -> Vec<T>,
    record: impl FnMut(T) -> R,
) -> Option<Vec<R>> {
    tally.map(|t| rows(t).into_iter().map(record).collect())
}

impl<'a> SummaryRecord<'a> {
    pub fn new(s: &'a Summary) -> Self {
        let (stop, signal) = stop_word(s.stop);
        let tally = s.tally.as_ref();
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
            by_cgroup: table(tally, Tally::by_cgroup, |(c, count)| CgroupRecord {
                id: c.id,
                path: c.path.as_deref(),
                container_id: c.container_id(),
                container_runtime: c.container_runtime(),
                count,
            })
            .filter(|v| !v.is_empty()),
            chains: table(tally, Tally::chains, |c| ChainRecord {
                count: c.count,
                target: &c.target_name,
                target_index: c.target,
                comms: c
                    .top_comms()
                    .into_iter()
                    .map(|(comm, count)| CommCount { comm, count })
                    .collect(),
                chain: c.frames.iter().map(Frame::from).collect(),
            }),
            by_ip: table(tally, Tally::by_ip, |(_, c)| IpRecord {
                count: c.count,
                ip: (&c.ip).into(),
            }),
            by_thread: table(tally, Tally::by_thread, |t| ThreadRecord {
                pid: t.pid,
                tid: t.tid,
                comm: t.comm,
                count: t.count,
            }),
            by_comm: table(tally, Tally::by_comm, |(comm, count)| CommCount {
                comm,
                count,
            }),
            by_value: table(tally, Tally::by_value, |t| ValuesRecord {
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
            .filter(|v| !v.is_empty()),
        }
    }
}
