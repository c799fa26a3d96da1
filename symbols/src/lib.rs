//! Kernel symbol resolution and address symbolization for ksymwatch.
//!
//! This crate answers five questions and knows nothing about perf or the command line:
//! - *where is this variable?* ([`Resolver::resolve`]: a name and member path to runtime and link-time
//!   addresses, size, section and C type),
//! - *what code is at this address?* ([`SymbolTable::symbolize`]: an address to `func+0xOFF/0xSIZE`),
//! - *which source line is that?* ([`Resolver::frames`]: file:line frames, inlined calls included;
//!   [`annotate()`] turns them into what a call-chain printer adds to a frame), and
//! - *which function of which binary is this user address in?* ([`UserSymbols::lookup`]: a process's
//!   mappings and the mapped ELF's function symbols, demangled), and
//! - *where is this variable in that process?* ([`process::resolve`]: a symbol of the process's executable
//!   or of one of its libraries, moved by the load bias, and member paths through the binary's DWARF).
//!
//! Symbols come from a [`Source`] picked by [`SourceSearch`]: an explicit vmlinux or System.map, the
//! distribution's files for the running kernel, or `/proc/kallsyms`. Link-time addresses are moved by the
//! KASLR offset ([`kaslr`]) once the file is shown to be the running kernel ([`buildid`]); a file that is
//! not still answers with link-time addresses, and [`MismatchPolicy`] decides whether to arm on it.
//!
//! Modules, one job each: [`file`](mod@file) opens every file the crate reads (regular files only, reads bounded),
//! [`kallsyms`] and [`sysmap`] parse the text formats, [`cache`] keeps the running kernel's parsed kallsyms, [`vmlinux`] the ELF,
//! [`buildid`] the notes, [`debuginfod`] fetches a vmlinux by build-id, [`kernel`] chooses and loads a
//! tracer's running-kernel symbols in one descent (kallsyms read once), [`kaslr`] the relocation
//! ([`relocate`] finds it and checks a file against kallsyms), [`dwarf`] member paths and types, [`btf`] the same from the kernel's BTF, [`lines`] file:line,
//! [`annotate`](mod@annotate) a chain frame's file:line and inlined calls, [`user`] user-space frames,
//! [`process`] variables in a process, [`progress`] how slow work reports how far it got, [`suggest`](mod@suggest) the "did you mean" names of every lookup; the table, the
//! source search and the resolver tie the kernel ones together.
//!
//! Errors describe what is wrong and, where there is one, a way out that needs no particular front end;
//! which command-line flag to pass is for the caller to add (by matching on the variants, or through
//! [`Remedies`]). What went wrong is a typed kind, never only a string, and the error of the parser or
//! transfer underneath is the error's [`source`](std::error::Error::source).

pub mod annotate;
pub mod btf;
pub mod buildid;
pub mod cache;
mod columns;
pub mod debuginfod;
pub mod dwarf;
mod error;
pub mod file;
pub mod kallsyms;
pub mod kaslr;
pub mod kernel;
pub mod lines;
mod member;
mod path;
pub mod process;
pub mod progress;
pub mod relocate;
mod resolve;
mod role;
mod search;
mod source;
pub mod suggest;
mod symbol;
pub mod sysmap;
mod table;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod uprobe;
pub mod user;
pub mod vmlinux;

pub use annotate::{annotate, Annotation, LineFrame, LineSource};
pub use btf::{Btf, BtfVariable, CastKind, CastType, TpValue, TracepointInfo};
pub use buildid::{BuildId, KernelMatch, MismatchPolicy};
pub use cache::{CacheKey, Origin, SymbolCache};
pub use debuginfod::{Debuginfod, Fetched};
pub use dwarf::VariableQuery;
pub use error::{
    BtfProblem, BtfSection, Cycle, DwarfProblem, ElfProblem, Error, LineProblem, LookupError,
    Plain, Remedies, Worded,
};
pub use kaslr::Kaslr;
pub use lines::{Frame, LineSymbolizer};
pub use member::{FieldError, MemberInfo};
pub use path::PathElem;
pub use progress::{NoProgress, Progress, Task};
pub use resolve::{ByName, ResolveError, ResolveOptions, Resolved, Resolver, VmlinuxLines};
pub use search::SourceSearch;
pub use source::Source;
pub use symbol::{Symbol, SymbolKind};
pub use table::{Named, SymbolRef, SymbolTable, Symbolized};
pub use user::{demangle, Binary, MappedFile, Skipped, UserFrame, UserSymbols, MAX_TABLE};
pub use vmlinux::{Section, Vmlinux};
