//! Exact at any ring size: on the hit path every kept hit is counted in the kernel before its record is
//! tried, so when the smallest ring drops most records the summary, the per-thread and per-chain tallies,
//! `--folded` and `--count` still count every store; the stream says how many hits it could not print.

use std::time::Duration;

use crate::util::{self, Tracer, Writer};
use ksymwatch_symbols::testing::assert_mentions;

/// The threads helper's `tagged` run of 64 threads storing 1,000 times each, watched by `write --json
/// --summary` into one-page rings with `extra` args: the tracer's exit code, stdout and stderr, and the
/// stores and adds the helper made.
fn tagged_into_the_smallest_ring(extra: &[&str]) -> (i32, String, String, u64) {
    tagged_into_the_smallest_ring_by(extra, Tracer::start_json)
}

/// [`tagged_into_the_smallest_ring`], the tracer started by `start`.
fn tagged_into_the_smallest_ring_by(
    extra: &[&str],
    start: fn(&[&str]) -> Tracer,
) -> (i32, String, String, u64) {
    let mut h = Writer::threads(&["tagged", "64", "1000"]);
    let pid = h.pid.to_string();
    let mut all = vec![
        "write",
        "--json",
        "--summary",
        "--no-status",
        "--buffer-pages",
        "1",
    ];
    all.extend_from_slice(extra);
    all.extend(["-p", &pid, "target_var"]);
    let t = start(&all);
    h.send("go");
    let lines = h.read_until("done");
    h.finish();
    let (code, out, err) = t.wait(Duration::from_secs(120));
    let made = lines
        .iter()
        .find_map(|l| {
            let n = |key: &str| -> Option<u64> {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))?
                    .parse()
                    .ok()
            };
            Some(n("stores=")? + n("adds=")?)
        })
        .expect("stores=S adds=A");
    (code, out, err, made)
}

// 64 threads store 1,000 times each and add 100 times each into one global, at once, into one-page
// rings: most records are dropped, yet the summary's hits, its chains, its per-thread tally and the
// folded stacks each add up to every store, and the stream says how many it could not print.
live_test!(
    with_the_smallest_ring_every_store_is_counted_from_the_kernels_totals,
    {
        let dir = util::temp_dir("ksw-totals");
        let folded = dir.join("stacks.folded");
        let folded_arg = format!("--folded={}", folded.display());
        let (code, out, err, made) = tagged_into_the_smallest_ring(&[&folded_arg]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(made, 64 * 1100);
        let records = util::ndjson(&out);
        let s = util::summary_record(&records);
        let printed = records.iter().filter(|r| r["type"] == "hit").count() as u64;
        assert!(
            s["unprinted"].as_u64() > Some(0),
            "a one-page ring drops: {s}"
        );
        assert_eq!(s["unprinted"].as_u64(), Some(made - printed), "{s}");
        assert_eq!(s["from_totals"], true);
        assert_eq!(
            (s["hits"].as_u64(), s["lost"].as_u64()),
            (Some(made), Some(0))
        );
        assert_eq!(util::counts(s, "chains"), made, "chains");
        assert_eq!(util::counts(s, "by_comm"), made, "by comm");
        assert_eq!(util::counts(s, "hits_by_cpu"), made, "by cpu");
        let threads = s["by_thread"].as_array().expect("by_thread");
        assert_eq!(threads.len(), 64, "{s}");
        assert!(
            threads.iter().all(|t| t["count"] == 1100),
            "each thread's 1,000 stores and 100 adds: {s}"
        );
        let text = std::fs::read_to_string(&folded).expect("folded file");
        let stacks: u64 = text
            .lines()
            .map(|l| {
                l.rsplit(' ')
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .expect("count")
            })
            .sum();
        assert_eq!(stacks, made, "{text}");
        assert_mentions(&err, &["not printed", "kernel's totals"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
);

// `--count N` with the smallest ring: the programs keep exactly N hits, all CPUs together, and the run
// stops there, though most of their records were dropped: the summary and the per-thread tally say N.
live_test!(
    count_stops_after_exactly_n_kept_hits_even_when_records_are_dropped,
    {
        const N: u64 = 5000;
        let (code, out, err, made) = tagged_into_the_smallest_ring(&["--count", &N.to_string()]);
        assert_eq!(code, 0, "{err}");
        assert!(made > N);
        let records = util::ndjson(&out);
        let s = util::summary_record(&records);
        let printed = records.iter().filter(|r| r["type"] == "hit").count() as u64;
        assert_eq!(s["stop"], "count", "{s}");
        assert_eq!(s["hits"].as_u64(), Some(N), "{s}");
        assert!(printed <= N, "{printed} printed");
        assert_eq!(util::counts(s, "by_thread"), N, "{s}");
        if printed < N {
            assert_eq!(s["unprinted"].as_u64(), Some(N - printed), "{s}");
        }
        // The breakpoints went on counting the stores after the N-th until they were closed: the
        // programs counted those too, so the audit finds nothing unaccounted for.
        assert!(!err.contains("unaccounted"), "{err}");
        assert!(!s.to_string().contains("unaccounted"), "{s}");
    }
);

// One thread stores from 2^16 distinct call chains, twice the (thread, chain, name) keys the kernel's
// table of counts holds, into one-page rings. The hits that found no room are in no total, so the summary
// reports them lost; but their records still went to the ring, and the stream printed those it had room
// for (the helper pauses every 256 stores, so the ring takes a few records all along): the warning must
// not say they were not printed. Every printed hit's chain, whether its record
// named it by id (the first 1,024 chains, which the chains map holds) or carried it inline, spells the
// number the helper stored from it.
live_test!(
    hits_the_table_of_counts_has_no_room_for_are_lost_yet_printed_where_the_ring_had_room,
    {
        const BITS: u32 = 16;
        let mut h = Writer::start_binary(
            &util::helper("chains"),
            &[&BITS.to_string(), "1", "0", "1000"],
        );
        let pid = h.pid.to_string();
        // The stream into a file: a pipe nobody reads until the end would stall the reader.
        let dir = util::temp_dir("ksw-counts-full");
        let stream = dir.join("stream.txt");
        let child = util::spawn(&[
            "write",
            "--no-status",
            "-o",
            stream.to_str().expect("utf-8 path"),
            "--buffer-pages",
            "1",
            "--realtime",
            "off",
            "-p",
            &pid,
            "target_var",
        ]);
        let armed = std::time::Instant::now();
        while !std::fs::read_to_string(&stream).is_ok_and(|s| s.contains("# armed")) {
            assert!(armed.elapsed() < Duration::from_secs(30), "not armed");
            std::thread::sleep(Duration::from_millis(20));
        }
        h.send("go");
        let lines = h.read_until("done");
        h.finish();
        let done = child.wait_with_output().expect("ksymwatch ends");
        let err = String::from_utf8_lossy(&done.stderr).into_owned();
        assert_eq!(done.status.code(), Some(0), "{err}");
        let out = std::fs::read_to_string(&stream).expect("the stream");
        let _ = std::fs::remove_dir_all(&dir);
        let stores: u64 = lines
            .iter()
            .find_map(|l| l.strip_prefix("stores="))
            .and_then(|n| n.parse().ok())
            .expect("stores=N");
        assert_eq!(stores, 1 << BITS);
        let end = err
            .lines()
            .find(|l| l.starts_with("ksymwatch: ") && l.contains(" hits ("))
            .unwrap_or_else(|| panic!("no end line: {err}"));
        let number = |after: &str| -> u64 {
            let before = end.split(after).next().expect("a field");
            let word = before.rsplit([' ', '(']).next().expect("a number");
            word.parse().unwrap_or_else(|_| panic!("{after} in {end}"))
        };
        let (hits, lost, unprinted) = (number(" hits ("), number(" lost"), number(" not printed"));
        assert!(lost > 0, "the table of counts is full: {end}");
        assert_eq!(hits + lost, stores, "{end}");
        let printed = util::parse_hits(&out);
        assert_eq!(printed.len() as u64 + unprinted, stores, "{end}");
        // The first `hits` chains found room; a printed hit of a later one is a lost hit printed.
        let lost_yet_printed = printed
            .iter()
            .filter(|p| p.value.as_deref().and_then(hex).is_some_and(|v| v >= hits))
            .count();
        assert!(lost_yet_printed > 0, "{end}");
        assert!(
            err.contains(&format!("{lost} hits lost (cpu0 {lost}): in no total")),
            "{err}"
        );
        assert!(!err.contains("not printed, and in no total"), "{err}");
        // Of the hits counted, all but those of the 1,024 chains the chains map holds have no chain: the
        // lost hits are in no total, with or without one.
        assert!(
            err.contains(&format!(
                "{} hits are counted without their call chain",
                hits - 1024
            )),
            "{err}"
        );
        for p in &printed {
            let v = p.value.as_deref().and_then(hex).expect("a value");
            let spelled: u64 = p
                .chain
                .iter()
                .filter_map(|f| match f.split('+').next() {
                    Some("ksw_via0") => Some(0),
                    Some("ksw_via1") => Some(1),
                    _ => None,
                })
                .enumerate()
                .map(|(bit, b)| b << bit)
                .sum();
            let depth = p.chain.iter().filter(|f| f.starts_with("ksw_via")).count();
            assert_eq!((spelled, depth), (v, BITS as usize), "{:?}", p.chain);
            assert!(p.ip.starts_with("ksw_chain_store+"), "{}", p.ip);
        }
    }
);

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

// The same flood with `--quiet`: nothing is printed by design, so no hit is "not printed" and no larger
// --buffer-pages is advised; every store is still counted, from the kernel's totals.
live_test!(a_quiet_run_counts_every_store_and_blames_no_ring, {
    let (code, out, err, made) =
        tagged_into_the_smallest_ring_by(&["--quiet"], Tracer::start_quiet);
    assert_eq!(code, 0, "{err}");
    let records = util::ndjson(&out);
    assert!(!records.iter().any(|r| r["type"] == "hit"), "{out}");
    let s = util::summary_record(&records);
    assert_eq!(
        (s["hits"].as_u64(), s["lost"].as_u64()),
        (Some(made), Some(0)),
        "{s}"
    );
    assert_eq!(s["unprinted"].as_u64().unwrap_or(0), 0, "{s}");
    assert!(
        !err.contains("not printed") && !err.contains("--buffer-pages"),
        "{err}"
    );
});
