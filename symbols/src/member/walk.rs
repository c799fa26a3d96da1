//! The one member-path walk: `.field` and `[N]` steps from a variable or cast object through any
//! [`TypeGraph`], looking through typedefs and qualifiers, searching into anonymous struct and union
//! members, bounding every chase so corrupt type information ends in an error, and saying what is there
//! instead when a step does not apply.

use super::graph::{size, Kind, Member, TypeGraph, MAX_NEST};
use super::name::type_name;
use super::{FieldError, MemberInfo};
use crate::error::Cycle;
use crate::path::PathElem;

/// The most members one search through anonymous members visits. Depth alone does not bound it: corrupt
/// information can give a struct thousands of anonymous members that are each that struct again.
const MAX_VISITS: u32 = 1 << 20;

/// Where a path ends: the object reached and how it was reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Landing<T> {
    /// The path as written so far: `init_uts_ns.name`, `(struct rq).cfs`.
    pub at: String,
    /// From the start of the object the path began at.
    pub bit_offset: u64,
    pub ty: T,
    /// The width when the path ends at a bitfield.
    pub bits: Option<u32>,
}

/// Follows `path` from an object of type `ty`, written `at` (a variable's name, `(struct rq)`).
pub(crate) fn walk<G: TypeGraph + ?Sized>(
    g: &G,
    ty: G::Type,
    at: String,
    path: &[PathElem],
) -> Result<Landing<G::Type>, FieldError> {
    let mut land = Landing {
        at,
        bit_offset: 0,
        ty,
        bits: None,
    };
    for elem in path {
        match elem {
            PathElem::Field(field) => field_step(g, &mut land, field)?,
            PathElem::Index(index) => index_step(g, &mut land, *index)?,
        }
    }
    Ok(land)
}

/// `.field` on the landing's type.
fn field_step<G: TypeGraph + ?Sized>(
    g: &G,
    land: &mut Landing<G::Type>,
    field: &str,
) -> Result<(), FieldError> {
    let s = g.strip(land.ty)?;
    let at = || land.at.clone();
    if !matches!(g.kind(s)?, Kind::Struct | Kind::Union | Kind::Class) {
        return Err(FieldError::NotAStruct {
            at: at(),
            field: field.to_string(),
            type_name: type_name(g, land.ty)?,
        });
    }
    if g.is_declaration(s)? {
        return Err(FieldError::Incomplete {
            at: at(),
            type_name: type_name(g, land.ty)?,
        });
    }
    let Some(m) = find_member(g, s, field, 0, &mut 0)? else {
        let mut available = Vec::new();
        member_names(g, s, &mut available, 0, &mut 0)?;
        return Err(FieldError::NoSuchField {
            at: at(),
            field: field.to_string(),
            type_name: type_name(g, land.ty)?,
            available,
        });
    };
    land.bit_offset = land.bit_offset.saturating_add(m.bit_offset);
    land.ty = m.ty;
    land.bits = m.bits;
    land.at.push('.');
    land.at.push_str(field);
    Ok(())
}

/// `[index]` on the landing's type.
fn index_step<G: TypeGraph + ?Sized>(
    g: &G,
    land: &mut Landing<G::Type>,
    index: u64,
) -> Result<(), FieldError> {
    let s = g.strip(land.ty)?;
    if g.kind(s)? != Kind::Array {
        return Err(FieldError::NotAnArray {
            at: land.at.clone(),
            index,
            type_name: type_name(g, land.ty)?,
        });
    }
    // A zero-length array (`T[0]`, the GNU way to write `T[]` before C99) bounds nothing, as `T[]` does:
    // BTF records both with 0 elements, DWARF gives the former a count of 0.
    if let Some(len) = g.array_len(s)?.filter(|&len| len > 0) {
        if index >= len {
            return Err(FieldError::IndexOutOfRange {
                at: land.at.clone(),
                index,
                len,
                type_name: type_name(g, land.ty)?,
            });
        }
    }
    let elem = g.target(s)?;
    let Some(stride) = size(g, elem)? else {
        return Err(FieldError::Incomplete {
            at: land.at.clone(),
            type_name: type_name(g, elem)?,
        });
    };
    let bytes = index.saturating_mul(stride);
    land.bit_offset = land.bit_offset.saturating_add(bytes.saturating_mul(8));
    land.ty = elem;
    land.bits = None;
    land.at.push_str(&format!("[{index}]"));
    Ok(())
}

/// A named member of a struct or union, searching into anonymous struct/union members (C11), which is
/// how the kernel writes most of its unions. The offset is from the start of `s`.
fn find_member<'s, G: TypeGraph + ?Sized>(
    g: &'s G,
    s: G::Type,
    field: &str,
    depth: u32,
    visits: &mut u32,
) -> Result<Option<Member<'s, G::Type>>, FieldError> {
    for m in g.members(s)? {
        visit(g, s, visits)?;
        let m = m?;
        if m.name == field {
            return g.settle_bitfield(m).map(Some);
        }
        if m.name.is_empty() && depth < MAX_NEST {
            let inner = g.strip(m.ty)?;
            if matches!(g.kind(inner)?, Kind::Struct | Kind::Union | Kind::Class) {
                if let Some(f) = find_member(g, inner, field, depth + 1, visits)? {
                    return Ok(Some(Member {
                        bit_offset: m.bit_offset.saturating_add(f.bit_offset),
                        ..f
                    }));
                }
            }
        }
    }
    Ok(None)
}

/// Every field name reachable from a struct or union, through anonymous members.
fn member_names<G: TypeGraph + ?Sized>(
    g: &G,
    s: G::Type,
    out: &mut Vec<String>,
    depth: u32,
    visits: &mut u32,
) -> Result<(), FieldError> {
    for m in g.members(s)? {
        visit(g, s, visits)?;
        let m = m?;
        if !m.name.is_empty() {
            out.push(m.name.into_owned());
        } else if depth < MAX_NEST {
            let inner = g.strip(m.ty)?;
            if matches!(g.kind(inner)?, Kind::Struct | Kind::Union | Kind::Class) {
                member_names(g, inner, out, depth + 1, visits)?;
            }
        }
    }
    Ok(())
}

/// Counts one member visited by a search, failing once a search has visited [`MAX_VISITS`].
#[inline]
fn visit<G: TypeGraph + ?Sized>(g: &G, s: G::Type, visits: &mut u32) -> Result<(), FieldError> {
    *visits += 1;
    if *visits > MAX_VISITS {
        return Err(too_many_visits(g, s));
    }
    Ok(())
}

/// Out of line: the member loops run it never on sound type information.
#[cold]
fn too_many_visits<G: TypeGraph + ?Sized>(g: &G, s: G::Type) -> FieldError {
    g.corrupt(s, Cycle::Visits(MAX_VISITS))
}

impl<T: Copy> Landing<T> {
    /// The object the path reached, for watching exactly: a bitfield is refused, since a breakpoint
    /// cannot watch single bits, with the word holding it as the way out. An end without a size (`T[]`)
    /// is answered with no size.
    pub(crate) fn exact<G>(self, g: &G) -> Result<MemberInfo, FieldError>
    where
        G: TypeGraph<Type = T> + ?Sized,
    {
        if let Some(bits) = self.bits {
            let (word_offset, word_size) = containing_word(self.bit_offset, bits);
            return Err(FieldError::Bitfield {
                at: self.at,
                bits,
                bit_offset: self.bit_offset,
                word_offset,
                word_size,
            });
        }
        Ok(MemberInfo {
            offset: self.bit_offset / 8,
            size: size(g, self.ty)?,
            type_name: type_name(g, self.ty)?,
        })
    }

    /// The object the path reached, with a bitfield widened to the bytes that hold it and typed
    /// `unsigned int : 3`. An end whose type is only declared, or an array of unknown length, is
    /// [`FieldError::Incomplete`]: the information holding its layout is elsewhere.
    pub(crate) fn widened<G>(self, g: &G) -> Result<MemberInfo, FieldError>
    where
        G: TypeGraph<Type = T> + ?Sized,
    {
        let mut type_name = type_name(g, self.ty)?;
        let offset = self.bit_offset / 8;
        let size = match self.bits {
            Some(bits) => {
                type_name.push_str(&format!(" : {bits}"));
                Some((self.bit_offset % 8 + u64::from(bits)).div_ceil(8))
            }
            None => size(g, self.ty)?,
        };
        if size.is_none() && g.kind(self.ty)? != Kind::Void {
            let s = g.strip(self.ty)?;
            if g.kind(s)? == Kind::Array || g.is_declaration(s)? {
                return Err(FieldError::Incomplete {
                    at: self.at,
                    type_name,
                });
            }
        }
        Ok(MemberInfo {
            offset,
            size,
            type_name,
        })
    }
}

/// The smallest naturally aligned 1, 2, 4 or 8 bytes holding bits `bit..bit + bits` (from the object's
/// start): `(byte offset, size)`. Bits straddling 8-byte words (packed structs) get the bytes they span.
pub(crate) fn containing_word(bit: u64, bits: u32) -> (u64, u64) {
    let end = bit.saturating_add(u64::from(bits.max(1)));
    for size in [1u64, 2, 4, 8] {
        let start = bit / 8 / size * size;
        if end <= (start + size).saturating_mul(8) {
            return (start, size);
        }
    }
    (bit / 8, end.div_ceil(8) - bit / 8)
}
