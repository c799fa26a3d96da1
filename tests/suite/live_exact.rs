//! `--value` and `--if`: the value each store wrote, read in the kernel at the trap by the BPF program on
//! the breakpoint, and conditions evaluated there. The helper is watched with `-p` after it started (so
//! exec's own zeroing of its .bss is not seen), and only its stores count: hits by its tid, and for user
//! stores an ip in its own code.

use std::time::Duration;

use serde_json::Value;

use crate::util::{self, Tracer, Writer};

/// The hit records of a JSON stream, and its summary record.
fn records(out: &str) -> (Vec<Value>, Value) {
    let mut hits = Vec::new();
    let mut summary = Value::Null;
    for line in out.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        match v["type"].as_str() {
            Some("hit") => hits.push(v),
            Some("summary") => summary = v,
            _ => {}
        }
    }
    (hits, summary)
}

fn hex(v: &Value) -> Option<u64> {
    v.as_str()
        .map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex string"))
}

/// Watches helper `args` with `-p` and `extra` flags in JSON, runs it to the end; the hits by its thread
/// and the summary.
fn watch_helper(helper: &[&str], extra: &[&str]) -> (Vec<Value>, Value, String) {
    watch_helper_run(helper, extra, |h, _| h.go_and_finish())
}

/// [`watch_helper`], the helper run to its end by `run` (which returns its tid). The output is read as it
/// comes: a pipe no one reads while the helper runs would stop the tracer at its first 64 KiB, its rings
/// unread from then on, and what the rings drop is this file's subject, not the pipe.
fn watch_helper_run(
    helper: &[&str],
    extra: &[&str],
    run: impl FnOnce(Writer, &Tracer) -> u32,
) -> (Vec<Value>, Value, String) {
    let h = Writer::start(helper);
    let pid = h.pid.to_string();
    let mut args = vec!["write", "--json", "--no-status", "-p", &pid];
    args.extend_from_slice(extra);
    args.push("target_var");
    let mut t = Tracer::start_json(&args);
    let reader = t.keep_reading();
    let tid = run(h, &t);
    let (code, _, err) = t.wait(Duration::from_secs(60));
    let out = reader.join().expect("the stdout reader");
    assert_eq!(code, 0, "{err}");
    let (hits, summary) = records(&out);
    let mine = hits
        .into_iter()
        .filter(|h| h["tid"] == tid)
        .collect::<Vec<_>>();
    (mine, summary, err)
}

/// The helper's own stores: user-space hits in `main` (inlined loops) or its store functions.
fn user_stores(hits: &[Value]) -> Vec<&Value> {
    hits.iter().filter(|h| h["in_kernel"] == false).collect()
}

live_test!(each_store_of_a_sequence_has_its_value_and_the_one_before, {
    let (hits, summary, err) = watch_helper(&["write", "1000", "0"], &["--value"]);
    let stores = user_stores(&hits);
    let values: Vec<Option<u64>> = stores.iter().map(|h| hex(&h["value"])).collect();
    let want: Vec<Option<u64>> = (0..1000).map(Some).collect();
    assert_eq!(values, want, "{err}");
    let olds: Vec<Option<u64>> = stores.iter().map(|h| hex(&h["old"])).collect();
    // The first store the program saw has no old value; each later one has the store before it.
    assert_eq!(olds[0], None);
    assert!(stores[0]["old"].is_null());
    for (i, old) in olds.iter().enumerate().skip(1) {
        assert_eq!(*old, Some(i as u64 - 1), "store {i}");
    }
    assert_eq!(summary["lost"], 0, "{summary}");
});

live_test!(a_condition_keeps_only_the_matching_store, {
    let (hits, summary, err) = watch_helper(&["write", "1000", "0"], &["--if", "value == 500"]);
    let stores = user_stores(&hits);
    assert_eq!(stores.len(), 1, "{err}\n{hits:?}");
    assert_eq!(stores[0]["value"], "0x1f4");
    assert_eq!(stores[0]["old"], "0x1f3");
    // The other 999 stores were dropped in the kernel, and are counted as filtered.
    assert!(summary["filtered"].as_u64().unwrap() >= 999, "{summary}");
    assert_eq!(summary["hits"], 1, "{summary}");
});

live_test!(changed_reports_the_first_store_and_the_change_only, {
    // Stores 1 once, then 7 a thousand times.
    let (hits, _, err) = watch_helper(&["same", "1000", "0"], &["--if", "changed"]);
    let got: Vec<(Option<u64>, Option<u64>)> = user_stores(&hits)
        .iter()
        .map(|h| (hex(&h["value"]), hex(&h["old"])))
        .collect();
    assert_eq!(got, [(Some(1), None), (Some(7), Some(1))], "{err}");
});

// A kernel writer: read() from /dev/zero into the watched word after the helper filled it with 0xff.
// The kernel's `rep stos` stores a byte at a time, and each store traps: the values show the word being
// zeroed from its low byte up, each hit's old value the previous hit's value.
live_test!(a_kernel_writer_shows_the_bytes_being_zeroed, {
    let (hits, _, err) = watch_helper(&["fill", "1", "0"], &["--value"]);
    let (user, kernel): (Vec<&Value>, Vec<&Value>) =
        hits.iter().partition(|h| h["in_kernel"] == false);
    assert_eq!(user.len(), 1, "{err}");
    assert_eq!(hex(&user[0]["value"]), Some(u64::MAX));
    assert!(!kernel.is_empty(), "no kernel write seen: {err}");
    let mut before = u64::MAX;
    for h in &kernel {
        let v = hex(&h["value"]).expect("a known value");
        assert_eq!(hex(&h["old"]), Some(before), "{h}");
        // Some low bytes zeroed, the rest still 0xff, and more zeroed than before.
        let zeroed = v.trailing_zeros() / 8;
        let expect = if zeroed >= 8 {
            0
        } else {
            u64::MAX << (8 * zeroed)
        };
        assert_eq!(v, expect, "{h}");
        assert!(v < before, "{h}");
        before = v;
    }
    assert_eq!(before, 0, "the last kernel store leaves the word zero");
});

// A flood into a one-page ring, so records are lost: the helper stores each value from one of two store
// sites picked by a hash of the value, so a value shown on another store's hit would, half the time,
// show at the wrong site. No value may be at the wrong site, and every pair the kernel saw is consecutive.
// The tracer is stopped for the flood's first 20 ms, so the ring surely drops records, then reads the
// rest as it comes (dropping more wherever it falls behind): most values arrive, across many losses.
live_test!(a_lossy_ring_never_pairs_a_value_with_the_wrong_hit, {
    let (hits, summary, err) = watch_helper_run(
        &["sites", "100000", "0"],
        &["--value", "--buffer-pages", "1"],
        |mut h, t| {
            t.signal(libc::SIGSTOP);
            h.send("go");
            std::thread::sleep(Duration::from_millis(20));
            t.signal(libc::SIGCONT);
            h.read_until("done");
            let tid = h.tid;
            h.finish();
            tid
        },
    );
    // Records the ring dropped: hits not printed (the kernel's totals count them), or lost.
    let lost = summary["lost"].as_u64().unwrap_or(0) + summary["unprinted"].as_u64().unwrap_or(0);
    if lost == 0 {
        util::skip("a one-page ring lost nothing: nothing to check pairing against");
        return;
    }
    let site_of = |v: u64| {
        let mut v = v;
        v ^= v >> 33;
        v = v.wrapping_mul(0xff51_afd7_ed55_8ccd);
        v ^= v >> 33;
        v & 1
    };
    let mut known = 0;
    for h in user_stores(&hits) {
        let sym = h["ip"]["sym"].as_str().unwrap_or("");
        let site = match sym {
            "ksw_site_a" => 0,
            "ksw_site_b" => 1,
            _ => panic!("a store outside the two sites: {h}"),
        };
        let Some(v) = hex(&h["value"]) else { continue };
        known += 1;
        assert_eq!(site_of(v), site, "value {v} shown at the wrong store: {h}");
        // The kernel saw every store, so old is the value before, whatever the ring lost.
        if v > 0 {
            assert_eq!(hex(&h["old"]), Some(v - 1), "{h}");
        }
    }
    assert!(
        known > 100,
        "too few values arrived to check: {known}; {err}"
    );
});

/// --value without BPF: exit 4 and the reason, before anything is armed.
#[test]
fn an_unprivileged_user_asking_for_values_gets_exit_4() {
    let Some((code, out, err)) = util::run_as_nobody(&["write", "--value", "0x10000"]) else {
        return;
    };
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("BPF") && err.contains("unprivileged_bpf_disabled"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!out.contains("armed"), "{out}");
}

#[test]
fn a_bad_condition_is_a_usage_error_at_its_column() {
    util::rejects(
        &["write", "--if", "value = 5", "0x10000"],
        2,
        &["--if 'value = 5'", "column 7", "=="],
    );
    util::rejects(
        &["write", "--if", "value == 300", "0x10000/1"],
        2,
        &["column 10", "300", "0x10000"],
    );
}
