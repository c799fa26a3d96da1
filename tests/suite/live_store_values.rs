//! `--value` on stores whose instruction the bytes before the trap ip alone would misread, and on
//! read-write watches: the `stores` helper stores known values in known forms into its 8-byte `ksw_var`,
//! one thread on one CPU, watched with `-p`. Hits are the helper's by pid, in its store functions (user
//! space).

use std::time::Duration;

use serde_json::Value;

use crate::util::{helper, ndjson, Tracer, Writer};

fn hex(v: &Value) -> Option<u64> {
    v.as_str()
        .map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex string"))
}

/// Runs `stores ARGS` under `ksymwatch CMD --json --no-status -p PID TARGET EXTRA...` to its end: the
/// helper's hits in user space, and the summary.
fn run(cmd: &str, target: &str, args: &[&str], extra: &[&str]) -> (Vec<Value>, Value, String) {
    let (hits, summary, err) = run_helper("stores", cmd, target, args, extra);
    let user = hits
        .into_iter()
        .filter(|h| h["in_kernel"] == false)
        .collect();
    (user, summary, err)
}

/// [`run`] with helper `name`, every hit of the helper's process (kernel ones too).
fn run_helper(
    name: &str,
    cmd: &str,
    target: &str,
    args: &[&str],
    extra: &[&str],
) -> (Vec<Value>, Value, String) {
    let h = Writer::start_binary(&helper(name), args);
    let pid = h.pid;
    let p = pid.to_string();
    let mut a = vec![cmd, "--json", "--no-status", "-p", &p, target];
    a.extend_from_slice(extra);
    let t = Tracer::start_json(&a);
    h.go_and_finish();
    let (code, out, err) = t.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let mut hits = Vec::new();
    let mut summary = Value::Null;
    for line in out.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        match v["type"].as_str() {
            Some("hit") if v["pid"] == pid => hits.push(v),
            Some("summary") => summary = v,
            _ => {}
        }
    }
    (hits, summary, err)
}

fn at<'a>(hits: &'a [Value], sym: &str) -> Vec<&'a Value> {
    hits.iter().filter(|h| h["ip"]["sym"] == sym).collect()
}

// The form: a 4-byte `mov %eax,(%rsi)` right after `mov 0x48(%rdi),%eax` (its last byte 0x48 is
// also a REX.W prefix). Decoded from the function's start, the store is the 4-byte one: on the 8-byte
// watch it wrote the lower half, so the value is memory's (upper half 0x5a5a5a5a), never the 8-byte
// reading's; on a 4-byte watch it is the instruction's. None raced, single-threaded; `--if` on it has
// no false disagreement, and no value is marked as having no known start.
live_test!(
    a_store_after_a_0x48_byte_is_decoded_from_its_function_start,
    {
        const N: u64 = 400;
        // `write TARGET EXTRA...` on the helper's N stores after a 0x48 byte.
        let after48 =
            |target: &str, extra: &[&str]| run("write", target, &["after48", "400", "0"], extra);
        let (hits, summary, err) = after48("ksw_var", &["--value"]);
        let stores = at(&hits, "ksw_after48");
        assert_eq!(stores.len() as u64, N, "{err}");
        for (i, h) in stores.iter().enumerate() {
            let want = 0x5a5a_5a5a_0000_0000 | (i as u64 + 1);
            assert_eq!(hex(&h["value"]), Some(want), "{h}");
            assert_eq!(h["value_from"], "memory", "{h}");
            assert!(h.get("raced").is_none(), "{h}");
            assert!(h.get("insn_start").is_none(), "{h}");
        }
        assert_eq!(summary["raced"], 0, "{summary}");
        // Kept on memory (upper half set): the 8-byte reading's value would not pass, the store's does.
        let (hits, summary, err) = after48("ksw_var", &["--if", "value > 0xffffffff"]);
        assert_eq!(at(&hits, "ksw_after48").len() as u64, N, "{err}");
        assert_eq!(summary["raced"], 0, "{summary}");
        assert_eq!(summary["condition_disagreed"], 0, "{summary}");

        let (hits, summary, err) = after48("ksw_var/4", &["--if", "value != 0xffffffff"]);
        let stores = at(&hits, "ksw_after48");
        assert_eq!(stores.len() as u64, N, "{err}");
        for (i, h) in stores.iter().enumerate() {
            assert_eq!(hex(&h["value"]), Some(i as u64 + 1), "{h}");
            assert_eq!(h["value_from"], "insn", "{h}");
            assert!(h.get("raced").is_none(), "{h}");
        }
        assert_eq!(summary["raced"], 0, "{summary}");
        assert_eq!(summary["condition_disagreed"], 0, "{summary}");
    }
);

/// What `ksw_var` holds after each store of the `widths` mode, in order: per round r, a byte r at +0,
/// 2 bytes 0x100 + r at +2, 4 bytes 0x10000 + r at +4, then 8 bytes r << 32 | r.
fn widths(rounds: u64) -> Vec<(&'static str, u64)> {
    let mut mem = 0u64;
    let mut out = Vec::new();
    for r in 1..=rounds {
        mem = (mem & !0xff) | (r & 0xff);
        out.push(("ksw_store1", mem));
        mem = (mem & !0xffff_0000) | ((0x100 + r) & 0xffff) << 16;
        out.push(("ksw_store2", mem));
        mem = (mem & 0xffff_ffff) | (0x10000 + r) << 32;
        out.push(("ksw_store4", mem));
        mem = (r << 32) | r;
        out.push(("ksw_store8", mem));
    }
    out
}

// Stores of 1, 2, 4 and 8 bytes into an 8-byte watch: `rw --value` gives each store hit the value a
// `write --value` watch gives it (what the range holds after the store), none unknown.
live_test!(
    a_store_on_a_read_write_watch_has_the_value_a_write_watch_gives,
    {
        let want = widths(50);
        let stores = |hits: &[Value]| -> Vec<(String, Option<u64>)> {
            hits.iter()
                .filter(|h| {
                    h["ip"]["sym"]
                        .as_str()
                        .is_some_and(|s| s.starts_with("ksw_store"))
                })
                .map(|h| {
                    (
                        h["ip"]["sym"].as_str().unwrap_or("").to_string(),
                        hex(&h["value"]),
                    )
                })
                .collect()
        };
        let want: Vec<(String, Option<u64>)> = want
            .iter()
            .map(|&(s, v)| (s.to_string(), Some(v)))
            .collect();
        let (w, _, err) = run("write", "ksw_var", &["widths", "50", "0"], &["--value"]);
        assert_eq!(stores(&w), want, "write --value: {err}");
        let (rw, summary, err) = run("rw", "ksw_var", &["widths", "50", "0"], &["--value"]);
        assert_eq!(stores(&rw), want, "rw --value: {err}");
        // Without --value, a process watch's store hits carry a value too: what the range holds as the
        // tracer takes the hit (read from the process, which stays alive until every hit is printed).
        let mut h = Writer::start_binary(&helper("stores"), &["widths", "50", "0"]);
        let pid = h.pid.to_string();
        let mut t = Tracer::start_json(&["rw", "--json", "--no-status", "-p", &pid, "ksw_var"]);
        h.go();
        let mut text = String::new();
        while text.matches("\"sym\":\"ksw_store").count() < want.len() {
            let more = t.read_until(|l| l.contains("\"sym\":\"ksw_store"));
            assert!(!more.is_empty(), "the stream ended early:\n{text}");
            text.push_str(&more);
        }
        h.finish();
        let (code, rest, err) = t.wait(Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
        text.push_str(&rest);
        let rw: Vec<Value> = ndjson(&text)
            .into_iter()
            .filter(|v: &Value| v["type"] == "hit" && v["in_kernel"] == false)
            .collect();
        let known = stores(&rw).iter().filter(|(_, v)| v.is_some()).count();
        assert_eq!(known, want.len(), "rw: {err}");
        assert!(
            summary["warnings"]
                .as_array()
                .is_none_or(|w| w.iter().all(|w| !w.to_string().contains("unaccounted"))),
            "{summary}"
        );
    }
);

// A kernel writer (`read()` of /dev/zero into the helper's global, after it stored ~0 there) on an `rw`
// watch: the trap is taken in the kernel, where the program's read cannot trap again, so each hit has
// memory's value, marked as one with no known start (kernel text is not read), as on a `write` watch;
// and no trap is unaccounted for.
live_test!(a_kernel_writer_on_a_read_write_watch_has_memorys_value, {
    let (hits, summary, err) = run_helper(
        "writer",
        "rw",
        "target_var",
        &["fill", "1", "0"],
        &["--value"],
    );
    let kernel: Vec<&Value> = hits.iter().filter(|h| h["in_kernel"] == true).collect();
    assert!(!kernel.is_empty(), "no kernel write seen: {err}");
    for h in &kernel {
        assert!(hex(&h["value"]).is_some(), "{h}");
        assert_eq!(h["value_from"], "memory", "{h}");
        assert_eq!(h["insn_start"], "unknown", "{h}");
    }
    assert_eq!(hex(&kernel.last().expect("a kernel hit")["value"]), Some(0));
    let warnings = summary["warnings"].to_string();
    assert!(!warnings.contains("unaccounted"), "{summary}");
});
