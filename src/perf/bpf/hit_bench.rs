//! The writer's cost per store, part by part: a harness that arms one write watch on a writer process
//! (`tests/helpers/writer.c`, `writer write N CPU`) with a chosen variant of the hit program, times the
//! writer's N stores, and checks that every trap reached the variant. Each variant stops the kept hit's work
//! at a later part ([`super::hit_variants::Stage`]; the variants are [`super::hit_variants`]'s), so the difference
//! between two is what that part costs the writer; `stamped` is the whole program with
//! `bpf_ktime_get_ns` read between its parts, summed per part in a map: the in-kernel split of the same
//! work, which a sampling profiler on this VM cannot see (the debug exception runs with interrupts off).
//!
//! Variants (`KSW_BENCH_PARTS`, comma-separated; default all):
//! - `bare`: a counting breakpoint (no ring, no program, no sample): the trap alone;
//! - `ret0`: the hit path's breakpoint with a program that returns 0 at once;
//! - `ret0-callchain`: the same with `PERF_SAMPLE_CALLCHAIN` in the breakpoint's `sample_type`, which
//!   makes the kernel walk the call chain before any program runs;
//! - `ret0-nosample`: the same with nothing in `sample_type` and no task records asked for: what the
//!   kernel's preparing of the sample's fields (tid, time, cpu, ip, address) costs before the program;
//! - `drop`: the real program with `--if 'value == 12345678'`, which no store matches;
//! - `drop-noold`: the same without the old values (no olds map): what the map costs a dropped hit;
//! - `drop-hash`: the same with every old value in the LRU hash, as before the by-tgid array;
//! - `drop-stamped`, `drop-hash-stamped`: `drop` and `drop-hash` with their parts timed in the kernel
//!   ([`DROP_STAMP_PARTS`]);
//! - `decided`, `header`, `kstack`, `ustack`: the real program of `--quiet`, keeping every hit but
//!   stopping after the decision, the record's fixed fields, the kernel stack, the user stack (each such
//!   hit is counted as filtered, so the harness sees that it ran);
//! - `kept`: the real program of `--quiet`, every record written to the ring and read by a reader here;
//! - `stamped`: `kept` with its parts timed in the kernel;
//! - `ustack-getstack`, `kept-getstack`, `stamped-getstack`: the same with the user stack of a user-mode
//!   trap taken by `bpf_get_stack` (the kernel's walk), as before the program walked it itself;
//! - `kept-nototals`, `stamped-nototals`: `kept` and `stamped` without counting each hit in the kernel's
//!   totals (`super::totals`), as before they were (`stamped` times the totals in its `ustack` part).
//!
//! Without `KSW_BENCH_N` this is a quick live test (2,000 stores, every variant once); with it, a
//! benchmark run: `KSW_BENCH_N`, `KSW_BENCH_RUNS` (default 1; variants rotate one place each run),
//! `KSW_BENCH_CPU` (default 1), `KSW_BENCH_WRITER` (a built writer; otherwise gcc builds one). Each
//! measurement prints one JSON line; `scripts/bench-writer-parts.py` runs it and makes the table.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perf_event_open_sys::bindings as pb;

use super::hit_set::{Checks, HitKind, HitPrograms, Watching};
use super::hit_variants::{Stage, Stamps, Variant, DROP_STAMP_PARTS, DROP_STAMP_SLOTS};
use super::hit_variants::{STAMP_MAP_SLOTS, STAMP_PARTS, STAMP_SLOTS};
use super::kernel::MapType;
use crate::model::condition::Condition;
use crate::model::filter::Filter;
use crate::model::watch::{Access, Watch};
use crate::perf::bpf_ring::BpfRing;
use crate::perf::event::{self, Bind, Binding, Delivery, EventConfig};
use crate::perf::record::{RECORD_SAMPLE, SAMPLE_CALLCHAIN};
use crate::perf::ring::Ring;
use crate::perf::sys;

const VARIANTS: [&str; 20] = [
    "bare",
    "ret0",
    "ret0-callchain",
    "ret0-nosample",
    "drop",
    "drop-noold",
    "drop-hash",
    "drop-stamped",
    "drop-hash-stamped",
    "decided",
    "header",
    "kstack",
    "ustack",
    "kept",
    "stamped",
    "ustack-getstack",
    "kept-getstack",
    "stamped-getstack",
    "kept-nototals",
    "stamped-nototals",
];

/// A value the writer (storing 0..N-1) never stores.
const NO_MATCH: &str = "value == 12345678";

/// Each ring's pages: 2 MiB, room for ~0.2 s of one writer's records by id (~20,000; ~0.1 s of the
/// `-nototals` variants' inline ones), so a harness reader that a loaded machine keeps from its CPU for
/// a while loses none.
const RING_PAGES: usize = 512;

struct Writer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    addr: u64,
    pid: u32,
}

impl Writer {
    fn start(binary: &Path, n: u64, cpu: u32) -> Writer {
        let mut child = Command::new(binary)
            .args(["write", &n.to_string(), &cpu.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("writer starts");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        stdout.read_line(&mut banner).unwrap();
        let addr = banner
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("addr="))
            .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
            .unwrap_or_else(|| panic!("writer banner {banner:?}"));
        let pid = banner
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("pid=")?.parse().ok())
            .unwrap_or_else(|| panic!("writer banner {banner:?}"));
        Writer {
            child,
            stdin,
            stdout,
            addr,
            pid,
        }
    }

    /// "go" to "done": the wall time of the N stores, as bench-writer.py takes it, the page faults the
    /// writer took meanwhile (the kernel's own fault-and-fixup when a stack walk reads a bad frame counts
    /// as one), and its time on a CPU and waiting for one (ns, from its schedstat): the wall time less
    /// what other tasks took from it, and what they took.
    fn run(&mut self) -> (Duration, u64, (u64, u64)) {
        let mut a = pb::perf_event_attr {
            type_: pb::PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<pb::perf_event_attr>() as u32,
            config: u64::from(pb::PERF_COUNT_SW_PAGE_FAULTS),
            ..Default::default()
        };
        a.set_disabled(1);
        let faults = sys::perf_event_open(&a, self.pid as i32, -1).expect("fault counter");
        sys::perf_enable(faults.as_fd()).unwrap();
        let s0 = self.schedstat();
        let took = self.go();
        let s1 = self.schedstat();
        sys::perf_disable(faults.as_fd()).unwrap();
        let mut buf = [0u64; 1];
        sys::perf_read(faults.as_fd(), &mut buf).unwrap();
        (took, buf[0], (s1.0 - s0.0, s1.1 - s0.1))
    }

    /// The writer's time on a CPU and waiting for one so far, ns (`/proc/PID/schedstat`).
    fn schedstat(&self) -> (u64, u64) {
        let text =
            std::fs::read_to_string(format!("/proc/{}/schedstat", self.pid)).expect("schedstat");
        let mut f = text
            .split_whitespace()
            .map(|x| x.parse::<u64>().unwrap_or(0));
        (f.next().unwrap_or(0), f.next().unwrap_or(0))
    }

    fn go(&mut self) -> Duration {
        let t0 = Instant::now();
        self.stdin.write_all(b"go\n").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "writer died");
            if line.trim() == "done" {
                return t0.elapsed();
            }
        }
    }
}

impl Writer {
    /// Whether the writer was killed by SIGTRAP: the machine's empty-DR6 debug exception
    /// (docs/machine.md), which no program of the variant causes.
    fn trapped(&mut self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        // Its stdout closes as it exits, before it can be waited for (SIGTRAP dumps core: up to seconds).
        for _ in 0..1000 {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.signal() == Some(libc::SIGTRAP),
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return false,
            }
        }
        false
    }
}

/// `variant` measured by `once`, and measured again (said in a `RETRY` line, as the suite's live tests
/// say theirs, which scripts/test counts) when its writer was killed by SIGTRAP the first time.
fn measured_once_more_if_trapped<T>(
    variant: &str,
    once: impl Fn() -> Result<T, (Box<dyn std::any::Any + Send>, bool)>,
) -> T {
    match once() {
        Ok(measured) => measured,
        Err((_, true)) => {
            eprintln!(
                "RETRY: perf::bpf::hit_bench::each_part_of_the_hit_program_runs_on_every_trap: a watched \
                 helper was killed by SIGTRAP (the machine's empty-DR6 debug exception, docs/machine.md) \
                 and the test failed (variant {variant}: writer died); run once more"
            );
            match once() {
                Ok(measured) => measured,
                Err((panic, _)) => std::panic::resume_unwind(panic),
            }
        }
        Err((panic, false)) => std::panic::resume_unwind(panic),
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one variant's watch saw.
#[derive(Debug, Default)]
struct Seen {
    /// Samples in the rings (hit records, or the kernel's own samples).
    samples: u64,
    /// Traps the program counted as dropped.
    filtered: u64,
    /// `bare`: the breakpoints' count.
    count: u64,
    /// `stamped`: kept hits, then nanoseconds per part, summed over CPUs.
    stamps: Vec<u64>,
    /// The writer's page faults during its stores.
    faults: u64,
    /// The writer's time on a CPU and waiting for one during its stores, ns.
    sched: (u64, u64),
}

fn watch_of(addr: u64) -> Watch {
    Watch {
        label: "target_var".into(),
        addr,
        len: 8,
        access: Access::Write,
        module: None,
        per_cpu: None,
    }
}

/// A counting breakpoint on `cpu`, like scripts/bench-bare-count.c.
fn bare_breakpoint(addr: u64, cpu: u32) -> OwnedFd {
    let mut a = pb::perf_event_attr {
        type_: pb::PERF_TYPE_BREAKPOINT,
        size: std::mem::size_of::<pb::perf_event_attr>() as u32,
        ..Default::default()
    };
    a.bp_type = pb::HW_BREAKPOINT_W;
    a.bp_addr = addr;
    a.bp_len = 8;
    a.sample_period = 1 << 62;
    a.set_disabled(1);
    a.set_pinned(1);
    sys::perf_event_open(&a, -1, cpu as i32).expect("bare breakpoint")
}

/// The program `variant` builds, with its stamps map (and the map's slots) if it times them.
fn parts_of(variant: &str) -> (Variant, Option<OwnedFd>, Option<u32>) {
    let until = match variant {
        "ret0" | "ret0-callchain" | "ret0-nosample" => Some(Stage::Entry),
        "decided" => Some(Stage::Decided),
        "header" => Some(Stage::Header),
        "kstack" => Some(Stage::KernelStack),
        "ustack" | "ustack-getstack" => Some(Stage::UserStack),
        _ => None,
    };
    // The map's slots: the results' and, for kept hits, where the emitter finds when the hit program
    // handed over.
    let (slots, map_slots) = if variant.starts_with("stamped") {
        (Some(STAMP_SLOTS), STAMP_MAP_SLOTS)
    } else if variant.starts_with("drop-") && variant.ends_with("-stamped") {
        (Some(DROP_STAMP_SLOTS), DROP_STAMP_SLOTS)
    } else {
        (None, 0)
    };
    let stamps = slots.map(|_| {
        super::create_map(MapType::PercpuArray, (4, 8), map_slots, "ksw_stamps")
            .expect("stamps map")
    });
    let stamps_fd = stamps.as_ref().map(|m| super::raw(m.as_fd()));
    let drop = variant.starts_with("drop");
    let parts = Variant {
        until,
        stamps: stamps_fd.map(|m| match drop {
            true => Stamps::Dropped(m),
            false => Stamps::Kept(m),
        }),
        kernel_user_walk: variant.ends_with("-getstack"),
        no_olds: variant == "drop-noold",
        no_olds_by_tgid: variant.starts_with("drop-hash"),
        no_totals: variant.ends_with("-nototals"),
    };
    (parts, stamps, slots)
}

/// The variant's programs (the hit program and each CPU's emitter as `parts` builds them; `condition`
/// theirs) loaded and attached to a breakpoint on `addr` on each of `cpus`, with its perf ring and its
/// ring buffer.
fn arm(
    (variant, parts): (&str, Variant),
    addr: u64,
    condition: &Option<Condition>,
    cpus: &[u32],
) -> (Arc<HitPrograms>, Vec<(OwnedFd, Ring, BpfRing)>) {
    let checks = Checks {
        watches: &[watch_of(addr)],
        condition: condition.as_ref(),
        filter: &Filter::default(),
    };
    // As the tool loads them: a condition makes the hits carry the value and the old one.
    let kind = HitKind {
        watching: Watching::Everyone,
        written: condition.is_some(),
    };
    let programs = HitPrograms::load_built(checks, &kind, RING_PAGES, Box::new(parts))
        .expect("the variant loads");
    let programs = Arc::new(programs);
    let cfg = EventConfig {
        ring_pages: RING_PAGES,
        track_tasks: true,
        count_lost: true,
        delivery: Delivery::Hits(programs.clone()),
        binding: Binding::Cpus,
        user_only: false,
        percpu: None,
    };
    let mut armed = Vec::new();
    for &cpu in cpus {
        let mut attr = event::attr(&watch_of(addr), &cfg, Bind::Cpu);
        if variant == "ret0-callchain" {
            attr.sample_type |= SAMPLE_CALLCHAIN;
        }
        if variant == "ret0-nosample" {
            attr.sample_type = 0;
            attr.set_sample_id_all(0);
            attr.set_comm(0);
            attr.set_task(0);
            attr.set_mmap(0);
        }
        let bp = sys::perf_event_open(&attr, -1, cpu as i32).expect("breakpoint");
        let ring = Ring::map(bp.as_fd(), RING_PAGES).expect("ring");
        let hits = programs.attach(0, cpu, bp.as_fd()).expect("attach");
        armed.push((bp, ring, hits));
    }
    (programs, armed)
}

/// Arms `variant` on every online CPU, runs the writer, disarms; the writer's time and what was seen.
fn measure(variant: &str, writer: &mut Writer, cpus: &[u32]) -> (Duration, Seen) {
    let addr = writer.addr;
    if variant == "bare" {
        let fds: Vec<OwnedFd> = cpus.iter().map(|&c| bare_breakpoint(addr, c)).collect();
        fds.iter()
            .for_each(|fd| sys::perf_enable(fd.as_fd()).unwrap());
        let (took, faults, sched) = writer.run();
        let mut seen = Seen {
            faults,
            sched,
            ..Seen::default()
        };
        for fd in &fds {
            sys::perf_disable(fd.as_fd()).unwrap();
            let mut buf = [0u64; 1];
            sys::perf_read(fd.as_fd(), &mut buf).unwrap();
            seen.count += buf[0];
        }
        return (took, seen);
    }
    let (parts, stamps, slots) = parts_of(variant);
    let drop = variant.starts_with("drop");
    let condition = drop.then(|| crate::model::condition::parse(NO_MATCH).unwrap());
    let (programs, mut armed) = arm((variant, parts), addr, &condition, cpus);
    // The ring buffers are read on the tick, not on their wake-ups: the tracer's loop in a flood.
    let epoll = sys::Epoll::new().unwrap();
    for (i, (bp, _, _)) in armed.iter().enumerate() {
        epoll.add(bp.as_fd(), i as u64).unwrap();
        sys::perf_enable(bp.as_fd()).unwrap();
    }
    let mut seen = Seen::default();
    let (took, faults, sched) = std::thread::scope(|s| {
        let run = s.spawn(|| writer.run());
        // The reader, as the tracer's loop: woken by the rings (or a 10 ms tick), it drains every ring.
        let mut tokens = Vec::new();
        while !run.is_finished() {
            epoll.wait(&mut tokens, Duration::from_millis(10)).unwrap();
            drain(&mut armed, &mut seen);
        }
        run.join().unwrap()
    });
    for (bp, _, _) in &armed {
        sys::perf_disable(bp.as_fd()).unwrap();
    }
    drain(&mut armed, &mut seen);
    seen.faults = faults;
    seen.sched = sched;
    seen.filtered = programs.dropped(0).unwrap().filtered;
    if let Some(m) = &stamps {
        seen.stamps = (0..slots.unwrap_or(0))
            .map(|k| {
                sys::bpf_map_lookup_percpu_u64(m.as_fd(), k)
                    .unwrap()
                    .iter()
                    .sum()
            })
            .collect();
    }
    (took, seen)
}

fn drain(armed: &mut [(OwnedFd, Ring, BpfRing)], seen: &mut Seen) {
    for (_, ring, hits) in armed.iter_mut() {
        ring.drain(|bytes| {
            if u32::from_ne_bytes(bytes[..4].try_into().unwrap()) == RECORD_SAMPLE {
                seen.samples += 1;
            }
            true
        });
        hits.drain(|_| {
            seen.samples += 1;
            true
        });
    }
}

/// Whether `variant` saw what it must for `n` stores (another job's writer at the same address may add a
/// few traps, never take any away).
fn as_expected(variant: &str, n: u64, s: &Seen) -> bool {
    match variant {
        "bare" => s.count >= n,
        "ret0" | "ret0-callchain" | "ret0-nosample" => s.samples == 0,
        "kept" | "kept-getstack" | "kept-nototals" => s.samples >= n,
        "stamped" | "stamped-getstack" | "stamped-nototals" => {
            s.samples >= n && s.stamps.first().is_some_and(|&k| k >= n)
        }
        "drop-stamped" | "drop-hash-stamped" => {
            s.samples == 0 && s.filtered >= n && s.stamps.first().is_some_and(|&k| k >= n)
        }
        _ => s.samples == 0 && s.filtered >= n,
    }
}

/// The writer: `KSW_BENCH_WRITER`, or built here from tests/helpers/writer.c (`None`: no gcc).
fn writer_binary(dir: &Path) -> Option<PathBuf> {
    if let Ok(p) = std::env::var("KSW_BENCH_WRITER") {
        return Some(PathBuf::from(p));
    }
    let out = dir.join("writer");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helpers/writer.c");
    let built = Command::new("gcc")
        .args(["-O1", "-fno-omit-frame-pointer", "-no-pie", "-o"])
        .arg(&out)
        .arg(&src)
        .status();
    built.is_ok_and(|s| s.success()).then_some(out)
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "live: arms hardware breakpoints (run by scripts/test as root)"]
fn each_part_of_the_hit_program_runs_on_every_trap() {
    if !super::root_or_skip("hit_bench", "BPF and CPU-wide breakpoints") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ksw-hit-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(writer_bin) = writer_binary(&dir) else {
        println!("SKIP: perf::bpf::hit_bench: no gcc to build tests/helpers/writer.c");
        return;
    };
    let bench = std::env::var("KSW_BENCH_N").is_ok();
    let n: u64 = env_or("KSW_BENCH_N", 2000);
    let runs: usize = env_or("KSW_BENCH_RUNS", 1);
    let cpus: Vec<u32> = crate::cpulist::read(Path::new(crate::cpulist::ONLINE))
        .unwrap()
        .into_iter()
        .collect();
    let cpu: u32 = env_or("KSW_BENCH_CPU", if cpus.contains(&1) { 1 } else { 0 });
    let variants: Vec<String> = match std::env::var("KSW_BENCH_PARTS") {
        Ok(v) => v.split(',').map(str::to_string).collect(),
        Err(_) => VARIANTS.iter().map(|v| v.to_string()).collect(),
    };
    for v in &variants {
        assert!(VARIANTS.contains(&v.as_str()), "unknown variant {v}");
    }
    let mut bad = Vec::new();
    for run in 0..runs {
        let k = run % variants.len();
        for v in variants[k..].iter().chain(&variants[..k]) {
            let (took, seen) = measured_once_more_if_trapped(v, || {
                let mut writer = Writer::start(&writer_bin, n, cpu);
                let lock = std::fs::File::create("/tmp/ksymwatch-live-tests.lock").unwrap();
                sys::lock_exclusive(&lock).unwrap();
                let measured = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    measure(v, &mut writer, &cpus)
                }));
                drop(lock);
                measured.map_err(|panic| (panic, writer.trapped()))
            });
            let ok = as_expected(v, n, &seen);
            let kept = seen.stamps.first().copied().unwrap_or(0).max(1) as f64;
            let names: &[&str] = if v.starts_with("drop-") && v.ends_with("-stamped") {
                &DROP_STAMP_PARTS
            } else {
                &STAMP_PARTS
            };
            let per_part: serde_json::Map<String, serde_json::Value> = names
                .iter()
                .zip(seen.stamps.iter().skip(1))
                .map(|(p, ns)| (p.to_string(), (*ns as f64 / kept).into()))
                .collect();
            println!(
                "{}",
                serde_json::json!({
                    "run": run, "variant": v, "n": n,
                    "writer_us_per_store": took.as_secs_f64() * 1e6 / n as f64,
                    "on_cpu_us_per_store": seen.sched.0 as f64 / 1e3 / n as f64,
                    "waited_us_per_store": seen.sched.1 as f64 / 1e3 / n as f64,
                    "samples": seen.samples, "filtered": seen.filtered, "count": seen.count,
                    "faults_per_store": seen.faults as f64 / n as f64,
                    "stamped_hits": seen.stamps.first(), "stamp_ns_per_hit": per_part,
                    "as_expected": ok,
                })
            );
            if !ok {
                bad.push(format!("{v}: {seen:?}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(bad.is_empty(), "variants that missed traps: {bad:?}");
    if !bench {
        println!("every variant saw all {n} stores");
    }
}
