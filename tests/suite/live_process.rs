//! Process-wide watches: `-p PID` (every thread, including ones created after arming) and launch mode
//! (`-- CMD`, armed at the command's exec), with the thread counts, a thread whose debug registers
//! are full (from the command line, and the arming transaction's own rollback), several `-p` processes,
//! and the exit status of a launched command.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use ksymwatch::model::scope::Scope;
use ksymwatch::model::watch::{Access, Watch};
use ksymwatch::perf::arm::{arm_in, Fit, Planned};
use ksymwatch::perf::event::EventConfig;
use serde_json::Value;

use crate::util::{self, helper, helper_with, parse_hits, Tracer, Writer, BIN};

/// The helper's own stores: the kernel's writes (exec zeroing .bss) have kernel ips.
fn user_stores(records: &[Value], pid: u32) -> Vec<&Value> {
    util::hits_of_pid(records, pid)
        .into_iter()
        .filter(|v| v["ip"]["sym"] == "ksw_thread_store")
        .collect()
}

/// Hits of any process but `pid`: a process watch must never report one (another test's helper may well
/// store to the same virtual address in its own address space).
fn foreign_hits(records: &[Value], pid: u32) -> Vec<&Value> {
    records
        .iter()
        .filter(|v| v["type"] == "hit" && v["pid"] != pid)
        .collect()
}

/// Whether the ELF file at `path` is position-independent (`e_type` ET_DYN), i.e. loaded at a random base.
fn is_pie(path: &Path) -> bool {
    let bytes = std::fs::read(path).expect("read the helper binary");
    assert_eq!(
        &bytes[..4],
        b"\x7fELF",
        "{} is not an ELF file",
        path.display()
    );
    u16::from_le_bytes([bytes[16], bytes[17]]) == 3
}

// 1,000 threads store once each after a barrier, then 20 threads created after arming store once each:
// exactly 1,020 user-space hits from as many distinct tids, all of the helper's pid.
live_test!(attach_sees_every_thread_including_later_ones, {
    let mut h = Writer::threads(&["threads", "1000", "20"]);
    let pid = h.pid;
    let t = Tracer::write_json(&["-p", &pid.to_string(), "target_var"]);
    let header = util::ndjson(&t.header);
    let head = util::record(&header, "header");
    assert_eq!(head["pids"], serde_json::json!([pid]));
    assert_eq!(head["threads"], 1001, "{head}");
    h.send("go");
    let lines = h.read_until_prefix("done tids=");
    // `done tids=K`: the distinct tids that stored (fewer than asked only if the kernel reused a tid).
    let distinct = util::helper_number::<usize>(&lines, "done tids=");
    // EOF: the helper exits, and the watch ends by itself.
    h.finish();
    let (records, err) = t.json_records(Duration::from_secs(30));
    assert!(err.contains("stopped: watched process exited"), "{err}");
    let stores = user_stores(&records, pid);
    let tids: BTreeSet<u64> = stores.iter().filter_map(|v| v["tid"].as_u64()).collect();
    assert_eq!(stores.len(), 1020, "user-space hits");
    assert_eq!(tids.len(), distinct, "distinct tids that stored");
    assert_eq!(distinct, 1020, "the helper's own count of distinct tids");
    let foreign = foreign_hits(&records, pid);
    assert!(foreign.is_empty(), "hits of other processes: {foreign:?}");
    assert!(records.iter().all(|v| v["type"] != "lost"));
    let summary = records.last().expect("summary");
    assert_eq!(summary["stop"], "exited");
    assert_eq!(summary["lost"], 0, "{summary}");
});

// Launch mode on a PIE build: the symbol is resolved once the load bias is known (at the exec stop), the
// command's stdin/stdout stay its own, the stream goes to `-o`, and the exit status is the command's.
live_test!(launch_mode_covers_every_thread_of_a_pie, {
    let bin = helper_with("threads", &["-pie", "-fPIE"]);
    assert!(is_pie(&bin), "{} must be a PIE (ET_DYN)", bin.display());
    let dir = util::temp_dir("ksw-launch");
    let stream = dir.join("stream.ndjson");
    let mut h =
        Writer::launched(&stream, &["target_var"], &bin, &["threads", "1000", "20"]).ready();
    let (pid, banner_addr) = (h.pid, h.addr);
    h.send("go");
    let lines = h.read_until_prefix("done tids=");
    let distinct = util::helper_number::<usize>(&lines, "done tids=");
    let status = h.close_and_wait(Duration::from_secs(30));
    assert_eq!(
        status.code(),
        Some(0),
        "ksymwatch exits with the command's status"
    );
    let records = util::ndjson(&std::fs::read_to_string(&stream).expect("stream file"));
    let head = util::record(&records, "header");
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
    assert_eq!(distinct, 1020, "the helper's own count of distinct tids");
    let foreign = foreign_hits(&records, pid);
    assert!(foreign.is_empty(), "hits of other processes: {foreign:?}");
    assert!(records.iter().all(|v| v["type"] != "lost"));
    assert_eq!(records.last().expect("summary")["stop"], "exited");
    let _ = std::fs::remove_dir_all(&dir);
});

/// `write --json --no-status target_var -- BIN ARGS...` run to its end within `limit`: its exit code,
/// stdout and stderr, and the user-space hits of the stream (which shares stdout with the command's own
/// lines).
fn launched_user_hits(
    bin: &Path,
    args: &[&str],
    limit: Duration,
) -> (i32, String, String, Vec<Value>) {
    let bin = bin.to_str().expect("utf-8 path");
    let mut all = vec!["write", "--json", "--no-status", "target_var", "--", bin];
    all.extend_from_slice(args);
    let (code, out, err) = util::run_within(&all, limit);
    let user = util::stream_records(&out)
        .into_iter()
        .filter(|v| v["type"] == "hit" && v["in_kernel"] == false)
        .collect();
    (code, out, err, user)
}

// A launched command that stores and exits at once, before the tracer has named a single hit: its stores
// are still named in its own code, since its executable was mapped before the watch existed and no
// record reports it.
live_test!(
    a_launched_command_that_exits_at_once_has_its_stores_named,
    {
        let bin = util::helper("writer");
        let (code, out, err, user) =
            launched_user_hits(&bin, &["now", "5", "0"], Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
        assert_eq!(user.len(), 5, "{out}");
        for h in user {
            assert_eq!(h["ip"]["sym"], "main", "{h}");
            assert_eq!(h["ip"]["binary"], "writer", "{h}");
        }
    }
);

// A thread that holds 4 task-bound breakpoints of its own cannot be armed: the run fails with exit 3,
// names the CPU whose registers that thread's watchpoints fill (the default, one breakpoint per CPU) or
// the thread (`--per-thread`, one breakpoint per thread), prints no hit, and leaves every register free
// again.
live_test!(a_thread_with_full_debug_registers_fails_the_whole_attach, {
    let Some((mut h, tid)) = start_hog() else {
        return;
    };
    let pid = h.pid.to_string();
    for (args, who) in [
        (&["write", "-p", &pid, "target_var"][..], "cpu ".to_string()),
        (
            &["write", "-p", &pid, "target_var", "--per-thread"][..],
            format!("tid {tid} ("),
        ),
    ] {
        let (code, out, err) = util::run_within(args, Duration::from_secs(30));
        assert_eq!(code, 3, "{args:?}: {err}");
        assert!(err.contains(&who), "{args:?}: {err}");
        assert!(err.contains("nothing was armed"), "{err}");
        // Refused before the header: not one line, let alone a hit.
        assert!(out.is_empty(), "stdout of a refused attach: {out}");
    }
    h.send("go");
    h.read_until_prefix("done tids=");
    h.finish();
    // Every register of every CPU is free again (the hog has exited too).
    let (code, out, err) = util::run_within(&["check"], Duration::from_secs(30));
    assert_eq!(code, util::check_code_when_all_free(), "{out}{err}");
    assert!(
        out.contains("debug registers") && !out.contains("cannot arm"),
        "{out}"
    );
});

// `-- CMD`: the command's exit status, or 128+N when signal N killed it, as a shell reports it.
live_test!(launch_mode_exits_with_the_commands_status, {
    for (script, want) in [
        ("exit 7", 7),
        ("exit 0", 0),
        ("kill -TERM $$", 128 + libc::SIGTERM),
        ("kill -KILL $$", 128 + libc::SIGKILL),
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
});

// A launched shell that execs the helper: with one breakpoint per CPU (the default) the exec ends the
// watch of that process, reported; with `--per-thread` the watch follows the exec (the kernel keeps a
// task's events), and `--remove-on-exec` drops it there.
live_test!(remove_on_exec_drops_the_watch_at_a_later_exec, {
    let Some((addr, script)) = util::execed_threads() else {
        return;
    };
    let stream = std::env::temp_dir().join(format!("ksw-remove-on-exec-{}", std::process::id()));
    for (flag, want_user) in [
        (None, 0),
        (Some("--per-thread"), 3),
        (Some("--remove-on-exec"), 0),
    ] {
        let (pid, records) = util::watch_execed_threads(&addr, &script, flag.as_slice(), &stream);
        // Counted by where they ran, not by name: the helper exits as soon as it is done, and a process
        // gone before its first hit was drained keeps unnamed user frames (the MMAP2 item of #12).
        let user = records
            .iter()
            .filter(|v| v["type"] == "hit" && v["pid"] == pid && v["in_kernel"] == false)
            .count();
        assert_eq!(user, want_user, "{flag:?}");
        let marks = records
            .iter()
            .filter(|v| v["type"] == "process_exec")
            .count();
        assert_eq!(
            marks,
            usize::from(flag.is_none()),
            "{flag:?}: the exec is reported"
        );
    }
    let _ = std::fs::remove_file(&stream);
});

/// Starts the `threads hog` helper: 8 threads, one of which holds all 4 of its own breakpoints. Returns
/// the helper and the hog's tid, or `None` (skipped visibly) when the hog could not take all 4.
fn start_hog() -> Option<(Writer, u32)> {
    let mut h = Writer::start_binary(&helper("threads"), &["hog", "8"]);
    let (tid, held) = hog_line(&h.read_until("ready"));
    if held < 4 {
        util::skip(format!("the hog thread got only {held} of 4 breakpoints"));
        return None;
    }
    Some((h, tid))
}

/// `hog tid=T held=K` from the hog helper's lines.
fn hog_line(lines: &[String]) -> (u32, u32) {
    lines
        .iter()
        .find_map(|l| {
            let rest = l.strip_prefix("hog tid=")?;
            let (t, k) = rest.split_once(" held=")?;
            Some((t.parse().ok()?, k.parse().ok()?))
        })
        .unwrap_or_else(|| panic!("no `hog tid=T held=K` in {lines:?}"))
}

/// This test process's perf events: open descriptors, and mapped rings (a mapping keeps its event alive
/// after the descriptor is closed, so both must be gone).
fn own_perf_events() -> (usize, usize) {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let mapped = maps.lines().filter(|l| l.contains("[perf_event]")).count();
    (util::fd_count(std::process::id()).1, mapped)
}

// The arming transaction itself, on the process with the full thread: `open_threads` arms the threads in
// tid order, so every thread before the hog had its events open (one per CPU, the first thread's with the
// CPU's mapped ring, the others redirected into it) when the hog's refusal came. The refusal names the hog,
// and every one of those events is closed, and every ring unmapped, again.
live_test!(
    a_refused_thread_closes_every_event_already_opened_for_the_others,
    {
        let Some((mut h, hog)) = start_hog() else {
            return;
        };
        let tids: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", h.pid))
            .expect("the helper's task list")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        assert_eq!(tids.len(), 9, "main thread and 8 workers: {tids:?}");
        let armed_first = tids.iter().filter(|&&t| t < hog).count();
        if armed_first == 0 {
            util::skip(
                "the hog thread has the lowest tid (tids wrapped): nothing is armed before it",
            );
            return;
        }
        let cpus: BTreeSet<u32> = util::online_cpus().into_iter().collect();
        let watch = Watch {
            label: "target_var".into(),
            addr: h.addr,
            len: 8,
            access: Access::Write,
            module: None,
            per_cpu: None,
        };
        let cfg = EventConfig {
            track_tasks: true,
            count_lost: true,
            ..EventConfig::bare(8)
        };
        let before = own_perf_events();
        let err = arm_in(
            &mut vec![watch],
            &cpus,
            &Scope::Processes(vec![h.pid]),
            Planned::NONE,
            &cfg,
            Fit::All,
        )
        .err()
        .expect("a thread with 4 breakpoints of its own cannot be armed");
        assert_eq!(err.code, ksymwatch::error::ExitCode::Arm, "{err}");
        let text = err.to_string();
        assert!(text.contains(&format!("tid {hog} (")), "{text}");
        assert!(text.contains("nothing was armed"), "{text}");
        assert_eq!(
        own_perf_events(),
        before,
        "(descriptors, mapped rings) after the refusal: the events of the {armed_first} threads armed \
         before tid {hog} on {} CPUs must all be gone",
        cpus.len()
    );
        h.send("go");
        h.read_until_prefix("done tids=");
    }
);

// Two processes of one non-PIE program (the global at the same address in both): `-p A -p B` arms every
// thread of both, the header names both, each one's stores are reported under its own pid, the run goes on
// after the first exits (the second's stores are still caught) and ends by itself after the second.
live_test!(two_pids_are_watched_until_both_have_exited, {
    let bin = helper_with("threads", &["-no-pie"]);
    let mut a = Writer::start_binary(&bin, &["threads", "3", "0"]);
    let mut b = Writer::start_binary(&bin, &["threads", "3", "0"]);
    a.read_until("ready");
    b.read_until("ready");
    assert_eq!(a.addr, b.addr, "a non-PIE's global has one address");
    let (pid_a, pid_b) = (a.pid, b.pid);
    let (pa, pb) = (pid_a.to_string(), pid_b.to_string());
    // The text header: both processes by pid and name (the kernel's comm: the binary's name, at most 15
    // bytes), and every thread armed (main + 3 workers each).
    let comm: String = bin
        .file_name()
        .and_then(|n| n.to_str())
        .expect("helper file name")
        .chars()
        .take(15)
        .collect();
    let t = Tracer::start(&["write", "--no-status", "-p", &pa, "-p", &pb, "target_var"]);
    assert!(
        t.header
            .lines()
            .any(|l| l == format!("# process: {pa} ({comm}), {pb} ({comm}), 8 threads")),
        "{}",
        t.header
    );
    t.signal(libc::SIGINT);
    let (code, out, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(parse_hits(&out).is_empty(), "no store yet: {out}");

    let mut t = Tracer::write_json(&["-p", &pa, "-p", &pb, "target_var"]);
    a.send("go");
    a.read_until_prefix("done tids=");
    a.finish();
    // The first process is gone; the watch of the second must go on (nothing to await: a wrong stop would
    // show within this window, and the second's stores below would then be missing as well).
    let deadline = std::time::Instant::now() + Duration::from_millis(300);
    while std::time::Instant::now() < deadline {
        let status = t.child.try_wait().expect("poll ksymwatch");
        assert!(
            status.is_none(),
            "ksymwatch ended with one watched process left: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    b.send("go");
    b.read_until_prefix("done tids=");
    b.finish();
    // The header and armed records were read by start_json; the rest comes now.
    let (records, _) = t.json_stream(Duration::from_secs(30));
    let head = util::record(&records, "header");
    assert_eq!(head["pids"], serde_json::json!([pid_a, pid_b]));
    assert_eq!(head["threads"], 8, "{head}");
    let mut by_pid: BTreeMap<u64, usize> = BTreeMap::new();
    for v in records.iter().filter(|v| v["type"] == "hit") {
        assert_eq!(v["ip"]["sym"], "ksw_thread_store", "{v}");
        *by_pid
            .entry(v["pid"].as_u64().expect("hit pid"))
            .or_default() += 1;
    }
    assert_eq!(
        by_pid,
        BTreeMap::from([(u64::from(pid_a), 3), (u64::from(pid_b), 3)]),
        "user stores by pid"
    );
    assert_eq!(records.last().expect("summary")["stop"], "exited");
});

// Two runs of one PIE load it at two addresses: one watch cannot have both. `-p A -p B SYMBOL` used to arm
// A's address in B too, silently watching some other byte there and missing every store of B; it is
// refused (exit 2) naming both addresses, before anything is armed.
live_test!(
    two_pids_with_the_symbol_at_different_addresses_are_refused,
    {
        let bin = helper_with("threads", &["-pie", "-fPIE"]);
        let mut a = Writer::start_binary(&bin, &["threads", "1", "0"]);
        let mut b = Writer::start_binary(&bin, &["threads", "1", "0"]);
        a.read_until("ready");
        b.read_until("ready");
        if a.addr == b.addr {
            util::skip(format!(
                "both PIE runs loaded at the same address 0x{:x} (address randomization off?)",
                a.addr
            ));
            return;
        }
        let (pa, pb) = (a.pid.to_string(), b.pid.to_string());
        util::rejects(
            &["write", "-p", &pa, "-p", &pb, "target_var"],
            2,
            &[
                "`target_var`",
                &format!("0x{:x}/8 in pid {pa}", a.addr),
                &format!("0x{:x}/8 in pid {pb}", b.addr),
            ],
        );
        // An address means the same number in both: allowed (it is the user's to choose).
        let addr = format!("0x{:x}", a.addr);
        let t = Tracer::write_json(&["-p", &pa, "-p", &pb, &addr]);
        t.signal(libc::SIGINT);
        let (code, _, err) = t.wait(Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
    }
);

// A user without root or CAP_PERFMON (perf_event_paranoid 2 here) watches their own process: user-space
// writers only (`exclude_kernel`), said on stderr, every store of the helper seen; the kernel's symbols,
// hidden from that user, are not needed. Another user's process is exit 4 naming perf_event_paranoid.
live_test!(
    an_unprivileged_user_watches_their_own_process_from_user_space,
    {
        if !Path::new("/usr/bin/setpriv").exists() {
            return util::skip("setpriv is not installed");
        }
        let paranoid =
            std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default();
        if paranoid.trim().parse::<i32>().map_or(true, |p| p > 2) {
            return util::skip(format!(
                "perf_event_paranoid is {} here: unprivileged users may not watch at all",
                paranoid.trim()
            ));
        }
        let nobody = util::AS_NOBODY;
        const STORES: usize = 50;
        let writer = helper("writer");
        let mut args: Vec<&str> = nobody.to_vec();
        let stores = STORES.to_string();
        args.extend([writer.to_str().expect("utf-8 path"), "write", &stores, "0"]);
        let mut h = Writer::start_binary(Path::new("/usr/bin/setpriv"), &args);
        let target = format!("0x{:x}/8", h.addr);
        let pid = h.pid.to_string();
        let mut tracer = Command::new("setpriv")
            .args(nobody)
            .args([BIN, "write", "--json", "--no-status", "-p", &pid, &target])
            .args(["--count", &stores])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run ksymwatch as nobody");
        let mut out = BufReader::new(tracer.stdout.take().expect("stdout"));
        let mut text = String::new();
        loop {
            let mut line = String::new();
            if out.read_line(&mut line).expect("read") == 0 {
                break;
            }
            text += &line;
            if line.contains("\"type\":\"armed\"") {
                break;
            }
        }
        assert!(text.contains("\"type\":\"armed\""), "never armed: {text}");
        h.go();
        let status = util::wait_within(&mut tracer, Duration::from_secs(30));
        let mut rest = String::new();
        out.read_to_string(&mut rest).expect("read");
        text += &rest;
        let mut err = String::new();
        tracer
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .expect("read");
        h.finish();
        assert_eq!(status.code(), Some(0), "{err}");
        assert!(err.contains("user-space writers only"), "{err}");
        let records = util::ndjson(&text);
        let hits: Vec<_> = records.iter().filter(|v| v["type"] == "hit").collect();
        assert_eq!(hits.len(), STORES, "{err}");
        assert!(hits.iter().all(|v| v["in_kernel"] == false));
        // Someone else's process: refused by the kernel, exit 4, with the reason.
        let mut theirs = Writer::start(&["write", "1", "0"]);
        let target = format!("0x{:x}/8", theirs.addr);
        let Some((code, _, err)) =
            util::run_as_nobody(&["write", "-p", &theirs.pid.to_string(), &target])
        else {
            return;
        };
        theirs.send("go");
        theirs.finish();
        assert_eq!(code, 4, "{err}");
        assert!(err.contains("not permitted"), "{err}");
    }
);

/// `--per-thread`, 64 threads storing `stores` times each, watched with ring pages `pages`: the records
/// of the hits printed, and the summary (whose hits are those and, from the kernel's totals, the ones not
/// printed).
fn per_thread_run(pages: &str, stores: u64) -> (Vec<Value>, Value) {
    let count = stores.to_string();
    let mut h = Writer::threads(&["tagged", "64", &count, "0"]);
    let pid = h.pid;
    let t = Tracer::write_json(&[
        "--per-thread",
        "--buffer-pages",
        pages,
        "-p",
        &pid.to_string(),
        "target_var",
    ]);
    h.send("go");
    let lines = h.read_until("done");
    let made = format!("stores={} adds=0", 64 * stores);
    assert!(lines.contains(&made), "{lines:?}");
    h.finish();
    let (code, out, err) = t.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let records = util::ndjson(&out);
    let summary = util::summary_record(&records).clone();
    let hits: Vec<Value> = records.into_iter().filter(|v| v["type"] == "hit").collect();
    assert!(
        hits.iter()
            .all(|v| v["pid"] == pid && v["ip"]["sym"] == "ksw_thread_store"),
        "only the helper's stores"
    );
    let unprinted = summary["unprinted"].as_u64().expect("unprinted");
    assert_eq!(
        summary["hits"].as_u64(),
        Some(hits.len() as u64 + unprinted),
        "{summary}"
    );
    (hits, summary)
}

// On the per-thread path where BPF loads every thread's event runs the hit program, whose totals count
// every store in the kernel: a one-page ring drops records, yet none is lost, the summary says the
// 64,000 stores made, and the hits printed and those not printed are exactly them. With perf samples
// (without BPF, or on a kernel whose program cannot tell which event fired) a full ring also drops the
// threads' exit records: `lost` counts only the hits that were dropped (the breakpoints' own counters
// say how many), so hits + lost is exactly the 64,000. Either way 64 x 100 stores with a ring large
// enough to lose none are all printed, none lost.
live_test!(per_thread_lost_counts_only_lost_hits, {
    let (hits, s) = per_thread_run("1", 1000);
    let lost = s["lost"].as_u64().expect("lost");
    assert_eq!(util::counts(&s, "lost_by_cpu"), lost, "{s}");
    if s["from_totals"] == true {
        let unprinted = s["unprinted"].as_u64().expect("unprinted");
        assert!(unprinted > 0, "a one-page ring drops records here: {s}");
        assert_eq!(lost, 0, "{s}");
        assert_eq!(s["hits"], 64_000, "{s}");
        assert_eq!(hits.len() as u64 + unprinted, 64_000, "{s}");
    } else {
        assert!(lost > 0, "a one-page ring loses records here: {s}");
        assert_eq!(hits.len() as u64 + lost, 64_000, "{s}");
    }
    let (hits, s) = per_thread_run("1024", 100);
    assert_eq!(s["lost"], 0, "{s}");
    assert_eq!(hits.len(), 6_400, "{s}");
});

// A launched non-PIE program, 100 times over: every frame of its own (the store, and `main` below it)
// is named, on every run. The start-up scan of /proc can read the command between its fork and its
// exec; the read at its exec stop must replace what that saw at once.
live_test!(a_launched_non_pie_programs_own_frames_are_always_named, {
    let bin = helper_with("threads", &["-no-pie"]);
    let name = bin
        .file_name()
        .and_then(|n| n.to_str())
        .expect("helper name")
        .to_string();
    let mut unnamed = Vec::new();
    for run in 0..100 {
        let (code, out, err, stores) =
            launched_user_hits(&bin, &["exec-store", "5"], Duration::from_secs(60));
        assert_eq!(code, 0, "run {run}: {err}");
        assert_eq!(stores.len(), 1, "run {run}: one user store: {out}");
        let hit = &stores[0];
        let own: Vec<&Value> = std::iter::once(&hit["ip"])
            .chain(hit["chain"].as_array().expect("chain"))
            .filter(|f| f["addr"].as_str().is_some_and(|a| a.len() <= 8))
            .collect();
        assert!(own.len() >= 2, "run {run}: the store and main: {hit}");
        if own
            .iter()
            .any(|f| f["binary"] != name.as_str() || f["sym"].is_null())
        {
            unnamed.push((run, hit.clone()));
        }
    }
    assert!(unnamed.is_empty(), "frames of {name} unnamed: {unnamed:?}");
});

// A launched command's words are bytes, not text: a program and a file name that are not UTF-8 (a
// Latin-1 `é`) reach exec unchanged. They were refused ("invalid UTF-8 was detected").
live_test!(a_launched_commands_words_need_not_be_utf8, {
    use std::os::unix::ffi::OsStrExt;
    let dir = util::temp_dir("ksw-launch-bytes");
    let program = dir.join(std::ffi::OsStr::from_bytes(b"touch-\xe9"));
    let made = dir.join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    let _ = std::fs::remove_file(&program);
    let _ = std::fs::remove_file(&made);
    let touch = ["/usr/bin/touch", "/bin/touch"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("touch");
    std::os::unix::fs::symlink(touch, &program).expect("link touch under a Latin-1 name");
    let mut child = Command::new(BIN)
        .args(["write", "--no-status", "0x1000", "--"])
        .arg(&program)
        .arg(&made)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ksymwatch");
    let status = util::wait_within(&mut child, Duration::from_secs(30));
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        made.exists(),
        "the command ran with its argument as given: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
});
