//! `--count N` on the hit path, where the programs keep N hits in the kernel, with hits the tracer would
//! not report: the kernel must keep only what the tracer admits, or a kept hit it then drops takes one of
//! the N and the run stops with fewer printed. An exec's window (the ELF loader's writes into the new
//! program's memory, which the tracer drops from the exec on) and a `--comm` name in angle brackets (once
//! left to the tracer: `--comm '<foo>' --count 5` stopped at 0 hits, 5 filtered) each stopped a run
//! early. (`--on`'s: `live_count_objects`.)

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::util::{self, helper_with, Tracer, Writer};

/// The helper's own stores among `pid`'s hits (the kernel's writes have kernel ips).
fn own_stores(records: &[Value], pid: u32) -> Vec<&Value> {
    util::hits_of_pid(records, pid)
        .into_iter()
        .filter(|v| v["ip"]["sym"] == "ksw_thread_store")
        .collect()
}

/// `-p A -p B EXTRA --count 2 target_var` over the non-PIE helper, A run as `run_a` and B as `run_b` through
/// `bin_b` (a link to the helper, or the helper itself), each past its `ready`; `drive` makes them store.
/// The run must end at its count with 2 hits: its records, with A's and B's pids.
fn two_hits_of_two(
    (run_a, run_b, bin_b): (&[&str], &[&str], Option<&Path>),
    extra: &[&str],
    drive: impl FnOnce(&mut Writer, &mut Writer),
) -> (Vec<Value>, u32, u32) {
    let bin = helper_with("threads", &["-no-pie"]);
    let mut a = Writer::start_binary(&bin, run_a);
    let mut b = Writer::start_binary(bin_b.unwrap_or(&bin), run_b);
    a.read_until("ready");
    b.read_until("ready");
    let (pid_a, pid_b) = (a.pid.to_string(), b.pid.to_string());
    let mut args = vec!["-p", &pid_a, "-p", &pid_b];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--count", "2", "target_var"]);
    let t = Tracer::write_json(&args);
    drive(&mut a, &mut b);
    let (records, err) = t.json_stream(Duration::from_secs(30));
    let pids = (a.pid, b.pid);
    a.finish();
    b.finish();
    let hits: Vec<&Value> = records.iter().filter(|v| v["type"] == "hit").collect();
    assert_eq!(hits.len(), 2, "{hits:?}\n{err}");
    let s = util::summary_record(&records);
    let stop = (s["hits"].as_u64(), s["stop"].as_str());
    assert_eq!(stop, (Some(2), Some("count")), "{s}");
    (records, pids.0, pids.1)
}

// `-p A -p B --count 2`: A stores once and re-execs itself (non-PIE: the new program's variable is at the
// same address, and the ELF loader zeroes it), then B's 3 threads store. The exec ends A's watch in the
// kernel where the tracer ends it, before the loader writes: A's store and one of B's are the 2 hits.
// (With the kernel ending it later, at `sched_process_exec`, the loader's writes took the count: 1 hit
// printed, B's never.)
live_test!(an_exec_spends_none_of_the_count, {
    let runs: (&[&str], &[&str], _) = (&["reexec", "1"], &["threads", "3", "0"], None);
    let (records, pid_a, pid_b) = two_hits_of_two(runs, &[], |a, b| {
        a.send("go");
        a.read_until("exec'd");
        b.send("go");
        b.read_until_prefix("done tids=");
    });
    let of_a = own_stores(&records, pid_a);
    assert_eq!(of_a.len(), 1, "A's store before its exec: {of_a:?}");
    assert_eq!(of_a[0]["value"], "0x1");
    assert_eq!(own_stores(&records, pid_b).len(), 1, "one of B's");
    assert!(
        records.iter().any(|v| v["type"] == "process_exec"),
        "A's exec reported"
    );
    // What A's pid wrote after its exec (the loader's zeroing, the new program's store) is an unwatched
    // process's, dropped in the kernel.
    let s = util::summary_record(&records);
    assert!(s["filtered"].as_u64() >= Some(1), "{s}");
    assert_eq!(s["filtered"], s["filtered_other_process"], "{s}");
});

// `-p A -p B --comm '<w>' --count 2`: A (named `threads-no-pie`) stores 3 times, then B, started through a
// link named `<w>`, 3 times. The kernel checks the name as the tracer does (a name in angle brackets is a
// task's own on the hit path): A's stores are filtered in the kernel and take none of the count, and 2 of
// B's are the hits. (Left to the tracer, A's stores took the count: 0 hits printed.)
live_test!(a_comm_in_angle_brackets_spends_none_of_the_count, {
    let link = util::temp_dir("ksw-count-comm").join("<w>");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(helper_with("threads", &["-no-pie"]), &link)
        .expect("link the helper as <w>");
    let run: &[&str] = &["threads", "3", "0"];
    let (records, _, pid_b) =
        two_hits_of_two((run, run, Some(&link)), &["--comm", "<w>"], |a, b| {
            for w in [a, b] {
                w.send("go");
                w.read_until_prefix("done tids=");
            }
        });
    let hits: Vec<&Value> = records.iter().filter(|v| v["type"] == "hit").collect();
    assert!(
        hits.iter().all(|v| v["pid"] == pid_b && v["comm"] == "<w>"),
        "{hits:?}"
    );
    let s = util::summary_record(&records);
    assert_eq!(
        (s["filtered"].as_u64(), s["filtered_other_process"].as_u64()),
        (Some(3), Some(0)),
        "A's 3 stores, by the name: {s}"
    );
});

// The writer stores 1,000 times, none by a task named `<foo>`: the run must not stop at a count none of
// its hits made; it runs to its duration, every store filtered.
live_test!(hits_only_the_tracer_filters_do_not_use_up_the_count, {
    let mut w = Writer::start(&["write", "1000", "0"]);
    let pid = w.pid.to_string();
    let t = Tracer::write_json(&[
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
