//! The plan's process stage: the targets resolved where the watch's scope says (the kernel's, from the
//! kernel stage; each `-p` process, with one address in all of them; a launched command, started and
//! resolved once its libraries are mapped), and the per-thread path's descriptor budget. Every target is
//! then moved onto its member (found in the types before: [`crate::config::typed::watched_members`]),
//! per-CPU copies placed; a kernel address is refused where the events see user-space writers only (the
//! options stage decides which). (`-p`'s pids themselves are checked by
//! the options stage: a thread stands for its process.)

use crate::config::process;
use crate::config::typed;
use crate::config::watch::{self, Resolved};
use crate::error::{Error, Result};
use crate::model::target::Target;
use crate::model::watch::{same_twice, Access, PerCpu, Watch};
use crate::perf::denial::{self, AddressKind};

use super::host::Host;
use super::kernel::KernelSide;
use super::{Binding, Cpus, Delivery, Scope, Writers};

/// Who the watch covers, and each target resolved there (a launched command is started for it), moved
/// onto its member; first each cast target's member from the types (before any process is started or
/// asked), and for running processes on the per-thread path, whether their threads fit the descriptor
/// limit on `cpus`; last, whether the `writers` the events see can have the watches' addresses. What
/// resolving warns about goes to `notes`.
// Each argument is a part of an earlier stage's result that this stage takes alone; a struct made for
// this one call would only carry them across it.
#[allow(clippy::too_many_arguments)]
pub fn resolve_watches(
    scope: &mut Scope,
    delivery: Delivery,
    writers: Writers,
    cpus: &Cpus,
    kernel: &mut KernelSide,
    access: Access,
    host: &mut dyn Host,
    notes: &mut Vec<String>,
) -> Result<Vec<Watch>> {
    let members = typed::watched_members(&kernel.types, &kernel.targets)?;
    if let (Scope::Processes(pids), Binding::Scope { .. }) = (&*scope, delivery.events) {
        check_fd_budget(host, pids, cpus.now.len(), kernel.targets.len())?;
    }
    let resolved = match scope {
        Scope::System => std::mem::take(&mut kernel.resolved),
        Scope::Processes(_) | Scope::Launched(_) => {
            in_processes(scope, &kernel.bases, access, host)?
        }
    };
    let resolved = kernel
        .targets
        .iter()
        .zip(&members)
        .zip(resolved)
        .map(|((t, m), r)| match m {
            Some(m) => watch::moved(t, m, r, access),
            None => Ok(r),
        })
        .collect::<Result<Vec<_>>>()?;
    let mut watches: Vec<Watch> = Vec::new();
    for ((r, t), p) in resolved
        .into_iter()
        .zip(&kernel.targets)
        .zip(&kernel.percpu)
    {
        for w in &r.warnings {
            notes.push(format!("ksymwatch: warning: {w}"));
        }
        let mut watch = r.watch;
        if let Some(p) = p {
            // Hits are named after the variable, not the stand-in copy's address.
            watch.label = t.text.split('/').next().unwrap_or(&t.text).to_string();
            watch.per_cpu = Some(PerCpu {
                offset: watch.addr.wrapping_sub(p.base),
                ..p.copies.clone()
            });
        }
        watches.push(watch);
    }
    // A watch of user-space writers only (its events exclude the kernel) cannot have a kernel address:
    // the kernel takes no such event (EINVAL), and what it lacks is CAP_SYS_ADMIN (exit 4).
    let kernel = watches
        .iter()
        .find(|w| AddressKind::of(w.addr, w.len) == AddressKind::Kernel);
    if let (Some(w), Writers::UserSpaceOnly) = (kernel, writers) {
        return Err(Error::not_permitted(
            denial::kernel_address_in_user_space_watch(&w.label, w.addr, &host.privilege()),
        ));
    }
    if let Some((i, j)) = same_twice(&watches) {
        let (a, b) = (&watches[i], &watches[j]);
        return Err(Error::usage(format!(
            "`{}` and `{}` are the same {} bytes at 0x{:x}: each store there would be reported twice; give \
             the target once",
            a.label, b.label, a.len, a.addr
        )));
    }
    Ok(watches)
}

/// `bases` resolved in the watch's processes: each `-p` process, or the launched command, started here.
///
/// The command starts now, stopped at its exec, so its own symbols can be resolved. A library's symbol
/// (`LIB:SYM`) is resolved once ld.so has mapped the library: the command is then run to its program's
/// entry point (one stop, before any code of the program's own) and resolved again. A library still not
/// mapped there is loaded later (dlopen) or never, and is refused (exit 2) with the command killed (dropped
/// with the scope) before its code ran.
fn in_processes(
    scope: &mut Scope,
    bases: &[Target],
    access: Access,
    host: &mut dyn Host,
) -> Result<Vec<Resolved>> {
    if let Scope::Launched(command) = scope {
        let child = host.launch(&command.argv)?;
        command.pid = child.pid();
        command.child = Some(child);
    }
    let pids = scope.pids();
    let mut ran_to_entry = false;
    loop {
        let resolved = processes_watches(&*host, &pids, bases, access);
        let Err(e) = &resolved else {
            return resolved;
        };
        let child = match scope {
            Scope::Launched(command) if process::is_not_mapped_yet(e) => command.child.as_mut(),
            _ => None,
        };
        match (child, ran_to_entry) {
            (Some(child), false) => {
                if !child.run_to_entry()? {
                    return Err(Error::usage(
                        "the command ended before its program started, so the library holding the target was never mapped",
                    ));
                }
                ran_to_entry = true;
            }
            (Some(_), true) => {
                return resolved.map_err(|e| {
                    Error::usage(format!(
                        "{e}; that library is not loaded when the command starts (loaded later with dlopen, or \
                         not at all): start the command, then watch it with -p PID once the library is loaded; \
                         nothing ran"
                    ))
                })
            }
            (None, _) => return resolved,
        }
    }
}

/// Resolves `targets` in every process of a `-p` watch. A watch has one address in every process it
/// covers, so each symbol must resolve to the same address in all of them: two runs of a PIE, or a library
/// under ASLR, usually do not, and arming the first process's address in the others would silently watch
/// some other byte there. A process that has exited meanwhile (a `--control` move late in a run) is skipped.
fn processes_watches(
    host: &dyn Host,
    pids: &[u32],
    targets: &[Target],
    access: Access,
) -> Result<Vec<Resolved>> {
    agreed(
        pids,
        targets,
        |pid| {
            targets
                .iter()
                .map(|t| match watch::address_in_process(t, access) {
                    Some(address) => address,
                    None => watch::in_process(t, access, host.process_symbol(pid, t)?),
                })
                .collect()
        },
        |pid| host.process_exists(pid),
    )
}

/// [`processes_watches`] with each process's `targets` resolved by `resolve`, and `exists` telling a
/// process that has exited: the planning asks the host, `--control` the machine while the session runs.
pub(super) fn agreed(
    pids: &[u32],
    targets: &[Target],
    mut resolve: impl FnMut(u32) -> Result<Vec<Resolved>>,
    exists: impl Fn(u32) -> bool,
) -> Result<Vec<Resolved>> {
    let mut first: Option<(u32, Vec<Resolved>)> = None;
    let mut gone = None;
    for &pid in pids {
        let resolved = match resolve(pid) {
            Ok(r) => r,
            Err(e) if !exists(pid) => {
                gone.get_or_insert(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some((p0, r0)) = &first else {
            first = Some((pid, resolved));
            continue;
        };
        for (t, (a, b)) in targets.iter().zip(r0.iter().zip(&resolved)) {
            if (a.watch.addr, a.watch.len) != (b.watch.addr, b.watch.len) {
                return Err(Error::usage(format!(
                    "`{}` is at 0x{:x}/{} in pid {p0} but at 0x{:x}/{} in pid {pid} (each loaded at its own \
                     address); one watch has one address in every process: watch them in separate runs, or \
                     start them with address randomization off (setarch -R)",
                    t.text, a.watch.addr, a.watch.len, b.watch.addr, b.watch.len
                )));
            }
        }
    }
    match (first, gone) {
        (Some((_, r)), _) => Ok(r),
        (None, Some(e)) => Err(e),
        (None, None) => Err(Error::usage("no process to resolve the target in")),
    }
}

/// Descriptors kept free for everything else a session opens (epoll, signalfd, files, /proc reads).
const FD_RESERVE: u64 = 64;

/// A watch of running processes on the per-thread path takes one descriptor per thread, CPU and target (an
/// inherited event cannot be mapped per thread, so each thread's event is bound to each CPU and joins that
/// CPU's ring). Checked before anything is opened, so a process too big for this limit fails with a way out
/// instead of EMFILE half-way through its threads.
fn check_fd_budget(host: &dyn Host, pids: &[u32], cpus: usize, targets: usize) -> Result<()> {
    let Some(limit) = host.fd_limit() else {
        return Ok(());
    };
    let threads = host.threads(pids);
    // Each thread also gets one guard event (`perf::event`: it keeps the thread's breakpoints its own).
    let need = (threads * (cpus * targets + 1)) as u64;
    if need + FD_RESERVE <= limit {
        return Ok(());
    }
    Err(Error::arm(format!(
        "watching {threads} threads on {cpus} CPUs one breakpoint per thread takes {need} file descriptors (one \
         per thread, CPU and target, and one per thread to keep them its own), over this process's limit of {limit}; raise the hard limit (ulimit -Hn), \
         watch without --per-thread/--remove-on-exec where BPF can be loaded (one breakpoint per CPU), or start \
         the program under ksymwatch (`ksymwatch write TARGET -- CMD`), where every thread inherits {} events",
        cpus * targets
    )))
}
