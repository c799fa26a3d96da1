//! The task tracker: applies the kernel's task records (COMM, FORK, EXIT, MMAP2), in the sorter's time
//! order, to the names hits are printed with ([`Comms`]) and to the symbolizer's user-space maps, and
//! lets go of what exited tasks and processes left behind once their grace in a [`Graveyard`] ends.

use ksymwatch_symbols::MappedFile;

use crate::perf::record::Mmap;
use crate::trace::comm::Comms;
use crate::trace::exited::Graveyard;
use crate::trace::symbolize::Symbolizer;

/// Exited tasks whose names are kept after their exit is applied, and exited processes whose mappings are:
/// a margin only (see [`crate::trace::exited`]), so small; a process's mappings are a few KB.
const EXITED_TASKS_KEPT: usize = 1024;
const EXITED_PROCESSES_KEPT: usize = 128;

/// Task names and the lifetimes of tasks and processes, as the records tell them.
pub struct Tasks {
    comms: Comms,
    /// Exited tasks (by tid) whose names are still kept, and processes (by pid) whose mappings are.
    exited_tasks: Graveyard,
    exited_processes: Graveyard,
}

impl Tasks {
    /// Starts from the names already read (see `session::Setup::comms`).
    pub fn new(comms: Comms) -> Tasks {
        Tasks {
            comms,
            exited_tasks: Graveyard::new(EXITED_TASKS_KEPT),
            exited_processes: Graveyard::new(EXITED_PROCESSES_KEPT),
        }
    }

    /// The name a hit by `pid`/`tid` is printed with.
    pub fn name(&mut self, pid: u32, tid: u32) -> &str {
        self.comms.name(pid, tid)
    }

    /// Reads every live task's name (see `Session::learn_tasks`).
    pub fn scan_all(&mut self) {
        self.comms.scan_all();
    }

    /// A COMM record: `tid` is now called `comm`. For an exec, [`Tasks::exec`] follows.
    pub fn renamed(&mut self, tid: u32, comm: &str) {
        self.exited_tasks.revive(tid);
        self.comms.set(tid, comm);
    }

    /// `pid` ran exec: after it the thread is its process's leader (tid == pid), running another program,
    /// so nothing mapped or cached for the old one holds.
    pub fn exec(&mut self, pid: u32, symbolizer: &mut Symbolizer) {
        self.exited_processes.revive(pid);
        symbolizer.forget_process(pid);
        if let Some(u) = symbolizer.user_mut() {
            u.exec(pid);
        }
    }

    /// A FORK record: task `tid` of `pid` was born of `ptid` of `ppid`.
    pub fn fork(&mut self, pid: u32, ppid: u32, tid: u32, ptid: u32, symbolizer: &mut Symbolizer) {
        self.exited_tasks.revive(tid);
        self.comms.fork(ptid, ppid, tid);
        if pid != ppid {
            // A new process, perhaps under a pid an exited one had: nothing cached for it holds.
            self.exited_processes.revive(pid);
            symbolizer.forget_process(pid);
            if let Some(u) = symbolizer.user_mut() {
                u.fork(ppid, pid);
            }
        }
    }

    /// An EXIT record: what the task (and, for a leader, its process) left is kept for the graveyard's
    /// grace, and what an older exit left is forgotten now.
    pub fn exit(&mut self, pid: u32, tid: u32, symbolizer: &mut Symbolizer) {
        if let Some(gone) = self.exited_tasks.bury(tid) {
            self.comms.forget(gone);
        }
        // The leader's exit stands for the process's: with exit_group the others die with it.
        if pid == tid {
            if let Some(gone) = self.exited_processes.bury(pid) {
                symbolizer.forget_process(gone);
                if let Some(u) = symbolizer.user_mut() {
                    u.forget(gone);
                }
            }
        }
    }

    /// An MMAP2 record: a process mapped a file executable.
    pub fn mmap(&mut self, m: &Mmap, symbolizer: &mut Symbolizer) {
        let Some((dev, inode)) = m.file else {
            return;
        };
        // A process whose leader exited early (pthread_exit) still maps: it is alive.
        self.exited_processes.revive(m.pid);
        let file = MappedFile {
            start: m.addr,
            len: m.len,
            offset: m.pgoff,
            dev,
            inode,
            path: &m.filename,
        };
        if let Some(u) = symbolizer.user_mut() {
            u.map(m.pid, &file);
        }
        // The new mapping may cover addresses whose frames or chains were cached under an older one
        // (dlclose, then dlopen at the same place).
        symbolizer.forget_process(m.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testutil::table;
    use ksymwatch_symbols::UserSymbols;

    /// A /proc with nothing in it: every name and map comes from the records.
    fn empty_proc() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("ksymwatch-tasks-none-{}", std::process::id()))
    }

    fn mmap(pid: u32, file: bool) -> Mmap {
        Mmap {
            pid,
            tid: pid,
            addr: 0x400000,
            len: 0x1000,
            pgoff: 0,
            file: file.then_some(((8, 1), 42)),
            prot: libc::PROT_EXEC as u32,
            filename: "/usr/bin/writer".to_string(),
        }
    }

    #[test]
    fn a_task_is_named_by_comm_and_fork_and_forgotten_one_grace_after_its_exit() {
        let table = table();
        let mut sym = Symbolizer::new(&table);
        let mut t = Tasks::new(Comms::new(empty_proc()));
        assert_eq!(t.name(10, 10), "<...>", "never seen");
        t.renamed(10, "writer");
        t.fork(10, 10, 11, 10, &mut sym);
        assert_eq!(
            t.name(10, 11),
            "writer",
            "a thread starts with its parent's name"
        );
        t.exit(10, 11, &mut sym);
        assert_eq!(
            t.name(10, 11),
            "writer",
            "kept while its last hits may still come"
        );
        // EXITED_TASKS_KEPT later exits end its grace.
        for tid in 1000..1000 + EXITED_TASKS_KEPT as u32 {
            t.exit(tid, tid, &mut sym);
        }
        assert_eq!(t.name(10, 11), "<...>", "forgotten");
        assert_eq!(t.name(10, 10), "writer", "its sibling never exited");
    }

    #[test]
    fn a_task_seen_alive_again_is_not_forgotten_by_its_old_exit() {
        let table = table();
        let mut sym = Symbolizer::new(&table);
        let mut t = Tasks::new(Comms::new(empty_proc()));
        t.renamed(20, "first");
        t.exit(20, 20, &mut sym);
        // The tid is reused: a new task by that id renames itself.
        t.renamed(20, "second");
        for tid in 1000..1000 + EXITED_TASKS_KEPT as u32 {
            t.exit(tid, tid, &mut sym);
        }
        assert_eq!(t.name(20, 20), "second");
    }

    #[test]
    fn processes_maps_follow_mmap_fork_exec_and_exit() {
        let table = table();
        let proc = empty_proc();
        let mut sym = Symbolizer::with_user(&table, UserSymbols::new(&proc));
        let mut t = Tasks::new(Comms::new(&proc));
        let processes = |s: &mut Symbolizer| s.user_mut().map_or(0, |u| u.processes());
        t.mmap(&mmap(30, false), &mut sym);
        assert_eq!(
            processes(&mut sym),
            0,
            "a mapping without a file is not kept"
        );
        t.mmap(&mmap(30, true), &mut sym);
        assert_eq!(processes(&mut sym), 1);
        t.fork(31, 30, 31, 30, &mut sym);
        assert_eq!(
            processes(&mut sym),
            2,
            "a child process starts with its parent's maps"
        );
        t.fork(30, 30, 32, 30, &mut sym);
        assert_eq!(processes(&mut sym), 2, "a thread is no new process");
        // A thread's exit is not its process's.
        t.exit(30, 32, &mut sym);
        t.exit(31, 31, &mut sym);
        for pid in 2000..2000 + EXITED_PROCESSES_KEPT as u32 {
            t.exit(pid, pid, &mut sym);
        }
        assert_eq!(processes(&mut sym), 1, "31's maps are gone, 30's stay");
        t.exit(30, 30, &mut sym);
        // 30 maps again (a leader that called pthread_exit): alive, its exit no longer counts.
        t.mmap(&mmap(30, true), &mut sym);
        for pid in 3000..3000 + EXITED_PROCESSES_KEPT as u32 {
            t.exit(pid, pid, &mut sym);
        }
        assert_eq!(processes(&mut sym), 1);
    }
}
