//! Per-CPU variables: a target on one has a copy per CPU and none at its symbol's address, so it is moved
//! onto one CPU's copy (`--percpu-cpu N`'s, else the lowest online CPU's) to resolve like a cast on an
//! address, and the plan keeps where every CPU's copy is. The per-CPU bases come from the kernel, through
//! the host; a kernel that cannot give them is exit 4 with the way to watch one copy by hand.

use std::collections::BTreeMap;

use ksymwatch_symbols::{CastType, PathElem, SymbolTable};

use crate::config::typed::{self, Types};
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

/// The section BTF puts per-CPU variables in.
const PERCPU_SECTION: &str = ".data..percpu";

/// A per-CPU variable (`runqueues.nr_running`, `cpu_number`), as BTF records it: what to cast each CPU's copy
/// to, and where in the per-CPU area it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerCpuVariable {
    pub name: String,
    /// The cast that names the variable's type, as the target grammar spells it (`struct rq`).
    pub cast: CastType,
    /// The member path after the variable (`.nr_running`; empty for the whole variable).
    pub path: Vec<PathElem>,
    pub offset_in_section: u64,
}

impl PerCpuVariable {
    /// The path as written (`.nr_running`).
    pub fn path_text(&self) -> String {
        self.path.iter().map(|e| e.to_string()).collect()
    }
}

/// `target` when it names a per-CPU variable BTF records, with or without a member path (else `None`). Loads
/// the kernel's BTF: a caller asks only where a per-CPU variable may be meant.
fn percpu_variable(types: &Types, target: &Target) -> Option<PerCpuVariable> {
    if target.cast.is_some()
        || target.object().is_some()
        || !matches!(target.base, Base::Symbol { .. })
    {
        return None;
    }
    let splits = target.symbol_splits();
    let btf = types.vmlinux().ok()?;
    splits.into_iter().find_map(|(name, rest)| {
        let v = btf
            .variable(&name)
            .filter(|v| v.section == PERCPU_SECTION)?;
        Some(PerCpuVariable {
            cast: typed::cast_of(&v.type_name)?,
            path: rest,
            offset_in_section: v.offset_in_section,
            name,
        })
    })
}

/// [`targets`]' answer: the targets, the per-CPU copies of each, and how the bases were found.
pub type PerCpuTargets = (Vec<Target>, Vec<Option<PerCpuTarget>>, Option<Offsets>);

/// The targets with each one on a per-CPU variable moved onto one CPU's copy, and for those, where every
/// online CPU's copy is.
///
/// Named with a member path (`runqueues.nr_running`), a per-CPU variable is recognized from BTF. A bare
/// name (`cpu_number`) is looked up in BTF only where `table` (the kallsyms table, when the symbols are
/// one) has no such symbol: loading the kernel's BTF for every plain `jiffies` would cost every start-up
/// milliseconds.
pub fn targets(
    types: &Types,
    targets: Vec<Target>,
    copy: Option<u32>,
    table: Option<&SymbolTable>,
    host: &dyn Host,
) -> Result<PerCpuTargets> {
    let mut found: Option<(BTreeMap<u32, u64>, Offsets)> = None;
    let mut moved = Vec::with_capacity(targets.len());
    let mut percpu = Vec::with_capacity(targets.len());
    for t in targets {
        let plain_unknown = |name: &str| table.is_some_and(|tb| tb.by_name(name).next().is_none());
        let candidate = match &t.base {
            _ if !t.path.is_empty() => true,
            Base::Symbol { name, .. } => plain_unknown(name),
            Base::Address(_) => false,
        };
        let Some(v) = candidate.then(|| percpu_variable(types, &t)).flatten() else {
            moved.push(t);
            percpu.push(None);
            continue;
        };
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
