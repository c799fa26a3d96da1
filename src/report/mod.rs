//! What a session reports, independent of how it is printed: the header, the `# armed` mark, each hit,
//! stream events (lost records, CPUs going away and coming back) and the final summary. Printers implement
//! [`Output`]; they format from parsed records only, so they are tested offline. Several printers run at
//! once through a [`Tee`]; [`Quiet`] keeps one to its end-of-session report.

pub mod cgroup;
pub mod escape;
pub mod folded;
pub mod frame;
pub mod ftrace;
pub mod json;
pub mod numbers;
pub mod otlp;
pub mod perfetto;
pub mod sent;
pub mod status;
pub mod summary;
#[cfg(test)]
pub(crate) mod testutil;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::time::Duration;

use crate::model::watch::Watch;
use crate::perf::record::Sample;

pub use frame::{Rendered, ResolvedFrame, SourceLine};

/// What the header says about the session.
pub struct Header<'a> {
    pub watches: &'a [Watch],
    pub cpus: &'a BTreeSet<u32>,
    /// Which symbol source answered (`kallsyms /proc/kallsyms`).
    pub source: &'a str,
    /// A process watch: the processes (pid, comm) and how many threads were armed; empty for a system-wide
    /// watch.
    pub processes: &'a [(u32, String)],
    pub threads: usize,
    /// `--value`/`--if`: each hit's value is read in the kernel.
    pub values: bool,
    /// `--if`: the condition, as the parser spells it back.
    pub condition: Option<&'a str>,
    /// `--on`: what objects are watched, and from where (`# objects: ...`); `watches` are then its slots.
    pub objects: Option<&'a str>,
    /// `--cgroup`: the chosen cgroups' paths (only their writers' hits are kept).
    pub cgroups: &'a [String],
}

/// One hit, ready to print: the raw sample plus its frames, already named by the tracer.
pub struct Hit<'a> {
    pub sample: &'a Sample,
    pub watch: &'a Watch,
    /// Position of `watch` in the session's target list.
    pub watch_index: usize,
    pub comm: &'a str,
    /// The writer's instruction pointer.
    pub ip: &'a ResolvedFrame,
    /// The call chain, innermost first, as the kernel recorded it.
    pub chain: &'a [ResolvedFrame],
    /// The watched bytes as read right after the hit (process watches only).
    pub value: Value,
    /// The printers' spellings of `ip` and `chain`, shared by every hit on the same raw chain; `None`
    /// spells them for this hit only.
    pub rendered: Option<&'a Rendered>,
    /// The writer's cgroup, named, where the hit's record carried its id (the hit path's `--cgroup`).
    pub cgroup: Option<&'a cgroup::CgroupName>,
}

/// What the watched range held when the tracer took the hit out of its ring: one `process_vm_readv` of the
/// hit's process per drain of that ring, for a process watch. Not necessarily what this store wrote: a later
/// store may have landed in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// Not read: a system-wide watch (its addresses are the kernel's, or any process's). Printed as nothing.
    NotRead,
    /// The read failed: the process had exited, or the page was gone (text `value=?`, JSON `null`).
    Unreadable,
    /// The watched range's `len` bytes as a little-endian integer (text `value=0x2a`, JSON `"0x2a"`).
    Read(u64),
    /// `--value`/`--if`: the store itself, read in the kernel at the trap (x86 data breakpoints trap after
    /// the store): exactly what this store wrote, and what the range held before it (the value the previous
    /// hit on this target wrote, in this process for a user address). `None` is unknown: `value` when its
    /// record was lost or the read failed, `old` for the first hit (text `value=? old=?`, JSON `null`).
    Written {
        value: Option<u64>,
        old: Option<u64>,
        from: ValueFrom,
    },
}

/// A value as the text and JSON hit lines show it (`None` from [`Value::shown`]: nothing is shown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shown {
    /// The value; `None`: unknown (`?`, `null`).
    pub value: Option<u64>,
    /// `--value`/`--if` only: the old value (`None` inside: unknown).
    pub old: Option<Option<u64>>,
    /// `--value`/`--if` with a known value: where it came from.
    pub from: Option<ValueFrom>,
}

impl Value {
    /// What a hit line shows of this value, in one place for the text and the JSON hit lines.
    pub fn shown(self) -> Option<Shown> {
        let (value, old, from) = match self {
            Value::NotRead => return None,
            Value::Unreadable => (None, None, None),
            Value::Read(v) => (Some(v), None, None),
            Value::Written { value, old, from } => (value, Some(old), value.map(|_| from)),
        };
        Some(Shown { value, old, from })
    }
}

/// Where a `--value` hit's value comes from ([`crate::x86_store`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueFrom {
    /// The store's instruction and the registers at the trap: exactly what this store wrote, whatever other
    /// CPUs did (text `value=0x2a`, JSON `"value_from":"insn"`).
    Insn,
    /// As `Insn`, but memory read at the trap held `memory`: another CPU stored between this store and the
    /// trap (text `value=0x2a(raced:0x2b)`, JSON `"raced":"0x2b"`).
    Raced { memory: u64 },
    /// Memory read at the trap: a read-modify-write (`add`, `inc`, `xadd`, ...) or an instruction not
    /// decoded; another CPU's later store can show instead (text `value=0x2a(mem)`, JSON
    /// `"value_from":"memory"`).
    Memory,
    /// Memory read at the trap, because where the store's instruction starts is not known: no symbol of
    /// its function, the function's bytes could not be read or their walk did not end at ip, or an ip in
    /// the kernel (whose text the tracer cannot read). The bytes before ip alone cannot say where the
    /// instruction starts, so no instruction value is guessed from them (text `value=0x2a(mem,nostart)`,
    /// JSON `"value_from":"memory","insn_start":"unknown"`).
    NoStart,
}

/// The JSON outputs' words for a known value's source (NDJSON and OTLP say it alike).
impl ValueFrom {
    /// `value_from`: `insn` (the store's instruction, exact) or `memory` (read at the trap).
    pub fn source(self) -> &'static str {
        match self {
            ValueFrom::Insn | ValueFrom::Raced { .. } => "insn",
            ValueFrom::Memory | ValueFrom::NoStart => "memory",
        }
    }

    /// `raced`: what memory held at the trap when another CPU's store came between.
    pub fn raced(self) -> Option<u64> {
        match self {
            ValueFrom::Raced { memory } => Some(memory),
            _ => None,
        }
    }

    /// `insn_start: unknown`: memory was read because where the instruction starts is not known.
    pub fn start_unknown(self) -> bool {
        self == ValueFrom::NoStart
    }
}

/// `--control` moved target `index` to `watch`. `covered` counts `unit`s (threads or CPUs); `took_ns` is
/// from the first ioctl to the last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retarget {
    pub index: usize,
    pub watch: Watch,
    pub covered: Covered,
    pub took_ns: u64,
    /// False when the move was made while `--control off` had the watch disabled: it stays off.
    pub enabled: bool,
}

/// `--on`: object number `index` at `addr`, allocated by `pid` (`comm`), is watched from now on in slot
/// `slot`, `gap_ns` after its allocation (writes in that gap were not seen); `evicted` is the object
/// whose slot it took (`--rotate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArmedObject {
    pub index: u64,
    pub addr: u64,
    pub slot: usize,
    pub gap_ns: u64,
    pub pid: u32,
    pub comm: String,
    pub evicted: Option<u64>,
}

/// Things that happen to the stream itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// A full ring on this CPU had no room for `count` records: they are not printed. `counted`: they are
    /// kept hits the kernel's totals hold (the hit path), which the summary counts; otherwise (perf
    /// samples, the breakpoint's own perf ring, `--on`) they are lost: in no count but the summary's
    /// `lost`.
    Lost {
        cpu: u32,
        count: u64,
        counted: bool,
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
        /// False while the watch is off (`--control off`): the event was armed disabled, and starts
        /// with the others at `on`.
        enabled: bool,
    },
    /// A CPU came online but could not be armed; retried on the next reconcile.
    CpuArmFailed {
        cpu: u32,
        reason: String,
        /// What kind of refusal it was (`perf::refusal::Kind`'s name: `kernel_breakpoints_refused`, ...).
        kind: &'static str,
    },
    /// `--control` moved a target: hits before this mark are of the old watch, hits after it of the new
    /// one.
    Retargeted(Retarget),
    /// `--control off` (every event disabled, registers kept) or `on`.
    Switched {
        on: bool,
    },
    /// A control line that was not applied; the watch is what it was.
    ControlRefused {
        command: String,
        reason: String,
        watching: String,
        /// Why, by name: `bad_command`, `bad_target`, or the kernel's refusal's kind.
        kind: &'static str,
    },
    /// A kernel module was unloaded: the watches on its memory (their labels, in target order) are
    /// disarmed; hits before this mark were recorded while it was loaded.
    ModuleUnloaded {
        module: String,
        targets: Vec<String>,
    },
    /// A watched process exec'd another program (named `comm`): its watch ended there, in the kernel
    /// before the new program ran; the watched address means something else in it.
    ProcessExec {
        pid: u32,
        comm: String,
    },
    /// `--on`: an allocated object is watched from now on.
    ObjectArmed(ArmedObject),
    /// `--on`: an armed object was freed; its slot is free. `hits`: its hits while armed.
    ObjectFreed {
        index: u64,
        addr: u64,
        hits: u64,
    },
    /// `--last`: a `--dump-on` trigger fired (at the event's time); the `hits` kept hits follow, oldest
    /// first, then for a hit trigger the hit that fired it. `no_hit_yet`: none had come before it (a
    /// tracepoint or a signal before the first hit), as opposed to none since the last dump.
    Dump {
        trigger: DumpTrigger,
        hits: usize,
        no_hit_yet: bool,
    },
}

/// How a dump's heading counts the hits that follow it (`the last 3 hits`): `hits` of them, or none
/// because no hit had come before the trigger (`no_hit_yet`) or none since the last dump. A hit
/// trigger's own hit is not among them.
pub fn dumped_hits(trigger: &DumpTrigger, hits: usize, no_hit_yet: bool) -> String {
    match (hits, no_hit_yet) {
        (0, true) if matches!(trigger, DumpTrigger::Hit { .. }) => {
            "no hit had come before it".into()
        }
        (0, true) => "no hit had come yet".into(),
        (0, false) => "no hit since the last dump".into(),
        (1, _) => "the last 1 hit".into(),
        (n, _) => format!("the last {n} hits"),
    }
}

/// `--on`'s books: what became of the objects the source handed over. Its counts are the JSON summary's
/// `objects` fields as they are (serialized by name, in this order); the lists are summed up there.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ObjectTally {
    /// Objects the source handed over.
    pub seen: u64,
    pub armed: u64,
    /// Not armed: every slot was busy (without `--rotate`), arming failed, or the run stopped before it
    /// could be (drained in the batch the stop came in).
    pub skipped: u64,
    /// Disarmed for a newer object (`--rotate`).
    pub evicted: u64,
    /// Ended while armed: its free read, or (a source that reports each object once) its free never
    /// read (lost, or forgotten by the programs' map) and a new object allocated at its address, which
    /// ended it at that allocation.
    pub freed: u64,
    /// Freed before the tracer could arm them (lived less than the allocation-to-armed gap).
    pub freed_unarmed: u64,
    /// Writes on an armed object's memory after its free, before the tracer heard of it (the memory is
    /// another object's by then): not reported as hits.
    pub after_free: u64,
    /// Object records the kernel dropped (their objects were never armed).
    pub lost: u64,
    /// Allocation to armed, for each armed object.
    #[serde(skip)]
    pub gaps_ns: Vec<u64>,
    /// Each armed object: index, address, hits while armed.
    #[serde(skip)]
    pub objects: Vec<(u64, u64, u64)>,
}

impl ObjectTally {
    /// The allocation-to-armed gap at quantile `q` (0.5: the median), by nearest rank.
    pub fn gap(&self, q: f64) -> Option<u64> {
        let mut g = self.gaps_ns.clone();
        g.sort_unstable();
        let rank = ((g.len() as f64) * q).ceil() as usize;
        g.get(rank.saturating_sub(1)).copied()
    }
}

/// What fired a `--last` dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpTrigger {
    /// A hit made this condition hold (as the parser spells it back).
    Hit { condition: String },
    /// SIGUSR1 to the tracer.
    Signal,
    /// A kernel tracepoint fired (`GROUP:NAME`), on this CPU.
    Tracepoint { name: String, cpu: u32 },
}

impl DumpTrigger {
    /// The JSON `trigger` field.
    pub fn kind(&self) -> &'static str {
        match self {
            DumpTrigger::Hit { .. } => "hit",
            DumpTrigger::Signal => "signal",
            DumpTrigger::Tracepoint { .. } => "tracepoint",
        }
    }
}

impl std::fmt::Display for DumpTrigger {
    /// What the text heading says fired it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DumpTrigger::Hit { condition } => write!(f, "--dump-on '{condition}' held"),
            DumpTrigger::Signal => f.write_str("SIGUSR1"),
            DumpTrigger::Tracepoint { name, cpu } => {
                write!(f, "tracepoint {name} fired on cpu {cpu}")
            }
        }
    }
}

impl StreamEvent {
    /// The one-line text of a control acknowledgement or refusal, shared by the text stream and the
    /// stderr note of modes without one; `None` for other events.
    pub fn control_text(&self) -> Option<String> {
        match self {
            StreamEvent::Retargeted(r) => Some(format!(
                "watch {} (0x{:x}/{} {}) armed on {} in {:.3} ms{}",
                escape::escaped(&r.watch.label),
                r.watch.addr,
                r.watch.len,
                r.watch.access.letters(),
                r.covered,
                r.took_ns as f64 / 1e6,
                if r.enabled { "" } else { ", off until `on`" }
            )),
            StreamEvent::Switched { on } => {
                Some(format!("watch {}", if *on { "on" } else { "off" }))
            }
            StreamEvent::ControlRefused {
                command,
                reason,
                watching,
                ..
            } => Some(format!(
                "control `{}` refused: {}; still watching {}",
                escape::escaped(command),
                escape::escaped(reason),
                escape::escaped(watching)
            )),
            _ => None,
        }
    }
}

/// What a watch covers after a retarget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Covered {
    /// A process watch: the watched processes' threads.
    Threads(usize),
    /// A system-wide watch: the armed CPUs.
    Cpus(usize),
}

impl Covered {
    /// The threads a process watch covers; `None` for a system-wide watch.
    pub fn threads(self) -> Option<usize> {
        match self {
            Covered::Threads(n) => Some(n),
            Covered::Cpus(_) => None,
        }
    }

    /// The CPUs a system-wide watch covers; `None` for a process watch.
    pub fn cpus(self) -> Option<usize> {
        match self {
            Covered::Cpus(n) => Some(n),
            Covered::Threads(_) => None,
        }
    }
}

impl std::fmt::Display for Covered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (n, unit) = match self {
            Covered::Threads(n) => (n, "thread"),
            Covered::Cpus(n) => (n, "CPU"),
        };
        write!(f, "{n} {unit}{}", if *n == 1 { "" } else { "s" })
    }
}

/// Why the session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    Duration,
    Count,
    Signal(u32),
    BrokenPipe,
    /// `--strict-hotplug`: this CPU came online and could not be armed. The run exits 3 after the summary.
    StrictHotplug(u32),
    /// A process watch: every watched process has exited.
    Exited,
    /// Every target was in kernel modules that have been unloaded.
    ModuleUnloaded,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Duration => f.write_str("duration reached"),
            StopReason::Count => f.write_str("count reached"),
            StopReason::Signal(n) => write!(f, "signal {}", signal_name(*n)),
            StopReason::BrokenPipe => f.write_str("output closed"),
            StopReason::StrictHotplug(cpu) => {
                write!(f, "cpu {cpu} could not be armed (--strict-hotplug)")
            }
            StopReason::Exited => f.write_str("watched process exited"),
            StopReason::ModuleUnloaded => f.write_str("watched module unloaded"),
        }
    }
}

pub(crate) fn signal_name(n: u32) -> &'static str {
    match n as i32 {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGUSR1 => "SIGUSR1",
        _ => "other",
    }
}

/// Totals at the end of a session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub hits_by_cpu: BTreeMap<u32, u64>,
    pub lost_by_cpu: BTreeMap<u32, u64>,
    /// Hits the filters dropped: not printed, not counted in `hits_by_cpu` nor toward `--count`.
    pub filtered: u64,
    /// `--value` hits whose instruction's value and memory at the trap differed (another CPU stored in
    /// between): the instruction's is printed.
    pub raced: u64,
    /// `--if` hits the kernel kept on the memory it read at the trap that the instruction's value would
    /// not have passed (a race the kernel cannot see).
    pub condition_disagreed: u64,
    /// Of `filtered`: traps of other processes that touched a process watch's address (one breakpoint
    /// per CPU sees every process there; the kernel program drops theirs).
    pub filtered_other_process: u64,
    /// Counts by call chain, ip and comm; kept only for `--summary`.
    pub tally: Option<summary::Tally>,
    pub elapsed: Duration,
    pub stop: Option<StopReason>,
    /// Things the reader must know about the counts (hits the kernel counted that never arrived).
    pub warnings: Vec<String>,
    /// Time a CPU ran unwatched: from when it was seen coming online (its uevent, or a reconcile) until
    /// its fresh breakpoint was armed, or the end of the run if it never was; stores made there then are
    /// not in the counts, and not in `lost` either.
    pub unwatched_ns_by_cpu: BTreeMap<u32, u64>,
    /// `--on`: the objects' books.
    pub objects: Option<ObjectTally>,
    /// Hits the stream could not print (their CPU's ring was full), by CPU. With [`Summary::from_totals`]
    /// they are in every count all the same, and `lost_by_cpu` holds only the hits in no total.
    pub unprinted_by_cpu: BTreeMap<u32, u64>,
    /// The counts (hits, by CPU, the tally, `--folded`) are the kernel's totals of every kept hit, not
    /// the hits the stream printed: the stream dropped some ([`crate::perf::bpf::totals`]).
    pub from_totals: bool,
    /// A stop signal ended an output whose reader read nothing (`cli::gives_way`): what the stream did
    /// not print is for that, not a full ring.
    pub output_not_read: bool,
}

impl Summary {
    /// Hits the stream could not print; the totals count them.
    pub fn unprinted(&self) -> u64 {
        self.unprinted_by_cpu.values().sum()
    }

    /// Why [`Summary::unprinted`]'s hits were not printed, in a few words: a full ring, or, when the run
    /// ended because the output was closed (`| head`), that (the hits after it stay in the rings).
    pub fn unprinted_because(&self) -> &'static str {
        match self.stop {
            _ if self.output_not_read => "output not read",
            Some(StopReason::BrokenPipe) => "output closed",
            _ => "ring full",
        }
    }

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
    /// Arming was refused, before any header: a machine-readable stream says so on stdout (the refusal's
    /// `kind`, the `reason` the error line on stderr gives, and the exit code); the others print nothing,
    /// the error line being the caller's.
    fn refused(&mut self, _kind: &str, _reason: &str, _code: i32) -> io::Result<()> {
        Ok(())
    }
    /// The stream dropped hits, and the kernel counted every one: what a printer aggregates starts over
    /// from the totals, each handed to [`Output::counted`]. Printers of the stream itself ignore both.
    fn recount(&mut self) {}
    /// `count` hits like `hit` (its chain and writer) in the kernel's totals; see [`Output::recount`].
    fn counted(&mut self, _hit: &Hit<'_>, _count: u64) {}
    /// Hits this printer took whose text never reached its destination (it failed first), by CPU: they
    /// were not printed ([`sent`]). Only the stream's printer keeps these books.
    fn unsent(&self) -> BTreeMap<u32, u64> {
        BTreeMap::new()
    }
}

/// Runs several printers as one, in order. Every printer is finished even when an earlier one failed (a
/// closed stdout must not cost the flame graph file or the stderr summary); the first error is returned.
#[derive(Default)]
pub struct Tee(pub Vec<Box<dyn Output>>);

impl Tee {
    fn each(&mut self, mut f: impl FnMut(&mut dyn Output) -> io::Result<()>) -> io::Result<()> {
        let mut first = Ok(());
        for o in &mut self.0 {
            if let Err(e) = f(o.as_mut()) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

impl Output for Tee {
    fn header(&mut self, header: &Header<'_>) -> io::Result<()> {
        self.each(|o| o.header(header))
    }
    fn armed(&mut self, events: usize, cpus: &BTreeSet<u32>, time_ns: u64) -> io::Result<()> {
        self.each(|o| o.armed(events, cpus, time_ns))
    }
    fn hit(&mut self, hit: &Hit<'_>) -> io::Result<()> {
        self.each(|o| o.hit(hit))
    }
    fn event(&mut self, event: &StreamEvent, time_ns: u64) -> io::Result<()> {
        self.each(|o| o.event(event, time_ns))
    }
    fn flush(&mut self) -> io::Result<()> {
        self.each(|o| o.flush())
    }
    fn finish(&mut self, summary: &Summary) -> io::Result<()> {
        self.each(|o| o.finish(summary))
    }
    fn refused(&mut self, kind: &str, reason: &str, code: i32) -> io::Result<()> {
        self.each(|o| o.refused(kind, reason, code))
    }
    fn recount(&mut self) {
        self.0.iter_mut().for_each(|o| o.recount());
    }
    fn counted(&mut self, hit: &Hit<'_>, count: u64) {
        self.0.iter_mut().for_each(|o| o.counted(hit, count));
    }
    fn unsent(&self) -> BTreeMap<u32, u64> {
        let mut by_cpu = BTreeMap::new();
        for (cpu, n) in self.0.iter().flat_map(|o| o.unsent()) {
            *by_cpu.entry(cpu).or_default() += n;
        }
        by_cpu
    }
}

/// `--quiet` and `--folded` to stdout: the wrapped printer's end-of-session report only. What a person must
/// still hear (armed, a CPU that could not be armed, a module unloaded under a watch) goes to `err` as one
/// line each.
pub struct Quiet<O: Output, E: Write> {
    inner: O,
    err: E,
}

impl<O: Output, E: Write> Quiet<O, E> {
    pub fn new(inner: O, err: E) -> Self {
        Quiet { inner, err }
    }
}

impl<O: Output, E: Write> Output for Quiet<O, E> {
    fn header(&mut self, _: &Header<'_>) -> io::Result<()> {
        Ok(())
    }
    fn refused(&mut self, kind: &str, reason: &str, code: i32) -> io::Result<()> {
        self.inner.refused(kind, reason, code)
    }
    fn armed(&mut self, events: usize, cpus: &BTreeSet<u32>, _: u64) -> io::Result<()> {
        writeln!(
            self.err,
            "ksymwatch: armed {events} breakpoint{} on cpus {}",
            if events == 1 { "" } else { "s" },
            crate::cpulist::format(cpus)
        )?;
        self.err.flush()
    }
    fn hit(&mut self, _: &Hit<'_>) -> io::Result<()> {
        Ok(())
    }
    fn event(&mut self, event: &StreamEvent, _: u64) -> io::Result<()> {
        match event {
            StreamEvent::CpuArmFailed { cpu, reason, .. } => {
                arm_failed_note(&mut self.err, *cpu, reason)
            }
            StreamEvent::ModuleUnloaded { module, targets } => writeln!(
                self.err,
                "ksymwatch: module {} unloaded: no longer watching {}",
                escape::escaped(module),
                escape::escaped(&targets.join(", "))
            ),
            StreamEvent::ProcessExec { pid, comm } => writeln!(
                self.err,
                "ksymwatch: process {pid} exec'd {}: no longer watched",
                escape::escaped(comm)
            ),
            // Objects come and go by the thousand: the summary counts them.
            StreamEvent::ObjectArmed(_) | StreamEvent::ObjectFreed { .. } => Ok(()),
            // A script driving --control waits for the acknowledgement; with no stream it is on stderr.
            _ => match event.control_text() {
                Some(text) => {
                    writeln!(self.err, "ksymwatch: {text}")?;
                    self.err.flush()
                }
                None => Ok(()),
            },
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn finish(&mut self, summary: &Summary) -> io::Result<()> {
        if summary.unprinted() == 0 {
            return self.inner.finish(summary);
        }
        // No hit is printed here by design, so none is "not printed" for want of room: saying so, with a
        // larger --buffer-pages as the cure, would send the reader after nothing. The counts are the
        // kernel's totals all the same.
        let counted = Summary {
            unprinted_by_cpu: BTreeMap::new(),
            ..summary.clone()
        };
        self.inner.finish(&counted)
    }
    fn recount(&mut self) {
        self.inner.recount();
    }
    fn counted(&mut self, hit: &Hit<'_>, count: u64) {
        self.inner.counted(hit, count);
    }
}

/// The stderr line for a CPU that came online unarmed: every mode says it, since hits from it are missing.
pub fn arm_failed_note(err: &mut impl Write, cpu: u32, reason: &str) -> io::Result<()> {
    writeln!(
        err,
        "ksymwatch: cpu {cpu} came online but could not be armed: {reason}"
    )
}

/// The one-line human summary on stderr (plus a warning when records were lost), in every mode.
pub fn summary_line(err: &mut impl Write, summary: &Summary) -> io::Result<()> {
    let by_cpu: Vec<String> = summary
        .hits_by_cpu
        .iter()
        .map(|(c, n)| format!("cpu{c} {n}"))
        .collect();
    write!(
        err,
        "ksymwatch: {} hits ({}), {} lost, {:.3}s",
        summary.hits(),
        if by_cpu.is_empty() {
            "none".to_string()
        } else {
            by_cpu.join(", ")
        },
        summary.lost(),
        summary.elapsed.as_secs_f64()
    )?;
    if summary.filtered > 0 {
        write!(err, ", {} filtered", summary.filtered)?;
        if summary.filtered_other_process > 0 {
            write!(
                err,
                " ({} by other processes at the address)",
                summary.filtered_other_process
            )?;
        }
    }
    if summary.raced > 0 {
        write!(
            err,
            ", {} raced (memory at the trap held another CPU's store; the instruction's value is shown)",
            summary.raced
        )?;
    }
    if summary.condition_disagreed > 0 {
        write!(
            err,
            ", {} kept by --if on memory that the instruction's value would not pass",
            summary.condition_disagreed
        )?;
    }
    if summary.unprinted() > 0 {
        write!(
            err,
            ", {} not printed ({}){}",
            summary.unprinted(),
            summary.unprinted_because(),
            if summary.from_totals {
                ", counted in the kernel's totals"
            } else {
                ""
            }
        )?;
    }
    if !summary.unwatched_ns_by_cpu.is_empty() {
        let gaps: Vec<String> = summary
            .unwatched_ns_by_cpu
            .iter()
            .map(|(c, ns)| format!("cpu{c} {:.3} ms", *ns as f64 / 1e6))
            .collect();
        write!(err, ", unwatched {}", gaps.join(", "))?;
    }
    if let Some(stop) = summary.stop {
        write!(err, ", stopped: {stop}")?;
    }
    writeln!(err)?;
    if let Some(o) = &summary.objects {
        let us = |q| {
            o.gap(q)
                .map_or("-".to_string(), |ns| format!("{:.0} us", ns as f64 / 1e3))
        };
        writeln!(
            err,
            "ksymwatch: objects: {} seen, {} armed, {} skipped (every register busy, arming refused, or drained after the stop), {} evicted, {} freed, \
             {} freed before they could be armed, {} lost, {} writes after a free not reported; allocation \
             to armed: median {}, p99 {}",
            o.seen,
            o.armed,
            o.skipped,
            o.evicted,
            o.freed,
            o.freed_unarmed,
            o.lost,
            o.after_free,
            us(0.5),
            us(0.99)
        )?;
    }
    let per_cpu = |m: &BTreeMap<u32, u64>| {
        m.iter()
            .map(|(c, n)| format!("cpu{c} {n}"))
            .collect::<Vec<String>>()
            .join(", ")
    };
    if summary.lost() > 0 && summary.from_totals {
        writeln!(
            err,
            "ksymwatch: WARNING: {} hits lost ({}): in no total (the kernel's table of counts was \
             full), so the counts, the summary and --folded leave them out; the stream printed those its \
             rings had room for",
            summary.lost(),
            per_cpu(&summary.lost_by_cpu)
        )?;
    } else if summary.lost() > 0 {
        writeln!(
            err,
            "ksymwatch: WARNING: {} events lost ({}); use a larger --buffer-pages",
            summary.lost(),
            per_cpu(&summary.lost_by_cpu)
        )?;
    }
    if summary.unprinted() == 0 {
        // Nothing the stream left out.
    } else if summary.from_totals && summary.output_not_read {
        writeln!(
            err,
            "ksymwatch: {} hits not printed ({}): the output's reader read nothing when the run was to \
             stop (a signal, or --duration); the counts, the summary and --folded include them, from the kernel's totals",
            summary.unprinted(),
            per_cpu(&summary.unprinted_by_cpu)
        )?;
    } else if summary.from_totals && summary.stop == Some(StopReason::BrokenPipe) {
        writeln!(
            err,
            "ksymwatch: {} hits not printed ({}): the output was closed before they could be printed; \
             the counts, the summary and --folded include them, from the kernel's totals",
            summary.unprinted(),
            per_cpu(&summary.unprinted_by_cpu)
        )?;
    } else if summary.from_totals {
        writeln!(
            err,
            "ksymwatch: {} hits not printed ({}): their rings were full; the counts, the summary and \
             --folded include them, from the kernel's totals (a larger --buffer-pages prints more)",
            summary.unprinted(),
            per_cpu(&summary.unprinted_by_cpu)
        )?;
    }
    if !summary.unwatched_ns_by_cpu.is_empty() {
        writeln!(
            err,
            "ksymwatch: WARNING: a CPU that came online ran unwatched until its breakpoint was armed (above): \
             stores made there in that time are not counted, not even as lost"
        )?;
    }
    for w in &summary.warnings {
        // A warning can name a user binary's path: one line whatever it holds.
        writeln!(err, "ksymwatch: WARNING: {}", escape::escaped(w))?;
    }
    err.flush()
}

/// `secs.usecs`, ftrace's timestamp form.
pub fn format_time(ns: u64) -> String {
    let mut s = String::new();
    numbers::push_time(&mut s, ns);
    s
}

#[cfg(test)]
mod tests;
