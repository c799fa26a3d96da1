//! The plan's kernel stage: the symbol source (a vmlinux or System.map found or fetched, else kallsyms),
//! BTF types (`--dump-on`'s tracepoints found there), and for a system-wide watch the targets resolved there (per-CPU variables moved onto one
//! CPU's copy by `percpu`, `SYMBOL.FIELD` typed from BTF where no DWARF can place it). What the watch
//! needs of the kernel's symbols is decided here, from the request (DWARF, the data symbols a kallsyms
//! must have, now or on first use, hidden addresses allowed); which file answers is the symbols crate's
//! choice, made once as the machine loads them ([`Host::kernel_symbols`]).

use std::path::{Path, PathBuf};
use std::rc::Rc;

use ksymwatch_symbols::kernel::Loaded;
use ksymwatch_symbols::{Origin, Source, SymbolTable};

use crate::config::advice::Advised;
use crate::config::kernel_source::{self, KernelLoad, KernelQuery, DEFAULT_KALLSYMS};
use crate::config::symbols::{FileSymbols, LazyKallsyms};
use crate::config::tracepoints;
use crate::config::typed::{self, Asked, Types};
use crate::config::watch::Resolved;
use crate::error::{Error, Result};
use crate::model::target::Target;
use crate::perf::bpf::percpu::Offsets;

use super::host::Host;
use super::options::Options;
use super::percpu::{self, PerCpuTarget};
use super::{Kernel, KernelSymbols, Writers};

/// The kernel's side of a plan, as loaded.
pub struct KernelSide {
    /// The targets, with `SYMBOL.FIELD` turned into a typed target where BTF knows the variable.
    pub targets: Vec<Target>,
    /// Each target's base (the address a `(TYPE)` cast starts from; the target itself otherwise).
    pub bases: Vec<Target>,
    pub types: Rc<Types>,
    symbols: KernelSymbols,
    origin: Origin,
    /// The kallsyms named (`--kallsyms`), for the header.
    kallsyms: PathBuf,
    /// A system-wide watch's bases resolved in the kernel's symbols (empty for a process watch).
    pub resolved: Vec<Resolved>,
    /// For each target on a per-CPU variable, where its copies are.
    pub percpu: Vec<Option<PerCpuTarget>>,
    /// How the per-CPU bases were found, when a target is on a per-CPU variable.
    percpu_offsets: Option<Offsets>,
}

impl KernelSide {
    /// The kernel side `o` needs, from `host`; what the load went by goes to `notes`.
    pub fn load(o: &Options, host: &mut dyn Host, notes: &mut Vec<String>) -> Result<KernelSide> {
        let symbols = &o.symbols;
        let system = o.scope.system_wide();
        let targets = o.targets.clone();
        // Member paths of a process's own variables come from its binary; only a kernel target needs vmlinux.
        let needs_dwarf =
            symbols.lines || (system && targets.iter().any(kernel_source::needs_dwarf));
        // The kernel's BTF as the host has it, read on first use, once for every question below and for
        // the stages after this one.
        let types = Rc::new(host.types(&symbols.btf));
        // Member offsets from another kernel's BTF would put a live watch on the wrong bytes.
        let live_offsets = targets
            .iter()
            .any(|t| t.cast.is_some() || !t.path.is_empty())
            || o.control.is_some();
        // The machine, asked once, for what this watch needs of the kernel's symbols: DWARF, the data
        // symbols a kallsyms must have (else a vmlinux from debuginfod), and whether the running kernel's
        // kallsyms is read now. A process watch leaves it to its first use: it names kernel frames only if
        // a kernel frame comes, so the table is read then, not on the way to the first hit (a file named
        // with --kallsyms is read now, so that a wrong one fails before anything is armed). What went
        // wrong loading is said below, in its turn: after what the targets themselves have to say.
        let data_symbols: Vec<Target> = targets.iter().map(typed::base_target).collect();
        let KernelLoad {
            picked,
            loaded,
            delivered,
        } = host.kernel_symbols(&KernelQuery {
            symbols,
            dwarf: needs_dwarf,
            data_symbols: system.then_some(&data_symbols[..]),
            kallsyms_later: !system && symbols.kallsyms == Path::new(DEFAULT_KALLSYMS),
            user_only: o.writers == Writers::UserSpaceOnly,
        })?;
        // What the load went by, said as it is known: a vmlinux debuginfod delivered, call chains named
        // from the file's own table where kallsyms could not be read.
        if let Some(delivered) = &delivered {
            notes.push(format!("ksymwatch: debuginfod: {delivered}"));
        }
        if let Ok(Loaded::File {
            resolver,
            running: Err(why),
        }) = &loaded
        {
            notes.push(format!(
                "ksymwatch: warning: call chains from {} instead of kallsyms ({})",
                resolver.source(),
                Advised(why)
            ));
        }
        // `--lines` reads vmlinux DWARF: an error naming the fix when the symbols come from elsewhere.
        if symbols.lines && !matches!(picked, Source::Vmlinux(_)) {
            return Err(Error::usage(format!(
                "--lines reads file:line from vmlinux DWARF, but the symbols come from {picked}; pass --vmlinux FILE \
                 (an unstripped vmlinux with debug info)"
            )));
        }
        // The types, asked once: another kernel's `--btf` is refused where member offsets go live, and for
        // a system-wide watch, BTF says which targets are on a per-CPU variable (one copy per CPU, none at
        // its symbol's address: each CPU's breakpoint goes on a copy, resolved here as a cast on one CPU's;
        // named bare, `cpu_number`, looked for only where a kallsyms has no such symbol) and, without
        // DWARF, which `SYMBOL.FIELD` becomes a typed target; and `--dump-on`'s tracepoints are found there.
        let table = match &loaded {
            Ok(Loaded::Kallsyms(table, _)) => Some(table),
            _ => None,
        };
        let asked = Asked {
            live: live_offsets,
            percpu: system,
            known: table,
            cast: system && !matches!(picked, Source::Vmlinux(_)),
        };
        let variables = typed::variables(&types, &targets, &asked)?;
        // `--dump-on`'s tracepoints, each found in BTF and its group in tracefs where mounted, so that a
        // trigger that could never fire is refused before anything is armed; what was not checked is said.
        let dump_on: Vec<(&str, &str)> = match &o.flight {
            Some(flight) => flight.tracepoints().collect(),
            None => Vec::new(),
        };
        let events = match dump_on.is_empty() {
            true => None,
            false => host.tracefs_events(),
        };
        for (group, name) in dump_on {
            let trigger = format!("tracepoint:{group}:{name}");
            let refused = |e: String| Error::usage(format!("--dump-on '{trigger}': {e}"));
            let btf = types.tracepoint(name).map_err(|e| refused(e.to_string()))?;
            let event = tracepoints::find(group, name, btf, events.as_deref()).map_err(refused)?;
            if let Some(note) = event.group_note() {
                notes.push(format!("ksymwatch: note: --dump-on {trigger}: {note}"));
            }
        }
        let (targets, percpu, percpu_offsets) = match system {
            true => percpu::targets(targets, variables, o.percpu_cpu, host)?,
            false => {
                let none = vec![None; targets.len()];
                (targets, none, None)
            }
        };
        let (kernel, origin) = match loaded? {
            Loaded::Kallsyms(table, origin) => (KernelSymbols::Kallsyms(table), origin),
            Loaded::Later => {
                let lazy =
                    LazyKallsyms::new(&symbols.kallsyms, &symbols.notes, symbols.symbol_cache);
                (KernelSymbols::Lazy(lazy), Origin::Parsed)
            }
            Loaded::File { resolver, running } => {
                // Its call chains' table (and with `--lines` its line tables) came loaded, so a file that
                // cannot give them has failed before anything is armed.
                let files = FileSymbols::new(resolver, running, &symbols.kallsyms, symbols.force);
                (KernelSymbols::Files(Box::new(files)), Origin::Parsed)
            }
        };
        // `--percpu-cpu` chooses a per-CPU variable's copy: an error naming the fix when no target is one.
        if let (Some(cpu), true) = (o.percpu_cpu, percpu.iter().all(Option::is_none)) {
            return Err(Error::usage(format!(
                "--percpu-cpu {cpu} chooses which CPU's copy of a per-CPU variable to watch, and no target \
                 is one; drop --percpu-cpu"
            )));
        }
        // A `(TYPE)` target resolves its base like any other target, then moves onto the member (`typed`).
        let bases: Vec<Target> = targets.iter().map(typed::base_target).collect();
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
            kallsyms: symbols.kallsyms.clone(),
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
    pub fn into_kernel(self) -> (Kernel, Rc<Types>) {
        let kernel = Kernel {
            symbols: Rc::new(self.symbols),
            origin: self.origin,
            kallsyms: self.kallsyms,
            percpu: self.percpu_offsets,
        };
        (kernel, self.types)
    }
}
