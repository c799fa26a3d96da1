//! The raw BTF format: the header, the type records and the string section, checked once when a blob is
//! loaded, so that everything after can index into it without re-checking extents.
//!
//! Layout (`include/uapi/linux/btf.h`): a header (magic `0xeB9F` in the blob's byte order, version 1,
//! `hdr_len`, then the type and string sections as offset/length pairs counted from the header's end);
//! the type section is a run of 12-byte `btf_type` records, each followed by kind-specific data whose
//! length follows from the kind and `vlen`; the string section is NUL-terminated names, offset 0 being "".
//! Type id 0 is `void`; ids count from 1 (or, in split BTF, on from the base's last id).

use std::ops::Range;

use crate::error::{BtfProblem, BtfSection};

pub(super) const MAGIC: u16 = 0xeb9f;
pub(super) const HEADER_LEN: usize = 24;
/// The longest name read: twice the kernel's own limit.
const MAX_NAME: usize = 1024;

/// `BTF_KIND_*`.
pub(super) mod kind {
    pub const INT: u32 = 1;
    pub const PTR: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const FWD: u32 = 7;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC: u32 = 12;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const FLOAT: u32 = 16;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}

/// One type record as stored: `data` is where its kind-specific trailer starts in the blob.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record {
    pub name_off: u32,
    pub kind: u32,
    pub vlen: u32,
    pub kflag: bool,
    /// `size` for INT, STRUCT, UNION, ENUM, ENUM64, FLOAT, DATASEC; the referenced type id otherwise.
    pub size_or_type: u32,
    pub data: usize,
}

/// A blob's bytes: read into memory, or the running kernel's own, mapped where sysfs keeps them.
#[derive(Debug)]
pub(super) enum Blob {
    Read(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for Blob {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Blob::Read(v) => v,
            Blob::Mapped(m) => m,
        }
    }
}

impl From<Vec<u8>> for Blob {
    fn from(bytes: Vec<u8>) -> Blob {
        Blob::Read(bytes)
    }
}

/// A blob whose header and type records have been checked.
#[derive(Debug)]
pub(super) struct Raw {
    pub data: Blob,
    pub big_endian: bool,
    /// The string section, within `data`.
    pub strs: Range<usize>,
    /// Where each type record starts in `data`, in id order.
    pub records: Vec<u32>,
}

impl Raw {
    /// Checks the header and walks the type records once. `split` is whether this blob continues a base
    /// (whose string section then owns offset 0, so this one need not start with a NUL).
    pub fn parse(data: impl Into<Blob>, split: bool) -> Result<Raw, BtfProblem> {
        let data = data.into();
        if data.len() < HEADER_LEN {
            return Err(BtfProblem::TooShort { len: data.len() });
        }
        let big_endian = match [data[0], data[1]] {
            m if u16::from_le_bytes(m) == MAGIC => false,
            m if u16::from_be_bytes(m) == MAGIC => true,
            m => return Err(BtfProblem::BadMagic(m)),
        };
        if data[2] != 1 {
            return Err(BtfProblem::Version(data[2]));
        }
        if u32::try_from(data.len()).is_err() {
            return Err(BtfProblem::TooLarge);
        }
        let mut raw = Raw {
            data,
            big_endian,
            strs: 0..0,
            records: Vec::new(),
        };
        let field = |i: usize| raw.u32(4 + 4 * i) as usize;
        let (hdr_len, type_off, type_len, str_off, str_len) =
            (field(0), field(1), field(2), field(3), field(4));
        let len = raw.data.len();
        if hdr_len < HEADER_LEN || hdr_len > len {
            return Err(BtfProblem::HeaderLength { hdr_len, len });
        }
        let section = |section, offset: usize, size: usize| {
            let start = hdr_len.checked_add(offset);
            match start.and_then(|s| s.checked_add(size).map(|e| s..e)) {
                Some(r) if r.end <= len => Ok(r),
                _ => Err(BtfProblem::SectionOutOfBounds {
                    section,
                    offset,
                    size,
                    file_len: len,
                }),
            }
        };
        let types = section(BtfSection::Type, type_off, type_len)?;
        let strs = section(BtfSection::String, str_off, str_len)?;
        if !strs.is_empty() {
            if raw.data[strs.end - 1] != 0 {
                return Err(BtfProblem::StringsUnterminated);
            }
            if !split && raw.data[strs.start] != 0 {
                return Err(BtfProblem::StringsStart);
            }
        }
        raw.strs = strs;
        let mut at = types.start;
        while at < types.end {
            if types.end - at < 12 {
                return Err(BtfProblem::RecordCutShort {
                    record: raw.records.len() + 1,
                });
            }
            let r = raw.record_at(at);
            let trailer = match r.kind {
                kind::INT | kind::VAR | kind::DECL_TAG => Some(4),
                kind::ARRAY => Some(12),
                kind::STRUCT | kind::UNION | kind::DATASEC | kind::ENUM64 => {
                    (r.vlen as usize).checked_mul(12)
                }
                kind::ENUM | kind::FUNC_PROTO => (r.vlen as usize).checked_mul(8),
                kind::PTR
                | kind::FWD
                | kind::TYPEDEF
                | kind::VOLATILE
                | kind::CONST
                | kind::RESTRICT
                | kind::FUNC
                | kind::FLOAT
                | kind::TYPE_TAG => Some(0),
                kind => {
                    return Err(BtfProblem::UnknownKind {
                        record: raw.records.len() + 1,
                        kind,
                    })
                }
            };
            let end = trailer.and_then(|t| (at + 12).checked_add(t));
            match end {
                Some(end) if end <= types.end => {
                    raw.records.push(at as u32);
                    at = end;
                }
                _ => {
                    return Err(BtfProblem::RecordPastEnd {
                        record: raw.records.len() + 1,
                        kind: r.kind,
                        vlen: r.vlen,
                    })
                }
            }
        }
        Ok(raw)
    }

    /// A u32 at `off`; every caller reads within extents `parse` checked, so the 0 for "past the end" is
    /// never seen on a blob that parsed, and keeps a slip from panicking.
    pub fn u32(&self, off: usize) -> u32 {
        match off
            .checked_add(4)
            .and_then(|end| self.data.get(off..end))
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
        {
            Some(b) if self.big_endian => u32::from_be_bytes(b),
            Some(b) => u32::from_le_bytes(b),
            None => 0,
        }
    }

    fn record_at(&self, at: usize) -> Record {
        let info = self.u32(at + 4);
        Record {
            name_off: self.u32(at),
            kind: (info >> 24) & 0x1f,
            vlen: info & 0xffff,
            kflag: info >> 31 != 0,
            size_or_type: self.u32(at + 8),
            data: at + 12,
        }
    }

    /// The record of the `i`th type of this blob (0-based), if there is one.
    pub fn record(&self, i: usize) -> Option<Record> {
        self.records.get(i).map(|&at| self.record_at(at as usize))
    }

    /// The `j`th u32 of a record's trailer.
    pub fn word(&self, r: &Record, j: usize) -> u32 {
        self.u32(r.data + 4 * j)
    }

    /// The string at `off` within this blob's own string section: `None` when out of range.
    pub fn string(&self, off: usize) -> Option<&[u8]> {
        let start = self.strs.start.checked_add(off)?;
        let rest = self.data.get(start..self.strs.end)?;
        // A name is far shorter (the kernel refuses names of KSYM_NAME_LEN, 512, or more); looking no
        // further keeps a NUL-less string section from making every name a scan of the whole section.
        let end = rest.iter().take(MAX_NAME + 1).position(|&b| b == 0)?;
        Some(&rest[..end])
    }

    pub fn strs_len(&self) -> usize {
        self.strs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btf::Btf;
    use crate::error::Error;
    use std::path::Path;

    /// A little-endian BTF header with `type_len` bytes of types and `str_len` of strings declared, and
    /// `body` after it.
    fn blob(type_len: u32, str_len: u32, body: &[u8]) -> Vec<u8> {
        let mut b = MAGIC.to_le_bytes().to_vec();
        b.extend([1, 0]);
        for w in [HEADER_LEN as u32, 0, type_len, type_len, str_len] {
            b.extend(w.to_le_bytes());
        }
        b.extend(body);
        b
    }

    #[test]
    fn each_bad_header_names_its_problem() {
        let problem = |data: Vec<u8>| Raw::parse(data, false).unwrap_err();
        assert_eq!(problem(vec![0; 10]), BtfProblem::TooShort { len: 10 });
        let mut bad = blob(0, 1, &[0]);
        bad[0] = 0x12;
        assert_eq!(problem(bad), BtfProblem::BadMagic([0x12, 0xeb]));
        let mut bad = blob(0, 1, &[0]);
        bad[2] = 3;
        assert_eq!(problem(bad), BtfProblem::Version(3));
        assert_eq!(problem(blob(0, 1, b"x")), BtfProblem::StringsUnterminated);
        assert_eq!(problem(blob(0, 2, b"x\0")), BtfProblem::StringsStart);
        // A split blob's strings continue the base's: they need not start with "".
        assert!(Raw::parse(blob(0, 2, b"x\0"), true).is_ok());
    }

    #[test]
    fn a_truncated_blob_names_the_section_it_cuts() {
        // 24 bytes of types and one string byte declared, 10 present: the type section runs past the end.
        let cut = blob(24, 1, &[0; 10]);
        assert_eq!(
            Raw::parse(cut.clone(), false).unwrap_err(),
            BtfProblem::SectionOutOfBounds {
                section: BtfSection::Type,
                offset: 0,
                size: 24,
                file_len: HEADER_LEN + 10,
            }
        );
        // Through the public loader: the same kind, in an Error::Btf naming the file.
        let e = Btf::from_bytes(cut, Path::new("cut.btf"), None).unwrap_err();
        assert!(
            matches!(
                &e,
                Error::Btf {
                    problem: BtfProblem::SectionOutOfBounds {
                        section: BtfSection::Type,
                        ..
                    },
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string().starts_with(
                "cut.btf is not usable BTF type information: the type section (24 bytes at 0 past the \
                 header) runs past the end of the 34-byte file: it was cut short; "
            ),
            "{e}"
        );
        // Nothing below BTF's own checks failed: there is no further cause.
        assert!(std::error::Error::source(&e).is_none());
    }

    #[test]
    fn a_record_cut_short_or_of_an_unknown_kind_is_named_by_its_number() {
        // 8 bytes of types: less than one 12-byte record.
        assert_eq!(
            Raw::parse(blob(8, 1, &[0; 9]), false).unwrap_err(),
            BtfProblem::RecordCutShort { record: 1 }
        );
        // One record of kind 31 (info bits 24..28).
        let mut rec = 0u32.to_le_bytes().to_vec();
        rec.extend((31u32 << 24).to_le_bytes());
        rec.extend(0u32.to_le_bytes());
        rec.push(0);
        assert_eq!(
            Raw::parse(blob(12, 1, &rec), false).unwrap_err(),
            BtfProblem::UnknownKind {
                record: 1,
                kind: 31
            }
        );
    }
}
