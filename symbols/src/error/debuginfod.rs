//! Why a debuginfod fetch did not deliver, as data: one [`ServerFailure`] per server (its URL and a
//! [`FailureKind`], keeping the transfer's own error as the source), and [`UnusableCache`] for a file the
//! cache held that could not stand in for the build-id. [`Error::DebuginfodFailed`] and
//! [`Error::DebuginfodNotFound`] carry them; their text is what the user reads after `URL: `.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::Error;
use crate::buildid::BuildId;
use crate::source::Source;

/// Which of the client's limits stopped a fetch (the caller names the option that raises it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`Debuginfod::with_max_size`](crate::debuginfod::Debuginfod::with_max_size)
    Size,
    /// [`Debuginfod::with_deadline`](crate::debuginfod::Debuginfod::with_deadline)
    Deadline,
}

/// A duration as the messages say it: `600 s`, `1.5 s`.
fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s} s")
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::io;

    fn id(b: u8) -> BuildId {
        BuildId(vec![b; 2])
    }

    fn failed(cached: Option<Box<UnusableCache>>, failures: Vec<ServerFailure>) -> Error {
        Error::DebuginfodFailed {
            build_id: id(0xab),
            cached,
            failures,
        }
    }

    fn at(url: &str, kind: FailureKind) -> ServerFailure {
        ServerFailure {
            url: url.into(),
            kind,
        }
    }

    /// The text is each part in turn: the cached file, every server that failed, those without the file.
    #[test]
    fn a_failed_fetch_reads_as_one_line_of_its_parts() {
        let e = failed(
            Some(Box::new(UnusableCache {
                path: "/c/abab/debuginfo".into(),
                problem: BadFile::NoBuildId,
            })),
            vec![
                at("http://a", FailureKind::Status(500)),
                at(
                    "http://b",
                    FailureKind::BadFile(BadFile::OtherBuild {
                        found: id(1),
                        wanted: id(0xab),
                    }),
                ),
                at("http://c", FailureKind::NotFound),
            ],
        );
        assert_eq!(
            e.to_string(),
            "cannot fetch debug info for build-id abab: the cached /c/abab/debuginfo has no build-id: not \
             used; http://a: HTTP status 500; http://b: it sent a file with build-id 0101, not abab; \
             http://c: not found; nothing was cached: check the network and the servers in DEBUGINFOD_URLS, \
             then try again"
        );
        assert_eq!(e.limit(), None);
    }

    /// A limit of the client's own is named as data (the caller names its option), not blamed on the network.
    #[test]
    fn the_limit_comes_from_the_failures() {
        let e = failed(
            None,
            vec![
                at("http://a", FailureKind::OverLimit { limit: 100 }),
                at(
                    "http://b",
                    FailureKind::NotAsked {
                        deadline: Duration::from_secs(5),
                    },
                ),
                at("http://c", FailureKind::NotFound),
            ],
        );
        assert_eq!(e.limit(), Some(Limit::Deadline));
        assert_eq!(
            e.to_string(),
            "cannot fetch debug info for build-id abab: http://a: it sent more than the limit of 100 bytes; \
             stopped there; http://b: not asked, the 5 s deadline had passed; http://c: not found; nothing \
             was cached"
        );
    }

    /// The transfer's own error is the source, through the Error and the failure alike.
    #[test]
    fn a_broken_transfer_keeps_its_error_as_source() {
        let broke = FailureKind::BrokeOff {
            when: Received::Body {
                got: 10,
                of: Some(20),
            },
            source: Box::new(io::Error::new(io::ErrorKind::ConnectionReset, "reset")),
        };
        let e = failed(
            None,
            vec![at("http://a", broke), at("http://b", FailureKind::NotFound)],
        );
        assert!(e.to_string().contains(
            "http://a: the transfer broke off after 10 of 20 bytes (reset); http://b: not found"
        ));
        let failure = e.source().unwrap();
        assert!(failure.to_string().starts_with("http://a: "), "{failure}");
        let io = failure
            .source()
            .unwrap()
            .downcast_ref::<io::Error>()
            .unwrap();
        assert_eq!(io.kind(), io::ErrorKind::ConnectionReset);
    }

    /// A cached file that is not ELF keeps the ELF error (and through it goblin's, when goblin found it).
    #[test]
    fn an_unreadable_cached_file_keeps_its_error() {
        let elf = Error::Elf {
            path: "/c/abab/debuginfo".into(),
            problem: crate::error::ElfProblem::NoMagic,
        };
        let cached = UnusableCache {
            path: "/c/abab/debuginfo".into(),
            problem: BadFile::Unreadable(Box::new(elf)),
        };
        assert_eq!(
            cached.to_string(),
            "the cached /c/abab/debuginfo is not usable (no ELF magic at the start): not used"
        );
        let e = Error::DebuginfodNotFound {
            build_id: id(0xab),
            tried: vec!["http://a".into()],
            cached: Some(Box::new(cached)),
        };
        let inner = e.source().and_then(|c| c.source()).unwrap();
        assert!(
            matches!(
                inner.downcast_ref::<Error>(),
                Some(Error::Elf {
                    problem: crate::error::ElfProblem::NoMagic,
                    ..
                })
            ),
            "{inner:?}"
        );
    }
}

/// Why the running kernel's vmlinux was wanted from debuginfod instead of the source the search picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// A member path, an array element or source lines need DWARF, which `picked` does not have.
    Dwarf { picked: Source },
    /// `picked` (a kallsyms without data symbols) lacks the symbol `name`.
    DataSymbol { name: String, picked: Source },
}

impl Need {
    /// The reason, with a front end's words for what needs source lines (this crate says `source lines`).
    pub fn why(&self, source_lines: &str) -> String {
        match self {
            Need::Dwarf { picked } => {
                format!("struct fields and {source_lines} need DWARF, which {picked} does not have")
            }
            Need::DataSymbol { name, picked } => format!(
                "symbol `{name}` is not in {picked}, which has no data symbols (CONFIG_KALLSYMS_ALL is off)"
            ),
        }
    }
}

/// Why the running kernel's vmlinux could not be had from debuginfod ([`Error::NoVmlinux`]).
#[derive(Debug)]
pub enum Unfetched {
    /// Servers are named, but no cache directory can be (no `DEBUGINFOD_CACHE_PATH`, `XDG_CACHE_HOME` or
    /// `HOME`).
    NoCache,
    /// The kernel's notes hold no build-id to ask for.
    NoBuildId { notes: PathBuf },
    /// The kernel's notes could not be read.
    BuildId(Box<Error>),
    /// Only the cache may be used, and it has no vmlinux of this build-id.
    NotCached { build_id: BuildId },
    /// The fetch failed.
    Fetch(Box<Error>),
}

impl Unfetched {
    pub(crate) fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Unfetched::BuildId(e) | Unfetched::Fetch(e) => Some(&**e),
            _ => None,
        }
    }
}
