//! `--count N` on the hit path, where the programs keep N hits in the kernel, with hits the tracer would
//! not report: the kernel must keep only what the tracer admits, or a kept hit it then drops takes one of
//! the N and the run stops with fewer printed. An exec's window (the ELF loader's writes into the new
//! program's memory, which the tracer drops from the exec on), a `--comm` name in angle brackets (once
//! left to the tracer) and `--on`'s stores that are not the object's (the tracer's to decide, so the
//! count is the stream's there) each stopped a run early.

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

// `--on` objects with `--count 9`: the forks helper makes 3 objects; for each, a forked child stores 3
// times into its copy (another process's memory at the object's address: not a hit, the tracer decides
// that) and then the parent stores its 3. The count is the stream's, as the objects' are: the 9 hits are
// the parent's. (Kept in the kernel, the children's stores took it: 3 hits printed, `count reached`.)
live_test!(objects_stores_the_tracer_drops_spend_none_of_the_count, {
    let forks = helper_with("forks", &["-g"]);
    let exe = forks.display().to_string();
    let args = [
        "write",
        "--json",
        "--no-status",
        "--on",
        "uretprobe:libc:malloc",
        "(struct parcel)$obj.weight",
        "--count",
        "9",
        "--",
        &exe,
        "3",
    ];
    let (code, out, err) = util::run_within(&args, Duration::from_secs(60));
    if code != 0 && err.contains("uprobe") {
        util::skip(format!(
            "the kernel refused uprobe events here: {}",
            err.trim()
        ));
        return;
    }
    assert_eq!(code, 0, "{err}");
    let records = util::ndjson(&out);
    let hits: Vec<&Value> = records.iter().filter(|v| v["type"] == "hit").collect();
    assert_eq!(hits.len(), 9, "{hits:?}\n{err}");
    assert!(
        hits.iter().all(|v| v["ip"]["sym"] == "weigh"
            && ["0x1", "0x2", "0x3"].contains(&v["value"].as_str().unwrap_or(""))),
        "the parent's stores only: {hits:?}"
    );
    let s = util::summary_record(&records);
    assert_eq!(
        (s["hits"].as_u64(), &s["stop"]),
        (Some(9), &Value::from("count")),
        "{s}"
    );
});
