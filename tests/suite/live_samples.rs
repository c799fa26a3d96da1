//! The per-thread path's perf samples, run live as root: where BPF loads every watch takes the hit
//! program, `--per-thread` ones included, so the path that runs wherever it does not (an unprivileged
//! user, a kernel without BPF, CAP_BPF missing) is reached here by dropping CAP_BPF and CAP_SYS_ADMIN
//! (capsh): CAP_PERFMON stays, which opens user-address breakpoints, and nothing can load a program.
//! Each test first asserts, by a dry run of its own options (`sample_path`), that the run takes the
//! sample path, so a run that silently took the program would fail rather than pass for the wrong path.
//!
//! What the path must do (src/trace/events/samples.rs): report each store once although a thread covered
//! twice (its own event and its creator's inherited copy) writes two samples of it, read each hit's value
//! from the process when the hit is drained, and count what the ring could not hold as lost.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use crate::util::{self, Tracer, Writer};

/// The capabilities dropped: without CAP_BPF and CAP_SYS_ADMIN no BPF program loads, with CAP_PERFMON
/// (kept) the perf events of user-address breakpoints open.
const DROP: &str = "cap_bpf,cap_sys_admin";

/// What `--dry-run` says of the sample path's plan.
const SAMPLE_PATH: &str = "# path: one breakpoint per thread, CPU and target, hits as perf samples";

/// The capsh prefix that runs ksymwatch on the sample path for `write FLAGS -p PID target_var`, or `None`
/// after a visible skip: not root, no capsh, or root without those capabilities may not open the watch
/// here (exit 4). Asked of an idle helper of its own (the path does not depend on the process), so that
/// the probe takes none of the watched helper's time: a dry run that must say the sample path, then a
/// brief watch that must open.
fn sample_path(flags: &[&str]) -> Option<Vec<String>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        util::skip("not root: the case is root whose CAP_BPF and CAP_SYS_ADMIN were dropped");
        return None;
    }
    if !util::capsh() {
        return None;
    }
    let idle = Writer::start(&["write", "1", "0"]);
    let pid = idle.pid.to_string();
    let watch = [&["write"], flags, &["-p", &pid, "target_var"]].concat();
    let (code, out, err) = util::run_dropping(DROP, &[&watch[..], &["--dry-run"]].concat(), "");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines().any(|l| l == SAMPLE_PATH),
        "without {DROP} the watch must take the perf-sample path:\n{out}"
    );
    let brief = [&watch[..], &["--duration", "100ms"]].concat();
    let (code, _, err) = util::run_dropping(DROP, &brief, "");
    idle.finish();
    if code == 4 {
        util::skip(format_args!(
            "root without {DROP} may not open user-address breakpoints here: {}",
            err.trim()
        ));
        return None;
    }
    assert_eq!(code, 0, "{err}");
    Some(util::dropping(DROP))
}

/// The hits of `pid`'s stores (the helper's `ksw_thread_store`), leaving out anything else at the address.
fn stores_of(records: &[Value], pid: u32) -> Vec<&Value> {
    util::hits_of_pid(records, pid)
        .into_iter()
        .filter(|v| v["ip"]["sym"] == "ksw_thread_store")
        .collect()
}

/// `pid`'s stores in `records`, by threads that each store once, and the tids that made them: asserted
/// to be reported once each, all `made` of them, counted once each by the summary, nothing lost.
fn each_store_once(records: &[Value], pid: u32, made: u64) -> (Vec<&Value>, BTreeSet<u64>) {
    let summary = util::summary_record(records);
    let stored = stores_of(records, pid);
    let mut tids = BTreeSet::new();
    for v in &stored {
        let tid = v["tid"].as_u64().expect("tid");
        assert!(tids.insert(tid), "a store reported twice: {v}");
    }
    assert_eq!(stored.len() as u64, made, "every store printed: {summary}");
    assert_eq!(summary["hits"], made, "{summary}");
    assert_eq!(summary["lost"], 0, "{summary}");
    assert_eq!(summary["unprinted"], 0, "{summary}");
    (stored, tids)
}

// 2,000 threads made one every 200 us from the moment the watch starts arming (`threads sprout`: most
// made while it is armed or after it, covered by copies of their creator's events; one made while the
// thread list is being read holds its own event and its creator's copy, both writing a sample of each
// store), each storing its tid once: each store is printed once, all of them, and the summary counts each
// once with nothing lost. Each value is read from the process when its hit is drained, so it is what
// `target_var` held then: the tid of one of the threads that stored, or null once the process is gone.
// The helper lives on 500 ms after its last store, so the tracer (whose output is read as it comes, as a
// reader that keeps up does) drains most, and at least some, hits while it can still read them.
live_test!(per_thread_samples_report_each_store_once, {
    let flags = ["--per-thread", "--buffer-pages", "4096"];
    let Some(prefix) = sample_path(&flags) else {
        return;
    };
    for round in 0..3 {
        let mut h = Writer::threads(&["sprout", "2000", "200"]);
        let pid = h.pid;
        let pid_arg = pid.to_string();
        let args = [&flags[..], &["-p", &pid_arg, "target_var"]].concat();
        let mut t = Tracer::write_json_with(&prefix, &args);
        let reader = t.keep_reading();
        h.send("go");
        let lines = h.read_until("done");
        let made = util::helper_number::<u64>(&lines, "stores=");
        std::thread::sleep(Duration::from_millis(500));
        h.finish();
        let (records, _) = t.records_read_by(reader, Duration::from_secs(60));
        let (stored, tids) = each_store_once(&records, pid, made);
        let mut gone = 0;
        for v in &stored {
            let value = v.get("value").unwrap_or_else(|| panic!("no value: {v}"));
            if value.is_null() {
                gone += 1;
                continue;
            }
            let read = value
                .as_str()
                .and_then(|text| text.strip_prefix("0x"))
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                .unwrap_or_else(|| panic!("not an 8-byte value: {v}"));
            assert!(
                tids.contains(&read),
                "the value read at the drain is a stored tid: {v}"
            );
        }
        assert!(
            gone < made,
            "no value read while the helper lived, of {made}"
        );
        eprintln!(
            "NOTE: live_samples: round {round}: {made} stores, {gone} values read once the process \
             was gone"
        );
    }
});

// A ring of one page, its reader stopped (SIGSTOP) while 4 threads store 2,000 times each on both CPUs:
// the ring holds a few dozen samples and the rest are lost. Nothing is lost silently: the hits printed
// and the ones counted lost (per CPU, adding up) are every store the helper made, and the summary's hits
// are the ones printed.
live_test!(per_thread_samples_count_what_a_full_ring_lost, {
    let flags = ["--per-thread", "--buffer-pages", "1"];
    let Some(prefix) = sample_path(&flags) else {
        return;
    };
    let mut h = Writer::threads(&["tagged", "4", "2000", "0"]);
    let pid = h.pid;
    let pid_arg = pid.to_string();
    let args = [&flags[..], &["-p", &pid_arg, "target_var"]].concat();
    let mut t = Tracer::write_json_with(&prefix, &args);
    let reader = t.keep_reading();
    t.signal(libc::SIGSTOP);
    h.send("go");
    let lines = h.read_until("done");
    assert!(lines.iter().any(|l| l == "stores=8000 adds=0"), "{lines:?}");
    t.signal(libc::SIGCONT);
    h.finish();
    let (records, err) = t.records_read_by(reader, Duration::from_secs(60));
    let summary = util::summary_record(&records);
    let printed = stores_of(&records, pid).len() as u64;
    let lost = summary["lost"].as_u64().expect("lost");
    assert!(
        lost > 0,
        "a stopped reader's one-page ring lost none: {summary}"
    );
    assert_eq!(
        printed + lost,
        8000,
        "every store printed or lost: {summary}"
    );
    assert_eq!(summary["hits"], printed, "{summary}");
    assert_eq!(summary["unprinted"], 0, "{summary}");
    assert_eq!(util::counts(summary, "lost_by_cpu"), lost, "{summary}");
    assert!(err.contains("events lost"), "the loss is told: {err}");
});

// A command launched under the watch (`-- CMD --per-thread`: one event per CPU bound to it, inherited by
// every thread it makes, all made after the arming): 4 threads, then 4 more once those stored, each
// storing its index + 1 once, and the command exits as soon as it is done. Each store is printed once,
// the summary counts the 8, and each value, read when its hit is drained, is null (the command has
// usually exited by then) or one of the values stored.
live_test!(a_launched_command_per_thread_reports_each_store_once, {
    let flags = ["--per-thread"];
    if sample_path(&flags).is_none() {
        return;
    }
    let bin = util::helper("threads");
    let dry = [&["write", "--dry-run"], &flags[..], &["target_var"]].concat();
    let dry = util::launching(&dry, &bin, &["threads", "4", "4"]);
    let (code, out, err) = util::run_dropping(DROP, &dry, "");
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().any(|l| l == SAMPLE_PATH), "{out}");
    let watch = [
        &["write", "--json", "--no-status"],
        &flags[..],
        &["target_var"],
    ]
    .concat();
    let args = util::launching(&watch, &bin, &["threads", "4", "4"]);
    let (code, out, err) = util::run_dropping(DROP, &args, "go\n");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<String> = out.lines().map(String::from).collect();
    assert_eq!(util::helper_number::<u32>(&lines, "done tids="), 8, "{out}");
    let records = util::stream_records(&out);
    let pid = util::record(&records, "header")["pids"][0]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .expect("the command's pid");
    let (stored, _) = each_store_once(&records, pid, 8);
    for v in &stored {
        let value = v.get("value").unwrap_or_else(|| panic!("no value: {v}"));
        let stored_value = |text: &str| (1..=8).any(|k: u32| text == format!("0x{k:x}"));
        assert!(
            value.is_null() || value.as_str().is_some_and(stored_value),
            "a value read at the drain is null or one stored: {v}"
        );
    }
});
