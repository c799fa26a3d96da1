//! Per-CPU variables: a target on one has a copy per CPU and none at its symbol's address, so it is moved
//! onto one CPU's copy (`--percpu-cpu N`'s, else the lowest online CPU's) to resolve like a cast on an
//! address, and the plan keeps where every CPU's copy is. The per-CPU bases come from the kernel, through
//! the host; a kernel that cannot give them is exit 4 with the way to watch one copy by hand. Which
//! targets are on a per-CPU variable the types say (`typed::variables`), with the other variables they
//! type (`SYMBOL.FIELD` as a cast on the symbol, where no DWARF can place a member path), which take
//! their cast here.

use std::collections::BTreeMap;

use crate::config::typed::Variable;
use crate::cpulist;
use crate::error::{Error, Result};
use crate::model::target::{Base, Target};
use crate::model::watch::PerCpu;
use crate::perf::bpf::percpu::Offsets;

use super::host::Host;

/// A target on a per-CPU variable: the base of the CPU whose copy stood in for it while resolving, and the
/// copies (their `offset` is filled in once the member is resolved).
#[derive(Debug, Clone)]
pub struct PerCpuTarget {
    pub base: u64,
    pub copies: PerCpu,
}

/// [`targets`]' answer: the targets, the per-CPU copies of each, and how the bases were found.
pub type PerCpuTargets = (Vec<Target>, Vec<Option<PerCpuTarget>>, Option<Offsets>);

/// The targets with each one on a per-CPU variable moved onto one CPU's copy, and for those, where every
/// online CPU's copy is; a `SYMBOL.FIELD` the types made a cast of, as that cast. `variables` is what the
/// types said of each target (`typed::variables`).
pub fn targets(
    targets: Vec<Target>,
    variables: Vec<Variable>,
    copy: Option<u32>,
    host: &dyn Host,
) -> Result<PerCpuTargets> {
    let mut found: Option<(BTreeMap<u32, u64>, Offsets)> = None;
    let mut moved = Vec::with_capacity(targets.len());
    let mut percpu = Vec::with_capacity(targets.len());
    let mut casts = Vec::with_capacity(targets.len());
    for (t, variable) in targets.into_iter().zip(variables) {
        let v = match variable {
            Variable::PerCpu(v) => v,
            other => {
                moved.push(t);
                percpu.push(None);
                casts.push(other);
                continue;
            }
        };
        casts.push(Variable::Untyped);
        // Exit 4 with the reason and the way to watch one copy by hand when the kernel cannot give
        // every online CPU's base.
        let (bases, _) = match &mut found {
            Some(f) => f,
            None => found.insert(online_bases(host).map_err(|reason| {
                Error::not_permitted(format!(
                    "`{}`: `{}` is a per-CPU variable, and the per-CPU bases cannot be had here ({reason}); \
                     watch one CPU's copy by its address: '({})0xADDR{}' (that CPU's per-CPU base plus 0x{:x})",
                    t.text,
                    v.name,
                    v.cast,
                    v.path_text(),
                    v.offset_in_section
                ))
            })?),
        };
        let cpu = copy.unwrap_or_else(|| bases.keys().next().copied().unwrap_or(0));
        let Some(&base) = bases.get(&cpu) else {
            return Err(Error::usage(format!(
                "--percpu-cpu {cpu}: cpu{cpu} is not online, so its copy of `{}` cannot be placed; online: {}",
                v.name,
                cpulist::format(&bases.keys().copied().collect())
            )));
        };
        // The target moved onto this CPU's copy: a cast on its address, with the same path, `+OFF` and `/LEN`.
        moved.push(Target {
            cast: Some(v.cast.clone()),
            base: Base::Address(base.wrapping_add(v.offset_in_section)),
            path: v.path.clone(),
            offset: t.offset,
            len: t.len,
            text: t.text.clone(),
        });
        percpu.push(Some(PerCpuTarget {
            base,
            copies: PerCpu {
                offset: 0,
                bases: bases.clone(),
                copy,
            },
        }));
    }
    // Every per-CPU variable placed first, then the other variables typed (what either refuses, in that
    // order).
    let moved = moved
        .into_iter()
        .zip(casts)
        .map(|(t, variable)| match variable {
            Variable::Cast(typed) => typed,
            _ => Ok(t),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((moved, percpu, found.map(|(_, at)| at)))
}

/// Every online CPU's per-CPU base, and how they were found; why not, when the kernel cannot answer for
/// all of them.
fn online_bases(host: &dyn Host) -> std::result::Result<(BTreeMap<u32, u64>, Offsets), String> {
    let cpus: Vec<u32> = host
        .online_cpus()
        .map(|c| c.into_iter().collect())
        .unwrap_or_default();
    let (bases, at) = host.percpu_bases(&cpus)?;
    match cpus.iter().copied().find(|c| !bases.contains_key(c)) {
        None => Ok((bases, at)),
        Some(cpu) => Err(format!("cpu{cpu}'s per-CPU base could not be read")),
    }
}
