//! The flight recorder's configuration (`--last N` with `--dump-on`): how many hits are kept, and what
//! makes them print. A trigger is a condition on a hit (the `--if` language of [`condition`]), `signal`
//! (SIGUSR1 to the tracer), or `tracepoint:GROUP:NAME` (a kernel tracepoint firing anywhere). A
//! `--dump-on` value is parsed as it enters ([`dump_on`], the command line's argument parser calls it),
//! the text's alone; `--last` and `--dump-on` are checked against each other and the outputs with the
//! other options (the plan's options stage), and whether a tracepoint exists in this kernel is the plan's
//! kernel stage's question, asked with the kernel's other type questions.

use std::fmt;

use crate::model::condition::{self, Condition};

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

/// One `--dump-on` value: the text as given, which messages quote, and the trigger it parsed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpOn {
    pub text: String,
    pub trigger: Trigger,
}

/// A `--dump-on` value parsed ([`parse_trigger`]); refused with the whole message, which names the option
/// and quotes the value.
pub fn dump_on(text: &str) -> Result<DumpOn, String> {
    match parse_trigger(text) {
        Ok(trigger) => Ok(DumpOn {
            text: text.to_string(),
            trigger,
        }),
        Err(e) => Err(format!("--dump-on '{text}': {e}")),
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

/// Parses one `--dump-on` value: `signal`, `tracepoint:GROUP:NAME` (a name the kernel's raw tracepoint
/// attach could take), or a condition on the hit's value.
pub fn parse_trigger(text: &str) -> Result<Trigger, TriggerError> {
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

    #[test]
    fn triggers_parse_each_kind() {
        assert_eq!(parse_trigger("signal"), Ok(Trigger::Signal));
        assert_eq!(
            parse_trigger("tracepoint:error_report:error_report_end"),
            Ok(Trigger::Tracepoint {
                group: "error_report".into(),
                name: "error_report_end".into()
            })
        );
        let Ok(Trigger::Hit(c)) = parse_trigger("value == 500") else {
            panic!("a condition")
        };
        assert!(c.holds(500, None, 8) && !c.holds(499, None, 8));
    }

    #[test]
    fn bad_triggers_say_what_a_trigger_is() {
        let short = parse_trigger("tracepoint:error_report").unwrap_err();
        assert!(short.0.contains("tracepoint:GROUP:NAME"), "{short}");
        let dots = parse_trigger("tracepoint:../x:y").unwrap_err();
        assert!(dots.0.contains("not a tracepoint name"), "{dots}");
        let junk = parse_trigger("sigusr1").unwrap_err();
        assert!(junk.0.contains("`signal`"), "{junk}");
    }
}
