//! `--control FIFO|-`: the line protocol a script uses to move a running watch (hunt a race by sampling:
//! watch one variable for a while, then another, without re-arming every thread).
//!
//! One command a line:
//! - `watch TARGET[/LEN] [w|rw]`: move the watch to TARGET (resolved as on the command line; the access
//!   defaults to the command's, `write` or `rw`; a `(struct TYPE)` cast's space is part of the target;
//!   the bytes already watched the same way are left as they are, the line marked [`UNCHANGED`]);
//! - `off`, `on`: disable and re-enable the watch, keeping every debug register;
//! - blank lines and lines starting with `#` are ignored.
//!
//! A line ends at its newline, or where its writer closed the FIFO (or stdin ended) without one; a line
//! is at most [`MAX_LINE`] bytes.
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
    if line.starts_with(TOO_LONG) {
        return Err(format!(
            "the line is longer than {MAX_LINE} bytes, the most a control line may hold; nothing of it was \
             applied"
        ));
    }
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

/// The `control_refused` kind of a line that would change nothing: `off` of a watch already off, `on` of
/// one already on ([`already`]), `watch` of the bytes already watched the same way.
pub const UNCHANGED: &str = "unchanged";

/// Why switching the watch `on` (or off) changes nothing when it is `enabled` (or not): the reason its
/// acknowledgement gives. A second `off` used to be marked `# watch off` again, as if the watch had been
/// on until then; it is marked as not applied instead, so every line still gets its one mark and a
/// reader of the marks sees each real switch once. `None`: the switch changes the watch.
pub fn already(on: bool, enabled: bool) -> Option<String> {
    (on == enabled).then(|| format!("the watch is already {}", if on { "on" } else { "off" }))
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
pub const MAX_LINE: usize = 4096;

/// Where control lines come from: a FIFO (created if absent, removed again at the end if we made it) or
/// stdin.
pub struct Control {
    file: File,
    /// A FIFO: its end-of-file is a writer's close, not the end of the commands ([`Control::read_lines`]).
    fifo: bool,
    /// The FIFO was opened afresh by the last read: its descriptor changed.
    pub reopened: bool,
    /// A partial line from the last read.
    pending: Vec<u8>,
    /// Too long a line is being skipped up to its end: its [`TOO_LONG`] line, added there (the refusal
    /// then acknowledges the end of the line, as any line's acknowledgement does).
    skipping: Option<String>,
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
            return Ok(Control::new(File::from(fd), false, None));
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
        let opened = open_reader(spec)
            .map_err(|e| Error::usage(format!("--control {shown}: cannot open the FIFO: {e}")))
            .and_then(|r| {
                check_owner(&r, &shown.to_string())?;
                Ok(r)
            });
        match opened {
            Ok(reader) => Ok(Control::new(reader, true, created)),
            Err(e) => {
                if let Some(p) = &created {
                    let _ = std::fs::remove_file(p);
                }
                Err(e)
            }
        }
    }
}

/// The FIFO's read end, not waiting for a writer. Opened without a writer, it reports no hang-up until a
/// writer has come and gone (Linux), so it polls quiet until the first command.
fn open_reader(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
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
    fn new(file: File, fifo: bool, created: Option<PathBuf>) -> Control {
        Control {
            file,
            fifo,
            reopened: false,
            pending: Vec::new(),
            skipping: None,
            created,
            ended: false,
        }
    }

    /// Reads lines from an open file (the tests' regular files).
    #[cfg(test)]
    pub fn from_file(file: File) -> Control {
        Control::new(file, false, None)
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Reads what is there (one read: called when the descriptor polls readable, so it never blocks) and
    /// appends each complete line to `lines`. A line over [`MAX_LINE`] bytes becomes a [`TOO_LONG`] line,
    /// which [`parse`] refuses.
    ///
    /// End-of-file ends the pending line: stdin's last line, or a FIFO writer's last line without a
    /// newline (its close ends it, so the next writer's line is not glued to it). A FIFO's end-of-file
    /// only means no writer has it open now: its read end is opened afresh (through this descriptor, so
    /// it is the same FIFO even if the path changed) and [`Control::reopened`] tells the caller to poll
    /// the new descriptor. Two writers that have the FIFO open at once share one byte stream, as any
    /// FIFO's: a line is theirs to end with a newline.
    pub fn read_lines(&mut self, lines: &mut Vec<String>) -> io::Result<()> {
        self.reopened = false;
        let mut buf = [0u8; 4096];
        let n = match self.file.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        };
        if n > 0 {
            self.split(&buf[..n], lines);
            return Ok(());
        }
        self.end_line(lines);
        if self.fifo {
            // Opened before the old one closes: the FIFO keeps a reader throughout, so a writer opening
            // now neither blocks nor loses what it writes.
            let path = format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&self.file)
            );
            self.file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)?;
            self.reopened = true;
        } else {
            self.ended = true;
        }
        Ok(())
    }

    /// A FIFO holds the start of a line whose writer may be gone unseen. A writer that came and went
    /// between the end-of-file of the one before and the read end's opening afresh (see
    /// [`Control::read_lines`]) left its bytes in the FIFO but raises no hang-up on the new end (Linux
    /// suppresses it until a writer is seen after an open without one), so nothing wakes the loop for the
    /// end-of-file that ends its line: while this holds, the loop reads on every turn, and a read that
    /// finds no writer and no data ends the line.
    pub fn mid_line(&self) -> bool {
        self.fifo && (!self.pending.is_empty() || self.skipping.is_some())
    }

    /// The writer is gone: what it left without a newline is a line.
    fn end_line(&mut self, lines: &mut Vec<String>) {
        if let Some(too_long) = self.skipping.take() {
            lines.push(too_long);
        } else if !self.pending.is_empty() {
            lines.push(String::from_utf8_lossy(&self.pending).into_owned());
        }
        self.pending.clear();
    }

    fn split(&mut self, mut bytes: &[u8], lines: &mut Vec<String>) {
        while let Some(nl) = bytes.iter().position(|&b| b == b'\n') {
            if self.skipping.is_none() {
                self.pending.extend_from_slice(&bytes[..nl]);
                self.check_length();
            }
            self.end_line(lines);
            bytes = &bytes[nl + 1..];
        }
        if self.skipping.is_none() {
            self.pending.extend_from_slice(bytes);
            self.check_length();
        }
    }

    /// A pending line over [`MAX_LINE`] bytes is dropped, and skipped to its end.
    fn check_length(&mut self) {
        if self.pending.len() > MAX_LINE {
            let head = String::from_utf8_lossy(&self.pending[..TOO_LONG_SHOWN]);
            self.skipping = Some(format!("{TOO_LONG}{head}..."));
            self.pending.clear();
        }
    }
}

/// Starts the line that stands for one over [`MAX_LINE`] bytes, followed by the line's first
/// [`TOO_LONG_SHOWN`] bytes and `...` (what a refusal shows of it). A line read never holds a newline,
/// so no line sent can be taken for one.
pub const TOO_LONG: &str = "\n";

/// How much of a too-long line its refusal shows.
const TOO_LONG_SHOWN: usize = 40;

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

    /// A switch to the state the watch is in changes nothing and says so; the other switch applies.
    #[test]
    fn a_switch_to_the_state_the_watch_is_in_is_already_done() {
        assert_eq!(
            already(false, false).as_deref(),
            Some("the watch is already off")
        );
        assert_eq!(
            already(true, true).as_deref(),
            Some("the watch is already on")
        );
        assert_eq!(already(false, true), None);
        assert_eq!(already(true, false), None);
    }

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
            ("\nwatch aaaa...", "longer than 4096 bytes"),
            ("watch 0xzz", "0xzz"),
        ] {
            let err = parse(line).expect_err(line);
            assert!(err.contains(needle), "{line}: {err}");
        }
    }

    #[test]
    fn lines_are_split_across_reads_and_long_ones_refused() {
        let mut c = Control::new(tempfile_file(), false, None);
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
        let head = format!("\n{}...", "a".repeat(TOO_LONG_SHOWN));
        assert_eq!(lines, [head.as_str(), "off"]);
        let err = parse(&lines[0]).expect_err("too long");
        assert!(
            err.contains("longer than 4096 bytes") && !err.contains("unknown command"),
            "{err}"
        );
        // Over the limit only once its newline came, in the read after a full buffer.
        lines.clear();
        c.split(&vec![b'a'; MAX_LINE], &mut lines);
        c.split(b"aa\non\n", &mut lines);
        assert_eq!(lines, [head.as_str(), "on"]);
        // Exactly the limit is a line like any other.
        lines.clear();
        let mut longest = b"watch ".to_vec();
        longest.resize(MAX_LINE, b'x');
        longest.push(b'\n');
        c.split(&longest, &mut lines);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].len(), MAX_LINE);
    }

    /// A writer's close ends its line: the pending bytes become a line, a too-long line's skipping
    /// stops, and the next writer starts afresh.
    #[test]
    fn a_writers_close_ends_its_line() {
        let mut c = Control::new(tempfile_file(), false, None);
        let mut lines = Vec::new();
        c.split(b"watch arr+24", &mut lines);
        assert!(lines.is_empty());
        c.end_line(&mut lines);
        c.split(b"watch arr+32\n", &mut lines);
        assert_eq!(lines, ["watch arr+24", "watch arr+32"]);
        lines.clear();
        c.split(&vec![b'a'; MAX_LINE + 1], &mut lines);
        c.end_line(&mut lines);
        c.split(b"off\n", &mut lines);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[1], "off");
        lines.clear();
        c.end_line(&mut lines);
        assert!(lines.is_empty(), "no line without bytes");
    }

    /// A real FIFO: a writer's last line without a newline is a command once it closes, and the FIFO
    /// is read on afterwards (opened afresh) for the next writer.
    #[test]
    fn a_fifo_reopens_after_each_writer() {
        let dir = std::env::temp_dir().join(format!("ksymwatch-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl");
        let mut c = Control::open(&path).unwrap();
        let mut lines = Vec::new();
        for text in ["watch arr+24", "watch arr+32\n"] {
            let mut w = OpenOptions::new().write(true).open(&path).unwrap();
            std::io::Write::write_all(&mut w, text.as_bytes()).unwrap();
            drop(w);
            // The data, then the end-of-file of the writer's close.
            c.read_lines(&mut lines).unwrap();
            c.read_lines(&mut lines).unwrap();
            assert!(c.reopened, "{text}");
            assert!(!c.ended);
        }
        assert_eq!(lines, ["watch arr+24", "watch arr+32"]);
        // With no writer, the new descriptor polls quiet (no hang-up) until one comes and goes.
        let epoll = sys::Epoll::new().unwrap();
        epoll.add(c.fd(), 1).unwrap();
        let mut ready = Vec::new();
        epoll
            .wait(&mut ready, std::time::Duration::from_millis(20))
            .unwrap();
        assert!(ready.is_empty(), "{ready:?}");
        drop(c);
        assert!(!path.exists(), "the FIFO made is removed");
        let _ = std::fs::remove_dir(&dir);
    }

    /// A writer that came and went before the read end was opened (afresh) leaves its bytes and no
    /// hang-up (the race behind a too-long line without a newline that was never refused): the loop must
    /// read again while a line is unended, and that read ends it.
    #[test]
    fn a_writer_gone_before_the_read_end_opened_ends_its_line_when_read_again() {
        let dir = std::env::temp_dir().join(format!("ksymwatch-ctl-old-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ctl");
        sys::mkfifo(&path, 0o600).unwrap();
        // A first reader lets the writer open; it writes and closes before the control's end opens.
        let first = open_reader(&path).unwrap();
        let mut w = OpenOptions::new().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut w, b"watch arr+24").unwrap();
        drop(w);
        let mut c = Control::new(open_reader(&path).unwrap(), true, None);
        drop(first);
        let epoll = sys::Epoll::new().unwrap();
        epoll.add(c.fd(), 1).unwrap();
        let mut ready = Vec::new();
        let mut lines = Vec::new();
        epoll
            .wait(&mut ready, std::time::Duration::from_millis(20))
            .unwrap();
        assert_eq!(ready, [1], "the data polls readable");
        c.read_lines(&mut lines).unwrap();
        assert!(lines.is_empty() && c.mid_line());
        ready.clear();
        epoll
            .wait(&mut ready, std::time::Duration::from_millis(20))
            .unwrap();
        assert!(
            ready.is_empty(),
            "no hang-up for a writer gone before the read end"
        );
        // What the loop does while mid-line: read again; no writer and no data is the end of the line.
        c.read_lines(&mut lines).unwrap();
        assert_eq!(lines, ["watch arr+24"]);
        assert!(!c.mid_line() && c.reopened);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir(&dir);
    }

    fn tempfile_file() -> File {
        File::open("/dev/null").expect("/dev/null")
    }
}
