//! The command-line way out of a symbols-crate error. That crate says what is wrong with a file or a name
//! and knows no flags; this adds the flag that gets past it (`--vmlinux FILE`, `--force`, ...), so
//! what the user reads on stderr names the options of this program.
//!
//! Every symbols-crate error bound for the user goes through [`Advised`]: as a cause with
//! [`SymbolsContext::bad_symbols`], or as text (`Advised(e).to_string()`) where only a string fits.
//! The crate's sentences are never copied here: a flag is appended to them, or stands in for one of the
//! crate's [`Remedies`].

use std::fmt;

use ksymwatch_symbols::debuginfod::{Limit, Need, Unfetched};
use ksymwatch_symbols::file::Role;
use ksymwatch_symbols::{Error as SymbolsError, FieldError, LookupError, Remedies, ResolveError};

use crate::error::{Error, ExitCode, Result};

/// A symbols-crate error as ksymwatch words it: the crate's own text, with the flag that fixes it where
/// there is one. Transparent otherwise: [`std::error::Error::source`] is the wrapped error's own, and
/// tests reach the structured error with `get_ref`.
#[derive(Debug)]
pub struct Advised<E>(pub E);

impl<E> Advised<E> {
    #[cfg(test)]
    pub fn get_ref(&self) -> &E {
        &self.0
    }
}

/// The option that names a file of this role.
fn flag(role: Role) -> &'static str {
    match role {
        Role::Kallsyms => "--kallsyms",
        Role::SystemMap => "--system-map",
        Role::Vmlinux => "--vmlinux",
        Role::KernelNotes => "--kernel-notes",
        Role::Btf => "--btf",
    }
}

/// The ways out the crate words in general terms, as this program's options.
struct Flags;

impl Remedies for Flags {
    fn source_lines(&self) -> &str {
        "--lines"
    }

    fn data_symbols(&self) -> &str {
        "pass --vmlinux FILE or --system-map FILE for this kernel, set DEBUGINFOD_URLS=URL (e.g. \
         https://debuginfod.debian.net) to fetch its vmlinux"
    }
}

fn load(error: &SymbolsError, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let e = error.worded(&Flags);
    // Where the crate's sentence ends at the spot the flag belongs, the flag is appended; the tests below
    // pin each whole sentence, so a rewording in the crate shows up here.
    match error {
        // `PATH: not a regular file ...` starts with the path: the option that named it goes before it.
        SymbolsError::NotRegular { role, .. } | SymbolsError::TooLarge { role, .. } => {
            write!(f, "{} {e}", flag(*role))
        }
        SymbolsError::ZeroedAddresses { .. } => write!(f, "{e}, or pass --system-map/--vmlinux"),
        // A binary file where text was expected: which flag takes which kind of file.
        SymbolsError::Io { source, .. } if source.kind() == std::io::ErrorKind::InvalidData => {
            write!(
                f,
                "{e} (--kallsyms FILE for kallsyms text, --system-map FILE, --vmlinux FILE)"
            )
        }
        SymbolsError::KernelMismatch { .. } => write!(f, "{e}, or pass --force to arm anyway"),
        SymbolsError::NoVmlinux { need, problem } => no_vmlinux(f, (need, problem), &e),
        SymbolsError::Placeholder { .. } => write!(
            f,
            "{e} and pass --vmlinux /usr/lib/debug/boot/vmlinux-$(uname -r)"
        ),
        // The client's own limit stopped the fetch: the option that raises it.
        SymbolsError::DebuginfodFailed { .. } => match error.limit() {
            Some(Limit::Size) => write!(f, "{e}; raise the limit with --debuginfod-max-size SIZE"),
            Some(Limit::Deadline) => write!(f, "{e}; allow longer with --debuginfod-timeout DUR"),
            None => write!(f, "{e}"),
        },
        _ => write!(f, "{e}"),
    }
}

/// [`SymbolsError::NoVmlinux`] with this program's flags: `worded` is the crate's sentence
/// with them, which a flag ends where the sentence allows; where a flag stands inside it, or the error
/// beneath has flags of its own, the sentence is this program's.
fn no_vmlinux(
    f: &mut fmt::Formatter<'_>,
    (need, problem): (&Need, &Unfetched),
    worded: &dyn fmt::Display,
) -> fmt::Result {
    let why = need.why(Flags.source_lines());
    match problem {
        Unfetched::NoCache => write!(f, "{worded}, or pass --vmlinux FILE"),
        Unfetched::NoBuildId { .. } => write!(f, "{worded}; pass --vmlinux FILE"),
        Unfetched::BuildId(e) => write!(
            f,
            "{why}, and debuginfod cannot be asked for the running kernel's vmlinux without its \
             build-id: {}; pass --vmlinux FILE",
            Advised(&**e)
        ),
        Unfetched::NotCached { build_id } => write!(
            f,
            "{why}, and --offline forbids fetching the running kernel's vmlinux (build-id {build_id}) \
             from DEBUGINFOD_URLS; pass --vmlinux FILE, or drop --offline"
        ),
        Unfetched::Fetch(e) => write!(f, "{why}: {}; or pass --vmlinux FILE, or --offline", Advised(&**e)),
    }
}

fn lookup(error: &LookupError, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let e = error.worded(&Flags);
    match error {
        // `X:` means a module only in a kernel watch; whoever meant a process's file gets the way there.
        LookupError::NoModule { module, .. } => write!(
            f,
            "{e}; in a kernel watch `{module}:` names a kernel module (see /proc/modules); for a file mapped by \
             a process, watch the process (-p PID, or -- CMD ARGS; `resolve --pid PID`)"
        ),
        _ => write!(f, "{e}"),
    }
}

fn field(e: &FieldError, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match e {
        FieldError::Load(e) => load(e, f),
        e => write!(f, "{e}"),
    }
}

impl fmt::Display for Advised<SymbolsError> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        load(&self.0, f)
    }
}

impl fmt::Display for Advised<&SymbolsError> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        load(self.0, f)
    }
}

impl fmt::Display for Advised<LookupError> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        lookup(&self.0, f)
    }
}

impl fmt::Display for Advised<FieldError> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        field(&self.0, f)
    }
}

impl fmt::Display for Advised<ResolveError> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            ResolveError::Lookup(e) => lookup(e, f),
            ResolveError::Field(e) => field(e, f),
            ResolveError::Load(e) => load(e, f),
        }
    }
}

impl<E> std::error::Error for Advised<E>
where
    E: std::error::Error,
    Advised<E>: fmt::Display + fmt::Debug,
{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The wrapped error's text is already this one's; its own cause is the next link.
        self.0.source()
    }
}

/// `result.bad_symbols()`: a symbols-crate error is bad input (exit 2) and keeps its structure as the
/// cause, printed with its command-line advice.
pub trait SymbolsContext<T> {
    fn bad_symbols(self) -> Result<T>;
}

impl<T, E> SymbolsContext<T> for std::result::Result<T, E>
where
    Advised<E>: std::error::Error + Send + Sync + 'static,
{
    fn bad_symbols(self) -> Result<T> {
        self.map_err(|e| Error::from_cause(ExitCode::Usage, Advised(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ksymwatch_symbols::{kallsyms, sysmap, BuildId, KernelMatch, MismatchPolicy, Source};
    use std::error::Error as _;
    use std::path::{Path, PathBuf};

    /// What ksymwatch prints on stderr after `ksymwatch: error: ` for a failed symbols-crate call.
    fn shown<T: fmt::Debug>(r: std::result::Result<T, SymbolsError>) -> String {
        let e = r.bad_symbols().unwrap_err();
        assert_eq!(e.code, ExitCode::Usage);
        e.to_string()
    }

    #[test]
    fn no_data_symbols_names_the_flags_before_the_close_names() {
        let table = kallsyms::from_text(
            "ffffffff81000000 T _text\nffffffff81000100 T jiffie_tick\n",
            Path::new("fixture"),
        )
        .unwrap();
        let e = table
            .lookup("jiffies", None)
            .map(|_| ())
            .bad_symbols()
            .unwrap_err();
        assert_eq!(e.code, ExitCode::Usage);
        let text = e.to_string();
        assert!(
            text.starts_with(
                "symbol `jiffies` not found: this kernel's kallsyms has no data symbols (CONFIG_KALLSYMS_ALL is off); \
                 pass --vmlinux FILE or --system-map FILE for this kernel, set DEBUGINFOD_URLS=URL (e.g. \
                 https://debuginfod.debian.net) to fetch its vmlinux, or give the address as 0xADDR"
            ),
            "{text}"
        );
        // The structured error is still there for anyone who asks.
        let cause = e
            .source()
            .and_then(|c| c.downcast_ref::<Advised<LookupError>>());
        assert!(matches!(
            cause.map(Advised::get_ref),
            Some(LookupError::NoDataSymbols { .. })
        ));

        let e = LookupError::NoDataSymbols {
            name: "jiffies".into(),
            suggestions: vec!["jiffies_64".into(), "jiffie".into()],
        };
        assert_eq!(
            Advised(e.clone()).to_string(),
            "symbol `jiffies` not found: this kernel's kallsyms has no data symbols (CONFIG_KALLSYMS_ALL is off); \
             pass --vmlinux FILE or --system-map FILE for this kernel, set DEBUGINFOD_URLS=URL (e.g. \
                 https://debuginfod.debian.net) to fetch its vmlinux, or give the address as 0xADDR \
             (close names that do exist: jiffies_64, jiffie)"
        );
        // Through a resolve, the same words.
        assert_eq!(
            Advised(ResolveError::Lookup(e.clone())).to_string(),
            Advised(e).to_string()
        );
    }

    #[test]
    fn kernel_mismatch_says_force() {
        let mis = KernelMatch::compare(Some(&BuildId(vec![1; 2])), Some(&BuildId(vec![2; 2])));
        let r = MismatchPolicy::Refuse.check(&mis, &Source::Vmlinux("vmlinux".into()));
        assert_eq!(
            shown(r),
            "vmlinux vmlinux is not the running kernel: MISMATCH (file build-id 0101, running kernel 0202); \
             its addresses would watch the wrong memory. Use the vmlinux/System.map of $(uname -r), or pass --force \
             to arm anyway"
        );
    }

    #[test]
    fn file_errors_name_the_flags() {
        assert_eq!(
            shown(kallsyms::from_text(
                "0000000000000000 T _text\n0000000000000000 D jiffies\n",
                Path::new("/proc/kallsyms")
            )),
            "/proc/kallsyms shows every address as 0: kernel pointers are hidden (kptr_restrict); run as root with \
             CAP_SYSLOG, or set /proc/sys/kernel/kptr_restrict to 0, or pass --system-map/--vmlinux"
        );
        assert_eq!(
            shown(sysmap::from_text(
                "ffffffffffffffff B The real System.map is in the linux-image-6.1.0-1-amd64-dbg package\n",
                Path::new("/boot/System.map-6.1.0-1-amd64")
            )),
            "/boot/System.map-6.1.0-1-amd64:1: not an `ADDRESS TYPE NAME` symbol line: this is Debian's placeholder; \
             the real System.map is in the linux-image-$(uname -r)-dbg package: install it and pass --vmlinux \
             /usr/lib/debug/boot/vmlinux-$(uname -r)"
        );
        let no_dwarf = SymbolsError::NoDebugInfo {
            path: PathBuf::from("vmlinux"),
        };
        let want = "vmlinux has no DWARF debug info (.debug_info): member paths, types and --lines need a vmlinux \
                    with debug info, e.g. Debian's linux-image-$(uname -r)-dbg (/usr/lib/debug/boot/vmlinux-$(uname -r))";
        assert_eq!(Advised(FieldError::Load(no_dwarf)).to_string(), want);
        let no_dwarf = SymbolsError::NoDebugInfo {
            path: PathBuf::from("vmlinux"),
        };
        assert_eq!(shown::<()>(Err(no_dwarf)), want);
        // A path that is no input names the option it came from (the crate knows the file's role only).
        assert_eq!(
            shown(kallsyms::load(Path::new("/dev/zero"))),
            "--kallsyms /dev/zero: not a regular file (a character device); give a kallsyms text file, such \
             as /proc/kallsyms or a copy of it"
        );
        assert_eq!(
            shown(sysmap::load(Path::new("/dev/urandom"))),
            "--system-map /dev/urandom: not a regular file (a character device); give a System.map text file, \
             such as /boot/System.map-$(uname -r)"
        );
        // A debuginfod limit of the client's own names the option that raises it, after the crate's words.
        use ksymwatch_symbols::debuginfod::{FailureKind, ServerFailure};
        let limited = |kind| SymbolsError::DebuginfodFailed {
            build_id: BuildId(vec![0xab]),
            cached: None,
            failures: vec![ServerFailure {
                url: "http://s".into(),
                kind,
            }],
        };
        let e = limited(FailureKind::OverLimit { limit: 10 });
        let plain = e.to_string();
        assert_eq!(
            shown::<()>(Err(e)),
            format!("{plain}; raise the limit with --debuginfod-max-size SIZE")
        );
        let e = limited(FailureKind::NotAsked {
            deadline: std::time::Duration::from_secs(3),
        });
        let plain = e.to_string();
        assert_eq!(
            shown::<()>(Err(e)),
            format!("{plain}; allow longer with --debuginfod-timeout DUR")
        );
        // Errors with no flag to suggest are the crate's own words.
        let empty = SymbolsError::Empty {
            path: PathBuf::from("m"),
        };
        let plain = empty.to_string();
        assert_eq!(shown::<()>(Err(empty)), plain);
    }
}
