//! Whether this process may open system-wide perf events, decided up front so that an unprivileged user
//! gets the one message that matters (root or CAP_PERFMON, and the paranoid level) instead of an error about
//! kallsyms addresses being hidden from them. The kernel remains the judge: an open can still fail later.

/// CAP_SYS_ADMIN and CAP_PERFMON bit numbers (linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Privilege {
    pub euid: u32,
    pub cap_perfmon: bool,
    pub cap_sys_admin: bool,
    /// kernel.perf_event_paranoid, if readable.
    pub paranoid: Option<i32>,
}

impl Privilege {
    pub fn current() -> Privilege {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let cap_eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        Privilege {
            euid: crate::perf::sys::geteuid(),
            cap_perfmon: cap_eff & (1 << CAP_PERFMON) != 0,
            cap_sys_admin: cap_eff & (1 << CAP_SYS_ADMIN) != 0,
            paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .ok()
                .and_then(|s| s.trim().parse().ok()),
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
        Err(format!(
            "system-wide breakpoints need root or CAP_PERFMON (running as uid {}, kernel.perf_event_paranoid is {}); \
             run with sudo, grant CAP_PERFMON (setcap cap_perfmon+ep), or set perf_event_paranoid to -1",
            self.euid,
            self.paranoid.map_or("unreadable".to_string(), |p| p.to_string())
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(perfmon: bool, admin: bool, paranoid: Option<i32>) -> Privilege {
        Privilege {
            euid: 65534,
            cap_perfmon: perfmon,
            cap_sys_admin: admin,
            paranoid,
        }
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
    }
}
