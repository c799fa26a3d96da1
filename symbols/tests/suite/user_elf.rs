//! User-space ELF symbol loading on hostile files: the tracer runs as root and loads whatever binary a
//! watched process maps. Corrupted headers, sizes, offsets and string indices must never panic, and what
//! is loaded stays bounded by the file and the table limit, however large the headers claim things are.

use std::io::{Seek, SeekFrom, Write};

use ksymwatch_symbols::testing::elf::{tiny, Tiny, BASE};
use ksymwatch_symbols::{Binary, MAX_TABLE};
use proptest::prelude::*;

fn sample() -> Tiny {
    tiny(
        &[
            ("alpha", BASE + 0x100, 0x40),
            ("_ZN3foo3barEv", BASE + 0x140, 0x20),
            ("unsized", BASE + 0x200, 0),
            ("omega", BASE + 0x300, 0x10),
        ],
        &[("exported", BASE + 0x100, 0x40)],
    )
}

fn put(bytes: &mut [u8], at: usize, value: u64, width: usize) {
    if let Some(dst) = bytes.get_mut(at..at + width) {
        dst.copy_from_slice(&value.to_le_bytes()[..width]);
    }
}

#[test]
fn the_tiny_file_loads_and_names_its_functions() {
    let t = sample();
    let (bin, note) = Binary::parse(&t.bytes);
    let bin = bin.expect("an ELF file");
    assert_eq!(note, None);
    assert_eq!(bin.len(), 4);
    let at = |vaddr| {
        bin.symbolize(vaddr)
            .map(|(n, off, size)| (n.to_string(), off, size))
    };
    assert_eq!(at(BASE + 0x108), Some(("alpha".into(), 8, Some(0x40))));
    assert_eq!(at(BASE + 0x141), Some(("foo::bar()".into(), 1, Some(0x20))));
    // An unsized symbol is believed up to the next one only.
    assert_eq!(at(BASE + 0x2ff), Some(("unsized".into(), 0xff, None)));
    assert_eq!(at(BASE + 0x310), None);
    assert_eq!(bin.vaddr(0x10), Some(BASE + 0x10));
}

/// A `.symtab` claiming a terabyte is skipped with a note, and the `.dynsym` names what it can; nothing of
/// that size is read or allocated.
#[test]
fn an_oversized_symbol_table_is_skipped_with_a_note() {
    let mut t = sample();
    put(&mut t.bytes, t.shoff + 64 + 32, 1 << 40, 8); // .symtab sh_size
    let (bin, note) = Binary::parse(&t.bytes);
    let note = note.expect("a note").0;
    assert!(note.contains(".symtab is 1099511627776 bytes"), "{note}");
    assert!(note.contains(&format!("{} MiB", MAX_TABLE >> 20)), "{note}");
    let bin = bin.expect("still an ELF file");
    assert_eq!(bin.len(), 1, "names from .dynsym");
    assert_eq!(&*bin.symbolize(BASE + 0x101).unwrap().0, "exported");

    // The string table too.
    let mut t = sample();
    put(&mut t.bytes, t.shoff + 2 * 64 + 32, u64::MAX, 8); // .strtab sh_size
    let (_, note) = Binary::parse(&t.bytes);
    assert!(note.expect("a note").0.contains("its string table"));
}

/// The same from a real file: a sparse 8 GiB file whose `.symtab` points 6 GiB in and claims 60 MiB (within
/// the limit): the loader reads what the table claims and no more, and finds no functions in zeros.
#[test]
fn a_huge_sparse_file_is_read_only_where_the_headers_point() {
    let mut t = sample();
    let far = 6u64 << 30;
    put(&mut t.bytes, t.shoff + 64 + 24, far, 8); // .symtab sh_offset
    put(&mut t.bytes, t.shoff + 64 + 32, 60 << 20, 8); // .symtab sh_size
    let path = std::env::temp_dir().join(format!("ksymwatch-sparse-{}", std::process::id()));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&t.bytes).unwrap();
    f.seek(SeekFrom::Start((8u64 << 30) - 1)).unwrap();
    f.write_all(&[0]).unwrap();
    drop(f);
    let file = std::fs::File::open(&path).unwrap();
    let (bin, note) = Binary::load(&file);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(note, None);
    // Zeros hold no function symbol: the `.dynsym` answers instead.
    assert_eq!(bin.unwrap().len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
    ))]

    /// Any field overwritten with any value (sizes, offsets, counts, links, entry sizes, name indices): no
    /// panic, and what is kept is bounded by the file's own size.
    #[test]
    fn corrupted_files_never_panic_and_stay_bounded(
        edits in proptest::collection::vec((0usize..1024, any::<u64>(), prop_oneof![Just(1usize), Just(2), Just(4), Just(8)]), 1..8),
        truncate in proptest::option::of(0usize..1024),
    ) {
        let t = sample();
        let mut bytes = t.bytes.clone();
        for (at, value, width) in edits {
            let at = at % bytes.len();
            put(&mut bytes, at, value, width);
        }
        if let Some(n) = truncate {
            bytes.truncate(n.min(bytes.len()));
        }
        let (bin, _) = Binary::parse(&bytes);
        if let Some(bin) = bin {
            prop_assert!(bin.len() <= bytes.len() / 24);
            // Every lookup works on whatever was loaded.
            for vaddr in [0, BASE, BASE + 0x108, BASE + 0x2ff, u64::MAX] {
                let _ = bin.symbolize(vaddr);
                let _ = bin.vaddr(vaddr);
            }
        }
    }

    /// Corruption aimed at the tables the loader follows: the section headers, the symbols, the strings.
    #[test]
    fn corrupted_tables_never_panic(
        field in 0usize..(5 * 64),
        value in prop_oneof![any::<u64>(), Just(0u64), Just(u64::MAX), Just(1u64 << 32), 0u64..4096],
        sym_field in 0usize..(5 * 24),
        sym_value in any::<u32>(),
    ) {
        let t = sample();
        let mut bytes = t.bytes.clone();
        put(&mut bytes, t.shoff + field - field % 8, value, 8);
        put(&mut bytes, t.symtab + sym_field - sym_field % 4, u64::from(sym_value), 4);
        let (bin, _) = Binary::parse(&bytes);
        if let Some(bin) = bin {
            prop_assert!(bin.len() <= bytes.len() / 24);
            for vaddr in [BASE + 0x100, BASE + 0x150, BASE + 0x300] {
                let _ = bin.symbolize(vaddr);
            }
        }
    }
}
