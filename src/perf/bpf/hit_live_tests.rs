//! The hit program against the real kernel: loaded through the verifier, attached to per-CPU breakpoints
//! on a variable of this test process, it must emit one record per store of a watched process (with its
//! tid, comm, value, registers, instruction bytes and user stack) and count the stores of a process it does
//! not watch instead of emitting them. Live: run by `scripts/test` (root), ignored by plain `cargo test`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use perf_event_open_sys::bindings as pb;

use super::hit_set::{Checks, HitKind, HitPrograms, Watching};
use super::hit_variants::Variant;
use crate::model::filter::Filter;
use crate::model::watch::{Access, Watch};
use crate::perf::attr::ring_attr;
use crate::perf::hit_record::{decode, HitRecord, USER_MODE};
use crate::perf::record::{SAMPLE_CPU, SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME};
use crate::perf::ring::Ring;
use crate::perf::sys;

static TARGET: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn store(v: u64) {
    TARGET.store(v, Ordering::Relaxed);
}

/// A pinned per-CPU write breakpoint whose own samples carry no call chain (the hit path's event).
fn breakpoint(addr: u64, cpu: u32) -> std::io::Result<OwnedFd> {
    let mut a = ring_attr(pb::PERF_TYPE_BREAKPOINT);
    a.bp_type = pb::HW_BREAKPOINT_W;
    a.bp_addr = addr;
    a.bp_len = 8;
    a.sample_type = SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU;
    a.set_disabled(1);
    a.set_pinned(1);
    sys::perf_event_open(&a, -1, cpu as i32)
}

/// The live-test lock, or `None` (after saying why) when this is not root.
fn live(test: &str) -> Option<std::fs::File> {
    if !super::root_or_skip(
        &format!("hit_live_tests::{test}"),
        "BPF and CPU-wide breakpoints",
    ) {
        return None;
    }
    let lock = std::fs::File::create("/tmp/ksymwatch-live-tests.lock").expect("lock file");
    sys::lock_exclusive(&lock).expect("flock");
    Some(lock)
}

/// A live test: ignored by plain `cargo test`, its body run under the live-test lock ([`live`], which
/// skips, saying why, where this is not root).
macro_rules! live_test {
    ($name:ident, $body:block) => {
        #[test]
        #[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
        fn $name() {
            let Some(_lock) = live(stringify!($name)) else {
                return;
            };
            $body
        }
    };
}

/// Per-CPU breakpoints on `addr` with the hit program of a watch of this process, around `work`; the hit
/// records of this process, by CPU, and the program.
fn watch_during(
    addr: u64,
    work: impl FnOnce(&HitPrograms, &[BorrowedFd<'_>]),
) -> (Vec<(u32, HitRecord)>, HitPrograms) {
    watch_during_parts(addr, Variant::default(), work)
}

/// [`watch_during`] with the programs `parts` builds. `work` gets the programs and the CPUs' ring buffers.
fn watch_during_parts(
    addr: u64,
    parts: Variant,
    work: impl FnOnce(&HitPrograms, &[BorrowedFd<'_>]),
) -> (Vec<(u32, HitRecord)>, HitPrograms) {
    watch_during_ring(addr, parts, 64, work)
}

/// The tests' watch: the 8 bytes at `addr`, for writes.
fn target_watch(addr: u64) -> Watch {
    Watch {
        label: "TARGET".into(),
        addr,
        len: 8,
        access: Access::Write,
        module: None,
        per_cpu: None,
    }
}

/// [`watch_during_parts`] with rings of `pages` data pages.
fn watch_during_ring(
    addr: u64,
    parts: Variant,
    pages: usize,
    work: impl FnOnce(&HitPrograms, &[BorrowedFd<'_>]),
) -> (Vec<(u32, HitRecord)>, HitPrograms) {
    let watch = target_watch(addr);
    let cpus = crate::cpulist::read(Path::new(crate::cpulist::ONLINE)).expect("online cpus");
    // The hit program and each CPU's emitter as `parts` builds them.
    let checks = Checks {
        watches: &[watch],
        condition: None,
        filter: &Filter::default(),
    };
    let kind = HitKind {
        watching: Watching::Processes {
            pids: Vec::new(),
            follow_children: false,
        },
        written: true,
    };
    let programs = HitPrograms::load_built(checks, &kind, pages, Box::new(parts)).expect("loads");
    let mut armed = Vec::new();
    for &cpu in &cpus {
        let bp = breakpoint(addr, cpu).expect("breakpoint");
        let ring = Ring::map(bp.as_fd(), 64).expect("ring");
        let hits = programs.attach(0, cpu, bp.as_fd()).expect("attach");
        armed.push((cpu, bp, ring, hits));
    }
    let me = std::process::id();
    programs.watch_process(me).expect("procs map");
    for (_, bp, _, _) in &armed {
        sys::perf_enable(bp.as_fd()).expect("enable");
    }
    let rings: Vec<BorrowedFd<'_>> = armed.iter().map(|(_, _, _, r)| r.fd()).collect();
    work(&programs, &rings);
    drop(rings);
    for (_, bp, _, _) in &armed {
        sys::perf_disable(bp.as_fd()).expect("disable");
    }
    let mut hits = Vec::new();
    for (cpu, _, ring, ring_buffer) in &mut armed {
        ring.drain(|bytes| {
            let kind = u32::from_ne_bytes(bytes[..4].try_into().unwrap());
            assert_ne!(
                kind,
                crate::perf::record::RECORD_SAMPLE,
                "the breakpoint writes no sample of its own"
            );
            true
        });
        // A record without a name is its ring's previous writer's, as the tracer reads it.
        let mut last_comm = None;
        ring_buffer.drain(|bytes| {
            let mut h = decode(bytes).expect("a hit record");
            match &h.comm {
                Some(c) => last_comm = Some(c.clone()),
                None => h.comm.clone_from(&last_comm),
            }
            hits.push((*cpu, h));
            true
        });
    }
    hits.retain(|(cpu, h)| {
        assert!(cpus.contains(cpu));
        h.pid == me
    });
    // A record that names its chain by id gets it from the program's map, as the tracer reads it.
    for (_, h) in &mut hits {
        if let Some(key) = h.chain.take() {
            let chain = programs.chain(0, key).expect("reads the chains map");
            (h.kernel_stack, h.user_stack) = chain.expect("the map holds the chain a record names");
            h.flags &= !crate::perf::hit_record::CHAIN_ID;
        }
        // A record without its ip has it as its chain's first frame.
        if h.ip.is_none() {
            h.ip = h.kernel_stack.first().or(h.user_stack.first()).copied();
        }
    }
    (hits, programs)
}

// A ring of one page has room for a few dozen of 3,000 hits; the kernel's totals still count every one,
// under this thread and the chain the records carry, stored once.
live_test!(
    every_kept_hit_is_counted_in_the_kernel_when_the_ring_is_full,
    {
        const STORES: u64 = 3000;
        let (mine, programs) =
            watch_during_ring(TARGET.as_ptr() as u64, Variant::default(), 1, |_, _| {
                for v in 1..=STORES {
                    store(v);
                }
            });
        let me = std::process::id();
        let tid = own_tid();
        let lost = programs.dropped(0).expect("stats").lost;
        assert!(lost > 0, "a one-page ring overflows");
        assert_eq!(mine.len() as u64 + lost, STORES, "printed + lost");
        let counted = programs.counted(0).expect("totals");
        let ours: Vec<_> = counted.counts.iter().filter(|(k, _)| k.pid == me).collect();
        assert_eq!(ours.iter().map(|(_, n)| n).sum::<u64>(), STORES, "{ours:?}");
        assert!(ours.iter().all(|(k, _)| k.tid == tid));
        assert_eq!(counted.kept_by_cpu.iter().sum::<u64>(), STORES);
        assert_eq!(counted.uncounted_by_cpu.iter().sum::<u64>(), 0);
        // Each record's chain is stored under its id, as the tracer hashes it.
        for (_, h) in &mine {
            let key = crate::perf::hit_record::ChainKey {
                hash: super::totals::chain_hash(&h.kernel_stack, &h.user_stack),
            };
            assert_eq!(
                counted.chains.get(&key),
                Some(&(h.kernel_stack.clone(), h.user_stack.clone())),
                "{key:?}"
            );
            assert!(ours.iter().any(|(k, _)| k.chain == key));
        }
        // 3,000 distinct values: more than the values map holds, and it says so.
        let (values, over) = counted.values.expect("--value counts values");
        assert!(
            over && values.len() as u32 <= super::totals::VALUES_MAX && values.len() > 32,
            "{} values, over: {over}",
            values.len()
        );
    }
);

fn own_tid() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse::<u32>().ok())
        .expect("own tid")
}

live_test!(
    the_hit_program_emits_each_watched_store_and_counts_the_others,
    {
        let (mine, programs) = watch_during(TARGET.as_ptr() as u64, |programs, _| {
            for v in 1..=100 {
                store(v);
            }
            programs
                .unwatch_process(std::process::id())
                .expect("procs map");
            for v in 0..10 {
                store(1000 + v);
            }
        });
        let tid = own_tid();
        assert_eq!(mine.len(), 100, "one record per watched store");
        let values: Vec<u64> = mine.iter().filter_map(|(_, h)| h.value).collect();
        assert_eq!(
            values,
            (1..=100).collect::<Vec<_>>(),
            "each store's value, in order"
        );
        for (_, h) in &mine {
            assert_eq!(h.tid, tid);
            assert_eq!(h.addr, TARGET.as_ptr() as u64);
            assert!(h.flags & USER_MODE != 0, "a user-space store");
            assert!(
                h.kernel_stack.is_empty(),
                "no kernel frames for a user store"
            );
            trap_ip(h, &h.user_stack);
            assert!(
                h.user_stack.len() >= 2,
                "the caller is on the stack: {:x?}",
                h.user_stack
            );
            let insn = h.insn.expect("instruction bytes");
            // The store's instruction ends at the trap ip: these bytes are the function's own code.
            let code = unsafe_free_code(h.ip.expect("the trap ip"));
            assert_eq!(
                &insn[16 - code.len()..],
                &code[..],
                "bytes before the trap ip"
            );
            // Loaded from the task through BTF where the kernel has it, else copied by the helper: the same
            // name either way, the one the kernel keeps for this thread.
            let comm = std::fs::read_to_string("/proc/thread-self/comm").expect("own comm");
            assert_eq!(h.comm.as_deref(), Some(comm.trim_end_matches('\n')));
        }
        let dropped = programs.dropped(0).expect("stats");
        assert_eq!(
            dropped.other_process, 10,
            "stores of an unwatched process are counted, not emitted"
        );
        assert_eq!(dropped.filtered, 0);
    }
);

/// The trap ip as the registers have it, checked to be the record's (or its chain's first frame) and
/// where `stack` starts.
fn trap_ip(h: &HitRecord, stack: &[u64]) -> u64 {
    let ip = h.regs.expect("registers")[crate::perf::bpf::kernel::pt_regs::IP];
    assert_eq!(
        h.ip,
        Some(ip),
        "the record's ip, or its chain's first frame"
    );
    assert_eq!(stack.first(), Some(&ip), "the stack starts at the trap ip");
    ip
}

live_test!(
    a_kernel_writer_gets_its_kernel_stack_and_the_user_stack_that_called_it,
    {
        use std::io::Read;
        let mut buf = [0xffu8; 16];
        let at = buf.as_ptr() as u64;
        let addr = (at + 7) & !7;
        let off = (addr - at) as usize;
        let (hits, _) = watch_during(addr, |_, _| {
            let mut zero = std::fs::File::open("/dev/zero").expect("/dev/zero");
            zero.read_exact(&mut buf[off..off + 8]).expect("read");
        });
        // The kernel clears user memory a byte (or a word) at a time; each store into the watch traps.
        assert!(
            !hits.is_empty(),
            "the kernel's copy into the buffer trapped"
        );
        for (_, h) in &hits {
            assert!(h.flags & USER_MODE == 0, "written by the kernel");
            let ip = trap_ip(h, &h.kernel_stack);
            assert!(ip >= 1 << 63, "a kernel trap ip: 0x{ip:x}");
            assert!(
                h.kernel_stack.len() >= 3,
                "read's path: {:x?}",
                h.kernel_stack
            );
            assert!(
                h.user_stack.first().is_some_and(|&a| a < 1 << 47),
                "the user stack of the read() call: {:x?}",
                h.user_stack
            );
            assert!(h.insn.is_some(), "kernel text is readable");
        }
        assert_eq!(
            hits.last().and_then(|(_, h)| h.value),
            Some(0),
            "all zero at the end"
        );
    }
);

// Stores from one call site, watched once by the program as ksymwatch loads it and once by one that takes
// the user stack with `bpf_get_stack`: the program's own frame-pointer walk must give the kernel's frames.
live_test!(the_programs_user_stack_walk_gives_the_kernels_frames, {
    let addr = TARGET.as_ptr() as u64;
    let stacks = |parts: Variant| {
        let (hits, _) = watch_during_parts(addr, parts, |_, _| {
            for v in 0..5 {
                store(v);
            }
        });
        assert_eq!(hits.len(), 5, "one record per store");
        hits.into_iter()
            .map(|(_, h)| h.user_stack)
            .collect::<Vec<_>>()
    };
    let own = stacks(Variant::default());
    let kernel = stacks(Variant {
        kernel_user_walk: true,
        ..Variant::default()
    });
    assert!(own[0].len() >= 3, "a call chain: {:x?}", own[0]);
    assert_eq!(own, kernel, "the same frames as bpf_get_stack's");
});

/// The bytes of this test's own code that end at `ip` (read through /proc/self/mem, no unsafe), up to 16.
fn unsafe_free_code(ip: u64) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut mem = std::fs::File::open("/proc/self/mem").expect("/proc/self/mem");
    mem.seek(SeekFrom::Start(ip - 16)).expect("seek");
    let mut b = vec![0u8; 16];
    mem.read_exact(&mut b).expect("read own code");
    b
}

// A lone hit wakes a reader blocked on its CPU's ring buffer at once: the program asks for the kernel's
// wake-up rule for a hit 1 ms or more after its CPU's previous one (here the first).
live_test!(a_lone_hit_wakes_a_reader_blocked_on_its_ring, {
    let (mine, _) = watch_during(TARGET.as_ptr() as u64, |_, rings| {
        let epoll = sys::Epoll::new().expect("epoll");
        for (i, r) in rings.iter().enumerate() {
            epoll.add(*r, i as u64).expect("epoll add");
        }
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let mut ready = Vec::new();
                epoll
                    .wait(&mut ready, Duration::from_secs(10))
                    .expect("epoll wait");
                (ready.len(), Instant::now())
            });
            // Long enough for the waiter to be asleep in epoll_wait: only a wake-up ends it early.
            std::thread::sleep(Duration::from_millis(200));
            let stored = Instant::now();
            store(7);
            let (ready, woken) = waiter.join().expect("waiter");
            assert_eq!(ready, 1, "the hit's ring woke the waiter");
            let after = woken.duration_since(stored);
            assert!(
                after < Duration::from_secs(2),
                "woken {after:?} after the store"
            );
        });
    });
    assert_eq!(mine.len(), 1, "{mine:?}");
});

// A thread covered by two breakpoint events on the same address (as one created while its process is
// being armed is: its own event and the one it inherited), each running the per-thread hit program on
// every CPU: the kernel runs the program twice per store, and each store is one record all the same,
// with its own value and the one before it, counted once in the totals; the other report is counted as
// a repeat. The loop's stores all come from one ip, so the same event again is the next store.
live_test!(
    a_thread_covered_by_two_events_has_each_store_reported_once,
    {
        if super::repeats::find().is_none() {
            println!("SKIP: hit_live_tests: no bpf_cast_to_kern_ctx in this kernel's BTF");
            return;
        }
        const STORES: u64 = 1000;
        let addr = TARGET.as_ptr() as u64;
        let watch = target_watch(addr);
        let kind = HitKind {
            watching: Watching::Threads,
            written: true,
        };
        // Rings with room for every record (~250 bytes each with the registers).
        let programs =
            HitPrograms::load(&[watch], None, &Filter::default(), kind, 256).expect("loads");
        let tid = own_tid();
        let on_thread = |cpu: u32| {
            let mut a = ring_attr(pb::PERF_TYPE_BREAKPOINT);
            a.bp_type = pb::HW_BREAKPOINT_W;
            a.bp_addr = addr;
            a.bp_len = 8;
            a.set_disabled(1);
            sys::perf_event_open(&a, tid as i32, cpu as i32).expect("a breakpoint on this thread")
        };
        let cpus = crate::cpulist::read(Path::new(crate::cpulist::ONLINE)).expect("online cpus");
        let mut armed = Vec::new();
        for &cpu in &cpus {
            let (own, inherited) = (on_thread(cpu), on_thread(cpu));
            let ring = programs.attach(0, cpu, own.as_fd()).expect("attach");
            programs
                .attach_member(0, inherited.as_fd())
                .expect("attach the second");
            armed.push((cpu, own, inherited, ring));
        }
        for (_, own, inherited, _) in &armed {
            sys::perf_enable(own.as_fd()).expect("enable");
            sys::perf_enable(inherited.as_fd()).expect("enable");
        }
        for v in 1..=STORES {
            store(v);
        }
        for (_, own, inherited, _) in &armed {
            sys::perf_disable(own.as_fd()).expect("disable");
            sys::perf_disable(inherited.as_fd()).expect("disable");
        }
        let mut values = Vec::new();
        for (_, _, _, ring) in &mut armed {
            ring.drain(|bytes| {
                let h = decode(bytes).expect("a hit record");
                if h.tid == tid {
                    values.push((h.time, h.value, h.old));
                }
                true
            });
        }
        values.sort_unstable();
        let want: Vec<(Option<u64>, Option<u64>)> = (1..=STORES)
            .map(|v| (Some(v), (v > 1).then(|| v - 1)))
            .collect();
        let got: Vec<(Option<u64>, Option<u64>)> = values.iter().map(|&(_, v, o)| (v, o)).collect();
        assert_eq!(programs.dropped(0).expect("stats").lost, 0);
        assert_eq!(got.len(), want.len(), "one record per store");
        assert_eq!(
            got[1..],
            want[1..],
            "each store's value and the one before it"
        );
        let repeated: u64 = programs.repeated_by_cpu(0).expect("stats").iter().sum();
        assert_eq!(repeated, STORES, "the second event's report of each store");
        let counted = programs.counted(0).expect("totals");
        let ours: u64 = counted
            .counts
            .iter()
            .filter(|(k, _)| k.tid == tid)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(ours, STORES, "each store counted once");
    }
);
