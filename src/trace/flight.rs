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

use crate::config::condition::Condition;
use crate::config::flight::Flight;
use crate::config::watch::Watch;
use crate::perf::bpf::trigger::Tracepoint;
use crate::perf::record::Sample;
use crate::report::{DumpTrigger, Hit, Output, StreamEvent, Value};
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
        }
    }
}

/// The buffer and the triggers it answers to.
pub struct Recorder {
    last: usize,
    kept: VecDeque<Kept>,
    conditions: Vec<Condition>,
    tracepoints: Vec<Tracepoint>,
    /// The last handles made, reused while hits repeat them.
    comm: Option<Rc<str>>,
    watch: Option<Rc<Watch>>,
}

/// The buffer grows to N as hits come; a large N is not allocated before it fills.
const INITIAL_CAPACITY: usize = 4096;

impl Recorder {
    /// The recorder `flight` asks for, with its tracepoints already attached.
    pub fn new(flight: &Flight, tracepoints: Vec<Tracepoint>) -> Recorder {
        Recorder {
            last: flight.last,
            kept: VecDeque::with_capacity(flight.last.min(INITIAL_CAPACITY)),
            conditions: flight.conditions().cloned().collect(),
            tracepoints,
            comm: None,
            watch: None,
        }
    }

    /// The trigger `hit` fires, if any: the first `--dump-on` condition its value makes hold.
    pub fn fired_by(&self, hit: &Hit<'_>) -> Option<DumpTrigger> {
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

    /// Keeps `hit` (named as `chain`), forgetting the oldest kept hit when N are kept.
    pub fn record(&mut self, hit: &Hit<'_>, chain: Rc<NamedChain>) {
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
        };
        if self.kept.len() >= self.last {
            self.kept.pop_front();
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
        out.event(&StreamEvent::Dump { trigger, hits: n }, time_ns)?;
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
                    let name = t.name.clone();
                    latest = Some((DumpTrigger::Tracepoint { name, cpu }, time));
                }
            }
        }
        Ok(latest)
    }
}
