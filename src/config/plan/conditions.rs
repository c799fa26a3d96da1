//! The plan's last stage: `--if`'s condition and `--dump-on`'s hit conditions checked against the watches
//! they will be evaluated on, once every watch's length is known (a constant wider than the watch could
//! never match).

use crate::config::flight::{Flight, Trigger};
use crate::error::{Error, Result};
use crate::model::condition::Condition;
use crate::model::watch::Watch;

use super::Values;

/// Every condition fits every watch's length: `--if`'s first, then each `--dump-on` hit condition in the
/// command line's order.
pub fn fit(
    values: &Values,
    condition_text: Option<&str>,
    dump_on: &[String],
    flight: Option<&Flight>,
    watches: &[Watch],
) -> Result<()> {
    let mut conditions: Vec<(&str, &str, &Condition)> = Vec::new();
    if let (Some(cond), Some(text)) = (values.condition(), condition_text) {
        conditions.push(("--if", text, cond));
    }
    for (text, trigger) in dump_on.iter().zip(flight.iter().flat_map(|f| &f.triggers)) {
        if let Trigger::Hit(cond) = trigger {
            conditions.push(("--dump-on", text, cond));
        }
    }
    for (flag, text, cond) in conditions {
        for w in watches {
            cond.check_width(w.len).map_err(|e| {
                Error::usage(format!(
                    "{flag} '{text}': {e} (`{}` is watched {} byte{} wide; give TARGET/LEN to watch more)",
                    w.label,
                    w.len,
                    if w.len == 1 { "" } else { "s" }
                ))
            })?;
        }
    }
    Ok(())
}
