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
    by_comm: FxHashMap<String, u64>,
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

fn bump_hash(map: &mut FxHashMap<String, u64>, name: &str, by: u64) {
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
        write!(
            w,
            ", {} not printed ({})",
            summary.unprinted(),
            summary.unprinted_because()
        )?;
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
mod tests;
