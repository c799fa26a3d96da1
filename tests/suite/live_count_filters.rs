//! `--count N` with a filter only the tracer applies (`--comm` naming a task in angle brackets, the
//! tracer's own spelling of a task it cannot name): the kernel's programs keep every hit, so the count is
//! the stream's there. Counted in the kernel, the hits the filter then dropped used it up: `--comm '<foo>'
//! --count 5` stopped at 0 hits, 5 filtered, though filtered hits do not count toward `--count`.

use std::time::Duration;

use crate::util::{self, Writer};

// The writer stores 1,000 times, none by a task named `<foo>`: the run must not stop at a count none of
// its hits made; it runs to its duration, every store filtered.
live_test!(hits_only_the_tracer_filters_do_not_use_up_the_count, {
    let mut w = Writer::start(&["write", "1000", "0"]);
    let pid = w.pid.to_string();
    let t = util::Tracer::write_json(&[
        "-p",
        &pid,
        "--comm",
        "<foo>",
        "--count",
        "5",
        "--duration",
        "3s",
        "target_var",
    ]);
    w.go();
    let (records, err) = t.json_records(Duration::from_secs(30));
    let summary = records.last().expect("the summary record");
    assert_eq!(summary["type"], "summary", "{err}");
    assert_eq!(summary["hits"], 0, "{summary}");
    assert_eq!(summary["stop"], "duration", "{summary}\n{err}");
    assert_eq!(summary["filtered"], 1000, "{summary}");
});
