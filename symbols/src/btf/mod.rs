//! Member paths resolved against BTF, the kernel's compact type information: `/sys/kernel/btf/vmlinux`
//! (5 MB, always the running kernel's, present on nearly every distribution kernel) and, for a module's
//! types, `/sys/kernel/btf/MODULE` (split BTF, whose type ids and string offsets continue the vmlinux
//! ones). This is what lets `(struct task_struct)ADDR.se.vruntime` name a field without a 500 MB debug
//! vmlinux on disk.
//!
//! A small reader of our own (`reader` checks the blob once; this module finds types and variables by
//! name and describes each type to the crate's one member walk; `tracepoint` reads the kernel's
//! tracepoints, their arguments and records, from it; `running` keeps the running kernel's, parsed once
//! per process): `aya-obj` would pull in a whole eBPF
//! loader for it and `btf-rs` is LGPL. Since [`crate::dwarf`] describes DWARF's types to the same walk,
//! both answer with the same [`MemberInfo`] and [`FieldError`] and spell C types the same way
//! (`struct new_utsname`, `char[65]`, `pid_t`, `struct list_head *`).
//!
//! The blob may be anything a user points at, so every offset and length is checked when it is loaded,
//! type ids are checked when followed, and every chase (typedef chains, anonymous members, nested arrays,
//! type names) is bounded, so a cycle in corrupt BTF ends in an error rather than a hang. Lookups by name
//! go through an index built on first use: the vmlinux BTF holds ~130k types.

mod reader;
mod running;
#[cfg(test)]
mod tests;
mod tracepoint;

use std::borrow::Cow;
use std::fmt;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustc_hash::{FxHashMap, FxHasher};

use crate::error::{BtfProblem, Cycle, Error};
use crate::file::{self, Role};
use crate::member::graph::{size, Kind, Member, Qualifier, TypeGraph, MAX_CHAIN};
use crate::member::name::type_name;
use crate::member::walk::walk;
use crate::member::{FieldError, MemberInfo};
use crate::path::PathElem;
use reader::{kind, Blob, Raw, Record};
pub use tracepoint::{TpValue, TracepointInfo};

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

impl Btf {
    pub const VMLINUX: &'static str = file::VMLINUX_BTF;

    /// Reads and checks a BTF file (`/sys/kernel/btf/vmlinux`, or a copy): regular files only, at most
    /// [`Role::Btf`]'s bound. The running kernel's own is mapped where sysfs keeps it, when the kernel
    /// allows that (Linux 6.16 and later): reading it copies 5 MB into freshly faulted pages, which costs
    /// several times the whole check of the mapped file. A caller that wants the running kernel's BTF
    /// takes [`Btf::running`], one parse for the whole process.
    pub fn open(path: &Path) -> Result<Btf, Error> {
        if path == Path::new(Btf::VMLINUX) {
            if let Some(map) = running::map(path) {
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
            return Err(corrupt(BtfProblem::TooManyIds));
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
        walk(self, ty.id, format!("({cast})"), path)?.exact(self)
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
        walk(self, var.target(), name.to_string(), path)?.exact(self)
    }

    /// The byte offset of `field`, a direct member (not a bitfield) of the struct named `strukt`, found by
    /// scanning the records rather than through the name index: ~0.5 ms against the index's several (a
    /// program's load needs one offset at start-up). `None` when no such struct or member exists.
    pub fn struct_field_offset(&self, strukt: &str, field: &str) -> Option<u64> {
        for btf in self.chain() {
            for i in 0..btf.raw.records.len() {
                let Some(rec) = btf.raw.record(i) else { break };
                if rec.kind != kind::STRUCT || btf.string(rec.name_off) != strukt {
                    continue;
                }
                let ty = Ty {
                    btf,
                    id: btf.first_id + i as u32,
                    rec,
                };
                let members = BtfMembers {
                    ty,
                    j: 0,
                    n: rec.vlen as usize,
                };
                let found = members
                    .flatten()
                    .find(|m| m.name == field && m.bits.is_none() && m.bit_offset % 8 == 0);
                if let Some(m) = found {
                    return Some(m.bit_offset / 8);
                }
            }
        }
        None
    }

    /// The type id of the FUNC named `name` (a kernel function, or a kfunc a BPF program calls by this
    /// id), found by scanning the records as [`Btf::struct_field_offset`] does: FUNCs are not in the name
    /// index. `None` when there is none.
    pub fn func_id(&self, name: &str) -> Option<u32> {
        self.chain().find_map(|btf| {
            (0..btf.raw.records.len())
                .map_while(|i| btf.raw.record(i).map(|rec| (i, rec)))
                .find(|(_, rec)| rec.kind == kind::FUNC && btf.string(rec.name_off) == name)
                .map(|(i, _)| btf.first_id + i as u32)
        })
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

    fn corrupt(&self, problem: BtfProblem) -> FieldError {
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

    #[inline]
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
            _ => Err(self.corrupt(BtfProblem::TypeIdOutOfRange {
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
                type_name: type_name(self, t.id)?,
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
            Some(t) => vec![type_name(self, t.id)?],
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
        let size = |t: Ty<'_>| size(self, t.id).ok().flatten();
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
                        .and_then(|t| type_name(self, t.id))
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

    /// Looks through typedefs and qualifiers to the type that has a layout, reading each link once.
    #[inline]
    fn strip_ty<'a>(&'a self, mut t: Ty<'a>) -> Result<Ty<'a>, FieldError> {
        for _ in 0..MAX_CHAIN {
            match t.kind() {
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    t = self.get(t.target())?
                }
                _ => return Ok(t),
            }
        }
        Err(self.corrupt(BtfProblem::ChainTooDeep {
            id: t.id,
            limit: MAX_CHAIN,
        }))
    }

    /// Whether a member at `bit_offset` with kind_flag width `width` (0: none) is a bitfield: a width, or
    /// (without kind_flag) an INT whose encoding narrows or shifts it, or an offset inside a byte.
    fn bitfield(
        &self,
        ty: u32,
        bit_offset: u64,
        width: u32,
    ) -> Result<(u64, Option<u32>), FieldError> {
        if width != 0 {
            return Ok((bit_offset, Some(width)));
        }
        let s = self.strip_ty(self.get(ty)?)?;
        if s.kind() == kind::INT {
            let encoding = s.word(0);
            let (shift, bits) = ((encoding >> 16) & 0xff, encoding & 0xff);
            if shift != 0 || u64::from(bits) != u64::from(s.rec.size_or_type) * 8 {
                return Ok((bit_offset + u64::from(shift), Some(bits)));
            }
        }
        if !bit_offset.is_multiple_of(8) {
            let bits = size(self, ty)?.unwrap_or(1).saturating_mul(8).max(1);
            return Ok((bit_offset, Some(u32::try_from(bits).unwrap_or(u32::MAX))));
        }
        Ok((bit_offset, None))
    }
}

impl TypeGraph for Btf {
    type Type = u32;
    type Members<'s> = BtfMembers<'s>;

    #[inline]
    fn kind(&self, t: u32) -> Result<Kind, FieldError> {
        let t = self.get(t)?;
        Ok(match t.kind() {
            0 => Kind::Void,
            kind::STRUCT => Kind::Struct,
            kind::UNION => Kind::Union,
            kind::ENUM | kind::ENUM64 => Kind::Enum,
            kind::FWD if t.rec.kflag => Kind::Union,
            kind::FWD => Kind::Struct,
            kind::TYPEDEF => Kind::Typedef,
            kind::CONST => Kind::Qualifier(Qualifier::Const),
            kind::VOLATILE => Kind::Qualifier(Qualifier::Volatile),
            kind::RESTRICT => Kind::Qualifier(Qualifier::Restrict),
            kind::TYPE_TAG => Kind::Qualifier(Qualifier::Tag),
            kind::PTR => Kind::Pointer,
            kind::ARRAY => Kind::Array,
            kind::FUNC_PROTO => Kind::Function,
            _ => Kind::Named,
        })
    }

    #[inline]
    fn name(&self, t: u32) -> Result<Cow<'_, str>, FieldError> {
        Ok(Cow::Borrowed(self.get(t)?.name()))
    }

    #[inline]
    fn target(&self, t: u32) -> Result<u32, FieldError> {
        let t = self.get(t)?;
        Ok(match t.kind() {
            kind::ARRAY => t.word(0),
            kind::TYPEDEF
            | kind::CONST
            | kind::VOLATILE
            | kind::RESTRICT
            | kind::TYPE_TAG
            | kind::PTR
            | kind::FUNC_PROTO
            | kind::VAR
            | kind::FUNC => t.target(),
            _ => 0,
        })
    }

    #[inline]
    fn array_len(&self, t: u32) -> Result<Option<u64>, FieldError> {
        let t = self.get(t)?;
        // nelems 0 is `T[]` (or `T[0]`): nothing bounds it.
        Ok(match t.kind() {
            kind::ARRAY if t.word(2) != 0 => Some(u64::from(t.word(2))),
            _ => None,
        })
    }

    #[inline]
    fn own_size(&self, t: u32) -> Result<Option<u64>, FieldError> {
        let t = self.get(t)?;
        Ok(match t.kind() {
            kind::INT
            | kind::STRUCT
            | kind::UNION
            | kind::ENUM
            | kind::ENUM64
            | kind::FLOAT
            | kind::DATASEC => Some(u64::from(t.rec.size_or_type)),
            kind::PTR => Some(self.pointer_size()),
            _ => None,
        })
    }

    #[inline]
    fn is_declaration(&self, t: u32) -> Result<bool, FieldError> {
        Ok(self.get(t)?.kind() == kind::FWD)
    }

    #[inline]
    fn members(&self, t: u32) -> Result<BtfMembers<'_>, FieldError> {
        let ty = self.get(t)?;
        let n = match ty.kind() {
            kind::STRUCT | kind::UNION => ty.rec.vlen as usize,
            _ => 0,
        };
        Ok(BtfMembers { ty, j: 0, n })
    }

    fn settle_bitfield<'s>(&'s self, m: Member<'s, u32>) -> Result<Member<'s, u32>, FieldError> {
        let (bit_offset, bits) = self.bitfield(m.ty, m.bit_offset, m.bits.unwrap_or(0))?;
        Ok(Member {
            bit_offset,
            bits,
            ..m
        })
    }

    #[inline]
    fn strip(&self, t: u32) -> Result<u32, FieldError> {
        Ok(self.strip_ty(self.get(t)?)?.id)
    }

    fn corrupt(&self, id: u32, cycle: Cycle) -> FieldError {
        Btf::corrupt(
            self,
            match cycle {
                Cycle::Chain(limit) => BtfProblem::ChainTooDeep { id, limit },
                Cycle::Nest(limit) => BtfProblem::NestTooDeep { id, limit },
                Cycle::Visits(limit) => BtfProblem::TooManyVisits { id, limit },
            },
        )
    }
}

/// The members of a struct or union, read from its record as they are asked for.
pub(crate) struct BtfMembers<'a> {
    ty: Ty<'a>,
    j: usize,
    n: usize,
}

impl<'a> Iterator for BtfMembers<'a> {
    type Item = Result<Member<'a, u32>, FieldError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.j >= self.n {
            return None;
        }
        let (name, ty, off) = self.ty.member(self.j);
        self.j += 1;
        // With kind_flag, the top 8 bits are the bitfield width and the rest the bit offset.
        let (bit_offset, width) = if self.ty.rec.kflag {
            (u64::from(off & 0xff_ffff), off >> 24)
        } else {
            (u64::from(off), 0)
        };
        Some(Ok(Member {
            name: Cow::Borrowed(name),
            ty,
            bit_offset,
            bits: (width != 0).then_some(width),
        }))
    }
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
