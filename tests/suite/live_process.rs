//! Process-wide watches: `-p PID` (every thread, including ones created after arming) and launch mode
//! (`-- CMD`, armed at the command's exec), with the thread counts, a thread whose debug registers
//! are full, and the exit status of a launched command.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::util::{self, helper, helper_with, Tracer, Writer, BIN};

/// The helper's own stores: the kernel's writes (exec zeroing .bss) have kernel ips.
fn user_stores(records: &[Value], pid: u32) -> Vec<&Value> {
    records
        .iter()
        .filter(|v| v["type"] == "hit" && v["pid"] == pid)
        .filter(|v| v["ip"]["sym"] == "ksw_thread_store")
        .collect()
}

fn parse_ndjson(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// `done tids=K`: how many distinct tids stored (fewer than N+LATE only if the kernel reused a tid).
fn done_tids(lines: &[String]) -> usize {
    lines
        .iter()
        .find_map(|l| l.strip_prefix("done tids="))
        .and_then(|k| k.parse().ok())
        .unwrap_or_else(|| panic!("no `done tids=` in {lines:?}"))
}

/// 1,000 threads store once each after a barrier, then 20 threads created after arming store once each:
/// exactly 1,020 user-space hits from as many distinct tids, all of the helper's pid.
#[test]
fn attach_sees_every_thread_including_later_ones() {
    let Some(_live) = util::live() else { return };
    let mut h = Writer::start_binary(&helper("threads"), &["threads", "1000", "20"]);
    h.read_until("ready");
    let pid = h.pid;
    let t = Tracer::start_json(&[
        "write",
        "--json",
        "--no-status",
        "-p",
        &pid.to_string(),
        "target_var",
    ]);
    let header = parse_ndjson(&t.header);
    let head = header
        .iter()
        .find(|v| v["type"] == "header")
        .expect("header record");
    assert_eq!(head["pids"], serde_json::json!([pid]));
    assert_eq!(head["threads"], 1001, "{head}");
    h.send("go");
    let lines = h.read_until_prefix("done tids=");
    let distinct = done_tids(&lines);
    // EOF: the helper exits, and the watch ends by itself.
    h.finish();
    let (code, out, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stopped: watched process exited"), "{err}");
    let records = parse_ndjson(&out);
    let stores = user_stores(&records, pid);
    let tids: BTreeSet<u64> = stores.iter().filter_map(|v| v["tid"].as_u64()).collect();
    assert_eq!(stores.len(), 1020, "user-space hits");
    assert_eq!(tids.len(), distinct, "distinct tids that stored");
    assert!(records.iter().all(|v| v["type"] != "lost"));
    let summary = records.last().expect("summary");
    assert_eq!(summary["stop"], "exited");
}

/// Launch mode on a PIE build: the symbol is resolved once the load bias is known (at the exec stop), the
/// command's stdin/stdout stay its own, the stream goes to `-o`, and the exit status is the command's.
#[test]
fn launch_mode_covers_every_thread_of_a_pie() {
    let Some(_live) = util::live() else { return };
    let bin = helper_with("threads", &["-pie", "-fPIE"]);
    let dir = std::env::temp_dir().join(format!("ksw-launch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let stream = dir.join("stream.ndjson");
    let stream_arg = stream.to_str().expect("utf-8 path");
    let bin_arg = bin.to_str().expect("utf-8 path");
    let mut h = Writer::start_binary(
        Path::new(BIN),
        &[
            "write",
            "--json",
            "--no-status",
            "-o",
            stream_arg,
            "target_var",
            "--",
            bin_arg,
            "threads",
            "1000",
            "20",
        ],
    );
    h.read_until("ready");
    let (pid, banner_addr) = (h.pid, h.addr);
    h.send("go");
    let lines = h.read_until_prefix("done tids=");
    let distinct = done_tids(&lines);
    let status = h.close_and_wait(Duration::from_secs(30));
    assert_eq!(
        status.code(),
        Some(0),
        "ksymwatch exits with the command's status"
    );
    let records = parse_ndjson(&std::fs::read_to_string(&stream).expect("stream file"));
    let head = records
        .iter()
        .find(|v| v["type"] == "header")
        .expect("header");
    assert_eq!(head["pids"], serde_json::json!([pid]));
    // The helper's banner says where the PIE really put target_var: the watch was set there.
    assert_eq!(
        head["targets"][0]["addr"],
        format!("0x{banner_addr:x}").as_str()
    );
    assert!(
        banner_addr > 0x5000_0000_0000,
        "a PIE is loaded high: 0x{banner_addr:x}"
    );
    let stores = user_stores(&records, pid);
    let tids: BTreeSet<u64> = stores.iter().filter_map(|v| v["tid"].as_u64()).collect();
    assert_eq!(stores.len(), 1020, "user-space hits");
    assert_eq!(tids.len(), distinct);
    assert_eq!(records.last().expect("summary")["stop"], "exited");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A thread that holds 4 task-bound breakpoints of its own cannot be armed: the run fails with exit 3,
/// names the thread, prints no hit, and leaves every register free again.
#[test]
fn a_thread_with_full_debug_registers_fails_the_whole_attach() {
    let Some(_live) = util::live() else { return };
    let mut h = Writer::start_binary(&helper("threads"), &["hog", "8"]);
    let lines = h.read_until("ready");
    let (tid, held) = lines
        .iter()
        .find_map(|l| {
            let rest = l.strip_prefix("hog tid=")?;
            let (t, k) = rest.split_once(" held=")?;
            Some((t.to_string(), k.parse::<u32>().ok()?))
        })
        .unwrap_or_else(|| panic!("no hog line in {lines:?}"));
    if held < 4 {
        util::skip(format!("the hog thread got only {held} of 4 breakpoints"));
        return;
    }
    let (code, out, err) = util::run_within(
        &["write", "-p", &h.pid.to_string(), "target_var"],
        Duration::from_secs(30),
    );
    assert_eq!(code, 3, "{err}");
    assert!(err.contains(&format!("tid {tid} (")), "{err}");
    assert!(err.contains("nothing was armed"), "{err}");
    assert!(
        !out.contains("# armed") && !out.contains("target_var W"),
        "{out}"
    );
    h.send("go");
    h.read_until_prefix("done tids=");
    h.finish();
    // Every register of every CPU is free again (the hog has exited too).
    let (code, out, err) = util::run_within(&["check"], Duration::from_secs(30));
    assert_eq!(code, 0, "{out}{err}");
}

/// `-- CMD`: the command's exit status, or 128+N when signal N killed it, as a shell reports it.
#[test]
fn launch_mode_exits_with_the_commands_status() {
    let Some(_live) = util::live() else { return };
    for (script, want) in [
        ("exit 7", 7),
        ("exit 0", 0),
        ("kill -TERM $$", 128 + libc::SIGTERM),
    ] {
        let status = Command::new(BIN)
            .args([
                "write",
                "--no-status",
                "-o",
                "/dev/null",
                "0x10000",
                "--",
                "sh",
                "-c",
                script,
            ])
            .status()
            .expect("run ksymwatch");
        assert_eq!(status.code(), Some(want), "sh -c '{script}'");
    }
}

/// A launched shell that execs the helper: the watch follows the exec by default (the kernel keeps a
/// task's events), and `--remove-on-exec` drops it there.
#[test]
fn remove_on_exec_drops_the_watch_at_a_later_exec() {
    let Some(_live) = util::live() else { return };
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
    let stream = std::env::temp_dir().join(format!("ksw-remove-on-exec-{}", std::process::id()));
    let stream_arg = stream.to_str().expect("utf-8 path");
    for (flag, want_user) in [(None, 3), (Some("--remove-on-exec"), 0)] {
        let mut args = vec!["write", "--json", "--no-status", "-o", stream_arg];
        args.extend(flag);
        args.extend([addr.as_str(), "--", "sh", "-c", &script]);
        let mut h = Writer::start_binary(Path::new(BIN), &args);
        h.read_until("ready");
        h.send("go");
        h.read_until_prefix("done tids=");
        let pid = h.pid;
        let status = h.close_and_wait(Duration::from_secs(30));
        assert_eq!(status.code(), Some(0));
        let records = parse_ndjson(&std::fs::read_to_string(&stream).expect("stream file"));
        // Counted by where they ran, not by name: the helper exits as soon as it is done, and a process
        // gone before its first hit was drained keeps unnamed user frames (the MMAP2 item of #12).
        let user = records
            .iter()
            .filter(|v| v["type"] == "hit" && v["pid"] == pid && v["in_kernel"] == false)
            .count();
        assert_eq!(user, want_user, "{flag:?}");
    }
    let _ = std::fs::remove_file(&stream);
}

/// `-p A -p B SYMBOL` where the symbol is at different addresses in A and B (two runs of a PIE): one
/// watch has one address, so the run is refused before anything is armed, naming both pids.
#[test]
fn two_pids_with_the_symbol_at_different_addresses_are_refused() {
    let bin = helper_with("threads", &["-pie", "-fPIE"]);
    let mut a = Writer::start_binary(&bin, &["threads", "1", "0"]);
    let mut b = Writer::start_binary(&bin, &["threads", "1", "0"]);
    a.read_until("ready");
    b.read_until("ready");
    if a.addr == b.addr {
        util::skip("address randomization is off: both runs loaded target_var at one address");
        return;
    }
    let (pa, pb) = (a.pid.to_string(), b.pid.to_string());
    util::rejects(
        &["write", "-p", &pa, "-p", &pb, "target_var"],
        2,
        &[
            &format!("in pid {pa}"),
            &format!("in pid {pb}"),
            "setarch -R",
        ],
    );
    a.finish();
    b.finish();
}
