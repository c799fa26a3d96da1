//! Loading the hit programs ([`super::hit`]) and their maps, one program per watch, shaped by whom they
//! watch ([`Watching`]) and whether they read the value ([`HitKind`]); for a process watch entering its
//! processes and keeping them in the kernel ([`HitPrograms::start`]); and wiring the programs to the
//! breakpoint events: one per CPU, or on the per-thread path one per thread and CPU, whose events on a
//! CPU share that CPU's ring buffer (the first is wired with it, the others only attached).
//!
//! Each watch's program hands its records to an emitter per CPU ([`super::emit`]) that writes them into
//! that CPU's BPF ring buffer ([`crate::perf::bpf_ring`]): both are made when the CPU's breakpoint is
//! wired, and the emitter entered in the watch's `emitters` program array at the CPU's number (replacing
//! the one of an earlier time the CPU was online). The breakpoint writes no sample of its own (the
//! program returns 0, and it asks for no sample field). A trap the kernel does not hand to the program
//! (another BPF program is running on that CPU) is dropped by the kernel since Linux 6.10 (before, it
//! wrote a sample with no field); the breakpoint's own counter still counts it, so the end-of-run audit
//! reports it as unaccounted.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::cgroup::CgroupMap;
use super::emit::{self, EmitMaps};
use super::follow::Follower;
use super::hit::{self, HitMaps, HitSpec};
use super::insn::{AsmError, Insn};
use super::kernel::{MapType, ProgType};
use super::program::OLD_ENTRY;
use super::tgid_olds::TgidOlds;
use super::totals::{self, Counted, Limit, Totals};
use super::{create_map, load_program, log_line, possible_cpus, raw, ProgramError, OLDS_MAX};
use crate::error::Error;
use crate::model::condition::Condition;
use crate::model::filter::Filter;
use crate::model::watch::{Access, Watch};
use crate::perf::bpf::layout;
use crate::perf::bpf_ring::BpfRing;
use crate::perf::hit_record::ChainKey;
use crate::perf::sys;

/// How the programs are built: as the tool builds them ([`Tool`]), or with code added to them
/// ([`hit::additions`]), as the writer-cost benchmark builds its variants.
pub trait Build: Send + Sync {
    /// The hit program for `spec` ([`hit::generate`]).
    fn hit(&self, spec: &HitSpec<'_>, maps: &HitMaps) -> Result<Vec<Insn>, AsmError>;
    /// A CPU's emitter ([`emit::generate`]).
    fn emitter(&self, maps: &EmitMaps, wake_bytes: u32) -> Result<Vec<Insn>, AsmError>;
}

/// The tool's programs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tool;

impl Build for Tool {
    fn hit(&self, spec: &HitSpec<'_>, maps: &HitMaps) -> Result<Vec<Insn>, AsmError> {
        hit::generate(spec, maps)
    }

    fn emitter(&self, maps: &EmitMaps, wake_bytes: u32) -> Result<Vec<Insn>, AsmError> {
        emit::generate(maps, wake_bytes)
    }
}

/// Loads the hit program for `spec`, as `build` builds it. A kernel that will not have a perf-event
/// program read the task through BTF (before 5.11, or BTF it refuses) still has the helper: the name
/// then costs more, and its old values are kept per pid rather than per process (a reused pid's first
/// hit shows the earlier process's): the helper's program is loaded instead.
fn load_hit(
    spec: &HitSpec<'_>,
    maps: &HitMaps,
    build: &dyn Build,
) -> Result<OwnedFd, ProgramError> {
    let load = |spec: &HitSpec<'_>| -> Result<OwnedFd, ProgramError> {
        let insns = build
            .hit(spec, maps)
            .map_err(|e| super::too_big(&e, spec.condition))?;
        let mut log = Vec::new();
        load_program(ProgType::PerfEvent, &insns, "ksw_hit", &mut log)
            .map_err(|e| ProgramError::load("hit", e, &log))
    };
    let loaded = match load(spec) {
        Err(_) if spec.comm_offset.is_some() || spec.process_start.is_some() => load(&HitSpec {
            comm_offset: None,
            process_start: None,
            ..*spec
        }),
        r => r,
    };
    loaded.map_err(|e| kfunc_refused(e, spec.repeats.is_some()))
}

/// A per-thread program (`check`: with [`super::repeats`]'s check) the verifier refused because it calls
/// a kernel function ("JIT is required for calling kernel function", "calling kernel function is not
/// supported without CONFIG_DEBUG_INFO_BTF", ...) is the kernel's lack, as a missing kfunc is, not a bug
/// here; any other refusal stays one.
fn kfunc_refused(e: ProgramError, check: bool) -> ProgramError {
    match e {
        ProgramError::Refused { log, .. } if check && log.contains("kernel function") => {
            ProgramError::NoFiringEvent
        }
        e => e,
    }
}

/// Processes a watch can follow at once (the `procs` map's size).
pub const PROCS_MAX: u32 = 65536;

struct HitProgram {
    prog: OwnedFd,
    maps: WatchMaps,
    /// How many bytes it reads at the trap (the length of the watch it was built for), if it reads any.
    read_len: Option<u8>,
}

/// One watch's maps: all its program refers to but the watched processes, which the watches share.
struct WatchMaps {
    /// Each CPU's emitter, by CPU number.
    emitters: OwnedFd,
    /// The last value per key, which `--if`'s `old` reads.
    olds: OwnedFd,
    /// The last value per tgid of a user address, for a watch that keeps old values.
    olds_by_tgid: Option<TgidOlds>,
    /// The record's build space, which the emitters read too.
    scratch: OwnedFd,
    stats: OwnedFd,
    /// One u32: whether the program reads the watched bytes now (see [`reads`]).
    reads: OwnedFd,
    /// Every kept hit counted in the kernel ([`super::totals`]).
    totals: Totals,
}

/// Whether a hit program may read `w`'s bytes at a trap taken in user space: not for a read-write watch
/// of a user address. Such a trap runs the program with the breakpoint still armed (the kernel clears the
/// debug registers only for a trap taken in the kernel, where the program always reads), so the
/// program's read would trap again, once per byte of a `rep movsb` copy: traps the kernel counts and
/// hands to no program (its recursion guard), each paid by the writer.
fn reads(w: &Watch) -> bool {
    w.access == Access::Write || w.addr >= 1 << 63
}

impl WatchMaps {
    /// `written`: the watch keeps old values (`--value`/`--if`), so it has a by-tgid array too.
    fn create(written: bool) -> Result<WatchMaps, ProgramError> {
        let map = |kind, sizes, max, name| {
            create_map(kind, sizes, max, name).map_err(ProgramError::Unavailable)
        };
        let olds_by_tgid = match written {
            true => Some(TgidOlds::new().map_err(ProgramError::Unavailable)?),
            false => None,
        };
        Ok(WatchMaps {
            emitters: map(MapType::ProgArray, (4, 4), possible_cpus(), "ksw_emitters")?,
            olds: map(MapType::LruHash, (8, OLD_ENTRY), OLDS_MAX, "ksw_olds")?,
            olds_by_tgid,
            scratch: map(
                MapType::PercpuArray,
                (4, layout::SCRATCH_LEN),
                1,
                "ksw_scratch",
            )?,
            stats: map(MapType::PercpuArray, (4, 8), layout::STATS, "ksw_stats")?,
            reads: map(MapType::Array, (4, 4), 1, "ksw_reads")?,
            totals: Totals::create(written).map_err(ProgramError::Unavailable)?,
        })
    }

    /// Sets the `reads` flag for the program's watch being `w`.
    fn set_reads(&self, w: &Watch) -> io::Result<()> {
        let on = u32::from(reads(w));
        sys::bpf_map_update(self.reads.as_fd(), &0u32.to_ne_bytes(), &on.to_ne_bytes())
    }

    /// The descriptors the program is built with (`procs`: the watched-process map, if any; `limit`:
    /// `--count`'s claims counter and N).
    fn fds_limited(&self, procs: Option<i32>, limit: Option<(i32, u64)>) -> HitMaps {
        let mut maps = self.fds(procs);
        if let Some(t) = &mut maps.totals {
            t.limit = limit;
        }
        maps
    }

    /// The descriptors the program is built with (`procs`: the watched-process map, if any).
    fn fds(&self, procs: Option<i32>) -> HitMaps {
        HitMaps {
            emitters: raw(self.emitters.as_fd()),
            olds: raw(self.olds.as_fd()),
            olds_by_tgid: self.olds_by_tgid.as_ref().map(|o| raw(o.fd())),
            stats: raw(self.stats.as_fd()),
            scratch: raw(self.scratch.as_fd()),
            procs,
            reads: Some(raw(self.reads.as_fd())),
            totals: Some(self.totals.fds()),
            cgroups: None,
        }
    }
}

/// The loaded hit programs, one per watch (same order as the watches), and the watched-process map they
/// share.
pub struct HitPrograms {
    programs: Vec<HitProgram>,
    procs: Option<OwnedFd>,
    /// Adds the children of watched processes to `procs` as they are forked.
    follower: Option<Follower>,
    /// Takes a watched process out of `procs` as it execs another program.
    exec_end: Option<Follower>,
    /// Takes a watched process out of `procs` as it exits, before its pid can be reused.
    exit_end: Option<Follower>,
    /// `--value`/`--if` were asked for: hits report the value and the one before it.
    pub written: bool,
    /// Data pages of each CPU's ring buffer (a power of two).
    ring_pages: usize,
    /// `--count N`: the programs keep no hit past the N-th ([`super::totals::claim`]).
    limit: Option<Limit>,
    /// How its programs, the CPUs' emitters included, are built.
    build: Box<dyn Build>,
}

impl std::fmt::Debug for HitPrograms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HitPrograms({} programs)", self.programs.len())
    }
}

/// Traps each watch's program dropped, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// By the filters or the `--if` condition.
    pub filtered: u64,
    /// Made by a process that is not watched.
    pub other_process: u64,
    /// Kept, but the CPU's ring had no room for them.
    pub lost: u64,
}

/// What the kernel's programs do to a process watch's processes as they live (nothing, off the hit
/// programs or without a `procs` map).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Following {
    /// An exec ends a process's watch, before the new program runs.
    pub ends_on_exec: bool,
    /// The children of watched processes are watched too, as they are forked.
    pub follows_children: bool,
}

/// Whom the hit programs watch, as the plan's delivery and scope decide it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watching {
    /// Every task on each CPU: a system-wide watch.
    Everyone,
    /// Chosen processes, on one event per CPU: the programs check a `procs` map, which [`HitPrograms::start`]
    /// fills with `pids` (more with [`HitPrograms::watch_process`]) and keeps in the kernel: an exec or
    /// an exit ends a process's watch, and with `follow_children` (a launched command) the processes a
    /// watched one forks are watched too, as `perf record -- CMD` follows them.
    Processes {
        pids: Vec<u32>,
        follow_children: bool,
    },
    /// The per-thread path: the events choose the threads and the program runs on every thread's events,
    /// dropping a second event's report of one store ([`super::repeats`]); a kernel that cannot tell the
    /// program which event fired is refused ([`ProgramError::NoFiringEvent`]).
    Threads,
}

/// The choices besides the watches that shape every hit program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HitKind {
    /// Whom the programs watch.
    pub watching: Watching,
    /// `--value`/`--if`: hits carry the registers and instruction bytes the value is decoded from.
    pub written: bool,
}

/// What every watch's program checks: the watches (a program each), `--if` and the filters.
#[derive(Debug, Clone, Copy)]
pub struct Checks<'a> {
    pub watches: &'a [Watch],
    pub condition: Option<&'a Condition>,
    pub filter: &'a Filter,
}

/// How a watch's hit programs are loaded ([`HitPrograms::start`]).
#[derive(Debug, Clone)]
pub struct HitSet {
    pub kind: HitKind,
    /// Data pages of each CPU's ring buffer (a power of two).
    pub ring_pages: usize,
    /// `--count N`: the programs keep N hits, all watches together, and none after them.
    pub count: Option<u64>,
}

/// Why a watch's hit programs could not be had.
#[derive(Debug)]
pub enum LoadError {
    /// A program or one of its maps ([`ProgramError`]).
    Program(ProgramError),
    /// A watched process could not be entered in the programs' watched-process map.
    WatchProcess(io::Error),
}

/// What a process watch says when the kernel will not follow the command's forks.
const FORKS_UNWATCHED: &str = "; the command's own threads are watched, processes it forks are not";

/// One of the kernel programs that keep a process watch's processes in its `procs` map as they live
/// ([`super::follow`]: adding a watched process's children as they are forked, or ending a process's
/// watch as it execs or exits), attached by `attach`. One that cannot be had is handed to `warn`, with
/// `then` (what the watch does without it) after the reason: the watch goes on without it.
fn keeper(
    procs: &OwnedFd,
    attach: fn(BorrowedFd<'_>) -> Result<Follower, Error>,
    warn: &mut dyn FnMut(&str),
    then: &str,
) -> Option<Follower> {
    attach(procs.as_fd())
        .map_err(|e| warn(&format!("{e}{then}")))
        .ok()
}

impl HitPrograms {
    /// Creates the maps and loads one program per watch, of kind `kind`, and no more: no process is
    /// entered and none followed. `ring_pages`: data pages of each CPU's ring buffer (a power of two).
    pub fn load(
        watches: &[Watch],
        condition: Option<&Condition>,
        filter: &Filter,
        kind: HitKind,
        ring_pages: usize,
    ) -> Result<HitPrograms, ProgramError> {
        let checks = Checks {
            watches,
            condition,
            filter,
        };
        HitPrograms::load_built(checks, &kind, ring_pages, Box::new(Tool))
    }

    /// [`HitPrograms::load`], every program (the CPUs' emitters included) as `build` builds it.
    pub fn load_built(
        checks: Checks<'_>,
        kind: &HitKind,
        ring_pages: usize,
        build: Box<dyn Build>,
    ) -> Result<HitPrograms, ProgramError> {
        HitPrograms::load_with(checks, kind, ring_pages, (None, build))
    }

    /// A watch's hit programs as `set` says, with a process watch's processes entered and kept in the
    /// kernel ([`Watching::Processes`]). What the programs could not set up is handed to `warn` as it
    /// happens, one line each: the watch goes on without it.
    pub fn start(
        checks: Checks<'_>,
        set: HitSet,
        warn: &mut dyn FnMut(&str),
    ) -> Result<HitPrograms, LoadError> {
        let limit = set
            .count
            .map(Limit::create)
            .transpose()
            .map_err(|e| LoadError::Program(ProgramError::Unavailable(e)))?;
        let mut hits =
            HitPrograms::load_with(checks, &set.kind, set.ring_pages, (limit, Box::new(Tool)))
                .map_err(LoadError::Program)?;
        let (
            Watching::Processes {
                pids,
                follow_children,
            },
            Some(procs),
        ) = (set.kind.watching, &hits.procs)
        else {
            return Ok(hits);
        };
        if follow_children {
            hits.follower = keeper(procs, Follower::attach, warn, FORKS_UNWATCHED);
        }
        // The watched address means something else in another program: an exec ends that process's
        // watch, in the kernel before the new program runs, and the session reports it.
        hits.exec_end = keeper(procs, Follower::attach_exec, warn, "");
        // A process that exits leaves the watched set as it ends: a process given its pid later is not it.
        hits.exit_end = keeper(procs, Follower::attach_exit, warn, "");
        for pid in pids {
            hits.watch_process(pid).map_err(LoadError::WatchProcess)?;
        }
        Ok(hits)
    }

    fn load_with(
        Checks {
            watches,
            condition,
            filter,
        }: Checks<'_>,
        HitKind { watching, written }: &HitKind,
        ring_pages: usize,
        (limit, build): (Option<Limit>, Box<dyn Build>),
    ) -> Result<HitPrograms, ProgramError> {
        let written = *written;
        // Before any map: a per-thread watch that could report a store twice is not started.
        let repeats = match watching {
            Watching::Threads => Some(super::repeats::find().ok_or(ProgramError::NoFiringEvent)?),
            _ => None,
        };
        let procs = match watching {
            Watching::Processes { .. } => Some(
                create_map(MapType::Hash, (4, 4), PROCS_MAX, "ksw_procs")
                    .map_err(ProgramError::Unavailable)?,
            ),
            _ => None,
        };
        // `--cgroup`: one array of the chosen cgroups, which every watch's program tests the writer
        // against (the loaded programs hold it; its descriptor is closed once they are loaded).
        let cgroups = match filter.cgroups.is_empty() {
            true => None,
            false => Some(CgroupMap::create(&filter.cgroups).map_err(ProgramError::Unavailable)?),
        };
        let mut programs = Vec::with_capacity(watches.len());
        for w in watches {
            let mut maps = WatchMaps::create(written)?;
            maps.set_reads(w).map_err(ProgramError::Unavailable)?;
            let spec = HitSpec {
                len: w.len,
                // A system-wide watch without --value/--if shows no value. The others (a process
                // watch, per CPU or per thread) read it while the `reads` flag says so: a `--control`
                // move between write and read-write sets it.
                read_value: written || *watching != Watching::Everyone,
                old: written,
                regs: written,
                // `--cgroup`: each hit names its writer's cgroup (a container's, below the chosen one).
                cgroup_ids: !filter.cgroups.is_empty(),
                condition,
                filter,
                comm_offset: super::task::comm_offset(),
                process_start: super::task::process_start(),
                repeats,
            };
            let procs = procs.as_ref().map(|p| raw(p.as_fd()));
            let lim = limit.as_ref().map(Limit::fds);
            let fds = |m: &WatchMaps| HitMaps {
                cgroups: cgroups.as_ref().map(CgroupMap::fds),
                ..m.fds_limited(procs, lim)
            };
            let prog = match load_hit(&spec, &fds(&maps), &*build) {
                // Before Linux 6.1 a perf-event program may use only preallocated hash maps.
                Err(ProgramError::Refused { .. }) => {
                    maps.totals =
                        Totals::create_preallocated(written).map_err(ProgramError::Unavailable)?;
                    load_hit(&spec, &fds(&maps), &*build)?
                }
                r => r?,
            };
            let read_len = spec.read_value.then_some(spec.len);
            programs.push(HitProgram {
                prog,
                maps,
                read_len,
            });
        }
        Ok(HitPrograms {
            programs,
            procs,
            follower: None,
            exec_end: None,
            exit_end: None,
            written,
            ring_pages,
            limit,
            build,
        })
    }

    /// `--count N`: whether the programs kept their N-th hit (and so will keep no more); `false` without a
    /// limit or when it cannot be read.
    pub fn limit_reached(&self) -> bool {
        self.limit
            .as_ref()
            .is_some_and(|l| l.reached().unwrap_or(false))
    }

    /// Adds process `tgid` to the watched processes (no-op for a watch of every task).
    pub fn watch_process(&self, tgid: u32) -> io::Result<()> {
        match &self.procs {
            Some(p) => sys::bpf_map_update(p.as_fd(), &tgid.to_ne_bytes(), &1u32.to_ne_bytes()),
            None => Ok(()),
        }
    }

    /// What the programs do to the watched processes as they live: what [`HitPrograms::start`] attached
    /// for a process watch.
    pub fn following(&self) -> Following {
        Following {
            ends_on_exec: self.exec_end.is_some(),
            follows_children: self.follower.is_some(),
        }
    }

    /// Takes process `tgid` out of the watched processes: its traps are dropped from now on.
    pub fn unwatch_process(&self, tgid: u32) -> io::Result<()> {
        match &self.procs {
            Some(p) => sys::bpf_map_delete(p.as_fd(), &tgid.to_ne_bytes()),
            None => Ok(()),
        }
    }

    /// Wires watch `watch`'s program to the breakpoint event `bp` on `cpu`: creates the CPU's ring buffer
    /// and loads its emitter, enters that in the `emitters` array, and attaches the program. Returns the
    /// ring, mapped.
    pub fn attach(&self, watch: usize, cpu: u32, bp: BorrowedFd<'_>) -> io::Result<BpfRing> {
        let p = self.program(watch)?;
        let bytes = self.ring_pages * sys::page_size();
        let size = u32::try_from(bytes).map_err(|_| {
            io::Error::other(format!("a ring buffer of {bytes} bytes is over 4 GiB"))
        })?;
        let map = create_map(MapType::Ringbuf, (0, 0), size, "ksw_ring")?;
        let maps = EmitMaps {
            scratch: raw(p.maps.scratch.as_fd()),
            lost: (raw(p.maps.stats.as_fd()), layout::STAT_LOST),
            ring: raw(map.as_fd()),
        };
        let insns = (self.build)
            .emitter(&maps, size / 4)
            .map_err(|e| io::Error::other(format!("the emitter program: {e}")))?;
        let mut log = Vec::new();
        let emitter =
            load_program(ProgType::PerfEvent, &insns, "ksw_emit", &mut log).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("the emitter program: {e}: {}", log_line(&log)),
                )
            })?;
        // The array holds the emitter from here; the emitter holds its ring.
        let fd = raw(emitter.as_fd()) as u32;
        sys::bpf_map_update(
            p.maps.emitters.as_fd(),
            &cpu.to_ne_bytes(),
            &fd.to_ne_bytes(),
        )?;
        let ring = BpfRing::map(map, bytes)?;
        sys::perf_set_bpf(bp, p.prog.as_fd())?;
        Ok(ring)
    }

    /// Attaches watch `watch`'s program to another thread's breakpoint event `bp` on a CPU whose ring
    /// buffer [`HitPrograms::attach`] already wired: its hits go there.
    pub fn attach_member(&self, watch: usize, bp: BorrowedFd<'_>) -> io::Result<()> {
        sys::perf_set_bpf(bp, self.program(watch)?.prog.as_fd())
    }

    /// Watch `watch` moves from `old` to `new` (`done`: the breakpoints have moved): its program reads
    /// the watched bytes as one armed at `new` does. Called before the breakpoints move when the new
    /// watch must not be read, after when it may, so that no trap of either runs a read that traps.
    pub fn moving(&self, watch: usize, old: &Watch, new: &Watch, done: bool) -> io::Result<()> {
        if reads(new) == reads(old) || reads(new) != done {
            return Ok(());
        }
        self.program(watch)?.maps.set_reads(new)
    }

    /// Empties watch `watch`'s last values: after a `--control` move, `old` starts afresh in the kernel
    /// too.
    pub fn forget_olds(&self, watch: usize) -> io::Result<()> {
        let p = self.program(watch)?;
        if let Some(by_tgid) = &p.maps.olds_by_tgid {
            by_tgid.forget()?;
        }
        super::empty_olds(p.maps.olds.as_fd())
    }

    /// Traps watch `watch`'s program dropped so far on each CPU (filters, condition and other processes
    /// together), by CPU number.
    pub fn dropped_by_cpu(&self, watch: usize) -> io::Result<Vec<u64>> {
        let stats = self.program(watch)?.maps.stats.as_fd();
        let filtered = sys::bpf_map_lookup_percpu_u64(stats, layout::STAT_FILTERED)?;
        let other = sys::bpf_map_lookup_percpu_u64(stats, layout::STAT_OTHER_PROCESS)?;
        Ok(filtered.iter().zip(&other).map(|(a, b)| a + b).collect())
    }

    /// Kept hits of watch `watch` that its CPU's ring had no room for so far, by CPU number.
    pub fn lost_by_cpu(&self, watch: usize) -> io::Result<Vec<u64>> {
        sys::bpf_map_lookup_percpu_u64(self.program(watch)?.maps.stats.as_fd(), layout::STAT_LOST)
    }

    /// Traps after `--count`'s N-th hit that watch `watch`'s program kept none of, by CPU number.
    pub fn beyond_count_by_cpu(&self, watch: usize) -> io::Result<Vec<u64>> {
        self.program(watch)?.maps.totals.beyond_count_by_cpu()
    }

    /// Second reports of one store (by another of its thread's events) that watch `watch`'s program
    /// dropped on the per-thread path, by CPU number: the breakpoints counted them as hits too.
    pub fn repeated_by_cpu(&self, watch: usize) -> io::Result<Vec<u64>> {
        sys::bpf_map_lookup_percpu_u64(
            self.program(watch)?.maps.stats.as_fd(),
            layout::STAT_REPEATED,
        )
    }

    /// Traps of processes not watched that watch `watch`'s program dropped so far on each CPU, by CPU
    /// number (a part of [`HitPrograms::dropped_by_cpu`]).
    pub fn other_process_by_cpu(&self, watch: usize) -> io::Result<Vec<u64>> {
        sys::bpf_map_lookup_percpu_u64(
            self.program(watch)?.maps.stats.as_fd(),
            layout::STAT_OTHER_PROCESS,
        )
    }

    /// Traps watch `watch`'s program dropped so far, all CPUs together.
    pub fn dropped(&self, watch: usize) -> io::Result<Dropped> {
        let stats = self.program(watch)?.maps.stats.as_fd();
        let sum = |slot| -> io::Result<u64> {
            Ok(sys::bpf_map_lookup_percpu_u64(stats, slot)?.iter().sum())
        };
        Ok(Dropped {
            filtered: sum(layout::STAT_FILTERED)?,
            other_process: sum(layout::STAT_OTHER_PROCESS)?,
            lost: sum(layout::STAT_LOST)?,
        })
    }

    /// How many bytes watch `watch`'s program reads at each trap: the length the watch had when the
    /// program was built, whatever `--control` moved it to since; `None` when it reads none.
    pub fn read_len(&self, watch: usize) -> Option<u8> {
        self.programs.get(watch).and_then(|p| p.read_len)
    }

    /// What the kernel counted of watch `watch`'s kept hits ([`super::totals`]).
    pub fn counted(&self, watch: usize) -> io::Result<Counted> {
        let maps = &self.program(watch)?.maps;
        let mut counted = maps.totals.read()?;
        let scratch = sys::bpf_map_lookup_percpu(
            maps.scratch.as_fd(),
            0,
            layout::SCRATCH_LEN as usize,
            possible_cpus() as usize,
        )?;
        for (key, n) in scratch.iter().filter_map(|s| totals::pending(s)) {
            counted.add_pending(key, n);
        }
        Ok(counted)
    }

    /// The call chain watch `watch`'s program stored under `key` (kernel, then user return addresses):
    /// what a hit record that names its chain by id ([`crate::perf::hit_record::CHAIN_ID`]) stands for.
    pub fn chain(&self, watch: usize, key: ChainKey) -> io::Result<Option<(Vec<u64>, Vec<u64>)>> {
        self.program(watch)?.maps.totals.chain(key)
    }

    /// Hits every watch's program kept so far, all CPUs together.
    pub fn kept(&self) -> io::Result<u64> {
        let mut sum = 0;
        for p in &self.programs {
            sum += p.maps.totals.kept()?;
        }
        Ok(sum)
    }

    /// The number of watches (one program each).
    pub fn watches(&self) -> usize {
        self.programs.len()
    }

    fn program(&self, watch: usize) -> io::Result<&HitProgram> {
        self.programs
            .get(watch)
            .ok_or_else(|| io::Error::other(format!("no hit program for target {watch}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verifier's refusal of the kfunc call is the kernel's lack (exit 4), on the per-thread program
    /// only; any other refusal stays a bug to report.
    #[test]
    fn a_refused_kfunc_call_is_the_kernels_lack() {
        let refused = |log: &str| ProgramError::Refused {
            program: "hit",
            err: io::Error::from_raw_os_error(libc::EINVAL),
            log: log.into(),
        };
        let jit =
            "12: (85) call bpf_cast_to_kern_ctx#1234 | JIT is required for calling kernel function";
        assert!(matches!(
            kfunc_refused(refused(jit), true),
            ProgramError::NoFiringEvent
        ));
        assert!(matches!(
            kfunc_refused(refused(jit), false),
            ProgramError::Refused { .. }
        ));
        assert!(matches!(
            kfunc_refused(refused("R1 invalid mem access 'scalar'"), true),
            ProgramError::Refused { .. }
        ));
    }

    #[test]
    #[ignore = "live: loads BPF programs (run by scripts/test as root)"]
    fn a_name_offset_the_kernel_refuses_falls_back_to_the_helper() {
        if !super::super::root_or_skip("hit_set::tests", "to load BPF programs") {
            return;
        }
        let maps = WatchMaps::create(false).unwrap();
        let maps = maps.fds(None);
        let filter = Filter::default();
        // Far past the end of any task_struct: the verifier refuses the loads from the task.
        let spec = HitSpec::plain(&filter, Some(32_000));
        let insns = hit::generate(&spec, &maps).unwrap();
        let refused = load_program(ProgType::PerfEvent, &insns, "t_hit", &mut Vec::new());
        assert!(refused.is_err(), "the kernel loaded reads past task_struct");
        load_hit(&spec, &maps, &Tool).expect("the helper's program");
    }

    /// A process watch's program holds the read and its `reads` flag (the verifier takes the flag's
    /// direct load); a watch reads unless it is a read-write one of a user address, and a move between
    /// the two sets the flag the new watch's way.
    #[test]
    #[ignore = "live: loads BPF programs (run by scripts/test as root)"]
    fn the_reads_flag_follows_the_watch_through_moves() {
        if !super::super::root_or_skip("hit_set::tests", "to load BPF programs") {
            return;
        }
        let at = |addr: u64, access: Access| Watch {
            label: "v".into(),
            addr,
            len: 8,
            access,
            module: None,
            per_cpu: None,
        };
        let w = at(0x60_1000, Access::Write);
        let rw = at(0x60_1000, Access::ReadWrite);
        let kernel_rw = at(0xffff_ffff_8300_0000, Access::ReadWrite);
        assert!(reads(&w) && !reads(&rw) && reads(&kernel_rw));
        let filter = Filter::default();
        let kind = HitKind {
            watching: Watching::Processes {
                pids: Vec::new(),
                follow_children: false,
            },
            written: true,
        };
        let p = HitPrograms::load(std::slice::from_ref(&w), None, &filter, kind.clone(), 1)
            .expect("loads");
        let flag = |p: &HitPrograms| {
            let fd = p.programs[0].maps.reads.as_fd();
            sys::bpf_map_lookup_u32(fd, 0).expect("the flag")
        };
        assert_eq!(flag(&p), 1);
        // To rw: cleared before the breakpoints move, not after.
        p.moving(0, &w, &rw, false).unwrap();
        assert_eq!(flag(&p), 0);
        p.moving(0, &w, &rw, true).unwrap();
        assert_eq!(flag(&p), 0);
        // Back to w: set once they have moved.
        p.moving(0, &rw, &w, false).unwrap();
        assert_eq!(flag(&p), 0);
        p.moving(0, &rw, &w, true).unwrap();
        assert_eq!(flag(&p), 1);
        let kind = HitKind {
            written: false,
            ..kind
        };
        let p = HitPrograms::load(&[rw], None, &filter, kind, 1).expect("loads");
        assert_eq!(flag(&p), 0);
    }

    /// Every kind of watch's program, counting its hits in the kernel, passes the verifier (no
    /// breakpoint is armed).
    #[test]
    #[ignore = "live: loads BPF programs (run by scripts/test as root)"]
    fn every_kind_of_hit_program_with_its_totals_loads() {
        if !super::super::root_or_skip("hit_set::tests", "to load BPF programs") {
            return;
        }
        let watch = Watch {
            label: "x".into(),
            addr: 0x7ffd_0000,
            len: 8,
            access: Access::Write,
            module: None,
            per_cpu: None,
        };
        // The per-thread path's program (`threads`) holds the check that a store is reported once, with
        // its kfunc call and the event's pointer stored in the scratch entry.
        let processes = Watching::Processes {
            pids: Vec::new(),
            follow_children: false,
        };
        let kinds = [
            (Watching::Everyone, false),
            (processes.clone(), false),
            (Watching::Everyone, true),
            (processes, true),
            (Watching::Threads, true),
            (Watching::Threads, false),
        ];
        for (watching, written) in kinds {
            if watching == Watching::Threads && super::super::repeats::find().is_none() {
                println!("SKIP: hit_set::tests: no bpf_cast_to_kern_ctx in this kernel's BTF");
                continue;
            }
            let kind = HitKind { watching, written };
            let p = HitPrograms::load(
                std::slice::from_ref(&watch),
                None,
                &Filter::default(),
                kind.clone(),
                1,
            )
            .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            let counted = p.counted(0).expect("reads the totals");
            assert!(counted.counts.is_empty() && counted.chains.is_empty());
            assert_eq!(counted.values.is_some(), kind.written);
            assert_eq!(p.kept().expect("kept"), 0);
        }
    }
}
