//! The placement rules on hand-laid ELF files (segments where file offsets and addresses differ, stripped
//! and C++ tables, a made-up process), and on real files: this test binary and the libc it maps, where the
//! bytes at the offset found must be the bytes the function has in memory.

use super::*;
use crate::testing::elf::{Layout, Segment, Sym, GLOBAL_FUNC, GLOBAL_OBJECT};
use crate::testing::fake_proc::FakeProc;
use std::process::Command;

/// `STT_GNU_IFUNC`, global.
const GLOBAL_IFUNC: u8 = (goblin::elf::sym::STB_GLOBAL << 4) | goblin::elf::sym::STT_GNU_IFUNC;

fn sym(name: &str, value: u64, size: u64, info: u8) -> Sym<'_> {
    Sym {
        name,
        value,
        size,
        info,
        shndx: 1,
    }
}

/// Headers and rodata at 0, then code one page further in memory than in the file (as `ld` lays out a
/// PIE or a library), 0x1000 bytes of it in the file and more in memory.
fn segments() -> Vec<Segment> {
    vec![
        Segment {
            offset: 0,
            vaddr: 0,
            filesz: 0x800,
            memsz: 0x800,
            flags: 4,
        },
        Segment {
            offset: 0x1000,
            vaddr: 0x2000,
            filesz: 0x1000,
            memsz: 0x2000,
            flags: 5,
        },
    ]
}

fn file<'a>(symtab: Vec<Sym<'a>>, dynsym: Vec<Sym<'a>>) -> Vec<u8> {
    Layout {
        segments: segments(),
        symtab,
        dynsym,
        ..Layout::default()
    }
    .build()
    .bytes
}

/// A widget library's symbol table: functions in the code segment's file bytes, one before them (in
/// the first segment), data, an ifunc, and a function in memory only (past the file bytes).
fn widgets() -> Vec<u8> {
    file(
        vec![
            sym("early", 0x100, 0x10, GLOBAL_FUNC),
            sym("make_widget", 0x2040, 0x30, GLOBAL_FUNC),
            sym("free_widget", 0x2080, 0x30, GLOBAL_FUNC),
            sym("widget_count", 0x2100, 0x8, GLOBAL_OBJECT),
            sym("memcpy", 0x2200, 0x10, GLOBAL_IFUNC),
            sym("beyond", 0x3100, 0x10, GLOBAL_FUNC),
        ],
        vec![],
    )
}

#[test]
fn the_offset_comes_from_the_segment_holding_the_function() {
    let bytes = widgets();
    let got = locate_in_bytes(&bytes, "make_widget").unwrap();
    assert_eq!(
        got,
        Located {
            symbol: "make_widget".into(),
            vaddr: 0x2040,
            size: Some(0x30),
            offset: 0x1040,
            table: Table::Symtab,
            debug_file: None,
        }
    );
    assert_eq!(locate_in_bytes(&bytes, "early").unwrap().offset, 0x100);
}

/// A typo in a stripped file's function is answered with the exported names nearest to it: debug
/// symbols would not help it.
#[test]
fn a_stripped_files_missing_function_names_the_nearest_exported_ones() {
    let bytes = file(vec![], vec![sym("malloc", 0x2080, 0x20, GLOBAL_FUNC)]);
    let e = locate_in_bytes(&bytes, "mallocc").unwrap_err();
    assert!(
        matches!(&e, UprobeError::Stripped { nearest, .. } if nearest == &["malloc"]),
        "{e:?}"
    );
    assert!(e.to_string().contains("nearest exported: malloc"), "{e}");
}

#[test]
fn a_stripped_file_answers_from_dynsym_and_says_what_to_install() {
    let bytes = file(vec![], vec![sym("malloc", 0x2080, 0x20, GLOBAL_FUNC)]);
    let got = locate_in_bytes(&bytes, "malloc").unwrap();
    assert_eq!((got.offset, got.table), (0x1080, Table::Dynsym));
    let e = locate_in_bytes(&bytes, "internal_helper").unwrap_err();
    assert!(matches!(e, UprobeError::Stripped { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("stripped")
            && msg.contains("debug symbols")
            && msg.contains("internal_helper"),
        "{msg}"
    );
}

#[test]
fn an_unknown_function_names_the_nearest_ones() {
    let bytes = widgets();
    let e = locate_in_bytes(&bytes, "make_widgte").unwrap_err();
    let UprobeError::Unknown { nearest, .. } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(nearest.first().map(String::as_str), Some("make_widget"));
    assert!(
        !nearest.iter().any(|n| n == "widget_count"),
        "data is not suggested: {nearest:?}"
    );
    assert!(e.to_string().contains("nearest: make_widget"), "{e}");
}

#[test]
fn data_ifuncs_and_bytes_past_the_file_are_refused() {
    let bytes = widgets();
    let e = locate_in_bytes(&bytes, "widget_count").unwrap_err();
    assert!(matches!(e, UprobeError::NotFunction { .. }), "{e:?}");
    let e = locate_in_bytes(&bytes, "memcpy").unwrap_err();
    assert!(
        matches!(e, UprobeError::Ifunc { .. }) && e.to_string().contains("resolver"),
        "{e}"
    );
    let e = locate_in_bytes(&bytes, "beyond").unwrap_err();
    assert!(
        matches!(e, UprobeError::NotInFile { vaddr: 0x3100, .. }),
        "{e:?}"
    );
    let e = locate_in_bytes(b"#!/bin/sh\n", "main").unwrap_err();
    assert!(matches!(e, UprobeError::NotElf { .. }), "{e:?}");
}

#[test]
fn cpp_functions_are_found_by_their_demangled_names() {
    let bytes = file(
        vec![
            // ns::Widget::make(int), ns::Widget::make(), ns::Widget::destroy()
            sym("_ZN2ns6Widget4makeEi", 0x2040, 0x20, GLOBAL_FUNC),
            sym("_ZN2ns6Widget4makeEv", 0x2060, 0x20, GLOBAL_FUNC),
            sym("_ZN2ns6Widget7destroyEv", 0x2080, 0x20, GLOBAL_FUNC),
            // An alias at the same address is the same function.
            sym("_ZN2ns6Widget7destroyEv", 0x2080, 0, GLOBAL_FUNC),
        ],
        vec![],
    );
    let got = locate_in_bytes(&bytes, "ns::Widget::destroy").unwrap();
    assert_eq!(
        (got.symbol.as_str(), got.offset),
        ("_ZN2ns6Widget7destroyEv", 0x1080)
    );
    assert_eq!(
        locate_in_bytes(&bytes, "ns::Widget::make(int)")
            .unwrap()
            .offset,
        0x1040
    );
    assert_eq!(
        locate_in_bytes(&bytes, "_ZN2ns6Widget4makeEv")
            .unwrap()
            .offset,
        0x1060
    );
    let e = locate_in_bytes(&bytes, "ns::Widget::make").unwrap_err();
    let UprobeError::Ambiguous { candidates, .. } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(
        candidates,
        &[
            ("ns::Widget::make(int)".to_string(), 0x1040),
            ("ns::Widget::make()".to_string(), 0x1060)
        ]
    );
}

#[test]
fn specs_split_at_the_first_single_colon() {
    assert_eq!(split_spec("libc:malloc").unwrap(), ("libc", "malloc"));
    assert_eq!(
        split_spec("/opt/app/bin/app:ns::Widget::make").unwrap(),
        ("/opt/app/bin/app", "ns::Widget::make")
    );
    for bad in ["malloc", ":malloc", "libc:", "", "ns::f"] {
        let e = split_spec(bad).unwrap_err();
        assert!(e.to_string().contains("FILE:FUNC"), "{bad}: {e}");
    }
}

/// A library named by the process's maps: found by a prefix of its name, probed through the file it
/// maps; one it does not map says it is not loaded yet and how to get around that; no process, no name.
#[test]
fn a_library_name_is_looked_up_in_the_process() {
    let f = FakeProc::new("uprobe-library");
    let lib = f.file(
        "libwidget.so.1",
        &file(vec![sym("make_widget", 0x2040, 0x30, GLOBAL_FUNC)], vec![]),
    );
    let base = 0x7f00_0000_0000u64;
    f.process(
        42,
        None,
        &[
            (base, base + 0x1000, "r--p", 0, Some(&lib)),
            (base + 0x2000, base + 0x3000, "r-xp", 0x1000, Some(&lib)),
        ],
    );
    let got = place(&f.root, Some(42), "libwidget", "make_widget").unwrap();
    assert_eq!(got.file, lib);
    assert_eq!(got.shown, lib.display().to_string());
    assert_eq!(got.func.offset, 0x1040);
    // The same through its path, with or without a process.
    let by_path = place(&f.root, None, &lib.display().to_string(), "make_widget").unwrap();
    assert_eq!(by_path.func, got.func);

    let e = place(&f.root, Some(42), "libssl", "SSL_write").unwrap_err();
    assert!(matches!(e, UprobeError::NotLoaded { pid: 42, .. }), "{e:?}");
    crate::testing::assert_mentions(
        &e.to_string(),
        &[
            "not mapped `libssl` (yet)",
            "dlopen",
            "`--`",
            "libwidget.so.1",
        ],
    );
    let e = place(&f.root, None, "libc", "malloc").unwrap_err();
    assert!(
        matches!(e, UprobeError::NeedsProcess { .. }) && e.to_string().contains("-p PID"),
        "{e}"
    );
    let e = place(&f.root, Some(43), "libc", "malloc").unwrap_err();
    assert!(matches!(e, UprobeError::Process(_)), "{e:?}");
}

/// A function of this test binary, named as the C side would name it.
#[no_mangle]
#[inline(never)]
pub extern "C" fn ksymwatch_uprobe_placement_target(x: u64) -> u64 {
    x.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5bd1_e995
}

/// `len` bytes of `path` at `offset`.
fn file_bytes(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0; len];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut buf, offset)
        .unwrap();
    buf
}

/// The offset found in this very binary, and in the libc this process maps (by the name `libc`), holds the
/// bytes the function has in memory: what the kernel will find there when it places the probe.
#[test]
fn the_offset_holds_the_functions_code_in_real_files() {
    let f = ksymwatch_uprobe_placement_target as extern "C" fn(u64) -> u64 as usize;
    assert_eq!(ksymwatch_uprobe_placement_target(0), 0x5bd1_e995);
    // SAFETY: 16 bytes of this function's code, mapped and readable while the test runs.
    let in_memory = unsafe { std::slice::from_raw_parts(f as *const u8, 16) };
    let exe = std::env::current_exe().unwrap();
    let placed = place_file(&exe, "ksymwatch_uprobe_placement_target").unwrap();
    assert_eq!(placed.func.table, Table::Symtab);
    assert_eq!(file_bytes(&exe, placed.func.offset, 16), in_memory);

    let pid = std::process::id();
    let placed = match place(Path::new("/proc"), Some(pid), "libc", "malloc") {
        Ok(p) => p,
        Err(e) => {
            crate::testing::skip(format_args!("no libc:malloc in this process: {e}"));
            return;
        }
    };
    // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the global scope.
    let malloc = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) } as usize;
    assert_ne!(malloc, 0);
    // SAFETY: 16 bytes of libc's malloc, mapped for the life of the process.
    let in_memory = unsafe { std::slice::from_raw_parts(malloc as *const u8, 16) };
    assert_eq!(
        file_bytes(&placed.file, placed.func.offset, 16),
        in_memory,
        "{placed:?}"
    );
    assert!(placed.shown.contains("libc"), "{placed:?}");
}

/// `ksymwatch-uprobe-TAG-PID` under the temporary directory, made, holding `file` with the C source
/// `text`: (the directory, the source file).
fn c_source(tag: &str, file: &str, text: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ksymwatch-uprobe-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(file);
    std::fs::write(&src, text).unwrap();
    (dir, src)
}

/// Runs a tool that builds a test's files; it must succeed.
fn ran(cmd: &mut Command) {
    let ok = cmd.status().is_ok_and(|s| s.success());
    assert!(ok, "{cmd:?}");
}

/// A gcc-built program, stripped, with its debug file where a `-dbgsym` package puts it (under a made-up
/// root): a function only `.symtab` knew is found there, at the offset the unstripped build gives; without
/// the debug file, the error says to install it.
#[test]
fn a_stripped_programs_functions_come_from_its_debug_file() {
    use crate::testing::{have, skip};
    if !["gcc", "objcopy", "strip"].iter().all(|t| have(t)) {
        skip("gcc, objcopy or strip not found");
        return;
    }
    let (dir, src) = c_source(
        "debug",
        "p.c",
        "static int __attribute__((noinline)) hidden_step(int x) { return x * 3 + 1; }\n\
         int main(int argc, char **argv) { (void)argv; return hidden_step(argc); }\n",
    );
    let full = dir.join("p");
    ran(Command::new("gcc")
        .args(["-O1", "-g", "-Wl,--build-id", "-o"])
        .arg(&full)
        .arg(&src));
    let want = place_file(&full, "hidden_step").unwrap().func;
    assert_eq!(want.debug_file, None);

    let stripped = dir.join("p.stripped");
    let debug = dir.join("p.debug");
    ran(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&full)
        .arg(&debug));
    ran(Command::new("strip")
        .args(["--strip-all", "-o"])
        .arg(&stripped)
        .arg(&full));
    let e = place_file_with(&stripped, "hidden_step", &[]).unwrap_err();
    assert!(
        matches!(e, UprobeError::Stripped { .. }) && e.to_string().contains(".build-id"),
        "{e}"
    );

    // Where the package puts it: ROOT/usr/lib/debug/.build-id/ab/cdef….debug.
    let file = std::fs::File::open(&stripped).unwrap();
    let headers = Headers::read(&file).unwrap();
    let id = crate::process::debug::build_id(&file, &headers).expect("a build-id");
    let root = dir.join("root");
    let at = root.join(crate::process::debug::debug_file_path(&id).unwrap());
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::fs::copy(&debug, &at).unwrap();
    let got = place_file_with(&stripped, "hidden_step", std::slice::from_ref(&root))
        .unwrap()
        .func;
    assert_eq!(got.debug_file.as_deref(), Some(at.as_path()));
    assert_eq!(
        (got.offset, got.vaddr, got.table),
        (want.offset, want.vaddr, Table::Symtab)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A user object's type from a gcc-built program's DWARF: a member's offset and size and the type's own
/// size (a C++-style `class` for `struct`, a typedef by its name too); a type or a field it lacks, and a
/// file without DWARF, are errors naming the way out.
#[test]
fn an_objects_type_comes_from_the_programs_dwarf() {
    use crate::btf::{CastKind, CastType};
    use crate::path::PathElem;
    use crate::testing::require;
    if !require("gcc") {
        return;
    }
    let (dir, src) = c_source(
        "types",
        "t.c",
        "struct widget { long id; char name[40]; int count; int flags; void *next; };\n\
         typedef struct widget widget_t;\n\
         widget_t *volatile w;\n\
         int main(void) { return w ? w->count : 0; }\n",
    );
    let build = |out: &Path, debug: bool| {
        let mut cmd = Command::new("gcc");
        cmd.arg("-O1");
        if debug {
            cmd.arg("-g");
        }
        ran(cmd.arg("-o").arg(out).arg(&src));
    };
    let (with, without) = (dir.join("t"), dir.join("t.nodebug"));
    build(&with, true);
    build(&without, false);
    let pid = std::process::id();
    let cast = |kind, name: &str| CastType {
        kind,
        name: name.into(),
    };
    let count = [PathElem::Field("count".into())];
    let (m, whole) =
        types::object_member(pid, &with, &cast(Some(CastKind::Struct), "widget"), &count).unwrap();
    assert_eq!((m.offset, m.size, whole), (48, Some(4), Some(64)));
    let (m, whole) = types::object_member(pid, &with, &cast(None, "widget_t"), &count).unwrap();
    assert_eq!((m.offset, whole), (48, Some(64)));
    let e = types::object_member(pid, &with, &cast(Some(CastKind::Struct), "gadget"), &count)
        .unwrap_err();
    assert!(e.contains("describes no `struct gadget`"), "{e}");
    let e = types::object_member(
        pid,
        &with,
        &cast(Some(CastKind::Struct), "widget"),
        &[PathElem::Field("cnt".into())],
    )
    .unwrap_err();
    assert!(e.contains("cnt") && e.contains("count"), "{e}");
    let e = types::object_member(
        pid,
        &without,
        &cast(Some(CastKind::Struct), "widget"),
        &count,
    )
    .unwrap_err();
    assert!(e.contains("has no DWARF") && e.contains("-g"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
