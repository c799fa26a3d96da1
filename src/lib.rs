//! ksymwatch: *which code path wrote this variable?*
//!
//! One layer a folder, each allowed to use only the ones below it:
//!
//! - [`cli`]: clap types, their conversion into typed configs, one module per subcommand, exit codes.
//! - [`target`]: the TARGET grammar and its resolution to a [`target::watch::Watch`] (address, length,
//!   access) through the `ksymwatch-symbols` crate.
//! - [`trace`]: the running session: event loop, hotplug following, task names, filters, symbolized hits.
//! - [`perf`]: the raw kernel interface: system calls, breakpoint events, rings, record decoding, arming.
//! - [`report`]: printers and summaries, fed already-symbolized hits; no perf or /proc access.
//!
//! [`error`] (the error type and exit codes) and [`cpulist`] (the kernel's CPU-list text) are shared
//! leaves. All symbol-table code lives in the `ksymwatch-symbols` crate.

pub mod cli;
pub mod cpulist;
pub mod error;
pub mod perf;
pub mod report;
pub mod target;
pub mod trace;
