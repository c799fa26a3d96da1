//! The kernel's side of a plan: the symbol source (a vmlinux or System.map found or fetched, else
//! kallsyms), BTF types, and for a system-wide watch the targets resolved there (per-CPU variables moved
//! onto one CPU's copy, `SYMBOL.FIELD` typed from BTF where no DWARF can place it).

use std::path::Path;

use ksymwatch_symbols::{Origin, Source, SymbolTable};

use crate::config::advice::SymbolsContext;
use crate::config::debuginfod;
use crate::config::request::SymbolRequest;
use crate::config::symbols::{FileSymbols, LazyKallsyms, DEFAULT_KALLSYMS};
use crate::config::typed::{self, Types};
use crate::config::watch::{self, Resolved};
use crate::error::{Error, Result};
use crate::model::target::Target;
use crate::model::watch::Access;
use crate::perf::bpf::percpu::Offsets;

use super::host::{Fetch, Host};
use super::options::Options;
use super::percpu::{self, PerCpuTarget};
use super::{Kernel, KernelSymbols, Writers};

/// The kernel's side of a plan, as loaded.
pub struct KernelSide {
    /// The targets, with `SYMBOL.FIELD` turned into a typed target where BTF knows the variable.
    pub targets: Vec<Target>,
    /// Each target's base (the address a `(TYPE)` cast starts from; the target itself otherwise).
    pub bases: Vec<Target>,
    pub types: Types,
    symbols: KernelSymbols,
    origin: Origin,
    source_text: String,
    /// A system-wide watch's bases resolved in the kernel's symbols (empty for a process watch).
    pub resolved: Vec<Resolved>,
    /// For each target on a per-CPU variable, where its copies are.
    pub percpu: Vec<Option<PerCpuTarget>>,
    /// How the per-CPU bases were found, when a target is on a per-CPU variable.
    percpu_offsets: Option<Offsets>,
}

/// A kallsyms table as loaded: the table, where it came from (cache or parse), and its source.
type Loaded = (SymbolTable, Origin, Source);

impl KernelSide {
    pub fn load(o: &Options, host: &mut dyn Host) -> Result<KernelSide> {
        let symbols = &o.symbols;
        let system = o.scope.system_wide();
        let targets = o.targets.clone();
        let picked = host.pick_symbols(symbols);
        // Member paths of a process's own variables come from its binary; only a kernel target needs vmlinux.
        let needs_dwarf = symbols.lines || (system && targets.iter().any(debuginfod::needs_dwarf));
        let picked = match needs_dwarf && !matches!(picked, Source::Vmlinux(_)) {
            true => host.fetch_vmlinux(picked, Fetch::Dwarf, symbols)?,
            false => picked,
        };
        let types = Types::new(&symbols.btf);
        // Member offsets from another kernel's BTF would put a live watch on the wrong bytes.
        let member_offsets = targets
            .iter()
            .any(|t| t.cast.is_some() || !t.path.is_empty())
            || o.running.control.is_some();
        if member_offsets {
            host.check_btf_for_live_watch(&symbols.btf)?;
        }
        // A per-CPU variable has one copy per CPU, none at its symbol's address: each CPU's breakpoint goes
        // on a copy, resolved here as a cast on one CPU's.
        let (targets, mut percpu, mut percpu_offsets) = match system {
            true => percpu::targets(&types, targets, o.percpu_cpu, None, host)?,
            false => {
                let none = vec![None; targets.len()];
                (targets, none, None)
            }
        };
        // Without DWARF, BTF may still know a kernel variable's type: `SYMBOL.FIELD` becomes a typed target.
        let mut targets: Vec<Target> = if system && !matches!(picked, Source::Vmlinux(_)) {
            targets
                .into_iter()
                .map(|t| Ok(typed::btf_variable(&types, &t)?.unwrap_or(t)))
                .collect::<Result<_>>()?
        } else {
            targets
        };
        // A `(TYPE)` target resolves its base like any other target, then moves onto the member (`typed`).
        let mut bases: Vec<Target> = targets.iter().map(typed::base_target).collect();
        lines_need_vmlinux(symbols.lines, &picked)?;
        let (picked, loaded) = fetch_for_data_symbols(system, symbols, host, picked, &bases)?;
        let file_symbols = match picked {
            Source::Kallsyms(_) => None,
            _ => Some(host.open_symbol_files(&picked, symbols)?),
        };
        let (kernel, origin, source_text, resolved) = match file_symbols {
            Some(files) => {
                from_files(files, system.then_some(&bases[..]), o.access, symbols.lines)?
            }
            // A process watch names kernel frames only if a kernel frame comes: the running kernel's
            // kallsyms is read then, not on the way to the first hit. A file named with --kallsyms is read
            // now, so that a wrong one fails before anything is armed.
            None if !system && symbols.kallsyms == Path::new(DEFAULT_KALLSYMS) => {
                let lazy =
                    LazyKallsyms::new(&symbols.kallsyms, &symbols.notes, symbols.symbol_cache);
                let source = Source::Kallsyms(symbols.kallsyms.clone());
                (
                    KernelSymbols::Lazy(lazy),
                    Origin::Parsed,
                    source.to_string(),
                    Vec::new(),
                )
            }
            None => {
                let (table, origin, source) = match loaded {
                    Some(l) => l,
                    None if o.writers == Writers::UserSpaceOnly => kallsyms_or_none(symbols, host)?,
                    None => kallsyms(symbols, host)?,
                };
                // A per-CPU variable named bare (`cpu_number`) is not in a kallsyms without data symbols.
                if system {
                    targets = percpu::by_name(
                        &types,
                        targets,
                        o.percpu_cpu,
                        &table,
                        &mut percpu,
                        &mut percpu_offsets,
                        host,
                    )?;
                    bases = targets.iter().map(typed::base_target).collect();
                }
                let resolved = match system {
                    true => bases
                        .iter()
                        .map(|t| watch::resolve(t, o.access, &table))
                        .collect::<Result<Vec<_>>>()?,
                    false => Vec::new(),
                };
                (
                    KernelSymbols::Kallsyms(table),
                    origin,
                    source.to_string(),
                    resolved,
                )
            }
        };
        percpu::copy_needs_percpu(o.percpu_cpu, &percpu)?;
        Ok(KernelSide {
            targets,
            bases,
            types,
            symbols: kernel,
            origin,
            source_text,
            resolved,
            percpu,
            percpu_offsets,
        })
    }

    /// The table call chains are named from (`--on` finds its call sites there).
    pub fn chains(&self) -> Result<&SymbolTable> {
        self.symbols.chains().map(|t| t.table())
    }

    /// What the plan keeps.
    pub fn into_kernel(self) -> Kernel {
        Kernel {
            symbols: self.symbols,
            origin: self.origin,
            source_text: self.source_text,
            types: self.types,
            percpu: self.percpu_offsets,
        }
    }
}

/// `--lines` reads vmlinux DWARF: an error naming the fix when the symbols come from elsewhere.
fn lines_need_vmlinux(lines: bool, picked: &Source) -> Result<()> {
    if lines && !matches!(picked, Source::Vmlinux(_)) {
        return Err(Error::usage(format!(
            "--lines reads file:line from vmlinux DWARF, but the symbols come from {picked}; pass --vmlinux FILE \
             (an unstripped vmlinux with debug info)"
        )));
    }
    Ok(())
}

/// The kernel symbols from a vmlinux or System.map, with `bases` (a system watch's) resolved; the chains
/// and (with `lines`) the line tables loaded now, so a file that cannot give them fails before anything
/// is armed.
fn from_files(
    files: FileSymbols,
    bases: Option<&[Target]>,
    access: Access,
    lines: bool,
) -> Result<(KernelSymbols, Origin, String, Vec<Resolved>)> {
    let resolved = match bases {
        Some(bases) => files.watches(bases, access)?,
        None => Vec::new(),
    };
    // Chains named from a vmlinux or System.map never come from the kallsyms cache. Loaded now, so
    // a file that cannot name them fails before anything is armed.
    files.chains()?;
    // A vmlinux without usable line tables fails here, before any warning about the targets.
    if lines {
        files.check_lines()?;
    }
    let header = files.header();
    Ok((
        KernelSymbols::Files(Box::new(files)),
        Origin::Parsed,
        header,
        resolved,
    ))
}

/// A kallsyms without data symbols cannot place `jiffies`: the running kernel's vmlinux can, fetched from
/// debuginfod where configured. Returns the source to use, and the kallsyms table loaded to find out when
/// it is still the source (so it is not loaded twice).
fn fetch_for_data_symbols(
    system: bool,
    symbols: &SymbolRequest,
    host: &mut dyn Host,
    picked: Source,
    bases: &[Target],
) -> Result<(Source, Option<Loaded>)> {
    if !system || !matches!(picked, Source::Kallsyms(_)) {
        return Ok((picked, None));
    }
    let l = kallsyms(symbols, host)?;
    let Some(name) = debuginfod::missing_data_symbol(&l.0, bases) else {
        return Ok((picked, Some(l)));
    };
    let picked = host.fetch_vmlinux(picked, Fetch::Symbol(name), symbols)?;
    let keep = matches!(picked, Source::Kallsyms(_)).then_some(l);
    Ok((picked, keep))
}

fn kallsyms(symbols: &SymbolRequest, host: &mut dyn Host) -> Result<Loaded> {
    let (table, origin) = host.kallsyms(symbols, symbols.symbol_cache).bad_symbols()?;
    Ok((table, origin, Source::Kallsyms(symbols.kallsyms.clone())))
}

/// [`kallsyms`] for a watch that cannot see the kernel (user-space writers only): kernel pointers hidden
/// from this user (kptr_restrict) leave an empty table instead of an error, since no kernel frame is ever
/// recorded.
fn kallsyms_or_none(symbols: &SymbolRequest, host: &mut dyn Host) -> Result<Loaded> {
    match host.kallsyms(symbols, false) {
        Err(ksymwatch_symbols::Error::ZeroedAddresses { .. }) => Ok((
            SymbolTable::new(Vec::new(), false),
            Origin::Parsed,
            Source::Kallsyms(symbols.kallsyms.clone()),
        )),
        _ => kallsyms(symbols, host),
    }
}
