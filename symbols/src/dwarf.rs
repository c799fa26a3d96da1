//! Member paths below a variable (`init_uts_ns.name.nodename`, `tbl[3].x`) resolved against DWARF: the byte
//! offset from the variable's start, the size, and the C type name. The DWARF comes from any ELF file through
//! [`DebugSections`]: a mapped vmlinux, or a user binary's sections read with bounded reads
//! ([`crate::process`]).
//!
//! A debug vmlinux holds thousands of compilation units; parsing them all is what makes `gdb` slow to
//! start. The variable's DIE is found instead from `.debug_names` when the file has one, else by walking only
//! the top-level DIEs of each unit and jumping over children with `DW_AT_sibling`. A declaration
//! (`extern struct uts_namespace init_uts_ns;` in a header) carries the full type as well as the definition
//! does, so for a global the first unit that declares it with a complete type ends the scan, usually in the
//! first few units.

use crate::progress::{Progress, Running, Task};
use crate::{Error, PathElem, Vmlinux};
use gimli::{AttributeValue, DwTag, EndianSlice, Operation, RunTimeEndian, UnitOffset};
use std::fmt;
use std::path::Path;

type R<'a> = EndianSlice<'a, RunTimeEndian>;
type Dwarf<'a> = gimli::Dwarf<R<'a>>;
type Unit<'a> = gimli::Unit<R<'a>>;
type Die<'a> = gimli::DebuggingInformationEntry<R<'a>>;

/// Where a member path lands, relative to the variable's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// Bytes from the variable's start.
    pub offset: u64,
    /// Size in bytes; `None` for incomplete types (`T[]`, `void`).
    pub size: Option<u64>,
    /// The C type, as a reader would write it: `char[65]`, `struct new_utsname`, `unsigned long`.
    pub type_name: String,
}

/// A member path that cannot be resolved; each names the path so far and what would work instead.
#[derive(Debug)]
pub enum FieldError {
    /// The file could not serve (no DWARF at all, compressed or corrupt DWARF).
    Load(Error),
    /// No DWARF entry describes the variable.
    NoVariable { name: String },
    /// `.field` on a struct or union that has no such member.
    NoSuchField {
        at: String,
        field: String,
        type_name: String,
        available: Vec<String>,
    },
    /// `.field` on something that is not a struct or union.
    NotAStruct {
        at: String,
        field: String,
        type_name: String,
    },
    /// `[N]` on something that is not an array.
    NotAnArray {
        at: String,
        index: u64,
        type_name: String,
    },
    /// `[N]` past the end of an array of `len` elements.
    IndexOutOfRange {
        at: String,
        index: u64,
        len: u64,
        type_name: String,
    },
    /// Only declarations without a full type were found (a struct only forward-declared everywhere).
    Incomplete { at: String, type_name: String },
    /// BTF has no type of that name (`name` as the cast spelled it: `struct task_strct`); `suggestions`
    /// are close names of the same kind, best first.
    NoType {
        name: String,
        suggestions: Vec<String>,
    },
    /// BTF has several different types of the name (`struct irq_info` twice): each is described
    /// (`#ID (size N: first members)`) for the user to pick one with `NAME#ID`.
    Ambiguous {
        name: String,
        candidates: Vec<String>,
    },
    /// The path ends at a bitfield, which a breakpoint cannot watch: `bits` wide at `bit_offset` bits from
    /// the object's start. The smallest naturally aligned 1/2/4/8-byte word holding it is `word_size`
    /// bytes at `word_offset` bytes from the object's start.
    Bitfield {
        at: String,
        bits: u32,
        bit_offset: u64,
        word_offset: u64,
        word_size: u64,
    },
}

/// Beyond this many fields, a "no such field" message names only the likely ones.
const MAX_FIELDS_LISTED: usize = 24;

/// The most fields a "did you mean" names.
const MAX_CLOSE_FIELDS: usize = 8;

/// The fields closest to what was typed, best first, by [`crate::suggest`]'s ranking.
fn close_fields<'a>(typed: &str, available: &'a [String]) -> Vec<&'a str> {
    crate::suggest::best(
        typed,
        available.iter().map(String::as_str),
        MAX_CLOSE_FIELDS,
    )
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldError::Load(e) => write!(f, "{e}"),
            FieldError::NoVariable { name } => write!(
                f,
                "no DWARF entry for variable `{name}` (defined in assembly, or in a unit built without -g); \
                 give the address as 0xADDR and a size instead"
            ),
            FieldError::NoSuchField {
                at,
                field,
                type_name,
                available,
            } => {
                write!(f, "`{at}` is a {type_name}, which has no field `{field}`")?;
                if available.is_empty() {
                    write!(f, " (it has no named fields)")
                } else if available.len() <= MAX_FIELDS_LISTED {
                    write!(f, "; its fields are: {}", available.join(", "))
                } else {
                    // A task_struct has hundreds: name the ones that look like what was typed.
                    let close = close_fields(field, available);
                    if !close.is_empty() {
                        write!(f, "; did you mean {}?", close.join(", "))?;
                    }
                    write!(
                        f,
                        " ({} fields; the first are {}, ...)",
                        available.len(),
                        available[..MAX_FIELDS_LISTED / 2].join(", ")
                    )
                }
            }
            FieldError::NotAStruct { at, field, type_name } => {
                write!(f, "`{at}` is a {type_name}, not a struct or union, so it has no field `{field}`")?;
                if type_name.ends_with('*') {
                    write!(f, "; pointers are not followed: watch the pointee by its address")?;
                }
                Ok(())
            }
            FieldError::NotAnArray { at, index, type_name } => {
                write!(f, "`{at}` is a {type_name}, not an array, so `[{index}]` does not apply")?;
                if type_name.ends_with('*') {
                    write!(f, "; pointers are not followed: watch the pointee by its address")?;
                }
                Ok(())
            }
            FieldError::IndexOutOfRange {
                at,
                index,
                len,
                type_name,
            } => write!(
                f,
                "`{at}[{index}]` is out of range: `{at}` is a {type_name} with {len} elements (valid: 0..={})",
                len.saturating_sub(1)
            ),
            FieldError::Incomplete { at, type_name } => write!(
                f,
                "`{at}` has type {type_name}, which the type information only declares (no layout); \
                 with DWARF, the defining unit may have been built without -g"
            ),
            FieldError::Ambiguous { name, candidates } => {
                let bare = name.rsplit(' ').next().unwrap_or(name);
                let keyword = name.strip_suffix(bare).unwrap_or("");
                write!(
                    f,
                    "BTF has {} different types named `{name}`: {}; choose one by its BTF id: ({keyword}{bare}#ID)",
                    candidates.len(),
                    candidates.join(", ")
                )
            }
            FieldError::NoType { name, suggestions } => {
                write!(f, "BTF has no type `{name}`")?;
                if suggestions.is_empty() {
                    write!(
                        f,
                        ": check the spelling (a module's types are in /sys/kernel/btf/MODULE)"
                    )
                } else {
                    write!(f, "; did you mean {}?", suggestions.join(", "))
                }
            }
            FieldError::Bitfield {
                at,
                bits,
                bit_offset,
                word_offset,
                word_size,
            } => write!(
                f,
                "`{at}` is a {bits}-bit bitfield (bit {bit_offset} of the object) and a breakpoint cannot watch \
                 single bits: watch the {word_size}-byte word holding it instead, at offset {word_offset} \
                 (0x{word_offset:x}) from the object's start"
            ),
        }
    }
}

impl std::error::Error for FieldError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Shown as the load error's own text: its cause is the next link.
            FieldError::Load(e) => e.source(),
            _ => None,
        }
    }
}

impl From<Error> for FieldError {
    fn from(e: Error) -> FieldError {
        FieldError::Load(e)
    }
}

/// Which DIE to accept as the variable.
#[derive(Debug, Clone)]
pub struct VariableQuery<'q> {
    pub name: &'q str,
    /// The link-time address from the symbol table: a DIE whose `DW_AT_location` is this address is the
    /// definition, even for one of several same-named statics.
    pub addr: Option<u64>,
    /// Whether a declaration found by name will do (true for globals; a static's name is not unique, so
    /// only its address identifies it).
    pub accept_declaration: bool,
}

/// The DWARF sections of one ELF file, wherever its bytes are: the walk below borrows them, never copies.
pub trait DebugSections {
    /// The file, for error messages.
    fn path(&self) -> &Path;
    fn little_endian(&self) -> bool;
    /// A named section's bytes (`.debug_info`); `None` when the file has no such section.
    fn debug_section(&self, name: &str) -> Result<Option<&[u8]>, Error>;
}

impl DebugSections for Vmlinux {
    fn path(&self) -> &Path {
        Vmlinux::path(self)
    }
    fn little_endian(&self) -> bool {
        Vmlinux::little_endian(self)
    }
    fn debug_section(&self, name: &str) -> Result<Option<&[u8]>, Error> {
        Vmlinux::debug_section(self, name)
    }
}

/// Whether the file has any `.debug_info` to walk.
pub fn has_debug_info(src: &dyn DebugSections) -> bool {
    src.debug_section(".debug_info")
        .is_ok_and(|s| s.is_some_and(|s| !s.is_empty()))
}

/// Loads the sections gimli needs from `src`, without copying.
fn load(src: &dyn DebugSections) -> Result<Dwarf<'_>, Error> {
    if !has_debug_info(src) {
        return Err(Error::NoDebugInfo {
            path: src.path().to_path_buf(),
        });
    }
    let endian = if src.little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    gimli::Dwarf::load(|id| -> Result<R<'_>, Error> {
        Ok(EndianSlice::new(
            src.debug_section(id.name())?.unwrap_or(&[]),
            endian,
        ))
    })
}

fn dwarf_err(src: &dyn DebugSections, e: gimli::Error) -> FieldError {
    FieldError::Load(Error::Dwarf {
        path: src.path().to_path_buf(),
        problem: crate::DwarfProblem::Read(e),
    })
}

/// Resolves `var` + `path` in `vm`'s DWARF (a [`Vmlinux`], or any other [`DebugSections`]). A scan of
/// the units is reported to `progress` as a [`Task::DwarfScan`]; pass [`NoProgress`](crate::NoProgress)
/// for none.
pub fn resolve_path(
    vm: &dyn DebugSections,
    var: &VariableQuery<'_>,
    path: &[PathElem],
    progress: &dyn Progress,
) -> Result<MemberInfo, FieldError> {
    let dwarf = load(vm)?;
    let mut scan = Scan::new(&dwarf, vm, progress);
    scan.run(var, path)
}

/// One pass over the units, remembering the best failure in case nothing better turns up.
struct Scan<'d, 'a, 'p> {
    dwarf: &'d Dwarf<'a>,
    vm: &'a dyn DebugSections,
    /// Ends the reported task when the scan is dropped, however it ended.
    running: Running<'p>,
}

impl<'d, 'a, 'p> Scan<'d, 'a, 'p> {
    fn new(dwarf: &'d Dwarf<'a>, vm: &'a dyn DebugSections, progress: &'p dyn Progress) -> Self {
        let total = vm
            .debug_section(".debug_info")
            .ok()
            .flatten()
            .map_or(0, |s| s.len() as u64);
        Scan {
            dwarf,
            vm,
            running: Running::start(progress, Task::DwarfScan, Some(total)),
        }
    }

    fn run(
        &mut self,
        var: &VariableQuery<'_>,
        path: &[PathElem],
    ) -> Result<MemberInfo, FieldError> {
        let mut fallback: Option<FieldError> = None;
        // .debug_names, where a toolchain wrote one, names the DIEs directly.
        if let Some(found) = self.via_debug_names(var, path, &mut fallback)? {
            return Ok(found);
        }
        let mut units = self.dwarf.units();
        let mut n = 0u32;
        while let Some(header) = units.next().map_err(|e| dwarf_err(self.vm, e))? {
            n += 1;
            if n.is_multiple_of(32) {
                let pos = header.offset().0 as u64;
                self.running.advance(pos);
            }
            let unit = self.dwarf.unit(header).map_err(|e| dwarf_err(self.vm, e))?;
            let mut cursor = unit.entries();
            // Root (the CU), then its first child; afterwards only siblings, never descending.
            if !cursor.next_entry().map_err(|e| dwarf_err(self.vm, e))?
                || !cursor.next_entry().map_err(|e| dwarf_err(self.vm, e))?
            {
                continue;
            }
            while let Some(entry) = cursor.current() {
                if entry.tag() == gimli::DW_TAG_variable {
                    let offset = entry.offset();
                    if let Some(done) =
                        self.try_candidate(&unit, offset, var, path, &mut fallback)?
                    {
                        return done;
                    }
                }
                cursor.next_sibling().map_err(|e| dwarf_err(self.vm, e))?;
            }
        }
        Err(fallback.unwrap_or_else(|| FieldError::NoVariable {
            name: var.name.to_string(),
        }))
    }

    fn via_debug_names(
        &mut self,
        var: &VariableQuery<'_>,
        path: &[PathElem],
        fallback: &mut Option<FieldError>,
    ) -> Result<Option<MemberInfo>, FieldError> {
        let d = self.dwarf;
        let mut headers = d.debug_names.headers();
        while let Ok(Some(header)) = headers.next() {
            let Ok(index) = header.index() else { break };
            for i in index.names() {
                let Ok(s) = index.name_string(i, &d.debug_str) else {
                    continue;
                };
                if s.slice() != var.name.as_bytes() {
                    continue;
                }
                let Ok(mut entries) = index.name_entries(i) else {
                    continue;
                };
                while let Ok(Some(entry)) = entries.next() {
                    let (Ok(Some(cu)), Ok(Some(die))) =
                        (entry.compile_unit(&index), entry.die_offset())
                    else {
                        continue;
                    };
                    let Ok(unit_header) = d.debug_info.header_from_offset(cu) else {
                        continue;
                    };
                    let Ok(unit) = d.unit(unit_header) else {
                        continue;
                    };
                    if unit
                        .entry(die)
                        .is_ok_and(|e| e.tag() == gimli::DW_TAG_variable)
                    {
                        if let Some(done) = self.try_candidate(&unit, die, var, path, fallback)? {
                            return done.map(Some);
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// `Some(result)` when this DIE settles the question; `None` to keep looking.
    #[allow(clippy::type_complexity)]
    fn try_candidate(
        &self,
        unit: &Unit<'a>,
        offset: UnitOffset,
        var: &VariableQuery<'_>,
        path: &[PathElem],
        fallback: &mut Option<FieldError>,
    ) -> Result<Option<Result<MemberInfo, FieldError>>, FieldError> {
        let types = Types {
            dwarf: self.dwarf,
            unit,
            vm: self.vm,
        };
        let entry = types.entry(offset)?;
        let location = types.location(&entry)?;
        let at_addr = matches!((location, var.addr), (Some(l), Some(a)) if l == a);
        if !at_addr {
            if location.is_some() && var.addr.is_some() {
                return Ok(None); // a same-named static elsewhere
            }
            if !var.accept_declaration || types.name_of_die(&entry)?.as_deref() != Some(var.name) {
                return Ok(None);
            }
        }
        // A definition may carry only DW_AT_specification, pointing at the declaration with the type.
        let ty = match types.type_attr(&entry)? {
            Some(ty) => ty,
            None => match types.ref_attr(&entry, gimli::DW_AT_specification)? {
                Some(spec) => types.type_attr(&types.entry(spec)?)?.unwrap_or(Ty::Void),
                None => Ty::Void,
            },
        };
        match types.walk(var.name, ty, path) {
            Ok(info) => Ok(Some(Ok(info))),
            // The declaration may be `extern T x[]` or a forward-declared struct; the definition has more.
            Err(e @ FieldError::Incomplete { .. }) => {
                *fallback = Some(e);
                Ok(None)
            }
            Err(FieldError::Load(e)) => Err(FieldError::Load(e)),
            Err(e) => Ok(Some(Err(e))),
        }
    }
}

/// A type position: a DIE, or the trailing dimensions of a multi-dimensional array after indexing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Void,
    Die(UnitOffset),
    /// `array` with its first `dim` dimensions already indexed away.
    Dims {
        array: UnitOffset,
        dim: usize,
    },
}

/// Type questions inside one unit (the kernel's types never cross units: no LTO, no type units).
struct Types<'d, 'u, 'a> {
    dwarf: &'d Dwarf<'a>,
    unit: &'u Unit<'a>,
    vm: &'a dyn DebugSections,
}

const QUALIFIERS: [DwTag; 5] = [
    gimli::DW_TAG_typedef,
    gimli::DW_TAG_const_type,
    gimli::DW_TAG_volatile_type,
    gimli::DW_TAG_restrict_type,
    gimli::DW_TAG_atomic_type,
];

impl<'a> Types<'_, '_, 'a> {
    fn err(&self, e: gimli::Error) -> FieldError {
        dwarf_err(self.vm, e)
    }

    fn entry(&self, offset: UnitOffset) -> Result<Die<'a>, FieldError> {
        self.unit.entry(offset).map_err(|e| self.err(e))
    }

    fn ref_attr(&self, die: &Die<'a>, at: gimli::DwAt) -> Result<Option<UnitOffset>, FieldError> {
        match die.attr_value(at) {
            None => Ok(None),
            Some(AttributeValue::UnitRef(o)) => Ok(Some(o)),
            Some(AttributeValue::DebugInfoRef(o)) => o
                .to_unit_offset(&self.unit.header)
                .map(Some)
                .ok_or_else(|| {
                    FieldError::Load(Error::Dwarf {
                        path: self.vm.path().to_path_buf(),
                        problem: crate::DwarfProblem::CrossUnitReference,
                    })
                }),
            Some(_) => Ok(None),
        }
    }

    fn type_attr(&self, die: &Die<'a>) -> Result<Option<Ty>, FieldError> {
        Ok(self.ref_attr(die, gimli::DW_AT_type)?.map(Ty::Die))
    }

    fn type_of(&self, die: &Die<'a>) -> Result<Ty, FieldError> {
        Ok(self.type_attr(die)?.unwrap_or(Ty::Void))
    }

    fn name_of_die(&self, die: &Die<'a>) -> Result<Option<String>, FieldError> {
        let Some(v) = die.attr_value(gimli::DW_AT_name) else {
            return Ok(None);
        };
        let s = self
            .dwarf
            .attr_string(self.unit, v)
            .map_err(|e| self.err(e))?;
        Ok(Some(String::from_utf8_lossy(s.slice()).into_owned()))
    }

    fn udata(die: &Die<'a>, at: gimli::DwAt) -> Option<u64> {
        die.attr_value(at).and_then(|v| v.udata_value())
    }

    /// `DW_AT_location` when it is a plain address (`DW_OP_addr`/`DW_OP_addrx`), as for every global.
    fn location(&self, die: &Die<'a>) -> Result<Option<u64>, FieldError> {
        let Some(AttributeValue::Exprloc(expr)) = die.attr_value(gimli::DW_AT_location) else {
            return Ok(None);
        };
        let mut ops = expr.operations(self.unit.encoding());
        Ok(match ops.next() {
            Ok(Some(Operation::Address { address })) => Some(address),
            Ok(Some(Operation::AddressIndex { index })) => {
                self.dwarf.address(self.unit, index).ok()
            }
            _ => None,
        })
    }

    /// Looks through typedefs and qualifiers to the type that has a layout.
    fn strip(&self, mut ty: Ty) -> Result<Ty, FieldError> {
        for _ in 0..64 {
            let Ty::Die(o) = ty else { return Ok(ty) };
            let die = self.entry(o)?;
            if !QUALIFIERS.contains(&die.tag()) {
                return Ok(ty);
            }
            ty = self.type_of(&die)?;
        }
        Ok(ty) // a typedef cycle is corrupt DWARF; stop rather than spin
    }

    fn children(&self, o: UnitOffset) -> Result<Vec<Die<'a>>, FieldError> {
        let mut tree = self.unit.entries_tree(Some(o)).map_err(|e| self.err(e))?;
        let root = tree.root().map_err(|e| self.err(e))?;
        let mut kids = root.children();
        let mut out = Vec::new();
        while let Some(child) = kids.next().map_err(|e| self.err(e))? {
            out.push(child.entry().clone());
        }
        Ok(out)
    }

    /// Element counts of an array's dimensions, outermost first; `None` for `[]`.
    fn dims(&self, array: UnitOffset) -> Result<Vec<Option<u64>>, FieldError> {
        let mut dims = Vec::new();
        for c in self.children(array)? {
            if c.tag() != gimli::DW_TAG_subrange_type {
                continue;
            }
            let lower = c
                .attr_value(gimli::DW_AT_lower_bound)
                .and_then(|v| v.sdata_value())
                .unwrap_or(0);
            let count = match (
                Self::udata(&c, gimli::DW_AT_count),
                c.attr_value(gimli::DW_AT_upper_bound),
            ) {
                (Some(n), _) => Some(n),
                // GCC writes `[]` as no bound, and zero-length arrays as upper bound -1 in signed forms.
                (None, Some(v)) => v
                    .sdata_value()
                    .map(|u| u64::try_from(u - lower + 1).unwrap_or(0)),
                (None, None) => None,
            };
            dims.push(count);
        }
        Ok(dims)
    }

    fn size_of(&self, ty: Ty) -> Result<Option<u64>, FieldError> {
        match self.strip(ty)? {
            Ty::Void => Ok(None),
            Ty::Dims { array, dim } => {
                let die = self.entry(array)?;
                let dims = self.dims(array)?;
                let Some(elem) = self.size_of(self.type_of(&die)?)? else {
                    return Ok(None);
                };
                let mut n = elem;
                for d in dims.iter().skip(dim) {
                    let Some(d) = d else { return Ok(None) };
                    n = n.saturating_mul(*d);
                }
                Ok(Some(n))
            }
            Ty::Die(o) => {
                let die = self.entry(o)?;
                if let Some(n) = Self::udata(&die, gimli::DW_AT_byte_size) {
                    return Ok(Some(n));
                }
                match die.tag() {
                    gimli::DW_TAG_array_type => self.size_of(Ty::Dims { array: o, dim: 0 }),
                    gimli::DW_TAG_pointer_type | gimli::DW_TAG_reference_type => {
                        Ok(Some(u64::from(self.unit.encoding().address_size)))
                    }
                    gimli::DW_TAG_enumeration_type => self.size_of(self.type_of(&die)?),
                    _ => Ok(None),
                }
            }
        }
    }

    /// The C spelling of a type: `struct foo`, `unsigned long`, `char[65]`, `const u8 *`.
    fn name(&self, ty: Ty) -> Result<String, FieldError> {
        self.name_depth(ty, 0)
    }

    fn name_depth(&self, ty: Ty, depth: u32) -> Result<String, FieldError> {
        if depth > 16 {
            return Ok("...".into());
        }
        let o = match ty {
            Ty::Void => return Ok("void".into()),
            Ty::Dims { array, dim } => return self.array_name(array, dim, depth),
            Ty::Die(o) => o,
        };
        let die = self.entry(o)?;
        let named = |kw: &str| -> Result<String, FieldError> {
            Ok(match self.name_of_die(&die)? {
                Some(n) => format!("{kw}{n}"),
                None => format!("{kw}<anonymous>"),
            })
        };
        let inner =
            || -> Result<String, FieldError> { self.name_depth(self.type_of(&die)?, depth + 1) };
        match die.tag() {
            gimli::DW_TAG_structure_type => named("struct "),
            gimli::DW_TAG_union_type => named("union "),
            gimli::DW_TAG_enumeration_type => named("enum "),
            gimli::DW_TAG_class_type => named("class "),
            gimli::DW_TAG_base_type | gimli::DW_TAG_typedef => named(""),
            gimli::DW_TAG_const_type => Ok(qualify("const", inner()?)),
            gimli::DW_TAG_volatile_type => Ok(qualify("volatile", inner()?)),
            gimli::DW_TAG_restrict_type => Ok(qualify("restrict", inner()?)),
            gimli::DW_TAG_atomic_type => Ok(qualify("_Atomic", inner()?)),
            gimli::DW_TAG_pointer_type => {
                let target = self.type_of(&die)?;
                if let Ty::Die(t) = self.strip(target)? {
                    if self.entry(t)?.tag() == gimli::DW_TAG_subroutine_type {
                        return Ok(format!(
                            "{} (*)()",
                            self.name_depth(self.type_of(&self.entry(t)?)?, depth + 1)?
                        ));
                    }
                }
                Ok(format!("{} *", inner()?))
            }
            gimli::DW_TAG_subroutine_type => Ok(format!("{} ()", inner()?)),
            gimli::DW_TAG_array_type => self.array_name(o, 0, depth),
            _ => named(""),
        }
    }

    fn array_name(&self, array: UnitOffset, dim: usize, depth: u32) -> Result<String, FieldError> {
        let die = self.entry(array)?;
        let mut s = self.name_depth(self.type_of(&die)?, depth + 1)?;
        for d in self.dims(array)?.iter().skip(dim) {
            match d {
                Some(n) => s.push_str(&format!("[{n}]")),
                None => s.push_str("[]"),
            }
        }
        Ok(s)
    }

    /// Follows `path` from a variable of type `ty`, accumulating the byte offset.
    fn walk(&self, var: &str, mut ty: Ty, path: &[PathElem]) -> Result<MemberInfo, FieldError> {
        let mut at = var.to_string();
        let mut offset = 0u64;
        let mut bitfield: Option<(u64, u64)> = None;
        for elem in path {
            let stripped = self.strip(ty)?;
            match elem {
                PathElem::Field(field) => {
                    let type_name = self.name(ty)?;
                    let Ty::Die(o) = stripped else {
                        return Err(FieldError::NotAStruct {
                            at,
                            field: field.clone(),
                            type_name,
                        });
                    };
                    let die = self.entry(o)?;
                    if !matches!(
                        die.tag(),
                        gimli::DW_TAG_structure_type
                            | gimli::DW_TAG_union_type
                            | gimli::DW_TAG_class_type
                    ) {
                        return Err(FieldError::NotAStruct {
                            at,
                            field: field.clone(),
                            type_name,
                        });
                    }
                    if die.attr_value(gimli::DW_AT_declaration).is_some() {
                        return Err(FieldError::Incomplete { at, type_name });
                    }
                    match self.find_member(o, field)? {
                        Some(m) => {
                            offset += m.offset;
                            ty = m.ty;
                            bitfield = m.bits;
                        }
                        None => {
                            let mut available = Vec::new();
                            self.member_names(o, &mut available, 0)?;
                            return Err(FieldError::NoSuchField {
                                at,
                                field: field.clone(),
                                type_name,
                                available,
                            });
                        }
                    }
                    at.push('.');
                    at.push_str(field);
                }
                PathElem::Index(index) => {
                    let type_name = self.name(ty)?;
                    let (array, dim) = match stripped {
                        Ty::Dims { array, dim } => (array, dim),
                        Ty::Die(o) if self.entry(o)?.tag() == gimli::DW_TAG_array_type => (o, 0),
                        _ => {
                            return Err(FieldError::NotAnArray {
                                at,
                                index: *index,
                                type_name,
                            })
                        }
                    };
                    let dims = self.dims(array)?;
                    let len = dims.get(dim).copied().flatten();
                    if let Some(len) = len {
                        if *index >= len {
                            return Err(FieldError::IndexOutOfRange {
                                at,
                                index: *index,
                                len,
                                type_name,
                            });
                        }
                    }
                    let next = if dim + 1 < dims.len() {
                        Ty::Dims {
                            array,
                            dim: dim + 1,
                        }
                    } else {
                        self.type_of(&self.entry(array)?)?
                    };
                    let Some(stride) = self.size_of(next)? else {
                        return Err(FieldError::Incomplete {
                            at,
                            type_name: self.name(next)?,
                        });
                    };
                    offset += index.saturating_mul(stride);
                    ty = next;
                    bitfield = None;
                    at.push_str(&format!("[{index}]"));
                }
            }
        }
        let mut type_name = self.name(ty)?;
        let size = match bitfield {
            Some((bit_offset, bits)) => {
                type_name.push_str(&format!(" : {bits}"));
                offset += bit_offset / 8;
                Some((bit_offset % 8 + bits).div_ceil(8))
            }
            None => self.size_of(ty)?,
        };
        // A bare `extern T x[]` declaration has no size; the definition does, so keep looking for it.
        if size.is_none() && ty != Ty::Void {
            if let Ty::Die(o) = self.strip(ty)? {
                let die = self.entry(o)?;
                if die.tag() == gimli::DW_TAG_array_type
                    || die.attr_value(gimli::DW_AT_declaration).is_some()
                {
                    return Err(FieldError::Incomplete { at, type_name });
                }
            }
        }
        Ok(MemberInfo {
            offset,
            size,
            type_name,
        })
    }

    /// A named member of a struct/union, searching into anonymous struct/union members (C11), which is
    /// how the kernel writes most of its unions.
    fn find_member(&self, o: UnitOffset, field: &str) -> Result<Option<Member>, FieldError> {
        for c in self.children(o)? {
            if c.tag() != gimli::DW_TAG_member {
                continue;
            }
            let base = self.member_offset(&c)?;
            let ty = self.type_of(&c)?;
            match self.name_of_die(&c)? {
                Some(n) if n == field => {
                    let bits = Self::udata(&c, gimli::DW_AT_bit_size).map(|bits| {
                        let bit_off = Self::udata(&c, gimli::DW_AT_data_bit_offset).unwrap_or(0);
                        (bit_off, bits)
                    });
                    return Ok(Some(Member {
                        offset: if bits.is_some() { 0 } else { base },
                        ty,
                        bits,
                    }));
                }
                Some(_) => {}
                None => {
                    if let Ty::Die(inner) = self.strip(ty)? {
                        if let Some(m) = self.find_member(inner, field)? {
                            return Ok(Some(Member {
                                offset: base + m.offset,
                                ..m
                            }));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    fn member_names(
        &self,
        o: UnitOffset,
        out: &mut Vec<String>,
        depth: u32,
    ) -> Result<(), FieldError> {
        if depth > 8 {
            return Ok(());
        }
        for c in self.children(o)? {
            if c.tag() != gimli::DW_TAG_member {
                continue;
            }
            match self.name_of_die(&c)? {
                Some(n) => out.push(n),
                None => {
                    if let Ty::Die(inner) = self.strip(self.type_of(&c)?)? {
                        self.member_names(inner, out, depth + 1)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `DW_AT_data_member_location`: a constant (DWARF 3+), or `DW_OP_plus_uconst N` (DWARF 2); union
    /// members often omit it, meaning 0.
    fn member_offset(&self, die: &Die<'a>) -> Result<u64, FieldError> {
        match die.attr_value(gimli::DW_AT_data_member_location) {
            None => Ok(0),
            Some(AttributeValue::Exprloc(expr)) => {
                let mut ops = expr.operations(self.unit.encoding());
                match ops.next() {
                    Ok(Some(Operation::PlusConstant { value })) => Ok(value),
                    _ => Err(FieldError::Load(Error::Dwarf {
                        path: self.vm.path().to_path_buf(),
                        problem: crate::DwarfProblem::MemberLocation,
                    })),
                }
            }
            Some(v) => Ok(v.udata_value().unwrap_or(0)),
        }
    }
}

struct Member {
    offset: u64,
    ty: Ty,
    /// `(bit offset within the struct, bit count)` for bitfields.
    bits: Option<(u64, u64)>,
}

fn qualify(q: &str, inner: String) -> String {
    if inner.ends_with('*') {
        format!("{inner} {q}")
    } else {
        format!("{q} {inner}")
    }
}
