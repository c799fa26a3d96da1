//! Where a command's kernel symbols come from: the files it names, searched in the symbols crate's order
//! ([`SourceSearch::pick`]: `--vmlinux`, `--system-map`, the distribution's files for the running kernel,
//! the debuginfod cache, then kallsyms) with this program's policy on top (an explicit `--kallsyms FILE`
//! skips the distribution's and the cache's files: the user named the file to use); the running kernel's
//! kallsyms read through the symbol cache kept between runs; and debuginfod.
//!
//! The running kernel's vmlinux replaces the picked source when a target names a struct member or array
//! element (or `--lines` asks for file:line) and the pick has no DWARF, or when a plain symbol is missing
//! from a kallsyms without data symbols (`ksymwatch write jiffies` on a kernel without
//! CONFIG_KALLSYMS_ALL), `DEBUGINFOD_URLS` naming a server. That choice and the fetch are the symbols
//! crate's ([`ksymwatch_symbols::kernel`]); this module says which targets need DWARF and which names a
//! kallsyms must have, builds the client with this program's options (`--offline`,
//! `--debuginfod-max-size`, `--debuginfod-timeout`, progress on stderr), and tells on stderr what was
//! fetched or taken from the cache. Failures are worded with this program's flags in
//! `crate::config::advice`.
//!
//! [`load`] is the one place a watch's [`KernelRequest`] is made and loaded (the real machine's answer to
//! the plan's [`KernelQuery`]); [`request`] is what `resolve` starts from.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ksymwatch_symbols::kernel::{self, Delivered, Fetcher, KernelRequest, Loaded};
use ksymwatch_symbols::{cache, PathElem, Source, SourceSearch, SymbolCache};

use crate::config::advice::SymbolsContext;
use crate::config::progress::Bars;
use crate::config::request::{DebuginfodRequest, Files, SymbolRequest};
use crate::error::Result;
use crate::model::target::{Base, Target};

pub const DEFAULT_KALLSYMS: &str = "/proc/kallsyms";
pub const DEFAULT_NOTES: &str = "/sys/kernel/notes";
/// Overrides where the parsed kallsyms is cached (tests and benchmarks point it at a directory of their own).
pub const CACHE_DIR_ENV: &str = "KSYMWATCH_CACHE_DIR";

/// What a watch asks of the kernel's symbols, in one go ([`load`]; the plan asks it of its host,
/// [`crate::config::plan::Host::kernel_symbols`]).
pub struct KernelQuery<'a> {
    pub symbols: &'a SymbolRequest,
    /// A struct member, an array element or `--lines` needs DWARF: where the pick has none, the running
    /// kernel's vmlinux from debuginfod instead, where one can be had.
    pub dwarf: bool,
    /// A system-wide watch's data symbols: a kallsyms that lacks one (no CONFIG_KALLSYMS_ALL) is replaced
    /// by the running kernel's vmlinux from debuginfod, where one can be had.
    pub data_symbols: Option<&'a [Target]>,
    /// The running kernel's kallsyms is to be read on its first use, not now (a process watch).
    pub kallsyms_later: bool,
    /// Kernel addresses this user may not see leave an empty kallsyms (no kernel frame is recorded).
    pub user_only: bool,
}

/// The kernel's symbols as [`load`] found them.
pub struct KernelLoad {
    /// The source the search picked.
    pub picked: Source,
    /// That source loaded; a source that cannot be loaded is the error, for the plan to raise in its turn.
    pub loaded: Result<Loaded>,
    /// What debuginfod delivered on the way (a vmlinux fetched, or found in its cache), for the plan to
    /// tell.
    pub delivered: Option<Delivered>,
}

/// The kernel's symbols `query` asks for, chosen and loaded by the symbols crate in one go
/// ([`kernel::load`]): the source the search picks, and that source loaded, the running kernel's kallsyms
/// read at most once (through the symbol cache where the request allows it), unless it is left to first
/// use. A vmlinux that DWARF needs and that cannot be had fails the call; a source that cannot be loaded
/// is [`KernelLoad::loaded`]'s error.
pub fn load(query: &KernelQuery<'_>) -> Result<KernelLoad> {
    let symbols = query.symbols;
    let asked = request(symbols, query.dwarf, query.data_symbols.unwrap_or_default());
    let request = KernelRequest {
        cache: cache(&asked.search, symbols.symbol_cache),
        later: query.kallsyms_later,
        hidden_ok: query.user_only,
        force: symbols.force,
        lines: symbols.lines,
        ..asked
    };
    let found = kernel::load(request).bad_symbols()?;
    Ok(KernelLoad {
        picked: found.picked,
        loaded: found.loaded.bad_symbols(),
        delivered: found.delivered,
    })
}

/// What the command line's `symbols` ask of the kernel's symbols for `targets`: the files named, DWARF
/// when `dwarf`, the targets' symbols as data symbols a kallsyms must have (else the running kernel's
/// vmlinux from debuginfod, if `DEBUGINFOD_URLS` is set), fetched with the command's debuginfod options.
/// Nothing more: kallsyms read now, as named (no symbol cache), no hidden address allowed, no `--force`,
/// no line tables; a watch adds its own ([`load`]).
pub fn request(symbols: &SymbolRequest, dwarf: bool, targets: &[Target]) -> KernelRequest {
    KernelRequest {
        search: search(symbols.files()),
        dwarf,
        data_symbols: data_symbols(targets),
        later: false,
        hidden_ok: false,
        cache: None,
        fetcher: fetcher(symbols.debuginfod),
        force: false,
        lines: false,
    }
}

/// The search for this machine with the command line's choices applied.
fn search(files: Files<'_>) -> SourceSearch {
    let mut s = SourceSearch::system();
    s.vmlinux = files.vmlinux.map(Path::to_path_buf);
    s.system_map = files.system_map.map(Path::to_path_buf);
    s.notes = files.notes.to_path_buf();
    if files.kallsyms != Path::new(DEFAULT_KALLSYMS) {
        // `--kallsyms FILE` names the symbols to use; a distribution or cached vmlinux must not override that choice.
        s.release = None;
        s.debuginfod_cache = None;
    }
    s.kallsyms = files.kallsyms.to_path_buf();
    s
}

/// The symbol cache the running kernel's kallsyms is read through when `enabled`: only when kallsyms and
/// notes are the real files (a made-up kernel must neither use nor overwrite the real one's cache), in
/// `$KSYMWATCH_CACHE_DIR` or the cache's default directory ([`ksymwatch_symbols::cache`]).
pub fn cache(search: &SourceSearch, enabled: bool) -> Option<SymbolCache> {
    let real =
        search.kallsyms == Path::new(DEFAULT_KALLSYMS) && search.notes == Path::new(DEFAULT_NOTES);
    (enabled && real).then(|| {
        let dir = std::env::var_os(CACHE_DIR_ENV)
            .filter(|d| !d.is_empty())
            .map_or_else(|| PathBuf::from(cache::DEFAULT_DIR), PathBuf::from);
        SymbolCache::new(dir)
    })
}

/// Suffixes compilers add to a symbol's name (`counter.lto.7`, `f.isra.0`, `__key.123`): a dotted target
/// ending in these names a symbol, not a member, and needs no DWARF.
const NAME_SUFFIXES: &[&str] = &[
    "lto",
    "isra",
    "constprop",
    "part",
    "cold",
    "llvm",
    "localalias",
];

/// Whether a kernel TARGET names a struct member or an array element, which only DWARF can place.
pub fn needs_dwarf(target: &Target) -> bool {
    // A `(TYPE)` cast takes its members from BTF.
    if !matches!(target.base, Base::Symbol { .. }) || target.cast.is_some() {
        return false;
    }
    target.path.iter().any(|e| match e {
        PathElem::Index(_) => true,
        PathElem::Field(f) => {
            !(f.bytes().all(|b| b.is_ascii_digit()) || NAME_SUFFIXES.contains(&f.as_str()))
        }
    })
}

/// Each symbol among kernel `targets` as the names it may be (longest first): what a kallsyms without data
/// symbols is checked for ([`ksymwatch_symbols::kernel::missing_data_symbol`]). Addresses and module
/// symbols (`MOD:SYM`) are left out: a vmlinux does not have the latter either.
fn data_symbols(targets: &[Target]) -> Vec<Vec<String>> {
    targets
        .iter()
        .filter(|t| matches!(t.base, Base::Symbol { .. }) && t.kernel_module().is_none())
        .map(|t| t.symbol_splits().into_iter().map(|(n, _)| n).collect())
        .collect()
}

/// How this command may fetch the running kernel's vmlinux: the client `DEBUGINFOD_URLS` names, with
/// progress bars on stderr, the command's limits, and its temporary file removed on a stop signal.
fn fetcher(opts: DebuginfodRequest) -> Fetcher {
    match Fetcher::from_env() {
        // Offline, only the cache is read: nothing to show progress of or to limit.
        Fetcher::Client { client, .. } if opts.offline => Fetcher::Client {
            client,
            offline: true,
        },
        Fetcher::Client { client, .. } => {
            let mut client = client
                .with_progress(Arc::new(Bars::stderr()))
                .with_interrupt_cleanup(true);
            if let Some(n) = opts.max_size {
                client = client.with_max_size(n);
            }
            if let Some(d) = opts.deadline {
                client = client.with_deadline(d);
            }
            Fetcher::Client {
                client,
                offline: false,
            }
        }
        other => other,
    }
}

/// Tells on stderr what debuginfod delivered (fetched, or found in its cache).
pub fn tell(delivered: &Delivered) {
    crate::stderr::line(format_args!("ksymwatch: debuginfod: {delivered}"));
}

/// A `--debuginfod-max-size` value: bytes, or a number with K, M, G or T (powers of 1024; `KiB`, `MB`
/// and the like read the same), not zero.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("`{text}` is not a size; use e.g. 3G, 500M or 1048576");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err(format!("`{text}`: the size must be greater than zero"));
    }
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::target::parse;

    #[test]
    fn members_and_elements_need_dwarf_compiler_suffixes_do_not() {
        for t in [
            "init_uts_ns.name",
            "x[3]",
            "a.b.c",
            "counter.lto.7.x",
            "s.f[1]",
        ] {
            assert!(needs_dwarf(&parse(t).unwrap()), "{t}");
        }
        for t in [
            "banner",
            "counter.lto.7",
            "f.isra.0",
            "__key.123",
            "0xffff0000",
            "jiffies+8",
        ] {
            assert!(!needs_dwarf(&parse(t).unwrap()), "{t}");
        }
    }

    #[test]
    fn sizes_are_bytes_or_powers_of_1024() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("500m"), Ok(500 << 20));
        assert_eq!(parse_size("3GiB"), Ok(3 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("64 KB"), Ok(64 << 10));
        for bad in ["", "G", "1.5G", "-1", "12X", "0", "0G", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
