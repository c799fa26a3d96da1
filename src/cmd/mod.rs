//! One module per subcommand: each turns parsed arguments into work and an exit status.

pub mod resolve;
pub mod watch;
