//! What the kernel's permission checks look at in this process, read once as plain data ([`Privilege`]):
//! the effective uid, each capability perf and BPF ask for, whether those count (only in the initial
//! user namespace) and kernel.perf_event_paranoid; and the kernel's rules on them (`capable()`,
//! `perfmon_capable()`, `bpf_capable()`). One type for every decision and every refusal's wording: whether
//! a watch may see the kernel or the whole system, decided up front so that an unprivileged user gets the
//! one message that matters (root or CAP_PERFMON, and the paranoid level) instead of an error about
//! kallsyms addresses being hidden from them, and why a breakpoint ([`crate::perf::denial`]) or a BPF
//! program ([`crate::perf::bpf::refused`]) was refused. Each rule counts a capability only in the initial
//! user namespace, as the kernel does, so a container's root is never told it may do what the kernel will
//! refuse it. The kernel remains the judge: an open can still fail later.

/// CAP_SYS_ADMIN, CAP_PERFMON and CAP_BPF bit numbers (linux/capability.h).
pub(crate) const CAP_SYS_ADMIN: u32 = 21;
pub(crate) const CAP_PERFMON: u32 = 38;
pub(crate) const CAP_BPF: u32 = 39;

/// This process's effective capabilities (`CapEff` in /proc/self/status) as a mask of bits by number;
/// none when it cannot be read.
pub(crate) fn effective_capabilities() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// This process's credentials, as the kernel's checks see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privilege {
    /// The effective uid. Root's capabilities can be dropped, so being root proves none of them.
    pub euid: u32,
    /// CAP_PERFMON in the effective set.
    pub cap_perfmon: bool,
    /// CAP_SYS_ADMIN in the effective set.
    pub cap_sys_admin: bool,
    /// CAP_BPF in the effective set.
    pub cap_bpf: bool,
    /// kernel.perf_event_paranoid, if readable.
    pub paranoid: Option<i32>,
    /// This process is in the initial user namespace, the only one whose capabilities the kernel's
    /// `capable()` checks count (told by the fixed inode number of its `/proc/self/ns/user`).
    pub initial_user_ns: bool,
}

/// `/proc/self/ns/user` in the initial user namespace: nsfs names a namespace by its inode number, and the
/// initial user namespace's is fixed (`PROC_USER_INIT_INO`, 0xEFFFFFFD, include/linux/proc_ns.h, since
/// Linux 3.8); every other user namespace gets a number allocated at its creation, never this one.
const INITIAL_USER_NS: &str = "user:[4026531837]";

/// Whether this process runs in the initial user namespace, where CapEff's capabilities are the ones
/// `capable()` (the kernel's breakpoint check for kernel addresses, `perfmon_capable()`) tests. Told by
/// the fixed inode number of the initial namespace ([`INITIAL_USER_NS`]), which a container cannot fake:
/// comparing with `/proc/1/ns/user` would not do (in a container with its own PID namespace, pid 1 is the
/// container's init, in the container's user namespace), and neither would a full identity
/// `/proc/self/uid_map` alone (a privileged runtime may map all ids into a child namespace). Only when the
/// link cannot be read is the uid map asked: a kernel without CONFIG_USER_NS has neither file and only the
/// initial namespace, so unreadable means initial.
pub(crate) fn in_initial_user_ns() -> bool {
    match std::fs::read_link("/proc/self/ns/user") {
        Ok(link) => link.as_os_str() == INITIAL_USER_NS,
        Err(_) => std::fs::read_to_string("/proc/self/uid_map").map_or(true, |m| identity_map(&m)),
    }
}

/// A uid_map that maps every id to itself (`0 0 4294967295`), as the initial namespace's does.
fn identity_map(map: &str) -> bool {
    let fields: Vec<&str> = map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

impl Privilege {
    pub fn current() -> Privilege {
        let cap_eff = effective_capabilities();
        Privilege {
            euid: crate::perf::sys::geteuid(),
            cap_perfmon: cap_eff & (1 << CAP_PERFMON) != 0,
            cap_sys_admin: cap_eff & (1 << CAP_SYS_ADMIN) != 0,
            cap_bpf: cap_eff & (1 << CAP_BPF) != 0,
            paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            initial_user_ns: in_initial_user_ns(),
        }
    }

    /// The effective uid is 0.
    pub fn root(&self) -> bool {
        self.euid == 0
    }

    /// `capable(CAP_SYS_ADMIN)`: what a kernel-space breakpoint needs.
    pub fn admin(&self) -> bool {
        self.cap_sys_admin && self.initial_user_ns
    }

    /// `perfmon_capable()`: CAP_PERFMON, or CAP_SYS_ADMIN standing in for it.
    pub fn perfmon(&self) -> bool {
        (self.cap_perfmon || self.cap_sys_admin) && self.initial_user_ns
    }

    /// `bpf_capable()`: CAP_BPF, or CAP_SYS_ADMIN standing in for it.
    pub fn bpf(&self) -> bool {
        (self.cap_bpf || self.cap_sys_admin) && self.initial_user_ns
    }

    /// Root in the initial user namespace: a capability it lacks was taken from its effective set
    /// (capsh, a service's or a container's capability set), so it is told which to keep, never to run as
    /// root.
    pub fn host_root(&self) -> bool {
        self.root() && self.initial_user_ns
    }

    /// kernel.perf_event_paranoid in words.
    fn paranoid_text(&self) -> String {
        self.paranoid
            .map_or("unreadable".to_string(), |p| p.to_string())
    }

    /// Whether events of this process may count kernel-mode activity: `perfmon_capable()` (root's
    /// CAP_PERFMON or CAP_SYS_ADMIN, in the initial user namespace), or kernel.perf_event_paranoid of 1 or
    /// less (the kernel's `perf_allow_kernel`). Otherwise a watch of one's own process sees user-space
    /// writers only (`exclude_kernel`).
    pub fn kernel_allowed(&self) -> bool {
        self.perfmon() || self.paranoid.is_some_and(|p| p <= 1)
    }

    /// The note for a process watch that sees user-space writers only ([`Privilege::kernel_allowed`] is
    /// false): why, and what would show the kernel's writes too.
    pub fn user_space_only_note(&self) -> String {
        let paranoid = self.paranoid_text();
        let limits =
            "watching user-space writers only; a kernel write into the process (read() into the \
                      variable) is not seen";
        if !self.initial_user_ns {
            return format!(
                "ksymwatch: note: this process runs in a user namespace of its own (a container), whose \
                 capabilities perf does not count, and kernel.perf_event_paranoid is {paranoid}: {limits}. \
                 Run it on the host as root or with CAP_PERFMON to see those"
            );
        }
        format!(
            "ksymwatch: note: not privileged (uid {}, kernel.perf_event_paranoid is {paranoid}): {limits}. \
             Run as root or with CAP_PERFMON to see those",
            self.euid
        )
    }

    /// `Err(message)` when a system-wide (pid = -1) breakpoint cannot be opened by this process:
    /// `perfmon_capable()` or kernel.perf_event_paranoid -1 is needed.
    pub fn system_wide(&self) -> Result<(), String> {
        if self.perfmon() || self.paranoid.is_some_and(|p| p < 0) {
            return Ok(());
        }
        let paranoid = self.paranoid_text();
        if !self.initial_user_ns {
            // Root of a container, CAP_PERFMON and all: the kernel counts none of it.
            return Err(format!(
                "system-wide breakpoints need CAP_PERFMON (or CAP_SYS_ADMIN) in the initial user namespace, \
                 and this process runs in a user namespace of its own (a container), whose capabilities \
                 perf does not count (kernel.perf_event_paranoid is {paranoid}); run it on the host with \
                 CAP_PERFMON, or set perf_event_paranoid to -1 on the host"
            ));
        }
        if self.root() {
            // Root without them had them dropped: running as root is what it already does.
            return Err(format!(
                "system-wide breakpoints need CAP_PERFMON (or CAP_SYS_ADMIN), and this process runs as root \
                 but without either in its effective capabilities (dropped by capsh, or a service's or a \
                 container's capability set; kernel.perf_event_paranoid is {paranoid}); run it with \
                 CAP_PERFMON kept, or set perf_event_paranoid to -1"
            ));
        }
        Err(format!(
            "system-wide breakpoints need root or CAP_PERFMON (running as uid {}, kernel.perf_event_paranoid is {paranoid}); \
             run with sudo, grant CAP_PERFMON (setcap cap_perfmon+ep), or set perf_event_paranoid to -1",
            self.euid,
        ))
    }
}

/// The privilege the tests of its users start from, written once.
#[cfg(test)]
impl Privilege {
    /// Root in the initial user namespace with every capability, kernel.perf_event_paranoid 2.
    pub(crate) const ROOT: Privilege = Privilege {
        euid: 0,
        cap_perfmon: true,
        cap_sys_admin: true,
        cap_bpf: true,
        paranoid: Some(2),
        initial_user_ns: true,
    };
    /// A user (uid 65534) without any of the capabilities, in the initial user namespace, paranoid 2.
    pub(crate) const NOBODY: Privilege = Privilege {
        euid: 65534,
        cap_perfmon: false,
        cap_sys_admin: false,
        cap_bpf: false,
        ..Privilege::ROOT
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(perfmon: bool, admin: bool, paranoid: Option<i32>) -> Privilege {
        Privilege {
            euid: 65534,
            cap_perfmon: perfmon,
            cap_sys_admin: admin,
            cap_bpf: false,
            paranoid,
            initial_user_ns: true,
        }
    }

    /// This test process (run as root here) is in the initial user namespace; the uid map's test is the
    /// fallback's.
    #[test]
    fn the_initial_user_namespace_is_told_by_its_inode() {
        if std::fs::read_link("/proc/self/ns/user").is_ok() {
            let mine = std::fs::read_link("/proc/self/ns/user").unwrap();
            assert_eq!(in_initial_user_ns(), mine.as_os_str() == INITIAL_USER_NS);
        }
        assert!(identity_map("         0          0 4294967295\n"));
        assert!(!identity_map("         0       1000          1\n"));
        assert!(!identity_map("         0     100000      65536\n"));
        assert!(!identity_map(""));
    }

    const ROOT: Privilege = Privilege::ROOT;

    /// Asserts that message `e` says every one of `has` and none of `lacks`.
    fn says(e: &str, has: &[&str], lacks: &[&str]) {
        for phrase in has {
            assert!(e.contains(phrase), "{phrase:?} missing from: {e}");
        }
        for phrase in lacks {
            assert!(!e.contains(phrase), "{phrase:?} in: {e}");
        }
    }

    /// CAP_SYS_ADMIN stands in for CAP_PERFMON and CAP_BPF; none counts outside the initial namespace.
    #[test]
    fn the_kernels_capability_rules() {
        assert!(ROOT.admin() && ROOT.perfmon() && ROOT.bpf());
        let admin_only = Privilege {
            cap_perfmon: false,
            cap_bpf: false,
            ..ROOT
        };
        assert!(admin_only.perfmon() && admin_only.bpf());
        let dropped = Privilege {
            cap_sys_admin: false,
            ..ROOT
        };
        assert!(!dropped.admin() && dropped.perfmon() && dropped.bpf());
        assert!(dropped.host_root());
        let container = Privilege {
            initial_user_ns: false,
            ..ROOT
        };
        assert!(!container.admin() && !container.perfmon() && !container.bpf());
        assert!(!container.host_root());
        assert!(!Privilege::NOBODY.root() && !Privilege::NOBODY.perfmon());
    }

    /// A process in a user namespace of its own holds its capabilities there only: perf counts none of
    /// them, so it may neither see the kernel nor watch the whole system unless perf_event_paranoid lets
    /// anyone, and it is told it is in a container, not that it lacks a capability it holds or that it
    /// should run as root, which it is.
    #[test]
    fn capabilities_in_a_user_namespace_of_its_own_do_not_count() {
        let container = |paranoid| Privilege {
            initial_user_ns: false,
            paranoid: Some(paranoid),
            ..ROOT
        };
        assert!(!container(2).kernel_allowed());
        let e = container(2).system_wide().unwrap_err();
        says(
            &e,
            &[
                "runs in a user namespace of its own (a container)",
                "perf_event_paranoid is 2",
                "run it on the host with CAP_PERFMON",
            ],
            &["dropped by capsh", "sudo"],
        );
        let note = container(2).user_space_only_note();
        assert!(
            note.starts_with("ksymwatch: note: this process runs in a user namespace of its own")
                && note.contains("watching user-space writers only")
                && note.ends_with("Run it on the host as root or with CAP_PERFMON to see those"),
            "{note}"
        );
        // What perf_event_paranoid allows anyone, it allows the container too.
        assert!(container(1).kernel_allowed() && container(1).system_wide().is_err());
        assert!(container(-1).system_wide().is_ok());
        // On the host, the note reads as it always did.
        assert_eq!(
            Privilege::NOBODY.user_space_only_note(),
            "ksymwatch: note: not privileged (uid 65534, kernel.perf_event_paranoid is 2): watching \
             user-space writers only; a kernel write into the process (read() into the variable) is not \
             seen. Run as root or with CAP_PERFMON to see those"
        );
    }

    #[test]
    fn decides_like_the_kernel() {
        assert!(p(true, false, Some(2)).system_wide().is_ok());
        assert!(p(false, true, Some(3)).system_wide().is_ok());
        assert!(p(false, false, Some(-1)).system_wide().is_ok());
        assert!(!p(false, false, Some(2)).kernel_allowed());
        assert!(p(false, false, Some(1)).kernel_allowed());
        assert!(p(true, false, Some(3)).kernel_allowed());
        let e = p(false, false, Some(2)).system_wide().unwrap_err();
        says(
            &e,
            &["CAP_PERFMON", "perf_event_paranoid is 2", "uid 65534"],
            &[],
        );
        // Root whose CAP_PERFMON and CAP_SYS_ADMIN were dropped is told which to keep, not to use sudo.
        let dropped = Privilege {
            euid: 0,
            ..p(false, false, Some(2))
        };
        let e = dropped.system_wide().unwrap_err();
        says(
            &e,
            &[
                "runs as root but without either",
                "run it with CAP_PERFMON kept",
                "perf_event_paranoid is 2",
            ],
            &["sudo"],
        );
    }
}
