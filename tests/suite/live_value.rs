//! The value written, for process watches: each hit carries the watched range as read from the writer's
//! process when the tracer drained the hit (`value=0x...` in text, `"value"` in JSON). The helper stores
//! one known value per step and the test waits for that store's hit before asking for the next, so the
//! value read is exactly the one stored. Only the helper's own stores count (ip in `main`): in launch mode
//! the kernel's exec zeroes .bss too, with kernel ips.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{self, parse_hits, HitLine, Tracer, Writer};

/// Stored in this order: small, zero, 32-bit, and 64-bit values with the top bit set.
const VALUES: [u64; 6] = [
    1,
    0x2a,
    0,
    0xdead_beef,
    0x1122_3344_5566_7788,
    0xfedc_ba98_7654_3210,
];

// `-p`, text: every store's hit line ends with `value=0x<what was stored>`.
live_test!(attach_prints_each_stored_value, {
    let mut h = Writer::start(&["set", "0"]);
    let (pid, tid) = (h.pid.to_string(), h.tid);
    let mut t = Tracer::start(&["write", "--no-status", "-p", &pid, "target_var"]);
    let store = |l: &HitLine| l.tid == tid && l.ip.starts_with("main+");
    let store_line = |l: &str| l.contains(&format!("-{tid} ")) && l.contains(" ip=main+");
    let mut text = String::new();
    for (i, v) in VALUES.iter().enumerate() {
        h.send(&format!("set {v:#x}"));
        h.read_until("done");
        // This store's hit is printed before the helper is asked for the next one.
        while parse_hits(&text).iter().filter(|l| store(l)).count() <= i {
            let more = t.read_until(store_line);
            assert!(!more.is_empty(), "the stream ended early:\n{text}");
            text.push_str(&more);
        }
    }
    h.finish();
    let (code, rest, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stopped: watched process exited"), "{err}");
    text.push_str(&rest);
    let values: Vec<String> = parse_hits(&text)
        .into_iter()
        .filter(store)
        .map(|l| {
            l.value
                .unwrap_or_else(|| panic!("a hit line without a value:\n{text}"))
        })
        .collect();
    let want: Vec<String> = VALUES.iter().map(|v| format!("{v:#x}")).collect();
    assert_eq!(values, want, "{text}");
});

// Launch mode, NDJSON, a 4-byte watch on the upper half of the 8-byte global: `value` is that half as a
// little-endian integer, a hex string.
live_test!(launch_mode_json_reads_the_watched_width, {
    let dir = util::temp_dir("ksw-value");
    let stream = dir.join("stream.ndjson");
    let writer = util::helper("writer");
    let mut h = Writer::launched(&stream, &["target_var+4/4"], &writer, &["set", "0"]);
    let pid = h.pid;
    let mine = |v: &Value| v["type"] == "hit" && v["pid"] == pid && v["ip"]["sym"] == "main";
    for (i, v) in VALUES.iter().enumerate() {
        h.send(&format!("set {v:#x}"));
        h.read_until("done");
        wait_for_records(&stream, |r| r.iter().filter(|v| mine(v)).count() > i);
    }
    let status = h.close_and_wait(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0));
    let records = read_records(&stream);
    let head = util::record(&records, "header");
    assert_eq!(head["targets"][0]["len"], 4, "{head}");
    let hits: Vec<&Value> = records.iter().filter(|v| mine(v)).collect();
    let values: Vec<&Value> = hits.iter().map(|v| &v["value"]).collect();
    let want: Vec<Value> = VALUES
        .iter()
        .map(|v| format!("{:#x}", v >> 32).into())
        .collect();
    let want: Vec<&Value> = want.iter().collect();
    assert_eq!(values, want, "{hits:?}");
    assert!(hits.iter().all(|v| v["len"] == 4));
    let _ = std::fs::remove_dir_all(&dir);
});

/// The complete lines of the stream file so far, parsed.
fn read_records(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    util::ndjson(complete)
}

/// Polls the stream file until `done` holds for its records (bounded: a missing hit fails the test).
fn wait_for_records(path: &Path, done: impl Fn(&[Value]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let records = read_records(path);
        if done(&records) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the hit never reached the stream: {records:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

// A `--comm` of 16 bytes or more (the kernel keeps 15) once failed the `--value` program in the verifier
// (exit 1): it is matched on the 15 bytes the kernel keeps, with a note saying so, and the run works.
live_test!(
    a_comm_longer_than_the_kernel_keeps_is_matched_on_its_first_15_bytes,
    {
        let w = Writer::spinning(0);
        let target = w.target();
        for flags in [&["--value"][..], &["--if", "value != 0"][..], &[][..]] {
            let mut args = vec![
                "write",
                &target,
                "--comm",
                "a-very-long-task-name",
                "--duration",
                "200ms",
            ];
            args.extend_from_slice(flags);
            let (code, _out, err) =
                crate::util::run_within(&args, std::time::Duration::from_secs(30));
            assert_eq!(code, 0, "{args:?}: {err}");
            assert!(
                err.contains("the kernel keeps only the first 15 bytes")
                    && err.contains("`a-very-long-tas`"),
                "{args:?}: {err}"
            );
        }
    }
);

// A few hundred comparisons once overflowed the verifier's 64 KiB log (ENOSPC), which was reported as a
// refusal: the program is now loaded without a log, and a log is asked for only to explain a refusal.
live_test!(a_condition_of_thousands_of_terms_loads, {
    let w = Writer::spinning(0);
    let target = w.target();
    for n in [300, 3000] {
        let cond = (0..n)
            .map(|i| format!("value == {i}"))
            .collect::<Vec<_>>()
            .join(" || ");
        let (code, _out, err) = crate::util::run_within(
            &["write", &target, "--if", &cond, "--duration", "200ms"],
            Duration::from_secs(60),
        );
        assert_eq!(code, 0, "{n} terms: {}", &err[..err.len().min(500)]);
    }
});
