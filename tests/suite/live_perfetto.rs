//! `--perfetto FILE` on a live session, read back by an independent reader: scripts/perfetto-check.py,
//! which decodes the trace with Perfetto's own definitions (the `perfetto` PyPI package) and resolves its
//! interning. Every store the helper made must be there, on its thread, with its chain.

use std::process::Command;
use std::time::Duration;

use crate::util::{self, skip, Tracer, Writer};

/// The checker's `--hits` lines for `trace`, or `None` (after a SKIP) when it cannot run here.
fn checked_hits(trace: &std::path::Path) -> Option<Vec<serde_json::Value>> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/perfetto-check.py");
    let out = match Command::new("python3")
        .arg(script)
        .arg("--hits")
        .arg(trace)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            skip(format!(
                "cannot run python3 for the independent trace reader: {e}"
            ));
            return None;
        }
    };
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(77) {
        skip(format!(
            "the independent trace reader needs the `perfetto` PyPI package (scripts/test installs it): {}",
            err.trim()
        ));
        return None;
    }
    assert!(out.status.success(), "perfetto-check failed: {err}");
    Some(util::ndjson(&String::from_utf8(out.stdout).unwrap()))
}

#[test]
#[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
fn every_store_is_in_the_perfetto_trace_with_its_chain() {
    let Some(_lock) = util::live() else { return };
    const N: usize = 1000;
    let cpu = util::online_cpus()[0].to_string();
    let w = Writer::start(&["write", &N.to_string(), &cpu]);
    let (pid, addr) = (w.pid, format!("0x{:x}", w.addr));
    let trace = std::env::temp_dir().join(format!("ksymwatch-{}.pftrace", std::process::id()));
    let path = trace.display().to_string();
    let t = Tracer::start(&["write", &addr, "--perfetto", &path]);
    w.go_and_finish();
    let (code, _, err) = t.interrupt(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&format!("ksymwatch: {N} hits")), "{err}");
    let hits = checked_hits(&trace);
    let _ = std::fs::remove_file(&trace);
    let Some(hits) = hits else { return };

    let helpers: Vec<&serde_json::Value> = hits.iter().filter(|h| h["pid"] == pid).collect();
    assert_eq!(helpers.len(), N, "all {N} stores, of {} hits", hits.len());
    let mut last_ts = 0;
    for h in helpers {
        let args = &h["args"];
        assert_eq!(args["target"], addr.as_str(), "{h}");
        assert_eq!(args["addr"], addr.as_str(), "{h}");
        assert_eq!(args["in_kernel"], false, "a user-space store: {h}");
        let ip = args["ip"].as_str().unwrap();
        assert!(ip.starts_with("main+0x") && ip.ends_with("[writer]"), "{h}");
        let chain: Vec<&str> = h["chain"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(
            chain.first(),
            Some(&ip),
            "the chain starts at the store: {h}"
        );
        assert!(chain.len() >= 2, "main's caller too: {h}");
        assert_eq!(h["thread"], format!("writer-{}", h["tid"]).as_str(), "{h}");
        let ts = h["ts"].as_u64().unwrap();
        assert!(ts >= last_ts, "in time order: {h}");
        last_ts = ts;
    }
}
