//! Bugs found by using ksymwatch as a user would on a machine of this project's kind, each kept fixed by a
//! test that does what the user did: a helper process's memory (`tests/helpers/hunt.c`) watched the way a
//! kernel developer or a bug-hunt script would, and what is printed compared with what the writer did.

use std::time::Duration;

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
