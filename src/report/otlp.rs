//! `--format otlp-json`: the session as OpenTelemetry logs, one OTLP/JSON `ExportLogsServiceRequest` per
//! line, the file format the OpenTelemetry Collector's `otlpjsonfile` receiver and Fluent Bit read.
//!
//! Every line holds one resource (this host and this tracer: `host.name`, `host.arch`, `os.type`,
//! `os.version` = the kernel release, `service.name` = `ksymwatch`, `service.version`, `process.pid` = the
//! tracer's) and one scope (`ksymwatch` and its version), with a batch of `LogRecord`s:
//!
//! - each hit is a record with severity INFO, a body like the text line (`writer-4322 [000] counter W
//!   ip=main+0x1c [writer] value=0x2a`) and attributes: `process.pid`, `thread.id`, `thread.name` (the
//!   comm), `cpu.logical_number`, `code.function.name` (the writer ip's function, when named),
//!   `ksymwatch.ip` (the ip as the text spells it), `ksymwatch.call_chain` (the chain, innermost first, as
//!   an array of the text's frame spellings; `code.stacktrace` is a single string, so not used), and
//!   `ksymwatch.X` for the `--json` hit field X (`target`, `target_index`, `addr`, `len`, `access`,
//!   `in_kernel`, and, when known, `value`, `old`, `value_from`, `raced`; an unknown value is left out);
//! - the `armed` mark (with the header's fields), every stream event and the end-of-session summary are
//!   events: `eventName` `ksymwatch.<type>` (the `--json` record type; also the older `event.name`
//!   attribute, for receivers that predate the field), attributes `ksymwatch.<field>` for the `--json`
//!   record's fields (`cpu` is `cpu.logical_number`, `pid` `process.pid`), a short body, severity WARN for
//!   what lost or missed stores (lost records, a CPU not armed, an unloaded module's watch, a refused
//!   control line, a summary that counts losses) and INFO otherwise (hits a full ring did not print that
//!   the kernel's totals count, too).
//!
//! The encoding is OTLP's JSON mapping of protobuf: lowerCamelCase field names, 64-bit integers
//! (`timeUnixNano`, `intValue`) as decimal strings, `severityNumber` as its integer, `AnyValue` as
//! `{"stringValue":..}`, `{"intValue":"123"}`, `{"boolValue":..}`, `{"doubleValue":..}`,
//! `{"arrayValue":{"values":[..]}}` and `{"kvlistValue":{"values":[..]}}`.
//!
//! Times: the kernel stamps hits with CLOCK_MONOTONIC; `timeUnixNano` adds [`Clock::offset_ns`],
//! CLOCK_REALTIME - CLOCK_MONOTONIC taken once at the start, so hits keep their order and spacing whatever
//! the wall clock does later (a step by NTP, or a suspend, which CLOCK_MONOTONIC does not count, shifts
//! the later hits' wall times by that much). `observedTimeUnixNano` is the wall clock when the record was
//! written.
//!
//! Batching: records collect into one request line until the session flushes the stream (after each
//! batch of hits it takes from the rings, at least every millisecond while hits flow, and after every
//! event), so a lone hit is written at once; a flood writes a line every [`BATCH_RECORDS`] records.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::io::{self, Write};

use serde_json::{Map, Value as JsonValue};

mod attrs;

use super::cgroup::CgroupName;
use super::json::{push_string, watched, Record, SummaryRecord};
use super::numbers::push_dec;
use super::{
    arm_failed_note, summary_line, Header, Hit, Output, ResolvedFrame, StreamEvent, Summary, Value,
};
use attrs::{fields, push_fields, push_string_value, Attrs};

/// Most records in one request line: a flood's lines stay a few hundred KiB, well under the receivers'
/// line limits.
pub const BATCH_RECORDS: usize = 256;

/// OTLP `SeverityNumber` values.
const INFO: u8 = 9;
const WARN: u8 = 13;

/// What the resource says about this host and tracer; `None` fields are left out.
#[derive(Debug, Clone, Default)]
pub struct Resource {
    pub host_name: Option<String>,
    /// The kernel release (`uname -r`).
    pub os_version: Option<String>,
    /// `host.arch` as OpenTelemetry spells it (`amd64`, `arm64`).
    pub host_arch: Option<String>,
    /// The tracer's pid.
    pub pid: u32,
}

impl Resource {
    /// `{"resourceLogs":[{"resource":...,"scopeLogs":[{"scope":...,"logRecords":[`: every line's start.
    fn line_prefix(&self) -> String {
        let mut out = String::from("{\"resourceLogs\":[{\"resource\":{\"attributes\":[");
        let mut a = Attrs::new(&mut out);
        if let Some(h) = &self.host_name {
            a.str("host.name", h);
        }
        if let Some(arch) = &self.host_arch {
            a.str("host.arch", arch);
        }
        a.str("os.type", "linux");
        if let Some(v) = &self.os_version {
            a.str("os.version", v);
        }
        a.str("service.name", "ksymwatch");
        a.str("service.version", env!("CARGO_PKG_VERSION"));
        a.int("process.pid", u64::from(self.pid));
        out.push_str("]},\"scopeLogs\":[{\"scope\":{\"name\":\"ksymwatch\",\"version\":");
        push_string(&mut out, env!("CARGO_PKG_VERSION"));
        out.push_str("},\"logRecords\":[");
        out
    }
}

/// Closes what [`Resource::line_prefix`] opened.
const LINE_SUFFIX: &str = "]}]}]}\n";

/// Wall-clock times for records.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// CLOCK_REALTIME - CLOCK_MONOTONIC at the start, added to the kernel's CLOCK_MONOTONIC stamps.
    pub offset_ns: u64,
    /// The wall clock now (CLOCK_REALTIME nanoseconds), for `observedTimeUnixNano`.
    pub now_ns: fn() -> u64,
}

impl Clock {
    fn wall(&self, monotonic_ns: u64) -> u64 {
        monotonic_ns.saturating_add(self.offset_ns)
    }
}

/// A frame as the chain attribute spells it: the text form, with `--lines`' `(file:line)`.
fn frame_text(f: &ResolvedFrame, comm: &str) -> String {
    let mut s = String::new();
    f.push_text(&mut s, comm);
    if let Some(line) = &f.line {
        s.push_str(" (");
        s.push_str(&line.location);
        s.push(')');
    }
    s
}

/// `code.function.name`, `ksymwatch.ip` and `ksymwatch.call_chain`, each after a comma. `--lines`' inlined
/// functions come before their frame in the chain, as in the text.
fn push_ip_chain(out: &mut String, hit: &Hit<'_>) {
    let mut a = Attrs::after(out);
    if let Some(sym) = &hit.ip.sym {
        a.str("code.function.name", sym);
    }
    let mut ip = String::new();
    hit.ip.push_text(&mut ip, hit.comm);
    a.str("ksymwatch.ip", &ip);
    let chain = hit.chain.iter().flat_map(|f| {
        let inlined = f.line.iter().flat_map(|l| l.inlined.iter());
        inlined
            .map(|s| Cow::Borrowed(s.as_str()))
            .chain(std::iter::once(Cow::Owned(frame_text(f, hit.comm))))
    });
    a.strings("ksymwatch.call_chain", chain);
}

fn push_values(a: &mut Attrs<'_>, value: Value) {
    match value {
        Value::NotRead | Value::Unreadable => {}
        Value::Read(v) => a.hex("ksymwatch.value", v),
        Value::Written { value, old, from } => {
            if let Some(v) = value {
                a.hex("ksymwatch.value", v);
            }
            if let Some(o) = old {
                a.hex("ksymwatch.old", o);
            }
            if value.is_some() {
                a.str("ksymwatch.value_from", from.source());
                if let Some(memory) = from.raced() {
                    a.hex("ksymwatch.raced", memory);
                }
                if from.start_unknown() {
                    a.str("ksymwatch.insn_start", "unknown");
                }
            }
        }
    }
}

/// The writer's cgroup: `ksymwatch.cgroup.id`, `ksymwatch.cgroup.path` (absent when it was removed before
/// it could be named), and OpenTelemetry's `container.id` and `container.runtime.name` where the path
/// holds a container.
fn push_cgroup(a: &mut Attrs<'_>, c: &CgroupName) {
    a.int("ksymwatch.cgroup.id", c.id);
    if let Some(path) = &c.path {
        a.str("ksymwatch.cgroup.path", path);
    }
    if let Some(container) = &c.container {
        a.str("container.id", &container.id);
        a.str("container.runtime.name", container.runtime.name());
    }
}

/// A short human text of an event, the body of its record.
fn event_body(e: &StreamEvent) -> String {
    match e {
        StreamEvent::Lost {
            cpu,
            count,
            counted: true,
        } => format!("{count} hits not printed on cpu {cpu} (ring full; counted in the totals)"),
        StreamEvent::Lost {
            cpu,
            count,
            counted: false,
        } => format!("lost {count} events on cpu {cpu}"),
        StreamEvent::CpuOffline { cpu } => format!("cpu {cpu} offline"),
        StreamEvent::CpuOnline { cpu, enabled, .. } => {
            let off = if *enabled { "" } else { ", off until `on`" };
            format!("cpu {cpu} online: armed{off}")
        }
        StreamEvent::CpuArmFailed { cpu, reason, .. } => {
            format!("cpu {cpu} online: NOT armed: {reason}")
        }
        StreamEvent::ModuleUnloaded { module, targets } => format!(
            "module {module} unloaded: no longer watching {}",
            targets.join(", ")
        ),
        StreamEvent::ProcessExec { pid, comm } => {
            format!("process {pid} exec'd {comm}: no longer watched")
        }
        StreamEvent::ObjectArmed(o) => format!(
            "object #{} 0x{:x} allocated by {}-{}: armed in slot {}, {:.0} us after its allocation",
            o.index,
            o.addr,
            o.comm,
            o.pid,
            o.slot,
            o.gap_ns as f64 / 1e3
        ),
        StreamEvent::ObjectFreed { index, addr, hits } => {
            format!("object #{index} 0x{addr:x} freed after {hits} hits")
        }
        StreamEvent::Dump {
            trigger,
            hits,
            no_hit_yet,
        } => format!(
            "dump: {trigger}; {}",
            super::dumped_hits(trigger, *hits, *no_hit_yet)
        ),
        _ => e.control_text().unwrap_or_default(),
    }
}

fn event_severity(e: &StreamEvent) -> u8 {
    match e {
        // Hits not printed but counted in the totals lost no store: like the summary's `unprinted`, INFO.
        StreamEvent::Lost { counted: false, .. }
        | StreamEvent::CpuArmFailed { .. }
        | StreamEvent::ModuleUnloaded { .. }
        | StreamEvent::ControlRefused { .. } => WARN,
        _ => INFO,
    }
}

pub struct Otlp<W: Write, E: Write> {
    out: W,
    err: E,
    clock: Clock,
    prefix: String,
    /// The request line being built: the prefix and `records` records so far.
    line: String,
    records: usize,
    /// The header's `--json` fields, for the `armed` record.
    header: Map<String, JsonValue>,
    watched: Option<(usize, usize)>,
}

impl<W: Write, E: Write> Otlp<W, E> {
    /// Requests go to `out`; `err` gets what a person watching should see (a CPU that could not be armed, a
    /// refused control line, the one-line summary), as with `--json`.
    pub fn new(out: W, err: E, resource: &Resource, clock: Clock) -> Self {
        Otlp {
            out,
            err,
            clock,
            prefix: resource.line_prefix(),
            line: String::new(),
            records: 0,
            header: Map::new(),
            watched: None,
        }
    }

    #[cfg(test)]
    pub fn into_inner(self) -> (W, E) {
        (self.out, self.err)
    }

    /// Starts a record in the current line: `{"timeUnixNano":..,...,"attributes":[`. The caller adds the
    /// attributes and calls [`Otlp::end_record`].
    fn begin_record(
        &mut self,
        wall_ns: u64,
        severity: u8,
        body: &str,
        event: Option<&str>,
    ) -> &mut String {
        if self.records == 0 {
            self.line.clear();
            self.line.push_str(&self.prefix);
        } else {
            self.line.push(',');
        }
        let l = &mut self.line;
        l.push_str("{\"timeUnixNano\":\"");
        push_dec(l, wall_ns);
        l.push_str("\",\"observedTimeUnixNano\":\"");
        push_dec(l, (self.clock.now_ns)());
        l.push_str(if severity == WARN {
            "\",\"severityNumber\":13,\"severityText\":\"WARN\",\"body\":"
        } else {
            "\",\"severityNumber\":9,\"severityText\":\"INFO\",\"body\":"
        });
        push_string_value(l, body);
        if let Some(name) = event {
            l.push_str(",\"eventName\":");
            push_string(l, name);
        }
        l.push_str(",\"attributes\":[");
        if let Some(name) = event {
            Attrs::new(l).str("event.name", name);
        }
        l
    }

    /// Ends the record; a full batch goes out as its line.
    fn end_record(&mut self) -> io::Result<()> {
        self.line.push_str("]}");
        self.records += 1;
        if self.records >= BATCH_RECORDS {
            self.write_line()?;
        }
        Ok(())
    }

    /// Writes the records collected so far as one request line.
    fn write_line(&mut self) -> io::Result<()> {
        if self.records == 0 {
            return Ok(());
        }
        self.records = 0;
        self.line.push_str(LINE_SUFFIX);
        self.out.write_all(self.line.as_bytes())
    }

    /// An event record named `name`: its `--json` fields (less `skip`) as attributes.
    fn event_record(
        &mut self,
        wall_ns: u64,
        severity: u8,
        body: &str,
        name: &str,
        record: &Map<String, JsonValue>,
        skip: &[&str],
    ) -> io::Result<()> {
        let l = self.begin_record(wall_ns, severity, body, Some(name));
        push_fields(&mut Attrs::after(l), record, skip);
        self.end_record()
    }
}

impl<W: Write, E: Write> Output for Otlp<W, E> {
    fn header(&mut self, h: &Header<'_>) -> io::Result<()> {
        self.watched = watched(h);
        self.header = fields(&Record::header(h));
        Ok(())
    }

    fn armed(&mut self, events: usize, cpus: &BTreeSet<u32>, time_ns: u64) -> io::Result<()> {
        let mut armed = fields(&Record::armed(events, cpus, time_ns, self.watched));
        // The header's fields join the armed mark's; the two agree where both have one.
        for (k, v) in std::mem::take(&mut self.header) {
            if k != "version" {
                armed.entry(k).or_insert(v);
            }
        }
        let targets: Vec<&str> = armed
            .get("targets")
            .and_then(|t| t.as_array())
            .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
            .unwrap_or_default();
        let body = format!(
            "armed {events} breakpoint{} on cpus {} watching {}",
            if events == 1 { "" } else { "s" },
            crate::cpulist::format(cpus),
            targets.join(", ")
        );
        let wall = self.clock.wall(time_ns);
        self.event_record(
            wall,
            INFO,
            &body,
            "ksymwatch.armed",
            &armed,
            &["type", "time_ns"],
        )?;
        // Scripts and collectors wait for this one.
        self.write_line()?;
        self.out.flush()
    }

    fn hit(&mut self, hit: &Hit<'_>) -> io::Result<()> {
        let s = hit.sample;
        let mut body = String::with_capacity(96);
        body.push_str(hit.comm);
        body.push('-');
        push_dec(&mut body, u64::from(s.tid));
        body.push_str(" [");
        super::numbers::push_dec_zero(&mut body, u64::from(s.cpu), 3);
        body.push_str("] ");
        body.push_str(&hit.watch.label);
        body.push(' ');
        body.push_str(hit.watch.access.letters());
        body.push_str(" ip=");
        hit.ip.push_text(&mut body, hit.comm);
        super::ftrace::push_value(&mut body, hit.value);
        let wall = self.clock.wall(s.time);
        let l = self.begin_record(wall, INFO, &body, None);
        let mut a = Attrs::new(l);
        a.int("process.pid", u64::from(s.pid));
        a.int("thread.id", u64::from(s.tid));
        a.str("thread.name", hit.comm);
        a.int("cpu.logical_number", u64::from(s.cpu));
        a.str("ksymwatch.target", &hit.watch.label);
        a.int("ksymwatch.target_index", hit.watch_index as u64);
        a.hex("ksymwatch.addr", s.addr);
        a.int("ksymwatch.len", u64::from(hit.watch.len));
        a.str("ksymwatch.access", hit.watch.access.letters());
        a.bool("ksymwatch.in_kernel", s.in_kernel());
        // A chain seen before is copied as it was spelled the first time, unless its text has the comm.
        match hit.rendered.filter(|r| !r.needs_comm) {
            Some(r) => l.push_str(r.otlp.get_or_init(|| {
                let mut text = String::new();
                push_ip_chain(&mut text, hit);
                text
            })),
            None => push_ip_chain(l, hit),
        }
        push_values(&mut Attrs::after(l), hit.value);
        if let Some(c) = hit.cgroup {
            push_cgroup(&mut Attrs::after(l), c);
        }
        self.end_record()
    }

    fn event(&mut self, event: &StreamEvent, time_ns: u64) -> io::Result<()> {
        let record = fields(&Record::event(event, time_ns));
        let name = format!(
            "ksymwatch.{}",
            record
                .get("type")
                .and_then(|t| t.as_str())
                .unwrap_or("event")
        );
        let wall = self.clock.wall(time_ns);
        let body = event_body(event);
        self.event_record(
            wall,
            event_severity(event),
            &body,
            &name,
            &record,
            &["type", "time_ns"],
        )?;
        match event {
            StreamEvent::CpuArmFailed { cpu, reason, .. } => {
                arm_failed_note(&mut self.err, *cpu, reason)
            }
            StreamEvent::ControlRefused { .. } => writeln!(self.err, "ksymwatch: {body}"),
            _ => Ok(()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_line()?;
        self.out.flush()
    }

    fn finish(&mut self, summary: &Summary) -> io::Result<()> {
        let mut text = Vec::new();
        summary_line(&mut text, summary)?;
        let text = String::from_utf8_lossy(&text);
        let body = text
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("ksymwatch: ");
        let severity = if summary.lost() > 0
            || !summary.unwatched_ns_by_cpu.is_empty()
            || !summary.warnings.is_empty()
        {
            WARN
        } else {
            INFO
        };
        let mut record = fields(&SummaryRecord::new(summary));
        if !summary.warnings.is_empty() {
            record.insert("warnings".into(), summary.warnings.clone().into());
        }
        let now = (self.clock.now_ns)();
        let written = self
            .event_record(now, severity, body, "ksymwatch.summary", &record, &[])
            .and_then(|_| self.write_line())
            .and_then(|_| self.out.flush());
        summary_line(&mut self.err, summary)?;
        written
    }
}

#[cfg(test)]
mod tests;
