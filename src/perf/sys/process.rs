//! Other processes, for a process watch: pidfds (exit notice), ptrace (a launched command stopped at its
//! exec, its memory and instruction pointer), `waitpid` and `process_vm_readv` (a hit's value).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// `pidfd_open(2)`: a descriptor that polls readable when the process exits.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `PTRACE_TRACEME`, for a child between fork and exec: it then stops (SIGTRAP) right after its exec, before
/// the new program's first instruction. Only async-signal-safe work: a raw syscall.
pub fn ptrace_traceme() -> io::Result<()> {
    ptrace_plain(libc::PTRACE_TRACEME, 0)
}

/// Resumes a stopped tracee up to its next system call entry or exit (`PTRACE_SYSCALL`), or for good
/// (`PTRACE_DETACH`), delivering no signal.
pub fn ptrace_resume(pid: u32, detach: bool) -> io::Result<()> {
    let req = if detach {
        libc::PTRACE_DETACH
    } else {
        libc::PTRACE_SYSCALL
    };
    ptrace_plain(req, pid)
}

/// Resumes a stopped tracee until its next signal or exit (`PTRACE_CONT`), delivering no signal.
pub fn ptrace_cont(pid: u32) -> io::Result<()> {
    ptrace_plain(libc::PTRACE_CONT, pid)
}

/// A ptrace request that takes no address and no data (for the resuming ones, data 0 means "no signal").
fn ptrace_plain(req: libc::c_uint, pid: u32) -> io::Result<()> {
    // SAFETY: no pointers are passed; both pointer arguments are null.
    let r = unsafe {
        libc::ptrace(
            req,
            pid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The word of a stopped tracee's memory at `addr` (`PTRACE_PEEKDATA`).
pub fn ptrace_peek(pid: u32, addr: u64) -> io::Result<u64> {
    // SAFETY: errno is this thread's; clearing it tells a word of -1 from a failure.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: PEEKDATA reads the tracee's memory, not ours; no pointer of ours is passed.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_PEEKDATA,
            pid as libc::pid_t,
            addr as *mut libc::c_void,
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    let e = io::Error::last_os_error();
    if r == -1 && e.raw_os_error() != Some(0) {
        return Err(e);
    }
    Ok(r as u64)
}

/// Writes one word of a stopped tracee's memory at `addr` (`PTRACE_POKEDATA`; text pages too).
pub fn ptrace_poke(pid: u32, addr: u64, word: u64) -> io::Result<()> {
    // SAFETY: POKEDATA writes the tracee's memory, not ours; the data argument is the word itself.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_POKEDATA,
            pid as libc::pid_t,
            addr as *mut libc::c_void,
            word as *mut libc::c_void,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A stopped tracee's instruction pointer, or with `set` moves it there (`PTRACE_GETREGS`/`SETREGS`).
#[cfg(target_arch = "x86_64")]
pub fn ptrace_ip(pid: u32, set: Option<u64>) -> io::Result<u64> {
    // SAFETY: user_regs_struct is plain integers; all zero is a valid value to be overwritten.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    ptrace_regs(libc::PTRACE_GETREGS, pid, &mut regs)?;
    if let Some(ip) = set {
        regs.rip = ip;
        ptrace_regs(libc::PTRACE_SETREGS, pid, &mut regs)?;
    }
    Ok(regs.rip)
}

/// `PTRACE_GETREGS` into `regs`, or `PTRACE_SETREGS` from it.
#[cfg(target_arch = "x86_64")]
fn ptrace_regs(req: libc::c_uint, pid: u32, regs: &mut libc::user_regs_struct) -> io::Result<()> {
    // SAFETY: GETREGS writes, SETREGS reads, one user_regs_struct at `regs`, which lives for the call.
    let r = unsafe {
        libc::ptrace(
            req,
            pid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            regs as *mut libc::user_regs_struct as *mut libc::c_void,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// How a child changed state, from `waitpid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    Stopped(i32),
    Exited(i32),
    Signaled(i32),
}

/// `waitpid(pid, 0)` for one child (blocking).
pub fn wait_child(pid: u32) -> io::Result<ChildState> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int to write into.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        break;
    }
    Ok(if libc::WIFSTOPPED(status) {
        ChildState::Stopped(libc::WSTOPSIG(status))
    } else if libc::WIFSIGNALED(status) {
        ChildState::Signaled(libc::WTERMSIG(status))
    } else {
        ChildState::Exited(libc::WEXITSTATUS(status))
    })
}

/// `process_vm_readv(2)` of `buf.len()` bytes at `addr` in process `pid` into `buf`: one iovec each side,
/// no page pinning of our own. Returns how many bytes were read (fewer than asked when the range crosses
/// into an unmapped page); ESRCH when the process is gone, EFAULT when `addr` is not mapped there.
pub fn process_vm_read(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // The remote address is only a number to us; the kernel checks it against the other process's mappings.
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, writable for its whole length and live for the call; the kernel
    // writes at most that many bytes there. `remote` is never dereferenced by us, only by the kernel in the
    // other address space, where a bad address is an EFAULT, not undefined behaviour.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}
