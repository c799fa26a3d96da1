//! `--value` and `--if`: a BPF program on every breakpoint event reads the stored value at the trap,
//! evaluates the condition there, and drops non-matching hits before the kernel writes a sample. This
//! module loads the programs and their maps ([`Values`]) and wires them to the events; the program itself is
//! [`program`], built with [`insn`].
//!
//! # How a value finds its hit
//! Per CPU and watch, a `PERF_COUNT_SW_BPF_OUTPUT` event is opened and redirected (`SET_OUTPUT`) into that
//! CPU's breakpoint ring, and entered in the watch's `outputs` map at the CPU's index. The program runs in
//! the breakpoint's overflow handler, before the kernel writes the sample: its value record therefore lands
//! in the same ring right before the sample of the same hit. The tracer pairs a value record only with the
//! record right after it, and only if that is a sample of the same thread, ip, CPU and breakpoint address
//! ([`crate::perf::record::ValueRecord::matches`]). When the ring is full either record may be dropped, but
//! the kernel then writes a LOST record before the next record that fits, so a value record is never
//! followed directly by a sample of another hit: a lost value leaves its hit's value unknown, a lost sample
//! leaves its value unpaired (counted, never shown), and no value is ever shown on the wrong hit.
//!
//! # Costs and limits
//! A hit the program drops costs the writer the trap and the program (the kernel has already unwound the
//! call chain by then), and the tracer nothing: no sample, no ring space, no wake-up. The kernel skips
//! programs while another BPF program runs on the same CPU (`bpf_prog_active`): a store made from inside a
//! BPF program, or while one runs there, is not reported with `--value`.

pub mod emit;
pub mod follow;
pub mod hit;
#[cfg(test)]
mod hit_bench;
#[cfg(test)]
mod hit_live_tests;
pub mod hit_set;
pub mod insn;
#[cfg(test)]
mod interp;
pub mod objects;
pub mod percpu;
pub mod program;
pub mod task;
pub mod tgid_olds;
pub mod totals;
pub mod trigger;

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use perf_event_open_sys::bindings as pb;

use crate::error::ExitCode;
use crate::model::condition::Condition;
use crate::model::filter::Filter;
use crate::model::watch::Watch;
use crate::perf::attr::ring_attr;
use crate::perf::record::VALUE_SAMPLE_TYPE;
use crate::perf::sys;
use program::{Maps, Spec};

const PROG_TYPE_PERF_EVENT: u32 = 7;
const MAP_TYPE_HASH: u32 = 1;
const MAP_TYPE_ARRAY: u32 = 2;
const MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;
const MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const MAP_TYPE_PROG_ARRAY: u32 = 3;
const MAP_TYPE_LRU_HASH: u32 = 9;
const MAP_TYPE_RINGBUF: u32 = 27;

/// Processes whose last value is kept per watch in the hash (a system-wide watch of a user address has
/// one per process), beyond those the by-tgid array ([`tgid_olds`]) holds; the least recently written is
/// forgotten first, its next hit then has no `old`.
const OLDS_MAX: u32 = 4096;

/// One watch's program and maps.
struct WatchProgram {
    prog: OwnedFd,
    outputs: OwnedFd,
    olds: OwnedFd,
    olds_by_tgid: tgid_olds::TgidOlds,
    stats: OwnedFd,
}

/// The loaded programs, one per watch (same order as the session's watches).
pub struct Values {
    programs: Vec<WatchProgram>,
}

impl std::fmt::Debug for Values {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Values({} programs)", self.programs.len())
    }
}

/// The number of possible CPUs: the `outputs` maps need an index for each.
fn possible_cpus() -> u32 {
    crate::cpulist::read(Path::new(crate::cpulist::POSSIBLE))
        .ok()
        .and_then(|s| s.last().copied())
        .map_or(1024, |last| last + 1)
}

/// Why a breakpoint's BPF program (the value program or the hit program) could not be had, in the
/// kernel's terms; the CLI names the options it came from.
#[derive(Debug)]
pub enum ProgramError {
    /// The kernel would not load a BPF program at all ([`why_unavailable`]): not permitted or not supported.
    Unavailable(io::Error),
    /// The condition has more comparisons than one program's 16-bit jumps can span.
    TooManyComparisons { terms: usize },
    /// The verifier refused a program built here (a bug here, not the user's), with its log on one line.
    Refused {
        program: &'static str,
        err: io::Error,
        log: String,
    },
    /// The assembler could not encode the program otherwise (a bug here).
    Build(insn::AsmError),
}

impl ProgramError {
    /// Not permitted or not supported (4): a breakpoint without a program still works; a condition too
    /// long is the user's to shorten (2); anything else is a bug found at run time (1).
    pub fn code(&self) -> ExitCode {
        match self {
            ProgramError::Unavailable(_) => ExitCode::NotPermitted,
            ProgramError::TooManyComparisons { .. } => ExitCode::Usage,
            ProgramError::Refused { .. } | ProgramError::Build(_) => ExitCode::Runtime,
        }
    }

    /// A refusal to load `program`: one the kernel would refuse any program for is [`Self::Unavailable`].
    fn load(program: &'static str, err: io::Error, log: &[u8]) -> ProgramError {
        match err.raw_os_error() {
            Some(libc::EPERM | libc::EACCES | libc::ENOSYS) => ProgramError::Unavailable(err),
            _ => ProgramError::Refused {
                program,
                err,
                log: String::from_utf8_lossy(log).trim().replace('\n', " | "),
            },
        }
    }
}

impl std::fmt::Display for ProgramError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProgramError::Unavailable(e) => write!(
                f,
                "a BPF program on the breakpoint reads the value in the kernel, but {}",
                why_unavailable(e)
            ),
            ProgramError::TooManyComparisons { terms } => write!(
                f,
                "the condition has {terms} comparisons, more than one in-kernel program can hold (a BPF \
                 jump reaches 32,767 instructions, about 6,000 comparisons)"
            ),
            ProgramError::Refused { program, err, log } => write!(
                f,
                "the kernel's verifier refused the {program} program ({err}); please report this with its \
                 log: {log}"
            ),
            ProgramError::Build(e) => write!(f, "building the in-kernel program: {e}"),
        }
    }
}

impl std::error::Error for ProgramError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProgramError::Unavailable(e) | ProgramError::Refused { err: e, .. } => Some(e),
            ProgramError::Build(e) => Some(e),
            ProgramError::TooManyComparisons { .. } => None,
        }
    }
}

/// Why the kernel would not load a BPF program, and what would let it, in the kernel's terms.
pub fn why_unavailable(err: &io::Error) -> String {
    let setting = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    match err.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => format!(
            "loading a BPF program was refused ({err}): run as root, or grant CAP_BPF and CAP_PERFMON \
             (kernel.unprivileged_bpf_disabled is {setting})"
        ),
        Some(libc::ENOSYS) => {
            "this kernel has no bpf() system call (CONFIG_BPF_SYSCALL is off)".to_string()
        }
        _ => format!("this kernel would not load a BPF perf-event program ({err})"),
    }
}

/// A program the assembler cannot encode: a condition so long that its jumps span more than the 16-bit
/// offsets a BPF jump has is the user's to shorten; anything else is a bug here.
pub(crate) fn too_big(e: &insn::AsmError, condition: Option<&Condition>) -> ProgramError {
    match (e, condition) {
        (insn::AsmError::TooFar(_), Some(c)) => {
            let mut terms = 0;
            c.for_each_compare(&mut |_| terms += 1);
            ProgramError::TooManyComparisons { terms }
        }
        _ => ProgramError::Build(e.clone()),
    }
}

/// Loads the smallest perf-event program: whether `--value` and the hit path can work here (`check`, and
/// before anything is armed). Asked once per run: the answer (an errno on refusal) is kept.
pub fn probe() -> io::Result<()> {
    static ANSWER: std::sync::OnceLock<Result<(), i32>> = std::sync::OnceLock::new();
    let answer = ANSWER.get_or_init(|| {
        let insns: Vec<u64> = program::probe().iter().map(|i| i.raw()).collect();
        let mut log = Vec::new();
        sys::bpf_prog_load(PROG_TYPE_PERF_EVENT, &insns, "ksw_probe", &mut log)
            .map(|_| ())
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
    });
    answer.map_err(io::Error::from_raw_os_error)
}

impl Values {
    /// Creates the maps and loads one program per watch (the condition already checked against each
    /// watch's length). A refusal by the kernel is [`ProgramError::Unavailable`], or the verifier's
    /// [`ProgramError::Refused`] with its log (a bug here, not the user's).
    pub fn load(
        watches: &[Watch],
        condition: Option<&Condition>,
        filter: &Filter,
    ) -> Result<Values, ProgramError> {
        let cpus = possible_cpus();
        let mut programs = Vec::with_capacity(watches.len());
        for w in watches {
            let map = |kind, key, value, max, name| {
                sys::bpf_map_create(kind, key, value, max, name).map_err(ProgramError::Unavailable)
            };
            let outputs = map(MAP_TYPE_PERF_EVENT_ARRAY, 4, 4, cpus, "ksw_outputs")?;
            let olds = map(MAP_TYPE_LRU_HASH, 8, 8, OLDS_MAX, "ksw_olds")?;
            let olds_by_tgid = tgid_olds::TgidOlds::new().map_err(ProgramError::Unavailable)?;
            let stats = map(MAP_TYPE_PERCPU_ARRAY, 4, 8, 1, "ksw_stats")?;
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
            let insns: Vec<u64> = program::generate(&spec, &maps)
                .map_err(|e| too_big(&e, condition))?
                .iter()
                .map(|i| i.raw())
                .collect();
            let mut log = Vec::new();
            let prog = sys::bpf_prog_load(PROG_TYPE_PERF_EVENT, &insns, "ksw_value", &mut log)
                .map_err(|e| ProgramError::load("value", e, &log))?;
            programs.push(WatchProgram {
                prog,
                outputs,
                olds,
                olds_by_tgid,
                stats,
            });
        }
        Ok(Values { programs })
    }

    /// Wires watch `watch`'s program to the breakpoint event `bp` on `cpu`: opens the CPU's value event
    /// into `bp`'s ring, enters it in the `outputs` map (replacing the one of an earlier time this CPU was
    /// online), and attaches the program. Returns the value event and its record id.
    pub fn attach(&self, watch: usize, cpu: u32, bp: BorrowedFd<'_>) -> io::Result<(OwnedFd, u64)> {
        let p = self.program(watch)?;
        wire(p.outputs.as_fd(), p.prog.as_fd(), cpu, bp)
    }

    /// Attaches watch `watch`'s program to another thread's breakpoint event `bp`, whose records go to a
    /// ring [`Values::attach`] already wired.
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

/// Deletes every key of an olds map (u64 keys). Deleting the key just returned makes the next lookup from
/// `None` find the next one. The events are disabled while a watch moves, so nothing adds keys meanwhile;
/// the bound is for safety.
fn empty_olds(olds: BorrowedFd<'_>) -> io::Result<()> {
    let mut key = [0u8; 8];
    for _ in 0..=OLDS_MAX {
        if !sys::bpf_map_next_key(olds, None, &mut key)? {
            break;
        }
        match sys::bpf_map_delete(olds, &key) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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

fn raw(fd: BorrowedFd<'_>) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
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

#[cfg(test)]
mod tests;
