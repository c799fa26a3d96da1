//! What the kernel's symbol file says about a TARGET, with the CLI's policy on top: dotted names are split
//! longest-symbol-first, `+OFF` is applied after the member path, and a file that is not provably the
//! running kernel gets a best-guess relocation only when the user insists (`--force`). Which file answers
//! is [`crate::config::kernel_source`]'s; here too, the tables a session names kernel frames with: a file's
//! beside the running kernel's kallsyms ([`FileSymbols`]), or that kallsyms read on first use
//! ([`LazyKallsyms`]).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ksymwatch_symbols::{
    kernel, Kaslr, KernelMatch, LookupError, NoProgress, Origin, ResolveError, ResolveOptions,
    Resolved, Resolver, Source, SourceSearch, SymbolTable, Symbolized, VmlinuxLines,
};

use crate::config::advice::{Advised, SymbolsContext};
use crate::config::kernel_source;
use crate::config::progress::Bars;
use crate::config::watch;
use crate::error::{Error, ExitCode, Result};
use crate::model::target::{Base, Target};
use crate::model::watch::Access;

/// The running kernel's kallsyms, read the first time a kernel frame is named: a watch of a process's
/// memory may never see one, and reading the table (tens of milliseconds, more without the cache) is then
/// off the way from start to the first hit. A table that cannot be read leaves kernel frames unnamed and
/// says why on stderr, once.
pub struct LazyKallsyms {
    kallsyms: PathBuf,
    notes: PathBuf,
    cache: bool,
    loaded: OnceLock<(SymbolTable, Origin)>,
}

impl LazyKallsyms {
    /// Reads `kallsyms` (the running kernel's, `notes` its build-id) when first asked; through the symbol
    /// cache when `cache`.
    pub fn new(kallsyms: &Path, notes: &Path, cache: bool) -> LazyKallsyms {
        LazyKallsyms {
            kallsyms: kallsyms.to_path_buf(),
            notes: notes.to_path_buf(),
            cache,
            loaded: OnceLock::new(),
        }
    }

    fn loaded(&self) -> &(SymbolTable, Origin) {
        self.loaded.get_or_init(|| {
            // A search of these two files alone: no distribution file or debuginfod cache is looked at.
            let mut search = SourceSearch::with_root("/", None);
            search.kallsyms = self.kallsyms.clone();
            search.notes = self.notes.clone();
            let cache = kernel_source::cache(&search, self.cache);
            kernel::running_kallsyms(&search, cache.as_ref()).unwrap_or_else(|e| {
                crate::stderr::line(format_args!(
                    "ksymwatch: warning: kernel frames stay unnamed: {}",
                    Advised(e)
                ));
                (SymbolTable::new(Vec::new(), false), Origin::Parsed)
            })
        })
    }
}

/// The kernel's symbol table a session names frames with: loaded, or read on first use.
#[derive(Clone, Copy)]
pub enum KernelTable<'a> {
    Loaded(&'a SymbolTable),
    Lazy(&'a LazyKallsyms),
}

impl<'a> From<&'a SymbolTable> for KernelTable<'a> {
    fn from(table: &'a SymbolTable) -> KernelTable<'a> {
        KernelTable::Loaded(table)
    }
}

impl<'a> KernelTable<'a> {
    /// The table, read now if it was not yet.
    pub fn table(self) -> &'a SymbolTable {
        match self {
            KernelTable::Loaded(t) => t,
            KernelTable::Lazy(l) => &l.loaded().0,
        }
    }

    /// The symbol covering `addr`.
    pub fn symbolize(self, addr: u64) -> Option<Symbolized<'a>> {
        self.table().symbolize(addr)
    }

    /// Where a table read on first use came from, once read (a loaded table's origin is its owner's to
    /// say).
    pub fn origin(self) -> Option<Origin> {
        match self {
            KernelTable::Loaded(_) => None,
            KernelTable::Lazy(l) => l.loaded.get().map(|(_, o)| *o),
        }
    }
}

/// Whether `name` is a symbol of this source, without building a vmlinux's whole table.
fn has_symbol(resolver: &Resolver, name: &str) -> Result<bool> {
    resolver
        .symbols_named(name)
        .map(|t| t.by_name(name).next().is_some())
        .bad_symbols()
}

/// The address of the first symbol called `name`, as the resolver's table gives it; `None` when there is
/// none or the source cannot be read. A vmlinux's whole table is not built for it.
fn first_addr(resolver: &Resolver, name: &str) -> Option<u64> {
    let t = resolver.symbols_named(name).ok()?;
    let addr = t.by_name(name).next()?.addr;
    Some(addr)
}

/// Resolves a symbol TARGET (name, `@N`, member path, `+OFF`) in `resolver`. `/LEN` is left to the caller.
pub fn resolve(resolver: &Resolver, target: &Target, progress: bool) -> Result<Resolved> {
    let r = resolve_any(resolver, target, progress)?;
    if r.symbol.module.is_none() {
        // Looked up lazily and by name: a vmlinux's whole table, built for this one marker, was most of
        // `resolve`'s time (issue #37), and only an address below the kernel half needs it.
        watch::check_kernel_address(
            &target.text,
            &r.symbol.name,
            r.link_addr.unwrap_or(r.symbol.addr),
            r.section.as_deref(),
            || first_addr(resolver, watch::PER_CPU_END),
        )?;
    }
    Ok(r)
}

fn resolve_any(resolver: &Resolver, target: &Target, progress: bool) -> Result<Resolved> {
    let Base::Symbol { index, .. } = &target.base else {
        return Err(Error::usage(format!(
            "`{}` is an address, not a symbol; there is nothing to look up",
            target.text
        )));
    };
    if let Some(module) = target.kernel_module() {
        return resolve_in_module(resolver, target, module, *index);
    }
    let splits = target.symbol_splits();
    let mut chosen = None;
    for (name, rest) in &splits {
        if has_symbol(resolver, name)? {
            chosen = Some((name, rest));
            break;
        }
    }
    // No split names a symbol: resolve the bare name so the error carries the source's suggestions.
    let Some((name, rest)) = chosen.or_else(|| splits.last().map(|(n, r)| (n, r))) else {
        return Err(Error::usage(format!("`{}` names no symbol", target.text)));
    };
    if !rest.is_empty() && resolver.vmlinux().is_none() {
        return Err(Error::usage(format!(
            "`{}`: struct fields and array elements need DWARF type information, which {} does not have; \
             pass --vmlinux FILE with debug info, set DEBUGINFOD_URLS to fetch it, or give the object's type and address: '(struct TYPE)0xADDR.FIELD'",
            target.text,
            resolver.source()
        )));
    }
    let bars;
    let opts = ResolveOptions {
        types: true,
        progress: if progress {
            bars = Bars::stderr();
            &bars
        } else {
            &NoProgress
        },
    };
    let r = resolver
        .resolve(name, *index, rest, opts)
        .map_err(|e| resolve_error(e, &target.text, resolver.source()))?;
    with_offset(r, target)
}

/// `MODULE:SYMBOL` (a kernel watch's `OBJECT:`): looked up among that module's kallsyms symbols, dotted
/// names split longest first as for any symbol. A module variable's fields need its types, which no
/// source here has: a `(TYPE)` cast gives them (`crate::config::typed`).
fn resolve_in_module(
    resolver: &Resolver,
    target: &Target,
    module: &str,
    index: Option<usize>,
) -> Result<Resolved> {
    let splits = target.symbol_splits();
    let mut last = None;
    for (name, rest) in &splits {
        match resolver.resolve_in_module(module, name, index) {
            Ok(_) if !rest.is_empty() => {
                return Err(Error::usage(format!(
                    "`{}`: fields and elements of a module's variable need its type information, which \
                     kallsyms does not have; name its type, '(struct TYPE){}', or give the member's address as 0xADDR",
                    target.text, target.text
                )))
            }
            Ok(r) => return with_offset(r, target),
            Err(e @ ResolveError::Lookup(LookupError::NotInModule { .. })) => last = Some(e),
            Err(e) => return Err(resolve_error(e, &target.text, resolver.source())),
        }
    }
    Err(match last {
        Some(e) => resolve_error(e, &target.text, resolver.source()),
        None => Error::usage(format!("`{}` names no symbol", target.text)),
    })
}

fn resolve_error(e: ResolveError, text: &str, source: &Source) -> Error {
    match e {
        // Lookup and load messages already name the symbol or the file; a member-path one needs the target.
        ResolveError::Field(e) => Error::usage(format!("`{text}`")).caused_by(Advised(e)),
        // "kallsyms has no data symbols" is kallsyms' problem; a small vmlinux or System.map that lacks the
        // name simply does not have it.
        ResolveError::Lookup(LookupError::NoDataSymbols { name, suggestions })
            if source.is_link_time() =>
        {
            let mut m = format!("unknown symbol `{name}` in {source}");
            if !suggestions.is_empty() {
                m.push_str(&format!("; did you mean {}?", suggestions.join(", ")));
            }
            Error::usage(m)
        }
        e => Error::from_cause(ExitCode::Usage, Advised(e)),
    }
}

/// Moves a resolved target by the TARGET's `+OFF`: the address and offset grow, the size left shrinks, and
/// the C type no longer describes what is there.
fn with_offset(mut r: Resolved, target: &Target) -> Result<Resolved> {
    let off = target.offset;
    if off == 0 {
        return Ok(r);
    }
    if let Some(size) = r.size {
        if off >= size {
            return Err(Error::usage(format!(
                "`{}`: offset 0x{off:x} is past the end of `{}` (size 0x{size:x}); name what is there, \
                 or give the address as 0xADDR",
                target.text, r.target
            )));
        }
    }
    let overflow = || Error::usage(format!("`{}`: address overflows", target.text));
    let add = |a: Option<u64>| match a {
        Some(a) => a.checked_add(off).map(Some),
        None => Some(None),
    };
    r.link_addr = add(r.link_addr).ok_or_else(overflow)?;
    r.runtime_addr = add(r.runtime_addr).ok_or_else(overflow)?;
    r.offset = r.offset.checked_add(off).ok_or_else(overflow)?;
    r.size = r.size.map(|s| s - off);
    r.type_name = None;
    r.target = format!("{}+0x{off:x}", r.target);
    Ok(r)
}

/// The relocation to guess with when the file is not provably this kernel: its `_text` against kallsyms'.
/// Only used under `--force` (or with no evidence either way), and always announced.
pub fn guess_kaslr(resolver: &Resolver, running: &SymbolTable) -> Option<Kaslr> {
    ksymwatch_symbols::kaslr::TEXT_MARKERS
        .iter()
        .find_map(|name| {
            let runtime_text = running
                .by_name(name)
                .find(|s| s.module.is_none() && s.addr != 0)?
                .addr;
            let t = resolver.symbols_named(name).ok()?;
            let link_text = t.link_addr(t.by_name(name).next()?);
            Some(Kaslr {
                link_text,
                runtime_text,
            })
        })
}

/// The `# symbols:` header text: which file answered and whether it is this kernel.
pub fn describe(source: &Source, km: &KernelMatch, forced: bool) -> String {
    let mut s = format!("{source} (kernel: {km}");
    if forced && km.is_mismatch() {
        s.push_str("; armed anyway: --force");
    }
    s.push(')');
    s
}

/// `write|rw` on a vmlinux or System.map: the resolver for targets, and the running kernel's kallsyms for
/// call chains (its text addresses are the ones the kernel reports, whatever the file says).
pub struct FileSymbols {
    resolver: Resolver,
    /// The running kernel's symbols, or why they could not be read.
    running: std::result::Result<SymbolTable, String>,
    kallsyms: PathBuf,
    forced: bool,
}

impl FileSymbols {
    /// A vmlinux or System.map as the symbols crate loaded it ([`kernel::Loaded::File`]), beside the
    /// running kernel's kallsyms read from `kallsyms` (or why it could not be); `forced`: armed under
    /// `--force`.
    pub fn new(
        resolver: Box<Resolver>,
        running: std::result::Result<SymbolTable, ksymwatch_symbols::Error>,
        kallsyms: &Path,
        forced: bool,
    ) -> FileSymbols {
        FileSymbols {
            resolver: *resolver,
            // Unreadable kallsyms costs only call-chain names (see `chains`).
            running: running.map_err(|e| Advised(e).to_string()),
            kallsyms: kallsyms.to_path_buf(),
            forced,
        }
    }

    /// Resolves every target to a watch at a runtime address. When the file's addresses are not provably
    /// the running kernel's, they are moved by kallsyms' `_text` and a warning says so.
    pub fn watches(&self, targets: &[Target], access: Access) -> Result<Vec<watch::Resolved>> {
        let mut out = Vec::new();
        let mut guess = None;
        for t in targets {
            if let Base::Address(_) = t.base {
                out.push(watch::resolve(t, access, &SymbolTable::default())?);
                continue;
            }
            let r = resolve(&self.resolver, t, true)?;
            let mut note = None;
            let addr = match (r.runtime_addr, r.link_addr) {
                (Some(a), _) => a,
                (None, Some(link)) => {
                    let k = *guess.get_or_insert_with(|| {
                        self.running
                            .as_ref()
                            .ok()
                            .and_then(|running| guess_kaslr(&self.resolver, running))
                    });
                    let km = self.resolver.kernel_match();
                    let src = self.resolver.source();
                    let src = if km.is_mismatch() {
                        format!("{src} is not the running kernel")
                    } else {
                        format!("{src} is not provably the running kernel")
                    };
                    match k {
                        Some(k) => {
                            let a = k.to_runtime(link);
                            note = Some(format!(
                                "{src} ({km}): arming `{}` at 0x{a:x}, its link \
                                 address 0x{link:x} moved by kallsyms' _text (offset {:#x}); hits may be some other variable",
                                r.target,
                                k.offset()
                            ));
                            a
                        }
                        None => {
                            note = Some(format!(
                                "{src} ({km}) and {} gives no _text to relocate by: \
                                 arming `{}` at its link address 0x{link:x}; hits may be some other variable",
                                self.kallsyms.display(),
                                r.target
                            ));
                            link
                        }
                    }
                }
                (None, None) => r.watch_addr(),
            };
            let mut w = watch::from_resolved(t, access, &r, addr)?;
            w.warnings.extend(note);
            out.push(w);
        }
        Ok(out)
    }

    /// The table call chains are symbolized with: kallsyms when readable, else the file's own (loaded
    /// with the file, and said then: [`ksymwatch_symbols::kernel::Loaded::File`]).
    pub fn chains(&self) -> Result<&SymbolTable> {
        match &self.running {
            Ok(t) => Ok(t),
            Err(_) => self.resolver.table().bad_symbols(),
        }
    }

    /// The `# symbols:` header line.
    pub fn header(&self) -> String {
        let mut s = describe(
            self.resolver.source(),
            self.resolver.kernel_match(),
            self.forced,
        );
        if self.running.is_ok() {
            s.push_str(&format!(
                "; call chains: kallsyms {}",
                self.kallsyms.display()
            ));
        }
        s
    }

    /// `--lines`: the vmlinux's line tables (built as the file was loaded, so a file without them has
    /// failed before arming).
    pub fn line_source(&self) -> Result<VmlinuxLines<'_>> {
        let lines = VmlinuxLines::new(&self.resolver).bad_symbols()?;
        if self.resolver.kernel_match().is_mismatch() {
            crate::stderr::line(format_args!(
                "ksymwatch: warning: --lines with a vmlinux that is not the running kernel: file:line will be wrong"
            ));
        }
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::target::parse;
    use ksymwatch_symbols::testing::fixture;

    /// `resolve NAME --vmlinux` answers from a scan of the vmlinux's raw symbol table: neither the
    /// split of a dotted target, nor the per-CPU check, nor the relocation guess builds the whole table
    /// (on a distribution's debug vmlinux that build is most of the command's time).
    #[test]
    fn a_vmlinux_target_resolves_without_building_the_whole_table() {
        let Some(f) = fixture::build() else { return };
        let root = f.dir.join("root-cli-byname");
        std::fs::create_dir_all(root.join("proc")).unwrap();
        std::fs::write(root.join("proc/kallsyms"), "").unwrap();
        let search = SourceSearch::with_root(&root, None);
        let resolver = Resolver::open_source(Source::Vmlinux(f.vmlinux.clone()), &search).unwrap();
        let banner = resolve(&resolver, &parse("banner").unwrap(), false).unwrap();
        assert_eq!(banner.size, Some(65));
        let y = resolve(&resolver, &parse("sym.field[3].pts[2].y").unwrap(), false).unwrap();
        assert_eq!((y.symbol.name.as_str(), y.size), ("sym", Some(4)));
        let running = ksymwatch_symbols::kallsyms::from_text(
            "ffffffff9a000000 T _text\n",
            Path::new("kallsyms"),
        )
        .unwrap();
        let k = guess_kaslr(&resolver, &running).unwrap();
        assert_eq!(k.link_text, 0xffff_ffff_8100_0000);
        assert!(!resolver.table_loaded());
    }

    /// A lazy kallsyms is read on the first kernel frame, once, and then knows where it came from; one
    /// that cannot be read names nothing instead of failing the watch.
    #[test]
    fn lazy_kallsyms_is_read_on_the_first_frame() {
        let dir = std::env::temp_dir().join(format!("ksw-lazy-kallsyms-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kallsyms");
        std::fs::write(
            &path,
            "ffffffff81000000 T _text\nffffffff81000100 T do_work\n",
        )
        .unwrap();
        let lazy = LazyKallsyms::new(&path, &dir.join("notes"), false);
        let table = KernelTable::Lazy(&lazy);
        assert_eq!(table.origin(), None, "read before a frame asked");
        let s = table.symbolize(0xffff_ffff_8100_0104).unwrap();
        assert_eq!((s.symbol.name, s.offset), ("do_work", 4));
        assert_eq!(table.origin(), Some(Origin::Parsed));
        let missing = LazyKallsyms::new(&dir.join("absent"), &dir.join("notes"), false);
        assert!(KernelTable::Lazy(&missing)
            .symbolize(0xffff_ffff_8100_0104)
            .is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
