//! The type model the member walk reads: what a type is (struct, array, typedef, ...), its name, size,
//! members and element, asked of DWARF or BTF alike through [`TypeGraph`], and the two questions every
//! walk step asks of it first: what a type is below its typedefs and qualifiers ([`peel`]), and how many
//! bytes it takes ([`size`]).

use std::borrow::Cow;

use super::FieldError;
use crate::error::Cycle;

/// How many typedefs and qualifiers are followed before a chain is taken for a cycle. Real kernels stack
/// a handful (`const volatile` over two typedefs).
pub(crate) const MAX_CHAIN: usize = 32;
/// How deep anonymous members, nested arrays and type names are followed.
pub(crate) const MAX_NEST: u32 = 16;

/// What a type is, as far as a member path and a C spelling care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// No type: `void`, or a missing `DW_AT_type`.
    Void,
    Struct,
    Union,
    /// A C++ class: members like a struct.
    Class,
    Enum,
    Typedef,
    Qualifier(Qualifier),
    Pointer,
    Array,
    /// A function type (`DW_TAG_subroutine_type`, BTF `FUNC_PROTO`); its target is the return type.
    Function,
    /// Anything spelled by its name alone: integers, floats, and kinds a path never goes through.
    Named,
}

/// A qualifier over a type; all of them are looked through by a member path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Qualifier {
    Const,
    Volatile,
    Restrict,
    Atomic,
    /// A BTF type tag (`__user`, `__rcu`): an annotation for the verifier, not part of the C type.
    Tag,
}

impl Qualifier {
    /// The C keyword; `None` for what C does not spell.
    pub(crate) fn keyword(self) -> Option<&'static str> {
        match self {
            Qualifier::Const => Some("const"),
            Qualifier::Volatile => Some("volatile"),
            Qualifier::Restrict => Some("restrict"),
            Qualifier::Atomic => Some("_Atomic"),
            Qualifier::Tag => None,
        }
    }
}

/// One member of a struct or union, as its type information records it.
#[derive(Debug, Clone)]
pub(crate) struct Member<'s, T> {
    /// Empty for an anonymous member (C11 anonymous struct or union).
    pub name: Cow<'s, str>,
    pub ty: T,
    /// From the start of the struct or union that lists the member.
    pub bit_offset: u64,
    /// The width, when the record itself says the member is a bitfield.
    pub bits: Option<u32>,
}

/// Type information a member path can be walked through. `Type` is a cheap handle (a BTF id, a DIE
/// offset); every question may fail, since the information may be corrupt.
pub(crate) trait TypeGraph {
    type Type: Copy + PartialEq + std::fmt::Debug;
    /// The members of a struct or union, in order.
    type Members<'s>: Iterator<Item = Result<Member<'s, Self::Type>, FieldError>>
    where
        Self: 's;

    fn kind(&self, t: Self::Type) -> Result<Kind, FieldError>;
    /// The type's own name; empty when it has none (an anonymous struct, a pointer).
    fn name(&self, t: Self::Type) -> Result<Cow<'_, str>, FieldError>;
    /// What a typedef, qualifier or pointer refers to, an array's element, a function's return type;
    /// void for anything else.
    fn target(&self, t: Self::Type) -> Result<Self::Type, FieldError>;
    /// An array's element count; `None` for `T[]`, whose length nothing bounds.
    fn array_len(&self, t: Self::Type) -> Result<Option<u64>, FieldError>;
    /// The size the type records for itself (structs, integers, enums, pointers); `None` where it has to
    /// be worked out (arrays) or there is none.
    fn own_size(&self, t: Self::Type) -> Result<Option<u64>, FieldError>;
    /// Whether the type is only declared (a forward-declared struct): no members, no size.
    fn is_declaration(&self, t: Self::Type) -> Result<bool, FieldError>;
    fn members(&self, t: Self::Type) -> Result<Self::Members<'_>, FieldError>;
    /// A member found by name, with what its record alone does not say about it being a bitfield
    /// (BTF without kind_flag gives the width in the member's integer type). The record as it is by
    /// default.
    fn settle_bitfield<'s>(
        &'s self,
        m: Member<'s, Self::Type>,
    ) -> Result<Member<'s, Self::Type>, FieldError> {
        Ok(m)
    }
    /// The type below `t`'s typedefs and qualifiers, as [`peel`] finds it: a model may answer faster
    /// (with one read per link), never differently.
    fn strip(&self, t: Self::Type) -> Result<Self::Type, FieldError> {
        peel(self, t)
    }
    /// The error for type information that runs past one of the walk's bounds at `t`, naming the file.
    fn corrupt(&self, t: Self::Type, cycle: Cycle) -> FieldError;
}

/// Looks through typedefs and qualifiers to the type that has a layout.
pub(crate) fn peel<G: TypeGraph + ?Sized>(g: &G, mut t: G::Type) -> Result<G::Type, FieldError> {
    for _ in 0..MAX_CHAIN {
        match g.kind(t)? {
            Kind::Typedef | Kind::Qualifier(_) => t = g.target(t)?,
            _ => return Ok(t),
        }
    }
    Err(g.corrupt(t, Cycle::Chain(MAX_CHAIN)))
}

/// Size in bytes; `None` for void, functions, declarations and `T[]`.
pub(crate) fn size<G: TypeGraph + ?Sized>(g: &G, t: G::Type) -> Result<Option<u64>, FieldError> {
    size_depth(g, t, 0)
}

fn size_depth<G: TypeGraph + ?Sized>(
    g: &G,
    t: G::Type,
    depth: u32,
) -> Result<Option<u64>, FieldError> {
    if depth > MAX_NEST {
        return Err(g.corrupt(t, Cycle::Nest(MAX_NEST)));
    }
    let t = g.strip(t)?;
    if let Some(n) = g.own_size(t)? {
        return Ok(Some(n));
    }
    if g.kind(t)? != Kind::Array {
        return Ok(None);
    }
    let Some(len) = g.array_len(t)? else {
        return Ok(None);
    };
    Ok(size_depth(g, g.target(t)?, depth + 1)?.map(|e| e.saturating_mul(len)))
}
