//! Member paths resolved against BTF, the kernel's compact type information: `/sys/kernel/btf/vmlinux`
//! (5 MB, always the running kernel's, present on nearly every distribution kernel) and, for a module's
//! types, `/sys/kernel/btf/MODULE` (split BTF, whose type ids and string offsets continue the vmlinux
//! ones). This is what lets `(struct task_struct)ADDR.se.vruntime` name a field without a 500 MB debug
//! vmlinux on disk.
//!
//! A small reader of our own (`reader` checks the blob once; this module walks it): `aya-obj` would pull
//! in a whole eBPF loader for it and `btf-rs` is LGPL. It answers the same questions as [`crate::dwarf`]
//! does for DWARF, with the same [`MemberInfo`] and [`FieldError`], and spells C types the same way
//! (`struct new_utsname`, `char[65]`, `pid_t`, `struct list_head *`).
//!
//! The blob may be anything a user points at, so every offset and length is checked when it is loaded,
//! type ids are checked when followed, and every chase (typedef chains, anonymous members, nested arrays,
//! type names) is bounded, so a cycle in corrupt BTF ends in an error rather than a hang. Lookups by name
//! go through an index built on first use: the vmlinux BTF holds ~130k types.

mod reader;
#[cfg(test)]
mod tests;

use std::fmt;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustc_hash::{FxHashMap, FxHasher};

use crate::file::{self, Role};
use crate::{Error, FieldError, MemberInfo, PathElem};
use reader::{kind, Blob, Raw, Record};

/// How many typedefs and qualifiers are followed before a chain is taken for a cycle. Real kernels stack
/// a handful (`const volatile` over two typedefs).
const MAX_CHAIN: usize = 32;
/// How deep anonymous members, nested arrays and type names are followed.
const MAX_NEST: u32 = 16;
/// The most members one search through anonymous members visits. Depth alone does not bound it: corrupt
/// BTF can give a struct thousands of anonymous members that are each that struct again.
const MAX_VISITS: u32 = 1 << 20;
/// Whether a type of BTF kind `k` is what a cast's keyword asks for (any kind without one).
fn kind_fits(cast: &Option<CastKind>, k: u32) -> bool {
    match cast {
        Some(CastKind::Struct) => k == kind::STRUCT,
        Some(CastKind::Union) => k == kind::UNION,
        Some(CastKind::Enum) => matches!(k, kind::ENUM | kind::ENUM64),
        None => true,
    }
}

/// The most close names a [`FieldError::NoType`] suggests.
const MAX_SUGGESTIONS: usize = 3;

/// The keyword a cast was written with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CastKind {
    Struct,
    Union,
    Enum,
}

/// The type named in a cast `(struct task_struct)`, `(task_struct)`, `(spinlock_t)`: `kind` when the user
/// wrote struct/union/enum; the trailing `*` is already dropped by the parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CastType {
    pub kind: Option<CastKind>,
    pub name: String,
}

impl fmt::Display for CastType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Some(CastKind::Struct) => write!(f, "struct {}", self.name),
            Some(CastKind::Union) => write!(f, "union {}", self.name),
            Some(CastKind::Enum) => write!(f, "enum {}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A variable BTF knows: a `VAR` listed in a `DATASEC` (on most kernels only the per-CPU ones, in
/// `.data..percpu`; all globals where pahole encoded them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BtfVariable {
    pub name: String,
    /// The data section's name, e.g. `.data..percpu`.
    pub section: String,
    pub offset_in_section: u64,
    pub size: u64,
    pub type_name: String,
}

/// Parsed BTF: the checked blob, and the base it continues when it is split (module) BTF.
pub struct Btf {
    path: PathBuf,
    raw: Raw,
    /// The id of this blob's first type: 1, or the base's next id.
    first_id: u32,
    /// Where this blob's strings start in the combined string space: 0, or the base's end.
    first_str: u32,
    base: Option<Arc<Btf>>,
    /// Ids of this blob's DATASEC types, where variables are listed.
    datasecs: Vec<u32>,
    index: OnceLock<NameIndex>,
    pointer_size: OnceLock<u64>,
}

impl fmt::Debug for Btf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Btf")
            .field("path", &self.path)
            .field("types", &self.raw.records.len())
            .field("first_id", &self.first_id)
            .field("base", &self.base.as_ref().map(|b| b.path.clone()))
            .finish()
    }
}

/// Type names to local type indices: a hash of the name to the last type of that hash, chained through
/// `next` (no allocation per name; a hash collision is told apart by comparing the name).
struct NameIndex {
    heads: FxHashMap<u64, u32>,
    next: Vec<u32>,
}

const NONE: u32 = u32::MAX;

/// The kinds looked up by name.
const INDEXED: [u32; 9] = [
    kind::STRUCT,
    kind::UNION,
    kind::ENUM,
    kind::ENUM64,
    kind::FWD,
    kind::TYPEDEF,
    kind::INT,
    kind::FLOAT,
    kind::VAR,
];

fn hash(name: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(name);
    h.finish()
}

/// A type and the blob whose strings its record names.
#[derive(Clone, Copy)]
struct Ty<'a> {
    btf: &'a Btf,
    id: u32,
    rec: Record,
}

impl<'a> Ty<'a> {
    fn kind(&self) -> u32 {
        self.rec.kind
    }
    fn name(&self) -> &'a str {
        self.btf.string(self.rec.name_off)
    }
    /// The `j`th u32 after the record.
    fn word(&self, j: usize) -> u32 {
        self.btf.raw.word(&self.rec, j)
    }
    /// The type this one refers to (typedef, qualifier, pointer, VAR, FUNC, FUNC_PROTO's return).
    fn target(&self) -> u32 {
        self.rec.size_or_type
    }
    /// `(name, type, offset)` of member `j` of a struct or union.
    fn member(&self, j: usize) -> (&'a str, u32, u32) {
        (
            self.btf.string(self.word(3 * j)),
            self.word(3 * j + 1),
            self.word(3 * j + 2),
        )
    }
}

/// A member found by name, possibly inside anonymous members.
struct Found<'a> {
    /// From the start of the struct searched.
    bit_offset: u64,
    ty: Ty<'a>,
    /// The width when the member is a bitfield.
    bits: Option<u32>,
}

impl Btf {
    pub const VMLINUX: &'static str = file::VMLINUX_BTF;

    /// Reads and checks a BTF file (`/sys/kernel/btf/vmlinux`, or a copy): regular files only, at most
    /// [`Role::Btf`]'s bound. The running kernel's own is mapped where sysfs keeps it, when the kernel
    /// allows that (Linux 6.16 and later): reading it copies 5 MB into freshly faulted pages, which costs
    /// several times the whole check of the mapped file.
    pub fn open(path: &Path) -> Result<Btf, Error> {
        if path == Path::new(Btf::VMLINUX) {
            if let Some(map) = map_kernel_btf(path) {
                return Btf::from_blob(Blob::Mapped(map), path, None);
            }
        }
        Btf::from_bytes(file::read(path, Role::Btf)?, path, None)
    }

    /// Reads split BTF (`/sys/kernel/btf/MODULE`), whose type ids and strings continue `base`'s.
    pub fn open_split(path: &Path, base: Arc<Btf>) -> Result<Btf, Error> {
        Btf::from_bytes(file::read(path, Role::Btf)?, path, Some(base))
    }

    /// Checks `data` as BTF (split BTF continuing `base` when given); `path` is for messages.
    pub fn from_bytes(data: Vec<u8>, path: &Path, base: Option<Arc<Btf>>) -> Result<Btf, Error> {
        Btf::from_blob(Blob::Read(data), path, base)
    }

    fn from_blob(data: Blob, path: &Path, base: Option<Arc<Btf>>) -> Result<Btf, Error> {
        let corrupt = |problem| Error::Btf {
            path: path.to_path_buf(),
            problem,
        };
        let raw = Raw::parse(data, base.is_some()).map_err(corrupt)?;
        let (first_id, first_str) = match &base {
            Some(b) => (b.next_id(), b.str_end()),
            None => (1, 0),
        };
        let fits = u32::try_from(raw.records.len())
            .ok()
            .and_then(|n| first_id.checked_add(n))
            .is_some()
            && u32::try_from(raw.strs_len())
                .ok()
                .and_then(|n| first_str.checked_add(n))
                .is_some();
        if !fits {
            return Err(corrupt(crate::BtfProblem::TooManyIds));
        }
        let datasecs = (0..raw.records.len())
            .filter(|&i| raw.record(i).is_some_and(|r| r.kind == kind::DATASEC))
            .map(|i| first_id + i as u32)
            .collect();
        Ok(Btf {
            path: path.to_path_buf(),
            raw,
            first_id,
            first_str,
            base,
            datasecs,
            index: OnceLock::new(),
            pointer_size: OnceLock::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The member `path` of an object of type `cast` (offset from the object's start, size, C type name).
    /// An empty path is the whole object. Struct/union/enum kind as written; without a kind, look for a
    /// struct, then a union, then a typedef, then any other named type (int, enum, float) of that name.
    pub fn member(&self, cast: &CastType, path: &[PathElem]) -> Result<MemberInfo, FieldError> {
        let ty = self.find_type(cast)?;
        self.walk(ty, format!("({cast})"), path)
    }

    /// A variable BTF knows (a VAR inside a DATASEC).
    pub fn variable(&self, name: &str) -> Option<BtfVariable> {
        self.find_variable(name).map(|(v, _)| v)
    }

    /// Like [`Btf::member`], starting at a variable's type. [`FieldError::NoVariable`] when BTF has no
    /// such VAR.
    pub fn variable_member(&self, name: &str, path: &[PathElem]) -> Result<MemberInfo, FieldError> {
        let Some((_, var)) = self.find_variable(name) else {
            return Err(FieldError::NoVariable { name: name.into() });
        };
        self.walk(self.get(var.target())?, name.to_string(), path)
    }

    fn next_id(&self) -> u32 {
        // Checked in `from_bytes` to fit.
        self.first_id + self.raw.records.len() as u32
    }

    fn str_end(&self) -> u32 {
        self.first_str + self.raw.strs_len() as u32
    }

    /// This blob and the bases below it.
    fn chain(&self) -> impl Iterator<Item = &Btf> {
        std::iter::successors(Some(self), |b| b.base.as_deref())
    }

    fn corrupt(&self, problem: crate::BtfProblem) -> FieldError {
        FieldError::Load(Error::Btf {
            path: self.path.clone(),
            problem,
        })
    }

    /// The string at `off` of the combined string space; a bad offset or an overlong name reads as a name
    /// no C type has.
    fn string(&self, off: u32) -> &str {
        let bytes = if off < self.first_str {
            self.base.as_deref().map(|b| b.string(off))
        } else {
            self.raw
                .string((off - self.first_str) as usize)
                .map(|b| std::str::from_utf8(b).unwrap_or("<non-UTF-8 name>"))
        };
        bytes.unwrap_or("<unreadable name>")
    }

    fn get(&self, id: u32) -> Result<Ty<'_>, FieldError> {
        if id == 0 {
            let void = Record {
                name_off: 0,
                kind: 0,
                vlen: 0,
                kflag: false,
                size_or_type: 0,
                data: 0,
            };
            return Ok(Ty {
                btf: self,
                id,
                rec: void,
            });
        }
        if id < self.first_id {
            if let Some(b) = &self.base {
                return b.get(id);
            }
        }
        match self.raw.record(id.wrapping_sub(self.first_id) as usize) {
            Some(rec) if id >= self.first_id => Ok(Ty { btf: self, id, rec }),
            _ => Err(self.corrupt(crate::BtfProblem::TypeIdOutOfRange {
                id,
                last: self.next_id() - 1,
            })),
        }
    }

    fn index(&self) -> &NameIndex {
        self.index.get_or_init(|| {
            let n = self.raw.records.len();
            let mut heads = FxHashMap::with_capacity_and_hasher(n, Default::default());
            let mut next = vec![NONE; n];
            for (i, link) in next.iter_mut().enumerate() {
                let Some(rec) = self.raw.record(i) else { break };
                // Only what a cast or a variable names: the 56k FUNCs of a vmlinux are half its names.
                if !INDEXED.contains(&rec.kind) || rec.name_off == 0 {
                    continue;
                }
                let name = self.string(rec.name_off);
                *link = heads
                    .insert(hash(name.as_bytes()), i as u32)
                    .unwrap_or(NONE);
            }
            NameIndex { heads, next }
        })
    }

    /// Every type named `name`, this blob's first, each blob's in id order.
    fn named(&self, name: &str) -> Vec<Ty<'_>> {
        let mut out = Vec::new();
        for btf in self.chain() {
            let index = btf.index();
            let mut local = Vec::new();
            let mut i = index
                .heads
                .get(&hash(name.as_bytes()))
                .copied()
                .unwrap_or(NONE);
            // Each link points at a lower index, so the chain ends; the bound is belt and braces.
            while i != NONE && local.len() <= index.next.len() {
                local.push(i);
                i = index.next.get(i as usize).copied().unwrap_or(NONE);
            }
            local.reverse();
            for i in local {
                if let Ok(t) = btf.get(btf.first_id + i) {
                    if t.name() == name {
                        out.push(t);
                    }
                }
            }
        }
        out
    }

    /// The type a cast names, by the kind preference [`Btf::member`] documents.
    fn find_type(&self, cast: &CastType) -> Result<Ty<'_>, FieldError> {
        // `NAME#ID`: the one type of that name with that BTF id.
        if let Some((name, id)) = cast.name.split_once('#') {
            let id: u32 = id.parse().map_err(|_| FieldError::NoType {
                name: cast.to_string(),
                suggestions: Vec::new(),
            })?;
            let plain = CastType {
                kind: cast.kind.clone(),
                name: name.to_string(),
            };
            let found = self.named(name).into_iter().find(|t| t.id == id);
            return match found {
                Some(t) if kind_fits(&cast.kind, t.kind()) => Ok(t),
                _ => Err(FieldError::NoType {
                    name: cast.to_string(),
                    suggestions: self.describe_all(&plain),
                }),
            };
        }
        let mut candidates = self.named(&cast.name);
        if candidates.is_empty() && cast.kind.is_none() {
            // `unsigned long` as C allows it; BTF has the compiler's one spelling, `long unsigned int`.
            if let Some(gcc) = gcc_int_name(&cast.name) {
                candidates = self.named(&gcc);
            }
        }
        let order: &[&[u32]] = match cast.kind {
            Some(CastKind::Struct) => &[&[kind::STRUCT]],
            Some(CastKind::Union) => &[&[kind::UNION]],
            Some(CastKind::Enum) => &[&[kind::ENUM, kind::ENUM64]],
            None => &[
                &[kind::STRUCT],
                &[kind::UNION],
                &[kind::TYPEDEF],
                &[kind::INT, kind::ENUM, kind::ENUM64, kind::FLOAT],
            ],
        };
        for kinds in order {
            let same: Vec<Ty<'_>> = candidates
                .iter()
                .copied()
                .filter(|t| kinds.contains(&t.kind()))
                .collect();
            let Some(first) = same.first().copied() else {
                continue;
            };
            // Several types of one name (two `struct irq_info` in this kernel): identical layouts are one
            // type; different ones are never chosen silently.
            let distinct: Vec<Ty<'_>> = same.iter().copied().fold(Vec::new(), |mut v, t| {
                if !v.iter().any(|u| self.same_layout(*u, t)) {
                    v.push(t);
                }
                v
            });
            if distinct.len() > 1 {
                return Err(FieldError::Ambiguous {
                    name: cast.to_string(),
                    candidates: distinct.iter().map(|t| self.describe(*t)).collect(),
                });
            }
            return Ok(first);
        }
        // Only declared: the layout is in no BTF loaded (a module's type, with only vmlinux loaded?).
        let declared = candidates.iter().find(|t| {
            t.kind() == kind::FWD
                && match cast.kind {
                    Some(CastKind::Struct) => !t.rec.kflag,
                    Some(CastKind::Union) => t.rec.kflag,
                    Some(CastKind::Enum) => false,
                    None => true,
                }
        });
        if let Some(t) = declared {
            return Err(FieldError::Incomplete {
                at: format!("({cast})"),
                type_name: self.type_name(*t)?,
            });
        }
        // `(struct spinlock_t)`, `(union rq)`: the name is right, the keyword is not.
        let other = candidates.iter().find(|t| {
            matches!(
                t.kind(),
                kind::STRUCT | kind::UNION | kind::ENUM | kind::ENUM64 | kind::TYPEDEF | kind::INT
            )
        });
        let suggestions = match other {
            Some(t) => vec![self.type_name(*t)?],
            None => self.suggest(cast),
        };
        Err(FieldError::NoType {
            name: cast.to_string(),
            suggestions,
        })
    }

    /// Whether two types have one layout: same kind and size, and for a struct or union the same member
    /// names at the same offsets.
    fn same_layout(&self, a: Ty<'_>, b: Ty<'_>) -> bool {
        // A typedef's `size_or_type` is its target's id, so sizes are compared resolved.
        let size = |t: Ty<'_>| self.size_of(t).ok().flatten();
        if a.kind() != b.kind() || size(a) != size(b) || a.rec.vlen != b.rec.vlen {
            return false;
        }
        if !matches!(a.kind(), kind::STRUCT | kind::UNION) {
            // Two typedefs, ints or enums of one name and size (this kernel's `u8`, once for `__u8` and once
            // for `unsigned char`): a watch of either is the same bytes, so they are one type.
            return true;
        }
        (0..a.rec.vlen as usize).all(|j| {
            let (an, _, ao) = a.member(j);
            let (bn, _, bo) = b.member(j);
            an == bn && ao == bo
        })
    }

    /// `#ID (size N: first, members, ...)`: one of several same-named types, told apart.
    fn describe(&self, t: Ty<'_>) -> String {
        let mut s = format!("#{}", t.id);
        if matches!(t.kind(), kind::STRUCT | kind::UNION) {
            let members: Vec<&str> = (0..(t.rec.vlen as usize).min(3))
                .map(|j| t.member(j).0)
                .collect();
            let more = if t.rec.vlen > 3 { ", ..." } else { "" };
            s.push_str(&format!(
                " (size {}: {}{more})",
                t.rec.size_or_type,
                members.join(", ")
            ));
        }
        s
    }

    /// Every type a cast's name could mean, described, for a `NAME#ID` that matched none of them.
    fn describe_all(&self, cast: &CastType) -> Vec<String> {
        self.named(&cast.name)
            .into_iter()
            .filter(|t| kind_fits(&cast.kind, t.kind()))
            .map(|t| format!("{}{}", cast, self.describe(t)))
            .collect()
    }

    /// Up to [`MAX_SUGGESTIONS`] names of the cast's kind close to its name, best first, by
    /// [`crate::suggest`]'s ranking.
    fn suggest(&self, cast: &CastType) -> Vec<String> {
        let kinds: &[u32] = match cast.kind {
            Some(CastKind::Struct) => &[kind::STRUCT],
            Some(CastKind::Union) => &[kind::UNION],
            Some(CastKind::Enum) => &[kind::ENUM, kind::ENUM64],
            None => &[
                kind::STRUCT,
                kind::UNION,
                kind::TYPEDEF,
                kind::INT,
                kind::ENUM,
                kind::ENUM64,
                kind::FLOAT,
            ],
        };
        let names = self.chain().flat_map(|btf| {
            (0..btf.raw.records.len())
                .map_while(|i| btf.raw.record(i))
                .filter(|rec| kinds.contains(&rec.kind))
                .map(|rec| btf.string(rec.name_off))
        });
        crate::suggest::best(&cast.name, names, MAX_SUGGESTIONS)
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// A VAR of that name and the DATASEC entry that places it: the first in the data sections' order.
    fn find_variable(&self, name: &str) -> Option<(BtfVariable, Ty<'_>)> {
        let mut vars: Vec<Ty<'_>> = self
            .named(name)
            .into_iter()
            .filter(|t| t.kind() == kind::VAR)
            .collect();
        vars.sort_by_key(|v| v.id);
        if vars.is_empty() {
            return None;
        }
        // One pass over every section's entries, however many same-named VARs corrupt BTF holds.
        for btf in self.chain() {
            for &sec in &btf.datasecs {
                let Ok(sec) = btf.get(sec) else { continue };
                for j in 0..sec.rec.vlen as usize {
                    let id = sec.word(3 * j);
                    let Ok(at) = vars.binary_search_by_key(&id, |v| v.id) else {
                        continue;
                    };
                    let var = vars[at];
                    let type_name = self
                        .get(var.target())
                        .and_then(|t| self.type_name(t))
                        .unwrap_or_else(|_| "<corrupt type>".into());
                    let found = BtfVariable {
                        name: name.to_string(),
                        section: sec.name().to_string(),
                        offset_in_section: u64::from(sec.word(3 * j + 1)),
                        size: u64::from(sec.word(3 * j + 2)),
                        type_name,
                    };
                    return Some((found, var));
                }
            }
        }
        None
    }

    /// Looks through typedefs and qualifiers to the type that has a layout.
    fn strip<'a>(&'a self, mut t: Ty<'a>) -> Result<Ty<'a>, FieldError> {
        for _ in 0..MAX_CHAIN {
            match t.kind() {
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    t = self.get(t.target())?
                }
                _ => return Ok(t),
            }
        }
        Err(self.corrupt(crate::BtfProblem::ChainTooDeep {
            id: t.id,
            limit: MAX_CHAIN,
        }))
    }

    /// The pointer size: that of `long`, as on every Linux ABI; 8 if the BTF has no `long`.
    fn pointer_size(&self) -> u64 {
        if let Some(b) = &self.base {
            return b.pointer_size();
        }
        *self.pointer_size.get_or_init(|| {
            ["long int", "long unsigned int", "long", "unsigned long"]
                .iter()
                .flat_map(|n| self.named(n))
                .find(|t| t.kind() == kind::INT && matches!(t.rec.size_or_type, 4 | 8))
                .map_or(8, |t| u64::from(t.rec.size_or_type))
        })
    }

    /// Size in bytes; `None` for void, functions, forward declarations and `T[]`.
    fn size_of(&self, t: Ty<'_>) -> Result<Option<u64>, FieldError> {
        self.size_depth(t, 0)
    }

    fn size_depth(&self, t: Ty<'_>, depth: u32) -> Result<Option<u64>, FieldError> {
        if depth > MAX_NEST {
            return Err(self.corrupt(crate::BtfProblem::NestTooDeep {
                id: t.id,
                limit: MAX_NEST,
            }));
        }
        let t = self.strip(t)?;
        Ok(match t.kind() {
            kind::INT
            | kind::STRUCT
            | kind::UNION
            | kind::ENUM
            | kind::ENUM64
            | kind::FLOAT
            | kind::DATASEC => Some(u64::from(t.rec.size_or_type)),
            kind::PTR => Some(self.pointer_size()),
            kind::ARRAY => match t.word(2) {
                0 => None,
                n => self
                    .size_depth(self.get(t.word(0))?, depth + 1)?
                    .map(|e| e.saturating_mul(u64::from(n))),
            },
            kind::VAR => self.size_depth(self.get(t.target())?, depth + 1)?,
            _ => None,
        })
    }

    /// The C spelling of a type: `struct foo`, `unsigned int`, `char[65]`, `const u8 *`, `pid_t`.
    fn type_name(&self, t: Ty<'_>) -> Result<String, FieldError> {
        self.name_depth(t, 0)
    }

    fn name_depth(&self, t: Ty<'_>, depth: u32) -> Result<String, FieldError> {
        if depth > MAX_NEST {
            return Ok("...".into());
        }
        let named = |kw: &str| match t.name() {
            "" => format!("{kw}<anonymous>"),
            n => format!("{kw}{n}"),
        };
        let inner = || self.name_depth(self.get(t.target())?, depth + 1);
        Ok(match t.kind() {
            0 => "void".into(),
            kind::STRUCT => named("struct "),
            kind::UNION => named("union "),
            kind::ENUM | kind::ENUM64 => named("enum "),
            kind::FWD if t.rec.kflag => named("union "),
            kind::FWD => named("struct "),
            kind::CONST => qualify("const", inner()?),
            kind::VOLATILE => qualify("volatile", inner()?),
            kind::RESTRICT => qualify("restrict", inner()?),
            // `__user`, `__rcu`: annotations for the verifier, not part of the C type.
            kind::TYPE_TAG => inner()?,
            kind::PTR => {
                let target = self.strip(self.get(t.target())?)?;
                if target.kind() == kind::FUNC_PROTO {
                    let ret = self.name_depth(self.get(target.target())?, depth + 1)?;
                    format!("{ret} (*)()")
                } else {
                    format!("{} *", inner()?)
                }
            }
            kind::FUNC_PROTO => format!("{} ()", inner()?),
            kind::ARRAY => {
                // `int m[2][3]` is an array of 2 arrays of 3: the element's name, then every bound.
                let mut dims = String::new();
                let mut a = t;
                let mut levels = 0;
                while a.kind() == kind::ARRAY && levels <= MAX_NEST {
                    match a.word(2) {
                        0 => dims.push_str("[]"),
                        n => dims.push_str(&format!("[{n}]")),
                    }
                    a = self.get(a.word(0))?;
                    levels += 1;
                }
                format!("{}{dims}", self.name_depth(a, depth + 1)?)
            }
            _ => named(""),
        })
    }

    /// A named member of a struct or union, searching into anonymous struct/union members (C11), which
    /// is how the kernel writes most of its unions.
    fn find_member<'a>(
        &'a self,
        s: Ty<'a>,
        field: &str,
        depth: u32,
        visits: &mut u32,
    ) -> Result<Option<Found<'a>>, FieldError> {
        for j in 0..s.rec.vlen as usize {
            self.visit(s, visits)?;
            let (name, ty, off) = s.member(j);
            // With kind_flag, the top 8 bits are the bitfield width and the rest the bit offset.
            let (bit_offset, width) = if s.rec.kflag {
                (u64::from(off & 0xff_ffff), off >> 24)
            } else {
                (u64::from(off), 0)
            };
            if name == field {
                let ty = self.get(ty)?;
                let (bit_offset, bits) = self.bitfield(ty, bit_offset, width)?;
                return Ok(Some(Found {
                    bit_offset,
                    ty,
                    bits,
                }));
            }
            if name.is_empty() && depth < MAX_NEST {
                let inner = self.strip(self.get(ty)?)?;
                if matches!(inner.kind(), kind::STRUCT | kind::UNION) {
                    if let Some(f) = self.find_member(inner, field, depth + 1, visits)? {
                        return Ok(Some(Found {
                            bit_offset: bit_offset.saturating_add(f.bit_offset),
                            ..f
                        }));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Counts one member visited by a search, failing once a search has visited [`MAX_VISITS`].
    fn visit(&self, s: Ty<'_>, visits: &mut u32) -> Result<(), FieldError> {
        *visits += 1;
        if *visits > MAX_VISITS {
            return Err(self.corrupt(crate::BtfProblem::TooManyVisits {
                id: s.id,
                limit: MAX_VISITS,
            }));
        }
        Ok(())
    }

    /// Whether a member at `bit_offset` with kind_flag width `width` (0: none) is a bitfield: a width, or
    /// (without kind_flag) an INT whose encoding narrows or shifts it, or an offset inside a byte.
    fn bitfield(
        &self,
        ty: Ty<'_>,
        bit_offset: u64,
        width: u32,
    ) -> Result<(u64, Option<u32>), FieldError> {
        if width != 0 {
            return Ok((bit_offset, Some(width)));
        }
        let s = self.strip(ty)?;
        if s.kind() == kind::INT {
            let encoding = s.word(0);
            let (shift, bits) = ((encoding >> 16) & 0xff, encoding & 0xff);
            if shift != 0 || u64::from(bits) != u64::from(s.rec.size_or_type) * 8 {
                return Ok((bit_offset + u64::from(shift), Some(bits)));
            }
        }
        if !bit_offset.is_multiple_of(8) {
            let bits = self.size_of(ty)?.unwrap_or(1).saturating_mul(8).max(1);
            return Ok((bit_offset, Some(u32::try_from(bits).unwrap_or(u32::MAX))));
        }
        Ok((bit_offset, None))
    }

    /// Every field name reachable from a struct or union, through anonymous members.
    fn member_names(
        &self,
        s: Ty<'_>,
        out: &mut Vec<String>,
        depth: u32,
        visits: &mut u32,
    ) -> Result<(), FieldError> {
        for j in 0..s.rec.vlen as usize {
            self.visit(s, visits)?;
            let (name, ty, _) = s.member(j);
            if !name.is_empty() {
                out.push(name.to_string());
            } else if depth < MAX_NEST {
                let inner = self.strip(self.get(ty)?)?;
                if matches!(inner.kind(), kind::STRUCT | kind::UNION) {
                    self.member_names(inner, out, depth + 1, visits)?;
                }
            }
        }
        Ok(())
    }

    /// Follows `path` from an object of type `ty`, accumulating the offset in bits.
    fn walk<'a>(
        &'a self,
        mut ty: Ty<'a>,
        mut at: String,
        path: &[PathElem],
    ) -> Result<MemberInfo, FieldError> {
        let mut bit = 0u64;
        let mut bitfield: Option<u32> = None;
        for elem in path {
            let s = self.strip(ty)?;
            let type_name = self.type_name(ty)?;
            match elem {
                PathElem::Field(field) => {
                    match s.kind() {
                        kind::STRUCT | kind::UNION => {}
                        kind::FWD => return Err(FieldError::Incomplete { at, type_name }),
                        _ => {
                            return Err(FieldError::NotAStruct {
                                at,
                                field: field.clone(),
                                type_name,
                            })
                        }
                    }
                    let Some(m) = self.find_member(s, field, 0, &mut 0)? else {
                        let mut available = Vec::new();
                        self.member_names(s, &mut available, 0, &mut 0)?;
                        return Err(FieldError::NoSuchField {
                            at,
                            field: field.clone(),
                            type_name,
                            available,
                        });
                    };
                    bit = bit.saturating_add(m.bit_offset);
                    ty = m.ty;
                    bitfield = m.bits;
                    at.push('.');
                    at.push_str(field);
                }
                PathElem::Index(index) => {
                    if s.kind() != kind::ARRAY {
                        return Err(FieldError::NotAnArray {
                            at,
                            index: *index,
                            type_name,
                        });
                    }
                    let len = u64::from(s.word(2));
                    // nelems 0 is `T[]` (or `T[0]`): nothing bounds it.
                    if len != 0 && *index >= len {
                        return Err(FieldError::IndexOutOfRange {
                            at,
                            index: *index,
                            len,
                            type_name,
                        });
                    }
                    let elem = self.get(s.word(0))?;
                    let Some(stride) = self.size_of(elem)? else {
                        return Err(FieldError::Incomplete {
                            at,
                            type_name: self.type_name(elem)?,
                        });
                    };
                    bit = bit.saturating_add(index.saturating_mul(stride).saturating_mul(8));
                    ty = elem;
                    bitfield = None;
                    at.push_str(&format!("[{index}]"));
                }
            }
        }
        if let Some(bits) = bitfield {
            let (word_offset, word_size) = containing_word(bit, bits);
            return Err(FieldError::Bitfield {
                at,
                bits,
                bit_offset: bit,
                word_offset,
                word_size,
            });
        }
        Ok(MemberInfo {
            offset: bit / 8,
            size: self.size_of(ty)?,
            type_name: self.type_name(ty)?,
        })
    }
}

/// The smallest naturally aligned 1, 2, 4 or 8 bytes holding bits `bit..bit + bits` (from the object's
/// start): `(byte offset, size)`. Bits straddling 8-byte words (packed structs) get the bytes they span.
fn containing_word(bit: u64, bits: u32) -> (u64, u64) {
    let end = bit.saturating_add(u64::from(bits.max(1)));
    for size in [1u64, 2, 4, 8] {
        let start = bit / 8 / size * size;
        if end <= (start + size).saturating_mul(8) {
            return (start, size);
        }
    }
    (bit / 8, end.div_ceil(8) - bit / 8)
}

/// The spelling GCC (and so DWARF and BTF) gives an integer type that C lets one write several ways:
/// `unsigned long` and `long unsigned` are `long unsigned int`, `signed` is `int`. `None` for anything
/// but a combination of the integer keywords.
fn gcc_int_name(name: &str) -> Option<String> {
    let (mut longs, mut short, mut unsigned, mut signed, mut char) =
        (0, false, false, false, false);
    for word in name.split_whitespace() {
        match word {
            "long" => longs += 1,
            "short" => short = true,
            "unsigned" => unsigned = true,
            "signed" => signed = true,
            "char" => char = true,
            "int" => {}
            _ => return None,
        }
    }
    if name.trim().is_empty()
        || longs > 2
        || (unsigned && signed)
        || (short && (longs > 0 || char))
        || (char && longs > 0)
    {
        return None;
    }
    if char {
        return Some(match (unsigned, signed) {
            (true, _) => "unsigned char".into(),
            (_, true) => "signed char".into(),
            _ => "char".into(),
        });
    }
    let size = match (longs, short) {
        (2, _) => "long long ",
        (1, _) => "long ",
        (_, true) => "short ",
        _ => "",
    };
    Some(format!(
        "{size}{}int",
        if unsigned { "unsigned " } else { "" }
    ))
}

/// `const int`, but `char * const`: a qualifier of a pointer goes after the star.
/// The kernel's BTF mapped, or `None` when it cannot be (before Linux 6.16).
fn map_kernel_btf(path: &Path) -> Option<memmap2::Mmap> {
    let file = std::fs::File::open(path).ok()?;
    // Private: the kernel refuses a shared mapping of its BTF.
    // SAFETY: the mapping is read-only and private, of the sysfs file that is the running kernel's own
    // BTF: its bytes are part of the kernel image and neither change nor shrink while it runs.
    unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) }.ok()
}

fn qualify(q: &str, inner: String) -> String {
    if inner.ends_with('*') {
        format!("{inner} {q}")
    } else {
        format!("{q} {inner}")
    }
}
