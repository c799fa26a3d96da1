//! Each CPU's per-CPU base, asked of the kernel: a kernel without data symbols in kallsyms has no
//! `__per_cpu_offset` to read, but on every CPU `current->se.cfs_rq->rq` is that CPU's `runqueues`, a
//! per-CPU variable whose offset in `.data..percpu` BTF gives. A perf-event program on a cpu-clock event on
//! each CPU reads the pointer there into its CPU's slot of a per-CPU array; the base is that address minus
//! the offset, and a per-CPU variable's copy on CPU N is at base N plus its own offset.
//!
//! The offsets (`task_struct.se.cfs_rq`, `cfs_rq.rq`, the `runqueues` variable) come from the running
//! kernel's BTF; a kernel without them (no BTF, no group scheduling) has no answer here. An idle CPU's
//! current task is its idle task, not on a CFS runqueue, so a thread spins on each CPU while asking.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use ksymwatch_symbols::btf::{Btf, CastKind, CastType};
use ksymwatch_symbols::PathElem;
use perf_event_open_sys::bindings as pb;

use super::insn::{Asm, AsmError, Cond, Insn, Kept, DW, FP, R0, R1, R3};
use super::kernel::{Helper, MapType, ProgType};
use super::seq;
use crate::error::Error;
use crate::perf::sys;

/// The program's binding: the current task.
const TASK: Kept = Kept::R6;
const PERCPU_SECTION: &str = ".data..percpu";

/// Where the program finds the runqueue pointer: byte offsets in the running kernel's structures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// `task_struct.se.cfs_rq`.
    pub cfs_rq: i32,
    /// `cfs_rq.rq`.
    pub rq: i32,
    /// `runqueues` in `.data..percpu`.
    pub runqueues: u64,
}

impl Offsets {
    /// The offsets from the running kernel's BTF; the error says which one is missing.
    pub fn from_btf(btf: &Btf) -> Result<Offsets, String> {
        let member = |kind, name: &str, path: &[&str]| -> Result<i32, String> {
            let cast = CastType {
                kind: Some(kind),
                name: name.into(),
            };
            let path: Vec<PathElem> = path.iter().map(|p| PathElem::Field((*p).into())).collect();
            let m = btf
                .member(&cast, &path)
                .map_err(|e| format!("{name}.{} in the kernel's BTF: {e}", path_text(&path)))?;
            i32::try_from(m.offset).map_err(|_| format!("{name} offset {} is too far", m.offset))
        };
        let runqueues = btf
            .variable("runqueues")
            .filter(|v| v.section == PERCPU_SECTION)
            .ok_or("the kernel's BTF has no per-CPU `runqueues`")?;
        Ok(Offsets {
            cfs_rq: member(CastKind::Struct, "task_struct", &["se", "cfs_rq"])?,
            rq: member(CastKind::Struct, "cfs_rq", &["rq"])?,
            runqueues: runqueues.offset_in_section,
        })
    }
}

fn path_text(path: &[PathElem]) -> String {
    path.iter()
        .map(|p| p.to_string().trim_start_matches('.').to_string())
        .collect::<Vec<_>>()
        .join(".")
}

/// The program: reads `current->se.cfs_rq->rq` into this CPU's slot of `slots` (a per-CPU array of one
/// u64); returns 0 (the cpu-clock event writes nothing).
pub fn generate(slots: i32, at: Offsets) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let (cfs_rq, rq, key) = (a.slot(8).off(), a.slot(8).off(), a.slot(4).off());
    let out = a.label();
    a.call(Helper::GetCurrentTask).mov(TASK, R0);
    seq::read_kernel(&mut a, cfs_rq, 8, (TASK.into(), at.cfs_rq), out);
    a.load(DW, R3, FP, cfs_rq).jump_imm(Cond::Eq, R3, 0, out);
    seq::read_kernel(&mut a, rq, 8, (R3, at.rq), out);
    seq::lookup(&mut a, (slots, 0, key), out);
    a.load(DW, R1, FP, rq).store(DW, R0, 0, R1);
    a.bind(out);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// How long the program gets to run on every CPU: the cpu-clock event fires every 100 us there.
const WAIT: Duration = Duration::from_millis(200);

/// Each of `cpus`' per-CPU base, by CPU; a CPU whose slot stayed empty is left out.
pub fn bases(cpus: &[u32], at: Offsets) -> Result<BTreeMap<u32, u64>, Error> {
    use std::os::fd::AsRawFd;
    let unavailable = |e: std::io::Error| Error::not_permitted(super::why_unavailable(&e));
    let slots =
        super::create_map(MapType::PercpuArray, (4, 8), 1, "ksw_percpu").map_err(unavailable)?;
    let insns = generate(slots.as_raw_fd(), at)
        .map_err(|e| Error::runtime("building the per-CPU base program").caused_by(e))?;
    let mut log = Vec::new();
    let prog = super::load_program(ProgType::PerfEvent, &insns, "ksw_percpu", &mut log)
        .map_err(unavailable)?;
    let mut attr = crate::perf::attr::ring_attr(pb::PERF_TYPE_SOFTWARE);
    attr.config = u64::from(pb::PERF_COUNT_SW_CPU_CLOCK);
    attr.sample_period = 100_000;
    attr.set_disabled(1);
    let mut events = Vec::new();
    for &cpu in cpus {
        let Ok(fd) = sys::perf_event_open(&attr, -1, cpu as i32) else {
            continue;
        };
        if sys::perf_set_bpf(fd.as_fd(), prog.as_fd()).is_ok()
            && sys::perf_enable(fd.as_fd()).is_ok()
        {
            events.push(fd);
        }
    }
    // An idle CPU runs its idle task, which is not on a CFS runqueue: a thread spinning on each CPU
    // meanwhile makes `current` a task whose `se.cfs_rq` is set there.
    let _spinners = Spinners::start(cpus);
    let deadline = Instant::now() + WAIT;
    let mut found = BTreeMap::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
        let by_cpu = sys::bpf_map_lookup_percpu_u64(slots.as_fd(), 0)
            .map_err(|e| Error::runtime("reading the per-CPU bases").caused_by(e))?;
        found = cpus
            .iter()
            .filter_map(|&cpu| {
                let rq = *by_cpu.get(cpu as usize)?;
                (rq != 0).then(|| (cpu, rq.wrapping_sub(at.runqueues)))
            })
            .collect();
        if found.len() == cpus.len() {
            break;
        }
    }
    drop(events);
    Ok(found)
}

/// One thread spinning pinned on each CPU, stopped and joined when dropped: on every path out of
/// [`bases`], an early error's included.
struct Spinners {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Spinners {
    fn start(cpus: &[u32]) -> Spinners {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = cpus
            .iter()
            .filter_map(|&cpu| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("ksymwatch-cpu{cpu}"))
                    .spawn(move || {
                        if sys::pin_current_thread(cpu).is_ok() {
                            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                                std::hint::spin_loop();
                            }
                        }
                    })
                    .ok()
            })
            .collect();
        Spinners { stop, threads }
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reading a runqueue needs the kernel (the live test); offline, the program assembles.
    #[test]
    fn assembles() {
        let at = Offsets {
            cfs_rq: 0x180,
            rq: 0x140,
            runqueues: 195_776,
        };
        assert!(generate(5, at).expect("assembles").len() > 10);
    }

    /// Live: every online CPU gets a base, each different, each a kernel address, and the running
    /// kernel's BTF gives the offsets.
    #[test]
    #[ignore = "live: loads a BPF program on every CPU (run by scripts/test as root)"]
    fn every_online_cpu_has_its_own_base() {
        let btf = match Btf::open(std::path::Path::new(Btf::VMLINUX)) {
            Ok(b) => b,
            Err(e) => {
                return eprintln!("SKIP: percpu::every_online_cpu_has_its_own_base: no BTF: {e}")
            }
        };
        let at = match Offsets::from_btf(&btf) {
            Ok(a) => a,
            Err(e) => return eprintln!("SKIP: percpu::every_online_cpu_has_its_own_base: {e}"),
        };
        let cpus: Vec<u32> = crate::cpulist::read(std::path::Path::new(crate::cpulist::ONLINE))
            .expect("online cpus")
            .into_iter()
            .collect();
        let bases = bases(&cpus, at).expect("bases");
        eprintln!("per-CPU bases: {bases:x?}");
        assert_eq!(bases.len(), cpus.len(), "{bases:x?}");
        let distinct: std::collections::BTreeSet<u64> = bases.values().copied().collect();
        assert_eq!(distinct.len(), cpus.len(), "{bases:x?}");
        assert!(
            bases.values().all(|&b| b >= 0xffff_8000_0000_0000),
            "{bases:x?}"
        );
    }
}
