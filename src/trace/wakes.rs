//! The event loop's decisions, apart from its descriptors: what woke it ([`Wake`], named by its epoll
//! token), which part each wake goes to, when the run stops, and what is done at the end. The session
//! implements [`Looping`] and [`Ending`] over its epoll set, stop signals, rings and stream; the unit
//! tests over a fake that plays a script of wakes and logs what was asked, so the loop is tested without
//! a kernel.
//!
//! One turn: the deadline is checked before each wait (`--duration`), and the wait lasts no longer than
//! the [`Pace`] and the deadline allow; the sources that woke it are read in the order the wait named
//! them, and the first that says the run is over ends it (a stop signal, a closed output, the last
//! watched process gone, a `--control` line, a module unloaded or a CPU refused with
//! `--strict-hotplug`); then, whatever woke it, an unended control line is read again, `--on`'s object
//! records are carried out, the rings are read (where `--count` is met and a write finds its reader
//! gone, [`flight::turn`]) and the hotplug reconcile is made when due.
//!
//! [`flight::turn`]: crate::trace::flight::turn

use std::time::Duration;

use crate::error::Result;
use crate::report::StopReason;
use crate::trace::pace::Pace;

/// What woke the loop: each source's epoll token names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    Signal,
    Ring,
    Uevent,
    Control,
    Objects,
    /// stdout failed or hung up: its reader is gone.
    Output,
    /// The i-th watched process's pidfd.
    Process(usize),
}

/// The first watched process's token; the others follow it.
const PROCESS_TOKENS: u64 = 16;

impl Wake {
    const SOURCES: [Wake; 6] = [
        Wake::Signal,
        Wake::Ring,
        Wake::Uevent,
        Wake::Control,
        Wake::Objects,
        Wake::Output,
    ];

    pub fn token(self) -> u64 {
        match self {
            Wake::Process(i) => PROCESS_TOKENS + i as u64,
            source => Wake::SOURCES.iter().position(|&s| s == source).unwrap_or(0) as u64,
        }
    }

    pub fn of(token: u64) -> Option<Wake> {
        match token.checked_sub(PROCESS_TOKENS) {
            Some(i) => Some(Wake::Process(i as usize)),
            None => Wake::SOURCES.get(token as usize).copied(),
        }
    }
}

/// `--dump-on signal`'s signal: read with the stop signals, it stops nothing.
const DUMP_SIGNAL: u32 = libc::SIGUSR1 as u32;

/// The running session as its loop sees it: the clock, the wait, and each source handed to its part.
pub trait Looping {
    /// CLOCK_MONOTONIC now, in ns (the records' clock, and the deadline's).
    fn now(&self) -> u64;
    /// Hits printed or filtered so far (the [`Pace`]'s measure of activity).
    fn counted(&self) -> u64;
    /// When the record the merge holds back for ordering is due, if one is.
    fn due(&self) -> Option<u64>;
    /// Waits at most `timeout` for a source; `tokens` holds the ready ones' tokens, in the wait's order.
    fn wait(&mut self, tokens: &mut Vec<u64>, timeout: Duration) -> Result<()>;
    /// The next signal read from the signals' descriptor, if one is there.
    fn signal(&mut self) -> Option<u32>;
    /// `--control`'s source is not polled (a regular file) and not read to its end yet.
    fn control_unpolled(&self) -> bool;
    /// `--control`'s source holds a line not ended yet.
    fn control_mid_line(&self) -> bool;
    /// Reads `--control`'s source and applies each complete line.
    fn on_control(&mut self) -> Result<Option<StopReason>>;
    /// Reads the uevents and follows the CPUs and modules they report.
    fn on_uevent(&mut self) -> Option<StopReason>;
    /// `--on`: carries out the object records written so far (none without `--on`).
    fn on_objects(&mut self) -> Option<StopReason>;
    /// The i-th watched process is gone; whether none is left.
    fn exited(&mut self, i: usize) -> bool;
    /// Every watched process was gone before the run began (it exited while the watch was being armed):
    /// no exit will wake the loop.
    fn gone_before(&self) -> bool;
    /// Reads the rings and prints what the merge releases (the flight recorder's turn), with a
    /// `--dump-on signal` read this turn at `signalled`.
    fn read_rings(&mut self, signalled: Option<u64>) -> Result<Option<StopReason>>;
    /// The hotplug reconcile, when one is due.
    fn reconcile(&mut self) -> Option<StopReason>;
}

/// Runs turns until one says the run is over: why. `deadline` is `--duration`'s end on [`Looping::now`]'s
/// clock.
pub fn run(ctx: &mut impl Looping, deadline: Option<u64>) -> Result<StopReason> {
    // A `--control` file is read to its end before anything waits: its lines come first.
    while ctx.control_unpolled() {
        if let Some(stop) = ctx.on_control()? {
            return Ok(stop);
        }
    }
    // Nothing is left to watch: the run ends as the last exit would end it, its hits still printed.
    if ctx.gone_before() {
        return Ok(StopReason::Exited);
    }
    let mut pace = Pace::new(ctx.now(), ctx.counted());
    let mut tokens = Vec::new();
    loop {
        if let Some(stop) = turn(ctx, &mut pace, deadline, &mut tokens)? {
            return Ok(stop);
        }
    }
}

/// One wait and what follows it (see the module).
fn turn(
    ctx: &mut impl Looping,
    pace: &mut Pace,
    deadline: Option<u64>,
    tokens: &mut Vec<u64>,
) -> Result<Option<StopReason>> {
    let due = ctx.due();
    let now = ctx.now();
    let mut timeout = pace.timeout(now, ctx.counted(), due);
    if let Some(d) = deadline {
        let left = d.saturating_sub(now);
        if left == 0 {
            return Ok(Some(StopReason::Duration));
        }
        timeout = timeout.min(Duration::from_nanos(left));
    }
    ctx.wait(tokens, timeout)?;
    let mut signalled = None;
    for &t in tokens.iter() {
        let Some(wake) = Wake::of(t) else {
            continue;
        };
        let stop = match wake {
            Wake::Signal => match ctx.signal() {
                // Only `--dump-on signal` reads SIGUSR1: the dump follows this turn's read.
                Some(DUMP_SIGNAL) => {
                    signalled = Some(ctx.now());
                    None
                }
                sig => sig.map(StopReason::Signal),
            },
            Wake::Uevent => ctx.on_uevent(),
            Wake::Control => ctx.on_control()?,
            Wake::Objects => ctx.on_objects(),
            Wake::Output => Some(crate::trace::reader::gone()),
            Wake::Process(i) => ctx.exited(i).then_some(StopReason::Exited),
            // The rings are read on every turn, whatever woke the loop.
            Wake::Ring => None,
        };
        if stop.is_some() {
            return Ok(stop);
        }
    }
    // A control line left unended by a writer whose close raised no event is read again each turn (a
    // tick at most), until its end-of-file ends it.
    if ctx.control_mid_line() {
        if let Some(stop) = ctx.on_control()? {
            return Ok(Some(stop));
        }
    }
    // `--on`: the frees written before the hits about to be released are carried out first, so a store
    // after its object's free is never reported as the object's.
    if let Some(stop) = ctx.on_objects() {
        return Ok(Some(stop));
    }
    if let Some(stop) = ctx.read_rings(signalled)? {
        return Ok(Some(stop));
    }
    Ok(ctx.reconcile())
}

/// The session at the end of the run, as its end sees it.
pub trait Ending {
    /// CLOCK_MONOTONIC now, in ns (the deadline's clock).
    fn now(&self) -> u64;
    /// Disables every event: nothing more is written into the rings.
    fn disable(&mut self);
    /// Closes every event (what they hold is no longer read).
    fn close(&mut self);
    /// A signal pending on the signals' descriptor, read now.
    fn pending_signal(&mut self) -> Option<u32>;
    /// Prints or only counts what the rings still hold, by how the run ended (`stop`), and closes and
    /// audits the events; the run's stop reason then ([`crate::trace::stream::Stream::end`]).
    fn print_rest(&mut self, stop: StopReason) -> StopReason;
    /// The output ended because its reader read nothing when the run was told to stop.
    fn output_not_read(&mut self);
    /// A stop signal was read: a write waiting for a reader now gives way at once.
    fn stop_heard(&mut self);
    /// Whether a write gave way to a stop signal or the deadline (rather than meeting a closed output).
    fn gave_way(&self) -> bool;
    /// The CPUs never armed since they came online, noted as unwatched to the end.
    fn note_unwatched(&mut self);
    /// The first output error, as the run's.
    fn take_error(&mut self) -> Result<()>;
    /// The counts, once nothing more is written: the hits the output took but never sent are not
    /// printed; on the hit path, the kernel's totals as the counts, if the stream dropped hits.
    fn settle_counts(&mut self);
}

/// Ends the run that `ran` (the loop's result; `deadline` is `--duration`'s end): every event disabled
/// on every path; on an error, closed and the error returned; otherwise what the rings hold printed by
/// how the run ended, the events closed, the unwatched CPUs noted and the totals taken. The stop reason
/// the summary names.
pub fn end(
    ctx: &mut impl Ending,
    ran: Result<StopReason>,
    deadline: Option<u64>,
) -> Result<StopReason> {
    ctx.disable();
    let stop = match ran {
        Ok(stop) => stop,
        Err(e) => {
            ctx.close();
            return Err(e);
        }
    };
    if let StopReason::Signal(_) = stop {
        ctx.stop_heard();
    }
    let gave_way = match stop {
        StopReason::BrokenPipe => gave_way_to(ctx, deadline),
        _ => None,
    };
    let ended = ctx.print_rest(stop);
    let stop = match gave_way {
        Some(why) => {
            ctx.output_not_read();
            why
        }
        // Printing the rest gave way (its reader stalled at the end): the run ended for its own reason.
        None if ended == StopReason::BrokenPipe && stop != ended && ctx.gave_way() => {
            ctx.output_not_read();
            stop
        }
        None => ended,
    };
    ctx.close();
    ctx.note_unwatched();
    ctx.take_error()?;
    ctx.settle_counts();
    Ok(stop)
}

/// What a closed output gave way to, if anything: an output whose reader read nothing gives way to a
/// stop signal, or to the deadline passed (`cli::gives_way`, [`crate::trace::deadline`]); the run then
/// ends as a closed output ends it, nothing more written, and the signal or the deadline is why. A
/// pending stop signal is that signal; otherwise a deadline passed is the duration.
fn gave_way_to(ctx: &mut impl Ending, deadline: Option<u64>) -> Option<StopReason> {
    if !ctx.gave_way() {
        return None;
    }
    if let Some(sig) = ctx.pending_signal().filter(|&sig| sig != DUMP_SIGNAL) {
        return Some(StopReason::Signal(sig));
    }
    let passed = deadline.is_some_and(|d| crate::trace::deadline::passed_at(d, ctx.now()));
    passed.then_some(StopReason::Duration)
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, VecDeque};

    use super::*;
    use crate::error::Error;

    const MS: u64 = 1_000_000;
    const SIGTERM: u32 = libc::SIGTERM as u32;

    /// A session that plays a script of wakes: each wait takes the next turn's tokens (after `step` ns),
    /// or, the script over, waits its whole timeout for nothing. What the loop asked is logged in order.
    #[derive(Default)]
    struct Script {
        now: u64,
        step: u64,
        turns: VecDeque<Vec<u64>>,
        signals: VecDeque<u32>,
        /// The watched processes still alive.
        alive: usize,
        /// Every watched process was gone before the run began.
        gone_before: bool,
        counted: u64,
        /// Times `--control` reads as unpolled before it is read to its end.
        unpolled: usize,
        mid_line: bool,
        /// What each part says when asked (by its logged name): the run is over for this reason.
        stops: HashMap<&'static str, StopReason>,
        /// The part that fails when asked.
        fails: Option<&'static str>,
        waits: Vec<Duration>,
        calls: Vec<String>,
    }

    impl Script {
        fn of(turns: &[&[Wake]]) -> Script {
            let turns = turns
                .iter()
                .map(|t| t.iter().map(|w| w.token()).collect())
                .collect();
            Script {
                turns,
                step: MS,
                ..Script::default()
            }
        }

        fn asked(&mut self, what: &'static str) -> Result<Option<StopReason>> {
            self.calls.push(what.to_string());
            if self.fails == Some(what) {
                return Err(Error::runtime(what));
            }
            Ok(self.stops.get(what).copied())
        }

        fn calls(&self) -> Vec<&str> {
            self.calls.iter().map(String::as_str).collect()
        }
    }

    impl Looping for Script {
        fn now(&self) -> u64 {
            self.now
        }

        fn counted(&self) -> u64 {
            self.counted
        }

        fn due(&self) -> Option<u64> {
            None
        }

        fn wait(&mut self, tokens: &mut Vec<u64>, timeout: Duration) -> Result<()> {
            assert!(self.waits.len() < 1000, "the run never ends");
            self.waits.push(timeout);
            self.calls.push("wait".into());
            tokens.clear();
            match self.turns.pop_front() {
                Some(t) => {
                    tokens.extend(t);
                    self.now += self.step;
                }
                None => self.now += timeout.as_nanos() as u64,
            }
            Ok(())
        }

        fn signal(&mut self) -> Option<u32> {
            self.calls.push("signal".into());
            self.signals.pop_front()
        }

        fn control_unpolled(&self) -> bool {
            self.unpolled > 0
        }

        fn control_mid_line(&self) -> bool {
            self.mid_line
        }

        fn on_control(&mut self) -> Result<Option<StopReason>> {
            self.unpolled = self.unpolled.saturating_sub(1);
            self.asked("control")
        }

        fn on_uevent(&mut self) -> Option<StopReason> {
            self.asked("uevent").ok().flatten()
        }

        fn on_objects(&mut self) -> Option<StopReason> {
            self.asked("objects").ok().flatten()
        }

        fn exited(&mut self, i: usize) -> bool {
            self.calls.push(format!("exited {i}"));
            self.alive -= 1;
            self.alive == 0
        }

        fn gone_before(&self) -> bool {
            self.gone_before
        }

        fn read_rings(&mut self, signalled: Option<u64>) -> Result<Option<StopReason>> {
            if let Some(time) = signalled {
                self.calls.push(format!("dump at {time}"));
            }
            self.asked("rings")
        }

        fn reconcile(&mut self) -> Option<StopReason> {
            self.asked("reconcile").ok().flatten()
        }
    }

    /// What one turn asks after its wakes, in order.
    const AFTER_WAKES: [&str; 3] = ["objects", "rings", "reconcile"];

    /// A turn woken by nothing, or by the rings alone, still reads everything that is read each turn:
    /// the rings are read whatever woke the loop.
    #[test]
    fn every_turn_reads_the_objects_then_the_rings_then_reconciles() {
        let mut s = Script::of(&[&[], &[Wake::Ring]]);
        s.stops.insert("rings", StopReason::Count);
        assert_eq!(run(&mut s, None).unwrap(), StopReason::Count);
        assert_eq!(s.calls(), ["wait", "objects", "rings"]);
        let mut s = Script::of(&[&[], &[Wake::Ring]]);
        s.stops.insert("reconcile", StopReason::StrictHotplug(3));
        assert_eq!(run(&mut s, None).unwrap(), StopReason::StrictHotplug(3));
        assert_eq!(s.calls(), ["wait", "objects", "rings", "reconcile"]);
    }

    /// Each source's wake goes to its part; one that stops nothing lets the turn go on.
    #[test]
    fn each_wake_goes_to_its_part() {
        let mut s = Script::of(&[&[
            Wake::Uevent,
            Wake::Control,
            Wake::Objects,
            Wake::Process(1),
            Wake::Ring,
        ]]);
        s.alive = 2;
        s.stops.insert("reconcile", StopReason::ModuleUnloaded);
        assert_eq!(run(&mut s, None).unwrap(), StopReason::ModuleUnloaded);
        let mut want = vec!["wait", "uevent", "control", "objects", "exited 1"];
        want.extend(AFTER_WAKES);
        assert_eq!(s.calls(), want);
    }

    /// A token no source has (a process's pidfd taken out while its wake was pending) is passed over.
    #[test]
    fn an_unknown_token_is_passed_over() {
        let mut s = Script::default();
        s.turns.push_back(vec![6, 7]);
        s.stops.insert("rings", StopReason::Count);
        assert_eq!(run(&mut s, None).unwrap(), StopReason::Count);
        assert_eq!(s.calls(), ["wait", "objects", "rings"]);
    }

    /// A stop signal ends the run at once: the wakes after it in the same turn are not read, nor the
    /// rings (the end prints what they hold).
    #[test]
    fn a_stop_signal_ends_the_run_before_the_rest_of_its_turn() {
        let mut s = Script::of(&[&[Wake::Signal, Wake::Uevent]]);
        s.signals.push_back(SIGTERM);
        assert_eq!(run(&mut s, None).unwrap(), StopReason::Signal(SIGTERM));
        assert_eq!(s.calls(), ["wait", "signal"]);
    }

    /// `--dump-on signal`'s SIGUSR1 stops nothing: the dump follows the turn's read, at the time it
    /// was read.
    #[test]
    fn the_dump_signal_dumps_after_the_read_and_stops_nothing() {
        let mut s = Script::of(&[&[Wake::Signal]]);
        s.now = 5 * MS;
        s.signals.push_back(DUMP_SIGNAL);
        s.stops.insert("reconcile", StopReason::Count);
        assert_eq!(run(&mut s, None).unwrap(), StopReason::Count);
        assert_eq!(
            s.calls(),
            [
                "wait",
                "signal",
                "objects",
                "dump at 6000000",
                "rings",
                "reconcile"
            ]
        );
    }

    /// The run ends with the last watched process, not before.
    #[test]
    fn the_last_watched_process_gone_ends_the_run() {
        let mut s = Script::of(&[&[Wake::Process(0)], &[Wake::Process(2), Wake::Uevent]]);
        s.alive = 2;
        assert_eq!(run(&mut s, None).unwrap(), StopReason::Exited);
        let mut want = vec!["wait", "exited 0"];
        want.extend(AFTER_WAKES);
        want.extend(["wait", "exited 2"]);
        assert_eq!(s.calls(), want);
    }

    /// Every watched process gone before the run began (it exited while the watch was being armed, so no
    /// pidfd could be had and no exit will wake the loop): the run ends at once, as the last exit ends
    /// it, after a `--control` file's lines. It waited for a signal or the deadline.
    #[test]
    fn processes_gone_before_the_run_end_it_at_once() {
        let mut s = Script {
            gone_before: true,
            unpolled: 1,
            ..Script::default()
        };
        assert_eq!(run(&mut s, Some(5 * MS)).unwrap(), StopReason::Exited);
        assert_eq!(s.calls(), ["control"]);
    }

    /// stdout's reader gone ends the run as a closed output.
    #[test]
    fn the_output_hung_up_ends_the_run_as_closed() {
        let mut s = Script::of(&[&[Wake::Output, Wake::Signal]]);
        s.signals.push_back(SIGTERM);
        assert_eq!(run(&mut s, None).unwrap(), StopReason::BrokenPipe);
        assert_eq!(s.calls(), ["wait"]);
    }

    /// The deadline is checked before each wait, which lasts no longer than what is left of it; the
    /// turn that passed it still reads the rings, and the next one ends the run.
    #[test]
    fn the_deadline_bounds_each_wait_and_ends_the_run() {
        let mut s = Script {
            now: 100 * MS,
            ..Script::default()
        };
        let deadline = s.now + 25 * MS;
        assert_eq!(run(&mut s, Some(deadline)).unwrap(), StopReason::Duration);
        assert_eq!(s.now, deadline, "the last wait ends at the deadline");
        // Idle: a tick, a tick, then what is left.
        let ms = Duration::from_millis;
        assert_eq!(s.waits, [ms(10), ms(10), ms(5)]);
        assert_eq!(s.calls.iter().filter(|c| *c == "rings").count(), 3);
        assert_eq!(s.calls.last().map(String::as_str), Some("reconcile"));
        // A deadline already passed: no wait at all.
        let mut s = Script {
            now: deadline,
            ..Script::default()
        };
        assert_eq!(run(&mut s, Some(deadline)).unwrap(), StopReason::Duration);
        assert!(s.calls.is_empty());
    }

    /// What ends a turn comes first, in the turn's order: a wake's stop before an unended control line's,
    /// that before the objects', that before the rings', that before the reconcile's; the deadline only
    /// at the next turn.
    #[test]
    fn the_first_stop_of_a_turn_wins() {
        let all = [
            ("uevent", StopReason::StrictHotplug(1)),
            ("control", StopReason::Signal(0)),
            ("objects", StopReason::BrokenPipe),
            ("rings", StopReason::Count),
            ("reconcile", StopReason::ModuleUnloaded),
        ];
        for first in 0..all.len() {
            let mut s = Script::of(&[&[Wake::Uevent]]);
            s.mid_line = true;
            s.stops.extend(all[first..].iter().copied());
            let deadline = s.now + MS;
            assert_eq!(run(&mut s, Some(deadline)).unwrap(), all[first].1);
            assert_eq!(s.calls.last().map(String::as_str), Some(all[first].0));
        }
    }

    /// A `--control` file is read to its end before the first wait, and may end the run there; a
    /// failing control source is the run's error.
    #[test]
    fn an_unpolled_control_file_is_read_before_any_wait() {
        let mut s = Script::of(&[&[Wake::Control]]);
        s.unpolled = 2;
        s.stops.insert("rings", StopReason::Count);
        assert_eq!(run(&mut s, None).unwrap(), StopReason::Count);
        assert_eq!(
            s.calls(),
            ["control", "control", "wait", "control", "objects", "rings"]
        );
        let mut s = Script {
            unpolled: 3,
            ..Script::default()
        };
        s.stops.insert("control", StopReason::Exited);
        assert_eq!(run(&mut s, None).unwrap(), StopReason::Exited);
        assert_eq!(s.calls(), ["control"]);
        let mut s = Script::of(&[&[Wake::Control]]);
        s.fails = Some("control");
        assert!(run(&mut s, None).is_err());
        assert_eq!(s.calls(), ["wait", "control"]);
    }

    /// A read of the rings that fails (a `--dump-on` tracepoint's count unreadable) is the run's error.
    #[test]
    fn a_failed_read_is_the_runs_error() {
        let mut s = Script::of(&[&[]]);
        s.fails = Some("rings");
        assert!(run(&mut s, None).is_err());
        assert_eq!(s.calls(), ["wait", "objects", "rings"]);
    }

    /// The end as it was asked for, in order.
    #[derive(Default)]
    struct End {
        now: u64,
        /// A signal pending at the end.
        signal: Option<u32>,
        /// What printing the rest meets (the output closed, `--count` met), if anything.
        rest: Option<StopReason>,
        /// A write gave way (to a signal or the deadline), rather than meeting a closed output.
        gave_way: bool,
        write_error: bool,
        calls: Vec<String>,
    }

    impl Ending for End {
        fn now(&self) -> u64 {
            self.now
        }

        fn disable(&mut self) {
            self.calls.push("disable".into());
        }

        fn close(&mut self) {
            self.calls.push("close".into());
        }

        fn pending_signal(&mut self) -> Option<u32> {
            self.calls.push("signal".into());
            self.signal.take()
        }

        fn print_rest(&mut self, stop: StopReason) -> StopReason {
            self.calls.push(format!("print rest: {stop}"));
            self.rest.unwrap_or(stop)
        }

        fn output_not_read(&mut self) {
            self.calls.push("output not read".into());
        }

        fn stop_heard(&mut self) {
            self.calls.push("stop heard".into());
        }

        fn gave_way(&self) -> bool {
            self.gave_way
        }

        fn note_unwatched(&mut self) {
            self.calls.push("unwatched".into());
        }

        fn take_error(&mut self) -> Result<()> {
            self.calls.push("error".into());
            match self.write_error {
                true => Err(Error::runtime("writing output")),
                false => Ok(()),
            }
        }

        fn settle_counts(&mut self) {
            self.calls.push("totals".into());
        }
    }

    impl End {
        fn calls(&self) -> Vec<&str> {
            self.calls.iter().map(String::as_str).collect()
        }
    }

    /// What the end asks after printing the rest, in order.
    const AFTER_REST: [&str; 4] = ["close", "unwatched", "error", "totals"];

    /// Every end disables the events first; then the rings' rest is printed (or counted) by how the run
    /// ended, the events closed, the CPUs unwatched to the end noted and the totals taken.
    #[test]
    fn the_end_prints_the_rest_then_closes_and_takes_the_totals() {
        let mut e = End::default();
        assert_eq!(
            end(&mut e, Ok(StopReason::Duration), None).unwrap(),
            StopReason::Duration
        );
        let want = [
            &["disable", "print rest: duration reached"][..],
            &AFTER_REST,
        ]
        .concat();
        assert_eq!(e.calls(), want);
        // `--count` met in what was left: that is why the run ended.
        let mut e = End {
            rest: Some(StopReason::Count),
            ..End::default()
        };
        assert_eq!(
            end(&mut e, Ok(StopReason::Signal(2)), None).unwrap(),
            StopReason::Count
        );
    }

    /// An error of the loop closes the events and is returned: nothing is printed.
    #[test]
    fn an_error_closes_the_events_and_prints_nothing() {
        let mut e = End::default();
        assert!(end(&mut e, Err(Error::runtime("epoll_wait")), None).is_err());
        assert_eq!(e.calls(), ["disable", "close"]);
    }

    /// A kept write error (a full disk) is the run's, once every event is closed.
    #[test]
    fn a_write_error_is_returned_once_the_events_are_closed() {
        let mut e = End {
            write_error: true,
            ..End::default()
        };
        assert!(end(&mut e, Ok(StopReason::Duration), None).is_err());
        let want = [
            &["disable", "print rest: duration reached"][..],
            &AFTER_REST[..3],
        ]
        .concat();
        assert_eq!(e.calls(), want);
    }

    /// A closed output with a stop signal pending: the output gave way to the signal (its reader read
    /// nothing), which is why the run ended. Without one, or with only the dump signal, it was closed.
    #[test]
    fn a_closed_output_with_a_stop_signal_pending_gave_way_to_it() {
        let mut e = End {
            signal: Some(SIGTERM),
            gave_way: true,
            ..End::default()
        };
        let stop = end(&mut e, Ok(StopReason::BrokenPipe), None).unwrap();
        assert_eq!(stop, StopReason::Signal(SIGTERM));
        let gave_way = [
            "disable",
            "signal",
            "print rest: output closed",
            "output not read",
        ];
        assert_eq!(e.calls(), [&gave_way[..], &AFTER_REST].concat());
        // No stop signal, or only the dump signal; or an output its reader closed while a signal was
        // pending (no write gave way): it was closed.
        for (signal, gave_way) in [
            (None, true),
            (Some(DUMP_SIGNAL), true),
            (Some(SIGTERM), false),
        ] {
            let mut e = End {
                signal,
                gave_way,
                ..End::default()
            };
            let stop = end(&mut e, Ok(StopReason::BrokenPipe), None).unwrap();
            assert_eq!(stop, StopReason::BrokenPipe);
            assert!(!e.calls.iter().any(|c| c == "output not read"));
        }
        // After any other end a pending signal is not read: the run ended for its own reason.
        let mut e = End {
            signal: Some(SIGTERM),
            gave_way: true,
            ..End::default()
        };
        assert_eq!(
            end(&mut e, Ok(StopReason::Exited), None).unwrap(),
            StopReason::Exited
        );
        assert!(!e.calls.iter().any(|c| c == "signal"));
    }

    /// A closed output past the deadline, no stop signal pending: the output gave way to the deadline
    /// (its reader read nothing, `ksymwatch ... --duration 2 | (sleep 30; cat)`), and the duration is
    /// why the run ended. Before the deadline it was closed; a stop signal pending is why before either.
    #[test]
    fn a_closed_output_past_the_deadline_gave_way_to_it() {
        let deadline = Some(2_000 * MS);
        let ended = |now: u64, signal: Option<u32>| {
            let mut e = End {
                now,
                signal,
                gave_way: true,
                ..End::default()
            };
            let stop = end(&mut e, Ok(StopReason::BrokenPipe), deadline).unwrap();
            let not_read = e.calls.iter().any(|c| c == "output not read");
            (stop, not_read)
        };
        assert_eq!(ended(2_000 * MS, None), (StopReason::Duration, true));
        assert_eq!(ended(1_999 * MS, None), (StopReason::BrokenPipe, false));
        assert_eq!(
            ended(2_000 * MS, Some(SIGTERM)),
            (StopReason::Signal(SIGTERM), true)
        );
        // The deadline only ever ends a run that has one.
        let mut e = End {
            now: u64::MAX,
            ..End::default()
        };
        let stop = end(&mut e, Ok(StopReason::BrokenPipe), None).unwrap();
        assert_eq!(stop, StopReason::BrokenPipe);
    }

    /// A stop signal read by the loop is heard before the rest is printed (a write waiting for a reader
    /// then gives way at once). Printing the rest that gave way (its reader stalled at the end) keeps
    /// the run's own reason and says the output was not read; one that met a closed output says so.
    #[test]
    fn printing_the_rest_that_gave_way_keeps_the_runs_reason() {
        let ended = |stop: StopReason, gave_way: bool| {
            let mut e = End {
                rest: Some(StopReason::BrokenPipe),
                gave_way,
                ..End::default()
            };
            let stop = end(&mut e, Ok(stop), Some(MS)).unwrap();
            let not_read = e.calls.iter().any(|c| c == "output not read");
            (stop, not_read, e.calls)
        };
        let (stop, not_read, calls) = ended(StopReason::Signal(SIGTERM), true);
        assert_eq!((stop, not_read), (StopReason::Signal(SIGTERM), true));
        assert_eq!(
            calls[..3],
            ["disable", "stop heard", "print rest: signal SIGTERM"]
        );
        let (stop, not_read, calls) = ended(StopReason::Duration, true);
        assert_eq!((stop, not_read), (StopReason::Duration, true));
        assert!(!calls.iter().any(|c| c == "stop heard"));
        let (stop, not_read, _) = ended(StopReason::Duration, false);
        assert_eq!((stop, not_read), (StopReason::BrokenPipe, false));
    }

    /// Each source has its own token, and a token names its source back; the watched processes' follow
    /// the sources', one each.
    #[test]
    fn a_token_names_what_woke_the_loop() {
        let wakes = Wake::SOURCES
            .into_iter()
            .chain([Wake::Process(0), Wake::Process(3)]);
        let tokens: Vec<u64> = wakes.clone().map(Wake::token).collect();
        assert_eq!(tokens, [0, 1, 2, 3, 4, 5, 16, 19]);
        for w in wakes {
            assert_eq!(Wake::of(w.token()), Some(w));
        }
        assert_eq!(Wake::of(6), None);
    }
}
