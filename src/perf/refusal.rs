//! Why the kernel refused to arm a breakpoint, in the kernel's terms: which CPU or thread, what the errno
//! means there (counting the free debug registers, reading perf_event_paranoid), the exit code it calls
//! for, the [`Remedy`], and a [`Kind`] a script can test. A refusal of permission (EPERM, EACCES) is worded
//! by [`crate::perf::denial`] from the address, the capabilities and the event's scope. Arming's own
//! reasons for arming nothing ([`Failure`]: a refused event, no register free for `--on`, every CPU
//! offline, every process gone) are worded here too. A remedy that is a command-line option is left as a
//! kind for the layer that knows the command line to name; [`Refusal`]'s own `Display` words it as a
//! kernel setting.

use std::collections::BTreeSet;
use std::fmt;
use std::io;

use crate::error::ExitCode;
use crate::model::watch::Watch;
use crate::perf::denial::{self, Denial, Scope};
use crate::perf::event::{OpenError, Stage};
use crate::perf::privilege::Privilege;

/// What kind of refusal it was, by name: what JSON's `kind` says (docs/outputs.md lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A refusal of permission, by the rule [`crate::perf::denial`] found.
    Denied(Denial),
    /// ENOSPC: every debug register of the CPU (or of the thread) is taken.
    NoFreeDebugRegister,
    /// ENOENT/EOPNOTSUPP: no breakpoint PMU.
    NoBreakpointPmu,
    /// EINVAL: the address, length or access is not watchable.
    InvalidBreakpoint,
    /// ENODEV, or every CPU went offline while arming.
    CpuOffline,
    /// The ring buffer could not be mapped or joined.
    RingBuffer,
    /// The BPF program could not be attached.
    Bpf,
    /// EBUSY.
    Busy,
    /// EMFILE/ENFILE.
    OutOfFiles,
    /// Anything else.
    Other,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Denied(d) => d.as_str(),
            Kind::NoFreeDebugRegister => "no_free_debug_register",
            Kind::NoBreakpointPmu => "no_breakpoint_pmu",
            Kind::InvalidBreakpoint => "invalid_breakpoint",
            Kind::CpuOffline => "cpu_offline",
            Kind::RingBuffer => "ring_buffer",
            Kind::Bpf => "bpf",
            Kind::Busy => "busy",
            Kind::OutOfFiles => "out_of_files",
            Kind::Other => "other",
        }
    }
}

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
    pub kind: Kind,
    /// What was refused, with the errno, e.g. `cpu 0: cannot map the perf ring buffer: ...`.
    pub what: String,
    pub remedy: Remedy,
    /// Refused as part of an all-or-nothing arming: every event opened was closed again.
    pub nothing_armed: bool,
}

impl Refusal {
    fn new(code: ExitCode, kind: Kind, what: String, remedy: Remedy) -> Refusal {
        Refusal {
            code,
            kind,
            what,
            remedy,
            nothing_armed: false,
        }
    }

    fn arm(kind: Kind, what: impl Into<String>) -> Refusal {
        Refusal::new(ExitCode::Arm, kind, what.into(), Remedy::None)
    }

    /// A refusal of permission as [`denial::word`] words it: not permitted (exit 4).
    fn denied(w: denial::Worded) -> Refusal {
        Refusal::new(
            ExitCode::NotPermitted,
            Kind::Denied(w.denial),
            w.what,
            Remedy::Kernel(w.remedy),
        )
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

/// What the wording of a refusal depends on besides the error itself, read from the system by [`explain`]
/// (a test gives them): the process's credentials (a refusal of permission is worded from them) and, after
/// a CPU had no debug register free, how many it has free now.
#[derive(Debug, Clone, Copy)]
pub struct Facts {
    pub creds: Privilege,
    /// Counted by the kernel's own accounting (disabled probe breakpoints opened until it refuses, then
    /// closed); `None` where not counted. For a thread's event, what the CPU's CPU-wide breakpoints leave
    /// to a thread on that CPU ([`crate::perf::probe::free_thread_slots`]).
    pub free_registers: Option<u32>,
}

impl Facts {
    /// The facts about `e`, read now.
    pub fn read(e: &OpenError) -> Facts {
        Facts {
            creds: Privilege::current(),
            free_registers: crate::perf::probe::free_after(e),
        }
    }
}

/// Words an open failure the way a kernel developer needs it: which CPU, what the errno means here, and what
/// to do about it.
pub fn explain(e: &OpenError, watches: &[Watch]) -> Refusal {
    explain_as(e, watches, Facts::read(e))
}

/// [`explain`] with the facts given: a pure function of the error, the watches and `facts`.
pub fn explain_as(e: &OpenError, watches: &[Watch], facts: Facts) -> Refusal {
    let creds = facts.creds;
    if let Some(tid) = e.tid {
        return explain_thread(e, tid, watches, facts);
    }
    let cpu = e.cpu;
    let what = match watches {
        // `check`'s register probe, which arms no watch of the user's.
        [] => "a probe breakpoint".to_string(),
        [w] => format!("0x{:x}/{}", w.addr, w.len),
        _ => format!("{} watches", watches.len()),
    };
    let errno = e.err.raw_os_error().unwrap_or(0);
    let arm = |kind, text: String, remedy| Refusal::new(ExitCode::Arm, kind, text, remedy);
    let kernel = |text: &str| Remedy::Kernel(text.to_string());
    match (e.stage, errno) {
        (Stage::Bpf, _) => arm(
            Kind::Bpf,
            format!("cpu {cpu}: cannot attach the BPF program to the breakpoint: {}", e.err),
            Remedy::NoBpf,
        ),
        (Stage::Mmap, _) => arm(
            Kind::RingBuffer,
            format!("cpu {cpu}: cannot map the perf ring buffer: {}", e.err),
            Remedy::SmallerRing,
        ),
        (_, libc::ENOSPC) => arm(
            Kind::NoFreeDebugRegister,
            slots(cpu, watches.len().max(1), facts.free_registers),
            kernel(
                "the others are in use (by perf, a debugger, another ksymwatch, or a task-bound watchpoint \
                 of any process, which takes one on every CPU); free some or watch fewer targets",
            ),
        ),
        (_, libc::EACCES | libc::EPERM) => denied(&format!("cpu {cpu}"), e, Scope::Cpu, creds),
        (_, libc::ENODEV) => arm(
            Kind::CpuOffline,
            format!("cpu {cpu} went offline while arming"),
            Remedy::None,
        ),
        (_, libc::ENOENT | libc::EOPNOTSUPP) => Refusal::new(
            ExitCode::NotPermitted,
            Kind::NoBreakpointPmu,
            format!("cpu {cpu}: this kernel has no hardware breakpoint PMU ({})", e.err),
            kernel("it needs CONFIG_HAVE_HW_BREAKPOINT and /sys/bus/event_source/devices/breakpoint"),
        ),
        (_, libc::EINVAL) => arm(
            Kind::InvalidBreakpoint,
            format!(
                "cpu {cpu}: the kernel refuses a breakpoint at {what} (EINVAL): the address, length or \
                 access type is not watchable (kernel text cannot be watched for execution here; check \
                 alignment)"
            ),
            Remedy::None,
        ),
        (_, libc::EBUSY) => arm(
            Kind::Busy,
            format!("cpu {cpu}: breakpoint PMU busy ({})", e.err),
            kernel("retry"),
        ),
        _ => arm(
            Kind::Other,
            format!("cpu {cpu}: cannot arm {what}: {}", io::Error::from_raw_os_error(errno)),
            Remedy::None,
        ),
    }
}

/// Why an arming armed nothing (`perf::arm`'s transaction, every event it opened closed again), before
/// it is worded ([`Failure::explain`]).
#[derive(Debug)]
pub enum Failure {
    /// The kernel refused an event (everything opened before was closed).
    Open(OpenError),
    /// Counting the debug registers free for `--on`'s watches, the kernel refused the first one outright
    /// (not for want of a register): refused as arming it would be.
    Probe(OpenError),
    /// `--on` found no debug register free on every CPU.
    NoFreeSlot,
    /// Every requested CPU went offline while arming.
    AllOffline(BTreeSet<u32>),
}

impl Failure {
    /// The refusal to report, `watches` being what was to be armed; `facts` reads what the wording of
    /// the kernel's refusal depends on ([`Facts`]), asked now, after the rollback.
    pub fn explain(&self, watches: &[Watch], facts: impl FnOnce(&OpenError) -> Facts) -> Refusal {
        match self {
            Failure::Open(e) => explain_as(e, watches, facts(e)).nothing_armed(),
            Failure::Probe(e) => {
                explain_as(e, &watches[..watches.len().min(1)], facts(e)).nothing_armed()
            }
            Failure::NoFreeSlot => Refusal::arm(
                Kind::NoFreeDebugRegister,
                "--on needs a free debug register on every CPU, and every one is in use (perf, gdb, another \
                 watch); stop one and run again",
            ),
            Failure::AllOffline(cpus) => Refusal::arm(
                Kind::CpuOffline,
                format!(
                    "no CPU could be armed: every requested CPU ({}) went offline",
                    crate::cpulist::format(cpus)
                ),
            ),
        }
    }

    /// Whether it says what the run would be told whenever it ran: a refusal of permission, or of the
    /// breakpoint itself. What only says how the machine is now (every debug register taken, a CPU going
    /// offline, the PMU busy, no descriptor left) does not: the run may well not
    /// meet it.
    pub fn lasting(&self) -> bool {
        let passing = [
            libc::ENOSPC,
            libc::ENODEV,
            libc::EBUSY,
            libc::EMFILE,
            libc::ENFILE,
            libc::EINTR,
        ];
        match self {
            Failure::Open(e) | Failure::Probe(e) => {
                !passing.contains(&e.err.raw_os_error().unwrap_or(0))
            }
            Failure::NoFreeSlot | Failure::AllOffline(_) => false,
        }
    }
}

/// An EPERM/EACCES refusal of `e`'s breakpoint, worded by [`denial::word`] for `who`.
fn denied(who: &str, e: &OpenError, scope: Scope, creds: Privilege) -> Refusal {
    let refused = denial::Refused {
        who,
        errno: e.err.raw_os_error().unwrap_or(0),
        bp: e.bp,
        scope,
        creds,
    };
    match denial::word(&refused) {
        Some(w) => Refusal::denied(w),
        // Not a permission errno after all: said as the kernel said it.
        None => Refusal::new(
            ExitCode::NotPermitted,
            Kind::Other,
            format!("{who}: {}", e.err),
            Remedy::None,
        ),
    }
}

/// A `--control` move the kernel refused (`PERF_EVENT_IOC_MODIFY_ATTRIBUTES` checks a breakpoint as an
/// open does): a refusal of permission is worded as at arming, anything else as the kernel said it.
/// `scope`: the events' (one per CPU, or one per thread).
pub fn explain_move(err: &io::Error, watch: &Watch, scope: Scope) -> Refusal {
    let refused = denial::Refused {
        who: "the new breakpoint",
        errno: err.raw_os_error().unwrap_or(0),
        bp: Some((watch.addr, watch.len)),
        scope,
        creds: Privilege::current(),
    };
    match denial::word(&refused) {
        Some(w) => Refusal::denied(w),
        None => {
            let kind = match err.raw_os_error() {
                Some(libc::ENOSPC) => Kind::NoFreeDebugRegister,
                Some(libc::EINVAL) => Kind::InvalidBreakpoint,
                _ => Kind::Other,
            };
            Refusal::arm(
                kind,
                format!("the kernel refused the new breakpoint: {err}"),
            )
        }
    }
}

/// How many debug registers `cpu` has `free` now against the `needed` ones (one per target).
fn slots(cpu: u32, needed: usize, free: Option<u32>) -> String {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    match free {
        Some(free) if (free as usize) < needed => format!(
            "cpu {cpu} has {free} free debug register{}, {needed} needed",
            plural(free as usize)
        ),
        // Freed since the refusal (another holder let go), or not counted: say what the refusal meant.
        Some(_) | None => format!(
            "cpu {cpu} had fewer than the {needed} free debug register{} needed",
            plural(needed)
        ),
    }
}

/// [`explain`] for one thread's event of a process watch: the thread is named, since its own debug
/// registers (not the CPU's) are what ran out.
fn explain_thread(e: &OpenError, tid: u32, watches: &[Watch], facts: Facts) -> Refusal {
    let creds = facts.creds;
    let comm = std::fs::read_to_string(format!("/proc/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into());
    let who = format!("tid {tid} ({comm})");
    let arm = |kind, text: String, remedy| Refusal::new(ExitCode::Arm, kind, text, remedy);
    let kernel = |text: &str| Remedy::Kernel(text.to_string());
    match (e.stage, e.err.raw_os_error().unwrap_or(0)) {
        (Stage::Bpf, _) => arm(
            Kind::Bpf,
            format!(
                "{who}, cpu {}: cannot attach the BPF program to the breakpoint: {}",
                e.cpu, e.err
            ),
            Remedy::NoBpf,
        ),
        (Stage::Mmap, _) => arm(
            Kind::RingBuffer,
            format!(
                "{who}, cpu {}: cannot map or join the perf ring buffer: {}",
                e.cpu, e.err
            ),
            Remedy::SmallerRing,
        ),
        // The kernel counts a thread's breakpoint on a CPU against the CPU's CPU-wide ones and the
        // thread's own: which of them is full decides what to free.
        (_, libc::ENOSPC)
            if facts
                .free_registers
                .is_some_and(|free| (free as usize) < watches.len().max(1)) =>
        {
            arm(
                Kind::NoFreeDebugRegister,
                format!(
                    "{who}: {}",
                    slots(e.cpu, watches.len().max(1), facts.free_registers)
                ),
                kernel(
                    "the others are in use by breakpoints of that CPU (perf record -a, another ksymwatch's \
                     system-wide watch); free some or watch fewer targets",
                ),
            )
        }
        (_, libc::ENOSPC) => arm(
            Kind::NoFreeDebugRegister,
            format!(
                "{who}: all debug registers of this thread are in use (its own watchpoints, a debugger's, \
                 or another ksymwatch's)"
            ),
            kernel("free one or watch fewer targets"),
        ),
        (_, libc::EACCES | libc::EPERM) => denied(&who, e, Scope::Thread, creds),
        (_, libc::EMFILE | libc::ENFILE) => arm(
            Kind::OutOfFiles,
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
            let cpu_refusal = explain_as(&on_cpu, watches, facts);
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

    fn watch() -> Watch {
        Watch {
            label: "x".into(),
            addr: 0x5600_0000_1000,
            len: 8,
            access: crate::model::watch::Access::Write,
            module: None,
            per_cpu: None,
        }
    }

    fn refused(stage: Stage, errno: i32) -> OpenError {
        OpenError {
            cpu: 1,
            tid: None,
            stage,
            err: io::Error::from_raw_os_error(errno),
            bp: None,
        }
    }

    const ROOT: Privilege = Privilege::ROOT;

    /// The facts of a process with `creds` whose free registers were not counted.
    fn facts(creds: Privilege) -> Facts {
        Facts {
            creds,
            free_registers: None,
        }
    }

    /// The facts of a root session whose CPU has `free` debug registers left (`None`: not counted).
    fn with_free(free: Option<u32>) -> Facts {
        Facts {
            free_registers: free,
            ..facts(ROOT)
        }
    }

    /// Asserts that `full` on `watches` says `said` when the CPU had enough free registers after all, or
    /// they were not counted: the refusal is then worded as the kernel meant it, not from the count.
    fn assert_uncounted_says(full: &OpenError, watches: &[Watch], said: &str) {
        for free in [Some(4), None] {
            let r = explain_as(full, watches, with_free(free));
            assert!(r.what.contains(said), "{}", r.what);
        }
    }

    /// A CPU without a free debug register is told with the count made after the refusal; one freed since
    /// (or not counted) is told as the refusal meant it.
    #[test]
    fn a_full_cpu_is_told_with_its_free_registers() {
        let full = refused(Stage::Open, libc::ENOSPC);
        let two = [watch(), watch()];
        let r = explain_as(&full, &two, with_free(Some(1)));
        assert_eq!((r.code, r.kind), (ExitCode::Arm, Kind::NoFreeDebugRegister));
        assert!(
            r.what.contains("cpu 1 has 1 free debug register, 2 needed"),
            "{}",
            r.what
        );
        assert_uncounted_says(
            &full,
            &two,
            "cpu 1 had fewer than the 2 free debug registers needed",
        );
    }

    /// A thread's event refused for want of a register names the CPU when the CPU-wide breakpoints there
    /// leave a thread fewer registers than the watch needs (`perf record -a` or another system-wide watch
    /// on that CPU), and the thread only when they leave enough (its own watchpoints, or a debugger's).
    #[test]
    fn a_thread_refused_for_a_full_cpu_names_the_cpu() {
        let full = OpenError {
            tid: Some(u32::MAX - 1),
            ..refused(Stage::Open, libc::ENOSPC)
        };
        let three = [watch(), watch(), watch()];
        let r = explain_as(&full, &three, with_free(Some(2))).nothing_armed();
        assert_eq!((r.code, r.kind), (ExitCode::Arm, Kind::NoFreeDebugRegister));
        assert_eq!(
            r.to_string(),
            format!(
                "tid {} (?): cpu 1 has 2 free debug registers, 3 needed; the others are in use by \
                 breakpoints of that CPU (perf record -a, another ksymwatch's system-wide watch); free \
                 some or watch fewer targets; nothing was armed",
                u32::MAX - 1
            )
        );
        assert_uncounted_says(
            &full,
            &three,
            "all debug registers of this thread are in use",
        );
    }

    /// A refusal of permission is worded from the breakpoint's address: every place that arms (the first
    /// arming, a CPU that came online, `--on`'s slots, `check`) goes through here, so each says the same.
    #[test]
    fn a_refused_kernel_address_is_named_wherever_it_is_armed() {
        let kernel = OpenError {
            bp: Some((0xffff_ffff_82e0_3e00, 8)),
            ..refused(Stage::Open, libc::EPERM)
        };
        let r = explain_as(&kernel, &[], facts(ROOT)).nothing_armed();
        assert_eq!(r.code, ExitCode::NotPermitted);
        assert_eq!(r.kind, Kind::Denied(Denial::KernelBreakpointsRefused));
        assert_eq!(r.kind.as_str(), "kernel_breakpoints_refused");
        let text = r.to_string();
        assert!(
            text.starts_with(
                "cpu 1: this kernel refuses hardware breakpoints on kernel addresses (a kernel or \
                 hypervisor policy such as lockdown, not a missing privilege"
            ) && text.ends_with("./my_program`; nothing was armed"),
            "{text}"
        );
        let no_admin = Privilege {
            cap_sys_admin: false,
            ..ROOT
        };
        let r = explain_as(&kernel, &[], facts(no_admin));
        assert_eq!(r.kind.as_str(), "needs_cap_sys_admin");
        assert_eq!(r.code, ExitCode::NotPermitted);
        // A thread's event says the same, with the thread named.
        let thread = OpenError {
            tid: Some(u32::MAX - 1),
            ..kernel
        };
        let r = explain_as(&thread, &[], facts(ROOT));
        assert_eq!(r.kind.as_str(), "kernel_breakpoints_refused");
        assert!(
            r.what
                .starts_with(&format!("tid {} (?): this kernel refuses", u32::MAX - 1)),
            "{}",
            r.what
        );
        // A user address keeps perf's privilege advice.
        let user = OpenError {
            bp: Some((0x5600_0000_1000, 8)),
            ..refused(Stage::Open, libc::EACCES)
        };
        let r = explain_as(&user, &[], facts(Privilege::NOBODY));
        assert_eq!(r.kind.as_str(), "not_permitted");
        assert!(
            r.to_string().contains("run as root or grant CAP_PERFMON"),
            "{r}"
        );
    }

    /// A refused move (`--control`) is worded as arming is; another errno as the kernel said it.
    #[test]
    fn a_refused_move_names_the_rule_or_the_errno() {
        let w = watch();
        let r = explain_move(&io::Error::from_raw_os_error(libc::EINVAL), &w, Scope::Cpu);
        assert_eq!(r.kind, Kind::InvalidBreakpoint);
        assert_eq!(
            r.to_string(),
            "the kernel refused the new breakpoint: Invalid argument (os error 22)"
        );
        let r = explain_move(&io::Error::from_raw_os_error(libc::EPERM), &w, Scope::Cpu);
        assert_eq!(r.code, ExitCode::NotPermitted);
        assert!(r.what.starts_with("the new breakpoint: "), "{}", r.what);
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
