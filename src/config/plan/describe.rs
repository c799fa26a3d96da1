//! `--dry-run`: a plan as the `#` lines the header would print, and what would be armed.

use std::fmt::Write as _;

use crate::cpulist;
use crate::report::escape::escaped;

use super::{Binding, Hits, Scope, Values, WatchPlan, Writers};

pub fn describe(plan: &WatchPlan) -> String {
    let mut s = String::new();
    match &plan.objects {
        Some(o) => {
            let _ = writeln!(s, "{}", o.describe());
        }
        None => {
            for w in &plan.watches {
                let _ = writeln!(s, "{}", crate::report::ftrace::target_line(w));
            }
        }
    }
    let _ = writeln!(s, "# symbols: {}", plan.kernel.source_text());
    let _ = writeln!(s, "# cpus: {}", cpulist::format(&plan.cpus.now));
    let who = match &plan.scope {
        Scope::System => "every task (system-wide)".to_string(),
        Scope::Processes(pids) => format!(
            "process{} {}",
            if pids.len() == 1 { "" } else { "es" },
            pids.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Scope::Launched(c) => format!(
            "the command `{}` (started, then killed unrun)",
            c.argv.join(std::ffi::OsStr::new(" ")).to_string_lossy()
        ),
    };
    let _ = writeln!(s, "# covers: {who}");
    // `--cgroup`: each chosen cgroup as it was found, so a path that resolved elsewhere than meant shows.
    for c in &plan.filter.cgroups {
        let dir = c.dir.to_string_lossy();
        let _ = writeln!(
            s,
            "# cgroup: {} (id {}, {}): writers in it or below only",
            escaped(&c.path),
            c.id,
            escaped(&dir)
        );
    }
    let path = match (plan.delivery.events, plan.delivery.hits) {
        (Binding::Cpus, Hits::Program) => {
            "one breakpoint per CPU and target, hits chosen and emitted by a BPF program"
        }
        (Binding::Cpus, Hits::Samples) => "one breakpoint per CPU and target, hits as perf samples",
        (Binding::Scope { .. }, Hits::Program) => {
            "one breakpoint per thread, CPU and target, hits emitted by a BPF program"
        }
        (Binding::Scope { .. }, Hits::Samples) => {
            "one breakpoint per thread, CPU and target, hits as perf samples"
        }
    };
    let _ = writeln!(s, "# path: {path}");
    if plan.writers == Writers::UserSpaceOnly {
        let _ = writeln!(s, "# user-space writers only (not privileged)");
    }
    match &plan.values {
        Values::If(c) => {
            let _ = writeln!(s, "# if: {c}");
        }
        Values::Read => {
            let _ = writeln!(s, "# value: read at each hit");
        }
        Values::Unread => {}
    }
    if let Some(f) = &plan.flight {
        let on: Vec<String> = f.triggers.iter().map(|t| t.to_string()).collect();
        let _ = writeln!(
            s,
            "# last: {} hits kept, printed on --dump-on {}",
            f.last,
            on.join(", ")
        );
    }
    let _ = writeln!(s, "# dry run: nothing armed");
    s
}
