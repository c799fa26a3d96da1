//! Unit tests of the ftrace module.
use super::*;
use crate::model::watch::Access;
use crate::perf::record::encode;
use crate::report::testutil::{self, decoded, each_hit, each_value_of_a_user_store, table, watch};

/// A printer writing into memory.
fn printer() -> Ftrace<Vec<u8>, Vec<u8>> {
    Ftrace::new(Vec::new(), Vec::new())
}

/// What `p` printed: the stream, and the report on stderr.
fn printed(p: Ftrace<Vec<u8>, Vec<u8>>) -> (String, String) {
    let (out, err) = p.into_inner();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (text(out), text(err))
}

/// The parts a printer keeps spelled (the task per CPU, the target per index) are spelled again
/// whenever a hit differs from what they were spelled for: every line equals a fresh printer's.
#[test]
fn kept_parts_follow_every_change() {
    use crate::report::testutil::percpu_watch;
    let chain = [encode::KERNEL, 0xffffffff81000077];
    let at = |tid, cpu, addr| {
        decoded(&encode::sample(
            0xffffffff81000077,
            1,
            tid,
            5_000_000_000,
            addr,
            cpu,
            &chain,
        ))
    };
    let hits = [
        (at(5, 0, 0x7ffd0000), "w", 0),
        (at(5, 0, 0x7ffd0000), "w", 0),
        (at(6, 0, 0x7ffd0000), "w", 0),
        (at(6, 0, 0x7ffd0000), "renamed", 0),
        (at(6, 1, 0x7ffd0000), "renamed", 0),
        (at(5, 0, 0x7ffc0010), "w", 1),
        (at(5, 0, 0x7ffd0000), "w", 1),
        (at(5, 0, 0x7ffd0000), "w", 0),
        (at(5, 2000, 0x7ffd0000), "w", 70),
    ];
    let mut watches = vec![
        watch("a", 0x7ffd0000, Access::Write),
        percpu_watch("pc", None),
    ];
    watches.resize(71, watch("far", 0x7ffd0000, Access::Write));
    // The same index moved (`--control`): another label, then another access.
    let moved = [watch("b", 0x7ffd0000, Access::Write)];
    let rw = [watch("b", 0x7ffd0000, Access::ReadWrite)];
    let mut kept = printer();
    let mut want = String::new();
    let mut each = |hit: &Hit<'_>| {
        kept.hit(hit).unwrap();
        let mut fresh = printer();
        fresh.hit(hit).unwrap();
        want.push_str(&String::from_utf8(fresh.into_inner().0).unwrap());
    };
    each_hit(&table(), &watches, &hits, &mut each);
    each_hit(&table(), &moved, &hits[..1], &mut each);
    each_hit(&table(), &rw, &hits[..1], &mut each);
    let got = String::from_utf8(kept.into_inner().0).unwrap();
    assert_eq!(got, want);
    for part in [
        "               w-6       [000]",
        "         renamed-6       [001]",
        "               w-5       [2000]",
        ": pc@cpu0 W ip=",
        ": pc@cpu1 W ip=",
        ": far W ip=",
        ": b W ip=",
        ": b RW ip=",
    ] {
        assert!(got.contains(part), "{part:?} in {got}");
    }
}

#[test]
fn formats_a_hit_from_record_bytes() {
    let sample = decoded(&encode::sample(
        0xffffffff81000077,
        1234,
        1235,
        412_123_456_789,
        0x7ffd0000,
        1,
        &[
            encode::KERNEL,
            0xffffffff81000077,
            0xffffffff810001bb,
            0xffffffffdead0000,
            encode::USER,
            0x401000,
        ],
    ));
    let watches = [watch("0x7ffd0000", 0x7ffd0000, Access::Write)];
    let mut p = printer();
    each_hit(&table(), &watches, &[(sample, "reader", 0)], |hit| {
        p.hit(hit).unwrap()
    });
    let (text, _) = printed(p);
    let expected = concat!(
        "          reader-1235    [001]   412.123456: 0x7ffd0000 W ip=read_zero+0x77/0x100\n",
        " => read_zero+0x77/0x100\n",
        " => vfs_read+0xbb/0x100\n",
        " => 0xffffffffdead0000\n",
        " => 0x401000 [reader]\n",
    );
    assert_eq!(text, expected);
}

/// A chain seen before is printed from its cached spelling: the same bytes as a hit spelled afresh,
/// with each hit's own comm, time and value around it, and its own comm in an unnamed user frame.
#[test]
fn a_repeated_chain_prints_the_same() {
    let kernel = [
        encode::KERNEL,
        0xffffffff81000077,
        0xffffffff810001bb,
        0xffffffffdead0000,
    ];
    let user = [encode::KERNEL, 0xffffffff81000077, encode::USER, 0x401000];
    let hits: Vec<_> = (0..6u32)
        .map(|i| {
            let chain: &[u64] = if i < 3 { &kernel } else { &user };
            let s = decoded(&encode::sample(
                0xffffffff81000077,
                10,
                10 + i,
                1_000 * u64::from(i),
                0x10,
                i % 2,
                chain,
            ));
            (s, ["a", "bb", "a"][i as usize % 3], 0)
        })
        .collect();
    let watches = [watch("x", 0x10, Access::Write)];
    let (mut cached, mut fresh) = (printer(), printer());
    let mut reused = 0;
    each_hit(&table(), &watches, &hits, |hit| {
        reused += usize::from(hit.rendered.is_some_and(|r| r.text.borrow().made));
        cached.hit(hit).unwrap();
        fresh
            .hit(&Hit {
                rendered: None,
                cgroup: None,
                ..*hit
            })
            .unwrap();
    });
    assert_eq!(
        reused, 4,
        "every hit but the first of each chain finds it spelled"
    );
    let (cached, fresh) = (cached.into_inner().0, fresh.into_inner().0);
    let (cached, fresh) = (
        String::from_utf8(cached).unwrap(),
        String::from_utf8(fresh).unwrap(),
    );
    assert_eq!(cached, fresh);
    assert_eq!(cached.matches(" => 0x401000 [bb]\n").count(), 1, "{cached}");
    assert_eq!(cached.matches(" => 0x401000 [a]\n").count(), 2, "{cached}");
}

/// Issue 38 item 6: a hostile thread name (newline, ESC, CR, backslash, a forged frame) is escaped in
/// the hit line, in an unnamed user frame that prints it, in the marks and in the summary: each hit is
/// one line and its chain lines are only its own frames.
#[test]
fn a_hostile_comm_is_escaped_everywhere() {
    let evil = "x\n => evil+0x1\u{1b}[2J\r\\";
    let shown = "x\\n => evil+0x1\\x1b[2J\\r\\\\";
    let s = decoded(&encode::sample(
        0x401000,
        7,
        7,
        5_000,
        0x7ffd0000,
        0,
        &[encode::USER, 0x401000, 0x401100],
    ));
    let watches = [watch("counter", 0x7ffd0000, Access::Write)];
    let mut p = printer();
    let mut tally = crate::report::summary::Tally::default();
    each_hit(
        &table(),
        &watches,
        &[(s.clone(), evil, 0), (s, evil, 0)],
        |hit| {
            p.hit(hit).unwrap();
            p.hit(&Hit {
                rendered: None,
                cgroup: None,
                ..*hit
            })
            .unwrap();
            tally.add(hit);
        },
    );
    p.event(
        &StreamEvent::ProcessExec {
            pid: 7,
            comm: evil.into(),
        },
        6_000,
    )
    .unwrap();
    let mut summary = Summary::default();
    summary.hits_by_cpu.insert(0, 2);
    summary.tally = Some(tally);
    p.finish(&summary).unwrap();
    let text = printed(p).0;
    assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
    let hits: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(": counter W ip="))
        .collect();
    assert_eq!(hits.len(), 4, "{text}");
    for h in &hits {
        assert!(h.trim_start().starts_with(&format!("{shown}-7 ")), "{h}");
    }
    let frames: Vec<&str> = text.lines().filter(|l| l.starts_with(" => ")).collect();
    assert_eq!(frames.len(), 8, "two frames a hit, none forged: {text}");
    assert!(
        frames.iter().all(|f| f.ends_with(&format!(" [{shown}]"))),
        "{text}"
    );
    assert!(
        text.contains(&format!("# process 7 exec'd {shown} at")),
        "{text}"
    );
    assert!(
        text.contains(&format!("#  => 0x401000 [{shown}]\n")),
        "{text}"
    );
    assert!(text.contains(&format!("%  {shown}\n")), "by comm: {text}");
    // Every line is a hit, a frame, or a `#` line.
    assert!(
        text.lines()
            .all(|l| l.starts_with('#') || l.starts_with(" => ") || l.contains(": counter W ip=")),
        "{text}"
    );
}

/// A per-CPU target's hit says whose copy it hit after the label; the header lists the copies.
#[test]
fn a_per_cpu_hit_names_its_copy() {
    use crate::report::testutil::percpu_watch;
    let s = decoded(&encode::sample(
        0xffffffff81000077,
        1,
        1,
        5_000,
        0x7ffd0000,
        1,
        &[],
    ));
    let watches = [percpu_watch("runqueues.nr_running", None)];
    let mut p = printer();
    each_hit(&table(), &watches, &[(s, "a", 0)], |hit| {
        p.hit(hit).unwrap()
    });
    let text = printed(p).0;
    assert!(
        text.contains(": runqueues.nr_running@cpu1 W ip=read_zero+0x77/0x100"),
        "{text}"
    );
    assert_eq!(
        target_line(&watches[0]),
        "# target: runqueues.nr_running addr=0x7ffc0010 len=4 access=W (write) per-cpu: +0x10, \
         each CPU its own copy (cpu0 0x7ffc0010, cpu1 0x7ffd0000)"
    );
    let one = percpu_watch("runqueues.nr_running", Some(1));
    assert!(
        target_line(&one).contains("every CPU cpu1's copy"),
        "{}",
        target_line(&one)
    );
}

/// The hit lines (not the chains) of a user store printed with each of `values`; every hit has its
/// one-frame chain.
fn hit_lines(values: &[Value]) -> Vec<String> {
    let mut p = printer();
    each_value_of_a_user_store(values, |hit| p.hit(hit).unwrap());
    let text = printed(p).0;
    let chains = text.lines().filter(|l| *l == " => 0x401136 [writer]");
    assert_eq!(chains.count(), values.len(), "{text}");
    text.lines()
        .filter(|l| !l.starts_with(" => "))
        .map(str::to_string)
        .collect()
}

/// A process watch's hits end with the value read when they were drained: the hex of the watched
/// integer, `?` when the process could not be read; a system-wide hit (above) has none.
#[test]
fn a_process_hit_ends_with_its_value() {
    let values = [
        Value::Read(0x2a),
        Value::Read(u64::MAX),
        Value::Read(0),
        Value::Unreadable,
    ];
    let line = "          writer-4322    [000]     5.000000: counter W ip=0x401136 [writer]";
    assert_eq!(
        hit_lines(&values),
        [
            format!("{line} value=0x2a"),
            format!("{line} value=0xffffffffffffffff"),
            format!("{line} value=0x0"),
            format!("{line} value=?"),
        ]
    );
}

/// `--value`: the store's own value and the one before it, `?` for either when unknown (the first hit
/// has no `old`; a lost value record or a failed read has no `value`), still last on the line.
#[test]
fn a_value_hit_ends_with_value_and_old() {
    let values = [
        Value::Written {
            value: Some(0x1f4),
            old: Some(0x1f3),
            from: ValueFrom::Insn,
        },
        Value::Written {
            value: Some(0),
            old: None,
            from: ValueFrom::Insn,
        },
        Value::Written {
            value: None,
            old: Some(u64::MAX),
            from: ValueFrom::Insn,
        },
        Value::Written {
            value: None,
            old: None,
            from: ValueFrom::Insn,
        },
    ];
    let line = "          writer-4322    [000]     5.000000: counter W ip=0x401136 [writer]";
    assert_eq!(
        hit_lines(&values),
        [
            format!("{line} value=0x1f4 old=0x1f3"),
            format!("{line} value=0x0 old=?"),
            format!("{line} value=? old=0xffffffffffffffff"),
            format!("{line} value=? old=?"),
        ]
    );
    // A value read from memory is marked; one that raced names what memory held.
    let values = [
        Value::Written {
            value: Some(3),
            old: Some(2),
            from: ValueFrom::Memory,
        },
        Value::Written {
            value: Some(3),
            old: None,
            from: ValueFrom::Raced { memory: 0x2a },
        },
    ];
    assert_eq!(
        hit_lines(&values),
        [
            format!("{line} value=0x3(mem) old=0x2"),
            format!("{line} value=0x3(raced:0x2a) old=?"),
        ]
    );
}

/// A process watch's `# armed` line says how many processes and threads it covers.
#[test]
fn armed_counts_processes_and_threads() {
    let watch = watch("x", 0x404028, Access::Write);
    let cpus: BTreeSet<u32> = [0, 1].into();
    let processes = [(10, "a".to_string()), (11, "b".to_string())];
    let mut p = printer();
    p.header(&Header {
        watches: std::slice::from_ref(&watch),
        cpus: &cpus,
        source: "kallsyms /proc/kallsyms",
        processes: &processes,
        threads: 10001,
        values: false,
        condition: None,
        objects: None,
        cgroups: &[],
    })
    .unwrap();
    p.armed(2, &cpus, 5_000_001_000).unwrap();
    let (text, _) = printed(p);
    assert!(
        text.contains(
            "# armed 2 breakpoints on cpus 0-1 for 2 processes (10001 threads at the start) at"
        ),
        "{text}"
    );
    let mut j = crate::report::json::Json::new(Vec::new(), Vec::new());
    j.header(&Header {
        watches: std::slice::from_ref(&watch),
        cpus: &cpus,
        source: "kallsyms /proc/kallsyms",
        processes: &processes[..1],
        threads: 1,
        values: false,
        condition: None,
        objects: None,
        cgroups: &[],
    })
    .unwrap();
    j.armed(2, &cpus, 5_000_001_000).unwrap();
    let out = String::from_utf8(j.into_inner().0).unwrap();
    let armed: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
    assert_eq!(
        (armed["processes"].as_u64(), armed["threads"].as_u64()),
        (Some(1), Some(1))
    );
}

#[test]
fn header_armed_events_and_summary() {
    let watch = watch("x", 0xffffffff83003e00, Access::ReadWrite);
    let cpus: BTreeSet<u32> = [0, 1].into();
    let mut p = printer();
    p.header(&testutil::system_wide_header(
        std::slice::from_ref(&watch),
        &cpus,
        "kallsyms /proc/kallsyms",
    ))
    .unwrap();
    p.armed(2, &cpus, 5_000_001_000).unwrap();
    let lost = crate::report::testutil::lost_on_cpu1;
    p.event(&lost(3, false), 6_000_000_000).unwrap();
    p.event(&lost(12, true), 6_500_000_000).unwrap();
    let mut summary = Summary::default();
    summary.hits_by_cpu.insert(0, 5);
    summary.lost_by_cpu.insert(1, 3);
    summary
        .warnings
        .push("/tmp/a\nb: symbol table too large".into());
    p.finish(&summary).unwrap();
    let (out, err) = printed(p);
    assert!(out.starts_with("# tracer: ksymwatch\n"));
    assert!(out.contains("# target: x addr=0xffffffff83003e00 len=8 access=RW"));
    assert!(out.contains("# armed 2 breakpoints on cpus 0-1 at 5.000001\n"));
    // Records in no total are lost; on the hit path a full ring's hits are only not printed.
    assert!(out.contains("# lost 3 events on cpu 1 at 6.000000\n"));
    assert!(out.contains(
        "# 12 hits not printed on cpu 1 at 6.500000 (ring full; counted in the totals)\n"
    ));
    assert!(err.contains("5 hits (cpu0 5), 3 lost"), "{err}");
    assert!(err.contains("WARNING"));
    assert!(
        err.contains("ksymwatch: WARNING: /tmp/a\\nb: symbol table too large\n"),
        "a warning naming a file is one line: {err}"
    );
}

/// A module unloaded under a watch: one mark naming the module and the targets that ended; the summary
/// gives it as the reason the run stopped when they were the last.
#[test]
fn module_unloaded_mark() {
    let mut p = printer();
    let e = StreamEvent::ModuleUnloaded {
        module: "nfs".into(),
        targets: vec!["nfs:nfs_counter".into(), "nfs_flags+0x4".into()],
    };
    p.event(&e, 7_000_000_000).unwrap();
    let summary = Summary {
        stop: Some(crate::report::StopReason::ModuleUnloaded),
        ..Summary::default()
    };
    p.finish(&summary).unwrap();
    let (out, err) = printed(p);
    assert!(
        out.starts_with(
            "# module nfs unloaded at 7.000000: no longer watching nfs:nfs_counter, nfs_flags+0x4\n"
        ),
        "{out}"
    );
    let all = out + &err;
    assert!(all.contains("watched module unloaded"), "{all}");
}

/// A CPU back online is armed; while the watch is off (`--control off`) its event waits for `on` with
/// the others, and the mark says so, as a move made while off does: "armed" alone read as watching.
#[test]
fn a_cpu_online_while_the_watch_is_off_is_marked_off() {
    let mut p = printer();
    for enabled in [true, false] {
        let e = StreamEvent::CpuOnline {
            cpu: 1,
            after_uevent_ns: Some(11_348_000),
            open_ns: 11_192_000,
            enabled,
        };
        p.event(&e, 7_000_000_000).unwrap();
    }
    let (out, _) = printed(p);
    assert_eq!(
        out,
        "# cpu 1 online: armed at 7.000000 (11.348 ms after its uevent, 11.192 ms of it in perf_event_open)\n\
         # cpu 1 online: armed, off until `on` at 7.000000 (11.348 ms after its uevent, 11.192 ms of it in \
         perf_event_open)\n"
    );
}

/// The control marks: a reader splits hits before and after a move at the `# watch` line; a refusal is
/// also on stderr, since the script that sent it may not read the stream.
#[test]
fn control_acknowledgements() {
    let mut p = printer();
    let moved = StreamEvent::Retargeted(crate::report::Retarget {
        index: 0,
        watch: watch("target_var2", 0x5555_0040, Access::Write),
        covered: crate::report::Covered::Threads(1020),
        took_ns: 1_800_000,
        enabled: true,
    });
    p.event(&moved, 7_000_000_000).unwrap();
    let mut paused = moved.clone();
    if let StreamEvent::Retargeted(r) = &mut paused {
        r.enabled = false;
    }
    p.event(&paused, 7_050_000_000).unwrap();
    p.event(&StreamEvent::Switched { on: false }, 7_100_000_000)
        .unwrap();
    p.event(
        &StreamEvent::ControlRefused {
            command: "watch nope".into(),
            reason: "unknown symbol `nope`".into(),
            watching: "target_var2 (0x55550040/8)".into(),
            kind: "bad_target",
        },
        7_200_000_000,
    )
    .unwrap();
    let (out, err) = printed(p);
    assert_eq!(
        out,
        concat!(
            "# watch target_var2 (0x55550040/8 W) armed on 1020 threads in 1.800 ms at 7.000000\n",
            "# watch target_var2 (0x55550040/8 W) armed on 1020 threads in 1.800 ms, off until `on` at \
             7.050000\n",
            "# watch off at 7.100000\n",
            "# control `watch nope` refused: unknown symbol `nope`; still watching target_var2 \
             (0x55550040/8) at 7.200000\n",
        )
    );
    assert_eq!(
        err,
        "ksymwatch: control `watch nope` refused: unknown symbol `nope`; still watching target_var2 \
         (0x55550040/8)\n"
    );
}

/// `--cgroup`: the text header names the chosen cgroups on a line of its own, the JSON header as
/// `cgroups`; without it neither says anything of cgroups.
#[test]
fn the_header_names_the_chosen_cgroups() {
    let watch = watch("x", 0x404028, Access::Write);
    let cpus: BTreeSet<u32> = [0].into();
    let chosen = ["/pods/a".to_string(), "/pods/b c".to_string()];
    let header = |cgroups| Header {
        cgroups,
        ..testutil::system_wide_header(
            std::slice::from_ref(&watch),
            &cpus,
            "kallsyms /proc/kallsyms",
        )
    };
    for (cgroups, line) in [
        (
            &chosen[..],
            Some(
                "# cgroup: /pods/a, /pods/b c (writers in it or below only, decided in the kernel)",
            ),
        ),
        (&[][..], None),
    ] {
        let mut p = Ftrace::new(Vec::new(), Vec::new());
        p.header(&header(cgroups)).unwrap();
        let text = String::from_utf8(p.into_inner().0).unwrap();
        let found = text.lines().find(|l| l.starts_with("# cgroup"));
        assert_eq!(found, line, "{text}");
        let mut j = crate::report::json::Json::new(Vec::new(), Vec::new());
        j.header(&header(cgroups)).unwrap();
        let out = String::from_utf8(j.into_inner().0).unwrap();
        let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        match line {
            Some(_) => assert_eq!(v["cgroups"], serde_json::json!(["/pods/a", "/pods/b c"])),
            None => assert!(v.get("cgroups").is_none(), "{v}"),
        }
    }
}
