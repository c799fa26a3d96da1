//! Loading one user-space ELF file's function symbols and load segments, as an untrusted input.
//!
//! The file is chosen by whatever process the tracer happens to watch, and the tracer runs as root: a
//! watched program can map a 4 GB sparse file, a file with a symbol table that claims to be terabytes long,
//! or a crafted header. So nothing here reads a whole file. The ELF header, the program and section headers
//! and the one symbol table and string table used are read with positioned reads (`pread`), each one
//! bounded ([`MAX_TABLE`]); every offset and size from the file is checked before use, and a table over the
//! bound is skipped with a note. Positioned reads rather than `mmap`: another user can truncate a file
//! while we hold it mapped, and touching a page past the new end raises SIGBUS in the tracer.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use goblin::container::Ctx;
use goblin::elf::program_header::{ProgramHeader, PT_LOAD};
use goblin::elf::section_header::{SectionHeader, SHT_DYNSYM, SHT_SYMTAB};
use goblin::elf::sym::{Sym as ElfSym, STT_FUNC, STT_GNU_IFUNC};
use goblin::elf::Elf;

use super::demangle;

/// The largest symbol table or string table read from one user binary: 64 MiB, about 2.8 million 64-bit
/// symbols, well above the largest real programs (a browser's `.symtab` is a few hundred thousand).
pub const MAX_TABLE: u64 = 64 << 20;

#[derive(Debug)]
struct Sym {
    addr: u64,
    size: u64,
    /// Offset of the (mangled) name in `Binary::names`: names are demangled only when a frame needs one.
    name: u32,
}

/// One ELF file's function symbols and load segments.
#[derive(Debug, Default)]
pub struct Binary {
    /// (file offset, file size, virtual address) of each PT_LOAD segment.
    loads: Vec<(u64, u64, u64)>,
    /// Sorted by address, one per address.
    syms: Vec<Sym>,
    /// The string table the names point into.
    names: Vec<u8>,
}

/// Why a binary's symbols were left out, for the session's notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped(pub String);

/// Where the bytes come from: a file read with bounded positioned reads, or bytes in memory (tests).
trait Source {
    fn len(&self) -> u64;
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()>;
}

impl Source for File {
    fn len(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        self.read_exact_at(buf, off)
    }
}

impl Source for &[u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        let start = usize::try_from(off).map_err(|_| std::io::ErrorKind::UnexpectedEof)?;
        let end = start
            .checked_add(buf.len())
            .filter(|&e| e <= <[u8]>::len(self))
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(&self[start..end]);
        Ok(())
    }
}

/// `len` bytes at `off`, if they are inside the file and within `limit`.
fn read(src: &dyn Source, off: u64, len: u64, limit: u64) -> Option<Vec<u8>> {
    if len > limit || off.checked_add(len)? > src.len() {
        return None;
    }
    let mut buf = vec![0; usize::try_from(len).ok()?];
    src.read_at(&mut buf, off).ok()?;
    Some(buf)
}

impl Binary {
    /// Reads `file` as ELF: `None` when it is not one. A symbol table over the size bound is left out
    /// (the other one, `.dynsym` for `.symtab`, is used if it names functions) and said in the note.
    pub fn load(file: &File) -> (Option<Binary>, Option<Skipped>) {
        load(file)
    }

    /// The same, from bytes in memory.
    pub fn parse(bytes: &[u8]) -> (Option<Binary>, Option<Skipped>) {
        load(&bytes)
    }

    /// The ELF virtual address of a file offset, through the PT_LOAD segment that holds it.
    pub fn vaddr(&self, file_off: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|&&(off, size, _)| file_off >= off && file_off - off < size.max(1))
            .and_then(|&(off, _, vaddr)| vaddr.checked_add(file_off - off))
    }

    /// The function containing `vaddr`: (name, offset, size).
    pub fn symbolize(&self, vaddr: u64) -> Option<(Arc<str>, u64, Option<u64>)> {
        let i = self
            .syms
            .partition_point(|s| s.addr <= vaddr)
            .checked_sub(1)?;
        let s = &self.syms[i];
        let off = vaddr - s.addr;
        // An unsized symbol (hand-written assembly) is believed only up to the next symbol.
        let fits = if s.size > 0 {
            off < s.size
        } else {
            self.syms.get(i + 1).is_some_and(|n| vaddr < n.addr)
        };
        let name = demangle(&String::from_utf8_lossy(self.raw_name(s)));
        fits.then(|| (name.into(), off, (s.size > 0).then_some(s.size)))
    }

    /// Number of function symbols kept.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// (address, size, demangled name) of every function kept, in address order.
    #[cfg(test)]
    pub(crate) fn functions(&self) -> impl Iterator<Item = (u64, u64, String)> + '_ {
        self.syms.iter().map(|s| {
            (
                s.addr,
                s.size,
                demangle(&String::from_utf8_lossy(self.raw_name(s))),
            )
        })
    }

    fn raw_name(&self, s: &Sym) -> &[u8] {
        let rest = self.names.get(s.name as usize..).unwrap_or_default();
        rest.split(|&b| b == 0).next().unwrap_or_default()
    }
}

fn load(src: &dyn Source) -> (Option<Binary>, Option<Skipped>) {
    // The 64-bit header is the larger; a 32-bit file only needs its first 52 bytes.
    let Some(hbytes) = read(src, 0, 64.min(src.len()), 64) else {
        return (None, None);
    };
    let Ok(header) = Elf::parse_header(&hbytes) else {
        return (None, None);
    };
    let (Ok(container), Ok(endian)) = (header.container(), header.endianness()) else {
        return (None, None);
    };
    let ctx = Ctx::new(container, endian);

    // Counts are 16-bit, so both header tables are at most a few MB.
    let ph_size = ProgramHeader::size(ctx) as u64;
    let loads = read(
        src,
        header.e_phoff,
        ph_size * u64::from(header.e_phnum),
        u64::MAX,
    )
    .and_then(|b| ProgramHeader::parse(&b, 0, usize::from(header.e_phnum), ctx).ok())
    .unwrap_or_default()
    .into_iter()
    .filter(|p| p.p_type == PT_LOAD)
    .map(|p| (p.p_offset, p.p_filesz, p.p_vaddr))
    .collect();

    let sh_size = SectionHeader::size(ctx) as u64;
    let sections = read(
        src,
        header.e_shoff,
        sh_size * u64::from(header.e_shnum),
        u64::MAX,
    )
    .and_then(|b| SectionHeader::parse_from(&b, 0, usize::from(header.e_shnum), ctx).ok())
    .unwrap_or_default();

    // `.symtab` has every function; a stripped file still has `.dynsym` for its exports.
    let mut skipped = None;
    for kind in [SHT_SYMTAB, SHT_DYNSYM] {
        let Some(table) = sections.iter().find(|s| s.sh_type == kind) else {
            continue;
        };
        match functions(src, &sections, table, ctx) {
            Ok(Some((syms, names))) if !syms.is_empty() => {
                return (Some(Binary { loads, syms, names }), skipped);
            }
            Ok(_) => {}
            Err(note) => skipped = Some(note),
        }
    }
    (
        Some(Binary {
            loads,
            ..Binary::default()
        }),
        skipped,
    )
}

/// Function symbols, sorted and one per address, and the string table their names are in.
type Functions = (Vec<Sym>, Vec<u8>);

/// The function symbols of one symbol table, sorted and one per address, with its string table.
fn functions(
    src: &dyn Source,
    sections: &[SectionHeader],
    table: &SectionHeader,
    ctx: Ctx,
) -> Result<Option<Functions>, Skipped> {
    let entsize = ElfSym::size(ctx.container) as u64;
    let which = if table.sh_type == SHT_SYMTAB {
        ".symtab"
    } else {
        ".dynsym"
    };
    if table.sh_entsize != entsize {
        return Ok(None);
    }
    let Some(strings) = sections.get(table.sh_link as usize) else {
        return Ok(None);
    };
    for (what, size) in [
        (which, table.sh_size),
        ("its string table", strings.sh_size),
    ] {
        if size > MAX_TABLE {
            return Err(Skipped(format!(
                "{what} is {size} bytes, over the {} MiB limit",
                MAX_TABLE >> 20
            )));
        }
    }
    let Some(raw) = read(src, table.sh_offset, table.sh_size, MAX_TABLE) else {
        return Ok(None);
    };
    let Some(names) = read(src, strings.sh_offset, strings.sh_size, MAX_TABLE) else {
        return Ok(None);
    };
    let count = (table.sh_size / entsize) as usize;
    let Ok(symtab) = goblin::elf::Symtab::parse(&raw, 0, count, ctx) else {
        return Ok(None);
    };
    let mut syms: Vec<Sym> = symtab
        .iter()
        .filter(|s| {
            matches!(s.st_type(), STT_FUNC | STT_GNU_IFUNC) && s.st_value != 0 && s.st_shndx != 0
        })
        .filter_map(|s| {
            // A name must start inside the table and not be empty.
            let name = u32::try_from(s.st_name).ok()?;
            (names.get(s.st_name).is_some_and(|&b| b != 0)).then_some(Sym {
                addr: s.st_value,
                size: s.st_size,
                name,
            })
        })
        .collect();
    // Aliases share an address: keep the sized one, then the first by (mangled) name, so the pick is stable.
    let name_of = |s: &Sym| {
        let rest = names.get(s.name as usize..).unwrap_or_default();
        rest.split(|&b| b == 0).next().unwrap_or_default()
    };
    syms.sort_by(|a, b| {
        a.addr
            .cmp(&b.addr)
            .then(b.size.cmp(&a.size))
            .then_with(|| name_of(a).cmp(name_of(b)))
    });
    syms.dedup_by_key(|s| s.addr);
    Ok(Some((syms, names)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_elf_is_none_not_an_error() {
        assert_eq!(Binary::parse(b"").0.map(|b| b.len()), None);
        assert_eq!(
            Binary::parse(b"#!/bin/sh\necho hi\n").0.map(|b| b.len()),
            None
        );
        assert!(Binary::parse(&[0x7f, b'E', b'L', b'F', 9, 1, 1, 0])
            .0
            .is_none());
    }

    #[test]
    fn reads_this_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let file = File::open(&exe).unwrap();
        let (bin, note) = Binary::load(&file);
        let bin = bin.unwrap();
        assert_eq!(note, None);
        assert!(bin.len() > 100, "{} functions", bin.len());
        // The same answer from bytes in memory.
        let bytes = std::fs::read(&exe).unwrap();
        assert_eq!(Binary::parse(&bytes).0.unwrap().len(), bin.len());
    }
}
