//! [`resolve`] on made-up processes: a fixture `/proc` whose maps place ELF files built by
//! [`crate::testing::elf::Layout`] the way the kernel and ld.so place real ones.

use super::*;
use crate::testing::elf::{
    Layout, Section, Segment, Sym, ET_DYN, ET_EXEC, GLOBAL_FUNC, GLOBAL_OBJECT, GLOBAL_TLS,
    LOCAL_OBJECT,
};
use std::os::unix::fs::MetadataExt;

/// Where the PIE executable is loaded.
const PIE: u64 = 0x5555_5555_0000;
/// Where libfoo is loaded.
const LIBFOO: u64 = 0x7f00_1234_0000;
const LIBBAR: u64 = 0x7f00_5678_0000;

/// `.text`, `.data.rel.ro`, `.data`, `.bss`, `.tbss` of the PIE, at the addresses its segments give.
fn pie_sections() -> Vec<Section<'static>> {
    let s = |name, kind, flags, addr, size| Section {
        name,
        kind,
        flags,
        addr,
        size,
    };
    vec![
        s(".text", 1, 2 | 4, 0x1000, 0x200),
        s(".data.rel.ro", 1, 1 | 2, 0x3db0, 0x40),
        s(".data", 1, 1 | 2, 0x4000, 0x38),
        s(".bss", 8, 1 | 2, 0x4038, 0x48),
        s(".tbss", 8, 1 | 2 | 0x400, 0x3da0, 0x10),
    ]
}

/// A PIE laid out as `gcc -pie` does it: headers, text, rodata, then a data segment whose first file page
/// is the rodata's last (RELRO), so that page is mapped twice at different addresses.
fn pie() -> Vec<u8> {
    let mut l = Layout {
        e_type: ET_DYN,
        segments: vec![
            seg(0, 0, 0x1000, 0x1000, 4),
            seg(0x1000, 0x1000, 0x200, 0x200, 5),
            seg(0x2000, 0x2000, 0x100, 0x100, 4),
            seg(0x2db0, 0x3db0, 0x288, 0x2d0, 6),
        ],
        sections: pie_sections(),
        ..Layout::default()
    };
    let (text, relro, data, bss, tbss) = (
        l.section_index(0),
        l.section_index(1),
        l.section_index(2),
        l.section_index(3),
        l.section_index(4),
    );
    l.symtab = vec![
        sym("main", 0x1100, 0x20, GLOBAL_FUNC, text),
        sym("relro_thing", 0x3db8, 8, LOCAL_OBJECT, relro),
        sym("counter", 0x4010, 8, GLOBAL_OBJECT, data),
        sym("dup", 0x4020, 4, LOCAL_OBJECT, data),
        sym("dup", 0x4028, 4, LOCAL_OBJECT, data),
        sym("shared", 0x4030, 8, GLOBAL_OBJECT, data),
        sym("big", 0x4040, 64, GLOBAL_OBJECT, bss),
        sym("tls_var", 0x8, 8, GLOBAL_TLS, tbss),
    ];
    l.build().bytes
}

/// A library linked at 0: code, then data one page further in memory than in the file.
fn libfoo() -> Vec<u8> {
    Layout {
        e_type: ET_DYN,
        segments: vec![
            seg(0, 0, 0x1000, 0x1000, 5),
            seg(0x1000, 0x2000, 0x100, 0x200, 6),
        ],
        symtab: vec![
            sym("foo_var", 0x2010, 4, GLOBAL_OBJECT, 1),
            sym("shared", 0x2020, 8, GLOBAL_OBJECT, 1),
            sym("both_libs", 0x2030, 8, GLOBAL_OBJECT, 1),
        ],
        ..Layout::default()
    }
    .build()
    .bytes
}

/// A stripped library: `.dynsym` only (the builder always writes a `.symtab`; an empty one, as after
/// `strip`, stands for none).
fn libbar() -> Vec<u8> {
    Layout {
        e_type: ET_DYN,
        segments: vec![seg(0, 0, 0x1000, 0x3000, 7)],
        dynsym: vec![
            sym("bar_var", 0x2100, 8, GLOBAL_OBJECT, 1),
            sym("both_libs", 0x2108, 8, GLOBAL_OBJECT, 1),
        ],
        ..Layout::default()
    }
    .build()
    .bytes
}

/// A non-PIE executable, linked and loaded at 0x400000.
fn fixed() -> Vec<u8> {
    Layout {
        e_type: ET_EXEC,
        segments: vec![
            seg(0, 0x40_0000, 0x1000, 0x1000, 5),
            seg(0x1e10, 0x40_2e10, 0x220, 0x240, 6),
        ],
        symtab: vec![sym("gvar", 0x40_3010, 8, GLOBAL_OBJECT, 1)],
        ..Layout::default()
    }
    .build()
    .bytes
}

fn seg(offset: u64, vaddr: u64, filesz: u64, memsz: u64, flags: u32) -> Segment {
    Segment {
        offset,
        vaddr,
        filesz,
        memsz,
        flags,
    }
}

fn sym(name: &'static str, value: u64, size: u64, info: u8, shndx: u16) -> Sym<'static> {
    Sym {
        name,
        value,
        size,
        info,
        shndx,
    }
}

/// A fixture `/proc` with its files; removed when dropped.
struct FakeProc {
    root: PathBuf,
}

impl Drop for FakeProc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl FakeProc {
    fn new(test: &str) -> FakeProc {
        let root =
            std::env::temp_dir().join(format!("ksymwatch-process-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("files")).unwrap();
        FakeProc { root }
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.root.join("files").join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Process `pid` mapping `(start, end, perms, offset, file)` ranges (file `None`: anonymous), with
    /// `exe` as its executable.
    fn process(&self, pid: u32, exe: Option<&Path>, maps: &[(u64, u64, &str, u64, Option<&Path>)]) {
        let dir = self.root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::new();
        for &(start, end, perms, offset, file) in maps {
            let (inode, path) = match file {
                Some(p) => (std::fs::metadata(p).unwrap().ino(), p.display().to_string()),
                None => (0, String::new()),
            };
            text.push_str(&format!(
                "{start:x}-{end:x} {perms} {offset:08x} fd:01 {inode} {path}\n"
            ));
        }
        std::fs::write(dir.join("maps"), text).unwrap();
        if let Some(exe) = exe {
            std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        }
    }

    /// The usual process 42: the PIE with libfoo and libbar.
    fn standard(test: &str) -> (FakeProc, PathBuf) {
        let f = FakeProc::new(test);
        let app = f.file("app", &pie());
        let foo = f.file("libfoo.so.1", &libfoo());
        let bar = f.file("libbar.so.2", &libbar());
        f.process(
            42,
            Some(&app),
            &[
                (PIE, PIE + 0x1000, "r--p", 0, Some(&app)),
                (PIE + 0x1000, PIE + 0x2000, "r-xp", 0x1000, Some(&app)),
                (PIE + 0x2000, PIE + 0x3000, "r--p", 0x2000, Some(&app)),
                (PIE + 0x3000, PIE + 0x4000, "r--p", 0x2000, Some(&app)),
                (PIE + 0x4000, PIE + 0x5000, "rw-p", 0x3000, Some(&app)),
                (PIE + 0x5000, PIE + 0x6000, "rw-p", 0, None),
                (LIBFOO, LIBFOO + 0x1000, "r-xp", 0, Some(&foo)),
                (LIBFOO + 0x2000, LIBFOO + 0x3000, "rw-p", 0x1000, Some(&foo)),
                (LIBBAR, LIBBAR + 0x1000, "r-xp", 0, Some(&bar)),
                (LIBBAR + 0x1000, LIBBAR + 0x3000, "rw-p", 0, None),
            ],
        );
        (f, app)
    }

    fn resolve(
        &self,
        pid: u32,
        object: Option<&str>,
        name: &str,
        index: Option<usize>,
    ) -> Result<ProcessTarget, ProcessError> {
        resolve(&self.root, pid, object, name, index, &[])
    }
}

#[test]
fn a_pie_global_is_its_file_address_plus_the_load_bias() {
    let (f, app) = FakeProc::standard("pie");
    let t = f.resolve(42, None, "counter", None).unwrap();
    assert_eq!((t.file_vaddr, t.bias, t.addr), (0x4010, PIE, PIE + 0x4010));
    assert_eq!((t.size, t.symbol_size), (Some(8), Some(8)));
    assert_eq!(t.object, app);
    assert!(t.is_exe);
    assert_eq!(t.type_char, 'D');
    assert_eq!(t.section.as_deref(), Some(".data"));
    assert_eq!((t.type_name, t.member, t.debug_file), (None, None, None));
    // .bss lies past the file, in an anonymous mapping: the same bias.
    let t = f.resolve(42, None, "big", None).unwrap();
    assert_eq!((t.addr, t.type_char), (PIE + 0x4040, 'B'));
    // The RELRO page: its file page (0x2000) is also mapped at PIE+0x2000 as rodata, which a bias taken
    // from "the mapping holding the file offset" would pick, 0x1000 too low.
    let t = f.resolve(42, None, "relro_thing", None).unwrap();
    assert_eq!((t.addr, t.type_char), (PIE + 0x3db8, 'd'));
    // Code resolves too (the caller warns that nothing writes to it).
    let t = f.resolve(42, None, "main", None).unwrap();
    assert_eq!(
        (t.addr, t.type_char, t.is_code()),
        (PIE + 0x1100, 'T', true)
    );
}

#[test]
fn a_non_pie_executable_has_bias_zero() {
    let f = FakeProc::new("exec");
    let exe = f.file("fixed", &fixed());
    f.process(
        43,
        Some(&exe),
        &[
            (0x40_0000, 0x40_1000, "r-xp", 0, Some(&exe)),
            (0x40_2000, 0x40_3000, "r--p", 0x1000, Some(&exe)),
            (0x40_3000, 0x40_4000, "rw-p", 0x1000, Some(&exe)),
        ],
    );
    let t = f.resolve(43, None, "gvar", None).unwrap();
    assert_eq!((t.bias, t.addr), (0, 0x40_3010));
}

#[test]
fn libraries_are_searched_after_the_executable_and_chosen_with_a_prefix() {
    let (f, _) = FakeProc::standard("libs");
    // Only in libfoo: its own bias (mapped at LIBFOO, linked at 0).
    let t = f.resolve(42, None, "foo_var", None).unwrap();
    assert_eq!((t.bias, t.addr), (LIBFOO, LIBFOO + 0x2010));
    assert_eq!(t.object_name(), "libfoo.so.1");
    assert!(!t.is_exe);
    // In the executable and in libfoo: the executable's, as the dynamic linker binds it.
    let t = f.resolve(42, None, "shared", None).unwrap();
    assert_eq!(t.addr, PIE + 0x4030);
    // OBJECT: by name, by a prefix up to `.`, by path; a prefix must end at a `.` or `-`.
    for object in ["libfoo.so.1", "libfoo", "libfoo.so"] {
        let t = f.resolve(42, Some(object), "shared", None).unwrap();
        assert_eq!(t.addr, LIBFOO + 0x2020, "{object}");
    }
    let path = f.root.join("files/libfoo.so.1");
    let t = f
        .resolve(42, Some(path.to_str().unwrap()), "shared", None)
        .unwrap();
    assert_eq!(t.addr, LIBFOO + 0x2020);
    assert!(f
        .resolve(42, Some("libf"), "shared", None)
        .unwrap_err()
        .is_not_mapped_yet());
    // A stripped library answers from .dynsym.
    let t = f.resolve(42, Some("libbar"), "bar_var", None).unwrap();
    assert_eq!(t.addr, LIBBAR + 0x2100);
    // The executable by its own name.
    let t = f.resolve(42, Some("app"), "counter", None).unwrap();
    assert_eq!(t.addr, PIE + 0x4010);
}

#[test]
fn a_symbol_of_two_libraries_is_ambiguous_and_names_both() {
    let (f, _) = FakeProc::standard("ambiguous");
    let e = f.resolve(42, None, "both_libs", None).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "symbol `both_libs` is defined in 2 mapped files: libfoo.so.1:both_libs=0x{:x} \
             libbar.so.2:both_libs=0x{:x}; choose one with OBJECT:both_libs",
            LIBFOO + 0x2030,
            LIBBAR + 0x2108
        )
    );
    let t = f
        .resolve(42, Some("libbar.so.2"), "both_libs", None)
        .unwrap();
    assert_eq!(t.addr, LIBBAR + 0x2108);
}

#[test]
fn same_named_symbols_of_one_file_take_at_n() {
    let (f, _) = FakeProc::standard("at-n");
    let e = f.resolve(42, None, "dup", None).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "app: symbol `dup` is ambiguous (2 symbols): dup@0=0x{:x} (d) dup@1=0x{:x} (d); choose one \
             with dup@N or 0xADDR",
            PIE + 0x4020,
            PIE + 0x4028
        )
    );
    assert_eq!(
        f.resolve(42, None, "dup", Some(1)).unwrap().addr,
        PIE + 0x4028
    );
    let e = f.resolve(42, None, "dup", Some(2)).unwrap_err();
    assert!(
        e.to_string().contains("there are only 2 symbols named"),
        "{e}"
    );
}

#[test]
fn a_library_that_is_not_mapped_is_told_apart_from_an_unknown_symbol() {
    let (f, _) = FakeProc::standard("not-mapped");
    let e = f.resolve(42, Some("libnothere.so"), "x", None).unwrap_err();
    assert!(e.is_not_mapped_yet(), "{e:?}");
    assert_eq!(
        e.to_string(),
        "process 42 has no file `libnothere.so` mapped (it maps app, libfoo.so.1 and libbar.so.2); name one \
         of them, by its name or a prefix of it, or by its path"
    );
    let e = f.resolve(42, None, "nosuch", None).unwrap_err();
    assert!(!e.is_not_mapped_yet());
    assert_eq!(
        e.to_string(),
        "unknown symbol `nosuch` in process 42: not in app, libfoo.so.1 and libbar.so.2 (libbar.so.2 is \
         stripped: only exported symbols are known); check the name with nm FILE, name a library that is \
         not mapped yet as LIB:nosuch, or give the address as 0xADDR"
    );
    let e = f.resolve(42, Some("libfoo"), "bar_var", None).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("unknown symbol `bar_var` in process 42: not in libfoo.so.1;"),
        "{e}"
    );
}

#[test]
fn two_files_matching_one_prefix_are_named() {
    let (f, _) = FakeProc::standard("prefix");
    let extra = f.file("libfoo-extra.so", &libbar());
    let maps = f.root.join("42/maps");
    let mut text = std::fs::read_to_string(&maps).unwrap();
    text.push_str(&format!(
        "7f0099990000-7f0099991000 r-xp 00000000 fd:01 {} {}\n",
        std::fs::metadata(&extra).unwrap().ino(),
        extra.display()
    ));
    std::fs::write(&maps, text).unwrap();
    let e = f.resolve(42, Some("libfoo"), "x", None).unwrap_err();
    assert!(
        matches!(&e, ProcessError::AmbiguousObject { matches, .. } if matches.len() == 2),
        "{e:?}"
    );
    // The full name still picks one.
    assert!(f.resolve(42, Some("libfoo.so.1"), "foo_var", None).is_ok());
}

#[test]
fn a_thread_local_is_refused() {
    let (f, _) = FakeProc::standard("tls");
    let e = f.resolve(42, None, "tls_var", None).unwrap_err();
    assert!(matches!(e, ProcessError::ThreadLocal { .. }), "{e:?}");
    assert!(
        e.to_string().contains("every thread has its own copy"),
        "{e}"
    );
}

#[test]
fn a_member_path_without_dwarf_names_the_fix() {
    let (f, app) = FakeProc::standard("no-dwarf");
    let path = [PathElem::Field("hits".into()), PathElem::Index(2)];
    let e = resolve(&f.root, 42, None, "counter", None, &path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "`counter.hits[2]`: struct fields and array elements need DWARF debug info, and {} has none \
             (nor a debug file under /usr/lib/debug/.build-id); rebuild it with -g, install its debug \
             symbols, or give the address as 0xADDR",
            app.display()
        )
    );
}

#[test]
fn a_binary_mapped_twice_is_placed_by_its_loaded_segments() {
    let (f, _) = FakeProc::standard("twice");
    let app = f.root.join("files/app");
    // The program also maps its own file, read-only, below where it was loaded.
    let maps = f.root.join("42/maps");
    let text = std::fs::read_to_string(&maps).unwrap();
    std::fs::write(
        &maps,
        format!(
            "100000000-100003000 r--p 00000000 fd:01 {} {}\n{text}",
            std::fs::metadata(&app).unwrap().ino(),
            app.display()
        ),
    )
    .unwrap();
    assert_eq!(
        f.resolve(42, None, "counter", None).unwrap().addr,
        PIE + 0x4010
    );
}

#[test]
fn processes_that_are_not_there_or_map_nothing() {
    let (f, _) = FakeProc::standard("gone");
    for pid in [0, 99] {
        let e = f.resolve(pid, None, "counter", None).unwrap_err();
        assert!(matches!(e, ProcessError::NoProcess { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("no process {pid}; give the pid of a running process (pgrep NAME)")
        );
    }
    f.process(
        7,
        None,
        &[(0x7ffd_0000_0000, 0x7ffd_0002_1000, "rw-p", 0, None)],
    );
    let e = f.resolve(7, None, "counter", None).unwrap_err();
    assert!(matches!(e, ProcessError::NoMappings { pid: 7 }), "{e:?}");
}

#[test]
fn a_file_that_is_no_longer_the_mapped_one_is_not_read() {
    let (f, _) = FakeProc::standard("swapped");
    // Replaced at the same path (a new inode): the maps' inode no longer matches, so it is not opened.
    // (Written aside and renamed over, so the new file cannot reuse the old inode number.)
    let foo = f.root.join("files/libfoo.so.1");
    let new = f.file("libfoo.so.1.new", &libfoo());
    std::fs::rename(&new, &foo).unwrap();
    let e = f.resolve(42, Some("libfoo"), "foo_var", None).unwrap_err();
    assert!(
        matches!(&e, ProcessError::Unreadable { why, .. } if why.contains("regular file the process mapped")),
        "{e:?}"
    );
    // Searched without OBJECT:, it is left out and said so.
    let e = f.resolve(42, None, "foo_var", None).unwrap_err();
    assert!(
        e.to_string()
            .contains("(not searched: libfoo.so.1: it cannot be opened"),
        "{e}"
    );
}
