//! The hit path's steady state allocates nothing: a hit on a chain seen before goes from record bytes to
//! printed text and JSON (and the `--summary` tally) the way the session takes it, decoded into a recycled
//! chain vector, through the sorter, named from the chain cache, with no allocation at all. Counted by the
//! unit tests' global allocator ([`crate::testalloc`]). The rings and the value read of a process watch
//! need a kernel; the live benchmark counts the whole tracer's `malloc` calls (BENCHMARKS.md).

use std::io;

use crate::model::filter::Filter;
use crate::model::watch::Access;
use crate::perf::record::{decode_reusing, encode, Record, SAMPLE_TYPE};
use crate::report::ftrace::Ftrace;
use crate::report::json::Json;
use crate::report::summary::Tally;
use crate::report::testutil::{table, watch};
use crate::report::{Hit, Output, Summary, Value};
use crate::testalloc::allocations;
use crate::trace::comm::Comms;
use crate::trace::events::Item;
use crate::trace::sorter::Sorter;
use crate::trace::symbolize::Symbolizer;

#[test]
fn a_repeated_chain_allocates_nothing() {
    let table = table();
    let watches = [watch("x", 0x7ffd0000, Access::Write)];
    // Two chains hit in turn by two tasks on two CPUs: one all kernel, one into user space (its user
    // frame unnamed, so spelled afresh every time).
    let records: Vec<Vec<u8>> = (0..4u32)
        .map(|i| {
            let chain: &[u64] = if i % 2 == 0 {
                &[encode::KERNEL, 0xffffffff81000077, 0xffffffff810001bb]
            } else {
                &[encode::KERNEL, 0xffffffff81000077, encode::USER, 0x401000]
            };
            encode::sample(
                0xffffffff81000077,
                7 + i % 2,
                7 + i % 2,
                0,
                0x7ffd0000,
                i % 2,
                chain,
            )
        })
        .collect();
    let mut symbolizer = Symbolizer::new(&table);
    let mut sorter: Sorter<Item, (u32, usize)> = Sorter::new(0);
    let mut comms = Comms::new("/nonexistent");
    let filter = Filter::default();
    let mut summary = Summary::default();
    let mut tally = Tally::default();
    let mut text = Ftrace::new(io::sink(), io::sink());
    let mut json = Json::new(io::sink(), io::sink());
    let mut spare = Vec::new();
    let ring = (0, 0);
    sorter.add_ring(ring, 0);

    let mut run = |rounds: u64| {
        for round in 0..rounds {
            for (i, bytes) in records.iter().enumerate() {
                let time = round * 10 + i as u64 + 1;
                let frames = spare.pop().unwrap_or_default();
                let Ok(Record::Sample(mut s)) = decode_reusing(bytes, SAMPLE_TYPE, frames) else {
                    panic!("not a sample")
                };
                s.time = time;
                let hit = Item::Sample {
                    sample: s,
                    watch: 0,
                    value: Value::NotRead,
                    trap: None,
                };
                sorter.push(ring, time, hit);
            }
            sorter.read_empty(ring, round * 10 + 10);
            while let Some((_, item)) = sorter.pop_ready() {
                let Item::Sample {
                    sample: s,
                    watch: w,
                    value,
                    ..
                } = item
                else {
                    panic!("not a sample")
                };
                let comm = comms.name(s.pid, s.tid);
                assert!(filter.admits(s.tid, s.in_kernel(), comm));
                *summary.hits_by_cpu.entry(s.cpu).or_default() += 1;
                let named = symbolizer.named(&s);
                let hit = Hit {
                    sample: &s,
                    watch: &watches[w],
                    watch_index: w,
                    comm,
                    ip: &named.ip,
                    chain: &named.frames,
                    value,
                    rendered: named.rendered(),
                    cgroup: None,
                };
                tally.add(&hit);
                text.hit(&hit).unwrap();
                json.hit(&hit).unwrap();
                // The session hands the chain vector back to the event set for the next record.
                let mut frames = s.frames;
                frames.clear();
                spare.push(frames);
            }
        }
    };
    // The first rounds fill every cache and grow every buffer.
    run(3);
    let before = allocations();
    run(1000);
    assert_eq!(
        allocations() - before,
        0,
        "allocations in 4000 steady-state hits"
    );
    assert_eq!(summary.hits(), 4012);
}
