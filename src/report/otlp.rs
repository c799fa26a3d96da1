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
//!   control line, a summary that counts losses) and INFO otherwise.
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

use serde::Serialize;
use serde_json::{Map, Value as JsonValue};

use super::json::{push_string, watched, Record, SummaryRecord};
use super::numbers::{push_dec, push_hex};
use super::{
    arm_failed_note, summary_line, Header, Hit, Output, ResolvedFrame, StreamEvent, Summary, Value,
    ValueFrom,
};

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

/// Appends `{"key":..,"value":..}` attributes, commas between.
struct Attrs<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Attrs<'a> {
    fn new(out: &'a mut String) -> Self {
        Attrs { out, first: true }
    }

    /// Continues a list that already has an attribute.
    fn after(out: &'a mut String) -> Self {
        Attrs { out, first: false }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push_str("{\"key\":");
        push_string(self.out, key);
        self.out.push_str(",\"value\":");
    }

    fn str(&mut self, key: &str, v: &str) {
        self.key(key);
        push_string_value(self.out, v);
        self.out.push('}');
    }

    fn hex(&mut self, key: &str, v: u64) {
        self.key(key);
        self.out.push_str("{\"stringValue\":\"0x");
        push_hex(self.out, v);
        self.out.push_str("\"}}");
    }

    /// An unsigned value as `intValue` (an int64); beyond its range, the decimal digits as a string.
    fn int(&mut self, key: &str, v: u64) {
        self.key(key);
        push_int_value(self.out, v);
        self.out.push('}');
    }

    fn bool(&mut self, key: &str, v: bool) {
        self.key(key);
        self.out.push_str(if v {
            "{\"boolValue\":true}}"
        } else {
            "{\"boolValue\":false}}"
        });
    }

    fn strings<'s>(&mut self, key: &str, items: impl IntoIterator<Item = Cow<'s, str>>) {
        self.key(key);
        self.out.push_str("{\"arrayValue\":{\"values\":[");
        for (i, s) in items.into_iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            push_string_value(self.out, &s);
        }
        self.out.push_str("]}}}");
    }

    fn any(&mut self, key: &str, v: &JsonValue) {
        self.key(key);
        push_any(self.out, v);
        self.out.push('}');
    }
}

fn push_string_value(out: &mut String, s: &str) {
    out.push_str("{\"stringValue\":");
    push_string(out, s);
    out.push('}');
}

fn push_int_value(out: &mut String, v: u64) {
    out.push_str(if v <= i64::MAX as u64 {
        "{\"intValue\":\""
    } else {
        "{\"stringValue\":\""
    });
    push_dec(out, v);
    out.push_str("\"}");
}

/// A `--json` value as an OTLP `AnyValue`: objects are key-value lists (their `null` fields left out),
/// arrays arrays, integers `intValue` strings, `null` the empty `AnyValue`.
fn push_any(out: &mut String, v: &JsonValue) {
    match v {
        JsonValue::Null => out.push_str("{}"),
        JsonValue::Bool(b) => out.push_str(if *b {
            "{\"boolValue\":true}"
        } else {
            "{\"boolValue\":false}"
        }),
        JsonValue::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => push_int_value(out, u),
            (None, Some(i)) => {
                out.push_str("{\"intValue\":\"");
                out.push_str(itoa::Buffer::new().format(i));
                out.push_str("\"}");
            }
            // serde_json's numbers are finite: a JSON number is a valid proto3 double.
            (None, None) => {
                out.push_str("{\"doubleValue\":");
                out.push_str(&n.to_string());
                out.push('}');
            }
        },
        JsonValue::String(s) => push_string_value(out, s),
        JsonValue::Array(items) => {
            out.push_str("{\"arrayValue\":{\"values\":[");
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_any(out, x);
            }
            out.push_str("]}}");
        }
        JsonValue::Object(m) => {
            out.push_str("{\"kvlistValue\":{\"values\":[");
            let mut a = Attrs::new(out);
            for (k, x) in m.iter().filter(|(_, x)| !x.is_null()) {
                a.any(k, x);
            }
            out.push_str("]}}");
        }
    }
}

/// The attribute a `--json` record field becomes: a semantic-convention name where one means the same.
fn attribute_key(field: &str) -> Cow<'static, str> {
    match field {
        "cpu" => Cow::Borrowed("cpu.logical_number"),
        "pid" => Cow::Borrowed("process.pid"),
        f => Cow::Owned(format!("ksymwatch.{f}")),
    }
}

/// A `--json` record as a JSON object (every record serializes to one).
fn fields(r: &impl Serialize) -> Map<String, JsonValue> {
    match serde_json::to_value(r) {
        Ok(JsonValue::Object(m)) => m,
        _ => Map::new(),
    }
}

/// The `--json` fields of a record as attributes, `null`s and `skip` left out.
fn push_fields(a: &mut Attrs<'_>, m: &Map<String, JsonValue>, skip: &[&str]) {
    for (k, v) in m {
        if !v.is_null() && !skip.contains(&k.as_str()) {
            a.any(&attribute_key(k), v);
        }
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
                match from {
                    ValueFrom::Insn => a.str("ksymwatch.value_from", "insn"),
                    ValueFrom::Raced { memory } => {
                        a.str("ksymwatch.value_from", "insn");
                        a.hex("ksymwatch.raced", memory);
                    }
                    ValueFrom::Memory => a.str("ksymwatch.value_from", "memory"),
                    ValueFrom::NoStart => {
                        a.str("ksymwatch.value_from", "memory");
                        a.str("ksymwatch.insn_start", "unknown");
                    }
                }
            }
        }
    }
}

/// A short human text of an event, the body of its record.
fn event_body(e: &StreamEvent) -> String {
    match e {
        StreamEvent::Lost { cpu, count } => format!("lost {count} events on cpu {cpu}"),
        StreamEvent::CpuOffline { cpu } => format!("cpu {cpu} offline"),
        StreamEvent::CpuOnline { cpu, .. } => format!("cpu {cpu} online: armed"),
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
        StreamEvent::ObjectArmed {
            index,
            addr,
            slot,
            gap_ns,
            pid,
            comm,
            ..
        } => format!(
            "object #{index} 0x{addr:x} allocated by {comm}-{pid}: armed in slot {slot}, {:.0} us after \
             its allocation",
            *gap_ns as f64 / 1e3
        ),
        StreamEvent::ObjectFreed { index, addr, hits } => {
            format!("object #{index} 0x{addr:x} freed after {hits} hits")
        }
        StreamEvent::Dump { trigger, hits } => format!("dump: {trigger}; the last {hits} hits"),
        _ => e.control_text().unwrap_or_default(),
    }
}

fn event_severity(e: &StreamEvent) -> u8 {
    match e {
        StreamEvent::Lost { .. }
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
mod tests {
    use super::*;
    use crate::model::watch::Access;
    use crate::perf::record::encode;
    use crate::report::testutil::{each_hit, each_value_of_a_user_store, sample, table, watch};
    use crate::report::{Covered, Rendered, SourceLine, StopReason};
    use std::sync::Arc;

    /// Monotonic 5 s is wall 1,700,000,005 s.
    const OFFSET: u64 = 1_700_000_000_000_000_000;
    const NOW: u64 = 1_700_000_099_000_000_000;

    fn printer() -> Otlp<Vec<u8>, Vec<u8>> {
        let resource = Resource {
            host_name: Some("node-\"7\"".into()),
            os_version: Some("6.18.0".into()),
            host_arch: Some("amd64".into()),
            pid: 77,
        };
        Otlp::new(
            Vec::new(),
            Vec::new(),
            &resource,
            Clock {
                offset_ns: OFFSET,
                now_ns: || NOW,
            },
        )
    }

    fn lines(bytes: &[u8]) -> Vec<JsonValue> {
        std::str::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The records of one request line.
    fn records(line: &JsonValue) -> &Vec<JsonValue> {
        line["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
            .as_array()
            .unwrap()
    }

    /// Every record of every line, in order.
    fn all_records(bytes: &[u8]) -> Vec<JsonValue> {
        lines(bytes)
            .iter()
            .flat_map(|l| records(l).clone())
            .collect()
    }

    /// A record's attribute `key`'s AnyValue (panics when absent).
    fn attr<'a>(record: &'a JsonValue, key: &str) -> &'a JsonValue {
        find(record, key).unwrap_or_else(|| panic!("no {key} in {record}"))
    }

    fn find<'a>(record: &'a JsonValue, key: &str) -> Option<&'a JsonValue> {
        record["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == key)
            .map(|a| &a["value"])
    }

    fn str_value(v: &JsonValue) -> &str {
        v["stringValue"].as_str().unwrap()
    }

    /// The user store of `testutil`, with a value, as a record.
    fn value_records(values: &[Value]) -> Vec<JsonValue> {
        let mut p = printer();
        each_value_of_a_user_store(values, |hit| p.hit(hit).unwrap());
        p.flush().unwrap();
        all_records(&p.into_inner().0)
    }

    /// Every stream event has a body a reader can read without the attributes.
    #[test]
    fn object_and_dump_events_have_bodies() {
        let armed = StreamEvent::ObjectArmed {
            index: 3,
            addr: 0xffff888104f2a000,
            slot: 1,
            gap_ns: 115_000,
            pid: 42,
            comm: "pipes".into(),
            evicted: None,
        };
        assert_eq!(
            event_body(&armed),
            "object #3 0xffff888104f2a000 allocated by pipes-42: armed in slot 1, 115 us after its allocation"
        );
        let freed = StreamEvent::ObjectFreed {
            index: 3,
            addr: 0xffff888104f2a000,
            hits: 2,
        };
        assert_eq!(
            event_body(&freed),
            "object #3 0xffff888104f2a000 freed after 2 hits"
        );
        let dump = StreamEvent::Dump {
            trigger: crate::report::DumpTrigger::Signal,
            hits: 5,
        };
        assert_eq!(event_body(&dump), "dump: SIGUSR1; the last 5 hits");
    }

    #[test]
    fn a_line_is_one_request_with_the_resource_and_scope() {
        let mut p = printer();
        each_value_of_a_user_store(&[Value::Read(1)], |hit| p.hit(hit).unwrap());
        p.flush().unwrap();
        let out = p.into_inner().0;
        assert!(out.ends_with(b"]}]}]}\n"));
        let v = lines(&out);
        assert_eq!(v.len(), 1);
        let rl = &v[0]["resourceLogs"];
        assert_eq!(rl.as_array().unwrap().len(), 1);
        let res: Vec<(&str, &JsonValue)> = rl[0]["resource"]["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (a["key"].as_str().unwrap(), &a["value"]))
            .collect();
        let want = serde_json::json!([
            ["host.name", {"stringValue": "node-\"7\""}],
            ["host.arch", {"stringValue": "amd64"}],
            ["os.type", {"stringValue": "linux"}],
            ["os.version", {"stringValue": "6.18.0"}],
            ["service.name", {"stringValue": "ksymwatch"}],
            ["service.version", {"stringValue": env!("CARGO_PKG_VERSION")}],
            ["process.pid", {"intValue": "77"}],
        ]);
        let got: Vec<JsonValue> = res.iter().map(|(k, v)| serde_json::json!([k, v])).collect();
        assert_eq!(JsonValue::from(got), want);
        let scope = &rl[0]["scopeLogs"][0]["scope"];
        assert_eq!(scope["name"], "ksymwatch");
        assert_eq!(scope["version"], env!("CARGO_PKG_VERSION"));
    }

    /// Times are decimal strings of wall-clock nanoseconds; severity a number; ints `intValue` strings.
    #[test]
    fn a_hit_is_an_info_record_with_semantic_attributes() {
        let r = &value_records(&[Value::Read(0x2a)])[0];
        assert_eq!(r["timeUnixNano"], "1700000005000000000");
        assert_eq!(r["observedTimeUnixNano"], "1700000099000000000");
        assert_eq!(r["severityNumber"], 9);
        assert_eq!(r["severityText"], "INFO");
        assert!(r.get("eventName").is_none(), "a hit is not an event: {r}");
        assert_eq!(
            str_value(&r["body"]),
            "writer-4322 [000] counter W ip=0x401136 [writer] value=0x2a"
        );
        assert_eq!(
            attr(r, "process.pid"),
            &serde_json::json!({"intValue": "4321"})
        );
        assert_eq!(
            attr(r, "thread.id"),
            &serde_json::json!({"intValue": "4322"})
        );
        assert_eq!(str_value(attr(r, "thread.name")), "writer");
        assert_eq!(attr(r, "cpu.logical_number")["intValue"], "0");
        assert_eq!(str_value(attr(r, "ksymwatch.target")), "counter");
        assert_eq!(attr(r, "ksymwatch.target_index")["intValue"], "0");
        assert_eq!(str_value(attr(r, "ksymwatch.addr")), "0x404028");
        assert_eq!(attr(r, "ksymwatch.len")["intValue"], "8");
        assert_eq!(str_value(attr(r, "ksymwatch.access")), "W");
        assert_eq!(attr(r, "ksymwatch.in_kernel")["boolValue"], false);
        assert_eq!(str_value(attr(r, "ksymwatch.value")), "0x2a");
        // An unnamed user ip has no function name.
        assert!(find(r, "code.function.name").is_none(), "{r}");
        assert_eq!(str_value(attr(r, "ksymwatch.ip")), "0x401136 [writer]");
        assert_eq!(
            attr(r, "ksymwatch.call_chain"),
            &serde_json::json!({"arrayValue": {"values": [{"stringValue": "0x401136 [writer]"}]}})
        );
    }

    /// A kernel hit: the function is named, the chain is every frame's text, innermost first.
    #[test]
    fn a_kernel_hits_chain_is_an_array_of_frame_texts() {
        let s = sample(
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
        let watches = [watch("target_var", 0x7ffd0000, Access::ReadWrite)];
        let mut p = printer();
        each_hit(&table(), &watches, &[(s, "reader", 0)], |hit| {
            p.hit(hit).unwrap()
        });
        p.flush().unwrap();
        let r = &all_records(&p.into_inner().0)[0];
        assert_eq!(r["timeUnixNano"], "1700000412123456789");
        assert_eq!(str_value(attr(r, "code.function.name")), "read_zero");
        assert_eq!(str_value(attr(r, "ksymwatch.ip")), "read_zero+0x77/0x100");
        assert_eq!(
            attr(r, "ksymwatch.call_chain")["arrayValue"]["values"],
            serde_json::json!([
                {"stringValue": "read_zero+0x77/0x100"},
                {"stringValue": "vfs_read+0xbb/0x100"},
                {"stringValue": "0x401000 [reader]"},
            ])
        );
        assert_eq!(attr(r, "ksymwatch.in_kernel")["boolValue"], true);
        assert_eq!(str_value(attr(r, "ksymwatch.access")), "RW");
        assert!(
            find(r, "ksymwatch.value").is_none(),
            "system-wide: no value"
        );
        assert_eq!(
            str_value(&r["body"]),
            "reader-1235 [001] target_var RW ip=read_zero+0x77/0x100"
        );
    }

    /// `--value`: known values and olds as hex strings (64-bit intact), unknown ones left out.
    #[test]
    fn value_attributes_are_there_when_known() {
        let v = value_records(&[
            Value::Written {
                value: Some(u64::MAX),
                old: Some(0),
                from: ValueFrom::Insn,
            },
            Value::Written {
                value: None,
                old: None,
                from: ValueFrom::Insn,
            },
            Value::Written {
                value: Some(1),
                old: None,
                from: ValueFrom::Raced { memory: 7 },
            },
            Value::Written {
                value: Some(1),
                old: None,
                from: ValueFrom::Memory,
            },
            Value::Unreadable,
        ]);
        assert_eq!(
            str_value(attr(&v[0], "ksymwatch.value")),
            "0xffffffffffffffff"
        );
        assert_eq!(str_value(attr(&v[0], "ksymwatch.old")), "0x0");
        assert_eq!(str_value(attr(&v[0], "ksymwatch.value_from")), "insn");
        assert!(find(&v[0], "ksymwatch.raced").is_none());
        for key in ["ksymwatch.value", "ksymwatch.old", "ksymwatch.value_from"] {
            assert!(find(&v[1], key).is_none(), "{key}: {}", v[1]);
            assert!(find(&v[4], key).is_none(), "{key}: {}", v[4]);
        }
        assert!(str_value(&v[1]["body"]).ends_with(" value=? old=?"));
        assert!(str_value(&v[4]["body"]).ends_with(" value=?"));
        assert_eq!(str_value(attr(&v[2], "ksymwatch.raced")), "0x7");
        assert_eq!(str_value(attr(&v[2], "ksymwatch.value_from")), "insn");
        assert_eq!(str_value(attr(&v[3], "ksymwatch.value_from")), "memory");
    }

    /// Names, comms and labels with quotes, backslashes, control characters and non-ASCII text come back
    /// as they went in.
    #[test]
    fn strings_are_escaped() {
        let odd = "we\"ird\\\n\u{1}\u{7f}ü 日本";
        let s = sample(0x401136, 1, 1, 1, 0x10, 0, &[encode::USER, 0x401136]);
        let watches = [watch(odd, 0x10, Access::Write)];
        let mut p = printer();
        each_hit(&table(), &watches, &[(s, odd, 0)], |hit| {
            p.hit(hit).unwrap()
        });
        p.flush().unwrap();
        let out = p.into_inner().0;
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
        let r = &all_records(&out)[0];
        assert_eq!(str_value(attr(r, "thread.name")), odd);
        assert_eq!(str_value(attr(r, "ksymwatch.target")), odd);
        assert!(str_value(&r["body"]).starts_with(odd));
    }

    /// Nothing is written until the session flushes; then every record so far is one line, a lone hit
    /// included. A flood is cut into lines of `BATCH_RECORDS`.
    #[test]
    fn records_are_batched_until_the_flush() {
        let mut p = printer();
        each_value_of_a_user_store(&[Value::Read(1)], |hit| p.hit(hit).unwrap());
        assert!(p.out.is_empty(), "written before the flush");
        p.flush().unwrap();
        assert_eq!(lines(&p.out).len(), 1);
        p.flush().unwrap();
        assert_eq!(lines(&p.out).len(), 1, "an empty flush writes nothing");
        let flood = vec![Value::Read(2); BATCH_RECORDS * 2 + 3];
        each_value_of_a_user_store(&flood, |hit| p.hit(hit).unwrap());
        p.flush().unwrap();
        let v = lines(&p.into_inner().0);
        let sizes: Vec<usize> = v.iter().map(|l| records(l).len()).collect();
        assert_eq!(sizes, [1, BATCH_RECORDS, BATCH_RECORDS, 3]);
    }

    #[test]
    fn armed_is_one_event_written_at_once_with_the_header() {
        let watches = [watch("counter", 0x404028, Access::Write)];
        let cpus: BTreeSet<u32> = [0, 1].into();
        let mut p = printer();
        p.header(&Header {
            watches: &watches,
            cpus: &cpus,
            source: "kallsyms fixture",
            processes: &[(4321, "writer".into())],
            threads: 3,
            values: true,
            condition: Some("value == 0"),
            objects: None,
        })
        .unwrap();
        assert!(p.out.is_empty(), "the header waits for armed");
        p.armed(2, &cpus, 5_000_000_000).unwrap();
        let v = lines(&p.into_inner().0);
        assert_eq!(v.len(), 1);
        let r = &records(&v[0])[0];
        assert_eq!(r["eventName"], "ksymwatch.armed");
        assert_eq!(str_value(attr(r, "event.name")), "ksymwatch.armed");
        assert_eq!(r["timeUnixNano"], "1700000005000000000");
        assert_eq!(
            str_value(&r["body"]),
            "armed 2 breakpoints on cpus 0-1 watching counter"
        );
        assert_eq!(attr(r, "ksymwatch.events")["intValue"], "2");
        assert_eq!(attr(r, "ksymwatch.threads")["intValue"], "3");
        assert_eq!(attr(r, "ksymwatch.value")["boolValue"], true);
        assert_eq!(str_value(attr(r, "ksymwatch.if")), "value == 0");
        assert_eq!(
            attr(r, "ksymwatch.pids"),
            &serde_json::json!({"arrayValue": {"values": [{"intValue": "4321"}]}})
        );
        let target =
            &attr(r, "ksymwatch.targets")["arrayValue"]["values"][0]["kvlistValue"]["values"];
        assert!(target
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({"key": "addr", "value": {"stringValue": "0x404028"}})));
        let keys: Vec<&str> = r["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["key"].as_str().unwrap())
            .collect();
        let unique: BTreeSet<&str> = keys.iter().copied().collect();
        assert_eq!(keys.len(), unique.len(), "a key twice: {keys:?}");
        assert!(!unique.contains("ksymwatch.version"), "{keys:?}");
    }

    #[test]
    fn stream_events_are_named_events() {
        let mut p = printer();
        let events = [
            StreamEvent::Lost { cpu: 1, count: 3 },
            StreamEvent::CpuOnline {
                cpu: 1,
                after_uevent_ns: None,
                open_ns: 9,
            },
            StreamEvent::CpuArmFailed {
                cpu: 1,
                reason: "busy".into(),
                kind: "busy",
            },
            StreamEvent::Retargeted {
                index: 0,
                watch: watch("t2", 0x5555_0040, Access::ReadWrite),
                covered: Covered::Threads(4),
                took_ns: 41_000,
                enabled: true,
            },
            StreamEvent::ProcessExec {
                pid: 42,
                comm: "sh".into(),
            },
        ];
        for e in &events {
            p.event(e, 6_000_000_000).unwrap();
        }
        p.flush().unwrap();
        let (out, err) = p.into_inner();
        let v = lines(&out);
        assert_eq!(v.len(), 1, "one flush, one line");
        let r = records(&v[0]);
        let names: Vec<&str> = r.iter().map(|r| r["eventName"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "ksymwatch.lost",
                "ksymwatch.cpu_online",
                "ksymwatch.cpu_arm_failed",
                "ksymwatch.watch",
                "ksymwatch.process_exec"
            ]
        );
        assert_eq!(r[0]["severityNumber"], 13);
        assert_eq!(r[0]["severityText"], "WARN");
        assert_eq!(r[0]["timeUnixNano"], "1700000006000000000");
        assert_eq!(str_value(&r[0]["body"]), "lost 3 events on cpu 1");
        assert_eq!(attr(&r[0], "cpu.logical_number")["intValue"], "1");
        assert_eq!(attr(&r[0], "ksymwatch.count")["intValue"], "3");
        assert!(
            find(&r[1], "ksymwatch.after_uevent_ns").is_none(),
            "null left out"
        );
        assert_eq!(r[1]["severityNumber"], 9);
        assert_eq!(str_value(attr(&r[2], "ksymwatch.reason")), "busy");
        assert_eq!(attr(&r[3], "ksymwatch.threads")["intValue"], "4");
        assert!(
            str_value(&r[3]["body"]).starts_with("watch t2 (0x55550040/8 RW) armed on 4 threads")
        );
        assert_eq!(attr(&r[4], "process.pid")["intValue"], "42");
        assert_eq!(str_value(attr(&r[4], "ksymwatch.comm")), "sh");
        let err = String::from_utf8(err).unwrap();
        assert!(err.contains("could not be armed: busy"), "{err}");
    }

    #[test]
    fn the_summary_is_the_last_event_with_the_tally() {
        let mut tally = crate::report::summary::Tally::default();
        each_value_of_a_user_store(&[Value::Read(1), Value::Read(2)], |hit| tally.add(hit));
        let mut summary = Summary {
            tally: Some(tally),
            stop: Some(StopReason::Signal(libc::SIGINT as u32)),
            elapsed: std::time::Duration::from_millis(1500),
            ..Summary::default()
        };
        summary.hits_by_cpu.insert(0, 2);
        summary.lost_by_cpu.insert(1, 5);
        let mut p = printer();
        p.finish(&summary).unwrap();
        let (out, err) = p.into_inner();
        let r = &all_records(&out)[0];
        assert_eq!(r["eventName"], "ksymwatch.summary");
        assert_eq!(r["timeUnixNano"], "1700000099000000000");
        assert_eq!(r["severityText"], "WARN", "records were lost");
        assert_eq!(
            str_value(&r["body"]),
            "2 hits (cpu0 2), 5 lost, 1.500s, stopped: signal SIGINT"
        );
        assert_eq!(attr(r, "ksymwatch.hits")["intValue"], "2");
        assert_eq!(
            attr(r, "ksymwatch.elapsed_s"),
            &serde_json::json!({"doubleValue": 1.5})
        );
        assert_eq!(str_value(attr(r, "ksymwatch.signal")), "SIGINT");
        let chain =
            &attr(r, "ksymwatch.chains")["arrayValue"]["values"][0]["kvlistValue"]["values"];
        assert!(chain
            .as_array()
            .unwrap()
            .contains(&serde_json::json!({"key": "count", "value": {"intValue": "2"}})));
        assert!(String::from_utf8(err)
            .unwrap()
            .starts_with("ksymwatch: 2 hits"));
    }

    /// Numbers beyond int64 stay exact as strings; `null` is the empty AnyValue.
    #[test]
    fn any_values_follow_the_otlp_mapping() {
        let any = |v: JsonValue| {
            let mut s = String::new();
            push_any(&mut s, &v);
            serde_json::from_str::<JsonValue>(&s).unwrap()
        };
        use serde_json::json;
        assert_eq!(
            any(json!(u64::MAX)),
            json!({"stringValue": "18446744073709551615"})
        );
        assert_eq!(
            any(json!(i64::MAX)),
            json!({"intValue": "9223372036854775807"})
        );
        assert_eq!(any(json!(-3)), json!({"intValue": "-3"}));
        assert_eq!(any(json!(0.25)), json!({"doubleValue": 0.25}));
        assert_eq!(any(json!(null)), json!({}));
        assert_eq!(
            any(json!({"a": [true, "x"], "b": null})),
            json!({"kvlistValue": {"values": [
                {"key": "a", "value": {"arrayValue": {"values": [{"boolValue": true}, {"stringValue": "x"}]}}}
            ]}})
        );
    }

    /// A chain's cached attributes are what a fresh spelling gives, `--lines` and inlined frames included;
    /// a chain whose text has the comm is spelled for each hit's comm.
    #[test]
    fn cached_chains_match_fresh_ones() {
        let s = sample(
            0xffffffff81000077,
            1,
            2,
            3,
            0x10,
            0,
            &[encode::KERNEL, 0xffffffff81000077, encode::USER, 0x7f00],
        );
        let named = ResolvedFrame {
            sym: Some("read_zero".into()),
            off: 0x77,
            size: Some(0x100),
            line: Some(Arc::new(SourceLine {
                location: "fs/x.c:30".into(),
                inlined: vec!["inner (fs/x.c:9) [inlined]".into()],
            })),
            ..ResolvedFrame::unknown(0xffffffff81000077, true)
        };
        let chain = [named.clone(), ResolvedFrame::unknown(0x7f00, false)];
        let w = watch("t", 0x10, Access::Write);
        let rendered = Rendered::new(&named, &chain);
        let known = [
            named.clone(),
            ResolvedFrame {
                sym: Some("main".into()),
                binary: Some("writer".into()),
                ..ResolvedFrame::unknown(0x7f00, false)
            },
        ];
        let rendered_known = Rendered::new(&named, &known);
        let mut got = Vec::new();
        for (frames, r) in [(&chain, &rendered), (&known, &rendered_known)] {
            for (comm, r) in [("a", None), ("a", Some(r)), ("b", Some(r)), ("b", None)] {
                let hit = Hit {
                    sample: &s,
                    watch: &w,
                    watch_index: 0,
                    comm,
                    ip: &named,
                    chain: frames,
                    value: Value::NotRead,
                    rendered: r,
                };
                let mut p = printer();
                p.hit(&hit).unwrap();
                p.flush().unwrap();
                let rec = all_records(&p.into_inner().0).remove(0);
                got.push((comm, attr(&rec, "ksymwatch.call_chain").clone()));
            }
        }
        assert_eq!(got[0], got[1]);
        assert_eq!(got[2], got[3]);
        assert_ne!(
            got[1].1, got[2].1,
            "the unnamed user frame carries the comm"
        );
        assert_eq!(
            got[2].1["arrayValue"]["values"],
            serde_json::json!([
                {"stringValue": "inner (fs/x.c:9) [inlined]"},
                {"stringValue": "read_zero+0x77/0x100 (fs/x.c:30)"},
                {"stringValue": "0x7f00 [b]"},
            ])
        );
        for i in 5..8 {
            assert_eq!(got[4].1, got[i].1);
        }
    }
}
