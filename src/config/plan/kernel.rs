//! The plan's kernel stage: the symbol source (a vmlinux or System.map found or fetched, else kallsyms),
//! BTF types, and for a system-wide watch the targets resolved there (per-CPU variables moved onto one
//! CPU's copy by `percpu`, `SYMBOL.FIELD` typed from BTF where no DWARF can place it). The machine is
//! asked twice, in order: which symbol source (checked for what the targets need), then its symbols
//! (for a process watch, the running kernel's kallsyms is left to its first use instead).

use std::path::Path;

use ksymwatch_symbols::{Origin, Source, SymbolTable};

use crate::config::debuginfod;
use crate::config::symbols::{LazyKallsyms, DEFAULT_KALLSYMS};
use crate::config::typed::{self, Types};
use crate::config::watch::Resolved;
use crate::error::{Error, Result};
use crate::model::target::Target;
use crate::perf::bpf::percpu::Offsets;

use super::host::{Host, KernelFiles, SourceNeeds};
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

impl KernelSide {
    pub fn load(o: &Options, host: &mut dyn Host) -> Result<KernelSide> {
        let symbols = &o.symbols;
        let system = o.scope.system_wide();
        let targets = o.targets.clone();
        // Member paths of a process's own variables come from its binary; only a kernel target needs vmlinux.
        let needs_dwarf = symbols.lines || (system && targets.iter().any(debuginfod::needs_dwarf));
        // Member offsets from another kernel's BTF would put a live watch on the wrong bytes.
        let live_offsets = targets
            .iter()
            .any(|t| t.cast.is_some() || !t.path.is_empty())
            || o.control.is_some();
        let needs = SourceNeeds {
            dwarf: needs_dwarf,
            live_offsets,
        };
        let picked = host.symbol_source(symbols, needs)?;
        // `--lines` reads vmlinux DWARF: an error naming the fix when the symbols come from elsewhere.
        if symbols.lines && !matches!(picked, Source::Vmlinux(_)) {
            return Err(Error::usage(format!(
                "--lines reads file:line from vmlinux DWARF, but the symbols come from {picked}; pass --vmlinux FILE \
                 (an unstripped vmlinux with debug info)"
            )));
        }
        let types = Types::new(&symbols.btf);
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
        // A process watch names kernel frames only if a kernel frame comes: the running kernel's kallsyms
        // is read then, not on the way to the first hit. A file named with --kallsyms is read now, so that
        // a wrong one fails before anything is armed.
        let lazy = !system
            && matches!(picked, Source::Kallsyms(_))
            && symbols.kallsyms == Path::new(DEFAULT_KALLSYMS);
        let loaded = match lazy {
            true => None,
            false => Some(host.kernel_symbols(
                picked,
                symbols,
                system.then_some(&bases[..]),
                o.writers == Writers::UserSpaceOnly,
            )?),
        };
        let (kernel, origin, source_text) = match loaded {
            Some(KernelFiles::Files(files)) => {
                // The chains (and with `--lines` the line tables) are loaded now, so a file that cannot
                // give them fails before anything is armed; named from a vmlinux or System.map, chains
                // never come from the kallsyms cache.
                files.chains()?;
                if symbols.lines {
                    files.check_lines()?;
                }
                let header = files.header();
                (KernelSymbols::Files(files), Origin::Parsed, header)
            }
            None => {
                let lazy =
                    LazyKallsyms::new(&symbols.kallsyms, &symbols.notes, symbols.symbol_cache);
                let source = Source::Kallsyms(symbols.kallsyms.clone());
                (
                    KernelSymbols::Lazy(lazy),
                    Origin::Parsed,
                    source.to_string(),
                )
            }
            Some(KernelFiles::Kallsyms(table, origin)) => {
                let source = Source::Kallsyms(symbols.kallsyms.clone());
                (KernelSymbols::Kallsyms(table), origin, source.to_string())
            }
        };
        // A per-CPU variable named bare (`cpu_number`) is not in a kallsyms without data symbols.
        if let (true, KernelSymbols::Kallsyms(table)) = (system, &kernel) {
            targets = percpu::by_name(
                &types,
                targets,
                o.percpu_cpu,
                table,
                &mut percpu,
                &mut percpu_offsets,
                host,
            )?;
            bases = targets.iter().map(typed::base_target).collect();
        }
        percpu::copy_needs_percpu(o.percpu_cpu, &percpu)?;
        let resolved = match system {
            true => kernel.resolve(&bases, o.access)?,
            false => Vec::new(),
        };
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

    /// What the plan keeps: the kernel side, and the types `--control` moves its targets by.
    pub fn into_kernel(self) -> (Kernel, Types) {
        let kernel = Kernel {
            symbols: std::rc::Rc::new(self.symbols),
            origin: self.origin,
            source_text: self.source_text,
            percpu: self.percpu_offsets,
        };
        (kernel, self.types)
    }
}
