//! Kernel symbol resolution and address symbolization for ksymwatch.
//!
//! This crate answers two questions and knows nothing about perf:
//! - *where is this variable?* ([`SymbolTable::lookup`]: a name to an address, a size and a type letter), and
//! - *what code is at this address?* ([`SymbolTable::symbolize`]: an address to `func+0xOFF/0xSIZE`).
//!
//! Symbols come from a [`Source`]: `/proc/kallsyms` today; System.map and vmlinux (ELF + DWARF) plug in behind
//! the same [`SymbolTable`]. Everything is loaded once into a table sorted by address, so symbolizing a call
//! chain is a binary search per frame.

mod error;
mod path;
pub mod kallsyms;
mod symbol;
mod table;

pub use error::{Error, LookupError};
pub use path::PathElem;
pub use symbol::{Symbol, SymbolKind};
pub use table::{Symbolized, SymbolTable};

use std::path::PathBuf;

/// Where a [`SymbolTable`] came from; printed in the trace header so a reader knows which file answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A `/proc/kallsyms`-format file (runtime addresses, no sizes).
    Kallsyms(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Kallsyms(p) => write!(f, "kallsyms {}", p.display()),
        }
    }
}
