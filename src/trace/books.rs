//! The summary's counts that printing does not decide: hits admitted, filtered and left unprinted, losses,
//! the audits of closed events turned into the losses the rings never reported, and the time a CPU went
//! unwatched. The stream prints; these books only count, and hand back the marks the counting calls for,
//! so that the arithmetic of the end (what a tail is, which lost records were hits) is tested without a
//! ring or an output.

use std::collections::BTreeMap;
use std::io;

use crate::report::{StreamEvent, Summary};
use crate::trace::events::Audit;

/// The summary, and the audits of every event closed so far, settled into it at the end.
#[derive(Default)]
pub struct Books {
    /// What the run counted; the hit path adds its own entries (the tally, `--value`'s races) here.
    pub summary: Summary,
    /// Every event closed so far, audited against the kernel's counters.
    audits: Vec<Audit>,
    /// Of the summary's `filtered`, the hits the tracer's own filters dropped (the rest are the kernel
    /// programs', which the kernel's totals do not hold): [`crate::trace::totals`] tells from it whether
    /// the stream counted every hit the kernel kept.
    filtered_here: u64,
}

impl Books {
    /// Hits and hits filtered so far: what the loop's pace follows.
    pub fn counted(&self) -> u64 {
        self.summary.hits() + self.summary.filtered
    }

    /// A hit the filters dropped: not printed, not counted toward `--count`.
    pub fn filtered(&mut self) {
        self.summary.filtered += 1;
        self.filtered_here += 1;
    }

    /// The hits the tracer's own filters dropped (not the kernel programs').
    pub fn filtered_here(&self) -> u64 {
        self.filtered_here
    }

    /// A hit on `cpu` passed the filters: it is counted, printed or not.
    pub fn admitted(&mut self, cpu: u32) {
        *self.summary.hits_by_cpu.entry(cpu).or_default() += 1;
    }

    /// `count` hits on `cpu` were counted and not printed (the output was gone, or failed with their
    /// text still unsent).
    pub fn unprinted(&mut self, cpu: u32, count: u64) {
        *self.summary.unprinted_by_cpu.entry(cpu).or_default() += count;
    }

    /// A full ring on `cpu` dropped `count` records: counted, and the mark that says so. `counted`: they
    /// are kept hits the kernel's totals hold, which the summary will count from there (the mark says
    /// they were not printed rather than lost).
    pub fn lost(&mut self, cpu: u32, count: u64, counted: bool) -> StreamEvent {
        *self.summary.lost_by_cpu.entry(cpu).or_default() += count;
        StreamEvent::Lost {
            cpu,
            count,
            counted,
        }
    }

    /// Events were closed, with these audits: settled at the end.
    pub fn audit_closed(&mut self, audits: impl IntoIterator<Item = Audit>) {
        self.audits.extend(audits);
    }

    /// The run ended with nothing more printed (`--count` met): what the kernel dropped in the program
    /// (filters, --if, other processes) still belongs in the summary.
    pub fn count_filtered(&mut self) {
        for a in std::mem::take(&mut self.audits) {
            self.summary.filtered += a.filtered;
            self.summary.filtered_other_process += a.other_process;
        }
    }

    /// Turns the audits of closed events into the losses the rings never reported, counted here whether
    /// or not their marks can be printed, and warnings for hits that neither arrived nor were reported
    /// lost. The marks to print, in order. `counts_from_totals`: the hit ring's part of a tail is kept
    /// hits the kernel's totals hold.
    pub fn settle_audits(&mut self, counts_from_totals: bool) -> Vec<StreamEvent> {
        let audits = std::mem::take(&mut self.audits);
        let mut marks = Vec::new();
        for a in &audits {
            self.summary.filtered += a.filtered;
            self.summary.filtered_other_process += a.other_process;
            let tail = a.unreported_lost();
            if tail > 0 {
                // The hit ring's part of the tail is kept hits the totals hold; the rest, the perf ring's.
                let unprinted = a.unprinted_tail.min(tail);
                if unprinted > 0 {
                    marks.push(self.lost(a.cpu, unprinted, counts_from_totals));
                }
                if tail > unprinted {
                    marks.push(self.lost(a.cpu, tail - unprinted, false));
                }
            }
            // The stream's marks say what records the kernel dropped; the summary counts hits, and the
            // lost records that were not hits (thread exits sharing the ring) come out of it here.
            let not_hits = a.counted_lost().saturating_sub(a.lost_hits());
            if let Some(n) = self.summary.lost_by_cpu.get_mut(&a.cpu) {
                *n = n.saturating_sub(not_hits);
                if *n == 0 {
                    self.summary.lost_by_cpu.remove(&a.cpu);
                }
            }
            if let Some(n) = a.unaccounted().filter(|&n| n > 0) {
                self.summary.warnings.push(format!(
                    "cpu {} target {}: the kernel counted {} hits, {} arrived and {} were reported lost; {n} \
                     unaccounted for (throttled by kernel.perf_event_max_sample_rate?)",
                    a.cpu,
                    a.watch,
                    a.kernel_hits.unwrap_or(0),
                    a.samples,
                    a.lost_records.max(a.kernel_lost.unwrap_or(0)),
                ));
            }
        }
        if audits.iter().any(|a| a.kernel_lost.is_none()) {
            self.summary.warnings.push(
                "this kernel cannot count dropped samples (PERF_FORMAT_LOST needs Linux 6.0): records lost \
                 at the very end of a burst cannot be ruled out"
                    .to_string(),
            );
        }
        marks
    }

    /// The hits whose text the output took but never sent (it failed first): not printed.
    pub fn unsent(&mut self, by_cpu: BTreeMap<u32, u64>) {
        for (cpu, n) in by_cpu {
            self.unprinted(cpu, n);
        }
    }

    /// The kernel's totals could not be read: the counts stay the stream's, and the summary says so.
    pub fn totals_unread(&mut self, e: &io::Error) {
        self.summary.warnings.push(format!(
            "the kernel's totals could not be read ({e}): the counts are of the printed hits only"
        ));
    }

    /// `cpu` was unwatched for `ns` (a CPU that came online and was never armed).
    pub fn note_unwatched(&mut self, cpu: u32, ns: u64) {
        *self.summary.unwatched_ns_by_cpu.entry(cpu).or_default() += ns;
    }

    /// The output ended because its reader read nothing when the run was to stop: what the stream did
    /// not print was not printed for that.
    pub fn output_not_read(&mut self) {
        self.summary.output_not_read = true;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An audit with the kernel's counts read and nothing lost.
    pub(crate) fn audit(cpu: u32, filtered: u64, other_process: u64) -> Audit {
        Audit {
            cpu,
            watch: 0,
            kernel_hits: Some(0),
            kernel_lost: Some(0),
            samples: 0,
            lost_records: 0,
            undecodable: 0,
            filtered,
            other_process,
            beyond_count: 0,
            repeated: 0,
            unprinted_tail: 0,
        }
    }

    /// A ring's tail of 7 records no record told of, 5 of them the hit ring's: two marks.
    fn tail_of_seven() -> Audit {
        Audit {
            kernel_hits: None,
            kernel_lost: Some(7),
            unprinted_tail: 5,
            ..audit(0, 0, 0)
        }
    }

    /// The tail no record told of is counted and marked: the hit ring's part as hits the totals hold
    /// (on the hit path), the rest as the perf ring's lost records.
    #[test]
    fn a_tail_is_split_between_the_hit_ring_and_the_perf_ring() {
        let lost = |cpu, count, counted| StreamEvent::Lost {
            cpu,
            count,
            counted,
        };
        let mut books = Books::default();
        books.audit_closed([tail_of_seven()]);
        assert_eq!(
            books.settle_audits(true),
            [lost(0, 5, true), lost(0, 2, false)]
        );
        assert_eq!(books.summary.lost_by_cpu, BTreeMap::from([(0, 7)]));
        assert!(books.summary.warnings.is_empty());
        // With `--on` the totals are not used: neither part is counted there.
        let mut books = Books::default();
        books.audit_closed([tail_of_seven()]);
        assert_eq!(
            books.settle_audits(false),
            [lost(0, 5, false), lost(0, 2, false)]
        );
        assert!(books.settle_audits(false).is_empty(), "settled once");
    }

    /// Lost records the breakpoint's counter says were not hits (a thread's exit sharing the ring) come
    /// out of the summary's losses; a CPU left with none is not listed.
    #[test]
    fn lost_records_that_were_not_hits_come_out_of_the_losses() {
        let run = |kernel_hits| {
            let mut books = Books::default();
            books.lost(0, 4, false);
            books.audit_closed([Audit {
                kernel_hits: Some(kernel_hits),
                kernel_lost: Some(4),
                samples: 8,
                lost_records: 4,
                ..audit(0, 0, 0)
            }]);
            assert!(books.settle_audits(true).is_empty(), "no tail");
            books.summary.lost_by_cpu
        };
        assert_eq!(run(10), BTreeMap::from([(0, 2)]), "2 of the 4 were hits");
        assert_eq!(run(8), BTreeMap::new(), "none was");
    }

    /// Hits the kernel counted that neither arrived nor were reported lost are warned of, by CPU and
    /// target; a kernel that cannot count lost samples is warned of once.
    #[test]
    fn hits_not_accounted_for_are_warned_of() {
        let mut books = Books::default();
        books.audit_closed([
            Audit {
                kernel_hits: Some(10),
                samples: 7,
                ..audit(1, 0, 0)
            },
            Audit {
                kernel_lost: None,
                ..audit(0, 0, 0)
            },
            Audit {
                kernel_lost: None,
                ..audit(1, 0, 0)
            },
        ]);
        books.settle_audits(true);
        let w = &books.summary.warnings;
        assert_eq!(w.len(), 2, "{w:?}");
        let throttled =
            "cpu 1 target 0: the kernel counted 10 hits, 7 arrived and 0 were reported lost; \
                         3 unaccounted for";
        assert!(w[0].starts_with(throttled), "{w:?}");
        assert!(w[1].contains("PERF_FORMAT_LOST"), "{w:?}");
    }

    /// What the kernel's programs filtered is counted with or without the rest of the settling, once.
    #[test]
    fn closed_events_filtered_hits_are_counted_once() {
        let mut books = Books::default();
        books.audit_closed([audit(0, 3, 1), audit(1, 2, 0)]);
        books.count_filtered();
        books.count_filtered();
        assert!(books.settle_audits(true).is_empty(), "nothing left");
        let s = &books.summary;
        assert_eq!((s.filtered, s.filtered_other_process), (5, 1));
        let mut books = Books::default();
        books.audit_closed([audit(0, 3, 1), audit(1, 2, 0)]);
        books.settle_audits(true);
        books.filtered();
        let s = &books.summary;
        assert_eq!((s.filtered, s.filtered_other_process), (6, 1));
        assert_eq!(books.filtered_here(), 1, "the tracer's own, apart");
    }

    /// Hits admitted and filtered are what the pace counts; hits not printed, whether the output was
    /// gone or failed with their text unsent, add up by CPU; a failure to read the totals is a warning.
    #[test]
    fn hits_are_counted_printed_or_not() {
        let mut books = Books::default();
        books.admitted(0);
        books.admitted(1);
        books.filtered();
        assert_eq!(books.counted(), 3);
        books.unprinted(1, 1);
        books.unsent(BTreeMap::from([(0, 2), (1, 1)]));
        assert_eq!(
            books.summary.unprinted_by_cpu,
            BTreeMap::from([(0, 2), (1, 2)])
        );
        books.note_unwatched(2, 300);
        books.note_unwatched(2, 200);
        assert_eq!(
            books.summary.unwatched_ns_by_cpu,
            BTreeMap::from([(2, 500)])
        );
        books.output_not_read();
        assert!(books.summary.output_not_read);
        books.totals_unread(&io::Error::other("no map"));
        assert_eq!(
            books.summary.warnings,
            ["the kernel's totals could not be read (no map): the counts are of the printed hits only"]
        );
    }
}
