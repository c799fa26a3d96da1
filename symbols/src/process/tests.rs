//! [`resolve`] on made-up processes: the fixture `/proc` of [`crate::testing::fake_proc`], whose maps place
//! ELF files the way the kernel and ld.so place real ones.

use super::error::list;
use super::*;
use crate::testing::fake_proc::{fixed, libbar, libfoo, standard, FakeProc, LIBBAR, LIBFOO, PIE};
use std::os::unix::fs::MetadataExt;

/// A bare name (no member path) in `f`'s process `pid`.
fn find(
    f: &FakeProc,
    pid: u32,
    object: Option<&str>,
    name: &str,
    index: Option<usize>,
) -> Result<ProcessTarget, ProcessError> {
    resolve(&f.root, pid, object, name, index, &[])
}

#[test]
fn a_pie_global_is_its_file_address_plus_the_load_bias() {
    let (f, app) = standard("pie");
    let t = find(&f, 42, None, "counter", None).unwrap();
    assert_eq!((t.file_vaddr, t.bias, t.addr), (0x4010, PIE, PIE + 0x4010));
    assert_eq!((t.size, t.symbol_size), (Some(8), Some(8)));
    assert_eq!(t.object, app);
    assert!(t.is_exe);
    assert_eq!(t.type_char, 'D');
    assert_eq!(t.section.as_deref(), Some(".data"));
    assert_eq!((t.type_name, t.member, t.debug_file), (None, None, None));
    // .bss lies past the file, in an anonymous mapping: the same bias.
    let t = find(&f, 42, None, "big", None).unwrap();
    assert_eq!((t.addr, t.type_char), (PIE + 0x4040, 'B'));
    // The RELRO page: its file page (0x2000) is also mapped at PIE+0x2000 as rodata, which a bias taken
    // from "the mapping holding the file offset" would pick, 0x1000 too low.
    let t = find(&f, 42, None, "relro_thing", None).unwrap();
    assert_eq!((t.addr, t.type_char), (PIE + 0x3db8, 'd'));
    // Code resolves too (the caller warns that nothing writes to it).
    let t = find(&f, 42, None, "main", None).unwrap();
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
    let t = find(&f, 43, None, "gvar", None).unwrap();
    assert_eq!((t.bias, t.addr), (0, 0x40_3010));
}

#[test]
fn libraries_are_searched_after_the_executable_and_chosen_with_a_prefix() {
    let (f, _) = standard("libs");
    // Only in libfoo: its own bias (mapped at LIBFOO, linked at 0).
    let t = find(&f, 42, None, "foo_var", None).unwrap();
    assert_eq!((t.bias, t.addr), (LIBFOO, LIBFOO + 0x2010));
    assert_eq!(t.object_name(), "libfoo.so.1");
    assert!(!t.is_exe);
    // In the executable and in libfoo: the executable's, as the dynamic linker binds it.
    let t = find(&f, 42, None, "shared", None).unwrap();
    assert_eq!(t.addr, PIE + 0x4030);
    // OBJECT: by name, by a prefix up to `.`, by path; a prefix must end at a `.` or `-`.
    for object in ["libfoo.so.1", "libfoo", "libfoo.so"] {
        let t = find(&f, 42, Some(object), "shared", None).unwrap();
        assert_eq!(t.addr, LIBFOO + 0x2020, "{object}");
    }
    let path = f.root.join("files/libfoo.so.1");
    let t = find(&f, 42, Some(path.to_str().unwrap()), "shared", None).unwrap();
    assert_eq!(t.addr, LIBFOO + 0x2020);
    assert!(find(&f, 42, Some("libf"), "shared", None)
        .unwrap_err()
        .is_not_mapped_yet());
    // A stripped library answers from .dynsym.
    let t = find(&f, 42, Some("libbar"), "bar_var", None).unwrap();
    assert_eq!(t.addr, LIBBAR + 0x2100);
    // The executable by its own name.
    let t = find(&f, 42, Some("app"), "counter", None).unwrap();
    assert_eq!(t.addr, PIE + 0x4010);
}

/// Why process 42 refuses `symbol` (`@at`) in `object`, or in every file it maps.
fn refusal(f: &FakeProc, object: Option<&str>, symbol: &str, at: Option<usize>) -> String {
    find(f, 42, object, symbol, at).unwrap_err().to_string()
}

#[test]
fn a_symbol_of_two_libraries_is_ambiguous_and_names_both() {
    let (f, _) = standard("ambiguous");
    assert_eq!(
        refusal(&f, None, "both_libs", None),
        format!(
            "symbol `both_libs` is defined in 2 mapped files: libfoo.so.1:both_libs=0x{:x} \
             libbar.so.2:both_libs=0x{:x}; choose one with OBJECT:both_libs",
            LIBFOO + 0x2030,
            LIBBAR + 0x2108
        )
    );
    let t = find(&f, 42, Some("libbar.so.2"), "both_libs", None).unwrap();
    assert_eq!(t.addr, LIBBAR + 0x2108);
}

#[test]
fn same_named_symbols_of_one_file_take_at_n() {
    let (f, _) = standard("at-n");
    assert_eq!(
        refusal(&f, None, "dup", None),
        format!(
            "app: symbol `dup` is ambiguous (2 symbols): dup@0=0x{:x} (d) dup@1=0x{:x} (d); choose one \
             with dup@N or 0xADDR",
            PIE + 0x4020,
            PIE + 0x4028
        )
    );
    assert_eq!(
        find(&f, 42, None, "dup", Some(1)).unwrap().addr,
        PIE + 0x4028
    );
    let e = refusal(&f, None, "dup", Some(2));
    assert!(e.contains("there are only 2 symbols named"), "{e}");
}

#[test]
fn a_library_that_is_not_mapped_is_told_apart_from_an_unknown_symbol() {
    let (f, _) = standard("not-mapped");
    let e = find(&f, 42, Some("libnothere.so"), "x", None).unwrap_err();
    assert!(e.is_not_mapped_yet(), "{e:?}");
    assert_eq!(
        e.to_string(),
        "process 42 has no file `libnothere.so` mapped (it maps app, libfoo.so.1 and libbar.so.2); name one \
         of them, by its name or a prefix of it, or by its path"
    );
    let e = find(&f, 42, None, "nosuch", None).unwrap_err();
    assert!(!e.is_not_mapped_yet());
    assert_eq!(
        e.to_string(),
        "unknown symbol `nosuch` in process 42: not in app, libfoo.so.1 and libbar.so.2 (libbar.so.2 is \
         stripped: only exported symbols are known); check the name with nm FILE, name a library that is \
         not mapped yet as LIB:nosuch, or give the address as 0xADDR"
    );
    let e = refusal(&f, Some("libfoo"), "bar_var", None);
    assert!(
        e.starts_with("unknown symbol `bar_var` in process 42: not in libfoo.so.1;"),
        "{e}"
    );
}

#[test]
fn two_files_matching_one_prefix_are_named() {
    let (f, _) = standard("prefix");
    let extra = f.file("libfoo-extra.so", &libbar());
    let maps = f.root.join("42/maps");
    let mut text = std::fs::read_to_string(&maps).unwrap();
    text.push_str(&format!(
        "7f0099990000-7f0099991000 r-xp 00000000 fd:01 {} {}\n",
        std::fs::metadata(&extra).unwrap().ino(),
        extra.display()
    ));
    std::fs::write(&maps, text).unwrap();
    let e = find(&f, 42, Some("libfoo"), "x", None).unwrap_err();
    assert!(
        matches!(&e, ProcessError::AmbiguousObject { matches, .. } if matches.len() == 2),
        "{e:?}"
    );
    // The full name still picks one.
    assert!(find(&f, 42, Some("libfoo.so.1"), "foo_var", None).is_ok());
}

#[test]
fn a_thread_local_is_refused() {
    let (f, _) = standard("tls");
    let e = find(&f, 42, None, "tls_var", None).unwrap_err();
    assert!(matches!(e, ProcessError::ThreadLocal { .. }), "{e:?}");
    assert!(
        e.to_string().contains("every thread has its own copy"),
        "{e}"
    );
}

#[test]
fn a_member_path_without_dwarf_names_the_fix() {
    let (f, app) = standard("no-dwarf");
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
    let (f, _) = standard("twice");
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
        find(&f, 42, None, "counter", None).unwrap().addr,
        PIE + 0x4010
    );
}

#[test]
fn processes_that_are_not_there_or_map_nothing() {
    let (f, _) = standard("gone");
    for pid in [0, 99] {
        let e = find(&f, pid, None, "counter", None).unwrap_err();
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
    let e = find(&f, 7, None, "counter", None).unwrap_err();
    assert!(matches!(e, ProcessError::NoMappings { pid: 7 }), "{e:?}");
}

#[test]
fn a_file_that_is_no_longer_the_mapped_one_is_not_read() {
    let (f, _) = standard("swapped");
    // Replaced at the same path (a new inode): the maps' inode no longer matches, so it is not opened.
    // (Written aside and renamed over, so the new file cannot reuse the old inode number.)
    let foo_path = f.root.join("files/libfoo.so.1");
    let new = f.file("libfoo.so.1.new", &libfoo());
    std::fs::rename(&new, &foo_path).unwrap();
    let e = find(&f, 42, Some("libfoo"), "foo_var", None).unwrap_err();
    assert!(
        matches!(
            &e,
            ProcessError::Unreadable {
                problem: ObjectProblem::NotOpenable,
                ..
            }
        ) && e.to_string().contains("regular file the process mapped"),
        "{e:?}"
    );
    // Searched without OBJECT:, it is left out and said so.
    let e = refusal(&f, None, "foo_var", None);
    assert!(
        e.contains("(not searched: libfoo.so.1: it cannot be opened"),
        "{e}"
    );
}

#[test]
fn long_lists_of_files_are_cut() {
    let names: Vec<String> = (0..15).map(|i| format!("lib{i}.so")).collect();
    assert_eq!(list(&names[..2]), "lib0.so and lib1.so");
    assert_eq!(list(&names[..12]).matches(", ").count(), 10);
    assert_eq!(
        list(&names),
        "lib0.so, lib1.so, lib2.so, lib3.so, lib4.so, lib5.so, lib6.so, lib7.so, lib8.so, lib9.so, \
         lib10.so, lib11.so and 3 more"
    );
}
