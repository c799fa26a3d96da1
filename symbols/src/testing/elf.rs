//! Tiny 64-bit little-endian ELF files built in memory, laid out so that tests can corrupt any field on
//! purpose or map them into a made-up process: [`tiny`] is one PT_LOAD segment and function symbols in a
//! `.symtab` (and optionally a `.dynsym`), the start of the user-symbol loader's property tests; a
//! [`Layout`] chooses the file type, the segments, the symbols' types and bindings, and named sections, as
//! the process resolver's tests need. No compiler needed.

use goblin::elf::sym::{STB_GLOBAL, STB_LOCAL, STT_FUNC, STT_OBJECT, STT_TLS};

/// Appends each field's little-endian bytes to `$b`, each at its own width (an ELF structure's fields in
/// order).
macro_rules! le {
    ($b:expr; $($field:expr),+ $(,)?) => {
        $($b.extend_from_slice(&$field.to_le_bytes());)+
    };
}

/// Where things are in [`Tiny::bytes`].
#[derive(Debug, Clone)]
pub struct Tiny {
    pub bytes: Vec<u8>,
    /// Offset of the section header table (entries of 64 bytes: null, .symtab, .strtab, then .dynsym and
    /// .dynstr when asked for, then a [`Layout`]'s own sections and `.shstrtab`).
    pub shoff: usize,
    /// Offset of the `.symtab` entries (24 bytes each, the null symbol first).
    pub symtab: usize,
    /// Offset of `.symtab`'s string table.
    pub strtab: usize,
}

/// Virtual address of file offset 0 in [`tiny`].
pub const BASE: u64 = 0x40_0000;

/// `e_type` of an executable linked at a fixed address (`-no-pie`), and of a shared library or a
/// position-independent executable.
pub use goblin::elf::header::{ET_DYN, ET_EXEC};

/// `st_info` values: binding in the high nibble, type in the low one.
pub const GLOBAL_FUNC: u8 = (STB_GLOBAL << 4) | STT_FUNC;
pub const GLOBAL_OBJECT: u8 = (STB_GLOBAL << 4) | STT_OBJECT;
pub const LOCAL_OBJECT: u8 = (STB_LOCAL << 4) | STT_OBJECT;
pub const GLOBAL_TLS: u8 = (STB_GLOBAL << 4) | STT_TLS;

/// One symbol table entry.
#[derive(Debug, Clone, Copy)]
pub struct Sym<'a> {
    pub name: &'a str,
    pub value: u64,
    pub size: u64,
    pub info: u8,
    /// Section index: 1 (`.symtab`) stands for "some real section" where the section does not matter;
    /// [`Layout::section_index`] gives a [`Layout`]'s own sections' indices.
    pub shndx: u16,
}

impl<'a> Sym<'a> {
    /// A global function, as [`tiny`] writes them.
    pub fn func(name: &'a str, value: u64, size: u64) -> Sym<'a> {
        Sym {
            name,
            value,
            size,
            info: GLOBAL_FUNC,
            shndx: 1,
        }
    }
}

/// One PT_LOAD program header.
#[derive(Debug, Clone, Copy)]
pub struct Segment {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    /// `PF_X` 1, `PF_W` 2, `PF_R` 4.
    pub flags: u32,
}

/// A section header with no contents of its own in the file (the resolver reads only names and flags).
#[derive(Debug, Clone, Copy)]
pub struct Section<'a> {
    pub name: &'a str,
    /// `SHT_PROGBITS` 1, `SHT_NOBITS` 8.
    pub kind: u32,
    /// `SHF_WRITE` 1, `SHF_ALLOC` 2, `SHF_EXECINSTR` 4, `SHF_TLS` 0x400.
    pub flags: u64,
    pub addr: u64,
    pub size: u64,
}

/// What to lay out. `Layout::default()` is [`tiny`]'s file without symbols.
#[derive(Debug, Clone)]
pub struct Layout<'a> {
    pub e_type: u16,
    /// PT_LOAD segments; none stands for one R+X segment covering the whole file at [`BASE`].
    pub segments: Vec<Segment>,
    pub symtab: Vec<Sym<'a>>,
    /// No `.dynsym` (nor `.dynstr`) when empty.
    pub dynsym: Vec<Sym<'a>>,
    /// Sections after the symbol tables; when there are any, every section is named (`.shstrtab` last).
    pub sections: Vec<Section<'a>>,
}

impl Default for Layout<'_> {
    fn default() -> Self {
        Layout {
            e_type: ET_DYN,
            segments: Vec::new(),
            symtab: Vec::new(),
            dynsym: Vec::new(),
            sections: Vec::new(),
        }
    }
}

/// Builds the file: `funcs` are (name, address, size) in `.symtab`; `dynamic` ones in `.dynsym`.
pub fn tiny<'a>(funcs: &[(&'a str, u64, u64)], dynamic: &[(&'a str, u64, u64)]) -> Tiny {
    let syms = |v: &[(&'a str, u64, u64)]| -> Vec<Sym<'a>> {
        v.iter()
            .map(|&(name, addr, size)| Sym::func(name, addr, size))
            .collect()
    };
    Layout {
        symtab: syms(funcs),
        dynsym: syms(dynamic),
        ..Layout::default()
    }
    .build()
}

impl Layout<'_> {
    /// The section index of `self.sections[i]`.
    pub fn section_index(&self, i: usize) -> u16 {
        let first = if self.dynsym.is_empty() { 3 } else { 5 };
        (first + i) as u16
    }

    pub fn build(&self) -> Tiny {
        let phnum = self.segments.len().max(1);
        let mut b = vec![0u8; 64 + 56 * phnum];
        let (symtab, strtab, symtab_len, strtab_len) = table(&mut b, &self.symtab);
        let dyns = (!self.dynsym.is_empty()).then(|| table(&mut b, &self.dynsym));
        // Section names, when there are sections worth naming.
        let named = !self.sections.is_empty();
        let mut shstrtab = vec![0u8];
        let mut name = |n: &str| -> u32 {
            if !named {
                return 0;
            }
            let at = shstrtab.len() as u32;
            shstrtab.extend_from_slice(n.as_bytes());
            shstrtab.push(0);
            at
        };
        let mut headers: Vec<[u64; 7]> = Vec::new(); // name, kind, flags, addr, offset, size, link|entsize
        let mut push = |h: [u64; 7]| headers.push(h);
        push([0; 7]);
        push([
            u64::from(name(".symtab")),
            2,
            0,
            0,
            symtab as u64,
            symtab_len as u64,
            2 | 24 << 32,
        ]);
        push([
            u64::from(name(".strtab")),
            3,
            0,
            0,
            strtab as u64,
            strtab_len as u64,
            0,
        ]);
        if let Some((d, ds, dl, dsl)) = dyns {
            push([
                u64::from(name(".dynsym")),
                11,
                0,
                0,
                d as u64,
                dl as u64,
                4 | 24 << 32,
            ]);
            push([
                u64::from(name(".dynstr")),
                3,
                0,
                0,
                ds as u64,
                dsl as u64,
                0,
            ]);
        }
        for s in &self.sections {
            push([
                u64::from(name(s.name)),
                u64::from(s.kind),
                s.flags,
                s.addr,
                0,
                s.size,
                0,
            ]);
        }
        let mut shstrndx = 0u16;
        if named {
            let at = name(".shstrtab");
            shstrndx = headers.len() as u16;
            let off = b.len();
            b.extend_from_slice(&shstrtab);
            headers.push([u64::from(at), 3, 0, 0, off as u64, shstrtab.len() as u64, 0]);
        }
        let shoff = section_headers(&mut b, &headers);
        let len = b.len() as u64;
        let entry = self.segments.first().map_or(BASE, |s| s.vaddr);
        let counts = (phnum as u16, headers.len() as u16, shstrndx);
        b[..64].copy_from_slice(&self.header(entry, shoff as u64, counts));
        // By default one PT_LOAD covering the whole file at BASE.
        let whole = [Segment {
            offset: 0,
            vaddr: BASE,
            filesz: len,
            memsz: len,
            flags: 5, // R+X
        }];
        let segments = if self.segments.is_empty() {
            &whole[..]
        } else {
            &self.segments
        };
        for (i, s) in segments.iter().enumerate() {
            b[64 + 56 * i..64 + 56 * (i + 1)].copy_from_slice(&program_header(s));
        }
        Tiny {
            bytes: b,
            shoff,
            symtab,
            strtab,
        }
    }
}

impl Layout<'_> {
    /// The 64-byte ELF header: `counts` are the program headers, section headers and the section-name
    /// table's index.
    fn header(&self, entry: u64, shoff: u64, counts: (u16, u16, u16)) -> Vec<u8> {
        let (phnum, shnum, shstrndx) = counts;
        let mut h = Vec::with_capacity(64);
        h.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
        h.extend_from_slice(&[0; 8]);
        // e_type, e_machine (x86-64), e_version, e_entry, e_phoff, e_shoff, e_flags
        le!(h; self.e_type, 62u16, 1u32, entry, 64u64, shoff, 0u32);
        // e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx
        le!(h; 64u16, 56u16, phnum, 64u16, shnum, shstrndx);
        h
    }
}

/// Appends the section headers (`[name, kind, flags, addr, offset, size, link | entsize << 32]` each),
/// 8-byte aligned; returns where they start.
fn section_headers(b: &mut Vec<u8>, headers: &[[u64; 7]]) -> usize {
    while !b.len().is_multiple_of(8) {
        b.push(0);
    }
    let shoff = b.len();
    for [name, kind, flags, addr, off, size, link_entsize] in headers {
        // sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size
        le!(b; *name as u32, *kind as u32, flags, addr, off, size);
        // sh_link, sh_info, sh_addralign, sh_entsize
        le!(b; (*link_entsize & 0xffff_ffff) as u32, 0u32, 8u64, link_entsize >> 32);
    }
    shoff
}

/// One PT_LOAD program header.
fn program_header(s: &Segment) -> Vec<u8> {
    let mut p = Vec::with_capacity(56);
    // p_type (PT_LOAD), p_flags, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align
    le!(p; 1u32, s.flags, s.offset, s.vaddr, s.vaddr, s.filesz, s.memsz, 0x1000u64);
    p
}

/// Appends a symbol table and its strings; returns (table offset, strings offset, their lengths).
fn table(b: &mut Vec<u8>, syms_in: &[Sym<'_>]) -> (usize, usize, usize, usize) {
    let mut strings = vec![0u8];
    let mut syms = vec![0u8; 24];
    for s in syms_in {
        let at = strings.len() as u32;
        strings.extend_from_slice(s.name.as_bytes());
        strings.push(0);
        // st_name, st_info, st_other, st_shndx, st_value, st_size
        le!(syms; at, s.info, 0u8, s.shndx, s.value, s.size);
    }
    while !b.len().is_multiple_of(8) {
        b.push(0);
    }
    let symtab = b.len();
    b.extend_from_slice(&syms);
    let strtab = b.len();
    b.extend_from_slice(&strings);
    (symtab, strtab, syms.len(), strings.len())
}
