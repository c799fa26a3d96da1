//! Which hits are reported: `--comm`, `--tid`, `--exclude-idle`, `--kernel-only`, `--user-only`,
//! `--cgroup` (decided only in the kernel, by the hit program: see `crate::perf::bpf::cgroup`). Applied
//! before anything is named or printed; a dropped hit is only counted (as filtered), never printed,
//! summarized nor counted toward `--count`.

/// The name a hit by the idle task (tid 0) carries, the one `--comm` matches: the tracer's, in the
/// kernel's programs too (the kernel's own is `swapper/N`).
pub const IDLE_COMM: &str = "<idle>";

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

/// The threads of a process watch's processes, with their names, read in planning when `--tid`/`--comm`
/// must match one of them ([`Filter::unmatched`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub pids: Vec<u32>,
    pub threads: Vec<(u32, String)>,
}

/// How many of the watched threads [`Filter::admits_no_thread`] names before it only counts them.
const THREADS_NAMED: usize = 8;

impl Filter {
    /// Whether `--tid` or `--comm` names the tasks whose hits are kept: a process watch's threads are then
    /// read for [`Filter::unmatched`].
    pub fn names_tasks(&self) -> bool {
        !self.tids.is_empty() || !self.comms.is_empty()
    }

    /// The line that says the `--tid`/`--comm` conditions match no thread of `watched` now
    /// ([`Filter::admits_no_thread`], `whose` being `process 42` or `processes 42, 43`).
    pub fn unmatched(&self, watched: &Watched) -> Option<String> {
        let list: Vec<String> = watched.pids.iter().map(u32::to_string).collect();
        let noun = match watched.pids.len() {
            1 => "process",
            _ => "processes",
        };
        self.admits_no_thread(&watched.threads, &format!("{noun} {}", list.join(", ")))
    }

    /// The `--tid`/`--comm` conditions in words: each list admits any of its members, and both must
    /// hold (`--tid 5 or --tid 6 and --comm writer`); empty when there are none.
    fn task_conditions(&self) -> String {
        let any = |flag: &str, members: Vec<String>| {
            members
                .iter()
                .map(|m| format!("{flag} {m}"))
                .collect::<Vec<_>>()
                .join(" or ")
        };
        let tids = any("--tid", self.tids.iter().map(u32::to_string).collect());
        let comms = any("--comm", self.comms.clone());
        match (tids.is_empty(), comms.is_empty()) {
            (false, false) => format!("{tids} and {comms}"),
            _ => tids + &comms,
        }
    }

    /// One line for when the `--tid`/`--comm` conditions admit none of `threads` (tid and name of every
    /// thread of the watched processes, `whose` says which: `process 42`), naming the conditions and the
    /// threads there; `None` when one thread is admitted, or there are no such conditions. A thread may
    /// start or be renamed later, so this is said, not refused: until then every hit is filtered out
    /// without a word, which is what this line is for.
    pub fn admits_no_thread(&self, threads: &[(u32, String)], whose: &str) -> Option<String> {
        let conditions = self.task_conditions();
        if conditions.is_empty() {
            return None;
        }
        let admitted = |(tid, comm): &(u32, String)| {
            (self.tids.is_empty() || self.tids.contains(tid))
                && (self.comms.is_empty() || self.comms.contains(comm))
        };
        if threads.iter().any(admitted) {
            return None;
        }
        let mut there: Vec<String> = threads
            .iter()
            .take(THREADS_NAMED)
            .map(|(tid, comm)| format!("{tid} {comm}"))
            .collect();
        if threads.len() > THREADS_NAMED {
            there.push(format!("... {} threads in all", threads.len()));
        }
        let there = match there.is_empty() {
            true => "none found".to_string(),
            false => there.join(", "),
        };
        Some(format!(
            "no thread of {whose} matches {conditions} now (threads: {there}); every hit is filtered \
             out until one does (a thread started, or renamed, later)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads(list: &[(u32, &str)]) -> Vec<(u32, String)> {
        list.iter().map(|&(t, c)| (t, c.to_string())).collect()
    }

    /// A `--tid` or `--comm` that no watched thread has is told with what is there; one that a thread
    /// has, or no such condition at all, says nothing.
    #[test]
    fn conditions_that_admit_no_watched_thread_are_told() {
        let there = threads(&[(42, "writer"), (43, "worker")]);
        let tid = Filter {
            tids: vec![99],
            ..Filter::default()
        };
        assert_eq!(
            tid.admits_no_thread(&there, "process 42").as_deref(),
            Some(
                "no thread of process 42 matches --tid 99 now (threads: 42 writer, 43 worker); \
                 every hit is filtered out until one does (a thread started, or renamed, later)"
            )
        );
        // Values of one flag are "or", the two flags "and": the last holds for some thread each, but no
        // thread meets both.
        for (tids, comms, said) in [
            (vec![], vec!["writr"], "--comm writr"),
            (
                vec![],
                vec!["writr", "wrker"],
                "--comm writr or --comm wrker",
            ),
            (vec![43], vec!["writer"], "--tid 43 and --comm writer"),
        ] {
            let f = Filter {
                tids,
                comms: comms.iter().map(|c| c.to_string()).collect(),
                ..Filter::default()
            };
            let line = f.admits_no_thread(&there, "process 42").unwrap();
            let want = format!("no thread of process 42 matches {said} now");
            assert!(line.starts_with(&want), "{line}");
        }
        for admits in [
            Filter {
                tids: vec![43],
                ..Filter::default()
            },
            Filter {
                comms: vec!["nope".into(), "worker".into()],
                ..Filter::default()
            },
            Filter {
                exclude_idle: true,
                place: Place::User,
                ..Filter::default()
            },
        ] {
            assert_eq!(
                admits.admits_no_thread(&there, "process 42"),
                None,
                "{admits:?}"
            );
        }
        // Many threads are counted past the first few; none at all is said.
        let many: Vec<(u32, String)> = (0..20).map(|t| (t, "w".to_string())).collect();
        let line = tid.admits_no_thread(&many, "processes 1, 2").unwrap();
        assert!(line.contains("7 w, ... 20 threads in all)"), "{line}");
        let line = tid.admits_no_thread(&[], "process 42").unwrap();
        assert!(line.contains("(threads: none found)"), "{line}");
    }

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
