//! The default output: text laid out like `/sys/kernel/tracing/trace` with the stack-trace option, so the
//! lines read (and interleave by timestamp) like ftrace's own.
//!
//! ```text
//!           <idle>-0       [000]   412.123456: __start_init_stack+0x3e00 W ip=asm_sysvec_apic_timer_interrupt+0x1a/0x20
//!  => asm_sysvec_apic_timer_interrupt+0x1a/0x20
//!  => pv_native_safe_halt+0xf/0x20
//! ```
//!
//! A process watch ends each hit line with the watched value as read when the hit was drained,
//! `value=0x2a` (`value=?` when the process could not be read any more); a system-wide one has no value.
//! With `--value` each hit line ends with the store's own value and the one before it, `value=0x1f4
//! old=0x1f3` (`?` for either when unknown).

use std::collections::BTreeSet;
use std::io::{self, Write};

use super::escape::{self, escaped};
use super::frame::Text;
use super::numbers::{push_dec_zero, push_hex, push_left, push_right, push_time_right};
use super::summary::write_text;
use super::{
    arm_failed_note, format_time, summary_line, DumpTrigger, Header, Hit, Output, StreamEvent,
    Summary, Value, ValueFrom,
};
use crate::cpulist;
use crate::model::watch::{Access, Watch};

/// A target's header line: `# target: LABEL addr=0x... len=N access=W (write)` (also `--dry-run`'s).
pub(crate) fn target_line(w: &Watch) -> String {
    let mut line = format!(
        "# target: {} addr=0x{:x} len={} access={} ({})",
        escaped(&w.label),
        w.addr,
        w.len,
        w.access.letters(),
        w.access.word()
    );
    // A per-CPU variable: `addr` is one copy; say which each CPU watches.
    if let Some(p) = &w.per_cpu {
        let copies: Vec<String> = p
            .bases
            .iter()
            .map(|(cpu, base)| format!("cpu{cpu} 0x{:x}", base.wrapping_add(p.offset)))
            .collect();
        let whose = match p.copy {
            None => "each CPU its own copy".to_string(),
            Some(n) => format!("every CPU cpu{n}'s copy"),
        };
        line.push_str(&format!(
            " per-cpu: +0x{:x}, {whose} ({})",
            p.offset,
            copies.join(", ")
        ));
    }
    line
}

pub struct Ftrace<W: Write, E: Write> {
    out: W,
    err: E,
    top: usize,
    /// One hit's text, built here and written at once; reused so a hit allocates nothing.
    line: String,
    /// The parts of a hit line that repeat from hit to hit, spelled once.
    spelled: Spelled,
    /// A process watch's processes and threads at the start, from the header, for the `# armed` line.
    watched: Option<(usize, usize)>,
}

impl<W: Write, E: Write> Ftrace<W, E> {
    /// Hits, marks and the `--summary` report (as `#` lines) go to `out`; the one-line summary goes to `err`
    /// so that stdout stays a clean trace.
    pub fn new(out: W, err: E) -> Self {
        Ftrace {
            out,
            err,
            top: 20,
            line: String::new(),
            spelled: Spelled::default(),
            watched: None,
        }
    }

    /// How many call chains the `--summary` report lists (0: all).
    pub fn with_top(mut self, top: usize) -> Self {
        self.top = top;
        self
    }

    #[cfg(test)]
    pub fn into_inner(self) -> (W, E) {
        (self.out, self.err)
    }
}

/// The parts of a hit line that repeat, kept spelled: a flood prints the same task on a CPU and the
/// same target hit after hit, and padding, escaping and digits were most of a line's cost. Each is
/// checked against the hit (a few compares) and spelled again when it differs.
#[derive(Default)]
struct Spelled {
    /// By CPU: the last task printed there and `{comm:>16}-{tid:<7} [{cpu:03}] `.
    tasks: Vec<Option<TaskPart>>,
    /// By watch index: the target as last printed and `: {label}[@cpuN] {access} ip=`.
    targets: Vec<Option<TargetPart>>,
}

struct TaskPart {
    tid: u32,
    comm: String,
    text: String,
}

struct TargetPart {
    label: String,
    access: Access,
    copy: Option<u32>,
    text: String,
}

/// CPUs and targets past these are spelled every time (the caches stay small whatever the numbers).
const SPELLED_CPUS: usize = 1024;
const SPELLED_TARGETS: usize = 64;

impl Spelled {
    /// Appends `{comm:>16}-{tid:<7} [{cpu:03}] `.
    fn task(&mut self, l: &mut String, comm: &str, tid: u32, cpu: u32) {
        let i = cpu as usize;
        if i >= SPELLED_CPUS {
            return spell_task(l, comm, tid, cpu);
        }
        if self.tasks.len() <= i {
            self.tasks.resize_with(i + 1, || None);
        }
        let slot = &mut self.tasks[i];
        if !matches!(slot, Some(t) if t.tid == tid && t.comm == comm) {
            let mut text = String::new();
            spell_task(&mut text, comm, tid, cpu);
            *slot = Some(TaskPart {
                tid,
                comm: comm.to_owned(),
                text,
            });
        }
        if let Some(t) = slot {
            l.push_str(&t.text);
        }
    }

    /// Appends `: {label}[@cpuN] {access} ip=` for target `index`, `w`, hit at `addr`.
    fn target(&mut self, l: &mut String, index: usize, w: &Watch, addr: u64) {
        let copy = w.copy_at(addr);
        if index >= SPELLED_TARGETS {
            return spell_target(l, w, copy);
        }
        if self.targets.len() <= index {
            self.targets.resize_with(index + 1, || None);
        }
        let slot = &mut self.targets[index];
        // A `--control` move can change a target's label or access under the same index.
        if !matches!(slot, Some(t) if t.copy == copy && t.access == w.access && t.label == w.label)
        {
            let mut text = String::new();
            spell_target(&mut text, w, copy);
            *slot = Some(TargetPart {
                label: w.label.clone(),
                access: w.access,
                copy,
                text,
            });
        }
        if let Some(t) = slot {
            l.push_str(&t.text);
        }
    }
}

fn spell_task(l: &mut String, comm: &str, tid: u32, cpu: u32) {
    push_right(l, &escaped(comm), 16);
    l.push('-');
    push_left(l, itoa::Buffer::new().format(tid), 7);
    l.push_str(" [");
    push_dec_zero(l, u64::from(cpu), 3);
    l.push_str("] ");
}

fn spell_target(l: &mut String, w: &Watch, copy: Option<u32>) {
    l.push_str(": ");
    escape::push(l, &w.label);
    if let Some(cpu) = copy {
        l.push_str("@cpu");
        l.push_str(itoa::Buffer::new().format(cpu));
    }
    l.push(' ');
    l.push_str(w.access.letters());
    l.push_str(" ip=");
}

/// The ` => frame` lines of a hit's chain, innermost first.
fn push_chain(l: &mut String, hit: &Hit<'_>) {
    for f in hit.chain {
        // --lines: inlined functions first, innermost first, as the chain reads from the trap outwards.
        if let Some(line) = &f.line {
            for inlined in &line.inlined {
                l.push_str(" => ");
                escape::push(l, inlined);
                l.push('\n');
            }
        }
        l.push_str(" => ");
        f.push_text_escaped(l, hit.comm);
        if let Some(line) = &f.line {
            l.push_str(" (");
            escape::push(l, &line.location);
            l.push(')');
        }
        l.push('\n');
    }
}

/// A hit's value as the end of its text line: ` value=0x2a`, ` value=?`, ` value=0x1f4(mem) old=0x1f3`;
/// nothing when not read.
pub(crate) fn push_value(l: &mut String, value: Value) {
    let Some(shown) = value.shown() else {
        return;
    };
    push_hex_or_unknown(l, " value=", shown.value);
    match shown.from {
        None | Some(ValueFrom::Insn) => {}
        Some(ValueFrom::Raced { memory }) => {
            l.push_str("(raced:0x");
            push_hex(l, memory);
            l.push(')');
        }
        Some(ValueFrom::Memory) => l.push_str("(mem)"),
        Some(ValueFrom::NoStart) => l.push_str("(mem,nostart)"),
    }
    if let Some(old) = shown.old {
        push_hex_or_unknown(l, " old=", old);
    }
}

/// `key` and `0x`-hex `v`, or `?` when unknown.
fn push_hex_or_unknown(l: &mut String, key: &str, v: Option<u64>) {
    l.push_str(key);
    match v {
        Some(v) => {
            l.push_str("0x");
            push_hex(l, v);
        }
        None => l.push('?'),
    }
}

impl<W: Write, E: Write> Output for Ftrace<W, E> {
    fn header(&mut self, h: &Header<'_>) -> io::Result<()> {
        writeln!(self.out, "# tracer: ksymwatch")?;
        writeln!(self.out, "#")?;
        match h.objects {
            Some(line) => writeln!(self.out, "{line}")?,
            None => {
                for w in h.watches {
                    writeln!(self.out, "{}", target_line(w))?;
                }
            }
        }
        self.watched = (!h.processes.is_empty()).then_some((h.processes.len(), h.threads));
        if !h.processes.is_empty() {
            let names: Vec<String> = h
                .processes
                .iter()
                .map(|(pid, comm)| format!("{pid} ({})", escaped(comm)))
                .collect();
            writeln!(
                self.out,
                "# process: {}, {} thread{}",
                names.join(", "),
                h.threads,
                if h.threads == 1 { "" } else { "s" }
            )?;
        }
        if h.values {
            writeln!(
                self.out,
                "# value: read in the kernel at each hit (BPF); old: the value before it"
            )?;
        }
        if let Some(c) = h.condition {
            writeln!(self.out, "# if: {c} (decided in the kernel)")?;
        }
        if !h.cgroups.is_empty() {
            let paths: Vec<String> = h.cgroups.iter().map(|p| escaped(p).to_string()).collect();
            writeln!(
                self.out,
                "# cgroup: {} (writers in it or below only, decided in the kernel)",
                paths.join(", ")
            )?;
        }
        writeln!(self.out, "# symbols: {}", h.source)?;
        writeln!(self.out, "# cpus: {}", cpulist::format(h.cpus))?;
        Ok(())
    }

    fn armed(&mut self, events: usize, cpus: &BTreeSet<u32>, time_ns: u64) -> io::Result<()> {
        let watched = match self.watched {
            Some((p, t)) => format!(
                " for {p} process{} ({t} thread{} at the start)",
                if p == 1 { "" } else { "es" },
                if t == 1 { "" } else { "s" }
            ),
            None => String::new(),
        };
        writeln!(
            self.out,
            "# armed {events} breakpoint{} on cpus {}{watched} at {}",
            if events == 1 { "" } else { "s" },
            cpulist::format(cpus),
            format_time(time_ns)
        )?;
        writeln!(self.out, "#")?;
        writeln!(
            self.out,
            "#            TASK-PID     CPU#    TIMESTAMP  TARGET ACCESS IP"
        )?;
        writeln!(
            self.out,
            "#               | |         |         |         |     |     |"
        )?;
        self.out.flush()
    }

    fn hit(&mut self, hit: &Hit<'_>) -> io::Result<()> {
        let s = hit.sample;
        let l = &mut self.line;
        l.clear();
        // `{comm:>16}-{tid:<7} [{cpu:03}] {time:>12}: {label} {access} ip={ip}[ value=0x{value:x}]`
        self.spelled.task(l, hit.comm, s.tid, s.cpu);
        push_time_right(l, s.time, 12);
        self.spelled.target(l, hit.watch_index, hit.watch, s.addr);
        // A chain seen before is copied as it was spelled the first time (for this comm, if it matters).
        let cached = hit.rendered.map(|r| {
            let mut t = r.text.borrow_mut();
            if !t.made || (r.needs_comm && t.comm != hit.comm) {
                let Text {
                    comm, ip, lines, ..
                } = &mut *t;
                ip.clear();
                lines.clear();
                comm.clear();
                hit.ip.push_text_escaped(ip, hit.comm);
                push_chain(lines, hit);
                if r.needs_comm {
                    comm.push_str(hit.comm);
                }
                t.made = true;
            }
            t
        });
        match &cached {
            Some(t) => l.push_str(&t.ip),
            None => hit.ip.push_text_escaped(l, hit.comm),
        }
        // Last on the line: the ip's ` [binary]` already has a space in it, and readers split on the first
        // fields.
        push_value(l, hit.value);
        l.push('\n');
        match &cached {
            Some(t) => l.push_str(&t.lines),
            None => push_chain(l, hit),
        }
        self.out.write_all(l.as_bytes())
    }

    fn event(&mut self, event: &StreamEvent, time_ns: u64) -> io::Result<()> {
        let t = format_time(time_ns);
        match event {
            // On the hit path the kernel's totals still count the hits a full ring dropped.
            StreamEvent::Lost {
                cpu,
                count,
                counted: true,
            } => writeln!(
                self.out,
                "# {count} hits not printed on cpu {cpu} at {t} (ring full; counted in the totals)"
            ),
            StreamEvent::Lost {
                cpu,
                count,
                counted: false,
            } => writeln!(self.out, "# lost {count} events on cpu {cpu} at {t}"),
            StreamEvent::CpuOffline { cpu } => writeln!(self.out, "# cpu {cpu} offline at {t}"),
            StreamEvent::CpuOnline {
                cpu,
                after_uevent_ns,
                open_ns,
                enabled,
            } => {
                let off = if *enabled { "" } else { ", off until `on`" };
                write!(self.out, "# cpu {cpu} online: armed{off} at {t}")?;
                if let Some(ns) = after_uevent_ns {
                    write!(
                        self.out,
                        " ({:.3} ms after its uevent, {:.3} ms of it in perf_event_open)",
                        *ns as f64 / 1e6,
                        *open_ns as f64 / 1e6
                    )?;
                }
                writeln!(self.out)
            }
            StreamEvent::CpuArmFailed { cpu, reason, .. } => {
                writeln!(self.out, "# cpu {cpu} online: NOT armed at {t}: {reason}")?;
                arm_failed_note(&mut self.err, *cpu, reason)
            }
            StreamEvent::ControlRefused { .. } => {
                let text = event.control_text().unwrap_or_default();
                writeln!(self.out, "# {text} at {t}")?;
                writeln!(self.err, "ksymwatch: {text}")
            }
            StreamEvent::Retargeted(_) | StreamEvent::Switched { .. } => {
                let text = event.control_text().unwrap_or_default();
                // Flushed at once: a script waits for the acknowledgement before its next step.
                writeln!(self.out, "# {text} at {t}")?;
                self.out.flush()
            }
            StreamEvent::ModuleUnloaded { module, targets } => writeln!(
                self.out,
                "# module {} unloaded at {t}: no longer watching {}",
                escaped(module),
                escaped(&targets.join(", "))
            ),
            StreamEvent::ProcessExec { pid, comm } => writeln!(
                self.out,
                "# process {pid} exec'd {} at {t}: no longer watched",
                escaped(comm)
            ),
            StreamEvent::ObjectArmed(o) => writeln!(
                self.out,
                "# object #{} 0x{:x} allocated by {}-{}: armed at {t} in slot {}, {:.0} us after its \
                 allocation{}",
                o.index,
                o.addr,
                escaped(&o.comm),
                o.pid,
                o.slot,
                o.gap_ns as f64 / 1e3,
                o.evicted.map_or(String::new(), |e| format!(" (evicted #{e})"))
            ),
            StreamEvent::ObjectFreed { index, addr, hits } => writeln!(
                self.out,
                "# object #{index} 0x{addr:x} freed at {t} after {hits} hit{}",
                if *hits == 1 { "" } else { "s" }
            ),
            StreamEvent::Dump {
                trigger,
                hits,
                no_hit_yet,
            } => {
                let then = if matches!(trigger, DumpTrigger::Hit { .. }) {
                    ", then it"
                } else {
                    ""
                };
                let kept = super::dumped_hits(trigger, *hits, *no_hit_yet);
                writeln!(self.out, "# dump at {t}: {trigger}; {kept}{then}")
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn finish(&mut self, summary: &Summary) -> io::Result<()> {
        // The summary goes out even when stdout is gone (`| head`): that is exactly when it says why we stopped.
        let mut flushed = Ok(());
        if let Some(tally) = &summary.tally {
            flushed = write_text(&mut self.out, summary, tally, self.top);
        }
        flushed = flushed.and_then(|_| self.out.flush());
        summary_line(&mut self.err, summary)?;
        flushed
    }
}

#[cfg(test)]
mod tests;
