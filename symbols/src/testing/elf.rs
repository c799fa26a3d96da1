//! A tiny 64-bit little-endian ELF file built in memory: one PT_LOAD segment and function symbols in a
//! `.symtab` (and optionally a `.dynsym`), laid out so that tests can corrupt any field on purpose. The
//! user-symbol loader's property tests start from it; no compiler needed.

/// Where things are in [`Tiny::bytes`].
#[derive(Debug, Clone)]
pub struct Tiny {
    pub bytes: Vec<u8>,
    /// Offset of the section header table (entries of 64 bytes: null, .symtab, .strtab, then .dynsym and
    /// .dynstr when asked for).
    pub shoff: usize,
    /// Offset of the `.symtab` entries (24 bytes each, the null symbol first).
    pub symtab: usize,
    /// Offset of `.symtab`'s string table.
    pub strtab: usize,
}

/// Virtual address of file offset 0.
pub const BASE: u64 = 0x40_0000;

/// Builds the file: `funcs` are (name, address, size) in `.symtab`; `dynamic` ones in `.dynsym`.
pub fn tiny(funcs: &[(&str, u64, u64)], dynamic: &[(&str, u64, u64)]) -> Tiny {
    let mut b = vec![0u8; 64 + 56];
    let (symtab, strtab, symtab_len, strtab_len) = table(&mut b, funcs);
    let dyns = (!dynamic.is_empty()).then(|| table(&mut b, dynamic));
    while !b.len().is_multiple_of(8) {
        b.push(0);
    }
    let shoff = b.len();
    let mut section = |kind: u32, off: usize, size: usize, link: u32, entsize: u64| {
        let mut s = Vec::with_capacity(64);
        s.extend_from_slice(&0u32.to_le_bytes()); // sh_name
        s.extend_from_slice(&kind.to_le_bytes());
        s.extend_from_slice(&0u64.to_le_bytes()); // flags
        s.extend_from_slice(&0u64.to_le_bytes()); // addr
        s.extend_from_slice(&(off as u64).to_le_bytes());
        s.extend_from_slice(&(size as u64).to_le_bytes());
        s.extend_from_slice(&link.to_le_bytes());
        s.extend_from_slice(&0u32.to_le_bytes()); // info
        s.extend_from_slice(&8u64.to_le_bytes()); // addralign
        s.extend_from_slice(&entsize.to_le_bytes());
        b.extend_from_slice(&s);
    };
    section(0, 0, 0, 0, 0);
    section(2, symtab, symtab_len, 2, 24); // SHT_SYMTAB
    section(3, strtab, strtab_len, 0, 0); // SHT_STRTAB
    let mut shnum = 3u16;
    if let Some((d, ds, dl, dsl)) = dyns {
        section(11, d, dl, 4, 24); // SHT_DYNSYM
        section(3, ds, dsl, 0, 0);
        shnum = 5;
    }
    let len = b.len() as u64;
    // ELF header.
    let mut h = Vec::with_capacity(64);
    h.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&3u16.to_le_bytes()); // ET_DYN
    h.extend_from_slice(&62u16.to_le_bytes()); // x86-64
    h.extend_from_slice(&1u32.to_le_bytes());
    h.extend_from_slice(&BASE.to_le_bytes()); // entry
    h.extend_from_slice(&64u64.to_le_bytes()); // phoff
    h.extend_from_slice(&(shoff as u64).to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&64u16.to_le_bytes());
    h.extend_from_slice(&56u16.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes()); // phnum
    h.extend_from_slice(&64u16.to_le_bytes());
    h.extend_from_slice(&shnum.to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes()); // shstrndx
    b[..64].copy_from_slice(&h);
    // PT_LOAD covering the whole file at BASE.
    let mut p = Vec::with_capacity(56);
    p.extend_from_slice(&1u32.to_le_bytes());
    p.extend_from_slice(&5u32.to_le_bytes()); // R+X
    p.extend_from_slice(&0u64.to_le_bytes());
    p.extend_from_slice(&BASE.to_le_bytes());
    p.extend_from_slice(&BASE.to_le_bytes());
    p.extend_from_slice(&len.to_le_bytes());
    p.extend_from_slice(&len.to_le_bytes());
    p.extend_from_slice(&0x1000u64.to_le_bytes());
    b[64..120].copy_from_slice(&p);
    Tiny {
        bytes: b,
        shoff,
        symtab,
        strtab,
    }
}

/// Appends a symbol table and its strings; returns (table offset, strings offset, their lengths).
fn table(b: &mut Vec<u8>, funcs: &[(&str, u64, u64)]) -> (usize, usize, usize, usize) {
    let mut strings = vec![0u8];
    let mut syms = vec![0u8; 24];
    for &(name, addr, size) in funcs {
        let at = strings.len() as u32;
        strings.extend_from_slice(name.as_bytes());
        strings.push(0);
        syms.extend_from_slice(&at.to_le_bytes());
        syms.push(0x12); // STB_GLOBAL, STT_FUNC
        syms.push(0);
        syms.extend_from_slice(&1u16.to_le_bytes()); // a real section index
        syms.extend_from_slice(&addr.to_le_bytes());
        syms.extend_from_slice(&size.to_le_bytes());
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
