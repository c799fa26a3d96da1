//! The hit program run offline in [`super::interp`], its emitter entered by the tail call as the kernel
//! would: the records it writes to the ring buffer, byte for byte as the tracer decodes them
//! ([`crate::perf::hit_record::decode`]), what it counts instead of writing (filtered, another process,
//! past `--count`, a full ring, a CPU without an emitter), and what it counts in the kernel's totals.

use super::hit::{generate, HitMaps, HitSpec};
use super::insn::Insn;
use super::interp::{FakeKernel, COMM_OFFSET, EVENT_OFFSET, KERN_CTX_ID, PROCESS_START};
use super::kernel::{Helper, RB_FORCE_WAKEUP, RB_NO_WAKEUP};
use super::layout::STAT_REPEATED;
use super::layout::{STAT_FILTERED, STAT_LOST, STAT_OTHER_PROCESS};
use super::repeats::Repeats;
use super::totals::{self, TotalsMaps};
use crate::model::condition::{self, Condition};
use crate::model::filter::Filter;
use crate::perf::hit_record::{decode, split_chain, HitRecord, Layout, CGROUP_KNOWN, HEADER};
use crate::perf::hit_record::{CHAIN_ID, COMM_KNOWN, IP_IN_CHAIN, OLDS, USER_MODE, VALUES};
use crate::perf::hit_record::{INSN_KNOWN, OLD_KNOWN, REGS_KNOWN, VALUE_KNOWN};

pub(super) const TOTALS: TotalsMaps = TotalsMaps {
    chains: 20,
    counts: 21,
    values: Some(23),
    stats: 22,
    limit: None,
};
/// A process watch's maps, as `HitPrograms` makes them for `--value`.
pub(super) const MAPS: HitMaps = HitMaps {
    emitters: 3,
    olds: 4,
    olds_by_tgid: Some(6),
    stats: 5,
    scratch: 7,
    procs: Some(9),
    reads: Some(8),
    totals: Some(TOTALS),
    cgroups: None,
};
const RING: i32 = 30;
const LIMIT: i32 = 24;
const ADDR: u64 = 0x60_1000;
/// The trap: its ip, and the user frames from its rbp (saved rbp, return address), the last one's saved
/// rbp null as `_start` leaves it.
const IP: u64 = 0x40_1234;
const FP0: u64 = 0x7ffd_0000;
const FP1: u64 = 0x7ffd_0100;
const RET0: u64 = 0x40_2000;
const RET1: u64 = 0x40_3000;
/// The 16 bytes that end at the trap ip.
const CODE: [u8; 16] = *b"0123456789abcdef";

pub(super) fn spec<'a>(
    filter: &'a Filter,
    condition: Option<&'a Condition>,
    value: bool,
) -> HitSpec<'a> {
    HitSpec {
        len: 8,
        read_value: value,
        old: value,
        regs: value,
        cgroup_ids: false,
        condition,
        filter,
        comm_offset: Some(COMM_OFFSET),
        process_start: Some(PROCESS_START),
        repeats: None,
    }
}

/// A machine with the process (tgid 100) watched, a user-mode trap at [`IP`] with its frames
/// readable, and the CPU's emitter waking the reader every `wake_bytes`.
fn machine(maps: &HitMaps, wake_bytes: u32) -> FakeKernel {
    let mut m = FakeKernel::for_hit(maps, ADDR, RING, wake_bytes);
    if let Some(procs) = maps.procs {
        m.set(procs, &100u32.to_le_bytes(), &1u32.to_le_bytes());
    }
    m.regs[16] = IP;
    m.regs[4] = FP0;
    let frame = |fp: u64, ret: u64| [fp.to_le_bytes(), ret.to_le_bytes()].concat();
    m.readable = vec![
        (FP0, frame(FP1, RET0)),
        (FP1, frame(0, RET1)),
        (IP - 16, CODE.to_vec()),
    ];
    m
}

/// A process watch's program without filters or condition (`value`: `--value`'s), and its machine.
fn setup(value: bool) -> (Vec<Insn>, FakeKernel) {
    setup_with(&Filter::default(), None, value)
}

/// [`setup`] of a watch with `filter` and `condition`.
fn setup_with(
    filter: &Filter,
    condition: Option<&Condition>,
    value: bool,
) -> (Vec<Insn>, FakeKernel) {
    let prog = generate(&spec(filter, condition, value), &MAPS).expect("assembles");
    (prog, machine(&MAPS, 1 << 14))
}

/// Runs the program once: the hit must be written nowhere and counted once under `stat`.
fn counted_not_written(m: &mut FakeKernel, prog: &[Insn], stat: u32) {
    assert!(hit(m, prog).is_empty());
    assert_eq!(m.stat(stat), 1);
}

/// Runs the program once (it always returns 0: the kernel writes no sample of its own); the records
/// the ring took meanwhile, decoded, with their wake-up flags, as the tracer reads them ([`resolved`]).
fn hit(m: &mut FakeKernel, prog: &[Insn]) -> Vec<(HitRecord, u64)> {
    raw_hit(m, prog)
        .into_iter()
        .map(|(bytes, flags)| (resolved(m, decode(&bytes).expect("a record")), flags))
        .collect()
}

/// [`hit`]'s records as the ring holds them.
fn raw_hit(m: &mut FakeKernel, prog: &[Insn]) -> Vec<(Vec<u8>, u64)> {
    let before = m.ring(RING).len();
    assert_eq!(m.run(prog), 0, "the program returns 0");
    m.ring(RING)[before..].to_vec()
}

/// `r` as the tracer reads it: the chain it names by id (if it does) read from the machine's `chains`
/// map, and its ip, where it leaves it out, the chain's first frame; without the flags that say where
/// each came from (whether it carries its name stays in `comm`).
fn resolved(m: &FakeKernel, mut r: HitRecord) -> HitRecord {
    if let Some(key) = r.chain.take() {
        let value = m
            .get(TOTALS.chains, &key.bytes())
            .expect("the map holds the chain a record names");
        (r.kernel_stack, r.user_stack) = split_chain(&value).expect("the chain fits its value");
    }
    if r.ip.is_none() {
        r.ip = r.kernel_stack.first().or(r.user_stack.first()).copied();
    }
    r.flags &= !(CHAIN_ID | IP_IN_CHAIN | COMM_KNOWN);
    r
}

/// What a user-mode store of the watched process gives with `value` read (`old` before it), resolved,
/// as the CPU's first record of its writer (with the name).
fn expected(m: &FakeKernel, value: Option<(u64, Option<u64>)>) -> HitRecord {
    let known = |b: bool, flag: u32| if b { flag } else { 0 };
    let old = value.and_then(|(_, o)| o);
    HitRecord {
        flags: USER_MODE
            | known(value.is_some(), VALUES | VALUE_KNOWN | OLDS)
            | known(old.is_some(), OLD_KNOWN),
        pid: 100,
        tid: 101,
        time: m.now,
        addr: ADDR,
        value: value.map(|(v, _)| v),
        old,
        cgroup: None,
        comm: Some("writer".into()),
        ip: Some(IP),
        lost: 0,
        regs: None,
        insn: None,
        chain: None,
        kernel_stack: Vec::new(),
        user_stack: vec![IP, RET0, RET1],
    }
}

fn total(m: &FakeKernel, index: u32) -> u64 {
    m.word(TOTALS.stats, u64::from(index)).unwrap_or(0)
}

/// A kept hit of a plain process watch: one record, through the tail call to the CPU's emitter, with the
/// writer's task, time, name, ip and the user stack the program walked itself; nothing dropped; counted
/// once in the kernel's totals under its thread, name and chain.
#[test]
fn a_kept_hit_is_one_record_written_by_the_emitter() {
    let f = Filter::default();
    let maps = HitMaps {
        totals: Some(TotalsMaps {
            values: None,
            ..TOTALS
        }),
        ..MAPS
    };
    let prog = generate(&spec(&f, None, false), &maps).expect("assembles");
    let mut m = machine(&maps, 1 << 14);
    let got = hit(&mut m, &prog);
    assert_eq!(
        got,
        [(expected(&m, None), 0)],
        "one record, the kernel's wake-up rule"
    );
    assert!(m.calls.contains(&Helper::TailCall) && m.calls.contains(&Helper::RingbufOutput));
    let dropped = [STAT_FILTERED, STAT_OTHER_PROCESS, STAT_LOST].map(|s| m.stat(s));
    assert_eq!(dropped, [0, 0, 0]);
    assert_eq!(total(&m, totals::STAT_KEPT), 1);
    let counts = m.counts(TOTALS.counts, MAPS.scratch);
    assert_eq!(counts.len(), 1);
    let key = counts[0].0;
    assert_eq!((key.pid, key.tid, key.comm()), (100, 101, &b"writer"[..]));
    assert_eq!(key.chain.hash, totals::chain_hash(&[], &[IP, RET0, RET1]));
    assert_eq!(counts[0].1, 1);
    // The chain is stored once under its key; a second hit along it only counts.
    assert_eq!(m.entries(TOTALS.chains).len(), 1);
    m.now += 5_000_000;
    hit(&mut m, &prog);
    assert_eq!(m.entries(TOTALS.chains).len(), 1);
    assert_eq!(m.counts(TOTALS.counts, MAPS.scratch)[0].1, 2);
}

/// A trap of a process not in `procs` writes nothing and is counted as another process's.
#[test]
fn a_process_not_watched_is_counted_not_written() {
    let (prog, mut m) = setup(true);
    m.pid_tgid = (200 << 32) | 201;
    counted_not_written(&mut m, &prog, STAT_OTHER_PROCESS);
    assert_eq!(m.stat(STAT_FILTERED), 0);
    assert_eq!(total(&m, totals::STAT_KEPT), 0);
    assert_eq!(m.read_with, None, "nothing read for another process");
}

/// A hit the filters or the condition drop writes nothing, is counted as filtered and in no total, and
/// still leaves its value as the next hit's old one.
#[test]
fn a_filtered_hit_is_counted_not_written() {
    let other_tid = Filter {
        tids: vec![7],
        ..Filter::default()
    };
    let (prog, mut m) = setup_with(&other_tid, None, true);
    counted_not_written(&mut m, &prog, STAT_FILTERED);

    let five = condition::parse("value == 5").expect("parses");
    let (prog, mut m) = setup_with(&Filter::default(), Some(&five), true);
    m.memory = Some(4);
    assert!(hit(&mut m, &prog).is_empty());
    assert_eq!(
        (m.stat(STAT_FILTERED), total(&m, totals::STAT_KEPT)),
        (1, 0)
    );
    m.memory = Some(5);
    let got = hit(&mut m, &prog);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0.value, got[0].0.old), (Some(5), Some(4)));
}

/// `--count 2`: the programs keep the first two hits and no more; the third is neither written nor
/// counted anywhere, and the shared claims counter says the limit was reached.
#[test]
fn the_count_limit_keeps_exactly_n_hits() {
    let f = Filter::default();
    let maps = HitMaps {
        totals: Some(TotalsMaps {
            limit: Some((LIMIT, 2)),
            ..TOTALS
        }),
        ..MAPS
    };
    let prog = generate(&spec(&f, None, true), &maps).expect("assembles");
    let mut m = machine(&maps, 1 << 14);
    let kept: Vec<usize> = (0..3)
        .map(|i| {
            m.memory = Some(i);
            hit(&mut m, &prog).len()
        })
        .collect();
    assert_eq!(kept, [1, 1, 0]);
    assert_eq!(total(&m, totals::STAT_KEPT), 2);
    assert_eq!(
        total(&m, totals::STAT_BEYOND_COUNT),
        1,
        "the trap past the limit is counted for the audit"
    );
    assert_eq!(m.stat(STAT_FILTERED), 0, "past the limit is not filtered");
    assert_eq!(m.word(LIMIT, 0), Some(3), "three claims");
}

/// With `--value`: the value read at the trap, the one before it, the trap's registers and the
/// instruction bytes that end at its ip; the values map counts each value.
#[test]
fn a_value_hit_carries_value_old_registers_and_instruction() {
    let (prog, mut m) = setup(true);
    m.regs[0] = 0x1f4;
    m.memory = Some(0x1f3);
    let first = hit(&mut m, &prog);
    assert_eq!(first[0].0.value, Some(0x1f3));
    assert_eq!(first[0].0.old, None, "the first hit has no old value");
    m.memory = Some(0x1f4);
    m.now += 5_000_000;
    let got = hit(&mut m, &prog);
    let mut regs = m.regs;
    regs[17] = 0x33;
    let plain = expected(&m, Some((0x1f4, Some(0x1f3))));
    let want = HitRecord {
        flags: plain.flags | REGS_KNOWN | INSN_KNOWN,
        regs: Some(regs),
        insn: Some(CODE),
        comm: None,
        ..plain
    };
    assert_eq!(got, [(want, 0)]);
    assert_eq!(m.read_with, Some(Helper::ProbeReadUser));
    let values = m.entries(TOTALS.values.unwrap());
    let count = |v: u64| {
        values
            .iter()
            .find(|(k, _)| k[..] == v.to_le_bytes())
            .map(|(_, n)| u64::from_le_bytes(n[..8].try_into().unwrap()))
    };
    assert_eq!((count(0x1f3), count(0x1f4)), (Some(1), Some(1)));
}

/// A value that cannot be read is kept as unknown whatever the condition, and counted by no value.
#[test]
fn an_unreadable_value_is_kept_as_unknown() {
    let never = condition::parse("value == 12345").expect("parses");
    let (prog, mut m) = setup_with(&Filter::default(), Some(&never), true);
    m.memory = None;
    let got = hit(&mut m, &prog);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0.value, got[0].0.old), (None, None));
    assert!(m.entries(TOTALS.values.unwrap()).is_empty());
    assert_eq!(total(&m, totals::STAT_KEPT), 1);
}

/// While the `reads` flag is off (a read-write watch of a user address), a trap in user space is not
/// read (the read would trap again); one in the kernel still is.
#[test]
fn the_reads_flag_off_leaves_a_user_mode_trap_unread() {
    let (prog, mut m) = setup(true);
    m.set(
        MAPS.reads.unwrap(),
        &0u32.to_le_bytes(),
        &0u32.to_le_bytes(),
    );
    m.memory = Some(9);
    assert_eq!(hit(&mut m, &prog)[0].0.value, None);
    assert_eq!(m.read_with, None);
    m.user_mode = false;
    assert_eq!(hit(&mut m, &prog)[0].0.value, Some(9));
}

/// A record the ring has no room for is counted lost, in the program's stats and in the record that
/// next fits; the totals count it all the same.
#[test]
fn a_full_ring_counts_the_record_lost_and_the_next_carries_it() {
    let (prog, mut m) = setup(true);
    m.ring_room = 0;
    counted_not_written(&mut m, &prog, STAT_LOST);
    m.ring_room = usize::MAX;
    let got = hit(&mut m, &prog);
    assert_eq!(got[0].0.lost, 1);
    assert_eq!(total(&m, totals::STAT_KEPT), 2);
}

/// A CPU whose emitter is not in the program array (not wired yet) counts its records lost.
#[test]
fn a_cpu_without_an_emitter_counts_its_record_lost() {
    let (prog, mut m) = setup(false);
    m.cpu = 1;
    counted_not_written(&mut m, &prog, STAT_LOST);
    assert!(m.calls.contains(&Helper::TailCall));
}

/// A trap taken in the kernel: both stacks come from `bpf_get_stack`, the kernel's then the user's.
#[test]
fn a_kernel_mode_trap_takes_both_stacks_from_the_kernel() {
    let (prog, mut m) = setup(false);
    m.user_mode = false;
    m.regs[16] = 0xffff_ffff_8123_4567;
    m.kernel_stack = vec![0xffff_ffff_8123_4567, 0xffff_ffff_8100_1000];
    m.user_stack = vec![0x40_5000, 0x40_6000, 0x40_7000];
    let got = hit(&mut m, &prog);
    let want = HitRecord {
        flags: 0,
        ip: Some(0xffff_ffff_8123_4567),
        kernel_stack: m.kernel_stack.clone(),
        user_stack: m.user_stack.clone(),
        ..expected(&m, None)
    };
    assert_eq!(got, [(want, 0)]);
    let stacks = m.calls.iter().filter(|&&c| c == Helper::GetStack).count();
    assert_eq!(stacks, 2);
}

/// A hit 1 ms or more after its CPU's previous one asks for the kernel's wake-up rule; one within a
/// burst asks for none, except the one that brings what was written since the last wake-up to
/// `wake_bytes`, which forces one.
#[test]
fn the_emitter_wakes_a_lone_hit_and_every_wake_bytes_of_a_burst() {
    let f = Filter::default();
    let prog = generate(&spec(&f, None, false), &MAPS).expect("assembles");
    // A record here is 56 bytes, the header and the name, then 40, the header alone: the 2nd and 4th
    // bring what was written to 64 or more.
    let mut m = machine(&MAPS, 64);
    let mut flags = Vec::new();
    for gap in [0, 1_000, 1_000, 1_000, 2_000_000] {
        m.now += gap;
        flags.extend(hit(&mut m, &prog).iter().map(|(_, f)| *f));
    }
    let (no, force) = (RB_NO_WAKEUP as u64, RB_FORCE_WAKEUP as u64);
    assert_eq!(flags, [0, force, no, force, 0]);
}

/// The writer's name, loaded from the task where its offset is known or copied by the helper, is the
/// same name.
#[test]
fn the_name_comes_from_the_task_or_the_helper() {
    let f = Filter::default();
    for (offset, helper) in [
        (Some(COMM_OFFSET), Helper::GetCurrentTaskBtf),
        (None, Helper::GetCurrentComm),
    ] {
        let s = HitSpec {
            comm_offset: offset,
            process_start: Some(PROCESS_START),
            ..spec(&f, None, false)
        };
        let prog = generate(&s, &MAPS).expect("assembles");
        let mut m = machine(&MAPS, 1 << 14);
        m.comm = *b"pipes\0\0\0\0\0\0\0\0\0\0\0";
        assert_eq!(hit(&mut m, &prog)[0].0.comm.as_deref(), Some("pipes"));
        assert!(m.calls.contains(&helper), "{helper:?}");
    }
}

/// The first hit along a chain stores the chain in the `chains` map and its record names it by id: the
/// 40-byte header, and the name on the CPU's first record of its writer (240 and 256 with `--value`'s
/// value, old, registers and instruction bytes), where the chain inline made it 120 (280). A second hit
/// along it names the same id, the map unchanged; a hit along another chain (taken in the kernel) stores
/// that one too.
#[test]
fn a_chain_is_stored_once_and_each_record_names_it_by_id() {
    for value in [false, true] {
        let (prog, mut m) = setup(value);
        let header = if value { 240 } else { HEADER as usize };
        let first = raw_hit(&mut m, &prog);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].0.len(), header + 16, "the header and the name");
        let r = decode(&first[0].0).expect("a record");
        let key = r.chain.expect("named by id");
        assert_eq!(r.flags & (CHAIN_ID | IP_IN_CHAIN), CHAIN_ID | IP_IN_CHAIN);
        assert_eq!((r.ip, r.comm.as_deref()), (None, Some("writer")));
        assert!(r.kernel_stack.is_empty() && r.user_stack.is_empty());
        assert_eq!(key.hash, totals::chain_hash(&[], &[IP, RET0, RET1]));
        let chains = m.entries(TOTALS.chains);
        assert_eq!(chains.len(), 1);
        assert_eq!(chains[0].0, key.bytes());
        let r = resolved(&m, r);
        assert_eq!(r.user_stack, [IP, RET0, RET1], "the map holds the chain");
        assert_eq!(r.ip, Some(IP), "the chain's first frame");
        // The repeat: the same id, nothing stored, no name.
        m.now += 5_000_000;
        let again = raw_hit(&mut m, &prog);
        assert_eq!(again[0].0.len(), header);
        let r = decode(&again[0].0).expect("a record");
        assert_eq!((r.chain, r.comm), (Some(key), None));
        assert_eq!(m.entries(TOTALS.chains).len(), 1);
        assert_eq!(total(&m, totals::STAT_NO_CHAIN), 0);
        // Another chain: a kernel-mode trap's.
        m.user_mode = false;
        m.regs[16] = 0xffff_ffff_8123_4567;
        m.kernel_stack = vec![0xffff_ffff_8123_4567, 0xffff_ffff_8100_1000];
        m.user_stack = vec![0x40_5000, 0x40_6000];
        let other = hit(&mut m, &prog);
        assert_eq!(
            (
                other[0].0.kernel_stack.clone(),
                other[0].0.user_stack.clone()
            ),
            (m.kernel_stack.clone(), m.user_stack.clone())
        );
        assert_eq!(other[0].0.ip, Some(0xffff_ffff_8123_4567));
        assert_eq!(m.entries(TOTALS.chains).len(), 2);
    }
}

/// A trap whose chain does not start at its ip (a kernel stack the kernel could not take, here) carries
/// its ip: where the name would be when the record has no name, after the name when it has one.
#[test]
fn an_ip_the_chain_does_not_start_with_is_carried() {
    let (prog, mut m) = setup(false);
    m.user_mode = false;
    m.regs[16] = 0xffff_ffff_8123_4567;
    m.kernel_stack = vec![];
    m.user_stack = vec![0x40_5000, 0x40_6000];
    for (len, comm) in [(HEADER + 24, Some("writer")), (HEADER + 8, None)] {
        let got = raw_hit(&mut m, &prog);
        assert_eq!(got[0].0.len(), len as usize);
        let r = decode(&got[0].0).expect("a record");
        assert_eq!(r.flags & IP_IN_CHAIN, 0);
        assert_eq!(
            (r.ip, r.comm.as_deref()),
            (Some(0xffff_ffff_8123_4567), comm)
        );
        m.now += 5_000_000;
    }
}

/// The writer's name is in the record when the writer or its name is not the CPU's last record's, and
/// again after a record is lost (the reader never saw the last one's); not otherwise.
#[test]
fn the_name_comes_when_the_writer_or_its_name_changes_or_after_a_loss() {
    let (prog, mut m) = setup(false);
    let mut names = Vec::new();
    let mut step = |m: &mut FakeKernel, change: &dyn Fn(&mut FakeKernel)| {
        change(m);
        m.now += 5_000_000;
        let got = hit(m, &prog);
        names.push(got.first().map(|(r, _)| r.comm.clone()));
    };
    step(&mut m, &|_| {});
    step(&mut m, &|_| {});
    step(&mut m, &|m| m.comm = *b"renamed\0\0\0\0\0\0\0\0\0");
    step(&mut m, &|_| {});
    step(&mut m, &|m| m.pid_tgid = (100 << 32) | 102);
    step(&mut m, &|m| m.ring_room = 0);
    step(&mut m, &|m| m.ring_room = usize::MAX);
    step(&mut m, &|_| {});
    let s = |n: &str| Some(Some(n.to_string()));
    assert_eq!(
        names,
        [
            s("writer"),
            Some(None),
            s("renamed"),
            Some(None),
            s("renamed"),
            None,
            s("renamed"),
            Some(None)
        ]
    );
}

/// With `cgroup_ids` the record carries the writer's cgroup id (8 bytes after the header); without, the
/// helper is not called and the record has none.
#[test]
fn a_cgroup_id_is_read_only_where_the_spec_asks() {
    let f = Filter::default();
    for ids in [false, true] {
        let s = HitSpec {
            cgroup_ids: ids,
            ..spec(&f, None, false)
        };
        let prog = generate(&s, &MAPS).expect("assembles");
        let mut m = machine(&MAPS, 1 << 14);
        m.cgroup_id = 0x1234_5678;
        let got = raw_hit(&mut m, &prog);
        let r = decode(&got[0].0).expect("a record");
        assert_eq!(r.cgroup, ids.then_some(0x1234_5678));
        assert_eq!(r.flags & CGROUP_KNOWN != 0, ids);
        assert_eq!(
            got[0].0.len(),
            HEADER as usize + 16 + if ids { 8 } else { 0 }
        );
        assert_eq!(m.calls.contains(&Helper::GetCurrentCgroupId), ids);
        let layout = Layout::of(r.flags);
        assert_eq!(layout.comm(), HEADER + if ids { 8 } else { 0 });
    }
}

/// A chain the `chains` map has no room for comes inline in its record, with the name and the ip: nothing
/// is missing; the totals count the hit, its chain counted as unknown.
#[test]
fn a_full_chains_map_puts_the_chain_inline() {
    let (prog, mut m) = setup(false);
    let value = vec![0u8; totals::CHAIN_VALUE as usize];
    for i in 0..u64::from(totals::CHAINS_MAX) {
        m.set(TOTALS.chains, &i.to_le_bytes(), &value);
    }
    for _ in 0..2 {
        let got = raw_hit(&mut m, &prog);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].0.len(),
            HEADER as usize + 16 + 8 + 8 + 24,
            "name, ip, lengths and three frames inline, the writer's second record too"
        );
        let r = decode(&got[0].0).expect("a record");
        assert_eq!(r.chain, None);
        assert_eq!(r.flags & (CHAIN_ID | IP_IN_CHAIN), 0);
        assert_eq!(resolved(&m, r), expected(&m, None));
        m.now += 5_000_000;
    }
    assert_eq!(total(&m, totals::STAT_NO_CHAIN), 2);
    assert_eq!(total(&m, totals::STAT_KEPT), 2);
}

/// A CPU's hit along the chain its last hit found in the `chains` map does not look it up again; one
/// along another chain does, and so does the next one along the first.
#[test]
fn a_chain_again_on_a_cpu_is_not_looked_up_again() {
    let (prog, mut m) = setup(false);
    let lookups = |m: &mut FakeKernel, user: bool| {
        m.user_mode = user;
        m.regs[16] = if user { IP } else { 0xffff_ffff_8123_4567 };
        m.kernel_stack = vec![0xffff_ffff_8123_4567];
        m.user_stack = vec![0x40_5000];
        m.now += 5_000_000;
        let got = hit(m, &prog);
        assert_eq!(got.len(), 1);
        let n = m
            .calls
            .iter()
            .filter(|&&c| c == Helper::MapLookupElem)
            .count();
        (n, got[0].0.kernel_stack.len() + got[0].0.user_stack.len())
    };
    let first = lookups(&mut m, true);
    let again = lookups(&mut m, true);
    let other = lookups(&mut m, false);
    let back = lookups(&mut m, true);
    assert_eq!(again.0 + 1, first.0, "the chain is known: no lookup");
    // Back to the first chain: it is looked up, and the other chain's pending count goes to `counts`
    // (one lookup there).
    assert_eq!(
        (back.0, back.1),
        (again.0 + 2, first.1),
        "after another chain: looked up"
    );
    assert_eq!(other.1, 2, "the kernel trap's chain");
    assert_eq!(m.entries(TOTALS.chains).len(), 2);
}

/// A writer that stores again along one chain is counted in the CPU's pending count, with no map
/// operation; another key adds the pending hits to `counts` first. What the tracer reads (`counts` and
/// the pending count) holds every kept hit.
#[test]
fn hits_along_one_key_are_counted_pending_and_added_when_the_key_changes() {
    let (prog, mut m) = setup(false);
    let key = |m: &FakeKernel, tid: u32| totals::CountKey {
        pid: 100,
        tid,
        chain: crate::perf::hit_record::ChainKey {
            hash: totals::chain_hash(&[], &[IP, RET0, RET1]),
        },
        comm: m.comm,
        cgroup: None,
    };
    for _ in 0..5 {
        m.now += 5_000_000;
        hit(&mut m, &prog);
    }
    assert!(
        m.entries(TOTALS.counts).is_empty(),
        "nothing added to the map yet"
    );
    assert_eq!(m.counts(TOTALS.counts, MAPS.scratch), [(key(&m, 101), 5)]);
    m.pid_tgid = (100 << 32) | 102;
    hit(&mut m, &prog);
    assert_eq!(
        m.entries(TOTALS.counts).len(),
        1,
        "the first thread's five, added"
    );
    assert_eq!(
        m.counts(TOTALS.counts, MAPS.scratch),
        [(key(&m, 101), 5), (key(&m, 102), 1)]
    );
    m.pid_tgid = (100 << 32) | 101;
    hit(&mut m, &prog);
    assert_eq!(
        m.counts(TOTALS.counts, MAPS.scratch),
        [(key(&m, 101), 6), (key(&m, 102), 1)],
        "added to the key the map holds"
    );
    assert_eq!(total(&m, totals::STAT_KEPT), 7);
    assert_eq!(total(&m, totals::STAT_UNCOUNTED), 0);
}

/// Pending hits that `counts` has no room for when their key changes are counted as uncounted, all of
/// them: kept = counted + pending + uncounted.
#[test]
fn pending_hits_a_full_table_has_no_room_for_are_all_uncounted() {
    let (prog, mut m) = setup(false);
    m.limit(TOTALS.counts, 1);
    for tid in [101, 102, 103] {
        m.pid_tgid = (100 << 32) | tid;
        for _ in 0..3 {
            m.now += 5_000_000;
            hit(&mut m, &prog);
        }
    }
    let counts = m.counts(TOTALS.counts, MAPS.scratch);
    let tids: Vec<(u32, u64)> = counts.iter().map(|(k, n)| (k.tid, *n)).collect();
    assert_eq!(
        tids,
        [(101, 3), (103, 3)],
        "the map's one key, and the pending one"
    );
    assert_eq!(total(&m, totals::STAT_UNCOUNTED), 3, "thread 102's three");
    assert_eq!(total(&m, totals::STAT_KEPT), 9);
}

/// The per-thread path's maps: no `procs` (the events choose the threads).
const THREAD_MAPS: HitMaps = HitMaps {
    procs: None,
    ..MAPS
};

/// The per-thread path's `--value` spec, its check as the machine's kernel has it.
fn per_thread<'a>(filter: &'a Filter, condition: Option<&'a Condition>) -> HitSpec<'a> {
    HitSpec {
        repeats: Some(Repeats {
            kern_ctx: KERN_CTX_ID,
            event: EVENT_OFFSET,
        }),
        ..spec(filter, condition, true)
    }
}

/// A thread covered by two events (its own, and the one inherited from its creator): the kernel runs the
/// program once per event for each trap, back to back. Only the first report of a store is kept: the
/// second is counted as a repeat, in no total, and the old value is swapped once (the next store's old
/// is this one's value, not a repeat's). The same event again is the loop's next store at the same ip,
/// and another thread's store at that ip is its own; a third event seen for one store is a repeat too.
#[test]
fn a_second_events_report_of_one_store_is_dropped_before_anything_counts() {
    let f = Filter::default();
    let prog = generate(&per_thread(&f, None), &THREAD_MAPS).expect("assembles");
    let mut m = machine(&THREAD_MAPS, 1 << 14);
    let (own, inherited, third) = (
        0xffff_8880_0a00_0000,
        0xffff_8880_0b00_0400,
        0xffff_8880_0c00_0800,
    );
    let report = |m: &mut FakeKernel, event: u64, value: u64| {
        m.event = event;
        m.memory = Some(value);
        m.now += 10;
        hit(m, &prog)
            .into_iter()
            .map(|(r, _)| (r.tid, r.value, r.old))
            .collect::<Vec<_>>()
    };
    assert_eq!(report(&mut m, own, 1), [(101, Some(1), None)]);
    assert_eq!(report(&mut m, inherited, 1), []);
    // The loop's next store: same thread, same ip, the first event again.
    assert_eq!(report(&mut m, own, 2), [(101, Some(2), Some(1))]);
    assert_eq!(report(&mut m, inherited, 2), []);
    assert_eq!(report(&mut m, third, 2), []);
    // The handlers' order is the kernel's: the inherited event may come first.
    assert_eq!(report(&mut m, inherited, 3), [(101, Some(3), Some(2))]);
    assert_eq!(report(&mut m, own, 3), []);
    // Another thread of the process at the same ip, through the event it inherited.
    m.pid_tgid = (100 << 32) | 102;
    assert_eq!(report(&mut m, inherited, 4), [(102, Some(4), Some(3))]);
    assert_eq!(m.stat(STAT_REPEATED), 4);
    assert_eq!(m.stat(STAT_FILTERED), 0);
    assert_eq!(total(&m, totals::STAT_KEPT), 4);
    let counted: u64 = m
        .counts(TOTALS.counts, THREAD_MAPS.scratch)
        .iter()
        .map(|(_, n)| n)
        .sum();
    assert_eq!(counted, 4, "each store counted once");
}

/// `--if` and `--count` on the per-thread path see each store once: a repeat is dropped before the
/// condition (it is not counted as filtered) and before the count claims (two stores reported twice
/// each fill `--count 2`, and the third store is past it).
#[test]
fn a_repeat_is_dropped_before_the_condition_and_the_count() {
    let f = Filter::default();
    let odd = condition::parse("value & 1").expect("parses");
    let maps = HitMaps {
        totals: Some(TotalsMaps {
            limit: Some((LIMIT, 2)),
            ..TOTALS
        }),
        ..THREAD_MAPS
    };
    let prog = generate(&per_thread(&f, Some(&odd)), &maps).expect("assembles");
    let mut m = machine(&maps, 1 << 14);
    let mut kept = Vec::new();
    for value in [1, 2, 3, 5] {
        for event in [0xffff_8880_0a00_0000, 0xffff_8880_0b00_0000] {
            m.event = event;
            m.memory = Some(value);
            m.now += 10;
            kept.extend(hit(&mut m, &prog).into_iter().map(|(r, _)| r.value));
        }
    }
    assert_eq!(kept, [Some(1), Some(3)]);
    assert_eq!(m.stat(STAT_REPEATED), 4);
    assert_eq!(m.stat(STAT_FILTERED), 1, "the even store, once");
    assert_eq!(total(&m, totals::STAT_KEPT), 2);
    assert_eq!(
        total(&m, totals::STAT_BEYOND_COUNT),
        1,
        "the fourth store, once"
    );
}

/// The check is the per-thread program's alone: a per-CPU program is the same instructions as before
/// it existed, and the per-thread one is that program with the check (which calls the kfunc) right
/// after its first instruction.
#[test]
fn only_the_per_thread_program_has_the_check() {
    let f = Filter::default();
    let odd = condition::parse("value & 1").expect("parses");
    for (cond, value) in [(None, false), (None, true), (Some(&odd), true)] {
        let per_cpu = generate(&spec(&f, cond, value), &THREAD_MAPS).expect("assembles");
        let threads = HitSpec {
            repeats: per_thread(&f, cond).repeats,
            ..spec(&f, cond, value)
        };
        let per_thread = generate(&threads, &THREAD_MAPS).expect("assembles");
        let check = per_thread.len() - per_cpu.len();
        assert_eq!(per_thread[0], per_cpu[0]);
        assert_eq!(per_thread[1 + check..], per_cpu[1..]);
        let kfunc = |i: &Insn| i.code == 0x85 && i.src == super::insn::PSEUDO_KFUNC_CALL;
        assert_eq!(per_thread[1..=check].iter().filter(|i| kfunc(i)).count(), 1);
        assert!(!per_cpu.iter().any(kfunc));
    }
}
