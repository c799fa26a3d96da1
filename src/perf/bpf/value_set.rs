//! Loading the value programs ([`super::program`]) of the per-thread path (`--value` with `--per-thread` or
//! `--remove-on-exec`), one per watch, with their maps, and wiring them to the breakpoint events: the
//! counterpart of [`super::hit_set`] for the path where the kernel writes the hit's sample and the program
//! only adds the value.
//!
//! Per CPU and watch, a `PERF_COUNT_SW_BPF_OUTPUT` event is opened and redirected (`SET_OUTPUT`) into that
//! CPU's breakpoint ring, and entered in the watch's `outputs` map at the CPU's index. The program runs in
//! the breakpoint's overflow handler, before the kernel writes the sample: its value record therefore lands
//! in the same ring right before the sample of the same hit. The tracer pairs a value record only with the
//! record right after it, and only if that is a sample of the same thread, ip, CPU and breakpoint address
//! ([`crate::perf::record::ValueRecord::matches`]). When the ring is full either record may be dropped, but
//! the kernel then writes a LOST record before the next record that fits, so a value record is never
//! followed directly by a sample of another hit: a lost value leaves its hit's value unknown, a lost sample
//! leaves its value unpaired (counted, never shown), and no value is ever shown on the wrong hit.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use perf_event_open_sys::bindings as pb;

use super::kernel::{MapType, ProgType};
use super::program::{self, Maps, Spec};
use super::{create_map, empty_olds, load_program, possible_cpus, raw, tgid_olds, too_big};
use super::{ProgramError, OLDS_MAX};
use crate::model::condition::Condition;
use crate::model::filter::Filter;
use crate::model::watch::Watch;
use crate::perf::attr::ring_attr;
use crate::perf::record::VALUE_SAMPLE_TYPE;
use crate::perf::sys;

/// One watch's program and maps.
struct WatchProgram {
    prog: OwnedFd,
    outputs: OwnedFd,
    olds: OwnedFd,
    olds_by_tgid: tgid_olds::TgidOlds,
    stats: OwnedFd,
}

/// The loaded programs, one per watch (same order as the session's watches).
pub struct ValuePrograms {
    programs: Vec<WatchProgram>,
}

impl std::fmt::Debug for ValuePrograms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ValuePrograms({} programs)", self.programs.len())
    }
}

impl ValuePrograms {
    /// Creates the maps and loads one program per watch (the condition already checked against each
    /// watch's length). A refusal by the kernel is [`ProgramError::Unavailable`], or the verifier's
    /// [`ProgramError::Refused`] with its log (a bug here, not the user's).
    pub fn load(
        watches: &[Watch],
        condition: Option<&Condition>,
        filter: &Filter,
    ) -> Result<ValuePrograms, ProgramError> {
        let cpus = possible_cpus();
        let mut programs = Vec::with_capacity(watches.len());
        for w in watches {
            let map = |kind, sizes, max, name| {
                create_map(kind, sizes, max, name).map_err(ProgramError::Unavailable)
            };
            let outputs = map(MapType::PerfEventArray, (4, 4), cpus, "ksw_outputs")?;
            let olds = map(MapType::LruHash, (8, 8), OLDS_MAX, "ksw_olds")?;
            let olds_by_tgid = tgid_olds::TgidOlds::new().map_err(ProgramError::Unavailable)?;
            let stats = map(MapType::PercpuArray, (4, 8), 1, "ksw_stats")?;
            let maps = Maps {
                outputs: raw(outputs.as_fd()),
                olds: raw(olds.as_fd()),
                olds_by_tgid: Some(raw(olds_by_tgid.fd())),
                stats: raw(stats.as_fd()),
            };
            let spec = Spec {
                len: w.len,
                condition,
                filter,
            };
            let insns = program::generate(&spec, &maps).map_err(|e| too_big(&e, condition))?;
            let mut log = Vec::new();
            let prog = load_program(ProgType::PerfEvent, &insns, "ksw_value", &mut log)
                .map_err(|e| ProgramError::load("value", e, &log))?;
            programs.push(WatchProgram {
                prog,
                outputs,
                olds,
                olds_by_tgid,
                stats,
            });
        }
        Ok(ValuePrograms { programs })
    }

    /// Wires watch `watch`'s program to the breakpoint event `bp` on `cpu`: opens the CPU's value event
    /// into `bp`'s ring, enters it in the `outputs` map (replacing the one of an earlier time this CPU was
    /// online), and attaches the program. Returns the value event and its record id.
    pub fn attach(&self, watch: usize, cpu: u32, bp: BorrowedFd<'_>) -> io::Result<(OwnedFd, u64)> {
        let p = self.program(watch)?;
        wire(p.outputs.as_fd(), p.prog.as_fd(), cpu, bp)
    }

    /// Attaches watch `watch`'s program to another thread's breakpoint event `bp`, whose records go to a
    /// ring [`ValuePrograms::attach`] already wired.
    pub fn attach_member(&self, watch: usize, bp: BorrowedFd<'_>) -> io::Result<()> {
        sys::perf_set_bpf(bp, self.program(watch)?.prog.as_fd())
    }

    /// Empties watch `watch`'s last values: after a `--control` move, `old` starts afresh.
    pub fn forget_olds(&self, watch: usize) -> io::Result<()> {
        let p = self.program(watch)?;
        p.olds_by_tgid.forget()?;
        empty_olds(p.olds.as_fd())
    }

    /// Hits of watch `watch` the program dropped (filters or condition) on each CPU so far, by CPU number.
    pub fn dropped(&self, watch: usize) -> io::Result<Vec<u64>> {
        sys::bpf_map_lookup_percpu_u64(self.program(watch)?.stats.as_fd(), 0)
    }

    fn program(&self, watch: usize) -> io::Result<&WatchProgram> {
        self.programs
            .get(watch)
            .ok_or_else(|| io::Error::other(format!("no value program for watch {watch}")))
    }
}

/// Opens `cpu`'s output event into `bp`'s ring, enters it in the `outputs` map (replacing the one of an
/// earlier time this CPU was online), and attaches `prog` to `bp`. Returns the output event and the id
/// that leads its records.
fn wire(
    outputs: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    cpu: u32,
    bp: BorrowedFd<'_>,
) -> io::Result<(OwnedFd, u64)> {
    let base = output_attr();
    // The output event's own lost counter is the only count of value records lost at the end of a burst
    // (no LOST record follows them); kernels before 6.0 refuse PERF_FORMAT_LOST.
    let mut attr = base;
    attr.read_format = u64::from(pb::PERF_FORMAT_LOST);
    let out = match sys::perf_event_open(&attr, -1, cpu as i32) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            sys::perf_event_open(&base, -1, cpu as i32)?
        }
        r => r?,
    };
    sys::perf_set_output(out.as_fd(), bp)?;
    let id = sys::perf_event_id(out.as_fd())?;
    let fd = raw(out.as_fd()) as u32;
    sys::bpf_map_update(outputs, &cpu.to_ne_bytes(), &fd.to_ne_bytes())?;
    sys::perf_set_bpf(bp, prog)?;
    Ok((out, id))
}

/// The value event: a software event the program writes into, sharing the breakpoint ring's clock and
/// trailer ([`ring_attr`]).
fn output_attr() -> pb::perf_event_attr {
    let mut a = ring_attr(pb::PERF_TYPE_SOFTWARE);
    a.config = u64::from(pb::PERF_COUNT_SW_BPF_OUTPUT);
    a.sample_type = VALUE_SAMPLE_TYPE;
    // Enabled from the start: it writes only what the program gives it, and the program runs only on
    // enabled breakpoints.
    a
}
