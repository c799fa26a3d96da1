//! A vmlinux ELF file, memory-mapped: its sections, its `.symtab` (with real sizes and `nm`-style type
//! letters), its build-id, and raw section bytes for the DWARF readers.
//!
//! Only headers are parsed on open. A debug vmlinux is hundreds of megabytes, nearly all DWARF; mapping it
//! instead of reading it means a name lookup touches only the symbol and string tables, and peak memory
//! stays a small fraction of the file.

use crate::buildid::{self, BuildId};
use crate::error::{DwarfProblem, ElfProblem, Error};
use crate::file::{self, Role};
use crate::symbol::Symbol;
use crate::table::SymbolTable;
use goblin::elf::section_header::{
    SHF_ALLOC, SHF_COMPRESSED, SHF_EXECINSTR, SHF_WRITE, SHN_ABS, SHN_COMMON, SHN_UNDEF,
    SHT_NOBITS, SHT_NOTE,
};
use goblin::elf::sym::{STB_GNU_UNIQUE, STB_LOCAL, STB_WEAK, STT_FILE, STT_OBJECT, STT_SECTION};
use memmap2::Mmap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One ELF section header, copied out so the parsed ELF need not outlive `open`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub addr: u64,
    pub size: u64,
    pub offset: u64,
    pub flags: u64,
    pub kind: u32,
}

impl Section {
    fn is_alloc(&self) -> bool {
        self.flags & u64::from(SHF_ALLOC) != 0
    }
}

/// Where the symbol table lives in the file.
#[derive(Debug, Clone, Copy)]
struct SymtabLoc {
    offset: usize,
    count: usize,
    strtab_offset: usize,
    strtab_size: usize,
}

/// An opened vmlinux. Cheap to open; symbols and DWARF are read on demand from the mapping.
#[derive(Debug)]
pub struct Vmlinux {
    path: PathBuf,
    map: Arc<Mmap>,
    little_endian: bool,
    is_64: bool,
    sections: Vec<Section>,
    symtab: Option<SymtabLoc>,
    build_id: Option<BuildId>,
}

impl Vmlinux {
    /// Maps and checks the file: a valid ELF whose every section lies inside the file (a truncated
    /// download fails here, with the section it cuts, rather than later inside a DWARF walk).
    pub fn open(path: &Path) -> Result<Vmlinux, Error> {
        // A regular file only: a directory would fail the mmap with a bare ENODEV, a FIFO would hang.
        let file = file::open_regular(path, Role::Vmlinux)?;
        // An empty file (or a procfs one, which reports size 0 and cannot be mapped) has no ELF header.
        if file.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
            return Err(Error::Elf {
                path: path.to_path_buf(),
                problem: ElfProblem::Empty,
            });
        }
        // SAFETY: the mapping is read-only and private to this process. The one hazard is another process
        // truncating the file while it is mapped (reads then fault with SIGBUS); vmlinux files are build
        // artifacts that nothing rewrites in place, which is the same trust every debugger puts in them.
        let map = unsafe { Mmap::map(&file) }.map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Vmlinux::from_map(path, Arc::new(map))
    }

    fn from_map(path: &Path, map: Arc<Mmap>) -> Result<Vmlinux, Error> {
        let bad = |problem| Error::Elf {
            path: path.to_path_buf(),
            problem,
        };
        let bytes: &[u8] = &map;
        if !bytes.starts_with(b"\x7fELF") {
            return Err(bad(
                if bytes.starts_with(b"MZ") || bytes.get(0x202..0x206) == Some(b"HdrS") {
                    ElfProblem::BootImage
                } else {
                    ElfProblem::NoMagic
                },
            ));
        }
        let elf = goblin::elf::Elf::parse(bytes).map_err(|e| bad(ElfProblem::Malformed(e)))?;
        let file_len = bytes.len() as u64;
        let mut sections = Vec::with_capacity(elf.section_headers.len());
        for sh in &elf.section_headers {
            let name = elf.shdr_strtab.get_at(sh.sh_name).unwrap_or("").to_string();
            if sh.sh_type != SHT_NOBITS
                && sh
                    .sh_offset
                    .checked_add(sh.sh_size)
                    .is_none_or(|end| end > file_len)
            {
                return Err(bad(ElfProblem::SectionPastEnd {
                    section: name,
                    end: sh.sh_offset.saturating_add(sh.sh_size),
                    file_len,
                }));
            }
            sections.push(Section {
                name,
                addr: sh.sh_addr,
                size: sh.sh_size,
                offset: sh.sh_offset,
                flags: sh.sh_flags,
                kind: sh.sh_type,
            });
        }
        let symtab = elf
            .section_headers
            .iter()
            .rfind(|sh| sh.sh_type == goblin::elf::section_header::SHT_SYMTAB)
            .and_then(|sh| {
                let strtab = elf.section_headers.get(sh.sh_link as usize)?;
                Some(SymtabLoc {
                    offset: sh.sh_offset as usize,
                    count: elf.syms.len(),
                    strtab_offset: strtab.sh_offset as usize,
                    strtab_size: strtab.sh_size as usize,
                })
            });
        let mut vm = Vmlinux {
            path: path.to_path_buf(),
            little_endian: elf.little_endian,
            is_64: elf.is_64,
            sections,
            symtab,
            build_id: None,
            map: map.clone(),
        };
        vm.build_id = vm
            .sections
            .iter()
            .filter(|s| s.kind == SHT_NOTE || s.name == ".notes")
            .find_map(|s| buildid::from_notes(vm.section_bytes(s)?, vm.little_endian));
        Ok(vm)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn build_id(&self) -> Option<&BuildId> {
        self.build_id.as_ref()
    }

    pub fn little_endian(&self) -> bool {
        self.little_endian
    }

    pub fn is_64(&self) -> bool {
        self.is_64
    }

    pub fn sections(&self) -> &[Section] {
        &self.sections
    }

    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The loaded section holding a link-time address: what `resolve` prints as the section.
    pub fn section_of(&self, link_addr: u64) -> Option<&Section> {
        self.sections
            .iter()
            .filter(|s| s.is_alloc() && s.size > 0)
            .find(|s| link_addr >= s.addr && link_addr - s.addr < s.size)
    }

    /// The file bytes of a section (`None` for `SHT_NOBITS` such as `.bss`). Bounds were checked on open.
    pub fn section_bytes(&self, section: &Section) -> Option<&[u8]> {
        if section.kind == SHT_NOBITS {
            return None;
        }
        let start = usize::try_from(section.offset).ok()?;
        let end = start.checked_add(usize::try_from(section.size).ok()?)?;
        self.map.get(start..end)
    }

    /// Named section bytes for DWARF. Compressed sections are refused with the command that fixes them,
    /// since inflating hundreds of megabytes would defeat the mapping.
    pub fn debug_section(&self, name: &str) -> Result<Option<&[u8]>, Error> {
        let Some(s) = self.section(name) else {
            return Ok(None);
        };
        if s.flags & u64::from(SHF_COMPRESSED) != 0 {
            return Err(Error::Dwarf {
                path: self.path.clone(),
                problem: DwarfProblem::Compressed {
                    section: name.to_string(),
                },
            });
        }
        Ok(self.section_bytes(s))
    }

    /// The mapping itself, shared with the lazily built line table.
    pub(crate) fn map(&self) -> &Arc<Mmap> {
        &self.map
    }

    /// Section bounds as a byte range of the mapping.
    pub(crate) fn section_range(
        &self,
        name: &str,
    ) -> Result<Option<std::ops::Range<usize>>, Error> {
        let Some(bytes) = self.debug_section(name)? else {
            return Ok(None);
        };
        let start = bytes.as_ptr() as usize - self.map.as_ptr() as usize;
        Ok(Some(start..start + bytes.len()))
    }

    pub fn has_debug_info(&self) -> bool {
        self.section(".debug_info").is_some_and(|s| s.size > 0)
    }

    fn symtab(&self) -> Result<(goblin::elf::Symtab<'_>, &[u8]), Error> {
        let loc = self.symtab.ok_or_else(|| Error::NoSymtab {
            path: self.path.clone(),
        })?;
        let ctx = goblin::container::Ctx::new(
            if self.is_64 {
                goblin::container::Container::Big
            } else {
                goblin::container::Container::Little
            },
            if self.little_endian {
                goblin::container::Endian::Little
            } else {
                goblin::container::Endian::Big
            },
        );
        let bad = |problem| Error::Elf {
            path: self.path.clone(),
            problem,
        };
        let syms = goblin::elf::Symtab::parse(&self.map, loc.offset, loc.count, ctx)
            .map_err(|e| bad(ElfProblem::BadSymtab(e)))?;
        let strtab = loc
            .strtab_offset
            .checked_add(loc.strtab_size)
            .and_then(|end| self.map.get(loc.strtab_offset..end))
            .ok_or_else(|| bad(ElfProblem::StrtabOutside))?;
        Ok((syms, strtab))
    }

    fn make_symbol(&self, sym: &goblin::elf::Sym, name: &[u8]) -> Symbol {
        Symbol {
            name: String::from_utf8_lossy(name).into_owned(),
            addr: sym.st_value,
            size: Some(sym.st_size),
            type_char: self.nm_type(sym),
            module: None,
        }
    }

    /// Every symbol `nm` would list (no file or section symbols, no unnamed ones), with `st_size` sizes.
    pub fn symbols(&self) -> Result<Vec<Symbol>, Error> {
        let (syms, strtab) = self.symtab()?;
        let mut out = Vec::with_capacity(syms.len());
        for sym in syms.iter() {
            if let Some(name) = listed_name(&sym, strtab) {
                out.push(self.make_symbol(&sym, name));
            }
        }
        Ok(out)
    }

    /// The symbols called `name`, by one pass over the raw tables without building a [`SymbolTable`]:
    /// resolving one variable then costs a scan of the symbol table, not a sort and index of all of it.
    /// The string table is searched first (memchr's SIMD search) for where the name ends a string: a
    /// symbol can only be called `name` if its name offset is one of those (the linker may point a
    /// symbol into the tail of a longer string), so a symbol's entry costs the read of that offset only.
    pub fn symbols_named(&self, name: &str) -> Result<Vec<Symbol>, Error> {
        let (syms, strtab) = self.symtab()?;
        if name.is_empty() {
            return Ok(Vec::new());
        }
        let mut key = name.as_bytes().to_vec();
        key.push(0);
        // In ascending order, as the search finds them.
        let starts: Vec<usize> = memchr::memmem::find_iter(strtab, &key).collect();
        if starts.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for (i, st_name) in self.symbol_name_offsets()?.enumerate() {
            if starts.binary_search(&st_name).is_err() {
                continue;
            }
            let Some(sym) = syms.get(i) else { continue };
            if let Some(n) = listed_name(&sym, strtab) {
                out.push(self.make_symbol(&sym, n));
            }
        }
        Ok(out)
    }

    /// Each symbol's `st_name` in table order, read straight from the entries (the first 32-bit word of
    /// both ELF classes' layout) rather than decoding every field of every symbol.
    fn symbol_name_offsets(&self) -> Result<impl Iterator<Item = usize> + '_, Error> {
        let loc = self.symtab.ok_or_else(|| Error::NoSymtab {
            path: self.path.clone(),
        })?;
        let entry = if self.is_64 {
            goblin::elf::sym::sym64::SIZEOF_SYM
        } else {
            goblin::elf::sym::sym32::SIZEOF_SYM
        };
        // `symtab()` checked that `count` entries fit in the file.
        let table = loc
            .count
            .checked_mul(entry)
            .and_then(|len| self.map.get(loc.offset..loc.offset.checked_add(len)?))
            .unwrap_or_default();
        let little = self.little_endian;
        Ok(table.chunks_exact(entry).map(move |e| {
            let word = [e[0], e[1], e[2], e[3]];
            let v = if little {
                u32::from_le_bytes(word)
            } else {
                u32::from_be_bytes(word)
            };
            v as usize
        }))
    }

    /// All symbols as a table; sizes are the ELF's own, never inferred.
    pub fn table(&self) -> Result<SymbolTable, Error> {
        Ok(SymbolTable::new(self.symbols()?, false))
    }

    /// The type letter `nm` prints, from binding, symbol type and the flags of the symbol's section.
    fn nm_type(&self, sym: &goblin::elf::Sym) -> char {
        let section = self.sections.get(sym.st_shndx).map(|s| (s.flags, s.kind));
        nm_letter(sym, section)
    }
}

/// The type letter `nm` prints for an ELF symbol, given the (flags, type) of the section it is defined
/// in (`None` when its section index names no section).
pub(crate) fn nm_letter(sym: &goblin::elf::Sym, section: Option<(u64, u32)>) -> char {
    let bind = sym.st_bind();
    let shndx = sym.st_shndx as u32;
    let local = bind == STB_LOCAL;
    let case = |c: char| if local { c.to_ascii_lowercase() } else { c };
    if bind == STB_GNU_UNIQUE {
        return 'u';
    }
    if bind == STB_WEAK {
        let object = sym.st_type() == STT_OBJECT;
        return match (shndx == SHN_UNDEF, object) {
            (true, true) => 'v',
            (true, false) => 'w',
            (false, true) => 'V',
            (false, false) => 'W',
        };
    }
    match shndx {
        SHN_UNDEF => return 'U',
        SHN_ABS => return case('A'),
        SHN_COMMON => return 'C',
        _ => {}
    }
    let Some((flags, kind)) = section else {
        return '?';
    };
    let c = if flags & u64::from(SHF_ALLOC) == 0 {
        'N'
    } else if flags & u64::from(SHF_EXECINSTR) != 0 {
        'T'
    } else if kind == SHT_NOBITS {
        'B'
    } else if flags & u64::from(SHF_WRITE) != 0 {
        'D'
    } else {
        'R'
    };
    case(c)
}

/// The name of a symbol `nm` lists, or `None` for the ones it hides (file and section symbols, unnamed).
fn listed_name<'s>(sym: &goblin::elf::Sym, strtab: &'s [u8]) -> Option<&'s [u8]> {
    if matches!(sym.st_type(), STT_FILE | STT_SECTION) || sym.st_name == 0 {
        return None;
    }
    let rest = strtab.get(sym.st_name..)?;
    let len = rest.iter().position(|&b| b == 0)?;
    (len > 0).then_some(&rest[..len])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ElfProblem;

    /// A file of `bytes` in the temporary directory, removed when the test ends.
    struct Temp(std::path::PathBuf);

    impl Temp {
        fn new(name: &str, bytes: &[u8]) -> Temp {
            let p = std::env::temp_dir()
                .join(format!("ksymwatch-vmlinux-{}-{name}", std::process::id()));
            std::fs::write(&p, bytes).unwrap();
            Temp(p)
        }
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// The name scan finds exactly what filtering the full list by name finds: a symbol whose name is the
    /// tail of a longer string (the linker shares suffixes), same-named symbols, and not a name that only
    /// ends or starts another (`x_jiffies`, `jiffies_64`).
    #[test]
    fn a_name_scan_finds_what_the_full_list_has() {
        use crate::testing::elf::{tiny, Tiny};
        let mut t: Tiny = tiny(
            &[
                ("x_jiffies", 0x1000, 8),
                ("jiffies_64", 0x1010, 8),
                ("jiffies", 0x1020, 4),
                ("moved", 0x1030, 2),
                ("jiffies", 0x1040, 8),
            ],
            &[],
        );
        // Point `moved` (the fourth symbol, after the null one) at the tail of `x_jiffies`' string.
        let st_name = |t: &Tiny, i: usize| t.symtab + 24 * i;
        let at = st_name(&t, 1);
        let x_jiffies = u32::from_le_bytes(t.bytes[at..at + 4].try_into().unwrap());
        let at = st_name(&t, 4);
        t.bytes[at..at + 4].copy_from_slice(&(x_jiffies + 2).to_le_bytes());
        let f = Temp::new("tails", &t.bytes);
        let vm = Vmlinux::open(&f.0).unwrap();
        let all = vm.symbols().unwrap();
        for name in [
            "jiffies",
            "x_jiffies",
            "jiffies_64",
            "moved",
            "iffies",
            "nope",
        ] {
            let want: Vec<&Symbol> = all.iter().filter(|s| s.name == name).collect();
            let got = vm.symbols_named(name).unwrap();
            assert_eq!(got.iter().collect::<Vec<_>>(), want, "{name}");
        }
        let addrs = |name| -> Vec<u64> {
            vm.symbols_named(name)
                .unwrap()
                .iter()
                .map(|s| s.addr)
                .collect()
        };
        assert_eq!(addrs("jiffies"), [0x1020, 0x1030, 0x1040]);
        assert!(addrs("moved").is_empty());
        assert!(addrs("").is_empty());
    }

    #[test]
    fn a_corrupt_elf_keeps_goblins_error_as_its_source() {
        // The magic, then a header whose class and sizes are junk.
        let mut bytes = b"\x7fELF".to_vec();
        bytes.extend([0xff; 60]);
        let f = Temp::new("corrupt", &bytes);
        let e = Vmlinux::open(&f.0).err().unwrap();
        let Error::Elf {
            problem: problem @ ElfProblem::Malformed(inner),
            ..
        } = &e
        else {
            panic!("{e:?}")
        };
        let source = std::error::Error::source(&e).unwrap();
        assert!(
            source.downcast_ref::<goblin::error::Error>().is_some(),
            "{source:?}"
        );
        // The text says goblin's words once, inside the problem, as before the kinds were typed.
        assert_eq!(
            problem.to_string(),
            format!("malformed or truncated ELF ({inner})")
        );
        assert!(e.to_string().contains(&problem.to_string()), "{e}");
    }

    #[test]
    fn what_is_not_elf_names_the_kind() {
        let kind = |name: &str, bytes: &[u8]| match Vmlinux::open(&Temp::new(name, bytes).0) {
            Err(Error::Elf { problem, .. }) => problem,
            other => panic!("{name}: {other:?}"),
        };
        assert!(matches!(kind("empty", b""), ElfProblem::Empty));
        assert!(matches!(
            kind("pe", b"MZ\x90\0 some boot image"),
            ElfProblem::BootImage
        ));
        assert!(matches!(
            kind("text", b"ffffffff81000000 T _text\n"),
            ElfProblem::NoMagic
        ));
        let e = Vmlinux::open(&Temp::new("text2", b"not elf").0)
            .err()
            .unwrap();
        assert!(std::error::Error::source(&e).is_none(), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "{} is not a usable vmlinux ELF file: no ELF magic at the start; pass the uncompressed vmlinux \
                 (not vmlinuz/bzImage), and fetch it again if it was cut short",
                std::env::temp_dir()
                    .join(format!("ksymwatch-vmlinux-{}-text2", std::process::id()))
                    .display()
            )
        );
    }
}
