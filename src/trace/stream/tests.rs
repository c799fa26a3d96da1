//! The stream on file-backed rings: hits merged in time order with their losses, the kernel's
//! totals, a burst's tail split between the hit ring and the perf ring, `--count`, exits of watched
//! processes, audits of closed events, the summary, `--on`'s objects and an exec that ends the
//! watch.

use std::collections::BTreeMap;
use std::io::BufWriter;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use super::*;
use crate::config::plan::read_start_time;
use crate::model::scope::Scope;
use crate::model::watch::{Access, Watch};
use crate::perf::bpf::hit_set::Following;
use crate::perf::event::{CpuEvent, EventConfig};
use crate::perf::record::encode;
use crate::perf::ring::testing::FileRing;
use crate::perf::sys::Epoll;
use crate::report::json::Json;
use crate::report::sent::{Ledger, Sent};
use crate::report::testutil::{self, watch, Room};
use crate::trace::books::tests::audit;
use crate::trace::comm::Comms;
use crate::trace::context::fake::Polled;

const ADDR: u64 = 0x7ffd0000;

fn watches() -> Vec<Watch> {
    vec![watch("counter", ADDR, Access::Write)]
}

fn cfg() -> EventConfig {
    EventConfig::bare(1)
}

/// An epoll set, a pipeline over one file-backed ring per CPU in `cpus` in it, and the rings'
/// writing sides.
fn rings(cpus: &[u32]) -> (Epoll, Pipeline, Vec<FileRing>) {
    let epoll = Epoll::new().unwrap();
    let mut writers = Vec::new();
    let mut evs = Vec::new();
    for &cpu in cpus {
        let (writer, ring) = FileRing::new(4).unwrap();
        let (fd, _) = UnixStream::pair().unwrap();
        evs.push(CpuEvent::over(cpu, 0, ring, OwnedFd::from(fd)));
        writers.push(writer);
    }
    let p = Pipeline::new(0, |sorter| {
        EventSet::new(&watches(), cfg(), Scope::System, evs, &epoll, 1, sorter)
    })
    .unwrap();
    (epoll, p, writers)
}

/// A stream printing JSON into memory.
type JsonStream<'a> = Stream<'a, Json<Vec<u8>, Vec<u8>>>;

/// A stream printing JSON, with no task known and no process watched.
fn stream<'a>(
    table: &'a ksymwatch_symbols::SymbolTable,
    epoll: &Epoll,
    limits: Limits,
    filter: Filter,
) -> JsonStream<'a> {
    watching(table, no_process(epoll)).with_limits(limits, filter)
}

/// No process watched (a system-wide watch).
fn no_process(epoll: &Epoll) -> Watched {
    Watched::new(
        Vec::new(),
        &[],
        Following::default(),
        epoll,
        16,
        sys::pidfd_open,
        read_start_time,
    )
    .unwrap()
}

/// Processes `pids` followed as `following` says, each pidfd a stand-in in `poll`.
fn stand_ins(pids: Vec<u32>, following: Following, poll: &Polled) -> Watched {
    let pidfd = |_| Ok(std::fs::File::open("/dev/null")?.into());
    Watched::new(pids, &[], following, poll, 16, pidfd, read_start_time).unwrap()
}

/// A stream printing JSON, with no task known, following `watched`.
fn watching(table: &ksymwatch_symbols::SymbolTable, watched: Watched) -> JsonStream<'_> {
    Stream::new(
        Json::new(Vec::new(), Vec::new()),
        Symbolizer::new(table),
        Tasks::new(Comms::new("/nonexistent")),
        watched,
        Olds::new(None, false),
    )
}

/// A kernel store into the watch by task `tid` on `cpu` at `time`.
fn hit(tid: u32, time: u64, cpu: u32) -> Vec<u8> {
    encode::sample(0xffffffff81000110, tid, tid, time, ADDR, cpu, &[])
}

/// `--count 2`.
const COUNT_TWO: Limits = Limits {
    count: Some(2),
    duration: None,
};

/// Three hits on CPU 0 (tids 10, 11, 12, in this order), one more than [`COUNT_TWO`] prints.
fn three_hits(ring: &mut FileRing) {
    let now = sys::monotonic_ns();
    for (i, tid) in [10, 11, 12].into_iter().enumerate() {
        ring.write(&hit(tid, now + 1000 * (i as u64 + 1), 0))
            .unwrap();
    }
}

/// [`three_hits`] on CPU 0's ring, read by a stream under [`COUNT_TWO`]: the epoll set, the pipeline
/// and the stream.
fn three_hits_to_count_two(
    table: &ksymwatch_symbols::SymbolTable,
) -> (Epoll, Pipeline, JsonStream<'_>) {
    let (epoll, p, mut w) = rings(&[0]);
    let s = stream(table, &epoll, COUNT_TWO, Filter::default());
    three_hits(&mut w[0]);
    (epoll, p, s)
}

/// The records printed: each one's type, a hit's tid, a loss's count and CPU (and `counted` when the
/// kernel's totals hold them).
fn printed(s: JsonStream<'_>) -> Vec<String> {
    let ndjson = String::from_utf8(s.sink.out.into_inner().0).unwrap();
    ndjson
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|r| match r["type"].as_str() {
            Some("hit") => format!("hit {}", r["tid"]),
            Some("lost") if r["counted"] == true => {
                format!("lost {} on {} counted", r["count"], r["cpu"])
            }
            Some("lost") => format!("lost {} on {}", r["count"], r["cpu"]),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Two CPUs' hits come out merged in time order, a loss is marked where it happened and counted,
/// and the filters drop hits before they are printed or counted.
#[test]
fn released_records_are_printed_in_time_order_with_their_losses() {
    let table = testutil::table();
    let (epoll, mut p, mut w) = rings(&[0, 1]);
    let filter = Filter {
        tids: vec![10, 20],
        ..Filter::default()
    };
    let mut s = stream(&table, &epoll, Limits::default(), filter);
    let now = sys::monotonic_ns();
    w[0].write(&hit(10, now + 1000, 0)).unwrap();
    w[0].write(&encode::with_trailer(
        encode::lost(1, 5),
        0,
        0,
        now + 3000,
        0,
    ))
    .unwrap();
    w[1].write(&hit(20, now + 2000, 1)).unwrap();
    w[1].write(&hit(30, now + 4000, 1)).unwrap();
    p.drain();
    assert_eq!(s.release(&mut p, &epoll, Release::All), None);
    assert_eq!(
        (
            s.summary().hits(),
            s.summary().filtered,
            s.summary().lost_by_cpu.get(&0)
        ),
        (2, 1, Some(&5))
    );
    assert_eq!(printed(s), ["hit 10", "hit 20", "lost 5 on 0"]);
}

/// The hit path's hits a full ring dropped are marked as counted in the kernel's totals (not lost), a
/// perf ring's lost records are not; with `--on` the totals are not used, so nothing is counted. Both
/// go to the summary's `lost` until the totals say otherwise.
#[test]
fn hits_the_totals_hold_are_marked_counted_and_lost_records_are_not() {
    let table = testutil::table();
    let (epoll, mut p, _w) = rings(&[0]);
    let mut s = stream(&table, &epoll, Limits::default(), Filter::default());
    let unprinted = |count| Item::Unprinted { cpu: 0, count };
    assert_eq!(s.apply(&mut p, &epoll, 10, unprinted(4)), None);
    let lost = Item::Lost { cpu: 0, count: 2 };
    assert_eq!(s.apply(&mut p, &epoll, 20, lost), None);
    s.start_objects(Slots::new(1, false), "$obj+0/4");
    assert_eq!(s.apply(&mut p, &epoll, 30, unprinted(1)), None);
    assert_eq!(s.summary().lost_by_cpu.get(&0), Some(&7));
    assert_eq!(
        printed(s),
        ["lost 4 on 0 counted", "lost 2 on 0", "lost 1 on 0"]
    );
}

/// At the end, the losses no record told of: the hit ring's (the program's count past its last
/// record) are hits the totals hold, the rest of the tail the perf ring's records.
#[test]
fn the_tail_of_a_burst_is_split_between_the_hit_ring_and_the_perf_ring() {
    let table = testutil::table();
    let (epoll, mut p, _w) = rings(&[0]);
    let mut s = stream(&table, &epoll, Limits::default(), Filter::default());
    s.audit_closed([Audit {
        kernel_hits: None,
        kernel_lost: Some(7),
        unprinted_tail: 5,
        ..audit(0, 0, 0)
    }]);
    assert_eq!(
        s.end(&mut p, &epoll, StopReason::Duration),
        StopReason::Duration
    );
    assert_eq!(s.summary().lost_by_cpu.get(&0), Some(&7));
    assert_eq!(printed(s), ["lost 5 on 0 counted", "lost 2 on 0"]);
}

/// `--count N` met while what was left in the rings is printed at the end (the writer exited first,
/// its hits still in the rings): the losses no record told of are marked and counted all the same.
/// They went unmarked: 178 hits printed of 5,000, 4,822 not printed, no mark.
#[test]
fn the_tail_is_settled_when_the_count_is_met_at_the_end() {
    let table = testutil::table();
    let (epoll, mut p, mut s) = three_hits_to_count_two(&table);
    s.audit_closed([Audit {
        kernel_hits: None,
        kernel_lost: Some(7),
        unprinted_tail: 5,
        filtered: 3,
        ..audit(0, 0, 0)
    }]);
    assert_eq!(s.end(&mut p, &epoll, StopReason::Exited), StopReason::Count);
    assert_eq!(s.summary().filtered, 3);
    assert_eq!(
        printed(s),
        ["hit 10", "hit 11", "lost 5 on 0 counted", "lost 2 on 0"]
    );
}

/// `--count N`: the N-th hit printed ends the run; later ones stay unprinted.
#[test]
fn the_count_ends_the_run_at_its_nth_hit() {
    let table = testutil::table();
    let (epoll, mut p, mut s) = three_hits_to_count_two(&table);
    p.drain();
    assert_eq!(
        s.release(&mut p, &epoll, Release::All),
        Some(StopReason::Count)
    );
    assert_eq!(printed(s), ["hit 10", "hit 11"]);
}

/// An output that failed with hits' lines still in its buffer: those hits were counted, and are not
/// printed. Three hits, a destination with room for the first line and half of the second: 2 of them
/// are not printed; three more released after that are counted and not printed.
#[test]
fn hits_whose_lines_never_went_out_are_not_printed() {
    let table = testutil::table();
    let (epoll, mut p, mut w) = rings(&[0]);
    // The three hits' lines are as long as each other (their tids and times have as many digits).
    let line = {
        let mut s = stream(&table, &epoll, Limits::default(), Filter::default());
        three_hits(&mut w[0]);
        p.drain();
        assert_eq!(s.release(&mut p, &epoll, Release::All), None);
        let ndjson = String::from_utf8(s.sink.out.into_inner().0).unwrap();
        ndjson.lines().next().unwrap().len() + 1
    };
    let ledger = Ledger::default();
    let dest = ledger.sending(Room {
        room: line + line / 2,
        slice: usize::MAX,
    });
    let json = Json::new(ledger.taking(BufWriter::new(dest)), Vec::new());
    let mut s = Stream::new(
        Sent::new(json, ledger),
        Symbolizer::new(&table),
        Tasks::new(Comms::new("/nonexistent")),
        no_process(&epoll),
        Olds::new(None, false),
    );
    three_hits(&mut w[0]);
    p.drain();
    assert_eq!(
        s.release(&mut p, &epoll, Release::All),
        Some(StopReason::BrokenPipe)
    );
    // Once the output is gone, what the rings still hold is counted, not printed.
    three_hits(&mut w[0]);
    p.drain();
    assert_eq!(
        s.release(&mut p, &epoll, Release::All),
        Some(StopReason::BrokenPipe)
    );
    s.settle_counts(p.events());
    assert_eq!(s.summary().hits(), 6);
    assert_eq!(s.summary().unprinted_by_cpu, BTreeMap::from([(0, 5)]));
}

/// An output that only aggregates (as `--folded` does): the hits it took, printed or only counted.
struct Aggregate(std::rc::Rc<std::cell::Cell<u64>>);

impl Output for Aggregate {
    fn header(&mut self, _: &crate::report::Header<'_>) -> io::Result<()> {
        Ok(())
    }
    fn armed(&mut self, _: usize, _: &std::collections::BTreeSet<u32>, _: u64) -> io::Result<()> {
        Ok(())
    }
    fn hit(&mut self, _: &Hit<'_>) -> io::Result<()> {
        self.0.set(self.0.get() + 1);
        Ok(())
    }
    fn event(&mut self, _: &StreamEvent, _: u64) -> io::Result<()> {
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn finish(&mut self, _: &Summary) -> io::Result<()> {
        Ok(())
    }
    fn counted(&mut self, _: &Hit<'_>, count: u64) {
        self.0.set(self.0.get() + count);
    }
}

/// Once the output is gone (its reader closed it), the hits released after are counted, not printed,
/// and still in what the outputs aggregate (`--folded`, `--flamegraph`) and in `--summary`'s tally, as
/// every hit is where the kernel's totals recount them: without them (perf samples, `--on`) the stacks
/// and the tally held only the hits handed to the output before it failed, 1 of 3 here.
#[test]
fn hits_after_the_output_is_gone_are_in_the_aggregates_and_the_tally() {
    let table = testutil::table();
    let (epoll, mut p, mut w) = rings(&[0]);
    let aggregated = std::rc::Rc::new(std::cell::Cell::new(0));
    let closed = Json::new(
        Room {
            room: 0,
            slice: usize::MAX,
        },
        Vec::new(),
    );
    let out = crate::report::Tee(vec![
        Box::new(closed),
        Box::new(Aggregate(std::rc::Rc::clone(&aggregated))),
    ]);
    let mut s = Stream::new(
        out,
        Symbolizer::new(&table),
        Tasks::new(Comms::new("/nonexistent")),
        no_process(&epoll),
        Olds::new(None, false),
    )
    .with_tally(true);
    three_hits(&mut w[0]);
    p.drain();
    assert_eq!(
        s.release(&mut p, &epoll, Release::All),
        Some(StopReason::BrokenPipe)
    );
    let summary = &s.books.summary;
    assert_eq!(summary.hits(), 3);
    assert_eq!(summary.unprinted(), 2, "released after it failed");
    assert_eq!(aggregated.get(), 3);
    let tally = summary.tally.as_ref().unwrap();
    assert_eq!(tally.chains().iter().map(|c| c.count).sum::<u64>(), 3);
}

/// The watched processes' exits reach the stream through [`Stream::note_exit`]: each takes its pidfd
/// out of the epoll set, and the last one left says so.
#[test]
fn a_watched_process_exit_is_noted_until_none_is_left() {
    let table = testutil::table();
    let poll = Polled::default();
    let watched = stand_ins(vec![5, 6], Following::default(), &poll);
    let mut s = watching(&table, watched);
    assert!(!s.note_exit(1, &poll), "pid 5 is left");
    assert!(s.note_exit(0, &poll), "none left");
    let deletes = poll
        .calls()
        .iter()
        .filter(|c| c.starts_with("delete"))
        .count();
    assert_eq!(deletes, 2);
}

/// Closed events' audits are settled at the end: what the kernel's programs filtered is counted even
/// when nothing more is printed (a closed pipe), and the closed pipe stays the reason.
#[test]
fn closed_events_audits_count_what_the_kernel_filtered() {
    let table = testutil::table();
    let (epoll, mut p, _w) = rings(&[0]);
    let mut s = stream(&table, &epoll, Limits::default(), Filter::default());
    s.audit_closed([audit(0, 3, 1), audit(1, 2, 0)]);
    let stop = s.end(&mut p, &epoll, StopReason::BrokenPipe);
    assert_eq!(stop, StopReason::BrokenPipe);
    assert_eq!(
        (s.summary().filtered, s.summary().filtered_other_process),
        (5, 1)
    );
}

/// The end's entries reach the printed summary: how the run ended, after how long, and the time a
/// CPU that came online was never armed (added up per CPU); hits and filtered hits are what the
/// loop's pace counts.
#[test]
fn the_summary_says_how_the_run_ended_and_what_went_unwatched() {
    let table = testutil::table();
    let (epoll, mut p, mut w) = rings(&[0]);
    let filter = Filter {
        tids: vec![10],
        ..Filter::default()
    };
    let mut s = stream(&table, &epoll, Limits::default(), filter).with_tally(true);
    let now = sys::monotonic_ns();
    w[0].write(&hit(10, now + 1000, 0)).unwrap();
    w[0].write(&hit(11, now + 2000, 0)).unwrap();
    p.drain();
    assert_eq!(s.release(&mut p, &epoll, Release::All), None);
    assert_eq!(s.counted(), 2, "one printed, one filtered");
    s.note_unwatched(1, 300);
    s.note_unwatched(1, 200);
    s.forget_olds(0);
    s.take_error().unwrap();
    let summary = s
        .finish(StopReason::Duration, Duration::from_millis(7))
        .unwrap();
    assert_eq!(summary.stop, Some(StopReason::Duration));
    assert_eq!(summary.elapsed, Duration::from_millis(7));
    assert_eq!(summary.unwatched_ns_by_cpu.get(&1), Some(&500));
    assert_eq!((summary.hits(), summary.filtered), (1, 1));
    assert!(summary.tally.is_some(), "--summary keeps its tally");
}

/// `--on`: a hit on a slot after its object's free is not a hit; one before it is.
#[test]
fn objects_started_drop_hits_after_their_free() {
    let table = testutil::table();
    let (epoll, mut p, mut w) = rings(&[0]);
    let mut s = stream(&table, &epoll, Limits::default(), Filter::default());
    let now = sys::monotonic_ns();
    s.start_objects(Slots::new(1, false), "$obj+0/4");
    s.slots().closing(Some((0, now + 1500)));
    w[0].write(&hit(10, now + 1000, 0)).unwrap();
    w[0].write(&hit(11, now + 2000, 0)).unwrap();
    p.drain();
    assert_eq!(s.release(&mut p, &epoll, Release::All), None);
    assert_eq!(printed(s), ["hit 10"]);
}

/// A watched process's exec, read from the rings, ends its watch through the stream: marked, its
/// pidfd out of the epoll set, and the run ends there (the hit after it is not applied).
#[test]
fn an_exec_read_from_the_rings_ends_the_watch() {
    let table = testutil::table();
    let (_epoll, mut p, mut w) = rings(&[0]);
    let poll = Polled::default();
    let following = Following {
        ends_on_exec: true,
        follows_children: false,
    };
    let watched = stand_ins(vec![7], following, &poll);
    let mut s = watching(&table, watched);
    let now = sys::monotonic_ns();
    let exec = encode::with_trailer(encode::comm(7, 7, "sh", true), 7, 7, now + 1000, 0);
    w[0].write(&exec).unwrap();
    w[0].write(&hit(7, now + 2000, 0)).unwrap();
    p.drain();
    assert_eq!(
        s.release(&mut p, &poll, Release::All),
        Some(StopReason::Exited)
    );
    let calls = poll.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[1].starts_with("delete"), "{calls:?}");
    assert_eq!(printed(s), ["Some(\"process_exec\")"]);
}
