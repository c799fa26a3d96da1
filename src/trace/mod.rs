//! The running session: the loop that ties the armed events' rings to signals, the deadline and CPU
//! hotplug ([`session`]), following CPUs as they come and go ([`hotplug`]), naming tasks ([`comm`]),
//! filtering hits ([`filter`]) and naming frames ([`symbolize`]).
//!
//! Uses [`crate::perf`] for events and records and hands symbolized hits to a [`crate::report::Output`];
//! it never prints itself. Every name comes from the `ksymwatch-symbols` crate (kernel tables, user-space
//! maps and ELF symbols, source lines); [`symbolize`] only applies them to a sample.

pub mod comm;
pub mod events;
pub mod filter;
pub mod hotplug;
pub mod session;
pub mod sorter;
pub mod symbolize;
