//! The one error type the binary reports, carrying the exit code scripts branch on and the error that
//! caused it. `cli` turns it into one stderr line and a process exit code ([`Error::code`]); nothing else
//! decides exit codes.

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

type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong, for whom it is the fault (the exit code), and the underlying error kept as
/// [`std::error::Error::source`] rather than flattened into the text.
#[derive(Debug)]
pub struct Error {
    pub code: ExitCode,
    /// What was being done; empty when the cause says it all (a symbols-crate error names its file).
    message: String,
    cause: Option<Cause>,
}

impl Error {
    pub fn new(code: ExitCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            cause: None,
        }
    }

    /// An error whose own text is the whole message (it already names what failed).
    pub fn from_cause(code: ExitCode, cause: impl Into<Cause>) -> Error {
        Error {
            code,
            message: String::new(),
            cause: Some(cause.into()),
        }
    }

    /// Adds what the caller knows to the end of the message (`; nothing was armed`).
    pub fn then(mut self, more: &str) -> Error {
        self.message.push_str(more);
        self
    }

    /// Keeps `cause` as this error's source; it is printed after the message, `message: cause`.
    pub fn caused_by(mut self, cause: impl Into<Cause>) -> Error {
        self.cause = Some(cause.into());
        self
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
        match (&self.message, &self.cause) {
            (m, Some(c)) if m.is_empty() => write!(f, "{c}"),
            (m, Some(c)) => write!(f, "{m}: {c}"),
            (m, None) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// `result.or_exit(ExitCode::Runtime, "epoll_wait")`: the error becomes this one's cause, the way
/// anyhow's `context` does, with the exit code the situation calls for.
pub trait Context<T> {
    fn or_exit(self, code: ExitCode, what: &str) -> Result<T>;
    /// The cause is the whole message: bad input whose error already names the file or symbol.
    fn bad_input(self) -> Result<T>;
}

impl<T, E: Into<Cause>> Context<T> for std::result::Result<T, E> {
    fn or_exit(self, code: ExitCode, what: &str) -> Result<T> {
        self.map_err(|e| Error::new(code, what).caused_by(e))
    }

    fn bad_input(self) -> Result<T> {
        self.map_err(|e| Error::from_cause(ExitCode::Usage, e))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::io;

    #[test]
    fn the_cause_is_kept_and_printed_once() {
        let r: std::result::Result<(), io::Error> = Err(io::Error::from_raw_os_error(libc::EBADF));
        let e = r.or_exit(ExitCode::Runtime, "epoll_wait").unwrap_err();
        assert_eq!(e.code, ExitCode::Runtime);
        assert!(e.to_string().starts_with("epoll_wait: Bad file descriptor"));
        let src = e.source().expect("cause kept");
        assert!(src.downcast_ref::<io::Error>().is_some());

        let r: std::result::Result<(), String> = Err("cannot read /x: gone".into());
        let e = r.bad_input().unwrap_err();
        assert_eq!(e.code, ExitCode::Usage);
        assert_eq!(e.to_string(), "cannot read /x: gone");
    }
}
