//! How an event's rings are read into the merge: the decoder its delivery path chose ([`Decoder`]), and
//! one pass over its rings ([`drain_one`]) with what the decoders write to in it ([`Pass`]): the merge,
//! the spare call-chain vectors and the call chains read so far ([`Reuse`]), and the watched value read
//! from the writer's process ([`read_value`]) once per pass.

use crate::model::watch::Watch;
use crate::perf::bpf::hit_set::HitPrograms;
use crate::perf::event::{Bind, CpuEvent, Delivery, EventConfig};
use crate::perf::hit_record::ChainKey;
use crate::perf::record::Frame;
use crate::perf::sys;
use crate::report::Value;

use super::decode::{Out, Tally};
use super::hits::{HitDecoder, HitValue};
use super::samples::SampleDecoder;
use super::{Item, RingKey, Sorter, Tracked};

/// How an event's rings are decoded: one decoder per delivery path, chosen once, when the event is taken,
/// so that none carries another path's state.
pub(super) enum Decoder {
    /// The hit path: the breakpoint's perf ring (task records) and the hit program's ring buffer.
    Hits {
        perf: SampleDecoder,
        hits: HitDecoder,
    },
    /// Perf samples: one breakpoint per CPU (system-wide), or per thread (a process watch).
    Samples(SampleDecoder),
}

impl Decoder {
    /// The decoder `ev`'s rings need under `cfg`; `ring_lost`: the hit program's count of records lost
    /// on its CPU when the event was taken, at `now`.
    pub(super) fn of(ev: &CpuEvent, cfg: &EventConfig, ring_lost: u64, now: u64) -> Decoder {
        let process = ev.bind != Bind::Cpu;
        // The hit ring, not the configuration, makes an event the hit path's: a test hands one to a bare
        // configuration.
        if ev.hits.is_some() {
            let perf = SampleDecoder::of_copies(ev.cpu, ev.watch, ev.sample_type, now);
            let value = match &cfg.delivery {
                Delivery::Hits(h) if h.written => HitValue::Written,
                // A process watch's program, per CPU or per thread, reads the range at the trap.
                Delivery::Hits(h) => h
                    .read_len(ev.watch)
                    .map_or(HitValue::NotRead, |len| HitValue::Read { len }),
                Delivery::Samples => HitValue::NotRead,
            };
            let hits = HitDecoder::new(ev.cpu, ev.watch, value, ring_lost, now);
            return Decoder::Hits { perf, hits };
        }
        Decoder::Samples(SampleDecoder::new(
            ev.cpu,
            ev.watch,
            ev.sample_type,
            process,
            now,
        ))
    }

    /// A record of the breakpoint's perf ring.
    fn perf_record(&mut self, bytes: &[u8], out: &mut impl Out) {
        match self {
            Decoder::Hits { perf, .. } | Decoder::Samples(perf) => perf.record(bytes, out),
        }
    }

    /// What the event's rings gave so far, together.
    pub(super) fn tally(&self) -> Tally {
        match self {
            Decoder::Hits { perf, hits } => perf.tally().and(hits.tally()),
            Decoder::Samples(perf) => perf.tally(),
        }
    }

    /// The hit path: records the hit program's ring buffer reported it had no room for so far.
    pub(super) fn hit_ring_lost(&self) -> u64 {
        match self {
            Decoder::Hits { hits, .. } => hits.tally().lost_records,
            Decoder::Samples(_) => 0,
        }
    }
}

/// The hit path's call chains by (watch, key), as read from each watch's `chains` map: a chain is read
/// the first time a record names it and kept (the map holds at most
/// [`crate::perf::bpf::totals::CHAINS_MAX`] a watch, so this does too).
pub(super) type Chains = std::collections::HashMap<(usize, ChainKey), (Vec<u64>, Vec<u64>)>;

/// What every drain reuses: the spare call-chain vectors, the chains read so far, and the hit programs
/// whose maps hold the chains.
pub(super) struct Reuse<'a> {
    spare: &'a mut Vec<Vec<Frame>>,
    chains: &'a mut Chains,
    hits: Option<&'a HitPrograms>,
}

impl<'a> Reuse<'a> {
    pub(super) fn of(
        spare: &'a mut Vec<Vec<Frame>>,
        chains: &'a mut Chains,
        cfg: &'a EventConfig,
    ) -> Reuse<'a> {
        Reuse {
            spare,
            chains,
            hits: cfg.delivery.hit_programs().map(|h| &**h),
        }
    }
}

/// What names a target's hits as they are drained ([`super::EventSet::watch_of`]; apart from the set
/// so that a drain, which holds the rings mutably, can ask too): the watches now, the one a `--control`
/// move left (until the events are enabled again) and the ones moved away from.
#[derive(Clone, Copy)]
pub(super) struct Names<'a> {
    pub now: &'a [Watch],
    /// Per target, the watch a `--control` move left: every hit drained before the events are enabled
    /// again was recorded on it, also one at an address the new watch covers too (the same variable at
    /// another length or access).
    pub steered: &'a [Option<Watch>],
    pub retired: &'a [Watch],
}

impl<'a> Names<'a> {
    /// The watch a hit of target `index` at data address `addr` was recorded on.
    pub fn watch_of(self, index: usize, addr: u64) -> &'a Watch {
        let now = &self.now[index];
        let left = self.steered.get(index).and_then(Option::as_ref);
        if let Some(left) = left.filter(|w| w.covers(addr)) {
            return left;
        }
        if now.covers(addr) {
            return now;
        }
        self.retired
            .iter()
            .rev()
            .find(|w| w.covers(addr))
            .unwrap_or(left.unwrap_or(now))
    }
}

/// The watched range in process `pid` now: `len` (1, 2, 4 or 8) bytes at `addr` as a little-endian
/// integer, with one `process_vm_readv`. A short read or an error (ESRCH: the process is gone; EFAULT: the
/// page is) is [`Value::Unreadable`], never an error of the session.
///
/// A process whose main thread alone has exited has no memory to read through its pid (its leader is a
/// zombie): it is read through another of its threads, found in `/proc/PID/task`, when the pid's read
/// fails.
pub(crate) fn read_value(pid: u32, addr: u64, len: u8) -> Value {
    let mut buf = [0u8; 8];
    let len = usize::from(len).min(buf.len());
    let mut read =
        |from: u32| matches!(sys::process_vm_read(from, addr, &mut buf[..len]), Ok(n) if n == len);
    if read(pid) || other_thread(pid).is_some_and(&mut read) {
        Value::Read(u64::from_le_bytes(buf))
    } else {
        Value::Unreadable
    }
}

/// A thread of process `pid` other than its leader, if it has one.
fn other_thread(pid: u32) -> Option<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&tid| tid != pid)
}

/// What the decoders of one CPU and watch's rings write to in one pass over them: the merge, and what a
/// hit's value is read against.
struct Pass<'a> {
    key: RingKey,
    sorter: &'a mut Sorter,
    reuse: Reuse<'a>,
    /// What names the hits, to find a hit watch's length.
    names: Names<'a>,
    /// One read per process and watched range per pass: every hit taken out of the ring in this pass gets
    /// what the range held at this pass (a flood drains hundreds of hits a pass, and a `process_vm_readv`
    /// costs more than everything else a hit needs).
    read: Option<((u32, u64, u8), Value)>,
}

impl Out for Pass<'_> {
    fn push(&mut self, time: u64, item: Item) {
        self.sorter.push(self.key, time, item);
    }

    fn frames(&mut self) -> Vec<Frame> {
        self.reuse.spare.pop().unwrap_or_default()
    }

    fn recycle(&mut self, frames: Vec<Frame>) {
        self.reuse.spare.push(frames);
    }

    fn chain(&mut self, key: ChainKey) -> Option<&(Vec<u64>, Vec<u64>)> {
        let at = (self.key.watch, key);
        if !self.reuse.chains.contains_key(&at) {
            let chain = self.reuse.hits?.chain(at.0, key).ok().flatten()?;
            self.reuse.chains.insert(at, chain);
        }
        self.reuse.chains.get(&at)
    }

    fn watch_len(&self, addr: u64) -> u8 {
        self.names.watch_of(self.key.watch, addr).len
    }

    fn read_value(&mut self, pid: u32, addr: u64) -> Value {
        let what = (pid, addr, self.watch_len(addr));
        match self.read {
            Some((w, v)) if w == what => v,
            _ => {
                let v = read_value(pid, addr, what.2);
                self.read = Some((what, v));
                v
            }
        }
    }
}

/// Reads one CPU and watch's rings empty into `sorter`: the perf ring, then on the hit path the ring
/// buffer. A process watch's hit gets the watched value read from its process here, as it leaves the
/// ring, not when it is printed (the sorter may hold it for a tick), once per pass and process: `names`
/// finds the hit watch's length.
pub(super) fn drain_one(
    t: &mut Tracked,
    sorter: &mut Sorter,
    started: u64,
    reuse: Reuse<'_>,
    names: Names<'_>,
) {
    let Tracked { ev, decoder, .. } = t;
    let mut pass = Pass {
        key: RingKey::perf(ev.cpu, ev.watch),
        sorter,
        reuse,
        names,
        read: None,
    };
    ev.ring.drain(|bytes| {
        decoder.perf_record(bytes, &mut pass);
        true
    });
    pass.sorter.read_empty(pass.key, started);
    if let (Some(ring), Decoder::Hits { hits, .. }) = (&mut ev.hits, decoder) {
        pass.key.hits = true;
        ring.drain(|bytes| {
            hits.record(bytes, &mut pass);
            true
        });
        pass.sorter.read_empty(pass.key, started);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::watch::Access;

    fn watch(label: &str, addr: u64, len: u8, access: Access) -> Watch {
        Watch {
            label: label.into(),
            addr,
            len,
            access,
            module: None,
            per_cpu: None,
        }
    }

    /// A `--control` move to the same variable at another length or access: until the events are enabled
    /// again, a hit there is the watch moved from; then the new one's; a hit of a watch moved away from
    /// earlier, at another address, is that one's.
    #[test]
    fn a_steered_watch_names_its_hits_until_enabled() {
        let old = watch("counter", 0x1000, 8, Access::Write);
        let new = watch("counter/4", 0x1000, 4, Access::ReadWrite);
        let earlier = watch("other", 0x2000, 8, Access::Write);
        let now = [new.clone()];
        let retired = [earlier.clone(), old.clone()];
        let steered = [Some(old.clone())];
        let names = Names {
            now: &now,
            steered: &steered,
            retired: &retired,
        };
        assert_eq!(names.watch_of(0, 0x1000), &old);
        assert_eq!(names.watch_of(0, 0x2000), &earlier);
        let enabled = Names {
            steered: &[None],
            ..names
        };
        assert_eq!(enabled.watch_of(0, 0x1000), &new);
        assert_eq!(enabled.watch_of(0, 0x2000), &earlier);
        // An address no watch covers (a per-CPU copy whose base is not known yet) is the target's.
        assert_eq!(names.watch_of(0, 0x9000), &old);
        assert_eq!(enabled.watch_of(0, 0x9000), &new);
    }

    /// The value is the watched width's little-endian integer, read from the process by pid; an address
    /// not mapped there (EFAULT) or a process that does not exist (ESRCH) gives no value, not an error.
    #[test]
    fn reads_the_watched_width_from_the_process() {
        let word: u64 = 0x1122_3344_5566_7788;
        let word = std::hint::black_box(&word);
        let addr = word as *const u64 as u64;
        let pid = std::process::id();
        // A sandbox's seccomp filter may refuse the call for every address: that is the environment.
        if let Err(e) = sys::process_vm_read(pid, addr, &mut [0u8; 8]) {
            ksymwatch_symbols::testing::skip(format_args!("process_vm_readv of ourselves: {e}"));
            return;
        }
        let widths = [
            (8, 0x1122_3344_5566_7788),
            (4, 0x5566_7788),
            (2, 0x7788),
            (1, 0x88),
        ];
        for (len, want) in widths {
            assert_eq!(read_value(pid, addr, len), Value::Read(want), "len {len}");
        }
        // Page 0 is never mapped.
        assert_eq!(read_value(pid, 8, 8), Value::Unreadable);
        // Above any pid_max (at most 2^22).
        assert_eq!(read_value(0x7fff_fff0, addr, 8), Value::Unreadable);
    }
}
