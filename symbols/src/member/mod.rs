//! Member paths below a variable or a cast object (`init_uts_ns.name.nodename`, `(struct rq).cfs`,
//! `tbl[3].x`), resolved the same way against DWARF ([`crate::dwarf`]) and BTF ([`crate::btf`]): each
//! describes its types through one small model ([`graph`]), one walk follows the path through it
//! ([`walk`]), and types are spelled as C writes them ([`name`]). This module holds what the walk answers:
//! where the path lands ([`MemberInfo`]) or why it cannot ([`FieldError`]).

pub(crate) mod graph;

pub(crate) mod name;
#[cfg(test)]
mod tests;
pub(crate) mod walk;

use std::fmt;

use crate::error::Error;

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
