//! Why a debuginfod fetch did not deliver, as data: one [`ServerFailure`] per server (its URL and a
//! [`FailureKind`], keeping the transfer's own error as the source), and [`UnusableCache`] for a file the
//! cache held that could not stand in for the build-id. [`crate::Error::DebuginfodFailed`] and
//! [`crate::Error::DebuginfodNotFound`] carry them; their text is what the user reads after `URL: `.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::{secs, Limit};
use crate::{BuildId, Error};

/// How much of a response had arrived when a transfer stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Not even the response headers.
    Nothing,
    /// `got` bytes of the body, of `of` when the server said how many (`Content-Length`).
    Body { got: u64, of: Option<u64> },
}

impl Received {
    /// `12 of 34 bytes`, `12 bytes`.
    fn amount(got: u64, of: Option<u64>) -> String {
        match of {
            Some(n) => format!("{got} of {n} bytes"),
            None => format!("{got} bytes"),
        }
    }
}

impl fmt::Display for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Received::Nothing => f.write_str("before the response headers"),
            Received::Body { got, of } => write!(f, "after {}", Received::amount(*got, *of)),
        }
    }
}

/// What is wrong with an ELF file a server sent or the cache held, for the build-id asked for.
#[derive(Debug)]
pub enum BadFile {
    /// It is the debug info of another build.
    OtherBuild { found: BuildId, wanted: BuildId },
    /// It has no GNU build-id note, so nothing shows which build it is.
    NoBuildId,
    /// It could not be read as an ELF file at all.
    Unreadable(Box<Error>),
}

impl BadFile {
    /// Why the file could not be read: the ELF problem alone (the caller names the file), else the whole
    /// error.
    fn why(e: &Error) -> String {
        match e {
            Error::Elf { problem, .. } => problem.to_string(),
            e => e.to_string(),
        }
    }

    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BadFile::Unreadable(e) => Some(&**e),
            _ => None,
        }
    }
}

/// A file in the cache at the build-id's place that was not used.
#[derive(Debug)]
pub struct UnusableCache {
    pub path: PathBuf,
    pub problem: BadFile,
}

impl fmt::Display for UnusableCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display();
        match &self.problem {
            BadFile::OtherBuild { found, wanted } => write!(
                f,
                "the cached {path} has build-id {found}, not {wanted}: not used"
            ),
            BadFile::NoBuildId => write!(f, "the cached {path} has no build-id: not used"),
            BadFile::Unreadable(e) => write!(
                f,
                "the cached {path} is not usable ({}): not used",
                BadFile::why(e)
            ),
        }
    }
}

impl std::error::Error for UnusableCache {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.problem.source()
    }
}

/// Why one server did not deliver.
#[derive(Debug)]
pub enum FailureKind {
    /// It answered 404: it has no file for the build-id.
    NotFound,
    /// It was not asked: the whole fetch's `deadline` had passed before its turn.
    NotAsked { deadline: Duration },
    /// It answered with an HTTP status other than success or 404.
    Status(u16),
    /// Its `Content-Length` is over the client's size limit: nothing was downloaded.
    Offers { bytes: u64, limit: u64 },
    /// It sent more than the client's size limit.
    OverLimit { limit: u64 },
    /// The whole fetch's `deadline` passed during this server's transfer.
    Deadline { deadline: Duration, when: Received },
    /// It did not accept a connection within `timeout`.
    Connect { timeout: Duration },
    /// It sent nothing for `timeout`.
    Stalled { timeout: Duration, when: Received },
    /// The transfer failed partway; `source` is ureq's or the read's error.
    BrokeOff {
        when: Received,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The request failed before a response (DNS, refused connection, TLS, a bad URL).
    Transfer(ureq::Error),
    /// What it sent does not start with the ELF magic; `start` is its first bytes (at most 16), and it
    /// was dropped after `after` bytes.
    NotElf { start: Vec<u8>, after: u64 },
    /// The connection closed before the `of` bytes its `Content-Length` promised.
    ClosedEarly { got: u64, of: u64 },
    /// It sent a complete ELF file, but not one for the build-id.
    BadFile(BadFile),
}

impl FailureKind {
    /// Which of the client's own limits this is, if it is one: no other server is asked then.
    pub fn limit(&self) -> Option<Limit> {
        match self {
            FailureKind::NotAsked { .. } | FailureKind::Deadline { .. } => Some(Limit::Deadline),
            FailureKind::Offers { .. } | FailureKind::OverLimit { .. } => Some(Limit::Size),
            _ => None,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureKind::NotFound => f.write_str("not found"),
            FailureKind::NotAsked { deadline } => {
                write!(f, "not asked, the {} deadline had passed", secs(*deadline))
            }
            FailureKind::Status(code) => write!(f, "HTTP status {code}"),
            FailureKind::Offers { bytes, limit } => write!(
                f,
                "it offers {bytes} bytes, over the limit of {limit} bytes; nothing was downloaded"
            ),
            FailureKind::OverLimit { limit } => write!(
                f,
                "it sent more than the limit of {limit} bytes; stopped there"
            ),
            FailureKind::Deadline { deadline, when } => {
                write!(f, "the {} deadline passed {when}", secs(*deadline))
            }
            FailureKind::Connect { timeout } => write!(
                f,
                "it did not accept a connection within {}",
                secs(*timeout)
            ),
            FailureKind::Stalled { timeout, when } => {
                write!(f, "it sent nothing for {} {when}", secs(*timeout))
            }
            FailureKind::BrokeOff { when, source } => {
                write!(f, "the transfer broke off {when} ({source})")
            }
            FailureKind::Transfer(e) => write!(f, "{e}"),
            FailureKind::NotElf { start, after } => write!(
                f,
                "it sent something that is not an ELF file (no ELF magic; it starts with \"{}\"); stopped \
                 after {after} bytes",
                start.escape_ascii()
            ),
            FailureKind::ClosedEarly { got, of } => write!(
                f,
                "the connection closed after {}",
                Received::amount(*got, Some(*of))
            ),
            FailureKind::BadFile(BadFile::OtherBuild { found, wanted }) => {
                write!(f, "it sent a file with build-id {found}, not {wanted}")
            }
            FailureKind::BadFile(BadFile::NoBuildId) => {
                f.write_str("it sent an ELF file without a build-id")
            }
            FailureKind::BadFile(BadFile::Unreadable(e)) => {
                write!(f, "it sent no usable ELF file ({})", BadFile::why(e))
            }
        }
    }
}

/// One server that did not deliver: `URL: why`.
#[derive(Debug)]
pub struct ServerFailure {
    /// The server's URL prefix, as `DEBUGINFOD_URLS` names it.
    pub url: String,
    pub kind: FailureKind,
}

impl fmt::Display for ServerFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.url, self.kind)
    }
}

impl std::error::Error for ServerFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            FailureKind::Transfer(e) => Some(e),
            FailureKind::BrokeOff { source, .. } => Some(&**source),
            FailureKind::BadFile(b) => b.source(),
            _ => None,
        }
    }
}
