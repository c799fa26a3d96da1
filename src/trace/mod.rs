//! The running session: the loop that ties the armed events' rings to signals, the deadline and CPU
//! hotplug, and wires the parts below (`session`); what every part asks of it, faked in their tests
//! (`context`); the loop's decisions, which wake goes to which part and when the run stops (`wakes`); the
//! released records applied and printed (`stream`), through the output and its first failure (`sink`),
//! counted in the summary with the closed events' audits (`books`), a sample admitted as a hit or not
//! (`admit`); its wake-up policy (`pace`);
//! `--duration`'s end where a stalled write sees it (`deadline`); the armed event set
//! that owns every descriptor and ring (`events`); the merge of records from all rings in timestamp order
//! (`sorter`); the two as one drain → order pipeline (`pipeline`); following CPUs as they come and go ([`hotplug`]); the task tracker applying task records
//! to names and user-space maps (`tasks`), over naming tasks (`comm`) and letting go of what exited tasks
//! left behind (`exited`); naming frames (`symbolize`); starting a command stopped at its exec for launch
//! mode (`launch`); reading `--control` commands (`control`) and turning them into steps (`moves`);
//! ending the watches on a kernel module that is unloaded (`unload`); `--value`'s `old` in merged time
//! order and its race counts (`olds`); the watched processes followed to their exit or exec
//! (`watched`); the reader of a stream on stdout, whose going away ends the run (`reader`); the flight recorder that keeps the last hits until a trigger prints them (`flight`);
//! `--on`'s object slots and batches (`objects`); the kernel's totals of every kept hit in the reports when
//! the stream dropped some (`totals`).
//!
//! Uses [`crate::perf`] for events and records, [`crate::model`] for what to watch, keep and stop on, and
//! [`crate::config`]'s resolved `--on` and `--last` settings;
//! hands symbolized hits to a `crate::report::Output` and never prints itself. Every name comes from the
//! `ksymwatch-symbols` crate (kernel tables, user-space maps and ELF symbols, source lines); `symbolize`
//! only applies them to a sample.

pub(crate) mod admit;
pub(crate) mod books;
pub(crate) mod comm;
pub(crate) mod context;
pub(crate) mod control;
pub(crate) mod deadline;
pub(crate) mod events;
pub(crate) mod exited;
pub(crate) mod flight;
pub mod hotplug;
pub(crate) mod launch;
pub(crate) mod moves;
pub(crate) mod objects;
pub(crate) mod olds;
pub(crate) mod pace;
pub(crate) mod pipeline;
pub(crate) mod reader;
pub(crate) mod session;
pub(crate) mod sink;
pub(crate) mod sorter;
pub(crate) mod store_value;
pub(crate) mod stream;
pub(crate) mod symbolize;
pub(crate) mod tasks;
pub(crate) mod totals;
pub(crate) mod unload;
pub(crate) mod wakes;
pub(crate) mod watched;

#[cfg(test)]
mod hit_path_tests;
