//! Live CPU-hotplug tests: a CPU that comes online after arming is covered, one that goes away gives up its
//! dead event, churn loses nothing. cpu1 is always brought back online by a guard, and the machine-wide live
//! lock keeps every other live test (which needs both CPUs and free debug registers) out meanwhile.

use crate::util;

use std::time::Duration;
use util::{parse_hits, set_online, HitLine, OnlineGuard, Tracer, Writer};

fn setup() -> Option<(util::LiveLock, OnlineGuard)> {
    setup_with(util::live()?)
}

/// [`setup`] for a test whose subject is a kernel address (it skips where the kernel refuses one).
fn setup_kernel() -> Option<(util::LiveLock, OnlineGuard)> {
    setup_with(util::live_kernel()?)
}

fn setup_with(lock: util::LiveLock) -> Option<(util::LiveLock, OnlineGuard)> {
    if !util::can_hotplug_cpu1() {
        return None;
    }
    let guard = OnlineGuard(1);
    set_online(1, true);
    Some((lock, guard))
}

/// A live test that takes cpu1 offline: run with the live lock and a guard that brings cpu1 back online
/// ([`setup`]; `kernel:` [`setup_kernel`]), skipped where cpu1 cannot be hot-plugged.
macro_rules! hotplug_test {
    ($name:ident, $body:block) => {
        hotplug_test!(@with setup, $name, $body);
    };
    (kernel: $name:ident, $body:block) => {
        hotplug_test!(@with setup_kernel, $name, $body);
    };
    (@with $setup:ident, $name:ident, $body:block) => {
        #[test]
        #[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
        fn $name() {
            let Some((_lock, _guard)) = $setup() else {
                return;
            };
            $body
        }
    };
}

hotplug_test!(cpu_that_comes_online_after_arming_is_covered, {
    const N: usize = 500;
    set_online(1, false);
    let w = Writer::start(&["write", &N.to_string(), "1"]);
    let mut t = Tracer::start(&["write", &format!("0x{:x}", w.addr)]);
    assert!(
        t.header.contains("# armed 1 breakpoint on cpus 0 "),
        "{}",
        t.header
    );
    set_online(1, true);
    let marks = t.read_until(|l| l.starts_with("# cpu 1 online"));
    assert!(marks.contains("# cpu 1 online: armed at"), "{marks}");
    // Read as it comes: N hit lines are about a pipe's 64 KiB, and a pipe left full when the stop signal
    // comes is an output not read (the run gives way and prints no more), which is not this test's subject.
    let reader = t.keep_reading();
    let tid = w.go_and_finish();
    let (code, _, err) = t.interrupt(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let stream = marks + &reader.join().expect("the stdout reader");
    let (mine, others): (Vec<_>, Vec<_>) =
        parse_hits(&stream).into_iter().partition(|h| h.tid == tid);
    // Should it fail: the other tids the stream held, and its marks, say where the hits went.
    let marks: Vec<&str> = stream.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(
        mine.len(),
        N,
        "exactly N hits from the late CPU; {err}\nother tids: {:?}\nmarks: {marks:#?}",
        others
            .iter()
            .map(|h| h.tid)
            .collect::<std::collections::BTreeSet<_>>()
    );
    assert!(mine.iter().all(|h| h.cpu == 1));
});

/// The writer stores 100 times on cpu1, then the tracer is interrupted (it must exit 0 within `limit`) and
/// the rest of its stream added to `stream`. The writer's hits in the whole stream, and the tracer's stderr.
fn burst_on_cpu1_and_stop(
    w: &mut Writer,
    t: Tracer,
    stream: &mut String,
    limit: Duration,
) -> (Vec<HitLine>, String) {
    w.send("burst 100 1");
    w.read_until("done");
    let (code, out, err) = t.interrupt(limit);
    assert_eq!(code, 0, "{err}");
    stream.push_str(&out);
    let tid = w.tid;
    let mine = parse_hits(stream)
        .into_iter()
        .filter(|h| h.tid == tid)
        .collect();
    (mine, err)
}

hotplug_test!(churn_keeps_the_tool_up_loses_nothing_and_leaks_no_fds, {
    const CYCLES: usize = 50;
    let mut w = Writer::start(&["spin", "0"]);
    let mut t = Tracer::start(&["write", &format!("0x{:x}", w.addr)]);
    w.send("go");
    let mut stream = String::new();
    let mut fds_before = (0, 0);
    for i in 0..CYCLES {
        if i == 1 {
            // Measured once a full cycle has run, so start-up's transient descriptors are gone.
            fds_before = util::fd_count(t.child.id());
        }
        set_online(1, false);
        stream += &t.read_until(|l| l.starts_with("# cpu 1 offline"));
        set_online(1, true);
        stream += &t.read_until(|l| l.starts_with("# cpu 1 online"));
        assert!(
            stream.ends_with('\n') && stream.lines().last().unwrap().contains("armed at"),
            "cycle {i}: {}",
            stream.lines().last().unwrap()
        );
    }
    let fds_after = util::fd_count(t.child.id());
    w.send("stop");
    let stores: usize = w.read_until("done")[0]
        .trim_start_matches("stores=")
        .parse()
        .unwrap();
    // After the churn cpu1 is still covered by the same tracer.
    let (mine, err) = burst_on_cpu1_and_stop(&mut w, t, &mut stream, Duration::from_secs(60));
    let on_cpu0 = mine.iter().filter(|h| h.cpu == 0).count();
    let on_cpu1 = mine.iter().filter(|h| h.cpu == 1).count();
    // On a quiet machine every store is a hit. When other jobs starve the tracer, the kernel drops
    // records of the flooded ring: then they are counted as lost, never missing silently.
    let lost: usize = err
        .split(" hits ")
        .nth(1)
        .and_then(|rest| rest.split("), ").nth(1))
        .and_then(|l| l.split(" lost").next())
        .and_then(|n| n.parse::<usize>().ok())
        .expect("the summary's lost count")
        // Hits the stream could not print are counted in the kernel's totals, no longer lost: for the
        // stream they are missing all the same.
        + err
            .split(", ")
            .find_map(|p| p.strip_suffix(" not printed (ring full)"))
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0);
    assert!(
        on_cpu0 <= stores && on_cpu0 + lost >= stores,
        "every store on cpu0 during {CYCLES} hotplug cycles is reported or counted lost: {on_cpu0} hits, \
         {lost} lost, {stores} stores; {err}"
    );
    if lost > 0 {
        eprintln!("NOTE: churn: {lost} records lost on a busy machine (counted, not missing)");
    }
    assert_eq!(on_cpu1, 100, "cpu1 is covered after the churn");
    assert_eq!(stream.matches("# cpu 1 offline").count(), CYCLES);
    assert_eq!(stream.matches("# cpu 1 online: armed").count(), CYCLES);
    // Perf events exactly one breakpoint per online CPU, plus its task-record event where the hit program
    // runs (BPF: the hits go through a ring buffer, a BPF map); other descriptors may be mid-use (a sysfs
    // read), never more.
    let online = util::online_cpus().len();
    assert!(
        fds_after.1 == online || fds_after.1 == 2 * online,
        "descriptors of dead events are closed: {fds_after:?}"
    );
    assert!(
        fds_after.0 <= fds_before.0 + 1,
        "descriptor count grew: {fds_before:?} -> {fds_after:?}"
    );
    assert_eq!(fds_before.1, fds_after.1);
    // Each time cpu1 came back it ran unwatched until its fresh event was armed: said, not hidden.
    assert!(err.contains(", unwatched cpu1 "), "{err}");
});

// A process watch across a CPU's offline and online: re-armed when it returns (one breakpoint per CPU, as
// system-wide), the gap between its coming online and the re-arm reported in the summary rather than
// behind "0 lost", and every store made on it after the re-arm seen.
hotplug_test!(
    a_process_watch_follows_a_cpu_that_comes_back_and_reports_the_gap,
    {
        let mut w = Writer::start(&["spin", "0"]);
        let mut t = Tracer::start(&["write", "-p", &w.pid.to_string(), "target_var"]);
        w.send("go");
        set_online(1, false);
        let mut stream = t.read_until(|l| l.starts_with("# cpu 1 offline"));
        set_online(1, true);
        stream += &t.read_until(|l| l.starts_with("# cpu 1 online"));
        assert!(stream.contains("# cpu 1 online: armed at"), "{stream}");
        w.send("stop");
        w.read_until("done");
        let (mine, err) = burst_on_cpu1_and_stop(&mut w, t, &mut stream, Duration::from_secs(30));
        let on_cpu1 = mine.iter().filter(|h| h.cpu == 1).count();
        assert!(
            on_cpu1 >= 100,
            "the burst on cpu1 after the re-arm: {on_cpu1}"
        );
        assert!(err.contains(", unwatched cpu1 "), "{err}");
    }
);

/// Takes every debug register of cpu1 with a helper, then takes cpu1 offline: the helper's dead events keep
/// their slots, so when cpu1 returns ksymwatch cannot arm it.
fn hold_cpu1_then_offline() -> util::Holder {
    let holder = util::Holder::start(1, 4);
    assert_eq!(holder.held, 4);
    set_online(1, false);
    holder
}

/// `--strict-hotplug` run started by `start` with `args` while cpu1 comes back with its registers held
/// ([`hold_cpu1_then_offline`]): the run must end with exit 3; its stdout and stderr.
fn refused_by_a_returning_cpu1(start: fn(&[&str]) -> Tracer, args: &[&str]) -> (String, String) {
    let holder = hold_cpu1_then_offline();
    let t = start(args);
    set_online(1, true);
    let (code, out, err) = t.wait(Duration::from_secs(30));
    drop(holder);
    assert_eq!(code, 3, "{err}");
    (out, err)
}

hotplug_test!(unarmable_cpu_is_reported_and_retried, {
    let holder = hold_cpu1_then_offline();
    let mut t = Tracer::start(&["write", "0x10000/8"]);
    set_online(1, true);
    let marks = t.read_until(|l| l.starts_with("# cpu 1 online"));
    assert!(
        marks.contains("# cpu 1 online: NOT armed")
            && marks.contains("cpu 1 has 0 free debug registers, 1 needed"),
        "{marks}"
    );
    // Free the registers: the next reconcile arms cpu1.
    drop(holder);
    let marks = t.read_until(|l| l.starts_with("# cpu 1 online"));
    assert!(marks.contains("# cpu 1 online: armed at"), "{marks}");
    t.signal(libc::SIGINT);
    let (code, _out, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("cpu 1 came online but could not be armed"),
        "also on stderr: {err}"
    );
    // The time cpu 1 ran unwatched (registers held, then until the reconcile armed it) is in the summary,
    // never hidden behind "0 lost".
    assert!(err.contains(", unwatched cpu1 "), "{err}");
    assert!(
        err.contains("ran unwatched until its breakpoint was armed"),
        "{err}"
    );
});

hotplug_test!(strict_hotplug_makes_an_unarmable_cpu_fatal, {
    let (out, err) =
        refused_by_a_returning_cpu1(Tracer::start, &["write", "0x10000/8", "--strict-hotplug"]);
    // The stream marks the CPU as every unarmable CPU is marked, and the session ends as a signal ends it:
    // summary, then the one error line that explains the exit code.
    assert!(
        out.contains("# cpu 1 online: NOT armed at")
            && out.contains("cpu 1 has 0 free debug registers, 1 needed"),
        "{out}"
    );
    let lines: Vec<&str> = err.lines().collect();
    let summary = lines
        .iter()
        .position(|l| l.ends_with("stopped: cpu 1 could not be armed (--strict-hotplug)"))
        .unwrap_or_else(|| panic!("no summary line: {err}"));
    assert!(
        lines[summary].starts_with("ksymwatch: ") && lines[summary].contains(" hits ("),
        "{err}"
    );
    let last = lines.last().unwrap();
    assert!(
        summary < lines.len() - 1
            && last.starts_with("ksymwatch: error: --strict-hotplug: cpu 1 ")
            && last.contains("cpu 1 has 0 free debug registers, 1 needed"),
        "the error line comes last: {err}"
    );
});

hotplug_test!(
    strict_hotplug_json_ends_with_the_failure_and_the_summary_record,
    {
        let (out, err) = refused_by_a_returning_cpu1(
            Tracer::start_json,
            &["write", "0x10000/8", "--json", "--strict-hotplug"],
        );
        let records = util::ndjson(&out);
        let failed = records
            .iter()
            .find(|r| r["type"] == "cpu_arm_failed")
            .unwrap_or_else(|| panic!("no cpu_arm_failed record: {out}"));
        assert_eq!(failed["cpu"], 1);
        let last = records.last().unwrap();
        assert_eq!(last["type"], "summary", "{out}");
        assert_eq!(last["stop"], "strict_hotplug", "{last}");
        let unwatched = &last["unwatched_ns_by_cpu"];
        assert_eq!(unwatched[0]["cpu"], 1, "{last}");
        assert!(
            unwatched[0]["count"].as_u64().is_some_and(|ns| ns > 0),
            "{last}"
        );
        assert!(
            err.contains("ksymwatch: error: --strict-hotplug: cpu 1 has 0 free debug registers"),
            "{err}"
        );
    }
);

hotplug_test!(json_stream_marks_cpus_going_and_coming, {
    let mut t = Tracer::start_json(&["write", "0x10000/8", "--json"]);
    set_online(1, false);
    let mut text = t.read_until(|l| l.contains("\"type\":\"cpu_offline\""));
    set_online(1, true);
    text += &t.read_until(|l| l.contains("\"type\":\"cpu_online\""));
    t.signal(libc::SIGINT);
    let (code, out, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    text += &out;
    let records = util::ndjson(&text);
    let off = records
        .iter()
        .find(|r| r["type"] == "cpu_offline")
        .expect("cpu_offline record");
    assert_eq!(off["cpu"], 1);
    let on = records
        .iter()
        .find(|r| r["type"] == "cpu_online")
        .expect("cpu_online record");
    assert_eq!(on["cpu"], 1);
    assert!(on["open_ns"].as_u64().unwrap() > 0);
    assert!(
        on["after_uevent_ns"].as_u64().unwrap() >= on["open_ns"].as_u64().unwrap(),
        "{on}"
    );
    assert_eq!(records.last().unwrap()["type"], "summary");
});

hotplug_test!(cpus_outside_the_list_are_not_followed, {
    let t = Tracer::start(&["write", "0x10000/8", "--cpus", "0"]);
    assert!(
        t.header.contains("# armed 1 breakpoint on cpus 0 "),
        "{}",
        t.header
    );
    set_online(1, false);
    set_online(1, true);
    // Give the uevents and a reconcile time to be (not) acted on.
    std::thread::sleep(Duration::from_millis(1500));
    t.signal(libc::SIGINT);
    let (code, out, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("# cpu 1"), "cpu 1 is not in --cpus: {out}");
});

// A per-CPU variable watched while cpu1 is offline: cpu1's per-CPU base is learnt when it comes online
// (one BPF reading on that CPU), and its breakpoint goes on cpu1's own copy.
hotplug_test!(kernel: a_per_cpu_watch_covers_a_cpu_that_comes_online_at_its_own_copy, {
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return util::skip("no kernel BTF");
    }
    set_online(1, false);
    let mut t = Tracer::start_json(&["write", "runqueues.nr_running", "--json"]);
    let header: serde_json::Value =
        serde_json::from_str(t.header.lines().next().expect("header")).expect("json");
    let copies = header["targets"][0]["percpu"]["copies"].clone();
    assert_eq!(
        copies.as_array().map(Vec::len),
        Some(1),
        "cpu0 only: {header}"
    );
    let offset = header["targets"][0]["percpu"]["offset"].clone();
    set_online(1, true);
    let mut text = t.read_until(|l| l.contains("\"type\":\"cpu_online\""));
    text += &t.read_until(|l| l.contains("\"type\":\"hit\"") && l.contains("\"cpu\":1,"));
    t.signal(libc::SIGINT);
    let (code, out, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    text += &out;
    let hits: Vec<serde_json::Value> = util::ndjson(&text)
        .into_iter()
        .filter(|r| r["type"] == "hit")
        .collect();
    let on_cpu1: Vec<&serde_json::Value> = hits.iter().filter(|h| h["cpu"] == 1).collect();
    assert!(!on_cpu1.is_empty(), "{text}");
    let parse = |v: &serde_json::Value| {
        u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    };
    let cpu0_copy = parse(&copies[0]["addr"]);
    for h in &on_cpu1 {
        assert_eq!(h["copy"], 1, "{h}");
        assert_ne!(parse(&h["addr"]), cpu0_copy, "{h}");
        // cpu1's copy is cpu1's base plus the same offset: its low bits are cpu0's copy's.
        assert_eq!(parse(&h["addr"]) & 0xfff, parse(&offset) & 0xfff, "{h}");
    }
    assert!(hits
        .iter()
        .filter(|h| h["cpu"] == 0)
        .all(|h| h["copy"] == 0));
});

/// Keeps every thread of process `pid` to cpu1.
fn pin_to_cpu1(pid: u32) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the threads");
    for tid in tasks.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        // SAFETY: a cpu_set_t zeroed, then set for cpu1, handed to sched_setaffinity by reference.
        let set = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(1, &mut set);
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        assert_eq!(set, 0, "pin thread {tid} to cpu1");
    }
}

// `-p A -p B --count 3` on the per-thread path: cpu1 goes offline, A exits and its pid goes to a new
// program, and cpu1 comes back. It is armed on B's threads only, none of the newcomer's under A's pid:
// the newcomer's 5 stores, all on cpu1, are no hits and take none of `--count`'s 3, which B's 3 stores
// then fill. (Armed on the pid as it was then, the newcomer's threads trapped there and their stores
// took the count.)
hotplug_test!(a_cpu_that_comes_back_arms_no_reused_pid, {
    let bin = util::helper_with("threads", &["-no-pie"]);
    let a = Writer::start_binary(&bin, &["threads", "2", "0"]).ready();
    let mut b = Writer::start_binary(&bin, &["threads", "3", "0"]).ready();
    let (pa, pb) = (a.pid.to_string(), b.pid.to_string());
    let args = [
        "-p",
        &pa,
        "-p",
        &pb,
        "--per-thread",
        "--count",
        "3",
        "target_var",
    ];
    let mut t = Tracer::write_json(&args);
    set_online(1, false);
    let mut text = t.read_until(|l| l.contains("\"type\":\"cpu_offline\""));
    let (pid_a, pid_b) = (a.pid, b.pid);
    assert!(a.close_and_wait(Duration::from_secs(10)).success());
    let newcomer = crate::live_process_wide::with_pid(pid_a, || {
        let w = Writer::start_binary(&bin, &["threads", "5", "0"]);
        (w.pid, w)
    });
    let Some(newcomer) = newcomer else {
        util::skip(format!(
            "pid {pid_a} could not be given to a new process (other processes took it first)"
        ));
        return;
    };
    let mut newcomer = newcomer.ready();
    set_online(1, true);
    text += &t.read_until(|l| l.contains("\"type\":\"cpu_online\""));
    pin_to_cpu1(pid_a);
    newcomer.send("go");
    newcomer.read_until_prefix("done tids=");
    b.send("go");
    b.read_until_prefix("done tids=");
    let (code, out, err) = t.wait(Duration::from_secs(10));
    newcomer.finish();
    b.finish();
    text += &out;
    let records = util::ndjson(&text);
    assert!(util::hits_of_pid(&records, pid_a).is_empty(), "{text}");
    let of_b = util::hits_of_pid(&records, pid_b);
    assert_eq!(
        of_b.len(),
        3,
        "B's 3 stores are the count's 3 hits: {text}\n{err}"
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(util::summary_record(&records)["stop"], "count", "{text}");
});
