//! The one error type the binary reports, carrying the exit code scripts branch on.

use std::fmt;

/// Exit codes, documented in the README; scripts depend on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Anything that went wrong at run time after arming.
    Runtime = 1,
    /// Bad input: usage, target, unknown symbol, unreadable or malformed file.
    Usage = 2,
    /// Could not arm: nothing was armed and no hit was printed.
    Arm = 3,
    /// Not permitted or not supported here (privileges, perf_event_paranoid, no breakpoint PMU).
    NotPermitted = 4,
}

#[derive(Debug)]
pub struct Error {
    pub code: ExitCode,
    pub message: String,
}

impl Error {
    pub fn new(code: ExitCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Error {
        Error::new(ExitCode::Usage, message)
    }

    pub fn arm(message: impl Into<String>) -> Error {
        Error::new(ExitCode::Arm, message)
    }

    pub fn not_permitted(message: impl Into<String>) -> Error {
        Error::new(ExitCode::NotPermitted, message)
    }

    pub fn runtime(message: impl Into<String>) -> Error {
        Error::new(ExitCode::Runtime, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
