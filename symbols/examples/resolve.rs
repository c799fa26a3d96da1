//! Resolves one target in a vmlinux (or System.map) the way `ksymwatch resolve` will, for the benchmark
//! and for trying the library by hand:
//!
//! `cargo run -p ksymwatch-symbols --release --example resolve -- VMLINUX init_uts_ns.name.nodename [--json]`
//!
//! The target grammar here is the minimal one (`name[@N](.field|[N])*`); the CLI has its own, and draws
//! progress with bars where this shows a plain percentage.

use ksymwatch_symbols::{PathElem, Progress, ResolveOptions, Resolver, Source, SourceSearch, Task};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

/// A slow DWARF scan's progress as a percentage on stderr, redrawn in place (a terminal only).
#[derive(Default)]
struct Percent {
    total: AtomicU64,
}

impl Progress for Percent {
    fn start(&self, _task: Task<'_>, total: Option<u64>) {
        self.total.store(total.unwrap_or(0), Ordering::Relaxed);
    }

    fn advance(&self, done: u64) {
        let total = self.total.load(Ordering::Relaxed);
        if total > 0 && std::io::stderr().is_terminal() {
            let _ = write!(
                std::io::stderr(),
                "\rscanning DWARF: {}%",
                done * 100 / total
            );
        }
    }

    fn finish(&self) {
        if std::io::stderr().is_terminal() {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}

fn parse_target(t: &str) -> Option<(String, Option<usize>, Vec<PathElem>)> {
    let end = t.find(['.', '[']).unwrap_or(t.len());
    let (head, mut rest) = t.split_at(end);
    let (name, index) = match head.split_once('@') {
        Some((n, i)) => (n, Some(i.parse().ok()?)),
        None => (head, None),
    };
    let mut path = Vec::new();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            path.push(PathElem::Field(r[..end].to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let n = r[..end].strip_prefix("0x").map_or_else(
                || r[..end].parse().ok(),
                |h| u64::from_str_radix(h, 16).ok(),
            )?;
            path.push(PathElem::Index(n));
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some((name.to_string(), index, path))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [file, target] = pos[..] else {
        eprintln!("usage: resolve VMLINUX|System.map TARGET [--json]");
        return ExitCode::from(2);
    };
    let Some((name, index, path)) = parse_target(target) else {
        eprintln!("cannot parse target `{target}`");
        return ExitCode::from(2);
    };
    let search = SourceSearch::system();
    let source = if file.contains("System.map") {
        Source::SystemMap(file.into())
    } else {
        Source::Vmlinux(file.into())
    };
    let resolver = match Resolver::open_source(source, &search) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let percent = Percent::default();
    let opts = ResolveOptions {
        progress: &percent,
        ..ResolveOptions::default()
    };
    match resolver.resolve(&name, index, &path, opts) {
        Ok(r) if json => println!("{}", r.to_json()),
        Ok(r) => println!("{r}"),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
