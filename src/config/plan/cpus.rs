//! The CPUs a watch arms now (`--cpus LIST`, else every online one) and the ones it follows through
//! hotplug: a `--cpus` list is checked against the machine's possible and online CPUs.

use std::collections::BTreeSet;

use crate::error::{Context, Error, ExitCode, Result};

use super::host::Host;

/// The CPUs a watch arms now, and the ones it follows through hotplug.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpus {
    pub now: BTreeSet<u32>,
    /// `None`: every CPU that comes online.
    pub follow: Option<BTreeSet<u32>>,
}

/// The CPUs to arm now and the set to follow through hotplug (`None`: every CPU that comes online).
pub fn select(list: Option<&str>, host: &dyn Host) -> Result<Cpus> {
    let online = host
        .online_cpus()
        .or_exit(ExitCode::Runtime, "cannot read the online CPU list")?;
    let Some(list) = list else {
        return Ok(Cpus {
            now: online,
            follow: None,
        });
    };
    let wanted = crate::cpulist::parse(list)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            Error::usage(format!("--cpus `{list}` is not a CPU list; use e.g. 0-3,6"))
        })?;
    let possible = host.possible_cpus().unwrap_or_else(|| online.clone());
    let format = crate::cpulist::format;
    let absent: std::collections::BTreeSet<u32> = wanted.difference(&possible).copied().collect();
    if !absent.is_empty() {
        return Err(Error::usage(format!(
            "--cpus: cpu {} does not exist on this machine (possible CPUs: {})",
            format(&absent),
            format(&possible)
        )));
    }
    let offline: std::collections::BTreeSet<u32> = wanted.difference(&online).copied().collect();
    if !offline.is_empty() {
        return Err(Error::usage(format!(
            "--cpus: cpu {} is offline (online: {}); bring it online with `echo 1 > /sys/devices/system/cpu/cpuN/online` \
             or leave it out",
            format(&offline),
            format(&online)
        )));
    }
    Ok(Cpus {
        now: wanted.clone(),
        follow: Some(wanted),
    })
}
