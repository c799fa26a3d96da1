//! A fixture `/proc` for the process resolver's tests (in this crate and the tracer's): made-up processes
//! whose `maps` place ELF files built with [`crate::testing::elf::Layout`] the way the kernel and ld.so
//! place real ones, and the usual one, [`standard`]: a PIE (with its RELRO page mapped twice, as `gcc -pie`
//! output is) and two libraries.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::elf::{
    Layout, Section, Segment, Sym, ET_DYN, ET_EXEC, GLOBAL_FUNC, GLOBAL_OBJECT, GLOBAL_TLS,
    LOCAL_OBJECT,
};

/// Where the PIE executable is loaded.
pub const PIE: u64 = 0x5555_5555_0000;
/// Where libfoo is loaded.
pub const LIBFOO: u64 = 0x7f00_1234_0000;
/// Where libbar is loaded.
pub const LIBBAR: u64 = 0x7f00_5678_0000;

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
pub fn pie() -> Vec<u8> {
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
pub fn libfoo() -> Vec<u8> {
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
pub fn libbar() -> Vec<u8> {
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
pub fn fixed() -> Vec<u8> {
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

/// The usual process 42: the PIE with libfoo and libbar.
pub fn standard(test: &str) -> (FakeProc, PathBuf) {
    let f = FakeProc::new(test);
    let app = f.file("app", &pie());
    let foo_path = f.file("libfoo.so.1", &libfoo());
    let bar_path = f.file("libbar.so.2", &libbar());
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
            (LIBFOO, LIBFOO + 0x1000, "r-xp", 0, Some(&foo_path)),
            (
                LIBFOO + 0x2000,
                LIBFOO + 0x3000,
                "rw-p",
                0x1000,
                Some(&foo_path),
            ),
            (LIBBAR, LIBBAR + 0x1000, "r-xp", 0, Some(&bar_path)),
            (LIBBAR + 0x1000, LIBBAR + 0x3000, "rw-p", 0, None),
        ],
    );
    (f, app)
}

/// A fixture `/proc` with its files; removed when dropped.
pub struct FakeProc {
    /// The fixture's `/proc`.
    pub root: PathBuf,
}

impl Drop for FakeProc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl FakeProc {
    /// An empty fixture `/proc` (and a `files` directory beside the pids) named after the test.
    pub fn new(test: &str) -> FakeProc {
        let root =
            std::env::temp_dir().join(format!("ksymwatch-process-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("files")).unwrap();
        FakeProc { root }
    }

    /// Writes a file of the fixture; returns its path.
    pub fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.root.join("files").join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Process `pid` mapping `(start, end, perms, offset, file)` ranges (file `None`: anonymous), with
    /// `exe` as its executable.
    pub fn process(
        &self,
        pid: u32,
        exe: Option<&Path>,
        maps: &[(u64, u64, &str, u64, Option<&Path>)],
    ) {
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
}
