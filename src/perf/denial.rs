//! Which of the kernel's rules refused a breakpoint with EPERM or EACCES, and how to say so: a pure
//! function of the errno, the kind of address (x86-64's kernel or user half), the process's
//! [`Privilege`] (root or not, CAP_SYS_ADMIN, CAP_PERFMON, counted only in the initial user namespace,
//! kernel.perf_event_paranoid) and whether the event is CPU-wide or bound to one thread, so that every
//! combination is tested without a kernel. Root refused for a missing capability is root whose
//! capabilities were dropped (capsh, a service's or a container's capability set): it is told which one
//! to keep, not to run as root. [`crate::perf::refusal`] gathers those facts and uses the wording.
//!
//! What the kernel checks, in order (kernel/events/core.c `perf_event_open`, kernel/events/hw_breakpoint.c
//! `hw_breakpoint_parse`, arch/x86/kernel/hw_breakpoint.c `arch_check_bp_in_kernelspace`):
//! - an event that counts the kernel needs `perfmon_capable()` (CAP_PERFMON or CAP_SYS_ADMIN) or
//!   perf_event_paranoid 1 or less, and a CPU-wide one `perfmon_capable()` or paranoid 0 or less; a thread
//!   of another user's process needs the right to ptrace it. Each refuses with EACCES; a security module
//!   (SELinux) or a seccomp filter refuses perf_event_open with EACCES or EPERM before any of them.
//! - a breakpoint any byte of which is at or above TASK_SIZE_MAX is a kernel-space one, and then
//!   `capable(CAP_SYS_ADMIN)` (in the initial user namespace), else EPERM. CAP_PERFMON is not enough.
//!   Some kernels (hardened VMs, sandboxes) refuse every kernel-space breakpoint with the same EPERM even
//!   with CAP_SYS_ADMIN: their own policy, which no privilege lifts.

use std::io;

/// x86-64's TASK_SIZE_MAX with 4-level paging: the user half ends one page below 2^47. The kernel counts a
/// breakpoint reaching this last page as a kernel-space one. (With 5-level paging the user half reaches
/// 2^56; no process maps memory above 2^47 unless it asks for it, so an address there is taken as the
/// kernel's.)
pub const TASK_SIZE_MAX: u64 = (1 << 47) - 4096;

/// Which half of the address space a breakpoint is in, as the kernel decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressKind {
    Kernel,
    User,
}

impl AddressKind {
    /// The kernel's `arch_check_bp_in_kernelspace`: kernel space when any byte of the range is at or above
    /// [`TASK_SIZE_MAX`].
    pub fn of(addr: u64, len: u8) -> AddressKind {
        let last = addr.saturating_add(u64::from(len.max(1)) - 1);
        if addr >= TASK_SIZE_MAX || last >= TASK_SIZE_MAX {
            AddressKind::Kernel
        } else {
            AddressKind::User
        }
    }
}

/// Who an event watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every task on one CPU (`pid = -1`).
    Cpu,
    /// One thread (`pid = tid`).
    Thread,
}

use crate::perf::privilege::Privilege;

/// The kernel's perf checks let a process with `creds` open a CPU-wide event that counts the kernel.
fn cpu_wide_allowed(creds: &Privilege) -> bool {
    creds.perfmon() || creds.paranoid.is_some_and(|p| p < 0)
}

/// Why the kernel said EPERM or EACCES to a breakpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// A kernel address, refused although CAP_SYS_ADMIN counts: this kernel refuses kernel-space
    /// breakpoints whatever the privilege (lockdown or a hypervisor's policy).
    KernelBreakpointsRefused,
    /// A kernel address without CAP_SYS_ADMIN in the initial user namespace.
    NeedsCapSysAdmin,
    /// Refused although the process holds what the kernel's own checks ask for: a seccomp filter or a
    /// security module said no before them (or, for a kernel address, EACCES with CAP_SYS_ADMIN: not the
    /// breakpoint check, which says EPERM).
    RefusedByPolicy,
    /// perf's privilege rules: root or CAP_PERFMON, perf_event_paranoid, another user's process.
    NotPermitted,
}

impl Denial {
    /// The name a script tests (`kind` in JSON; docs/outputs.md lists them).
    pub fn as_str(self) -> &'static str {
        match self {
            Denial::KernelBreakpointsRefused => "kernel_breakpoints_refused",
            Denial::NeedsCapSysAdmin => "needs_cap_sys_admin",
            Denial::RefusedByPolicy => "refused_by_policy",
            Denial::NotPermitted => "not_permitted",
        }
    }
}

/// Which rule refused a breakpoint at an address of `kind` (`None`: not known, taken as a user address),
/// for `scope`, with `errno`; `None` when the errno is neither EPERM nor EACCES.
pub fn classify(
    errno: i32,
    kind: Option<AddressKind>,
    scope: Scope,
    creds: &Privilege,
) -> Option<Denial> {
    if errno != libc::EPERM && errno != libc::EACCES {
        return None;
    }
    Some(match kind {
        Some(AddressKind::Kernel) if !creds.admin() => Denial::NeedsCapSysAdmin,
        Some(AddressKind::Kernel) if errno == libc::EPERM => Denial::KernelBreakpointsRefused,
        Some(AddressKind::Kernel) => Denial::RefusedByPolicy,
        _ if scope == Scope::Cpu && cpu_wide_allowed(creds) => Denial::RefusedByPolicy,
        _ => Denial::NotPermitted,
    })
}

/// A refusal in words: what was refused and why (`what`), and what still works or would help (`remedy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worded {
    pub denial: Denial,
    pub what: String,
    pub remedy: String,
}

/// One command that watches user space, for the messages that say user-space watches still work.
pub const USER_SPACE_EXAMPLE: &str = "ksymwatch write my_global -- ./my_program";

/// A refused breakpoint: who asked (`cpu 0`, `tid 12 (comm)`, `the new breakpoint`), the errno, the
/// breakpoint (address and length) when known, the event's scope and the process's credentials.
#[derive(Debug, Clone, Copy)]
pub struct Refused<'a> {
    pub who: &'a str,
    pub errno: i32,
    pub bp: Option<(u64, u8)>,
    pub scope: Scope,
    pub creds: Privilege,
}

/// The wording of an EPERM/EACCES refusal ([`classify`]'s rule, in words); `None` for any other errno.
pub fn word(r: &Refused<'_>) -> Option<Worded> {
    let kind = r.bp.map(|(addr, len)| AddressKind::of(addr, len));
    let denial = classify(r.errno, kind, r.scope, &r.creds)?;
    let who = r.who;
    let err = io::Error::from_raw_os_error(r.errno);
    let at = match r.bp {
        Some((addr, _)) => format!("0x{addr:x}"),
        None => "the address".to_string(),
    };
    let paranoid = r
        .creds
        .paranoid
        .map_or("unknown".to_string(), |p| p.to_string());
    // Capabilities held only in a user namespace of the process's own count for nothing here.
    let caps_elsewhere = (r.creds.cap_sys_admin || r.creds.cap_perfmon) && !r.creds.initial_user_ns;
    let (what, remedy) = match denial {
        Denial::KernelBreakpointsRefused => (
            format!(
                "{who}: this kernel refuses hardware breakpoints on kernel addresses (a kernel or \
                 hypervisor policy such as lockdown, not a missing privilege: this process has \
                 CAP_SYS_ADMIN, and {at} got {err})"
            ),
            format!(
                "user-space watches still work (`-p PID`, `-- CMD`, or a process's address system-wide), \
                 e.g. `{USER_SPACE_EXAMPLE}`"
            ),
        ),
        Denial::NeedsCapSysAdmin => {
            let (why, remedy) = without_cap_sys_admin(&r.creds);
            (
                format!(
                    "{who}: not permitted to set a breakpoint on kernel address {at} ({err}): {why}"
                ),
                remedy,
            )
        }
        Denial::RefusedByPolicy => {
            let held = if r.creds.admin() {
                "CAP_SYS_ADMIN"
            } else if r.creds.perfmon() {
                "CAP_PERFMON"
            } else {
                "perf_event_paranoid -1"
            };
            let space = match kind {
                Some(AddressKind::Kernel) => "kernel address",
                _ => "address",
            };
            (
                format!(
                    "{who}: the kernel refused a breakpoint on {space} {at} ({err}) although this process \
                     has {held}, which is all perf's own checks ask for: a security policy refuses \
                     perf_event_open here (a seccomp filter, as in a container's default profile, or a \
                     security module such as SELinux), not a missing privilege"
                ),
                "the policy must allow perf_event_open for this process".to_string(),
            )
        }
        Denial::NotPermitted => {
            let elsewhere = if caps_elsewhere {
                "; this process's capabilities are those of a user namespace of its own, which perf \
                 does not count"
            } else {
                ""
            };
            // Root without CAP_PERFMON and CAP_SYS_ADMIN had them dropped: running as root is what it
            // already does.
            let dropped = r.creds.host_root() && !r.creds.perfmon();
            let grant = if dropped {
                "this process runs as root, but without CAP_PERFMON or CAP_SYS_ADMIN in its effective \
                 capabilities (dropped by capsh, or a service's or a container's capability set): run it \
                 with CAP_PERFMON kept"
            } else {
                "run as root or grant CAP_PERFMON"
            };
            match r.scope {
                Scope::Cpu => (
                    format!("{who}: not permitted to open a system-wide breakpoint ({err}){elsewhere}"),
                    format!(
                        "{grant} (kernel.perf_event_paranoid is {paranoid}; system-wide events need -1 \
                         or CAP_PERFMON)"
                    ),
                ),
                Scope::Thread => (
                    format!(
                        "{who}: not permitted to watch this thread ({err}; kernel.perf_event_paranoid is \
                         {paranoid}){elsewhere}"
                    ),
                    if dropped {
                        format!("{grant}, and check kernel.yama.ptrace_scope")
                    } else {
                        "a user may watch only their own processes, from user space, with \
                         perf_event_paranoid 2 or less; run as root or grant CAP_PERFMON, and check \
                         kernel.yama.ptrace_scope"
                            .to_string()
                    },
                ),
            }
        }
    };
    Some(Worded {
        denial,
        what,
        remedy,
    })
}

/// Why a process with `creds` may not set a breakpoint on a kernel address, and what would let it: the
/// clause after the refusal (`kernel addresses need CAP_SYS_ADMIN ..., which this process does not
/// have`), and the remedy.
fn without_cap_sys_admin(creds: &Privilege) -> (String, String) {
    let why = if creds.cap_sys_admin {
        "which counts only in the initial user namespace, and this process holds it in a user namespace \
         of its own (a container)"
    } else if creds.host_root() {
        "which this process does not have: it runs as root, but without CAP_SYS_ADMIN in its effective \
         capabilities (dropped by capsh, or a service's or a container's capability set)"
    } else {
        "which this process does not have"
    };
    let remedy = if !creds.initial_user_ns {
        "run it on the host (in the initial user namespace) with CAP_SYS_ADMIN"
    } else if creds.host_root() {
        "run it with CAP_SYS_ADMIN kept"
    } else {
        "run as root with CAP_SYS_ADMIN"
    };
    (
        format!("kernel addresses need CAP_SYS_ADMIN (CAP_PERFMON is not enough), {why}"),
        format!("{remedy}; user-space watches (`-p PID`, `-- CMD`) do not need it"),
    )
}

/// The refusal of target `label` at kernel address `addr` in a watch whose events exclude the kernel
/// (a process watch without CAP_PERFMON at perf_event_paranoid 2: user-space writers only). Such an event
/// on a kernel address is EINVAL to the kernel, which arming would have called an unwatchable address;
/// the want is CAP_SYS_ADMIN, said before anything is armed.
pub fn kernel_address_in_user_space_watch(label: &str, addr: u64, creds: &Privilege) -> String {
    let (why, remedy) = without_cap_sys_admin(creds);
    format!(
        "`{label}` is at kernel address 0x{addr:x}, and this watch sees user-space writers only (no \
         CAP_PERFMON, kernel.perf_event_paranoid is {}): {why}; {remedy}",
        creds
            .paranoid
            .map_or("unreadable".to_string(), |p| p.to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: (u64, u8) = (0xffff_ffff_82e0_3e00, 8);
    const USER: (u64, u8) = (0x5600_b522_e180, 8);

    /// The kernel's boundary: the last user page already counts as the kernel's, and so does a range
    /// that reaches it.
    #[test]
    fn the_kernel_half_starts_at_task_size_max() {
        assert_eq!(AddressKind::of(0x7fff_ffff_efff, 1), AddressKind::User);
        assert_eq!(AddressKind::of(0x7fff_ffff_eff8, 8), AddressKind::User);
        assert_eq!(AddressKind::of(0x7fff_ffff_f000, 1), AddressKind::Kernel);
        assert_eq!(AddressKind::of(0x7fff_ffff_eff9, 8), AddressKind::Kernel);
        assert_eq!(AddressKind::of(KERNEL.0, 8), AddressKind::Kernel);
        assert_eq!(AddressKind::of(u64::MAX - 7, 8), AddressKind::Kernel);
        assert_eq!(AddressKind::of(0x10000, 8), AddressKind::User);
        assert_eq!(AddressKind::of(0, 0), AddressKind::User);
    }

    /// The rule for every combination of errno, address, scope, capabilities, namespace and paranoid level,
    /// stated once from the kernel's checks (see the module's docs) and compared with [`classify`].
    #[test]
    fn every_combination_gets_the_kernels_rule() {
        let mut seen = std::collections::BTreeSet::new();
        for c in combinations() {
            let admin = c.creds.cap_sys_admin && c.creds.initial_user_ns;
            let perfmon = (c.creds.cap_perfmon || c.creds.cap_sys_admin) && c.creds.initial_user_ns;
            let kind = c.bp.map(|(a, l)| AddressKind::of(a, l));
            let want = match (c.errno, kind) {
                (libc::EPERM | libc::EACCES, Some(AddressKind::Kernel)) if !admin => {
                    Some(Denial::NeedsCapSysAdmin)
                }
                (libc::EPERM, Some(AddressKind::Kernel)) => Some(Denial::KernelBreakpointsRefused),
                (libc::EACCES, Some(AddressKind::Kernel)) => Some(Denial::RefusedByPolicy),
                (libc::EPERM | libc::EACCES, _)
                    if c.scope == Scope::Cpu
                        && (perfmon || c.creds.paranoid.is_some_and(|p| p < 0)) =>
                {
                    Some(Denial::RefusedByPolicy)
                }
                (libc::EPERM | libc::EACCES, _) => Some(Denial::NotPermitted),
                _ => None,
            };
            assert_eq!(classify(c.errno, kind, c.scope, &c.creds), want, "{c:?}");
            let worded = word(&c);
            assert_eq!(worded.as_ref().map(|w| w.denial), want, "{c:?}");
            if let Some(w) = worded {
                seen.insert(w.denial.as_str());
                check_wording(&c, &w);
            }
        }
        assert_eq!(
            seen.len(),
            4,
            "every denial is reached by some combination: {seen:?}"
        );
    }

    /// What each wording must and must not say.
    fn check_wording(c: &Refused<'_>, w: &Worded) {
        let line = format!("{}; {}", w.what, w.remedy);
        let ctx = format!("{c:?}: {line}");
        assert!(line.starts_with(&format!("{}: ", c.who)), "{ctx}");
        assert!(
            line.contains(&io::Error::from_raw_os_error(c.errno).to_string()),
            "the errno is named: {ctx}"
        );
        assert!(!line.contains('\n'), "{ctx}");
        match w.denial {
            Denial::KernelBreakpointsRefused => {
                assert!(
                    w.what.contains(
                        "this kernel refuses hardware breakpoints on kernel addresses (a kernel or \
                         hypervisor policy such as lockdown, not a missing privilege"
                    ),
                    "{ctx}"
                );
                assert!(
                    w.remedy.contains("user-space watches still work")
                        && w.remedy.contains("`-p PID`")
                        && w.remedy.contains("`-- CMD`")
                        && w.remedy.contains("system-wide")
                        && w.remedy.contains(USER_SPACE_EXAMPLE),
                    "{ctx}"
                );
                // No privilege would help: none is asked for.
                assert!(
                    !line.contains("grant") && !line.contains("run as root"),
                    "{ctx}"
                );
            }
            Denial::NeedsCapSysAdmin => {
                assert!(
                    w.what.contains(
                        "kernel addresses need CAP_SYS_ADMIN (CAP_PERFMON is not enough)"
                    ),
                    "{ctx}"
                );
                assert_eq!(
                    w.what.contains("user namespace of its own"),
                    c.creds.cap_sys_admin,
                    "CAP_SYS_ADMIN held in a child namespace is named: {ctx}"
                );
                assert!(w.remedy.contains("user-space watches"), "{ctx}");
                assert!(!line.contains("grant CAP_PERFMON"), "{ctx}");
                // Root on the host lacks it only because it was dropped: told to keep it, never to run
                // as root; a container's root is sent to the host.
                let dropped = c.creds.root() && c.creds.initial_user_ns && !c.creds.cap_sys_admin;
                assert_eq!(
                    line.contains(
                        "runs as root, but without CAP_SYS_ADMIN in its effective capabilities"
                    ) && w.remedy.starts_with("run it with CAP_SYS_ADMIN kept;"),
                    dropped,
                    "{ctx}"
                );
                assert_eq!(
                    line.contains("run as root"),
                    !dropped && c.creds.initial_user_ns,
                    "{ctx}"
                );
            }
            Denial::RefusedByPolicy => {
                assert!(
                    w.what
                        .contains("a security policy refuses perf_event_open here")
                        && w.what.contains("not a missing privilege"),
                    "{ctx}"
                );
                assert!(!line.contains("grant"), "{ctx}");
            }
            Denial::NotPermitted => {
                let paranoid = c.creds.paranoid.map_or("unknown".into(), |p| p.to_string());
                // Root on the host without CAP_PERFMON (or CAP_SYS_ADMIN) had them dropped: it is told
                // to keep CAP_PERFMON; everyone else gets the privilege advice as before.
                let dropped = c.creds.root()
                    && c.creds.initial_user_ns
                    && !c.creds.cap_perfmon
                    && !c.creds.cap_sys_admin;
                let advice = if dropped {
                    "runs as root, but without CAP_PERFMON or CAP_SYS_ADMIN in its effective \
                     capabilities (dropped by capsh, or a service's or a container's capability set): \
                     run it with CAP_PERFMON kept"
                } else {
                    "run as root or grant CAP_PERFMON"
                };
                assert!(
                    line.contains(&format!("perf_event_paranoid is {paranoid}"))
                        && line.contains(advice),
                    "the privilege advice: {ctx}"
                );
                assert_eq!(line.contains("run as root"), !dropped, "{ctx}");
                let thread = line.contains("not permitted to watch this thread");
                assert_eq!(thread, c.scope == Scope::Thread, "{ctx}");
                assert_eq!(
                    line.contains("not permitted to open a system-wide breakpoint"),
                    c.scope == Scope::Cpu,
                    "{ctx}"
                );
                assert!(!line.contains("kernel addresses"), "{ctx}");
            }
        }
    }

    /// Every combination: errnos (the two permission ones and two others), kernel, user and unknown
    /// addresses, both scopes, every set of the two capabilities, root or not, in or out of the initial
    /// user namespace, and paranoid levels from -1 to 4 and unreadable.
    fn combinations() -> Vec<Refused<'static>> {
        let mut all = Vec::new();
        for errno in [libc::EPERM, libc::EACCES, libc::EINVAL, libc::ENOSPC] {
            for bp in [Some(KERNEL), Some(USER), None] {
                for scope in [Scope::Cpu, Scope::Thread] {
                    for bits in 0..16u8 {
                        for paranoid in
                            [None, Some(-1), Some(0), Some(1), Some(2), Some(3), Some(4)]
                        {
                            all.push(Refused {
                                who: if scope == Scope::Cpu {
                                    "cpu 1"
                                } else {
                                    "tid 42 (writer)"
                                },
                                errno,
                                bp,
                                scope,
                                creds: Privilege {
                                    euid: if bits & 8 != 0 { 0 } else { 1000 },
                                    cap_sys_admin: bits & 1 != 0,
                                    cap_perfmon: bits & 2 != 0,
                                    cap_bpf: false,
                                    initial_user_ns: bits & 4 != 0,
                                    paranoid,
                                },
                            });
                        }
                    }
                }
            }
        }
        all
    }

    /// A kernel address in a watch of user-space writers only is refused for the privilege it lacks.
    #[test]
    fn a_kernel_address_in_a_user_space_watch_needs_cap_sys_admin() {
        assert_eq!(
            kernel_address_in_user_space_watch("0xffffffff82e03e00", KERNEL.0, &Privilege::NOBODY),
            "`0xffffffff82e03e00` is at kernel address 0xffffffff82e03e00, and this watch sees user-space \
             writers only (no CAP_PERFMON, kernel.perf_event_paranoid is 2): kernel addresses need \
             CAP_SYS_ADMIN (CAP_PERFMON is not enough), which this process does not have; run as root \
             with CAP_SYS_ADMIN; user-space watches (`-p PID`, `-- CMD`) do not need it"
        );
    }

    /// The cases the issues name, as whole lines.
    #[test]
    fn the_named_cases_read_in_full() {
        let root = Privilege::ROOT;
        // Root whose CAP_SYS_ADMIN was dropped (`capsh --drop=cap_sys_admin`), and a user without it.
        let dropped = Privilege {
            cap_sys_admin: false,
            ..root
        };
        let no_admin = Privilege {
            euid: 1000,
            ..dropped
        };
        // The whole line a refusal of `bp` with `creds` reads: what happened, then the remedy.
        let line = |bp, creds| {
            let w = word(&Refused {
                who: "cpu 0",
                errno: libc::EPERM,
                bp: Some(bp),
                scope: Scope::Cpu,
                creds,
            })
            .unwrap();
            format!("{}; {}", w.what, w.remedy)
        };
        assert_eq!(
            line(KERNEL, root),
            "cpu 0: this kernel refuses hardware breakpoints on kernel addresses (a kernel or hypervisor \
             policy such as lockdown, not a missing privilege: this process has CAP_SYS_ADMIN, and \
             0xffffffff82e03e00 got Operation not permitted (os error 1)); user-space watches still work \
             (`-p PID`, `-- CMD`, or a process's address system-wide), e.g. `ksymwatch write my_global -- \
             ./my_program`"
        );
        // A user without CAP_SYS_ADMIN is told to run as root with it.
        assert_eq!(
            line(KERNEL, no_admin),
            "cpu 0: not permitted to set a breakpoint on kernel address 0xffffffff82e03e00 (Operation not \
             permitted (os error 1)): kernel addresses need CAP_SYS_ADMIN (CAP_PERFMON is not enough), \
             which this process does not have; run as root with CAP_SYS_ADMIN; user-space watches (`-p \
             PID`, `-- CMD`) do not need it"
        );
        // Root whose CAP_SYS_ADMIN was dropped is told to keep it.
        assert_eq!(
            line(KERNEL, dropped),
            "cpu 0: not permitted to set a breakpoint on kernel address 0xffffffff82e03e00 (Operation not \
             permitted (os error 1)): kernel addresses need CAP_SYS_ADMIN (CAP_PERFMON is not enough), \
             which this process does not have: it runs as root, but without CAP_SYS_ADMIN in its \
             effective capabilities (dropped by capsh, or a service's or a container's capability set); \
             run it with CAP_SYS_ADMIN kept; user-space watches (`-p PID`, `-- CMD`) do not need it"
        );
        let nobody = Privilege::NOBODY;
        assert_eq!(
            line(USER, nobody),
            "cpu 0: not permitted to open a system-wide breakpoint (Operation not permitted (os error 1)); \
             run as root or grant CAP_PERFMON (kernel.perf_event_paranoid is 2; system-wide events need \
             -1 or CAP_PERFMON)"
        );
        // Root without CAP_PERFMON and CAP_SYS_ADMIN (`capsh --drop=cap_perfmon,cap_sys_admin`).
        assert_eq!(
            line(
                USER,
                Privilege {
                    euid: 0,
                    ..nobody
                }
            ),
            "cpu 0: not permitted to open a system-wide breakpoint (Operation not permitted (os error 1)); \
             this process runs as root, but without CAP_PERFMON or CAP_SYS_ADMIN in its effective \
             capabilities (dropped by capsh, or a service's or a container's capability set): run it with \
             CAP_PERFMON kept (kernel.perf_event_paranoid is 2; system-wide events need -1 or CAP_PERFMON)"
        );
    }
}
