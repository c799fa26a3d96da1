//! The loaded symbol table: sorted by address for symbolization, searchable by name for lookup.

use crate::columns::{Builder, Bytes, Columns};
use crate::error::LookupError;
use crate::kaslr::Kaslr;
use crate::symbol::{Symbol, SymbolKind};
use rustc_hash::FxHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// One symbol of a [`SymbolTable`], borrowed from it: the table keeps its symbols in columns (in place in a
/// mapped cache file), so a symbol is read out on demand rather than stored as a [`Symbol`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymbolRef<'a> {
    pub name: &'a str,
    pub addr: u64,
    /// Known size in bytes; for kallsyms it is inferred from the next symbol when the table is built.
    pub size: Option<u64>,
    /// The `nm` type letter as the source gave it (lower case = file-local).
    pub type_char: char,
    /// The module for `[module]`-suffixed kallsyms lines; `None` for vmlinux. Shared with the table.
    pub module: Option<&'a Arc<str>>,
}

impl SymbolRef<'_> {
    pub fn kind(&self) -> SymbolKind {
        SymbolKind::from_type_char(self.type_char)
    }

    /// Global (upper-case type letter) rather than file-local.
    pub fn is_global(&self) -> bool {
        self.type_char.is_ascii_uppercase()
    }

    /// An owned copy.
    pub fn to_symbol(&self) -> Symbol {
        Symbol {
            name: self.name.to_string(),
            addr: self.addr,
            size: self.size,
            type_char: self.type_char,
            module: self.module.cloned(),
        }
    }
}

/// An address resolved to the symbol that contains it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symbolized<'a> {
    pub symbol: SymbolRef<'a>,
    pub offset: u64,
}

impl std::fmt::Display for Symbolized<'_> {
    /// `func+0xOFF/0xSIZE`, the form of ftrace's `sym-offset` option and of kernel oopses.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}+0x{:x}", self.symbol.name, self.offset)?;
        if let Some(size) = self.symbol.size {
            write!(f, "/0x{size:x}")?;
        }
        if let Some(m) = &self.symbol.module {
            write!(f, " [{m}]")?;
        }
        Ok(())
    }
}

/// A name and the positions of the symbols that have it.
type Scanned = (Box<str>, Arc<[u32]>);

/// Symbols sorted by address, with a name index. Built once; a lookup allocates at most the positions of
/// a name it scanned for.
///
/// The name index is built on demand: most runs look up one or two names (the targets), which a scan of the
/// table answers in well under a millisecond, while building any index over 100k+ names costs more than
/// that. After `LINEAR_LOOKUPS` scans (a KASLR cross-check looks up dozens) the index is built once: name
/// hashes sorted with their positions, so building it hashes each name once and copies none.
#[derive(Debug, Default)]
pub struct SymbolTable {
    columns: Columns,
    /// `(hash of name, position)`, sorted; same-named symbols are adjacent and in address order.
    names: OnceLock<Vec<(u64, u32)>>,
    /// Lookups answered by scanning so far.
    scans: AtomicU32,
    /// The last name scanned for and where it is: one start-up looks its target up several times (the
    /// source, per-CPU, the watch), each a scan of the whole table before the index exists.
    last_scan: Mutex<Option<Scanned>>,
    /// Set by [`SymbolTable::relocate`]: the symbols then hold runtime addresses.
    kaslr: Option<Kaslr>,
}

/// Lookups answered by a linear scan before the name index is built.
const LINEAR_LOOKUPS: u32 = 8;

fn name_hash(name: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    name.hash(&mut h);
    h.finish()
}

/// The symbols of one name, in address order ([`SymbolTable::by_name`]).
pub struct Named<'a, 'n> {
    table: &'a SymbolTable,
    name: &'n str,
    how: NamedBy<'a>,
}

enum NamedBy<'a> {
    /// The index entries with the name's hash (a hash collision is filtered out by comparing names).
    Index(std::slice::Iter<'a, (u64, u32)>),
    /// The positions a scan of the table found, and how many of them were given.
    Scanned(Arc<[u32]>, usize),
}

impl<'a> Iterator for Named<'a, '_> {
    type Item = SymbolRef<'a>;

    fn next(&mut self) -> Option<SymbolRef<'a>> {
        let columns = &self.table.columns;
        let wanted = self.name.as_bytes();
        let i = match &mut self.how {
            NamedBy::Index(entries) => entries
                .map(|&(_, i)| i as usize)
                .find(|&i| columns.name_bytes(i) == wanted)?,
            NamedBy::Scanned(found, given) => {
                let i = *found.get(*given)? as usize;
                *given += 1;
                i
            }
        };
        Some(self.table.get(i))
    }
}

/// Section markers that kallsyms lists even without CONFIG_KALLSYMS_ALL; they say nothing about whether the
/// real data symbols are present.
fn is_section_marker(name: &str) -> bool {
    name.starts_with("__start_")
        || name.starts_with("__stop_")
        || name.starts_with("__end_")
        || matches!(
            name,
            "_sdata"
                | "_edata"
                | "__bss_start"
                | "__bss_stop"
                | "_end"
                | "__init_begin"
                | "__init_end"
        )
}

/// The prefix of the padding symbol the kernel emits before each function (CONFIG_CALL_PADDING): never a
/// suggestion, unless the name asked for has it too.
const PADDING: &str = "__pfx_";

impl SymbolTable {
    /// Builds the table. With `infer_sizes`, a symbol without a size gets the distance to the next higher
    /// address in the same module (kallsyms and System.map carry no sizes).
    pub fn new(symbols: Vec<Symbol>, infer_sizes: bool) -> SymbolTable {
        let names = symbols.iter().map(|s| s.name.len()).sum();
        let mut b = Builder::with_capacity(symbols.len(), names);
        for s in &symbols {
            b.push_symbol(s);
        }
        SymbolTable::from_columns(b.finish(infer_sizes))
    }

    pub(crate) fn from_columns(columns: Columns) -> SymbolTable {
        SymbolTable {
            columns,
            names: OnceLock::new(),
            scans: AtomicU32::new(0),
            last_scan: Mutex::new(None),
            kaslr: None,
        }
    }

    /// The table laid out in `bytes[start..]` (a mapped cache file), or `None` if that is not a valid layout.
    pub(crate) fn from_bytes(bytes: Bytes, start: usize) -> Option<SymbolTable> {
        Columns::from_bytes(bytes, start).map(SymbolTable::from_columns)
    }

    /// The table's bytes, as a cache file stores them (made now for a table built in memory).
    pub(crate) fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        self.columns.bytes()
    }

    /// Another handle on the same symbols, without copying them: for a thread that writes the cache.
    pub(crate) fn share(&self) -> SymbolTable {
        SymbolTable {
            kaslr: self.kaslr,
            ..SymbolTable::from_columns(self.columns.share())
        }
    }

    /// Moves a link-time table (vmlinux, System.map) to the running kernel's addresses, so lookups and
    /// [`SymbolTable::symbolize`] speak runtime addresses; [`SymbolTable::link_addr`] still gives the file's.
    /// Relocating again replaces the earlier relocation rather than stacking on it.
    pub fn relocate(&mut self, kaslr: Kaslr) {
        let previous = self.kaslr.take();
        let mut b = Builder::with_capacity(self.len(), 0);
        for s in self.iter() {
            let addr = if s.kind() == SymbolKind::Absolute {
                s.addr
            } else {
                kaslr.to_runtime(previous.map_or(s.addr, |k| k.to_link(s.addr)))
            };
            b.push(s.name, addr, s.size, s.type_char, s.module.map(|m| &**m));
        }
        // Sizes are already known, so no inference; rebuilding re-sorts and re-indexes by position.
        *self = SymbolTable::from_columns(b.finish(false));
        self.kaslr = Some(kaslr);
    }

    /// The relocation applied, if any.
    pub fn kaslr(&self) -> Option<Kaslr> {
        self.kaslr
    }

    /// The link-time (file) address of a symbol of this table.
    pub fn link_addr(&self, symbol: SymbolRef<'_>) -> u64 {
        match self.kaslr {
            Some(k) if symbol.kind() != SymbolKind::Absolute => k.to_link(symbol.addr),
            _ => symbol.addr,
        }
    }

    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The symbol at position `i` in address order. Panics past [`SymbolTable::len`], like indexing.
    pub fn get(&self, i: usize) -> SymbolRef<'_> {
        let c = &self.columns;
        SymbolRef {
            name: c.name(i),
            addr: c.addr(i),
            size: c.size(i),
            type_char: c.type_char(i),
            module: c.module(i),
        }
    }

    /// Every symbol, in address order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = SymbolRef<'_>> + DoubleEndedIterator + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Every symbol of that name, in address order.
    pub fn by_name<'a, 'n>(&'a self, name: &'n str) -> Named<'a, 'n> {
        let how = match self.names.get() {
            Some(index) => NamedBy::Index(hashed(index, name_hash(name.as_bytes())).iter()),
            None => match self.scanned(name) {
                Some(found) => NamedBy::Scanned(found, 0),
                None => {
                    let index = self.names.get_or_init(|| self.name_index());
                    NamedBy::Index(hashed(index, name_hash(name.as_bytes())).iter())
                }
            },
        };
        Named {
            table: self,
            name,
            how,
        }
    }

    /// Where `name` is, by a scan of the table (or the last scan's answer for the same name); `None` once
    /// [`LINEAR_LOOKUPS`] scans were made, when the index is worth building.
    fn scanned(&self, name: &str) -> Option<Arc<[u32]>> {
        let mut last = self
            .last_scan
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((n, found)) = &*last {
            if **n == *name {
                return Some(found.clone());
            }
        }
        if self.scans.fetch_add(1, Ordering::Relaxed) >= LINEAR_LOOKUPS {
            return None;
        }
        let mut found = Vec::new();
        let mut from = 0;
        while let Some(i) = self.columns.find_name(name.as_bytes(), from) {
            // Positions fit u32: the name index stores them so too.
            found.push(i as u32);
            from = i + 1;
        }
        let found: Arc<[u32]> = found.into();
        *last = Some((name.into(), found.clone()));
        Some(found)
    }

    fn name_index(&self) -> Vec<(u64, u32)> {
        let mut index: Vec<(u64, u32)> = (0..self.len())
            .map(|i| (name_hash(self.columns.name_bytes(i)), i as u32))
            .collect();
        index.sort_unstable();
        index
    }

    /// Whether the table holds real data symbols (beyond the section markers every kallsyms shows).
    pub fn has_data_symbols(&self) -> bool {
        (0..self.len())
            .filter(|&i| {
                SymbolKind::from_type_char(self.columns.type_char(i)).is_data()
                    && !is_section_marker(self.columns.name(i))
            })
            .take(16)
            .count()
            >= 16
    }

    /// Finds one symbol by name. `index` picks among same-named symbols (`name@N`). Identical duplicates
    /// (same address, as kallsyms repeats `_text`/`_stext`) are not an ambiguity.
    pub fn lookup(&self, name: &str, index: Option<usize>) -> Result<SymbolRef<'_>, LookupError> {
        let found: Vec<SymbolRef<'_>> = self.by_name(name).collect();
        if found.is_empty() {
            return Err(if self.has_data_symbols() {
                LookupError::Unknown {
                    name: name.to_string(),
                    suggestions: self.suggest(name, 5),
                }
            } else {
                LookupError::NoDataSymbols {
                    name: name.to_string(),
                    suggestions: self.suggest(name, 3),
                }
            });
        }
        pick(name, found, index)
    }

    /// `module:name`: like [`SymbolTable::lookup`], among `module`'s symbols only (kallsyms' `[module]`).
    /// A module with no symbol here is [`LookupError::NoModule`], listing the modules there are.
    pub fn lookup_in_module(
        &self,
        name: &str,
        module: &str,
        index: Option<usize>,
    ) -> Result<SymbolRef<'_>, LookupError> {
        let in_module = |s: &SymbolRef<'_>| s.module.map(|m| &**m) == Some(module);
        let found: Vec<SymbolRef<'_>> = self.by_name(name).filter(|s| in_module(s)).collect();
        if !found.is_empty() {
            return pick(name, found, index);
        }
        // Module symbols sit above the kernel image, at the end of the table: a present module is found
        // after a short scan from there.
        Err(if self.iter().rev().any(|s| in_module(&s)) {
            LookupError::NotInModule {
                module: module.to_string(),
                name: name.to_string(),
                suggestions: self.suggest_among(name, 5, in_module),
            }
        } else {
            LookupError::NoModule {
                module: module.to_string(),
                name: name.to_string(),
                modules: self.modules(),
            }
        })
    }

    /// The names of the modules that have symbols here, sorted. kallsyms also tags code the kernel made
    /// itself (`[__builtin__ftrace]`, `[__builtin__kprobes]`, `[bpf]`): those are not modules.
    pub fn modules(&self) -> Vec<String> {
        let mut names: Vec<&str> = Vec::new();
        for m in (0..self.len())
            .filter_map(|i| self.columns.module(i).map(|m| &**m))
            .filter(|m| !m.starts_with("__builtin__") && *m != "bpf")
        {
            // A module's symbols are mostly adjacent: comparing with the last name skips nearly all.
            if names.last() != Some(&m) {
                names.push(m);
            }
        }
        names.sort_unstable();
        names.dedup();
        names.into_iter().map(str::to_string).collect()
    }

    /// Close names for a typo, best first, by [`crate::suggest`]'s ranking.
    pub fn suggest(&self, name: &str, max: usize) -> Vec<String> {
        // Scored as bytes: checking each of ~122k names for UTF-8 would cost a fifth of the scan.
        let padding = |n: &[u8]| n.starts_with(PADDING.as_bytes()) && !name.starts_with(PADDING);
        let names = (0..self.len())
            .map(|i| self.columns.name_bytes(i))
            .filter(|n| !padding(n));
        crate::suggest::best(name, names, max)
            .into_iter()
            .filter_map(|n| std::str::from_utf8(n).ok())
            .map(str::to_string)
            .collect()
    }

    /// [`SymbolTable::suggest`] among the symbols `keep` accepts.
    fn suggest_among(
        &self,
        name: &str,
        max: usize,
        keep: impl Fn(&SymbolRef<'_>) -> bool,
    ) -> Vec<String> {
        let padding = |n: &str| n.starts_with(PADDING) && !name.starts_with(PADDING);
        let names = self
            .iter()
            .filter(|s| keep(s) && !padding(s.name))
            .map(|s| s.name);
        crate::suggest::best(name, names, max)
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// The symbol containing `addr`. Among symbols at one address a global text symbol is preferred, so
    /// `_text`-style aliases do not hide a function name. Absolute symbols never contain anything.
    pub fn symbolize(&self, addr: u64) -> Option<Symbolized<'_>> {
        let c = &self.columns;
        let end = c.first_above(addr);
        if end == 0 {
            return None;
        }
        let at = c.addr(end - 1);
        let start = c.partition(0, end, |a| a < at);
        let symbol = (start..end)
            .map(|i| self.get(i))
            .filter(|s| s.kind() != SymbolKind::Absolute)
            .max_by_key(|s| {
                (
                    s.kind() == SymbolKind::Text,
                    s.is_global(),
                    !s.name.starts_with('_'),
                )
            })?;
        let offset = addr - symbol.addr;
        match symbol.size {
            Some(size) if offset >= size => None,
            // An unsized symbol (the last one of a table) must not swallow every higher address.
            None if offset >= MAX_UNSIZED_SPAN => None,
            _ => Some(Symbolized { symbol, offset }),
        }
    }
}

/// One of the symbols found for `name` (at least one, in address order): `@index`, or the only one.
fn pick<'a>(
    name: &str,
    mut found: Vec<SymbolRef<'a>>,
    index: Option<usize>,
) -> Result<SymbolRef<'a>, LookupError> {
    found.dedup_by_key(|s| s.addr);
    match (found.len(), index) {
        (n, Some(i)) if i >= n => Err(LookupError::BadIndex {
            name: name.to_string(),
            index: i,
            count: n,
        }),
        (_, Some(i)) => Ok(found[i]),
        (1, None) => Ok(found[0]),
        (_, None) => Err(LookupError::Ambiguous {
            name: name.to_string(),
            candidates: found
                .iter()
                .map(|s| (s.addr, s.type_char, s.module.map(|m| m.to_string())))
                .collect(),
        }),
    }
}

/// The entries of `index` with hash `h`.
fn hashed(index: &[(u64, u32)], h: u64) -> &[(u64, u32)] {
    let start = index.partition_point(|&(x, _)| x < h);
    let len = index[start..].partition_point(|&(x, _)| x == h);
    &index[start..start + len]
}

/// How far past an unsized symbol an address may lie and still be attributed to it.
const MAX_UNSIZED_SPAN: u64 = 0x10000;

#[cfg(test)]
mod tests {

    /// kallsyms tags code the kernel made itself like a module (`[__builtin__ftrace]`, `[bpf]`); a list
    /// of the modules there are must not offer them.
    #[test]
    fn padding_symbols_are_not_suggested_unless_asked_for() {
        let t = of_text(
            "ffffffff81000000 T __pfx_ksys_write\nffffffff81000010 T ksys_write\nffffffff81000100 T ksys_read\n",
        );
        let got = t.suggest("ksys_writ", 5);
        assert!(got.contains(&"ksys_write".to_string()), "{got:?}");
        assert!(!got.iter().any(|n| n.starts_with("__pfx_")), "{got:?}");
        let asked = t.suggest("__pfx_ksys_writ", 5);
        assert!(asked.contains(&"__pfx_ksys_write".to_string()), "{asked:?}");
    }

    #[test]
    fn builtin_pseudo_modules_are_not_modules() {
        let t = of_text(
            "ffffffff81000000 T _text\nffffffffc0000000 t nfs_x\t[nfs]\n\
             ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]\n\
             ffffffffc0202000 t bpf_prog_1\t[bpf]\nffffffffc0203000 t kp\t[__builtin__kprobes]\n",
        );
        assert_eq!(t.modules(), ["nfs"]);
    }

    #[test]
    fn a_bad_index_of_a_lone_symbol_is_said_in_the_singular() {
        let t = of_text(
            "ffffffff81000000 T _text\nffffffff83000000 D lone\nffffffff83000100 D two\nffffffff83000200 D two\n",
        );
        let one = t.lookup("lone", Some(1)).unwrap_err().to_string();
        assert!(
            one.contains("there is only one symbol named `lone`; drop the @1"),
            "{one}"
        );
        let two = t.lookup("two", Some(5)).unwrap_err().to_string();
        assert!(
            two.contains("there are only 2 symbols named `two` (use @0..@1)"),
            "{two}"
        );
    }

    use super::*;
    use crate::kallsyms;
    use std::path::Path;

    const FIXTURE: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81000000 T srso_alias_untrain_ret
ffffffff81000040 T do_thing
ffffffff81000100 t local_helper
ffffffff81000180 t dup_static
ffffffff81000200 t dup_static
ffffffff81000300 T vfs_read
ffffffff81000400 T vfs_write
ffffffff83000000 D __start_init_stack
ffffffff83100000 D __start_once
";

    fn table() -> SymbolTable {
        of_text(FIXTURE)
    }

    /// A table of kallsyms `text`.
    fn of_text(text: &str) -> SymbolTable {
        kallsyms::from_text(text, Path::new("fixture")).unwrap()
    }

    #[test]
    fn symbolizes_with_inferred_sizes() {
        let t = table();
        let s = t.symbolize(0xffffffff810000bb).unwrap();
        assert_eq!(s.to_string(), "do_thing+0x7b/0xc0");
        assert_eq!(
            t.symbolize(0xffffffff81000300).unwrap().to_string(),
            "vfs_read+0x0/0x100"
        );
        assert!(t.symbolize(0xffffffff80000000).is_none());
        // The last symbol has no next neighbour, so no size: any offset is accepted and none is printed.
        assert_eq!(
            t.symbolize(0xffffffff83100010).unwrap().to_string(),
            "__start_once+0x10"
        );
    }

    /// Every name at one address is sized up to the next address, not only the last in name order: the
    /// running kernel lists `thermal_genl_event_tz_trip_down` (T) and `thermal_genl_event_tz_trip_up` (t) at
    /// one address, and the global one, which names the frame, printed without its size.
    #[test]
    fn every_alias_is_sized_to_the_next_address() {
        let t = of_text(
            "ffffffff81e3f600 T __pfx_thermal_genl_event_tz_trip_down
             ffffffff81e3f600 t __pfx_thermal_genl_event_tz_trip_up
             ffffffff81e3f610 T thermal_genl_event_tz_trip_down
             ffffffff81e3f610 t thermal_genl_event_tz_trip_up
             ffffffff81e3f6c0 t __pfx_thermal_genl_event_threshold_add
             ffffffff83000000 D a_word
ffffffff83000000 D b_word
ffffffff83000004 D next_word
             ffffffff83000008 D last
",
        );
        assert_eq!(
            t.symbolize(0xffffffff81e3f63a).unwrap().to_string(),
            "thermal_genl_event_tz_trip_down+0x2a/0xb0"
        );
        for name in [
            "thermal_genl_event_tz_trip_down",
            "thermal_genl_event_tz_trip_up",
        ] {
            assert_eq!(t.lookup(name, None).unwrap().size, Some(0xb0), "{name}");
        }
        // A data alias unsized would be watched 8 bytes long, over its neighbour.
        for name in ["a_word", "b_word"] {
            assert_eq!(t.lookup(name, None).unwrap().size, Some(4), "{name}");
        }
    }

    #[test]
    fn aliases_prefer_a_function_name() {
        let t = table();
        assert_eq!(
            t.symbolize(0xffffffff81000010).unwrap().symbol.name,
            "srso_alias_untrain_ret"
        );
    }

    #[test]
    fn lookup_unique_ambiguous_and_indexed() {
        let t = table();
        assert_eq!(t.lookup("vfs_read", None).unwrap().addr, 0xffffffff81000300);
        assert_eq!(t.lookup("_text", None).unwrap().addr, 0xffffffff81000000);
        match t.lookup("dup_static", None).unwrap_err() {
            LookupError::Ambiguous { candidates, .. } => assert_eq!(candidates.len(), 2),
            e => panic!("unexpected {e:?}"),
        }
        assert_eq!(
            t.lookup("dup_static", Some(1)).unwrap().addr,
            0xffffffff81000200
        );
        assert!(matches!(
            t.lookup("dup_static", Some(2)),
            Err(LookupError::BadIndex { count: 2, .. })
        ));
    }

    #[test]
    fn missing_name_without_data_symbols_names_the_cause() {
        let err = table().lookup("jiffies", None).unwrap_err();
        assert!(matches!(err, LookupError::NoDataSymbols { .. }));
        let msg = err.to_string();
        assert!(
            msg.contains("CONFIG_KALLSYMS_ALL")
                && msg.contains("use a vmlinux or System.map of this kernel")
                && !msg.contains("--"),
            "{msg}"
        );
    }

    #[test]
    fn missing_name_with_data_symbols_suggests() {
        let mut text = String::from(FIXTURE);
        for i in 0..20 {
            text.push_str(&format!("ffffffff8400{i:04x} d var_{i}\n"));
        }
        text.push_str("ffffffff85000000 D jiffies\nffffffff85000008 D jiffies_64\n");
        let t = kallsyms::from_text(&text, Path::new("fixture")).unwrap();
        match t.lookup("jiffes", None).unwrap_err() {
            LookupError::Unknown { suggestions, .. } => assert_eq!(suggestions[0], "jiffies"),
            e => panic!("unexpected {e:?}"),
        }
        assert_eq!(t.lookup("jiffies", None).unwrap().size, Some(8));
    }

    #[test]
    fn a_name_looked_up_again_is_not_scanned_again() {
        let t = table();
        let first: Vec<u64> = t.by_name("dup_static").map(|s| s.addr).collect();
        for _ in 0..2 * LINEAR_LOOKUPS {
            let again: Vec<u64> = t.by_name("dup_static").map(|s| s.addr).collect();
            assert_eq!(again, first);
        }
        assert_eq!(t.scans.load(Ordering::Relaxed), 1);
        assert!(t.names.get().is_none(), "no index for one name");
        assert_eq!(first, [0xffffffff81000180, 0xffffffff81000200]);
    }

    #[test]
    fn scanned_and_indexed_lookups_agree() {
        let t = table();
        let names = ["dup_static", "_text", "vfs_write", "nope", "__start_once"];
        let scanned: Vec<Vec<u64>> = names
            .iter()
            .map(|n| t.by_name(n).map(|s| s.addr).collect())
            .collect();
        for i in 0..LINEAR_LOOKUPS {
            t.by_name(&format!("absent_{i}")).count();
        }
        assert!(
            t.names.get().is_some(),
            "the index is built after the scans"
        );
        for (n, want) in names.iter().zip(&scanned) {
            assert_eq!(
                &t.by_name(n).map(|s| s.addr).collect::<Vec<_>>(),
                want,
                "{n}"
            );
        }
        assert_eq!(scanned[0], [0xffffffff81000180, 0xffffffff81000200]);
        assert!(scanned[3].is_empty());
    }

    #[test]
    fn module_symbols_are_found_by_name_and_within_their_module() {
        let t =
            kallsyms::from_text(crate::testing::MODULES_KALLSYMS, Path::new("fixture")).unwrap();
        assert_eq!(t.modules(), ["bar", "foo"]);
        // A plain name finds a module's symbol; one in several places is ambiguous as before.
        assert_eq!(
            t.lookup("bar_fn", None).unwrap().module.map(|m| &**m),
            Some("bar")
        );
        assert_eq!(
            t.lookup("counter", None).unwrap_err().to_string(),
            "symbol `counter` is ambiguous (3 symbols): counter@0=0xffffffff83000000 (D) \
             counter@1=0xffffffffc0001080 (d) [foo] counter@2=0xffffffffc0002040 (d) [bar]; choose one \
             with counter@N, MODULE:counter or 0xADDR"
        );
        let foo = t.lookup_in_module("counter", "foo", None).unwrap();
        assert_eq!(
            (foo.addr, foo.module.map(|m| &**m)),
            (0xffffffffc0001080, Some("foo"))
        );
        let bar = t.lookup_in_module("counter", "bar", None).unwrap();
        assert_eq!((bar.addr, bar.size), (0xffffffffc0002040, Some(8)));
        // Sizes stop at the module's last symbol: bar_end has no neighbour in bar.
        assert_eq!(
            t.lookup_in_module("bar_end", "bar", None).unwrap().size,
            None
        );
        // `@N` counts within the module.
        assert_eq!(
            t.lookup_in_module("foo_dup", "foo", None)
                .unwrap_err()
                .to_string(),
            "symbol `foo_dup` is ambiguous (2 symbols): foo_dup@0=0xffffffffc0001090 (d) [foo] \
             foo_dup@1=0xffffffffc00010a0 (d) [foo]; choose one with foo_dup@N or 0xADDR"
        );
        assert_eq!(
            t.lookup_in_module("foo_dup", "foo", Some(1)).unwrap().addr,
            0xffffffffc00010a0
        );
        // A vmlinux symbol is not in any module.
        match t.lookup_in_module("do_thing", "foo", None).unwrap_err() {
            LookupError::NotInModule { suggestions, .. } => assert!(suggestions.is_empty()),
            e => panic!("unexpected {e:?}"),
        }
        match t.lookup_in_module("foo_du", "foo", None).unwrap_err() {
            LookupError::NotInModule { suggestions, .. } => assert_eq!(suggestions, ["foo_dup"]),
            e => panic!("unexpected {e:?}"),
        }
        let e = t.lookup_in_module("x", "baz", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`baz:x`: no module `baz` in these symbols (modules: bar, foo)"
        );
        assert_eq!(
            table()
                .lookup_in_module("x", "baz", None)
                .unwrap_err()
                .to_string(),
            "`baz:x`: no module `baz` in these symbols (they hold no module symbols at all)"
        );
    }

    /// How long a failed lookup's suggestions take on the running kernel's kallsyms (~122k names): every
    /// name is scored. Run with `cargo test --release -p ksymwatch-symbols suggest_speed -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore = "bench: times suggestions over /proc/kallsyms"]
    fn suggest_speed_on_kallsyms() {
        let t = match kallsyms::load(Path::new("/proc/kallsyms")) {
            Ok(t) => t,
            Err(e) => return crate::testing::skip(format_args!("/proc/kallsyms: {e}")),
        };
        let names = [
            "jiffes",
            "vfs_wirte",
            "ksys_write",
            "tcp_sendmsg_locked_typo",
            "x",
            "a_rather_long_name_that_matches_nothing_in_the_kernel_at_all_xyz",
        ];
        for name in names {
            let mut runs: Vec<std::time::Duration> = (0..15)
                .map(|_| {
                    let start = std::time::Instant::now();
                    std::hint::black_box(t.suggest(name, 5));
                    start.elapsed()
                })
                .collect();
            runs.sort();
            println!(
                "suggest({name:?}) over {} names: median {:?} (min {:?}) -> {:?}",
                t.len(),
                runs[7],
                runs[0],
                t.suggest(name, 5)
            );
        }
    }
}
