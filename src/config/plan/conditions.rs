//! The plan's last stage: `--if`'s condition and `--dump-on`'s hit conditions checked against the watches
//! they will be evaluated on, once every watch's length is known (a constant wider than the watch could
//! never match).

use crate::config::flight::{DumpOn, Trigger};
use crate::error::{Error, Result};
use crate::model::condition::Condition;
use crate::model::watch::Watch;

use super::Values;

/// Every condition fits every watch's length: `--if`'s first, then each `--dump-on` hit condition in the
/// command line's order.
pub fn fit(
    values: &Values,
    condition_text: Option<&str>,
    dump_on: &[DumpOn],
    watches: &[Watch],
) -> Result<()> {
    let mut conditions: Vec<(&str, &str, &Condition)> = Vec::new();
    if let (Some(cond), Some(text)) = (values.condition(), condition_text) {
        kernel_reads(text, watches)?;
        conditions.push(("--if", text, cond));
    }
    for d in dump_on {
        if let Trigger::Hit(cond) = &d.trigger {
            conditions.push(("--dump-on", &d.text, cond));
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

/// `--if` on a watch it cannot judge ([`Watch::if_undecidable`]) is refused before anything runs: the
/// command line is to change.
fn kernel_reads(text: &str, watches: &[Watch]) -> Result<()> {
    match watches.iter().find_map(Watch::if_undecidable) {
        Some(why) => Err(Error::usage(format!(
            "--if '{text}': {why}; watch it with `write`, or drop --if"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::condition;
    use crate::model::watch::Access;

    fn watch(addr: u64, access: Access) -> Watch {
        Watch {
            label: "counter".into(),
            addr,
            len: 8,
            access,
            module: None,
            per_cpu: None,
        }
    }

    /// `rw --if` of a user address kept every hit (the kernel could not read the value, and an unknown
    /// value is kept): refused; a write watch, or a kernel address's rw watch, is decided in the kernel.
    #[test]
    fn if_on_a_read_write_watch_of_a_user_address_is_refused() {
        let cond = condition::parse("value == 5").unwrap();
        let values = Values::If(cond);
        let fits = |w: Watch| fit(&values, Some("value == 5"), &[], &[w]);
        let e = fits(watch(0x5600_0000_1000, Access::ReadWrite)).unwrap_err();
        assert_eq!(e.code, crate::error::ExitCode::Usage);
        assert!(
            e.to_string().starts_with(
                "--if 'value == 5': `counter` is a read-write watch of a user address, whose bytes the \
                 kernel cannot read at the trap"
            ) && e.to_string().ends_with("watch it with `write`, or drop --if"),
            "{e}"
        );
        assert!(fits(watch(0x5600_0000_1000, Access::Write)).is_ok());
        assert!(fits(watch(0xffff_ffff_8300_0000, Access::ReadWrite)).is_ok());
    }
}
