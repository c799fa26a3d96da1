//! User-space symbols on this test binary and made-up mappings: bytes read where a file is mapped,
//! maps lines parsed, a new mapping cutting older ones, and processes named from the kernel's
//! records, a live thread or a read racing an exec.

use super::*;

/// The bytes of our own code, read from the file mapped there, are the ones in memory; an address with
/// no file mapping, or a read past its mapping, gives none.
#[test]
fn reads_the_file_mapped_at_an_address() {
    let f = reads_the_file_mapped_at_an_address as fn() as usize as u64;
    let pid = std::process::id();
    let mut u = UserSymbols::default();
    if !u.read_process(pid) {
        crate::testing::skip(format_args!("no /proc/{pid}/maps to read"));
        return;
    }
    let got = u.read_mapped(pid, f, 16).expect("our own text");
    // SAFETY: 16 bytes of this very function's code, mapped and readable while it runs.
    let mem = unsafe { std::slice::from_raw_parts(f as *const u8, 16) };
    assert_eq!(got, mem);
    assert_eq!(u.read_mapped(pid, 0x1000, 16), None);
    assert_eq!(u.read_mapped(pid, f, 1 << 40), None);
}

#[test]
fn parses_maps_lines() {
    let maps = parse_maps(
        "55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1234 /usr/bin/my prog\n\
         55d0c0001000-55d0c0002000 r-xp 00001000 fd:01 1234 /usr/bin/my prog\n\
         7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n\
         7f0000000000-7f0000001000 rw-p 00000000 00:00 0\n\
         7f0000001000-7f0000002000 r-xp 00000000 fd:01 99                         /tmp/a  b\tc\\012d (deleted)\n",
    );
    assert_eq!(maps.len(), 4);
    // A path as the file has it: spaces and tabs kept, the kernel's `\012` a newline again.
    let odd = maps
        .iter()
        .find(|m| m.inode == 99)
        .expect("the odd path's line");
    assert_eq!(odd.path, "/tmp/a  b\tc\nd (deleted)");
    assert_eq!(basename(&odd.path), "a  b\tc\nd");
    assert_eq!(maps[1].offset, 0x1000);
    assert_eq!(maps[1].path, "/usr/bin/my prog");
    assert_eq!(basename(&maps[1].path), "my prog");
    assert_eq!(basename("/tmp/a.out (deleted)"), "a.out");
}

fn mapping(start: u64, end: u64, offset: u64, path: &str) -> Mapping {
    Mapping {
        start,
        end,
        offset,
        path: path.into(),
        name: basename(path).into(),
        dev: "fd:01".into(),
        inode: 1,
        bin: None,
    }
}

/// A `MAP_FIXED` mapping over part of older ones cuts them, keeping the file offsets of what is left.
#[test]
fn a_new_mapping_replaces_what_it_covers() {
    let mut p = Proc::default();
    p.insert(mapping(0x1000, 0x5000, 0, "/a"));
    p.insert(mapping(0x8000, 0x9000, 0, "/c"));
    p.insert(mapping(0x2000, 0x3000, 0x7000, "/b"));
    let got: Vec<(u64, u64, u64, &str)> = p
        .maps
        .iter()
        .map(|m| (m.start, m.end, m.offset, m.path.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (0x1000, 0x2000, 0, "/a"),
            (0x2000, 0x3000, 0x7000, "/b"),
            (0x3000, 0x5000, 0x2000, "/a"),
            (0x8000, 0x9000, 0, "/c"),
        ]
    );
    // A snapshot lacking a mapping keeps it; one still the same keeps its loaded binary.
    let mut p = Proc::default();
    p.insert(mapping(0x1000, 0x2000, 0, "/a"));
    p.insert(Mapping {
        bin: Some(None),
        ..mapping(0x4000, 0x5000, 0, "/b")
    });
    p.merge(vec![
        mapping(0x4000, 0x5000, 0, "/b"),
        mapping(0x7000, 0x8000, 0, "/e"),
    ]);
    let got: Vec<(u64, &str, bool)> = p
        .maps
        .iter()
        .map(|m| (m.start, m.path.as_str(), m.bin.is_some()))
        .collect();
    assert_eq!(
        got,
        [
            (0x1000, "/a", false),
            (0x4000, "/b", true),
            (0x7000, "/e", false)
        ]
    );
    // The same mapping reported twice (two events covering one thread) is one mapping.
    p.insert(mapping(0x8000, 0x9000, 0, "/c"));
    p.insert(mapping(0x0, 0x10000, 0, "/d"));
    assert_eq!(p.maps.len(), 1);
}

/// This test binary's executable segment "mapped" PIE-style at a made-up base, and a sized function
/// in it: what a fixture process maps.
struct Text {
    exe: PathBuf,
    inode: u64,
    start: u64,
    end: u64,
    offset: u64,
    /// A runtime address 5 bytes into `name`.
    runtime: u64,
    name: String,
    size: u64,
}

fn this_binarys_text() -> Text {
    let exe = std::env::current_exe().unwrap();
    let bytes = std::fs::read(&exe).unwrap();
    let elf = goblin::elf::Elf::parse(&bytes).unwrap();
    let bin = Binary::parse(&bytes).0.unwrap();
    let text = elf
        .program_headers
        .iter()
        .find(|p| p.p_type == goblin::elf::program_header::PT_LOAD && p.is_executable())
        .unwrap();
    // A sized function inside the executable segment.
    let (addr, size, name) = bin
        .functions()
        .find(|&(addr, size, _)| {
            size > 16 && addr >= text.p_vaddr && addr + size <= text.p_vaddr + text.p_filesz
        })
        .unwrap();
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&exe).unwrap());
    let base = 0x5555_0000_0000u64;
    let page = 0xfff;
    Text {
        exe,
        inode,
        start: base + (text.p_vaddr & !page),
        end: base + ((text.p_vaddr + text.p_memsz + page) & !page),
        offset: text.p_offset & !page,
        runtime: base + addr + 5,
        name,
        size,
    }
}

/// A process learned only from the kernel's records, never from /proc (the fixture /proc is empty, as
/// for a writer that exited before its hit was named): its mapping names frames, a forked child
/// inherits it, an exec drops it, and forgetting the process lets go of everything.
#[test]
fn mappings_from_the_kernel_name_a_process_that_is_gone_from_proc() {
    let t = this_binarys_text();
    let empty = std::env::temp_dir().join(format!("ksymwatch-noproc-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let mut u = UserSymbols::new(&empty);
    let path = t.exe.to_string_lossy();
    u.map(
        42,
        &MappedFile {
            start: t.start,
            len: t.end - t.start,
            offset: t.offset,
            dev: (0xfd, 1),
            inode: t.inode,
            path: &path,
        },
    );
    // Memory with no file is not a mapping to name frames by.
    u.map(
        42,
        &MappedFile {
            start: 0x1000,
            len: 0x1000,
            offset: 0,
            dev: (0, 0),
            inode: 0,
            path: "//anon",
        },
    );
    let runtime = t.runtime;
    let want = Some((t.name.as_str().into(), 5, Some(t.size)));
    assert_eq!(u.lookup(42, runtime).unwrap().sym, want);
    // Exited but not reaped yet, /proc has the process with no mappings; in the middle of exec, with
    // only its stack. A miss reads them, and that must not wipe what the kernel reported.
    std::fs::create_dir_all(empty.join("42")).unwrap();
    for maps in [
        "",
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n",
    ] {
        std::fs::write(empty.join("42/maps"), maps).unwrap();
        u.procs.get_mut(&42).unwrap().read_at = None;
        assert_eq!(u.lookup(42, 0x1800), None);
        assert_eq!(u.lookup(42, runtime).unwrap().sym, want, "maps {maps:?}");
    }
    u.fork(42, 43);
    assert_eq!(u.lookup(43, runtime).unwrap().sym, want, "a fork child");
    assert!(
        Arc::ptr_eq(&u.procs[&42].maps, &u.procs[&43].maps),
        "the fork copied nothing"
    );
    u.exec(43);
    assert_eq!(u.lookup(43, runtime), None, "exec dropped the old program");
    assert_eq!(u.binaries(), 1);
    u.forget(42);
    u.forget(43);
    assert_eq!(u.processes(), 0);
    assert_eq!(u.lookup(42, runtime), None);
    std::fs::remove_dir_all(&empty).unwrap();
}

/// A process whose main thread alone exited: its leader's maps are empty (a zombie's), a live
/// thread's show the memory; the leader itself, and a true zombie with no other thread, are no answer.
#[test]
fn a_live_thread_stands_in_for_an_exited_leader() {
    let root = std::env::temp_dir().join(format!("ksymwatch-leaderless-{}", std::process::id()));
    let maps = "55e000000000-55e000001000 r-xp 00000000 fd:01 77 /usr/bin/prog\n";
    for (task, text) in [("42", ""), ("43", ""), ("44", maps)] {
        std::fs::create_dir_all(root.join(format!("42/task/{task}"))).unwrap();
        std::fs::write(root.join(format!("42/task/{task}/maps")), text).unwrap();
    }
    std::fs::write(root.join("42/maps"), "").unwrap();
    assert_eq!(live_thread_dir(&root, 42), Some(root.join("42/task/44")));
    std::fs::create_dir_all(root.join("50/task/50")).unwrap();
    std::fs::write(root.join("50/task/50/maps"), maps).unwrap();
    assert_eq!(
        live_thread_dir(&root, 50),
        None,
        "the leader is not its own stand-in"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// A command read between its fork and its exec (the start-up scan races its launch) shows its
/// parent's mappings; read again at its exec stop, only the program's own count, at once, though the
/// first read was a moment ago.
#[test]
fn a_read_at_the_exec_stop_replaces_a_read_from_before_the_exec() {
    let t = this_binarys_text();
    let proc = std::env::temp_dir().join(format!("ksymwatch-execread-{}", std::process::id()));
    std::fs::create_dir_all(proc.join("50")).unwrap();
    let line = |start: u64, end: u64, offset: u64, inode: u64, path: &str| {
        format!("{start:x}-{end:x} r-xp {offset:08x} fd:01 {inode} {path}\n")
    };
    // Before the exec: the parent's program, where the new one will not be.
    std::fs::write(
        proc.join("50/maps"),
        line(0x7f00_0000_0000, 0x7f00_0001_0000, 0, 7, "/usr/bin/parent"),
    )
    .unwrap();
    let mut u = UserSymbols::new(&proc);
    u.scan_all();
    assert_eq!(
        u.lookup(50, 0x7f00_0000_1000).unwrap().binary.as_ref(),
        "parent"
    );
    let path = t.exe.to_string_lossy();
    std::fs::write(
        proc.join("50/maps"),
        line(t.start, t.end, t.offset, t.inode, &path),
    )
    .unwrap();
    assert!(u.read_process(50));
    let want = Some((t.name.as_str().into(), 5, Some(t.size)));
    assert_eq!(u.lookup(50, t.runtime).unwrap().sym, want);
    assert_eq!(
        u.lookup(50, 0x7f00_0000_1000),
        None,
        "the old program is gone"
    );
    std::fs::remove_dir_all(&proc).unwrap();
}

/// A frame left unnamed says why: no process, maps never read or unreadable (an exited process), or an
/// address outside every file mapping read.
#[test]
fn an_unnamed_address_says_why() {
    let dir = std::env::temp_dir().join(format!("ksymwatch-unnamed-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("proc/7")).unwrap();
    std::fs::write(
        dir.join("proc/7/maps"),
        "00400000-00401000 r-xp 00000000 fd:01 42 /usr/bin/prog\n",
    )
    .unwrap();
    let mut u = UserSymbols::new(dir.join("proc"));
    assert_eq!(u.why_unnamed(0), "no process (pid 0)");
    assert!(u.lookup(9, 0x40_0010).is_none());
    assert!(
        u.why_unnamed(9).contains("could not be read"),
        "{}",
        u.why_unnamed(9)
    );
    assert!(u.why_unnamed(8).contains("never read"));
    assert!(u.lookup(7, 0x40_0010).is_some());
    assert!(u.lookup(7, 0x7f00_0000).is_none());
    assert!(u.why_unnamed(7).starts_with("in no file mapping"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Binaries no remembered process maps are kept only up to the bound, the least recently used going
/// first; one a process still maps stays until that process is forgotten.
#[test]
fn the_binary_cache_is_bounded_by_what_processes_still_map() {
    let dir = std::env::temp_dir().join(format!("ksymwatch-bins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut u = UserSymbols::new(dir.join("proc"));
    let map_file = |u: &mut UserSymbols, pid: u32, path: &Path| {
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap());
        u.map(
            pid,
            &MappedFile {
                start: 0x10_0000,
                len: 0x1000,
                offset: 0,
                dev: (0xfd, 1),
                inode,
                path: &path.to_string_lossy(),
            },
        );
        assert!(u.lookup(pid, 0x10_0010).is_some());
    };
    // A process that stays: the ELF file it maps (this test binary) is held by its mapping, kept
    // however many other files come and go.
    let exe = std::env::current_exe().unwrap();
    map_file(&mut u, 2, &exe);
    for i in 0..3 * BINARIES_KEPT as u32 {
        let f = dir.join(format!("bin{i}"));
        std::fs::write(&f, b"not elf either").unwrap();
        map_file(&mut u, 100 + i, &f);
        u.forget(100 + i);
        assert!(u.binaries() <= BINARIES_KEPT + 1, "{} cached", u.binaries());
    }
    let has = |u: &UserSymbols, p: &Path| u.binaries.keys().any(|k| Path::new(&k.path) == p);
    assert!(has(&u, &exe), "still mapped by process 2");
    u.forget(2);
    for i in 0..BINARIES_KEPT as u32 {
        let f = dir.join(format!("later{i}"));
        std::fs::write(&f, b"x").unwrap();
        map_file(&mut u, 1000 + i, &f);
        u.forget(1000 + i);
    }
    assert!(!has(&u, &exe), "evicted once nothing maps it");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// This test binary, "mapped" PIE-style at a made-up base through a fixture /proc: a function's runtime
/// address must come back as that function, through the file offset and PT_LOAD translation.
#[test]
fn names_a_function_of_a_mapped_pie_through_a_fixture_proc() {
    let Text {
        exe,
        inode,
        start,
        end,
        offset,
        runtime,
        name,
        size,
    } = this_binarys_text();
    let dir = std::env::temp_dir().join(format!("ksymwatch-user-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("42")).unwrap();
    std::fs::write(
        dir.join("42/maps"),
        format!(
            "{start:x}-{end:x} r-xp {offset:08x} fd:01 {inode} {}\n",
            exe.display()
        ),
    )
    .unwrap();
    let mut u = UserSymbols::new(&dir);
    let got = u.lookup(42, runtime).unwrap();
    assert_eq!(*got.binary, *exe.file_name().unwrap().to_string_lossy());
    assert_eq!(got.sym, Some((name.as_str().into(), 5, Some(size))));
    // The process "exits": what was learned stays.
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(&*u.lookup(42, runtime).unwrap().sym.unwrap().0, name);
    assert_eq!(u.lookup(42, 0x10), None);
    assert_eq!(u.lookup(0, runtime), None);
}
