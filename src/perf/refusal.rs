//! Why the kernel refused to arm a breakpoint, in the kernel's terms: which CPU or thread, what the errno
//! means there (counting the free debug registers, reading perf_event_paranoid), the exit code it calls
//! for, and the [`Remedy`]. A remedy that is a command-line option is left as a kind for the layer that
//! knows the command line to name; [`Refusal`]'s own `Display` words it as a kernel setting.

use std::fmt;
use std::io;

use crate::error::ExitCode;
use crate::model::watch::Watch;
use crate::perf::event::{OpenError, Stage};

/// What would let the kernel accept the event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remedy {
    /// Nothing the user can change (a CPU that went offline).
    None,
    /// A fix outside the command line, already worded (free debug registers, privileges, limits).
    Kernel(String),
    /// A ring buffer of fewer pages, or a higher RLIMIT_MEMLOCK / perf_event_mlock_kb.
    SmallerRing,
    /// A breakpoint without a BPF program on it.
    NoBpf,
}

/// An arming failure: what the kernel refused and why, the exit code, and what would help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ExitCode,
    /// What was refused, with the errno, e.g. `cpu 0: cannot map the perf ring buffer: ...`.
    pub what: String,
    pub remedy: Remedy,
    /// Refused as part of an all-or-nothing arming: every event opened was closed again.
    pub nothing_armed: bool,
}

impl Refusal {
    fn new(code: ExitCode, what: String, remedy: Remedy) -> Refusal {
        Refusal {
            code,
            what,
            remedy,
            nothing_armed: false,
        }
    }

    pub(crate) fn arm(what: impl Into<String>) -> Refusal {
        Refusal::new(ExitCode::Arm, what.into(), Remedy::None)
    }

    /// Marks the refusal as ending an all-or-nothing arming.
    pub(crate) fn nothing_armed(mut self) -> Refusal {
        self.nothing_armed = true;
        self
    }

    /// The one-line message with `remedy` (how the caller words [`Refusal::remedy`]) in its place.
    pub fn with_remedy(&self, remedy: Option<&str>) -> String {
        let mut line = self.what.clone();
        if let Some(r) = remedy {
            line.push_str("; ");
            line.push_str(r);
        }
        if self.nothing_armed {
            line.push_str("; nothing was armed");
        }
        line
    }

    /// The remedy in the kernel's terms.
    fn kernel_remedy(&self) -> Option<&str> {
        match &self.remedy {
            Remedy::None => None,
            Remedy::Kernel(text) => Some(text),
            Remedy::SmallerRing => {
                Some("map fewer ring pages, or raise RLIMIT_MEMLOCK / perf_event_mlock_kb")
            }
            Remedy::NoBpf => Some("a breakpoint without the BPF program still works"),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.with_remedy(self.kernel_remedy()))
    }
}

impl std::error::Error for Refusal {}

/// The system's perf_event_paranoid level, for messages.
pub fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Words an open failure the way a kernel developer needs it: which CPU, what the errno means here, and what
/// to do about it.
pub fn explain(e: &OpenError, watches: &[Watch]) -> Refusal {
    if let Some(tid) = e.tid {
        return explain_thread(e, tid, watches);
    }
    let cpu = e.cpu;
    let what = match watches {
        // `check`'s register probe, which arms no watch of the user's.
        [] => "a probe breakpoint".to_string(),
        [w] => format!("0x{:x}/{}", w.addr, w.len),
        _ => format!("{} watches", watches.len()),
    };
    let errno = e.err.raw_os_error().unwrap_or(0);
    let arm = |text: String, remedy| Refusal::new(ExitCode::Arm, text, remedy);
    let kernel = |text: &str| Remedy::Kernel(text.to_string());
    match (e.stage, errno) {
        (Stage::Bpf, _) => arm(
            format!("cpu {cpu}: cannot attach the BPF program to the breakpoint: {}", e.err),
            Remedy::NoBpf,
        ),
        (Stage::Mmap, _) => arm(
            format!("cpu {cpu}: cannot map the perf ring buffer: {}", e.err),
            Remedy::SmallerRing,
        ),
        (_, libc::ENOSPC) => arm(
            slots(cpu, watches.len().max(1)),
            kernel(
                "the others are in use (by perf, a debugger, another ksymwatch, or a task-bound watchpoint \
                 of any process, which takes one on every CPU); free some or watch fewer targets",
            ),
        ),
        (_, libc::EACCES | libc::EPERM) => Refusal::new(
            ExitCode::NotPermitted,
            format!("cpu {cpu}: not permitted to open a system-wide breakpoint ({})", e.err),
            Remedy::Kernel(format!(
                "run as root or grant CAP_PERFMON (kernel.perf_event_paranoid is {}; system-wide events \
                 need -1 or CAP_PERFMON)",
                paranoid()
            )),
        ),
        (_, libc::ENODEV) => arm(format!("cpu {cpu} went offline while arming"), Remedy::None),
        (_, libc::ENOENT | libc::EOPNOTSUPP) => Refusal::new(
            ExitCode::NotPermitted,
            format!("cpu {cpu}: this kernel has no hardware breakpoint PMU ({})", e.err),
            kernel("it needs CONFIG_HAVE_HW_BREAKPOINT and /sys/bus/event_source/devices/breakpoint"),
        ),
        (_, libc::EINVAL) => arm(
            format!(
                "cpu {cpu}: the kernel refuses a breakpoint at {what} (EINVAL): the address, length or \
                 access type is not watchable (kernel text cannot be watched for execution here; check \
                 alignment)"
            ),
            Remedy::None,
        ),
        (_, libc::EBUSY) => arm(
            format!("cpu {cpu}: breakpoint PMU busy ({})", e.err),
            kernel("retry"),
        ),
        _ => arm(
            format!("cpu {cpu}: cannot arm {what}: {}", io::Error::from_raw_os_error(errno)),
            Remedy::None,
        ),
    }
}

/// How many debug registers `cpu` has free now against the `needed` ones (one per target): counted by the
/// kernel's own accounting (disabled probe breakpoints opened until it refuses, then closed).
fn slots(cpu: u32, needed: usize) -> String {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    match crate::perf::event::free_slots(cpu) {
        Ok(free) if (free as usize) < needed => format!(
            "cpu {cpu} has {free} free debug register{}, {needed} needed",
            plural(free as usize)
        ),
        // Freed since the refusal (another holder let go): say what the refusal meant.
        Ok(_) | Err(_) => format!(
            "cpu {cpu} had fewer than the {needed} free debug register{} needed",
            plural(needed)
        ),
    }
}

/// [`explain`] for one thread's event of a process watch: the thread is named, since its own debug
/// registers (not the CPU's) are what ran out.
fn explain_thread(e: &OpenError, tid: u32, watches: &[Watch]) -> Refusal {
    let comm = std::fs::read_to_string(format!("/proc/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into());
    let who = format!("tid {tid} ({comm})");
    let arm = |text: String, remedy| Refusal::new(ExitCode::Arm, text, remedy);
    let kernel = |text: &str| Remedy::Kernel(text.to_string());
    match (e.stage, e.err.raw_os_error().unwrap_or(0)) {
        (Stage::Bpf, _) => arm(
            format!(
                "{who}, cpu {}: cannot attach the BPF program to the breakpoint: {}",
                e.cpu, e.err
            ),
            Remedy::NoBpf,
        ),
        (Stage::Mmap, _) => arm(
            format!(
                "{who}, cpu {}: cannot map or join the perf ring buffer: {}",
                e.cpu, e.err
            ),
            Remedy::SmallerRing,
        ),
        (_, libc::ENOSPC) => arm(
            format!(
                "{who}: all debug registers of this thread are in use (its own watchpoints, a debugger's, \
                 or another ksymwatch's)"
            ),
            kernel("free one or watch fewer targets"),
        ),
        (_, libc::EACCES | libc::EPERM) => Refusal::new(
            ExitCode::NotPermitted,
            format!(
                "{who}: not permitted to watch this thread ({}; kernel.perf_event_paranoid is {})",
                e.err,
                paranoid()
            ),
            kernel(
                "a user may watch only their own processes, from user space, with perf_event_paranoid 2 or \
                 less; run as root or grant CAP_PERFMON, and check kernel.yama.ptrace_scope",
            ),
        ),
        (_, libc::EMFILE | libc::ENFILE) => arm(
            format!(
                "{who}: out of file descriptors ({}): a process watch needs one per thread, CPU and target",
                e.err
            ),
            kernel("raise the limit (ulimit -n)"),
        ),
        _ => {
            // Any other refusal reads as it would for the CPU, with the thread named first.
            let on_cpu = OpenError {
                tid: None,
                err: io::Error::from_raw_os_error(e.err.raw_os_error().unwrap_or(0)),
                ..*e
            };
            let cpu_refusal = explain(&on_cpu, watches);
            Refusal {
                what: format!("{who}: {}", cpu_refusal.what),
                ..cpu_refusal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(stage: Stage, errno: i32) -> OpenError {
        OpenError {
            cpu: 1,
            tid: None,
            stage,
            err: io::Error::from_raw_os_error(errno),
        }
    }

    /// The kernel-terms text names the kernel's knobs and no command-line option.
    #[test]
    fn a_refusal_reads_in_kernel_terms() {
        let mmap = explain(&refused(Stage::Mmap, libc::ENOMEM), &[]).nothing_armed();
        assert_eq!(mmap.code, ExitCode::Arm);
        assert_eq!(mmap.remedy, Remedy::SmallerRing);
        let text = mmap.to_string();
        assert!(
            text.starts_with("cpu 1: cannot map the perf ring buffer: "),
            "{text}"
        );
        assert!(
            text.contains("RLIMIT_MEMLOCK / perf_event_mlock_kb; nothing was armed"),
            "{text}"
        );
        let bpf = explain(&refused(Stage::Bpf, libc::EINVAL), &[]);
        assert_eq!(bpf.remedy, Remedy::NoBpf);
        for r in [mmap, bpf] {
            assert!(!r.to_string().contains("--"), "{r}");
        }
    }

    /// A caller's wording of the remedy takes the kernel's place, before `nothing was armed`.
    #[test]
    fn the_callers_remedy_replaces_the_kernels() {
        let r = explain(&refused(Stage::Mmap, libc::ENOMEM), &[]).nothing_armed();
        let line = r.with_remedy(Some("use fewer pages"));
        assert!(
            line.ends_with(
                ": Cannot allocate memory (os error 12); use fewer pages; nothing was armed"
            ),
            "{line}"
        );
        let gone = explain(&refused(Stage::Open, libc::ENODEV), &[]);
        assert_eq!(gone.remedy, Remedy::None);
        assert_eq!(gone.to_string(), "cpu 1 went offline while arming");
    }
}
