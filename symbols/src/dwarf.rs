//! Member paths below a variable (`init_uts_ns.name.nodename`, `tbl[3].x`) resolved against DWARF: the byte
//! offset from the variable's start, the size, and the C type name. The DWARF comes from any ELF file through
//! [`DebugSections`]: a mapped vmlinux, or a user binary's sections read with bounded reads
//! ([`crate::process`]). This module finds the variable's DIE and describes DIEs as types to the crate's
//! one member walk, the one [`crate::btf`] describes BTF to.
//!
//! A debug vmlinux holds thousands of compilation units; parsing them all is what makes `gdb` slow to
//! start. The variable's DIE is found instead from `.debug_names` when the file has one, else by walking only
//! the top-level DIEs of each unit and jumping over children with `DW_AT_sibling`. A declaration
//! (`extern struct uts_namespace init_uts_ns;` in a header) carries the full type as well as the definition
//! does, so for a global the first unit that declares it with a complete type ends the scan, usually in the
//! first few units.

use crate::error::{Cycle, DwarfProblem, Error};
use crate::member::graph::{size, Kind, Member, Qualifier, TypeGraph};
use crate::member::walk::walk;
use crate::path::PathElem;
use crate::progress::{Progress, Running, Task};
use crate::vmlinux::Vmlinux;
use gimli::{AttributeValue, EndianSlice, Operation, RunTimeEndian, UnitOffset};
use std::borrow::Cow;
use std::path::Path;

pub use crate::member::{FieldError, MemberInfo};

type R<'a> = EndianSlice<'a, RunTimeEndian>;
type Dwarf<'a> = gimli::Dwarf<R<'a>>;
type Unit<'a> = gimli::Unit<R<'a>>;
type Die<'a> = gimli::DebuggingInformationEntry<R<'a>>;

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

/// gimli's byte order of a file that is little-endian or not.
pub(crate) fn runtime_endian(little_endian: bool) -> RunTimeEndian {
    if little_endian {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    }
}

/// Loads the sections gimli needs from `src`, without copying.
fn load(src: &dyn DebugSections) -> Result<Dwarf<'_>, Error> {
    if !has_debug_info(src) {
        return Err(Error::NoDebugInfo {
            path: src.path().to_path_buf(),
        });
    }
    let endian = runtime_endian(src.little_endian());
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
        problem: DwarfProblem::Read(e),
    })
}

/// Resolves `var` + `path` in `vm`'s DWARF (a [`Vmlinux`], or any other [`DebugSections`]). A scan of
/// the units is reported to `progress` as a [`Task::DwarfScan`]; pass [`NoProgress`](crate::progress::NoProgress)
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

/// Resolves `path` below an object of the named type (`(struct widget)`) in `src`'s DWARF: the first
/// complete definition of that name among the units' top-level types (a `struct`/`union`/`enum` of the
/// cast's kind, a C++ `class` for `struct`, or a typedef when the cast names no kind). Its size comes with
/// an empty path.
pub fn resolve_type(
    src: &dyn DebugSections,
    cast: &crate::btf::CastType,
    path: &[PathElem],
) -> Result<MemberInfo, FieldError> {
    use crate::btf::CastKind;
    let dwarf = load(src)?;
    let tags: &[gimli::DwTag] = match cast.kind {
        Some(CastKind::Struct) => &[gimli::DW_TAG_structure_type, gimli::DW_TAG_class_type],
        Some(CastKind::Union) => &[gimli::DW_TAG_union_type],
        Some(CastKind::Enum) => &[gimli::DW_TAG_enumeration_type],
        None => &[
            gimli::DW_TAG_typedef,
            gimli::DW_TAG_structure_type,
            gimli::DW_TAG_class_type,
            gimli::DW_TAG_union_type,
        ],
    };
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(|e| dwarf_err(src, e))? {
        let unit = dwarf.unit(header).map_err(|e| dwarf_err(src, e))?;
        let types = Types {
            dwarf: &dwarf,
            unit: &unit,
            vm: src,
        };
        let mut cursor = unit.entries();
        if !cursor.next_entry().map_err(|e| dwarf_err(src, e))?
            || !cursor.next_entry().map_err(|e| dwarf_err(src, e))?
        {
            continue;
        }
        while let Some(entry) = cursor.current() {
            if tags.contains(&entry.tag())
                && entry.attr_value(gimli::DW_AT_declaration).is_none()
                && types.name_of_die(entry)?.as_deref() == Some(cast.name.as_str())
            {
                let ty = Ty::Die(entry.offset());
                return walk(&types, ty, format!("({cast})"), path)?.widened(&types);
            }
            cursor.next_sibling().map_err(|e| dwarf_err(src, e))?;
        }
    }
    Err(FieldError::NoType {
        name: cast.to_string(),
        suggestions: Vec::new(),
    })
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
        match walk(&types, ty, var.name.to_string(), path).and_then(|l| l.widened(&types)) {
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
                        problem: DwarfProblem::CrossUnitReference,
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

    fn name_of_die(&self, die: &Die<'a>) -> Result<Option<Cow<'a, str>>, FieldError> {
        let Some(v) = die.attr_value(gimli::DW_AT_name) else {
            return Ok(None);
        };
        let s = self
            .dwarf
            .attr_string(self.unit, v)
            .map_err(|e| self.err(e))?;
        Ok(Some(String::from_utf8_lossy(s.slice())))
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

    /// `DW_AT_data_member_location`: a constant (DWARF 3+), or `DW_OP_plus_uconst N` (DWARF 2); union
    /// members often omit it, meaning 0.
    fn member_offset(&self, die: &Die<'a>) -> Result<u64, FieldError> {
        match die.attr_value(gimli::DW_AT_data_member_location) {
            None => Ok(0),
            Some(AttributeValue::Exprloc(expr)) => {
                let mut ops = expr.operations(self.unit.encoding());
                match ops.next() {
                    Ok(Some(Operation::PlusConstant { value })) => Ok(value),
                    _ => Err(self.location_err()),
                }
            }
            // Not a constant (a DWARF 2/3 data4/data8 read as a location list, a negative sdata): refused,
            // not taken for offset 0 (which would arm the struct's first bytes).
            Some(v) => v.udata_value().ok_or_else(|| self.location_err()),
        }
    }

    /// One `DW_TAG_member` as the model describes it, a bitfield placed by [`Types::bitfield_offset`].
    fn member(&self, die: &Die<'a>) -> Result<Member<'a, Ty>, FieldError> {
        let base = self.member_offset(die)?;
        let ty = self.type_of(die)?;
        let name = self.name_of_die(die)?.unwrap_or_default();
        let bits = Self::udata(die, gimli::DW_AT_bit_size);
        let (bit_offset, bits) = match bits {
            Some(bits) => (
                self.bitfield_offset(die, base, ty, bits)?,
                Some(u32::try_from(bits).unwrap_or(u32::MAX)),
            ),
            None => (base.saturating_mul(8), None),
        };
        Ok(Member {
            name,
            ty,
            bit_offset,
            bits,
        })
    }

    /// A bitfield's bits from the start of the struct: `DW_AT_data_bit_offset` (DWARF 4 and later; what
    /// gcc writes for DWARF 5), else DWARF 2 and 3's `DW_AT_bit_offset` (gcc's DWARF 4 too), counted from
    /// the most significant bit of a storage unit of `DW_AT_byte_size` bytes (else the member type's) at
    /// the member's `DW_AT_data_member_location` `base`: on a little-endian machine the field's lowest bit
    /// is `unit * 8 - bit_offset - bits` into the unit.
    fn bitfield_offset(
        &self,
        die: &Die<'a>,
        base: u64,
        ty: Ty,
        bits: u64,
    ) -> Result<u64, FieldError> {
        if let Some(at) = Self::udata(die, gimli::DW_AT_data_bit_offset) {
            return Ok(at);
        }
        let start = i128::from(base) * 8;
        let Some(from_msb) = die.attr_value(gimli::DW_AT_bit_offset).and_then(|v| {
            // A constant of any form; only `DW_FORM_sdata` says it is signed.
            match v {
                AttributeValue::Sdata(n) => Some(i128::from(n)),
                v => v.udata_value().map(i128::from),
            }
        }) else {
            return Ok(base.saturating_mul(8));
        };
        let at = if self.vm.little_endian() {
            let unit = match Self::udata(die, gimli::DW_AT_byte_size) {
                Some(n) => n,
                None => size(self, ty)?.unwrap_or(0),
            };
            lowest_bit(start, unit, from_msb, bits)
        } else {
            u64::try_from(start + from_msb).ok()
        };
        // A field placed before its struct's start (or in a unit of unknown size) is not placed at all:
        // bit 0 in its stead would arm a watch on other memory.
        at.ok_or_else(|| self.location_err())
    }

    /// The error for a member whose place in its struct cannot be read.
    fn location_err(&self) -> FieldError {
        FieldError::Load(Error::Dwarf {
            path: self.vm.path().to_path_buf(),
            problem: DwarfProblem::MemberLocation,
        })
    }

    /// The array DIE a type position is in and how many of its dimensions are indexed away; `None` for
    /// anything but an array.
    fn array_at(&self, t: Ty) -> Result<Option<(UnitOffset, usize)>, FieldError> {
        Ok(match t {
            Ty::Dims { array, dim } => Some((array, dim)),
            Ty::Die(o) if self.entry(o)?.tag() == gimli::DW_TAG_array_type => Some((o, 0)),
            _ => None,
        })
    }
}

impl<'d, 'u, 'a> TypeGraph for Types<'d, 'u, 'a> {
    type Type = Ty;
    type Members<'s>
        = DieMembers<'s, 'd, 'u, 'a>
    where
        Self: 's;

    fn kind(&self, t: Ty) -> Result<Kind, FieldError> {
        let o = match t {
            Ty::Void => return Ok(Kind::Void),
            Ty::Dims { .. } => return Ok(Kind::Array),
            Ty::Die(o) => o,
        };
        Ok(match self.entry(o)?.tag() {
            gimli::DW_TAG_structure_type => Kind::Struct,
            gimli::DW_TAG_union_type => Kind::Union,
            gimli::DW_TAG_class_type => Kind::Class,
            gimli::DW_TAG_enumeration_type => Kind::Enum,
            gimli::DW_TAG_typedef => Kind::Typedef,
            gimli::DW_TAG_const_type => Kind::Qualifier(Qualifier::Const),
            gimli::DW_TAG_volatile_type => Kind::Qualifier(Qualifier::Volatile),
            gimli::DW_TAG_restrict_type => Kind::Qualifier(Qualifier::Restrict),
            gimli::DW_TAG_atomic_type => Kind::Qualifier(Qualifier::Atomic),
            gimli::DW_TAG_pointer_type => Kind::Pointer,
            gimli::DW_TAG_array_type => Kind::Array,
            gimli::DW_TAG_subroutine_type => Kind::Function,
            _ => Kind::Named,
        })
    }

    fn name(&self, t: Ty) -> Result<Cow<'_, str>, FieldError> {
        match t {
            Ty::Die(o) => Ok(self.name_of_die(&self.entry(o)?)?.unwrap_or_default()),
            Ty::Void | Ty::Dims { .. } => Ok(Cow::Borrowed("")),
        }
    }

    fn target(&self, t: Ty) -> Result<Ty, FieldError> {
        if let Some((array, dim)) = self.array_at(t)? {
            if dim + 1 < self.dims(array)?.len() {
                return Ok(Ty::Dims {
                    array,
                    dim: dim + 1,
                });
            }
            return self.type_of(&self.entry(array)?);
        }
        match t {
            Ty::Die(o) => self.type_of(&self.entry(o)?),
            Ty::Void | Ty::Dims { .. } => Ok(Ty::Void),
        }
    }

    fn array_len(&self, t: Ty) -> Result<Option<u64>, FieldError> {
        let Some((array, dim)) = self.array_at(t)? else {
            return Ok(None);
        };
        Ok(self.dims(array)?.get(dim).copied().flatten())
    }

    fn own_size(&self, t: Ty) -> Result<Option<u64>, FieldError> {
        let Ty::Die(o) = t else { return Ok(None) };
        let die = self.entry(o)?;
        if let Some(n) = Self::udata(&die, gimli::DW_AT_byte_size) {
            return Ok(Some(n));
        }
        match die.tag() {
            gimli::DW_TAG_pointer_type | gimli::DW_TAG_reference_type => {
                Ok(Some(u64::from(self.unit.encoding().address_size)))
            }
            // An enum without a size has its underlying integer's (DW_AT_type, DWARF 3 and later).
            gimli::DW_TAG_enumeration_type => size(self, self.type_of(&die)?),
            _ => Ok(None),
        }
    }

    fn is_declaration(&self, t: Ty) -> Result<bool, FieldError> {
        match t {
            Ty::Die(o) => Ok(self
                .entry(o)?
                .attr_value(gimli::DW_AT_declaration)
                .is_some()),
            Ty::Void | Ty::Dims { .. } => Ok(false),
        }
    }

    fn members(&self, t: Ty) -> Result<DieMembers<'_, 'd, 'u, 'a>, FieldError> {
        let mut dies = match t {
            Ty::Die(o) => self.children(o)?,
            Ty::Void | Ty::Dims { .. } => Vec::new(),
        };
        // A class's own members first: one of them shadows a base's member of the same name.
        dies.sort_by_key(|d| d.tag() == gimli::DW_TAG_inheritance);
        Ok(DieMembers {
            types: self,
            dies: dies.into_iter(),
        })
    }

    fn corrupt(&self, t: Ty, cycle: Cycle) -> FieldError {
        let die = match t {
            Ty::Void => 0,
            Ty::Die(o) | Ty::Dims { array: o, .. } => o.0 as u64,
        };
        FieldError::Load(Error::Dwarf {
            path: self.vm.path().to_path_buf(),
            problem: DwarfProblem::Cycle { die, cycle },
        })
    }
}

/// The `DW_TAG_member` children of a struct, union or class, described one at a time: a member after
/// the one looked for is never read. A C++ base class (`DW_TAG_inheritance`) is an unnamed member, so the
/// walk finds the fields a class inherits as it finds an anonymous struct's; a virtual base, whose place
/// is an expression evaluated at run time, is left out, and so is a static data member, which is not in
/// the object.
struct DieMembers<'s, 'd, 'u, 'a> {
    types: &'s Types<'d, 'u, 'a>,
    dies: std::vec::IntoIter<Die<'a>>,
}

impl<'s, 'a> Iterator for DieMembers<'s, '_, '_, 'a> {
    type Item = Result<Member<'s, Ty>, FieldError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let die = self.dies.next()?;
            match die.tag() {
                // A static data member (gcc's DWARF 4 writes one as a member declaration, without a
                // location) lives outside the object: it is no field of it.
                gimli::DW_TAG_member
                    if !matches!(
                        die.attr_value(gimli::DW_AT_declaration),
                        Some(AttributeValue::Flag(true))
                    ) =>
                {
                    return Some(self.types.member(&die))
                }
                gimli::DW_TAG_inheritance if !is_virtual(&die) => {
                    return Some(self.types.member(&die).map(|base| Member {
                        name: Cow::Borrowed(""),
                        ..base
                    }));
                }
                _ => {}
            }
        }
    }
}

/// Whether a `DW_TAG_inheritance` names a virtual base, whose place in the object is known only at run
/// time.
fn is_virtual(die: &Die<'_>) -> bool {
    matches!(
        die.attr_value(gimli::DW_AT_virtuality),
        Some(AttributeValue::Virtuality(v)) if v != gimli::DW_VIRTUALITY_none
    )
}

/// A DWARF 2-4 bitfield's lowest bit from its struct's start on a little-endian machine: `from_msb`
/// bits below the top of a `unit`-byte storage unit starting at bit `start`, `bits` wide. `None` when the
/// unit's size is unknown (0) or the field would start before the struct.
fn lowest_bit(start: i128, unit: u64, from_msb: i128, bits: u64) -> Option<u64> {
    if unit == 0 {
        return None;
    }
    u64::try_from(start + i128::from(unit) * 8 - from_msb - i128::from(bits)).ok()
}

#[cfg(test)]
mod tests {
    use super::lowest_bit;

    #[test]
    fn a_bitfield_counts_down_from_its_units_top() {
        // `unsigned b : 5` after a 3-bit field, in a 4-byte unit at byte 8: bits 67..72.
        assert_eq!(lowest_bit(64, 4, 24, 5), Some(67));
    }

    #[test]
    fn a_bitfield_without_a_unit_size_or_before_its_struct_is_not_placed() {
        // Bit 0 in place of either would arm the watch on other memory.
        assert_eq!(lowest_bit(64, 0, 24, 5), None);
        assert_eq!(lowest_bit(0, 0, 3, 5), None);
        assert_eq!(lowest_bit(0, 1, 8, 5), None);
    }
}
