//! `--perfetto FILE`: the session as a Perfetto trace (protobuf `TracePacket`s of `TrackEvent`s), for
//! ui.perfetto.dev or trace_processor. Written as the session goes, one packet at a time, so the file is a
//! valid trace at every flush and whatever stopped the run:
//!
//! - a process track per writing process and a thread track per writing thread (`comm-tid`), with an
//!   instant per hit at its sample time, carrying the target, access, address, CPU, writer ip, call chain
//!   and `--value`'s value and old value as debug annotations;
//! - a track per CPU, with an instant per hit naming the writer;
//! - a `ksymwatch` track with the session's own marks (armed, hits a full ring did not print, CPUs going
//!   and coming, `--control` moves, module unloads, execs, the stop), and counter tracks per CPU of the hits
//!   not printed and of the hits lost, and of filtered hits.
//!
//! Not printed and lost mean what they mean in the other outputs' summaries: a record a full ring had no
//! room for is a hit the stream did not print (`not printed`, JSON's `unprinted`), which on the hit path
//! the kernel's totals still count; `lost` is a hit in no total, known only at the end (the summary's
//! `lost`). Without BPF (the per-thread path) there are no totals, and the hits not printed are the lost
//! ones.
//!
//! Every string a hit carries (event names, annotation names, the target, the ip and the chain) is interned:
//! written once, the first time it is used, and named by a number after that, so a chain seen a million
//! times is in the file once. Times are CLOCK_MONOTONIC nanoseconds, as the kernel stamps samples; a clock
//! snapshot at the start ties them to Perfetto's default clock (BOOTTIME).

pub mod proto;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Write};

use prost::Message;

use super::{Covered, Header, Hit, Output, Retarget, StreamEvent, Summary, Value, ValueFrom};
use proto::{AnnotationValue, Data, DebugAnnotation, TracePacket, TrackDescriptor, TrackEvent};

/// The per-CPU counter of hits not printed, and its tracks' name.
const UNPRINTED: (Per, &str) = (Per::Unprinted, "not printed");

/// The one packet sequence this writer emits (any nonzero id; the interning is scoped to it).
const SEQUENCE: u32 = 1;
/// The `ksymwatch` track; the other tracks' uuids are [`uuid`]s.
const SESSION_TRACK: u64 = 1;
const FILTERED_TRACK: u64 = 2;

/// The tracks there is one of per process, thread or CPU.
#[derive(Debug, Clone, Copy)]
enum Per {
    Process = 1,
    Thread,
    Cpu,
    /// A CPU's counter of hits its ring had no room for (not printed).
    Unprinted,
    /// A CPU's counter of hits in no total (the summary's `lost`).
    Lost,
}

/// The uuid of `kind`'s track for `id`: the kind in the high half, the id in the low half.
fn uuid(kind: Per, id: u32) -> u64 {
    ((kind as u64) << 32) | u64::from(id)
}

/// CLOCK_MONOTONIC and CLOCK_BOOTTIME read together at the start: the clock snapshot that places the
/// trace's MONOTONIC times on Perfetto's BOOTTIME timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clocks {
    pub monotonic_ns: u64,
    pub boottime_ns: u64,
}

/// One kind of interned string: its ids, and the entries not yet written.
#[derive(Default)]
struct Table {
    ids: HashMap<Box<str>, u64>,
}

impl Table {
    /// The id of `s`, and whether it is new (then the caller writes it with the next packet).
    fn id(&mut self, s: &str) -> (u64, bool) {
        if let Some(&id) = self.ids.get(s) {
            return (id, false);
        }
        // Ids start at 1: 0 reads as "not set".
        let id = self.ids.len() as u64 + 1;
        self.ids.insert(s.into(), id);
        (id, true)
    }

    /// The id of `s`; a new one's entry (`entry(id)`) goes into `pending`, which the next packet carries.
    fn intern<T>(&mut self, s: &str, pending: &mut Vec<T>, entry: impl FnOnce(u64) -> T) -> u64 {
        let (id, new) = self.id(s);
        if new {
            pending.push(entry(id));
        }
        id
    }
}

/// `s`'s id in `table`, a new one also added to `pending`.
fn name(table: &mut Table, pending: &mut Vec<proto::InternedName>, s: &str) -> u64 {
    table.intern(s, pending, |id| proto::InternedName {
        iid: Some(id),
        name: Some(s.into()),
    })
}

/// The sequence's interned strings, and what the next packet must carry of them.
#[derive(Default)]
struct Interner {
    event_names: Table,
    annotation_names: Table,
    strings: Table,
    pending: proto::InternedData,
}

impl Interner {
    fn event_name(&mut self, s: &str) -> u64 {
        name(&mut self.event_names, &mut self.pending.event_names, s)
    }

    fn annotation_name(&mut self, s: &str) -> u64 {
        let pending = &mut self.pending.debug_annotation_names;
        name(&mut self.annotation_names, pending, s)
    }

    fn string(&mut self, s: &str) -> u64 {
        let pending = &mut self.pending.debug_annotation_string_values;
        self.strings.intern(s, pending, |id| proto::InternedString {
            iid: Some(id),
            str: Some(s.as_bytes().to_vec()),
        })
    }

    /// A debug annotation `name` = `value`.
    fn annotation(&mut self, name: &str, value: AnnotationValue) -> DebugAnnotation {
        DebugAnnotation {
            name_iid: Some(self.annotation_name(name)),
            value: Some(value),
        }
    }

    /// A debug annotation `name` = the interned string `value`.
    fn interned(&mut self, name: &str, value: &str) -> DebugAnnotation {
        let id = self.string(value);
        self.annotation(name, AnnotationValue::StringIid(id))
    }
}

/// A thread's track as described.
struct ThreadTrack {
    /// The comm last given (the thread's name).
    comm: String,
    /// The track's name, `comm-tid` with its first comm: the CPU tracks name the writer by it.
    name: String,
    /// `comm` is not the one the track is named after.
    renamed: bool,
}

pub struct Perfetto<W: Write> {
    out: W,
    clocks: Option<Clocks>,
    /// The first packet has gone out (it clears the sequence's incremental state).
    started: bool,
    interner: Interner,
    /// Processes described, with the name given.
    processes: HashMap<u32, String>,
    /// Threads described, by tid; re-described when the comm changes.
    threads: HashMap<u32, ThreadTrack>,
    cpus: BTreeSet<u32>,
    /// Hits not printed so far, per CPU (the counters' values).
    unprinted: BTreeMap<u32, u64>,
    armed_ns: Option<u64>,
    /// The latest time seen, for the marks written at the end.
    last_ns: u64,
    /// One packet's bytes, reused.
    buf: Vec<u8>,
    /// One frame list's text, reused.
    text: String,
}

impl<W: Write> Perfetto<W> {
    /// A trace written to `out`; `clocks` (when given) goes first, as the clock snapshot.
    pub fn new(out: W, clocks: Option<Clocks>) -> Self {
        Perfetto {
            out,
            clocks,
            started: false,
            interner: Interner::default(),
            processes: HashMap::new(),
            threads: HashMap::new(),
            cpus: BTreeSet::new(),
            unprinted: BTreeMap::new(),
            armed_ns: None,
            last_ns: 0,
            buf: Vec::new(),
            text: String::new(),
        }
    }

    #[cfg(test)]
    pub fn into_inner(self) -> W {
        self.out
    }

    /// Writes one packet as a `Trace.packet` field, with whatever interned strings it introduced.
    fn packet(&mut self, time_ns: Option<u64>, data: Data) -> io::Result<()> {
        let event = matches!(data, Data::TrackEvent(_));
        let mut flags = if event {
            proto::SEQ_NEEDS_INCREMENTAL_STATE
        } else {
            0
        };
        let first = !self.started;
        if first {
            flags |= proto::SEQ_INCREMENTAL_STATE_CLEARED;
            self.started = true;
        }
        // Only events refer to interned strings, so only they carry them (with the flag that says so).
        let interned = if event {
            std::mem::take(&mut self.interner.pending)
        } else {
            proto::InternedData::default()
        };
        let packet = TracePacket {
            timestamp: time_ns,
            timestamp_clock_id: time_ns.map(|_| proto::BUILTIN_CLOCK_MONOTONIC),
            trusted_packet_sequence_id: Some(SEQUENCE),
            interned_data: (!interned.is_empty()).then_some(interned),
            sequence_flags: (flags != 0).then_some(flags),
            first_packet_on_sequence: first.then_some(true),
            data: Some(data),
        };
        if let Some(t) = time_ns {
            self.last_ns = self.last_ns.max(t);
        }
        self.buf.clear();
        packet_bytes(&packet, &mut self.buf);
        self.out.write_all(&self.buf)
    }

    fn describe(&mut self, track: TrackDescriptor) -> io::Result<()> {
        self.packet(None, Data::TrackDescriptor(track))
    }

    fn track_event(&mut self, time_ns: u64, event: TrackEvent) -> io::Result<()> {
        self.packet(Some(time_ns), Data::TrackEvent(event))
    }

    /// An instant named `name` on `track`.
    fn instant(
        &mut self,
        track: u64,
        time_ns: u64,
        name: &str,
        annotations: Vec<DebugAnnotation>,
    ) -> io::Result<()> {
        let event = TrackEvent {
            name_iid: Some(self.interner.event_name(name)),
            r#type: Some(proto::TYPE_INSTANT),
            track_uuid: Some(track),
            counter_value: None,
            debug_annotations: annotations,
        };
        self.track_event(time_ns, event)
    }

    fn counter(&mut self, track: u64, time_ns: u64, value: u64) -> io::Result<()> {
        let event = TrackEvent {
            r#type: Some(proto::TYPE_COUNTER),
            track_uuid: Some(track),
            counter_value: Some(i64::try_from(value).unwrap_or(i64::MAX)),
            ..TrackEvent::default()
        };
        self.track_event(time_ns, event)
    }

    fn describe_process(&mut self, pid: u32, name: &str) -> io::Result<()> {
        if self.processes.get(&pid).is_some_and(|n| n == name) {
            return Ok(());
        }
        self.processes.insert(pid, name.to_string());
        self.describe(TrackDescriptor {
            uuid: Some(uuid(Per::Process, pid)),
            name: Some(name.to_string()),
            process: Some(proto::ProcessDescriptor {
                pid: Some(pid as i32),
                process_name: Some(name.to_string()),
            }),
            ..TrackDescriptor::default()
        })
    }

    /// The writer's process and thread tracks, described before its first hit, and again when its comm
    /// changed (an exec, or a `prctl(PR_SET_NAME)`) as Perfetto's importer reads a renamed thread: one
    /// track (the same uuid), which keeps the name it was first given (trace processor keeps a track's
    /// first name), and a thread whose name is the newest `thread_name` (the thread table takes each
    /// newer name). Hits after the rename carry the new name as their `comm`.
    fn describe_writer(&mut self, pid: u32, tid: u32, comm: &str) -> io::Result<()> {
        if !self.processes.contains_key(&pid) || (tid == pid && self.processes[&pid] != comm) {
            self.describe_process(pid, comm)?;
        }
        let (name, renamed) = match self.threads.get(&tid) {
            Some(t) if t.comm == comm => return Ok(()),
            Some(t) => (t.name.clone(), t.name != format!("{comm}-{tid}")),
            None => (format!("{comm}-{tid}"), false),
        };
        let track = ThreadTrack {
            comm: comm.to_string(),
            name: name.clone(),
            renamed,
        };
        self.threads.insert(tid, track);
        self.describe(TrackDescriptor {
            uuid: Some(uuid(Per::Thread, tid)),
            name: Some(name),
            thread: Some(proto::ThreadDescriptor {
                pid: Some(pid as i32),
                tid: Some(tid as i32),
                thread_name: Some(comm.to_string()),
            }),
            ..TrackDescriptor::default()
        })
    }

    fn describe_cpu(&mut self, cpu: u32) -> io::Result<()> {
        if !self.cpus.insert(cpu) {
            return Ok(());
        }
        self.describe(TrackDescriptor {
            uuid: Some(uuid(Per::Cpu, cpu)),
            name: Some(format!("cpu {cpu}")),
            ..TrackDescriptor::default()
        })
    }

    /// Sets CPU `cpu`'s counter `kind` (named `"{name} cpu {cpu}"`) to `total` at `time_ns`; the first
    /// time, its track is described, and starts at 0 when the session was armed.
    fn cpu_counter(
        &mut self,
        (kind, name): (Per, &str),
        cpu: u32,
        total: u64,
        time_ns: u64,
    ) -> io::Result<()> {
        let first = match kind {
            Per::Unprinted => self.unprinted.insert(cpu, total).is_none(),
            _ => true,
        };
        if first {
            self.describe_cpu(cpu)?;
            self.describe(TrackDescriptor {
                uuid: Some(uuid(kind, cpu)),
                parent_uuid: Some(uuid(Per::Cpu, cpu)),
                name: Some(format!("{name} cpu {cpu}")),
                counter: Some(proto::CounterDescriptor {}),
                ..TrackDescriptor::default()
            })?;
            if let Some(armed) = self.armed_ns.filter(|&a| a < time_ns) {
                self.counter(uuid(kind, cpu), armed, 0)?;
            }
        }
        self.counter(uuid(kind, cpu), time_ns, total)
    }

    /// Spells `frames` one a line, innermost first, into `self.text`.
    fn spell(&mut self, frames: &[super::ResolvedFrame], comm: &str) {
        self.text.clear();
        for (i, f) in frames.iter().enumerate() {
            if i > 0 {
                self.text.push('\n');
            }
            f.push_text(&mut self.text, comm);
        }
    }

    /// A hit's annotations: what was touched, by which instruction, from which chain, with which value.
    fn hit_annotations(&mut self, hit: &Hit<'_>) -> Vec<DebugAnnotation> {
        let s = hit.sample;
        let i = &mut self.interner;
        let mut a = vec![
            i.interned("target", &hit.watch.label),
            i.interned("access", hit.watch.access.letters()),
            i.annotation("addr", AnnotationValue::Pointer(s.addr)),
            i.annotation("cpu", AnnotationValue::Uint(u64::from(s.cpu))),
            i.annotation("in_kernel", AnnotationValue::Bool(s.in_kernel())),
        ];
        self.spell(std::slice::from_ref(hit.ip), hit.comm);
        a.push(self.interner.interned("ip", &self.text));
        self.spell(hit.chain, hit.comm);
        a.push(self.interner.interned("chain", &self.text));
        value_annotations(&mut self.interner, hit.value, &mut a);
        if let Some(c) = hit.cgroup {
            let i = &mut self.interner;
            a.push(i.annotation("cgroup_id", AnnotationValue::Uint(c.id)));
            a.push(i.interned("cgroup", &c.display_path()));
            if let Some(id) = c.container_id() {
                a.push(i.interned("container_id", id));
            }
        }
        a
    }
}

/// `--value`'s annotations (hex, as the other formats print them), or a process watch's read value.
fn value_annotations(i: &mut Interner, value: Value, a: &mut Vec<DebugAnnotation>) {
    match value {
        Value::NotRead => {}
        Value::Unreadable => a.push(hex_or_unknown(i, "value", None)),
        Value::Read(v) => a.push(hex_or_unknown(i, "value", Some(v))),
        Value::Written { value, old, from } => {
            a.push(hex_or_unknown(i, "value", value));
            a.push(hex_or_unknown(i, "old", old));
            if value.is_some() {
                let word = match from {
                    ValueFrom::Memory | ValueFrom::NoStart => "memory",
                    ValueFrom::Insn | ValueFrom::Raced { .. } => "insn",
                };
                a.push(i.interned("value_from", word));
                if from == ValueFrom::NoStart {
                    a.push(i.interned("insn_start", "unknown"));
                }
                if let ValueFrom::Raced { memory } = from {
                    a.push(i.annotation("raced", AnnotationValue::Pointer(memory)));
                }
            }
        }
    }
}

/// A value shown in hex (a pointer value), or `?` when unknown, as the text stream prints it.
fn hex_or_unknown(i: &mut Interner, name: &str, v: Option<u64>) -> DebugAnnotation {
    match v {
        Some(v) => i.annotation(name, AnnotationValue::Pointer(v)),
        None => i.interned(name, "?"),
    }
}

/// `packet` as one `Trace.packet` field (tag 1, length-delimited): a file of these, one after another, is
/// a `Trace`.
pub fn packet_bytes(packet: &TracePacket, out: &mut Vec<u8>) {
    out.push(0x0a);
    packet.encode_length_delimited(out).unwrap_or_else(|_| {
        // A Vec grows as needed: prost fails only for a buffer that cannot.
        unreachable!("encoding into a Vec")
    });
}

fn text(s: &str) -> AnnotationValue {
    AnnotationValue::String(s.to_string())
}

/// The `ksymwatch` track's instant for a stream event: its name and annotations.
fn event_mark(i: &mut Interner, e: &StreamEvent) -> (&'static str, Vec<DebugAnnotation>) {
    match e {
        // The records a full ring dropped: hits not printed (the totals may still count them; the stop
        // says how many are lost).
        StreamEvent::Lost { cpu, count, .. } => (
            "not printed",
            vec![
                i.annotation("cpu", AnnotationValue::Uint(u64::from(*cpu))),
                i.annotation("count", AnnotationValue::Uint(*count)),
            ],
        ),
        StreamEvent::CpuOffline { cpu } => (
            "cpu offline",
            vec![i.annotation("cpu", AnnotationValue::Uint(u64::from(*cpu)))],
        ),
        StreamEvent::CpuOnline {
            cpu,
            after_uevent_ns,
            open_ns,
            ..
        } => (
            "cpu online",
            cpu_online_annotations(i, *cpu, *after_uevent_ns, *open_ns),
        ),
        StreamEvent::CpuArmFailed { cpu, reason, .. } => (
            "cpu arm failed",
            vec![
                i.annotation("cpu", AnnotationValue::Uint(u64::from(*cpu))),
                i.annotation("reason", text(reason)),
            ],
        ),
        StreamEvent::Retargeted(r) => ("watch", watch_annotations(i, r)),
        StreamEvent::Switched { on } => (if *on { "watch on" } else { "watch off" }, vec![]),
        StreamEvent::ControlRefused {
            command,
            reason,
            watching,
            ..
        } => (
            "control refused",
            vec![
                i.annotation("command", text(command)),
                i.annotation("reason", text(reason)),
                i.annotation("watching", text(watching)),
            ],
        ),
        StreamEvent::ModuleUnloaded { module, targets } => (
            "module unloaded",
            vec![
                i.annotation("module", text(module)),
                i.annotation("targets", text(&targets.join(", "))),
            ],
        ),
        StreamEvent::ProcessExec { pid, comm } => (
            "exec",
            vec![
                i.annotation("pid", AnnotationValue::Uint(u64::from(*pid))),
                i.annotation("comm", text(comm)),
            ],
        ),
        StreamEvent::ObjectArmed(o) => (
            "object armed",
            vec![
                i.annotation("object", AnnotationValue::Uint(o.index)),
                i.annotation("addr", text(&format!("0x{:x}", o.addr))),
                i.annotation("gap_ns", AnnotationValue::Uint(o.gap_ns)),
            ],
        ),
        StreamEvent::ObjectFreed { index, hits, .. } => (
            "object freed",
            vec![
                i.annotation("object", AnnotationValue::Uint(*index)),
                i.annotation("hits", AnnotationValue::Uint(*hits)),
            ],
        ),
        StreamEvent::Dump {
            trigger,
            hits,
            no_hit_yet,
        } => (
            "dump",
            vec![
                i.annotation("trigger", text(&trigger.to_string())),
                i.annotation("hits", AnnotationValue::Uint(*hits as u64)),
                i.annotation("no_hit_yet", AnnotationValue::Bool(*no_hit_yet)),
            ],
        ),
    }
}

/// A `cpu online` mark's annotations: the CPU, how long its events took to open, and (when a uevent
/// announced it) how long after that uevent.
fn cpu_online_annotations(
    i: &mut Interner,
    cpu: u32,
    after_uevent_ns: Option<u64>,
    open_ns: u64,
) -> Vec<DebugAnnotation> {
    let mut a = vec![
        i.annotation("cpu", AnnotationValue::Uint(u64::from(cpu))),
        i.annotation("open_ns", AnnotationValue::Uint(open_ns)),
    ];
    if let Some(ns) = after_uevent_ns {
        a.push(i.annotation("after_uevent_ns", AnnotationValue::Uint(ns)));
    }
    a
}

/// A moved watch's annotations: the new target, what it covers, how long the move took, and whether the
/// watch is on.
fn watch_annotations(i: &mut Interner, r: &Retarget) -> Vec<DebugAnnotation> {
    let watch = &r.watch;
    vec![
        i.annotation("target", text(&watch.label)),
        i.annotation("target_index", AnnotationValue::Uint(r.index as u64)),
        i.annotation("addr", AnnotationValue::Pointer(watch.addr)),
        i.annotation("len", AnnotationValue::Uint(u64::from(watch.len))),
        i.annotation("access", text(watch.access.letters())),
        match r.covered {
            Covered::Threads(n) => i.annotation("threads", AnnotationValue::Uint(n as u64)),
            Covered::Cpus(n) => i.annotation("cpus", AnnotationValue::Uint(n as u64)),
        },
        i.annotation("took_ns", AnnotationValue::Uint(r.took_ns)),
        i.annotation("enabled", AnnotationValue::Bool(r.enabled)),
    ]
}

impl<W: Write> Output for Perfetto<W> {
    fn header(&mut self, header: &Header<'_>) -> io::Result<()> {
        if let Some(c) = self.clocks {
            let clock = |id, ns| proto::Clock {
                clock_id: Some(id),
                timestamp: Some(ns),
            };
            let snapshot = proto::ClockSnapshot {
                clocks: vec![
                    clock(proto::BUILTIN_CLOCK_BOOTTIME, c.boottime_ns),
                    clock(proto::BUILTIN_CLOCK_MONOTONIC, c.monotonic_ns),
                ],
            };
            self.packet(None, Data::ClockSnapshot(snapshot))?;
        }
        let targets: Vec<String> = header.watches.iter().map(|w| w.label.clone()).collect();
        self.describe(TrackDescriptor {
            uuid: Some(SESSION_TRACK),
            name: Some(format!("ksymwatch {}", targets.join(" "))),
            ..TrackDescriptor::default()
        })?;
        self.describe(TrackDescriptor {
            uuid: Some(FILTERED_TRACK),
            name: Some("filtered hits".into()),
            counter: Some(proto::CounterDescriptor {}),
            ..TrackDescriptor::default()
        })?;
        header
            .processes
            .iter()
            .try_for_each(|(pid, comm)| self.describe_process(*pid, comm))
    }

    fn armed(&mut self, events: usize, cpus: &BTreeSet<u32>, time_ns: u64) -> io::Result<()> {
        self.armed_ns = Some(time_ns);
        let i = &mut self.interner;
        let a = vec![
            i.annotation("events", AnnotationValue::Uint(events as u64)),
            i.annotation("cpus", text(&crate::cpulist::format(cpus))),
        ];
        self.instant(SESSION_TRACK, time_ns, "armed", a)?;
        self.counter(FILTERED_TRACK, time_ns, 0)?;
        self.out.flush()
    }

    fn hit(&mut self, hit: &Hit<'_>) -> io::Result<()> {
        let s = hit.sample;
        self.describe_writer(s.pid, s.tid, hit.comm)?;
        self.describe_cpu(s.cpu)?;
        let mut annotations = self.hit_annotations(hit);
        // The thread's track name, as the CPU track names the writer; and, once the thread renamed
        // itself, the name it had at this hit (the track keeps its first).
        let (writer, renamed) = self
            .threads
            .get(&s.tid)
            .map_or(("", false), |t| (t.name.as_str(), t.renamed));
        let mut a = vec![self.interner.interned("thread", writer)];
        if renamed {
            let c = self.interner.interned("comm", hit.comm);
            annotations.push(c.clone());
            a.push(c);
        }
        self.instant(
            uuid(Per::Thread, s.tid),
            s.time,
            &hit.watch.label,
            annotations,
        )?;
        self.instant(uuid(Per::Cpu, s.cpu), s.time, &hit.watch.label, a)
    }

    fn event(&mut self, event: &StreamEvent, time_ns: u64) -> io::Result<()> {
        let (name, annotations) = event_mark(&mut self.interner, event);
        self.instant(SESSION_TRACK, time_ns, name, annotations)?;
        if let StreamEvent::Lost { cpu, count, .. } = event {
            let total = self.unprinted.get(cpu).copied().unwrap_or(0) + count;
            self.cpu_counter(UNPRINTED, *cpu, total, time_ns)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn finish(&mut self, summary: &Summary) -> io::Result<()> {
        let end = match self.armed_ns {
            Some(a) => self.last_ns.max(a + summary.elapsed.as_nanos() as u64),
            None => self.last_ns,
        };
        // The hits not printed as the summary counts them, where the marks fell short (a ring's last
        // words): from the totals, the unprinted ones; without them, every hit dropped is lost.
        let dropped = match summary.from_totals {
            true => &summary.unprinted_by_cpu,
            false => &summary.lost_by_cpu,
        };
        for (&cpu, &total) in dropped {
            if self.unprinted.get(&cpu) != Some(&total) {
                self.cpu_counter(UNPRINTED, cpu, total, end)?;
            }
        }
        // The hits in no total, known only now.
        for (&cpu, &total) in summary.lost_by_cpu.iter().filter(|&(_, &n)| n > 0) {
            self.cpu_counter((Per::Lost, "lost"), cpu, total, end)?;
        }
        self.counter(FILTERED_TRACK, end, summary.filtered)?;
        let i = &mut self.interner;
        let mut a = vec![
            i.annotation("hits", AnnotationValue::Uint(summary.hits())),
            i.annotation("lost", AnnotationValue::Uint(summary.lost())),
            i.annotation("filtered", AnnotationValue::Uint(summary.filtered)),
        ];
        if summary.unprinted() > 0 {
            a.push(i.annotation("not printed", AnnotationValue::Uint(summary.unprinted())));
        }
        if let Some(stop) = summary.stop {
            a.push(i.annotation("reason", text(&stop.to_string())));
        }
        self.instant(SESSION_TRACK, end, "stop", a)?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests;
