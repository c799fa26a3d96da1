//! `--json`: one JSON object per line (NDJSON) on stdout for the header, the armed mark, every hit, every
//! stream event and the final summary, each tagged with `type`. The schema is this module's record types and is
//! documented in docs/outputs.md ("JSON output"); addresses are `"0x…"` strings because 64-bit kernel
//! addresses do not survive a trip through an IEEE double (jq, JavaScript). Times are `time_ns`,
//! CLOCK_MONOTONIC nanoseconds (time since boot, not counting suspend), the clock the kernel stamps samples
//! with. A process watch's hits carry `value` (the watched bytes when the hit was drained, `"0x2a"`, or `null`
//! when unreadable); a system-wide watch's hits have no such field. With `--value` every hit has `value` and
//! `old` (the store's own value and the one before it, `null` when unknown), and the `--summary` record
//! `by_value`.

mod frame;
mod hit;
mod records;
mod summary;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::io::{self, Write};

pub use hit::push_hit;
pub(crate) use hit::{push_array, push_string};
pub use records::*;
pub use summary::*;

use super::{arm_failed_note, summary_line, Header, Hit, Output, StreamEvent, Summary};

/// Bumped when a field changes meaning or goes away; new fields do not bump it.
pub const SCHEMA_VERSION: u32 = 1;

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
            StreamEvent::Retargeted(_) | StreamEvent::Switched { .. } => self.out.flush(),
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
