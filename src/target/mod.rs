//! What to watch: the TARGET grammar ([`grammar`]), which symbol file answers for it ([`source`]), and the
//! resolved watch itself, an address, length and access ([`watch`]). [`advice`] words the symbols crate's
//! errors for this command line, adding the flag that gets past each.
//!
//! Uses the `ksymwatch-symbols` crate and nothing of perf, the tracer or the CLI: the command line hands it
//! plain paths ([`source::Files`]), not clap types.

pub mod advice;
pub mod grammar;
pub mod source;
pub mod watch;

pub use grammar::{parse, Base, Target, TargetError};
