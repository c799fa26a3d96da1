//! Resolution: turning what the command line says into the [`crate::model`] the layers below share. A
//! parsed TARGET becomes a [`crate::model::watch::Watch`] ([`watch`]: address, length, access; a `(TYPE)`
//! cast's member from BTF in [`typed`]), through the symbol file that answers for it (`symbols`, with
//! `advice` wording the symbols crate's errors for this command line) or, in a process, one of its
//! binaries ([`process`]); `--on`'s sources and `$obj` targets ([`objects`]); `--last`'s triggers
//! ([`flight`]); the tracepoints both name, from BTF and, where mounted, tracefs ([`tracepoints`]); where
//! the kernel's symbols come from, the files named, the kallsyms cache and debuginfod
//! ([`kernel_source`]); the symbols crate's progress drawn on stderr (`progress`).
//!
//! Planning a `write`/`rw` watch ([`mod@plan`], entered by [`plan()`]): the command line's [`request`]
//! checked and resolved into everything the watch needs, with each choice decided once, through a narrow
//! view of the machine
//! ([`plan::Host`]) so that every decision is unit-tested without a kernel.
//!
//! Uses the `ksymwatch-symbols` crate, the model and perf's plain types (what is armed, never arming);
//! nothing of the tracer or the CLI: the command line hands it plain values, never clap types.

pub(crate) mod advice;
pub mod flight;
pub mod kernel_source;
pub mod objects;
pub mod plan;
pub mod process;
pub(crate) mod progress;
pub mod request;
pub(crate) mod symbols;
pub mod tracepoints;
pub mod typed;
pub mod watch;

pub use plan::plan;
