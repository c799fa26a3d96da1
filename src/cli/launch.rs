//! Launch mode's command as the plan takes it: the tracer's [`Launched`], started under ptrace.

use std::ffi::OsString;

use crate::config::plan::Launch;
use crate::error::Result;
use crate::trace::launch::Launched;

impl Launch for Launched {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn run_to_entry(&mut self) -> Result<bool> {
        Launched::run_to_entry(self)
    }

    fn release(&mut self) -> Result<()> {
        Launched::release(self)
    }

    fn status(&mut self) -> Option<i32> {
        Launched::status(self)
    }
}

/// Starts `argv` stopped at its exec.
pub fn start(argv: &[OsString]) -> Result<Box<dyn Launch>> {
    Ok(Box::new(Launched::start(argv)?))
}
