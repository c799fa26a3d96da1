//! The symbol table's storage: a column per field and one blob of names. A table read from the symbol
//! cache is used where the file is mapped, in the layout below (no allocation per symbol, no copy of the
//! names); a table parsed in this process keeps the vectors it was parsed into, and is laid out only when
//! the cache is written.
//!
//! **Layout** (little-endian; every read is bounds-checked and alignment-free): four `u64` counts (symbols
//! `n`, modules `m`, name bytes, module-name bytes), then the columns: `n` addresses (`u64`, sorted), `n`
//! sizes (`u64`, size + 1 or 0 for unknown), `n` name ends (`u32`: name `i` is the blob from the end of name
//! `i - 1` to its end), `n` type letters (`u8`), `n` modules (`u32`, index + 1 or 0 for none), `m`
//! module-name ends (`u32`), the name blob, the module-name blob.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use memmap2::Mmap;

use crate::symbol::Symbol;

const COUNTS: usize = 4 * 8;

/// Where a layout's bytes live: a mapped cache file, or (in tests) a buffer.
pub(crate) enum Bytes {
    #[cfg(test)]
    Owned(Vec<u8>),
    Mapped(Mmap),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            #[cfg(test)]
            Bytes::Owned(v) => v,
            Bytes::Mapped(m) => m,
        }
    }
}

/// The columns of one table, and where they live.
pub(crate) struct Columns {
    store: Store,
    len: usize,
    module_names: Vec<Arc<str>>,
}

/// A table parsed in this process keeps the vectors it was parsed into: laying them out as one buffer
/// would copy every column into fresh memory (each page faulted in, several milliseconds for a kernel's
/// table) before the first lookup. Only a cache write needs the layout, and it makes it on its own thread.
#[derive(Clone)]
enum Store {
    Built(Arc<Built>),
    Laid(Arc<Laid>),
}

/// One vector per column, in the layout's order and meaning.
struct Built {
    addrs: Vec<u64>,
    sizes: Vec<u64>,
    name_ends: Vec<u32>,
    types: Vec<u8>,
    modules: Vec<u32>,
    names: Vec<u8>,
}

/// `bytes[start..]` is the layout above; the offsets are where each column begins.
struct Laid {
    bytes: Bytes,
    start: usize,
    addrs: usize,
    sizes: usize,
    name_ends: usize,
    types: usize,
    modules: usize,
    names: usize,
}

impl std::fmt::Debug for Columns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mapped = matches!(&self.store, Store::Laid(l) if matches!(l.bytes, Bytes::Mapped(_)));
        f.debug_struct("Columns")
            .field("symbols", &self.len)
            .field("modules", &self.module_names)
            .field("mapped", &mapped)
            .finish()
    }
}

impl Default for Columns {
    fn default() -> Columns {
        Builder::default().finish(false)
    }
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

/// Where each column of a layout starting at `start` begins, and where the layout ends; `None` if the
/// counts overflow.
fn offsets(
    start: usize,
    n: usize,
    m: usize,
    name_bytes: usize,
    module_bytes: usize,
) -> Option<[usize; 8]> {
    let addrs = start.checked_add(COUNTS)?;
    let sizes = addrs.checked_add(n.checked_mul(8)?)?;
    let name_ends = sizes.checked_add(n.checked_mul(8)?)?;
    let types = name_ends.checked_add(n.checked_mul(4)?)?;
    let modules = types.checked_add(n)?;
    let module_ends = modules.checked_add(n.checked_mul(4)?)?;
    let names = module_ends.checked_add(m.checked_mul(4)?)?;
    let module_names = names.checked_add(name_bytes)?;
    let end = module_names.checked_add(module_bytes)?;
    Some([
        addrs,
        sizes,
        name_ends,
        types,
        modules,
        module_ends,
        names,
        end,
    ])
}

impl Columns {
    /// The columns laid out in `bytes[start..]`, or `None` unless that is exactly one valid layout:
    /// counts that fit, addresses in order, name ends rising within the blob, type letters, module
    /// indexes in range and UTF-8 module names. Names are checked as they are read ([`Columns::name`]).
    pub(crate) fn from_bytes(bytes: Bytes, start: usize) -> Option<Columns> {
        let b: &[u8] = &bytes;
        if b.len() < start.checked_add(COUNTS)? {
            return None;
        }
        let count = |i: usize| usize::try_from(le64(b, start + 8 * i)).ok();
        let (n, m, name_bytes, module_bytes) = (count(0)?, count(1)?, count(2)?, count(3)?);
        let [addrs, sizes, name_ends, types, modules, module_ends, names, end] =
            offsets(start, n, m, name_bytes, module_bytes)?;
        if end != b.len() || u32::try_from(name_bytes.max(module_bytes)).is_err() {
            return None;
        }
        let (mut prev_addr, mut prev_end) = (0u64, 0u32);
        for i in 0..n {
            let addr = le64(b, addrs + 8 * i);
            let name_end = le32(b, name_ends + 4 * i);
            let ty = b[types + i];
            let module = le32(b, modules + 4 * i);
            if addr < prev_addr
                || name_end < prev_end
                || name_end as usize > name_bytes
                || !ty.is_ascii_graphic()
                || module as usize > m
            {
                return None;
            }
            (prev_addr, prev_end) = (addr, name_end);
        }
        let blob = &b[names + name_bytes..end];
        let mut module_names = Vec::with_capacity(m);
        let mut from = 0usize;
        for j in 0..m {
            let to = le32(b, module_ends + 4 * j) as usize;
            let name = std::str::from_utf8(blob.get(from..to)?).ok()?;
            module_names.push(Arc::from(name));
            from = to;
        }
        let laid = Laid {
            start,
            addrs,
            sizes,
            name_ends,
            types,
            modules,
            names,
            bytes,
        };
        Some(Columns {
            store: Store::Laid(Arc::new(laid)),
            len: n,
            module_names,
        })
    }

    /// The layout's bytes: borrowed when the table came from them, made now for a table built in memory.
    pub(crate) fn bytes(&self) -> Cow<'_, [u8]> {
        match &self.store {
            Store::Laid(l) => Cow::Borrowed(&l.bytes[l.start..]),
            Store::Built(b) => Cow::Owned(self.lay_out(b)),
        }
    }

    /// Another handle on the same columns, for a thread (the cache write) to read while this one is used.
    pub(crate) fn share(&self) -> Columns {
        Columns {
            store: self.store.clone(),
            len: self.len,
            module_names: self.module_names.clone(),
        }
    }

    fn lay_out(&self, b: &Built) -> Vec<u8> {
        let n = self.len;
        let m = self.module_names.len();
        let module_bytes: usize = self.module_names.iter().map(|s| s.len()).sum();
        let total = COUNTS + n * 25 + m * 4 + b.names.len() + module_bytes;
        let mut out = Vec::with_capacity(total);
        for c in [n, m, b.names.len(), module_bytes] {
            out.extend_from_slice(&(c as u64).to_le_bytes());
        }
        out.extend(b.addrs.iter().flat_map(|a| a.to_le_bytes()));
        out.extend(b.sizes.iter().flat_map(|s| s.to_le_bytes()));
        out.extend(b.name_ends.iter().flat_map(|e| e.to_le_bytes()));
        out.extend_from_slice(&b.types);
        out.extend(b.modules.iter().flat_map(|k| k.to_le_bytes()));
        let mut end = 0u32;
        for name in &self.module_names {
            end += name.len() as u32;
            out.extend_from_slice(&end.to_le_bytes());
        }
        out.extend_from_slice(&b.names);
        for name in &self.module_names {
            out.extend_from_slice(name.as_bytes());
        }
        out
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn addr(&self, i: usize) -> u64 {
        match &self.store {
            Store::Built(b) => b.addrs[i],
            Store::Laid(l) => le64(&l.bytes, l.addrs + 8 * i),
        }
    }

    /// The size, if known.
    pub(crate) fn size(&self, i: usize) -> Option<u64> {
        match &self.store {
            Store::Built(b) => b.sizes[i],
            Store::Laid(l) => le64(&l.bytes, l.sizes + 8 * i),
        }
        .checked_sub(1)
    }

    pub(crate) fn type_char(&self, i: usize) -> char {
        char::from(match &self.store {
            Store::Built(b) => b.types[i],
            Store::Laid(l) => l.bytes[l.types + i],
        })
    }

    fn module_index(&self, i: usize) -> usize {
        (match &self.store {
            Store::Built(b) => b.modules[i],
            Store::Laid(l) => le32(&l.bytes, l.modules + 4 * i),
        }) as usize
    }

    pub(crate) fn module(&self, i: usize) -> Option<&Arc<str>> {
        match self.module_index(i) {
            0 => None,
            k => self.module_names.get(k - 1),
        }
    }

    pub(crate) fn name_bytes(&self, i: usize) -> &[u8] {
        match &self.store {
            Store::Built(b) => {
                let from = i.checked_sub(1).map_or(0, |p| b.name_ends[p] as usize);
                &b.names[from..b.name_ends[i] as usize]
            }
            Store::Laid(l) => {
                let end = le32(&l.bytes, l.name_ends + 4 * i) as usize;
                let from = i
                    .checked_sub(1)
                    .map_or(0, |p| le32(&l.bytes, l.name_ends + 4 * p) as usize);
                &l.bytes[l.names + from..l.names + end]
            }
        }
    }

    /// The first position at or after `from` whose name is `wanted`. Lengths are compared before bytes:
    /// a lookup before the name index exists scans every name, several times per start-up.
    pub(crate) fn find_name(&self, wanted: &[u8], from: usize) -> Option<usize> {
        let len = wanted.len();
        let found = |start: usize, end: usize, names: &[u8]| {
            end.checked_sub(start) == Some(len) && names.get(start..end) == Some(wanted)
        };
        match &self.store {
            Store::Built(b) => {
                let mut start = from.checked_sub(1).map_or(0, |p| b.name_ends[p] as usize);
                for (i, &end) in b.name_ends.iter().enumerate().skip(from) {
                    if found(start, end as usize, &b.names) {
                        return Some(i);
                    }
                    start = end as usize;
                }
                None
            }
            Store::Laid(_) => (from..self.len).find(|&i| self.name_bytes(i) == wanted),
        }
    }

    pub(crate) fn name(&self, i: usize) -> &str {
        std::str::from_utf8(self.name_bytes(i)).unwrap_or_default()
    }

    /// The first position whose address is above `addr` (the columns are sorted by address).
    pub(crate) fn first_above(&self, addr: u64) -> usize {
        self.partition(0, self.len, |a| a <= addr)
    }

    /// The first position in `lo..hi` whose address fails `below` (which holds for a prefix).
    pub(crate) fn partition(
        &self,
        mut lo: usize,
        mut hi: usize,
        below: impl Fn(u64) -> bool,
    ) -> usize {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if below(self.addr(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// Collects symbols, then sorts them (by address, then name), optionally infers sizes, and lays them out.
#[derive(Default)]
pub(crate) struct Builder {
    addrs: Vec<u64>,
    sizes: Vec<u64>,
    name_ends: Vec<u32>,
    types: Vec<u8>,
    modules: Vec<u32>,
    names: String,
    module_names: Vec<Arc<str>>,
    module_index: HashMap<Arc<str>, u32>,
    /// The module of the last symbol pushed: a module's symbols come together, so this answers most.
    last_module: Option<(Arc<str>, u32)>,
}

impl Builder {
    pub(crate) fn with_capacity(symbols: usize, name_bytes: usize) -> Builder {
        Builder {
            addrs: Vec::with_capacity(symbols),
            sizes: Vec::with_capacity(symbols),
            name_ends: Vec::with_capacity(symbols),
            types: Vec::with_capacity(symbols),
            modules: Vec::with_capacity(symbols),
            names: String::with_capacity(name_bytes),
            ..Builder::default()
        }
    }

    /// Adds one symbol. A name blob past 4 GiB cannot be laid out; no symbol source comes near it, and such
    /// a symbol is dropped rather than mislabelled.
    pub(crate) fn push(
        &mut self,
        name: &str,
        addr: u64,
        size: Option<u64>,
        type_char: char,
        module: Option<&str>,
    ) {
        let Ok(end) = u32::try_from(self.names.len() + name.len()) else {
            return;
        };
        let module = module.map_or(0, |m| self.module(m));
        self.names.push_str(name);
        self.name_ends.push(end);
        self.addrs.push(addr);
        self.sizes.push(size.map_or(0, |s| s.saturating_add(1)));
        // Type letters are ASCII; anything else is stored as `?` ("unknown"), which nm uses too.
        self.types.push(
            u8::try_from(type_char)
                .ok()
                .filter(u8::is_ascii_graphic)
                .unwrap_or(b'?'),
        );
        self.modules.push(module);
    }

    pub(crate) fn push_symbol(&mut self, s: &Symbol) {
        self.push(&s.name, s.addr, s.size, s.type_char, s.module.as_deref());
    }

    fn module(&mut self, name: &str) -> u32 {
        if let Some((last, k)) = &self.last_module {
            if **last == *name {
                return *k;
            }
        }
        let k = match self.module_index.get(name) {
            Some(&k) => k,
            None => {
                let shared: Arc<str> = Arc::from(name);
                self.module_names.push(shared.clone());
                let k = self.module_names.len() as u32;
                self.module_index.insert(shared, k);
                k
            }
        };
        self.last_module = Some((self.module_names[k as usize - 1].clone(), k));
        k
    }

    fn name(&self, i: usize) -> &str {
        let from = if i == 0 {
            0
        } else {
            self.name_ends[i - 1] as usize
        };
        &self.names[from..self.name_ends[i] as usize]
    }

    /// Sorted by address, then name. With `infer_sizes`, a symbol without a size gets the distance to the
    /// next higher address in the same module (kallsyms and System.map carry no sizes).
    pub(crate) fn finish(self, infer_sizes: bool) -> Columns {
        let mut b = if self.addrs.windows(2).all(|w| w[0] <= w[1]) {
            // kallsyms and System.map arrive in address order: only runs of aliases (one address, several
            // names) may be out of name order, and they are put right where they are.
            let mut b = self;
            b.order_aliases();
            b
        } else {
            self.sorted()
        };
        if infer_sizes {
            b.infer_sizes();
        }
        let built = Built {
            addrs: b.addrs,
            sizes: b.sizes,
            name_ends: b.name_ends,
            types: b.types,
            modules: b.modules,
            names: b.names.into_bytes(),
        };
        Columns {
            len: built.addrs.len(),
            store: Store::Built(Arc::new(built)),
            module_names: b.module_names,
        }
    }

    /// Sorts each run of equal addresses by name (stably), in place: names, name ends and the per-symbol
    /// columns of the run are rewritten within the run's own span.
    fn order_aliases(&mut self) {
        let n = self.addrs.len();
        let mut from = 0;
        while from < n {
            // Runs are a few symbols long: a scan, where a binary search over the rest of the table would
            // miss the cache at every step (most of a kallsyms load's time after the read, measured).
            let addr = self.addrs[from];
            let to = from
                + self.addrs[from..]
                    .iter()
                    .take_while(|&&a| a == addr)
                    .count();
            let ordered = (from + 1..to).all(|i| self.name(i - 1) <= self.name(i));
            if !ordered {
                self.reorder_run(from, to);
            }
            from = to;
        }
    }

    fn reorder_run(&mut self, from: usize, to: usize) {
        let mut order: Vec<usize> = (from..to).collect();
        order.sort_by(|&i, &j| self.name(i).cmp(self.name(j)));
        let first = from.checked_sub(1).map_or(0, |p| self.name_ends[p]);
        let mut names = String::new();
        let mut ends = Vec::with_capacity(order.len());
        for &i in &order {
            names.push_str(self.name(i));
            ends.push(first + names.len() as u32);
        }
        let span = first as usize..self.name_ends[to - 1] as usize;
        self.names.replace_range(span, &names);
        self.name_ends[from..to].copy_from_slice(&ends);
        let pick = |v: &[u64]| order.iter().map(|&i| v[i]).collect::<Vec<_>>();
        let sizes = pick(&self.sizes);
        self.sizes[from..to].copy_from_slice(&sizes);
        let types: Vec<u8> = order.iter().map(|&i| self.types[i]).collect();
        self.types[from..to].copy_from_slice(&types);
        let modules: Vec<u32> = order.iter().map(|&i| self.modules[i]).collect();
        self.modules[from..to].copy_from_slice(&modules);
    }

    /// The symbols in (address, name) order, moved into new columns: sources in no particular order
    /// (a vmlinux's symbol table).
    fn sorted(self) -> Builder {
        let n = self.addrs.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&i, &j| {
            self.addrs[i]
                .cmp(&self.addrs[j])
                .then_with(|| self.name(i).cmp(self.name(j)))
        });
        let mut out = Builder::with_capacity(n, self.names.len());
        for i in order {
            out.names.push_str(self.name(i));
            out.name_ends.push(out.names.len() as u32);
            out.addrs.push(self.addrs[i]);
            out.sizes.push(self.sizes[i]);
            out.types.push(self.types[i]);
            out.modules.push(self.modules[i]);
        }
        out.module_names = self.module_names;
        out
    }

    /// Walks backwards remembering the first symbol of the next higher address, so each symbol is sized in
    /// O(1). Every name of a run of aliases gets the same size: the one picked to name a frame or a target
    /// may be any of them.
    fn infer_sizes(&mut self) {
        let mut next: Option<usize> = None;
        for k in (0..self.addrs.len()).rev() {
            let addr = self.addrs[k];
            if self.addrs.get(k + 1).is_some_and(|&a| a > addr) {
                next = Some(k + 1);
            }
            if let (0, Some(j)) = (self.sizes[k], next) {
                if self.modules[j] == self.modules[k] {
                    self.sizes[k] = (self.addrs[j] - addr).saturating_add(1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns() -> Columns {
        let mut b = Builder::default();
        // Out of order, two modules interleaved with the kernel's symbols.
        b.push("b_fn", 0x2000, None, 't', Some("m1"));
        b.push("_text", 0x1000, None, 'T', None);
        b.push("a_fn", 0x2000, None, 't', Some("m1"));
        b.push("c_fn", 0x2100, None, 't', Some("m2"));
        b.push("x", 0x1010, Some(4), 'D', None);
        b.finish(true)
    }

    #[test]
    fn sorts_by_address_then_name_and_sizes_within_a_module() {
        let c = columns();
        let names: Vec<&str> = (0..c.len()).map(|i| c.name(i)).collect();
        assert_eq!(names, ["_text", "x", "a_fn", "b_fn", "c_fn"]);
        let sizes: Vec<Option<u64>> = (0..c.len()).map(|i| c.size(i)).collect();
        // `b_fn`'s neighbour `c_fn` is in another module: no size. `x` kept its own.
        assert_eq!(sizes, [Some(0x10), Some(4), None, None, None]);
        assert_eq!(c.module(2).map(|m| &**m), Some("m1"));
        assert_eq!(c.module(4).map(|m| &**m), Some("m2"));
        assert_eq!(c.module(0), None);
        assert_eq!(c.first_above(0x2000), 4);
    }

    type Row = (String, u64, Option<u64>, char, Option<String>);

    fn rows(c: &Columns) -> Vec<Row> {
        (0..c.len())
            .map(|i| {
                let module = c.module(i).map(|m| m.to_string());
                (
                    c.name(i).to_string(),
                    c.addr(i),
                    c.size(i),
                    c.type_char(i),
                    module,
                )
            })
            .collect()
    }

    #[test]
    fn aliases_in_address_order_are_ordered_in_place_as_a_full_sort_orders_them() {
        // Address order with two alias runs out of name order, as /proc/kallsyms lists `_text`/`_stext`.
        let input = [
            ("srso_alias", 0x1000, 'T', None),
            ("_text", 0x1000, 'T', None),
            ("_stext", 0x1000, 't', None),
            ("one", 0x1010, 'T', None),
            ("zz", 0x2000, 't', Some("m")),
            ("aa", 0x2000, 'T', Some("m")),
            ("last", 0x2040, 't', Some("m")),
        ];
        let mut in_order = Builder::default();
        for (name, addr, ty, module) in input {
            in_order.push(name, addr, None, ty, module);
        }
        // The same symbols out of address order take the full sort.
        let mut shuffled = Builder::default();
        for &(name, addr, ty, module) in input.iter().rev() {
            shuffled.push(name, addr, None, ty, module);
        }
        let (a, b) = (in_order.finish(true), shuffled.finish(true));
        assert_eq!(rows(&a), rows(&b));
        let names: Vec<String> = rows(&a).into_iter().map(|r| r.0).collect();
        assert_eq!(
            names,
            ["_stext", "_text", "srso_alias", "one", "aa", "zz", "last"]
        );
        // The last of a run of aliases is sized up to the next address.
        assert_eq!(a.size(2), Some(0x10));
        assert_eq!(a.size(5), Some(0x40));
        // Laid out (what the cache stores) they read back the same.
        let back = Columns::from_bytes(Bytes::Owned(a.bytes().into_owned()), 0).unwrap();
        assert_eq!(rows(&back), rows(&a));
    }

    #[test]
    fn the_bytes_make_the_same_columns_and_nothing_else_does() {
        let c = columns();
        let mut copy = vec![0xaa; 3];
        copy.extend_from_slice(&c.bytes());
        let back = Columns::from_bytes(Bytes::Owned(copy.clone()), 3).unwrap();
        for i in 0..c.len() {
            assert_eq!(
                (
                    back.name(i),
                    back.addr(i),
                    back.size(i),
                    back.type_char(i),
                    back.module(i)
                ),
                (c.name(i), c.addr(i), c.size(i), c.type_char(i), c.module(i))
            );
        }
        assert!(Columns::from_bytes(Bytes::Owned(copy[..copy.len() - 1].to_vec()), 3).is_none());
        copy.push(0);
        assert!(Columns::from_bytes(Bytes::Owned(copy), 3).is_none());
        assert!(Columns::from_bytes(Bytes::Owned(Vec::new()), 0).is_none());
    }
}
