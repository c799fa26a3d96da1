//! `--value` and `--if` on the per-thread path (`--per-thread`, `--remove-on-exec`): every thread's event
//! runs the hit program that one breakpoint per CPU runs, so its hits carry the store's own value and the
//! one before it, `--if` is decided in the kernel, and the events (not the program) choose the threads:
//! an exec keeps them, or `--remove-on-exec` drops them.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::util::{self, helper_with, Tracer, Writer, BIN};

// A launched shell that execs the helper, whose 3 threads then store 1, 2 and 3: with `--per-thread
// --value` the watch follows the exec and each store's hit carries its value, and the one before it
// (the stores follow one another); `--remove-on-exec --value` drops the watch at the exec.
live_test!(per_thread_values_follow_an_exec_or_end_at_it, {
    if !util::require("nm") {
        return;
    }
    // Non-PIE: the global's address is the same before the exec as after it.
    let bin = helper_with("threads", &["-no-pie"]);
    let nm = Command::new("nm").arg(&bin).output().expect("run nm");
    let addr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| {
            l.strip_suffix(" B target_var")
                .map(|a| format!("0x{}", a.trim_start_matches('0')))
        })
        .expect("target_var in nm output");
    let script = format!("exec {} threads 3 0", bin.display());
    let stream = std::env::temp_dir().join(format!("ksw-thread-values-{}", std::process::id()));
    let stream_arg = stream.to_str().expect("utf-8 path");
    for (flag, want) in [("--per-thread", 3), ("--remove-on-exec", 0)] {
        let mut args = vec!["write", "--json", "--no-status", "-o", stream_arg, flag];
        args.extend(["--value", addr.as_str(), "--", "sh", "-c", &script]);
        let mut h = Writer::start_binary(Path::new(BIN), &args);
        h.read_until("ready");
        h.send("go");
        h.read_until_prefix("done tids=");
        let pid = h.pid;
        let status = h.close_and_wait(Duration::from_secs(30));
        assert_eq!(status.code(), Some(0), "{flag}");
        let records = util::ndjson(&std::fs::read_to_string(&stream).expect("stream file"));
        let stores: Vec<&Value> = records
            .iter()
            .filter(|v| v["type"] == "hit" && v["pid"] == pid && v["in_kernel"] == false)
            .collect();
        assert_eq!(stores.len(), want, "{flag}: {stores:?}");
        let mut values: Vec<&str> = stores
            .iter()
            .map(|v| v["value"].as_str().expect("a value"))
            .collect();
        values.sort_unstable();
        let stored = ["0x1", "0x2", "0x3"];
        assert_eq!(values, stored[..want], "{flag}");
        // Each store's old value is the value before it: the one stored just before, or what the
        // ELF loader left (0) before the first.
        for v in &stores {
            assert!(v["old"].is_string(), "{flag}: {v}");
        }
        let firsts = stores.iter().filter(|v| v["old"] == "0x0").count();
        assert_eq!(firsts, usize::from(want > 0), "{flag}: {stores:?}");
    }
    let _ = std::fs::remove_file(&stream);
});

// 8 threads each store (tid << 32 | seq) for seq 1..1000 at once on every CPU, watched `--per-thread`
// with `--if 'value & 1'`: the program decides on each store's own value in the kernel, so exactly the
// 4,000 odd stores are hits (the summary counts them from the kernel's totals if the rings drop any) and
// the 4,000 even ones are filtered; every hit printed is odd.
live_test!(per_thread_if_keeps_exactly_the_matching_stores, {
    let mut h = Writer::threads(&["tagged", "8", "1000", "0"]);
    let pid = h.pid.to_string();
    let t = Tracer::write_json(&[
        "--per-thread",
        "--if",
        "value & 1",
        "-p",
        &pid,
        "target_var",
    ]);
    h.send("go");
    let lines = h.read_until("done");
    assert!(lines.iter().any(|l| l == "stores=8000 adds=0"), "{lines:?}");
    h.finish();
    let (code, out, err) = t.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let records = util::ndjson(&out);
    let summary = util::summary_record(&records);
    assert_eq!(summary["hits"], 4000, "{summary}");
    assert_eq!(summary["filtered"], 4000, "{summary}");
    let hits: Vec<&Value> = records.iter().filter(|v| v["type"] == "hit").collect();
    assert!(!hits.is_empty() && hits.len() <= 4000, "{summary}");
    let odd = |v: &&Value| {
        v["value"]
            .as_str()
            .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            .is_some_and(|n| n & 1 == 1)
    };
    assert!(hits.iter().all(odd), "an even store kept");
});
