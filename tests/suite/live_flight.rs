//! `--last N --dump-on ...`, the flight recorder, with real hits: a hit condition prints exactly the N
//! hits before the triggering store and that store; SIGUSR1 and a kernel tracepoint print the last N.
//! The helper's stores are told apart by its tid and the store's ip in `main`; its values are consecutive,
//! so a dump's hits show whether any was dropped or reordered.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::util::{self, parse_hits, HitLine, Tracer, Writer};

fn value(l: &HitLine) -> u64 {
    let v = l.value.as_deref().expect("a value on every hit");
    let v = v.split_whitespace().next().unwrap_or(v);
    u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("value {v}"))
}

// The helper stores 0..=1000; `--last 10 --dump-on 'value == 500'` prints one dump: 490..=499 and then
// 500, nothing else.
live_test!(
    a_hit_condition_prints_the_ten_stores_before_it_and_itself,
    {
        let mut h = Writer::start(&["write", "1001", "0"]);
        let (pid, tid) = (h.pid.to_string(), h.tid);
        let t = Tracer::start(&[
            "write",
            "--no-status",
            "--last",
            "10",
            "--dump-on",
            "value == 500",
            "-p",
            &pid,
            "target_var",
        ]);
        h.go();
        h.finish();
        let (code, out, err) = t.wait(Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("1001 hits"), "every store counted: {err}");
        let headings: Vec<&str> = out.lines().filter(|l| l.starts_with("# dump")).collect();
        assert_eq!(headings.len(), 1, "{out}");
        assert!(
            headings[0].contains("--dump-on 'value == 0x1f4' held; the last 10 hits, then it"),
            "{out}"
        );
        let hits = parse_hits(&out);
        assert!(
            hits.iter()
                .all(|l| l.tid == tid && l.ip.starts_with("main+")),
            "only the helper's stores: {out}"
        );
        let values: Vec<u64> = hits.iter().map(value).collect();
        assert_eq!(values, (490..=500).collect::<Vec<_>>(), "{out}");
    }
);

// SIGUSR1 prints the last 5 hits under a `dump` record (JSON), and the run goes on to its normal end.
live_test!(sigusr1_dumps_the_last_hits_and_the_run_goes_on, {
    let (mut h, mut t) = util::dumping_on_signal("5");
    h.send("go");
    std::thread::sleep(Duration::from_millis(300));
    t.signal(libc::SIGUSR1);
    let mut text = t.read_until(|l| l.contains("\"type\":\"dump\""));
    for _ in 0..5 {
        text.push_str(&t.read_until(|_| true));
    }
    // Still watching: stores made after the dump are counted.
    let (code, rest, err) = stop_a_while_later(h, t);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stopped: watched process exited"), "{err}");
    text.push_str(&rest);
    let records = util::ndjson(&text);
    let dump = records
        .iter()
        .position(|r| r["type"] == "dump")
        .expect("a dump record");
    assert_eq!(records[dump]["trigger"], "signal", "{text}");
    assert_eq!(records[dump]["hits"], 5, "{text}");
    let kept = &records[dump + 1..dump + 6];
    let values: Vec<u64> = kept
        .iter()
        .map(|r| {
            assert_eq!(r["type"], "hit", "{text}");
            assert!(r["time_ns"].as_u64() <= records[dump]["time_ns"].as_u64());
            u64::from_str_radix(r["value"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
        })
        .collect();
    assert!(
        values.windows(2).all(|w| w[1] == w[0] + 1),
        "the last 5 stores, oldest first: {values:?}"
    );
    assert_eq!(
        records.iter().filter(|r| r["type"] == "hit").count(),
        5,
        "nothing printed but the dump: {text}"
    );
    let summary = util::summary_record(&records);
    assert!(summary["hits"].as_u64().unwrap() > 5, "{summary}");
});

/// Lets the spinning helper store 100 ms more, stops it and waits for the tracer's end (the watched
/// process exited): its exit code, the rest of its stdout and its stderr.
fn stop_a_while_later(mut h: Writer, t: Tracer) -> (i32, String, String) {
    std::thread::sleep(Duration::from_millis(100));
    h.send("stop");
    h.read_until("done");
    h.finish();
    t.wait(Duration::from_secs(30))
}

/// Runs the helper's stores under `--last 4 --dump-on tracepoint:GROUP:NAME` (with tracefs unmounted, as on
/// a fresh machine: the tracepoint is found in the kernel's BTF), fires the tracepoint with `fire`, and
/// checks the dumps: each holds hits from before its firing only, consecutive stores of the helper, and
/// one with hits follows the test's firing. `busy`: the tracepoint fires often on this machine (a fork),
/// also before the helper's first store, so a dump may be empty. Returns the tracer's stderr, empty when
/// the test was skipped (visibly): the kernel's BTF has no such tracepoint, or tracefs cannot be hidden.
fn dumps_on_tracepoint(tracepoint: &str, busy: bool, fire: impl FnOnce()) -> String {
    let Some((mut h, mut t)) = util::dumping_on_tracepoint(tracepoint) else {
        return String::new();
    };
    let tid = h.tid;
    h.send("go");
    std::thread::sleep(Duration::from_millis(300));
    fire();
    let mut text = t.read_until(|l| l.starts_with("# dump"));
    let (code, rest, err) = stop_a_while_later(h, t);
    assert_eq!(code, 0, "{err}");
    text.push_str(&rest);
    assert!(
        text.contains("# dump at ")
            && text.contains(&format!(": tracepoint {tracepoint} fired on cpu ")),
        "{text}"
    );
    // Each dump: its heading's time, then hits no later than it, consecutive stores.
    let mut dumps = 0;
    for part in text.split("# dump at ").skip(1) {
        let (time, _) = part.split_once(':').expect("heading time");
        let time: f64 = time.parse().expect("heading time");
        let hits = parse_hits(part.split_once('\n').map_or("", |(_, r)| r));
        assert!((busy || !hits.is_empty()) && hits.len() <= 4, "{text}");
        if !hits.is_empty() {
            dumps += 1;
        }
        let values: Vec<u64> = hits.iter().map(value).collect();
        assert!(
            values.windows(2).all(|w| w[1] == w[0] + 1),
            "consecutive: {values:?}\n{text}"
        );
        for l in &hits {
            assert_eq!(l.tid, tid, "{text}");
            let at: f64 = l.time.parse().expect("hit time");
            assert!(at <= time, "a hit after the firing: {text}");
        }
    }
    assert!(dumps >= 1, "{text}");
    err
}

// `--dump-on tracepoint:printk:console`, fired by a line written to /dev/kmsg: the dump holds the last
// hits before the firing. Another printk on this machine may fire it too; every dump must hold hits
// from before its firing only, and one must follow the test's line.
live_test!(a_tracepoint_dumps_the_hits_before_it_fired, {
    dumps_on_tracepoint("printk:console", false, || {
        let mut kmsg = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/kmsg")
            .expect("open /dev/kmsg");
        writeln!(
            kmsg,
            "ksymwatch live test: --dump-on tracepoint:printk:console"
        )
        .unwrap();
    });
});

// `--dump-on tracepoint:sched:sched_process_fork` without tracefs, fired by the test starting a
// process: the kernel's BTF alone finds the tracepoint, and the note says the group went unchecked.
live_test!(a_tracepoint_found_in_btf_alone_dumps_on_a_fork, {
    let err = dumps_on_tracepoint("sched:sched_process_fork", true, || {
        let status = std::process::Command::new("true").status().expect("true");
        assert!(status.success());
    });
    if err.is_empty() {
        return;
    }
    assert!(
        err.contains(
            "note: --dump-on tracepoint:sched:sched_process_fork: group `sched` not checked: tracefs is \
             not mounted"
        ),
        "{err}"
    );
});

/// A tracefs event with no raw tracepoint behind it (`syscalls:*`, made by ftrace) is refused before
/// anything is armed, naming why (exit 2), with tracefs mounted or not: the kernel's BTF has no raw
/// tracepoint of its name.
#[test]
fn a_syscall_event_is_not_a_raw_tracepoint() {
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        util::skip("no kernel BTF at /sys/kernel/btf/vmlinux");
        return;
    }
    let args = [
        "write",
        "--last",
        "5",
        "--dump-on",
        "tracepoint:syscalls:sys_enter_getppid",
        "-p",
        "1",
        "0x1000",
    ];
    let needles = ["no raw tracepoint `sys_enter_getppid`", "raw_syscalls"];
    util::rejects(&args, 2, &needles);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        util::skip("unmounting tracefs in a namespace of our own needs root");
        return;
    }
    let Some(no_tracefs) = util::without_tracefs() else {
        return;
    };
    let (code, out, err) = util::run_with(&no_tracefs, &args, Duration::from_secs(30));
    assert_eq!(code, 2, "{err}");
    assert!(needles.iter().all(|n| err.contains(n)), "{err}");
    assert!(!out.contains("# armed"), "{out}");
}
