//! The symbol table's storage: one byte buffer holding a column per field and one blob of names, the same
//! bytes in memory and in the symbol cache file, so a cached table is used where it is mapped instead of
//! being rebuilt (no allocation per symbol, no copy of the names).
//!
//! **Layout** (little-endian; every read is bounds-checked and alignment-free): four `u64` counts (symbols
//! `n`, modules `m`, name bytes, module-name bytes), then the columns: `n` addresses (`u64`, sorted), `n`
//! sizes (`u64`, size + 1 or 0 for unknown), `n` name ends (`u32`: name `i` is the blob from the end of name
//! `i - 1` to its end), `n` type letters (`u8`), `n` modules (`u32`, index + 1 or 0 for none), `m`
//! module-name ends (`u32`), the name blob, the module-name blob.

use std::collections::HashMap;
use std::sync::Arc;

use memmap2::Mmap;

use crate::Symbol;

const COUNTS: usize = 4 * 8;

/// Where the bytes live: built in memory, or a mapped cache file.
pub(crate) enum Bytes {
    Owned(Vec<u8>),
    Mapped(Mmap),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Mapped(m) => m,
        }
    }
}

/// The columns of one table: `bytes[start..]` is the layout above; the offsets are where each column begins.
pub(crate) struct Columns {
    bytes: Bytes,
    start: usize,
    len: usize,
    addrs: usize,
    sizes: usize,
    name_ends: usize,
    types: usize,
    modules: usize,
    names: usize,
    /// Module names, decoded once (a handful): a symbol's module is shared, not copied.
    module_names: Vec<Arc<str>>,
}

impl std::fmt::Debug for Columns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Columns")
            .field("symbols", &self.len)
            .field("modules", &self.module_names)
            .field("mapped", &matches!(self.bytes, Bytes::Mapped(_)))
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

/// Column offsets for `n` symbols and `m` modules from `start`, and the end of the whole; `None` on overflow.
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
    /// The columns in `bytes[start..]`, checked so that no later read can fail: the length matches the
    /// counts, addresses ascend, name ends ascend within the blob, type letters are printable ASCII and
    /// module indices exist. `None` on any doubt. One pass over the fixed-width columns; the names
    /// themselves are checked as UTF-8 when read.
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
        Some(Columns {
            start,
            len: n,
            addrs,
            sizes,
            name_ends,
            types,
            modules,
            names,
            module_names,
            bytes,
        })
    }

    /// The layout's bytes (what the cache file stores after its key).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn addr(&self, i: usize) -> u64 {
        le64(&self.bytes, self.addrs + 8 * i)
    }

    pub(crate) fn size(&self, i: usize) -> Option<u64> {
        le64(&self.bytes, self.sizes + 8 * i).checked_sub(1)
    }

    pub(crate) fn type_char(&self, i: usize) -> char {
        char::from(self.bytes[self.types + i])
    }

    /// Module index + 1, or 0 for none.
    fn module_index(&self, i: usize) -> usize {
        le32(&self.bytes, self.modules + 4 * i) as usize
    }

    pub(crate) fn module(&self, i: usize) -> Option<&Arc<str>> {
        match self.module_index(i) {
            0 => None,
            k => self.module_names.get(k - 1),
        }
    }

    /// The name's bytes (checked to lie in the blob when the columns were made).
    pub(crate) fn name_bytes(&self, i: usize) -> &[u8] {
        let end = le32(&self.bytes, self.name_ends + 4 * i) as usize;
        let from = match i {
            0 => 0,
            _ => le32(&self.bytes, self.name_ends + 4 * (i - 1)) as usize,
        };
        &self.bytes[self.names + from..self.names + end]
    }

    /// The name. The builder stores only `str`s, so a name that is not UTF-8 is a damaged file that passed
    /// the checksum; it reads as empty rather than stopping a trace.
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

    /// Sorted and laid out. With `infer_sizes`, a symbol without a size gets the distance to the next higher
    /// address in the same module (kallsyms and System.map carry no sizes).
    pub(crate) fn finish(self, infer_sizes: bool) -> Columns {
        let n = self.addrs.len();
        let before = |i: usize, j: usize| {
            self.addrs[i]
                .cmp(&self.addrs[j])
                .then_with(|| self.name(i).cmp(self.name(j)))
        };
        // kallsyms and System.map arrive sorted: checking is one pass, sorting would be many.
        let order: Option<Vec<usize>> = (1..n).any(|i| before(i - 1, i).is_gt()).then(|| {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&i, &j| before(i, j));
            order
        });
        let at = |k: usize| order.as_ref().map_or(k, |o| o[k]);
        let mut sizes: Vec<u64> = (0..n).map(|k| self.sizes[at(k)]).collect();
        if infer_sizes {
            // Walk backwards remembering the next distinct address, so each symbol is sized in O(1).
            let mut next: Option<usize> = None;
            for k in (0..n).rev() {
                let (i, addr) = (at(k), self.addrs[at(k)]);
                if let (0, Some(nk)) = (sizes[k], next) {
                    let j = at(nk);
                    if self.modules[j] == self.modules[i] && self.addrs[j] > addr {
                        sizes[k] = (self.addrs[j] - addr).saturating_add(1);
                    }
                }
                match next {
                    Some(nk) if self.addrs[at(nk)] == addr => {}
                    _ => next = Some(k),
                }
            }
        }
        self.lay_out(&sizes, at)
    }

    fn lay_out(&self, sizes: &[u64], at: impl Fn(usize) -> usize) -> Columns {
        let n = self.addrs.len();
        let m = self.module_names.len();
        let module_bytes: usize = self.module_names.iter().map(|s| s.len()).sum();
        let total = COUNTS + n * 25 + m * 4 + self.names.len() + module_bytes;
        let mut out = Vec::with_capacity(total);
        for c in [n, m, self.names.len(), module_bytes] {
            out.extend_from_slice(&(c as u64).to_le_bytes());
        }
        for k in 0..n {
            out.extend_from_slice(&self.addrs[at(k)].to_le_bytes());
        }
        for s in sizes {
            out.extend_from_slice(&s.to_le_bytes());
        }
        let mut end = 0u32;
        let mut names = Vec::with_capacity(self.names.len());
        for k in 0..n {
            let name = self.name(at(k));
            names.extend_from_slice(name.as_bytes());
            end += name.len() as u32;
            out.extend_from_slice(&end.to_le_bytes());
        }
        out.extend((0..n).map(|k| self.types[at(k)]));
        for k in 0..n {
            out.extend_from_slice(&self.modules[at(k)].to_le_bytes());
        }
        let mut end = 0u32;
        for name in &self.module_names {
            end += name.len() as u32;
            out.extend_from_slice(&end.to_le_bytes());
        }
        out.extend_from_slice(&names);
        for name in &self.module_names {
            out.extend_from_slice(name.as_bytes());
        }
        let [addrs, sizes, name_ends, types, modules, _, names, _] =
            offsets(0, n, m, self.names.len(), module_bytes).unwrap_or_default();
        Columns {
            bytes: Bytes::Owned(out),
            start: 0,
            len: n,
            addrs,
            sizes,
            name_ends,
            types,
            modules,
            names,
            module_names: self.module_names.clone(),
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

    #[test]
    fn the_bytes_make_the_same_columns_and_nothing_else_does() {
        let c = columns();
        let mut copy = vec![0xaa; 3];
        copy.extend_from_slice(c.as_bytes());
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
