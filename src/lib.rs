//! ksymwatch: *which code path wrote this variable?*
//!
//! The pipeline, one module a step: a [`target`] is parsed and resolved to a [`watch`] (address, length,
//! access) with the `ksymwatch-symbols` crate; [`arm`] opens one pinned [`breakpoint`] per CPU as a single
//! transaction; the [`session`] loop drains each CPU's [`ring`], decodes [`record`]s and hands them to an
//! [`output`] printer (after the [`filter`]), while [`hotplug`] keeps the armed set equal to the online CPUs.
//! Raw system calls live in [`sys`] only. [`symsource`] picks which file answers symbol questions (vmlinux,
//! System.map, kallsyms), [`usersym`] names user-space frames and [`frames`] maps kernel code addresses to
//! file:line for `--lines`.

pub mod arm;
pub mod breakpoint;
pub mod cli;
pub mod cmd;
pub mod comm;
pub mod cpulist;
pub mod duration;
pub mod error;
pub mod filter;
pub mod frames;
pub mod hotplug;
pub mod output;
pub mod privilege;
pub mod record;
pub mod ring;
pub mod session;
pub mod status;
pub mod symsource;
pub mod sys;
pub mod target;
pub mod usersym;
pub mod watch;
