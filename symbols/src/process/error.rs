//! Why a target did not resolve in a process: [`ProcessError`], and the kinds of problem it carries for a
//! file that could not be searched ([`ObjectProblem`]), a load address that could not be told
//! ([`LayoutProblem`]) and DWARF that is there but cannot be used ([`DebugProblem`]).

use std::fmt;
use std::path::PathBuf;

use crate::dwarf::FieldError;
use crate::error::LookupError;

/// Why a mapped file could not be searched for a symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectProblem {
    /// It cannot be opened as the regular file with the inode the process mapped (replaced or removed
    /// since, or not a regular file).
    NotOpenable,
    /// Its headers are not those of an ELF file.
    NotElf,
}

impl fmt::Display for ObjectProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectProblem::NotOpenable => {
                "it cannot be opened as the regular file the process mapped"
            }
            ObjectProblem::NotElf => "it is not an ELF file",
        })
    }
}

/// A mapped file that was not searched, by its basename, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub object: String,
    pub problem: ObjectProblem,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.problem)
    }
}

/// Why the process's mappings do not show where a file was loaded (or where in it a target is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutProblem {
    /// The file has no PT_LOAD segment.
    NoLoadSegment,
    /// No mapping holds the first PT_LOAD segment's file `offset`.
    FirstSegmentUnmapped { offset: u64 },
    /// The file is mapped at several places that each fit; `at` is where its first segment is in each.
    SeveralPlaces { at: Vec<u64> },
    /// The symbols read differ from those read a moment before.
    SymbolChanged,
    /// The `target`'s address would be past the end of the address space.
    PastAddressSpace { target: String },
}

impl fmt::Display for LayoutProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutProblem::NoLoadSegment => f.write_str("it has no loadable segment (PT_LOAD)"),
            LayoutProblem::FirstSegmentUnmapped { offset } => write!(
                f,
                "no mapping holds its first loadable segment (file offset 0x{offset:x})"
            ),
            LayoutProblem::SeveralPlaces { at } => {
                write!(f, "it is mapped {} times, at ", at.len())?;
                for (i, a) in at.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}0x{a:x}")?;
                }
                Ok(())
            }
            LayoutProblem::SymbolChanged => f.write_str("a symbol changed while it was read"),
            LayoutProblem::PastAddressSpace { target } => {
                write!(f, "`{target}` is past the end of the address space")
            }
        }
    }
}

/// Why the DWARF of a process's file (its own, or its separate debug file at `path`) cannot be used.
#[derive(Debug)]
pub enum DebugProblem {
    /// A section is compressed (`SHF_COMPRESSED`, as `gcc -gz` writes it).
    Compressed {
        section: &'static str,
        path: PathBuf,
    },
    /// A section is `size` bytes, over the `limit` read of one section.
    TooLarge {
        section: &'static str,
        size: u64,
        limit: u64,
    },
    /// A section's bytes `start..end` lie past the end of the file.
    OutsideFile {
        section: &'static str,
        start: u64,
        end: u64,
    },
    /// The sections were read, but the DWARF in them could not be.
    Dwarf(Box<crate::error::Error>),
}

impl fmt::Display for DebugProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DebugProblem::Compressed { section, .. } => write!(
                f,
                "its {section} section is compressed (SHF_COMPRESSED, as gcc -gz writes it), which this \
                 reader does not inflate"
            ),
            DebugProblem::TooLarge {
                section,
                size,
                limit,
            } => write!(
                f,
                "its {section} section is {} MiB, over the {} MiB read of one section",
                size >> 20,
                limit >> 20
            ),
            DebugProblem::OutsideFile {
                section,
                start,
                end,
            } => write!(
                f,
                "its {section} section lies outside the file (bytes {start}..{end} of a shorter file: \
                 truncated?)"
            ),
            DebugProblem::Dwarf(e) => write!(f, "{e}"),
        }
    }
}

/// The rights of the process that was refused a process's maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub euid: u32,
    /// CAP_SYS_PTRACE is in its effective set: the kernel's own ptrace rules let it trace any process.
    pub ptrace_cap: bool,
}

impl Caller {
    /// This process, as `/proc/self/status` has it (no capability when that cannot be read).
    pub fn current() -> Caller {
        const CAP_SYS_PTRACE: u32 = 19;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key));
        let cap_eff = field("CapEff:")
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        // `Uid:` is real, effective, saved and filesystem uid.
        let euid = field("Uid:")
            .and_then(|v| v.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(u32::MAX);
        Caller {
            euid,
            ptrace_cap: cap_eff & (1 << CAP_SYS_PTRACE) != 0,
        }
    }
}

/// Why a target did not resolve in a process. Each names the process or file and, where there is one, the
/// way out.
#[derive(Debug)]
pub enum ProcessError {
    /// No process has this pid (or it exited while being read).
    NoProcess { pid: u32 },
    /// Its maps may not be read by this user (ptrace access mode read: another user's process, or a
    /// non-dumpable one), or a security module forbids it whatever the caller's rights.
    NotPermitted {
        pid: u32,
        path: PathBuf,
        source: std::io::Error,
        /// Who was refused: what the refusal can mean depends on it.
        caller: Caller,
    },
    /// Its maps could not be read for another reason.
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The process maps no file: a kernel thread, or a process on its way out.
    NoMappings { pid: u32 },
    /// `OBJECT:` names no file the process has mapped, yet: [`ProcessError::is_not_mapped_yet`].
    NotMapped {
        pid: u32,
        object: String,
        /// Basenames of the files that are mapped.
        mapped: Vec<String>,
    },
    /// `OBJECT:` matches several mapped files.
    AmbiguousObject {
        object: String,
        matches: Vec<String>,
    },
    /// No searched file defines the symbol.
    Unknown {
        pid: u32,
        name: String,
        /// Basenames of the files searched, in order.
        searched: Vec<String>,
        /// Those of them searched only through `.dynsym` (stripped: exported symbols only).
        exports_only: Vec<String>,
        /// Files that could not be read, with why.
        unreadable: Vec<Unreadable>,
    },
    /// Within one file: several same-named symbols (choose with `@N`), or `@N` past their count.
    Lookup { object: String, error: LookupError },
    /// Several mapped files (none the executable) define the symbol.
    Ambiguous {
        name: String,
        /// (basename, runtime address) of each.
        candidates: Vec<(String, u64)>,
    },
    /// A thread-local variable has one address per thread.
    ThreadLocal { name: String, object: String },
    /// The file `OBJECT:` named could not be opened or is not ELF.
    Unreadable {
        object: PathBuf,
        problem: ObjectProblem,
    },
    /// Its mappings do not show where it was loaded.
    Layout {
        object: PathBuf,
        problem: LayoutProblem,
    },
    /// A member path needs DWARF, and neither the file nor a debug file for it has any.
    NoDebugInfo { object: PathBuf, target: String },
    /// The DWARF is there but cannot be used (compressed, over the size bound, outside the file).
    DebugInfo {
        object: PathBuf,
        problem: DebugProblem,
    },
    /// The member path does not fit the variable's type.
    Field(FieldError),
}

impl ProcessError {
    /// Whether `OBJECT:` names a file the process has not mapped: a command being started may still map it,
    /// so a caller waiting for its libraries asks again later (this costs one read of the maps, no file).
    pub fn is_not_mapped_yet(&self) -> bool {
        matches!(self, ProcessError::NotMapped { .. })
    }
}

/// How many file names a message lists before it says how many more there are: a browser maps hundreds.
const LISTED: usize = 12;

/// `a, b and c`; past [`LISTED`] names, `a, b, ... and 140 more`.
pub(super) fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        _ if items.len() > LISTED => format!(
            "{} and {} more",
            items[..LISTED].join(", "),
            items.len() - LISTED
        ),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// [`ProcessError::Unknown`]'s text: where the name was looked for, and what could not be searched.
fn unknown(
    f: &mut fmt::Formatter<'_>,
    pid: u32,
    name: &str,
    searched: &[String],
    exports_only: &[String],
    unreadable: &[Unreadable],
) -> fmt::Result {
    write!(
        f,
        "unknown symbol `{name}` in process {pid}: not in {}",
        list(searched)
    )?;
    if !exports_only.is_empty() {
        write!(
            f,
            " ({} stripped: only exported symbols are known)",
            if exports_only.len() == 1 {
                format!("{} is", exports_only[0])
            } else {
                format!("{} are", list(exports_only))
            }
        )?;
    }
    if let [first, rest @ ..] = unreadable {
        write!(f, " (not searched: {first}")?;
        for u in rest {
            write!(f, "; {u}")?;
        }
        write!(f, ")")?;
    }
    write!(
        f,
        "; check the name with nm FILE, name a library that is not mapped yet as LIB:{name}, or \
         give the address as 0xADDR"
    )
}

impl fmt::Display for ProcessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessError::NoProcess { pid } => write!(
                f,
                "no process {pid}; give the pid of a running process (pgrep NAME)"
            ),
            ProcessError::NotPermitted {
                pid,
                path,
                source,
                caller,
            } => {
                write!(f, "cannot read {} ({source}): ", path.display())?;
                match (caller.ptrace_cap, caller.euid) {
                    // Root's rights were not the question: something above the kernel's ptrace rules said no.
                    (true, _) => write!(
                        f,
                        "the kernel refused to let ksymwatch trace process {pid} although it has CAP_SYS_PTRACE{}: \
                         a security module forbids it (Landlock keeps a sandboxed program from tracing \
                         processes outside its sandbox; SELinux, AppArmor or Yama's ptrace_scope 3 can too); \
                         run ksymwatch where that policy lets it trace the process, or give the target as \
                         0xADDR, which needs no memory map",
                        if caller.euid == 0 { " as root" } else { "" }
                    ),
                    (false, 0) => write!(
                        f,
                        "reading the memory map of process {pid} needs the right to trace it, and ksymwatch \
                         runs as root without CAP_SYS_PTRACE (a container may drop it): grant it (e.g. \
                         `--cap-add SYS_PTRACE`)"
                    ),
                    (false, _) => write!(
                        f,
                        "reading the memory map of process {pid} needs the right to trace it: run as its user \
                         or as root (CAP_SYS_PTRACE)"
                    ),
                }
            }
            ProcessError::Io { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            ProcessError::NoMappings { pid } => write!(
                f,
                "process {pid} maps no file (a kernel thread, or a process that is exiting); give the pid of a \
                 user program"
            ),
            ProcessError::NotMapped {
                pid,
                object,
                mapped,
            } => write!(
                f,
                "process {pid} has no file `{object}` mapped (it maps {}); name one of them, by its name or \
                 a prefix of it, or by its path",
                list(mapped)
            ),
            ProcessError::AmbiguousObject { object, matches } => write!(
                f,
                "`{object}` matches {} mapped files: {}; name one by its full name or its path",
                matches.len(),
                matches.join(", ")
            ),
            ProcessError::Unknown {
                pid,
                name,
                searched,
                exports_only,
                unreadable,
            } => unknown(f, *pid, name, searched, exports_only, unreadable),
            ProcessError::Lookup { object, error } => write!(f, "{object}: {error}"),
            ProcessError::Ambiguous { name, candidates } => {
                write!(
                    f,
                    "symbol `{name}` is defined in {} mapped files:",
                    candidates.len()
                )?;
                for (object, addr) in candidates {
                    write!(f, " {object}:{name}=0x{addr:x}")?;
                }
                write!(f, "; choose one with OBJECT:{name}")
            }
            ProcessError::ThreadLocal { name, object } => write!(
                f,
                "`{name}` in {object} is thread-local (STT_TLS): every thread has its own copy at its own \
                 address; give the address of one thread's copy as 0xADDR (gdb: thread N, then p &{name})"
            ),
            ProcessError::Unreadable { object, problem } => {
                write!(f, "cannot read {}: {problem}", object.display())
            }
            ProcessError::Layout { object, problem } => write!(
                f,
                "cannot tell where {} is loaded: {problem}; give the address as 0xADDR",
                object.display()
            ),
            ProcessError::NoDebugInfo { object, target } => write!(
                f,
                "`{target}`: struct fields and array elements need DWARF debug info, and {} has none (nor a \
                 debug file under /usr/lib/debug/.build-id); rebuild it with -g, install its debug symbols, \
                 or give the address as 0xADDR",
                object.display()
            ),
            ProcessError::DebugInfo { object, problem } => {
                write!(
                    f,
                    "the debug info of {} cannot be used: {problem}",
                    object.display()
                )?;
                match problem {
                    DebugProblem::Compressed { path, .. } => write!(
                        f,
                        "; decompress the file with objcopy --decompress-debug-sections {} and restart the \
                         program, or give the address as 0xADDR",
                        path.display()
                    ),
                    DebugProblem::TooLarge { .. } => write!(f, "; give the address as 0xADDR"),
                    DebugProblem::OutsideFile { .. } | DebugProblem::Dwarf(_) => Ok(()),
                }
            }
            ProcessError::Field(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ProcessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProcessError::NotPermitted { source, .. } | ProcessError::Io { source, .. } => {
                Some(source)
            }
            ProcessError::DebugInfo {
                problem: DebugProblem::Dwarf(e),
                ..
            } => Some(&**e),
            // The wrapped error's text is this one's; its own cause is the next link.
            ProcessError::Field(e) => e.source(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    /// A refusal says what was refused to whom: root with CAP_SYS_PTRACE is not told to run as root.
    #[test]
    fn a_refused_map_names_what_stood_in_the_way() {
        let refused = |euid, ptrace_cap| {
            super::ProcessError::NotPermitted {
                pid: 1,
                path: "/proc/1/maps".into(),
                source: std::io::Error::from_raw_os_error(libc::EACCES),
                caller: super::Caller { euid, ptrace_cap },
            }
            .to_string()
        };
        let root = refused(0, true);
        assert!(
            root.starts_with("cannot read /proc/1/maps (Permission denied (os error 13)): ")
                && root.contains("although it has CAP_SYS_PTRACE as root")
                && root.contains("security module")
                && !root.contains("run as its user or as root"),
            "{root}"
        );
        let capped = refused(1000, true);
        assert!(
            capped.contains("although it has CAP_SYS_PTRACE:"),
            "{capped}"
        );
        let dropped = refused(0, false);
        assert!(
            dropped.contains("runs as root without CAP_SYS_PTRACE"),
            "{dropped}"
        );
        let user = refused(1000, false);
        assert!(
            user.contains("run as its user or as root (CAP_SYS_PTRACE)"),
            "{user}"
        );
    }

    use super::*;
    use std::error::Error as _;

    #[test]
    fn layout_and_debug_problems_read_as_before() {
        let e = ProcessError::Layout {
            object: "/bin/p".into(),
            problem: LayoutProblem::SeveralPlaces {
                at: vec![0x1000, 0x7f00_0000],
            },
        };
        assert_eq!(
            e.to_string(),
            "cannot tell where /bin/p is loaded: it is mapped 2 times, at 0x1000, 0x7f000000; give the \
             address as 0xADDR"
        );
        let e = ProcessError::DebugInfo {
            object: "/bin/p".into(),
            problem: DebugProblem::TooLarge {
                section: ".debug_info",
                size: 300 << 20,
                limit: 256 << 20,
            },
        };
        assert_eq!(
            e.to_string(),
            "the debug info of /bin/p cannot be used: its .debug_info section is 300 MiB, over the 256 MiB \
             read of one section; give the address as 0xADDR"
        );
        let e = ProcessError::Unknown {
            pid: 7,
            name: "v".into(),
            searched: vec!["p".into()],
            exports_only: vec![],
            unreadable: vec![
                Unreadable {
                    object: "a.so".into(),
                    problem: ObjectProblem::NotElf,
                },
                Unreadable {
                    object: "b.so".into(),
                    problem: ObjectProblem::NotOpenable,
                },
            ],
        };
        assert!(e.to_string().contains(
            "(not searched: a.so: it is not an ELF file; b.so: it cannot be opened as the regular file the \
             process mapped)"
        ));
    }

    /// DWARF that was read but could not be walked keeps the crate's error, and through it gimli's.
    #[test]
    fn unreadable_dwarf_keeps_its_error() {
        let e = ProcessError::DebugInfo {
            object: "/bin/p".into(),
            problem: DebugProblem::Dwarf(Box::new(crate::error::Error::Dwarf {
                path: "/bin/p".into(),
                problem: crate::error::DwarfProblem::Read(gimli::Error::BadUnsignedLeb128),
            })),
        };
        let dwarf = e.source().unwrap();
        assert!(
            dwarf.downcast_ref::<crate::error::Error>().is_some(),
            "{dwarf:?}"
        );
        assert!(dwarf
            .source()
            .is_some_and(|g| g.downcast_ref::<gimli::Error>().is_some()));
    }
}
