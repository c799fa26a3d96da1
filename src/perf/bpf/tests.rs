//! The value, old value, filters and condition code ([`super::program`]) run offline in
//! [`super::interp`] inside the hit program of a system-wide `--value` watch: what each hit reports
//! (value, old, address and their flags, decoded from its record as the tracer reads it), what it drops,
//! and that every condition means what a plain Rust reading of it says, at every width and sign.

use super::hit::{generate, HitMaps, HitSpec};
use super::insn::Insn;
use super::interp::{FakeKernel, BY_TGID_ENTRIES};
use super::kernel::Helper;
use crate::model::condition::{Compare, Condition, Op, Rhs, Side};
use crate::model::filter::{Filter, Place};
use crate::perf::hit_record;

/// The maps of a system-wide watch that keeps old values in the hash alone.
type Maps = HitMaps;
const MAPS: Maps = HitMaps::SYSTEM_FOR_TESTS;
/// The maps with a by-tgid olds array, as the hit program of a watch that keeps old values has them.
const ARRAY_MAPS: Maps = Maps {
    olds_by_tgid: Some(6),
    ..MAPS
};
/// The ring buffer the CPU's emitter writes into.
const RING: i32 = 30;
const USER_ADDR: u64 = 0x60_1000;
const KERNEL_ADDR: u64 = 0xffff_ffff_8300_3e00;
/// A hit's flags as [`store`] gives them.
const VALUE_KNOWN: u64 = hit_record::VALUE_KNOWN as u64;
const OLD_KNOWN: u64 = hit_record::OLD_KNOWN as u64;

/// The hit program of a `--value` watch of `len` bytes (`--if` with `condition`) on [`MAPS`], and a
/// machine trapping at `addr` to run it on.
fn watch(
    len: u8,
    condition: Option<&Condition>,
    filter: &Filter,
    addr: u64,
) -> (Vec<Insn>, FakeKernel) {
    watch_with(MAPS, len, condition, filter, addr)
}

/// [`watch`] on `maps`.
fn watch_with(
    maps: Maps,
    len: u8,
    condition: Option<&Condition>,
    filter: &Filter,
    addr: u64,
) -> (Vec<Insn>, FakeKernel) {
    (
        program_with(&maps, len, condition, filter),
        machine(maps, addr),
    )
}

/// The hit program of a `--value` (`--if` with `condition`) watch of `len` bytes.
fn program_with(maps: &Maps, len: u8, condition: Option<&Condition>, filter: &Filter) -> Vec<Insn> {
    let spec = HitSpec {
        len,
        regs: false,
        ..super::hit_tests::spec(filter, condition, true)
    };
    generate(&spec, maps).expect("assembles")
}

/// A machine for `maps`' program, a trap at `addr` (its by-tgid array, if any, at generation 1, as the
/// tracer makes it).
fn machine(maps: Maps, addr: u64) -> FakeKernel {
    FakeKernel::for_hit(&maps, addr, RING, 1 << 14)
}

/// Stores `value` (as the memory holds it after the store) and runs the program: whether the hit is
/// reported, and its record's value, old, address and flags (`VALUE_KNOWN`, `OLD_KNOWN`).
fn store(m: &mut FakeKernel, prog: &[Insn], value: Option<u64>) -> Option<[u64; 4]> {
    m.memory = value;
    let before = m.ring(RING).len();
    assert_eq!(
        m.run(prog),
        0,
        "the program returns 0: the kernel writes no sample"
    );
    let records = &m.ring(RING)[before..];
    assert!(records.len() <= 1, "one record a hit at most");
    let (bytes, _) = records.first()?;
    let r = hit_record::decode(bytes).expect("a record");
    let flags = r.flags & (hit_record::VALUE_KNOWN | hit_record::OLD_KNOWN);
    Some([
        r.value.unwrap_or(0),
        r.old.unwrap_or(0),
        r.addr,
        u64::from(flags),
    ])
}

/// An 8-byte watch at `addr` whose memory the first process stores `first` into, then the thread
/// `pid_tgid` `second`: the program, the machine and the second store's record.
fn stored_by_two_processes(
    addr: u64,
    first: u64,
    pid_tgid: u64,
    second: u64,
) -> (Vec<Insn>, FakeKernel, [u64; 4]) {
    let (prog, mut m) = watch(8, None, &Filter::default(), addr);
    store(&mut m, &prog, Some(first));
    m.pid_tgid = pid_tgid;
    let rec = store(&mut m, &prog, Some(second)).expect("the second store is reported");
    (prog, m, rec)
}

#[test]
fn reports_value_and_old_for_each_store() {
    let (prog, mut m) = watch(4, None, &Filter::default(), USER_ADDR);
    let first = store(&mut m, &prog, Some(0x1f3)).unwrap();
    assert_eq!(first, [0x1f3, 0, USER_ADDR, VALUE_KNOWN]);
    let second = store(&mut m, &prog, Some(0x1f4)).unwrap();
    assert_eq!(second, [0x1f4, 0x1f3, USER_ADDR, VALUE_KNOWN | OLD_KNOWN]);
    assert_eq!(m.read_with, Some(Helper::ProbeReadUser));
    // A user address keeps its old value per process (tgid 100 in the machine).
    assert_eq!(m.old(100), Some(0x1f4));
    // Only the watch's 4 bytes are read: the upper half of the word is not part of the value.
    let third = store(&mut m, &prog, Some(0xdead_0000_0000_0005)).unwrap();
    assert_eq!(third[0], 5);
    assert_eq!(m.dropped(), 0);
}

#[test]
fn a_kernel_address_is_read_as_kernel_memory_with_one_old_value() {
    let (prog, mut m, rec) = stored_by_two_processes(KERNEL_ADDR, 7, (200 << 32) | 201, 8);
    assert_eq!(m.read_with, Some(Helper::ProbeReadKernel));
    assert_eq!(
        rec[..2],
        [8, 7],
        "another process sees the same kernel variable's history"
    );
    assert_eq!(m.old(KERNEL_ADDR), Some(8), "keyed by the address");
    // Another CPU's copy of a per-CPU variable is another address, with its own history.
    m.addr = KERNEL_ADDR + 0x10_0000;
    let rec = store(&mut m, &prog, Some(9)).unwrap();
    assert_eq!(rec[0], 9);
    assert_eq!(m.old(KERNEL_ADDR + 0x10_0000), Some(9));
    assert_eq!(m.old(KERNEL_ADDR), Some(8));
}

#[test]
fn separate_processes_have_separate_old_values_at_a_user_address() {
    let (_, _, rec) = stored_by_two_processes(USER_ADDR, 1, (300 << 32) | 300, 2);
    assert_eq!(
        rec[3], VALUE_KNOWN,
        "no old value in a process not seen before"
    );
}

/// A pid reused: the process that takes it (another start time) finds the earlier process's entry, in
/// the by-tgid array and in the hash, and its first hit has no old value, in the record as for `--if`
/// (`changed` holds for it); a kernel address keeps one history whoever writes it.
#[test]
fn a_reused_pid_starts_with_no_old_value() {
    let (changed, f) = (Condition::Changed, Filter::default());
    let known = VALUE_KNOWN | OLD_KNOWN;
    for maps in [MAPS, ARRAY_MAPS] {
        for tgid in [100, BY_TGID_ENTRIES as u64 + 5] {
            let prog = program_with(&maps, 8, Some(&changed), &f);
            let mut m = machine(maps, USER_ADDR);
            m.pid_tgid = (tgid << 32) | tgid;
            assert!(store(&mut m, &prog, Some(7)).is_some());
            assert_eq!(
                store(&mut m, &prog, Some(7)),
                None,
                "unchanged, in one process"
            );
            // Another process under the same pid stores the same 7: its first store, a change.
            m.start_time += 1;
            let first = store(&mut m, &prog, Some(7));
            assert_eq!(first, Some([7, 0, USER_ADDR, VALUE_KNOWN]), "tgid {tgid}");
            assert_eq!(store(&mut m, &prog, Some(7)), None, "its own old from here");
            let next = store(&mut m, &prog, Some(8));
            assert_eq!(next, Some([8, 7, USER_ADDR, known]));
        }
    }
    let (prog, mut m) = watch(8, None, &f, KERNEL_ADDR);
    store(&mut m, &prog, Some(7));
    m.start_time += 1;
    assert_eq!(
        store(&mut m, &prog, Some(8)),
        Some([8, 7, KERNEL_ADDR, known])
    );
}

/// A process that execs runs a new image: its first hit after the exec (the ELF loader's, say) has no
/// old value; the threads after it share the new one.
#[test]
fn an_exec_starts_with_no_old_value() {
    for maps in [MAPS, ARRAY_MAPS] {
        let (prog, mut m) = watch_with(maps, 8, None, &Filter::default(), USER_ADDR);
        store(&mut m, &prog, Some(7));
        m.exec_id += 1;
        let first = store(&mut m, &prog, Some(8));
        assert_eq!(first, Some([8, 0, USER_ADDR, VALUE_KNOWN]));
        m.pid_tgid += 1;
        let thread = store(&mut m, &prog, Some(9));
        assert_eq!(thread, Some([9, 8, USER_ADDR, VALUE_KNOWN | OLD_KNOWN]));
    }
}

/// A value that cannot be read is reported as unknown whatever the condition, and leaves the old value.
#[test]
fn an_unreadable_value_is_reported_not_filtered() {
    let never = cmp(Side::Value, Op::Eq, 12345, false);
    let (prog, mut m) = watch(8, Some(&never), &Filter::default(), USER_ADDR);
    assert_eq!(store(&mut m, &prog, Some(1)), None);
    assert_eq!(m.dropped(), 1);
    let rec = store(&mut m, &prog, None).unwrap();
    assert_eq!(rec[3], 0, "neither value nor old known");
    assert_eq!(m.old(100), Some(1));
}

fn cmp(left: Side, op: Op, value: i128, signed: bool) -> Condition {
    Condition::Compare(Compare {
        left,
        op,
        right: Rhs::Const { value, column: 1 },
        signed,
        column: 1,
    })
}

/// The condition read plainly (the tracer's own reading, [`Condition::holds`]): what the program must do.
fn eval(c: &Condition, value: u64, old: Option<u64>, len: u8) -> bool {
    c.holds(value, old, len)
}

/// Runs `cond` on (old, value) pairs at width `len`: the program keeps exactly the hits [`eval`] keeps,
/// with old values in the hash and in the by-tgid array alike.
fn agrees(cond: &Condition, len: u8, samples: &[u64]) {
    agrees_with(MAPS, cond, len, samples);
    agrees_with(ARRAY_MAPS, cond, len, samples);
}

fn agrees_with(maps: Maps, cond: &Condition, len: u8, samples: &[u64]) {
    let f = Filter::default();
    let prog = program_with(&maps, len, Some(cond), &f);
    let mask = if len == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * len)) - 1
    };
    for &value in samples {
        let value = value & mask;
        // The first hit: no old value.
        let mut fresh = machine(maps, USER_ADDR);
        let kept = store(&mut fresh, &prog, Some(value)).is_some();
        assert_eq!(
            kept,
            eval(cond, value, None, len),
            "{cond:?} len {len} value {value:#x} old ?"
        );
        for &old in samples {
            let old = old & mask;
            let mut m = machine(maps, USER_ADDR);
            store(&mut m, &prog, Some(old));
            let got = store(&mut m, &prog, Some(value));
            assert_eq!(
                got.is_some(),
                eval(cond, value, Some(old), len),
                "{cond:?} len {len} value {value:#x} old {old:#x}"
            );
            if let Some(rec) = got {
                assert_eq!(rec, [value, old, USER_ADDR, VALUE_KNOWN | OLD_KNOWN]);
            }
        }
    }
}

const SAMPLES: [u64; 9] = [
    0,
    1,
    2,
    0x7f,
    0x80,
    0xff,
    0x7fff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
];

#[test]
fn every_comparison_at_every_width_and_sign_agrees_with_its_reading() {
    let ops = [Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge, Op::BitAnd];
    for len in [1u8, 2, 4, 8] {
        for op in ops {
            for signed in [false, true] {
                for k in [0i128, 1, 0x7f, -1, -128] {
                    agrees(&cmp(Side::Value, op, k, signed), len, &SAMPLES);
                    agrees(&cmp(Side::Old, op, k, signed), len, &SAMPLES);
                }
                let vs_old = Condition::Compare(Compare {
                    left: Side::Value,
                    op,
                    right: Rhs::Side(Side::Old),
                    signed,
                    column: 1,
                });
                agrees(&vs_old, len, &SAMPLES);
            }
        }
    }
}

#[test]
fn changed_and_the_connectives_agree_with_their_reading() {
    let changed = Condition::Changed;
    let big = cmp(Side::Value, Op::Gt, 0x7f, false);
    let neg = cmp(Side::Value, Op::Lt, 0, true);
    let and = Condition::And(Box::new(changed.clone()), Box::new(big.clone()));
    let or = Condition::Or(
        Box::new(neg.clone()),
        Box::new(cmp(Side::Old, Op::Eq, 2, false)),
    );
    let nested = Condition::Or(
        Box::new(and.clone()),
        Box::new(Condition::And(Box::new(neg), Box::new(or.clone()))),
    );
    for len in [1u8, 8] {
        for c in [&changed, &and, &or, &nested] {
            agrees(c, len, &SAMPLES);
        }
    }
}

/// Filters drop in the kernel and count what they dropped.
#[test]
fn filters_drop_in_the_kernel() {
    let tids = Filter {
        tids: vec![101, 7],
        ..Filter::default()
    };
    let (prog, mut m) = watch(8, None, &tids, USER_ADDR);
    assert!(store(&mut m, &prog, Some(1)).is_some());
    m.pid_tgid = (100 << 32) | 102;
    assert!(store(&mut m, &prog, Some(2)).is_none());
    assert_eq!(m.dropped(), 1);
    // The old value still follows the dropped store.
    m.pid_tgid = (100 << 32) | 101;
    assert_eq!(store(&mut m, &prog, Some(3)).unwrap()[1], 2);

    let comms = Filter {
        comms: vec!["bash".into(), "writer".into()],
        ..Filter::default()
    };
    let (prog, mut m) = watch(8, None, &comms, USER_ADDR);
    assert!(store(&mut m, &prog, Some(1)).is_some());
    m.comm = *b"writer2\0\0\0\0\0\0\0\0\0";
    assert!(store(&mut m, &prog, Some(1)).is_none());
    m.comm = *b"bash\0\0\0\0\0\0\0\0\0\0\0\0";
    assert!(store(&mut m, &prog, Some(1)).is_some());
    // The idle task is `<idle>` to the tracer and `swapper/N` to the kernel.
    let idle = Filter {
        comms: vec!["<idle>".into()],
        ..Filter::default()
    };
    let (prog, mut m) = watch(8, None, &idle, KERNEL_ADDR);
    m.comm = *b"swapper/0\0\0\0\0\0\0\0";
    m.pid_tgid = 0;
    assert!(store(&mut m, &prog, Some(1)).is_some());
    m.pid_tgid = (5 << 32) | 5;
    assert!(store(&mut m, &prog, Some(1)).is_none());
    let no_idle = Filter {
        exclude_idle: true,
        ..Filter::default()
    };
    let (prog, mut m) = watch(8, None, &no_idle, KERNEL_ADDR);
    m.pid_tgid = 0;
    assert!(store(&mut m, &prog, Some(1)).is_none());

    for (place, user_mode, kept) in [
        (Place::Kernel, false, true),
        (Place::Kernel, true, false),
        (Place::User, true, true),
        (Place::User, false, false),
    ] {
        let f = Filter {
            place,
            ..Filter::default()
        };
        let (prog, mut m) = watch(8, None, &f, USER_ADDR);
        m.user_mode = user_mode;
        assert_eq!(
            store(&mut m, &prog, Some(1)).is_some(),
            kept,
            "{place:?} user {user_mode}"
        );
    }
}

/// Every `--comm` name is checked in the kernel, as the tracer checks it on the hit path (each hit named
/// as the program read it, the idle task `<idle>`): a name in angle brackets is a task's own, and the
/// program keeps no hit the tracer would then drop, so none takes `--count`'s hits or the totals. (It
/// once let every hit through for such a name: `--comm '<foo>' --count 2` ended with 0 hits printed.)
#[test]
fn every_comm_is_decided_in_the_kernel_as_the_tracer_decides_it() {
    // Whether `--comm name` keeps a store at `addr` by a task the kernel calls `comm`, of pid/tgid `who`.
    let kept = |name: &str, addr, comm: &[u8], who: u64| {
        let f = Filter {
            comms: vec![name.into()],
            ..Filter::default()
        };
        let (prog, mut m) = watch(8, None, &f, addr);
        m.comm = [0; 16];
        m.comm[..comm.len()].copy_from_slice(comm);
        m.pid_tgid = who;
        store(&mut m, &prog, Some(1)).is_some()
    };
    let task = (100 << 32) | 101;
    for name in ["<...>", "<foo>"] {
        assert!(!kept(name, USER_ADDR, b"writer", task), "{name}: another");
        assert!(
            kept(name, USER_ADDR, name.as_bytes(), task),
            "{name}: its own"
        );
    }
    // The idle task is `<idle>` to the tracer, not `swapper/0` (the kernel's name for it).
    assert!(kept("<idle>", KERNEL_ADDR, b"swapper/0", 0));
    assert!(!kept("swapper/0", KERNEL_ADDR, b"swapper/0", 0));
    // A name of 16 bytes or more is no task's: the kernel keeps 15.
    assert!(!kept(
        "a_name_too_long_",
        USER_ADDR,
        b"a_name_too_long",
        task
    ));
}

/// Each store, (tgid, address, value), through `prog` on `m` in order: the records kept.
fn run_stores(
    m: &mut FakeKernel,
    prog: &[Insn],
    stores: &[(u64, u64, u64)],
) -> Vec<Option<[u64; 4]>> {
    stores
        .iter()
        .map(|&(tgid, addr, value)| {
            m.pid_tgid = (tgid << 32) | tgid;
            m.addr = addr;
            store(m, prog, Some(value))
        })
        .collect()
}

/// The by-tgid array changes where old values are kept, not what a hit reports: the same stores give the
/// same records as with the hash alone, the dropped ones' values included as the next kept hit's `old`.
#[test]
fn the_by_tgid_array_reports_what_the_hash_does() {
    let f = Filter::default();
    let cond = cmp(Side::Value, Op::Ne, 3, false);
    let far = BY_TGID_ENTRIES as u64 + 5;
    let known = VALUE_KNOWN | OLD_KNOWN;
    // Each store and the record kept of it (every 3 is dropped).
    let (stores, records): (Vec<_>, Vec<_>) = [
        ((100, USER_ADDR, 1), Some([1, 0, USER_ADDR, VALUE_KNOWN])),
        ((100, USER_ADDR, 3), None),
        // The dropped store is the next hit's old.
        ((100, USER_ADDR, 4), Some([4, 3, USER_ADDR, known])),
        // Another process, its own history.
        ((200, USER_ADDR, 3), None),
        ((200, USER_ADDR, 5), Some([5, 3, USER_ADDR, known])),
        ((100, USER_ADDR, 6), Some([6, 4, USER_ADDR, known])),
        // A tgid past the array.
        ((far, USER_ADDR, 3), None),
        ((far, USER_ADDR, 7), Some([7, 3, USER_ADDR, known])),
        // A kernel address, one history.
        ((100, KERNEL_ADDR, 3), None),
        ((200, KERNEL_ADDR, 8), Some([8, 3, KERNEL_ADDR, known])),
        // Tgid 0.
        ((0, USER_ADDR, 3), None),
        ((0, USER_ADDR, 9), Some([9, 3, USER_ADDR, known])),
    ]
    .into_iter()
    .unzip();
    let run = |maps: Maps| {
        let prog = program_with(&maps, 8, Some(&cond), &f);
        run_stores(&mut machine(maps, USER_ADDR), &prog, &stores)
    };
    let (hash, array) = (run(MAPS), run(ARRAY_MAPS));
    assert_eq!(array, hash);
    assert_eq!(array, records);
}

/// Tgids the array covers keep their old values there; a tgid past its end, tgid 0 and a kernel address
/// keep theirs in the hash.
#[test]
fn only_tgids_the_array_covers_leave_the_hash() {
    let (prog, mut m) = watch_with(ARRAY_MAPS, 8, None, &Filter::default(), USER_ADDR);
    let far = BY_TGID_ENTRIES as u64;
    let stores = [
        (100, USER_ADDR, 1),
        (far, USER_ADDR, 2),
        (0, USER_ADDR, 3),
        (0, KERNEL_ADDR, 4),
    ];
    run_stores(&mut m, &prog, &stores);
    assert_eq!(m.old(100), None, "in the array");
    assert_eq!(m.old(far), Some(2));
    assert_eq!(m.old(0), Some(3));
    assert_eq!(m.old(KERNEL_ADDR), Some(4));
}

/// A new generation (a `--control` move) forgets every old value in the array: the next hit of each
/// process has none, the one after it the value before.
#[test]
fn a_new_generation_forgets_the_arrays_old_values() {
    let (prog, mut m) = watch_with(ARRAY_MAPS, 8, None, &Filter::default(), USER_ADDR);
    store(&mut m, &prog, Some(1));
    assert_eq!(store(&mut m, &prog, Some(2)).unwrap()[..2], [2, 1]);
    m.set_generation(2);
    let rec = store(&mut m, &prog, Some(3)).unwrap();
    assert_eq!(
        rec,
        [3, 0, USER_ADDR, VALUE_KNOWN],
        "no old value after a new generation"
    );
    assert_eq!(store(&mut m, &prog, Some(4)).unwrap()[..2], [4, 3]);
}

/// An unreadable value leaves the array's old value as it was, as it leaves the hash's.
#[test]
fn an_unreadable_value_leaves_the_arrays_old_value() {
    let (prog, mut m) = watch_with(ARRAY_MAPS, 8, None, &Filter::default(), USER_ADDR);
    store(&mut m, &prog, Some(1));
    assert_eq!(store(&mut m, &prog, None).unwrap()[3], 0);
    assert_eq!(store(&mut m, &prog, Some(2)).unwrap()[..2], [2, 1]);
}
