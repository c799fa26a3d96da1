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
/// `cgroups` (`--cgroup`) names the writers' cgroups as the stream does.
pub fn apply<O: Output>(
    hits: &HitPrograms,
    watches: &[Watch],
    (symbolizer, mut cgroups): (&mut Symbolizer<'_>, Option<&mut CgroupNames>),
    summary: &mut Summary,
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
    // Kept hits the stream did not print: dropped by a full ring (reported lost, or at the end of a
    // burst), still in a ring when `--count` stopped the run, or taken by an output that failed before
    // their text went out (already in `unprinted_by_cpu`). (The tracer's own filters drop a few on the
    // hit path: those count as printed here.)
    let less = |a: &BTreeMap<u32, u64>, b: &BTreeMap<u32, u64>| -> BTreeMap<u32, u64> {
        a.iter()
            .map(|(&cpu, &n)| (cpu, n.saturating_sub(b.get(&cpu).copied().unwrap_or(0))))
            .filter(|&(_, n)| n > 0)
            .collect()
    };
    let printed_by_cpu = less(&summary.hits_by_cpu, &summary.unprinted_by_cpu);
    let printed = printed_by_cpu.values().sum::<u64>() + summary.filtered;
    if summary.lost() == 0 && kept.values().sum::<u64>() <= printed {
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

fn add(m: &mut BTreeMap<u32, u64>, cpu: usize, n: u64) {
    if n > 0 {
        *m.entry(cpu as u32).or_default() += n;
    }
}

/// The writer's name as the kernel had it at the trap; the idle task is `<idle>`, as the stream says.
fn comm_of(key: &CountKey) -> String {
    if key.tid == 0 {
        return "<idle>".to_string();
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
