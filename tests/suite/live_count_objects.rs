//! `--count N` with `--on`: the run stops at its N-th reported hit. The stream rejects stores the
//! programs keep (a forked child's store into its copy of an object, a write after an object's free), so
//! the count is the stream's there, not the kernel's: counted in the kernel, those stores used it up, and
//! `--count 6` stopped at 3 hits.

use std::time::Duration;

use crate::util;

// The forks helper makes 3 objects; for each a forked child stores 3 times into its copy (filtered), then
// the parent 3 times into its own: `--count 6` stops at the parent's 6th store, the first two children's
// 6 stores filtered before it (the third child forks after it), none of them toward the count.
live_test!(count_with_objects_stops_at_the_nth_reported_hit, {
    let forks = util::helper_with("forks", &["-g"]);
    let exe = forks.display().to_string();
    let args = [
        "write",
        "--json",
        "--no-status",
        "--on",
        "uretprobe:libc:malloc",
        "(struct parcel)$obj.weight",
        "--count",
        "6",
        "--",
        &exe,
        "3",
    ];
    let (code, out, err) = util::run_within(&args, Duration::from_secs(60));
    // Only ksymwatch's refusal of uprobe events is a skip: any other uprobe error fails the test.
    if code != 0 && crate::live_uprobe_objects::refused(&err) {
        return;
    }
    assert_eq!(code, 0, "{err}");
    let records = util::ndjson(&out);
    let summary = records.last().expect("the summary record");
    assert_eq!(summary["type"], "summary", "{summary}");
    assert_eq!(summary["stop"], "count", "{summary}");
    assert_eq!(summary["hits"], 6, "{summary}\n{err}");
    let hits = records.iter().filter(|r| r["type"] == "hit").count();
    assert_eq!(hits, 6, "{err}");
    let filtered = summary["filtered"].as_u64().expect("filtered");
    assert_eq!(filtered, 6, "the first two children's stores: {summary}");
});
