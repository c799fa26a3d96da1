//! Launch mode (`ksymwatch write TARGET -- CMD ARGS`): the command is started under `PTRACE_TRACEME`, so it
//! stops right after its exec, with its program mapped and not one of its instructions run. The watch is
//! armed on it there (one inherited event per CPU: every thread it starts is covered by the kernel, with no
//! thread list to read and no race), then it is let go. Creating the watch before any thread exists
//! is what makes it cover every thread without a race.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command};

use crate::error::{Context, Error, ExitCode, Result};
use crate::perf::sys::{self, ChildState};

/// The most system calls a command is stepped through while waiting for a library to be mapped; ld.so
/// maps a program's libraries in a few dozen.
pub const MAX_SYSCALL_STEPS: usize = 20_000;

pub struct Launched {
    pub pid: u32,
    child: Child,
    /// Detached and running; until then, dropping it kills the command, which never ran its own code.
    running: bool,
}

impl Launched {
    /// Starts `argv` stopped at its exec.
    pub fn start(argv: &[String]) -> Result<Launched> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| Error::usage("`--` must be followed by a command to run"))?;
        let mut cmd = Command::new(program);
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

    /// Lets the stopped command run up to its next system call entry or exit; `false` if it ended.
    pub fn step_syscall(&mut self) -> Result<bool> {
        sys::ptrace_resume(self.pid, false).or_exit(ExitCode::Runtime, "ptrace")?;
        match sys::wait_child(self.pid).or_exit(ExitCode::Runtime, "waitpid")? {
            ChildState::Stopped(_) => Ok(true),
            _ => {
                self.running = true;
                Ok(false)
            }
        }
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
