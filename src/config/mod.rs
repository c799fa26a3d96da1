//! The typed configuration of a run, built by `cli` from the command line and read by the layers below:
//! what to watch (the TARGET grammar in [`target`], resolved to a [`watch::Watch`]: address, length,
//! access; a `(TYPE)` cast's member from BTF in [`typed`]), which symbol file answers for it (`symbols`, with `advice` wording the symbols crate's
//! errors for this command line) or, in a process, which of its binaries ([`process`]), which hits to keep
//! (`filter`), which of those are worth a sample by the value stored (the `--if` language of
//! [`condition`], evaluated in the kernel), when to stop ([`Limits`]) and when a flight recorder prints
//! ([`flight`]).
//!
//! Uses the `ksymwatch-symbols` crate and nothing of perf, the tracer or the CLI: the command line hands it
//! plain values (`symbols::Files`), never clap types.

pub(crate) mod advice;
pub mod condition;
pub(crate) mod debuginfod;
pub(crate) mod filter;
pub mod flight;
pub mod objects;
pub mod process;
pub(crate) mod symbols;
pub mod target;
pub mod typed;
pub mod watch;

use std::time::Duration;

pub use target::{parse, Base, Target, TargetError};

/// When to stop, besides a signal.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub duration: Option<Duration>,
    pub count: Option<u64>,
}
