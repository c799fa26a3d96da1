//! `--dump-on tracepoint:GROUP:NAME`: a raw-tracepoint program that counts the tracepoint's firings per
//! CPU, with the time of the last one, in a per-CPU array the tracer reads on every turn of its loop
//! ([`Tracepoint::fired`]). A counter rather than a record in a ring: the tracer only needs to know that
//! it fired, and when, and a map read per loop turn costs less than a ring per CPU to poll and follow
//! through hotplug.
//!
//! Map layout: key 0 holds each CPU's count, key 1 the `bpf_ktime_get_ns` (CLOCK_MONOTONIC, the clock
//! hits are stamped with) of its last firing. The program writes the time before the count, so a reader
//! that sees a new count sees that firing's time or a later one.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use super::insn::{Asm, AsmError, Insn, Kept, DW, R0};
use super::kernel::{Helper, MapType, ProgType};
use super::seq;
use crate::error::ExitCode;
use crate::perf::sys;

const COUNT: u32 = 0;
const LAST_NS: u32 = 1;

/// The program's binding: the time of this firing.
const NOW: Kept = Kept::R6;

/// The program: `map` is the per-CPU array of counts (key 0) and last times (key 1).
pub fn generate(map: i32) -> Result<Vec<Insn>, AsmError> {
    let mut a = Asm::new();
    let key = a.slot(4).off();
    let out = a.label();
    // The time first (see the module docs).
    a.call(Helper::KtimeGetNs).mov(NOW, R0);
    seq::lookup(&mut a, (map, LAST_NS, key), out);
    a.store(DW, R0, 0, NOW);
    // Per-CPU, and a raw tracepoint's program runs with migration off: a plain add is this CPU's alone.
    seq::add_to(&mut a, (map, COUNT, key), None);
    a.bind(out);
    a.mov_imm(R0, 0).exit();
    a.finish()
}

/// Why a tracepoint could not be counted.
#[derive(Debug)]
pub struct TracepointError {
    /// `GROUP:NAME`.
    pub tracepoint: String,
    pub why: Refused,
}

/// What the kernel refused.
#[derive(Debug)]
pub enum Refused {
    /// Creating the map or loading the program: BPF is not permitted or not supported.
    Bpf(std::io::Error),
    /// No raw tracepoint of that name (checked in BTF before, where there is BTF): the syscalls:* events
    /// tracefs lists are made by ftrace from the raw_syscalls ones.
    NoRawTracepoint(String),
    /// The program could not be encoded (a bug here).
    Build(AsmError),
    /// The first reading of the counts.
    Read(std::io::Error),
}

impl TracepointError {
    /// A tracepoint that is not one is the user's to change (2); BPF refused is not permitted (4).
    pub fn code(&self) -> ExitCode {
        match self.why {
            Refused::Bpf(_) => ExitCode::NotPermitted,
            Refused::NoRawTracepoint(_) => ExitCode::Usage,
            Refused::Build(_) | Refused::Read(_) => ExitCode::Runtime,
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Bpf(e) => write!(
                f,
                "the kernel refused the counting program ({e}); it needs BPF (root, or CAP_BPF and \
                 CAP_PERFMON)"
            ),
            Refused::NoRawTracepoint(name) => write!(
                f,
                "the kernel has no raw tracepoint `{name}` to attach a program to (syscalls:* events are \
                 ftrace's, made from raw_syscalls:sys_enter and sys_exit); pick a tracepoint of another \
                 group"
            ),
            Refused::Build(e) => write!(f, "building the tracepoint program: {e}"),
            Refused::Read(e) => write!(f, "reading the tracepoint counts: {e}"),
        }
    }
}

impl std::fmt::Display for TracepointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tracepoint {}: {}", self.tracepoint, self.why)
    }
}

impl std::error::Error for TracepointError {}

/// One tracepoint, counted while this lives.
pub struct Tracepoint {
    /// `GROUP:NAME`.
    pub name: String,
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    /// Each CPU's count when last read.
    seen: Vec<u64>,
}

impl std::fmt::Debug for Tracepoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tracepoint({})", self.name)
    }
}

impl Tracepoint {
    /// Loads the counting program and attaches it to tracepoint `group:name` (checked to exist by the
    /// caller: the raw attach takes `name` alone).
    pub fn attach(group: &str, name: &str) -> Result<Tracepoint, TracepointError> {
        let full = format!("{group}:{name}");
        let fail = |why| TracepointError {
            tracepoint: full.clone(),
            why,
        };
        let refused = |e| fail(Refused::Bpf(e));
        let map =
            super::create_map(MapType::PercpuArray, (4, 8), 2, "ksw_trigger").map_err(refused)?;
        let insns = generate(map.as_raw_fd()).map_err(|e| fail(Refused::Build(e)))?;
        let mut log = Vec::new();
        let prog = super::load_program(ProgType::RawTracepoint, &insns, "ksw_trigger", &mut log)
            .map_err(refused)?;
        let link = sys::bpf_raw_tracepoint_open(name, prog.as_fd()).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOENT) {
                fail(Refused::NoRawTracepoint(name.to_string()))
            } else {
                refused(e)
            }
        })?;
        let mut t = Tracepoint {
            name: full.clone(),
            map,
            _prog: prog,
            _link: link,
            seen: Vec::new(),
        };
        t.seen = t.counts().map_err(|e| fail(Refused::Read(e)))?;
        Ok(t)
    }

    fn counts(&self) -> std::io::Result<Vec<u64>> {
        sys::bpf_map_lookup_percpu_u64(self.map.as_fd(), COUNT)
    }

    /// Whether it fired since the last call: the CPU and time of the latest firing.
    pub fn fired(&mut self) -> std::io::Result<Option<(u32, u64)>> {
        let counts = self.counts()?;
        if counts == self.seen {
            return Ok(None);
        }
        let times = sys::bpf_map_lookup_percpu_u64(self.map.as_fd(), LAST_NS)?;
        let latest = counts
            .iter()
            .zip(&self.seen)
            .zip(&times)
            .enumerate()
            .filter(|(_, ((now, before), _))| now != before)
            .map(|(cpu, (_, &time))| (cpu as u32, time))
            .max_by_key(|&(_, time)| time);
        self.seen = counts;
        Ok(latest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counting program passes the verifier as a raw-tracepoint program (nothing is attached).
    #[test]
    #[ignore = "live: loads BPF programs (run by scripts/test as root)"]
    fn the_program_passes_the_verifier() {
        if !super::super::root_or_skip("trigger::tests", "to load BPF programs") {
            return;
        }
        let map =
            super::super::create_map(MapType::PercpuArray, (4, 8), 2, "t_trigger").expect("map");
        let insns = generate(map.as_raw_fd()).expect("assembles");
        let mut log = Vec::new();
        let loaded =
            super::super::load_program(ProgType::RawTracepoint, &insns, "t_trig", &mut log);
        assert!(
            loaded.is_ok(),
            "{loaded:?}: {}",
            super::super::log_line(&log)
        );
    }
}
