//! A stop signal (SIGINT, SIGTERM, SIGHUP) in the middle of a fetch: the download's temporary file is
//! removed, one line says what was stopped, and the process then dies by that signal, as it would have
//! without the fetch (a shell reports 128+N, 130 for Ctrl-C).
//!
//! Why a handler that cleans up and re-raises, rather than a flag the download loop polls: the loop is
//! blocked inside ureq's read (up to the stall timeout) and the signal may be delivered to any thread
//! that has it unblocked (the tracer's warm-up thread, for one), so no flag would be seen in time. The
//! handler does only async-signal-safe things: `unlink`, `rmdir`, `write` and re-raising the signal with
//! the default action. What it removes is published through one atomic pointer to a record that is never
//! freed (one small leak per server tried), so the handler can never read freed memory, whichever thread
//! it runs on.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// What the handler cleans up and says: the file being written (if any), the directory the download
/// made for it (removed only if empty), and the server being asked.
struct Note {
    temp: Option<CString>,
    made_dir: Option<CString>,
    /// `URL` of the request, for the message.
    what: Vec<u8>,
    /// Bytes that clear the terminal's last line (where a progress bar may be) before the message.
    clear: &'static [u8],
}

static CURRENT: AtomicPtr<Note> = AtomicPtr::new(ptr::null_mut());

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn cstring(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

/// Publishes what a signal arriving now must clean up (`None`: nothing, e.g. after the file was renamed
/// into place); `clear_line` when stderr is a terminal. The previous record is leaked on purpose: a
/// handler on another thread may still read it.
pub(super) fn publish(url: &str, temp: Option<&Path>, made_dir: Option<&Path>, clear_line: bool) {
    let note = Box::new(Note {
        temp: temp.and_then(cstring),
        made_dir: made_dir.and_then(cstring),
        what: url.as_bytes().to_vec(),
        clear: if clear_line { b"\r\x1b[2K" } else { b"" },
    });
    CURRENT.store(Box::into_raw(note), Ordering::SeqCst);
}

/// Nothing in flight: a signal from now on finds nothing to remove.
pub(super) fn clear() {
    CURRENT.store(ptr::null_mut(), Ordering::SeqCst);
}

fn write_all(bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: `rest` is a valid buffer of its length; write(2) is async-signal-safe.
        let n = unsafe { libc::write(libc::STDERR_FILENO, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    let note = CURRENT.load(Ordering::SeqCst);
    // SAFETY: a non-null pointer came from Box::into_raw in `publish` and is never freed.
    let note = unsafe { note.as_ref() };
    if let Some(n) = note {
        if let Some(t) = &n.temp {
            // SAFETY: a NUL-terminated path; unlink(2) is async-signal-safe.
            unsafe { libc::unlink(t.as_ptr()) };
        }
        if let Some(d) = &n.made_dir {
            // SAFETY: as above; rmdir fails harmlessly on a directory that is not empty.
            unsafe { libc::rmdir(d.as_ptr()) };
        }
        write_all(n.clear);
    }
    let name: &[u8] = match sig {
        libc::SIGINT => b"SIGINT",
        libc::SIGTERM => b"SIGTERM",
        _ => b"SIGHUP",
    };
    write_all(b"ksymwatch: debuginfod: ");
    write_all(name);
    write_all(b": stopped fetching");
    if let Some(n) = note {
        write_all(b" ");
        write_all(&n.what);
    }
    write_all(b"; nothing was cached\n");
    // SAFETY: signal(2) and raise(3) are async-signal-safe. The raised signal stays blocked until this
    // handler returns, then its default action ends the process.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// The handlers installed for the length of a fetch; dropping it puts the previous dispositions back.
pub(super) struct Guard {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl Guard {
    /// Installs the handler for the stop signals. SIGHUP keeps an inherited SIG_IGN (`nohup`); SIGINT and
    /// SIGTERM are caught even when inherited ignored, as the tracer's session does (a shell starts
    /// background jobs with SIGINT ignored).
    pub(super) fn install() -> Guard {
        let mut old = Vec::new();
        for sig in SIGNALS {
            // SAFETY: sigaction structs are plain data, initialised by zeroing and sigemptyset/sigaddset
            // before use; a null `act` only reads the current disposition.
            unsafe {
                let mut cur: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, ptr::null(), &mut cur) != 0 {
                    continue;
                }
                if sig == libc::SIGHUP && cur.sa_sigaction == libc::SIG_IGN {
                    continue;
                }
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut act.sa_mask);
                for s in SIGNALS {
                    libc::sigaddset(&mut act.sa_mask, s);
                }
                act.sa_flags = libc::SA_RESTART;
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &act, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        Guard { old }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        clear();
        for (sig, prev) in &self.old {
            // SAFETY: `prev` is the disposition sigaction returned for this signal.
            unsafe { libc::sigaction(*sig, prev, ptr::null_mut()) };
        }
    }
}
