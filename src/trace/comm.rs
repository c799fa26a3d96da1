//! Task names for hits, cached by tid. A process that has exited by the time its hit is printed keeps the
//! name learned from PERF_RECORD_COMM/FORK or an earlier hit; one never seen alive prints as `<...>`, as
//! ftrace does. The session forgets a task's name once its exit has left the
//! [`crate::trace::exited::Graveyard`], so the cache holds the tasks alive and a bounded few that exited.

use rustc_hash::FxHashMap;
use std::path::PathBuf;

use crate::model::filter::IDLE_COMM;

pub struct Comms {
    /// Looked up for every hit: FxHash, not SipHash (tids come from the kernel).
    names: FxHashMap<u32, String>,
    proc_root: PathBuf,
}

impl Default for Comms {
    fn default() -> Self {
        Comms::new("/proc")
    }
}

impl Comms {
    pub fn new(proc_root: impl Into<PathBuf>) -> Comms {
        Comms {
            names: FxHashMap::default(),
            proc_root: proc_root.into(),
        }
    }

    /// The name for a hit by `pid`/`tid`.
    pub fn name(&mut self, pid: u32, tid: u32) -> &str {
        if tid == 0 {
            return IDLE_COMM;
        }
        if !self.names.contains_key(&tid) {
            let name = self.read(pid, tid).unwrap_or_else(|| "<...>".to_string());
            self.names.insert(tid, name);
        }
        self.names.get(&tid).map_or("<...>", String::as_str)
    }

    fn read(&self, pid: u32, tid: u32) -> Option<String> {
        let task = self.proc_root.join(format!("{pid}/task/{tid}/comm"));
        let text = std::fs::read_to_string(task)
            .or_else(|_| std::fs::read_to_string(self.proc_root.join(format!("{tid}/comm"))))
            .ok()?;
        Some(text.trim_end_matches('\n').to_string())
    }

    /// Learns the name of every task alive now. Run right after arming: together with the FORK and COMM
    /// records that follow, every task that can hit has a name even if it exits before its hit is printed.
    pub fn scan_all(&mut self) {
        let Ok(procs) = std::fs::read_dir(&self.proc_root) else {
            return;
        };
        for p in procs.flatten() {
            if let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                self.scan_process(pid);
            }
        }
    }

    /// Learns the name of every thread of process `pid` alive now (a process watch's own tasks: no other
    /// task's hit can reach it).
    pub fn scan_process(&mut self, pid: u32) {
        let Ok(tasks) = std::fs::read_dir(self.proc_root.join(format!("{pid}/task"))) else {
            return;
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(name) = self.read(pid, tid) {
                self.names.insert(tid, name);
            }
        }
    }

    /// A task was renamed (exec, prctl).
    pub fn set(&mut self, tid: u32, comm: &str) {
        self.names.insert(tid, comm.to_string());
    }

    /// `tid` exited and no hit of it is left to print.
    pub fn forget(&mut self, tid: u32) {
        self.names.remove(&tid);
    }

    /// Tasks named.
    #[cfg(test)]
    pub fn tasks(&self) -> usize {
        self.names.len()
    }

    /// A new task starts with its parent's name; remember it now in case it dies before its hits are printed.
    pub fn fork(&mut self, parent_tid: u32, parent_pid: u32, tid: u32) {
        let name = match self.names.get(&parent_tid) {
            Some(n) => Some(n.clone()),
            None => self.read(parent_pid, parent_tid),
        };
        if let Some(name) = name {
            self.names.insert(tid, name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_cache_and_unknown() {
        let dir = std::env::temp_dir().join(format!("ksymwatch-comm-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("10/task/11")).unwrap();
        std::fs::write(dir.join("10/task/11/comm"), "writer\n").unwrap();
        let mut c = Comms::new(&dir);
        assert_eq!(c.name(0, 0), "<idle>");
        let mut scanned = Comms::new(&dir);
        scanned.scan_all();
        assert_eq!(scanned.names.get(&11).map(String::as_str), Some("writer"));
        assert_eq!(c.name(10, 11), "writer");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(c.name(10, 11), "writer", "cached after the task is gone");
        assert_eq!(c.name(99, 99), "<...>");
        c.set(12, "renamed");
        c.fork(12, 12, 13);
        assert_eq!(c.name(13, 13), "renamed");
        let before = c.tasks();
        c.forget(13);
        assert_eq!(c.tasks(), before - 1);
        assert_eq!(c.name(13, 13), "<...>", "forgotten, and gone from /proc");
    }
}
