//! The kernel's totals in the reports. On the hit path every kept hit is counted in the kernel before its
//! record is tried ([`crate::perf::bpf::totals`]). When the stream dropped records (a full ring), what
//! the reports aggregate starts over from those totals: the hits and hits by CPU, the `--summary` tally
//! (chains, ips, names, threads, values) and what an [`Output`] aggregates (`--folded`, `--flamegraph`),
//! so each is exact (with `--cgroup` the hits by cgroup too: the totals are keyed by the writer's
//! cgroup id as well); the stream itself stays what it printed, and the summary says how many hits it could
//! not print. `lost` then counts only hits in no total. When nothing was dropped the stream's counts are
//! already every hit's and stay as they are (they hold what only the stream knows: a `--value` hit's
//! value decoded from its instruction, the tracer's own filters).

use std::collections::BTreeMap;
use std::io;

use crate::model::filter::IDLE_COMM;
use crate::model::watch::Watch;
use crate::perf::bpf::hit_set::HitPrograms;
use crate::perf::bpf::totals::{CountKey, Counted};
use crate::perf::record::{Context, Frame, Sample};
use crate::report::cgroup::CgroupNames;
use crate::report::summary::Tally;
use crate::report::{Hit, Output, Summary, Value};
use crate::trace::symbolize::Symbolizer;

/// Replaces the summary's counts and `out`'s aggregates with the kernel's totals when the stream dropped
/// hits; does nothing otherwise. An error reading the maps leaves everything as the stream counted it.
/// `cgroups` (`--cgroup`) names the writers' cgroups as the stream does; `filtered_here`: of the
/// summary's `filtered`, the hits the tracer's own filters dropped.
pub fn apply<O: Output>(
    hits: &HitPrograms,
    watches: &[Watch],
    (symbolizer, mut cgroups): (&mut Symbolizer<'_>, Option<&mut CgroupNames>),
    (summary, filtered_here): (&mut Summary, u64),
    out: &mut O,
) -> io::Result<()> {
    let counted: Vec<Counted> = (0..hits.watches().min(watches.len()))
        .map(|w| hits.counted(w))
        .collect::<io::Result<_>>()?;
    let mut kept = BTreeMap::new();
    let mut uncounted = BTreeMap::new();
    for c in &counted {
        let by_cpu = c.kept_by_cpu.iter().zip(&c.uncounted_by_cpu);
        for (cpu, (&k, &u)) in by_cpu.enumerate() {
            add(&mut kept, cpu, k);
            add(&mut uncounted, cpu, u);
        }
    }
    let printed_by_cpu = less(&summary.hits_by_cpu, &summary.unprinted_by_cpu);
    if holds_every_hit(summary, &kept, filtered_here) {
        return Ok(());
    }
    summary.unprinted_by_cpu = less(&kept, &printed_by_cpu);
    summary.hits_by_cpu = less(&kept, &uncounted);
    summary.lost_by_cpu = uncounted;
    summary.from_totals = true;
    let mut tally = summary.tally.as_ref().map(Tally::emptied);
    out.recount();
    let mut no_chain = 0;
    for (w, c) in counted.iter().enumerate() {
        for (key, n) in &c.counts {
            // Of the counted hits: the kernel's own count of chains without room also has the hits
            // that found no room in `counts` either, which no total holds.
            if !c.chains.contains_key(&key.chain) {
                no_chain += n;
            }
            let sample = sample_of(key, c, watches[w].addr);
            let comm = comm_of(key);
            let named = symbolizer.named(&sample);
            let cgroup = match (key.cgroup, cgroups.as_deref_mut()) {
                (Some(id), Some(names)) => Some(names.name(id)),
                _ => None,
            };
            let hit = Hit {
                sample: &sample,
                watch: &watches[w],
                watch_index: w,
                comm: &comm,
                ip: &named.ip,
                chain: &named.frames,
                value: Value::NotRead,
                rendered: named.rendered(),
                cgroup,
            };
            if let Some(t) = &mut tally {
                t.add_n(&hit, *n);
            }
            out.counted(&hit, *n);
        }
        if let (Some(t), Some((values, over))) = (&mut tally, &c.values) {
            t.set_values(w, &watches[w].label, values, *over);
        }
    }
    if tally.is_some() {
        summary.tally = tally;
    }
    if no_chain > 0 {
        summary.warnings.push(format!(
            "{no_chain} hits are counted without their call chain: the kernel's table of chains was full"
        ));
    }
    Ok(())
}

/// `a` less `b`, CPU by CPU; CPUs left with none are not listed.
fn less(a: &BTreeMap<u32, u64>, b: &BTreeMap<u32, u64>) -> BTreeMap<u32, u64> {
    a.iter()
        .map(|(&cpu, &n)| (cpu, n.saturating_sub(b.get(&cpu).copied().unwrap_or(0))))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// Whether the stream's counts hold every hit the kernel kept (`kept`, by CPU): none lost, and no more
/// kept than it printed, or dropped by its own filters (`filtered_here`; the hit path's programs filter
/// in the kernel, the tracer only a few). Kept hits the stream did not print were dropped by a full ring
/// (reported lost, or at the end of a burst), still in a ring when `--count` stopped the run, or left
/// when the output closed (those released after it failed are in the tally and the aggregates, but not
/// printed): the totals are taken whenever the stream did not print every kept hit.
///
/// The kernel programs' filtered hits are not among the kept ones: taken for printed (the summary's
/// `filtered` holds both), a watch of a process whose address other processes write as well let the
/// hits left when its output closed stay out of `--folded` and the tally (961 hits, `--folded` 700).
fn holds_every_hit(summary: &Summary, kept: &BTreeMap<u32, u64>, filtered_here: u64) -> bool {
    let printed = less(&summary.hits_by_cpu, &summary.unprinted_by_cpu);
    summary.lost() == 0
        && kept.values().sum::<u64>() <= printed.values().sum::<u64>() + filtered_here
}

fn add(m: &mut BTreeMap<u32, u64>, cpu: usize, n: u64) {
    if n > 0 {
        *m.entry(cpu as u32).or_default() += n;
    }
}

/// The writer's name as the kernel had it at the trap; the idle task is `<idle>`, as the stream says.
fn comm_of(key: &CountKey) -> String {
    if key.tid == 0 {
        return IDLE_COMM.to_string();
    }
    String::from_utf8_lossy(key.comm()).into_owned()
}

/// A sample standing for the key's hits: its thread, and its chain (kernel frames, then user ones up to a
/// zero return address, as a record becomes a sample), or none when the chain was not kept. The trap ip
/// is the chain's first address.
fn sample_of(key: &CountKey, c: &Counted, addr: u64) -> Sample {
    let mut frames = Vec::new();
    if let Some((kernel, user)) = c.chains.get(&key.chain) {
        frames.extend(kernel.iter().map(|&addr| Frame {
            addr,
            context: Context::Kernel,
        }));
        frames.extend(user.iter().take_while(|&&a| a != 0).map(|&addr| Frame {
            addr,
            context: Context::User,
        }));
    }
    Sample {
        ip: frames.first().map_or(0, |f| f.addr),
        pid: key.pid,
        tid: key.tid,
        time: 0,
        addr,
        cpu: 0,
        id: 0,
        cgroup: key.cgroup,
        frames,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A summary of `hits` on CPU 0, `unprinted` of them not printed, and `filtered` filtered.
    fn summary(hits: u64, unprinted: u64, filtered: u64) -> Summary {
        Summary {
            hits_by_cpu: BTreeMap::from([(0, hits)]),
            unprinted_by_cpu: BTreeMap::from([(0, unprinted)]),
            filtered,
            ..Summary::default()
        }
    }

    /// The stream holds every kept hit when it printed them all, or its own filters dropped the rest; not
    /// when some were left unprinted, however many the kernel's programs filtered (measured: a `-p`
    /// watch whose address another process wrote 23,083 times, its output closed with 294 hits not
    /// printed, 261 of them after it failed: the totals were not taken, and `--folded` had 700 of 961).
    #[test]
    fn hits_left_unprinted_are_not_hidden_by_the_kernels_filtered_ones() {
        let kept = |n| BTreeMap::from([(0, n)]);
        assert!(holds_every_hit(&summary(961, 0, 23_083), &kept(961), 0));
        assert!(!holds_every_hit(&summary(961, 294, 23_083), &kept(961), 0));
        assert!(
            holds_every_hit(&summary(10, 0, 2), &kept(12), 2),
            "the tracer's filters"
        );
        assert!(!holds_every_hit(&summary(10, 0, 2), &kept(13), 2));
        let lost = Summary {
            lost_by_cpu: BTreeMap::from([(0, 1)]),
            ..summary(10, 0, 0)
        };
        assert!(!holds_every_hit(&lost, &kept(10), 0));
    }
}
