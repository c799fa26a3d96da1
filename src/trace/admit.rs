//! Whether a decoded sample is a hit at all, decided before anything is named for printing: `--count`
//! already met, the filters (`--tid`, `--comm`, `--exclude-idle`, `--kernel-only`, `--user-only`), a
//! process whose watch ended at its exec, and with `--on` a store by another process into its copy of the
//! object's memory or a write after the object's free. Kept apart from the stream so that each case is
//! one answer ([`Admit`]), tested on a bare sample with no ring, task table or output.

use crate::model::filter::Filter;
use crate::model::Limits;
use crate::perf::record::Sample;
use crate::trace::objects::Slots;

/// What a sample is, by the rules of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit<'n> {
    /// `--count` was met before it: the run ends there, and it is not a hit.
    CountMet,
    /// Not a hit the run reports (a filter, a process whose watch ended at exec, another process's copy
    /// of an object): counted as filtered.
    Filtered,
    /// `--on`: a write to the slot's memory after its object's free: in the objects' books only.
    AfterFree,
    /// A hit, by the task named so.
    Hit(&'n str),
}

/// `--count` and the filters a hit must pass.
#[derive(Debug, Default)]
pub struct Admission {
    count: Option<u64>,
    filter: Filter,
}

impl Admission {
    /// `limits`' count (its duration is the loop's) and `filter`.
    pub fn new(limits: Limits, filter: Filter) -> Admission {
        Admission {
            count: limits.count,
            filter,
        }
    }

    /// Whether the run has a `--count`.
    pub fn counting(&self) -> bool {
        self.count.is_some()
    }

    /// Whether `hits` meet `--count`.
    pub fn count_met(&self, hits: u64) -> bool {
        self.count.is_some_and(|n| hits >= n)
    }

    /// What the sample is, given `hits` so far, its writer's `name` (looked up only once the count is
    /// known not met: naming a task may read /proc), whether its process's watch has ended (at an exec, or
    /// before it began: its pid named another process by then, [`crate::trace::watched`]), and
    /// `--on`'s `slots`, whose books count a write after a free and an object's hits as they are decided.
    pub fn admit<'n>(
        &self,
        hits: u64,
        (sample, watch): (&Sample, usize),
        name: impl FnOnce() -> &'n str,
        ended: bool,
        slots: Option<&mut Slots>,
    ) -> Admit<'n> {
        if self.count_met(hits) {
            return Admit::CountMet;
        }
        let comm = name();
        if !self.filter.admits(sample.tid, sample.in_kernel(), comm) || ended {
            return Admit::Filtered;
        }
        if let Some(slots) = slots {
            if slots.foreign(watch, sample.pid) {
                return Admit::Filtered;
            }
            if slots.after_free(watch, sample.time) {
                return Admit::AfterFree;
            }
            slots.hit(watch);
        }
        Admit::Hit(comm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::filter::Place;

    const ADDR: u64 = 0x7ffd0000;

    /// A user-space store by task `tid` of process `pid` at `time`.
    fn sample(pid: u32, tid: u32, time: u64) -> Sample {
        Sample {
            ip: 0x401000,
            pid,
            tid,
            time,
            addr: ADDR,
            cpu: 0,
            id: 0,
            cgroup: None,
            frames: Vec::new(),
        }
    }

    /// `sample` admitted with `hits` so far, by a task named `sh`, its watch not ended at exec.
    fn admit<'n>(
        admission: &Admission,
        hits: u64,
        sample: &Sample,
        slots: Option<&mut Slots>,
    ) -> Admit<'n> {
        admission.admit(hits, (sample, 0), || "sh", false, slots)
    }

    /// `--count 2`: the third sample ends the run, and its writer is not even named.
    #[test]
    fn a_count_met_ends_the_run_before_naming_the_writer() {
        let limits = Limits {
            count: Some(2),
            duration: None,
        };
        let admission = Admission::new(limits, Filter::default());
        assert!(admission.counting());
        let s = sample(7, 7, 10);
        assert_eq!(admit(&admission, 1, &s, None), Admit::Hit("sh"));
        let named = || -> &str { panic!("named after the count was met") };
        assert_eq!(
            admission.admit(2, (&s, 0), named, false, None),
            Admit::CountMet
        );
        let unlimited = Admission::default();
        assert!(!unlimited.counting() && !unlimited.count_met(u64::MAX));
        assert_eq!(admit(&unlimited, u64::MAX, &s, None), Admit::Hit("sh"));
    }

    /// `--tid`, `--comm` and `--kernel-only` drop what they do not name; so does a process whose watch
    /// ended at its exec.
    #[test]
    fn the_filters_and_an_ended_watch_drop_a_sample() {
        let by = |filter| Admission::new(Limits::default(), filter);
        let s = sample(7, 8, 10);
        let tid = by(Filter {
            tids: vec![7],
            ..Filter::default()
        });
        assert_eq!(admit(&tid, 0, &s, None), Admit::Filtered);
        assert_eq!(admit(&tid, 0, &sample(7, 7, 10), None), Admit::Hit("sh"));
        let comm = by(Filter {
            comms: vec!["bash".into()],
            ..Filter::default()
        });
        assert_eq!(admit(&comm, 0, &s, None), Admit::Filtered);
        let kernel = by(Filter {
            place: Place::Kernel,
            ..Filter::default()
        });
        assert_eq!(admit(&kernel, 0, &s, None), Admit::Filtered);
        let any = Admission::default();
        assert_eq!(any.admit(0, (&s, 0), || "sh", true, None), Admit::Filtered);
    }

    /// A store by process `pid` at `time` on `--on`'s slot 0, with no count and no filter.
    fn on_slot(slots: &mut Slots, pid: u32, time: u64) -> Admit<'static> {
        admit(
            &Admission::default(),
            0,
            &sample(pid, pid, time),
            Some(slots),
        )
    }

    /// `--on` with objects per process: a store by another process (a forked child's copy of the
    /// memory) is filtered; the allocator's is a hit, counted on its object.
    #[test]
    fn another_processs_store_on_an_object_is_filtered() {
        let mut slots = Slots::new(1, false);
        slots.per_process = true;
        slots.armed(0, 0, ADDR, 0, 0);
        slots.owned_by(0, 7);
        assert_eq!(on_slot(&mut slots, 8, 10), Admit::Filtered);
        assert_eq!(on_slot(&mut slots, 7, 10), Admit::Hit("sh"));
        assert_eq!(slots.finish().objects, [(0, ADDR, 1)]);
    }

    /// `--on`: a write after the object's free is not a hit, and the objects' books count it.
    #[test]
    fn a_write_after_the_free_is_not_a_hit() {
        let mut slots = Slots::new(1, false);
        slots.armed(0, 0, ADDR, 0, 0);
        slots.closing(Some((0, 100)));
        assert_eq!(on_slot(&mut slots, 7, 200), Admit::AfterFree);
        assert_eq!(on_slot(&mut slots, 7, 50), Admit::Hit("sh"));
        let books = slots.finish();
        assert_eq!((books.after_free, books.objects), (1, vec![(0, ADDR, 1)]));
    }
}
