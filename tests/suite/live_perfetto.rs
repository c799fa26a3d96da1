//! `--perfetto FILE` on a live session, read back by an independent reader: scripts/perfetto-check.py,
//! which decodes the trace with Perfetto's own definitions (the `perfetto` PyPI package) and resolves its
//! interning. Every store the helper made must be there, on its thread, with its chain.

use std::collections::BTreeSet;
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

live_test!(every_store_is_in_the_perfetto_trace_with_its_chain, {
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
});

// Issue 38 item 12: a thread that renames itself between its stores stays one thread track, named as
// Perfetto's importer names it (its first name; the thread takes the newest), with every store on it;
// the file passes the independent reader's checks (it failed them: the CPU tracks named the writer by
// a name its track no longer had).
live_test!(a_renamed_thread_is_one_perfetto_track_with_every_store, {
    const N: usize = 100;
    let mut w = Writer::start_binary(
        &util::helper("renamer"),
        &[&N.to_string(), "first", "second", "third"],
    );
    let pid = w.pid;
    let trace =
        std::env::temp_dir().join(format!("ksymwatch-rename-{}.pftrace", std::process::id()));
    let path = trace.display().to_string();
    let t = Tracer::start(&[
        "write",
        "-p",
        &pid.to_string(),
        "target_var",
        "--perfetto",
        &path,
    ]);
    w.go();
    let (code, _, err) = t.interrupt(Duration::from_secs(30));
    w.finish();
    assert_eq!(code, 0, "{err}");
    let hits = checked_hits(&trace);
    let _ = std::fs::remove_file(&trace);
    let Some(hits) = hits else { return };
    let stores: Vec<&serde_json::Value> = hits
        .iter()
        .filter(|h| {
            h["args"]["ip"]
                .as_str()
                .is_some_and(|ip| ip.starts_with("main+"))
        })
        .collect();
    assert_eq!(stores.len(), 3 * N, "every store, of {} hits", hits.len());
    let tids: BTreeSet<u64> = stores.iter().filter_map(|h| h["tid"].as_u64()).collect();
    assert_eq!(tids.len(), 1, "one thread");
    let tracks: BTreeSet<&str> = stores.iter().filter_map(|h| h["thread"].as_str()).collect();
    assert_eq!(tracks.len(), 1, "one track: {tracks:?}");
    let track = *tracks.iter().next().unwrap_or(&"");
    assert!(track.ends_with(&format!("-{pid}")), "{track}");
    // The name each store was made under: the track's until the first rename, then `comm`.
    let comms: Vec<&str> = stores
        .iter()
        .map(|h| h["args"]["comm"].as_str().unwrap_or(track))
        .collect();
    assert!(comms[..N].iter().all(|c| *c == track), "{comms:?}");
    assert!(comms[N..2 * N].iter().all(|c| *c == "second"), "{comms:?}");
    assert!(comms[2 * N..].iter().all(|c| *c == "third"), "{comms:?}");
});
