//! Whether this process may open system-wide perf events, decided up front so that an unprivileged user
//! gets the one message that matters (root or CAP_PERFMON, and the paranoid level) instead of an error about
//! kallsyms addresses being hidden from them. The kernel remains the judge: an open can still fail later.
//! It also gives [`crate::perf::denial`] and [`crate::perf::bpf::refused`] what the kernel checks when it
//! refuses a breakpoint or a BPF program ([`Privilege::credentials`]).

use crate::perf::credentials::Credentials;

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Privilege {
    pub euid: u32,
    pub cap_perfmon: bool,
    pub cap_sys_admin: bool,
    pub cap_bpf: bool,
    /// kernel.perf_event_paranoid, if readable.
    pub paranoid: Option<i32>,
    /// This process is in the initial user namespace, the only one whose capabilities the kernel's
    /// `capable()` checks count ([`in_initial_user_ns`]).
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

    /// What the kernel's breakpoint and BPF checks look at in this process.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            root: self.euid == 0,
            cap_sys_admin: self.cap_sys_admin,
            cap_perfmon: self.cap_perfmon,
            cap_bpf: self.cap_bpf,
            initial_user_ns: self.initial_user_ns,
            paranoid: self.paranoid,
        }
    }

    /// Whether events of this process may count kernel-mode activity: root/CAP_PERFMON, or
    /// kernel.perf_event_paranoid of 1 or less. Otherwise a watch of one's own process sees user-space
    /// writers only (`exclude_kernel`).
    pub fn kernel_allowed(&self) -> bool {
        self.cap_perfmon || self.cap_sys_admin || self.paranoid.is_some_and(|p| p <= 1)
    }

    /// `Err(message)` when a system-wide (pid = -1) breakpoint cannot be opened by this process.
    pub fn system_wide(&self) -> Result<(), String> {
        if self.cap_perfmon || self.cap_sys_admin || self.paranoid.is_some_and(|p| p < 0) {
            return Ok(());
        }
        let paranoid = self
            .paranoid
            .map_or("unreadable".to_string(), |p| p.to_string());
        if self.euid == 0 {
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

    #[test]
    fn decides_like_the_kernel() {
        assert!(p(true, false, Some(2)).system_wide().is_ok());
        assert!(p(false, true, Some(3)).system_wide().is_ok());
        assert!(p(false, false, Some(-1)).system_wide().is_ok());
        assert!(!p(false, false, Some(2)).kernel_allowed());
        assert!(p(false, false, Some(1)).kernel_allowed());
        assert!(p(true, false, Some(3)).kernel_allowed());
        let e = p(false, false, Some(2)).system_wide().unwrap_err();
        assert!(
            e.contains("CAP_PERFMON")
                && e.contains("perf_event_paranoid is 2")
                && e.contains("uid 65534"),
            "{e}"
        );
        // Root whose CAP_PERFMON and CAP_SYS_ADMIN were dropped is told which to keep, not to use sudo.
        let dropped = Privilege {
            euid: 0,
            ..p(false, false, Some(2))
        };
        let e = dropped.system_wide().unwrap_err();
        assert!(
            e.contains("runs as root but without either")
                && e.contains("run it with CAP_PERFMON kept")
                && e.contains("perf_event_paranoid is 2")
                && !e.contains("sudo"),
            "{e}"
        );
    }
}
