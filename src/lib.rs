//! ksymwatch: *which code path wrote this variable?*
//!
//! One layer a folder; each uses only the layers listed after it (the import graph has no circle):
//!
//! - [`cli`]: clap types, their conversion into the plain request planning takes, one module per
//!   subcommand (a watch: request -> `config::plan` -> armed and run), and the one place errors become
//!   exit codes. Nothing imports it.
//! - [`trace`]: the running session: the event loop, the armed event set, the time-ordered merge of all
//!   rings, hotplug following, task names, symbolized hits handed to a `report::Output`.
//! - [`config`]: what to watch and how: the TARGET grammar resolved to addresses through the
//!   `ksymwatch-symbols` crate, which symbol file answers, and the plan of a watch (`config::plan`: every
//!   choice decided once, through a narrow view of the machine that tests replace). Names perf's plain
//!   types (what is armed) but arms nothing.
//! - `report`: printers and summaries, fed already-symbolized hits; no system calls, no /proc (it reads
//!   the decoded [`perf::record::Sample`] type, nothing else of perf).
//! - [`perf`]: the raw kernel interface: system calls, breakpoint events, rings, record decoding, arming.
//! - [`model`]: the vocabulary every layer shares (watches, targets, filters, conditions).
//!
//! [`error`] (the error type and exit codes), [`cpulist`] (the kernel's CPU-list text), [`host`] (the cgroup v2
//! hierarchy's files), [`x86_store`] (the value a
//! store instruction wrote, decoded from its bytes and registers) and `stderr` (message output whose failure
//! cannot change the exit code) are shared leaves. All symbol-table code, kernel and user space, lives in the `ksymwatch-symbols` crate.

pub mod cli;
pub mod config;
pub mod cpulist;
pub mod error;
pub mod host;
pub mod model;
pub mod perf;
pub(crate) mod report;
pub(crate) mod stderr;
#[cfg(test)]
mod testalloc;
pub mod trace;
pub mod x86_store;
