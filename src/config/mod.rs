//! Resolution: turning what the command line says into the [`crate::model`] the layers below share. A
//! parsed TARGET becomes a [`crate::model::watch::Watch`] ([`watch`]: address, length, access; a `(TYPE)`
//! cast's member from BTF in [`typed`]), through the symbol file that answers for it (`symbols`, with
//! `advice` wording the symbols crate's errors for this command line) or, in a process, one of its
//! binaries ([`process`]); `--on`'s sources and `$obj` targets ([`objects`]); `--last`'s triggers
//! ([`flight`]); the tracepoints both name, from BTF and, where mounted, tracefs ([`tracepoints`]); a
//! kernel's debuginfod fetch (`debuginfod`); the symbols crate's progress drawn on stderr (`progress`).
//!
//! Uses the `ksymwatch-symbols` crate and the model, nothing of perf, the tracer or the CLI: the command
//! line hands it plain values (`symbols::Files`), never clap types.

pub(crate) mod advice;
pub(crate) mod debuginfod;
pub mod flight;
pub mod objects;
pub mod process;
pub(crate) mod progress;
pub(crate) mod symbols;
pub mod tracepoints;
pub mod typed;
pub mod watch;
