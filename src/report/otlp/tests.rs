//! Tests of the OTLP lines: the request around the records, attributes by the semantic conventions, batching,
//! the AnyValue mapping, and cached chains against fresh ones.

use super::attrs::push_any;
use super::*;
use crate::model::watch::Access;
use crate::perf::record::encode;
use crate::report::testutil::{
    decoded, each_hit, each_value_of_a_user_store, read_zero_frame, read_zero_sample, table, watch,
};
use crate::report::{Covered, Rendered, SourceLine, StopReason, ValueFrom};
use std::sync::Arc;

/// Monotonic 5 s is wall 1,700,000,005 s.
const OFFSET: u64 = 1_700_000_000_000_000_000;
const NOW: u64 = 1_700_000_099_000_000_000;

fn printer() -> Otlp<Vec<u8>, Vec<u8>> {
    let resource = Resource {
        host_name: Some("node-\"7\"".into()),
        os_version: Some("6.18.0".into()),
        host_arch: Some("amd64".into()),
        pid: 77,
    };
    Otlp::new(
        Vec::new(),
        Vec::new(),
        &resource,
        Clock {
            offset_ns: OFFSET,
            now_ns: || NOW,
        },
    )
}

fn lines(bytes: &[u8]) -> Vec<JsonValue> {
    std::str::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The records of one request line.
fn records(line: &JsonValue) -> &Vec<JsonValue> {
    line["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
        .as_array()
        .unwrap()
}

/// Every record of every line, in order.
fn all_records(bytes: &[u8]) -> Vec<JsonValue> {
    lines(bytes)
        .iter()
        .flat_map(|l| records(l).clone())
        .collect()
}

/// A record's attribute `key`'s AnyValue (panics when absent).
fn attr<'a>(record: &'a JsonValue, key: &str) -> &'a JsonValue {
    find(record, key).unwrap_or_else(|| panic!("no {key} in {record}"))
}

fn find<'a>(record: &'a JsonValue, key: &str) -> Option<&'a JsonValue> {
    record["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

fn str_value(v: &JsonValue) -> &str {
    v["stringValue"].as_str().unwrap()
}

/// The user store of `testutil`, with a value, as a record.
fn value_records(values: &[Value]) -> Vec<JsonValue> {
    let mut p = printer();
    each_value_of_a_user_store(values, |hit| p.hit(hit).unwrap());
    p.flush().unwrap();
    all_records(&p.into_inner().0)
}

/// Every stream event has a body a reader can read without the attributes.
#[test]
fn object_and_dump_events_have_bodies() {
    let armed = StreamEvent::ObjectArmed(crate::report::ArmedObject {
        index: 3,
        addr: 0xffff888104f2a000,
        slot: 1,
        gap_ns: 115_000,
        pid: 42,
        comm: "pipes".into(),
        evicted: None,
    });
    assert_eq!(
        event_body(&armed),
        "object #3 0xffff888104f2a000 allocated by pipes-42: armed in slot 1, 115 us after its allocation"
    );
    let freed = StreamEvent::ObjectFreed {
        index: 3,
        addr: 0xffff888104f2a000,
        hits: 2,
    };
    assert_eq!(
        event_body(&freed),
        "object #3 0xffff888104f2a000 freed after 2 hits"
    );
    let dump = StreamEvent::Dump {
        trigger: crate::report::DumpTrigger::Signal,
        hits: 5,
        no_hit_yet: false,
    };
    assert_eq!(event_body(&dump), "dump: SIGUSR1; the last 5 hits");
    // A trigger before the first hit says so, not "the last 0 hits".
    let early = StreamEvent::Dump {
        trigger: crate::report::DumpTrigger::Signal,
        hits: 0,
        no_hit_yet: true,
    };
    assert_eq!(event_body(&early), "dump: SIGUSR1; no hit had come yet");
}

#[test]
fn a_line_is_one_request_with_the_resource_and_scope() {
    let mut p = printer();
    each_value_of_a_user_store(&[Value::Read(1)], |hit| p.hit(hit).unwrap());
    p.flush().unwrap();
    let out = p.into_inner().0;
    assert!(out.ends_with(b"]}]}]}\n"));
    let v = lines(&out);
    assert_eq!(v.len(), 1);
    let rl = &v[0]["resourceLogs"];
    assert_eq!(rl.as_array().unwrap().len(), 1);
    let res: Vec<(&str, &JsonValue)> = rl[0]["resource"]["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["key"].as_str().unwrap(), &a["value"]))
        .collect();
    let want = serde_json::json!([
        ["host.name", {"stringValue": "node-\"7\""}],
        ["host.arch", {"stringValue": "amd64"}],
        ["os.type", {"stringValue": "linux"}],
        ["os.version", {"stringValue": "6.18.0"}],
        ["service.name", {"stringValue": "ksymwatch"}],
        ["service.version", {"stringValue": env!("CARGO_PKG_VERSION")}],
        ["process.pid", {"intValue": "77"}],
    ]);
    let got: Vec<JsonValue> = res.iter().map(|(k, v)| serde_json::json!([k, v])).collect();
    assert_eq!(JsonValue::from(got), want);
    let scope = &rl[0]["scopeLogs"][0]["scope"];
    assert_eq!(scope["name"], "ksymwatch");
    assert_eq!(scope["version"], env!("CARGO_PKG_VERSION"));
}

/// Times are decimal strings of wall-clock nanoseconds; severity a number; ints `intValue` strings.
#[test]
fn a_hit_is_an_info_record_with_semantic_attributes() {
    let r = &value_records(&[Value::Read(0x2a)])[0];
    assert_eq!(r["timeUnixNano"], "1700000005000000000");
    assert_eq!(r["observedTimeUnixNano"], "1700000099000000000");
    assert_eq!(r["severityNumber"], 9);
    assert_eq!(r["severityText"], "INFO");
    assert!(r.get("eventName").is_none(), "a hit is not an event: {r}");
    assert_eq!(
        str_value(&r["body"]),
        "writer-4322 [000] counter W ip=0x401136 [writer] value=0x2a"
    );
    assert_eq!(
        attr(r, "process.pid"),
        &serde_json::json!({"intValue": "4321"})
    );
    assert_eq!(
        attr(r, "thread.id"),
        &serde_json::json!({"intValue": "4322"})
    );
    assert_eq!(str_value(attr(r, "thread.name")), "writer");
    assert_eq!(attr(r, "cpu.logical_number")["intValue"], "0");
    assert_eq!(str_value(attr(r, "ksymwatch.target")), "counter");
    assert_eq!(attr(r, "ksymwatch.target_index")["intValue"], "0");
    assert_eq!(str_value(attr(r, "ksymwatch.addr")), "0x404028");
    assert_eq!(attr(r, "ksymwatch.len")["intValue"], "8");
    assert_eq!(str_value(attr(r, "ksymwatch.access")), "W");
    assert_eq!(attr(r, "ksymwatch.in_kernel")["boolValue"], false);
    assert_eq!(str_value(attr(r, "ksymwatch.value")), "0x2a");
    // An unnamed user ip has no function name.
    assert!(find(r, "code.function.name").is_none(), "{r}");
    assert_eq!(str_value(attr(r, "ksymwatch.ip")), "0x401136 [writer]");
    assert_eq!(
        attr(r, "ksymwatch.call_chain"),
        &serde_json::json!({"arrayValue": {"values": [{"stringValue": "0x401136 [writer]"}]}})
    );
}

/// A kernel hit: the function is named, the chain is every frame's text, innermost first.
#[test]
fn a_kernel_hits_chain_is_an_array_of_frame_texts() {
    let s = read_zero_sample();
    let watches = [watch("target_var", 0x7ffd0000, Access::ReadWrite)];
    let mut p = printer();
    each_hit(&table(), &watches, &[(s, "reader", 0)], |hit| {
        p.hit(hit).unwrap()
    });
    p.flush().unwrap();
    let r = &all_records(&p.into_inner().0)[0];
    assert_eq!(r["timeUnixNano"], "1700000412123456789");
    assert_eq!(str_value(attr(r, "code.function.name")), "read_zero");
    assert_eq!(str_value(attr(r, "ksymwatch.ip")), "read_zero+0x77/0x100");
    assert_eq!(
        attr(r, "ksymwatch.call_chain")["arrayValue"]["values"],
        serde_json::json!([
            {"stringValue": "read_zero+0x77/0x100"},
            {"stringValue": "vfs_read+0xbb/0x100"},
            {"stringValue": "0x401000 [reader]"},
        ])
    );
    assert_eq!(attr(r, "ksymwatch.in_kernel")["boolValue"], true);
    assert_eq!(str_value(attr(r, "ksymwatch.access")), "RW");
    assert!(
        find(r, "ksymwatch.value").is_none(),
        "system-wide: no value"
    );
    assert_eq!(
        str_value(&r["body"]),
        "reader-1235 [001] target_var RW ip=read_zero+0x77/0x100"
    );
}

/// `--value`: known values and olds as hex strings (64-bit intact), unknown ones left out.
#[test]
fn value_attributes_are_there_when_known() {
    let v = value_records(&[
        Value::Written {
            value: Some(u64::MAX),
            old: Some(0),
            from: ValueFrom::Insn,
        },
        Value::Written {
            value: None,
            old: None,
            from: ValueFrom::Insn,
        },
        Value::Written {
            value: Some(1),
            old: None,
            from: ValueFrom::Raced { memory: 7 },
        },
        Value::Written {
            value: Some(1),
            old: None,
            from: ValueFrom::Memory,
        },
        Value::Unreadable,
    ]);
    assert_eq!(
        str_value(attr(&v[0], "ksymwatch.value")),
        "0xffffffffffffffff"
    );
    assert_eq!(str_value(attr(&v[0], "ksymwatch.old")), "0x0");
    assert_eq!(str_value(attr(&v[0], "ksymwatch.value_from")), "insn");
    assert!(find(&v[0], "ksymwatch.raced").is_none());
    for key in ["ksymwatch.value", "ksymwatch.old", "ksymwatch.value_from"] {
        assert!(find(&v[1], key).is_none(), "{key}: {}", v[1]);
        assert!(find(&v[4], key).is_none(), "{key}: {}", v[4]);
    }
    assert!(str_value(&v[1]["body"]).ends_with(" value=? old=?"));
    assert!(str_value(&v[4]["body"]).ends_with(" value=?"));
    assert_eq!(str_value(attr(&v[2], "ksymwatch.raced")), "0x7");
    assert_eq!(str_value(attr(&v[2], "ksymwatch.value_from")), "insn");
    assert_eq!(str_value(attr(&v[3], "ksymwatch.value_from")), "memory");
}

/// Names, comms and labels with quotes, backslashes, control characters and non-ASCII text come back
/// as they went in.
#[test]
fn strings_are_escaped() {
    let odd = "we\"ird\\\n\u{1}\u{7f}ü 日本";
    let s = decoded(&encode::sample(
        0x401136,
        1,
        1,
        1,
        0x10,
        0,
        &[encode::USER, 0x401136],
    ));
    let watches = [watch(odd, 0x10, Access::Write)];
    let mut p = printer();
    each_hit(&table(), &watches, &[(s, odd, 0)], |hit| {
        p.hit(hit).unwrap()
    });
    p.flush().unwrap();
    let out = p.into_inner().0;
    assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1, "one line");
    let r = &all_records(&out)[0];
    assert_eq!(str_value(attr(r, "thread.name")), odd);
    assert_eq!(str_value(attr(r, "ksymwatch.target")), odd);
    assert!(str_value(&r["body"]).starts_with(odd));
}

/// Nothing is written until the session flushes; then every record so far is one line, a lone hit
/// included. A flood is cut into lines of `BATCH_RECORDS`.
#[test]
fn records_are_batched_until_the_flush() {
    let mut p = printer();
    each_value_of_a_user_store(&[Value::Read(1)], |hit| p.hit(hit).unwrap());
    assert!(p.out.is_empty(), "written before the flush");
    p.flush().unwrap();
    assert_eq!(lines(&p.out).len(), 1);
    p.flush().unwrap();
    assert_eq!(lines(&p.out).len(), 1, "an empty flush writes nothing");
    let flood = vec![Value::Read(2); BATCH_RECORDS * 2 + 3];
    each_value_of_a_user_store(&flood, |hit| p.hit(hit).unwrap());
    p.flush().unwrap();
    let v = lines(&p.into_inner().0);
    let sizes: Vec<usize> = v.iter().map(|l| records(l).len()).collect();
    assert_eq!(sizes, [1, BATCH_RECORDS, BATCH_RECORDS, 3]);
}

#[test]
fn armed_is_one_event_written_at_once_with_the_header() {
    let watches = [watch("counter", 0x404028, Access::Write)];
    let cpus: BTreeSet<u32> = [0, 1].into();
    let mut p = printer();
    p.header(&Header {
        watches: &watches,
        cpus: &cpus,
        source: "kallsyms fixture",
        processes: &[(4321, "writer".into())],
        threads: 3,
        values: true,
        condition: Some("value == 0"),
        objects: None,
        cgroups: &[],
    })
    .unwrap();
    assert!(p.out.is_empty(), "the header waits for armed");
    p.armed(2, &cpus, 5_000_000_000).unwrap();
    let v = lines(&p.into_inner().0);
    assert_eq!(v.len(), 1);
    let r = &records(&v[0])[0];
    assert_eq!(r["eventName"], "ksymwatch.armed");
    assert_eq!(str_value(attr(r, "event.name")), "ksymwatch.armed");
    assert_eq!(r["timeUnixNano"], "1700000005000000000");
    assert_eq!(
        str_value(&r["body"]),
        "armed 2 breakpoints on cpus 0-1 watching counter"
    );
    assert_eq!(attr(r, "ksymwatch.events")["intValue"], "2");
    assert_eq!(attr(r, "ksymwatch.threads")["intValue"], "3");
    assert_eq!(attr(r, "ksymwatch.value")["boolValue"], true);
    assert_eq!(str_value(attr(r, "ksymwatch.if")), "value == 0");
    assert_eq!(
        attr(r, "ksymwatch.pids"),
        &serde_json::json!({"arrayValue": {"values": [{"intValue": "4321"}]}})
    );
    let target = &attr(r, "ksymwatch.targets")["arrayValue"]["values"][0]["kvlistValue"]["values"];
    assert!(target
        .as_array()
        .unwrap()
        .contains(&serde_json::json!({"key": "addr", "value": {"stringValue": "0x404028"}})));
    let keys: Vec<&str> = r["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["key"].as_str().unwrap())
        .collect();
    let unique: BTreeSet<&str> = keys.iter().copied().collect();
    assert_eq!(keys.len(), unique.len(), "a key twice: {keys:?}");
    assert!(!unique.contains("ksymwatch.version"), "{keys:?}");
}

#[test]
fn stream_events_are_named_events() {
    let mut p = printer();
    let events = [
        StreamEvent::Lost {
            cpu: 1,
            count: 3,
            counted: false,
        },
        StreamEvent::Lost {
            cpu: 1,
            count: 12,
            counted: true,
        },
        StreamEvent::CpuOnline {
            cpu: 1,
            after_uevent_ns: None,
            open_ns: 9,
            enabled: true,
        },
        StreamEvent::CpuArmFailed {
            cpu: 1,
            reason: "busy".into(),
            kind: "busy",
        },
        StreamEvent::Retargeted(crate::report::Retarget {
            index: 0,
            watch: watch("t2", 0x5555_0040, Access::ReadWrite),
            covered: Covered::Threads(4),
            took_ns: 41_000,
            enabled: true,
        }),
        StreamEvent::ProcessExec {
            pid: 42,
            comm: "sh".into(),
        },
    ];
    for e in &events {
        p.event(e, 6_000_000_000).unwrap();
    }
    p.flush().unwrap();
    let (out, err) = p.into_inner();
    let v = lines(&out);
    assert_eq!(v.len(), 1, "one flush, one line");
    let r = records(&v[0]);
    let names: Vec<&str> = r.iter().map(|r| r["eventName"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "ksymwatch.lost",
            "ksymwatch.lost",
            "ksymwatch.cpu_online",
            "ksymwatch.cpu_arm_failed",
            "ksymwatch.watch",
            "ksymwatch.process_exec"
        ]
    );
    assert_eq!(r[0]["severityNumber"], 13);
    assert_eq!(r[0]["severityText"], "WARN");
    assert_eq!(r[0]["timeUnixNano"], "1700000006000000000");
    assert_eq!(str_value(&r[0]["body"]), "lost 3 events on cpu 1");
    assert_eq!(attr(&r[0], "cpu.logical_number")["intValue"], "1");
    assert_eq!(attr(&r[0], "ksymwatch.count")["intValue"], "3");
    assert_eq!(attr(&r[0], "ksymwatch.counted")["boolValue"], false);
    // On the hit path the hits a full ring dropped are in the kernel's totals: no store was lost.
    assert_eq!(
        str_value(&r[1]["body"]),
        "12 hits not printed on cpu 1 (ring full; counted in the totals)"
    );
    assert_eq!(attr(&r[1], "ksymwatch.counted")["boolValue"], true);
    assert_eq!(r[1]["severityText"], "INFO");
    let r = &r[1..];
    assert!(
        find(&r[1], "ksymwatch.after_uevent_ns").is_none(),
        "null left out"
    );
    assert_eq!(r[1]["severityNumber"], 9);
    assert_eq!(str_value(attr(&r[2], "ksymwatch.reason")), "busy");
    assert_eq!(attr(&r[3], "ksymwatch.threads")["intValue"], "4");
    assert!(str_value(&r[3]["body"]).starts_with("watch t2 (0x55550040/8 RW) armed on 4 threads"));
    assert_eq!(attr(&r[4], "process.pid")["intValue"], "42");
    assert_eq!(str_value(attr(&r[4], "ksymwatch.comm")), "sh");
    let err = String::from_utf8(err).unwrap();
    assert!(err.contains("could not be armed: busy"), "{err}");
}

#[test]
fn the_summary_is_the_last_event_with_the_tally() {
    let mut tally = crate::report::summary::Tally::default();
    each_value_of_a_user_store(&[Value::Read(1), Value::Read(2)], |hit| tally.add(hit));
    let mut summary = Summary {
        tally: Some(tally),
        stop: Some(StopReason::Signal(libc::SIGINT as u32)),
        elapsed: std::time::Duration::from_millis(1500),
        ..Summary::default()
    };
    summary.hits_by_cpu.insert(0, 2);
    summary.lost_by_cpu.insert(1, 5);
    let mut p = printer();
    p.finish(&summary).unwrap();
    let (out, err) = p.into_inner();
    let r = &all_records(&out)[0];
    assert_eq!(r["eventName"], "ksymwatch.summary");
    assert_eq!(r["timeUnixNano"], "1700000099000000000");
    assert_eq!(r["severityText"], "WARN", "records were lost");
    assert_eq!(
        str_value(&r["body"]),
        "2 hits (cpu0 2), 5 lost, 1.500s, stopped: signal SIGINT"
    );
    assert_eq!(attr(r, "ksymwatch.hits")["intValue"], "2");
    assert_eq!(
        attr(r, "ksymwatch.elapsed_s"),
        &serde_json::json!({"doubleValue": 1.5})
    );
    assert_eq!(str_value(attr(r, "ksymwatch.signal")), "SIGINT");
    let chain = &attr(r, "ksymwatch.chains")["arrayValue"]["values"][0]["kvlistValue"]["values"];
    assert!(chain
        .as_array()
        .unwrap()
        .contains(&serde_json::json!({"key": "count", "value": {"intValue": "2"}})));
    assert!(String::from_utf8(err)
        .unwrap()
        .starts_with("ksymwatch: 2 hits"));
}

/// Numbers beyond int64 stay exact as strings; `null` is the empty AnyValue.
#[test]
fn any_values_follow_the_otlp_mapping() {
    let any = |v: JsonValue| {
        let mut s = String::new();
        push_any(&mut s, &v);
        serde_json::from_str::<JsonValue>(&s).unwrap()
    };
    use serde_json::json;
    assert_eq!(
        any(json!(u64::MAX)),
        json!({"stringValue": "18446744073709551615"})
    );
    assert_eq!(
        any(json!(i64::MAX)),
        json!({"intValue": "9223372036854775807"})
    );
    assert_eq!(any(json!(-3)), json!({"intValue": "-3"}));
    assert_eq!(any(json!(0.25)), json!({"doubleValue": 0.25}));
    assert_eq!(any(json!(null)), json!({}));
    assert_eq!(
        any(json!({"a": [true, "x"], "b": null})),
        json!({"kvlistValue": {"values": [
            {"key": "a", "value": {"arrayValue": {"values": [{"boolValue": true}, {"stringValue": "x"}]}}}
        ]}})
    );
}

/// A chain's cached attributes are what a fresh spelling gives, `--lines` and inlined frames included;
/// a chain whose text has the comm is spelled for each hit's comm.
#[test]
fn cached_chains_match_fresh_ones() {
    let s = decoded(&encode::sample(
        0xffffffff81000077,
        1,
        2,
        3,
        0x10,
        0,
        &[encode::KERNEL, 0xffffffff81000077, encode::USER, 0x7f00],
    ));
    let named = ResolvedFrame {
        line: Some(Arc::new(SourceLine {
            location: "fs/x.c:30".into(),
            inlined: vec!["inner (fs/x.c:9) [inlined]".into()],
        })),
        ..read_zero_frame()
    };
    let chain = [named.clone(), ResolvedFrame::unknown(0x7f00, false)];
    let w = watch("t", 0x10, Access::Write);
    let rendered = Rendered::new(&named, &chain);
    let known = [
        named.clone(),
        ResolvedFrame {
            sym: Some("main".into()),
            binary: Some("writer".into()),
            ..ResolvedFrame::unknown(0x7f00, false)
        },
    ];
    let rendered_known = Rendered::new(&named, &known);
    let mut got = Vec::new();
    for (frames, r) in [(&chain, &rendered), (&known, &rendered_known)] {
        for (comm, r) in [("a", None), ("a", Some(r)), ("b", Some(r)), ("b", None)] {
            let hit = Hit {
                sample: &s,
                watch: &w,
                watch_index: 0,
                comm,
                ip: &named,
                chain: frames,
                value: Value::NotRead,
                rendered: r,
                cgroup: None,
            };
            let mut p = printer();
            p.hit(&hit).unwrap();
            p.flush().unwrap();
            let rec = all_records(&p.into_inner().0).remove(0);
            got.push((comm, attr(&rec, "ksymwatch.call_chain").clone()));
        }
    }
    assert_eq!(got[0], got[1]);
    assert_eq!(got[2], got[3]);
    assert_ne!(
        got[1].1, got[2].1,
        "the unnamed user frame carries the comm"
    );
    assert_eq!(
        got[2].1["arrayValue"]["values"],
        serde_json::json!([
            {"stringValue": "inner (fs/x.c:9) [inlined]"},
            {"stringValue": "read_zero+0x77/0x100 (fs/x.c:30)"},
            {"stringValue": "0x7f00 [b]"},
        ])
    );
    for i in 5..8 {
        assert_eq!(got[4].1, got[i].1);
    }
}

/// A hit whose record carried the writer's cgroup has its id and path as attributes, and the container's
/// id and runtime under OpenTelemetry's names; a removed cgroup keeps its id, without a path.
#[test]
fn a_hit_names_its_writers_cgroup_and_container() {
    use crate::report::cgroup::{tests as cg, CgroupName};
    let s = decoded(&encode::sample(0x401000, 7, 7, 5, 0x10, 0, &[]));
    let w = watch("t", 0x10, Access::Write);
    let ip = ResolvedFrame::unknown(0x401000, false);
    let pod = cg::pod();
    let gone = CgroupName::new(9, None);
    let mut p = printer();
    for c in [Some(&pod), Some(&gone), None] {
        p.hit(&crate::report::testutil::app_hit(&s, &w, &ip, c))
            .unwrap();
    }
    p.flush().unwrap();
    let recs = all_records(&p.into_inner().0);
    assert_eq!(attr(&recs[0], "ksymwatch.cgroup.id")["intValue"], "26");
    assert_eq!(
        attr(&recs[0], "ksymwatch.cgroup.path")["stringValue"],
        pod.path.as_deref().unwrap()
    );
    assert_eq!(attr(&recs[0], "container.id")["stringValue"], cg::ID);
    assert_eq!(
        attr(&recs[0], "container.runtime.name")["stringValue"],
        "containerd"
    );
    assert_eq!(attr(&recs[1], "ksymwatch.cgroup.id")["intValue"], "9");
    assert!(find(&recs[1], "ksymwatch.cgroup.path").is_none());
    assert!(find(&recs[1], "container.id").is_none());
    assert!(find(&recs[2], "ksymwatch.cgroup.id").is_none());
}
