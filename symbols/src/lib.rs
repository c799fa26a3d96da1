//! Kernel symbol resolution and address symbolization for ksymwatch.
//!
//! This crate answers two questions and knows nothing about perf:
//! - *where is this variable?* ([`SymbolTable::lookup`]: a name to an address, a size and a type letter), and
//! - *what code is at this address?* ([`SymbolTable::symbolize`]: an address to `func+0xOFF/0xSIZE`).
//!
//! Symbols come from a [`Source`] (`/proc/kallsyms`, System.map or a vmlinux ELF with DWARF) picked by
//! [`SourceSearch`]; all of them load into
//! the same [`SymbolTable`]. Everything is loaded once into a table sorted by address, so symbolizing a call
//! chain is a binary search per frame.

pub mod buildid;
pub mod dwarf;
mod error;
pub mod kallsyms;
pub mod kaslr;
pub mod lines;
mod path;
mod resolve;
mod source;
mod symbol;
pub mod sysmap;
mod table;
pub mod vmlinux;

pub use buildid::{BuildId, KernelMatch, MismatchPolicy};
pub use dwarf::{FieldError, MemberInfo, VariableQuery};
pub use error::{Error, LookupError};
pub use kaslr::Kaslr;
pub use lines::{Frame, LineSymbolizer};
pub use path::PathElem;
pub use resolve::{ResolveError, ResolveOptions, Resolved, Resolver};
pub use source::{Source, SourceSearch};
pub use symbol::{Symbol, SymbolKind};
pub use table::{SymbolTable, Symbolized};
pub use vmlinux::{Section, Vmlinux};
