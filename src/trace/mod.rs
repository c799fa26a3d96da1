//! The running session: the event loop that drains the armed events' rings, merges their records in
//! time order and hands symbolized hits to the outputs, with signals, the deadline and CPU hotplug in the
//! same loop. `session` only wires the parts; each part is driven through a narrow trait of `context`,
//! which its unit tests fake (no kernel needed). The logic lives in the parts, most of it in `stream`.
//!
//! | concern | modules |
//! |---|---|
//! | the loop | `session` (wiring), `context` (what each part asks of it), `wakes` (which wake goes to which part, when the run stops), `pace` (wake-up policy), `deadline` (`--duration`), `reader` (a stream on stdout whose reader went away) |
//! | rings and merge | `events` (the armed set, owning every descriptor and ring, and the end-of-run audits; its `drain` reads an event's rings through their decoder, with the watched value read once per pass), `sorter` (timestamp order across rings), `pipeline` (drain then order, as one step) |
//! | records to output | `stream` (released records applied and printed), `admit` (a sample kept as a hit or not), `sink` (the output and its first failure), `books` (the summary's counts and the audits), `totals` (the kernel's totals when the stream dropped hits), `olds` and `store_value` (`--value`'s old and new values) |
//! | tasks and names | `tasks` (task records applied to names and maps), `comm`, `exited`, `symbolize` (frames named) |
//! | parts of a run | `hotplug` (CPUs coming and going), `control` and `moves` (`--control` commands, then steps), `unload` (a module unloaded), `flight` (the flight recorder), `objects` (`--on`'s object slots), `watched` (processes followed to their exit or exec), `launch` (a command started stopped at its exec) |
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
