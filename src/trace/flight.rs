//! The flight recorder (`--last N --dump-on ...`): the last N hits are kept instead of printed, and a
//! trigger prints them (a [`StreamEvent::Dump`] heading, then the hits oldest first, then a triggering hit)
//! and empties the buffer.
//!
//! A kept hit owns what printing it needs: the sample's fields (not its raw chain), the value, and shared
//! handles to the rest. Its named chain is the symbolizer's cached one ([`Symbolizer::shared`]), so a
//! flood on a few chains keeps a few chains, and their printers' spellings are made only if a dump prints
//! them. Names are taken when the hit is recorded, not at the dump: by then its process may have exec'd
//! or exited and its addresses mean something else. Comm and watch handles are reused from the previous
//! hit when they are the same, so a flood allocates nothing per hit once the buffer is full.
//!
//! [`Symbolizer::shared`]: crate::trace::symbolize::Symbolizer::shared

use std::collections::VecDeque;
use std::io;
use std::rc::Rc;

use crate::config::flight::Flight;
use crate::model::condition::Condition;
use crate::model::watch::Watch;
use crate::perf::bpf::trigger::Tracepoint;
use crate::perf::record::Sample;
use crate::report::cgroup::CgroupName;
use crate::report::{DumpTrigger, Hit, Output, StopReason, StreamEvent, Value};
use crate::trace::context::Rings;
use crate::trace::symbolize::NamedChain;

/// One kept hit.
struct Kept {
    /// The sample's fields; its frames are not kept (`chain` holds them named).
    sample: Sample,
    watch: Rc<Watch>,
    watch_index: usize,
    comm: Rc<str>,
    chain: Rc<NamedChain>,
    value: Value,
    /// `--cgroup`: the writer's cgroup, named.
    cgroup: Option<Rc<CgroupName>>,
}

impl Kept {
    fn hit(&self) -> Hit<'_> {
        Hit {
            sample: &self.sample,
            watch: &self.watch,
            watch_index: self.watch_index,
            comm: &self.comm,
            ip: &self.chain.ip,
            chain: &self.chain.frames,
            value: self.value,
            rendered: self.chain.rendered(),
            cgroup: self.cgroup.as_deref(),
        }
    }
}

/// A `--dump-on` tracepoint, as the recorder asks it (a test's stands in for the kernel's).
pub trait Fires {
    /// `GROUP:NAME`.
    fn name(&self) -> &str;
    /// The CPU and time of its latest firing since the last call, if it fired.
    fn fired(&mut self) -> io::Result<Option<(u32, u64)>>;
}

impl Fires for Tracepoint {
    fn name(&self) -> &str {
        &self.name
    }

    fn fired(&mut self) -> io::Result<Option<(u32, u64)>> {
        Tracepoint::fired(self)
    }
}

/// The buffer and the triggers it answers to.
pub struct Recorder {
    last: usize,
    kept: VecDeque<Kept>,
    conditions: Vec<Condition>,
    tracepoints: Vec<Box<dyn Fires>>,
    /// The time of the first hit recorded or that fired a dump: a dump before it says that no hit had
    /// come yet, not that the last 0 hits follow.
    first_hit: Option<u64>,
    /// The last handles made, reused while hits repeat them.
    comm: Option<Rc<str>>,
    watch: Option<Rc<Watch>>,
    cgroup: Option<Rc<CgroupName>>,
}

/// The buffer grows to N as hits come; a large N is not allocated before it fills.
const INITIAL_CAPACITY: usize = 4096;

impl Recorder {
    /// The recorder `flight` asks for, with its tracepoints already attached.
    pub fn new(flight: &Flight, tracepoints: Vec<Tracepoint>) -> Recorder {
        let fires = tracepoints
            .into_iter()
            .map(|t| Box::new(t) as Box<dyn Fires>)
            .collect();
        Recorder::with_triggers(flight, fires)
    }

    /// The recorder `flight` asks for, its tracepoints read through `tracepoints`.
    pub fn with_triggers(flight: &Flight, tracepoints: Vec<Box<dyn Fires>>) -> Recorder {
        Recorder {
            last: flight.last,
            kept: VecDeque::with_capacity(flight.last.min(INITIAL_CAPACITY)),
            conditions: flight.conditions().cloned().collect(),
            tracepoints,
            first_hit: None,
            comm: None,
            watch: None,
            cgroup: None,
        }
    }

    /// The trigger `hit` fires, if any: the first `--dump-on` condition its value makes hold.
    fn fired_by(&self, hit: &Hit<'_>) -> Option<DumpTrigger> {
        let Value::Written {
            value: Some(value),
            old,
            ..
        } = hit.value
        else {
            return None;
        };
        self.conditions
            .iter()
            .find(|c| c.holds(value, old, hit.watch.len))
            .map(|c| DumpTrigger::Hit {
                condition: c.to_string(),
            })
    }

    /// Keeps `hit` (named as `chain`); or, when it fires a trigger, prints the dump and then `hit` itself.
    pub fn offer(
        &mut self,
        hit: &Hit<'_>,
        chain: Rc<NamedChain>,
        out: &mut dyn Output,
    ) -> io::Result<()> {
        match self.fired_by(hit) {
            None => {
                self.record(hit, chain);
                Ok(())
            }
            Some(trigger) => {
                self.dump(out, trigger, hit.sample.time, None)?;
                self.seen(hit.sample.time);
                out.hit(hit)
            }
        }
    }

    /// Notes a hit at `time`, for [`Recorder::dump`]'s "no hit had come yet".
    fn seen(&mut self, time: u64) {
        self.first_hit = Some(self.first_hit.map_or(time, |f| f.min(time)));
    }

    /// Keeps `hit` (named as `chain`), forgetting the oldest kept hit when N are kept.
    fn record(&mut self, hit: &Hit<'_>, chain: Rc<NamedChain>) {
        self.seen(hit.sample.time);
        let comm = match &self.comm {
            Some(c) if **c == *hit.comm => Rc::clone(c),
            _ => {
                let c: Rc<str> = hit.comm.into();
                self.comm = Some(Rc::clone(&c));
                c
            }
        };
        let watch = match &self.watch {
            Some(w) if **w == *hit.watch => Rc::clone(w),
            _ => {
                let w = Rc::new(hit.watch.clone());
                self.watch = Some(Rc::clone(&w));
                w
            }
        };
        let cgroup = hit.cgroup.map(|c| match &self.cgroup {
            Some(k) if k.id == c.id => Rc::clone(k),
            _ => {
                let k = Rc::new(c.clone());
                self.cgroup = Some(Rc::clone(&k));
                k
            }
        });
        let kept = Kept {
            // No frames: `chain` has them named; an empty Vec allocates nothing.
            sample: Sample {
                frames: Vec::new(),
                ..*hit.sample
            },
            watch,
            watch_index: hit.watch_index,
            comm,
            chain,
            value: hit.value,
            cgroup,
        };
        if self.kept.len() >= self.last {
            self.kept.pop_front();
        } else if self.kept.len() == self.kept.capacity() {
            // Doubling, but never past N: a full buffer holds no unused slots.
            let more = self.kept.capacity().max(1).min(self.last - self.kept.len());
            self.kept.reserve_exact(more);
        }
        self.kept.push_back(kept);
    }

    /// Prints the dump heading for `trigger` at `time_ns`, then every kept hit recorded at or before
    /// `until` (all of them for `None`), oldest first, and forgets those; later ones stay kept (a
    /// tracepoint seen a little after it fired). A hit trigger's own hit is the caller's to print next.
    pub fn dump(
        &mut self,
        out: &mut dyn Output,
        trigger: DumpTrigger,
        time_ns: u64,
        until: Option<u64>,
    ) -> io::Result<()> {
        let n = match until {
            Some(t) => self.kept.partition_point(|k| k.sample.time <= t),
            None => self.kept.len(),
        };
        // A hit recorded after a tracepoint fired (read a little later) had not come when it fired.
        let no_hit_yet = self
            .first_hit
            .is_none_or(|first| until.is_some_and(|t| first > t));
        let dump = StreamEvent::Dump {
            trigger,
            hits: n,
            no_hit_yet,
        };
        out.event(&dump, time_ns)?;
        for k in self.kept.drain(..n) {
            out.hit(&k.hit())?;
        }
        Ok(())
    }

    /// The latest tracepoint firing since the last call, as a trigger and its time.
    pub fn tracepoint_fired(&mut self) -> io::Result<Option<(DumpTrigger, u64)>> {
        let mut latest: Option<(DumpTrigger, u64)> = None;
        for t in &mut self.tracepoints {
            if let Some((cpu, time)) = t.fired()? {
                if latest.as_ref().is_none_or(|(_, l)| time > *l) {
                    let name = t.name().to_string();
                    latest = Some((DumpTrigger::Tracepoint { name, cpu }, time));
                }
            }
        }
        Ok(latest)
    }
}

/// What one turn of the loop asks of the session for the flight recorder's triggers (draining the rings
/// and applying what they release are [`Rings`]').
pub trait Turning: Rings {
    /// The latest `--dump-on` tracepoint firing since the last turn, and its time.
    fn fired(&mut self) -> crate::error::Result<Option<(DumpTrigger, u64)>>;
    /// Applies every record up to `time` (hits recorded), then prints the kept hits up to `time`.
    fn dump_at(&mut self, trigger: DumpTrigger, time: u64) -> Option<StopReason>;
    /// Prints every kept hit under a heading for `trigger` at `time`.
    fn dump(&mut self, trigger: DumpTrigger, time: u64) -> Option<StopReason>;
}

/// One turn's read of the rings: drained, and what the merge releases applied. A `--dump-on` tracepoint
/// is asked first (every hit from before its firing is then in the rings, and goes into the recorder
/// ahead of the dump whatever the sort slack holds back), and a SIGUSR1 read this turn (at `signalled`)
/// dumps after the release.
pub fn turn(
    ctx: &mut impl Turning,
    signalled: Option<u64>,
) -> crate::error::Result<Option<StopReason>> {
    let fired = ctx.fired()?;
    ctx.drain();
    if let Some((trigger, time)) = fired {
        if let Some(stop) = ctx.dump_at(trigger, time) {
            return Ok(Some(stop));
        }
    }
    if let Some(stop) = ctx.release_ready() {
        return Ok(Some(stop));
    }
    Ok(signalled.and_then(|time| ctx.dump(DumpTrigger::Signal, time)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::flight::Trigger;
    use crate::model::condition;
    use crate::model::watch::Access;
    use crate::perf::record::encode;
    use crate::report::ftrace::Ftrace;
    use crate::report::json::Json;
    use crate::report::{testutil, ValueFrom};

    fn recorder(last: usize, conditions: &[&str]) -> Recorder {
        let flight = Flight {
            last,
            triggers: conditions
                .iter()
                .map(|c| Trigger::Hit(condition::parse(c).unwrap()))
                .chain([Trigger::Signal])
                .collect(),
        };
        Recorder::new(&flight, Vec::new())
    }

    /// Offers one hit per value (store `v` at time `v` ms, by `writer` on cpu 1) to `rec`, printing to `out`.
    fn offer_values(
        rec: &mut Recorder,
        out: &mut dyn Output,
        values: impl IntoIterator<Item = u64>,
    ) {
        offer_values_in(rec, out, values, None);
    }

    /// [`offer_values`] by a writer in cgroup `cgroup`.
    fn offer_values_in(
        rec: &mut Recorder,
        out: &mut dyn Output,
        values: impl IntoIterator<Item = u64>,
        cgroup: Option<&CgroupName>,
    ) {
        let table = testutil::table();
        let watch = testutil::watch("counter", 0x404028, Access::Write);
        let mut symbolizer = crate::trace::symbolize::Symbolizer::new(&table);
        for v in values {
            let sample = testutil::decoded(&encode::sample(
                0xffffffff81000010,
                42,
                43,
                v * 1_000_000,
                0x404028,
                1,
                &[encode::KERNEL, 0xffffffff81000010, 0xffffffff81000110],
            ));
            let chain = symbolizer.shared(&sample);
            let hit = Hit {
                sample: &sample,
                watch: &watch,
                watch_index: 0,
                comm: "writer",
                ip: &chain.ip,
                chain: &chain.frames,
                value: Value::Written {
                    value: Some(v),
                    old: v.checked_sub(1),
                    from: ValueFrom::Insn,
                },
                rendered: chain.rendered(),
                cgroup,
            };
            rec.offer(&hit, Rc::clone(&chain), out).unwrap();
        }
    }

    fn text(out: Ftrace<Vec<u8>, Vec<u8>>) -> String {
        String::from_utf8(out.into_inner().0).unwrap()
    }

    /// What a JSON output wrote, as text (for messages) and as its records.
    fn json_records(out: Json<Vec<u8>, Vec<u8>>) -> (String, Vec<serde_json::Value>) {
        let ndjson = String::from_utf8(out.into_inner().0).unwrap();
        let records = ndjson
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (ndjson, records)
    }

    /// The values of the hit lines in `text`, in order.
    fn values(text: &str) -> Vec<String> {
        text.lines()
            .filter_map(|l| l.split_once(" value=").map(|(_, v)| v))
            .map(|v| v.split_whitespace().next().unwrap().to_string())
            .collect()
    }

    #[test]
    fn the_buffer_wraps_and_a_dump_prints_the_last_n_oldest_first() {
        let mut rec = recorder(3, &[]);
        let mut out = Ftrace::new(Vec::new(), Vec::new());
        offer_values(&mut rec, &mut out, 1..=5);
        assert_eq!(text(out), "", "nothing is printed before a trigger");
        let mut out = Ftrace::new(Vec::new(), Vec::new());
        offer_values(&mut rec, &mut out, []);
        rec.dump(&mut out, DumpTrigger::Signal, 6_000_000, None)
            .unwrap();
        let t = text(out);
        assert!(
            t.starts_with("# dump at 0.006000: SIGUSR1; the last 3 hits\n"),
            "{t}"
        );
        assert_eq!(values(&t), ["0x3", "0x4", "0x5"], "{t}");
        assert!(
            t.contains(" => vfs_read+0x10/0x100\n"),
            "frames printed: {t}"
        );
    }

    /// The buffer grows as hits come and stops at exactly N slots: memory stays flat once it is full.
    #[test]
    fn a_full_buffer_has_no_spare_slots() {
        let mut rec = recorder(5000, &[]);
        let mut out = Ftrace::new(Vec::new(), Vec::new());
        offer_values(&mut rec, &mut out, 1..=3000);
        assert_eq!(rec.kept.capacity(), INITIAL_CAPACITY);
        offer_values(&mut rec, &mut out, 3001..=12000);
        assert_eq!((rec.kept.len(), rec.kept.capacity()), (5000, 5000));
        assert_eq!(
            rec.kept.front().map(|k| k.value),
            rec.kept.front().map(|_| Value::Written {
                value: Some(7001),
                old: Some(7000),
                from: ValueFrom::Insn,
            })
        );
    }

    #[test]
    fn a_hit_trigger_prints_the_n_before_it_then_itself_and_records_afresh() {
        let mut rec = recorder(3, &["value == 5"]);
        let mut out = Ftrace::new(Vec::new(), Vec::new());
        offer_values(&mut rec, &mut out, 1..=7);
        let mut signal = Ftrace::new(Vec::new(), Vec::new());
        rec.dump(&mut signal, DumpTrigger::Signal, 8_000_000, None)
            .unwrap();
        let t = text(out);
        assert!(
            t.starts_with(
                "# dump at 0.005000: --dump-on 'value == 5' held; the last 3 hits, then it\n"
            ),
            "{t}"
        );
        assert_eq!(values(&t), ["0x2", "0x3", "0x4", "0x5"], "{t}");
        assert_eq!(
            values(&text(signal)),
            ["0x6", "0x7"],
            "the buffer starts over after a dump"
        );
    }

    /// A dump before the first hit says that no hit had come yet (it said "the last 0 hits"); one after
    /// a dump emptied the buffer, that none came since.
    #[test]
    fn an_empty_buffer_dumps_its_heading_alone() {
        let mut rec = recorder(10, &[]);
        let mut out = Ftrace::new(Vec::new(), Vec::new());
        rec.dump(&mut out, DumpTrigger::Signal, 1_000_000, None)
            .unwrap();
        assert_eq!(
            text(out),
            "# dump at 0.001000: SIGUSR1; no hit had come yet\n"
        );
        // A trigger on the very first hit: the heading, then that hit.
        let mut rec = recorder(10, &["value == 1"]);
        let mut out = Ftrace::new(Vec::new(), Vec::new());
        offer_values(&mut rec, &mut out, [1]);
        let t = text(out);
        assert!(t.contains("; no hit had come before it, then it\n"), "{t}");
        assert_eq!(values(&t), ["0x1"]);
        // After a dump took every kept hit: none since.
        let mut rec = recorder(10, &[]);
        let mut out = Ftrace::new(Vec::new(), Vec::new());
        offer_values(&mut rec, &mut out, [1, 2]);
        rec.dump(&mut out, DumpTrigger::Signal, 5_000_000, None)
            .unwrap();
        rec.dump(&mut out, DumpTrigger::Signal, 6_000_000, None)
            .unwrap();
        let t = text(out);
        assert!(t.contains("; the last 2 hits\n"), "{t}");
        assert!(t.ends_with("SIGUSR1; no hit since the last dump\n"), "{t}");
    }

    /// A tracepoint that fired before the first hit (the hits read after it came later): its dump says no
    /// hit had come yet, in text and JSON, and the later hits stay kept.
    #[test]
    fn a_tracepoint_before_the_first_hit_says_no_hit_had_come() {
        let trigger = || DumpTrigger::Tracepoint {
            name: "error_report:error_report_end".into(),
            cpu: 0,
        };
        let mut rec = recorder(10, &[]);
        let mut out = Ftrace::new(Vec::new(), Vec::new());
        offer_values(&mut rec, &mut out, 1..=2);
        rec.dump(&mut out, trigger(), 500_000, Some(500_000))
            .unwrap();
        assert_eq!(
            text(out),
            "# dump at 0.000500: tracepoint error_report:error_report_end fired on cpu 0; no hit had \
             come yet\n"
        );
        let mut json = Json::new(Vec::new(), Vec::new());
        rec.dump(&mut json, trigger(), 500_000, Some(500_000))
            .unwrap();
        rec.dump(&mut json, DumpTrigger::Signal, 9_000_000, None)
            .unwrap();
        let (ndjson, records) = json_records(json);
        assert_eq!(records[0]["hits"], 0, "{ndjson}");
        assert_eq!(records[0]["no_hit_yet"], true, "{ndjson}");
        assert_eq!(records[1]["hits"], 2, "the later hits stayed: {ndjson}");
        assert!(records[1].get("no_hit_yet").is_none(), "{ndjson}");
    }

    /// A tracepoint dump prints the hits up to its firing; those recorded after it stay for the next one.
    #[test]
    fn a_tracepoint_dump_stops_at_its_firing_in_json() {
        let mut rec = recorder(10, &[]);
        let mut out = Json::new(Vec::new(), Vec::new());
        offer_values(&mut rec, &mut out, 1..=4);
        let trigger = DumpTrigger::Tracepoint {
            name: "error_report:error_report_end".into(),
            cpu: 1,
        };
        rec.dump(&mut out, trigger, 2_500_000, Some(2_500_000))
            .unwrap();
        rec.dump(&mut out, DumpTrigger::Signal, 5_000_000, None)
            .unwrap();
        let (_, records) = json_records(out);
        let kinds: Vec<(&str, Option<&str>)> = records
            .iter()
            .map(|r| (r["type"].as_str().unwrap(), r["value"].as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("dump", None),
                ("hit", Some("0x1")),
                ("hit", Some("0x2")),
                ("dump", None),
                ("hit", Some("0x3")),
                ("hit", Some("0x4")),
            ]
        );
        let first = &records[0];
        assert_eq!(first["trigger"], "tracepoint");
        assert_eq!(first["tracepoint"], "error_report:error_report_end");
        assert_eq!(first["cpu"], 1);
        assert_eq!(first["hits"], 2);
        assert_eq!(first["time_ns"], 2_500_000);
        assert!(first.get("condition").is_none(), "{first}");
        assert_eq!(records[3]["trigger"], "signal");
        assert_eq!(records[3]["hits"], 2);
    }
    /// A `--dump-on` tracepoint firing at the given times, on cpu 0, one a read.
    struct Firing(&'static str, Vec<u64>);

    impl Fires for Firing {
        fn name(&self) -> &str {
            self.0
        }

        fn fired(&mut self) -> io::Result<Option<(u32, u64)>> {
            Ok(self.1.pop().map(|t| (0, t)))
        }
    }

    /// Of the tracepoints that fired since the last read, the latest is the trigger, with its time.
    #[test]
    fn the_latest_tracepoint_firing_is_the_trigger() {
        let flight = Flight {
            last: 10,
            triggers: Vec::new(),
        };
        let mut rec = Recorder::with_triggers(
            &flight,
            vec![
                Box::new(Firing("a:early", vec![900, 100])),
                Box::new(Firing("b:late", vec![200])),
            ],
        );
        let trigger = |name: &str| DumpTrigger::Tracepoint {
            name: name.into(),
            cpu: 0,
        };
        assert_eq!(
            rec.tracepoint_fired().ok(),
            Some(Some((trigger("b:late"), 200)))
        );
        assert_eq!(
            rec.tracepoint_fired().ok(),
            Some(Some((trigger("a:early"), 900)))
        );
        assert_eq!(rec.tracepoint_fired().ok(), Some(None));
    }

    /// A session's turn for [`turn`]: a tracepoint firing to report, the step that stops, and a log.
    #[derive(Default)]
    struct Turns {
        fired: Option<(DumpTrigger, u64)>,
        stop_at: &'static str,
        log: Vec<String>,
    }

    impl Turns {
        fn step(&mut self, what: String) -> Option<StopReason> {
            let stop = what.starts_with(self.stop_at) && !self.stop_at.is_empty();
            self.log.push(what);
            stop.then_some(StopReason::BrokenPipe)
        }
    }

    impl crate::trace::context::Marks for Turns {
        fn now(&self) -> u64 {
            unreachable!("a turn marks nothing itself");
        }

        fn emit(&mut self, _: &StreamEvent, _: u64) -> Option<StopReason> {
            unreachable!("a turn marks nothing itself");
        }
    }

    impl Rings for Turns {
        fn watches(&self) -> &[Watch] {
            unreachable!("a turn names no watch");
        }

        fn drain(&mut self) {
            self.log.push("drain".into());
        }

        fn release_ready(&mut self) -> Option<StopReason> {
            self.step("release".into())
        }

        fn flush(&mut self) -> Option<StopReason> {
            unreachable!("a turn releases what is ready");
        }

        fn explain(&self, _: &crate::perf::event::OpenError) -> (String, &'static str) {
            unreachable!("a turn opens nothing");
        }
    }

    impl Turning for Turns {
        fn fired(&mut self) -> crate::error::Result<Option<(DumpTrigger, u64)>> {
            self.log.push("fired?".into());
            Ok(self.fired.take())
        }

        fn dump_at(&mut self, _: DumpTrigger, time: u64) -> Option<StopReason> {
            self.step(format!("dump up to {time}"))
        }

        fn dump(&mut self, trigger: DumpTrigger, time: u64) -> Option<StopReason> {
            self.step(format!("dump {trigger:?} at {time}"))
        }
    }

    /// The tracepoint is asked before the drain (every hit before its firing is then in the rings), its
    /// dump comes before the release, and a signal's dump after it; a stop ends the turn there.
    #[test]
    fn a_turn_dumps_at_a_tracepoint_before_the_release_and_at_a_signal_after() {
        let fired = (
            DumpTrigger::Tracepoint {
                name: "t:p".into(),
                cpu: 1,
            },
            200,
        );
        let mut t = Turns {
            fired: Some(fired.clone()),
            ..Turns::default()
        };
        assert_eq!(turn(&mut t, Some(300)).ok(), Some(None));
        assert_eq!(
            t.log,
            [
                "fired?",
                "drain",
                "dump up to 200",
                "release",
                "dump Signal at 300"
            ]
        );
        let mut quiet = Turns::default();
        assert_eq!(turn(&mut quiet, None).ok(), Some(None));
        assert_eq!(quiet.log, ["fired?", "drain", "release"]);
        let mut closed = Turns {
            fired: Some(fired),
            stop_at: "dump up",
            ..Turns::default()
        };
        let stop = turn(&mut closed, Some(300)).ok();
        assert_eq!(stop, Some(Some(StopReason::BrokenPipe)));
        assert_eq!(closed.log, ["fired?", "drain", "dump up to 200"]);
        let mut released = Turns {
            stop_at: "release",
            ..Turns::default()
        };
        assert_eq!(
            turn(&mut released, Some(300)).ok(),
            Some(Some(StopReason::BrokenPipe))
        );
        assert_eq!(
            released.log,
            ["fired?", "drain", "release"],
            "no dump after a stop"
        );
    }

    /// A kept hit keeps its writer's cgroup: the dump names it as the stream would have.
    #[test]
    fn a_dumped_hit_names_its_cgroup() {
        let pod = crate::report::cgroup::tests::pod();
        let mut rec = recorder(10, &[]);
        let mut out = Json::new(Vec::new(), Vec::new());
        offer_values_in(&mut rec, &mut out, 1..=2, Some(&pod));
        offer_values(&mut rec, &mut out, 3..=3);
        rec.dump(&mut out, DumpTrigger::Signal, 5_000_000, None)
            .unwrap();
        let ids: Vec<Option<u64>> = json_records(out)
            .1
            .into_iter()
            .filter(|r| r["type"] == "hit")
            .map(|r| r["cgroup_id"].as_u64())
            .collect();
        assert_eq!(ids, [Some(0x1a), Some(0x1a), None]);
    }
}
