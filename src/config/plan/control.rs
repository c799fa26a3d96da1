//! `--control`: where its lines come from, and how a `watch` line's target is resolved, made with the plan
//! so that the session is handed it ready: as the command line's targets were, in the same kernel symbols
//! (a system-wide watch) or processes, a `(TYPE)` cast moved by the same BTF.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::config::typed::{self, Types};
use crate::config::watch;
use crate::error::{Error, Result};
use crate::model::target::Target;
use crate::model::watch::{Access, Watch};

use super::{process, KernelSymbols};

/// `--control FILE|-`: the command source, and how its targets are resolved.
pub struct Control {
    path: PathBuf,
    resolver: Resolver,
}

/// Resolves a `--control watch` target the way the command line's targets were.
pub struct Resolver {
    within: Within,
    types: Rc<Types>,
}

/// Where a target is looked for.
enum Within {
    /// The kernel's symbols, shared with the session's call-chain naming.
    Kernel(Rc<KernelSymbols>),
    /// The watched processes (a launched command by its pid), at one address in all of them.
    Processes(Vec<u32>),
}

impl Control {
    /// `--control path`, resolving in the kernel's `symbols` (a system-wide watch), else in `pids`.
    pub(super) fn new(
        path: PathBuf,
        system: Option<Rc<KernelSymbols>>,
        pids: Vec<u32>,
        types: Rc<Types>,
    ) -> Control {
        let within = match system {
            Some(symbols) => Within::Kernel(symbols),
            None => Within::Processes(pids),
        };
        Control {
            path,
            resolver: Resolver { within, types },
        }
    }

    /// Where the commands come from (`-` for stdin).
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }
}

impl Resolver {
    /// `t` resolved as a watch of `access`: its base where the command line's were (a process that has
    /// exited since is passed over), then moved onto its member by its type.
    pub fn resolve(&self, t: &Target, access: Access) -> Result<Watch> {
        let base = [typed::base_target(t)];
        let found = match &self.within {
            Within::Kernel(symbols) => symbols.resolve(&base, access)?,
            Within::Processes(pids) => process::agreed(
                pids,
                &base,
                |pid| {
                    base.iter()
                        .map(|b| watch::resolve_in_process(pid, b, access))
                        .collect()
                },
                |pid| Path::new(&format!("/proc/{pid}")).exists(),
            )?,
        };
        let resolved = found
            .into_iter()
            .next()
            .ok_or_else(|| Error::usage("the target resolved to nothing"))?;
        Ok(typed::apply(&self.types, t, resolved, access)?.watch)
    }
}
