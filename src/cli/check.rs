//! `ksymwatch check`: what this machine allows, before anyone waits on a watch that cannot work. Every probe
//! is read-only except the breakpoint probes, which open disabled breakpoints and close them at once: the
//! debug-register count on every online CPU, and one breakpoint on a kernel address and one on a user
//! address (ksymwatch's own memory), since some kernels refuse the first kind to everyone.
//! It exits with the code a default `write` of a kernel variable (every online CPU) would: 4 not permitted
//! or not supported (kernel breakpoints refused included, where user-space watches still work: the heading
//! says `user-space watches only`), 3 a CPU that cannot be armed (no free debug register), 0 otherwise.

use std::collections::BTreeSet;
use std::path::Path;

use ksymwatch_symbols::{kallsyms, Btf, Resolver, Source, SourceSearch};
use serde::Serialize;

use crate::config::advice::Advised;
use crate::cpulist;
use crate::error::{Context, Error, ExitCode, Result};
use crate::perf::privilege::Privilege;
use crate::perf::refusal;
use crate::perf::refusal::Refusal;

#[derive(Debug, Serialize)]
pub struct CpuSlots {
    pub cpu: u32,
    /// How many breakpoints could be opened before the kernel said ENOSPC; `None` if the probe failed.
    pub free: Option<u32>,
    pub error: Option<String>,
    /// The exit code a `write` arming this CPU would get from the probe's failure (`None`: it can be
    /// armed, or it went offline while probed, which arming skips too).
    #[serde(skip)]
    pub refused: Option<ExitCode>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    /// Whether `ksymwatch write` can arm here, and if not why.
    pub can_watch: bool,
    pub reason: Option<String>,
    /// Kernel addresses are refused while user-space watches work: the heading's `user-space watches
    /// only` (`can_watch` is false, `reason` the kernel's refusal).
    pub user_space_only: bool,
    /// The exit code `check` ends with: the one a default `write` (every online CPU) would end with.
    #[serde(skip)]
    pub code: Option<ExitCode>,
    /// Online CPUs where a watch cannot be armed (no free debug register, or the probe was refused), in
    /// the order `write` arms them.
    pub unarmable_cpus: Vec<u32>,
    pub kernel: String,
    pub breakpoint_pmu: bool,
    pub uid: u32,
    pub cap_perfmon: bool,
    pub cap_sys_admin: bool,
    pub perf_event_paranoid: Option<i32>,
    pub kptr_restrict: Option<i32>,
    pub kallsyms_symbols: usize,
    pub kallsyms_addresses_visible: bool,
    pub kallsyms_data_symbols: bool,
    pub symbol_source: String,
    pub symbol_source_kind: String,
    pub symbol_source_matches: String,
    /// The servers in DEBUGINFOD_URLS (empty: not set), the debuginfod client cache, and whether it
    /// holds the running kernel's vmlinux (checked by build-id).
    pub debuginfod_urls: Vec<String>,
    pub debuginfod_cache: Option<String>,
    pub debuginfod_cached: bool,
    /// The kernel's BTF, which `(TYPE)BASE.FIELD` targets read types from: its path when it loads.
    pub btf: Option<String>,
    /// Why it does not load.
    pub btf_error: Option<String>,
    pub online_cpus: String,
    /// Free debug registers per online CPU, probed.
    pub debug_registers: Vec<CpuSlots>,
    /// A disabled breakpoint on a kernel address opens (`null`: not probed, see the error), its refusal's
    /// kind (`kernel_breakpoints_refused`, `needs_cap_sys_admin`, ...) and the refusal, or why it was not
    /// probed.
    pub kernel_breakpoints: Option<bool>,
    pub kernel_breakpoints_kind: Option<&'static str>,
    pub kernel_breakpoints_error: Option<String>,
    /// The same for a user address (in ksymwatch's own memory).
    pub user_breakpoints: Option<bool>,
    pub user_breakpoints_kind: Option<&'static str>,
    pub user_breakpoints_error: Option<String>,
    /// The probes' rows, worded.
    #[serde(skip)]
    pub kernel_probe: String,
    #[serde(skip)]
    pub user_probe: String,
    pub hotplug_writable: Vec<u32>,
    pub uevents: bool,
    /// Whether `--value`/`--if` can work: a BPF perf-event program loads.
    pub bpf: bool,
    /// Why not, as `--value` would say it.
    pub bpf_error: Option<String>,
    /// Each online CPU's per-CPU base, asked of the kernel (`cpu` -> hex address): what names a per-CPU
    /// variable's copies (`write runqueues.nr_running`).
    pub percpu_bases: Vec<CpuBase>,
    /// Why there are none.
    pub percpu_error: Option<String>,
}

/// One CPU's per-CPU base.
#[derive(Debug, Serialize)]
pub struct CpuBase {
    pub cpu: u32,
    pub base: String,
}

/// The online CPUs' per-CPU bases (see `perf::bpf::percpu`), or why they cannot be had.
fn percpu_bases(
    online: &std::collections::BTreeSet<u32>,
    bpf_error: Option<&str>,
) -> (Vec<CpuBase>, Option<String>) {
    if let Some(e) = bpf_error {
        return (Vec::new(), Some(format!("needs BPF: {e}")));
    }
    let btf = match Btf::running() {
        Ok(b) => b,
        Err(e) => {
            return (
                Vec::new(),
                Some(format!("needs the kernel's BTF: {}", Advised(e))),
            )
        }
    };
    let at = match crate::perf::bpf::percpu::Offsets::from_btf(&btf) {
        Ok(a) => a,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let cpus: Vec<u32> = online.iter().copied().collect();
    match crate::perf::bpf::percpu::bases(&cpus, at) {
        Ok(b) if !b.is_empty() => (
            b.into_iter()
                .map(|(cpu, base)| CpuBase {
                    cpu,
                    base: format!("0x{base:x}"),
                })
                .collect(),
            None,
        ),
        Ok(_) => (Vec::new(), Some("no CPU answered".into())),
        Err(e) => (Vec::new(), Some(e.to_string())),
    }
}

fn read_i32(path: &str) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether the symbol source `search` picked matches the running kernel, in words.
fn source_matches(source: &Source, search: &SourceSearch) -> String {
    match source {
        Source::Kallsyms(_) => "running kernel".to_string(),
        other => match Resolver::open_source(other.clone(), search) {
            Ok(r) => r.kernel_match().to_string(),
            Err(e) => format!("unreadable: {}", Advised(e)),
        },
    }
}

/// Each online CPU's free debug registers, and the exit code `write` would end with there if it cannot
/// arm.
fn cpu_slots(online: &BTreeSet<u32>) -> Vec<CpuSlots> {
    online
        .iter()
        .map(|&cpu| match crate::perf::probe::free_slots(cpu) {
            Ok(n) => CpuSlots {
                cpu,
                free: Some(n),
                error: None,
                // A full CPU is what `write` reports as ENOSPC: could not arm.
                refused: (n == 0).then_some(ExitCode::Arm),
            },
            Err(e) => CpuSlots {
                cpu,
                free: None,
                error: Some(e.err.to_string()),
                // ENODEV: it went offline between the online list and the probe; `write` skips such a
                // CPU and arms it when it returns.
                refused: (e.err.raw_os_error() != Some(libc::ENODEV))
                    .then(|| refusal::explain(&e, &[]).code),
            },
        })
        .collect()
}

/// The possible CPUs whose `online` file this user can write (to take them off and on line).
fn hotplug_writable(possible: &BTreeSet<u32>) -> Vec<u32> {
    possible
        .iter()
        .copied()
        .filter(|c| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(format!("/sys/devices/system/cpu/cpu{c}/online"))
                .is_ok()
        })
        .collect()
}

/// What one breakpoint probe found.
#[derive(Debug)]
pub enum Probed {
    /// A disabled breakpoint opened on this CPU (and was closed at once).
    Opened { cpu: u32 },
    /// The kernel refused it, as it would refuse a watch there.
    Refused(Refusal),
    /// Not asked, for this reason (no breakpoint PMU, no CPU with a free register).
    Unasked(String),
}

impl Probed {
    fn opened(&self) -> Option<bool> {
        match self {
            Probed::Opened { .. } => Some(true),
            Probed::Refused(_) => Some(false),
            Probed::Unasked(_) => None,
        }
    }

    fn kind(&self) -> Option<&'static str> {
        match self {
            Probed::Refused(r) => Some(r.kind.as_str()),
            _ => None,
        }
    }

    /// The refusal as `write` would print it, or why there was no probe.
    fn error(&self) -> Option<String> {
        match self {
            Probed::Opened { .. } => None,
            Probed::Refused(r) => Some(super::advice::refusal(r)),
            Probed::Unasked(why) => Some(format!("not probed: {why}")),
        }
    }

    /// The row: `yes (...)`, `refused: ...`, `not probed: ...`.
    fn row(&self, at: &str) -> String {
        match self {
            Probed::Opened { cpu } => {
                format!("yes (a disabled breakpoint at {at} opened on cpu {cpu})")
            }
            Probed::Refused(r) => format!("refused: {}", super::advice::refusal(r)),
            Probed::Unasked(why) => format!("not probed: {why}"),
        }
    }
}

/// The x86-64 kernel text's start without KASLR: the kernel probe's address when kallsyms hides `_text`.
/// The kernel checks any kernel-half address alike, and the probe is never enabled.
const KERNEL_TEXT: u64 = 0xffff_ffff_8100_0000;

/// Where the kernel probe asks for a breakpoint: kallsyms' `_text` (`text`) when it is visible, else
/// [`KERNEL_TEXT`]; in words and as an address.
fn kernel_probe_address(text: Option<u64>) -> (String, u64) {
    match text {
        Some(addr) => (format!("_text 0x{addr:x}"), addr),
        None => (format!("0x{KERNEL_TEXT:x}"), KERNEL_TEXT),
    }
}

/// A probe breakpoint at `addr` on the first CPU that has a free debug register (a CPU without one would
/// refuse any breakpoint, which says nothing of the address), else on the first whose register probe was
/// refused (the refusal is then worded for this address).
fn probe(addr: u64, free: &[CpuSlots], breakpoint_pmu: bool) -> Probed {
    if !breakpoint_pmu {
        return Probed::Unasked("no breakpoint PMU".into());
    }
    let Some(cpu) = free
        .iter()
        .find(|s| s.free.is_some_and(|n| n > 0))
        .or_else(|| free.iter().find(|s| s.free.is_none()))
        .map(|s| s.cpu)
    else {
        return Probed::Unasked("no online CPU has a free debug register".into());
    };
    match crate::perf::probe::probe(addr, cpu) {
        Ok(()) => Probed::Opened { cpu },
        Err(e) => Probed::Refused(refusal::explain(&e, &[])),
    }
}

/// Why `write` could not watch, with its exit code, and whether it is only kernel addresses that are
/// refused; none when it could.
fn verdict(
    breakpoint_pmu: bool,
    privilege: &Privilege,
    free: &[CpuSlots],
    unarmable: &[&CpuSlots],
    (kernel, user): (&Probed, &Probed),
) -> Option<(ExitCode, String, bool)> {
    if let Some((code, why)) = machine_verdict(breakpoint_pmu, privilege, free, unarmable) {
        return Some((code, why, false));
    }
    match (kernel, user) {
        (_, Probed::Refused(u)) => Some((u.code, super::advice::refusal(u), false)),
        (Probed::Refused(k), _) => Some((k.code, super::advice::refusal(k), true)),
        _ => None,
    }
}

/// [`verdict`]'s part that the breakpoint PMU, the privileges and the debug registers decide.
fn machine_verdict(
    breakpoint_pmu: bool,
    privilege: &Privilege,
    free: &[CpuSlots],
    unarmable: &[&CpuSlots],
) -> Option<(ExitCode, String)> {
    if !breakpoint_pmu {
        Some((
            ExitCode::NotPermitted,
            "no hardware breakpoint PMU (/sys/bus/event_source/devices/breakpoint is missing)"
                .to_string(),
        ))
    } else if let Err(e) = privilege.system_wide() {
        Some((ExitCode::NotPermitted, e))
    } else if let Some(first) = unarmable.first() {
        // `write` arms CPUs in order and stops at the first refusal: its code is the first CPU's.
        let code = first.refused.unwrap_or(ExitCode::Arm);
        Some((code, registers_verdict(free, unarmable)))
    } else if free.iter().all(|s| s.free.is_none()) {
        Some((
            ExitCode::Arm,
            "no online CPU could be probed for a free debug register".to_string(),
        ))
    } else {
        None
    }
}

pub fn gather() -> Report {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let breakpoint_pmu = Path::new("/sys/bus/event_source/devices/breakpoint").exists();
    let privilege = Privilege::current();
    let (kallsyms_symbols, visible, data, text) = match kallsyms::load(Path::new("/proc/kallsyms"))
    {
        Ok(t) => (
            t.len(),
            true,
            t.has_data_symbols(),
            t.lookup("_text", None).ok().map(|s| s.addr),
        ),
        Err(_) => (0, false, false, None),
    };
    let search = SourceSearch::system();
    let source = search.pick();
    let matches = source_matches(&source, &search);
    let debuginfod_urls = std::env::var(ksymwatch_symbols::debuginfod::URLS_ENV)
        .map(|v| ksymwatch_symbols::debuginfod::parse_urls(&v))
        .unwrap_or_default();
    let debuginfod_cached = search.debuginfod_cached().is_some();
    let (btf, btf_error) = match Btf::running() {
        Ok(_) => (Some(Btf::VMLINUX.to_string()), None),
        Err(e) => (None, Some(Advised(e).to_string())),
    };
    let online = cpulist::read(Path::new(cpulist::ONLINE)).unwrap_or_default();
    let free: Vec<CpuSlots> = if breakpoint_pmu {
        cpu_slots(&online)
    } else {
        Vec::new()
    };
    let possible = cpulist::read(Path::new(cpulist::POSSIBLE)).unwrap_or_default();
    let hotplug_writable = hotplug_writable(&possible);
    let uevents = crate::trace::hotplug::uevents_work();
    let bpf_error = crate::perf::bpf::probe()
        .err()
        .map(|e| super::advice::no_bpf(&e).to_string());
    let (percpu_bases, percpu_error) = percpu_bases(&online, bpf_error.as_deref());
    let unarmable: Vec<&CpuSlots> = free.iter().filter(|s| s.refused.is_some()).collect();
    let (kernel_at, kernel_addr) = kernel_probe_address(text);
    let kernel_probe = probe(kernel_addr, &free, breakpoint_pmu);
    let user_probe = probe(
        crate::perf::probe::probe_user_address(),
        &free,
        breakpoint_pmu,
    );
    let verdict = verdict(
        breakpoint_pmu,
        &privilege,
        &free,
        &unarmable,
        (&kernel_probe, &user_probe),
    );
    let (code, reason, user_space_only) = match verdict {
        Some((code, why, partial)) => (Some(code), Some(why), partial),
        None => (None, None, false),
    };
    Report {
        can_watch: reason.is_none(),
        reason,
        user_space_only,
        code,
        unarmable_cpus: unarmable.iter().map(|s| s.cpu).collect(),
        kernel,
        breakpoint_pmu,
        uid: privilege.euid,
        cap_perfmon: privilege.cap_perfmon,
        cap_sys_admin: privilege.cap_sys_admin,
        perf_event_paranoid: privilege.paranoid,
        kptr_restrict: read_i32("/proc/sys/kernel/kptr_restrict"),
        kallsyms_symbols,
        kallsyms_addresses_visible: visible,
        kallsyms_data_symbols: data,
        symbol_source: source.to_string(),
        symbol_source_kind: source.kind().to_string(),
        symbol_source_matches: matches,
        debuginfod_urls,
        debuginfod_cache: search
            .debuginfod_cache
            .as_ref()
            .map(|p| p.display().to_string()),
        debuginfod_cached,
        btf,
        btf_error,
        online_cpus: cpulist::format(&online),
        debug_registers: free,
        kernel_breakpoints: kernel_probe.opened(),
        kernel_breakpoints_kind: kernel_probe.kind(),
        kernel_breakpoints_error: kernel_probe.error(),
        kernel_probe: kernel_probe.row(&kernel_at),
        user_breakpoints: user_probe.opened(),
        user_breakpoints_kind: user_probe.kind(),
        user_breakpoints_error: user_probe.error(),
        user_probe: user_probe.row("an address in ksymwatch's own memory"),
        hotplug_writable,
        uevents,
        bpf: bpf_error.is_none(),
        bpf_error,
        percpu_bases,
        percpu_error,
    }
}

/// `cpu 0`, `cpus 0-1`: the kernel's list form after the word in the right number; empty for no CPU.
fn cpus_phrase(cpus: impl IntoIterator<Item = u32>) -> String {
    let set: BTreeSet<u32> = cpus.into_iter().collect();
    match set.len() {
        0 => String::new(),
        1 => format!("cpu {}", cpulist::format(&set)),
        _ => format!("cpus {}", cpulist::format(&set)),
    }
}

/// Why a default watch (every online CPU, one register each) cannot be armed: which CPUs refuse, and which
/// could still be watched with `--cpus`.
fn registers_verdict(all: &[CpuSlots], unarmable: &[&CpuSlots]) -> String {
    let full = cpus_phrase(
        unarmable
            .iter()
            .filter(|s| s.free == Some(0))
            .map(|s| s.cpu),
    );
    let refused = cpus_phrase(unarmable.iter().filter(|s| s.free.is_none()).map(|s| s.cpu));
    let armable: BTreeSet<u32> = all
        .iter()
        .filter(|s| s.free.is_some_and(|n| n > 0))
        .map(|s| s.cpu)
        .collect();
    let mut parts = Vec::new();
    if !full.is_empty() {
        parts.push(format!(
            "no free debug register on {full} (all in use by perf, a debugger, another ksymwatch, or a \
             task-bound watchpoint)"
        ));
    }
    if !refused.is_empty() {
        parts.push(format!("the register probe was refused on {refused}"));
    }
    if armable.is_empty() {
        parts.push("a watch cannot be armed on any online CPU".to_string());
    } else {
        parts.push(format!(
            "a watch on every online CPU cannot be armed, one with `--cpus {}` can",
            cpulist::format(&armable)
        ));
    }
    parts.join("; ")
}

/// Where a member path without a vmlinux can get one: the servers, the cache, and what it holds.
fn debuginfod_row(r: &Report) -> String {
    let cache = match (&r.debuginfod_cache, r.debuginfod_cached) {
        (Some(c), true) => format!("cache {c} holds the running kernel's vmlinux"),
        (Some(c), false) => format!("cache {c}"),
        (None, _) => "no cache directory (set DEBUGINFOD_CACHE_PATH)".into(),
    };
    if r.debuginfod_urls.is_empty() {
        format!("DEBUGINFOD_URLS not set: member paths need --vmlinux; {cache}")
    } else {
        format!("{}; {cache}", r.debuginfod_urls.join(" "))
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The `kallsyms` row: how many symbols, and whether variables can be named from them.
fn kallsyms_row(r: &Report) -> String {
    if !r.kallsyms_addresses_visible {
        "unreadable or addresses hidden".into()
    } else if r.kallsyms_data_symbols {
        format!("{} symbols, with data symbols", r.kallsyms_symbols)
    } else {
        format!(
            "{} symbols, no data symbols (CONFIG_KALLSYMS_ALL off): variables need --vmlinux or --system-map",
            r.kallsyms_symbols
        )
    }
}

/// The `btf` row: the kernel's BTF, or why typed targets need `--btf`.
fn btf_row(r: &Report) -> String {
    match (&r.btf, &r.btf_error) {
        (Some(p), _) => format!("{p} (typed targets: '(struct TYPE)0xADDR.FIELD')"),
        (None, e) => format!(
            "unavailable: {}; typed targets need --btf FILE",
            e.as_deref().unwrap_or("?")
        ),
    }
}

/// The `debug registers` row: each online CPU's free registers, or why its probe failed.
fn registers_row(r: &Report) -> String {
    r.debug_registers
        .iter()
        .map(|s| match (s.free, &s.error) {
            (Some(0), _) => format!("cpu{} 0 free (cannot arm)", s.cpu),
            (Some(n), _) => format!("cpu{} {n} free", s.cpu),
            (None, e) => {
                format!("cpu{} probe failed: {}", s.cpu, e.as_deref().unwrap_or("?"))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `per-CPU bases` row: each CPU's base, or why per-CPU variables cannot be watched.
fn percpu_row(r: &Report) -> String {
    match &r.percpu_error {
        None => format!(
            "{}: per-CPU variables are watched at each CPU's copy",
            r.percpu_bases
                .iter()
                .map(|b| format!("cpu{} {}", b.cpu, b.base))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(e) => format!("unknown: {e}; per-CPU variables cannot be watched (exit 4)"),
    }
}

pub fn render(r: &Report) -> String {
    let mut s = String::new();
    match &r.reason {
        None => s.push_str("ksymwatch check: a watch can work here\n"),
        Some(why) if r.user_space_only => s.push_str(&format!(
            "ksymwatch check: user-space watches only: {why}\n"
        )),
        Some(why) => s.push_str(&format!(
            "ksymwatch check: a watch cannot work here: {why}\n"
        )),
    }
    let opt = |v: Option<i32>| v.map_or("unreadable".to_string(), |v| v.to_string());
    let rows: Vec<(&str, String)> = vec![
        ("kernel", r.kernel.clone()),
        ("breakpoint PMU", yes(r.breakpoint_pmu).into()),
        (
            "privileges",
            format!(
                "uid {}, CAP_PERFMON {}, CAP_SYS_ADMIN {}, perf_event_paranoid {}",
                r.uid,
                yes(r.cap_perfmon),
                yes(r.cap_sys_admin),
                opt(r.perf_event_paranoid)
            ),
        ),
        ("kptr_restrict", opt(r.kptr_restrict)),
        ("kallsyms", kallsyms_row(r)),
        (
            "symbol source",
            format!("{} ({})", r.symbol_source, r.symbol_source_matches),
        ),
        ("debuginfod", debuginfod_row(r)),
        ("btf", btf_row(r)),
        ("debug registers", registers_row(r)),
        ("kernel addresses", r.kernel_probe.clone()),
        ("user addresses", r.user_probe.clone()),
        ("online cpus", r.online_cpus.clone()),
        (
            "cpu hotplug",
            if r.hotplug_writable.is_empty() {
                "not writable".into()
            } else {
                format!(
                    "writable for cpu {}",
                    cpulist::format(&r.hotplug_writable.iter().copied().collect())
                )
            },
        ),
        (
            "hotplug uevents",
            if r.uevents {
                "listening works".into()
            } else {
                "cannot listen".into()
            },
        ),
        (
            "bpf (--value)",
            match &r.bpf_error {
                None => "a perf-event program loads: --value and --if work".into(),
                Some(e) => format!("unusable: {e}"),
            },
        ),
        ("per-CPU bases", percpu_row(r)),
    ];
    for (k, v) in rows {
        s.push_str(&format!("  {k:<16} {v}\n"));
    }
    s
}

pub fn run(json: bool) -> Result<()> {
    let report = gather();
    let text = if json {
        serde_json::to_string(&report).or_exit(ExitCode::Runtime, "json")? + "\n"
    } else {
        render(&report)
    };
    super::print_answer(&text)?;
    match (report.code, report.reason) {
        (Some(code), Some(why)) => Err(Error::new(code, why)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(cpu: u32, free: Option<u32>) -> CpuSlots {
        CpuSlots {
            cpu,
            free,
            error: free
                .is_none()
                .then(|| "Operation not supported".to_string()),
            refused: match free {
                Some(0) => Some(ExitCode::Arm),
                Some(_) => None,
                None => Some(ExitCode::NotPermitted),
            },
        }
    }

    fn verdict(all: &[CpuSlots]) -> String {
        let unarmable: Vec<&CpuSlots> = all.iter().filter(|s| s.refused.is_some()).collect();
        registers_verdict(all, &unarmable)
    }

    /// Where only kernel addresses are refused the verdict is partial, with the kernel's refusal and its
    /// exit code (4, as `write` of a kernel variable); a refused user address is no watch at all.
    #[test]
    fn kernel_addresses_refused_is_user_space_only() {
        use crate::perf::event::{OpenError, Stage};
        let root = Privilege::ROOT;
        let creds = root;
        let refused = |addr: u64| {
            let e = OpenError {
                cpu: 0,
                tid: None,
                stage: Stage::Open,
                err: std::io::Error::from_raw_os_error(libc::EPERM),
                bp: Some((addr, 8)),
            };
            let facts = refusal::Facts {
                creds,
                free_registers: None,
            };
            Probed::Refused(refusal::explain_as(&e, &[], facts))
        };
        let all = [slots(0, Some(4)), slots(1, Some(4))];
        let kernel = refused(KERNEL_TEXT);
        let user_ok = Probed::Opened { cpu: 0 };
        let (code, why, partial) =
            super::verdict(true, &root, &all, &[], (&kernel, &user_ok)).expect("a verdict");
        assert_eq!((code, partial), (ExitCode::NotPermitted, true));
        assert!(
            why.starts_with("cpu 0: this kernel refuses hardware breakpoints on kernel addresses"),
            "{why}"
        );
        assert_eq!(kernel.kind(), Some("kernel_breakpoints_refused"));
        assert_eq!(kernel.opened(), Some(false));
        assert!(kernel
            .row("_text 0xffffffff81000000")
            .starts_with("refused: cpu 0: this kernel"));
        assert_eq!(
            user_ok.row("here"),
            "yes (a disabled breakpoint at here opened on cpu 0)"
        );
        let user_refused = refused(0x5600_0000_1000);
        let (_, _, partial) =
            super::verdict(true, &root, &all, &[], (&kernel, &user_refused)).expect("a verdict");
        assert!(!partial, "no user-space watch either: nothing works");
        assert!(super::verdict(true, &root, &all, &[], (&user_ok, &user_ok)).is_none());
        let unprobed = Probed::Unasked("no breakpoint PMU".into());
        assert_eq!(unprobed.opened(), None);
        assert_eq!(
            unprobed.error().as_deref(),
            Some("not probed: no breakpoint PMU")
        );
        let (_, tail) = kernel_probe_address(None);
        assert_eq!(tail, KERNEL_TEXT);
        assert_eq!(
            kernel_probe_address(Some(0xffff_ffff_8100_0000)).0,
            "_text 0xffffffff81000000"
        );
    }

    #[test]
    fn names_the_full_cpus_and_the_ones_still_armable() {
        assert_eq!(
            verdict(&[slots(0, Some(0)), slots(1, Some(4)), slots(2, Some(1))]),
            "no free debug register on cpu 0 (all in use by perf, a debugger, another ksymwatch, or a \
             task-bound watchpoint); a watch on every online CPU cannot be armed, one with `--cpus 1-2` can"
        );
        assert_eq!(
            verdict(&[slots(0, Some(0)), slots(1, Some(0))]),
            "no free debug register on cpus 0-1 (all in use by perf, a debugger, another ksymwatch, or a \
             task-bound watchpoint); a watch cannot be armed on any online CPU"
        );
        assert_eq!(
            verdict(&[slots(0, Some(2)), slots(1, None)]),
            "the register probe was refused on cpu 1; a watch on every online CPU cannot be armed, one \
             with `--cpus 0` can"
        );
    }
}
