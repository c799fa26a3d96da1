//! The gcc-built program of the process-resolution tests of both crates (symbols/tests/fixture/procsym.c):
//! built once per variant and test process, and run with the addresses it prints of its own variables
//! parsed, the ground truth `resolve --pid` is checked against (besides gdb and nm).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use super::{fixture, have, skip};

/// A position-independent executable with DWARF.
pub const PIE: &[&str] = &["-g", "-O0", "-fPIE", "-pie"];
/// An executable linked at a fixed address (ET_EXEC), with DWARF.
pub const NO_PIE: &[&str] = &["-g", "-O0", "-fno-pie", "-no-pie"];
/// A PIE without DWARF.
pub const NO_DEBUG: &[&str] = &["-O0", "-fPIE", "-pie"];
/// A non-PIE executable that refers to `environ`, so it has its own copy of it (a copy relocation).
pub const COPY_RELOC: &[&str] = &["-g", "-O0", "-fno-pie", "-no-pie", "-DUSE_ENVIRON"];
/// A PIE whose DWARF is compressed (`-gz`).
pub const COMPRESSED: &[&str] = &["-g", "-gz", "-O0", "-fPIE", "-pie"];

/// Builds the program as `procsym-VARIANT` with gcc `flags`, once per test process; `None`, after
/// a SKIP line for the running test, when gcc is missing or cannot build it that way.
pub fn build(variant: &str, flags: &[&str]) -> Option<PathBuf> {
    static BUILT: Mutex<Option<HashMap<String, Option<PathBuf>>>> = Mutex::new(None);
    if !have("gcc") {
        skip("gcc not found; the procsym test program cannot be built");
        return None;
    }
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    let out = built
        .entry(variant.to_string())
        .or_insert_with(|| {
            let dir =
                std::env::temp_dir().join(format!("ksymwatch-procsym-{}", std::process::id()));
            std::fs::create_dir_all(&dir).ok()?;
            let out = dir.join(format!("procsym-{variant}"));
            let src = fixture::sources().join("procsym.c");
            // glibc before 2.34 keeps dlsym in libdl.
            let ok = [&[][..], &["-ldl"][..]].iter().any(|libs| {
                Command::new("gcc")
                    .args(flags)
                    .arg("-o")
                    .arg(&out)
                    .arg(&src)
                    .args(*libs)
                    .status()
                    .is_ok_and(|s| s.success())
            });
            ok.then_some(out)
        })
        .clone();
    if out.is_none() {
        skip(format_args!("gcc {flags:?} cannot build procsym.c here"));
    }
    out
}

/// The program built as both `(variant, flags)`, for a test that compares two builds; `None` (after a
/// SKIP line) when either cannot be built.
pub fn build_two(a: (&str, &[&str]), b: (&str, &[&str])) -> Option<(PathBuf, PathBuf)> {
    Some((build(a.0, a.1)?, build(b.0, b.1)?))
}

/// The program running, stopped at its first `fgets` after printing its addresses; killed when dropped.
pub struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pub pid: u32,
    /// `name=0xADDR` words of its first line: `counters`, `counters.pts[2].y`, `counters.name`,
    /// `plain_global`, `dl_environ` (what dlsym finds for `environ`), and `environ` with USE_ENVIRON.
    pub addrs: HashMap<String, u64>,
}

impl Running {
    pub fn start(program: &std::path::Path, args: &[&str]) -> Running {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("procsym's banner");
        let addrs = line
            .split_whitespace()
            .filter_map(|w| {
                let (k, v) = w.split_once('=')?;
                Some((
                    k.to_string(),
                    u64::from_str_radix(v.strip_prefix("0x")?, 16).ok()?,
                ))
            })
            .collect();
        Running {
            pid: child.id(),
            child,
            stdin,
            stdout,
            addrs,
        }
    }

    /// The address the program printed for `name`.
    pub fn addr(&self, name: &str) -> u64 {
        *self
            .addrs
            .get(name)
            .unwrap_or_else(|| panic!("procsym printed no {name}: {:?}", self.addrs))
    }

    /// Sends one line on its stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to procsym");
        stdin.flush().expect("flush procsym's stdin");
    }

    /// Reads one line of its stdout, without the newline; empty at its end.
    pub fn read_line(&mut self) -> String {
        let mut line = String::new();
        let _ = self.stdout.read_line(&mut line);
        line.trim_end().to_string()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
