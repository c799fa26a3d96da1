//! The front door for a front end: open the right source for the running kernel, relocate it, and answer
//! `resolve TARGET` with everything a person needs to trust the address (both addresses, size, section,
//! type, which file answered and whether it is this kernel).
//!
//! Work is deferred until a question needs it: a vmlinux's full symbol table is built only for
//! symbolization or suggestions (a name lookup scans the raw table), and the line table only for file:line questions.

use crate::annotate::{LineFrame, LineSource};
use crate::buildid::{KernelMatch, MismatchPolicy};
use crate::dwarf::VariableQuery;
use crate::error::{Error, LookupError};
use crate::kaslr::Kaslr;
use crate::lines::{Frame, LineSymbolizer};
use crate::member::FieldError;
use crate::path::PathElem;
use crate::progress::{NoProgress, Progress};
use crate::search::SourceSearch;
use crate::source::Source;
use crate::symbol::Symbol;
use crate::table::{SymbolTable, Symbolized};
use crate::vmlinux::Vmlinux;
use crate::{dwarf, file, kallsyms, kaslr, relocate, sysmap};
use std::fmt;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How many text symbols to compare with kallsyms when there is no build-id.
const VERIFY_SAMPLES: usize = 64;

/// Knobs for [`Resolver::resolve`].
#[derive(Debug, Clone, Copy)]
pub struct ResolveOptions<'p> {
    /// Look up the DWARF type even without a member path (a vmlinux with debug info only).
    pub types: bool,
    /// Where a scan of the DWARF reports how far it got ([`NoProgress`] by default).
    pub progress: &'p dyn Progress,
}

impl Default for ResolveOptions<'_> {
    fn default() -> Self {
        ResolveOptions {
            types: true,
            progress: &NoProgress,
        }
    }
}

/// Why a target did not resolve.
#[derive(Debug)]
pub enum ResolveError {
    /// The name is unknown, ambiguous, or not in this source.
    Lookup(LookupError),
    /// The member path does not fit the variable's type, or there is no DWARF for it.
    Field(FieldError),
    /// The source failed while being read.
    Load(Error),
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::Lookup(e) => write!(f, "{e}"),
            ResolveError::Field(e) => write!(f, "{e}"),
            ResolveError::Load(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ResolveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // Each variant shows the wrapped error's own text: that error's cause is the next link.
        match self {
            ResolveError::Lookup(_) => None,
            ResolveError::Field(e) => e.source(),
            ResolveError::Load(e) => e.source(),
        }
    }
}

impl From<Error> for ResolveError {
    fn from(e: Error) -> ResolveError {
        ResolveError::Load(e)
    }
}

impl From<LookupError> for ResolveError {
    fn from(e: LookupError) -> ResolveError {
        ResolveError::Lookup(e)
    }
}

impl From<FieldError> for ResolveError {
    fn from(e: FieldError) -> ResolveError {
        match e {
            FieldError::Load(e) => ResolveError::Load(e),
            e => ResolveError::Field(e),
        }
    }
}

/// A resolved target: everything `ksymwatch resolve` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The target as written back: `init_uts_ns.name.nodename`, `dup@1`.
    pub target: String,
    /// The symbol the target starts from (runtime address when the table was relocated).
    pub symbol: Symbol,
    /// Bytes from the symbol's start to the target (member path offset).
    pub offset: u64,
    /// The file's address (vmlinux/System.map); `None` for kallsyms, which only knows runtime addresses.
    pub link_addr: Option<u64>,
    /// The address in the running kernel; `None` when the file is not (or not provably) this kernel.
    pub runtime_addr: Option<u64>,
    pub size: Option<u64>,
    /// The ELF section holding the target (vmlinux only).
    pub section: Option<String>,
    pub type_char: char,
    /// The C type from DWARF, when there is DWARF.
    pub type_name: Option<String>,
    pub source: Source,
    pub kernel_match: KernelMatch,
}

impl Resolved {
    /// The address to arm: the runtime one when known, else the link-time one (the caller decides
    /// whether that is acceptable, see [`Resolver::check`]).
    pub fn watch_addr(&self) -> u64 {
        self.runtime_addr
            .or(self.link_addr)
            .unwrap_or(self.symbol.addr + self.offset)
    }

    /// One JSON object (no serde: the shape is small and fixed). Addresses are `"0x..."` strings, since
    /// kernel addresses exceed what JSON numbers carry exactly in most parsers.
    pub fn to_json(&self) -> String {
        let hex = |v: Option<u64>| v.map_or("null".to_string(), |v| format!("\"0x{v:x}\""));
        let s = |v: Option<&str>| v.map_or("null".to_string(), json_string);
        format!(
            "{{\"target\":{},\"symbol\":{},\"module\":{},\"offset\":{},\"link_addr\":{},\"runtime_addr\":{},\"size\":{},\
             \"section\":{},\"type_char\":{},\"type\":{},\"source\":{{\"kind\":{},\"path\":{}}},\
             \"kernel_match\":{},\"kernel_match_detail\":{}}}",
            json_string(&self.target),
            json_string(&self.symbol.name),
            s(self.symbol.module.as_deref()),
            self.offset,
            hex(self.link_addr),
            hex(self.runtime_addr),
            self.size.map_or("null".to_string(), |n| n.to_string()),
            s(self.section.as_deref()),
            json_string(&self.type_char.to_string()),
            s(self.type_name.as_deref()),
            json_string(self.source.kind()),
            json_string(&self.source.path().to_string_lossy()),
            json_string(self.kernel_match.status()),
            json_string(&self.kernel_match.to_string()),
        )
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl fmt::Display for Resolved {
    /// The human form of `resolve`: one `key: value` line each, stable for eyes and grep.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addr = |v: Option<u64>| v.map_or("unknown".to_string(), |v| format!("0x{v:016x}"));
        writeln!(f, "target:       {}", self.target)?;
        if let Some(m) = &self.symbol.module {
            writeln!(f, "module:       {m}")?;
        }
        writeln!(f, "runtime addr: {}", addr(self.runtime_addr))?;
        writeln!(
            f,
            "link addr:    {}",
            self.link_addr.map_or(
                "n/a (kallsyms gives runtime addresses)".to_string(),
                |v| format!("0x{v:016x}")
            )
        )?;
        writeln!(
            f,
            "size:         {}",
            self.size.map_or("unknown".to_string(), |n| n.to_string())
        )?;
        writeln!(
            f,
            "section:      {}",
            self.section.as_deref().unwrap_or("unknown")
        )?;
        writeln!(
            f,
            "type:         {} ({})",
            self.type_name.as_deref().unwrap_or("unknown"),
            self.type_char
        )?;
        writeln!(f, "source:       {}", self.source)?;
        write!(f, "kernel:       {}", self.kernel_match)
    }
}

/// Symbols of the running kernel from the best available source.
#[derive(Debug)]
pub struct Resolver {
    source: Source,
    vmlinux: Option<Vmlinux>,
    table: OnceLock<SymbolTable>,
    kaslr: Option<Kaslr>,
    kernel_match: KernelMatch,
    lines: OnceLock<LineSymbolizer>,
    /// The running kernel's kallsyms, where a link-time source looks module symbols up (it has none).
    kallsyms: PathBuf,
    /// That kallsyms, loaded on the first `module:name`.
    running: OnceLock<SymbolTable>,
}

impl Resolver {
    /// Picks the source with [`SourceSearch::pick`] and opens it.
    pub fn open(search: &SourceSearch) -> Result<Resolver, Error> {
        Resolver::open_source(search.pick(), search)
    }

    /// Opens a given source; `search` supplies the running kernel's kallsyms and notes to compare with
    /// (kallsyms read as far as the source needs it: a vmlinux's relocation markers, a System.map's
    /// whole table).
    pub fn open_source(source: Source, search: &SourceSearch) -> Result<Resolver, Error> {
        Resolver::open_with(source, search, Running::Unread(&search.kallsyms))
    }

    /// Opens a vmlinux or System.map beside the running kernel's kallsyms, already read (`running`, or
    /// why it could not be): the relocation, the check against the running kernel and module symbols
    /// come from that table, and kallsyms is not read again. A kallsyms that could not be read leaves
    /// them unknown, as a missing file does for [`Resolver::open_source`]; raising a path that names no
    /// kallsyms at all ([`Error::is_wrong_file`]) is the caller's, who holds the error.
    pub fn open_beside(
        source: Source,
        search: &SourceSearch,
        running: Result<&SymbolTable, &Error>,
    ) -> Result<Resolver, Error> {
        Resolver::open_with(source, search, Running::Read(running))
    }

    fn open_with(
        source: Source,
        search: &SourceSearch,
        running: Running<'_>,
    ) -> Result<Resolver, Error> {
        match &source {
            Source::Kallsyms(p) => {
                let table = kallsyms::load(p)?;
                Ok(
                    Resolver::with_table(source, None, table, None, KernelMatch::Running)
                        .with_kallsyms(&search.kallsyms),
                )
            }
            Source::SystemMap(p) => {
                let mut table = sysmap::load(p)?;
                let loaded;
                let running = match running {
                    Running::Read(r) => r.map_err(Error::to_string),
                    // A missing kallsyms leaves the match unknown; a device or FIFO named as kallsyms is
                    // a mistake to report, not a file to do without.
                    Running::Unread(path) => match kallsyms::load(path) {
                        Err(e) if e.is_wrong_file() => return Err(e),
                        Ok(t) => {
                            loaded = t;
                            Ok(&loaded)
                        }
                        Err(e) => Err(e.to_string()),
                    },
                };
                let (kaslr, km) = match &running {
                    Ok(running) => match relocate::between(&table, running) {
                        Some(k) => (
                            Some(k),
                            relocate::verify(&table, running, k, VERIFY_SAMPLES),
                        ),
                        None => (
                            None,
                            KernelMatch::Unknown("no _text/_stext in both to relocate by".into()),
                        ),
                    },
                    Err(e) => (
                        None,
                        KernelMatch::Unknown(format!(
                            "cannot compare with the running kernel: {e}"
                        )),
                    ),
                };
                let kaslr = kaslr.filter(|_| km.is_match());
                if let Some(k) = kaslr {
                    table.relocate(k);
                }
                Ok(Resolver::with_table(source, None, table, kaslr, km)
                    .with_kallsyms(&search.kallsyms)
                    .with_running(running))
            }
            Source::Vmlinux(p) => {
                let vm = Vmlinux::open(p)?;
                let id = match search.running_build_id() {
                    Err(e) if e.is_wrong_file() => return Err(e),
                    r => r.ok().flatten(),
                };
                let mut km = KernelMatch::compare(vm.build_id(), id);
                let mut kaslr = None;
                if !km.is_mismatch() {
                    kaslr = vmlinux_kaslr(&vm, running)?;
                    if let (KernelMatch::Unknown(_), Some(k)) = (&km, kaslr) {
                        // No build-id to go by: fall back to comparing symbols, as for System.map.
                        let loaded;
                        let table = match running {
                            Running::Read(r) => r.ok(),
                            Running::Unread(path) => {
                                loaded = kallsyms::load(path).ok();
                                loaded.as_ref()
                            }
                        };
                        if let Some(table) = table {
                            km = relocate::verify(&vm.table()?, table, k, VERIFY_SAMPLES);
                        }
                    }
                    if !km.is_match() {
                        kaslr = None;
                    }
                }
                let resolver = Resolver {
                    source,
                    vmlinux: Some(vm),
                    table: OnceLock::new(),
                    kaslr,
                    kernel_match: km,
                    lines: OnceLock::new(),
                    kallsyms: search.kallsyms.clone(),
                    running: OnceLock::new(),
                };
                Ok(match running {
                    Running::Read(r) => resolver.with_running(r.map_err(|_| ())),
                    Running::Unread(_) => resolver,
                })
            }
        }
    }

    /// The running kernel's kallsyms `table`, already read from `source` ([`crate::kernel::lookup`]), as
    /// [`Resolver::open_source`] would have read it; `kallsyms` is the search's.
    pub(crate) fn from_kallsyms(source: Source, table: SymbolTable, kallsyms: &Path) -> Resolver {
        Resolver::with_table(source, None, table, None, KernelMatch::Running)
            .with_kallsyms(kallsyms)
    }

    fn with_table(
        source: Source,
        vmlinux: Option<Vmlinux>,
        table: SymbolTable,
        kaslr: Option<Kaslr>,
        km: KernelMatch,
    ) -> Resolver {
        let cell = OnceLock::new();
        let _ = cell.set(table);
        Resolver {
            source,
            vmlinux,
            table: cell,
            kaslr,
            kernel_match: km,
            lines: OnceLock::new(),
            kallsyms: PathBuf::new(),
            running: OnceLock::new(),
        }
    }

    fn with_kallsyms(mut self, kallsyms: &Path) -> Resolver {
        self.kallsyms = kallsyms.to_path_buf();
        self
    }

    /// Module symbols looked up in `running`, the running kernel's kallsyms as already read.
    fn with_running<E>(self, running: Result<&SymbolTable, E>) -> Resolver {
        if let Ok(t) = running {
            let _ = self.running.set(t.share());
        }
        self
    }

    /// The table module symbols are looked up in: the source's own for kallsyms, else the running
    /// kernel's kallsyms (a vmlinux or System.map lists no module).
    fn module_table(&self) -> Result<&SymbolTable, Error> {
        if let Source::Kallsyms(_) = self.source {
            return self.table();
        }
        if let Some(t) = self.running.get() {
            return Ok(t);
        }
        let t = kallsyms::load(&self.kallsyms)?;
        Ok(self.running.get_or_init(|| t))
    }

    /// `module:name[@index]`: the symbol among that module's kallsyms symbols only. Its address is the
    /// running kernel's (modules load wherever there is room: there is no link-time address to give), and
    /// it has no member path (a vmlinux's DWARF does not describe module variables).
    pub fn resolve_in_module(
        &self,
        module: &str,
        name: &str,
        index: Option<usize>,
    ) -> Result<Resolved, ResolveError> {
        let table = self.module_table()?;
        let symbol = table.lookup_in_module(name, module, index)?.to_symbol();
        let mut target = format!("{module}:{name}");
        if let Some(i) = index {
            target.push_str(&format!("@{i}"));
        }
        Ok(Resolved {
            target,
            type_char: symbol.type_char,
            offset: 0,
            link_addr: None,
            runtime_addr: Some(symbol.addr),
            size: symbol.size.filter(|&n| n > 0),
            section: None,
            type_name: None,
            symbol,
            source: Source::Kallsyms(match &self.source {
                Source::Kallsyms(p) => p.clone(),
                _ => self.kallsyms.clone(),
            }),
            kernel_match: KernelMatch::Running,
        })
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Whether the file is the running kernel (build-id, symbol cross-check, or kallsyms itself).
    pub fn kernel_match(&self) -> &KernelMatch {
        &self.kernel_match
    }

    /// The relocation applied to link-time addresses; `None` for kallsyms or when not provably this kernel.
    pub fn kaslr(&self) -> Option<Kaslr> {
        self.kaslr
    }

    pub fn vmlinux(&self) -> Option<&Vmlinux> {
        self.vmlinux.as_ref()
    }

    /// Applies the mismatch policy: `Err` ([`Error::KernelMismatch`]) when the file is proven not this kernel.
    pub fn check(&self, policy: MismatchPolicy) -> Result<(), Error> {
        policy.check(&self.kernel_match, &self.source)
    }

    /// The vmlinux the source is, or `missing`'s error naming the source's file (a System.map or kallsyms
    /// has no symbol table to build and no DWARF).
    fn vmlinux_or(&self, missing: fn(PathBuf) -> Error) -> Result<&Vmlinux, Error> {
        self.vmlinux
            .as_ref()
            .ok_or_else(|| missing(self.source.path().to_path_buf()))
    }

    /// The full symbol table (runtime addresses when relocated), built on first use for a vmlinux.
    pub fn table(&self) -> Result<&SymbolTable, Error> {
        if let Some(t) = self.table.get() {
            return Ok(t);
        }
        let vm = self.vmlinux_or(|path| Error::Empty { path })?;
        let mut t = vm.table()?;
        if let Some(k) = self.kaslr {
            t.relocate(k);
        }
        Ok(self.table.get_or_init(|| t))
    }

    /// Whether the full table is there yet: a vmlinux builds it on first need (symbolization, a miss to
    /// explain), never to answer a name it has.
    pub fn table_loaded(&self) -> bool {
        self.table.get().is_some()
    }

    /// The symbols called `name`, as [`Resolver::table`] would give them (runtime addresses when
    /// relocated). A vmlinux whose table is not built yet has its raw `.symtab` scanned for the name and
    /// only those symbols sorted: building the whole table (~119k symbols of Debian's debug vmlinux, about
    /// 40 ms) to answer one name was most of a `resolve` command's time (issue #37).
    pub fn symbols_named(&self, name: &str) -> Result<ByName<'_>, Error> {
        let vm = match (&self.vmlinux, self.table.get()) {
            (Some(vm), None) => vm,
            _ => return self.table().map(ByName::Full),
        };
        let mut only = SymbolTable::new(vm.symbols_named(name)?, false);
        if let Some(k) = self.kaslr {
            only.relocate(k);
        }
        Ok(ByName::Only(only))
    }

    /// The symbol containing a runtime address (`func+0xOFF/0xSIZE`).
    pub fn symbolize(&self, addr: u64) -> Result<Option<Symbolized<'_>>, Error> {
        Ok(self.table()?.symbolize(addr))
    }

    /// The line symbolizer, built on first call (it reads every unit's line program).
    pub fn lines(&self) -> Result<&LineSymbolizer, Error> {
        if let Some(l) = self.lines.get() {
            return Ok(l);
        }
        let vm = self.vmlinux_or(|path| Error::NoDebugInfo { path })?;
        let l = LineSymbolizer::new(vm)?;
        Ok(self.lines.get_or_init(|| l))
    }

    /// `file:line` frames (inlined ones first) at a runtime address.
    pub fn frames(&self, addr: u64) -> Result<Vec<Frame>, Error> {
        let link = self.kaslr.map_or(addr, |k| k.to_link(addr));
        self.lines()?.frames(link)
    }

    /// Resolves `name[@index]` plus a member path to addresses, size, section and type.
    pub fn resolve(
        &self,
        name: &str,
        index: Option<usize>,
        path: &[PathElem],
        opts: ResolveOptions<'_>,
    ) -> Result<Resolved, ResolveError> {
        let (symbol, link) = self.find(name, index)?;
        let mut target = name.to_string();
        if let Some(i) = index {
            target.push_str(&format!("@{i}"));
        }
        for p in path {
            target.push_str(&p.to_string());
        }
        let mut offset = 0;
        let mut size = symbol.size.filter(|&n| n > 0);
        let mut type_name = None;
        let want_dwarf = !path.is_empty() || opts.types;
        match &self.vmlinux {
            Some(vm) if want_dwarf && (vm.has_debug_info() || !path.is_empty()) => {
                let query = VariableQuery {
                    name,
                    addr: link,
                    accept_declaration: symbol.is_global(),
                };
                match dwarf::resolve_path(vm, &query, path, opts.progress) {
                    Ok(m) => {
                        offset = m.offset;
                        size = m.size.or(if path.is_empty() { size } else { None });
                        type_name = Some(m.type_name);
                    }
                    // A bare name needs no type to be watched; only a member path depends on DWARF.
                    Err(_) if path.is_empty() => {}
                    Err(e) => return Err(e.into()),
                }
            }
            None if !path.is_empty() => {
                return Err(ResolveError::Load(Error::NoDebugInfo {
                    path: self.source.path().to_path_buf(),
                }))
            }
            _ => {}
        }
        let link_addr = link.map(|a| a + offset);
        let runtime_addr = match (&self.source, self.kaslr) {
            (Source::Kallsyms(_), _) => Some(symbol.addr + offset),
            (_, Some(_)) => Some(symbol.addr + offset),
            _ => None,
        };
        let section = match (&self.vmlinux, link_addr) {
            (Some(vm), Some(a)) => vm.section_of(a).map(|s| s.name.clone()),
            _ => None,
        };
        Ok(Resolved {
            target,
            type_char: symbol.type_char,
            symbol,
            offset,
            link_addr,
            runtime_addr,
            size,
            section,
            type_name,
            source: self.source.clone(),
            kernel_match: self.kernel_match.clone(),
        })
    }

    /// One symbol by name, with its link-time address when the source has one. A miss is explained from
    /// the full table (its suggestions need every name), so only a miss builds a vmlinux's table.
    fn find(
        &self,
        name: &str,
        index: Option<usize>,
    ) -> Result<(Symbol, Option<u64>), ResolveError> {
        let link_time = self.source.is_link_time();
        let named = self.symbols_named(name)?;
        let table = match &named {
            ByName::Only(t) if t.is_empty() => self.table()?,
            t => &**t,
        };
        let s = table.lookup(name, index)?;
        Ok((s.to_symbol(), link_time.then(|| table.link_addr(s))))
    }
}

/// The symbols called one name ([`Resolver::symbols_named`]): the full table when it is there, else a
/// table of just those symbols. Either answers for that name alike (addresses, sizes, order, `name@N`,
/// [`SymbolTable::link_addr`]); only the full one knows other names.
#[derive(Debug)]
pub enum ByName<'a> {
    Full(&'a SymbolTable),
    Only(SymbolTable),
}

impl std::ops::Deref for ByName<'_> {
    type Target = SymbolTable;

    fn deref(&self) -> &SymbolTable {
        match self {
            ByName::Full(t) => t,
            ByName::Only(t) => t,
        }
    }
}

/// The running kernel's kallsyms a link-time source is related to: its path, read here only as far as
/// needed, or the table its caller already read (or why it could not).
#[derive(Clone, Copy)]
enum Running<'a> {
    Unread(&'a Path),
    Read(Result<&'a SymbolTable, &'a Error>),
}

/// The relocation of a vmlinux: its `_text` against the running kernel's, reading kallsyms only as far as
/// the marker (it comes first, and the whole file is slow to generate) when it is not read yet.
fn vmlinux_kaslr(vm: &Vmlinux, running: Running<'_>) -> Result<Option<Kaslr>, Error> {
    let runtime = match running {
        Running::Unread(path) => kallsyms_markers(path)?,
        Running::Read(Ok(t)) => Some(kaslr::TEXT_MARKERS.map(|name| {
            t.by_name(name)
                .find(|s| s.module.is_none() && s.addr != 0)
                .map(|s| s.addr)
        })),
        Running::Read(Err(_)) => None,
    };
    let Some(runtime) = runtime else {
        return Ok(None);
    };
    for (name, runtime_text) in kaslr::TEXT_MARKERS.iter().zip(runtime) {
        let Some(runtime_text) = runtime_text else {
            continue;
        };
        if let Some(s) = vm.symbols_named(name)?.first() {
            return Ok(Some(Kaslr {
                link_text: s.addr,
                runtime_text,
            }));
        }
    }
    Ok(None)
}

/// Runtime addresses of [`kaslr::TEXT_MARKERS`] from kallsyms; `None` if it is unreadable or zeroed, an
/// error if the path names no kallsyms file at all (a device, a FIFO: [`Error::is_wrong_file`]).
fn kallsyms_markers(path: &Path) -> Result<Option<[Option<u64>; 2]>, Error> {
    let file = match file::open_regular(path, file::Role::Kallsyms) {
        Ok(f) => f,
        Err(e) if e.is_wrong_file() => return Err(e),
        Err(_) => return Ok(None),
    };
    let mut found = [None, None];
    for line in std::io::BufReader::new(file.take(file::TEXT_LIMIT)).lines() {
        let Ok(line) = line else {
            return Ok(None);
        };
        let mut f = line.split_whitespace();
        let (Some(addr), Some(_), Some(name), None) = (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if let Some(i) = kaslr::TEXT_MARKERS.iter().position(|m| *m == name) {
            found[i] = u64::from_str_radix(addr, 16).ok().filter(|&a| a != 0);
        }
        if found[0].is_some() && found[1].is_some() {
            break;
        }
    }
    Ok(Some(found))
}

/// Lines from a vmlinux's DWARF through the [`Resolver`], which moves runtime addresses back to link-time
/// ones by the KASLR offset it found.
pub struct VmlinuxLines<'a> {
    resolver: &'a Resolver,
}

impl<'a> VmlinuxLines<'a> {
    /// Builds the line tables now (they cover the whole DWARF, which takes a while on a real vmlinux), so a
    /// file without debug info is reported before anything is armed.
    pub fn new(resolver: &'a Resolver) -> Result<VmlinuxLines<'a>, Error> {
        resolver.lines()?;
        Ok(VmlinuxLines { resolver })
    }
}

impl LineSource for VmlinuxLines<'_> {
    fn lines(&self, addr: u64) -> Vec<LineFrame> {
        // A frame without lines is printed bare; one failed lookup must not end the trace.
        self.resolver.frames(addr).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up kernel: its kallsyms (with a module) and a System.map of the same symbols without it.
    fn kernel(tag: &str) -> (PathBuf, SourceSearch) {
        let dir =
            std::env::temp_dir().join(format!("ksymwatch-resolve-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proc")).unwrap();
        std::fs::write(dir.join("proc/kallsyms"), crate::testing::MODULES_KALLSYMS).unwrap();
        std::fs::write(
            dir.join("System.map"),
            "ffffffff81000000 T _text\nffffffff81000040 T do_thing\n",
        )
        .unwrap();
        let search = SourceSearch::with_root(&dir, None);
        (dir, search)
    }

    #[test]
    fn module_symbols_resolve_from_kallsyms_with_their_module() {
        let (dir, search) = kernel("kallsyms");
        let r = Resolver::open(&search).unwrap();
        let got = r.resolve_in_module("foo", "counter", None).unwrap();
        assert_eq!(got.target, "foo:counter");
        assert_eq!(got.runtime_addr, Some(0xffffffffc0001080));
        assert_eq!((got.link_addr, got.size), (None, Some(8)));
        assert_eq!(got.symbol.module.as_deref(), Some("foo"));
        let text = got.to_string();
        assert!(text.contains("\nmodule:       foo\n"), "{text}");
        assert!(
            got.to_json()
                .contains("\"symbol\":\"counter\",\"module\":\"foo\","),
            "{}",
            got.to_json()
        );
        // A plain name finds it too, and says which module it is in.
        let plain = r
            .resolve("foo_flags", None, &[], ResolveOptions::default())
            .unwrap();
        assert_eq!(plain.symbol.module.as_deref(), Some("foo"));
        assert!(plain.to_string().contains("module:       foo"));
        // A vmlinux symbol has no module line, and `null` in JSON.
        let vml = r
            .resolve("do_thing", None, &[], ResolveOptions::default())
            .unwrap();
        assert!(!vml.to_string().contains("module:"));
        assert!(vml.to_json().contains("\"module\":null"));
        assert!(matches!(
            r.resolve_in_module("baz", "counter", None),
            Err(ResolveError::Lookup(LookupError::NoModule { .. }))
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_system_map_resolver_finds_module_symbols_in_kallsyms() {
        let (dir, search) = kernel("sysmap");
        let r = Resolver::open_source(Source::SystemMap(dir.join("System.map")), &search).unwrap();
        let got = r.resolve_in_module("foo", "foo_flags", None).unwrap();
        assert_eq!(got.runtime_addr, Some(0xffffffffc0001088));
        assert_eq!(got.source, Source::Kallsyms(dir.join("proc/kallsyms")));
        assert_eq!(got.kernel_match, KernelMatch::Running);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
