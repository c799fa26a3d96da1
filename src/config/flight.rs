//! The flight recorder's configuration (`--last N` with `--dump-on`): how many hits are kept, and what
//! makes them print. A trigger is a condition on a hit (the `--if` language of [`condition`]), `signal`
//! (SIGUSR1 to the tracer), or `tracepoint:GROUP:NAME` (a kernel tracepoint firing anywhere).

use std::fmt;
use std::path::Path;

use crate::model::condition::{self, Condition};

/// Where the kernel lists its tracepoints: `GROUP/NAME` directories.
pub const TRACEPOINTS: &str = "/sys/kernel/tracing/events";

/// One `--dump-on` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// A hit whose value (and old) make the condition hold.
    Hit(Condition),
    /// SIGUSR1 sent to the tracer.
    Signal,
    /// A kernel tracepoint fired, on any CPU, in any task.
    Tracepoint { group: String, name: String },
}

impl fmt::Display for Trigger {
    /// As `--dump-on` takes it (a condition as the parser spells it back).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Hit(c) => write!(f, "'{c}'"),
            Trigger::Signal => f.write_str("signal"),
            Trigger::Tracepoint { group, name } => write!(f, "tracepoint:{group}:{name}"),
        }
    }
}

/// `--last N --dump-on ...`: keep the last `last` hits, print them when a trigger fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flight {
    pub last: usize,
    pub triggers: Vec<Trigger>,
}

impl Flight {
    /// The hit conditions, in the command line's order.
    pub fn conditions(&self) -> impl Iterator<Item = &Condition> {
        self.triggers.iter().filter_map(|t| match t {
            Trigger::Hit(c) => Some(c),
            _ => None,
        })
    }

    pub fn on_signal(&self) -> bool {
        self.triggers.contains(&Trigger::Signal)
    }

    /// The tracepoints, as `(group, name)`.
    pub fn tracepoints(&self) -> impl Iterator<Item = (&str, &str)> {
        self.triggers.iter().filter_map(|t| match t {
            Trigger::Tracepoint { group, name } => Some((group.as_str(), name.as_str())),
            _ => None,
        })
    }
}

/// Why a `--dump-on` value was refused: the text to put after `--dump-on '...': `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerError(pub String);

impl fmt::Display for TriggerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses one `--dump-on` value: `signal`, `tracepoint:GROUP:NAME`, or a condition on the hit's value.
/// A tracepoint is checked against `events` (the tracefs `events` directory): the kernel's raw
/// tracepoint attach takes the name alone and would accept a name of another group.
pub fn parse_trigger(text: &str, events: &Path) -> Result<Trigger, TriggerError> {
    let t = text.trim();
    if t == "signal" {
        return Ok(Trigger::Signal);
    }
    if let Some(rest) = t.strip_prefix("tracepoint:") {
        let Some((group, name)) = rest.split_once(':') else {
            return Err(TriggerError(
                "a tracepoint is tracepoint:GROUP:NAME, e.g. tracepoint:error_report:error_report_end"
                    .into(),
            ));
        };
        let plain = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        if !plain(group) || !plain(name) {
            return Err(TriggerError(format!(
                "`{group}:{name}` is not a tracepoint name (letters, digits, `_`)"
            )));
        }
        if !events.join(group).join(name).is_dir() {
            return Err(TriggerError(format!(
                "no tracepoint {group}:{name} in {}: pick one listed there as GROUP/NAME (is tracefs \
                 mounted?)",
                events.display()
            )));
        }
        return Ok(Trigger::Tracepoint {
            group: group.into(),
            name: name.into(),
        });
    }
    condition::parse(t)
        .map(Trigger::Hit)
        .map_err(|e| {
            TriggerError(format!(
                "{e}; a trigger is a condition on the hit (`value == 500`, the --if language), `signal` or \
                 tracepoint:GROUP:NAME"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tracefs `events` directory holding only error_report:error_report_end.
    fn events(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ksw-events-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("error_report/error_report_end")).unwrap();
        dir
    }

    #[test]
    fn triggers_parse_each_kind() {
        let events = events("kinds");
        assert_eq!(parse_trigger("signal", &events), Ok(Trigger::Signal));
        assert_eq!(
            parse_trigger("tracepoint:error_report:error_report_end", &events),
            Ok(Trigger::Tracepoint {
                group: "error_report".into(),
                name: "error_report_end".into()
            })
        );
        let Ok(Trigger::Hit(c)) = parse_trigger("value == 500", &events) else {
            panic!("a condition")
        };
        assert!(c.holds(500, None, 8) && !c.holds(499, None, 8));
    }

    #[test]
    fn bad_triggers_say_what_a_trigger_is() {
        let events = events("bad");
        let unknown = parse_trigger("tracepoint:nope:gone", &events).unwrap_err();
        assert!(
            unknown.0.contains("no tracepoint nope:gone in"),
            "{unknown}"
        );
        assert!(unknown.0.contains(&events.display().to_string()));
        let short = parse_trigger("tracepoint:error_report", &events).unwrap_err();
        assert!(short.0.contains("tracepoint:GROUP:NAME"), "{short}");
        let dots = parse_trigger("tracepoint:../x:y", &events).unwrap_err();
        assert!(dots.0.contains("not a tracepoint name"), "{dots}");
        let junk = parse_trigger("sigusr1", &events).unwrap_err();
        assert!(junk.0.contains("`signal`"), "{junk}");
    }
}
