//! One module per subcommand: each turns parsed arguments into work and an exit status.

pub mod check;
pub mod resolve;
pub mod watch;
