//! When a command fetches the running kernel's vmlinux from debuginfod: a target names a struct member or
//! array element (or `--lines` asks for file:line), the symbols come from a file without DWARF (kallsyms
//! or a System.map), `DEBUGINFOD_URLS` names a server, and `--offline` is not given. The fetch itself is
//! the symbols crate's ([`ksymwatch_symbols::debuginfod`]); this module decides, tells the user on one
//! stderr line what was fetched or taken from the cache, and words failures with this program's flags.

use ksymwatch_symbols::{buildid, Debuginfod, Fetched, PathElem, Source, SourceSearch};

use crate::config::advice::Advised;
use crate::config::target::{Base, Target};
use crate::error::{Error, Result};

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

/// The source to use: `picked` itself unless DWARF is needed and `picked` has none, in which case the
/// running kernel's vmlinux from debuginfod (cache first). Then `search.vmlinux` names the fetched file,
/// as if the user had passed it. Failures are bad input (exit 2), with the flags that get past them.
pub fn fetch_if_needed(
    search: &mut SourceSearch,
    picked: Source,
    needs_dwarf: bool,
    offline: bool,
) -> Result<Source> {
    if !needs_dwarf || matches!(picked, Source::Vmlinux(_)) {
        return Ok(picked);
    }
    let why = "struct fields and --lines need DWARF";
    let Some(client) = Debuginfod::from_env() else {
        let urls = std::env::var(ksymwatch_symbols::debuginfod::URLS_ENV).unwrap_or_default();
        if !ksymwatch_symbols::debuginfod::parse_urls(&urls).is_empty() {
            return Err(Error::usage(format!(
                "{why}, which {picked} does not have, and DEBUGINFOD_URLS is set but there is no debuginfod \
                 cache to fetch into (DEBUGINFOD_CACHE_PATH, XDG_CACHE_HOME and HOME are unset); set \
                 DEBUGINFOD_CACHE_PATH, or pass --vmlinux FILE"
            )));
        }
        // Without a server, the caller's "needs DWARF" error says what to do (it names DEBUGINFOD_URLS).
        return Ok(picked);
    };
    let id = match buildid::running(&search.notes) {
        Ok(Some(id)) => id,
        Ok(None) => {
            return Err(Error::usage(format!(
                "{why}, which {picked} does not have, and debuginfod cannot be asked for the running kernel's \
                 vmlinux: {} holds no build-id; pass --vmlinux FILE",
                search.notes.display()
            )))
        }
        Err(e) => {
            return Err(Error::usage(format!(
                "{why}, which {picked} does not have, and debuginfod cannot be asked for the running kernel's \
                 vmlinux without its build-id: {}; pass --vmlinux FILE",
                Advised(e)
            )))
        }
    };
    let fetched = if offline {
        // The cache is a local file: --offline only forbids the network.
        match Debuginfod::cached(client.cache_dir(), &id) {
            Some(p) => Fetched::Cached(p),
            None => {
                return Err(Error::usage(format!(
                    "{why}, which {picked} does not have, and --offline forbids fetching the running kernel's \
                     vmlinux (build-id {id}) from DEBUGINFOD_URLS; pass --vmlinux FILE, or drop --offline"
                )))
            }
        }
    } else {
        client
            .with_progress(true)
            .fetch(&id)
            .map_err(|e| Error::usage(format!("{e}; or pass --vmlinux FILE, or --offline")))?
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
    Ok(Source::Vmlinux(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::target::parse;

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
}
