//! What exactly was wrong inside a file that did not load: the problem kinds an [`Error`](super::Error)
//! carries for a symbol line, an ELF file, its DWARF and BTF. Each says only what was found; the way out
//! is the [`Error`](super::Error)'s, which knows the file and its role. A problem that comes from a
//! parser's own error keeps it, and [`std::error::Error::source`] of the [`Error`](super::Error) returns it.

use std::fmt;

/// Why a line of kallsyms or System.map text is not `ADDRESS TYPE NAME [module]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineProblem {
    /// Fewer than three fields.
    MissingFields,
    /// The first field is not a hexadecimal number.
    BadAddress,
    /// The type is one character that is neither a letter nor `?`.
    TypeNotLetter,
    /// The type is longer than one character.
    TypeTooLong,
    /// Something other than one `[module]` follows the name.
    TrailingText,
    /// A System.map line with a `[module]` column: the file is a saved kallsyms.
    ModuleColumn,
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LineProblem::MissingFields => "expected `ADDRESS TYPE NAME`",
            LineProblem::BadAddress => "the address is not hexadecimal",
            LineProblem::TypeNotLetter => "the type is not a letter",
            LineProblem::TypeTooLong => "the type is not one letter",
            LineProblem::TrailingText => "trailing text is not a `[module]`",
            LineProblem::ModuleColumn => {
                "System.map has no [module] column; this looks like a kallsyms dump (pass it as kallsyms)"
            }
        })
    }
}

/// Why a file is not a usable ELF file.
#[derive(Debug)]
pub enum ElfProblem {
    /// The file is empty (or a procfs file, which reports size 0).
    Empty,
    /// A compressed boot image (`MZ` or the `HdrS` setup header): vmlinuz or bzImage.
    BootImage,
    /// No ELF magic at the start, and no boot image either.
    NoMagic,
    /// goblin could not parse the headers (malformed or truncated).
    Malformed(goblin::error::Error),
    /// A section's bytes extend past the end of the file: it was cut short.
    SectionPastEnd {
        section: String,
        /// Where the section ends, in bytes from the file's start.
        end: u64,
        file_len: u64,
    },
    /// goblin could not parse the symbol table.
    BadSymtab(goblin::error::Error),
    /// The symbol table's string table lies (partly) outside the file.
    StrtabOutside,
}

impl fmt::Display for ElfProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfProblem::Empty => f.write_str("the file is empty (0 bytes)"),
            ElfProblem::BootImage => {
                f.write_str("this is a compressed boot image (bzImage/vmlinuz), not vmlinux")
            }
            ElfProblem::NoMagic => f.write_str("no ELF magic at the start"),
            ElfProblem::Malformed(e) => write!(f, "malformed or truncated ELF ({e})"),
            ElfProblem::SectionPastEnd {
                section,
                end,
                file_len,
            } => write!(
                f,
                "section {section} ends at byte {end} but the file has only {file_len} bytes (truncated)"
            ),
            ElfProblem::BadSymtab(e) => write!(f, "bad symbol table ({e})"),
            ElfProblem::StrtabOutside => {
                f.write_str("the symbol string table lies outside the file (truncated)")
            }
        }
    }
}

impl ElfProblem {
    /// goblin's own error, when the problem is one it found.
    pub fn source(&self) -> Option<&goblin::error::Error> {
        match self {
            ElfProblem::Malformed(e) | ElfProblem::BadSymtab(e) => Some(e),
            _ => None,
        }
    }
}

/// Why DWARF that is there cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DwarfProblem {
    /// gimli (or addr2line, which reads with gimli) failed on the data: corrupt or truncated.
    Read(gimli::Error),
    /// A type refers into another compilation unit (`DW_FORM_ref_addr`, as LTO builds write).
    CrossUnitReference,
    /// A member's location is a DWARF expression other than a constant offset.
    MemberLocation,
    /// The section is compressed (`SHF_COMPRESSED`); it is not inflated in place of a mapping.
    Compressed { section: String },
    /// The types below the DIE at this unit offset run past one of the member walk's bounds.
    Cycle { die: u64, cycle: Cycle },
}

/// A bound of the member walk that type information ran past: sound information never does, so it is taken
/// for a cycle in corrupt information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cycle {
    /// More than this many typedefs and qualifiers in a row.
    Chain(usize),
    /// Arrays nested more than this deep.
    Nest(u32),
    /// A search through anonymous members visited more than this many members.
    Visits(u32),
}

impl fmt::Display for DwarfProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DwarfProblem::Read(e) => write!(f, "{e}"),
            DwarfProblem::CrossUnitReference => f.write_str(
                "a type refers into another compilation unit (LTO build?), which is not supported",
            ),
            DwarfProblem::MemberLocation => {
                f.write_str("a member location is a DWARF expression this reader does not evaluate")
            }
            DwarfProblem::Compressed { section } => write!(f, "section {section} is compressed"),
            DwarfProblem::Cycle { die, cycle } => match cycle {
                Cycle::Chain(n) => write!(
                    f,
                    "DIE 0x{die:x} is more than {n} typedefs and qualifiers deep (a cycle?)"
                ),
                Cycle::Nest(n) => write!(f, "DIE 0x{die:x} nests arrays more than {n} deep (a cycle?)"),
                Cycle::Visits(n) => write!(
                    f,
                    "searching DIE 0x{die:x} visits more than {n} members through anonymous ones (a cycle?)"
                ),
            },
        }
    }
}

impl DwarfProblem {
    /// gimli's own error, when the problem is one it found.
    pub fn source(&self) -> Option<&gimli::Error> {
        match self {
            DwarfProblem::Read(e) => Some(e),
            _ => None,
        }
    }
}

/// A section of a BTF blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BtfSection {
    Type,
    String,
}

impl fmt::Display for BtfSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BtfSection::Type => "type",
            BtfSection::String => "string",
        })
    }
}

/// Why BTF type information is not usable: a header or record that does not check out when the blob is
/// loaded, or (found later, on the types a lookup walks) a reference that leads nowhere or round in circles.
/// Records count from 1 in this blob; ids are BTF type ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BtfProblem {
    /// Fewer bytes than the 24-byte header.
    TooShort { len: usize },
    /// The first two bytes are not `0xeb9f` in either byte order.
    BadMagic([u8; 2]),
    /// A format version other than 1.
    Version(u8),
    /// More than 4 GiB: BTF offsets are 32-bit.
    TooLarge,
    /// `hdr_len` is shorter than the header or longer than the file (`len` bytes).
    HeaderLength { hdr_len: usize, len: usize },
    /// A section's extent (`size` bytes at `offset` past the header) runs past the end of the file.
    SectionOutOfBounds {
        section: BtfSection,
        offset: usize,
        size: usize,
        file_len: usize,
    },
    /// The string section's last byte is not a NUL.
    StringsUnterminated,
    /// The string section (of a blob that is not split) does not start with the empty string.
    StringsStart,
    /// Fewer than a record header's 12 bytes are left in the type section.
    RecordCutShort { record: usize },
    /// A record's kind is one this reader does not know.
    UnknownKind { record: usize, kind: u32 },
    /// A record's kind-specific data runs past the end of the type section.
    RecordPastEnd { record: usize, kind: u32, vlen: u32 },
    /// More types or strings (with the base's) than 32-bit ids and offsets can number.
    TooManyIds,
    /// A type refers to an id past the last one (`last`).
    TypeIdOutOfRange { id: u32, last: u32 },
    /// More than `limit` typedefs and qualifiers in a row from type `id`.
    ChainTooDeep { id: u32, limit: usize },
    /// Arrays nested more than `limit` deep below type `id`.
    NestTooDeep { id: u32, limit: u32 },
    /// A search of type `id` visited more than `limit` members through anonymous ones.
    TooManyVisits { id: u32, limit: u32 },
}

impl fmt::Display for BtfProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BtfProblem::TooShort { len } => {
                write!(f, "{len} bytes is shorter than a BTF header (24 bytes)")
            }
            BtfProblem::BadMagic(m) => write!(
                f,
                "bad magic 0x{:02x}{:02x} (BTF starts with 0xeb9f)",
                m[0], m[1]
            ),
            BtfProblem::Version(v) => write!(f, "BTF version {v} (this reader knows version 1)"),
            BtfProblem::TooLarge => f.write_str("the file is larger than 4 GiB"),
            BtfProblem::HeaderLength { hdr_len, len } => write!(
                f,
                "header length {hdr_len} is outside 24..={len} (the file is {len} bytes)"
            ),
            BtfProblem::SectionOutOfBounds {
                section,
                offset,
                size,
                file_len,
            } => write!(
                f,
                "the {section} section ({size} bytes at {offset} past the header) runs past the end of the \
                 {file_len}-byte file: it was cut short"
            ),
            BtfProblem::StringsUnterminated => {
                f.write_str("the string section does not end with a NUL")
            }
            BtfProblem::StringsStart => {
                f.write_str("the string section does not start with the empty string")
            }
            BtfProblem::RecordCutShort { record } => write!(
                f,
                "type record {record} is cut short at the end of the type section"
            ),
            BtfProblem::UnknownKind { record, kind } => write!(
                f,
                "type {record} has kind {kind}, which this reader does not know (BTF newer than it?)"
            ),
            BtfProblem::RecordPastEnd { record, kind, vlen } => write!(
                f,
                "type record {record} (kind {kind}, {vlen} members) runs past the end of the type section"
            ),
            BtfProblem::TooManyIds => {
                f.write_str("more types or strings than 32-bit ids can number")
            }
            BtfProblem::TypeIdOutOfRange { id, last } => write!(
                f,
                "a type refers to type id {id}, but the ids end at {last}"
            ),
            BtfProblem::ChainTooDeep { id, limit } => write!(
                f,
                "type {id} is more than {limit} typedefs and qualifiers deep (a cycle?)"
            ),
            BtfProblem::NestTooDeep { id, limit } => write!(
                f,
                "type {id} nests arrays more than {limit} deep (a cycle?)"
            ),
            BtfProblem::TooManyVisits { id, limit } => write!(
                f,
                "searching type {id} visits more than {limit} members through anonymous ones (a cycle?)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::{kallsyms, sysmap};
    use std::error::Error as _;
    use std::path::Path;

    #[test]
    fn a_bad_symbol_line_names_its_problem_and_line() {
        let parse = |text: &str| match kallsyms::from_text(text, Path::new("k")) {
            Err(Error::Parse { line, problem, .. }) => (line, problem),
            other => panic!("{other:?}"),
        };
        let first = "ffffffff81000000 T _text\n";
        for (second, problem) in [
            ("zz T x", LineProblem::BadAddress),
            ("1 T", LineProblem::MissingFields),
            ("1 TT x", LineProblem::TypeTooLong),
            ("1 7 x", LineProblem::TypeNotLetter),
            ("1 T x y", LineProblem::TrailingText),
        ] {
            assert_eq!(
                parse(&format!("{first}{second}\n")),
                (2, problem),
                "{second}"
            );
        }
        let e = sysmap::from_text(&format!("{first}2 t f\t[m]\n"), Path::new("System.map"))
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Parse {
                    line: 2,
                    problem: LineProblem::ModuleColumn,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "System.map:2: not an `ADDRESS TYPE NAME` symbol line: System.map has no [module] column; this \
             looks like a kallsyms dump (pass it as kallsyms)"
        );
    }

    #[test]
    fn a_dwarf_read_error_keeps_gimlis_error_as_source() {
        let e = Error::Dwarf {
            path: "vmlinux".into(),
            problem: DwarfProblem::Read(gimli::Error::BadUnsignedLeb128),
        };
        let gimli_text = gimli::Error::BadUnsignedLeb128.to_string();
        assert_eq!(
            e.to_string(),
            format!(
                "vmlinux: cannot read its DWARF debug info: {gimli_text}; the file may be corrupt or truncated, \
                 fetch it again"
            )
        );
        assert_eq!(
            e.source().and_then(|s| s.downcast_ref::<gimli::Error>()),
            Some(&gimli::Error::BadUnsignedLeb128)
        );
        // A problem gimli did not find has no further cause; a compressed section is no corruption.
        let e = Error::Dwarf {
            path: "vmlinux".into(),
            problem: DwarfProblem::Compressed {
                section: ".debug_info".into(),
            },
        };
        assert!(e.source().is_none());
        assert_eq!(
            e.to_string(),
            "vmlinux: cannot read its DWARF debug info: section .debug_info is compressed; decompress the \
             file first: objcopy --decompress-debug-sections vmlinux vmlinux.plain"
        );
    }
}
