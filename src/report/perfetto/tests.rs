//! The trace read back with the same message types: tracks, hits with their annotations resolved through
//! the interned tables, sequence flags, counters and marks.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use prost::Message;

use super::proto::{self, AnnotationValue, Data, Trace};
use super::*;
use crate::model::watch::Access;
use crate::perf::record::{encode, Sample};
use crate::report::testutil::{self, each_hit, each_value_of_a_user_store, table};
use crate::report::{Covered, StopReason};

const CLOCKS: Clocks = Clocks {
    monotonic_ns: 1_000,
    boottime_ns: 5_000,
};

fn header_of<'a>(
    watches: &'a [crate::model::watch::Watch],
    cpus: &'a BTreeSet<u32>,
    processes: &'a [(u32, String)],
) -> Header<'a> {
    Header {
        watches,
        cpus,
        source: "fixture",
        processes,
        threads: 0,
        values: false,
        condition: None,
        objects: None,
        cgroups: &[],
    }
}

/// A kernel chain through read_zero and vfs_read, as `dd` (pid 9, `tid`) on `cpu` at `time`.
fn read_sample(tid: u32, cpu: u32, time: u64) -> Sample {
    let chain = testutil::READ_CHAIN;
    testutil::decoded(&encode::sample(chain[1], 9, tid, time, 0x1000, cpu, &chain))
}

/// The trace of `hits` (with no value), stream events after them, and the summary.
fn trace_of(hits: &[(Sample, &str, usize)], events: &[StreamEvent], summary: &Summary) -> Vec<u8> {
    let watches = [testutil::watch("jiffies", 0x1000, Access::Write)];
    let cpus = BTreeSet::from([0, 1]);
    let mut p = Perfetto::new(Vec::new(), Some(CLOCKS));
    p.header(&header_of(&watches, &cpus, &[])).unwrap();
    p.armed(2, &cpus, 100).unwrap();
    each_hit(&table(), &watches, hits, |hit| p.hit(hit).unwrap());
    for e in events {
        p.event(e, 2_000).unwrap();
    }
    p.finish(summary).unwrap();
    p.into_inner()
}

/// A track event with its name and annotations resolved.
#[derive(Debug)]
struct Event {
    time: u64,
    track: u64,
    name: String,
    kind: i32,
    counter: Option<i64>,
    args: HashMap<String, Arg>,
}

#[derive(Debug, PartialEq)]
enum Arg {
    Str(String),
    Uint(u64),
    Bool(bool),
}

/// Every track event of `bytes`, resolved through the interned tables as a reader does, and the track
/// descriptors by uuid.
fn read(bytes: &[u8]) -> (Vec<Event>, HashMap<u64, proto::TrackDescriptor>) {
    let trace = Trace::decode(bytes).unwrap();
    let (mut names, mut arg_names, mut strings) = (HashMap::new(), HashMap::new(), HashMap::new());
    let (mut events, mut tracks) = (Vec::new(), HashMap::new());
    for p in trace.packet {
        if let Some(i) = p.interned_data {
            for n in i.event_names {
                assert!(names.insert(n.iid.unwrap(), n.name.unwrap()).is_none());
            }
            for n in i.debug_annotation_names {
                assert!(arg_names.insert(n.iid.unwrap(), n.name.unwrap()).is_none());
            }
            for s in i.debug_annotation_string_values {
                let text = String::from_utf8(s.str.unwrap()).unwrap();
                assert!(strings.insert(s.iid.unwrap(), text).is_none());
            }
        }
        match p.data.unwrap() {
            Data::TrackDescriptor(t) => {
                tracks.insert(t.uuid.unwrap(), t);
            }
            Data::TrackEvent(e) => {
                assert_eq!(p.timestamp_clock_id, Some(proto::BUILTIN_CLOCK_MONOTONIC));
                let args = e
                    .debug_annotations
                    .iter()
                    .map(|a| {
                        let v = match a.value.clone().unwrap() {
                            AnnotationValue::StringIid(id) => Arg::Str(strings[&id].clone()),
                            AnnotationValue::String(s) => Arg::Str(s),
                            AnnotationValue::Uint(n) | AnnotationValue::Pointer(n) => Arg::Uint(n),
                            AnnotationValue::Bool(b) => Arg::Bool(b),
                        };
                        (arg_names[&a.name_iid.unwrap()].clone(), v)
                    })
                    .collect();
                events.push(Event {
                    time: p.timestamp.unwrap(),
                    track: e.track_uuid.unwrap(),
                    name: e.name_iid.map(|id| names[&id].clone()).unwrap_or_default(),
                    kind: e.r#type.unwrap(),
                    counter: e.counter_value,
                    args,
                });
            }
            Data::ClockSnapshot(_) => {}
        }
    }
    (events, tracks)
}

/// The counter events on `track`: (time, value), in order.
fn counter_values(events: &[Event], track: u64) -> Vec<(u64, i64)> {
    events
        .iter()
        .filter(|e| e.track == track && e.kind == proto::TYPE_COUNTER)
        .map(|e| (e.time, e.counter.unwrap()))
        .collect()
}

/// The not-printed and the lost counter of `cpu`, each as `counter_values` gives it.
fn cpu_counters(events: &[Event], cpu: u32) -> [Vec<(u64, i64)>; 2] {
    [Per::Unprinted, Per::Lost].map(|kind| counter_values(events, uuid(kind, cpu)))
}

fn str_arg<'a>(e: &'a Event, k: &str) -> &'a str {
    match e.args.get(k) {
        Some(Arg::Str(s)) => s,
        other => panic!("{k}: {other:?} in {e:?}"),
    }
}

fn occurrences(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

#[test]
fn every_hit_is_an_instant_on_its_thread_and_its_cpu_with_the_chain_interned_once() {
    const N: usize = 1000;
    let hits: Vec<(Sample, &str, usize)> = (0..N)
        .map(|n| {
            (
                read_sample(10 + (n % 2) as u32, (n % 2) as u32, 1_000 + n as u64),
                "dd",
                0,
            )
        })
        .collect();
    let bytes = trace_of(&hits, &[], &Summary::default());
    let (events, tracks) = read(&bytes);

    let on_threads: Vec<&Event> = events.iter().filter(|e| e.track >> 32 == 2).collect();
    assert_eq!(on_threads.len(), N);
    let chain = "read_zero+0x10/0x100\nvfs_read+0x10/0x100\n0x401000 [dd]";
    for (n, e) in on_threads.iter().enumerate() {
        assert_eq!(e.kind, proto::TYPE_INSTANT);
        assert_eq!(e.name, "jiffies");
        assert_eq!(e.time, 1_000 + n as u64);
        assert_eq!(str_arg(e, "chain"), chain);
        assert_eq!(str_arg(e, "ip"), "read_zero+0x10/0x100");
        assert_eq!(str_arg(e, "target"), "jiffies");
        assert_eq!(str_arg(e, "access"), "W");
        assert_eq!(e.args["addr"], Arg::Uint(0x1000));
        assert_eq!(e.args["cpu"], Arg::Uint((n % 2) as u64));
        assert_eq!(e.args["in_kernel"], Arg::Bool(true));
        assert!(
            !e.args.contains_key("value"),
            "a system-wide watch reads no value"
        );
    }
    let on_cpus: Vec<&Event> = events.iter().filter(|e| e.track >> 32 == 3).collect();
    assert_eq!(on_cpus.len(), N);
    assert_eq!(str_arg(on_cpus[1], "thread"), "dd-11");

    // Written once, whatever the number of hits: the chain, and a name.
    assert_eq!(occurrences(&bytes, chain.as_bytes()), 1);
    assert_eq!(occurrences(&bytes, b"in_kernel"), 1);
    // Two packets a hit (thread and CPU), ~100 bytes together: the chain's text is not among them.
    assert!(bytes.len() < N * 110, "{} bytes for {N} hits", bytes.len());

    let thread = &tracks[&uuid(Per::Thread, 11)];
    assert_eq!(thread.name.as_deref(), Some("dd-11"));
    let t = thread.thread.as_ref().unwrap();
    assert_eq!(
        (t.pid, t.tid, t.thread_name.as_deref()),
        (Some(9), Some(11), Some("dd"))
    );
    let process = tracks[&uuid(Per::Process, 9)].process.as_ref().unwrap();
    assert_eq!(
        (process.pid, process.process_name.as_deref()),
        (Some(9), Some("dd"))
    );
    assert_eq!(tracks[&uuid(Per::Cpu, 1)].name.as_deref(), Some("cpu 1"));
    assert_eq!(
        tracks.len(),
        2 + 1 + 2 + 2,
        "session, filtered, a process, two threads, two CPUs"
    );
}

#[test]
fn the_first_packet_clears_the_sequence_and_events_need_it() {
    let bytes = trace_of(
        &[(read_sample(10, 0, 1_000), "dd", 0)],
        &[],
        &Summary::default(),
    );
    let packets = Trace::decode(bytes.as_slice()).unwrap().packet;
    let first = &packets[0];
    assert_eq!(
        first.sequence_flags,
        Some(proto::SEQ_INCREMENTAL_STATE_CLEARED)
    );
    assert_eq!(first.first_packet_on_sequence, Some(true));
    let Some(Data::ClockSnapshot(c)) = &first.data else {
        panic!("{first:?}")
    };
    let clocks: Vec<(Option<u32>, Option<u64>)> =
        c.clocks.iter().map(|c| (c.clock_id, c.timestamp)).collect();
    assert_eq!(clocks, [(Some(6), Some(5_000)), (Some(3), Some(1_000))]);
    for p in &packets[1..] {
        assert_eq!(p.trusted_packet_sequence_id, Some(SEQUENCE));
        let event = matches!(p.data, Some(Data::TrackEvent(_)));
        assert_eq!(p.sequence_flags.is_some(), event, "{p:?}");
        if event {
            assert_eq!(p.sequence_flags, Some(proto::SEQ_NEEDS_INCREMENTAL_STATE));
        } else {
            assert!(p.interned_data.is_none());
        }
    }
}

#[test]
fn the_file_is_a_trace_after_every_flush() {
    let watches = [testutil::watch("jiffies", 0x1000, Access::Write)];
    let cpus = BTreeSet::from([0]);
    let mut p = Perfetto::new(Vec::new(), Some(CLOCKS));
    p.header(&header_of(&watches, &cpus, &[(9, "dd".into())]))
        .unwrap();
    p.armed(1, &cpus, 100).unwrap();
    let hits = vec![(read_sample(10, 0, 1_000), "dd", 0)];
    each_hit(&table(), &watches, &hits, |hit| p.hit(hit).unwrap());
    p.flush().unwrap();
    let (events, _) = read(&p.out);
    assert_eq!(events.iter().filter(|e| e.name == "jiffies").count(), 2);
    assert!(!events.iter().any(|e| e.name == "stop"));
}

#[test]
fn values_are_hex_and_unknown_is_a_question_mark() {
    let watches = [testutil::watch("counter", 0x404028, Access::Write)];
    let cpus = BTreeSet::from([0]);
    let mut p = Perfetto::new(Vec::new(), None);
    p.header(&header_of(&watches, &cpus, &[])).unwrap();
    let values = [
        Value::Written {
            value: Some(0x2a),
            old: None,
            from: ValueFrom::Insn,
        },
        Value::Written {
            value: Some(0x2a),
            old: Some(1),
            from: ValueFrom::Raced { memory: 0x2b },
        },
        Value::Written {
            value: Some(3),
            old: Some(2),
            from: ValueFrom::Memory,
        },
        Value::Unreadable,
        Value::Read(7),
    ];
    each_value_of_a_user_store(&values, |hit| p.hit(hit).unwrap());
    let (events, _) = read(&p.into_inner());
    let hits: Vec<&Event> = events.iter().filter(|e| e.track >> 32 == 2).collect();
    assert_eq!(hits.len(), values.len());
    assert_eq!(hits[0].args["value"], Arg::Uint(0x2a));
    assert_eq!(str_arg(hits[0], "old"), "?");
    assert_eq!(str_arg(hits[0], "value_from"), "insn");
    assert_eq!(hits[1].args["raced"], Arg::Uint(0x2b));
    assert_eq!(str_arg(hits[2], "value_from"), "memory");
    assert_eq!(str_arg(hits[3], "value"), "?");
    assert!(!hits[3].args.contains_key("old"));
    assert_eq!(hits[4].args["value"], Arg::Uint(7));
    assert_eq!(hits[0].args["in_kernel"], Arg::Bool(false));
    assert_eq!(str_arg(hits[0], "chain"), "0x401136 [writer]");
}

/// Without the kernel's totals (the per-thread path) the hits a full ring dropped are not printed and
/// lost: both counters hold them, and the stop says how many were lost.
#[test]
fn lost_and_filtered_are_counters_and_the_session_marks_its_events() {
    let watch = testutil::watch("pid_max", 0x2000, Access::ReadWrite);
    let events = [
        StreamEvent::Lost {
            cpu: 1,
            count: 5,
            counted: false,
        },
        StreamEvent::Lost {
            cpu: 1,
            count: 2,
            counted: false,
        },
        StreamEvent::CpuOffline { cpu: 1 },
        StreamEvent::CpuOnline {
            cpu: 1,
            after_uevent_ns: Some(10),
            open_ns: 3,
            enabled: true,
        },
        StreamEvent::Retargeted(crate::report::Retarget {
            index: 0,
            watch,
            covered: Covered::Cpus(2),
            took_ns: 40,
            enabled: true,
        }),
        StreamEvent::Switched { on: false },
        StreamEvent::ProcessExec {
            pid: 9,
            comm: "sh".into(),
        },
    ];
    let summary = Summary {
        lost_by_cpu: [(0, 4), (1, 7)].into(),
        filtered: 12,
        stop: Some(StopReason::Signal(libc::SIGINT as u32)),
        elapsed: Duration::from_secs(3),
        ..Summary::default()
    };
    let (events, tracks) = read(&trace_of(&[], &events, &summary));
    let end = 100 + 3_000_000_000;
    for (cpu, unprinted, lost) in [
        (
            1,
            vec![(100, 0), (2_000, 5), (2_000, 7)],
            vec![(100, 0), (end, 7)],
        ),
        // cpu 0's loss reached the summary without a record.
        (0, vec![(100, 0), (end, 4)], vec![(100, 0), (end, 4)]),
    ] {
        assert_eq!(cpu_counters(&events, cpu), [unprinted, lost], "cpu {cpu}");
    }
    assert_eq!(
        counter_values(&events, FILTERED_TRACK),
        [(100, 0), (end, 12)]
    );
    for (kind, name) in [
        (Per::Unprinted, "not printed cpu 1"),
        (Per::Lost, "lost cpu 1"),
    ] {
        let track = &tracks[&uuid(kind, 1)];
        assert!(track.counter.is_some());
        assert_eq!(track.parent_uuid, Some(uuid(Per::Cpu, 1)));
        assert_eq!(track.name.as_deref(), Some(name));
    }

    let marks: Vec<&str> = events
        .iter()
        .filter(|e| e.track == SESSION_TRACK)
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(
        marks,
        [
            "armed",
            "not printed",
            "not printed",
            "cpu offline",
            "cpu online",
            "watch",
            "watch off",
            "exec",
            "stop"
        ]
    );
    let watch = events.iter().find(|e| e.name == "watch").unwrap();
    assert_eq!(str_arg(watch, "target"), "pid_max");
    assert_eq!(str_arg(watch, "access"), "RW");
    assert_eq!(watch.args["cpus"], Arg::Uint(2));
    let stop = events.iter().find(|e| e.name == "stop").unwrap();
    assert_eq!(stop.time, end);
    assert_eq!(str_arg(stop, "reason"), "signal SIGINT");
    assert_eq!(stop.args["lost"], Arg::Uint(11));
    let mark = events.iter().find(|e| e.name == "not printed").unwrap();
    assert_eq!(
        (&mark.args["cpu"], &mark.args["count"]),
        (&Arg::Uint(1), &Arg::Uint(5))
    );
}

/// From the kernel's totals, a full ring's records are hits not printed, which the totals count: the
/// marks and the per-CPU counter say "not printed", and "lost" (a counter, the stop's argument) is only
/// the hits in no total, as in the other outputs' summaries.
#[test]
fn hits_a_full_ring_dropped_are_not_printed_and_only_those_in_no_total_lost() {
    let events = [StreamEvent::Lost {
        cpu: 1,
        count: 5,
        counted: true,
    }];
    let summary = Summary {
        hits_by_cpu: [(1, 100)].into(),
        // 5 marked, 4 more at the end of the burst; 2 of the kept hits found the totals' table full.
        unprinted_by_cpu: [(1, 9)].into(),
        lost_by_cpu: [(1, 2)].into(),
        from_totals: true,
        elapsed: Duration::from_secs(1),
        ..Summary::default()
    };
    let (events, tracks) = read(&trace_of(&[], &events, &summary));
    let end = 100 + 1_000_000_000;
    assert_eq!(
        cpu_counters(&events, 1),
        [
            vec![(100, 0), (2_000, 5), (end, 9)],
            vec![(100, 0), (end, 2)]
        ]
    );
    assert_eq!(
        tracks[&uuid(Per::Unprinted, 1)].name.as_deref(),
        Some("not printed cpu 1")
    );
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assert!(!names.contains(&"lost"), "{names:?}");
    let stop = events.iter().find(|e| e.name == "stop").unwrap();
    assert_eq!(stop.args["not printed"], Arg::Uint(9));
    assert_eq!(stop.args["lost"], Arg::Uint(2));
    assert_eq!(stop.args["hits"], Arg::Uint(100));

    // Nothing in no total: no lost counter at all.
    let summary = Summary {
        lost_by_cpu: Default::default(),
        ..summary
    };
    let (_, tracks) = read(&trace_of(
        &[],
        &[StreamEvent::Lost {
            cpu: 1,
            count: 5,
            counted: true,
        }],
        &summary,
    ));
    assert!(!tracks.contains_key(&uuid(Per::Lost, 1)));
}

/// A thread that renames itself stays one track, named as trace processor names it: the track keeps its
/// first name, the thread takes the newest `thread_name`; the CPU tracks name the writer as its track is
/// named, and hits after the rename carry the name they were made under as `comm`.
#[test]
fn a_renamed_thread_stays_one_track() {
    let hits: Vec<(Sample, &str, usize)> = ["dd", "dd", "renamed", "renamed", "dd"]
        .iter()
        .enumerate()
        .map(|(n, comm)| (read_sample(11, 0, 1_000 + n as u64), *comm, 0))
        .collect();
    let bytes = trace_of(&hits, &[], &Summary::default());
    let (events, tracks) = read(&bytes);
    let threads: Vec<&proto::TrackDescriptor> =
        tracks.values().filter(|t| t.thread.is_some()).collect();
    assert_eq!(threads.len(), 1, "{threads:?}");
    let thread = &tracks[&uuid(Per::Thread, 11)];
    assert_eq!(thread.name.as_deref(), Some("dd-11"), "the first name");
    assert_eq!(
        thread.thread.as_ref().unwrap().thread_name.as_deref(),
        Some("dd"),
        "the newest thread_name (renamed back)"
    );
    // Every description of the track: one uuid, its first name, each comm as thread_name in turn.
    let trace = Trace::decode(bytes.as_slice()).unwrap();
    let described: Vec<(Option<String>, Option<String>)> = trace
        .packet
        .into_iter()
        .filter_map(|p| match p.data {
            Some(Data::TrackDescriptor(t)) if t.uuid == Some(uuid(Per::Thread, 11)) => {
                Some((t.name, t.thread.and_then(|t| t.thread_name)))
            }
            _ => None,
        })
        .collect();
    let named = |thread: &str| (Some("dd-11".to_string()), Some(thread.to_string()));
    assert_eq!(described, [named("dd"), named("renamed"), named("dd")]);
    let on_thread: Vec<&Event> = events
        .iter()
        .filter(|e| e.track == uuid(Per::Thread, 11))
        .collect();
    assert_eq!(on_thread.len(), hits.len(), "every hit on the one track");
    let comms: Vec<Option<&str>> = on_thread
        .iter()
        .map(|e| e.args.contains_key("comm").then(|| str_arg(e, "comm")))
        .collect();
    assert_eq!(comms, [None, None, Some("renamed"), Some("renamed"), None]);
    let on_cpu: Vec<&Event> = events
        .iter()
        .filter(|e| e.track == uuid(Per::Cpu, 0))
        .collect();
    assert_eq!(on_cpu.len(), hits.len());
    assert!(on_cpu.iter().all(|e| str_arg(e, "thread") == "dd-11"));
    assert_eq!(str_arg(on_cpu[2], "comm"), "renamed");
}

/// A hit whose record carried the writer's cgroup has its id, path and container id as arguments; one
/// without has none of them.
#[test]
fn a_hit_names_its_writers_cgroup() {
    use crate::report::cgroup::{tests as cg, CgroupName};
    let watches = [testutil::watch("jiffies", 0x1000, Access::Write)];
    let cpus = BTreeSet::from([0, 1]);
    let mut p = Perfetto::new(Vec::new(), Some(CLOCKS));
    p.header(&header_of(&watches, &cpus, &[])).unwrap();
    let pod = cg::pod();
    let gone = CgroupName::new(9, None);
    let hits = [(read_sample(10, 0, 500), "dd", 0)];
    each_hit(&table(), &watches, &hits, |hit| {
        for c in [Some(&pod), Some(&gone), None] {
            p.hit(&Hit { cgroup: c, ..*hit }).unwrap();
        }
    });
    let (events, _) = read(&p.into_inner());
    let hits: Vec<&Event> = events
        .iter()
        .filter(|e| e.args.contains_key("chain"))
        .collect();
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0].args["cgroup_id"], Arg::Uint(0x1a));
    assert_eq!(str_arg(hits[0], "cgroup"), pod.path.as_deref().unwrap());
    assert_eq!(str_arg(hits[0], "container_id"), cg::ID);
    assert_eq!(str_arg(hits[1], "cgroup"), "(removed, id 9)");
    assert!(!hits[1].args.contains_key("container_id"));
    assert!(!hits[2].args.contains_key("cgroup_id") && !hits[2].args.contains_key("cgroup"));
}
