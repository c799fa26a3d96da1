//! What the kernel's permission checks look at in this process, as plain data: whether it runs as root,
//! each capability that perf and BPF ask for, whether those count (only in the initial user namespace)
//! and kernel.perf_event_paranoid. One type for every refusal's wording: a breakpoint's
//! ([`crate::perf::denial`]) and a BPF program's ([`crate::perf::bpf::refused`]), so both tell root whose
//! capabilities were dropped (capsh, a container's or a service's capability set) which one is missing
//! instead of telling it to run as root. `perf::privilege` reads them.

/// This process's credentials, as the kernel's checks see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credentials {
    /// The effective uid is 0. Root's capabilities can be dropped, so being root proves none of them.
    pub root: bool,
    /// CAP_SYS_ADMIN in the effective set.
    pub cap_sys_admin: bool,
    /// CAP_PERFMON in the effective set.
    pub cap_perfmon: bool,
    /// CAP_BPF in the effective set.
    pub cap_bpf: bool,
    /// The process is in the initial user namespace: only there do its capabilities count for the
    /// kernel's `capable()`.
    pub initial_user_ns: bool,
    /// kernel.perf_event_paranoid, if readable.
    pub paranoid: Option<i32>,
}

impl Credentials {
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
        self.root && self.initial_user_ns
    }
}

/// The credentials the refusals' tests start from, written once.
#[cfg(test)]
impl Credentials {
    /// Root in the initial user namespace with every capability, kernel.perf_event_paranoid 2.
    pub(crate) const ROOT: Credentials = Credentials {
        root: true,
        cap_sys_admin: true,
        cap_perfmon: true,
        cap_bpf: true,
        initial_user_ns: true,
        paranoid: Some(2),
    };
    /// A user without any of the capabilities, in the initial user namespace, paranoid 2.
    pub(crate) const NOBODY: Credentials = Credentials {
        root: false,
        cap_sys_admin: false,
        cap_perfmon: false,
        cap_bpf: false,
        ..Credentials::ROOT
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: Credentials = Credentials::ROOT;

    /// CAP_SYS_ADMIN stands in for CAP_PERFMON and CAP_BPF; none counts outside the initial namespace.
    #[test]
    fn the_kernels_capability_rules() {
        assert!(ROOT.admin() && ROOT.perfmon() && ROOT.bpf());
        let admin_only = Credentials {
            cap_perfmon: false,
            cap_bpf: false,
            ..ROOT
        };
        assert!(admin_only.perfmon() && admin_only.bpf());
        let dropped = Credentials {
            cap_sys_admin: false,
            ..ROOT
        };
        assert!(!dropped.admin() && dropped.perfmon() && dropped.bpf());
        assert!(dropped.host_root());
        let container = Credentials {
            initial_user_ns: false,
            ..ROOT
        };
        assert!(!container.admin() && !container.perfmon() && !container.bpf());
        assert!(!container.host_root());
    }
}
