//! Bugs found by using ksymwatch as a user would on a machine of this project's kind, each kept fixed by a
//! test that does what the user did: a helper process's memory (`tests/helpers/hunt.c`) watched the way a
//! kernel developer or a bug-hunt script would, and what is printed compared with what the writer did.

use std::io::Read;
use std::time::{Duration, Instant};

use crate::util::*;

/// The `hunt` helper in `tight` mode on `cpu`: storing into its global with no pause, already going.
fn tight_writer(cpu: u32) -> Writer {
    Writer::start_binary(&helper("hunt"), &["tight", &cpu.to_string()])
}

// Every trap the kernel counted is accounted for at the end: a hit the BPF program dropped in the kernel
// (`--comm`, `--tid`, `--kernel-only`) is `filtered`. The per-CPU drop counters used to be read as their
// starting point once the events were already enabled, so the traps of a busy writer in between were
// counted by the kernel, in no `filtered` count, and reported as "unaccounted for (throttled ...?)".
live_test!(kernel_dropped_hits_are_all_accounted_for, {
    let w = tight_writer(0);
    let target = w.target();
    for filter in [["--comm", "nobody-here"], ["--kernel-only", "--no-status"]] {
        let mut args = vec!["write", target.as_str(), "--duration", "300ms", "--json"];
        args.extend(filter);
        let (code, out, err) = run_within(&args, Duration::from_secs(30));
        assert_eq!(code, 0, "{filter:?}: {err}");
        let records = ndjson(&out);
        let summary = summary_record(&records);
        assert_eq!(summary["hits"], 0, "{filter:?}: {err}");
        assert!(
            summary["filtered"].as_u64().unwrap_or(0) > 1000,
            "{filter:?}: the helper stores every ~15 us: {err}"
        );
        assert!(!err.contains("unaccounted"), "{filter:?}: {err}");
    }
});

// `ksymwatch write ADDR | head -1` over a busy writer: the hits still in the rings when the reader went
// away were reported as "not printed (ring full)" with "a larger --buffer-pages prints more"; they were
// not printed because the output was closed.
live_test!(a_closed_output_is_not_called_a_full_ring, {
    let w = tight_writer(0);
    let mut t = Tracer::start(&["write", &w.target(), "--no-status"]);
    t.read_until(|l| !l.starts_with('#'));
    t.close_stdout();
    let (code, _, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stopped: output closed"), "{err}");
    assert!(!err.contains("ring full"), "{err}");
    assert!(!err.contains("rings were full"), "{err}");
    if err.contains("not printed") {
        assert!(err.contains("not printed (output closed)"), "{err}");
    }
});

/// Closes the tracer's stdout as `head` does once it has read enough, and checks that the hang-up alone
/// ended the run within 5 s (it is killed after 20 s), cleanly, saying so and counting `hits` hits.
fn assert_closing_output_ends_it(mut t: Tracer, hits: u32) {
    t.close_stdout();
    let closed = Instant::now();
    let status = wait_within(&mut t.child, Duration::from_secs(20));
    let took = closed.elapsed();
    let mut err = String::new();
    if let Some(mut e) = t.child.stderr.take() {
        e.read_to_string(&mut err).expect("ksymwatch's stderr");
    }
    assert_eq!(
        status.code().unwrap_or(-1),
        0,
        "ended after {took:?}: {err}"
    );
    assert!(took < Duration::from_secs(5), "ended after {took:?}: {err}");
    assert!(err.contains("stopped: output closed"), "{err}");
    assert!(err.contains(&format!("{hits} hits")), "{err}");
}

// `ksymwatch write -p PID VAR | head -1` where the process stores once and then sleeps: `head` got its
// line and exited, and ksymwatch ran on (its breakpoints held) until killed, since only a write could
// meet the closed pipe and no hit came to be written. Its stdout's hang-up now ends the run.
live_test!(a_reader_gone_ends_a_watch_that_gets_no_more_hits, {
    let mut w = Writer::start(&["set", "0"]);
    let pid = w.pid.to_string();
    let mut t = Tracer::start(&["write", "-p", &pid, "target_var", "--no-status"]);
    w.send("set 7");
    w.read_until("done");
    let line = t.read_until(|l| !l.starts_with('#'));
    assert!(line.contains("target_var"), "the store's hit: {line}");
    assert_closing_output_ends_it(t, 1);
});

// The same with `--last 5 --dump-on signal` and no hit at all: nothing is written until a SIGUSR1, so
// nothing but the hang-up can tell that the reader has gone.
live_test!(a_reader_gone_ends_a_flight_recorder_that_got_no_hits, {
    let w = Writer::start(&["set", "0"]);
    let pid = w.pid.to_string();
    let args = [
        "write",
        "-p",
        &pid,
        "target_var",
        "--last",
        "5",
        "--dump-on",
        "signal",
        "--no-status",
    ];
    let t = Tracer::start(&args);
    assert_closing_output_ends_it(t, 0);
});

// A per-thread watch of three targets while `perf record -a` (here the holder helper) keeps two of
// CPU 1's registers: the refusal said "tid N (writer): all debug registers of this thread are in use (its
// own watchpoints, a debugger's, ...)" and so sent the user after the thread, which held none; it is
// CPU 1 that has only two left for any thread. Once the holder is gone, a second run arms all three.
live_test!(a_per_thread_watch_refused_by_a_full_cpu_names_the_cpu, {
    let Some(&busy) = online_cpus().iter().find(|&&c| c != 0) else {
        skip("needs a second online CPU");
        return;
    };
    let w = Writer::start(&["set", "0"]);
    let pid = w.pid.to_string();
    let watch = [
        "write",
        "-p",
        pid.as_str(),
        "target_var",
        "target_var2",
        "ksw_sysinfo/8",
        "--per-thread",
        "--duration",
        "200ms",
    ];
    let holder = Holder::start(busy, 2);
    assert_eq!(holder.held, 2);
    let line = rejects(
        &watch,
        3,
        // 2 free, or fewer while another tool holds one for a moment: the CPU is named either way.
        &[
            &format!("cpu {busy} has "),
            " free debug register",
            ", 3 needed",
            "breakpoints of that CPU",
            "nothing was armed",
        ],
    );
    assert!(!line.contains("of this thread"), "{line}");
    drop(holder);
    let (code, out, err) = run_within(&watch, Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("# armed"), "{out}");
});
