//! Launch mode (`ksymwatch write TARGET -- CMD ARGS`): the command is started under `PTRACE_TRACEME`, so it
//! stops right after its exec, with its program mapped and not one of its instructions run. The watch is
//! armed on it there (one inherited event per CPU: every thread it starts is covered by the kernel, with no
//! thread list to read and no race), then it is let go. Creating the watch before any thread exists
//! is what makes it cover every thread without a race.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command};

use crate::error::{Context, Error, ExitCode, Result};
use crate::perf::sys::{self, ChildState};

/// `AT_ENTRY` in the auxiliary vector: the program's entry point, where ld.so jumps once every library the
/// program links is mapped and initialized.
const AT_ENTRY: u64 = 9;

pub struct Launched {
    pub pid: u32,
    child: Child,
    /// Detached and running; until then, dropping it kills the command, which never ran its own code.
    running: bool,
}

impl Launched {
    /// Starts `argv` stopped at its exec. Its words go to exec as given, any bytes but NUL: a file name
    /// or an argument need not be UTF-8 (only the messages here show them lossily).
    pub fn start(argv: &[OsString]) -> Result<Launched> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| Error::usage("`--` must be followed by a command to run"))?;
        let mut cmd = Command::new(program);
        let program = program.to_string_lossy();
        cmd.args(args);
        // SAFETY: the closure runs in the child between fork and exec and makes one raw system call
        // (ptrace), which is async-signal-safe; it touches no lock or allocation.
        unsafe {
            cmd.pre_exec(sys::ptrace_traceme);
        }
        let child = cmd.spawn().map_err(|e| {
            Error::usage(format!(
                "cannot run `{program}`: {e}; give a program on PATH or a path to one"
            ))
        })?;
        let pid = child.id();
        let mut launched = Launched {
            pid,
            child,
            running: false,
        };
        match sys::wait_child(pid).or_exit(ExitCode::Runtime, "waiting for the command to start")? {
            ChildState::Stopped(_) => Ok(launched),
            other => {
                launched.running = true;
                Err(Error::runtime(format!(
                    "`{program}` ended before it could be watched ({other:?})"
                )))
            }
        }
    }

    /// Lets the command stopped at its exec run to its program's entry point and stops it there: ld.so
    /// has then mapped every library the program links (and run their constructors), and not one
    /// instruction of the program's own has run. One breakpoint instruction is planted at the entry and
    /// taken out again, so this costs one stop, not one per system call. `Ok(false)` if the command ended
    /// (or was killed by a signal) before reaching it.
    pub fn run_to_entry(&mut self) -> Result<bool> {
        let entry = self.entry()?;
        let pid = self.pid;
        let word =
            sys::ptrace_peek(pid, entry).or_exit(ExitCode::Runtime, "reading the entry point")?;
        sys::ptrace_poke(pid, entry, (word & !0xff) | 0xcc)
            .or_exit(ExitCode::Runtime, "planting the entry-point breakpoint")?;
        sys::ptrace_cont(pid).or_exit(ExitCode::Runtime, "ptrace")?;
        loop {
            match sys::wait_child(pid).or_exit(ExitCode::Runtime, "waitpid")? {
                ChildState::Stopped(libc::SIGTRAP) => break,
                // A stop for another signal before the entry (ld.so's own business): let it be handled as
                // it would be without us, and wait on.
                ChildState::Stopped(_) => {
                    sys::ptrace_cont(pid).or_exit(ExitCode::Runtime, "ptrace")?
                }
                _ => {
                    self.running = true;
                    return Ok(false);
                }
            }
        }
        sys::ptrace_poke(pid, entry, word)
            .or_exit(ExitCode::Runtime, "restoring the entry point")?;
        let ip = sys::ptrace_ip(pid, None).or_exit(ExitCode::Runtime, "ptrace getregs")?;
        if ip != entry + 1 {
            return Err(Error::runtime(format!(
                "the command stopped at 0x{ip:x}, not at its entry point 0x{entry:x}"
            )));
        }
        sys::ptrace_ip(pid, Some(entry)).or_exit(ExitCode::Runtime, "ptrace setregs")?;
        Ok(true)
    }

    /// The entry point the kernel gave the program (`AT_ENTRY`).
    fn entry(&self) -> Result<u64> {
        let auxv = std::fs::read(format!("/proc/{}/auxv", self.pid))
            .or_exit(ExitCode::Runtime, "reading the command's auxiliary vector")?;
        auxv.chunks_exact(16)
            .map(|kv| {
                let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
                (word(&kv[..8]), word(&kv[8..]))
            })
            .find(|&(k, _)| k == AT_ENTRY)
            .map(|(_, v)| v)
            .ok_or_else(|| Error::runtime("the command's auxiliary vector has no entry point"))
    }

    /// Lets the command go, watched.
    pub fn release(&mut self) -> Result<()> {
        sys::ptrace_resume(self.pid, true).or_exit(ExitCode::Runtime, "ptrace detach")?;
        self.running = true;
        Ok(())
    }

    /// The command's exit status if it has ended (reaping it), as a shell reports it: its exit code, or 128
    /// plus the signal that killed it.
    pub fn status(&mut self) -> Option<i32> {
        let s = self.child.try_wait().ok()??;
        Some(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)))
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if !self.running {
            // Armed nothing, or failed to: the command is still stopped before its first instruction.
            let _ = self.child.kill();
            let _ = sys::wait_child(self.pid);
        }
    }
}
