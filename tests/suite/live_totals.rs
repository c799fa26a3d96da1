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
    let t = Tracer::start_json(&all);
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
        let sum = |list: &serde_json::Value| -> u64 {
            list.as_array()
                .expect("a list")
                .iter()
                .map(|c| c["count"].as_u64().expect("count"))
                .sum()
        };
        assert_eq!(sum(&s["chains"]), made, "chains");
        assert_eq!(sum(&s["by_comm"]), made, "by comm");
        assert_eq!(sum(&s["hits_by_cpu"]), made, "by cpu");
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
        let by_thread: u64 = s["by_thread"]
            .as_array()
            .expect("by_thread")
            .iter()
            .map(|t| t["count"].as_u64().expect("count"))
            .sum();
        assert_eq!(by_thread, N, "{s}");
        if printed < N {
            assert_eq!(s["unprinted"].as_u64(), Some(N - printed), "{s}");
        }
        // The breakpoints went on counting the stores after the N-th until they were closed: the
        // programs counted those too, so the audit finds nothing unaccounted for.
        assert!(!err.contains("unaccounted"), "{err}");
        assert!(!s.to_string().contains("unaccounted"), "{s}");
    }
);
