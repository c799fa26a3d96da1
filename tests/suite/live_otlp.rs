//! `--format otlp-json` against real stores, checked by the OpenTelemetry protobuf definitions themselves:
//! tests/helpers/otlp_check.py parses every line into opentelemetry-proto's `ExportLogsServiceRequest`
//! and holds the raw JSON to OTLP/JSON's encoding rules; this test then checks what the records say.
//! Skips (visibly) when Python's `opentelemetry-proto` package is missing (`scripts/test` installs it).

use crate::util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use util::{Tracer, Writer};

fn checker() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helpers/otlp_check.py")
}

/// Why the checker cannot run here, if it cannot.
fn checker_missing() -> Option<String> {
    match Command::new("python3")
        .arg(checker())
        .arg("--probe")
        .output()
    {
        Err(e) => Some(format!("python3 cannot be run: {e}")),
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout).trim(),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
    }
}

/// The checker's verdict on `stream`: its records, or the test fails with what it said.
fn check(stream: &str) -> (u64, Vec<Value>) {
    let file = std::env::temp_dir().join(format!("ksymwatch-otlp-{}.jsonl", std::process::id()));
    std::fs::write(&file, stream).expect("write the stream for the checker");
    let out = Command::new("python3")
        .arg(checker())
        .arg(&file)
        .output()
        .expect("run the checker");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "otlp_check.py refused the stream: {}\n{stream}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("checker output");
    (
        v["lines"].as_u64().expect("lines"),
        v["records"].as_array().expect("records").clone(),
    )
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

// A process watch written as OTLP: every store of the helper is a valid LogRecord of its pid and thread,
// named in `main`, with its call chain, value and a wall-clock time within the run; the armed mark comes
// first and the summary last, both as events.
live_test!(otlp_json_stores_are_valid_log_records_with_their_chain, {
    if let Some(why) = checker_missing() {
        return util::skip(why);
    }
    const STORES: usize = 5;
    let mut h = Writer::start(&["write", &STORES.to_string(), "0"]);
    let pid = h.pid.to_string();
    let started = wall_ns();
    let t = Tracer::start_otlp(&[
        "write",
        "--format",
        "otlp-json",
        "--no-status",
        "-p",
        &pid,
        "target_var",
    ]);
    let armed_line = t.header.clone();
    h.go();
    let (code, rest, err) = t.interrupt(Duration::from_secs(30));
    let ended = wall_ns();
    assert_eq!(code, 0, "{err}");
    let (lines, records) = check(&format!("{armed_line}{rest}"));
    assert!(lines >= 2, "armed, hits and summary: {lines} lines");

    let events: Vec<&str> = records.iter().filter_map(|r| r["event"].as_str()).collect();
    assert_eq!(events.first(), Some(&"ksymwatch.armed"), "{events:?}");
    assert_eq!(events.last(), Some(&"ksymwatch.summary"), "{events:?}");
    let stores: Vec<&Value> = records
        .iter()
        .filter(|r| {
            let a = &r["attrs"];
            r["event"].is_null()
                && a["process.pid"] == h.pid
                && a["ksymwatch.in_kernel"] == false
                && a["code.function.name"] == "main"
        })
        .collect();
    assert_eq!(stores.len(), STORES, "{records:#?}");
    for r in &stores {
        let a = &r["attrs"];
        assert_eq!(a["thread.id"], h.tid, "{r}");
        assert_eq!(a["thread.name"], "writer", "{r}");
        assert_eq!(a["cpu.logical_number"], 0, "{r}");
        assert_eq!(a["ksymwatch.target"], "target_var", "{r}");
        assert_eq!(a["ksymwatch.addr"], format!("0x{:x}", h.addr), "{r}");
        assert_eq!(
            (r["severity"].as_u64(), &r["severity_text"]),
            (Some(9), &"INFO".into())
        );
        let chain = a["ksymwatch.call_chain"].as_array().expect("chain");
        let ip = a["ksymwatch.ip"].as_str().expect("ip");
        assert!(
            ip.starts_with("main+0x") && ip.ends_with(" [writer]"),
            "{r}"
        );
        assert_eq!(chain.first().and_then(|f| f.as_str()), Some(ip), "{r}");
        assert!(
            a["ksymwatch.value"]
                .as_str()
                .is_some_and(|v| v.starts_with("0x")),
            "{r}"
        );
        let body = r["body"].as_str().expect("body");
        assert!(
            body.starts_with(&format!("writer-{} [000] target_var W ip={ip}", h.tid)),
            "{body}"
        );
        let time = r["time"].as_u64().expect("time");
        assert!(
            (started..=ended).contains(&time),
            "the store's wall time {time} is outside the run {started}..{ended}: {r}"
        );
        assert!(r["observed"].as_u64().expect("observed") >= time, "{r}");
    }
    let summary = records.last().expect("summary");
    assert!(
        summary["attrs"]["ksymwatch.hits"].as_u64() >= Some(STORES as u64),
        "{summary}"
    );
    h.finish();
});
