//! Which file answered symbol questions: a [`Source`] names it and says what it is read as. The search that
//! picks one is [`crate::search`].

use crate::role::Role;
use std::path::{Path, PathBuf};

/// Where a [`crate::table::SymbolTable`] came from; printed in the trace header so a reader knows which
/// file answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A `/proc/kallsyms`-format file (runtime addresses, no sizes).
    Kallsyms(PathBuf),
    /// A `System.map` (link-time addresses, no sizes, no modules, no build-id).
    SystemMap(PathBuf),
    /// A vmlinux ELF (link-time addresses, real sizes, build-id, DWARF when not stripped).
    Vmlinux(PathBuf),
}

impl Source {
    pub fn path(&self) -> &Path {
        match self {
            Source::Kallsyms(p) | Source::SystemMap(p) | Source::Vmlinux(p) => p,
        }
    }

    /// A short word for the kind of file, for machine-readable output and headers.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Kallsyms(_) => "kallsyms",
            Source::SystemMap(_) => "system-map",
            Source::Vmlinux(_) => "vmlinux",
        }
    }

    /// What the file is read as ([`crate::file`]: its size bound, and the advice when it is no such file).
    pub fn role(&self) -> Role {
        match self {
            Source::Kallsyms(_) => Role::Kallsyms,
            Source::SystemMap(_) => Role::SystemMap,
            Source::Vmlinux(_) => Role::Vmlinux,
        }
    }

    /// Whether addresses from this source are link-time ones that KASLR may have moved.
    pub fn is_link_time(&self) -> bool {
        !matches!(self, Source::Kallsyms(_))
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Kallsyms(p) => write!(f, "kallsyms {}", p.display()),
            Source::SystemMap(p) => write!(f, "System.map {}", p.display()),
            Source::Vmlinux(p) => write!(f, "vmlinux {}", p.display()),
        }
    }
}
