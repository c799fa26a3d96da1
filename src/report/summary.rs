//! `--summary`: the answer for a noisy variable. [`Tally`] counts reported hits by unique call chain, by
//! writer ip and by comm (by CPU is already in [`Summary`]), and with `--value` by the value each store
//! wrote, while a target has few distinct ones ([`VALUES_MAX`]); [`write_text`] prints it, most frequent
//! first, as `#` lines so an ftrace parser still skips it. The JSON form is in [`super::json`].
//!
//! With `--on` a target index is a breakpoint slot, which holds one object after another: the tally then
//! counts every slot's hits as the one target's ([`Tally::of_objects`]), named without any object's
//! address, and the text adds the hits by object from the objects' books ([`Summary::objects`]).

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use rustc_hash::FxHashMap;

use super::cgroup::CgroupName;
use super::escape::escaped;
use super::{Hit, ObjectTally, ResolvedFrame, Summary, Value};

/// One unique call chain of one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub count: u64,
    pub target: usize,
    pub target_name: String,
    /// Innermost first, as the first hit on this chain named them.
    pub frames: Vec<ResolvedFrame>,
    pub comms: BTreeMap<String, u64>,
}

impl Chain {
    /// The comm named with unknown user frames: the one that wrote most along this chain.
    pub fn top_comms(&self) -> Vec<(&str, u64)> {
        let mut v: Vec<(&str, u64)> = self.comms.iter().map(|(c, &n)| (c.as_str(), n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpCount {
    pub count: u64,
    pub ip: ResolvedFrame,
}

/// Distinct values written counted per target: "which values does this variable take" is a question for a
/// flag, a state or a refcount; a counter or a pointer takes too many for a table to say anything.
pub const VALUES_MAX: usize = 32;

/// `--value`: how often each value was written to one target, kept while it has at most [`VALUES_MAX`]
/// distinct ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueCounts {
    pub target: usize,
    /// The target's name when its first hit with `--value` was counted.
    pub target_name: String,
    /// `(value, count)` in first-seen order; emptied for good once it would pass [`VALUES_MAX`].
    counts: Vec<(u64, u64)>,
    overflowed: bool,
}

impl ValueCounts {
    fn new(target: usize, target_name: &str) -> Self {
        ValueCounts {
            target,
            target_name: target_name.to_string(),
            // Full size at once: a new value then never reallocates.
            counts: Vec::with_capacity(VALUES_MAX),
            overflowed: false,
        }
    }

    fn add(&mut self, value: u64, count: u64) {
        if self.overflowed {
            return;
        }
        // At most 32 entries: a scan is as quick as a hash and needs no allocation.
        if let Some((_, n)) = self.counts.iter_mut().find(|(v, _)| *v == value) {
            *n += count;
        } else if self.counts.len() < VALUES_MAX {
            self.counts.push((value, count));
        } else {
            self.overflowed = true;
            self.counts = Vec::new();
        }
    }

    /// `(value, count)`, most frequent first, then by value; empty when [`Self::overflowed`].
    pub fn values(&self) -> Vec<(u64, u64)> {
        let mut v = self.counts.clone();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// The target was written more than [`VALUES_MAX`] distinct values: its counts were dropped.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }
}

/// Counts by chain, ip, comm and (with `--value`) value written.
///
/// Hits are grouped by what they print as (the display key), so one path through the same functions is one
/// chain even when ASLR moved a user binary between processes. Spelling every frame out for every hit was
/// most of `--quiet`'s CPU, so the printed key is made once per *raw* chain (target, addresses, and the
/// writer's pid and comm when a user frame is involved) and the raw key then leads straight to its group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Groups in first-seen order, with their display keys.
    chains: Vec<((usize, Vec<String>), Chain)>,
    chain_index: HashMap<(usize, Vec<String>), usize>,
    raw_chains: FxHashMap<Vec<u64>, usize>,
    ips: Vec<(String, IpCount)>,
    ip_index: HashMap<String, usize>,
    raw_ips: FxHashMap<[u64; 4], usize>,
    by_comm: HashMap<String, u64>,
    /// Small ids for comms, so a raw key stays a list of integers.
    comm_ids: FxHashMap<String, u64>,
    scratch: Vec<u64>,
    /// One per target that had a hit with a value written, in first-seen order.
    values: Vec<ValueCounts>,
    /// Hits by thread: (pid, tid) to the writer's name (the latest) and the count.
    by_thread: BTreeMap<(u32, u32), (String, u64)>,
    /// Hits by the writer's cgroup, where the records carried it: id to its name and the count.
    by_cgroup: BTreeMap<u64, (CgroupName, u64)>,
    /// `--on`: the target every slot's objects are a field of (`(struct widget)$obj.count`). A slot's
    /// label names the object it held at the hit, and a chain or a value table keyed by slot would carry
    /// the first object's name for the hits of every later one: all slots count as target 0, so named.
    objects: Option<String>,
}

/// One writing thread's hits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCount<'a> {
    pub pid: u32,
    pub tid: u32,
    pub comm: &'a str,
    pub count: u64,
}

/// Raw keys remembered before the caches start over: each new process adds keys of its own.
const RAW_KEYS_MAX: usize = 1 << 16;

impl Tally {
    /// `--on` with `target` (`(struct widget)$obj.count`): every slot's hits are counted as that
    /// target's.
    pub fn of_objects(&mut self, target: &str) {
        self.objects = Some(target.to_string());
    }

    /// An empty tally that counts as this one does (`--on`'s target kept): the kernel's totals' recount.
    pub fn emptied(&self) -> Tally {
        Tally {
            objects: self.objects.clone(),
            ..Tally::default()
        }
    }

    /// The target `hit` counts toward, and its name: its own, or with `--on` the objects' one.
    fn target_of<'h>(&'h self, hit: &'h Hit<'_>) -> (usize, &'h str) {
        match &self.objects {
            Some(name) => (0, name),
            None => (hit.watch_index, &hit.watch.label),
        }
    }

    pub fn add(&mut self, hit: &Hit<'_>) {
        self.add_n(hit, 1);
    }

    /// Counts `n` hits like `hit` (the kernel's totals hand over each key's count at once).
    pub fn add_n(&mut self, hit: &Hit<'_>, n: u64) {
        let comm = self.comm_id(hit.comm);
        let pid = u64::from(hit.sample.pid);

        // The chain: [target, pid, comm, (addr, kernel)...]; pid and comm only matter for user frames.
        let user = hit.chain.iter().any(|f| !f.kernel);
        let target = self.target_of(hit).0;
        let mut raw = std::mem::take(&mut self.scratch);
        raw.clear();
        raw.push(target as u64);
        raw.push(if user { pid } else { u64::MAX });
        raw.push(if user { comm } else { u64::MAX });
        for f in hit.chain {
            raw.push(f.addr);
            raw.push(u64::from(f.kernel));
        }
        let i = match self.raw_chains.get(raw.as_slice()) {
            Some(&i) => i,
            None => {
                let i = self.chain_slot(hit);
                if self.raw_chains.len() >= RAW_KEYS_MAX {
                    self.raw_chains.clear();
                }
                self.raw_chains.insert(raw.clone(), i);
                i
            }
        };
        self.scratch = raw;
        let chain = &mut self.chains[i].1;
        chain.count += n;
        bump(&mut chain.comms, hit.comm, n);

        let ip = hit.ip;
        let raw_ip = if ip.kernel {
            [ip.addr, 1, u64::MAX, u64::MAX]
        } else {
            [ip.addr, 0, pid, comm]
        };
        let i = match self.raw_ips.get(&raw_ip) {
            Some(&i) => i,
            None => {
                let name = ip.display(hit.comm).to_string();
                let i = match self.ip_index.get(&name) {
                    Some(&i) => i,
                    None => {
                        self.ips.push((
                            name.clone(),
                            IpCount {
                                count: 0,
                                ip: ip.clone(),
                            },
                        ));
                        self.ip_index.insert(name, self.ips.len() - 1);
                        self.ips.len() - 1
                    }
                };
                if self.raw_ips.len() >= RAW_KEYS_MAX {
                    self.raw_ips.clear();
                }
                self.raw_ips.insert(raw_ip, i);
                i
            }
        };
        self.ips[i].1.count += n;
        bump_hash(&mut self.by_comm, hit.comm, n);
        let thread = self
            .by_thread
            .entry((hit.sample.pid, hit.sample.tid))
            .or_insert_with(|| (String::new(), 0));
        if thread.0 != hit.comm {
            thread.0 = hit.comm.to_string();
        }
        thread.1 += n;
        if let Some(c) = hit.cgroup {
            self.by_cgroup
                .entry(c.id)
                .or_insert_with(|| (c.clone(), 0))
                .1 += n;
        }

        if let Value::Written { value, .. } = hit.value {
            // The table is made by the first hit of `--value`, known value or not, so a target whose values
            // were all lost still has its (empty) section.
            let i = match self.values.iter().position(|t| t.target == target) {
                Some(i) => i,
                None => {
                    let (target, name) = self.target_of(hit);
                    let table = ValueCounts::new(target, name);
                    self.values.push(table);
                    self.values.len() - 1
                }
            };
            if let Some(v) = value {
                self.values[i].add(v, n);
            }
        }
    }

    fn comm_id(&mut self, comm: &str) -> u64 {
        if let Some(&id) = self.comm_ids.get(comm) {
            return id;
        }
        let id = self.comm_ids.len() as u64;
        self.comm_ids.insert(comm.to_string(), id);
        id
    }

    /// The group of a chain seen for the first time under this raw key, found or made by its display key.
    fn chain_slot(&mut self, hit: &Hit<'_>) -> usize {
        let key: Vec<String> = hit
            .chain
            .iter()
            .map(|f| f.display(hit.comm).to_string())
            .collect();
        let (target, name) = self.target_of(hit);
        let target_name = name.to_string();
        let key = (target, key);
        if let Some(&i) = self.chain_index.get(&key) {
            return i;
        }
        self.chains.push((
            key.clone(),
            Chain {
                count: 0,
                target,
                target_name,
                frames: hit.chain.to_vec(),
                comms: BTreeMap::new(),
            },
        ));
        self.chain_index.insert(key, self.chains.len() - 1);
        self.chains.len() - 1
    }

    /// Unique chains, most frequent first (ties in a stable order).
    pub fn chains(&self) -> Vec<&Chain> {
        let mut v: Vec<&((usize, Vec<String>), Chain)> = self.chains.iter().collect();
        v.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(&b.0)));
        v.into_iter().map(|(_, c)| c).collect()
    }

    pub fn by_ip(&self) -> Vec<(&str, &IpCount)> {
        let mut v: Vec<(&str, &IpCount)> = self.ips.iter().map(|(k, c)| (k.as_str(), c)).collect();
        v.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        v
    }

    pub fn by_comm(&self) -> Vec<(&str, u64)> {
        let mut v: Vec<(&str, u64)> = self.by_comm.iter().map(|(k, &n)| (k.as_str(), n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v
    }

    /// Hits by writing thread, most first (then by pid and tid).
    pub fn by_thread(&self) -> Vec<ThreadCount<'_>> {
        let mut v: Vec<ThreadCount<'_>> = self
            .by_thread
            .iter()
            .map(|(&(pid, tid), (comm, count))| ThreadCount {
                pid,
                tid,
                comm,
                count: *count,
            })
            .collect();
        v.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then((a.pid, a.tid).cmp(&(b.pid, b.tid)))
        });
        v
    }

    /// Hits by the writer's cgroup, most first (then by id); empty where no record carried one.
    pub fn by_cgroup(&self) -> Vec<(&CgroupName, u64)> {
        let mut v: Vec<(&CgroupName, u64)> =
            self.by_cgroup.values().map(|(c, n)| (c, *n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.id.cmp(&b.0.id)));
        v
    }

    /// The kernel's counts of target `target`'s values: `(value, count)`, `overflowed` when it was written
    /// more distinct values than the table keeps; replaces what the stream counted. With `--on`, `target`
    /// is a slot and its counts are added to the objects' one table: call it on an [`Tally::emptied`]
    /// tally, once per slot.
    pub fn set_values(
        &mut self,
        target: usize,
        name: &str,
        counts: &[(u64, u64)],
        overflowed: bool,
    ) {
        if let Some(name) = &self.objects {
            let i = match self.values.iter().position(|t| t.target == 0) {
                Some(i) => i,
                None => {
                    self.values.push(ValueCounts::new(0, name));
                    self.values.len() - 1
                }
            };
            let t = &mut self.values[i];
            for &(v, n) in counts {
                t.add(v, n);
            }
            if overflowed {
                t.overflowed = true;
                t.counts = Vec::new();
            }
            return;
        }
        let mut t = ValueCounts::new(target, name);
        for &(v, n) in counts {
            t.add(v, n);
        }
        if overflowed {
            t.overflowed = true;
            t.counts = Vec::new();
        }
        self.values.retain(|v| v.target != target);
        self.values.push(t);
    }

    /// `--value`: the values written, one table per target in target order; empty when no hit had
    /// [`Value::Written`] (no `--value`).
    pub fn by_value(&self) -> Vec<&ValueCounts> {
        let mut v: Vec<&ValueCounts> = self.values.iter().collect();
        v.sort_by_key(|t| t.target);
        v
    }
}

/// Counts `by` more for `name` without allocating once it is known.
fn bump(map: &mut BTreeMap<String, u64>, name: &str, by: u64) {
    match map.get_mut(name) {
        Some(n) => *n += by,
        None => {
            map.insert(name.to_string(), by);
        }
    }
}

fn bump_hash(map: &mut HashMap<String, u64>, name: &str, by: u64) {
    match map.get_mut(name) {
        Some(n) => *n += by,
        None => {
            map.insert(name.to_string(), by);
        }
    }
}

fn pct(n: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        100.0 * n as f64 / total as f64
    }
}

/// How many of `len` rows `--top` shows (0: all of them).
fn shown_of(len: usize, top: usize) -> usize {
    if top == 0 {
        len
    } else {
        top.min(len)
    }
}

/// `#`, then a section's title line.
fn write_heading(w: &mut impl Write, title: &str) -> io::Result<()> {
    writeln!(w, "#")?;
    writeln!(w, "# {title}:")
}

/// The line for the rows `--top` left out, `hits` their counts: how many, and their hits together.
fn write_more(
    w: &mut impl Write,
    what: &str,
    hits: impl ExactSizeIterator<Item = u64>,
) -> io::Result<()> {
    let left = hits.len();
    let rest: u64 = hits.sum();
    writeln!(
        w,
        "# ... {left} more {what} with {rest} hits (--top 0 shows all)"
    )
}

/// The report for people: totals, then the `top` most frequent chains (0: all), then by ip, comm and CPU.
pub fn write_text(
    w: &mut impl Write,
    summary: &Summary,
    tally: &Tally,
    top: usize,
) -> io::Result<()> {
    let total = summary.hits();
    write!(
        w,
        "# summary: {total} hits, {} lost, {} filtered, {:.3}s",
        summary.lost(),
        summary.filtered,
        summary.elapsed.as_secs_f64()
    )?;
    if summary.unprinted() > 0 {
        write!(w, ", {} not printed (ring full)", summary.unprinted())?;
        if summary.from_totals {
            w.write_all(b": every count below is the kernel's, of every hit")?;
        }
    }
    if let Some(stop) = summary.stop {
        write!(w, ", stopped: {stop}")?;
    }
    writeln!(w)?;
    let chains = tally.chains();
    let shown = shown_of(chains.len(), top);
    writeln!(w, "#")?;
    writeln!(
        w,
        "# call chains, most frequent first ({} unique):",
        chains.len()
    )?;
    for c in &chains[..shown] {
        let target = escaped(&c.target_name);
        let comms = c.top_comms();
        let named: Vec<String> = comms
            .iter()
            .take(3)
            .map(|(name, n)| format!("{} {n}", escaped(name)))
            .collect();
        let more = if comms.len() > 3 { ", ..." } else { "" };
        writeln!(w, "#")?;
        writeln!(
            w,
            "# {:>8} hits {:>5.1}%  target={target}  comm: {}{more}",
            c.count,
            pct(c.count, total),
            named.join(", ")
        )?;
        let comm = comms.first().map_or("", |c| c.0);
        for f in &c.frames {
            writeln!(w, "#  => {}", f.display_escaped(comm))?;
        }
    }
    if shown < chains.len() {
        writeln!(w, "#")?;
        let rest = chains[shown..].iter().map(|c| c.count);
        write_more(w, "chains", rest)?;
    }
    write_heading(w, "hits by writer ip")?;
    for (name, c) in tally.by_ip() {
        let name = escaped(name);
        writeln!(w, "# {:>8} {:>5.1}%  {name}", c.count, pct(c.count, total))?;
    }
    write_heading(w, "hits by comm")?;
    for (name, n) in tally.by_comm() {
        let name = escaped(name);
        writeln!(w, "# {n:>8} {:>5.1}%  {name}", pct(n, total))?;
    }
    let threads = tally.by_thread();
    let shown = shown_of(threads.len(), top);
    write_heading(w, "hits by thread")?;
    for t in &threads[..shown] {
        writeln!(
            w,
            "# {:>8} {:>5.1}%  {}-{} (pid {})",
            t.count,
            pct(t.count, total),
            escaped(t.comm),
            t.tid,
            t.pid
        )?;
    }
    if shown < threads.len() {
        write_more(w, "threads", threads[shown..].iter().map(|t| t.count))?;
    }
    if let Some(objects) = &summary.objects {
        write_objects(w, objects, summary.from_totals, total, top)?;
    }
    write_heading(w, "hits by cpu")?;
    for (cpu, &n) in &summary.hits_by_cpu {
        writeln!(w, "# {n:>8} {:>5.1}%  cpu{cpu}", pct(n, total))?;
    }
    let cgroups = tally.by_cgroup();
    if !cgroups.is_empty() {
        write_heading(w, "hits by cgroup")?;
    }
    for (c, n) in cgroups {
        write!(
            w,
            "# {n:>8} {:>5.1}%  {}",
            pct(n, total),
            escaped(&c.display_path())
        )?;
        if let Some(container) = &c.container {
            write!(
                w,
                "  container={} ({})",
                container.id,
                container.runtime.name()
            )?;
        }
        writeln!(w)?;
    }
    for t in tally.by_value() {
        let name = escaped(&t.target_name);
        writeln!(w, "#")?;
        if t.overflowed() {
            writeln!(
                w,
                "# by value written (target {name}): more than {VALUES_MAX} distinct values"
            )?;
            continue;
        }
        let values = t.values();
        if values.is_empty() {
            writeln!(w, "# by value written (target {name}): none known")?;
        } else {
            writeln!(w, "# by value written (target {name}):")?;
        }
        for (v, n) in values {
            writeln!(w, "# {n:>8} {:>5.1}%  0x{v:x}", pct(n, total))?;
        }
    }
    Ok(())
}

/// `--on`: each armed object's hits, most first (then by number), as the stream names it (`#N 0xADDR`);
/// objects with none are only counted.
fn write_objects(
    w: &mut impl Write,
    objects: &ObjectTally,
    from_totals: bool,
    total: u64,
    top: usize,
) -> io::Result<()> {
    let mut hit: Vec<&(u64, u64, u64)> = objects.objects.iter().filter(|o| o.2 > 0).collect();
    hit.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let armed = objects.objects.len();
    let none = armed - hit.len();
    // The kernel's totals are by slot, not by object: recounted, these stay the printed hits'.
    let of = if from_totals {
        ", of the hits printed: the kernel's totals do not keep the object"
    } else {
        ""
    };
    write_heading(
        w,
        &format!("hits by object ({armed} armed, {none} with no hit{of})"),
    )?;
    let shown = shown_of(hit.len(), top);
    for &&(index, addr, n) in &hit[..shown] {
        writeln!(w, "# {n:>8} {:>5.1}%  #{index} 0x{addr:x}", pct(n, total))?;
    }
    if shown < hit.len() {
        write_more(w, "objects", hit[shown..].iter().map(|o| o.2))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::watch::{Access, Watch};
    use crate::perf::record::{encode, Sample};
    use crate::report::testutil::{self, each_hit, table, watch};
    use ksymwatch_symbols::SymbolTable;

    fn sample(tid: u32, cpu: u32, chain: &[u64]) -> Sample {
        testutil::decoded(&encode::sample(chain[1], tid, tid, 1, 0x1000, cpu, chain))
    }

    fn tally_of(
        table: &SymbolTable,
        hits: &[(Sample, &str, usize)],
        watches: &[Watch],
    ) -> (Tally, Summary) {
        let mut tally = Tally::default();
        let mut summary = Summary::default();
        each_hit(table, watches, hits, |hit| {
            tally.add(hit);
            *summary.hits_by_cpu.entry(hit.sample.cpu).or_default() += 1;
        });
        (tally, summary)
    }

    /// The kernel's totals hand a key's hits over at once: counting them so is counting them one by one,
    /// threads included; the text says the counts are the kernel's when the stream dropped hits.
    #[test]
    fn counting_n_at_once_is_counting_one_by_one() {
        let table = table();
        let watches = [watch("target_var", 0x1000, Access::Write)];
        let read = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000110];
        let hits = vec![
            (sample(5, 0, &read), "cat", 0),
            (sample(6, 1, &read), "dd", 0),
        ];
        let (mut once, _) = tally_of(&table, &hits, &watches);
        each_hit(&table, &watches, &hits, |hit| once.add_n(hit, 2));
        let mut each = Tally::default();
        each_hit(&table, &watches, &hits, |hit| {
            for _ in 0..3 {
                each.add(hit);
            }
        });
        assert_eq!(once.chains(), each.chains());
        assert_eq!(once.by_comm(), each.by_comm());
        assert_eq!(
            once.by_thread(),
            [
                ThreadCount {
                    pid: 5,
                    tid: 5,
                    comm: "cat",
                    count: 3
                },
                ThreadCount {
                    pid: 6,
                    tid: 6,
                    comm: "dd",
                    count: 3
                }
            ]
        );
        once.set_values(0, "target_var", &[(7, 5), (9, 1)], false);
        assert_eq!(once.by_value()[0].values(), [(7, 5), (9, 1)]);
        once.set_values(0, "target_var", &[], true);
        assert!(once.by_value()[0].overflowed());
        let mut summary = Summary {
            from_totals: true,
            ..Summary::default()
        };
        summary.hits_by_cpu.insert(0, 6);
        summary.unprinted_by_cpu.insert(0, 4);
        let text = text_of(&summary, &once, 0);
        assert!(
            text.starts_with(
                "# summary: 6 hits, 0 lost, 0 filtered, 0.000s, 4 not printed (ring full): every count \
                 below is the kernel's, of every hit\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("# hits by thread:\n#        3  50.0%  cat-5 (pid 5)\n#        3  50.0%  dd-6 (pid 6)\n"),
            "{text}"
        );
    }

    #[test]
    fn chains_most_frequent_first_with_totals() {
        let table = table();
        let watches = [watch("target_var", 0x1000, Access::Write)];
        let read = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000110];
        let ksys = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000210];
        let hits = vec![
            (sample(5, 0, &ksys), "cat", 0),
            (sample(6, 1, &read), "dd", 0),
            (sample(7, 1, &read), "dd", 0),
            (sample(8, 0, &read), "cat", 0),
        ];
        let (tally, mut summary) = tally_of(&table, &hits, &watches);
        let chains = tally.chains();
        assert_eq!(chains.len(), 2);
        assert_eq!(chains[0].count, 3);
        assert_eq!(chains[0].frames[1].sym.as_deref(), Some("vfs_read"));
        assert_eq!(chains[0].top_comms(), [("dd", 2), ("cat", 1)]);
        assert_eq!(tally.by_ip()[0].1.count, 4);
        assert_eq!(tally.by_comm(), [("cat", 2), ("dd", 2)]);
        summary.filtered = 9;
        let text = text_of(&summary, &tally, 1);
        assert!(
            text.starts_with("# summary: 4 hits, 0 lost, 9 filtered,"),
            "{text}"
        );
        for part in [
            "# call chains, most frequent first (2 unique):",
            "#        3 hits  75.0%  target=target_var  comm: dd 2, cat 1\n#  => read_zero+0x10/0x100\n#  => vfs_read+0x10/0x100\n",
            "# ... 1 more chains with 1 hits",
            "#        4 100.0%  read_zero+0x10/0x100",
            "#        2  50.0%  cpu1",
            "# ... 3 more threads with 3 hits (--top 0 shows all)",
        ] {
            assert!(text.contains(part), "`{part}` missing from:\n{text}");
        }
        assert!(text.lines().all(|l| l.starts_with('#')));
    }

    /// The text summary of `summary` and `tally`, `top` chains shown.
    fn text_of(summary: &Summary, tally: &Tally, top: usize) -> String {
        let mut out = Vec::new();
        write_text(&mut out, summary, tally, top).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn written(value: Option<u64>) -> Value {
        Value::Written {
            value,
            old: None,
            from: crate::report::ValueFrom::Insn,
        }
    }

    /// A tally of one user store hit once with each of `values`.
    fn tally_of_values(values: &[Value]) -> (Tally, Summary) {
        let mut tally = Tally::default();
        let mut summary = Summary::default();
        testutil::each_value_of_a_user_store(values, |hit| {
            tally.add(hit);
            *summary.hits_by_cpu.entry(hit.sample.cpu).or_default() += 1;
        });
        (tally, summary)
    }

    /// Values written are counted per target, most frequent first then by value; only a known written
    /// value counts, and a target with `--value` hits but no known value still has its (empty) table.
    #[test]
    fn values_written_most_frequent_first() {
        let mut values: Vec<Value> = [3, 1, 2, 1, 3, 2, 7]
            .into_iter()
            .map(|v| written(Some(v)))
            .collect();
        values.extend([
            written(Some(1)),
            written(None),
            Value::Read(1),
            Value::Unreadable,
            Value::NotRead,
        ]);
        let (tally, summary) = tally_of_values(&values);
        let t = tally.by_value();
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].target, t[0].target_name.as_str()), (0, "counter"));
        assert_eq!(t[0].values(), [(1, 3), (2, 2), (3, 2), (7, 1)]);
        assert!(!t[0].overflowed());
        let text = text_of(&summary, &tally, 0);
        assert!(
            text.ends_with(concat!(
                "#\n",
                "# by value written (target counter):\n",
                "#        3  25.0%  0x1\n",
                "#        2  16.7%  0x2\n",
                "#        2  16.7%  0x3\n",
                "#        1   8.3%  0x7\n",
            )),
            "{text}"
        );

        let (tally, summary) = tally_of_values(&[written(None)]);
        assert_eq!(tally.by_value()[0].values(), []);
        let text = text_of(&summary, &tally, 0);
        assert!(
            text.ends_with("#\n# by value written (target counter): none known\n"),
            "{text}"
        );
    }

    /// Without `--value` there is no table and no section.
    #[test]
    fn no_values_without_written() {
        let (tally, summary) =
            tally_of_values(&[Value::Read(1), Value::Unreadable, Value::NotRead]);
        assert!(tally.by_value().is_empty());
        assert!(!text_of(&summary, &tally, 0).contains("by value"));
    }

    /// 32 distinct values are counted; the 33rd drops the target's table for good.
    #[test]
    fn values_overflow_at_33_distinct() {
        let values: Vec<Value> = (0..VALUES_MAX as u64)
            .chain([0, 0])
            .map(|v| written(Some(v)))
            .collect();
        let (tally, _) = tally_of_values(&values);
        let t = tally.by_value();
        assert!(!t[0].overflowed());
        assert_eq!(t[0].values().len(), VALUES_MAX);
        assert_eq!(t[0].values()[0], (0, 3));

        let more: Vec<Value> = values
            .iter()
            .copied()
            .chain([written(Some(1000)), written(Some(0))])
            .collect();
        let (tally, summary) = tally_of_values(&more);
        let t = tally.by_value();
        assert!(t[0].overflowed());
        assert_eq!(t[0].values(), []);
        let text = text_of(&summary, &tally, 0);
        assert!(
            text.ends_with(
                "#\n# by value written (target counter): more than 32 distinct values\n"
            ),
            "{text}"
        );
    }

    /// Counting a value already in its table, or on a target past its limit, allocates nothing.
    #[test]
    fn counting_a_known_value_allocates_nothing() {
        let mut tally = Tally::default();
        let values: Vec<Value> = (0..VALUES_MAX as u64 + 1)
            .map(|v| written(Some(v)))
            .collect();
        let watches = [
            watch("a", 0x1000, Access::Write),
            watch("b", 0x2000, Access::Write),
        ];
        let s = sample(5, 0, &[encode::KERNEL, 0xffffffff81000010]);
        let hits = [(s.clone(), "w", 0), (s, "w", 1)];
        each_hit(&table(), &watches, &hits, |hit| {
            // Target 0 keeps its table; target 1 overflows.
            let seen = if hit.watch_index == 0 {
                3
            } else {
                values.len()
            };
            for &value in &values[..seen] {
                tally.add(&Hit { value, ..*hit });
            }
            let before = crate::testalloc::allocations();
            for round in 0..1000 {
                tally.add(&Hit {
                    value: values[round % 3],
                    ..*hit
                });
            }
            assert_eq!(crate::testalloc::allocations() - before, 0);
        });
        let t = tally.by_value();
        assert_eq!(t[0].values().len(), 3);
        assert!(t[1].overflowed());
    }

    /// `--on`: a slot holds one object after another. Hits are counted as the one target's, named
    /// without an object's address (not as the first object a slot held), a chain through several slots
    /// is one chain, values are one table, the kernel's recount counts the same way, and the text lists
    /// the hits by object from the objects' books.
    #[test]
    fn object_hits_are_the_targets_and_listed_by_object() {
        use crate::report::json::SummaryRecord;
        let target = "(struct widget)$obj.count";
        let object = |i: u64, addr: u64| {
            watch(
                &format!("(struct widget)0x{addr:x}.count#{i}"),
                addr,
                Access::Write,
            )
        };
        let (o0, o1, o2) = (object(0, 0xa000), object(1, 0xc000), object(2, 0xb000));
        let read = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000110];
        let ksys = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000210];
        let hits = [(sample(5, 0, &read), "w", 0), (sample(5, 0, &ksys), "w", 0)];
        // (object's watch, slot, chain, hits): #0 and then #2 in slot 0, #1 in slot 1.
        let made = [(&o0, 0, 0, 3), (&o1, 1, 0, 2), (&o2, 0, 1, 1)];
        let count = |tally: &mut Tally| {
            let mut i = 0;
            each_hit(
                &table(),
                &[watch("slot", 0x1000, Access::Write)],
                &hits,
                |hit| {
                    for &(w, slot, chain, n) in &made {
                        if chain == i {
                            let hit = Hit {
                                watch: w,
                                watch_index: slot,
                                value: written(Some(7)),
                                ..*hit
                            };
                            tally.add_n(&hit, n);
                        }
                    }
                    i += 1;
                },
            );
        };
        let mut by_slot = Tally::default();
        count(&mut by_slot);
        assert_eq!(
            by_slot.chains()[0].target_name,
            "(struct widget)0xa000.count#0",
            "without --on: by target"
        );

        let mut tally = Tally::default();
        tally.of_objects(target);
        count(&mut tally);
        let chains = tally.chains();
        assert_eq!(chains.len(), 2, "{chains:?}");
        assert_eq!((chains[0].count, chains[1].count), (5, 1));
        assert!(chains
            .iter()
            .all(|c| (c.target, c.target_name.as_str()) == (0, target)));
        let values = tally.by_value();
        assert_eq!(values.len(), 1);
        assert_eq!(
            (values[0].target_name.as_str(), values[0].values()),
            (target, vec![(7, 6)])
        );

        let mut summary = Summary {
            objects: Some(ObjectTally {
                objects: vec![
                    (0, 0xa000, 3),
                    (1, 0xc000, 2),
                    (2, 0xb000, 1),
                    (3, 0xd000, 0),
                ],
                ..ObjectTally::default()
            }),
            ..Summary::default()
        };
        summary.hits_by_cpu.insert(0, 6);
        let text = text_of(&summary, &tally, 2);
        assert!(
            text.contains(&format!(
                "#        5 hits  83.3%  target={target}  comm: w 5\n"
            )),
            "{text}"
        );
        assert!(
            !text.contains("0xa000.count"),
            "no object's name on a chain: {text}"
        );
        let section = &text[text.find("# hits by object").expect(&text)..];
        let section = &section[..section.find("#\n").expect(&text)];
        assert_eq!(
            section,
            "# hits by object (4 armed, 1 with no hit):\n#        3  50.0%  #0 0xa000\n\
             #        2  33.3%  #1 0xc000\n# ... 1 more objects with 1 hits (--top 0 shows all)\n"
        );
        summary.tally = Some(tally.clone());
        let json = serde_json::to_value(SummaryRecord::new(&summary)).unwrap();
        assert_eq!(json["chains"][0]["target"], target);

        // The kernel's totals are by slot: recounted, the slots' values add up in the objects' table.
        let mut recounted = tally.emptied();
        recounted.set_values(0, "slot", &[(7, 4), (9, 1)], false);
        recounted.set_values(1, "slot", &[(7, 2)], false);
        let values = recounted.by_value();
        assert_eq!(
            (values[0].target_name.as_str(), values[0].values()),
            (target, vec![(7, 6), (9, 1)])
        );
        summary.from_totals = true;
        assert!(text_of(&summary, &recounted, 0).contains(
            "# hits by object (4 armed, 1 with no hit, of the hits printed: the kernel's totals do not keep the object):\n"
        ));
        assert!(
            !text_of(&Summary::default(), &tally, 0).contains("by object"),
            "no section without --on"
        );
    }

    /// `--summary` counts hits by the writer's cgroup, most first, each with its path and container; a
    /// cgroup removed before it was named keeps its id; no section where no record carried a cgroup. The
    /// JSON summary carries the same tally.
    #[test]
    fn hits_are_counted_by_cgroup() {
        use crate::report::cgroup::tests::{pod, ID};
        use crate::report::json::SummaryRecord;
        let pod = pod();
        let plain = CgroupName::new(2, Some("/system.slice/app.service".into()));
        let gone = CgroupName::new(3, None);
        let watches = [watch("a", 0x1000, Access::Write)];
        let s = sample(5, 0, &[encode::KERNEL, 0xffffffff81000010]);
        let mut tally = Tally::default();
        let mut summary = Summary::default();
        each_hit(&table(), &watches, &[(s, "w", 0)], |hit| {
            for (c, n) in [(&pod, 3), (&plain, 1), (&gone, 2)] {
                tally.add_n(
                    &Hit {
                        cgroup: Some(c),
                        ..*hit
                    },
                    n,
                );
            }
            tally.add(hit);
        });
        summary.hits_by_cpu.insert(0, 7);
        let text = text_of(&summary, &tally, 0);
        let section = &text[text.find("# hits by cgroup:").expect(&text)..];
        let pod_path = pod.path.clone().unwrap();
        assert_eq!(
            section,
            format!(
                "# hits by cgroup:\n#        3  42.9%  {pod_path}  container={ID} (containerd)\n\
                 #        2  28.6%  (removed, id 3)\n#        1  14.3%  /system.slice/app.service\n"
            )
        );
        summary.tally = Some(tally.clone());
        let json = serde_json::to_value(SummaryRecord::new(&summary)).unwrap();
        let by = &json["by_cgroup"];
        assert_eq!(by[0]["id"], 0x1a);
        assert_eq!(by[0]["container_id"], ID);
        assert_eq!(by[0]["container_runtime"], "containerd");
        assert_eq!(by[0]["count"], 3);
        assert!(by[1]["path"].is_null() && by[1].get("container_id").is_none());
        assert_eq!(by[2]["path"], "/system.slice/app.service");

        // Recounted from the kernel's totals (keyed by cgroup too), the heading is the same.
        summary.from_totals = true;
        assert!(text_of(&summary, &tally, 0).contains("# hits by cgroup:\n"));
        summary.from_totals = false;

        let none = Tally::default();
        assert!(!text_of(&summary, &none, 0).contains("by cgroup"));
        summary.tally = Some(none);
        let json = serde_json::to_value(SummaryRecord::new(&summary)).unwrap();
        assert!(json.get("by_cgroup").is_none());
    }
}
