//! Which hits are reported: `--comm`, `--tid`, `--exclude-idle`, `--kernel-only`, `--user-only`,
//! `--cgroup` (decided only in the kernel, by the hit program: see `crate::perf::bpf::cgroup`). Applied
//! before anything is named or printed; a dropped hit is only counted (as filtered), never printed,
//! summarized nor counted toward `--count`.

/// Where the writer ran when it touched the target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Place {
    #[default]
    Anywhere,
    Kernel,
    User,
}

/// Every condition must hold; each list admits any of its members, and an empty list admits all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub comms: Vec<String>,
    pub tids: Vec<u32>,
    pub exclude_idle: bool,
    pub place: Place,
    /// `--cgroup`: only writers in one of these cgroups or below (none: any).
    pub cgroups: Vec<crate::model::cgroup::Cgroup>,
}

impl Filter {
    /// Whether a hit by task `tid` named `comm`, which wrote from the kernel or not, is kept. `cgroups`
    /// is not checked here: a perf sample does not say the writer's cgroup, so only the hit program
    /// applies it (planning refuses `--cgroup` where there is none).
    pub fn admits(&self, tid: u32, in_kernel: bool, comm: &str) -> bool {
        if self.exclude_idle && tid == 0 {
            return false;
        }
        if !self.tids.is_empty() && !self.tids.contains(&tid) {
            return false;
        }
        if !self.comms.is_empty() && !self.comms.iter().any(|c| c == comm) {
            return false;
        }
        match self.place {
            Place::Anywhere => true,
            Place::Kernel => in_kernel,
            Place::User => !in_kernel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_condition_narrows() {
        let all = Filter::default();
        assert!(all.admits(0, true, "<idle>"));
        let f = Filter {
            exclude_idle: true,
            ..Filter::default()
        };
        assert!(!f.admits(0, true, "<idle>"));
        assert!(f.admits(5, true, "x"));
        let f = Filter {
            tids: vec![5, 6],
            ..Filter::default()
        };
        assert!(f.admits(6, false, "x") && !f.admits(7, false, "x"));
        let f = Filter {
            comms: vec!["writer".into(), "bash".into()],
            ..Filter::default()
        };
        assert!(f.admits(7, false, "bash") && !f.admits(7, false, "writ"));
        let k = Filter {
            place: Place::Kernel,
            ..Filter::default()
        };
        let u = Filter {
            place: Place::User,
            ..Filter::default()
        };
        assert!(k.admits(7, true, "x") && !k.admits(7, false, "x"));
        assert!(u.admits(7, false, "x") && !u.admits(7, true, "x"));
        let both = Filter {
            comms: vec!["writer".into()],
            place: Place::User,
            ..Filter::default()
        };
        assert!(!both.admits(7, true, "writer"));
    }
}
