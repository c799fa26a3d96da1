//! Live tests of `ksymwatch write|rw`: real breakpoints on this machine, assertions on what the kernel
//! reported. Serialized machine-wide by `util::live()`; hits are matched by the helper's tid because a
//! system-wide watch also sees every other process that touches the address. No test here needs a
//! kernel address: each watches a helper's global (stored to by the helper, or by the kernel when the
//! helper `read()`s /dev/zero into it), so they run alike where the kernel refuses kernel breakpoints.

use crate::util;

use std::collections::HashSet;
use std::time::Duration;
use util::{kernel_frames, parse_hits, HitLine, Tracer, Writer};

/// Every text symbol name of the running kernel's kallsyms (also used by `live_cache`).
pub(crate) fn kallsyms_text_names() -> HashSet<String> {
    std::fs::read_to_string("/proc/kallsyms")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, ty, name) = (f.next()?, f.next()?, f.next()?);
            matches!(ty, "T" | "t" | "W" | "w").then(|| name.to_string())
        })
        .collect()
}

fn frame_name(frame: &str) -> &str {
    frame.split('+').next().unwrap_or(frame)
}

// The kernel writes the helper's global (`read()` from /dev/zero, system-wide watch): every hit's kernel
// frames are kallsyms functions as `func+0xOFF/0xSIZE`, and the summary counts what was printed.
live_test!(kernel_writer_chains_symbolize_to_kallsyms_functions, {
    const READS: usize = 20;
    let w = Writer::start(&["read", &READS.to_string(), "0"]);
    let (target, label) = (w.target(), format!("0x{:x}", w.addr));
    let t = Tracer::start(&["write", &target, "--duration", "2s"]);
    assert!(
        t.header.starts_with("# tracer: ksymwatch\n"),
        "{}",
        t.header
    );
    assert!(t.header.contains(&target_line(w.addr)), "{}", t.header);
    let tid = w.go_and_finish();
    let (code, out, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "stderr: {err}");
    let hits = parse_hits(&out);
    let mine = hits_of(&hits, tid);
    assert!(
        mine.len() >= READS,
        "{READS} reads into the watched global: {} hits from the helper\n{err}",
        mine.len()
    );
    let names = kallsyms_text_names();
    for h in &mine {
        assert_eq!(h.target, label);
        assert_eq!(h.access, "W");
        let kernel = kernel_frames(&h.chain);
        assert!(
            !kernel.is_empty(),
            "a kernel write has a kernel call chain: {h:?}"
        );
        for f in kernel {
            assert!(
                names.contains(frame_name(f)),
                "frame `{f}` is not a kallsyms text symbol"
            );
            assert!(
                f.contains("+0x") && f.contains("/0x"),
                "frame `{f}` is not func+0xOFF/0xSIZE"
            );
        }
    }
    assert!(
        err.contains(&format!("{} hits", hits.len())),
        "summary counts what was printed: {err}"
    );
    assert!(err.contains("stopped: duration reached"), "{err}");
});

/// The header's line for an 8-byte write watch of the address `addr`.
fn target_line(addr: u64) -> String {
    format!("# target: 0x{addr:x} addr=0x{addr:x} len=8 access=W")
}

/// The hits of the helper's thread `tid` in the text output `out`.
fn helper_hits(out: &str, tid: u32) -> Vec<HitLine> {
    parse_hits(out)
        .into_iter()
        .filter(|h| h.tid == tid)
        .collect()
}

fn hits_of(hits: &[HitLine], tid: u32) -> Vec<&HitLine> {
    hits.iter().filter(|h| h.tid == tid).collect()
}

live_test!(every_online_cpu_reports_exactly_the_helpers_writes, {
    const N: usize = 1000;
    for cpu in util::online_cpus() {
        let w = Writer::start(&["write", &N.to_string(), &cpu.to_string()]);
        let target = format!("0x{:x}/8", w.addr);
        let t = Tracer::start(&["write", &target]);
        assert!(t.header.contains(&target_line(w.addr)), "{}", t.header);
        // The helper is done; everything it wrote is in the rings. Stop and collect.
        let tid = w.go_and_finish();
        let (code, out, err) = t.interrupt(Duration::from_secs(20));
        assert_eq!(code, 0, "{err}");
        let mine = helper_hits(&out, tid);
        assert_eq!(
            mine.len(),
            N,
            "cpu {cpu}: expected exactly {N} hits from tid {tid}; stderr: {err}"
        );
        assert!(
            mine.iter().all(|h| h.cpu == cpu),
            "cpu {cpu}: hit from another CPU"
        );
        assert!(
            mine.iter().all(|h| h.comm == "writer"),
            "comm is the helper's: {:?}",
            mine[0]
        );
        assert!(mine
            .iter()
            .all(|h| !h.ip.is_empty() && h.chain.iter().any(|f| f.ends_with("[writer]"))));
        assert!(err.contains("0 lost"), "{err}");
    }
});

live_test!(kernel_write_into_watched_user_buffer_shows_the_read_path, {
    let w = Writer::start(&["read", "3", "0"]);
    let target = format!("0x{:x}", w.addr);
    let t = Tracer::start(&["write", &target]);
    let tid = w.go_and_finish();
    let (code, out, err) = t.interrupt(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    let mine = helper_hits(&out, tid);
    assert!(!mine.is_empty(), "no hit from the reader; stderr: {err}");
    for h in &mine {
        let kernel: Vec<&str> = h.chain.iter().map(|f| frame_name(f)).collect();
        assert!(
            kernel.iter().any(|f| [
                "read_zero",
                "iov_iter_zero",
                "clear_user",
                "__clear_user",
                "rep_stos_alternative"
            ]
            .contains(f)),
            "no /dev/zero read path in {kernel:?}"
        );
        assert!(kernel.contains(&"vfs_read"), "no vfs_read in {kernel:?}");
        assert!(
            !h.ip.starts_with("0x"),
            "the writer was the kernel: ip symbolized, got {}",
            h.ip
        );
    }
});

live_test!(count_prints_exactly_that_many_hits, {
    let w = Writer::start(&["write", "100", "0"]);
    let t = Tracer::start(&["write", &w.target(), "--count", "5", "--duration", "60s"]);
    w.go_and_finish();
    let (code, out, err) = t.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    assert_eq!(parse_hits(&out).len(), 5, "{out}");
    assert!(
        err.contains("5 hits") && err.contains("stopped: count reached"),
        "{err}"
    );
});

live_test!(duration_stops_on_time, {
    let w = Writer::spinning(0);
    let t = Tracer::start(&["write", &w.target(), "--duration", "500ms"]);
    let (code, _out, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stopped: duration reached"), "{err}");
});

live_test!(sigint_and_sigterm_stop_cleanly_with_summary, {
    let w = Writer::spinning(0);
    for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let t = Tracer::start(&["write", &w.target()]);
        std::thread::sleep(Duration::from_millis(300));
        t.signal(sig);
        let (code, out, err) = t.wait(Duration::from_secs(30));
        assert_eq!(code, 0, "{name}: {err}");
        let hits = parse_hits(&out).len();
        assert!(hits > 0, "{name}: the spinning helper stored: {err}");
        assert!(err.contains(&format!("stopped: signal {name}")), "{err}");
        assert!(err.contains(" lost,"), "summary line: {err}");
        // The summary counts the hits printed after `# armed` (the header was read by start()).
        assert!(
            err.contains(&format!("ksymwatch: {hits} hits")),
            "{hits} hits printed; {err}"
        );
    }
});

live_test!(closed_stdout_is_a_quiet_normal_end, {
    let w = Writer::spinning(0);
    let mut t = Tracer::start(&["write", &w.target()]);
    // Read one hit, then hang up like `| head -n 20` does: ksymwatch's next write gets EPIPE.
    t.read_until(|l| !l.starts_with('#'));
    t.close_stdout();
    let (code, _out, err) = t.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "stderr: {err}");
    assert!(!err.contains("error"), "{err}");
    assert!(err.contains("stopped: output closed"), "{err}");
});

live_test!(rw_reports_reads_too, {
    // The helper only loads its global: a `write` watch sees none of it, `rw` reports the reads as RW.
    let w = Writer::start(&["load", "100", "0"]);
    let t = Tracer::start(&["write", &w.target(), "--duration", "60s"]);
    let tid = w.go_and_finish();
    let (code, out, err) = t.interrupt(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert!(helper_hits(&out, tid).is_empty(), "{out}");

    let w = Writer::start(&["load", "100", "0"]);
    let t = Tracer::start(&["rw", &w.target(), "--count", "3", "--duration", "60s"]);
    assert!(t.header.contains("access=RW (read-write)"), "{}", t.header);
    let tid = w.go_and_finish();
    let (code, out, err) = t.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let hits = parse_hits(&out);
    assert_eq!(hits.len(), 3, "{out}");
    assert!(hits.iter().all(|h| h.access == "RW"));
    assert_eq!(hits_of(&hits, tid).len(), 3, "the helper's reads: {out}");
});

/// Hits not printed as the stream's `# N hits not printed on cpu M at T (ring full; counted in the
/// totals)` lines add them up, and as the stderr summary counts them (on the hit path every kept hit is
/// counted in the kernel: those hits are not lost from the counts, only from the stream, and `lost` is
/// 0). The stream's `# lost N events` lines are the breakpoint's perf ring's (task records): in no count,
/// and no hit.
fn lost_counts(out: &str, err: &str) -> (u64, u64) {
    let in_stream = out
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter_map(|l| {
            l.strip_suffix(" (ring full; counted in the totals)")?;
            let (n, rest) = l.split_once(' ')?;
            rest.starts_with("hits not printed on cpu ")
                .then(|| n.parse::<u64>().unwrap())
        })
        .sum();
    let in_summary = err
        .split(", ")
        .find_map(|p| p.strip_suffix(" not printed (ring full)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `not printed` count in {err}"));
    assert!(err.contains(", 0 lost,"), "every hit in the totals: {err}");
    (in_stream, in_summary)
}

/// What a one-page ring made of a writer's `n` stores while its tracer was stopped.
struct Burst {
    /// The writer's hits the stream printed.
    mine: u64,
    lost_in_stream: u64,
    lost_in_summary: u64,
    out: String,
    err: String,
}

/// Watches a writer of `n` stores with a one-page ring and stops the tracer (SIGSTOP) before the writer
/// starts; `burst` runs the writer and lets the tracer go on (SIGCONT) in the order its test is about.
/// The tracer is then interrupted and must exit 0.
fn burst_into_a_stopped_ring(n: u64, burst: impl FnOnce(Writer, &Tracer)) -> Burst {
    let w = Writer::start(&["write", &n.to_string(), "0"]);
    let target = format!("0x{:x}/8", w.addr);
    let mut t = Tracer::start(&["write", &target, "--buffer-pages", "1"]);
    // Read as it comes: the records the ring drops are the subject, not a pipe no one reads (which a
    // stop signal treats as output not read).
    let reader = t.keep_reading();
    t.signal(libc::SIGSTOP);
    let tid = w.tid;
    burst(w, &t);
    t.signal(libc::SIGINT);
    let (code, _, err) = t.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let out = reader.join().expect("the stdout reader");
    let mine = parse_hits(&out).iter().filter(|h| h.tid == tid).count() as u64;
    let (lost_in_stream, lost_in_summary) = lost_counts(&out, &err);
    Burst {
        mine,
        lost_in_stream,
        lost_in_summary,
        out,
        err,
    }
}

live_test!(a_full_ring_loses_records_loudly, {
    // One data page per CPU cannot hold 10 ms of a writer at full speed: the kernel must drop records, and
    // ksymwatch must say so in the stream and the summary, never silently.
    const N: u64 = 100_000;
    // A reader that keeps up drains one page fast enough for a trapping writer, so the tracer is stopped
    // for 50 ms of the burst: its ring fills meanwhile, and the burst's later records come after the loss.
    let Burst {
        mine,
        lost_in_stream,
        lost_in_summary,
        err,
        ..
    } = burst_into_a_stopped_ring(N, |mut w, t| {
        w.go();
        std::thread::sleep(Duration::from_millis(50));
        t.signal(libc::SIGCONT);
        w.finish();
        std::thread::sleep(Duration::from_millis(100));
    });
    assert!(mine < N, "a one-page ring kept up with {N} hits? {err}");
    assert!(
        lost_in_stream > 0,
        "no `# N hits not printed` line in the stream"
    );
    // Every hit not printed is marked (those after the ring's last record at the end), and the summary
    // counts each.
    assert_eq!(lost_in_stream, lost_in_summary, "{err}");
    assert!(
        mine + lost_in_summary >= N,
        "{mine} printed + {lost_in_summary} not printed < {N}: a silent loss"
    );
    assert!(
        err.contains("counted in the kernel's totals") && err.contains("--buffer-pages"),
        "{err}"
    );
});

live_test!(
    a_loss_at_the_end_of_a_burst_is_counted_by_the_kernel_and_reported,
    {
        // The tracer is stopped while a one-page ring overflows and the writer exits: the kernel writes a LOST
        // record only at the next sample that fits, and there is none. Only the event's own lost counter
        // (PERF_FORMAT_LOST) knows; the stream and the summary must say it.
        const N: u64 = 20_000;
        let Burst {
            mine,
            lost_in_stream,
            lost_in_summary,
            out,
            err,
        } = burst_into_a_stopped_ring(N, |mut w, t| {
            w.go();
            w.finish();
            t.signal(libc::SIGCONT);
            std::thread::sleep(Duration::from_millis(200));
        });
        assert!(mine < N, "a one-page ring held {N} hits? {err}");
        // The tail the program counted but no record told of is marked at the end: every hit not
        // printed is marked, and the summary counts each.
        assert_eq!(lost_in_stream, lost_in_summary, "{out}\n{err}");
        assert!(
            mine + lost_in_summary >= N,
            "{mine} printed + {lost_in_summary} not printed < {N}: a silent tail loss\n{err}"
        );
        assert!(!err.contains("unaccounted"), "{err}");
    }
);

live_test!(timestamps_never_go_backwards_in_a_two_cpu_flood, {
    let cpus = util::online_cpus();
    if cpus.len() < 2 {
        util::skip("needs 2 online CPUs");
        return;
    }
    // Two helpers started without address-space randomization share the global's address; a system-wide
    // watch sees both, one pinned to each CPU, so two rings fill at once and every drain has records from
    // both.
    const N: usize = 30_000;
    let mut a = Writer::start_fixed(&["write", &N.to_string(), &cpus[0].to_string()]);
    let mut b = Writer::start_fixed(&["write", &N.to_string(), &cpus[1].to_string()]);
    assert_eq!(a.addr, b.addr, "setarch -R must place both globals alike");
    let target = format!("0x{:x}/8", a.addr);
    let t = Tracer::start_json(&["write", &target, "--json"]);
    let (ta, tb) = (a.tid, b.tid);
    let ga = std::thread::spawn(move || {
        a.go();
        a.finish();
    });
    b.go();
    b.finish();
    ga.join().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    t.signal(libc::SIGINT);
    let (code, out, err) = t.wait(Duration::from_secs(120));
    assert_eq!(code, 0, "{err}");
    let mut last = 0u64;
    let mut by_cpu = std::collections::BTreeMap::<u64, usize>::new();
    let mut hits = 0;
    let mut lost = None;
    for line in out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["type"] == "summary" {
            // Not printed: lost to the stream (the kernel's totals still count them on the hit path).
            lost = Some(v["lost"].as_u64().unwrap() + v["unprinted"].as_u64().unwrap());
        }
        if v["type"] != "hit" {
            continue;
        }
        let time = v["time_ns"].as_u64().unwrap();
        assert!(
            time >= last,
            "time went backwards: {time} after {last}\n{line}"
        );
        last = time;
        let tid = v["tid"].as_u64().unwrap() as u32;
        if tid == ta || tid == tb {
            hits += 1;
            *by_cpu.entry(v["cpu"].as_u64().unwrap()).or_default() += 1;
        }
    }
    // A debug build falls behind two flooding CPUs and loses records (reported); what matters here is the
    // order of what arrived from both rings.
    let lost = lost.expect("summary record") as usize;
    assert!(
        hits + lost >= 2 * N,
        "{hits} hits + {lost} lost from the two writers: {err}"
    );
    assert_eq!(by_cpu.len(), 2, "both CPUs flooded: {by_cpu:?}");
});
