//! The summary's tally and its text and JSON renderings, on made-up hits.

use super::*;
use crate::model::watch::{Access, Watch};
use crate::perf::record::{encode, Sample};
use crate::report::testutil::{self, each_hit, table, watch};
use ksymwatch_symbols::SymbolTable;

fn sample(tid: u32, cpu: u32, chain: &[u64]) -> Sample {
    testutil::decoded(&encode::sample(chain[1], tid, tid, 1, 0x1000, cpu, chain))
}

fn tally_of(
    table: &SymbolTable,
    hits: &[(Sample, &str, usize)],
    watches: &[Watch],
) -> (Tally, Summary) {
    let mut tally = Tally::default();
    let mut summary = Summary::default();
    each_hit(table, watches, hits, |hit| {
        tally.add(hit);
        *summary.hits_by_cpu.entry(hit.sample.cpu).or_default() += 1;
    });
    (tally, summary)
}

/// The kernel's totals hand a key's hits over at once: counting them so is counting them one by one,
/// threads included; the text says the counts are the kernel's when the stream dropped hits.
#[test]
fn counting_n_at_once_is_counting_one_by_one() {
    let table = table();
    let watches = [watch("target_var", 0x1000, Access::Write)];
    let read = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000110];
    let hits = vec![
        (sample(5, 0, &read), "cat", 0),
        (sample(6, 1, &read), "dd", 0),
    ];
    let (mut once, _) = tally_of(&table, &hits, &watches);
    each_hit(&table, &watches, &hits, |hit| once.add_n(hit, 2));
    let mut each = Tally::default();
    each_hit(&table, &watches, &hits, |hit| {
        for _ in 0..3 {
            each.add(hit);
        }
    });
    assert_eq!(once.chains(), each.chains());
    assert_eq!(once.by_comm(), each.by_comm());
    assert_eq!(
        once.by_thread(),
        [
            ThreadCount {
                pid: 5,
                tid: 5,
                comm: "cat",
                count: 3
            },
            ThreadCount {
                pid: 6,
                tid: 6,
                comm: "dd",
                count: 3
            }
        ]
    );
    once.set_values(0, "target_var", &[(7, 5), (9, 1)], false);
    assert_eq!(once.by_value()[0].values(), [(7, 5), (9, 1)]);
    once.set_values(0, "target_var", &[], true);
    assert!(once.by_value()[0].overflowed());
    let mut summary = Summary {
        from_totals: true,
        ..Summary::default()
    };
    summary.hits_by_cpu.insert(0, 6);
    summary.unprinted_by_cpu.insert(0, 4);
    let text = text_of(&summary, &once, 0);
    assert!(
        text.starts_with(
            "# summary: 6 hits, 0 lost, 0 filtered, 0.000s, 4 not printed (ring full): every count \
             below is the kernel's, of every hit\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("# hits by thread:\n#        3  50.0%  cat-5 (pid 5)\n#        3  50.0%  dd-6 (pid 6)\n"),
        "{text}"
    );
}

#[test]
fn chains_most_frequent_first_with_totals() {
    let table = table();
    let watches = [watch("target_var", 0x1000, Access::Write)];
    let read = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000110];
    let ksys = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000210];
    let hits = vec![
        (sample(5, 0, &ksys), "cat", 0),
        (sample(6, 1, &read), "dd", 0),
        (sample(7, 1, &read), "dd", 0),
        (sample(8, 0, &read), "cat", 0),
    ];
    let (tally, mut summary) = tally_of(&table, &hits, &watches);
    let chains = tally.chains();
    assert_eq!(chains.len(), 2);
    assert_eq!(chains[0].count, 3);
    assert_eq!(chains[0].frames[1].sym.as_deref(), Some("vfs_read"));
    assert_eq!(chains[0].top_comms(), [("dd", 2), ("cat", 1)]);
    assert_eq!(tally.by_ip()[0].1.count, 4);
    assert_eq!(tally.by_comm(), [("cat", 2), ("dd", 2)]);
    summary.filtered = 9;
    let text = text_of(&summary, &tally, 1);
    assert!(
        text.starts_with("# summary: 4 hits, 0 lost, 9 filtered,"),
        "{text}"
    );
    for part in [
        "# call chains, most frequent first (2 unique):",
        "#        3 hits  75.0%  target=target_var  comm: dd 2, cat 1\n#  => read_zero+0x10/0x100\n#  => vfs_read+0x10/0x100\n",
        "# ... 1 more chains with 1 hits",
        "#        4 100.0%  read_zero+0x10/0x100",
        "#        2  50.0%  cpu1",
        "# ... 3 more threads with 3 hits (--top 0 shows all)",
    ] {
        assert!(text.contains(part), "`{part}` missing from:\n{text}");
    }
    assert!(text.lines().all(|l| l.starts_with('#')));
}

/// The text summary of `summary` and `tally`, `top` chains shown.
fn text_of(summary: &Summary, tally: &Tally, top: usize) -> String {
    let mut out = Vec::new();
    write_text(&mut out, summary, tally, top).unwrap();
    String::from_utf8(out).unwrap()
}

/// Asserts that the text summary ends with target `counter`'s by-value section, `rest` after its title.
fn assert_ends_with_by_value(summary: &Summary, tally: &Tally, rest: &str) {
    let text = text_of(summary, tally, 0);
    assert!(
        text.ends_with(&format!("#\n# by value written (target counter):{rest}")),
        "{text}"
    );
}

fn written(value: Option<u64>) -> Value {
    Value::Written {
        value,
        old: None,
        from: crate::report::ValueFrom::Insn,
    }
}

/// A tally of one user store hit once with each of `values`.
fn tally_of_values(values: &[Value]) -> (Tally, Summary) {
    let mut tally = Tally::default();
    let mut summary = Summary::default();
    testutil::each_value_of_a_user_store(values, |hit| {
        tally.add(hit);
        *summary.hits_by_cpu.entry(hit.sample.cpu).or_default() += 1;
    });
    (tally, summary)
}

/// Values written are counted per target, most frequent first then by value; only a known written
/// value counts, and a target with `--value` hits but no known value still has its (empty) table.
#[test]
fn values_written_most_frequent_first() {
    let mut values: Vec<Value> = [3, 1, 2, 1, 3, 2, 7]
        .into_iter()
        .map(|v| written(Some(v)))
        .collect();
    values.extend([
        written(Some(1)),
        written(None),
        Value::Read(1),
        Value::Unreadable,
        Value::NotRead,
    ]);
    let (tally, summary) = tally_of_values(&values);
    let t = tally.by_value();
    assert_eq!(t.len(), 1);
    assert_eq!((t[0].target, t[0].target_name.as_str()), (0, "counter"));
    assert_eq!(t[0].values(), [(1, 3), (2, 2), (3, 2), (7, 1)]);
    assert!(!t[0].overflowed());
    assert_ends_with_by_value(
        &summary,
        &tally,
        concat!(
            "\n",
            "#        3  25.0%  0x1\n",
            "#        2  16.7%  0x2\n",
            "#        2  16.7%  0x3\n",
            "#        1   8.3%  0x7\n",
        ),
    );

    let (tally, summary) = tally_of_values(&[written(None)]);
    assert_eq!(tally.by_value()[0].values(), []);
    assert_ends_with_by_value(&summary, &tally, " none known\n");
}

/// Without `--value` there is no table and no section.
#[test]
fn no_values_without_written() {
    let (tally, summary) = tally_of_values(&[Value::Read(1), Value::Unreadable, Value::NotRead]);
    assert!(tally.by_value().is_empty());
    assert!(!text_of(&summary, &tally, 0).contains("by value"));
}

/// 32 distinct values are counted; the 33rd drops the target's table for good.
#[test]
fn values_overflow_at_33_distinct() {
    let values: Vec<Value> = (0..VALUES_MAX as u64)
        .chain([0, 0])
        .map(|v| written(Some(v)))
        .collect();
    let (tally, _) = tally_of_values(&values);
    let t = tally.by_value();
    assert!(!t[0].overflowed());
    assert_eq!(t[0].values().len(), VALUES_MAX);
    assert_eq!(t[0].values()[0], (0, 3));

    let more: Vec<Value> = values
        .iter()
        .copied()
        .chain([written(Some(1000)), written(Some(0))])
        .collect();
    let (tally, summary) = tally_of_values(&more);
    let t = tally.by_value();
    assert!(t[0].overflowed());
    assert_eq!(t[0].values(), []);
    assert_ends_with_by_value(&summary, &tally, " more than 32 distinct values\n");
}

/// Counting a value already in its table, or on a target past its limit, allocates nothing.
#[test]
fn counting_a_known_value_allocates_nothing() {
    let mut tally = Tally::default();
    let values: Vec<Value> = (0..VALUES_MAX as u64 + 1)
        .map(|v| written(Some(v)))
        .collect();
    let watches = [
        watch("a", 0x1000, Access::Write),
        watch("b", 0x2000, Access::Write),
    ];
    let s = sample(5, 0, &[encode::KERNEL, 0xffffffff81000010]);
    let hits = [(s.clone(), "w", 0), (s, "w", 1)];
    each_hit(&table(), &watches, &hits, |hit| {
        // Target 0 keeps its table; target 1 overflows.
        let seen = if hit.watch_index == 0 {
            3
        } else {
            values.len()
        };
        for &value in &values[..seen] {
            tally.add(&Hit { value, ..*hit });
        }
        let before = crate::testalloc::allocations();
        for round in 0..1000 {
            tally.add(&Hit {
                value: values[round % 3],
                ..*hit
            });
        }
        assert_eq!(crate::testalloc::allocations() - before, 0);
    });
    let t = tally.by_value();
    assert_eq!(t[0].values().len(), 3);
    assert!(t[1].overflowed());
}

/// `--on`: a slot holds one object after another. Hits are counted as the one target's, named
/// without an object's address (not as the first object a slot held), a chain through several slots
/// is one chain, values are one table, the kernel's recount counts the same way, and the text lists
/// the hits by object from the objects' books.
#[test]
fn object_hits_are_the_targets_and_listed_by_object() {
    use crate::report::json::SummaryRecord;
    let target = "(struct widget)$obj.count";
    let object = |i: u64, addr: u64| {
        watch(
            &format!("(struct widget)0x{addr:x}.count#{i}"),
            addr,
            Access::Write,
        )
    };
    let (o0, o1, o2) = (object(0, 0xa000), object(1, 0xc000), object(2, 0xb000));
    let read = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000110];
    let ksys = [encode::KERNEL, 0xffffffff81000010, 0xffffffff81000210];
    let hits = [(sample(5, 0, &read), "w", 0), (sample(5, 0, &ksys), "w", 0)];
    // (object's watch, slot, chain, hits): #0 and then #2 in slot 0, #1 in slot 1.
    let made = [(&o0, 0, 0, 3), (&o1, 1, 0, 2), (&o2, 0, 1, 1)];
    let count = |tally: &mut Tally| {
        let mut i = 0;
        each_hit(
            &table(),
            &[watch("slot", 0x1000, Access::Write)],
            &hits,
            |hit| {
                for &(w, slot, chain, n) in &made {
                    if chain == i {
                        let hit = Hit {
                            watch: w,
                            watch_index: slot,
                            value: written(Some(7)),
                            ..*hit
                        };
                        tally.add_n(&hit, n);
                    }
                }
                i += 1;
            },
        );
    };
    let mut by_slot = Tally::default();
    count(&mut by_slot);
    assert_eq!(
        by_slot.chains()[0].target_name,
        "(struct widget)0xa000.count#0",
        "without --on: by target"
    );

    let mut tally = Tally::default();
    tally.of_objects(target);
    count(&mut tally);
    let chains = tally.chains();
    assert_eq!(chains.len(), 2, "{chains:?}");
    assert_eq!((chains[0].count, chains[1].count), (5, 1));
    assert!(chains
        .iter()
        .all(|c| (c.target, c.target_name.as_str()) == (0, target)));
    let values = tally.by_value();
    assert_eq!(values.len(), 1);
    assert_eq!(
        (values[0].target_name.as_str(), values[0].values()),
        (target, vec![(7, 6)])
    );

    let mut summary = Summary {
        objects: Some(ObjectTally {
            objects: vec![
                (0, 0xa000, 3),
                (1, 0xc000, 2),
                (2, 0xb000, 1),
                (3, 0xd000, 0),
            ],
            ..ObjectTally::default()
        }),
        ..Summary::default()
    };
    summary.hits_by_cpu.insert(0, 6);
    let text = text_of(&summary, &tally, 2);
    assert!(
        text.contains(&format!(
            "#        5 hits  83.3%  target={target}  comm: w 5\n"
        )),
        "{text}"
    );
    assert!(
        !text.contains("0xa000.count"),
        "no object's name on a chain: {text}"
    );
    let section = &text[text.find("# hits by object").expect(&text)..];
    let section = &section[..section.find("#\n").expect(&text)];
    assert_eq!(
        section,
        "# hits by object (4 armed, 1 with no hit):\n#        3  50.0%  #0 0xa000\n\
         #        2  33.3%  #1 0xc000\n# ... 1 more objects with 1 hits (--top 0 shows all)\n"
    );
    summary.tally = Some(tally.clone());
    let json = serde_json::to_value(SummaryRecord::new(&summary)).unwrap();
    assert_eq!(json["chains"][0]["target"], target);

    // The kernel's totals are by slot: recounted, the slots' values add up in the objects' table.
    let mut recounted = tally.emptied();
    recounted.set_values(0, "slot", &[(7, 4), (9, 1)], false);
    recounted.set_values(1, "slot", &[(7, 2)], false);
    let values = recounted.by_value();
    assert_eq!(
        (values[0].target_name.as_str(), values[0].values()),
        (target, vec![(7, 6), (9, 1)])
    );
    summary.from_totals = true;
    assert!(text_of(&summary, &recounted, 0).contains(
        "# hits by object (4 armed, 1 with no hit, of the hits printed: the kernel's totals do not keep the object):\n"
    ));
    assert!(
        !text_of(&Summary::default(), &tally, 0).contains("by object"),
        "no section without --on"
    );
}

/// `--summary` counts hits by the writer's cgroup, most first, each with its path and container; a
/// cgroup removed before it was named keeps its id; no section where no record carried a cgroup. The
/// JSON summary carries the same tally.
#[test]
fn hits_are_counted_by_cgroup() {
    use crate::report::cgroup::tests::{pod, ID};
    use crate::report::json::SummaryRecord;
    let pod = pod();
    let plain = CgroupName::new(2, Some("/system.slice/app.service".into()));
    let gone = CgroupName::new(3, None);
    let watches = [watch("a", 0x1000, Access::Write)];
    let s = sample(5, 0, &[encode::KERNEL, 0xffffffff81000010]);
    let mut tally = Tally::default();
    let mut summary = Summary::default();
    each_hit(&table(), &watches, &[(s, "w", 0)], |hit| {
        for (c, n) in [(&pod, 3), (&plain, 1), (&gone, 2)] {
            tally.add_n(
                &Hit {
                    cgroup: Some(c),
                    ..*hit
                },
                n,
            );
        }
        tally.add(hit);
    });
    summary.hits_by_cpu.insert(0, 7);
    let text = text_of(&summary, &tally, 0);
    let section = &text[text.find("# hits by cgroup:").expect(&text)..];
    let pod_path = pod.path.clone().unwrap();
    assert_eq!(
        section,
        format!(
            "# hits by cgroup:\n#        3  42.9%  {pod_path}  container={ID} (containerd)\n\
             #        2  28.6%  (removed, id 3)\n#        1  14.3%  /system.slice/app.service\n"
        )
    );
    summary.tally = Some(tally.clone());
    let json = serde_json::to_value(SummaryRecord::new(&summary)).unwrap();
    let by = &json["by_cgroup"];
    assert_eq!(by[0]["id"], 0x1a);
    assert_eq!(by[0]["container_id"], ID);
    assert_eq!(by[0]["container_runtime"], "containerd");
    assert_eq!(by[0]["count"], 3);
    assert!(by[1]["path"].is_null() && by[1].get("container_id").is_none());
    assert_eq!(by[2]["path"], "/system.slice/app.service");

    // Recounted from the kernel's totals (keyed by cgroup too), the heading is the same.
    summary.from_totals = true;
    assert!(text_of(&summary, &tally, 0).contains("# hits by cgroup:\n"));
    summary.from_totals = false;

    let none = Tally::default();
    assert!(!text_of(&summary, &none, 0).contains("by cgroup"));
    summary.tally = Some(none);
    let json = serde_json::to_value(SummaryRecord::new(&summary)).unwrap();
    assert!(json.get("by_cgroup").is_none());
}
