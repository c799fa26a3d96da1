//! What the session remembers of tasks and processes that have exited, and for how long. Names and
//! mappings are needed until a task's last hit is printed; records are applied in timestamp order through
//! the sorter, so when a task's PERF_RECORD_EXIT is applied its earlier hits already are. A bounded FIFO of
//! the most recent exits is kept anyway, as a margin for a record the sorter let through a little late
//! (another thread of a dying process, a CPU whose ring was read just past its slack): the oldest is
//! forgotten when a newer one comes in, so a run over millions of processes stays flat.
//!
//! Ids are reused (pid_max is 32768 here), and exec moves a thread to its leader's pid: an id seen alive
//! again (FORK, exec, a new mapping) leaves the FIFO without being forgotten later.
//!
//! A process counts as exited when its leader's EXIT is applied (exit_group takes the other threads with
//! it). A leader that calls pthread_exit while other threads run on is the exception: its process's
//! mappings are forgotten once that exit leaves the FIFO, and a later hit of it is named from
//! `/proc/PID/maps` again, which for such a process reads empty (its frames are then bare addresses).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

pub struct Graveyard {
    /// Exits in the order they were applied: (id, the number of that exit).
    order: VecDeque<(u32, u64)>,
    /// Ids exited and not seen alive since, with the number of their exit.
    dead: FxHashMap<u32, u64>,
    exits: u64,
    keep: usize,
}

impl Graveyard {
    /// Remembers the last `keep` exits.
    pub fn new(keep: usize) -> Graveyard {
        Graveyard {
            order: VecDeque::with_capacity(keep + 1),
            dead: FxHashMap::default(),
            exits: 0,
            keep,
        }
    }

    /// `id` exited. Returns the id whose grace ends with this exit, if it has not come back since: the
    /// caller forgets it now.
    pub fn bury(&mut self, id: u32) -> Option<u32> {
        self.exits += 1;
        self.dead.insert(id, self.exits);
        self.order.push_back((id, self.exits));
        if self.order.len() <= self.keep {
            return None;
        }
        let (old, n) = self.order.pop_front()?;
        if self.dead.get(&old) == Some(&n) {
            self.dead.remove(&old);
            return Some(old);
        }
        None
    }

    /// `id` is alive (a new task with a reused id, or a thread that exec made the leader): a pending
    /// burial of it is cancelled.
    pub fn revive(&mut self, id: u32) {
        self.dead.remove(&id);
    }

    /// Exited ids not forgotten yet.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.dead.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_exit_is_forgotten_once_the_yard_is_full() {
        let mut g = Graveyard::new(2);
        assert_eq!(g.bury(10), None);
        assert_eq!(g.bury(11), None);
        assert_eq!(g.bury(12), Some(10));
        assert_eq!(g.bury(13), Some(11));
        assert_eq!(g.len(), 2);
    }

    /// A reused id that comes back before its old exit leaves the yard is not forgotten then; its own
    /// later exit is what counts.
    #[test]
    fn an_id_seen_alive_again_is_not_forgotten_by_its_old_exit() {
        let mut g = Graveyard::new(2);
        g.bury(10);
        g.revive(10);
        g.bury(11);
        assert_eq!(g.bury(12), None, "10 came back");
        // 10 exits again: its new exit is the one that leaves the yard, two exits later.
        assert_eq!(g.bury(10), Some(11));
        assert_eq!(g.bury(13), Some(12));
        assert_eq!(g.bury(14), Some(10));
        // The same id buried twice in a row leaves once.
        let mut g = Graveyard::new(1);
        g.bury(5);
        assert_eq!(g.bury(5), None);
        assert_eq!(g.bury(6), Some(5));
        assert_eq!(g.len(), 1);
    }

    /// A day of short-lived processes: memory is the yard's size, not the number of exits.
    #[test]
    fn a_million_exits_keep_the_yard_at_its_size() {
        let mut g = Graveyard::new(64);
        let mut forgotten = 0;
        for i in 0..1_000_000u32 {
            forgotten += usize::from(g.bury(i % 32_768).is_some());
        }
        assert_eq!(g.len(), 64);
        assert_eq!(forgotten, 1_000_000 - 64);
        assert!(g.order.len() <= 64);
    }
}
