//! `old` is a process's, not a pid's: a system-wide `--value` watch of a user address (a non-PIE global,
//! the same address in every process of the binary) shows no `old` on the first hit of a process that
//! took an earlier process's pid, or of a program a process execs, in the tracer's merged order and in
//! the kernel's (`--if`).

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::util::{self, helper_with, Tracer, Writer};

/// `target_var`'s address in the non-PIE helper (the same in each of its processes), or `None` (skipped
/// visibly) without `nm`.
fn target_var(bin: &std::path::Path) -> Option<String> {
    if !util::require("nm") {
        return None;
    }
    let nm = Command::new("nm").arg(bin).output().expect("run nm");
    let addr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| l.strip_suffix(" B target_var").map(|a| format!("0x{a}")))
        .expect("target_var in nm output");
    Some(addr)
}

/// Runs `bin exec-store N` (it stores N into `target_var` once and exits) to its end; its pid.
fn store_once(bin: &std::path::Path, n: u64) -> u32 {
    let mut c = Command::new(bin)
        .args(["exec-store", &n.to_string()])
        .spawn()
        .expect("start the helper");
    let pid = c.id();
    assert!(c.wait().expect("wait the helper").success());
    pid
}

/// Makes the next process the kernel creates get pid `want` (`ns_last_pid`, as root can) and stores `n`
/// from it; false when other processes kept taking the pid first (50 tries).
fn store_under_pid(bin: &std::path::Path, want: u32, n: u64) -> bool {
    (0..50).any(|_| {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (want - 1).to_string())
            .expect("write ns_last_pid (root)");
        store_once(bin, n) == want
    })
}

/// Watches the helper's `target_var` system-wide with `flags` while one process stores `first` and a
/// later one under the same pid stores `second`; the second process's hits, in order (the ELF loader's
/// stores into the page first, then its own), or `None` where the pid could not be had again.
fn second_process_hits(flags: &[&str], first: u64, second: u64) -> Option<Vec<Value>> {
    let bin = helper_with("threads", &["-no-pie"]);
    let addr = target_var(&bin)?;
    let mut args = flags.to_vec();
    args.push(&addr);
    let t = Tracer::write_json(&args);
    let pid = store_once(&bin, first);
    let reused = store_under_pid(&bin, pid, second);
    // Stopped as Ctrl-C does, once the stores are in the rings (after a tick for the loop to drain them).
    std::thread::sleep(Duration::from_millis(300));
    t.signal(libc::SIGINT);
    let (records, err) = t.json_stream(Duration::from_secs(30));
    if !reused {
        util::skip(format!(
            "pid {pid} could not be given to a new process (other processes took it first)"
        ));
        return None;
    }
    let hits = util::hits_of_pid(&records, pid);
    let own =
        |v: &Value, n: u64| v["ip"]["sym"] == "ksw_thread_store" && v["value"] == format!("{n:#x}");
    let first_end = hits
        .iter()
        .position(|v| own(v, first))
        .unwrap_or_else(|| panic!("the first process's store: {hits:?}\n{err}"));
    let later: Vec<Value> = hits[first_end + 1..].iter().map(|v| (*v).clone()).collect();
    assert!(
        later.last().is_some_and(|v| own(v, second)),
        "the second process's store last: {later:?}\n{err}"
    );
    Some(later)
}

// Every trap printed (no filter, no condition): `old` from the merged order, where the earlier process's
// 7 is not the new one's.
live_test!(a_reused_pid_starts_with_no_old_value, {
    let Some(hits) = second_process_hits(&["--value"], 7, 9) else {
        return;
    };
    assert_eq!(
        hits[0].get("old"),
        Some(&Value::Null),
        "not the earlier process's 7: {hits:?}"
    );
});

// With `--if` (and `--comm`), `old` is the kernel's: its entry for the pid is the earlier process's
// until the new process's first hit replaces it, which has no `old` there either.
live_test!(a_reused_pid_starts_with_no_old_value_in_the_kernel, {
    let name = "threads-no-pie";
    let Some(hits) = second_process_hits(&["--if", "changed", "--comm", name], 7, 7) else {
        return;
    };
    assert_eq!(
        hits[0].get("old"),
        Some(&Value::Null),
        "not the earlier process's 7: {hits:?}"
    );
});

/// Watches the helper's `target_var` system-wide with `flags` while a process stores 7 into it and
/// execs itself, whose new program stores 2; the hits after the store of 7 (the ELF loader's into the
/// new image first).
fn after_exec_hits(flags: &[&str]) -> Option<Vec<Value>> {
    let bin = helper_with("threads", &["-no-pie"]);
    let addr = target_var(&bin)?;
    let mut args = flags.to_vec();
    args.push(&addr);
    let t = Tracer::write_json(&args);
    let mut w = Writer::start_binary(&bin, &["reexec", "7"]);
    w.read_until("ready");
    w.send("go");
    w.read_until("exec'd");
    let pid = w.pid;
    w.finish();
    std::thread::sleep(Duration::from_millis(300));
    t.signal(libc::SIGINT);
    let (records, err) = t.json_stream(Duration::from_secs(30));
    let hits = util::hits_of_pid(&records, pid);
    let own =
        |v: &Value, n: u64| v["ip"]["sym"] == "ksw_thread_store" && v["value"] == format!("{n:#x}");
    let before = hits
        .iter()
        .position(|v| own(v, 7))
        .unwrap_or_else(|| panic!("the store before the exec: {hits:?}\n{err}"));
    let later: Vec<Value> = hits[before + 1..].iter().map(|v| (*v).clone()).collect();
    assert!(
        later.last().is_some_and(|v| own(v, 2)),
        "the new program's store last: {later:?}\n{err}"
    );
    Some(later)
}

// An exec keeps the pid and the process, not the image: the new program's first hit has no `old`, in the
// merged order and in the kernel's.
live_test!(an_exec_starts_with_no_old_value, {
    for flags in [
        &["--value"][..],
        &["--if", "changed", "--comm", "threads-no-pie"],
    ] {
        let Some(hits) = after_exec_hits(flags) else {
            return;
        };
        assert_eq!(
            hits[0].get("old"),
            Some(&Value::Null),
            "{flags:?}: not the earlier image's 7: {hits:?}"
        );
    }
});
