//! Opening the files named for output (`--folded=FILE`, `--flamegraph FILE`, `--perfetto FILE`) so that the
//! open can neither hang nor be turned against the caller, whoever planted what at the path:
//!
//! - The open is `O_NONBLOCK`: a FIFO with no reader fails at once (ENXIO) with a line saying so, instead of
//!   blocking in `open()`. A FIFO with a reader, a regular file and a character device (`/dev/null`, a
//!   terminal) are outputs; they are written blocking (`O_NONBLOCK` is cleared once open). A directory, a
//!   block device or a socket is refused before anything is opened.
//! - The kernel's `protected_symlinks` rule is applied whatever the sysctl says: a symlink on the path in a
//!   sticky world-writable directory (`/tmp`) is followed only if it belongs to the caller or to the
//!   directory's owner; otherwise another user may have planted it to make a root run overwrite a file.
//!   Likewise `protected_regular`/`protected_fifos`: an existing file or FIFO there owned by someone else is
//!   not written (its owner would read the output, or swap it). The final component is opened
//!   `O_NOFOLLOW` unless it was a symlink that passed, so a symlink planted after the check fails the open.
//! - A regular file is truncated only after those checks, on the descriptor that passed them.

use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ksymwatch_symbols::file::FileKind;

use crate::error::{Context, Error, ExitCode, Result};
use crate::perf::sys;

/// Whether the kernel's protected_symlinks/protected_regular rule refuses an entry owned by `owner` in a
/// directory of `dir_mode` owned by `dir_uid`, for a caller of `euid`: the directory is sticky and
/// world-writable, and the entry belongs neither to the caller nor to the directory's owner.
fn foreign_in_shared_dir(owner: u32, dir_mode: u32, dir_uid: u32, euid: u32) -> bool {
    let shared = dir_mode & libc::S_ISVTX != 0 && dir_mode & libc::S_IWOTH != 0;
    shared && owner != euid && owner != dir_uid
}

/// The directory an entry of `path` lives in (`.` for a bare name).
fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Refuses `entry` (of kind `kind`, owned by `owner`) when its directory is shared with other users and
/// the entry is someone else's. `path` and `flag` are what the user named, for the message.
fn check_owner(path: &Path, flag: &str, entry: &Path, kind: FileKind, owner: u32) -> Result<()> {
    let dir = parent(entry);
    let Ok(d) = std::fs::metadata(&dir) else {
        return Ok(());
    };
    if !foreign_in_shared_dir(owner, d.mode(), d.uid(), sys::geteuid()) {
        return Ok(());
    }
    let (verb, why) = match kind {
        FileKind::Symlink => (
            "follow",
            "another user may have planted it to redirect the write (the kernel's protected_symlinks rule)",
        ),
        FileKind::Fifo => (
            "write to",
            "its owner would read the output (the kernel's protected_fifos rule)",
        ),
        _ => (
            "write to",
            "its owner could read or swap the output (the kernel's protected_regular rule)",
        ),
    };
    Err(Error::usage(format!(
        "{flag} {}: refusing to {verb} {kind} owned by uid {owner} in {}, a sticky world-writable directory \
         owned by uid {}: {why}; remove it or write elsewhere",
        path.display(),
        dir.display(),
        d.uid()
    )))
}

/// A kind that is no output: refused with one line.
fn not_an_output(path: &Path, flag: &str, kind: FileKind) -> Error {
    Error::usage(format!(
        "{flag} {}: not a file to write ({kind}); give a regular file, a FIFO with a reader, or /dev/null",
        path.display()
    ))
}

/// An output that names itself in its write errors: the printers run together ([`crate::report::Tee`]),
/// so "writing output: No space left on device" would not say which of `--output`, `--folded`,
/// `--flamegraph` or `--perfetto` (or stdout) failed. The error keeps its kind (a closed pipe is still a
/// normal end).
pub struct Named<W> {
    inner: W,
    /// `--perfetto /dev/full`, `stdout`.
    what: String,
}

impl<W> Named<W> {
    pub fn new(inner: W, what: String) -> Named<W> {
        Named { inner, what }
    }

    /// The output file `path` of option `flag`.
    pub fn file(inner: W, flag: &str, path: &Path) -> Named<W> {
        Named::new(inner, format!("{flag} {}", path.display()))
    }

    fn name(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("{}: {e}", self.what))
    }
}

impl<W: io::Write> io::Write for Named<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.name(e))
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf).map_err(|e| self.name(e))
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.name(e))
    }
}

/// Opens (creating) the output file `path` named by `flag` for writing, as the module documentation says.
/// Every refusal is bad input (exit 2) in one line naming the option, the path and why.
pub fn create(path: &Path, flag: &str) -> Result<File> {
    // Symlinks along the path as given, the final component first.
    let mut final_is_symlink = false;
    for (i, entry) in path.ancestors().enumerate() {
        if entry.as_os_str().is_empty() || entry == Path::new("/") {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(entry) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            final_is_symlink |= i == 0;
            check_owner(path, flag, entry, FileKind::Symlink, meta.uid())?;
        }
    }
    // What the path names now, if anything: some kinds must not even be opened.
    let existing = std::fs::metadata(path).ok();
    if let Some(meta) = &existing {
        let kind = FileKind::of(meta.file_type());
        if matches!(
            kind,
            FileKind::Directory | FileKind::BlockDevice | FileKind::Socket
        ) {
            return Err(not_an_output(path, flag, kind));
        }
    }
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY;
    if !final_is_symlink {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o666)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| open_error(path, flag, e, existing.as_ref()))?;
    let meta = file.metadata().or_exit(
        ExitCode::Usage,
        &format!("{flag}: cannot stat {}", path.display()),
    )?;
    let kind = FileKind::of(meta.file_type());
    match kind {
        FileKind::Regular | FileKind::Fifo | FileKind::CharDevice => {}
        kind => return Err(not_an_output(path, flag, kind)),
    }
    // Through a symlink that passed, the file lives in the link target's directory, which the caller chose.
    if !final_is_symlink && kind != FileKind::CharDevice {
        check_owner(path, flag, path, kind, meta.uid())?;
    }
    if kind == FileKind::Regular {
        file.set_len(0).or_exit(
            ExitCode::Usage,
            &format!("{flag}: cannot truncate {}", path.display()),
        )?;
    }
    sys::set_blocking(file.as_fd()).or_exit(
        ExitCode::Usage,
        &format!("{flag}: cannot open {}", path.display()),
    )?;
    Ok(file)
}

fn open_error(path: &Path, flag: &str, e: io::Error, existing: Option<&Metadata>) -> Error {
    let p = path.display();
    let fifo = existing.is_some_and(|m| FileKind::of(m.file_type()) == FileKind::Fifo);
    match e.raw_os_error() {
        Some(libc::ENXIO) if fifo => Error::usage(format!(
            "{flag} {p}: a FIFO with no reader; start its reader first, or give a regular file"
        )),
        Some(libc::ELOOP) => Error::usage(format!(
            "{flag} {p}: became a symlink while being opened; check who writes to its directory, or write \
             elsewhere"
        )),
        Some(libc::EISDIR) => not_an_output(path, flag, FileKind::Directory),
        _ => Error::usage(format!("{flag}: cannot create {p}")).caused_by(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_directory_rule_is_the_kernels() {
        let tmp = 0o41777; // drwxrwxrwt
                           // In /tmp (root's), a symlink of another user is refused for root and for a third user...
        assert!(foreign_in_shared_dir(65534, tmp, 0, 0));
        assert!(foreign_in_shared_dir(65534, tmp, 0, 1000));
        // ...but followed by its owner, and root's own are followed by anyone.
        assert!(!foreign_in_shared_dir(65534, tmp, 0, 65534));
        assert!(!foreign_in_shared_dir(0, tmp, 0, 1000));
        // The directory's owner vouches for entries of theirs.
        assert!(!foreign_in_shared_dir(1000, tmp, 1000, 0));
        // Not sticky, or not world-writable: no rule.
        assert!(!foreign_in_shared_dir(65534, 0o40777, 0, 0));
        assert!(!foreign_in_shared_dir(65534, 0o41775, 0, 0));
        assert!(!foreign_in_shared_dir(65534, 0o40755, 0, 0));
    }

    #[test]
    fn a_bare_name_lives_in_the_current_directory() {
        assert_eq!(parent(Path::new("out.svg")), PathBuf::from("."));
        assert_eq!(parent(Path::new("/tmp/out.svg")), PathBuf::from("/tmp"));
        assert_eq!(parent(Path::new("a/b")), PathBuf::from("a"));
    }
}
