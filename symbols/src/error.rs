//! Errors of this crate, worded for the person at the terminal: each names the problem and, where there is
//! one, a way out that needs no particular front end. None names a command-line flag: which flag gets past
//! an error is for the front end to add, by matching on these variants, or to put in place of one of the
//! crate's general ways out through [`Remedies`]. What was wrong inside a file is a typed kind
//! ([`LineProblem`], [`ElfProblem`], [`DwarfProblem`], [`BtfProblem`]), and the parser's own error behind
//! it is [`std::error::Error::source`].

use std::fmt;
use std::path::PathBuf;

use crate::buildid::{BuildId, KernelMatch, MismatchPolicy};
use crate::role::{FileKind, Role};
use crate::source::Source;
use debuginfod::{Limit, Need, ServerFailure, Unfetched, UnusableCache};

pub(crate) mod debuginfod;
mod kinds;

pub use kinds::{BtfProblem, BtfSection, Cycle, DwarfProblem, ElfProblem, LineProblem};

/// A symbol source could not be loaded.
#[derive(Debug)]
pub enum Error {
    /// The file could not be read.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The path names no file to read as `role`: a device, FIFO, socket or directory ([`crate::file`]).
    /// Nothing was read from it.
    NotRegular {
        path: PathBuf,
        kind: FileKind,
        role: Role,
    },
    /// The file holds more than any file of its role: reading stopped at `limit` bytes ([`Role::limit`]).
    TooLarge {
        path: PathBuf,
        role: Role,
        limit: u64,
    },
    /// Line `line` of a kallsyms or System.map text is not a symbol line.
    Parse {
        path: PathBuf,
        line: usize,
        problem: LineProblem,
    },
    /// Debian's one-line stand-in for System.map, which points at the -dbg package instead of listing symbols.
    Placeholder { path: PathBuf },
    /// The file parsed but holds no symbols.
    Empty { path: PathBuf },
    /// Every address is zero: kptr_restrict hides them from this user.
    ZeroedAddresses { path: PathBuf },
    /// The file is not a usable ELF (not ELF at all, corrupt, or truncated).
    Elf { path: PathBuf, problem: ElfProblem },
    /// The ELF has no `.symtab`: it was stripped.
    NoSymtab { path: PathBuf },
    /// The ELF has no DWARF `.debug_info`, so member paths and file:line cannot be resolved.
    NoDebugInfo { path: PathBuf },
    /// The DWARF is present but could not be read.
    Dwarf {
        path: PathBuf,
        problem: DwarfProblem,
    },
    /// The BTF type information is not usable (bad magic, a section cut short, a type id out of range).
    Btf { path: PathBuf, problem: BtfProblem },
    /// The symbol file is proven not to be the running kernel and the policy refuses it.
    KernelMismatch { source: Source, status: KernelMatch },
    /// Every debuginfod server answered that it has no file for the build-id (`tried`: their URLs);
    /// `cached` says why a file already in the cache was not used, if there was one.
    DebuginfodNotFound {
        build_id: BuildId,
        tried: Vec<String>,
        cached: Option<Box<UnusableCache>>,
    },
    /// No debuginfod server delivered a good file: what each server did instead (a broken transfer, a
    /// file with another build-id, an HTTP error; the ones that failed first, then those that have no
    /// file), and why a file already in the cache was not used, if there was one. [`Error::limit`] says
    /// whether one of the client's own limits stopped it.
    DebuginfodFailed {
        build_id: BuildId,
        cached: Option<Box<UnusableCache>>,
        failures: Vec<ServerFailure>,
    },
    /// The debuginfod cache could not be written (directory, temporary file, or the rename into place).
    DebuginfodCache {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The running kernel's vmlinux was needed from debuginfod (`need` says why) and could not be had.
    NoVmlinux { need: Need, problem: Unfetched },
}

/// The ways out that a front end has its own words for (an option, a command of its own): each default is
/// this crate's wording, which names no front end. [`Error::worded`] and [`LookupError::worded`] put the
/// front end's words in their place; the rest of the message stays this crate's, so it is written once.
pub trait Remedies {
    /// What needs a vmlinux's line information besides member paths and types.
    fn source_lines(&self) -> &str {
        "source lines"
    }

    /// How to get this kernel's data symbols when kallsyms has none (the message goes on with `, or give
    /// the address as 0xADDR`).
    fn data_symbols(&self) -> &str {
        "use a vmlinux or System.map of this kernel"
    }
}

/// This crate's own words for every way out ([`Remedies`]' defaults): what `Display` prints.
pub struct Plain;

impl Remedies for Plain {}

/// An error shown with a front end's [`Remedies`].
pub struct Worded<'a, E> {
    error: &'a E,
    remedies: &'a dyn Remedies,
}

impl fmt::Display for Worded<'_, Error> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.write(f, self.remedies)
    }
}

impl fmt::Display for Worded<'_, LookupError> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.write(f, self.remedies)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, &Plain)
    }
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, &Plain)
    }
}

impl Error {
    /// The message with a front end's words for the ways out it has its own for.
    pub fn worded<'a>(&'a self, remedies: &'a dyn Remedies) -> Worded<'a, Error> {
        Worded {
            error: self,
            remedies,
        }
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, r: &dyn Remedies) -> fmt::Result {
        match self {
            // A text reader's complaint about bytes that are not UTF-8: the file is binary.
            Error::Io { path, source } if source.kind() == std::io::ErrorKind::InvalidData => write!(
                f,
                "{} is not a text symbol file: it holds binary data (an ELF file or a cached table?); give \
                 kallsyms text (/proc/kallsyms or a copy of it), a System.map, or a vmlinux",
                path.display()
            ),
            Error::Io { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            Error::NotRegular { path, kind, role } => write!(
                f,
                "{}: not a regular file ({kind}); {}",
                path.display(),
                role.advice(path, *kind)
            ),
            Error::TooLarge { path, role, limit } => write!(
                f,
                "{}: reading stopped at {}, more than any {} holds; {}",
                path.display(),
                bytes(*limit),
                role.noun(),
                role.advice(path, FileKind::Regular)
            ),
            Error::Parse { path, line, problem } => {
                write!(f, "{}:{line}: not an `ADDRESS TYPE NAME` symbol line: {problem}", path.display())
            }
            Error::Placeholder { path } => write!(
                f,
                "{}:1: not an `ADDRESS TYPE NAME` symbol line: this is Debian's placeholder; the real System.map is \
                 in the linux-image-$(uname -r)-dbg package: install it",
                path.display()
            ),
            Error::Empty { path } => write!(f, "{} holds no symbols", path.display()),
            Error::ZeroedAddresses { path } => write!(
                f,
                "{} shows every address as 0: kernel pointers are hidden (kptr_restrict); \
                 run as root with CAP_SYSLOG, or set /proc/sys/kernel/kptr_restrict to 0",
                path.display()
            ),
            Error::Elf { path, problem } => write!(
                f,
                "{} is not a usable vmlinux ELF file: {problem}; pass the uncompressed vmlinux (not vmlinuz/bzImage), \
                 and fetch it again if it was cut short",
                path.display()
            ),
            Error::NoSymtab { path } => write!(
                f,
                "{} has no symbol table (.symtab; it was stripped): use an unstripped vmlinux, \
                 e.g. /usr/lib/debug/boot/vmlinux-$(uname -r) from Debian's linux-image-*-dbg package",
                path.display()
            ),
            Error::NoDebugInfo { path } => write!(
                f,
                "{} has no DWARF debug info (.debug_info): member paths, types and {} need a vmlinux with \
                 debug info, e.g. Debian's linux-image-$(uname -r)-dbg (/usr/lib/debug/boot/vmlinux-$(uname -r))",
                path.display(),
                r.source_lines()
            ),
            // Nothing is wrong with the bytes: the way out is to inflate them, not to fetch them again.
            Error::Dwarf {
                path,
                problem: problem @ DwarfProblem::Compressed { .. },
            } => write!(
                f,
                "{}: cannot read its DWARF debug info: {problem}; decompress the file first: \
                 objcopy --decompress-debug-sections {} vmlinux.plain",
                path.display(),
                path.display()
            ),
            Error::Dwarf { path, problem } => write!(
                f,
                "{}: cannot read its DWARF debug info: {problem}; the file may be corrupt or truncated, fetch it again",
                path.display()
            ),
            Error::Btf { path, problem } => write!(
                f,
                "{} is not usable BTF type information: {problem}; give the kernel's own {} (or a module's \
                 /sys/kernel/btf/MODULE), or a copy of it that was not cut short",
                path.display(),
                crate::role::VMLINUX_BTF
            ),
            Error::KernelMismatch { source, status } => write!(
                f,
                "{source} is not the running kernel: {status}; its addresses would watch the wrong memory. \
                 Use the vmlinux/System.map of $(uname -r)"
            ),
            Error::DebuginfodNotFound {
                build_id,
                tried,
                cached,
            } => not_found(f, build_id, tried, cached.as_deref()),
            Error::DebuginfodFailed {
                build_id,
                cached,
                failures,
            } => self.failed(f, build_id, cached.as_deref(), failures),
            Error::DebuginfodCache { path, source }
                if source.kind() == std::io::ErrorKind::StorageFull =>
            {
                write!(
                    f,
                    "cannot write the debuginfod cache at {}: {source}; nothing was cached: free some \
                     space there, or set DEBUGINFOD_CACHE_PATH to a directory with room",
                    path.display()
                )
            }
            Error::DebuginfodCache { path, source } => write!(
                f,
                "cannot write the debuginfod cache at {}: {source}; make it writable, or set \
                 DEBUGINFOD_CACHE_PATH to a writable directory",
                path.display()
            ),
            Error::NoVmlinux { need, problem } => {
                let why = need.why(r.source_lines());
                match problem {
                    Unfetched::NoCache => write!(
                        f,
                        "{why}, and DEBUGINFOD_URLS is set but there is no debuginfod cache to fetch into \
                         (DEBUGINFOD_CACHE_PATH, XDG_CACHE_HOME and HOME are unset); set DEBUGINFOD_CACHE_PATH"
                    ),
                    Unfetched::NoBuildId { notes } => write!(
                        f,
                        "{why}, and debuginfod cannot be asked for the running kernel's vmlinux: {} holds no \
                         build-id",
                        notes.display()
                    ),
                    Unfetched::BuildId(e) => write!(
                        f,
                        "{why}, and debuginfod cannot be asked for the running kernel's vmlinux without its \
                         build-id: {}",
                        e.worded(r)
                    ),
                    Unfetched::NotCached { build_id } => write!(
                        f,
                        "{why}, and only the debuginfod cache may be used, which holds no vmlinux of build-id \
                         {build_id}"
                    ),
                    Unfetched::Fetch(e) => write!(f, "{why}: {}", e.worded(r)),
                }
            }
        }
    }

    /// [`Error::DebuginfodFailed`]'s text: each server's failure, and whether the network is to blame.
    fn failed(
        &self,
        f: &mut fmt::Formatter<'_>,
        build_id: &BuildId,
        cached: Option<&UnusableCache>,
        failures: &[ServerFailure],
    ) -> fmt::Result {
        write!(f, "cannot fetch debug info for build-id {build_id}: ")?;
        if let Some(c) = cached {
            write!(f, "{c}; ")?;
        }
        for (i, failure) in failures.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            write!(f, "{sep}{failure}")?;
        }
        f.write_str("; nothing was cached")?;
        // A limit of this client's own is not the network's fault.
        if self.limit().is_none() {
            write!(
                f,
                ": check the network and the servers in DEBUGINFOD_URLS, then try again"
            )?;
        }
        Ok(())
    }

    /// Whether the path names the wrong kind of file (a device, FIFO, directory, or one far too large),
    /// as opposed to a file that is missing or unreadable. A caller that falls back on a missing file
    /// (kallsyms, to compare a System.map with) must not fall back on this: the user named something that
    /// is no input at all.
    pub fn is_wrong_file(&self) -> bool {
        matches!(self, Error::NotRegular { .. } | Error::TooLarge { .. })
    }

    /// Which of the debuginfod client's own limits (size, deadline) stopped a failed fetch, if one did
    /// (the last one, if several): a caller names the option that raises it.
    pub fn limit(&self) -> Option<Limit> {
        match self {
            Error::DebuginfodFailed { failures, .. } => {
                failures.iter().rev().find_map(|f| f.kind.limit())
            }
            _ => None,
        }
    }
}

/// `256 MiB`, or `10 bytes` for a bound that is not a whole number of MiB.
/// [`Error::DebuginfodNotFound`]'s text.
fn not_found(
    f: &mut fmt::Formatter<'_>,
    build_id: &BuildId,
    tried: &[String],
    cached: Option<&UnusableCache>,
) -> fmt::Result {
    write!(
        f,
        "no server in DEBUGINFOD_URLS has debug info for build-id {build_id} (tried: {})",
        tried.join(", ")
    )?;
    if let Some(c) = cached {
        write!(f, "; {c}")?;
    }
    write!(
        f,
        "; add a server that has this kernel's, or install its debug package \
         (Debian: linux-image-$(uname -r)-dbg)"
    )
}

fn bytes(n: u64) -> String {
    const MIB: u64 = 1 << 20;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else {
        format!("{n} bytes")
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::DebuginfodCache { source, .. } => Some(source),
            Error::Elf { problem, .. } => problem.source().map(|e| e as _),
            Error::Dwarf { problem, .. } => problem.source().map(|e| e as _),
            Error::DebuginfodNotFound { cached, .. } => cached.as_deref().map(|c| c as _),
            Error::NoVmlinux { problem, .. } => problem.source(),
            // The last failure that carries the transfer's own error, else the last one.
            Error::DebuginfodFailed { failures, .. } => failures
                .iter()
                .rev()
                .find(|f| std::error::Error::source(*f).is_some())
                .or(failures.last())
                .map(|f| f as _),
            _ => None,
        }
    }
}

/// A name could not be turned into one symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupError {
    /// No symbol of that name; `suggestions` are close names, best first.
    Unknown {
        name: String,
        suggestions: Vec<String>,
    },
    /// No symbol of that name, and the table holds no data symbols at all (kallsyms without
    /// CONFIG_KALLSYMS_ALL), so the variable may well exist but cannot be found here.
    /// `suggestions` are close names that do exist (often a typo of a text symbol).
    NoDataSymbols {
        name: String,
        suggestions: Vec<String>,
    },
    /// Several symbols share the name (file-local statics, or vmlinux's and a module's); `candidates` are
    /// their addresses, type letters and modules (`None`: vmlinux) in table order.
    Ambiguous {
        name: String,
        candidates: Vec<(u64, char, Option<String>)>,
    },
    /// `name@N` named a candidate that does not exist.
    BadIndex {
        name: String,
        index: usize,
        count: usize,
    },
    /// `module:name` named a module no symbol of the table belongs to; `modules` are the ones it has,
    /// sorted (empty: no module symbols at all, as in a vmlinux, a System.map, or a kernel without modules).
    NoModule {
        module: String,
        name: String,
        modules: Vec<String>,
    },
    /// The module is there, but has no symbol of that name; `suggestions` are close names in it.
    NotInModule {
        module: String,
        name: String,
        suggestions: Vec<String>,
    },
}

impl LookupError {
    /// The message with a front end's words for the ways out it has its own for.
    pub fn worded<'a>(&'a self, remedies: &'a dyn Remedies) -> Worded<'a, LookupError> {
        Worded {
            error: self,
            remedies,
        }
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, r: &dyn Remedies) -> fmt::Result {
        match self {
            LookupError::Unknown { name, suggestions } => {
                write!(f, "unknown symbol `{name}`")?;
                if !suggestions.is_empty() {
                    write!(f, "; did you mean {}?", suggestions.join(", "))?;
                }
                Ok(())
            }
            LookupError::NoDataSymbols { name, suggestions } => {
                write!(
                    f,
                    "symbol `{name}` not found: this kernel's kallsyms has no data symbols (CONFIG_KALLSYMS_ALL is off); \
                     {}, or give the address as 0xADDR",
                    r.data_symbols()
                )?;
                if !suggestions.is_empty() {
                    write!(
                        f,
                        " (close names that do exist: {})",
                        suggestions.join(", ")
                    )?;
                }
                Ok(())
            }
            LookupError::Ambiguous { name, candidates } => {
                write!(
                    f,
                    "symbol `{name}` is ambiguous ({} symbols):",
                    candidates.len()
                )?;
                for (i, (addr, ty, module)) in candidates.iter().enumerate() {
                    write!(f, " {name}@{i}=0x{addr:x} ({ty})")?;
                    if let Some(m) = module {
                        write!(f, " [{m}]")?;
                    }
                }
                // Candidates from different modules (or vmlinux and a module) are told apart by module.
                let places = candidates.iter().map(|c| &c.2);
                if places.clone().any(|m| m.is_some())
                    && places.clone().any(|m| m != &candidates[0].2)
                {
                    write!(f, "; choose one with {name}@N, MODULE:{name} or 0xADDR")
                } else {
                    write!(f, "; choose one with {name}@N or 0xADDR")
                }
            }
            LookupError::BadIndex { name, index, count } => match count {
                0 | 1 => write!(
                    f,
                    "`{name}@{index}`: there is only one symbol named `{name}`; drop the @{index} (or use @0)"
                ),
                _ => write!(
                    f,
                    "`{name}@{index}`: there are only {count} symbols named `{name}` (use @0..@{})",
                    count - 1
                ),
            },
            LookupError::NoModule {
                module,
                name,
                modules,
            } => {
                write!(
                    f,
                    "`{module}:{name}`: no module `{module}` in these symbols"
                )?;
                match modules.as_slice() {
                    [] => write!(f, " (they hold no module symbols at all)"),
                    m if m.len() <= 8 => write!(f, " (modules: {})", m.join(", ")),
                    m => write!(
                        f,
                        " (modules: {}, and {} more)",
                        m[..8].join(", "),
                        m.len() - 8
                    ),
                }
            }
            LookupError::NotInModule {
                module,
                name,
                suggestions,
            } => {
                write!(f, "module `{module}` has no symbol `{name}`")?;
                if !suggestions.is_empty() {
                    write!(f, "; did you mean {}?", suggestions.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LookupError {}

// The policy's check lives here, beside the error it makes, so that buildid.rs (whose types this
// error carries) needs no error of its own.
impl MismatchPolicy {
    /// `Err` ([`Error::KernelMismatch`]) when the policy refuses this match status.
    pub fn check(self, status: &KernelMatch, source: &Source) -> Result<(), Error> {
        if self == MismatchPolicy::Refuse && status.is_mismatch() {
            return Err(Error::KernelMismatch {
                source: source.clone(),
                status: status.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_refuses_only_a_proven_mismatch() {
        let a = BuildId(vec![1; 20]);
        let b = BuildId(vec![2; 20]);
        let src = Source::Vmlinux("v".into());
        let mis = KernelMatch::compare(Some(&a), Some(&b));
        let err = MismatchPolicy::Refuse.check(&mis, &src).unwrap_err();
        assert!(
            matches!(&err, Error::KernelMismatch { status, .. } if *status == mis),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("is not the running kernel: MISMATCH (file build-id 0101"),
            "{err}"
        );
        assert!(!err.to_string().contains("--"), "no CLI flags: {err}");
        assert!(MismatchPolicy::Allow.check(&mis, &src).is_ok());
        assert!(MismatchPolicy::Refuse
            .check(&KernelMatch::compare(Some(&a), None), &src)
            .is_ok());
    }
}
