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
    match value {
        Value::NotRead => {}
        Value::Unreadable => l.push_str(" value=?"),
        Value::Read(v) => {
            l.push_str(" value=0x");
            push_hex(l, v);
        }
        Value::Written { value, old, from } => {
            for (key, v) in [(" value=", value), (" old=", old)] {
                l.push_str(key);
                match v {
                    Some(v) => {
                        l.push_str("0x");
                        push_hex(l, v);
                    }
                    None => l.push('?'),
                }
                if key == " value=" && value.is_some() {
                    match from {
                        ValueFrom::Insn => {}
                        ValueFrom::Raced { memory } => {
                            l.push_str("(raced:0x");
                            push_hex(l, memory);
                            l.push(')');
                        }
                        ValueFrom::Memory => l.push_str("(mem)"),
                        ValueFrom::NoStart => l.push_str("(mem,nostart)"),
                    }
                }
            }
        }
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
            StreamEvent::Lost { cpu, count } => {
                writeln!(self.out, "# lost {count} events on cpu {cpu} at {t}")
            }
            StreamEvent::CpuOffline { cpu } => writeln!(self.out, "# cpu {cpu} offline at {t}"),
            StreamEvent::CpuOnline {
                cpu,
                after_uevent_ns,
                open_ns,
            } => {
                write!(self.out, "# cpu {cpu} online: armed at {t}")?;
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
            StreamEvent::Retargeted { .. } | StreamEvent::Switched { .. } => {
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
            StreamEvent::ObjectArmed {
                index,
                addr,
                slot,
                gap_ns,
                pid,
                comm,
                evicted,
            } => writeln!(
                self.out,
                "# object #{index} 0x{addr:x} allocated by {}-{pid}: armed at {t} in slot {slot}, \
                 {:.0} us after its allocation{}",
                escaped(comm),
                *gap_ns as f64 / 1e3,
                evicted.map_or(String::new(), |e| format!(" (evicted #{e})"))
            ),
            StreamEvent::ObjectFreed { index, addr, hits } => writeln!(
                self.out,
                "# object #{index} 0x{addr:x} freed at {t} after {hits} hit{}",
                if *hits == 1 { "" } else { "s" }
            ),
            StreamEvent::Dump { trigger, hits } => {
                let then = if matches!(trigger, DumpTrigger::Hit { .. }) {
                    ", then it"
                } else {
                    ""
                };
                writeln!(
                    self.out,
                    "# dump at {t}: {trigger}; the last {hits} hit{}{then}",
                    if *hits == 1 { "" } else { "s" }
                )
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
mod tests {
    use super::*;
    use crate::model::watch::Access;
    use crate::perf::record::encode;
    use crate::report::testutil::{each_hit, each_value_of_a_user_store, sample, table, watch};

    /// The parts a printer keeps spelled (the task per CPU, the target per index) are spelled again
    /// whenever a hit differs from what they were spelled for: every line equals a fresh printer's.
    #[test]
    fn kept_parts_follow_every_change() {
        use crate::report::testutil::percpu_watch;
        let chain = [encode::KERNEL, 0xffffffff81000077];
        let at =
            |tid, cpu, addr| sample(0xffffffff81000077, 1, tid, 5_000_000_000, addr, cpu, &chain);
        let hits = [
            (at(5, 0, 0x7ffd0000), "w", 0),
            (at(5, 0, 0x7ffd0000), "w", 0),
            (at(6, 0, 0x7ffd0000), "w", 0),
            (at(6, 0, 0x7ffd0000), "renamed", 0),
            (at(6, 1, 0x7ffd0000), "renamed", 0),
            (at(5, 0, 0x7ffc0010), "w", 1),
            (at(5, 0, 0x7ffd0000), "w", 1),
            (at(5, 0, 0x7ffd0000), "w", 0),
            (at(5, 2000, 0x7ffd0000), "w", 70),
        ];
        let mut watches = vec![
            watch("a", 0x7ffd0000, Access::Write),
            percpu_watch("pc", None),
        ];
        watches.resize(71, watch("far", 0x7ffd0000, Access::Write));
        // The same index moved (`--control`): another label, then another access.
        let moved = [watch("b", 0x7ffd0000, Access::Write)];
        let rw = [watch("b", 0x7ffd0000, Access::ReadWrite)];
        let mut kept = Ftrace::new(Vec::new(), Vec::new());
        let mut want = String::new();
        let mut each = |hit: &Hit<'_>| {
            kept.hit(hit).unwrap();
            let mut fresh = Ftrace::new(Vec::new(), Vec::new());
            fresh.hit(hit).unwrap();
            want.push_str(&String::from_utf8(fresh.into_inner().0).unwrap());
        };
        each_hit(&table(), &watches, &hits, &mut each);
        each_hit(&table(), &moved, &hits[..1], &mut each);
        each_hit(&table(), &rw, &hits[..1], &mut each);
        let got = String::from_utf8(kept.into_inner().0).unwrap();
        assert_eq!(got, want);
        for part in [
            "               w-6       [000]",
            "         renamed-6       [001]",
            "               w-5       [2000]",
            ": pc@cpu0 W ip=",
            ": pc@cpu1 W ip=",
            ": far W ip=",
            ": b W ip=",
            ": b RW ip=",
        ] {
            assert!(got.contains(part), "{part:?} in {got}");
        }
    }

    #[test]
    fn formats_a_hit_from_record_bytes() {
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
                0xffffffffdead0000,
                encode::USER,
                0x401000,
            ],
        );
        let watches = [watch("0x7ffd0000", 0x7ffd0000, Access::Write)];
        let mut p = Ftrace::new(Vec::new(), Vec::new());
        each_hit(&table(), &watches, &[(sample, "reader", 0)], |hit| {
            p.hit(hit).unwrap()
        });
        let (out, _) = p.into_inner();
        let text = String::from_utf8(out).unwrap();
        let expected = concat!(
            "          reader-1235    [001]   412.123456: 0x7ffd0000 W ip=read_zero+0x77/0x100\n",
            " => read_zero+0x77/0x100\n",
            " => vfs_read+0xbb/0x100\n",
            " => 0xffffffffdead0000\n",
            " => 0x401000 [reader]\n",
        );
        assert_eq!(text, expected);
    }

    /// A chain seen before is printed from its cached spelling: the same bytes as a hit spelled afresh,
    /// with each hit's own comm, time and value around it, and its own comm in an unnamed user frame.
    #[test]
    fn a_repeated_chain_prints_the_same() {
        let kernel = [
            encode::KERNEL,
            0xffffffff81000077,
            0xffffffff810001bb,
            0xffffffffdead0000,
        ];
        let user = [encode::KERNEL, 0xffffffff81000077, encode::USER, 0x401000];
        let hits: Vec<_> = (0..6u32)
            .map(|i| {
                let chain: &[u64] = if i < 3 { &kernel } else { &user };
                let s = sample(
                    0xffffffff81000077,
                    10,
                    10 + i,
                    1_000 * u64::from(i),
                    0x10,
                    i % 2,
                    chain,
                );
                (s, ["a", "bb", "a"][i as usize % 3], 0)
            })
            .collect();
        let watches = [watch("x", 0x10, Access::Write)];
        let (mut cached, mut fresh) = (
            Ftrace::new(Vec::new(), Vec::new()),
            Ftrace::new(Vec::new(), Vec::new()),
        );
        let mut reused = 0;
        each_hit(&table(), &watches, &hits, |hit| {
            reused += usize::from(hit.rendered.is_some_and(|r| r.text.borrow().made));
            cached.hit(hit).unwrap();
            fresh
                .hit(&Hit {
                    rendered: None,
                    ..*hit
                })
                .unwrap();
        });
        assert_eq!(
            reused, 4,
            "every hit but the first of each chain finds it spelled"
        );
        let (cached, fresh) = (cached.into_inner().0, fresh.into_inner().0);
        let (cached, fresh) = (
            String::from_utf8(cached).unwrap(),
            String::from_utf8(fresh).unwrap(),
        );
        assert_eq!(cached, fresh);
        assert_eq!(cached.matches(" => 0x401000 [bb]\n").count(), 1, "{cached}");
        assert_eq!(cached.matches(" => 0x401000 [a]\n").count(), 2, "{cached}");
    }

    /// Issue 38 item 6: a hostile thread name (newline, ESC, CR, backslash, a forged frame) is escaped in
    /// the hit line, in an unnamed user frame that prints it, in the marks and in the summary: each hit is
    /// one line and its chain lines are only its own frames.
    #[test]
    fn a_hostile_comm_is_escaped_everywhere() {
        let evil = "x\n => evil+0x1\u{1b}[2J\r\\";
        let shown = "x\\n => evil+0x1\\x1b[2J\\r\\\\";
        let s = sample(
            0x401000,
            7,
            7,
            5_000,
            0x7ffd0000,
            0,
            &[encode::USER, 0x401000, 0x401100],
        );
        let watches = [watch("counter", 0x7ffd0000, Access::Write)];
        let mut p = Ftrace::new(Vec::new(), Vec::new());
        let mut tally = crate::report::summary::Tally::default();
        each_hit(
            &table(),
            &watches,
            &[(s.clone(), evil, 0), (s, evil, 0)],
            |hit| {
                p.hit(hit).unwrap();
                p.hit(&Hit {
                    rendered: None,
                    ..*hit
                })
                .unwrap();
                tally.add(hit);
            },
        );
        p.event(
            &StreamEvent::ProcessExec {
                pid: 7,
                comm: evil.into(),
            },
            6_000,
        )
        .unwrap();
        let mut summary = Summary::default();
        summary.hits_by_cpu.insert(0, 2);
        summary.tally = Some(tally);
        p.finish(&summary).unwrap();
        let text = String::from_utf8(p.into_inner().0).unwrap();
        assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
        let hits: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(": counter W ip="))
            .collect();
        assert_eq!(hits.len(), 4, "{text}");
        for h in &hits {
            assert!(h.trim_start().starts_with(&format!("{shown}-7 ")), "{h}");
        }
        let frames: Vec<&str> = text.lines().filter(|l| l.starts_with(" => ")).collect();
        assert_eq!(frames.len(), 8, "two frames a hit, none forged: {text}");
        assert!(
            frames.iter().all(|f| f.ends_with(&format!(" [{shown}]"))),
            "{text}"
        );
        assert!(
            text.contains(&format!("# process 7 exec'd {shown} at")),
            "{text}"
        );
        assert!(
            text.contains(&format!("#  => 0x401000 [{shown}]\n")),
            "{text}"
        );
        assert!(text.contains(&format!("%  {shown}\n")), "by comm: {text}");
        // Every line is a hit, a frame, or a `#` line.
        assert!(
            text.lines().all(|l| l.starts_with('#')
                || l.starts_with(" => ")
                || l.contains(": counter W ip=")),
            "{text}"
        );
    }

    /// A per-CPU target's hit says whose copy it hit after the label; the header lists the copies.
    #[test]
    fn a_per_cpu_hit_names_its_copy() {
        use crate::report::testutil::percpu_watch;
        let s = sample(0xffffffff81000077, 1, 1, 5_000, 0x7ffd0000, 1, &[]);
        let watches = [percpu_watch("runqueues.nr_running", None)];
        let mut p = Ftrace::new(Vec::new(), Vec::new());
        each_hit(&table(), &watches, &[(s, "a", 0)], |hit| {
            p.hit(hit).unwrap()
        });
        let text = String::from_utf8(p.into_inner().0).unwrap();
        assert!(
            text.contains(": runqueues.nr_running@cpu1 W ip=read_zero+0x77/0x100"),
            "{text}"
        );
        assert_eq!(
            target_line(&watches[0]),
            "# target: runqueues.nr_running addr=0x7ffc0010 len=4 access=W (write) per-cpu: +0x10, \
             each CPU its own copy (cpu0 0x7ffc0010, cpu1 0x7ffd0000)"
        );
        let one = percpu_watch("runqueues.nr_running", Some(1));
        assert!(
            target_line(&one).contains("every CPU cpu1's copy"),
            "{}",
            target_line(&one)
        );
    }

    /// The hit lines (not the chains) of a user store printed with each of `values`; every hit has its
    /// one-frame chain.
    fn hit_lines(values: &[Value]) -> Vec<String> {
        let mut p = Ftrace::new(Vec::new(), Vec::new());
        each_value_of_a_user_store(values, |hit| p.hit(hit).unwrap());
        let text = String::from_utf8(p.into_inner().0).unwrap();
        let chains = text.lines().filter(|l| *l == " => 0x401136 [writer]");
        assert_eq!(chains.count(), values.len(), "{text}");
        text.lines()
            .filter(|l| !l.starts_with(" => "))
            .map(str::to_string)
            .collect()
    }

    /// A process watch's hits end with the value read when they were drained: the hex of the watched
    /// integer, `?` when the process could not be read; a system-wide hit (above) has none.
    #[test]
    fn a_process_hit_ends_with_its_value() {
        let values = [
            Value::Read(0x2a),
            Value::Read(u64::MAX),
            Value::Read(0),
            Value::Unreadable,
        ];
        let line = "          writer-4322    [000]     5.000000: counter W ip=0x401136 [writer]";
        assert_eq!(
            hit_lines(&values),
            [
                format!("{line} value=0x2a"),
                format!("{line} value=0xffffffffffffffff"),
                format!("{line} value=0x0"),
                format!("{line} value=?"),
            ]
        );
    }

    /// `--value`: the store's own value and the one before it, `?` for either when unknown (the first hit
    /// has no `old`; a lost value record or a failed read has no `value`), still last on the line.
    #[test]
    fn a_value_hit_ends_with_value_and_old() {
        let values = [
            Value::Written {
                value: Some(0x1f4),
                old: Some(0x1f3),
                from: ValueFrom::Insn,
            },
            Value::Written {
                value: Some(0),
                old: None,
                from: ValueFrom::Insn,
            },
            Value::Written {
                value: None,
                old: Some(u64::MAX),
                from: ValueFrom::Insn,
            },
            Value::Written {
                value: None,
                old: None,
                from: ValueFrom::Insn,
            },
        ];
        let line = "          writer-4322    [000]     5.000000: counter W ip=0x401136 [writer]";
        assert_eq!(
            hit_lines(&values),
            [
                format!("{line} value=0x1f4 old=0x1f3"),
                format!("{line} value=0x0 old=?"),
                format!("{line} value=? old=0xffffffffffffffff"),
                format!("{line} value=? old=?"),
            ]
        );
        // A value read from memory is marked; one that raced names what memory held.
        let values = [
            Value::Written {
                value: Some(3),
                old: Some(2),
                from: ValueFrom::Memory,
            },
            Value::Written {
                value: Some(3),
                old: None,
                from: ValueFrom::Raced { memory: 0x2a },
            },
        ];
        assert_eq!(
            hit_lines(&values),
            [
                format!("{line} value=0x3(mem) old=0x2"),
                format!("{line} value=0x3(raced:0x2a) old=?"),
            ]
        );
    }

    /// A process watch's `# armed` line says how many processes and threads it covers.
    #[test]
    fn armed_counts_processes_and_threads() {
        let watch = watch("x", 0x404028, Access::Write);
        let cpus: BTreeSet<u32> = [0, 1].into();
        let processes = [(10, "a".to_string()), (11, "b".to_string())];
        let mut p = Ftrace::new(Vec::new(), Vec::new());
        p.header(&Header {
            watches: std::slice::from_ref(&watch),
            cpus: &cpus,
            source: "kallsyms /proc/kallsyms",
            processes: &processes,
            threads: 10001,
            values: false,
            condition: None,
            objects: None,
        })
        .unwrap();
        p.armed(2, &cpus, 5_000_001_000).unwrap();
        let (out, _) = p.into_inner();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(
                "# armed 2 breakpoints on cpus 0-1 for 2 processes (10001 threads at the start) at"
            ),
            "{text}"
        );
        let mut j = crate::report::json::Json::new(Vec::new(), Vec::new());
        j.header(&Header {
            watches: std::slice::from_ref(&watch),
            cpus: &cpus,
            source: "kallsyms /proc/kallsyms",
            processes: &processes[..1],
            threads: 1,
            values: false,
            condition: None,
            objects: None,
        })
        .unwrap();
        j.armed(2, &cpus, 5_000_001_000).unwrap();
        let out = String::from_utf8(j.into_inner().0).unwrap();
        let armed: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
        assert_eq!(
            (armed["processes"].as_u64(), armed["threads"].as_u64()),
            (Some(1), Some(1))
        );
    }

    #[test]
    fn header_armed_events_and_summary() {
        let watch = watch("x", 0xffffffff83003e00, Access::ReadWrite);
        let cpus: BTreeSet<u32> = [0, 1].into();
        let mut p = Ftrace::new(Vec::new(), Vec::new());
        p.header(&Header {
            watches: std::slice::from_ref(&watch),
            cpus: &cpus,
            source: "kallsyms /proc/kallsyms",
            processes: &[],
            threads: 0,
            values: false,
            condition: None,
            objects: None,
        })
        .unwrap();
        p.armed(2, &cpus, 5_000_001_000).unwrap();
        p.event(&StreamEvent::Lost { cpu: 1, count: 3 }, 6_000_000_000)
            .unwrap();
        let mut summary = Summary::default();
        summary.hits_by_cpu.insert(0, 5);
        summary.lost_by_cpu.insert(1, 3);
        summary
            .warnings
            .push("/tmp/a\nb: symbol table too large".into());
        p.finish(&summary).unwrap();
        let (out, err) = p.into_inner();
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("# tracer: ksymwatch\n"));
        assert!(out.contains("# target: x addr=0xffffffff83003e00 len=8 access=RW"));
        assert!(out.contains("# armed 2 breakpoints on cpus 0-1 at 5.000001\n"));
        assert!(out.contains("# lost 3 events on cpu 1 at 6.000000\n"));
        let err = String::from_utf8(err).unwrap();
        assert!(err.contains("5 hits (cpu0 5), 3 lost"), "{err}");
        assert!(err.contains("WARNING"));
        assert!(
            err.contains("ksymwatch: WARNING: /tmp/a\\nb: symbol table too large\n"),
            "a warning naming a file is one line: {err}"
        );
    }

    /// A module unloaded under a watch: one mark naming the module and the targets that ended; the summary
    /// gives it as the reason the run stopped when they were the last.
    #[test]
    fn module_unloaded_mark() {
        let mut p = Ftrace::new(Vec::new(), Vec::new());
        let e = StreamEvent::ModuleUnloaded {
            module: "nfs".into(),
            targets: vec!["nfs:nfs_counter".into(), "nfs_flags+0x4".into()],
        };
        p.event(&e, 7_000_000_000).unwrap();
        let summary = Summary {
            stop: Some(crate::report::StopReason::ModuleUnloaded),
            ..Summary::default()
        };
        p.finish(&summary).unwrap();
        let (out, err) = p.into_inner();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.starts_with(
                "# module nfs unloaded at 7.000000: no longer watching nfs:nfs_counter, nfs_flags+0x4\n"
            ),
            "{out}"
        );
        let all = out + &String::from_utf8(err).unwrap();
        assert!(all.contains("watched module unloaded"), "{all}");
    }

    /// The control marks: a reader splits hits before and after a move at the `# watch` line; a refusal is
    /// also on stderr, since the script that sent it may not read the stream.
    #[test]
    fn control_acknowledgements() {
        let mut p = Ftrace::new(Vec::new(), Vec::new());
        let moved = StreamEvent::Retargeted {
            index: 0,
            watch: watch("target_var2", 0x5555_0040, Access::Write),
            covered: crate::report::Covered::Threads(1020),
            took_ns: 1_800_000,
            enabled: true,
        };
        p.event(&moved, 7_000_000_000).unwrap();
        let mut paused = moved.clone();
        if let StreamEvent::Retargeted { enabled, .. } = &mut paused {
            *enabled = false;
        }
        p.event(&paused, 7_050_000_000).unwrap();
        p.event(&StreamEvent::Switched { on: false }, 7_100_000_000)
            .unwrap();
        p.event(
            &StreamEvent::ControlRefused {
                command: "watch nope".into(),
                reason: "unknown symbol `nope`".into(),
                watching: "target_var2 (0x55550040/8)".into(),
                kind: "bad_target",
            },
            7_200_000_000,
        )
        .unwrap();
        let (out, err) = p.into_inner();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            out,
            concat!(
                "# watch target_var2 (0x55550040/8 W) armed on 1020 threads in 1.800 ms at 7.000000\n",
                "# watch target_var2 (0x55550040/8 W) armed on 1020 threads in 1.800 ms, off until `on` at \
                 7.050000\n",
                "# watch off at 7.100000\n",
                "# control `watch nope` refused: unknown symbol `nope`; still watching target_var2 \
                 (0x55550040/8) at 7.200000\n",
            )
        );
        let err = String::from_utf8(err).unwrap();
        assert_eq!(
            err,
            "ksymwatch: control `watch nope` refused: unknown symbol `nope`; still watching target_var2 \
             (0x55550040/8)\n"
        );
    }
}
