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
use goblin::elf::section_header::{SectionHeader, SHF_ALLOC, SHT_DYNSYM, SHT_SYMTAB};
use goblin::elf::sym::{Sym as ElfSym, STT_FUNC, STT_GNU_IFUNC};
use goblin::elf::Elf;

/// The largest symbol table or string table read from one user binary: 64 MiB, about 2.8 million 64-bit
/// symbols, well above the largest real programs (a browser's `.symtab` is a few hundred thousand).
pub const MAX_TABLE: u64 = 64 << 20;

/// Rust (legacy and v0) and Itanium C++ names demangled; anything else as it is.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // `{:#}` leaves out the hash suffix.
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(s) = cpp_demangle::Symbol::new(name) {
            if let Ok(d) = s.demangle() {
                return d;
            }
        }
    }
    name.to_string()
}

#[derive(Debug)]
struct Sym {
    addr: u64,
    size: u64,
    /// Offset of the (mangled) name in `Binary::names`: names are demangled only when a frame needs one.
    name: u32,
    /// For an unsized symbol, the bytes from it to the end of its section (`u32::MAX` when unknown): what
    /// follows a zero-size `_init` in `.init` is the PLT, not more of `_init`.
    extent: u32,
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
pub(crate) trait ReadAt {
    fn len(&self) -> u64;
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()>;
}

impl ReadAt for File {
    fn len(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        self.read_exact_at(buf, off)
    }
}

impl ReadAt for &[u8] {
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
pub(crate) fn read(src: &dyn ReadAt, off: u64, len: u64, limit: u64) -> Option<Vec<u8>> {
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
        // An unsized symbol (hand-written assembly) is believed only up to the next symbol, within its
        // own section.
        let fits = if s.size > 0 {
            off < s.size
        } else {
            self.syms.get(i + 1).is_some_and(|n| vaddr < n.addr) && off < u64::from(s.extent)
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
        c_string(&self.names, s.name as usize).unwrap_or_default()
    }
}

/// An ELF file's header, program headers and section headers, each read with one bounded read.
pub(crate) struct Headers {
    pub header: goblin::elf::Header,
    pub ctx: Ctx,
    pub program: Vec<ProgramHeader>,
    pub sections: Vec<SectionHeader>,
}

impl Headers {
    /// Reads the headers; `None` when `src` is not an ELF file. Header tables that lie outside the file
    /// are left empty: what can still be read is worth having from a damaged file.
    pub fn read(src: &dyn ReadAt) -> Option<Headers> {
        // The 64-bit header is the larger; a 32-bit file only needs its first 52 bytes.
        let hbytes = read(src, 0, 64.min(src.len()), 64)?;
        let header = Elf::parse_header(&hbytes).ok()?;
        let ctx = Ctx::new(header.container().ok()?, header.endianness().ok()?);
        // Counts are 16-bit, so both header tables are at most a few MB.
        let table = |off: u64, entry: usize, count: u16| {
            read(src, off, entry as u64 * u64::from(count), u64::MAX)
        };
        let program = table(header.e_phoff, ProgramHeader::size(ctx), header.e_phnum)
            .and_then(|b| ProgramHeader::parse(&b, 0, usize::from(header.e_phnum), ctx).ok())
            .unwrap_or_default();
        let sections = table(header.e_shoff, SectionHeader::size(ctx), header.e_shnum)
            .and_then(|b| SectionHeader::parse_from(&b, 0, usize::from(header.e_shnum), ctx).ok())
            .unwrap_or_default();
        Some(Headers {
            header,
            ctx,
            program,
            sections,
        })
    }

    /// The PT_LOAD segments, in file order (which the ELF specification makes ascending `p_vaddr`).
    pub fn loads(&self) -> impl Iterator<Item = &ProgramHeader> {
        self.program.iter().filter(|p| p.p_type == PT_LOAD)
    }

    /// The first section of type `kind` (`SHT_SYMTAB`, `SHT_DYNSYM`).
    pub fn section_of_type(&self, kind: u32) -> Option<&SectionHeader> {
        self.sections.iter().find(|s| s.sh_type == kind)
    }

    /// The section names (`.shstrtab`), at most [`MAX_TABLE`]; `None` when the file has none readable.
    pub fn section_names(&self, src: &dyn ReadAt) -> Option<Vec<u8>> {
        let names = self.sections.get(usize::from(self.header.e_shstrndx))?;
        read(src, names.sh_offset, names.sh_size, MAX_TABLE)
    }

    /// One symbol table and its string table, each read whole if within [`MAX_TABLE`]. `Ok(None)` when the
    /// table is unusable (a wrong entry size, a link to no section, bytes outside the file); `Err` when it is
    /// over the bound, with the note the tracer prints.
    pub fn symbols(
        &self,
        src: &dyn ReadAt,
        table: &SectionHeader,
    ) -> Result<Option<SymbolTable>, Skipped> {
        let entsize = ElfSym::size(self.ctx.container) as u64;
        let which = if table.sh_type == SHT_SYMTAB {
            ".symtab"
        } else {
            ".dynsym"
        };
        if table.sh_entsize != entsize {
            return Ok(None);
        }
        let Some(strings) = self.sections.get(table.sh_link as usize) else {
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
        Ok(Some(SymbolTable {
            raw,
            names,
            count,
            ctx: self.ctx,
        }))
    }
}

/// The bytes of one symbol table and of its string table, decoded entry by entry as they are walked: a
/// table of millions of symbols is never turned into a vector of parsed ones.
pub(crate) struct SymbolTable {
    raw: Vec<u8>,
    pub names: Vec<u8>,
    count: usize,
    ctx: Ctx,
}

impl SymbolTable {
    /// Number of entries, the null symbol included.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Every entry, the null symbol included.
    pub fn iter(&self) -> impl Iterator<Item = ElfSym> + '_ {
        goblin::elf::Symtab::parse(&self.raw, 0, self.count, self.ctx)
            .ok()
            .into_iter()
            .flat_map(|t| t.iter())
    }

    /// The (mangled) name of a symbol: `None` when it does not start inside the string table or is empty.
    pub fn name(&self, sym: &ElfSym) -> Option<&[u8]> {
        c_string(&self.names, sym.st_name)
    }
}

/// The NUL-terminated string at `at` of a string table, if it starts inside it and is not empty.
pub(crate) fn c_string(table: &[u8], at: usize) -> Option<&[u8]> {
    let rest = table.get(at..)?;
    let s = rest.split(|&b| b == 0).next().unwrap_or_default();
    (!s.is_empty()).then_some(s)
}

fn load(src: &dyn ReadAt) -> (Option<Binary>, Option<Skipped>) {
    let Some(headers) = Headers::read(src) else {
        return (None, None);
    };
    let loads = headers
        .loads()
        .map(|p| (p.p_offset, p.p_filesz, p.p_vaddr))
        .collect();
    // `.symtab` has every function; a stripped file still has `.dynsym` for its exports.
    let mut skipped = None;
    for kind in [SHT_SYMTAB, SHT_DYNSYM] {
        let Some(table) = headers.section_of_type(kind) else {
            continue;
        };
        match headers.symbols(src, table) {
            Ok(Some(table)) => {
                let (syms, names) = functions(table, &headers.sections);
                if !syms.is_empty() {
                    return (Some(Binary { loads, syms, names }), skipped);
                }
            }
            Ok(None) => {}
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

/// The function symbols of one symbol table, sorted and one per address, with the string table their names
/// are in; `sections` bound the unsized ones.
fn functions(table: SymbolTable, sections: &[SectionHeader]) -> (Vec<Sym>, Vec<u8>) {
    // The bytes from `s` to the end of the loaded section holding it, when the file says.
    let extent = |s: &ElfSym| {
        sections
            .get(s.st_shndx)
            .filter(|h| h.sh_flags & u64::from(SHF_ALLOC) != 0)
            .and_then(|h| h.sh_addr.checked_add(h.sh_size)?.checked_sub(s.st_value))
            .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    let mut syms: Vec<Sym> = table
        .iter()
        .filter(|s| {
            matches!(s.st_type(), STT_FUNC | STT_GNU_IFUNC) && s.st_value != 0 && s.st_shndx != 0
        })
        .filter_map(|s| {
            // A name must start inside the table and not be empty.
            let name = u32::try_from(s.st_name).ok()?;
            table.name(&s).is_some().then_some(Sym {
                addr: s.st_value,
                size: s.st_size,
                name,
                extent: extent(&s),
            })
        })
        .collect();
    let names = table.names;
    // Aliases share an address: keep the sized one, then the first by (mangled) name, so the pick is stable.
    let name_of = |s: &Sym| c_string(&names, s.name as usize).unwrap_or_default();
    syms.sort_by(|a, b| {
        a.addr
            .cmp(&b.addr)
            .then(b.size.cmp(&a.size))
            .then_with(|| name_of(a).cmp(name_of(b)))
    });
    syms.dedup_by_key(|s| s.addr);
    (syms, names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("main"), "main");
    }

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

    /// `_init` is a zero-size function at the start of `.init`; the PLT stubs follow in `.plt`, before the
    /// first function of `.text`. A thread stopped in `ext@plt` was named `_init+0x80` (a live run: 23
    /// of 40 signal frames written on return from an interrupt): an unsized symbol is believed up to the
    /// next symbol, but never past the end of its own section.
    #[test]
    fn an_unsized_symbol_ends_with_its_section() {
        use crate::testing::elf::{Layout, Section, Sym, BASE};
        let mut l = Layout {
            sections: vec![
                Section {
                    name: ".init",
                    kind: 1,
                    flags: 2 | 4,
                    addr: BASE + 0x100,
                    size: 0x17,
                },
                Section {
                    name: ".plt",
                    kind: 1,
                    flags: 2 | 4,
                    addr: BASE + 0x120,
                    size: 0x40,
                },
                Section {
                    name: ".text",
                    kind: 1,
                    flags: 2 | 4,
                    addr: BASE + 0x160,
                    size: 0x40,
                },
                Section {
                    name: ".fini",
                    kind: 1,
                    flags: 2 | 4,
                    addr: BASE + 0x1b0,
                    size: 0x9,
                },
            ],
            ..Layout::default()
        };
        let (init, text, fini) = (l.section_index(0), l.section_index(2), l.section_index(3));
        let func = |name, value, size, shndx| Sym {
            shndx,
            ..Sym::func(name, value, size)
        };
        l.symtab = vec![
            func("_init", BASE + 0x100, 0, init),
            func("_start", BASE + 0x160, 0x22, text),
            func("label", BASE + 0x190, 0, text),
            func("_fini", BASE + 0x1b0, 0, fini),
        ];
        let bin = Binary::parse(&l.build().bytes).0.unwrap();
        let at = |vaddr| {
            bin.symbolize(vaddr)
                .map(|(n, off, _)| format!("{n}+{off:#x}"))
        };
        assert_eq!(at(BASE + 0x110).as_deref(), Some("_init+0x10"));
        assert_eq!(at(BASE + 0x130), None, "a PLT stub is not _init");
        assert_eq!(at(BASE + 0x19f).as_deref(), Some("label+0xf"));
        assert_eq!(at(BASE + 0x1a0), None, "past .text, before .fini's `_fini`");
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
