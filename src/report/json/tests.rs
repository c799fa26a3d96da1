//! Tests of the JSON records: every record's line, the hand-written hit against serde's, escaping.

use super::*;
use crate::model::watch::Access;
use crate::perf::record::encode;
use crate::report::cgroup::CgroupName;
use crate::report::testutil::{
    decoded, each_hit, each_value_of_a_user_store, read_zero_frame, read_zero_sample,
    system_wide_header, table, watch,
};
use crate::report::Value as HitValue;
use crate::report::{Covered, ResolvedFrame, StopReason, ValueFrom};
use serde_json::Value;

fn lines(bytes: Vec<u8>) -> Vec<Value> {
    String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn every_record_is_one_tagged_line() {
    let sample = read_zero_sample();
    let watches = [watch("target_var", 0x7ffd0000, Access::Write)];
    let cpus: BTreeSet<u32> = [0, 1].into();
    let mut p = Json::new(Vec::new(), Vec::new());
    p.header(&system_wide_header(&watches, &cpus, "kallsyms fixture"))
        .unwrap();
    p.armed(2, &cpus, 5).unwrap();
    each_hit(&table(), &watches, &[(sample, "reader", 0)], |hit| {
        p.hit(hit).unwrap()
    });
    let lost = |count, counted| StreamEvent::Lost {
        cpu: 1,
        count,
        counted,
    };
    p.event(&lost(3, false), 6).unwrap();
    p.event(&lost(12, true), 6).unwrap();
    p.event(
        &StreamEvent::CpuArmFailed {
            cpu: 1,
            reason: "busy".into(),
            kind: "busy",
        },
        7,
    )
    .unwrap();
    let mut summary = Summary::default();
    summary.hits_by_cpu.insert(1, 1);
    summary.stop = Some(StopReason::Signal(libc::SIGINT as u32));
    p.finish(&summary).unwrap();
    let (out, err) = p.into_inner();
    let v = lines(out);
    let types: Vec<&str> = v.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "header",
            "armed",
            "hit",
            "lost",
            "lost",
            "cpu_arm_failed",
            "summary"
        ]
    );
    // One type, its fields kept; `counted` tells the hits the kernel's totals hold from the lost ones.
    let lost: Vec<(u64, bool)> = v[3..5]
        .iter()
        .map(|r| {
            (
                r["count"].as_u64().unwrap(),
                r["counted"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(lost, [(3, false), (12, true)]);
    assert_eq!(
        (&v[3]["cpu"], &v[3]["time_ns"]),
        (&Value::from(1), &Value::from(6))
    );
    assert_eq!(v[0]["targets"][0]["addr"], "0x7ffd0000");
    let hit = &v[2];
    assert_eq!(hit["time_ns"], 412_123_456_789u64);
    assert_eq!(
        (hit["pid"].as_u64(), hit["tid"].as_u64()),
        (Some(1234), Some(1235))
    );
    assert_eq!(hit["target"], "target_var");
    assert_eq!(hit["ip"]["sym"], "read_zero");
    assert_eq!(hit["ip"]["addr"], "0xffffffff81000077");
    assert_eq!(hit["chain"][1]["sym"], "vfs_read");
    assert_eq!(hit["chain"][1]["off"], 0xbb);
    assert_eq!(hit["chain"][2]["kernel"], false);
    assert_eq!(hit["chain"][2]["sym"], Value::Null);
    assert_eq!(v[5]["kind"], "busy");
    assert_eq!(v[6]["stop"], "signal");
    assert_eq!(v[6]["signal"], "SIGINT");
    assert_eq!(v[6]["hits_by_cpu"][0]["count"], 1);
    let err = String::from_utf8(err).unwrap();
    assert!(err.contains("could not be armed: busy"), "{err}");
    assert!(err.contains("ksymwatch: 1 hits (cpu1 1)"), "{err}");
}

/// The hit records of a user store hit once with each of `values`.
fn hit_records(values: &[HitValue]) -> Vec<Value> {
    let mut p = Json::new(Vec::new(), Vec::new());
    each_value_of_a_user_store(values, |hit| p.hit(hit).unwrap());
    lines(p.into_inner().0)
}

/// A `--value` hit's value.
fn written(value: Option<u64>, old: Option<u64>, from: ValueFrom) -> HitValue {
    HitValue::Written { value, old, from }
}

/// `value`: a hex string of the watched integer (64-bit values intact), `null` when the process could
/// not be read, absent for a system-wide watch's hit.
#[test]
fn a_process_hit_carries_its_value() {
    let v = hit_records(&[
        HitValue::Read(0x2a),
        HitValue::Read(0xfedc_ba98_7654_3210),
        HitValue::Unreadable,
        HitValue::NotRead,
    ]);
    assert_eq!(v[0]["value"], "0x2a");
    assert_eq!(v[1]["value"], "0xfedcba9876543210");
    assert_eq!(v[2]["value"], Value::Null);
    assert!(v[2].as_object().unwrap().contains_key("value"), "{}", v[2]);
    assert!(!v[3].as_object().unwrap().contains_key("value"), "{}", v[3]);
    assert!(v.iter().all(|h| h["type"] == "hit" && h["len"] == 8));
}

/// `--value`: `value` and `old` as hex strings, each `null` when unknown and never left out.
#[test]
fn a_value_hit_carries_value_and_old() {
    let v = hit_records(&[
        written(Some(0x1f4), Some(0x1f3), ValueFrom::Insn),
        written(Some(0xfedc_ba98_7654_3210), None, ValueFrom::Insn),
        written(None, Some(0), ValueFrom::Insn),
        written(None, None, ValueFrom::Insn),
    ]);
    let pairs: Vec<(&Value, &Value)> = v.iter().map(|h| (&h["value"], &h["old"])).collect();
    assert_eq!(
        pairs,
        [
            (&"0x1f4".into(), &"0x1f3".into()),
            (&"0xfedcba9876543210".into(), &Value::Null),
            (&Value::Null, &"0x0".into()),
            (&Value::Null, &Value::Null),
        ]
    );
    for h in &v {
        let h = h.as_object().unwrap();
        assert!(h.contains_key("value") && h.contains_key("old"), "{h:?}");
    }
    assert_eq!(v[0]["value_from"], "insn");
    assert!(
        v[2].get("value_from").is_none(),
        "an unknown value comes from nowhere"
    );
}

/// `value_from` says whether the value is the instruction's (exact) or memory's at the trap; `raced`
/// is what memory held when it differed.
#[test]
fn a_value_hit_says_where_its_value_came_from() {
    let v = hit_records(&[
        written(Some(1), None, ValueFrom::Memory),
        written(Some(1), None, ValueFrom::Raced { memory: 7 }),
    ]);
    assert_eq!(
        (&v[0]["value_from"], v[0].get("raced")),
        (&"memory".into(), None)
    );
    assert_eq!(
        (&v[1]["value_from"], &v[1]["raced"]),
        (&"insn".into(), &"0x7".into())
    );
}

/// A plain process watch's hit has no `old`: only `--value` knows it.
#[test]
fn only_a_value_hit_has_old() {
    let v = hit_records(&[HitValue::Read(1), HitValue::Unreadable, HitValue::NotRead]);
    assert!(v
        .iter()
        .all(|h| !h.as_object().unwrap().contains_key("old")));
}

/// `--summary` with `--value`: `by_value`, one entry per target, most frequent first; absent without
/// `--value`.
#[test]
fn the_summary_counts_values_written() {
    let record = |values: &[HitValue]| {
        let mut tally = crate::report::summary::Tally::default();
        each_value_of_a_user_store(values, |hit| tally.add(hit));
        let summary = Summary {
            tally: Some(tally),
            ..Summary::default()
        };
        let mut p = Json::new(Vec::new(), Vec::new());
        p.finish(&summary).unwrap();
        lines(p.into_inner().0).remove(0)
    };
    let w = |v| written(Some(v), None, ValueFrom::Insn);
    let v = record(&[w(0x1f3), w(0x1f4), w(0x1f4), HitValue::Read(9)]);
    assert_eq!(
        v["by_value"],
        serde_json::json!([{"target": "counter", "target_index": 0, "values": [
            {"value": "0x1f4", "count": 2}, {"value": "0x1f3", "count": 1}], "overflowed": false}])
    );
    let many: Vec<HitValue> = (0..=crate::report::summary::VALUES_MAX as u64)
        .map(w)
        .collect();
    let v = record(&many);
    assert_eq!(v["by_value"][0]["values"], serde_json::json!([]));
    assert_eq!(v["by_value"][0]["overflowed"], true);
    let v = record(&[HitValue::Read(9)]);
    assert!(v.get("by_value").is_none(), "{v}");
    assert!(v.get("by_comm").is_some(), "{v}");
}

#[test]
fn a_strict_hotplug_stop_is_named_in_both_summaries() {
    let mut p = Json::new(Vec::new(), Vec::new());
    let summary = Summary {
        stop: Some(StopReason::StrictHotplug(1)),
        ..Summary::default()
    };
    p.finish(&summary).unwrap();
    let (out, err) = p.into_inner();
    let v = lines(out);
    assert_eq!(
        (&v[0]["stop"], &v[0]["signal"]),
        (&"strict_hotplug".into(), &Value::Null)
    );
    let err = String::from_utf8(err).unwrap();
    assert!(
        err.ends_with(", stopped: cpu 1 could not be armed (--strict-hotplug)\n"),
        "{err}"
    );
}

/// The hand-written strings escape exactly as serde_json does: every ASCII character, and non-ASCII
/// text left as it is.
#[test]
fn strings_escape_like_serde() {
    let mut all: String = (0u8..0x80).map(char::from).collect();
    all.push_str("ümlaut-ß \u{2028} 日本");
    for text in [all.as_str(), "", "plain", "\"", "a\\b", "\u{7f}x\u{1f}"] {
        let mut s = String::new();
        push_string(&mut s, text);
        assert_eq!(s, serde_json::to_string(text).unwrap(), "{text:?}");
    }
}

/// A hit record written by hand is serde's [`Record::Hit`] byte for byte: kernel and user frames,
/// unknown ones, `--lines` annotations, every kind of value, a comm that needs escaping; spelled afresh
/// and from a chain's cached spelling, the first time and again.
#[test]
fn hits_are_serdes_bytes() {
    use crate::report::{Rendered, SourceLine};
    use std::sync::Arc;
    let s = decoded(&encode::sample(
        0xffffffff81000077,
        1234,
        1235,
        412_123_456_789,
        0x7ffd0000,
        1,
        &[encode::KERNEL, 0xffffffff81000077, encode::USER, 0x401000],
    ));
    let named = ResolvedFrame {
        module: Some("mod\"x".into()),
        line: Some(Arc::new(SourceLine {
            location: "fs/read_write.c:30".into(),
            inlined: vec!["rw_verify_area (fs/read_write.c:450) [inlined]".into()],
        })),
        ..read_zero_frame()
    };
    let no_inlined = ResolvedFrame {
        line: Some(Arc::new(SourceLine {
            location: "x.c:1".into(),
            inlined: vec![],
        })),
        ..ResolvedFrame::unknown(0xffffffff81000010, true)
    };
    let user = ResolvedFrame {
        sym: Some("main".into()),
        off: 0x1c,
        binary: Some("writer".into()),
        ..ResolvedFrame::unknown(0x401000, false)
    };
    let chain = [
        named.clone(),
        no_inlined,
        user,
        ResolvedFrame::unknown(0x7f00, false),
        ResolvedFrame {
            unnamed: Some("the process's memory maps could not be read"),
            ..ResolvedFrame::unknown(0x7f10, false)
        },
    ];
    let watches = [
        watch("target_var", 0x7ffd0000, Access::Write),
        watch("t\tab", 0x10, Access::ReadWrite),
        crate::report::testutil::percpu_watch("runqueues.nr_running", None),
    ];
    let rendered = Rendered::default();
    // A container's cgroup, a plain one with a name to escape, one removed before it was named.
    let cgroups = [
        crate::report::cgroup::tests::pod(),
        CgroupName::new(1, Some("/a \"b\"".into())),
        CgroupName::new(u64::MAX, None),
    ];
    let known = [None, Some(0), Some(0x1f4), Some(u64::MAX)];
    let froms = [
        ValueFrom::Insn,
        ValueFrom::Memory,
        ValueFrom::NoStart,
        ValueFrom::Raced { memory: 0x2a },
    ];
    let mut written = Vec::new();
    for value in known {
        for old in known {
            for from in froms {
                written.push(HitValue::Written { value, old, from });
            }
        }
    }
    for value in [
        HitValue::NotRead,
        HitValue::Unreadable,
        HitValue::Read(0),
        HitValue::Read(u64::MAX),
    ]
    .into_iter()
    .chain(written)
    {
        for (w, comm) in [(0, "writer"), (1, "we\"ird\n\u{1}ü"), (2, "percpu")] {
            for (r, cgroup) in [
                (None, None),
                (Some(&rendered), Some(&cgroups[0])),
                (Some(&rendered), Some(&cgroups[1])),
                (None, Some(&cgroups[2])),
            ] {
                let hit = Hit {
                    sample: &s,
                    watch: &watches[w],
                    watch_index: w,
                    comm,
                    ip: &named,
                    chain: &chain,
                    value,
                    rendered: r,
                    cgroup,
                };
                let mut line = String::new();
                push_hit(&mut line, &hit);
                assert_eq!(line, serde_json::to_string(&Record::hit(&hit)).unwrap());
            }
        }
    }
}

/// A per-CPU target's hit names whose copy it hit; the header lists the copies and who watches which.
#[test]
fn a_per_cpu_hit_names_its_copy() {
    use crate::report::testutil::{each_hit, percpu_watch, table};
    let s = decoded(&encode::sample(
        0xffffffff81000077,
        1,
        1,
        5,
        0x7ffd0000,
        1,
        &[],
    ));
    let watches = [percpu_watch("runqueues.nr_running", None)];
    let mut p = Json::new(Vec::new(), Vec::new());
    let cpus = [0, 1].into();
    p.header(&system_wide_header(&watches, &cpus, "kallsyms"))
        .unwrap();
    each_hit(&table(), &watches, &[(s, "a", 0)], |hit| {
        p.hit(hit).unwrap()
    });
    let out = String::from_utf8(p.into_inner().0).unwrap();
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[0]["targets"][0]["percpu"],
        serde_json::json!({"offset": "0x10", "copy": null, "copies": [
            {"cpu": 0, "addr": "0x7ffc0010"}, {"cpu": 1, "addr": "0x7ffd0000"}]})
    );
    assert_eq!(lines[1]["copy"], 1, "{out}");
    assert_eq!(lines[1]["addr"], "0x7ffd0000", "{out}");
}

#[test]
fn control_records() {
    let mut p = Json::new(Vec::new(), Vec::new());
    let events = [
        StreamEvent::Retargeted(crate::report::Retarget {
            index: 0,
            watch: watch("target_var2", 0x5555_0040, Access::ReadWrite),
            covered: Covered::Cpus(2),
            took_ns: 41_000,
            enabled: true,
        }),
        StreamEvent::Switched { on: false },
        StreamEvent::Switched { on: true },
        StreamEvent::ControlRefused {
            command: "stop".into(),
            reason: "unknown command `stop`".into(),
            watching: "x".into(),
            kind: "bad_command",
        },
    ];
    for (i, e) in events.iter().enumerate() {
        p.event(e, 10 + i as u64).unwrap();
    }
    let (out, err) = p.into_inner();
    let v = lines(out);
    assert_eq!(v[0]["type"], "watch");
    assert_eq!(v[0]["time_ns"], 10);
    assert_eq!(v[0]["target"]["name"], "target_var2");
    assert_eq!(v[0]["target"]["addr"], "0x55550040");
    assert_eq!(v[0]["target"]["access"], "RW");
    assert_eq!(v[0]["cpus"], 2);
    assert!(v[0].get("threads").is_none());
    assert_eq!(v[0]["took_ns"], 41_000);
    assert_eq!(v[0]["enabled"], true);
    assert_eq!(v[1]["type"], "watch_off");
    assert_eq!(v[2]["type"], "watch_on");
    assert_eq!(v[3]["type"], "control_refused");
    assert_eq!(v[3]["command"], "stop");
    assert_eq!(v[3]["watching"], "x");
    assert_eq!(v[3]["kind"], "bad_command");
    assert!(String::from_utf8(err)
        .unwrap()
        .contains("control `stop` refused"));
}

/// A refused arming is one `error` record, with the refusal's kind and exit code.
#[test]
fn a_refused_arming_is_one_error_record() {
    let mut p = Json::new(Vec::new(), Vec::new());
    p.refused(
        "kernel_breakpoints_refused",
        "cpu 0: this kernel refuses",
        4,
    )
    .unwrap();
    let (out, err) = p.into_inner();
    let v = lines(out);
    assert_eq!(v.len(), 1);
    assert_eq!(
        v[0],
        serde_json::json!({"type": "error", "kind": "kernel_breakpoints_refused",
            "reason": "cpu 0: this kernel refuses", "exit_code": 4})
    );
    assert!(err.is_empty(), "the error line is the caller's");
}

#[test]
fn module_unloaded_record_and_stop() {
    let mut p = Json::new(Vec::new(), Vec::new());
    let e = StreamEvent::ModuleUnloaded {
        module: "nfs".into(),
        targets: vec!["nfs:nfs_counter".into()],
    };
    p.event(&e, 12).unwrap();
    let summary = Summary {
        stop: Some(StopReason::ModuleUnloaded),
        ..Summary::default()
    };
    p.finish(&summary).unwrap();
    let v = lines(p.into_inner().0);
    assert_eq!(v[0]["type"], "module_unloaded");
    assert_eq!(v[0]["time_ns"], 12);
    assert_eq!(v[0]["module"], "nfs");
    assert_eq!(v[0]["targets"], serde_json::json!(["nfs:nfs_counter"]));
    assert_eq!(v[1]["type"], "summary");
    assert_eq!(v[1]["stop"], "module_unloaded");
}

/// A hit whose record carried the writer's cgroup names it: id, path, and the container's id and runtime
/// as fields of their own; a cgroup removed before it was named keeps its id, its path `null`; a hit
/// without one has none of these fields.
#[test]
fn a_hit_names_its_writers_cgroup_and_container() {
    use crate::report::cgroup::tests::{pod, ID};
    let s = decoded(&encode::sample(0x401000, 7, 7, 5, 0x7ffd0000, 0, &[]));
    let w = watch("target_var", 0x7ffd0000, Access::Write);
    let ip = ResolvedFrame::unknown(0x401000, false);
    let line = |cgroup: Option<&CgroupName>| -> Value {
        let mut out = String::new();
        push_hit(
            &mut out,
            &crate::report::testutil::app_hit(&s, &w, &ip, cgroup),
        );
        serde_json::from_str(&out).unwrap()
    };
    let v = line(Some(&pod()));
    assert_eq!(v["cgroup_id"], 0x1a);
    assert!(v["cgroup"]
        .as_str()
        .unwrap()
        .ends_with(&format!("cri-containerd-{ID}.scope")));
    assert_eq!(v["container_id"], ID);
    assert_eq!(v["container_runtime"], "containerd");
    let v = line(Some(&CgroupName::new(9, None)));
    assert_eq!(
        (v["cgroup_id"].as_u64(), v["cgroup"].is_null()),
        (Some(9), true)
    );
    assert!(v.get("container_id").is_none());
    let v = line(None);
    assert!(v.get("cgroup_id").is_none() && v.get("cgroup").is_none());
}
