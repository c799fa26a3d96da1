//! When a command fetches the running kernel's vmlinux from debuginfod: a target names a struct member or
//! array element (or `--lines` asks for file:line), or a plain symbol that kallsyms lacks because it has
//! no data symbols (`ksymwatch write jiffies` on a kernel without CONFIG_KALLSYMS_ALL), the symbols come
//! from a file without DWARF (kallsyms or a System.map), `DEBUGINFOD_URLS` names a server, and `--offline`
//! is not given. The fetch itself is the symbols crate's ([`ksymwatch_symbols::debuginfod`]); this module
//! decides, tells the user on stderr what was fetched or taken from the cache, and words failures with
//! this program's flags.

use std::sync::Arc;
use std::time::Duration;

use ksymwatch_symbols::{Debuginfod, Fetched, PathElem, Source, SourceSearch, SymbolTable};

use crate::config::advice::Advised;
use crate::config::progress::Bars;
use crate::error::{Error, Result};
use crate::model::target::{Base, Target};

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

/// The debuginfod options of a command (`--offline`, `--debuginfod-max-size`, `--debuginfod-timeout`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub offline: bool,
    pub max_size: Option<u64>,
    pub deadline: Option<Duration>,
}

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

/// The first symbol among `targets` that `table` cannot have because it holds no data symbols (a kallsyms
/// without CONFIG_KALLSYMS_ALL): a name none of whose splits is in the table. Module symbols (`MOD:SYM`)
/// are left out: a vmlinux does not have them either.
pub fn missing_data_symbol(table: &SymbolTable, targets: &[Target]) -> Option<String> {
    if table.has_data_symbols() {
        return None;
    }
    targets.iter().find_map(|t| {
        if !matches!(t.base, Base::Symbol { .. }) || t.kernel_module().is_some() {
            return None;
        }
        let splits = t.symbol_splits();
        if splits
            .iter()
            .any(|(n, _)| table.by_name(n).next().is_some())
        {
            return None;
        }
        splits.last().map(|(n, _)| n.clone())
    })
}

/// The source to use: `picked` itself unless DWARF is needed and `picked` has none, in which case the
/// running kernel's vmlinux from debuginfod (cache first). Then `search.vmlinux` names the fetched file,
/// as if the user had passed it. Failures are bad input (exit 2), with the flags that get past them.
pub fn fetch_if_needed(
    search: &mut SourceSearch,
    picked: Source,
    needs_dwarf: bool,
    opts: Options,
) -> Result<Source> {
    if !needs_dwarf || matches!(picked, Source::Vmlinux(_)) {
        return Ok(picked);
    }
    let why = format!("struct fields and --lines need DWARF, which {picked} does not have");
    // Without a server, the caller's "needs DWARF" error says what to do (it names DEBUGINFOD_URLS).
    Ok(fetch_running(search, &why, opts)?.unwrap_or(picked))
}

/// For a symbol `name` that `picked` (kallsyms without data symbols) lacks: the running kernel's vmlinux
/// from debuginfod when `DEBUGINFOD_URLS` is set, else `picked` (whose "not found" error names the ways
/// out, DEBUGINFOD_URLS among them).
pub fn fetch_for_symbol(
    search: &mut SourceSearch,
    picked: Source,
    name: &str,
    opts: Options,
) -> Result<Source> {
    if matches!(picked, Source::Vmlinux(_)) {
        return Ok(picked);
    }
    let why = format!(
        "symbol `{name}` is not in {picked}, which has no data symbols (CONFIG_KALLSYMS_ALL is off)"
    );
    Ok(fetch_running(search, &why, opts)?.unwrap_or(picked))
}

/// The running kernel's vmlinux from the debuginfod cache or servers, `why` being the reason it is
/// needed (for the errors); `None` when `DEBUGINFOD_URLS` names no server.
fn fetch_running(search: &mut SourceSearch, why: &str, opts: Options) -> Result<Option<Source>> {
    let Some(client) = Debuginfod::from_env() else {
        let urls = std::env::var(ksymwatch_symbols::debuginfod::URLS_ENV).unwrap_or_default();
        if !ksymwatch_symbols::debuginfod::parse_urls(&urls).is_empty() {
            return Err(Error::usage(format!(
                "{why}, and DEBUGINFOD_URLS is set but there is no debuginfod cache to fetch into \
                 (DEBUGINFOD_CACHE_PATH, XDG_CACHE_HOME and HOME are unset); set DEBUGINFOD_CACHE_PATH, \
                 or pass --vmlinux FILE"
            )));
        }
        return Ok(None);
    };
    let id = match search.running_build_id() {
        Ok(Some(id)) => id.clone(),
        Ok(None) => {
            return Err(Error::usage(format!(
            "{why}, and debuginfod cannot be asked for the running kernel's vmlinux: {} holds no \
                 build-id; pass --vmlinux FILE",
            search.notes.display()
        )))
        }
        Err(e) => {
            return Err(Error::usage(format!(
            "{why}, and debuginfod cannot be asked for the running kernel's vmlinux without its \
                 build-id: {}; pass --vmlinux FILE",
            Advised(e)
        )))
        }
    };
    let fetched = if opts.offline {
        // The cache is a local file: --offline only forbids the network.
        match Debuginfod::cached(client.cache_dir(), &id) {
            Some(p) => Fetched::Cached(p),
            None => {
                return Err(Error::usage(format!(
                    "{why}, and --offline forbids fetching the running kernel's vmlinux (build-id {id}) \
                     from DEBUGINFOD_URLS; pass --vmlinux FILE, or drop --offline"
                )))
            }
        }
    } else {
        let mut client = client
            .with_progress(Arc::new(Bars::stderr()))
            .with_interrupt_cleanup(true);
        if let Some(n) = opts.max_size {
            client = client.with_max_size(n);
        }
        if let Some(d) = opts.deadline {
            client = client.with_deadline(d);
        }
        client.fetch(&id).map_err(|e| {
            Error::usage(format!(
                "{why}: {}; or pass --vmlinux FILE, or --offline",
                Advised(e)
            ))
        })?
    };
    match &fetched {
        Fetched::Cached(p) => crate::stderr::line(format_args!(
            "ksymwatch: debuginfod: the running kernel's vmlinux (build-id {id}) from the cache: {}",
            p.display()
        )),
        Fetched::Downloaded { path, bytes, from } => crate::stderr::line(format_args!(
            "ksymwatch: debuginfod: fetched the running kernel's vmlinux (build-id {id}, {bytes} bytes) from {from} \
             into {}",
            path.display()
        )),
    }
    let path = fetched.path().to_path_buf();
    search.vmlinux = Some(path.clone());
    Ok(Some(Source::Vmlinux(path)))
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
