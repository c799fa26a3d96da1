//! `--value` under contention: threads on every CPU store into one 8-byte global at once. A data breakpoint
//! traps after the store, and memory read at the trap can already hold another CPU's next store; the value
//! printed for a `mov` comes from the instruction and the registers at the trap, so it is exactly what that
//! store wrote. Each thread stores `tid << 32 | seq`, so a hit's value must carry its own tid and a sequence
//! that rises by one per hit of that thread. Read-modify-writes (`lock add`) are read from memory and say so.
//! `old` is the value of the line before.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::util::{self, Tracer, Writer};

live_test!(
    every_contended_mov_store_reports_its_own_value_and_rmw_is_marked,
    {
        let cpus = util::online_cpus().len().max(2);
        let count: u64 = 5000;
        let mut h = Writer::threads(&["tagged", &cpus.to_string(), &count.to_string()]);
        let pid = h.pid;
        let t = Tracer::write_json(&[
            "--value",
            "--buffer-pages",
            "4096",
            "-p",
            &pid.to_string(),
            "target_var",
        ]);
        h.send("go");
        h.read_until("done");
        h.finish();
        let (code, out, err) = t.wait(Duration::from_secs(60));
        assert_eq!(code, 0, "{err}");
        let records = util::ndjson(&out);
        let summary = util::summary_record(&records);
        assert_eq!(summary["lost"], 0, "{summary}");
        let hits = util::hits_of_pid(&records, pid);
        let value = |v: &serde_json::Value| {
            let s = v["value"]
                .as_str()
                .unwrap_or_else(|| panic!("no value: {v}"));
            u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex value")
        };
        // Every thread's movs, in the merged time order: its own tid, seq 1, 2, 3, ...
        let mut next_seq: BTreeMap<u64, u64> = BTreeMap::new();
        let mut movs = 0;
        let mut raced = 0;
        for v in hits.iter().filter(|v| v["ip"]["sym"] == "ksw_thread_store") {
            let tid = v["tid"].as_u64().expect("tid");
            let x = value(v);
            assert_eq!(
                v["value_from"], "insn",
                "a mov's value is the instruction's: {v}"
            );
            assert_eq!(
                x >> 32,
                tid,
                "the value a thread's store wrote carries its tid: {v}"
            );
            let want = next_seq.entry(tid).or_insert(1);
            assert_eq!(
                x & 0xffff_ffff,
                *want,
                "thread {tid}'s stores in order: {v}"
            );
            *want += 1;
            movs += 1;
            raced += usize::from(v.get("raced").is_some());
        }
        assert_eq!(movs as u64, cpus as u64 * count, "every mov store once");
        assert!(next_seq.values().all(|&n| n == count + 1), "{next_seq:?}");
        let adds: Vec<_> = hits
            .iter()
            .filter(|v| v["ip"]["sym"] == "ksw_thread_add")
            .collect();
        assert_eq!(adds.len() as u64, cpus as u64 * (count / 10));
        assert!(
            adds.iter().all(|v| v["value_from"] == "memory"),
            "a lock add is read from memory, and says so"
        );
        assert_eq!(summary["raced"], raced, "{summary}");
        // `old` is the previous printed hit's value, in the merged order of both CPUs.
        for pair in hits.windows(2) {
            assert_eq!(
                pair[1]["old"], pair[0]["value"],
                "old is the value on the line before: {} then {}",
                pair[0], pair[1]
            );
        }
        eprintln!(
            "contended: {movs} mov stores exact, {raced} of them raced memory; {} adds from memory",
            adds.len()
        );
    }
);

// `rw --value` on a user address watched system-wide: the program does not read the watched bytes (its
// own read would trap again), so the value of each store comes from its instruction; the tracer's own
// reads are never hits and never losses, and nothing is unaccounted.
live_test!(
    rw_value_takes_each_store_from_its_instruction_and_never_traps_on_itself,
    {
        const STORES: u64 = 200;
        let mut w = Writer::start(&["write", &STORES.to_string(), "0"]);
        let target = format!("0x{:x}/8", w.addr);
        let t = Tracer::start_json(&["rw", "--value", "--json", "--no-status", &target]);
        w.go();
        let tid = w.tid;
        w.finish();
        let (code, out, err) = t.interrupt(Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
        let records = util::ndjson(&out);
        let mine: Vec<_> = records
            .iter()
            .filter(|v| v["type"] == "hit" && v["tid"] == tid && v["in_kernel"] == false)
            .collect();
        assert_eq!(mine.len() as u64, STORES, "{err}");
        assert!(
            mine.iter()
                .all(|v| v["value_from"] == "insn" && v["value"].is_string()),
            "every store's value from its instruction: {:?}",
            mine.first()
        );
        assert!(!err.contains("unaccounted"), "{err}");
        assert_eq!(util::summary_record(&records)["lost"], 0, "{err}");
    }
);

// A `--control` move starts `old` afresh: after moving away and back, the first hit has no `old`, neither
// the tracer's (the line before was another target's) nor the kernel's (its map of last values is
// emptied with the move), though the same store came before the moves.
live_test!(a_control_move_starts_old_afresh, {
    // The hit path (system-wide), and the per-thread path's value program.
    move_starts_old_afresh(&[]);
    move_starts_old_afresh(&["--per-thread"]);
});

fn move_starts_old_afresh(extra: &[&str]) {
    let mut w = Writer::start(&["set", "0"]);
    let pid = w.pid.to_string();
    let dir = util::temp_dir("ksw-olds");
    let fifo = dir.join("ctl");
    let target = format!("0x{:x}/8", w.addr);
    let other = format!("0x{:x}/8", w.addr2.expect("a second global"));
    let mut args = vec![
        "write",
        "--value",
        "--json",
        "--no-status",
        &target,
        "--control",
        fifo.to_str().expect("utf-8 path"),
    ];
    if !extra.is_empty() {
        args.extend(["-p", &pid]);
        args.extend(extra);
    }
    let mut t = Tracer::start_json(&args);
    let hit = |t: &mut Tracer| -> serde_json::Value {
        let text = t.read_until(|l| l.contains("\"type\":\"hit\""));
        let line = text
            .lines()
            .rev()
            .find(|l| l.contains("\"type\":\"hit\""))
            .expect("a hit line");
        serde_json::from_str(line).expect("JSON")
    };
    let send = |line: &str| util::send_control(&fifo, line);
    w.send("set 5");
    w.read_until("done");
    let first = hit(&mut t);
    w.send("set 6");
    w.read_until("done");
    let second = hit(&mut t);
    assert_eq!(
        (first["value"].as_str(), second["old"].as_str()),
        (Some("0x5"), Some("0x5")),
        "{first} {second}"
    );
    send(&format!("watch {other}"));
    t.read_until(|l| l.contains("\"type\":\"watch\""));
    send(&format!("watch {target}"));
    t.read_until(|l| l.contains("\"type\":\"watch\""));
    w.send("set 7");
    w.read_until("done");
    let after = hit(&mut t);
    assert_eq!(after["value"], "0x7", "{after}");
    assert!(
        after.get("old").is_some_and(serde_json::Value::is_null),
        "old starts afresh after a move: {after}"
    );
    let (code, _, err) = t.interrupt(Duration::from_secs(10));
    w.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
}
