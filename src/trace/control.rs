//! `--control FIFO|-`: the line protocol a script uses to move a running watch (hunt a race by sampling:
//! watch one variable for a while, then another, without re-arming every thread).
//!
//! One command a line:
//! - `watch TARGET[/LEN] [w|rw]`: move the watch to TARGET (resolved as on the command line; the access
//!   defaults to the command's, `write` or `rw`; a `(struct TYPE)` cast's space is part of the target);
//! - `off`, `on`: disable and re-enable the watch, keeping every debug register;
//! - blank lines and lines starting with `#` are ignored.
//!
//! The session applies a command between two drains of the rings and acknowledges it in the stream, so a
//! reader knows exactly which hits came before it and which after. Parsing is pure ([`parse`]); [`Control`]
//! only reads lines from the FIFO or stdin.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, ExitCode, Result};
use crate::model::target::{self, Target};
use crate::model::watch::Access;
use crate::perf::sys;

/// One control command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Move the watch; `access` `None` keeps the command line's.
    Watch {
        target: Target,
        access: Option<Access>,
    },
    Off,
    On,
}

/// Parses one line; `Ok(None)` for a blank line or a comment. The error is the reason, for the stream.
pub fn parse(line: &str) -> std::result::Result<Option<Command>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let (verb, args) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = words(args.trim_start());
    match (verb, rest.as_slice()) {
        ("off", []) => Ok(Some(Command::Off)),
        ("on", []) => Ok(Some(Command::On)),
        ("watch", [t, more @ ..]) => {
            let access = match more {
                [] => None,
                ["w" | "W"] => Some(Access::Write),
                ["rw" | "RW"] => Some(Access::ReadWrite),
                _ => {
                    return Err(format!(
                        "after the target, give `w` or `rw` (got `{}`)",
                        more.join(" ")
                    ))
                }
            };
            let target = target::parse(t).map_err(|e| e.to_string())?;
            Ok(Some(Command::Watch { target, access }))
        }
        ("watch", []) => Err("`watch` needs a TARGET: watch TARGET[/LEN] [w|rw]".into()),
        ("off" | "on", _) => Err(format!("`{verb}` takes no arguments")),
        _ => Err(format!(
            "unknown command `{verb}`; the commands are `watch TARGET[/LEN] [w|rw]`, `off` and `on`"
        )),
    }
}

/// The words after the verb, where a target's `(struct TYPE)` cast is one word with what follows it, spaces
/// and all: `(struct task_struct)0xffff888103a4c000.pid rw` is a target and an access.
fn words(args: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = args;
    while !rest.is_empty() {
        let cast_end = if rest.starts_with('(') {
            rest.find(')').unwrap_or(0)
        } else {
            0
        };
        let end = rest[cast_end..]
            .find(char::is_whitespace)
            .map_or(rest.len(), |i| cast_end + i);
        out.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    out
}

/// Longest line kept; a longer one is refused whole rather than grown without bound.
const MAX_LINE: usize = 4096;

/// Where control lines come from: a FIFO (created if absent, removed again at the end if we made it) or
/// stdin.
pub struct Control {
    file: File,
    /// Our own write end of the FIFO: with it open the read end never sees end-of-file, so scripts can
    /// open, write and close the FIFO as often as they like.
    _writer: Option<File>,
    /// A partial line from the last read.
    pending: Vec<u8>,
    /// Too long a line is being skipped up to its newline.
    skipping: bool,
    created: Option<PathBuf>,
    /// Stdin ended: nothing more will come.
    pub ended: bool,
}

impl Control {
    /// Opens `spec`: `-` for stdin, otherwise a FIFO path.
    pub fn open(spec: &Path) -> Result<Control> {
        if spec == Path::new("-") {
            let fd = io::stdin().as_fd().try_clone_to_owned().map_err(|e| {
                Error::new(ExitCode::Runtime, "--control -: cannot use stdin").caused_by(e)
            })?;
            return Ok(Control::new(File::from(fd), None, None));
        }
        let shown = spec.display();
        let mut created = None;
        match std::fs::symlink_metadata(spec) {
            Ok(m) if m.file_type().is_fifo() => {}
            Ok(_) => {
                return Err(Error::usage(format!(
                    "--control {shown}: not a FIFO; give a new path (ksymwatch creates the FIFO) or one made \
                     with mkfifo, or `-` for stdin"
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                sys::mkfifo(spec, 0o600).map_err(|e| {
                    Error::usage(format!("--control {shown}: cannot create the FIFO: {e}"))
                })?;
                created = Some(spec.to_path_buf());
            }
            Err(e) => return Err(Error::usage(format!("--control {shown}: {e}"))),
        }
        let open = |write: bool| {
            OpenOptions::new()
                .read(!write)
                .write(write)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
                .open(spec)
        };
        let opened = open(false)
            .map_err(|e| Error::usage(format!("--control {shown}: cannot open the FIFO: {e}")))
            .and_then(|r| {
                check_owner(&r, &shown.to_string())?;
                let w = open(true).map_err(|e| {
                    Error::usage(format!("--control {shown}: cannot open the FIFO: {e}"))
                })?;
                Ok((r, w))
            });
        match opened {
            Ok((reader, writer)) => Ok(Control::new(reader, Some(writer), created)),
            Err(e) => {
                if let Some(p) = &created {
                    let _ = std::fs::remove_file(p);
                }
                Err(e)
            }
        }
    }
}

/// Whoever can write the control FIFO drives the watch (switches it off, moves it): the FIFO actually opened
/// must be the tracer's user's own and writable by nobody else. Checked on the open descriptor, so a FIFO
/// swapped in after the path was looked at is the one judged.
fn check_owner(fifo: &File, shown: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fifo
        .metadata()
        .map_err(|e| Error::usage(format!("--control {shown}: cannot stat the FIFO: {e}")))?;
    let me = sys::geteuid();
    if !meta.file_type().is_fifo() {
        return Err(Error::usage(format!(
            "--control {shown}: not a FIFO once opened; give a path in a directory only you can write"
        )));
    }
    if meta.uid() != me {
        return Err(Error::usage(format!(
            "--control {shown}: the FIFO belongs to uid {}, not to you (uid {me}): its owner could drive this \
             watch; remove it, or give a new path (ksymwatch creates the FIFO, mode 0600)",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Error::usage(format!(
            "--control {shown}: the FIFO is writable by others (mode {:04o}): anyone could drive this watch; \
             `chmod go-w` it, or give a new path (ksymwatch creates the FIFO, mode 0600)",
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

impl Control {
    fn new(file: File, writer: Option<File>, created: Option<PathBuf>) -> Control {
        Control {
            file,
            _writer: writer,
            pending: Vec::new(),
            skipping: false,
            created,
            ended: false,
        }
    }

    /// Reads lines from an open file (the tests' regular files).
    #[cfg(test)]
    pub fn from_file(file: File) -> Control {
        Control::new(file, None, None)
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Reads what is there (one read: called when the descriptor polls readable, so it never blocks) and
    /// appends each complete line to `lines`. A line over [`MAX_LINE`] bytes becomes the marker line
    /// [`TOO_LONG`], which the session refuses.
    pub fn read_lines(&mut self, lines: &mut Vec<String>) -> io::Result<()> {
        let mut buf = [0u8; 4096];
        let n = match self.file.read(&mut buf) {
            Ok(0) => {
                self.ended = true;
                0
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        };
        self.split(&buf[..n], lines);
        if self.ended && !self.pending.is_empty() {
            // The last line of a file piped in need not end in a newline.
            let rest = std::mem::take(&mut self.pending);
            lines.push(String::from_utf8_lossy(&rest).into_owned());
        }
        Ok(())
    }

    fn split(&mut self, mut bytes: &[u8], lines: &mut Vec<String>) {
        while let Some(nl) = bytes.iter().position(|&b| b == b'\n') {
            if self.skipping {
                self.skipping = false;
            } else {
                self.pending.extend_from_slice(&bytes[..nl]);
                lines.push(String::from_utf8_lossy(&self.pending).into_owned());
            }
            self.pending.clear();
            bytes = &bytes[nl + 1..];
        }
        if self.skipping {
            return;
        }
        self.pending.extend_from_slice(bytes);
        if self.pending.len() > MAX_LINE {
            self.pending.clear();
            self.skipping = true;
            lines.push(TOO_LONG.to_string());
        }
    }
}

/// Stands for a line over [`MAX_LINE`] bytes; [`parse`] refuses it as an unknown command.
pub const TOO_LONG: &str = "(a control line over 4096 bytes)";

impl Drop for Control {
    fn drop(&mut self) {
        if let Some(p) = &self.created {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse() {
        assert_eq!(parse("  "), Ok(None));
        assert_eq!(parse("# note"), Ok(None));
        assert_eq!(parse("off"), Ok(Some(Command::Off)));
        assert_eq!(parse(" on \r"), Ok(Some(Command::On)));
        let Ok(Some(Command::Watch { target, access })) = parse("watch counter+8/4 rw") else {
            panic!("watch did not parse");
        };
        assert_eq!(target.text, "counter+8/4");
        assert_eq!(target.len, Some(4));
        assert_eq!(access, Some(Access::ReadWrite));
        assert!(matches!(
            parse("watch 0x1000"),
            Ok(Some(Command::Watch { access: None, .. }))
        ));
        // A cast's space does not end the target.
        let Ok(Some(Command::Watch { target, access })) =
            parse("watch  (struct task_struct *)0xffff888103a4c000.pid   rw")
        else {
            panic!("a typed watch did not parse");
        };
        assert_eq!(target.text, "(struct task_struct *)0xffff888103a4c000.pid");
        assert!(target.cast.is_some());
        assert_eq!(access, Some(Access::ReadWrite));
    }

    #[test]
    fn bad_commands_say_why() {
        for (line, needle) in [
            ("watch", "needs a TARGET"),
            ("watch x r", "`w` or `rw`"),
            ("off now", "takes no arguments"),
            ("stop", "unknown command `stop`"),
            (TOO_LONG, "unknown command"),
            ("watch 0xzz", "0xzz"),
        ] {
            let err = parse(line).expect_err(line);
            assert!(err.contains(needle), "{line}: {err}");
        }
    }

    #[test]
    fn lines_are_split_across_reads_and_long_ones_refused() {
        let mut c = Control::new(tempfile_file(), None, None);
        let mut lines = Vec::new();
        c.split(b"wat", &mut lines);
        c.split(b"ch x\noff\non", &mut lines);
        assert_eq!(lines, ["watch x", "off"]);
        lines.clear();
        c.split(b"\n", &mut lines);
        assert_eq!(lines, ["on"]);
        lines.clear();
        c.split(&vec![b'a'; MAX_LINE + 10], &mut lines);
        c.split(b"aaa\noff\n", &mut lines);
        assert_eq!(lines, [TOO_LONG, "off"]);
    }

    fn tempfile_file() -> File {
        File::open("/dev/null").expect("/dev/null")
    }
}
