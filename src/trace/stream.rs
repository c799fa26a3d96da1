//! The rings' records applied in merged time order: what the [`Pipeline`] releases becomes task names
//! and maps (COMM/FORK/EXIT/MMAP2, so a hit is named as its task was named, and mapped, when it wrote),
//! marks for losses, and hits, admitted or not ([`crate::trace::admit`]: `--count`, the filters, `--on`'s
//! objects), symbolized and handed to the [`Output`] (or with `--last` kept by the flight recorder,
//! [`crate::trace::flight`]). The summary's counts and the audits of closed events are its [`Books`]
//! ([`crate::trace::books`]), which find the losses the rings never reported; the stream marks them.
//!
//! The output side alone is the [`Sink`] ([`crate::trace::sink`]): the stream's marks ([`Marks`]) for
//! every part of the session, and the first write error kept for the end.
//!
//! The session drives the stream only through its methods, each naming what the session does: start
//! following objects ([`Stream::start_objects`]), a watched process's exit ([`Stream::note_exit`]),
//! closed events' audits ([`Stream::audit_closed`]), a moved watch's olds ([`Stream::forget_olds`]), a
//! CPU unwatched to the end ([`Stream::note_unwatched`]), and the end ([`Stream::end`],
//! [`Stream::finish`]).

use std::io;
use std::time::Duration;

use crate::error::{Context, Error, ExitCode, Result};
use crate::model::filter::Filter;
use crate::model::Limits;
use crate::perf::record::{Sample, Task};
use crate::perf::sys;
use crate::report::cgroup::CgroupNames;
use crate::report::{DumpTrigger, Hit, Output, StopReason, StreamEvent, Summary, Value};
use crate::trace::admit::{Admission, Admit};
use crate::trace::books::Books;
use crate::trace::context::Marks;
use crate::trace::context::Poll;
use crate::trace::events::{self, Audit, EventSet, Item, Trap};
use crate::trace::flight::Recorder;
use crate::trace::objects::Slots;
use crate::trace::olds::Olds;
use crate::trace::pipeline::{Pipeline, Release};
use crate::trace::sink::Sink;
use crate::trace::store_value;
use crate::trace::symbolize::{NamedChain, Symbolizer};
use crate::trace::tasks::Tasks;
use crate::trace::totals;
use crate::trace::watched::Watched;

/// The stream's marks are its sink's.
impl<O: Output> Marks for Stream<'_, O> {
    fn now(&self) -> u64 {
        self.sink.now()
    }

    fn emit(&mut self, event: &StreamEvent, time_ns: u64) -> Option<StopReason> {
        self.sink.emit(event, time_ns)
    }
}

/// The hit side of a session: everything a released record is applied to.
pub struct Stream<'a, O: Output> {
    sink: Sink<O>,
    symbolizer: Symbolizer<'a>,
    tasks: Tasks,
    /// The summary's counts and the closed events' audits.
    books: Books,
    /// `--value`'s `old` in merged time order.
    olds: Olds,
    /// `--count` and the filters: whether a sample is a hit at all.
    admission: Admission,
    /// A process watch's processes, followed to their exit or exec.
    watched: Watched,
    /// `--on`: what each breakpoint slot holds (a hit after its object's free is not a hit).
    slots: Option<Slots>,
    flight: Option<Recorder>,
    /// `--cgroup`: the writers' cgroups by id, each named once; `None` leaves hits unnamed.
    cgroups: Option<CgroupNames>,
}

impl<'a, O: Output> Stream<'a, O> {
    /// A stream printing to `out`, naming with `symbolizer` and `tasks`, following `watched`, `--value`'s
    /// olds kept by `olds`; no limit, no filter, no tally and no flight recorder until asked.
    pub fn new(
        out: O,
        symbolizer: Symbolizer<'a>,
        tasks: Tasks,
        watched: Watched,
        olds: Olds,
    ) -> Stream<'a, O> {
        Stream {
            sink: Sink::new(out),
            symbolizer,
            tasks,
            books: Books::default(),
            olds,
            admission: Admission::default(),
            watched,
            slots: None,
            flight: None,
            cgroups: None,
        }
    }

    /// `--count`/`--duration`, and the filters a hit must pass.
    pub fn with_limits(mut self, limits: Limits, filter: Filter) -> Self {
        self.admission = Admission::new(limits, filter);
        self
    }

    /// `--summary`: keeps the counts by chain, ip and comm.
    pub fn with_tally(mut self, tally: bool) -> Self {
        self.books.summary.tally = tally.then(Default::default);
        self
    }

    /// `--last`: hits go to the flight recorder.
    pub fn with_flight(mut self, flight: Option<Recorder>) -> Self {
        self.flight = flight;
        self
    }

    /// `--cgroup`: hits name their writers' cgroups through `names`.
    pub fn with_cgroups(mut self, names: Option<CgroupNames>) -> Self {
        self.cgroups = names;
        self
    }
}

impl<O: Output> Stream<'_, O> {
    /// The output, for what is printed before the run (the `armed` line).
    pub fn out(&mut self) -> &mut O {
        &mut self.sink.out
    }

    /// The summary so far.
    #[cfg(test)]
    pub fn summary(&self) -> &Summary {
        &self.books.summary
    }

    /// `--on`: from now on hits are checked against the objects in `slots`, and counted as `target`'s.
    pub fn start_objects(&mut self, slots: Slots, target: &str) {
        self.slots = Some(slots);
        if let Some(t) = &mut self.books.summary.tally {
            t.of_objects(target);
        }
    }

    /// `--on`'s slots (empty ones when no object was followed yet).
    pub fn slots(&mut self) -> &mut Slots {
        self.slots.get_or_insert_with(|| Slots::new(0, false))
    }

    /// Learns the name of every task alive now.
    pub fn scan_tasks(&mut self) {
        self.tasks.scan_all();
    }

    /// The `i`-th watched process exited (its pidfd leaves `poll`): whether none is left.
    pub fn note_exit(&mut self, i: usize, poll: &impl Poll) -> bool {
        self.watched.exited(i, poll)
    }

    /// Events were closed, with these books: settled into the summary at the end.
    pub fn audit_closed(&mut self, audits: impl IntoIterator<Item = Audit>) {
        self.books.audit_closed(audits);
    }

    /// `--if`'s condition, decided in the kernel.
    pub fn condition(&self) -> Option<&crate::model::condition::Condition> {
        self.olds.condition()
    }

    /// Target `index` moved: its `old` values start afresh.
    pub fn forget_olds(&mut self, index: usize) {
        self.olds.forget(index);
    }

    /// `cpu` was unwatched for `ns` (a CPU that came online and was never armed).
    pub fn note_unwatched(&mut self, cpu: u32, ns: u64) {
        self.books.note_unwatched(cpu, ns);
    }

    /// The output's first write error that was not a closed pipe, as the run's.
    pub fn take_error(&mut self) -> Result<()> {
        self.sink.take_error()
    }

    /// Hits and hits filtered so far: what the loop's pace follows.
    pub fn counted(&self) -> u64 {
        self.books.counted()
    }

    /// Hands every record `which` releases to the output, in time order, and flushes. Returns a stop reason
    /// when the count is met or stdout closed. Once the output is gone, what is released is only counted
    /// ([`Stream::hit`]): every hit decoded is in the summary (its tally too) and in what the outputs
    /// aggregate, printed or not (not with `--last`, whose hits are the flight recorder's).
    pub fn release(
        &mut self,
        rings: &mut Pipeline,
        epoll: &impl Poll,
        which: Release,
    ) -> Option<StopReason> {
        let mut stop = None;
        while let Some((time, item)) = rings.next(which) {
            match self.apply(rings, epoll, time, item) {
                None => {}
                Some(StopReason::BrokenPipe) => stop = stop.or(Some(StopReason::BrokenPipe)),
                Some(other) => {
                    stop = stop.or(Some(other));
                    break;
                }
            }
        }
        if stop.is_none() && self.admission.count_met(self.books.summary.hits()) {
            stop = Some(StopReason::Count);
        }
        // Hits the rings dropped never reach the count above; the programs' own count of kept hits does.
        if stop.is_none() && self.admission.counting() && kernel_count_reached(rings.events()) {
            stop = Some(StopReason::Count);
        }
        self.sink.flush().or(stop)
    }

    /// One released record: task names change, losses are marked, hits are printed.
    fn apply(
        &mut self,
        rings: &mut Pipeline,
        epoll: &impl Poll,
        time: u64,
        item: Item,
    ) -> Option<StopReason> {
        match item {
            Item::Sample {
                sample,
                watch,
                value,
                trap,
            } => {
                let stop = self.hit(rings.events(), &sample, watch, value, trap.as_deref());
                rings.recycle(sample.frames);
                stop
            }
            Item::Task(Task::Comm {
                pid,
                tid,
                comm,
                exec,
            }) => {
                self.tasks.renamed(tid, &comm);
                if exec {
                    let stop = self
                        .watched
                        .exec_seen(pid, &comm, time, epoll, &mut self.sink);
                    if stop.is_some() {
                        return stop;
                    }
                    self.tasks.exec(pid, &mut self.symbolizer);
                    // A new program's image: what the earlier one stored is not what it holds.
                    self.olds.new_process(pid);
                }
                None
            }
            Item::Task(Task::Fork {
                pid,
                ppid,
                tid,
                ptid,
            }) => {
                self.tasks.fork(pid, ppid, tid, ptid, &mut self.symbolizer);
                self.watched.fork(pid, ppid);
                if pid != ppid {
                    // A new process: a pid reused holds nothing of the earlier process's.
                    self.olds.new_process(pid);
                }
                None
            }
            Item::Task(Task::Exit { pid, tid }) => {
                self.tasks.exit(pid, tid, &mut self.symbolizer);
                if pid == tid {
                    self.olds.process_gone(pid);
                }
                None
            }
            Item::Task(Task::Mmap(m)) => {
                self.tasks.mmap(&m, &mut self.symbolizer);
                None
            }
            Item::Lost { cpu, count } => {
                self.olds.lost();
                self.lost(cpu, count, time, false)
            }
            Item::Unprinted { cpu, count } => {
                self.olds.lost();
                let counted = self.counts_from_totals();
                self.lost(cpu, count, time, counted)
            }
        }
    }

    /// A `--dump-on` tracepoint fired at `time`: every record from before it is applied (hits recorded),
    /// then the hits recorded up to `time` are printed.
    pub fn dump_at(
        &mut self,
        rings: &mut Pipeline,
        epoll: &impl Poll,
        trigger: DumpTrigger,
        time: u64,
    ) -> Option<StopReason> {
        while let Some((t, item)) = rings.next(Release::Until(time)) {
            if let Some(stop) = self.apply(rings, epoll, t, item) {
                return Some(stop);
            }
        }
        self.dump(trigger, time, Some(time))
    }

    /// `--last`: prints the kept hits (up to `until`) under a heading for `trigger` at `time`.
    pub fn dump(
        &mut self,
        trigger: DumpTrigger,
        time: u64,
        until: Option<u64>,
    ) -> Option<StopReason> {
        let rec = self.flight.as_mut()?;
        let out = &mut self.sink.out;
        match rec
            .dump(out, trigger, time, until)
            .and_then(|()| out.flush())
        {
            Ok(()) => None,
            Err(e) => Some(self.sink.write_failed(e)),
        }
    }

    /// `--last`: the latest firing of a `--dump-on` tracepoint since the last turn, and its time.
    pub fn tracepoint_fired(&mut self) -> Result<Option<(DumpTrigger, u64)>> {
        match self.flight.as_mut() {
            Some(rec) => rec
                .tracepoint_fired()
                .or_exit(ExitCode::Runtime, "reading the --dump-on tracepoint counts"),
            None => Ok(None),
        }
    }

    /// Admits ([`Admission::admit`]: `--count`, the filters, `--on`'s objects), names and prints one hit
    /// (with the value read when it was drained, or for `--value` the store's, decoded from its `trap`).
    fn hit(
        &mut self,
        events: &EventSet,
        sample: &Sample,
        watch: usize,
        value: Value,
        trap: Option<&Trap>,
    ) -> Option<StopReason> {
        let tasks = &mut self.tasks;
        let admitted = self.admission.admit(
            self.books.summary.hits(),
            (sample, watch),
            move || tasks.name(sample.pid, sample.tid),
            self.watched.ended(sample.pid),
            self.slots.as_mut(),
        );
        let comm = match admitted {
            Admit::CountMet => return Some(StopReason::Count),
            Admit::Filtered => {
                self.books.filtered();
                return None;
            }
            Admit::AfterFree => return None,
            Admit::Hit(comm) => comm,
        };
        self.books.admitted(sample.cpu);
        if self.sink.gone() && self.flight.is_some() {
            // The output is gone: with `--last` the hit would only have been kept.
            return None;
        }
        // Where the store's instruction starts, from its function's symbol: before the chain is named
        // (that borrows the symbols until the hit is printed).
        let insn_len = trap.and_then(|t| {
            store_value::insn_len_of(&mut self.symbolizer, sample.pid, sample.ip, &t.insn)
        });
        // A kept hit holds its chain: the symbolizer's cached one, shared.
        let shared = self
            .flight
            .is_some()
            .then(|| self.symbolizer.shared(sample));
        let named: &NamedChain = match &shared {
            Some(c) => c,
            None => self.symbolizer.named(sample),
        };
        let hit_watch = events.watch_of(watch, sample.addr);
        let (value, part) = match trap {
            Some(t) => store_value::decide(value, sample, hit_watch.len, t, insn_len),
            None => (value, None),
        };
        let value = self.olds.settle(
            watch,
            sample.addr,
            (hit_watch.len, sample.pid),
            (value, part),
            || match events::read_value(sample.pid, sample.addr, hit_watch.len) {
                Value::Read(v) => Some(v),
                _ => None,
            },
            &mut self.books.summary,
        );
        let hit = Hit {
            sample,
            watch: hit_watch,
            watch_index: watch,
            comm,
            ip: &named.ip,
            chain: &named.frames,
            value,
            rendered: named.rendered(),
            cgroup: match (sample.cgroup, &mut self.cgroups) {
                (Some(id), Some(names)) => Some(names.name(id)),
                _ => None,
            },
        };
        if let Some(t) = &mut self.books.summary.tally {
            t.add(&hit);
        }
        if self.sink.gone() {
            // The output is gone: the hit is counted as not printed, and is still one of what the
            // outputs aggregate (`--folded`), as the tally above has it: every hit counted is in both.
            self.books.unprinted(sample.cpu, 1);
            self.sink.out.counted(&hit, 1);
            return None;
        }
        let printed = match (self.flight.as_mut(), &shared) {
            (Some(rec), Some(chain)) => {
                rec.offer(&hit, std::rc::Rc::clone(chain), &mut self.sink.out)
            }
            _ => self.sink.out.hit(&hit),
        };
        if let Err(e) = printed {
            return Some(self.sink.write_failed(e));
        }
        None
    }

    /// Counts records a full ring dropped in the summary and marks each in the stream: a loss is never
    /// silent, also not when it is found in the ring of a CPU that just went offline. `counted`: they are
    /// kept hits the kernel's totals hold, which the summary will count from there ([`Stream::settle_counts`]):
    /// the mark says they were not printed rather than lost.
    fn lost(&mut self, cpu: u32, count: u64, time_ns: u64, counted: bool) -> Option<StopReason> {
        let mark = self.books.lost(cpu, count, counted);
        self.sink.emit(&mark, time_ns)
    }

    /// Whether the summary's counts come from the kernel's totals when the stream drops hits: on the hit
    /// path, except with `--on` (see [`Stream::settle_counts`]).
    fn counts_from_totals(&self) -> bool {
        self.slots.is_none()
    }

    /// Marks the losses the rings never reported, found in the audits of closed events
    /// ([`Books::settle_audits`], which counts them whether or not a mark can be printed).
    fn settle_audits(&mut self) -> Option<StopReason> {
        let now = sys::monotonic_ns();
        let mut stop = None;
        for mark in self.books.settle_audits(self.counts_from_totals()) {
            stop = stop.or(self.sink.emit(&mark, now));
        }
        self.sink.flush().or(stop)
    }

    /// The run ended (`stop`) and every event is disabled: what is still in the rings is printed, or
    /// only counted, by how it ended, and the events are closed and audited. The run's stop reason.
    pub fn end(&mut self, rings: &mut Pipeline, epoll: &impl Poll, stop: StopReason) -> StopReason {
        // A CPU armed while the process was still creating threads left some of them unwatched there.
        for cpu in rings.events().unsettled_cpus() {
            self.note(&crate::perf::arm::unsettled_on(cpu));
        }
        // Records written before the disable are still in the rings: print them (only count them when the
        // reader is gone: every hit decoded is in the summary), unless the count is already met. Only then
        // do the kernel's counters tell the whole story.
        // On the hit path the programs themselves stop keeping hits at `--count`: what they kept is still
        // in the rings, and printed, as after a duration.
        let count_in_kernel = stop == StopReason::Count && kernel_count_reached(rings.events());
        if stop == StopReason::Count && !count_in_kernel {
            // --count met by the stream: nothing more is printed, but what the kernel dropped in the
            // program (filters, --if, other processes) still belongs in the summary.
            self.books.audit_closed(rings.close_all());
            self.books.count_filtered();
            return stop;
        }
        rings.drain();
        let ended = self.release(rings, epoll, Release::All);
        self.books.audit_closed(rings.close_all());
        // The losses the rings never reported are marked (when the output is still there) and counted,
        // also when `--count` was met in what was left (the programs kept the N-th hit before the end).
        let settled = self.settle_audits();
        match stop {
            // What --strict-hotplug ended stays the reason, whatever printing the rest met; so does
            // `--count` met in the kernel, and a closed output.
            StopReason::StrictHotplug(_) | StopReason::Count | StopReason::BrokenPipe => stop,
            _ => ended.or(settled).unwrap_or(stop),
        }
    }

    /// The counts, once nothing more is written: the hits whose text the output took but never sent (it
    /// failed first, [`crate::report::sent`]) were not printed. Then, on the hit path, when the stream
    /// dropped hits, the counts become the kernel's totals of every kept hit ([`crate::trace::totals`]);
    /// a failure to read them is a warning, the stream's counts kept. Not with `--on`: its slots hold one
    /// object after another, and writes after an object's free are not hits, which the kernel cannot tell.
    pub fn settle_counts(&mut self, events: &EventSet) {
        self.books.unsent(self.sink.out.unsent());
        if !self.counts_from_totals() {
            return;
        }
        let Some(hits) = events.hit_programs() else {
            return;
        };
        let filtered_here = self.books.filtered_here();
        if let Err(e) = totals::apply(
            hits,
            events.watches(),
            (&mut self.symbolizer, self.cgroups.as_mut()),
            (&mut self.books.summary, filtered_here),
            &mut self.sink.out,
        ) {
            self.books.totals_unread(&e);
        }
    }

    /// A warning for the summary.
    pub fn note(&mut self, warning: &str) {
        self.books.summary.warnings.push(warning.to_string());
    }

    /// The output ended because its reader read nothing when the run was to stop: what the stream did
    /// not print was not printed for that.
    pub fn output_not_read(&mut self) {
        self.books.output_not_read();
    }

    /// The summary's last entries (how the run ended, after how long, the objects' books, the
    /// symbolizer's notes), printed.
    pub fn finish(mut self, stop: StopReason, elapsed: Duration) -> Result<Summary> {
        let summary = &mut self.books.summary;
        summary.elapsed = elapsed;
        summary.stop = Some(stop);
        summary.objects = self.slots.as_mut().map(Slots::finish);
        summary.warnings.extend(self.symbolizer.take_notes());
        match self.sink.out.finish(summary) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
            Err(e) => return Err(Error::runtime("writing output").caused_by(e)),
        }
        Ok(self.books.summary)
    }
}

/// `--count` on the hit path: the programs kept the N-th hit.
fn kernel_count_reached(events: &EventSet) -> bool {
    events.hit_programs().is_some_and(|h| h.limit_reached())
}

#[cfg(test)]
mod tests;
