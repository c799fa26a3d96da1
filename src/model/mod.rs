//! The vocabulary every layer shares: what is watched ([`watch`]: a range and access, a per-CPU
//! variable's copies), who it covers ([`scope`]), how a TARGET is written ([`target`], the grammar),
//! which hits are kept (`filter`), the `--if` language ([`condition`]) and when a run stops ([`Limits`]).
//!
//! Plain data and pure functions only: `config` builds these from the command line and the kernel's
//! symbols, `perf` arms them, `trace` and `report` name hits with them. Nothing here reads a file, opens
//! a descriptor or knows a flag's name.

pub mod cgroup;
pub mod condition;
pub(crate) mod filter;
pub mod scope;
pub mod target;
pub mod watch;

use std::time::Duration;

pub use target::{parse, Base, Target, TargetError};

/// When to stop, besides a signal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub duration: Option<Duration>,
    pub count: Option<u64>,
}
